"""Numba kernels of Apollo's HDMap ROI bitmap: polygon scan conversion and point lookup.

The algorithm is Apollo's (2.0-era ``polygon_scan_converter.cc``, ``polygon_mask.cc``, ``bitmap2d.cc``; see
apollo-lop-facts.md §2.4), written from that description; :mod:`lidarmt.lidar.roi._reference` is a plain-Python
version of the same rules that the tests compare against these kernels bit for bit.

Apollo's rules are kept where they depart from an exact even-odd fill (each is pinned by a test):

* scan lines sit at cell centres from the polygon's first cell, and there are floor((end - start) / cell) of
  them, so the rows up to two cells before the polygon's far end along the scan axis (and the bitmap's last row)
  are never drawn;
* an edge parallel to the scan lines contributes its interval on the *next* scan line (up to 1.5 cells
  across the edge and one along it, i.e. 1.8 cells from it);
* the active edges are re-sorted only on scan lines where an edge starts or ends, so in a self-intersecting
  polygon two edges that cross between such lines are paired in their old order (the real LGSVL maps have such
  section polygons: left edges of both directions, then right edges reversed);
* intervals are half-open: the cell holding an interval's upper end is not set;
* Apollo's undefined cases are made safe: a polygon with no scan line is skipped, an odd number of active edges
  leaves the last one unpaired.

Local coordinates are float32 values (2.0-era ``PolygonType`` and the local cloud are float), held as float64.

Bitmap layout: ``bitmap[row, block]`` (uint64). ``row`` is the cell index along the *major* axis (0 = x, 1 = y),
the bit index ``j`` is the cell index along the other axis, stored MSB-first: cell ``j`` is bit ``63 - (j & 63)``
of block ``j >> 6``. Cells cover ``[-range, range)`` on both axes.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

FLT_EPS = float(np.finfo(np.float32).eps)  # Apollo's kEpsilon: std::numeric_limits<float>::epsilon()
DBL_MIN = float(np.finfo(np.float64).tiny)  # std::numeric_limits<double>::min(): smallest *positive* double
DBL_MAX = float(np.finfo(np.float64).max)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _cround(v: float) -> float:
    """C's std::round: halves away from zero."""
    if v >= 0.0:
        return math.floor(v + 0.5)
    return -math.floor(-v + 0.5)


@njit(cache=True)
def _set_row(bitmap, row, left, right):
    """Set cells [left, right) of one row (Apollo's Bitmap2D::Set after the index computation)."""
    lb = left >> 6
    rb = right >> 6
    lbit = np.uint64(left & 63)
    rbit = np.uint64(right & 63)
    if lb == rb:
        bitmap[row, lb] |= (_ALL >> lbit) & ~(_ALL >> rbit)
        return
    bitmap[row, lb] |= _ALL >> lbit
    if rb < bitmap.shape[1]:
        bitmap[row, rb] |= ~(_ALL >> rbit)
    for b in range(lb + 1, rb):
        bitmap[row, b] = _ALL


@njit(cache=True)
def _draw_interval(bitmap, x, y1, y2, bmin, bmax, cell, extend):
    v1 = max(bmin, y1 - extend)
    v2 = min(bmax, y2 + extend)
    if v1 > v2:
        return
    row = int((x - bmin) / cell)
    if row < 0 or row >= bitmap.shape[0]:
        return
    left = int((v1 - bmin) / cell)
    right = int((v2 - bmin) / cell)
    _set_row(bitmap, row, left, right)


@njit(cache=True)
def _sort_active(ay, ax, amx, ak, n):
    """Insertion sort of the active edges by y (they are few)."""
    for i in range(1, n):
        y = ay[i]
        x = ax[i]
        mx = amx[i]
        k = ak[i]
        j = i - 1
        while j >= 0 and ay[j] > y:
            ay[j + 1] = ay[j]
            ax[j + 1] = ax[j]
            amx[j + 1] = amx[j]
            ak[j + 1] = ak[j]
            j -= 1
        ay[j + 1] = y
        ax[j + 1] = x
        amx[j + 1] = mx
        ak[j + 1] = k


