"""Sensor faults: lost lasers, range noise, intensity miscalibration, a blocked field of view, crosstalk from
another LiDAR (Dong et al., CVPR 2023, "sensor" family), on the sensor profile of the context
(:mod:`lidarmt.lidar.sensors`; default ``hdl64``, the KITTI car's Velodyne HDL-64E): its lasers (rings inferred
from its elevation table when the frame has no ring field), its minimum range and its intensity scale."""

from __future__ import annotations

import numpy as np

from lidarmt.lidar.sensor import rings_of
from lidarmt.lidar.sensors import HDL64, sensor_of
from lidarmt.lidar.transforms._common import Builtin, ranges_of, scale_along_ray
from lidarmt.lidar.transforms.base import Param, make_change, same_change

MIN_RANGE = HDL64.min_range_m  # the HDL-64E's minimum range, metres (other profiles: their own)
CROSSTALK_INTENSITY = 30.0  # spurious echoes read below this on the 0..255 scale of a reflectance x 255 sensor


class BeamLoss(Builtin):
    name = "beam-loss"
    family = "sensor"
    summary = "a random share of the lasers gives no return"
    params = (Param("fraction", "fraction", 0.0, 1.0, "share of the sensor's lasers that fail"),)
    doc = ("Lost lasers: round(fraction x n) of the sensor's n rings (the profile's: 64 for the HDL-64E, 16 for a "
           "VLP-16), drawn at random from the seed, give no return; their points are dropped. Rings come from the "
           "ring field, or from each point's elevation angle (nearest of the profile's elevations).")
    levels = {"light": {"fraction": 0.1}, "moderate": {"fraction": 0.25}, "heavy": {"fraction": 0.5}}

    def _apply(self, frame, p, rng, context):
        prof = sensor_of(context)
        n = prof.rings
        k = int(round(p["fraction"] * n))
        lost = np.sort(rng.choice(n, size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)
        keep = ~np.isin(rings_of(frame.points, prof), lost)
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
        keep = rings_of(frame.points, sensor_of(context)) % k != k - 1
        return make_change(frame, keep, frame.points[keep], info={"every": k})


class RangeNoise(Builtin):
    name = "range-noise"
    family = "sensor"
    summary = "Gaussian range error along each ray"
    params = (Param("sigma_cm", "cm", 0.0, 100.0, "standard deviation of the range error"),)
    doc = ("Gaussian range noise: each point moves along its ray by N(0, sigma) (the HDL-64E's datasheet accuracy "
           "is < 2 cm, the profiles' are in docs/sensors.md; a degraded unit or a wet window is worse). Ranges are "
           "kept above the sensor's minimum range (0.9 m for the HDL-64E).")
    levels = {"light": {"sigma_cm": 3.0}, "moderate": {"sigma_cm": 10.0}, "heavy": {"sigma_cm": 30.0}}

    def _apply(self, frame, p, rng, context):
        r = ranges_of(frame.points)
        dr = rng.normal(0.0, p["sigma_cm"] / 100.0, len(r))
        new = np.maximum(r + dr, sensor_of(context).min_range_m)
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
           "the return is replaced by a spurious one on the same ray at a range uniform in [r_min, R] (R the true "
           "range, r_min the sensor's minimum range, 0.9 m for the HDL-64E) with a low intensity uniform in "
           "[0, 30) on a reflectance x 255 scale (the profile's scale: [0, 11.8) for a sensor whose diffuse "
           "targets read 0..100). Points stay in source order (each replaces its ray's).")
    levels = {"light": {"fraction": 0.01}, "moderate": {"fraction": 0.05}, "heavy": {"fraction": 0.15}}

    def _apply(self, frame, p, rng, context):
        prof = sensor_of(context)
        r_min = prof.min_range_m
        n = len(frame.points)
        r = ranges_of(frame.points)
        hit = rng.random(n) < p["fraction"]
        idx = np.flatnonzero(hit & (r > r_min))
        u = rng.random(len(idx))
        new_r = r_min + u * (r[idx] - r_min)
        factor = np.ones(n)
        factor[idx] = new_r / r[idx]
        pts = scale_along_ray(frame.points, factor)
        pts["intensity"][idx] = (rng.random(len(idx)) * prof.scaled_intensity(CROSSTALK_INTENSITY)).astype(
            np.float32)
        return same_change(frame, pts, info={"n_spurious": len(idx), "fraction": p["fraction"]})
