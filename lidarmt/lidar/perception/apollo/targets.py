"""Training targets for Apollo's CNN-seg heads, built from a labelled frame (the simulator's ground truth).

The grid is Apollo's (apollo-lop-facts.md §3.2): ``scale = H/(2R)`` cells per metre,
``row = floor((R - x)·scale)`` and ``col = floor((R - y)·scale)``, so row 0 is x = +R (ahead) and col 0 is
y = +R (left); the centre of cell ``(r, c)`` is ``x = R - (r + 0.5)/scale``, ``y = R - (c + 0.5)/scale``.

What each head is taught, cell by cell (an *object cell* is a non-empty cell that belongs to an object, see
below; every other non-empty cell is background; empty cells carry no loss because Apollo multiplies the
objectness by the non-empty mask):

``objectness`` (category_pt)
    1 on object cells, 0 on background cells. A non-empty cell belongs to an object when it holds points of
    that object instance (the instance with most points in the cell wins), or when its centre lies inside the
    object's bird's-eye-view footprint (ground or clutter points under a car are clustered with the car by
    Apollo anyway, since GetObjects keeps every ROI point of an object cell up to the object's height + 0.5 m).
``instance`` (instance_pt, 2 channels, metres)
    Cluster2D follows ``center_row = round(row + instance[0]·scale)``, ``center_col = round(col +
    instance[1]·scale)``. Moving +1 row means x *decreasing*, so the target is the offset from the cell's
    centre to the object's BEV centre in *row/col direction*: ``instance[0] = x_cell - cx`` and
    ``instance[1] = y_cell - cy`` (metres). Decoding a target with Cluster2D's rule lands on the cell that
    holds the object's centre (up to rounding at exact cell borders).
``confidence`` (confidence_pt)
    Our choice (Apollo's training recipe is not public): the same 0/1 as objectness, on every non-empty cell.
    Cluster2D averages it over a cluster's cells and drops clusters under 0.1, so it acts as a second,
    independently trained objectness that vetoes clusters made mostly of background cells.
``class`` (classify_pt, 5 sigmoid channels)
    One-hot of the object's MetaType (0 unknown, 1 small vehicle, 2 big vehicle, 3 non-motor, 4 pedestrian)
    on object cells; no class loss elsewhere. Static objects with an instance (poles, signs; MetaType 0) are
    Apollo UNKNOWN obstacles and are objects of class 0. Background points (``point_meta`` = -1: ground,
    buildings, vegetation) are never objects.
``height`` (height_pt, metres)
    The object's top z in the sensor frame (box centre z + height/2): Cluster2D keeps a point only if its
    z <= mean height_pt over the cluster + 0.5 m, so the top of the object is what must be predicted.
``heading`` (heading_pt, 2 channels)
    ``(cos 2·yaw, sin 2·yaw)`` of the box on object cells (unused by the 2.x/3.0 post-processing, trained
    so the head is meaningful; the doubled angle makes it independent of the box's front/back ambiguity).

Cells whose points belong to an instance that has no box (cannot be given a centre) are *ignored*: no loss.

**Unlabelled points.** When ``labels.region`` is set (KITTI labels only what the front camera sees), a point
outside it is *unlabelled*, not background: a non-empty cell none of whose points lies inside the region is
ignored (no loss on any head), unless it is an object cell (a labelled car reaching out of the camera's view
is still that car).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lidarmt.types import BOX_DTYPE, Frame

NUM_CLASSES = 5

#: horizontal distance (metres) within which ``unlabelled`` points are the ego car's own body (SemanticKITTI's
#: "unlabeled" ring at 1.1-2.7 m, z -0.9 to -0.5 m around the HDL-64E): Apollo's feature generator counts them
#: like any point (it keeps every point with |x|, |y| < range and -5 < z < 5, apollo-lop-facts.md §4), so they are
#: taught as background rather than left out of the losses
EGO_RADIUS_M = 3.0

#: Apollo's range and height limits (apollo-lop-facts.md §3.1).
DEFAULT_RANGE = 60.0
DEFAULT_MIN_HEIGHT = -5.0
DEFAULT_MAX_HEIGHT = 5.0


@dataclass(slots=True)
class Targets:
    """Dense per-cell targets for one frame (all arrays are (H, W) or (C, H, W), row-major as Apollo's grid).

    ``nonempty``: the cell holds at least one point (Apollo's mask channel, computed the same way).
    ``objectness``: 1 on object cells. ``ignore``: cells to leave out of every loss.
    ``instance`` (2, H, W), ``height``, ``heading`` (2, H, W): regression targets, valid on object cells.
    ``cls``: MetaType index on object cells, -1 elsewhere. ``obj_id``: index into ``boxes`` of the cell's
    object, -1 elsewhere.
    """

    nonempty: np.ndarray  # bool (H, W)
    objectness: np.ndarray  # bool (H, W)
    ignore: np.ndarray  # bool (H, W)
    instance: np.ndarray  # float32 (2, H, W)
    height: np.ndarray  # float32 (H, W)
    heading: np.ndarray  # float32 (2, H, W)
    cls: np.ndarray  # int8 (H, W)
    obj_id: np.ndarray  # int32 (H, W)

    @property
    def shape(self) -> tuple[int, int]:
        return self.nonempty.shape  # type: ignore[return-value]

    def crop(self, r0: int, c0: int, size: int) -> Targets:
        """The targets of the window rows r0..r0+size, cols c0..c0+size (views, no copy)."""
        rs, cs = slice(r0, r0 + size), slice(c0, c0 + size)
        return Targets(
            self.nonempty[rs, cs],
            self.objectness[rs, cs],
            self.ignore[rs, cs],
            self.instance[:, rs, cs],
            self.height[rs, cs],
            self.heading[:, rs, cs],
            self.cls[rs, cs],
            self.obj_id[rs, cs],
        )


def grid_scale(grid: int, range_: float) -> float:
    """Cells per metre of Apollo's grid."""
    return grid / (2.0 * range_)


def cell_centers(grid: int, range_: float) -> tuple[np.ndarray, np.ndarray]:
    """(x of each row's centre, y of each column's centre), Apollo's Pixel2Pc."""
    i = np.arange(grid, dtype=np.float64)
    c = range_ - (i + 0.5) * (2.0 * range_ / grid)
    return c, c.copy()


def point_cells(
    x: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    *,
    grid: int,
    range_: float,
    min_height: float = DEFAULT_MIN_HEIGHT,
    max_height: float = DEFAULT_MAX_HEIGHT,
) -> np.ndarray:
    """Flat cell index (row·W + col) of each point, -1 for points Apollo's feature generator skips."""
    # float32 arithmetic, exactly as the feature generator, so the masks agree cell for cell
    r32, s32 = np.float32(range_), np.float32(0.5 * grid / range_)
    xs = np.asarray(x, dtype=np.float32)
    ys = np.asarray(y, dtype=np.float32)
    zs = np.asarray(z, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        fr = (r32 - xs) * s32
        fc = (r32 - ys) * s32
        ok = (fr >= 0) & (fr < grid) & (fc >= 0) & (fc < grid)
        ok &= (zs > np.float32(min_height)) & (zs < np.float32(max_height))
    row = np.floor(fr)
    col = np.floor(fc)
    out = np.full(len(xs), -1, dtype=np.int64)
    out[ok] = row[ok].astype(np.int64) * grid + col[ok].astype(np.int64)
    return out


def box_footprint_cells(box: np.void | np.ndarray, *, grid: int, range_: float, margin: float = 0.0) -> np.ndarray:
    """Flat indices of the cells whose centre lies inside a box's BEV footprint (grown by ``margin``)."""
    scale = grid_scale(grid, range_)
    cx, cy, yaw = float(box["cx"]), float(box["cy"]), float(box["yaw"])
    hl, hw = float(box["length"]) / 2 + margin, float(box["width"]) / 2 + margin
    rad = float(np.hypot(hl, hw))
    r_lo = max(int(np.floor((range_ - (cx + rad)) * scale)), 0)
    r_hi = min(int(np.floor((range_ - (cx - rad)) * scale)), grid - 1)
    c_lo = max(int(np.floor((range_ - (cy + rad)) * scale)), 0)
    c_hi = min(int(np.floor((range_ - (cy - rad)) * scale)), grid - 1)
    if r_lo > r_hi or c_lo > c_hi:
        return np.zeros(0, dtype=np.int64)
    rows = np.arange(r_lo, r_hi + 1)
    cols = np.arange(c_lo, c_hi + 1)
    xc = range_ - (rows + 0.5) / scale
    yc = range_ - (cols + 0.5) / scale
    dx = xc[:, None] - cx
    dy = yc[None, :] - cy
    ca, sa = np.cos(yaw), np.sin(yaw)
    u = dx * ca + dy * sa
    v = -dx * sa + dy * ca
    inside = (np.abs(u) <= hl) & (np.abs(v) <= hw)
    rr, cc = np.nonzero(inside)
    return (rows[rr] * grid + cols[cc]).astype(np.int64)


def build_targets(
    frame: Frame,
    *,
    grid: int = 640,
    range_: float = DEFAULT_RANGE,
    min_height: float = DEFAULT_MIN_HEIGHT,
    max_height: float = DEFAULT_MAX_HEIGHT,
    footprint: bool = True,
    unlabelled: tuple[int, ...] = (),
    ego_radius: float = EGO_RADIUS_M,
) -> Targets:
    """Dense targets of a labelled frame (see the module docstring for what each head is taught).

    The frame needs ``labels.boxes`` and per-point ``labels.point_instance`` (the simulator writes both);
    ``point_meta`` is used to keep background points (meta -1) out of objects even if an instance id is set.
    ``unlabelled``: semantic ids (``labels.point_semantic``) of points that are unlabelled rather than
    background (SemanticKITTI's "unlabeled" and "outlier": the ego car's roof ring, gaps); a non-empty cell
    holding only such points (and points outside ``labels.region``) is ignored unless it is an object cell;
    such points within ``ego_radius`` metres of the sensor (horizontally) are background (the ego car's roof ring).
    """
    if frame.labels is None or frame.labels.point_instance is None:
        raise ValueError("build_targets needs a frame with labels.boxes and labels.point_instance")
    lb = frame.labels
    boxes = np.asarray(lb.boxes, dtype=BOX_DTYPE)
    n_cells = grid * grid
    pts = frame.points
    cell = point_cells(pts["x"], pts["y"], pts["z"], grid=grid, range_=range_, min_height=min_height,
                       max_height=max_height)
    valid = cell >= 0
    nonempty = np.zeros(n_cells, dtype=bool)
    nonempty[cell[valid]] = True

    inst = np.asarray(lb.point_instance, dtype=np.int64)
    is_obj_pt = valid & (inst >= 0)
    if lb.point_meta is not None:
        is_obj_pt &= np.asarray(lb.point_meta) >= 0

    # Map instance ids to box indices (-1: an instance without a box).
    box_of_instance: dict[int, int] = {}
    for i, b in enumerate(boxes):
        if int(b["instance"]) >= 0:
            box_of_instance.setdefault(int(b["instance"]), i)
    obj_id = np.full(n_cells, -1, dtype=np.int64)
    ignore = np.zeros(n_cells, dtype=bool)

    # Footprints first, so that cells holding an object's own points override them below.
    if footprint:
        # Larger boxes first: a small object's footprint inside a large one (a rider near a bus) wins.
        order = np.argsort(-(boxes["length"] * boxes["width"]), kind="stable") if len(boxes) else []
        for i in order:
            obj_id[box_footprint_cells(boxes[i], grid=grid, range_=range_)] = i

    if is_obj_pt.any():
        c_obj = cell[is_obj_pt]
        i_obj = inst[is_obj_pt]
        # The instance with the most points in a cell owns the cell.
        key = c_obj * (int(i_obj.max()) + 1) + i_obj
        uniq, counts = np.unique(key, return_counts=True)
        u_cell = uniq // (int(i_obj.max()) + 1)
        u_inst = uniq % (int(i_obj.max()) + 1)
        order = np.lexsort((counts, u_cell))  # by cell, then by count ascending: last one per cell wins
        u_cell, u_inst = u_cell[order], u_inst[order]
        last = np.r_[u_cell[1:] != u_cell[:-1], True]
        u_cell, u_inst = u_cell[last], u_inst[last]
        bidx = np.array([box_of_instance.get(int(k), -1) for k in u_inst], dtype=np.int64)
        obj_id[u_cell] = bidx
        ignore[u_cell[bidx < 0]] = True

    objectness = nonempty & (obj_id >= 0)
    obj_id[~objectness] = -1
    has_unlabelled = bool(unlabelled) and lb.point_semantic is not None
    if lb.region is not None or has_unlabelled:
        known = valid.copy()
        if lb.region is not None:
            known &= lb.region.contains(pts)
        if has_unlabelled:
            ego = np.hypot(pts["x"].astype(np.float64), pts["y"].astype(np.float64)) < ego_radius
            known &= ~np.isin(np.asarray(lb.point_semantic), np.asarray(unlabelled, dtype=np.int64)) | ego
        labelled = np.zeros(n_cells, dtype=bool)
        labelled[cell[known]] = True
        ignore |= ~labelled & ~objectness
    ignore &= nonempty

    rx, cy_ = cell_centers(grid, range_)
    instance = np.zeros((2, n_cells), dtype=np.float32)
    height = np.zeros(n_cells, dtype=np.float32)
    heading = np.zeros((2, n_cells), dtype=np.float32)
    cls = np.full(n_cells, -1, dtype=np.int8)
    idx = np.nonzero(objectness)[0]
    if len(idx):
        b = boxes[obj_id[idx]]
        rows, cols = idx // grid, idx % grid
        instance[0, idx] = rx[rows] - b["cx"]
        instance[1, idx] = cy_[cols] - b["cy"]
        height[idx] = b["cz"] + b["height"] / 2
        heading[0, idx] = np.cos(2 * b["yaw"])
        heading[1, idx] = np.sin(2 * b["yaw"])
        cls[idx] = np.clip(b["meta"], 0, NUM_CLASSES - 1)

    shp = (grid, grid)
    return Targets(
        nonempty=nonempty.reshape(shp),
        objectness=objectness.reshape(shp),
        ignore=ignore.reshape(shp),
        instance=instance.reshape(2, *shp),
        height=height.reshape(shp),
        heading=heading.reshape(2, *shp),
        cls=cls.reshape(shp),
        obj_id=obj_id.astype(np.int32).reshape(shp),
    )


def decode_centers(instance: np.ndarray, *, range_: float = DEFAULT_RANGE) -> tuple[np.ndarray, np.ndarray]:
    """Cluster2D's centre pointer of every cell: (center_row, center_col), rounded and clamped to the grid.

    ``instance`` is (2, H, W) in metres, as the network's instance_pt (or :func:`build_targets`' target).
    """
    _, h, w = instance.shape
    scale = grid_scale(h, range_)
    rows = np.arange(h, dtype=np.float64)[:, None]
    cols = np.arange(w, dtype=np.float64)[None, :]
    # Apollo rounds half away from zero (C++ round); the offsets here are never exactly half a cell.
    cr = np.clip(np.round(rows + instance[0] * scale), 0, h - 1).astype(np.int64)
    cc = np.clip(np.round(cols + instance[1] * scale), 0, w - 1).astype(np.int64)
    return cr, cc
