"""Numba kernels of the simulator (raster filling and the analytic ground cast), each with a NumPy reference.

The ground is a two-level height field given by a surface-code raster: road codes (< ``FIRST_RAISED``) lie at
z = 0, every other code (sidewalk, terrain) at z = ``curb``. A ray that crosses the curb plane above a road cell
and then reaches the road plane above a raised cell has hit the curb's vertical face; that point is found by
bisection on the raster.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FIRST_RAISED = 3  # codes 0..2 (asphalt, marking, crosswalk) are road level; 3.. are raised
CURB_FACE = 5  # code reported for hits on the vertical curb face


@njit(cache=True)
def fill_polygon(raster: np.ndarray, poly: np.ndarray, value: int) -> None:  # pragma: no cover - numba
    """Even-odd scan-line fill of a polygon given in pixel coordinates (col, row) as floats."""
    h, w = raster.shape
    n = poly.shape[0]
    rmin = max(int(np.floor(poly[:, 1].min())), 0)
    rmax = min(int(np.ceil(poly[:, 1].max())), h - 1)
    xs = np.empty(n, dtype=np.float64)
    for r in range(rmin, rmax + 1):
        yc = r + 0.5
        k = 0
        for i in range(n):
            x0, y0 = poly[i, 0], poly[i, 1]
            x1, y1 = poly[(i + 1) % n, 0], poly[(i + 1) % n, 1]
            if (y0 <= yc < y1) or (y1 <= yc < y0):
                xs[k] = x0 + (yc - y0) * (x1 - x0) / (y1 - y0)
                k += 1
        xs_k = np.sort(xs[:k])
        for j in range(0, k - 1, 2):
            c0 = max(int(np.ceil(xs_k[j] - 0.5)), 0)
            c1 = min(int(np.floor(xs_k[j + 1] - 0.5)), w - 1)
            for c in range(c0, c1 + 1):
                raster[r, c] = value


def fill_polygon_ref(raster: np.ndarray, poly: np.ndarray, value: int) -> None:
    """NumPy reference of :func:`fill_polygon`: cell centres inside the polygon (even-odd rule)."""
    h, w = raster.shape
    rows, cols = np.mgrid[0:h, 0:w]
    xc, yc = cols + 0.5, rows + 0.5
    inside = np.zeros((h, w), dtype=bool)
    n = len(poly)
    for i in range(n):
        x0, y0 = poly[i]
        x1, y1 = poly[(i + 1) % n]
        cond = ((y0 <= yc) & (yc < y1)) | ((y1 <= yc) & (yc < y0))
        with np.errstate(divide="ignore", invalid="ignore"):
            xi = x0 + (yc - y0) * (x1 - x0) / (y1 - y0)
        inside ^= cond & (xc < xi)
    raster[inside] = value


@njit(cache=True)
def _code_at(raster, x0, y0, inv_res, x, y, outside):  # pragma: no cover - numba
    c = int(np.floor((x - x0) * inv_res))
    r = int(np.floor((y - y0) * inv_res))
    if r < 0 or c < 0 or r >= raster.shape[0] or c >= raster.shape[1]:
        return outside
    return raster[r, c]


@njit(cache=True)
def cast_ground(origins: np.ndarray, dirs: np.ndarray, raster: np.ndarray, x0: float, y0: float, res: float,
                curb: float, max_t: float, outside: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Distance along each ray to the ground (inf when none within ``max_t``) and the surface code hit."""
    n = dirs.shape[0]
    t_out = np.full(n, np.inf, dtype=np.float32)
    code_out = np.full(n, 255, dtype=np.uint8)
    inv = 1.0 / res
    for i in range(n):
        ox, oy, oz = origins[i, 0], origins[i, 1], origins[i, 2]
        dx, dy, dz = dirs[i, 0], dirs[i, 1], dirs[i, 2]
        if dz >= -1e-6:
            continue
        t1 = (curb - oz) / dz
        if t1 > max_t:
            continue
        if t1 < 0:
            t1 = 0.0
        c1 = _code_at(raster, x0, y0, inv, ox + t1 * dx, oy + t1 * dy, outside)
        if c1 >= FIRST_RAISED:
            t_out[i] = t1
            code_out[i] = c1
            continue
        t0 = (0.0 - oz) / dz
        c0 = _code_at(raster, x0, y0, inv, ox + t0 * dx, oy + t0 * dy, outside)
        if c0 < FIRST_RAISED:
            if t0 <= max_t:
                t_out[i] = t0
                code_out[i] = c0
            continue
        lo, hi = t1, t0  # road at lo, raised at hi: find the curb face
        for _ in range(12):
            mid = 0.5 * (lo + hi)
            if _code_at(raster, x0, y0, inv, ox + mid * dx, oy + mid * dy, outside) >= FIRST_RAISED:
                hi = mid
            else:
                lo = mid
        if hi <= max_t:
            t_out[i] = hi
            code_out[i] = CURB_FACE
    return t_out, code_out


def cast_ground_ref(origins: np.ndarray, dirs: np.ndarray, raster: np.ndarray, x0: float, y0: float, res: float,
                    curb: float, max_t: float, outside: int) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of :func:`cast_ground` (same rules, vectorised)."""
    n = len(dirs)
    t_out = np.full(n, np.inf, dtype=np.float32)
    code_out = np.full(n, 255, dtype=np.uint8)
    h, w = raster.shape

    def code(x, y):
        c = np.floor((x - x0) / res).astype(np.int64)
        r = np.floor((y - y0) / res).astype(np.int64)
        ok = (r >= 0) & (c >= 0) & (r < h) & (c < w)
        out = np.full(len(x), outside, dtype=np.int64)
        out[ok] = raster[r[ok], c[ok]]
        return out

    o, d = origins.astype(np.float64), dirs.astype(np.float64)
    down = d[:, 2] < -1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(down, (curb - o[:, 2]) / d[:, 2], np.inf)
        t0 = np.where(down, -o[:, 2] / d[:, 2], np.inf)
    t1 = np.maximum(t1, 0.0)
    live = down & (t1 <= max_t)
    idx = np.flatnonzero(live)
    c1 = code(o[idx, 0] + t1[idx] * d[idx, 0], o[idx, 1] + t1[idx] * d[idx, 1])
    raised = c1 >= FIRST_RAISED
    t_out[idx[raised]] = t1[idx[raised]]
    code_out[idx[raised]] = c1[raised]
    rest = idx[~raised]
    c0 = code(o[rest, 0] + t0[rest] * d[rest, 0], o[rest, 1] + t0[rest] * d[rest, 1])
    road = (c0 < FIRST_RAISED) & (t0[rest] <= max_t)
    t_out[rest[road]] = t0[rest[road]]
    code_out[rest[road]] = c0[road]
    face = rest[c0 >= FIRST_RAISED]
    lo, hi = t1[face].copy(), t0[face].copy()
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        up = code(o[face, 0] + mid * d[face, 0], o[face, 1] + mid * d[face, 1]) >= FIRST_RAISED
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    ok = hi <= max_t
    t_out[face[ok]] = hi[ok]
    code_out[face[ok]] = CURB_FACE
    return t_out, code_out
