"""What the transformations need to know about the sensor: the Velodyne HDL-64E's rings and firing times.

* ``ring``: taken from the frame's ``ring`` field when it has one; otherwise computed from each point's elevation
  angle atan2(z, hypot(x, y)) as the nearest of the 64 elevations of the KITTI car's HDL-64E
  (:data:`lidarmt.lidar.sim.lidar.KITTI_ELEVATIONS_DEG`, ring 0 the lowest laser, the ROS driver's order).
* firing time: the HDL-64E turns clockwise (seen from above) at 10 Hz starting behind the vehicle, so a point's
  firing time within the sweep is ``(pi - azimuth) / (2 pi)`` of the 100 ms period (the simulator's convention,
  :mod:`lidarmt.lidar.sim.lidar`); the sweep's reference time (where a motion-compensated sweep is expressed) is its end.
"""

from __future__ import annotations

import numpy as np

HDL64E_RATE_HZ = 10.0
HDL64E_RINGS = 64


def kitti_elevations_deg() -> np.ndarray:
    """The 64 elevations of the KITTI car's HDL-64E, ascending (index = ring)."""
    from lidarmt.lidar.sim.lidar import KITTI_ELEVATIONS_DEG

    return np.asarray(KITTI_ELEVATIONS_DEG, dtype=np.float64)


def rings_of(points: np.ndarray) -> np.ndarray:
    """int64 ring per point: the ``ring`` field when present, else the nearest HDL-64E elevation."""
    names = points.dtype.names or ()
    if "ring" in names:
        return points["ring"].astype(np.int64)
    el = np.degrees(np.arctan2(points["z"].astype(np.float64),
                               np.hypot(points["x"].astype(np.float64), points["y"].astype(np.float64))))
    table = kitti_elevations_deg()
    mids = (table[1:] + table[:-1]) / 2
    return np.searchsorted(mids, el).astype(np.int64)


def firing_fraction(points: np.ndarray) -> np.ndarray:
    """Per point, its firing time as a fraction of the sweep in [0, 1): 0 behind the vehicle, 0.5 straight ahead,
    clockwise seen from above (the HDL-64E's direction of rotation)."""
    az = np.arctan2(points["y"].astype(np.float64), points["x"].astype(np.float64))
    return np.mod((np.pi - az) / (2 * np.pi), 1.0)
