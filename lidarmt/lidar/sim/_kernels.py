"""Numba kernels of the simulator (raster filling and the analytic ground cast), each with a NumPy reference.

The ground is a two-level height field over gently rolling terrain: road codes (< ``FIRST_RAISED``) of the
surface-code raster lie on the terrain, every other code (sidewalk, grass) ``curb`` above it. A ray that crosses the curb plane above a road cell
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
def _cell(grid, gx0, gy0, inv, x, y):  # pragma: no cover - numba
    u = (x - gx0) * inv
    v = (y - gy0) * inv
    nx = grid.shape[1] - 1
    ny = grid.shape[0] - 1
    u = min(max(u, 0.0), nx - 1e-9)
    v = min(max(v, 0.0), ny - 1e-9)
    c = int(u)
    r = int(v)
    return r, c, u - c, v - r


@njit(cache=True)
def _height(grid, gx0, gy0, inv, x, y):  # pragma: no cover - numba
    r, c, fx, fy = _cell(grid, gx0, gy0, inv, x, y)
    h0 = grid[r, c] + (grid[r, c + 1] - grid[r, c]) * fx
    h1 = grid[r + 1, c] + (grid[r + 1, c + 1] - grid[r + 1, c]) * fx
    return h0 + (h1 - h0) * fy


@njit(cache=True)
def _slope(grid, gx0, gy0, inv, x, y):  # pragma: no cover - numba
    r, c, fx, fy = _cell(grid, gx0, gy0, inv, x, y)
    gx = ((grid[r, c + 1] - grid[r, c]) * (1 - fy) + (grid[r + 1, c + 1] - grid[r + 1, c]) * fy) * inv
    gy = ((grid[r + 1, c] - grid[r, c]) * (1 - fx) + (grid[r + 1, c + 1] - grid[r, c + 1]) * fx) * inv
    return gx, gy


@njit(cache=True)
def _above(tg, ox, oy, oz, dx, dy, dz, lift, t):  # pragma: no cover - numba
    grid, gx0, gy0, inv = tg
    return oz + t * dz - _height(grid, gx0, gy0, inv, ox + t * dx, oy + t * dy) - lift


@njit(cache=True)
def _surface_hit(tg, gmax, g0x, g0y, ox, oy, oz, dx, dy, dz, lift, max_t, t_guess):  # pragma: no cover
    """First t > 0 where the ray meets the surface z = height(x, y) + lift (inf when none before max_t).

    ``gmax`` bounds the terrain's slope and (g0x, g0y) is its gradient under the ray's origin. A ray that
    climbs faster than any slope never meets it. Otherwise Newton's method, started from ``t_guess`` or from
    the crossing with the plane tangent to the terrain under the origin; where Newton does not settle (rays
    nearly parallel to the slope), sphere tracing (steps that cannot pass the first crossing) and bisection.
    """
    grid, gx0, gy0, inv = tg
    f0 = oz - _height(grid, gx0, gy0, inv, ox, oy) - lift
    if f0 <= 0.0:
        return 0.0
    hxy = np.sqrt(dx * dx + dy * dy)
    rate = gmax * hxy - dz  # the most the height above ground can fall per unit of t
    if rate <= 1e-9:
        return np.inf
    den = g0x * dx + g0y * dy - dz  # fall rate over the tangent plane
    t = t_guess
    if t <= 0.0 and den > 1e-6:
        t = f0 / den
    if t > 0.0:
        for _ in range(10):
            x = ox + t * dx
            y = oy + t * dy
            f = oz + t * dz - _height(grid, gx0, gy0, inv, x, y) - lift
            gx, gy = _slope(grid, gx0, gy0, inv, x, y)
            fp = dz - gx * dx - gy * dy
            if fp > -1e-6:
                break
            step = f / fp
            t -= step
            if t <= 0.0 or t > 2.0 * max_t:
                break
            if abs(step) < 1e-6:
                # accept only the first crossing: the ray must be above the ground a little before it
                tb = t * 0.98
                if _above(tg, ox, oy, oz, dx, dy, dz, lift, tb) > 0.0:
                    if t <= max_t:
                        return t
                    return np.inf
                break
    # sphere tracing, then a short march and bisection for the exact crossing
    t = 0.0
    f = f0
    while f > 1e-3:
        t += f / rate
        if t > max_t:
            return np.inf
        f = _above(tg, ox, oy, oz, dx, dy, dz, lift, t)
    lo = t
    hi = t + 0.05
    while _above(tg, ox, oy, oz, dx, dy, dz, lift, hi) > 0.0:
        lo = hi
        hi += 0.05
        if lo > max_t:
            return np.inf
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _above(tg, ox, oy, oz, dx, dy, dz, lift, mid) > 0.0:
            lo = mid
        else:
            hi = mid
    if hi <= max_t:
        return hi
    return np.inf


@njit(cache=True)
def cast_ground(origins: np.ndarray, dirs: np.ndarray, raster: np.ndarray, x0: float, y0: float, res: float,
                curb: float, max_t: float, outside: int, hgrid: np.ndarray, hres: float,
                gmax: float) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Distance along each ray to the ground (inf when none within ``max_t``) and the surface code hit.

    The road surface is the height grid ``hgrid`` (nodes every ``hres`` metres from the raster's corner
    (x0, y0), bilinear between them, clamped at the edges) whose slope never exceeds ``gmax``; raised codes
    lie ``curb`` above it.
    """
    n = dirs.shape[0]
    t_out = np.full(n, np.inf, dtype=np.float32)
    code_out = np.full(n, 255, dtype=np.uint8)
    inv = 1.0 / res
    tg = (hgrid, x0, y0, 1.0 / hres)
    g0x = 0.0
    g0y = 0.0
    last_x = np.nan
    last_y = np.nan
    for i in range(n):
        ox, oy, oz = origins[i, 0], origins[i, 1], origins[i, 2]
        dx, dy, dz = dirs[i, 0], dirs[i, 1], dirs[i, 2]
        if ox != last_x or oy != last_y:  # rays usually share their origin
            g0x, g0y = _slope(hgrid, x0, y0, 1.0 / hres, ox, oy)
            last_x, last_y = ox, oy
        t1 = _surface_hit(tg, gmax, g0x, g0y, ox, oy, oz, dx, dy, dz, curb, max_t, -1.0)
        if t1 == np.inf:
            continue
        c1 = _code_at(raster, x0, y0, inv, ox + t1 * dx, oy + t1 * dy, outside)
        if c1 >= FIRST_RAISED:
            t_out[i] = t1
            code_out[i] = c1
            continue
        t0 = _surface_hit(tg, gmax, g0x, g0y, ox, oy, oz, dx, dy, dz, 0.0, max_t, t1)
        if t0 == np.inf:
            continue
        c0 = _code_at(raster, x0, y0, inv, ox + t0 * dx, oy + t0 * dy, outside)
        if c0 < FIRST_RAISED:
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
        t_out[i] = hi
        code_out[i] = CURB_FACE
    return t_out, code_out