@njit(cache=True)
def draw_polygon(verts, major, rng, cell, extend, bitmap):
    """Scan-convert one polygon (vertices (n, 2) float64, local frame) into the bitmap, as Apollo does."""
    n = verts.shape[0]
    if n == 0:
        return
    op = 1 - major
    bmin = -rng
    bmax = rng
    inf = np.inf

    # GetValidXRange: the polygon's extent on the major axis, clipped; max starts at DBL_MIN (Apollo's quirk).
    pmin = DBL_MAX
    pmax = DBL_MIN
    for i in range(n):
        v = verts[i, major]
        if v < pmin:
            pmin = v
        if v > pmax:
            pmax = v
    first = max(pmin, bmin)
    second = min(pmax, bmax)
    first = (int((first - bmin) / cell) + 0.5) * cell + bmin
    span = (second - first) / cell
    if not span >= 1.0:  # no scan line (Apollo would index an empty edge table here)
        return
    scans = int(span)

    # DisturbPolygon: move vertices lying (almost) on a scan line off it.
    xs = np.empty(n)
    ys = np.empty(n)
    for i in range(n):
        x = verts[i, major]
        d = (x - first) / cell
        r = _cround(d)
        delta = d - r
        if abs(delta) < FLT_EPS:
            x = (r + FLT_EPS) * cell + first if delta > 0 else (r - FLT_EPS) * cell + first
        xs[i] = x
        ys[i] = verts[i, op]

    # Segments -> edges (x relative to `first`), bucketed by their first scan line.
    ex = np.empty(n)
    ey = np.empty(n)
    emx = np.empty(n)
    emy = np.empty(n)
    ek = np.empty(n)
    eid = np.empty(n, dtype=np.int64)
    ne = 0
    # the active table never holds more than n edges
    ay = np.empty(n)
    ax = np.empty(n)
    amx = np.empty(n)
    ak = np.empty(n)
    na = 0
    for i in range(n):
        c = i
        nx = (i + 1) % n
        if xs[c] < xs[nx]:
            a = c
            b = nx
        else:
            a = nx
            b = c
        k = inf if abs(xs[c] - xs[nx]) < FLT_EPS else (ys[nx] - ys[c]) / (xs[nx] - xs[c])
        min_x = xs[a] - first
        min_y = ys[a]
        x_id = int(math.ceil(min_x / cell))
        e_x = x_id * cell
        e_mx = xs[b] - first
        e_my = ys[b]
        finite = math.isfinite(k)
        if finite:
            e_y = min_y + (e_x - min_x) * k
        else:
            e_y = min_y
            if e_y > e_my:
                e_y, e_my = e_my, e_y
        if finite and e_mx < e_x:
            continue
        if x_id >= scans:
            continue
        if x_id >= 0:
            ex[ne] = e_x
            ey[ne] = e_y
            emx[ne] = e_mx
            emy[ne] = e_my
            ek[ne] = k
            eid[ne] = x_id
            ne += 1
        else:
            # starts before the first scan line: advance it to scan 0 and make it active directly
            dx = 0.0 - e_x
            if dx < 0 or not finite:
                continue
            e_x += dx
            if e_x > e_mx:
                continue
            ay[na] = e_y + dx * k
            ax[na] = e_x
            amx[na] = e_mx
            ak[na] = k
            na += 1

    # stable bucket order by first scan line (counting sort)
    counts = np.zeros(scans + 1, dtype=np.int64)
    for j in range(ne):
        counts[eid[j] + 1] += 1
    for s in range(scans):
        counts[s + 1] += counts[s]
    order = np.empty(ne, dtype=np.int64)
    fill = counts[:scans].copy()
    for j in range(ne):
        order[fill[eid[j]]] = j
        fill[eid[j]] += 1

    x_scan = first
    for s in range(scans):
        invalid = 0
        valid = na
        if s > 0:
            for j in range(na):  # Edge::MoveUp(cell)
                ax[j] += cell
                if ax[j] > amx[j]:
                    ay[j] = inf
                    invalid += 1
                    valid -= 1
                else:
                    ay[j] += cell * ak[j]
        new = 0
        for q in range(counts[s], counts[s + 1]):
            j = order[q]
            if math.isfinite(ek[j]):
                ay[na] = ey[j]
                ax[na] = ex[j]
                amx[na] = emx[j]
                ak[na] = ek[j]
                na += 1
                valid += 1
                new += 1
            else:  # vertical edge: its own interval on this scan line
                _draw_interval(bitmap, x_scan, ey[j], emy[j], bmin, bmax, cell, extend)
        if s == 0 or invalid != 0 or new != 0:
            _sort_active(ay, ax, amx, ak, na)
            na = valid
        j = 0
        while j + 1 < na:  # even-odd pairing
            _draw_interval(bitmap, x_scan, ay[j], ay[j + 1], bmin, bmax, cell, extend)
            j += 2
        x_scan += cell


