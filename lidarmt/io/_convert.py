"""numba kernels for :func:`lidarmt.io.cloud.to_points`: one pass over the point records instead of one per field.

A 32-byte Apollo point record holds x, y, z, intensity and time in one cache line; copying field by field walks
the whole 4 MB cloud five times. These kernels read each record once and count non-finite points on the way.
numba compiles one specialisation per input type (float32/float64 coordinates; uint8/uint16/uint32/float
intensities; float or integer times). :func:`lidarmt.io.cloud.to_points_reference` is the NumPy version the tests
compare against.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def copy_xyzi(x, y, z, inten, ox, oy, oz, oi) -> int:
    """Copy coordinates and intensity (cast to float32); returns how many points have a non-finite value."""
    bad = 0
    for k in range(x.shape[0]):
        a = np.float32(x[k])
        b = np.float32(y[k])
        c = np.float32(z[k])
        d = np.float32(inten[k])
        ox[k] = a
        oy[k] = b
        oz[k] = c
        oi[k] = d
        if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c) and np.isfinite(d)):
            bad += 1
    return bad


@njit(cache=True, nogil=True)
def copy_xyz_zero_i(x, y, z, ox, oy, oz, oi) -> int:
    bad = 0
    for k in range(x.shape[0]):
        a = np.float32(x[k])
        b = np.float32(y[k])
        c = np.float32(z[k])
        ox[k] = a
        oy[k] = b
        oz[k] = c
        oi[k] = np.float32(0.0)
        if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
            bad += 1
    return bad


@njit(cache=True, nogil=True)
def copy_time(t, ot, scale, offset) -> None:
    """ot = t * scale + offset, in float64."""
    for k in range(t.shape[0]):
        ot[k] = np.float64(t[k]) * scale + offset
