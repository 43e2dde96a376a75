"""Apollo 2.5/3.0's LowObjectFilter: drop segmented objects that are low and flat (ground left in an object).

Between segmentation and the MinBox builder, Apollo 2.5+ (``LowObjectFilter``, thresholds from
``low_object_filter.config``: ``object_height_threshold`` 0.10 m and ``object_position_height_threshold``
-1.6 m in the LiDAR frame) scans each object's points once for its lowest and highest z and erases the object
when both

    max_z - min_z < object_height_threshold   and   max_z < object_position_height_threshold

hold; the remaining objects keep their order. The scan is written as Apollo wrote it: the extremes start at
``min = 100``, ``max = -100``, and for each point in the object's cloud order a point that lowers the minimum
is *not* also compared with the maximum (an ``if`` / ``else if``). So the first point only ever sets the
minimum, and an object whose z never rises above a previous minimum keeps ``max = -100`` and is erased
whatever its height: a point order that descends in z (for instance a pole whose points are listed top
down) hides the object's height from the filter. lidarmt's Cluster2D lists each object's points in ascending
ROI-cloud order, as Apollo's cloud is built, so the quirk is reproduced point for point.

:func:`low_object_keep` is a numba kernel; :func:`low_object_keep_ref` is its plain-Python twin (the tests
check one against the other).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["low_object_keep", "low_object_keep_ref", "apollo_min_max"]

#: Apollo's initial extremes of the scan (float in Apollo: -100 / 100)
_MAX0, _MIN0 = np.float32(-100.0), np.float32(100.0)


def apollo_min_max(z: np.ndarray) -> tuple[float, float]:
    """(min, max) of one object's z values as Apollo's scan finds them (see the module docstring)."""
    lo, hi = _MIN0, _MAX0
    for v in np.asarray(z, dtype=np.float32).tolist():
        if v < lo:
            lo = np.float32(v)
        elif v > hi:
            hi = np.float32(v)
    return float(lo), float(hi)


@njit(cache=True)
def _keep_kernel(z, offsets, height_thresh, position_thresh):  # pragma: no cover - numba
    k = offsets.shape[0] - 1
    keep = np.ones(k, dtype=np.bool_)
    for j in range(k):
        lo = np.float32(100.0)
        hi = np.float32(-100.0)
        for i in range(offsets[j], offsets[j + 1]):
            v = z[i]
            if v < lo:
                lo = v
            elif v > hi:
                hi = v
        if (hi - lo) < height_thresh and hi < position_thresh:
            keep[j] = False
    return keep


def low_object_keep(z: np.ndarray, offsets: np.ndarray, *, height_threshold: float = 0.10,
                    position_threshold: float = -1.6) -> np.ndarray:
    """Which of K objects survive the LowObjectFilter: bool (K,).

    ``z`` holds the objects' point heights (float32, LiDAR frame) grouped by object in their cloud order,
    object ``j`` being ``z[offsets[j]:offsets[j + 1]]`` (``offsets`` has K + 1 entries)."""
    z = np.ascontiguousarray(z, dtype=np.float32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    # Apollo compares float differences against double thresholds: compare in float32 arithmetic first,
    # then against the thresholds as given (float64), exactly like float -> double promotion in C++
    return _keep_kernel(z, offsets, np.float64(height_threshold), np.float64(position_threshold))


def low_object_keep_ref(z: np.ndarray, offsets: np.ndarray, *, height_threshold: float = 0.10,
                        position_threshold: float = -1.6) -> np.ndarray:
    """Plain-Python twin of :func:`low_object_keep`."""
    z = np.asarray(z, dtype=np.float32)
    out = []
    for j in range(len(offsets) - 1):
        lo, hi = apollo_min_max(z[offsets[j]:offsets[j + 1]])
        span = float(np.float32(hi) - np.float32(lo))
        out.append(not (span < height_threshold and hi < position_threshold))
    return np.array(out, dtype=bool)
