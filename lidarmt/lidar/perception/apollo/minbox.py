"""MinBox object builder (apollo-lop-facts.md §5): convex hull, then the minimum-area box along a hull edge
that faces the sensor.

Per cluster (sensor frame, ``ObjectBuilderOptions.ref_center`` never set, so the reference is the origin):

* ``SetDefaultValue``: axis-aligned float32 extents, each widened to at least 1e-3; length = x-extent and
  width = y-extent, swapped (direction (0, 1, 0)) when length < width; centre = box centre; fewer than 4 points:
  the polygon is the 4 box corners at min z.
* ``ComputePolygon2dxy`` (>= 4 points): height = max z - min z; 2-D convex hull of the points (collinear input:
  the box corners, as when qhull fails), its vertices sorted by decreasing atan2 about their centroid (clockwise).
* ``ReconstructPolygon``: extreme-bearing vertices from the origin; sensor-facing edges are candidates; for each
  kept edge ``ComputeAreaAlongOneEdge`` builds the rectangle (width = farthest vertex from the edge line, length
  = longest span of the projections) and the smallest area wins; centre z = min z; direction normalised.

DEVIATION: the hull is Andrew's monotone chain (numba) rather than qhull (speed: no per-object qhull set-up); on non-degenerate input both give the same vertex
set (tests check it against ``scipy.spatial.ConvexHull``, which is qhull).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Box", "build_box", "build_boxes", "build_boxes_arrays"]


@dataclass(slots=True)
class Box:
    """One MinBox result (sensor frame)."""

    center: np.ndarray  # (3,) centre of the bottom face (z = min z) or the SetDefaultValue box centre
    length: float
    width: float
    height: float
    direction: np.ndarray  # (3,) unit vector along the length
    polygon: np.ndarray  # (K, 3) hull at z = min z, clockwise


def build_boxes_arrays(
    xyz: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MinBox for many clusters as arrays: ``boxes`` (K, 8) = [cx, cy, cz, length, width, dx, dy, dz],
    ``heights`` (K,), ``polygons`` (V, 3) and ``polygon_offsets`` (K + 1) (cluster k's hull is
    ``polygons[polygon_offsets[k]:polygon_offsets[k+1]]``). See :func:`build_boxes`."""
    from lidarmt.lidar.perception.apollo._minbox_kernels import build_boxes_kernel

    xyz = np.asarray(xyz)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    k = len(offsets) - 1
    if k <= 0:
        return np.zeros((0, 8)), np.zeros(0), np.zeros((0, 3)), np.zeros(1, dtype=np.int64)
    sizes = np.diff(offsets)
    if (sizes <= 0).any():
        raise ValueError("every cluster needs at least one point")
    x = np.ascontiguousarray(xyz[:, 0], dtype=np.float32)
    y = np.ascontiguousarray(xyz[:, 1], dtype=np.float32)
    z = np.ascontiguousarray(xyz[:, 2], dtype=np.float32)
    boxes = np.zeros((k, 8))
    heights = np.zeros(k)
    poly = np.zeros((int(np.maximum(sizes, 4).sum()), 3))
    poly_off = np.zeros(k + 1, dtype=np.int64)
    written = build_boxes_kernel(x, y, z, offsets, boxes, heights, poly, poly_off)
    return boxes, heights, poly[:written], poly_off


def build_boxes(xyz: np.ndarray, offsets: np.ndarray) -> list[Box]:
    """MinBox for many clusters at once: the points of cluster k are ``xyz[offsets[k]:offsets[k+1]]``
    (an (N, 3) array, used as float32 as Apollo's clouds are). Clusters must not be empty."""
    boxes, heights, poly, poly_off = build_boxes_arrays(xyz, offsets)
    return [
        Box(
            center=boxes[i, 0:3].copy(),
            length=float(boxes[i, 3]),
            width=float(boxes[i, 4]),
            height=float(heights[i]),
            direction=boxes[i, 5:8].copy(),
            polygon=poly[poly_off[i] : poly_off[i + 1]].copy(),
        )
        for i in range(len(boxes))
    ]


def build_box(xyz: np.ndarray) -> Box:
    """MinBox of one cluster given as (N, 3)."""
    xyz = np.asarray(xyz)
    return build_boxes(xyz, np.array([0, len(xyz)]))[0]
