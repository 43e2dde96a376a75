"""Motion: the rolling shutter of a spinning LiDAR under ego motion, and its compensation.

An HDL-64E sweep takes 100 ms; a point fired at time dt before the sweep's end (dt <= 0) was measured from where
the sensor was then. With the ego vehicle driving at speed v along +x and turning at yaw rate w (a planar
unicycle), the sensor's pose at dt relative to its pose at the sweep's end is yaw(dt) = w dt and position
(v sin(w dt) / w, v (1 - cos(w dt)) / w) (v dt, 0 when w = 0).

* ``rolling-shutter``: a motion-compensated sweep (every point in the frame of the sweep's end) as the moving
  sensor would have measured it: p' = R(yaw)^T (p - t);
* ``deskew``: the compensation of a raw sweep, p' = R(yaw) p + t (Apollo's motion compensator does this with the
  localization's poses; here with the given speed and yaw rate).

Each point's firing time: ``time - stamp`` when the frame has per-point times within the last 0.15 s before its
stamp, otherwise from its azimuth (:func:`lidarmt.lidar.sensor.firing_fraction`: clockwise from behind, at the
sensor profile's rotation rate, 10 Hz for every built-in profile).
"""

from __future__ import annotations

import math

import numpy as np

from lidarmt.lidar.sensor import HDL64E_RATE_HZ, firing_fraction
from lidarmt.lidar.sensors import sensor_of
from lidarmt.lidar.transforms._common import Builtin
from lidarmt.lidar.transforms.base import Param, same_change
from lidarmt.types import Frame


def firing_dt(frame: Frame, rate_hz: float = HDL64E_RATE_HZ) -> tuple[np.ndarray, str]:
    """Per point, its firing time relative to the sweep's end (s, <= 0), and where it came from."""
    pts = frame.points
    if "time" in (pts.dtype.names or ()) and frame.stamp > 0 and len(pts):
        dt = pts["time"].astype(np.float64) - frame.stamp
        if np.all(np.isfinite(dt)) and dt.min() >= -0.15 and dt.max() <= 0.01:
            return np.minimum(dt, 0.0), "time field"
    return (firing_fraction(pts) - 1.0) / rate_hz, "azimuth"


def ego_pose(dt: np.ndarray, speed: float, yaw_rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(yaw, tx, ty) of the sensor at times dt relative to its pose at the sweep's end."""
    yaw = yaw_rate * dt
    if abs(yaw_rate) < 1e-9:
        return yaw, speed * dt, np.zeros_like(dt)
    return yaw, speed * np.sin(yaw) / yaw_rate, speed * (1.0 - np.cos(yaw)) / yaw_rate


def _move(frame: Frame, speed: float, yaw_rate_dps: float, *, compensate: bool, rate_hz: float = HDL64E_RATE_HZ):
    dt, how = firing_dt(frame, rate_hz)
    yaw, tx, ty = ego_pose(dt, speed, math.radians(yaw_rate_dps))
    c, s = np.cos(yaw), np.sin(yaw)
    x = frame.points["x"].astype(np.float64)
    y = frame.points["y"].astype(np.float64)
    if compensate:  # p' = R p + t
        nx, ny = c * x - s * y + tx, s * x + c * y + ty
    else:  # p' = R^T (p - t)
        dx, dy = x - tx, y - ty
        nx, ny = c * dx + s * dy, -s * dx + c * dy
    pts = frame.points.copy()
    pts["x"] = nx.astype(np.float32)
    pts["y"] = ny.astype(np.float32)
    shift = np.hypot(nx - x, ny - y)
    info = {"speed_mps": speed, "yaw_rate_dps": yaw_rate_dps, "firing_time": how,
            "max_shift_m": float(shift.max()) if len(shift) else 0.0}
    return same_change(frame, pts, info=info)


_PARAMS = (Param("speed_mps", "m/s", 0.0, 40.0, "ego speed along +x"),
           Param("yaw_rate_dps", "deg/s", -90.0, 90.0, "ego yaw rate, counter-clockwise"))
_LEVELS = {"light": {"speed_mps": 10.0, "yaw_rate_dps": 0.0},
           "moderate": {"speed_mps": 20.0, "yaw_rate_dps": 10.0},
           "heavy": {"speed_mps": 30.0, "yaw_rate_dps": 30.0}}


class RollingShutter(Builtin):
    name = "rolling-shutter"
    family = "motion"
    summary = "sweep distorted by ego motion during the 100 ms turn"
    params = _PARAMS
    doc = ("Rolling-shutter distortion: a motion-compensated sweep re-expressed as a sensor moving at speed_mps "
           "and turning at yaw_rate_dps measures it during its 100 ms turn, p' = R(yaw(dt))^T (p - t(dt)) with dt "
           "the point's firing time before the sweep's end (a 20 m/s car moves 2 m in one sweep: the seam behind "
           "the car tears open). Deterministic.")
    levels = _LEVELS

    def _apply(self, frame, p, rng, context):
        return _move(frame, p["speed_mps"], p["yaw_rate_dps"], compensate=False,
                     rate_hz=sensor_of(context).rate_hz)


class Deskew(Builtin):
    name = "deskew"
    family = "motion"
    summary = "motion compensation with a given ego motion"
    params = _PARAMS
    doc = ("Motion compensation of a raw sweep (what Apollo's compensator does before perception): each point moved "
           "into the frame of the sweep's end, p' = R(yaw(dt)) p + t(dt), for an ego moving at speed_mps and "
           "turning at yaw_rate_dps; on an already compensated sweep it is a wrong compensation, on a raw one "
           "(KITTI raw drives are not compensated) the right one for the true speed. Deterministic.")
    levels = _LEVELS

    def _apply(self, frame, p, rng, context):
        return _move(frame, p["speed_mps"], p["yaw_rate_dps"], compensate=True,
                     rate_hz=sensor_of(context).rate_hz)