@njit(cache=True)
def draw_polygons(verts, starts, major, rng, cell, extend, bitmap):
    """Draw every polygon ``verts[starts[p]:starts[p + 1]]`` (logical OR of their fills)."""
    for p in range(starts.shape[0] - 1):
        draw_polygon(verts[starts[p] : starts[p + 1]], major, rng, cell, extend, bitmap)


@njit(cache=True, inline="always")
def _test(bitmap, lx, ly, major, rng, cell):
    """Bitmap2D::IsExist (x and y in [-range, range)) and Check (truncated cell index, MSB-first bit).

    Written without branches on the point (indices are clamped, the IsExist flag masks the bit) so that the
    loop vectorises and non-finite coordinates can never index outside the bitmap."""
    ok = (lx >= -rng) & (lx < rng) & (ly >= -rng) & (ly < rng)
    gx = np.int64((lx + rng) / cell)
    gy = np.int64((ly + rng) / cell)
    if major == 0:
        row = gx
        col = gy
    else:
        row = gy
        col = gx
    last = bitmap.shape[0] - 1
    row = min(max(row, 0), last)
    col = min(max(col, 0), last)
    bit = (bitmap[row, col >> 6] >> np.uint64(63 - (col & 63))) & np.uint64(1)
    return ok & (bit != 0)


@njit(cache=True)
def lookup_local(lx, ly, bitmap, major, rng, cell, out):
    """ROI membership of points already in the local frame (float32 coordinates, as Apollo stores them)."""
    for i in range(lx.shape[0]):
        out[i] = _test(bitmap, np.float64(lx[i]), np.float64(ly[i]), major, rng, cell)


@njit(cache=True)
def lookup_sensor(px, py, pz, rot, bitmap, major, rng, cell, out):
    """ROI membership of sensor-frame points: rotate by ``rot`` (2x3, the pose rotation's first two rows) in
    double, round to float32 (Apollo's local cloud is float), then test the bitmap."""
    r00 = rot[0, 0]
    r01 = rot[0, 1]
    r02 = rot[0, 2]
    r10 = rot[1, 0]
    r11 = rot[1, 1]
    r12 = rot[1, 2]
    for i in range(px.shape[0]):
        x = np.float64(px[i])
        y = np.float64(py[i])
        z = np.float64(pz[i])
        lx = np.float64(np.float32(r00 * x + r01 * y + r02 * z))
        ly = np.float64(np.float32(r10 * x + r11 * y + r12 * z))
        out[i] = _test(bitmap, lx, ly, major, rng, cell)


@njit(cache=True)
def lookup_sensor_xy(px, py, rot, bitmap, major, rng, cell, out):
    """As :func:`lookup_sensor` for points given without z (z = 0)."""
    r00 = rot[0, 0]
    r01 = rot[0, 1]
    r10 = rot[1, 0]
    r11 = rot[1, 1]
    for i in range(px.shape[0]):
        x = np.float64(px[i])
        y = np.float64(py[i])
        lx = np.float64(np.float32(r00 * x + r01 * y))
        ly = np.float64(np.float32(r10 * x + r11 * y))
        out[i] = _test(bitmap, lx, ly, major, rng, cell)


@njit(cache=True)
def dilate_cells(occ):
    """One-cell (8-neighbour) dilation of a boolean grid."""
    h, w = occ.shape
    out = np.zeros_like(occ)
    for i in range(h):
        for j in range(w):
            if occ[i, j]:
                for di in range(-1, 2):
                    ii = i + di
                    if 0 <= ii < h:
                        for dj in range(-1, 2):
                            jj = j + dj
                            if 0 <= jj < w:
                                out[ii, jj] = True
    return out
