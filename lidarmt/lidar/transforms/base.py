"""The protocol of a LiDAR transformation and the change it makes, with per-point provenance.

A transformation is a deterministic function of (frame, parameters, seed): randomness comes only from a
``numpy.random.Generator`` seeded from ``seed``, so the same three give the same bytes. It returns a
:class:`LidarChange`: the follow-up frame plus where each of its points came from, so that

* a bundle can re-derive the follow-up and check it bit for bit;
* delta debugging can apply any *subset* of the change (:func:`apply_edits`) and minimise it;
* relations know what moved: ``geometry`` maps the source sensor's xy plane onto the follow-up's when the whole
  sweep moves (rotation, mirror), ``inserted``/``removed`` name the boxes of objects put in or taken out.

Layout of a follow-up: the source points that survive (kept as they were, or modified in place) in **source
order**, then the added points. ``origin[j]`` is the source index of follow-up point ``j`` (-1 when added);
``modified[j]`` is True when its bytes differ from its origin's (always True for an added point).

The edits of a change, in this order: each dropped source point (ascending source index), each modified
follow-up point (follow-up order), each added point (follow-up order). :func:`apply_edits` applies a subset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lidarmt.lidar.errors import LidarTransformError
from lidarmt.types import BOX_DTYPE, Frame, Labels

FAMILIES = ("weather", "sensor", "motion", "object", "alignment")
LEVELS = ("light", "moderate", "heavy")


@dataclass(frozen=True)
class Param:
    """One parameter of a transformation: its name, physical unit and closed range ``[lo, hi]``.

    Units are physical ("m" for a visibility, "mm/h", "cm", "deg", "m/s", "deg/s", "fraction", "rings").
    ``integer`` parameters take whole numbers only.
    """

    name: str
    unit: str
    lo: float
    hi: float
    help: str = ""
    integer: bool = False
    # the value a setting recorded (journal, bundle) before this parameter existed implies: what the
    # transformation computed then; None for a parameter it always had
    recorded_default: float | None = None

    def describe(self) -> str:
        """e.g. ``visibility_m [10, 1000] m``."""
        return f"{self.name} [{self.lo:g}, {self.hi:g}] {self.unit}".rstrip()


def _empty_boxes() -> np.ndarray:
    return np.zeros(0, dtype=BOX_DTYPE)


@dataclass(frozen=True, eq=False)
class LidarChange:
    """A transformation's result: the follow-up frame and the provenance of each of its points.

    ``frame``: the follow-up (source points in source order, then added points appended); ``origin`` (int64,
    one per follow-up point): the source index it derives from, -1 when added; ``modified`` (bool, one per
    follow-up point): its bytes differ from its origin's (True when added); ``geometry``: 3x3 homogeneous 2-D map
    source sensor xy -> follow-up xy when the whole sweep moves (None: identity); ``inserted``/``removed``:
    boxes (:data:`lidarmt.types.BOX_DTYPE`, follow-up frame) of objects put in or whose points were taken out;
    ``info``: JSON-able facts about this application (e.g. fog: ``visibility_m``, ``alpha``, ``n_scattered``).
    """

    frame: Frame
    origin: np.ndarray
    modified: np.ndarray
    geometry: np.ndarray | None = None
    inserted: np.ndarray = field(default_factory=_empty_boxes)
    removed: np.ndarray = field(default_factory=_empty_boxes)
    info: dict[str, Any] = field(default_factory=dict)
    n_source: int = -1  # number of points of the source frame (-1: unknown; set by make_change)

    @property
    def kept_origin(self) -> np.ndarray:
        """Source indices of the follow-up points that derive from a source point (ascending)."""
        return self.origin[self.origin >= 0]

    @property
    def dropped(self) -> np.ndarray:
        """int64 source indices that have no follow-up point, ascending."""
        if self.n_source < 0:
            raise ValueError("this LidarChange does not know its source's size (build it with make_change)")
        present = np.zeros(self.n_source, dtype=bool)
        present[self.kept_origin] = True
        return np.flatnonzero(~present).astype(np.int64)

    @property
    def n_added(self) -> int:
        """Number of follow-up points that derive from no source point."""
        return int(np.count_nonzero(self.origin < 0))

    @property
    def n_modified(self) -> int:
        """Number of follow-up points that derive from a source point and differ from it."""
        return int(np.count_nonzero(self.modified & (self.origin >= 0)))


@dataclass(frozen=True, eq=False)
class TransformContext:
    """Optional extras a transformation may need: ``roi`` (a :class:`lidarmt.types.Roi`, e.g. the road where an
    object may be inserted), ``library`` (an object library for insertion,
    :class:`lidarmt.lidar.transforms.objects.ObjectLibrary`), ``sensor`` (a sensor profile or its name,
    :mod:`lidarmt.lidar.sensors`: the beams, ranges, intensity calibration and detection threshold the sensor and
    weather transformations and insertion model; None: ``hdl64``, the KITTI car's HDL-64E) and ``frame_at`` (the
    recording's other frames)."""

    roi: Any | None = None
    library: Any | None = None
    sensor: Any | None = None
    #: ``frame_at(i)``: frame ``i`` of the recording the frame comes from (the frame's own is ``frame.index``),
    #: for a transformation that pairs a sweep with another of its stream (``temporal-misalignment``)
    frame_at: Any | None = None


@runtime_checkable
class LidarTransform(Protocol):
    name: str  # e.g. "fog", "beam-loss", "rotate"
    family: str  # one of FAMILIES
    params: tuple[Param, ...]
    doc: str  # one paragraph: the physical model and its source
    levels: dict[str, dict[str, float]]  # "light", "moderate", "heavy" -> a complete parameter setting

    def apply(self, frame: Frame, params: Mapping[str, float], *, seed: int,
              context: TransformContext | None = None) -> LidarChange:
        """The change this transformation makes to ``frame`` (never modified) with ``params`` and ``seed``."""
        ...


# ----------------------------------------------------------------------------------------------- parameters


def resolve_params(transform: Any, params: Mapping[str, Any] | str | None) -> dict[str, float]:
    """A complete, validated parameter setting: ``params`` may name a level ("light", "moderate", "heavy"), or give
    some parameters (the others come from the moderate level). Unknown names and values outside a parameter's
    range raise a one-line :class:`LidarTransformError`."""
    if params is None:
        params = {}
    if isinstance(params, str):
        if params not in transform.levels:
            raise LidarTransformError(
                f"{transform.name}: unknown level {params!r}; levels are {', '.join(transform.levels)}")
        params = transform.levels[params]
    known = {p.name: p for p in transform.params}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise LidarTransformError(
            f"{transform.name}: unknown parameter(s) {', '.join(unknown)}; its parameters are "
            + ", ".join(p.describe() for p in transform.params))
    base = dict(transform.levels.get("moderate", {}))
    out: dict[str, float] = {}
    for p in transform.params:
        if p.name in params:
            raw = params[p.name]
        elif p.name in base:
            raw = base[p.name]
        else:
            raise LidarTransformError(f"{transform.name}: parameter {p.name} not given and no default")
        try:
            v = float(raw)
        except (TypeError, ValueError) as err:
            raise LidarTransformError(f"{transform.name}: {p.name}={raw!r} is not a number") from err
        if not math.isfinite(v) or not p.lo <= v <= p.hi:
            raise LidarTransformError(
                f"{transform.name}: {p.name}={v:g} is outside its range [{p.lo:g}, {p.hi:g}] {p.unit}".rstrip())
        if p.integer and v != round(v):
            raise LidarTransformError(f"{transform.name}: {p.name}={v:g} must be a whole number")
        out[p.name] = v
    return out


def parse_params(text: str) -> dict[str, float]:
    """``"visibility_m=50,seed_scale=2"`` -> {"visibility_m": 50.0, ...}; a level name is returned as is by
    :func:`resolve_params`'s callers; a malformed item is a one-line error."""
    out: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise LidarTransformError(f"parameter {item!r} is not of the form name=value")
        if name.strip() in out:  # 'visibility_m=50,visibility_m=60' ran only 60 m, labelled with both
            raise LidarTransformError(
                f"parameter {name.strip()!r} is given twice in {text!r}; one level sets each parameter once "
                f"(several levels are separated by '/': '{name.strip()}=50/{name.strip()}=60')")
        try:
            out[name.strip()] = float(value)
        except ValueError as err:
            raise LidarTransformError(f"parameter {item!r}: {value!r} is not a number") from err
    return out


def rng_for(seed: int, name: str) -> np.random.Generator:
    """The Generator of one application: seeded from ``seed`` and the transformation's name (so two
    transformations applied with one seed draw independent numbers)."""
    salt = int.from_bytes(name.encode()[:16].ljust(16, b"\0"), "little")
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, salt & 0xFFFFFFFFFFFFFFFF, salt >> 64])