def _cell_ref(hgrid: np.ndarray, x0: float, y0: float, hres: float, x: np.ndarray, y: np.ndarray):
    """NumPy version of :func:`_cell`: the grid cell (row, col) under each (x, y), clamped at the grid's edges,
    and the fractions (fx, fy) across it."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    u = np.clip((x - x0) / hres, 0.0, hgrid.shape[1] - 1 - 1e-9)
    v = np.clip((y - y0) / hres, 0.0, hgrid.shape[0] - 1 - 1e-9)
    c = u.astype(np.int64)
    r = v.astype(np.int64)
    return r, c, u - c, v - r


def height_ref(hgrid: np.ndarray, x0: float, y0: float, hres: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NumPy version of the bilinear terrain height (clamped at the grid's edges)."""
    r, c, fx, fy = _cell_ref(hgrid, x0, y0, hres, x, y)
    h0 = hgrid[r, c] + (hgrid[r, c + 1] - hgrid[r, c]) * fx
    h1 = hgrid[r + 1, c] + (hgrid[r + 1, c + 1] - hgrid[r + 1, c]) * fx
    return h0 + (h1 - h0) * fy


def slope_ref(hgrid: np.ndarray, x0: float, y0: float, hres: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NumPy version of the bilinear terrain's gradient, (N, 2)."""
    r, c, fx, fy = _cell_ref(hgrid, x0, y0, hres, x, y)
    gx = ((hgrid[r, c + 1] - hgrid[r, c]) * (1 - fy) + (hgrid[r + 1, c + 1] - hgrid[r + 1, c]) * fy) / hres
    gy = ((hgrid[r + 1, c] - hgrid[r, c]) * (1 - fx) + (hgrid[r + 1, c + 1] - hgrid[r, c + 1]) * fx) / hres
    return np.stack([gx, gy], axis=-1)


def slope_bound(hgrid: np.ndarray, hres: float) -> float:
    """An upper bound of the bilinear terrain's slope (for the kernel's sphere tracing)."""
    if hgrid.shape[0] < 2 or hgrid.shape[1] < 2:
        return 0.0
    gx = np.abs(np.diff(hgrid, axis=1)).max() / hres
    gy = np.abs(np.diff(hgrid, axis=0)).max() / hres
    return float(np.hypot(gx, gy)) * 1.0001 + 1e-9


def cast_ground_ref(origins: np.ndarray, dirs: np.ndarray, raster: np.ndarray, x0: float, y0: float, res: float,
                    curb: float, max_t: float, outside: int, hgrid: np.ndarray, hres: float,
                    gmax: float) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of :func:`cast_ground`, by another method: every ray is marched in 0.25 m steps and
    the first crossing of each surface refined by bisection (slow; for tests)."""
    n = len(dirs)
    t_out = np.full(n, np.inf, dtype=np.float32)
    code_out = np.full(n, 255, dtype=np.uint8)
    h, w = raster.shape
    o, d = origins.astype(np.float64), dirs.astype(np.float64)

    def code(x, y):
        c = np.floor((x - x0) / res).astype(np.int64)
        r = np.floor((y - y0) / res).astype(np.int64)
        ok = (r >= 0) & (c >= 0) & (r < h) & (c < w)
        out = np.full(len(x), outside, dtype=np.int64)
        out[ok] = raster[r[ok], c[ok]]
        return out

    def above(t, lift):
        return o[:, 2] + t * d[:, 2] - height_ref(hgrid, x0, y0, hres, o[:, 0] + t * d[:, 0], o[:, 1] + t * d[:, 1]) - lift

    def first_hit(lift):
        ts = np.arange(0.0, max_t + 0.25, 0.25)
        f = np.stack([above(t, lift) for t in ts], axis=1)  # (n, steps)
        neg = f <= 0
        has = neg.any(axis=1) & (f[:, 0] > 0)
        k = np.argmax(neg, axis=1)
        lo = np.where(has, ts[np.maximum(k - 1, 0)], 0.0)
        hi = np.where(has, ts[k], 0.0)
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            up = above(mid, lift) > 0
            lo = np.where(up, mid, lo)
            hi = np.where(up, hi, mid)
        return np.where(has & (hi <= max_t), hi, np.inf)

    t1 = first_hit(curb)
    t0 = first_hit(0.0)
    ok1 = np.isfinite(t1)
    c1 = np.full(n, -1)
    c1[ok1] = code(o[ok1, 0] + t1[ok1] * d[ok1, 0], o[ok1, 1] + t1[ok1] * d[ok1, 1])
    raised = ok1 & (c1 >= FIRST_RAISED)
    t_out[raised] = t1[raised]
    code_out[raised] = c1[raised]
    rest = ok1 & ~raised & np.isfinite(t0)
    idx = np.flatnonzero(rest)
    c0 = code(o[idx, 0] + t0[idx] * d[idx, 0], o[idx, 1] + t0[idx] * d[idx, 1])
    road = c0 < FIRST_RAISED
    t_out[idx[road]] = t0[idx[road]]
    code_out[idx[road]] = c0[road]
    face = idx[~road]
    lo, hi = t1[face].copy(), t0[face].copy()
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        up = code(o[face, 0] + mid * d[face, 0], o[face, 1] + mid * d[face, 1]) >= FIRST_RAISED
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    t_out[face] = hi
    code_out[face] = CURB_FACE
    return t_out, code_out
