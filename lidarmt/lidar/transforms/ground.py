"""Wet ground after Hahner et al. (CVPR 2022, "LiDAR Snowfall Simulation for Robust 3D Object Detection", Sec. 3.3
and their released ``tools/wet_ground/augmentation.py``): a water film on the road turns part of the beam away
specularly and darkens the diffuse return of the pavement under it, so ground returns lose intensity and the
weakest, farthest ones drop under the noise floor. Points above the ground are not touched.

The ground is a plane fitted to the lowest point of each 1 m cell within 40 m of the sensor
(:func:`lidarmt.lidar.transforms._corruption_kernels.grid_min_z`, numba, beside a NumPy reference), by least
squares trimmed twice (cells within 0.5 m, then 0.2 m of the plane); a ground return lies within 0.15 m of it.
"""

from __future__ import annotations

import math

import numpy as np

import lidarmt.lidar.transforms._corruption_kernels as KC
from lidarmt.lidar.sensors import sensor_of
from lidarmt.lidar.transforms._common import Builtin, ranges_of
from lidarmt.lidar.transforms.base import Param, make_change
from lidarmt.lidar.transforms.weather import _reflectance_beta0

N_WATER = 1.328  # refractive index of water at 905 nm (as the weather module's Fresnel reflectance)
GRID_RES = 1.0  # m: cell of the ground fit
GRID_HALF = 40.0  # m: the fit uses cells within this distance in x and y
GROUND_BAND = 0.15  # m: a return within this height of the plane is ground
MIN_CELLS = 10  # fewer candidate cells: no ground is found, the sweep is left as it is


