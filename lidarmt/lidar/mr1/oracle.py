"""MR1's output checks: the study's count relation and the strict subset relation O ⊆ O′.

**Count relation** (what the study checked): a violation when |O| > |O′| overall; per class c, when
|O_c| > |O′_c|. ``count_violation`` is the overall one (the study's table), ``class_violations`` lists the
classes whose count dropped.

**Subset relation** O ⊆ O′: every source obstacle must reappear in the follow-up. Matching rule:

* a source obstacle i and a follow-up obstacle j are *compatible* when they have the same class and either
  the Jaccard index of their point-index sets is at least 0.5 (the follow-up keeps the source points at the
  same indices, so shared indices are shared points), or, for a source obstacle that no follow-up obstacle
  matches by its points, their bird's-eye polygons (hulls) overlap with IoU at least 0.5;
* the score of a compatible pair is max(Jaccard, IoU); the assignment is one-to-one and maximises the total
  score (Hungarian algorithm, :func:`scipy.optimize.linear_sum_assignment`).

Each unmatched source obstacle is a finding, named by what happened to its points. Let j* be the follow-up
obstacle that holds most of them:

* ``vanished``: no follow-up obstacle holds any of its points;
* ``merged``: j* is matched to another source obstacle (its points were absorbed into that one's obstacle);
* ``reclassified``: j* is not matched and has another class;
* ``degraded``: j* has the same class but too little overlap (split, shrunk or shifted beyond the thresholds).

Each finding also records what was lost, so that a perception engineer can tell a car from junk: the source
obstacle's number of points, its size (length × width × height of its box, metres) and its distance from the
sensor (of its centre, in x/y). The reports break violations down by these (:mod:`lidarmt.engine.tally`).

**Labels.** Where the source frame's labels say which objects it holds (KITTI boxes, tracklets, SemanticKITTI
instances, the simulator's ground truth), each lost obstacle is also matched to them
(:func:`lidarmt.lidar.perception.apollo.evaluate.label_lost`, rule :data:`~lidarmt.lidar.perception.apollo.evaluate.LABEL_MATCH_RULE`):
``label`` is ``"labelled"`` (it overlaps a labelled car, pedestrian or cyclist: a real object was lost;
``label_class``, ``label_iou``), ``"unlabelled"`` (in the labelled region, matching no label: junk) or
``"outside"`` (beyond the labelled region, e.g. behind KITTI's camera view). Journals written before these
fields existed read back with ``label`` None (not known).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lidarmt.types import CLASS_ORDER, ObstacleClass, Obstacles

JACCARD_MIN = 0.5
IOU_MIN = 0.5


@dataclass(slots=True)
class Missing:
    """A source obstacle without a match in the follow-up."""

    source: int  # index in O
    cls: ObstacleClass
    kind: str  # vanished | merged | reclassified | degraded
    into: int | None = None  # the follow-up obstacle holding most of its points
    partner: int | None = None  # for merged: the source obstacle matched to ``into``
    to_cls: ObstacleClass | None = None  # for reclassified
    shared: float = 0.0  # fraction of its points held by ``into``
    points: int | None = None  # the lost obstacle's number of points
    size: tuple[float, float, float] | None = None  # its box: length, width, height (m)
    distance: float | None = None  # of its centre from the sensor, in x/y (m)
    label: str | None = None  # labelled | unlabelled | outside; None: the frame's labels do not say (or old journal)
    label_class: str | None = None  # for labelled: the class of the labelled object it overlaps
    label_iou: float | None = None  # for labelled: that overlap (bird's-eye IoU)
    lane: str | None = None  # in | next | off the ego lane (lidarmt.lidar.lanes); None: not known (old journal)

    @property
    def volume(self) -> float | None:
        """l × w × h of the lost obstacle's box (m³), None when unknown (a journal written before it was kept)."""
        return None if self.size is None else float(self.size[0] * self.size[1] * self.size[2])

    def what(self) -> str:
        """``"42 pts, 4.1×1.8×1.5 m, 12.3 m away"`` (what is known of the lost obstacle)."""
        return describe_lost(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "class": self.cls.value, "kind": self.kind,
                             "shared": round(self.shared, 4)}
        if self.points is not None:
            d["points"] = int(self.points)
        if self.size is not None:
            d["size"] = [round(float(v), 3) for v in self.size]
        if self.distance is not None:
            d["distance"] = round(float(self.distance), 3)
        if self.into is not None:
            d["into"] = self.into
        if self.partner is not None:
            d["partner"] = self.partner
        if self.to_cls is not None:
            d["to_class"] = self.to_cls.value
        if self.label is not None:
            d["label"] = self.label
            if self.label_class is not None:
                d["label_class"] = self.label_class
            if self.label_iou is not None:
                d["label_iou"] = round(float(self.label_iou), 4)
        if self.lane is not None:
            d["lane"] = self.lane
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Missing:
        size = d.get("size")
        return cls(d["source"], ObstacleClass(d["class"]), d["kind"], d.get("into"), d.get("partner"),
                   ObstacleClass(d["to_class"]) if d.get("to_class") else None, float(d.get("shared", 0.0)),
                   int(d["points"]) if d.get("points") is not None else None,
                   (float(size[0]), float(size[1]), float(size[2])) if size is not None else None,
                   float(d["distance"]) if d.get("distance") is not None else None,
                   d.get("label"), d.get("label_class"),
                   float(d["label_iou"]) if d.get("label_iou") is not None else None, d.get("lane"))

    def describe(self) -> str:
        """One line, with the obstacles named by their identity across source and follow-up
        (:func:`follow_names`): a follow-up obstacle matched to source obstacle #i is #i, the one holding most
        points of a lost #i is #i′."""
        what = self.what()
        base = f"source obstacle #{self.source} ({self.cls.value}{', ' + what if what else ''})"
        if self.kind == "vanished":
            return f"{base} vanished: no follow-up obstacle holds any of its points"
        if self.kind == "merged":
            return (f"{base} merged into #{self.partner} (the follow-up obstacle matched to source obstacle "
                    f"#{self.partner} holds {self.shared:.0%} of its points)")
        if self.kind == "reclassified":
            return (f"{base} became {self.to_cls.value if self.to_cls else '?'} (#{self.source}′ in the follow-up "
                    f"holds {self.shared:.0%} of its points)")
        return (f"{base} degraded (split or shrunk): #{self.source}′ in the follow-up holds only "
                f"{self.shared:.0%} of its points")


