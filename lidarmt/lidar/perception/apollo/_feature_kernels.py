"""Numba kernel of the cnnseg feature generator (see :mod:`lidarmt.lidar.perception.apollo.features`).

All arithmetic is float32, in point order, as Apollo's C++ does it, so that the kernel and the NumPy reference
(:func:`lidarmt.lidar.perception.apollo.features.compute_features_reference`) agree bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def feature_kernel(
    x, y, z, intensity, sel, use_sel, range_, inv_res, min_h, max_h, log_table, out
):  # pragma: no cover
    """Fill channels 0, 1, 2, 4, 5, 7 of ``out`` (8, H, W) float32, which must be zero on entry (channels 3 and 6
    are not touched).

    ``range_``, ``inv_res``, ``min_h``, ``max_h`` are float32 scalars. ``sel`` (int64) lists the points to use
    when ``use_sel``; otherwise every point is used. Non-finite points are skipped (Apollo drops them on input).
    Only the cells that receive points are finalised: an empty cell keeps its zeros, which is what Apollo's
    finalisation leaves there (max height reset to 0, log(1 + 0) = 0).
    """
    rows = out.shape[1]
    cols = out.shape[2]
    maxh = out[0]
    meanh = out[1]
    cnt = out[2]
    top = out[4]
    meani = out[5]
    nonempty = out[7]
    n = sel.shape[0] if use_sel else x.shape[0]
    touched = np.empty(n, dtype=np.int64)
    n_touched = 0
    c255 = np.float32(255.0)
    for k in range(n):
        i = sel[k] if use_sel else k
        px = x[i]
        py = y[i]
        pz = z[i]
        pi = intensity[i]
        if not (math.isfinite(px) and math.isfinite(py) and math.isfinite(pz) and math.isfinite(pi)):
            continue
        # row from x, column from y, both flipped (Apollo's F2I: floor((range - v) * inv_res)), float32
        fr = (range_ - px) * inv_res
        fc = (range_ - py) * inv_res
        if not (fr >= 0.0 and fr < rows and fc >= 0.0 and fc < cols):
            continue
        row = int(math.floor(fr))
        col = int(math.floor(fc))
        if pz <= min_h or pz >= max_h:
            continue
        pin = pi / c255
        # Apollo starts the max at min_height and updates on a strictly greater z; every kept z > min_height,
        # so the first point of a cell always sets it: the same as testing the count
        if cnt[row, col] == 0.0:
            touched[n_touched] = row * cols + col
            n_touched += 1
            maxh[row, col] = pz
            top[row, col] = pin
        elif maxh[row, col] < pz:
            maxh[row, col] = pz
            top[row, col] = pin
        meanh[row, col] += pz
        meani[row, col] += pin
        cnt[row, col] += np.float32(1.0)
    for t in range(n_touched):
        g = touched[t]
        r = g // cols
        c = g - r * cols
        cc = cnt[r, c]
        meanh[r, c] = meanh[r, c] / cc
        meani[r, c] = meani[r, c] / cc
        nonempty[r, c] = 1.0
        ic = int(cc)
        if ic < log_table.shape[0]:
            cnt[r, c] = log_table[ic]
        else:
            cnt[r, c] = np.float32(math.log(1.0 + ic))
