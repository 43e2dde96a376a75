"""Numba kernels of object insertion (ray casting on the sensor's beam grid), with NumPy references.

The HDL-64E's beams form a grid of 64 rings x ``n_bins`` azimuth bins (2083 firings per turn, 0.173 deg). Each
point falls in one cell (its ring, its azimuth bin); a beam returns its nearest surface.

* :func:`thin_to_beams`: of the inserted object's points, keep per cell only the nearest (the object's own points
  thinned to the beams the sensor fires);
* :func:`occluded`: a source point is hidden when the inserted object returns, in its cell or an azimuth
  neighbour of it on the same ring, a range shorter than the source point's by more than ``margin``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def thin_to_beams(ring: np.ndarray, abin: np.ndarray, rng: np.ndarray, n_rings: int, n_bins: int) -> np.ndarray:
    """Bool per point: it is the nearest point of its (ring, azimuth bin) cell (ties: the first)."""
    best = np.full((n_rings, n_bins), -1, dtype=np.int64)
    for i in range(ring.shape[0]):
        r = ring[i]
        b = abin[i]
        j = best[r, b]
        if j < 0 or rng[i] < rng[j]:
            best[r, b] = i
    keep = np.zeros(ring.shape[0], dtype=np.bool_)
    for r in range(n_rings):
        for b in range(n_bins):
            if best[r, b] >= 0:
                keep[best[r, b]] = True
    return keep


def thin_to_beams_reference(ring, abin, rng, n_rings, n_bins) -> np.ndarray:
    """NumPy reference of :func:`thin_to_beams`."""
    keep = np.zeros(len(ring), dtype=bool)
    if len(ring) == 0:
        return keep
    cell = ring.astype(np.int64) * n_bins + abin.astype(np.int64)
    order = np.lexsort((np.arange(len(ring)), rng, cell))
    first = np.ones(len(order), dtype=bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    keep[order[first]] = True
    return keep


@njit(cache=True)
def occluded(src_ring: np.ndarray, src_bin: np.ndarray, src_rng: np.ndarray, obj_ring: np.ndarray,
             obj_bin: np.ndarray, obj_rng: np.ndarray, n_rings: int, n_bins: int, spread: int,
             margin: float) -> np.ndarray:
    """Bool per source point: the object returns nearer in its ring within ``spread`` azimuth bins."""
    near = np.full((n_rings, n_bins), np.inf)
    for i in range(obj_ring.shape[0]):
        r = obj_ring[i]
        for d in range(-spread, spread + 1):
            b = (obj_bin[i] + d) % n_bins
            if obj_rng[i] < near[r, b]:
                near[r, b] = obj_rng[i]
    out = np.zeros(src_ring.shape[0], dtype=np.bool_)
    for i in range(src_ring.shape[0]):
        out[i] = near[src_ring[i], src_bin[i]] < src_rng[i] - margin
    return out


def occluded_reference(src_ring, src_bin, src_rng, obj_ring, obj_bin, obj_rng, n_rings, n_bins, spread, margin):
    """NumPy reference of :func:`occluded`."""
    near = np.full((n_rings, n_bins), np.inf)
    for d in range(-spread, spread + 1):
        np.minimum.at(near, (obj_ring.astype(np.int64), (obj_bin.astype(np.int64) + d) % n_bins), obj_rng)
    return near[src_ring.astype(np.int64), src_bin.astype(np.int64)] < src_rng - margin