def follow_names(verdict: Verdict, n_follow: int) -> list[str]:
    """One identity per obstacle across source and follow-up: the name of each follow-up obstacle. A follow-up
    obstacle matched to source obstacle i (the oracle's one-to-one matching) is ``#i``, as in the source; one
    that holds most points of a lost source obstacle i without matching it (reclassified, split or shrunk) is
    ``#i′``; any other is new, ``new 1``, ``new 2``, … in the follow-up's order. Source obstacles keep their
    index ``#i``."""
    names: list[str | None] = [None] * n_follow
    for i, j, _ in verdict.matches:
        if 0 <= j < n_follow:
            names[j] = f"#{i}"
    for m in verdict.missing:
        if m.into is not None and m.kind != "merged" and 0 <= m.into < n_follow and names[m.into] is None:
            names[m.into] = f"#{m.source}′"
    k = 0
    out = []
    for nm in names:
        if nm is None:
            k += 1
            nm = f"new {k}"
        out.append(nm)
    return out


@dataclass(slots=True)
class Verdict:
    """The oracle's judgement of one source/follow-up pair."""

    counts_source: dict[ObstacleClass, int]
    counts_follow: dict[ObstacleClass, int]
    matches: list[tuple[int, int, float]] = field(default_factory=list)  # (source, follow-up, score)
    missing: list[Missing] = field(default_factory=list)

    @property
    def n_source(self) -> int:
        return sum(self.counts_source.values())

    @property
    def n_follow(self) -> int:
        return sum(self.counts_follow.values())

    @property
    def count_violation(self) -> bool:
        """The study's relation |O| <= |O′| fails."""
        return self.n_source > self.n_follow

    @property
    def class_violations(self) -> list[ObstacleClass]:
        return [c for c in CLASS_ORDER if self.counts_source[c] > self.counts_follow[c]]

    @property
    def subset_violation(self) -> bool:
        """O ⊆ O′ fails: some source obstacle has no match."""
        return bool(self.missing)

    def to_dict(self, *, matches: bool = True) -> dict[str, Any]:
        """JSON form; ``matches=False`` leaves out the (source, follow-up, score) list (the journal does:
        with hundreds of obstacles per frame it would dominate the file)."""
        d = {
            "counts_source": {c.value: v for c, v in self.counts_source.items()},
            "counts_follow": {c.value: v for c, v in self.counts_follow.items()},
            "count_violation": self.count_violation,
            "class_violations": [c.value for c in self.class_violations],
            "subset_violation": self.subset_violation,
            "missing": [m.to_dict() for m in self.missing],
        }
        if matches:
            d["matches"] = [[i, j, round(s, 4)] for i, j, s in self.matches]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            _ordered_counts(d["counts_source"]),
            _ordered_counts(d["counts_follow"]),
            [(int(i), int(j), float(s)) for i, j, s in d.get("matches", [])],
            [Missing.from_dict(m) for m in d.get("missing", [])],
        )


