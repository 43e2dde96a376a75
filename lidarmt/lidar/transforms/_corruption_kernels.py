"""Numba kernels of the wet-ground and per-object corruptions, each beside a plain NumPy reference the tests
cross-check.

* :func:`grid_min_z`: the lowest z of the points in each cell of a regular xy grid (the candidates of the ground
  plane :mod:`lidarmt.lidar.transforms.ground` fits);
* :func:`box_index`: per point, the first labelled box that holds it (grown by a margin in x/y, the ground below
  bottom + clearance excluded, as :func:`lidarmt.lidar.transforms.objects.box_mask` cuts an object), -1 for none.

Both are pure functions of their arrays (no randomness).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def grid_min_z(ix: np.ndarray, iy: np.ndarray, z: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """(nx, ny) float64: the lowest ``z`` of the points in each cell (``ix``, ``iy`` int64 cell indices; points
    with an index outside the grid are skipped); +inf where a cell is empty."""
    out = np.full((nx, ny), np.inf)
    for i in range(z.shape[0]):
        a = ix[i]
        b = iy[i]
        if 0 <= a < nx and 0 <= b < ny and z[i] < out[a, b]:
            out[a, b] = z[i]
    return out


def grid_min_z_reference(ix: np.ndarray, iy: np.ndarray, z: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """NumPy reference of :func:`grid_min_z`."""
    out = np.full((nx, ny), np.inf)
    ok = (ix >= 0) & (ix < nx) & (iy >= 0) & (iy < ny)
    np.minimum.at(out, (ix[ok], iy[ok]), z[ok])
    return out


@njit(cache=True)
def box_index(x: np.ndarray, y: np.ndarray, z: np.ndarray, cx: np.ndarray, cy: np.ndarray, cz: np.ndarray,
              length: np.ndarray, width: np.ndarray, height: np.ndarray, yaw: np.ndarray, margin: float,
              clearance: float) -> np.ndarray:
    """int64 per point: the index of the first box that holds it, -1 when none (a box holds a point whose
    box-frame |x| <= length/2 + margin, |y| <= width/2 + margin and bottom + clearance <= z <= top + margin)."""
    out = np.full(x.shape[0], -1, dtype=np.int64)
    nb = cx.shape[0]
    for k in range(nb):
        c = math.cos(yaw[k])
        s = math.sin(yaw[k])
        bottom = cz[k] - height[k] / 2.0
        for i in range(x.shape[0]):
            if out[i] >= 0:
                continue
            dx = x[i] - cx[k]
            dy = y[i] - cy[k]
            lx = c * dx + s * dy
            ly = -s * dx + c * dy
            if (abs(lx) <= length[k] / 2.0 + margin and abs(ly) <= width[k] / 2.0 + margin
                    and z[i] >= bottom + clearance and z[i] <= bottom + height[k] + margin):
                out[i] = k
    return out


def box_index_reference(x, y, z, cx, cy, cz, length, width, height, yaw, margin, clearance) -> np.ndarray:
    """NumPy reference of :func:`box_index` (one vectorised test per box)."""
    out = np.full(len(x), -1, dtype=np.int64)
    for k in range(len(cx)):
        c, s = math.cos(yaw[k]), math.sin(yaw[k])
        dx, dy = x - cx[k], y - cy[k]
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        bottom = cz[k] - height[k] / 2.0
        inside = ((np.abs(lx) <= length[k] / 2.0 + margin) & (np.abs(ly) <= width[k] / 2.0 + margin)
                  & (z >= bottom + clearance) & (z <= bottom + height[k] + margin))
        out[(out < 0) & inside] = k
    return out
