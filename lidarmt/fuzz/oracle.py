"""MR1's output checks: the study's count relation and the strict subset relation O ⊆ O′.

**Count relation** (what the study checked): a violation when |O| > |O′| overall; per class c, when
|O_c| > |O′_c|. ``count_violation`` is the overall one (the study's table), ``class_violations`` lists the
classes whose count dropped.

**Subset relation** O ⊆ O′: every source obstacle must reappear in the follow-up. Matching rule:

* a source obstacle i and a follow-up obstacle j are *compatible* when they have the same class and either
  the Jaccard index of their point-index sets is at least 0.5 (the follow-up keeps the source points at the
  same indices, so shared indices are shared points), or, failing that, their bird's-eye polygons overlap
  with IoU at least 0.5;
* the score of a compatible pair is max(Jaccard, IoU); the assignment is one-to-one and maximises the total
  score (Hungarian algorithm, :func:`scipy.optimize.linear_sum_assignment`).

Each unmatched source obstacle is a finding, named by what happened to its points. Let j* be the follow-up
obstacle that holds most of them:

* ``vanished``: no follow-up obstacle holds any of its points;
* ``merged``: j* is matched to another source obstacle (its points were absorbed into that one's obstacle);
* ``reclassified``: j* is not matched and has another class;
* ``degraded``: j* has the same class but too little overlap (split, shrunk or shifted beyond the thresholds).
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

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "class": self.cls.value, "kind": self.kind,
                             "shared": round(self.shared, 4)}
        if self.into is not None:
            d["into"] = self.into
        if self.partner is not None:
            d["partner"] = self.partner
        if self.to_cls is not None:
            d["to_class"] = self.to_cls.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Missing:
        return cls(d["source"], ObstacleClass(d["class"]), d["kind"], d.get("into"), d.get("partner"),
                   ObstacleClass(d["to_class"]) if d.get("to_class") else None, float(d.get("shared", 0.0)))

    def describe(self) -> str:
        base = f"source obstacle #{self.source} ({self.cls.value})"
        if self.kind == "vanished":
            return f"{base} vanished: no follow-up obstacle holds any of its points"
        if self.kind == "merged":
            return (f"{base} merged into follow-up obstacle #{self.into}, which matches source obstacle "
                    f"#{self.partner} ({self.shared:.0%} of its points)")
        if self.kind == "reclassified":
            return (f"{base} became {self.to_cls.value if self.to_cls else '?'} (follow-up obstacle "
                    f"#{self.into}, {self.shared:.0%} of its points)")
        return f"{base} degraded: follow-up obstacle #{self.into} holds only {self.shared:.0%} of its points"


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts_source": {c.value: v for c, v in self.counts_source.items()},
            "counts_follow": {c.value: v for c, v in self.counts_follow.items()},
            "count_violation": self.count_violation,
            "class_violations": [c.value for c in self.class_violations],
            "subset_violation": self.subset_violation,
            "missing": [m.to_dict() for m in self.missing],
            "matches": [[i, j, round(s, 4)] for i, j, s in self.matches],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            {ObstacleClass(k): int(v) for k, v in d["counts_source"].items()},
            {ObstacleClass(k): int(v) for k, v in d["counts_follow"].items()},
            [(int(i), int(j), float(s)) for i, j, s in d.get("matches", [])],
            [Missing.from_dict(m) for m in d.get("missing", [])],
        )


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


def _bev_iou(a, b) -> float:
    from shapely.geometry import Polygon

    def poly(o):
        p = np.asarray(o.polygon)[:, :2] if o.polygon is not None and len(o.polygon) >= 3 else None
        if p is None:
            c, d = np.asarray(o.center[:2]), np.asarray(o.direction[:2])
            d = d / (np.linalg.norm(d) or 1.0)
            e = np.array([-d[1], d[0]])
            hl, hw = max(o.length, 1e-3) / 2, max(o.width, 1e-3) / 2
            p = np.array([c + d * hl + e * hw, c - d * hl + e * hw, c - d * hl - e * hw, c + d * hl - e * hw])
        g = Polygon(p)
        return g if g.is_valid else g.buffer(0)

    pa, pb = poly(a), poly(b)
    inter = pa.intersection(pb).area
    union = pa.area + pb.area - inter
    return float(inter / union) if union > 0 else 0.0


def judge(source: Obstacles, follow: Obstacles, *, jaccard_min: float = JACCARD_MIN,
          iou_min: float = IOU_MIN) -> Verdict:
    """Check MR1 on one pair: counts per class and the one-to-one subset matching (module docstring)."""
    from scipy.optimize import linear_sum_assignment

    m, k = len(source), len(follow)
    shared = shared_points(source, follow)
    size_s = np.array([len(o.point_indices) for o in source], dtype=np.int64)
    size_f = np.array([len(o.point_indices) for o in follow], dtype=np.int64)
    score = np.zeros((m, k))
    for i in range(m):
        for j in range(k):
            if source[i].cls != follow[j].cls:
                continue
            union = size_s[i] + size_f[j] - shared[i, j]
            jac = shared[i, j] / union if union > 0 else 0.0
            s = jac if jac >= jaccard_min else 0.0
            if s == 0.0 and _boxes_close(source[i], follow[j]):
                iou = _bev_iou(source[i], follow[j])
                s = iou if iou >= iou_min else 0.0
            score[i, j] = s
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
        if k == 0 or shared[i].max() == 0:
            missing.append(Missing(i, cls, "vanished"))
            continue
        j = int(np.argmax(shared[i]))
        frac = float(shared[i, j] / size_s[i]) if size_s[i] else 0.0
        if j in partner_of:
            missing.append(Missing(i, cls, "merged", into=j, partner=partner_of[j], shared=frac))
        elif follow[j].cls != cls:
            missing.append(Missing(i, cls, "reclassified", into=j, to_cls=follow[j].cls, shared=frac))
        else:
            missing.append(Missing(i, cls, "degraded", into=j, shared=frac))
    return Verdict(source.counts(), follow.counts(), matches, missing)


def _boxes_close(a, b) -> bool:
    """Cheap pre-test for the IoU: the centres are closer than the sum of the half-diagonals."""
    da = 0.5 * float(np.hypot(a.length, a.width))
    db = 0.5 * float(np.hypot(b.length, b.width))
    return float(np.hypot(*(np.asarray(a.center[:2]) - np.asarray(b.center[:2])))) <= da + db