def fit_ground_plane(points: np.ndarray, *, kernel=KC.grid_min_z) -> tuple[float, float, float] | None:
    """(a, b, c) of the ground plane z = a x + b y + c, or None when fewer than :data:`MIN_CELLS` cells hold a
    point. Deterministic."""
    x = points["x"].astype(np.float64)
    y = points["y"].astype(np.float64)
    z = points["z"].astype(np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & np.isfinite(z) & (np.abs(x) < GRID_HALF) & (np.abs(y) < GRID_HALF)
    n = int(2 * GRID_HALF / GRID_RES)
    ix = np.floor((x[ok] + GRID_HALF) / GRID_RES).astype(np.int64)
    iy = np.floor((y[ok] + GRID_HALF) / GRID_RES).astype(np.int64)
    zmin = kernel(ix, iy, z[ok], n, n)
    ci, cj = np.nonzero(np.isfinite(zmin))
    if len(ci) < MIN_CELLS:
        return None
    cx = (ci + 0.5) * GRID_RES - GRID_HALF
    cy = (cj + 0.5) * GRID_RES - GRID_HALF
    cz = zmin[ci, cj]
    plane = np.array([0.0, 0.0, float(np.median(cz))])
    for tol in (0.5, 0.2):
        res = cz - (plane[0] * cx + plane[1] * cy + plane[2])
        keep = np.abs(res) < tol
        if np.count_nonzero(keep) < MIN_CELLS:
            break
        a = np.column_stack([cx[keep], cy[keep], np.ones(np.count_nonzero(keep))])
        plane = np.linalg.lstsq(a, cz[keep], rcond=None)[0]
    return float(plane[0]), float(plane[1]), float(plane[2])


def fresnel_unpolarised(cos_i: np.ndarray, n: float = N_WATER) -> np.ndarray:
    """Reflectance of an air-to-medium interface for unpolarised light at incidence cos_i (Fresnel equations)."""
    cos_i = np.clip(cos_i, 0.0, 1.0)
    sin_t = np.sqrt(np.maximum(1.0 - cos_i * cos_i, 0.0)) / n
    cos_t = np.sqrt(np.maximum(1.0 - sin_t * sin_t, 0.0))
    rs = ((cos_i - n * cos_t) / (cos_i + n * cos_t)) ** 2
    rp = ((cos_t - n * cos_i) / (cos_t + n * cos_i)) ** 2
    return (rs + rp) / 2.0


def wet_factor(cos_i: np.ndarray, water_mm: float, pavement_mm: float) -> np.ndarray:
    """The factor on a ground return's reflectance: (1 - f) + f (1 - R(theta))^2 / n^2, f = min(water / texture
    depth, 1) the wetted share of the pavement (Hahner et al.'s weighting), R the film's Fresnel reflectance at
    the incidence theta (lost to the specular direction on the way in; the same on the way out by reciprocity)
    and 1/n^2 the radiance a diffuse source under water loses leaving it (the n^2 law; Lekner and Dorf 1988,
    "Why some things are darker when wet")."""
    f = min(water_mm / pavement_mm, 1.0)
    t = (1.0 - fresnel_unpolarised(cos_i)) ** 2 / N_WATER**2
    return (1.0 - f) + f * t


class WetGround(Builtin):
    name = "wet-ground"
    family = "weather"
    summary = "a water film darkens ground returns and loses the weakest (Hahner et al. 2022)"
    params = (Param("water_mm", "mm", 0.0, 5.0, "height of the water film"),
              Param("pavement_mm", "mm", 0.4, 3.5, "texture depth of the pavement (fine 0.4-0.6, coarse "
                    "0.6-1.2, open-graded 1.5-3.5 mm)"))
    doc = ("Wet ground after Hahner et al. (CVPR 2022, 'LiDAR Snowfall Simulation for Robust 3D Object "
           "Detection', wet-ground model, and their released code): a film of water_mm fills a share f = min(water "
           "/ texture depth, 1) of the pavement; there a ground return's reflectance is multiplied by (1 - R)^2 / "
           "n^2 (R the water's Fresnel reflectance at the beam's incidence on the fitted ground plane, n = 1.328; "
           "1/n^2 the n^2 law of a diffuse source under water), elsewhere kept. The intensity is scaled by that "
           "factor; a return whose darkened reflectance (read as the weather models do: at least 0.10 and at least "
           "what reached the noise floor dry; through the sensor profile's intensity calibration) falls under "
           "the profile's noise floor at its range (HDL-64E: pavement at 50 m, its datasheet) is lost. Returns more "
           "than 0.15 m above or below the ground plane are untouched. Hahner et al. estimate the laser's power "
           "and noise floor from each sweep's ground intensities; lidarmt uses the weather models' sensor model "
           "instead. Deterministic.")
    levels = {"light": {"water_mm": 0.25, "pavement_mm": 1.2}, "moderate": {"water_mm": 0.6, "pavement_mm": 1.2},
              "heavy": {"water_mm": 1.2, "pavement_mm": 1.2}}

    def _apply(self, frame, p, rng, context):
        pts = frame.points
        n = len(pts)
        plane = fit_ground_plane(pts)
        info = {"water_mm": p["water_mm"], "pavement_mm": p["pavement_mm"]}
        if plane is None:
            return make_change(frame, np.arange(n), pts.copy(),
                               info={**info, "n_ground": 0, "n_lost": 0, "reason": "no ground found"})
        a, b, c = plane
        x = pts["x"].astype(np.float64)
        y = pts["y"].astype(np.float64)
        z = pts["z"].astype(np.float64)
        r = ranges_of(pts)
        inten = pts["intensity"].astype(np.float64)
        height = (z - (a * x + b * y + c)) / math.sqrt(a * a + b * b + 1.0)
        ground = np.isfinite(height) & np.isfinite(inten) & (np.abs(height) <= GROUND_BAND) & (r > 0)
        normal = np.array([-a, -b, 1.0]) / math.sqrt(a * a + b * b + 1.0)
        gi = np.flatnonzero(ground)
        cos_i = np.abs(x[gi] * normal[0] + y[gi] * normal[1] + z[gi] * normal[2]) / r[gi]
        m = wet_factor(cos_i, p["water_mm"], p["pavement_mm"])
        # the dry reflectance as the weather models read it (at least 0.10, at least what reached the floor)
        rg = r[gi]
        prof = sensor_of(context)
        floor = prof.noise_floor
        lost = _reflectance_beta0(pts[gi], rg, prof) * m < floor * rg * rg  # the same product as beta0's floor
        out = pts.copy()
        out["intensity"][gi] = (inten[gi] * m).astype(np.float32)
        keep = np.ones(n, dtype=bool)
        keep[gi[lost]] = False
        return make_change(frame, keep, out[keep], info={
            **info, "n_ground": len(gi), "n_lost": int(np.count_nonzero(lost)),
            "plane": [round(a, 6), round(b, 6), round(c, 6)],
            "mean_factor": float(m.mean()) if len(m) else 1.0})
