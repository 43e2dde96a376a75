"""Noise returns: strong sunlight (weather) and impulse noise (sensor), after Dong et al. (CVPR 2023, "Benchmarking
Robustness of 3D Object Detection to Common Corruptions in Autonomous Driving"; severities from their released
``LiDAR_corruptions.py``: ``scene_glare_noise`` and ``impulse_noise``).

The named levels take Dong et al.'s severities 1, 3 and 5 (light, moderate, heavy).
"""

from __future__ import annotations

import numpy as np

from lidarmt.lidar.sensors import HDL64, sensor_of
from lidarmt.lidar.transforms._common import Builtin, ranges_of
from lidarmt.lidar.transforms.base import Param, make_change, same_change

MIN_RANGE = HDL64.min_range_m  # m: nearest return the HDL-64E reports (as the sensor transformations)
HDL64E_MAX_RANGE = HDL64.max_range_m  # m: the HDL-64E datasheet's range (cars and foliage, reflectance 0.80)
SUN_INTENSITY_MAX = 10.0  # ambient false alarms cross the detector's threshold barely: intensity uniform in [0, 10)


def _usable_rays(points: np.ndarray, min_range: float = MIN_RANGE) -> tuple[np.ndarray, np.ndarray]:
    """(indices, ranges) of the points whose coordinates and intensity are finite and whose range exceeds the
    minimum range: the rays a noise return can be put on."""
    r = ranges_of(points)
    ok = np.isfinite(r) & np.isfinite(points["intensity"]) & (r > min_range)
    idx = np.flatnonzero(ok)
    return idx, r[idx]


class Sunlight(Builtin):
    name = "sunlight"
    family = "weather"
    summary = "false returns from strong ambient (solar) light (Dong et al. 2023)"
    params = (Param("fraction", "fraction", 0.0, 0.2, "false returns added, as a share of the sweep's returns"),
              Param("max_range_m", "m", 10.0, 250.0, "the sensor's range (HDL-64E datasheet: 120 m)"))
    doc = ("Strong sunlight (Dong et al., CVPR 2023, 'strong sunlight': 1-5 % of the points, their released "
           "scene_glare_noise): solar photons on the detector cross its threshold at random times, so a noise "
           "return appears at a range uniform over the listening window, [r_min, max_range_m] (r_min the sensor's "
           "minimum range, 0.9 m for the HDL-64E; the levels' max_range_m is the HDL-64E's 120 m, give another "
           "sensor's range explicitly), on the ray of a "
           "real firing (same laser and azimuth as a source return drawn from the seed, without replacement), with "
           "a barely-detected intensity uniform in [0, 10) on a reflectance x 255 scale (the profile's scale); the "
           "returns of the sweep are kept (the sensor reports "
           "both, as a dual-return HDL-64E does). Dong et al. instead displace the chosen points by N(0, 2 m) in "
           "x, y, z and intensity; lidarmt keeps the real return and adds the false one on its ray, so no point "
           "leaves the sensor's field of view or range. Levels: Dong et al.'s severities 1 / 3 / 5 (1 / 3 / 5 %).")
    levels = {"light": {"fraction": 0.01, "max_range_m": HDL64E_MAX_RANGE},
              "moderate": {"fraction": 0.03, "max_range_m": HDL64E_MAX_RANGE},
              "heavy": {"fraction": 0.05, "max_range_m": HDL64E_MAX_RANGE}}

    def _apply(self, frame, p, rng, context):
        prof = sensor_of(context)
        r_min = prof.min_range_m
        r_max = max(p["max_range_m"], r_min)  # the levels say 120 m (HDL-64E); another sensor's: max_range_m=...
        pts = frame.points
        idx, r = _usable_rays(pts, r_min)
        k = min(int(p["fraction"] * len(idx)), len(idx))
        pick = np.sort(rng.choice(len(idx), size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)
        src = idx[pick]
        new_r = r_min + rng.random(k) * (r_max - r_min)
        added = pts[src].copy()
        factor = new_r / r[pick]
        for c in ("x", "y", "z"):
            added[c] = (pts[c][src].astype(np.float64) * factor).astype(np.float32)
        added["intensity"] = (rng.random(k) * prof.scaled_intensity(SUN_INTENSITY_MAX)).astype(np.float32)
        return make_change(frame, np.arange(len(pts)), pts.copy(), added,
                           info={"n_added": k, "fraction": p["fraction"], "max_range_m": p["max_range_m"]})


class Impulse(Builtin):
    name = "impulse"
    family = "sensor"
    summary = "a share of the returns displaced by +-magnitude on each axis (Dong et al. 2023)"
    params = (Param("fraction", "fraction", 0.0, 0.5, "share of the returns hit"),
              Param("magnitude_cm", "cm", 0.0, 100.0, "displacement on each of x, y, z"))
    doc = ("Impulse noise (Dong et al., CVPR 2023, their released impulse_noise): a share of the returns, drawn "
           "from the seed without replacement, each have x, y and z moved by +-magnitude_cm (sign drawn per "
           "coordinate): a salt-and-pepper ranging error of single returns (a timing glitch, a mixed pixel), as "
           "against range-noise's Gaussian error on every return. Intensity kept. Levels: Dong et al.'s "
           "severities 1 / 3 / 5 (N/30, N/20, N/10 points; 10 cm).")
    levels = {"light": {"fraction": 1.0 / 30.0, "magnitude_cm": 10.0},
              "moderate": {"fraction": 1.0 / 20.0, "magnitude_cm": 10.0},
              "heavy": {"fraction": 1.0 / 10.0, "magnitude_cm": 10.0}}

    def _apply(self, frame, p, rng, context):
        pts = frame.points
        r = ranges_of(pts)
        idx = np.flatnonzero(np.isfinite(r))
        k = min(int(p["fraction"] * len(idx)), len(idx))
        hit = idx[np.sort(rng.choice(len(idx), size=k, replace=False))] if k else np.zeros(0, dtype=np.int64)
        sign = rng.choice(np.array([-1.0, 1.0]), size=(k, 3))
        out = pts.copy()
        step = p["magnitude_cm"] / 100.0
        for j, c in enumerate(("x", "y", "z")):
            out[c][hit] = (pts[c][hit].astype(np.float64) + step * sign[:, j]).astype(np.float32)
        return same_change(frame, out, info={"n_hit": k, **p})