def _ordered_counts(raw: dict[str, Any]) -> dict[ObstacleClass, int]:
    """A stored per-class count in :data:`CLASS_ORDER`, as :meth:`Obstacles.counts` makes it, whatever the order of
    the stored keys (a bundle's JSON is written with sorted keys: car, cyclist, pedestrian, unknown), so that what
    is shown from a reloaded verdict is what was shown when it was made."""
    got = {ObstacleClass(k): int(v) for k, v in raw.items()}
    return {c: got.pop(c) for c in CLASS_ORDER if c in got} | got


def describe_lost(m: dict[str, Any]) -> str:
    """What a journal's lost-obstacle record says about the obstacle: ``"42 pts, 4.1×1.8×1.5 m, 12.3 m away"``
    (only what is known; an empty string for records written before points, size and distance were kept)."""
    parts = []
    if m.get("points") is not None:
        parts.append(f"{m['points']} pts")
    if m.get("size") is not None:
        parts.append("×".join(f"{v:.1f}" for v in m["size"]) + " m")
    if m.get("distance") is not None:
        parts.append(f"{m['distance']:.1f} m away")
    label = m.get("label")
    if label == "labelled":
        iou = m.get("label_iou")
        parts.insert(0, f"LABELLED {m.get('label_class', '?')}" + (f" (IoU {iou:.2f})" if iou is not None else ""))
    elif label == "unlabelled":
        parts.append("unlabelled")
    elif label == "outside":
        parts.append("outside the labelled view")
    return ", ".join(parts)


#: what a verdict's lost obstacles are annotated with after judging (labels, the ego lane): not the oracle's own
LABEL_KEYS = ("label", "label_class", "label_iou", "lane")


