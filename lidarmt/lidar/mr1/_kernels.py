"""Numba kernels of the injector, with plain NumPy references the tests cross-check them against.

The random numbers come from a :class:`numpy.random.Generator` (so a verdict is reproducible from its seed
tuple on any machine); the kernels only map uniform variates in [0, 1) to points: the horizontal position in
the sampling region (a disk of radius ``size`` about the sensor, or the square of half-side ``size``), z and
intensity uniform between the given bounds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DISK = 0
SQUARE = 1


@njit(cache=True)
def uniform_to_points(u: np.ndarray, shape: int, size: float, zmin: float, zmax: float, imin: float,
                      imax: float) -> np.ndarray:
    """Map (N, 4) uniforms to (N, 4) float32 rows x, y, z, intensity (see module docstring)."""
    n = u.shape[0]
    out = np.empty((n, 4), dtype=np.float32)
    two_pi = 2.0 * np.pi
    for k in range(n):
        if shape == DISK:
            r = size * np.sqrt(u[k, 0])
            t = two_pi * u[k, 1]
            x = r * np.cos(t)
            y = r * np.sin(t)
        else:
            x = size * (2.0 * u[k, 0] - 1.0)
            y = size * (2.0 * u[k, 1] - 1.0)
        out[k, 0] = x
        out[k, 1] = y
        out[k, 2] = zmin + u[k, 2] * (zmax - zmin)
        out[k, 3] = imin + u[k, 3] * (imax - imin)
    return out


def uniform_to_points_numpy(u: np.ndarray, shape: int, size: float, zmin: float, zmax: float, imin: float,
                            imax: float) -> np.ndarray:
    """NumPy reference of :func:`uniform_to_points`."""
    u = np.asarray(u, dtype=np.float64)
    out = np.empty((len(u), 4), dtype=np.float32)
    if shape == DISK:
        r = size * np.sqrt(u[:, 0])
        t = 2.0 * np.pi * u[:, 1]
        out[:, 0] = r * np.cos(t)
        out[:, 1] = r * np.sin(t)
    else:
        out[:, 0] = size * (2.0 * u[:, 0] - 1.0)
        out[:, 1] = size * (2.0 * u[:, 1] - 1.0)
    out[:, 2] = zmin + u[:, 2] * (zmax - zmin)
    out[:, 3] = imin + u[:, 3] * (imax - imin)
    return out
