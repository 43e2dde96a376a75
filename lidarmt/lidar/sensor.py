"""What the transformations need to know about the sensor's beams: rings and firing times, for a sensor profile
(:mod:`lidarmt.lidar.sensors`; default the KITTI car's Velodyne HDL-64E).

* ``ring``: taken from the frame's ``ring`` field when it has one; otherwise computed from each point's elevation
  angle atan2(z, hypot(x, y)) as the nearest of the profile's elevations (for ``hdl64`` the 64 elevations of the
  KITTI car's HDL-64E, :data:`lidarmt.lidar.sensors.KITTI_ELEVATIONS_DEG`; ring 0 the lowest laser, the ROS
  driver's order).
* firing time: the sensor turns clockwise (seen from above) at the profile's rate starting behind the vehicle, so a
  point's firing time within the sweep is ``(pi - azimuth) / (2 pi)`` of the period (the simulator's convention,
  :mod:`lidarmt.lidar.sim.lidar`); the sweep's reference time (where a motion-compensated sweep is expressed) is its
  end.
"""

from __future__ import annotations

import numpy as np

from lidarmt.lidar.sensors import HDL64, KITTI_ELEVATIONS_DEG, SensorProfile

HDL64E_RATE_HZ = HDL64.rate_hz
HDL64E_RINGS = HDL64.rings


def kitti_elevations_deg() -> np.ndarray:
    """The 64 elevations of the KITTI car's HDL-64E, ascending (index = ring)."""
    return np.asarray(KITTI_ELEVATIONS_DEG, dtype=np.float64)


def rings_of(points: np.ndarray, profile: SensorProfile = HDL64) -> np.ndarray:
    """int64 ring per point: the ``ring`` field when present, else the nearest of the profile's elevations."""
    names = points.dtype.names or ()
    if "ring" in names:
        return points["ring"].astype(np.int64)
    el = np.degrees(np.arctan2(points["z"].astype(np.float64),
                               np.hypot(points["x"].astype(np.float64), points["y"].astype(np.float64))))
    return profile.ring_of_elevation(el)


def firing_fraction(points: np.ndarray) -> np.ndarray:
    """Per point, its firing time as a fraction of the sweep in [0, 1): 0 behind the vehicle, 0.5 straight ahead,
    clockwise seen from above (the Velodyne units' direction of rotation)."""
    az = np.arctan2(points["y"].astype(np.float64), points["x"].astype(np.float64))
    return np.mod((np.pi - az) / (2 * np.pi), 1.0)