def without_labels(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict's JSON form without what the labels (and the ego lane) say of its lost obstacles (to compare a
    verdict with one written before lost obstacles were matched to labels)."""
    if not isinstance(verdict, dict) or not isinstance(verdict.get("missing"), list):
        return verdict  # not a verdict (a corrupt file): compared as it is
    return {**verdict, "missing": [{k: v for k, v in m.items() if k not in LABEL_KEYS} if isinstance(m, dict) else m
                                   for m in verdict["missing"]]}


def attach_labels(verdict: Verdict, labels: dict[int, dict[str, Any]] | None) -> Verdict:
    """Set what the labels say of each lost obstacle (``labels``: source index -> ``{"label": ...,
    "label_class": ..., "label_iou": ...}`` from :func:`lidarmt.lidar.perception.apollo.evaluate.label_lost`; None:
    the frame has no object labels, nothing is set). Returns ``verdict``."""
    if labels is None:
        return verdict
    for m in verdict.missing:
        info = labels.get(m.source)
        if info is not None:
            m.label, m.label_class, m.label_iou = info["label"], info.get("label_class"), info.get("label_iou")
    return verdict


def attach_lanes(verdict: Verdict, lanes: dict[int, str] | None) -> Verdict:
    """Set where each lost obstacle lies for the planner (``lanes``: source index -> in | next | off the ego
    lane, :func:`lidarmt.lidar.lanes.lane_of_obstacles`). Returns ``verdict``."""
    if lanes:
        for m in verdict.missing:
            m.lane = lanes.get(m.source, m.lane)
    return verdict


def _lost(o, i: int, cls: ObstacleClass, kind: str, **kw: Any) -> Missing:
    c = np.asarray(o.center, dtype=np.float64)
    return Missing(i, cls, kind, points=len(o.point_indices), size=(float(o.length), float(o.width), float(o.height)),
                   distance=float(np.hypot(c[0], c[1])), **kw)


def _owner(obstacles: Obstacles, size: int) -> np.ndarray:
    """Per point index < size: the obstacle that holds it, or -1 (first holder wins)."""
    owner = np.full(size, -1, dtype=np.int64)
    for k in range(len(obstacles) - 1, -1, -1):
        idx = np.asarray(obstacles[k].point_indices, dtype=np.int64)
        idx = idx[(idx >= 0) & (idx < size)]
        owner[idx] = k
    return owner


def shared_points(source: Obstacles, follow: Obstacles) -> np.ndarray:
    """(|O|, |O′|) matrix of the number of point indices each pair has in common."""
    m, k = len(source), len(follow)
    if m == 0 or k == 0:
        return np.zeros((m, k), dtype=np.int64)
    hi = 0
    for o in (*source, *follow):
        if len(o.point_indices):
            hi = max(hi, int(np.max(o.point_indices)) + 1)
    own_s, own_f = _owner(source, hi), _owner(follow, hi)
    both = (own_s >= 0) & (own_f >= 0)
    flat = own_s[both] * k + own_f[both]
    return np.bincount(flat, minlength=m * k).reshape(m, k)


def _polygon(o):
    """The obstacle's bird's-eye footprint as a shapely polygon (its hull, or its box when the hull is degenerate)."""
    from shapely.geometry import Polygon

    p = np.asarray(o.polygon)[:, :2] if o.polygon is not None and len(o.polygon) >= 3 else None
    if p is None:
        c, d = np.asarray(o.center[:2], dtype=np.float64), np.asarray(o.direction[:2], dtype=np.float64)
        d = d / (np.linalg.norm(d) or 1.0)
        e = np.array([-d[1], d[0]])
        hl, hw = max(o.length, 1e-3) / 2, max(o.width, 1e-3) / 2
        p = np.array([c + d * hl + e * hw, c - d * hl + e * hw, c - d * hl - e * hw, c + d * hl - e * hw])
    g = Polygon(p)
    return g if g.is_valid else g.buffer(0)


def _iou(pa, pb) -> float:
    inter = pa.intersection(pb).area
    union = pa.area + pb.area - inter
    return float(inter / union) if union > 0 else 0.0


def _reach(obstacles: Obstacles) -> tuple[np.ndarray, np.ndarray]:
    """Centres (K, 2) and half-diagonals (K,) for a cheap "could the footprints overlap" pre-test."""
    if not len(obstacles):
        return np.zeros((0, 2)), np.zeros(0)
    c = np.array([np.asarray(o.center[:2], dtype=np.float64) for o in obstacles])
    r = np.array([0.5 * float(np.hypot(o.length, o.width)) for o in obstacles])
    return c, r


def judge(source: Obstacles, follow: Obstacles, *, jaccard_min: float = JACCARD_MIN,
          iou_min: float = IOU_MIN) -> Verdict:
    """Check MR1 on one pair: counts per class and the one-to-one subset matching (module docstring)."""
    from scipy.optimize import linear_sum_assignment

    m, k = len(source), len(follow)
    shared = shared_points(source, follow)
    size_s = np.array([len(o.point_indices) for o in source], dtype=np.int64)
    size_f = np.array([len(o.point_indices) for o in follow], dtype=np.int64)
    cls_s = np.array([o.cls.value for o in source], dtype=object)
    cls_f = np.array([o.cls.value for o in follow], dtype=object)
    same = cls_s[:, None] == cls_f[None, :] if m and k else np.zeros((m, k), dtype=bool)
    union = size_s[:, None] + size_f[None, :] - shared
    jac = np.divide(shared, union, out=np.zeros((m, k)), where=union > 0)
    score = np.where(same & (jac >= jaccard_min), jac, 0.0)
    # BEV IoU only for a source obstacle that no follow-up obstacle matches by its points
    need = [i for i in range(m) if not score[i].any()]
    if need and k:
        cs, rs = _reach(source)
        cf, rf = _reach(follow)
        polys_f: dict[int, Any] = {}
        for i in need:
            near = np.hypot(*(cf - cs[i]).T) <= rs[i] + rf
            cand = np.flatnonzero(same[i] & near)
            if not len(cand):
                continue
            pa = _polygon(source[i])
            for j in cand:
                if j not in polys_f:
                    polys_f[j] = _polygon(follow[j])
                iou = _iou(pa, polys_f[j])
                if iou >= iou_min:
                    score[i, j] = iou
    matches: list[tuple[int, int, float]] = []
    if m and k and score.any():
        rows, cols = linear_sum_assignment(score, maximize=True)
        matches = [(int(i), int(j), float(score[i, j])) for i, j in zip(rows, cols, strict=True) if score[i, j] > 0]
    matched_s = {i for i, _, _ in matches}
    partner_of = {j: i for i, j, _ in matches}
    missing: list[Missing] = []
    for i in range(m):
        if i in matched_s:
            continue
        cls = source[i].cls
        o = source[i]
        if k == 0 or shared[i].max() == 0:
            missing.append(_lost(o, i, cls, "vanished"))
            continue
        j = int(np.argmax(shared[i]))
        frac = float(shared[i, j] / size_s[i]) if size_s[i] else 0.0
        if j in partner_of:
            missing.append(_lost(o, i, cls, "merged", into=j, partner=partner_of[j], shared=frac))
        elif follow[j].cls != cls:
            missing.append(_lost(o, i, cls, "reclassified", into=j, to_cls=follow[j].cls, shared=frac))
        else:
            missing.append(_lost(o, i, cls, "degraded", into=j, shared=frac))
    return Verdict(source.counts(), follow.counts(), matches, missing)