# ----------------------------------------------------------------------------------------------- building changes


def _labels_for(source: Frame, origin: np.ndarray, boxes: np.ndarray | None = None) -> Labels | None:
    lb = source.labels
    if lb is None:
        return None
    keep = origin >= 0
    idx = np.where(keep, origin, 0)

    def sub(a: np.ndarray | None) -> np.ndarray | None:
        if a is None:
            return None
        out = a[idx].copy()
        out[~keep] = -1 if (np.issubdtype(a.dtype, np.signedinteger) or a.dtype.kind == "f") else np.iinfo(a.dtype).max
        return out

    return Labels(lb.boxes if boxes is None else boxes, sub(lb.point_instance), sub(lb.point_meta),
                  sub(lb.point_semantic), lb.region)


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per point: the structured records ``a[i]`` and ``b[i]`` differ in some byte."""
    if len(a) == 0:
        return np.zeros(0, dtype=bool)
    av = np.ascontiguousarray(a).view(np.uint8).reshape(len(a), -1)
    bv = np.ascontiguousarray(b).view(np.uint8).reshape(len(b), -1)
    return np.any(av != bv, axis=1)


def make_change(source: Frame, kept: np.ndarray, kept_points: np.ndarray, added: np.ndarray | None = None, *,
                geometry: np.ndarray | None = None, inserted: np.ndarray | None = None,
                removed: np.ndarray | None = None, info: Mapping[str, Any] | None = None,
                boxes: np.ndarray | None = None, camera: Any = None) -> LidarChange:
    """Assemble a :class:`LidarChange` from the source indices that survive (``kept``: ascending int indices or a
    bool mask over the source), their new values (``kept_points``, one per kept index, source dtype) and the points
    to append (``added``). ``modified`` is computed byte-wise. Labels follow the points (added points -1);
    ``boxes`` replaces the label boxes (default: the source's); ``camera`` the camera link (default: the
    source's, :class:`lidarmt.types.CameraLink`)."""
    pts = source.points
    kept = np.asarray(kept)
    if kept.dtype == bool:
        kept = np.flatnonzero(kept)
    kept = kept.astype(np.int64)
    if len(kept) and np.any(np.diff(kept) <= 0):
        raise ValueError("kept source indices must be strictly ascending")
    if kept_points.dtype != pts.dtype or len(kept_points) != len(kept):
        raise ValueError("kept_points must hold one point of the source's dtype per kept index")
    if added is None:
        added = np.zeros(0, dtype=pts.dtype)
    if added.dtype != pts.dtype:
        fixed = np.zeros(len(added), dtype=pts.dtype)
        for n in pts.dtype.names or ():
            if added.dtype.names and n in added.dtype.names:
                fixed[n] = added[n]
        added = fixed
    points = np.concatenate([kept_points, added]) if len(added) else np.ascontiguousarray(kept_points).copy()
    origin = np.concatenate([kept, np.full(len(added), -1, dtype=np.int64)])
    modified = np.concatenate([_differs(kept_points, pts[kept]), np.ones(len(added), dtype=bool)])
    frame = Frame(points=points, pose=source.pose, stamp=source.stamp, frame_id=source.frame_id,
                  provenance=source.provenance, labels=_labels_for(source, origin, boxes), dropped=source.dropped,
                  camera=source.camera if camera is None else camera)
    return LidarChange(
        frame=frame, origin=origin, modified=modified,
        geometry=None if geometry is None else np.asarray(geometry, dtype=np.float64),
        inserted=_empty_boxes() if inserted is None else np.asarray(inserted, dtype=BOX_DTYPE),
        removed=_empty_boxes() if removed is None else np.asarray(removed, dtype=BOX_DTYPE),
        info=dict(info or {}), n_source=len(pts))


def same_change(source: Frame, points: np.ndarray, **kwargs: Any) -> LidarChange:
    """A change that keeps every source point (possibly modified in place) and adds none."""
    return make_change(source, np.arange(len(source.points)), points, **kwargs)


# ----------------------------------------------------------------------------------------------- subsets of a change


def n_edits(change: LidarChange) -> int:
    """Number of edits of a change: dropped source points + modified follow-up points + added points."""
    return len(change.dropped) + change.n_modified + change.n_added


def apply_edits(source: Frame, change: LidarChange, keep_edit: np.ndarray) -> Frame:
    """The source with only some of ``change``'s edits applied (``keep_edit``: bool, one per edit, in the order
    dropped, modified, added). An edit not kept leaves the source as it was: a dropped point stays with its source
    values, a modified point keeps its source values, an added point is absent. All kept gives the follow-up's
    points (same order); none kept gives the source's."""
    pts = source.points
    if change.n_source not in (-1, len(pts)):
        raise ValueError(f"change was made on a frame of {change.n_source} points, not {len(pts)}")
    keep_edit = np.asarray(keep_edit, dtype=bool)
    dropped = change.dropped
    fo = change.origin
    is_src = fo >= 0
    mod_j = np.flatnonzero(change.modified & is_src)
    add_j = np.flatnonzero(~is_src)
    if keep_edit.shape != (len(dropped) + len(mod_j) + len(add_j),):
        raise ValueError(f"keep_edit has {keep_edit.size} entries; the change has "
                         f"{len(dropped) + len(mod_j) + len(add_j)} edits")
    k_drop = keep_edit[: len(dropped)]
    k_mod = keep_edit[len(dropped): len(dropped) + len(mod_j)]
    k_add = keep_edit[len(dropped) + len(mod_j):]
    # values of each source point in the result, and whether it is present
    values = pts.copy()
    present = np.ones(len(pts), dtype=bool)
    present[dropped[k_drop]] = False
    use = mod_j[k_mod]
    values[fo[use]] = change.frame.points[use]
    added = change.frame.points[add_j[k_add]]
    idx = np.flatnonzero(present)
    out_pts = np.concatenate([values[idx], added]) if len(added) else values[idx]
    origin = np.concatenate([idx.astype(np.int64), np.full(len(added), -1, dtype=np.int64)])
    if keep_edit.all() and change.frame.labels is not None:
        labels = change.frame.labels
    else:
        labels = _labels_for(source, origin)
    return Frame(points=out_pts, pose=source.pose, stamp=source.stamp, frame_id=source.frame_id,
                 provenance=source.provenance, labels=labels, dropped=source.dropped, camera=change.frame.camera)


# ----------------------------------------------------------------------------------------------- geometry helpers


def rotation_2d(angle_rad: float) -> np.ndarray:
    """3x3 homogeneous rotation of the xy plane by ``angle_rad`` (counter-clockwise)."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def map_xy(geometry: np.ndarray | None, xy: np.ndarray) -> np.ndarray:
    """Apply a change's ``geometry`` to (N, 2+) positions (extra columns are kept); identity when None."""
    xy = np.asarray(xy, dtype=np.float64)
    if geometry is None:
        return xy.copy()
    out = xy.copy()
    g = np.asarray(geometry, dtype=np.float64)
    out[:, 0] = g[0, 0] * xy[:, 0] + g[0, 1] * xy[:, 1] + g[0, 2]
    out[:, 1] = g[1, 0] * xy[:, 0] + g[1, 1] * xy[:, 1] + g[1, 2]
    return out


def map_boxes(geometry: np.ndarray | None, boxes: np.ndarray) -> np.ndarray:
    """Boxes (:data:`BOX_DTYPE`) moved by ``geometry`` (a rotation or a mirror of the xy plane)."""
    out = np.array(boxes, dtype=BOX_DTYPE, copy=True)
    if geometry is None or len(out) == 0:
        return out
    g = np.asarray(geometry, dtype=np.float64)
    c = map_xy(g, np.stack([out["cx"], out["cy"]], axis=1))
    out["cx"], out["cy"] = c[:, 0], c[:, 1]
    hx = np.cos(out["yaw"]) * g[0, 0] + np.sin(out["yaw"]) * g[0, 1]
    hy = np.cos(out["yaw"]) * g[1, 0] + np.sin(out["yaw"]) * g[1, 1]
    out["yaw"] = np.arctan2(hy, hx)
    return out
