"""Numba kernels of Cluster2D (see :mod:`lidarmt.lidar.perception.apollo.cluster2d` for the algorithm and the
pure-Python reference the tests compare these with). Float arithmetic is float32, as in Apollo."""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def round_half_away(v):  # pragma: no cover - numba
    """std::round: halves away from zero."""
    if v >= 0:
        return math.floor(v + 0.5)
    return -math.floor(-v + 0.5)


@njit(cache=True, nogil=True)
def _find(parent, x):  # pragma: no cover - numba
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # full path compression
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True, nogil=True)
def _union(parent, rank, a, b):  # pragma: no cover - numba
    a = _find(parent, a)
    b = _find(parent, b)
    if a == b:
        return
    if rank[a] < rank[b]:
        parent[a] = b
    elif rank[b] < rank[a]:
        parent[b] = a
    else:
        parent[b] = a
        rank[a] += 1


@njit(cache=True, nogil=True)
def point_grid_kernel(x, y, range_, inv_res, rows, cols, point2grid, point_num):  # pragma: no cover
    """Map ROI points to cells (no height test); count points per cell. float32 F2I like the features."""
    for i in range(x.shape[0]):
        fr = (range_ - x[i]) * inv_res
        fc = (range_ - y[i]) * inv_res
        if fr >= 0.0 and fr < rows and fc >= 0.0 and fc < cols:
            g = int(math.floor(fr)) * cols + int(math.floor(fc))
            point2grid[i] = g
            point_num[g] += 1
        else:
            point2grid[i] = -1


@njit(cache=True, nogil=True)
def _centre(g, cols, rows, inst_row, inst_col, scale):  # pragma: no cover - numba
    """The cell a cell's instance offset points at: std::round(row + dr * scale), clamped (float32 sums)."""
    row = g // cols
    col = g - row * cols
    cr = np.float32(row) + inst_row[g] * scale
    cc = np.float32(col) + inst_col[g] * scale
    # DEVIATION: a non-finite offset (a diverged network) makes a cell its own centre; in Apollo it is undefined
    if math.isfinite(cr):
        r = int(round_half_away(cr)) if abs(cr) < 1e9 else (rows if cr > 0 else -1)
    else:
        r = row
    if math.isfinite(cc):
        c = int(round_half_away(cc)) if abs(cc) < 1e9 else (cols if cc > 0 else -1)
    else:
        c = col
    r = min(max(r, 0), rows - 1)
    c = min(max(c, 0), cols - 1)
    return r * cols + c


@njit(cache=True, nogil=True)
def cluster_kernel(
    category, inst_row, inst_col, point_num, objectness, use_all_grids, scale, id_img
):  # pragma: no cover
    """Build the center graph, traverse it, union adjacent centres and label obstacles in row-major order.

    Inputs are flat (H*W) float32 arrays except ``point_num`` (int32); ``id_img`` (int32, H*W) receives the
    obstacle id of each object cell (-1 elsewhere). Returns the number of obstacles.

    Centre pointers are computed only for the cells a traversal visits, and the union pass runs over the
    centres found (in row-major order): the partition, and so every obstacle id, is the same as with Apollo's
    full passes over the grid.
    """
    n = category.shape[0]
    rows = int(math.sqrt(n) + 0.5)
    cols = n // rows
    parent = np.arange(n).astype(np.int32)
    rank = np.zeros(n, dtype=np.int32)
    is_center = np.zeros(n, dtype=np.bool_)
    traversed = np.zeros(n, dtype=np.int8)
    objects = np.empty(n, dtype=np.int32)  # object cells in row-major order
    n_obj = 0
    for g in range(n):
        id_img[g] = -1
        if category[g] >= objectness and (use_all_grids or point_num[g] > 0):
            objects[n_obj] = g
            n_obj += 1
    if n_obj == 0:
        return 0
    # traverse from every object node, in row-major order
    stack = np.empty(n, dtype=np.int32)
    centres = np.empty(n, dtype=np.int32)
    n_centres = 0
    for t0 in range(n_obj):
        g0 = objects[t0]
        if traversed[g0] != 0:
            continue
        top = 0
        x = g0
        while traversed[x] == 0:
            stack[top] = x
            top += 1
            traversed[x] = 2
            x = _centre(x, cols, rows, inst_row, inst_col, scale)
        if traversed[x] == 2:  # a cycle: every node from x to the end of the path is a centre
            i = top - 1
            while i >= 0 and stack[i] != x:
                if not is_center[stack[i]]:
                    is_center[stack[i]] = True
                    centres[n_centres] = stack[i]
                    n_centres += 1
                i -= 1
            if not is_center[x]:
                is_center[x] = True
                centres[n_centres] = x
                n_centres += 1
        px = parent[x]  # unchanged by the loop below even when x is on the path (it gets its own parent)
        for i in range(top):
            y = stack[i]
            traversed[y] = 1
            parent[y] = px
    # union adjacent centres (4-neighbourhood); the order of unions does not change the partition
    for t in range(n_centres):
        g = centres[t]
        row = g // cols
        col = g - row * cols
        if row > 0 and is_center[g - cols]:
            _union(parent, rank, g, g - cols)
        if col > 0 and is_center[g - 1]:
            _union(parent, rank, g, g - 1)
        if col < cols - 1 and is_center[g + 1]:
            _union(parent, rank, g, g + 1)
        if row < rows - 1 and is_center[g + cols]:
            _union(parent, rank, g, g + cols)
    # obstacle ids in row-major order of their first object cell
    root_id = np.full(n, -1, dtype=np.int32)
    count = 0
    for t in range(n_obj):
        g = objects[t]
        r = _find(parent, g)
        if root_id[r] < 0:
            root_id[r] = count
            count += 1
        id_img[g] = root_id[r]
    return count


