"""Numba kernels of the MinBox object builder (see :mod:`lidarmt.lidar.perception.apollo.minbox`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_EPS = np.float64(np.float32(1e-6))  # Apollo: const float EPSILON = 1e-6, compared against doubles
_DEG_EPS = np.float32(1e-3)  # SetDefaultValue's degeneracy widening (float)
_MIN_EPS = 10.0 * np.finfo(np.float64).eps  # ComputePolygon2dxy's collinearity epsilon


@njit(cache=True, nogil=True)
def convex_hull_xy(px, py, out_idx):  # pragma: no cover - numba
    """2-D convex hull (Andrew's monotone chain on float64 copies; collinear and duplicate points dropped).

    Writes hull vertex indices (counter-clockwise, unsorted start) to ``out_idx``; returns their number
    (< 3 when all points are collinear, where qhull fails too).
    """
    n = px.shape[0]
    order = np.argsort(px, kind="mergesort")
    # stable secondary sort by y within equal x
    i = 0
    while i < n:
        j = i + 1
        while j < n and px[order[j]] == px[order[i]]:
            j += 1
        if j - i > 1:
            seg = order[i:j].copy()
            sub = np.argsort(py[seg], kind="mergesort")
            for k in range(j - i):
                order[i + k] = seg[sub[k]]
        i = j
    hull = np.empty(2 * n + 1, dtype=np.int64)
    k = 0
    floor = 2  # the lower chain, then (from step n) the upper chain, which never pops into the lower one
    for step in range(2 * n - 1):
        if step < n:
            p = order[step]
        else:
            if step == n:
                floor = k + 1
            p = order[2 * n - 2 - step]
        while k >= floor:
            a = hull[k - 2]
            b = hull[k - 1]
            cr = (px[b] - px[a]) * (py[p] - py[a]) - (py[b] - py[a]) * (px[p] - px[a])
            if cr <= 0.0:
                k -= 1
            else:
                break
        hull[k] = p
        k += 1
    m = k - 1 if k > 1 else k
    # drop exact duplicates of the first point (all points equal)
    if m == 2 and px[hull[0]] == px[hull[1]] and py[hull[0]] == py[hull[1]]:
        m = 1
    for t in range(m):
        out_idx[t] = hull[t]
    return m


@njit(cache=True, nogil=True)
def _div(a, b):  # pragma: no cover - numba
    """``a / b`` in IEEE arithmetic, as Apollo's C++ divides: ±inf or NaN for ``b == 0`` instead of Python's
    ZeroDivisionError (4+ identical points give a zero-length hull edge; the NaNs it makes compare false, so
    that edge's box has zero length and width, which is what Apollo's builder outputs for them)."""
    if b == 0.0:
        if a == 0.0 or a != a:
            return math.nan
        return math.inf if (a > 0.0) == (math.copysign(1.0, b) > 0.0) else -math.inf
    return a / b


@njit(cache=True, nogil=True)
def _area_along_edge(poly, first, res):  # pragma: no cover - numba
    """ComputeAreaAlongOneEdge for the edge (first, first + 1): res = [cx, cy, cz, length, width, dx, dy]."""
    m = poly.shape[0]
    index = (first + 1) % m
    nsx = np.empty(m)
    nsy = np.empty(m)
    vx = 0.0
    vy = 0.0
    vnx = 0.0
    vny = 0.0
    wid = 0.0
    bx = poly[first, 0]
    by = poly[first, 1]
    ax = poly[index, 0]
    ay = poly[index, 1]
    for i in range(m):
        if i != first and i != index:
            ox = poly[i, 0]
            oy = poly[i, 1]
            k = (ax - ox) * (bx - ax) + (ay - oy) * (by - ay)
            k = _div(k, (bx - ax) * (bx - ax) + (by - ay) * (by - ay))  # a zero-length edge: NaN, as in C++
            k = k * -1.0
            nx = (bx - ax) * k + ax
            ny = (by - ay) * k + ay
            e1x = ox - bx
            e1y = oy - by
            e2x = ax - bx
            e2y = ay - by
            h = abs(e1x * e2y - e2x * e1y)
            h = _div(h, math.sqrt(e2x * e2x + e2y * e2y))
            if h > wid:
                wid = h
                vx = ox
                vy = oy
                vnx = nx
                vny = ny
            nsx[i] = nx
            nsy[i] = ny
        else:
            nsx[i] = poly[i, 0]
            nsy[i] = poly[i, 1]
    length = 0.0
    p1 = 0
    p2 = 0
    for i in range(m - 1):
        for j in range(i + 1, m):
            d = math.sqrt((nsx[i] - nsx[j]) * (nsx[i] - nsx[j]) + (nsy[i] - nsy[j]) * (nsy[i] - nsy[j]))
            if d > length:
                length = d
                p1 = i
                p2 = j
    vp1x = vx + nsx[p1] - vnx
    vp1y = vy + nsy[p1] - vny
    vp2x = vx + nsx[p2] - vnx
    vp2y = vy + nsy[p2] - vny
    res[0] = (vp1x + vp2x + nsx[p1] + nsx[p2]) / 4.0
    res[1] = (vp1y + vp2y + nsy[p1] + nsy[p2]) / 4.0
    res[2] = poly[0, 2]
    if length > wid:
        res[5] = nsx[p2] - nsx[p1]
        res[6] = nsy[p2] - nsy[p1]
        res[3] = length
        res[4] = wid
    else:
        res[5] = vp1x - nsx[p1]
        res[6] = vp1y - nsy[p1]
        res[3] = wid
        res[4] = length
    return res[3] * res[4]


@njit(cache=True, nogil=True)
def reconstruct_polygon(poly, box):  # pragma: no cover - numba
    """ReconstructPolygon with ref_ct = (0, 0, 0): updates ``box`` = [cx, cy, cz, length, width, dx, dy, dz]
    from the minimum-area rectangle along a sensor-facing hull edge; then normalises the direction."""
    m = poly.shape[0]
    if m <= 0:
        return
    max_i = 0
    min_i = 0
    maxx = poly[0, 0]
    maxy = poly[0, 1]
    minx = poly[0, 0]
    miny = poly[0, 1]
    for i in range(1, m):
        rx = poly[i, 0]
        ry = poly[i, 1]
        if maxx * ry - rx * maxy < _EPS:
            maxx = rx
            maxy = ry
            max_i = i
        if minx * ry - rx * miny > _EPS:
            minx = rx
            miny = ry
            min_i = i
    lx = maxx - minx
    ly = maxy - miny
    total_len = 0.0
    max_dis = 0.0
    has_out = False
    i = min_i
    for _ in range(m):
        j = (i + 1) % m
        if j != min_i and j != max_i:
            rx = poly[j, 0] - minx
            ry = poly[j, 1] - miny
            if lx * ry - rx * ly < _EPS:
                d = math.sqrt((poly[j, 0] - poly[i, 0]) ** 2 + (poly[j, 1] - poly[i, 1]) ** 2)
                total_len += d
                if d - max_dis > _EPS:
                    max_dis = d
            else:
                has_out = True
        elif (i == min_i and j == max_i) or (i == max_i and j == min_i):
            # Apollo tests polygon[0] here (the outer 'p'), not an end of the chord
            rx = poly[0, 0] - minx
            ry = poly[0, 1] - miny
            if not (lx * ry - rx * ly < 0.0):
                has_out = True
        else:  # j is min_i or max_i
            rx = poly[i, 0] - minx
            ry = poly[i, 1] - miny
            if lx * ry - rx * ly < _EPS:
                d = math.sqrt((poly[j, 0] - poly[i, 0]) ** 2 + (poly[j, 1] - poly[i, 1]) ** 2)
                total_len += d
                if d > max_dis:
                    max_dis = d
            else:
                has_out = True
        i = j
    min_area = np.finfo(np.float64).max
    res = np.empty(7)
    i = min_i
    for _ in range(m):
        j = (i + 1) % m
        d = math.sqrt((poly[i, 0] - poly[j, 0]) ** 2 + (poly[i, 1] - poly[j, 1]) ** 2)
        if d < max_dis and (d / total_len) < 0.5:
            i = j
            continue
        use = False
        if j != min_i and j != max_i:
            rx = poly[j, 0] - minx
            ry = poly[j, 1] - miny
            use = lx * ry - rx * ly < 0.0
        elif (i == min_i and j == max_i) or (i == max_i and j == min_i):
            use = has_out
        else:
            rx = poly[i, 0] - minx
            ry = poly[i, 1] - miny
            use = lx * ry - rx * ly < 0.0
        if use:
            area = _area_along_edge(poly, i, res)
            if area < min_area:
                box[0] = res[0]
                box[1] = res[1]
                box[2] = res[2]
                box[3] = res[3]
                box[4] = res[4]
                box[5] = res[5]
                box[6] = res[6]
                box[7] = 0.0
                min_area = area
        i = j
    nrm = math.sqrt(box[5] * box[5] + box[6] * box[6] + box[7] * box[7])
    if nrm > 0.0:
        box[5] /= nrm
        box[6] /= nrm
        box[7] /= nrm


@njit(cache=True, nogil=True)
def build_boxes_kernel(x, y, z, offsets, boxes, heights, poly_out, poly_offsets):  # pragma: no cover - numba
    """MinBox for every cluster: points ``x, y, z`` (float32) of cluster k are ``[offsets[k], offsets[k+1])``.

    ``boxes`` (K, 8) float64 receives [cx, cy, cz, length, width, dx, dy, dz]; ``heights`` (K,); the hull
    polygons (x, y, z) go to ``poly_out`` (sum of sizes, 3) with ``poly_offsets`` (K + 1). Returns the number of
    polygon vertices written.
    """
    k_total = offsets.shape[0] - 1
    written = 0
    poly_offsets[0] = 0
    idx_buf = np.empty(x.shape[0] * 2 + 8, dtype=np.int64)
    for k in range(k_total):
        s = offsets[k]
        e = offsets[k + 1]
        n = e - s
        # ---- SetDefaultValue (float32, as Eigen::Vector4f)
        mn0 = x[s]
        mx0 = x[s]
        mn1 = y[s]
        mx1 = y[s]
        mn2 = z[s]
        mx2 = z[s]
        for i in range(s + 1, e):
            mn0 = min(mn0, x[i])
            mx0 = max(mx0, x[i])
            mn1 = min(mn1, y[i])
            mx1 = max(mx1, y[i])
            mn2 = min(mn2, z[i])
            mx2 = max(mx2, z[i])
        xmin_raw = mn0  # the bounds before SetDefaultValue's widening
        xmax_raw = mx0
        ymin_raw = mn1
        ymax_raw = mx1
        zmin_raw = mn2
        zmax_raw = mx2
        two = np.float32(2.0)
        c0 = (mn0 + mx0) / two
        c1 = (mn1 + mx1) / two
        c2 = (mn2 + mx2) / two
        half = _DEG_EPS / two
        if mx0 - mn0 < _DEG_EPS:
            mx0 = c0 + half
            mn0 = c0 - half
        if mx1 - mn1 < _DEG_EPS:
            mx1 = c1 + half
            mn1 = c1 - half
        if mx2 - mn2 < _DEG_EPS:
            mx2 = c2 + half
            mn2 = c2 - half
        length = np.float64(mx0 - mn0)
        width = np.float64(mx1 - mn1)
        if length - width < 0:
            tmp = np.float32(length)
            length = width
            width = np.float64(tmp)
            boxes[k, 5] = 0.0
            boxes[k, 6] = 1.0
        else:
            boxes[k, 5] = 1.0
            boxes[k, 6] = 0.0
        boxes[k, 7] = 0.0
        boxes[k, 3] = length
        boxes[k, 4] = width
        height = np.float64(mx2 - mn2)
        boxes[k, 0] = (mx0 + mn0) / two
        boxes[k, 1] = (mx1 + mn1) / two
        boxes[k, 2] = (mx2 + mn2) / two
        if n < 4:
            m = 4
            poly = np.empty((4, 3))
            poly[0, 0] = mn0
            poly[0, 1] = mn1
            poly[1, 0] = mx0
            poly[1, 1] = mn1
            poly[2, 0] = mx0
            poly[2, 1] = mx1
            poly[3, 0] = mn0
            poly[3, 1] = mx1
            for t in range(4):
                poly[t, 2] = mn2
        else:
            # ---- ComputePolygon2dxy
            height = np.float64(zmax_raw) - np.float64(zmin_raw)
            px = np.empty(n)
            py = np.empty(n)
            for i in range(n):
                px[i] = x[s + i]
                py[i] = y[s + i]
            # float differences promoted to double, as in Apollo
            dx = np.float64(x[s + 1] - x[s])
            dy = np.float64(y[s + 1] - y[s])
            idx = 2
            while idx < n:
                tdx = np.float64(x[s + idx] - x[s])
                tdy = np.float64(y[s + idx] - y[s])
                if dx * tdy - tdx * dy > _MIN_EPS:
                    break
                idx += 1
            if idx >= n:  # Apollo nudges p0 and p1 (stored back as float)
                px[0] = np.float64(np.float32(px[0] + _MIN_EPS))
                py[0] = np.float64(np.float32(py[0] + _MIN_EPS))
                px[1] = np.float64(np.float32(px[1] - _MIN_EPS))
            m = convex_hull_xy(px, py, idx_buf)
            if m >= 3:
                # PCL sorts hull vertices by decreasing atan2 around their (float) centroid: clockwise
                sx = np.float32(0.0)
                sy = np.float32(0.0)
                for t in range(m):
                    sx += np.float32(px[idx_buf[t]])
                    sy += np.float32(py[idx_buf[t]])
                cx = sx / np.float32(m)
                cy = sy / np.float32(m)
                ang = np.empty(m)
                for t in range(m):
                    ang[t] = math.atan2(
                        np.float32(np.float32(py[idx_buf[t]]) - cy),
                        np.float32(np.float32(px[idx_buf[t]]) - cx),
                    )
                order = np.argsort(-ang, kind="mergesort")
                poly = np.empty((m, 3))
                for t in range(m):
                    q = idx_buf[order[t]]
                    poly[t, 0] = px[q]
                    poly[t, 1] = py[q]
                    poly[t, 2] = zmin_raw
            else:  # qhull fails on collinear input: the box corners
                m = 4
                poly = np.empty((4, 3))
                poly[0, 0] = xmin_raw
                poly[0, 1] = ymin_raw
                poly[1, 0] = xmin_raw
                poly[1, 1] = ymax_raw
                poly[2, 0] = xmax_raw
                poly[2, 1] = ymax_raw
                poly[3, 0] = xmax_raw
                poly[3, 1] = ymin_raw
                for t in range(4):
                    poly[t, 2] = zmin_raw
        heights[k] = height
        # ---- ReconstructPolygon (ref_ct = 0)
        reconstruct_polygon(poly, boxes[k])
        for t in range(m):
            poly_out[written + t, 0] = poly[t, 0]
            poly_out[written + t, 1] = poly[t, 1]
            poly_out[written + t, 2] = poly[t, 2]
        written += m
        poly_offsets[k + 1] = written
    return written
