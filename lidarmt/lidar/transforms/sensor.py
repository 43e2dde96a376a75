"""Sensor faults of a Velodyne HDL-64E: lost lasers, range noise, intensity miscalibration, a blocked field of
view, crosstalk from another LiDAR (Dong et al., CVPR 2023, "sensor" family)."""

from __future__ import annotations

import numpy as np

from lidarmt.lidar.sensor import HDL64E_RINGS, rings_of
from lidarmt.lidar.transforms._common import Builtin, ranges_of, scale_along_ray
from lidarmt.lidar.transforms.base import Param, make_change, same_change

MIN_RANGE = 0.9  # the HDL-64E's minimum range, metres


class BeamLoss(Builtin):
    name = "beam-loss"
    family = "sensor"
    summary = "a random share of the 64 lasers gives no return"
    params = (Param("fraction", "fraction", 0.0, 1.0, "share of the 64 lasers that fail"),)
    doc = ("Lost lasers: round(fraction x 64) of the HDL-64E's 64 rings, drawn at random from the seed, give no "
           "return; their points are dropped. Rings come from the ring field, or from each point's elevation "
           "angle (nearest of the KITTI HDL-64E's 64 elevations).")
    levels = {"light": {"fraction": 0.1}, "moderate": {"fraction": 0.25}, "heavy": {"fraction": 0.5}}

    def _apply(self, frame, p, rng, context):
        k = int(round(p["fraction"] * HDL64E_RINGS))
        lost = np.sort(rng.choice(HDL64E_RINGS, size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)
        keep = ~np.isin(rings_of(frame.points), lost)
        return make_change(frame, keep, frame.points[keep], info={"lost_rings": [int(r) for r in lost]})


class BeamSkip(Builtin):
    name = "beam-skip"
    family = "sensor"
    summary = "every k-th laser gives no return"
    params = (Param("every", "rings", 2.0, 16.0, "every k-th ring is lost", integer=True),)
    doc = ("Every k-th laser lost (a lower-resolution sensor): the rings r with r mod k == k - 1 give no return "
           "(k = 2 halves the 64 rings to 32). Deterministic: the seed plays no part.")
    levels = {"light": {"every": 8.0}, "moderate": {"every": 4.0}, "heavy": {"every": 2.0}}

    def _apply(self, frame, p, rng, context):
        k = int(p["every"])
        keep = rings_of(frame.points) % k != k - 1
        return make_change(frame, keep, frame.points[keep], info={"every": k})


class RangeNoise(Builtin):
    name = "range-noise"
    family = "sensor"
    summary = "Gaussian range error along each ray"
    params = (Param("sigma_cm", "cm", 0.0, 100.0, "standard deviation of the range error"),)
    doc = ("Gaussian range noise: each point moves along its ray by N(0, sigma) (the HDL-64E's datasheet accuracy "
           "is < 2 cm; a degraded unit or a wet window is worse). Ranges are kept above 0.9 m, the minimum range.")
    levels = {"light": {"sigma_cm": 3.0}, "moderate": {"sigma_cm": 10.0}, "heavy": {"sigma_cm": 30.0}}

    def _apply(self, frame, p, rng, context):
        r = ranges_of(frame.points)
        dr = rng.normal(0.0, p["sigma_cm"] / 100.0, len(r))
        new = np.maximum(r + dr, MIN_RANGE)
        factor = np.where(r > 0, new / np.where(r > 0, r, 1.0), 1.0)
        return same_change(frame, scale_along_ray(frame.points, factor), info={"sigma_cm": p["sigma_cm"]})


class IntensityShift(Builtin):
    name = "intensity"
    family = "sensor"
    summary = "intensity gain and receiver saturation"
    params = (Param("gain", "fraction", 0.05, 10.0, "factor on every intensity"),
              Param("saturation", "intensity", 1.0, 255.0, "largest intensity the receiver reports"))
    doc = ("Intensity miscalibration and receiver saturation: intensity' = min(gain x intensity, saturation), on "
           "the 0..255 scale (a dirty window or aged laser: gain < 1; a saturated receiver: a low ceiling). "
           "Deterministic.")
    levels = {"light": {"gain": 0.7, "saturation": 255.0}, "moderate": {"gain": 0.4, "saturation": 255.0},
              "heavy": {"gain": 3.0, "saturation": 60.0}}

    def _apply(self, frame, p, rng, context):
        pts = frame.points.copy()
        pts["intensity"] = np.minimum(frame.points["intensity"].astype(np.float64) * p["gain"],
                                      p["saturation"]).astype(np.float32)
        return same_change(frame, pts, info=dict(p))


class FovLoss(Builtin):
    name = "fov-loss"
    family = "sensor"
    summary = "a blind azimuth sector"
    params = (Param("width_deg", "deg", 0.0, 360.0, "width of the blind sector"),
              Param("center_deg", "deg", -180.0, 180.0, "azimuth of its centre (0 ahead, 90 left)"))
    doc = ("Field-of-view loss (a blocked or dirty part of the window, a mounting that hides a sector): every "
           "return whose azimuth lies in the sector of width_deg centred on center_deg is dropped. Deterministic.")
    levels = {"light": {"width_deg": 20.0, "center_deg": 0.0}, "moderate": {"width_deg": 45.0, "center_deg": 0.0},
              "heavy": {"width_deg": 90.0, "center_deg": 0.0}}

    def _apply(self, frame, p, rng, context):
        az = np.degrees(np.arctan2(frame.points["y"].astype(np.float64), frame.points["x"].astype(np.float64)))
        off = (az - p["center_deg"] + 180.0) % 360.0 - 180.0
        keep = np.abs(off) > p["width_deg"] / 2.0
        return make_change(frame, keep, frame.points[keep], info={"n_lost": int(np.count_nonzero(~keep)), **p})


class Crosstalk(Builtin):
    name = "crosstalk"
    family = "sensor"
    summary = "spurious echoes from another LiDAR's pulses"
    params = (Param("fraction", "fraction", 0.0, 0.5, "share of the returns replaced by a spurious echo"),)
    doc = ("Crosstalk from another LiDAR: a random share of the rays receive a foreign pulse before their own echo; "
           "the return is replaced by a spurious one on the same ray at a range uniform in [0.9 m, R] (R the true "
           "range) with a low intensity uniform in [0, 30). Points stay in source order (each replaces its ray's).")
    levels = {"light": {"fraction": 0.01}, "moderate": {"fraction": 0.05}, "heavy": {"fraction": 0.15}}

    def _apply(self, frame, p, rng, context):
        n = len(frame.points)
        r = ranges_of(frame.points)
        hit = rng.random(n) < p["fraction"]
        idx = np.flatnonzero(hit & (r > MIN_RANGE))
        u = rng.random(len(idx))
        new_r = MIN_RANGE + u * (r[idx] - MIN_RANGE)
        factor = np.ones(n)
        factor[idx] = new_r / r[idx]
        pts = scale_along_ray(frame.points, factor)
        pts["intensity"][idx] = (rng.random(len(idx)) * 30.0).astype(np.float32)
        return same_change(frame, pts, info={"n_spurious": len(idx), "fraction": p["fraction"]})