@njit(cache=True, nogil=True)
def filter_classify_kernel(
    id_img, num_obs, confidence, height, class_score, log_count, filter_noise, filter_thresh, enable_thresh
):  # pragma: no cover - numba
    """Per obstacle: mean confidence, mean height, mean of the 5 class scores over its cells (float32 sums in
    row-major cell order), after the optional 3.0 noise filter (which may set cells of ``id_img`` to -1).

    Returns (score (K,), height (K,), class_probs (K, 5), cells (K,)) with K = ``num_obs``."""
    n = id_img.shape[0]
    if filter_noise:
        max_cnt = np.zeros(num_obs, dtype=np.float32)
        for g in range(n):
            o = id_img[g]
            if o >= 0:
                v = np.float32(math.exp(log_count[g]))
                if v > max_cnt[o]:
                    max_cnt[o] = v
        for g in range(n):
            o = id_img[g]
            if o >= 0 and max_cnt[o] >= enable_thresh and np.float32(math.exp(log_count[g])) < filter_thresh:
                id_img[g] = -1
    score = np.zeros(num_obs, dtype=np.float32)
    hgt = np.zeros(num_obs, dtype=np.float32)
    probs = np.zeros((num_obs, 5), dtype=np.float32)
    cells = np.zeros(num_obs, dtype=np.int32)
    for g in range(n):
        o = id_img[g]
        if o < 0:
            continue
        score[o] += confidence[g]
        hgt[o] += height[g]
        for k in range(5):
            probs[o, k] += class_score[k, g]
        cells[o] += 1
    for o in range(num_obs):
        if cells[o] > 0:
            c = np.float32(cells[o])
            score[o] = score[o] / c
            hgt[o] = hgt[o] / c
            for k in range(5):
                probs[o, k] = probs[o, k] / c
    return score, hgt, probs, cells


@njit(cache=True, nogil=True)
def assign_points_kernel(
    point2grid, z, id_img, score, height, confidence_thresh, height_thresh, point_obs
):  # pragma: no cover
    """GetObjects' point loop: each ROI point joins its cell's obstacle if the obstacle's score reaches the
    confidence threshold and (height_thresh < 0 or z <= height + height_thresh). Returns points per obstacle."""
    counts = np.zeros(score.shape[0], dtype=np.int64)
    for i in range(point2grid.shape[0]):
        point_obs[i] = -1
        g = point2grid[i]
        if g < 0:
            continue
        o = id_img[g]
        if o < 0 or score[o] < confidence_thresh:
            continue
        if height_thresh < 0 or z[i] <= height[o] + height_thresh:
            point_obs[i] = o
            counts[o] += 1
    return counts
