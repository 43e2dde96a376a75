"""LiDAR relations beyond MR1: what a transformation's follow-up must keep, judged from raw facts.

A pair is (source sweep t, follow-up t′ = τ(t)) for a LiDAR transformation τ (:mod:`lidarmt.lidar.transforms`),
whose :class:`~lidarmt.lidar.transforms.base.LidarChange` says where every follow-up point came from
(``origin``), how the sweep was moved (``geometry``: a rotation or mirror of x/y) and which objects were inserted
or removed. The system under test perceives t and t′; :func:`pair_facts` turns the two obstacle lists into
**raw facts**, which the journal stores. The thresholds are applied only when the journal is **folded**
(:class:`LidarTally`), as DeepTest applies its λ and ε, so a campaign can be reported again at other thresholds
without perceiving anything twice.

**Matching** (in the source's frame). Every follow-up obstacle is brought back into the source's terms: its
points by ``origin`` (added points belong to no source point), its footprint by the inverse of ``geometry``.
A source obstacle i and a follow-up obstacle j of the same class score max(Jaccard of their point sets, IoU of
their bird's-eye footprints); the assignment is one-to-one and maximises the total score (Hungarian). The facts
keep each source obstacle's assigned score; at folding, it **persists** when its score is at least the match
tolerance τ (default 0.5; the same rule as MR1's matching).

**Kept points.** For each source obstacle, the number of its points the follow-up still has inside its box
(brought back by the inverse geometry; 0.25 m margin): fog that attenuates its returns, beams lost, points
hidden behind an inserted object or removed all lower it.

**The relations** (each requirement holds for the obstacles within the safety-critical distance D of the
sensor, default 30 m, that keep at least k points, default 10):

* ``robustness`` (weather, sensor and motion changes): every such source obstacle persists;
* ``insertion`` (an object inserted): a follow-up obstacle overlaps the inserted box (at least a share of its
  footprint, default 0.1) when the inserted object has k points within D, and every such source obstacle that
  the new object does not occlude (it keeps at least 1 − ρ of its points, ρ = 0.1) persists;
* ``removal`` (an obstacle's points removed): every such source obstacle that the removal leaves whole
  (again 1 − ρ of its points) persists;
* ``equivariance`` (a rotation about z, or the mirror y → −y): every such source obstacle persists *and*
  every follow-up obstacle within D (in the source's frame) is matched: the follow-up set maps onto the
  transformed source set.

Each lost obstacle is recorded with its class, size and distance to the sensor, and whether it lies in, next to
or off the ego lane (:mod:`lidarmt.lidar.lanes`); a missed insertion with the inserted object's. Each finding
gets an evidence and a severity when folded (:mod:`lidarmt.engine.findings`); findings are ranked by severity,
then distance (Speth et al.).

**Labels decide what is lost.** A labelled source obstacle (its label box known) that the matching leaves
unmatched is still *not lost* when a follow-up obstacle of its class (or its label's) fits the label box at
least as well as the source obstacle did (bird's-eye IoU, ``follow_label_iou`` ≥ ``label_iou``); when it fits
better, e.g. a car split in two in the source and whole in the follow-up, it is an *improvement*
(:func:`label_kept`). Both are counted apart (``label_kept``, ``improved``), never as findings. Where the source's labels say which objects it holds (KITTI
boxes, tracklets), each source obstacle also records whether it is a labelled object, junk (unlabelled) or
outside the labelled view (:func:`lidarmt.lidar.perception.apollo.evaluate.label_lost`); the fold can require only
labelled objects (``labelled_only``) or obstacles of some volume (``min_volume``, MR1's ``--min-size``). A
crash or timeout of the system is a finding, apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import lidarmt.engine.findings as fnd
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.engine.tally import KeyedTally
from lidarmt.types import CLASS_ORDER, ObstacleClass, Obstacles

#: The relations of this module, and the transformation families each one applies to by default.
RELATIONS = ("robustness", "insertion", "removal", "equivariance")
FAMILY_RELATION = {"weather": "robustness", "sensor": "robustness", "motion": "robustness",
                   "alignment": "equivariance"}
#: What a lost requirement is called in the tables besides the four classes.
MISSED_INSERT = "missed insert"
SPURIOUS = "spurious"
BOX_MARGIN_M = 0.25


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The thresholds the fold applies (never the journal): stated in every report."""

    distance_m: float = 30.0  # D: the safety-critical distance
    min_points: int = 10  # k: points an obstacle must keep in the follow-up to be required
    tolerance: float = 0.5  # τ: the match score (Jaccard or BEV IoU) a persisting obstacle needs
    occlusion: float = 0.1  # ρ: share of its points an obstacle may lose to an inserted/removed object
    insert_overlap: float = 0.1  # share of the inserted box's footprint a follow-up obstacle must cover
    min_volume: float = 0.0  # m³: smaller obstacles are not required (MR1's --min-size: junk)
    labelled_only: bool = False  # require only obstacles that overlap a labelled object (where labels say)

    def __post_init__(self) -> None:
        if not (self.distance_m > 0 and math.isfinite(self.distance_m)):
            raise FuzzArgumentError(f"--safety-distance {self.distance_m}: give a positive number of metres")
        if self.min_points < 0:
            raise FuzzArgumentError(f"--min-kept {self.min_points}: give 0 or more points")
        if not 0 < self.tolerance <= 1:
            raise FuzzArgumentError(f"--tolerance {self.tolerance}: give an overlap in (0, 1]")
        if not 0 <= self.occlusion < 1:
            raise FuzzArgumentError(f"--occlusion {self.occlusion}: give a share in [0, 1)")
        if not 0 < self.insert_overlap <= 1:
            raise FuzzArgumentError(f"--insert-overlap {self.insert_overlap}: give a share in (0, 1]")
        if not (math.isfinite(self.min_volume) and self.min_volume >= 0):
            raise FuzzArgumentError(f"--min-size {self.min_volume}: give 0 or more cubic metres")

    def to_dict(self) -> dict[str, float]:
        d = {"distance_m": self.distance_m, "min_points": self.min_points, "tolerance": self.tolerance,
             "occlusion": self.occlusion, "insert_overlap": self.insert_overlap}
        if self.min_volume:
            d["min_volume_m3"] = self.min_volume
        if self.labelled_only:
            d["labelled_only"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Thresholds:
        d = d or {}
        base = cls()
        return cls(float(d.get("distance_m", base.distance_m)), int(d.get("min_points", base.min_points)),
                   float(d.get("tolerance", base.tolerance)), float(d.get("occlusion", base.occlusion)),
                   float(d.get("insert_overlap", base.insert_overlap)), float(d.get("min_volume_m3", 0.0)),
                   bool(d.get("labelled_only", False)))

    def describe(self) -> str:
        return (f"D = {self.distance_m:g} m (safety-critical distance), k = {self.min_points} points kept, "
                f"match tolerance τ = {self.tolerance:g} (Jaccard or BEV IoU), occlusion ρ = {self.occlusion:g}, "
                f"insertion overlap ≥ {self.insert_overlap:g} of the inserted box"
                + (f", obstacles ≥ {self.min_volume:g} m³" if self.min_volume else "")
                + (", labelled objects only" if self.labelled_only else ""))


# ----------------------------------------------------------------------------------------------- geometry


def inverse_geometry(geometry: np.ndarray | None) -> np.ndarray | None:
    return None if geometry is None else np.linalg.inv(np.asarray(geometry, dtype=np.float64))


def map_xy(xy: np.ndarray, geometry: np.ndarray | None) -> np.ndarray:
    """Apply a 3x3 homogeneous 2-D map to (N, 2) points (identity when None)."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    if geometry is None:
        return xy
    g = np.asarray(geometry, dtype=np.float64)
    return xy @ g[:2, :2].T + g[:2, 2]


def _footprint(o, inv: np.ndarray | None):
    """An obstacle's bird's-eye footprint as a shapely polygon, brought back by ``inv``."""
    from shapely.geometry import Polygon

    p = np.asarray(o.polygon, dtype=np.float64)[:, :2] if o.polygon is not None and len(o.polygon) >= 3 else None
    if p is None:
        from lidarmt.lidar.bev import box_corners

        p = box_corners(o)
    g = Polygon(map_xy(p, inv))
    if not g.is_valid:
        g = g.buffer(0)
    if g.area <= 0:  # a degenerate hull (points on a line): its box, at least 10 cm wide
        from lidarmt.lidar.bev import box_corners

        g = Polygon(map_xy(box_corners(o), inv)).buffer(0.05)
    return g


def box_polygon(b) -> Any:
    """The footprint of a BOX_DTYPE box as a shapely polygon."""
    from shapely.geometry import Polygon

    c, s = math.cos(float(b["yaw"])), math.sin(float(b["yaw"]))
    hl, hw = 0.5 * float(b["length"]), 0.5 * float(b["width"])
    cx, cy = float(b["cx"]), float(b["cy"])
    pts = [(cx + c * dx - s * dy, cy + s * dx + c * dy) for dx, dy in ((hl, hw), (-hl, hw), (-hl, -hw), (hl, -hw))]
    return Polygon(pts)


def _in_box(xy: np.ndarray, o, margin: float = BOX_MARGIN_M) -> np.ndarray:
    """Which of the (N, 2) points lie in obstacle ``o``'s box grown by ``margin``."""
    d = np.asarray(o.direction[:2], dtype=np.float64)
    n = float(np.hypot(d[0], d[1]))
    d = d / n if n > 0 else np.array([1.0, 0.0])
    rel = xy - np.asarray(o.center[:2], dtype=np.float64)
    along = rel @ d
    across = rel @ np.array([-d[1], d[0]])
    return (np.abs(along) <= 0.5 * o.length + margin) & (np.abs(across) <= 0.5 * o.width + margin)


def _cls_of_meta(meta: int) -> str:
    from lidarmt.types import MetaType

    try:
        return MetaType(int(meta)).obstacle_class.value
    except ValueError:
        return ObstacleClass.UNKNOWN.value


def _r(v: float, nd: int = 3) -> float:
    return round(float(v), nd)


# ----------------------------------------------------------------------------------------------- facts


def pair_facts(source_frame, source: Obstacles, follow_frame, follow: Obstacles, origin: np.ndarray,
               geometry: np.ndarray | None = None, inserted: np.ndarray | None = None,
               removed: np.ndarray | None = None) -> dict[str, Any]:
    """The raw facts of one pair (JSON-ready; no threshold applied): see the module docstring."""
    from scipy.optimize import linear_sum_assignment

    origin = np.asarray(origin, dtype=np.int64)
    inv = inverse_geometry(geometry)
    n_src = len(source_frame)
    m, k = len(source), len(follow)
    # follow-up obstacles in source terms: their source point indices (added points have none)
    f_src = []
    for o in follow:
        idx = np.asarray(o.point_indices, dtype=np.int64)
        idx = idx[(idx >= 0) & (idx < len(origin))]
        s = origin[idx]
        f_src.append(np.unique(s[s >= 0]))
    s_sets = [np.unique(np.asarray(o.point_indices, dtype=np.int64)) for o in source]
    size_s = np.array([len(s) for s in s_sets], dtype=np.int64)
    size_f = np.array([len(o.point_indices) for o in follow], dtype=np.int64)
    shared = np.zeros((m, k), dtype=np.int64)
    if m and k:
        owner = np.full(n_src, -1, dtype=np.int64)
        for i in range(m - 1, -1, -1):
            sel = s_sets[i][(s_sets[i] >= 0) & (s_sets[i] < n_src)]
            owner[sel] = i
        for j in range(k):
            own = owner[f_src[j][f_src[j] < n_src]]
            own = own[own >= 0]
            if len(own):
                shared[:, j] = np.bincount(own, minlength=m)
    union = size_s[:, None] + size_f[None, :] - shared
    jac = np.divide(shared, union, out=np.zeros((m, k)), where=union > 0)
    iou = np.zeros((m, k))
    polys_s = [_footprint(o, None) for o in source]
    polys_f = [_footprint(o, inv) for o in follow]
    if m and k:
        cs = np.array([[p.centroid.x, p.centroid.y] for p in polys_s])
        rs = np.array([math.sqrt(p.area) + 0.5 * max(o.length, o.width) for p, o in zip(polys_s, source, strict=True)])
        cf = np.array([[p.centroid.x, p.centroid.y] for p in polys_f])
        rf = np.array([math.sqrt(p.area) + 0.5 * max(o.length, o.width) for p, o in zip(polys_f, follow, strict=True)])
        near = np.hypot(cs[:, None, 0] - cf[None, :, 0], cs[:, None, 1] - cf[None, :, 1]) <= rs[:, None] + rf[None, :]
        for i, j in zip(*np.nonzero(near), strict=True):
            inter = polys_s[i].intersection(polys_f[j]).area
            uni = polys_s[i].area + polys_f[j].area - inter
            iou[i, j] = inter / uni if uni > 0 else 0.0
    overlap = np.maximum(jac, iou)
    cls_s = np.array([o.cls.value for o in source], dtype=object)
    cls_f = np.array([o.cls.value for o in follow], dtype=object)
    same = (cls_s[:, None] == cls_f[None, :]) if m and k else np.zeros((m, k), dtype=bool)
    score = np.where(same, overlap, 0.0)
    assigned_s = np.zeros(m)
    partner_s = np.full(m, -1, dtype=np.int64)
    assigned_f = np.zeros(k)
    if m and k and score.any():
        rows, cols = linear_sum_assignment(score, maximize=True)
        for i, j in zip(rows, cols, strict=True):
            if score[i, j] > 0:
                assigned_s[i], partner_s[i], assigned_f[j] = score[i, j], j, score[i, j]
    # points each source obstacle keeps in the follow-up, inside its own box (brought back by the geometry)
    f_xy = map_xy(np.c_[follow_frame.points["x"], follow_frame.points["y"]], inv)
    order = np.argsort(origin, kind="stable")
    sorted_origin = origin[order]
    src_rows = []
    for i, o in enumerate(source):
        lo = np.searchsorted(sorted_origin, s_sets[i], side="left")
        hi = np.searchsorted(sorted_origin, s_sets[i], side="right")
        rows_f = np.concatenate([order[a:b] for a, b in zip(lo, hi, strict=True)]) if len(lo) else np.zeros(0, np.int64)
        kept = int(np.count_nonzero(_in_box(f_xy[rows_f], o))) if len(rows_f) else 0
        c = np.asarray(o.center, dtype=np.float64)
        row: dict[str, Any] = {"class": o.cls.value, "size": [_r(o.length), _r(o.width), _r(o.height)],
                               "distance": _r(math.hypot(c[0], c[1])), "points": int(size_s[i]), "kept": kept,
                               "score": _r(assigned_s[i], 4)}
        if k:
            j = int(np.argmax(overlap[i]))
            row["best"] = _r(overlap[i, j], 4)
            if overlap[i, j] > 0:
                row["best_class"] = str(cls_f[j])
                taken = [ii for ii in range(m) if ii != i and partner_s[ii] == j]
                row["best_taken"] = _r(assigned_f[j], 4) if taken else 0.0
        src_rows.append(row)
    from lidarmt.lidar.perception.apollo.evaluate import label_lost

    labels = label_lost(source_frame, source, range(m)) if m else None
    if labels is not None:  # what the source's labels say of each obstacle (labelled object, junk, outside)
        boxes = source_frame.labels.boxes
        for i, row in enumerate(src_rows):
            lab = labels.get(i) or {}
            row["label"] = lab.get("label")
            if lab.get("label_class"):
                row["label_class"] = lab["label_class"]
            if lab.get("label_box") is not None:  # how well the source, and the best follow-up, fit the label
                gp = box_polygon(boxes[int(lab["label_box"])])
                row["label_iou"] = _r(lab.get("label_iou", 0.0), 4)
                ok = {source[i].cls.value, str(lab.get("label_class"))}
                best = 0.0
                for j in range(k):
                    if str(cls_f[j]) in ok and polys_f[j].intersects(gp):
                        inter = polys_f[j].intersection(gp).area
                        uni = polys_f[j].area + gp.area - inter
                        best = max(best, inter / uni if uni > 0 else 0.0)
                row["follow_label_iou"] = _r(best, 4)
    fol_rows = []
    for j, o in enumerate(follow):
        c = map_xy(np.asarray(o.center[:2], dtype=np.float64)[None], inv)[0]
        fol_rows.append({"class": o.cls.value, "size": [_r(o.length), _r(o.width), _r(o.height)],
                         "distance": _r(math.hypot(c[0], c[1])), "points": int(size_f[j]),
                         "score": _r(assigned_f[j], 4)})
    facts: dict[str, Any] = {
        "counts_source": {c.value: v for c, v in source.counts().items()},
        "counts_follow": {c.value: v for c, v in follow.counts().items()},
        "source": src_rows, "follow": fol_rows, "geometry": geometry is not None,
    }
    if inserted is not None and len(inserted):
        added = np.flatnonzero(origin < 0)
        a_xy = np.c_[follow_frame.points["x"][added], follow_frame.points["y"][added]].astype(np.float64)
        rows = []
        for b in inserted:
            box = box_polygon(b)
            from shapely import contains_xy

            npts = int(np.count_nonzero(contains_xy(box.buffer(BOX_MARGIN_M), a_xy[:, 0], a_xy[:, 1]))) if len(a_xy) else 0
            best, best_cls = 0.0, None
            for o, p in zip(follow, polys_f, strict=True):  # the follow-up's own frame: object changes keep xy
                share = p.intersection(box).area / box.area if box.area > 0 else 0.0
                if share > best:
                    best, best_cls = share, o.cls.value
            rows.append({"class": _cls_of_meta(b["meta"]), "size": [_r(b["length"]), _r(b["width"]), _r(b["height"])],
                         "distance": _r(math.hypot(float(b["cx"]), float(b["cy"]))), "points": npts,
                         "overlap": _r(best, 4), **({"overlap_class": best_cls} if best_cls else {})})
        facts["inserted"] = rows
    if removed is not None and len(removed):
        rows = []
        for b in removed:
            box = box_polygon(b)
            ghost = max((p.intersection(box).area / box.area for p in polys_f), default=0.0) if box.area > 0 else 0.0
            rows.append({"class": _cls_of_meta(b["meta"]), "size": [_r(b["length"]), _r(b["width"]), _r(b["height"])],
                         "distance": _r(math.hypot(float(b["cx"]), float(b["cy"]))), "ghost": _r(ghost, 4)})
        facts["removed"] = rows
    return facts


# ----------------------------------------------------------------------------------------------- the oracle


def label_kept(row: Mapping[str, Any]) -> str | None:
    """For a labelled source obstacle: ``"improved"`` when a follow-up obstacle of its class fits the label
    better than the source did (e.g. a car split in two in the source, whole in the follow-up), ``"kept"`` when
    one fits it as well, None otherwise (or without labels). Such an obstacle is not lost, whatever the matching
    between the two obstacle lists says (module docstring)."""
    if row.get("label") != "labelled" or row.get("follow_label_iou") is None or row.get("label_iou") is None:
        return None
    f, s_ = float(row["follow_label_iou"]), float(row["label_iou"])
    if f <= 0:
        return None
    return "improved" if f > s_ + 1e-4 else "kept" if f >= s_ - 1e-4 else None


def lost_kind(row: Mapping[str, Any], tol: float) -> str:
    """What happened to a lost source obstacle (as MR1 names it), from its facts at tolerance ``tol``."""
    best = float(row.get("best", 0.0))
    if best <= 0:
        return "vanished"
    if float(row.get("best_taken", 0.0)) >= tol:
        return "merged"
    if row.get("best_class") not in (None, row["class"]):
        return "reclassified"
    return "degraded"


def required(row: Mapping[str, Any], relation: str, th: Thresholds) -> bool:
    """Whether a source obstacle must persist under ``relation`` (module docstring)."""
    if float(row["distance"]) > th.distance_m or int(row["kept"]) < th.min_points:
        return False
    if th.min_volume and float(np.prod(row["size"])) < th.min_volume:
        return False
    if th.labelled_only and row.get("label") != "labelled":
        return False
    if relation in ("insertion", "removal"):
        pts = int(row["points"])
        return pts > 0 and int(row["kept"]) >= (1.0 - th.occlusion) * pts
    return True


def judge_facts(facts: Mapping[str, Any], relation: str, th: Thresholds) -> list[dict[str, Any]]:
    """The findings of one pair under ``relation`` at thresholds ``th``: one dict per lost requirement, with
    ``what`` (a class, :data:`MISSED_INSERT` or :data:`SPURIOUS`), class, size, distance, kind; [] when it holds."""
    out: list[dict[str, Any]] = []
    for i, row in enumerate(facts.get("source", [])):
        if required(row, relation, th) and float(row["score"]) < th.tolerance and label_kept(row) is None:
            out.append({"what": row["class"], "class": row["class"], "size": row["size"],
                        "distance": row["distance"], "points": row["points"], "kept": row["kept"],
                        "kind": lost_kind(row, th.tolerance), "source": i,
                        **{k: row[k] for k in ("label", "label_class", "lane") if k in row}})
    if relation == "insertion":
        for b in facts.get("inserted", []):
            if (float(b["distance"]) <= th.distance_m and int(b["points"]) >= th.min_points
                    and float(b["overlap"]) < th.insert_overlap):
                out.append({"what": MISSED_INSERT, "class": b["class"], "size": b["size"],
                            "distance": b["distance"], "points": b["points"], "kind": "missed",
                            **({"lane": b["lane"]} if "lane" in b else {})})
    if relation == "equivariance" and not th.labelled_only:  # a spurious obstacle is no labelled object
        for j, row in enumerate(facts.get("follow", [])):
            if (float(row["distance"]) <= th.distance_m and int(row["points"]) >= th.min_points
                    and float(row["score"]) < th.tolerance):
                out.append({"what": SPURIOUS, "class": row["class"], "size": row["size"],
                            "distance": row["distance"], "points": row["points"], "kind": "spurious",
                            "follow": j, **({"lane": row["lane"]} if "lane" in row else {})})
    return out


def relabelled(facts: Mapping[str, Any], relation: str, th: Thresholds) -> dict[str, int]:
    """The required source obstacles the matching alone would call lost, but whose label a follow-up obstacle
    still fits: ``{"kept": n, "improved": n}`` (:func:`label_kept`; not findings)."""
    out = {"kept": 0, "improved": 0}
    for row in facts.get("source", []):
        if required(row, relation, th) and float(row["score"]) < th.tolerance:
            k = label_kept(row)
            if k is not None:
                out[k] += 1
    return out


# ----------------------------------------------------------------------------------------------- totals


@dataclass(slots=True)
class Cell:
    """The pairs of one (transformation, level)."""

    pairs: int = 0
    violations: int = 0
    crashes: int = 0
    timeouts: int = 0
    required: int = 0  # obstacles the relation required to persist
    lost: dict[str, int] = field(default_factory=dict)  # what -> lost requirements
    violating_by: dict[str, int] = field(default_factory=dict)  # what -> pairs with at least one such loss
    edits: int = 0  # point edits of the changes, summed
    labelled: int = 0  # lost requirements that were labelled objects (where the labels say)
    real_violations: int = 0  # pairs with a finding other than junk or a low-evidence obstacle
    by_severity: dict[str, int] = field(default_factory=dict)  # findings per severity
    by_evidence: dict[str, int] = field(default_factory=dict)  # findings per evidence
    label_kept: int = 0  # unmatched labelled objects whose label a follow-up obstacle fits as well: not lost
    improved: int = 0  # ... fits better (a split object made whole): an improvement, not a finding
    nearest: list[float] = field(default_factory=list)  # distance of each violating pair's nearest loss


WHATS = (*(c.value for c in CLASS_ORDER), MISSED_INSERT, SPURIOUS)


class LidarTally(KeyedTally):
    """Totals of a LiDAR-transformation campaign, folded from the journal at thresholds ``th``.

    ``transforms`` lists (name, family, relation) per transformation index, ``levels`` the level names per
    transformation. Every finding is kept (``findings``) for the distance ranking."""

    def __init__(self, transforms: Sequence[tuple[str, str, str]], levels: Sequence[Sequence[str]],
                 thresholds: Thresholds | None = None) -> None:
        super().__init__()
        self.transforms = list(transforms)
        self.levels = [list(lv) for lv in levels]
        self.th = thresholds or Thresholds()
        self.cells: dict[tuple[int, int], Cell] = {}
        self.findings: list[dict[str, Any]] = []
        self.violating: list[tuple[int, ...]] = []

    def _add(self, key: tuple[int, ...], rec: Mapping[str, Any]) -> None:
        _frame, t, lv, _trial = key
        cell = self.cells.setdefault((t, lv), Cell())
        if rec["status"] == "timeout":
            cell.timeouts += 1
            return
        if rec["status"] != "ok":
            cell.crashes += 1
            return
        cell.pairs += 1
        cell.edits += int(rec.get("edits", 0))
        relation = self.transforms[t][2]
        facts = rec["facts"]
        cell.required += sum(required(r, relation, self.th) for r in facts.get("source", []))
        rl = relabelled(facts, relation, self.th)
        cell.label_kept += rl["kept"]
        cell.improved += rl["improved"]
        lost = judge_facts(facts, relation, self.th)
        if not lost:
            return
        cell.real_violations += any(fnd.is_real(x) for x in lost)
        for x in lost:
            sev, ev = fnd.severity(x), fnd.evidence(x)
            cell.by_severity[sev] = cell.by_severity.get(sev, 0) + 1
            cell.by_evidence[ev] = cell.by_evidence.get(ev, 0) + 1
        cell.violations += 1
        self.violating.append(key)
        for what in {x["what"] for x in lost}:
            cell.violating_by[what] = cell.violating_by.get(what, 0) + 1
        for x in lost:
            cell.lost[x["what"]] = cell.lost.get(x["what"], 0) + 1
            cell.labelled += x.get("label") == "labelled"
            self.findings.append({**x, "key": list(key), "transform": self.transforms[t][0],
                                  "level": self.levels[t][lv], "relation": relation,
                                  "severity": fnd.severity(x), "evidence": fnd.evidence(x)})
        cell.nearest.append(min(float(x["distance"]) for x in lost))

    def ranked(self) -> list[dict[str, Any]]:
        """Every finding, most severe first (:mod:`lidarmt.engine.findings`), then nearest to the sensor (Speth et
        al.), ties by key."""
        return sorted(self.findings, key=lambda f: (fnd.severity_rank(f["severity"]), float(f["distance"]), f["key"],
                                                    f.get("source", -1)))

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for (t, lv) in sorted(self.cells):
            c = self.cells[(t, lv)]
            name, family, relation = self.transforms[t]
            rows.append({"transform": name, "family": family, "relation": relation, "level": self.levels[t][lv],
                         "pairs": c.pairs, "violations": c.violations, "crashes": c.crashes, "timeouts": c.timeouts,
                         "required": c.required, "lost": {w: int(c.lost.get(w, 0)) for w in WHATS},
                         "violating_by": {w: int(c.violating_by.get(w, 0)) for w in WHATS},
                         "lost_labelled": c.labelled, "real_violations": c.real_violations,
                         "by_severity": {k: int(c.by_severity.get(k, 0)) for k in fnd.SEVERITIES},
                         "by_evidence": {k: int(c.by_evidence.get(k, 0)) for k in fnd.EVIDENCE_KINDS},
                         "label_kept": c.label_kept, "improved": c.improved,
                         "mean_edits": round(c.edits / c.pairs, 1) if c.pairs else None,
                         "nearest_m": round(min(c.nearest), 2) if c.nearest else None})
        return {"thresholds": self.th.to_dict(), "cells": rows}


def families(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Pairs and violating pairs per family (for the comparison with Dong et al.)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        f = out.setdefault(r["family"], {"pairs": 0, "violations": 0})
        f["pairs"] += int(r["pairs"])
        f["violations"] += int(r["violations"])
    return out
