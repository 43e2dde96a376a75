"""Cluster2D: Apollo's post-processing of the cnnseg outputs into obstacles (apollo-lop-facts.md §3.4).

1. ROI points are mapped to cells with the feature formula (no height test); ``point_num`` counts them.
2. A cell is an *object* when ``(use_all_grids or point_num > 0) and category_score >= objectness_thresh``.
   With ``use_all_grids`` (Apollo's setting) cells holding only points outside the ROI can be objects.
3. Every cell points at a centre cell ``round(row + instance_row * scale), round(col + instance_col * scale)``
   (``std::round``: halves away from zero; clamped to the grid; scale = grid / (2 range)).
4. From every untraversed object cell, follow centre pointers marking cells "in progress" until reaching a cell
   in progress (a cycle: those cells become *centres*) or done; every visited cell gets the stop cell's parent.
5. Centres are united with their 4-neighbour centres (union-find, union by rank, path compression).
6. Object cells are labelled in row-major order: each new root gets the next obstacle id.
7. Each obstacle's score and height are the float32 means of ``confidence_score`` and ``height_pt`` over **all**
   its cells, including cells without ROI points (Apollo 3.0 FilterNoise, optional, drops low-count cells first).
8. Class: the 5 class scores averaged over the cells; argmax (first max wins) is the meta type.
9. Each ROI point, in order, joins its cell's obstacle if that obstacle's score >= confidence_thresh and
   ``z <= height + height_thresh`` (unless height_thresh < 0); obstacles with >= min_pts_num points are emitted.

:func:`cluster2d` runs the numba kernels; :func:`cluster2d_reference` is a literal pure-Python transcription
(node objects, recursion-free traversal), slow, for the tests on small grids.
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass

import numpy as np

from lidarmt.types import MetaType

__all__ = ["Cluster", "ClusterOutput", "cluster2d", "cluster2d_reference", "type_probs"]


@dataclass(slots=True)
class Cluster:
    """One emitted obstacle of Cluster2D: its ROI points (positions in the ROI point list), score, class."""

    points: np.ndarray  # int64 positions into the ROI point arrays given to cluster2d, ascending
    score: float
    height: float
    meta_probs: np.ndarray  # (5,) float32 mean class scores (UNKNOWN, SMALLMOT, BIGMOT, NONMOT, PEDESTRIAN)
    obstacle_id: int  # Cluster2D's id (row-major order of the first cell)
    num_cells: int

    @property
    def meta_type(self) -> MetaType:
        # argmax: the first maximum wins, as std::max_element
        return MetaType(int(np.argmax(self.meta_probs)))

    @property
    def type_probs(self) -> np.ndarray:
        return type_probs(self.meta_probs)


class ClusterOutput:
    """Everything Cluster2D produced for one frame: the emitted obstacles as arrays (and, on demand, as
    :class:`Cluster` objects) plus the intermediate grids.

    Emitted obstacle j (in obstacle-id order) is Cluster2D obstacle ``kept[j]``; its ROI point positions are
    ``members[offsets[j]:offsets[j+1]]`` (ascending).
    """

    __slots__ = (
        "_clusters", "cells", "heights", "id_img", "kept", "members", "meta_probs", "num_obstacles",
        "offsets", "point_obstacle", "scores",
    )  # fmt: skip

    def __init__(
        self,
        *,
        id_img: np.ndarray,
        num_obstacles: int,
        scores: np.ndarray,
        heights: np.ndarray,
        meta_probs: np.ndarray,
        cells: np.ndarray,
        point_obstacle: np.ndarray,
        kept: np.ndarray,
        members: np.ndarray,
        offsets: np.ndarray,
    ) -> None:
        self.id_img = id_img  # (H, W) int32 obstacle id of each object cell, -1 elsewhere
        self.num_obstacles = num_obstacles  # before the confidence / height / min_pts filters
        self.scores = scores  # (num_obstacles,) float32 mean confidence
        self.heights = heights  # (num_obstacles,) float32 mean height
        self.meta_probs = meta_probs  # (num_obstacles, 5) float32 mean class scores
        self.cells = cells  # (num_obstacles,) cells per obstacle
        self.point_obstacle = point_obstacle  # per ROI point: the obstacle it joined, -1 = none
        self.kept = kept  # (K,) ids of the emitted obstacles
        self.members = members  # int64 ROI point positions of the emitted obstacles, grouped
        self.offsets = offsets  # (K + 1,)
        self._clusters: list[Cluster] | None = None

    @property
    def clusters(self) -> list[Cluster]:
        """The emitted obstacles as :class:`Cluster` objects (built on first use)."""
        if self._clusters is None:
            self._clusters = [
                Cluster(
                    self.members[self.offsets[j] : self.offsets[j + 1]],
                    float(self.scores[o]),
                    float(self.heights[o]),
                    self.meta_probs[o].copy(),
                    int(o),
                    int(self.cells[o]),
                )
                for j, o in enumerate(self.kept.tolist())
            ]
        return self._clusters


def _group(point_obs: np.ndarray, counts: np.ndarray, min_pts_num: int) -> tuple[np.ndarray, ...]:
    """Emitted obstacle ids (enough points) and their points grouped by obstacle, ascending within each."""
    # DEVIATION: min_pts_num <= 0 would let Apollo emit obstacles without points (MinBox on an empty cloud is
    # undefined there); we never emit an obstacle without points.
    kept = np.flatnonzero(counts >= max(min_pts_num, 1)).astype(np.int64)
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    if len(kept) == 0:
        return kept, np.zeros(0, np.int64), offsets
    emitted = np.zeros(len(counts), dtype=bool)
    emitted[kept] = True
    pos = np.flatnonzero((point_obs >= 0) & emitted[np.maximum(point_obs, 0)])
    members = pos[np.argsort(point_obs[pos], kind="stable")].astype(np.int64)
    np.cumsum(counts[kept], out=offsets[1:])
    return kept, members, offsets


def type_probs(meta_probs: np.ndarray) -> np.ndarray:
    """Apollo's 6 object-type probabilities [UNKNOWN, UNKNOWN_MOVABLE, UNKNOWN_UNMOVABLE, PEDESTRIAN, BICYCLE,
    VEHICLE] from the 5 meta-type means: [unknown, 0, 0, pedestrian, nonmot, smallmot + bigmot]."""
    m = np.asarray(meta_probs, dtype=np.float32)
    return np.array([m[0], 0.0, 0.0, m[4], m[3], m[1] + m[2]], dtype=np.float32)


def _f32(v: float) -> np.float32:
    return np.float32(v)


def cluster2d(
    heads: dict[str, np.ndarray],
    roi_x: np.ndarray,
    roi_y: np.ndarray,
    roi_z: np.ndarray,
    *,
    range: float = 60.0,  # noqa: A002
    objectness_thresh: float = 0.5,
    confidence_thresh: float = 0.1,
    height_thresh: float = 0.5,
    min_pts_num: int = 3,
    use_all_grids: bool = True,
    filter_noise: bool = False,
    filter_thresh: float = 30.0,
    enable_filter_thresh: float = 700.0,
    log_count: np.ndarray | None = None,
) -> ClusterOutput:
    """Cluster2D on the CNN outputs ``heads`` (as :class:`CnnRunner` returns them: ``category_score`` (H, W),
    ``instance_pt`` (2, H, W), ``confidence_score`` (H, W), ``class_score`` (5, H, W), ``height_pt`` (H, W))
    for the ROI points given by their float32 coordinates (sensor frame). ``log_count`` (H, W, the feature
    channel 2) is needed only with ``filter_noise``."""
    import lidarmt.lidar.perception.apollo._cluster_kernels as K

    category = np.ascontiguousarray(heads["category_score"], dtype=np.float32)
    rows, cols = category.shape
    n = rows * cols
    inst = np.ascontiguousarray(heads["instance_pt"], dtype=np.float32).reshape(2, n)
    conf = np.ascontiguousarray(heads["confidence_score"], dtype=np.float32).reshape(n)
    hgt = np.ascontiguousarray(heads["height_pt"], dtype=np.float32).reshape(n)
    cls = np.ascontiguousarray(heads["class_score"], dtype=np.float32).reshape(5, n)
    x = np.ascontiguousarray(roi_x, dtype=np.float32)
    y = np.ascontiguousarray(roi_y, dtype=np.float32)
    z = np.ascontiguousarray(roi_z, dtype=np.float32)
    scale = _f32(0.5 * rows / range)
    point2grid = np.empty(len(x), dtype=np.int64)
    point_num = np.zeros(n, dtype=np.int32)
    K.point_grid_kernel(x, y, _f32(range), scale, rows, cols, point2grid, point_num)
    id_img = np.empty(n, dtype=np.int32)
    num = K.cluster_kernel(
        category.reshape(n),
        inst[0],
        inst[1],
        point_num,
        _f32(objectness_thresh),
        bool(use_all_grids),
        scale,
        id_img,
    )
    # DEVIATION (small, documented): Apollo 3.0 passes the count channel to Filter(); the fact sheet says cells
    # with (1 + count) < filter_thresh are removed from obstacles whose max (1 + count) >= enable_filter_thresh,
    # not exactly where. We remove them before the score/height/class averages and from id_img (so their
    # points are not assigned). Off by default, as in Apollo 2.x.
    if filter_noise and log_count is None:
        raise ValueError("filter_noise needs log_count (feature channel 2)")
    lc = (
        np.ascontiguousarray(log_count, dtype=np.float32).reshape(n)
        if filter_noise
        else np.zeros(1, np.float32)
    )
    score, height, probs, _cells = K.filter_classify_kernel(
        id_img, num, conf, hgt, cls, lc, bool(filter_noise), _f32(filter_thresh), _f32(enable_filter_thresh)
    )
    point_obs = np.empty(len(x), dtype=np.int32)
    counts = K.assign_points_kernel(
        point2grid, z, id_img, score, height, _f32(confidence_thresh), _f32(height_thresh), point_obs
    )
    kept, members, offsets = _group(point_obs, counts, min_pts_num)
    return ClusterOutput(
        id_img=id_img.reshape(rows, cols),
        num_obstacles=int(num),
        scores=score,
        heights=height,
        meta_probs=probs,
        cells=_cells,
        point_obstacle=point_obs,
        kept=kept,
        members=members,
        offsets=offsets,
    )


# ------------------------------------------------------------------------------------------ reference


class _Node:
    __slots__ = (
        "center",
        "is_center",
        "is_object",
        "obstacle_id",
        "parent",
        "point_num",
        "rank",
        "traversed",
    )

    def __init__(self) -> None:
        self.parent: _Node = self
        self.rank = 0
        self.traversed = 0
        self.is_center = False
        self.is_object = False
        self.point_num = 0
        self.obstacle_id = -1
        self.center: _Node = self


def _find(x: _Node) -> _Node:
    path = []
    while x.parent is not x:
        path.append(x)
        x = x.parent
    for p in path:
        p.parent = x
    return x


def _union(a: _Node, b: _Node) -> None:
    a, b = _find(a), _find(b)
    if a is b:
        return
    if a.rank < b.rank:
        a.parent = b
    elif b.rank < a.rank:
        b.parent = a
    else:
        b.parent = a
        a.rank += 1


def _std_round(v: float) -> int:
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def cluster2d_reference(
    heads: dict[str, np.ndarray],
    roi_x: np.ndarray,
    roi_y: np.ndarray,
    roi_z: np.ndarray,
    *,
    range: float = 60.0,  # noqa: A002
    objectness_thresh: float = 0.5,
    confidence_thresh: float = 0.1,
    height_thresh: float = 0.5,
    min_pts_num: int = 3,
    use_all_grids: bool = True,
    filter_noise: bool = False,
    filter_thresh: float = 30.0,
    enable_filter_thresh: float = 700.0,
    log_count: np.ndarray | None = None,
) -> ClusterOutput:
    """Straight transcription of Apollo's Cluster2D with node objects (slow; for tests on small grids)."""
    f32 = np.float32
    category = np.asarray(heads["category_score"], dtype=f32)
    rows, cols = category.shape
    inst = np.asarray(heads["instance_pt"], dtype=f32)
    conf = np.asarray(heads["confidence_score"], dtype=f32)
    hgt = np.asarray(heads["height_pt"], dtype=f32)
    cls = np.asarray(heads["class_score"], dtype=f32)
    scale = f32(0.5 * rows / range)
    nodes = [[_Node() for _ in builtins.range(cols)] for _ in builtins.range(rows)]
    point2grid: list[int] = []
    for px, py in zip(np.asarray(roi_x, f32), np.asarray(roi_y, f32), strict=True):
        fr = (f32(range) - px) * scale
        fc = (f32(range) - py) * scale
        if 0 <= fr < rows and 0 <= fc < cols:
            r, c = int(math.floor(fr)), int(math.floor(fc))
            point2grid.append(r * cols + c)
            nodes[r][c].point_num += 1
        else:
            point2grid.append(-1)
    for r in builtins.range(rows):
        for c in builtins.range(cols):
            node = nodes[r][c]
            node.is_object = (use_all_grids or node.point_num > 0) and category[r, c] >= f32(
                objectness_thresh
            )
            cr = _std_round(float(f32(r) + inst[0, r, c] * scale))
            cc = _std_round(float(f32(c) + inst[1, r, c] * scale))
            node.center = nodes[min(max(cr, 0), rows - 1)][min(max(cc, 0), cols - 1)]
    for r in builtins.range(rows):
        for c in builtins.range(cols):
            node = nodes[r][c]
            if not node.is_object or node.traversed:
                continue
            path: list[_Node] = []
            x = node
            while x.traversed == 0:
                path.append(x)
                x.traversed = 2
                x = x.center
            if x.traversed == 2:
                for y in reversed(path):
                    if y is x:
                        break
                    y.is_center = True
                x.is_center = True
            for y in path:
                y.traversed = 1
                y.parent = x.parent
    for r in builtins.range(rows):
        for c in builtins.range(cols):
            if not nodes[r][c].is_center:
                continue
            for r2 in (r - 1, r, r + 1):
                for c2 in (c - 1, c, c + 1):
                    if (r2 == r or c2 == c) and 0 <= r2 < rows and 0 <= c2 < cols and nodes[r2][c2].is_center:
                        _union(nodes[r][c], nodes[r2][c2])
    grids: list[list[int]] = []
    id_img = np.full(rows * cols, -1, dtype=np.int32)
    for r in builtins.range(rows):
        for c in builtins.range(cols):
            node = nodes[r][c]
            if not node.is_object:
                continue
            root = _find(node)
            if root.obstacle_id < 0:
                root.obstacle_id = len(grids)
                grids.append([])
            id_img[r * cols + c] = root.obstacle_id
            grids[root.obstacle_id].append(r * cols + c)
    num = len(grids)
    if filter_noise:
        lc = np.asarray(log_count, dtype=f32).reshape(-1)
        for cells in grids:
            counts = [f32(math.exp(lc[g])) for g in cells]
            if cells and max(counts) >= f32(enable_filter_thresh):
                for g, v in zip(list(cells), counts, strict=True):
                    if v < f32(filter_thresh):
                        cells.remove(g)
                        id_img[g] = -1
    scores = np.zeros(num, f32)
    heights = np.zeros(num, f32)
    probs = np.zeros((num, 5), f32)
    for o, cells in enumerate(grids):
        s, h, p = f32(0), f32(0), np.zeros(5, f32)
        for g in cells:
            s = f32(s + conf.reshape(-1)[g])
            h = f32(h + hgt.reshape(-1)[g])
            for k in builtins.range(5):
                p[k] = f32(p[k] + cls[k].reshape(-1)[g])
        if cells:
            n_c = f32(len(cells))
            scores[o], heights[o] = f32(s / n_c), f32(h / n_c)
            probs[o] = (p / n_c).astype(f32)
    members: list[list[int]] = [[] for _ in builtins.range(num)]
    point_obs = np.full(len(point2grid), -1, np.int32)
    zs = np.asarray(roi_z, f32)
    for i, g in enumerate(point2grid):
        if g < 0:
            continue
        o = int(id_img[g])
        if o < 0 or scores[o] < f32(confidence_thresh):
            continue
        if height_thresh < 0 or zs[i] <= f32(heights[o] + f32(height_thresh)):
            members[o].append(i)
            point_obs[i] = o
    kept = [o for o, m in enumerate(members) if len(m) >= max(min_pts_num, 1)]
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(members[o]) for o in kept]) if kept else []
    flat = [i for o in kept for i in members[o]]
    return ClusterOutput(
        id_img=id_img.reshape(rows, cols),
        num_obstacles=num,
        scores=scores,
        heights=heights,
        meta_probs=probs,
        cells=np.array([len(g) for g in grids], dtype=np.int32),
        point_obstacle=point_obs,
        kept=np.asarray(kept, dtype=np.int64),
        members=np.asarray(flat, dtype=np.int64),
        offsets=offsets,
    )
