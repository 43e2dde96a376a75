"""Totals of a campaign, folded from its journal records (order-independent, so resumes add up exactly).

**Filters** (``--min-points``, ``--min-size``; :class:`LostFilter`) are applied here, when the journal is folded
into totals, never when it is written: the journal keeps every verdict, so a campaign can be reported again with
other filters, and resumed with any. A lost obstacle passes the filter when it has at least ``min_points`` points
and a box of at least ``min_size`` m³ (l × w × h); with a filter set, a pair counts as a count-relation,
per-class or subset violation only when at least one lost obstacle (of that class) passes it, so that pairs that
lost only junk (a 3-point "car" on a scan-line arc) are not counted. The per-class decreased / stayed / increased
shares (the study's Figure 3) are counts of obstacles and are not filtered. Lost obstacles recorded by an older
lidarmt without points or size pass every filter.

**Breakdown.** Every lost obstacle that passes the filter is counted by its size class (box volume: < 1 m³,
1–10 m³, > 10 m³) and distance band (centre to sensor in x/y: 0–20 m, 20–40 m, 40+ m).

**Labelled objects.** Where the source frames carry object labels (records with ``labelled``: true), every lost
obstacle that passes the filter is also counted by what the labels say of it (``label`` of the record,
:func:`lidarmt.lidar.perception.apollo.evaluate.label_lost`): a LABELLED object (a real car, pedestrian or cyclist was
lost; counted by the obstacle's class and by the labelled object's class), UNLABELLED (in the labelled region,
matching no label: junk), or OUTSIDE the labelled region; ``labelled_violations`` counts the pairs that lost a
labelled object, ``labelled_source`` the source obstacles that are labelled objects (summed over the pairs: the
denominator of the labelled objects lost), and ``breakdown_labelled`` is the size × distance breakdown of the labelled ones. Records
written before the labels were matched count as ``not known``.

**Evidence and severity** (:mod:`lidarmt.engine.findings`). Every lost obstacle that passes the filter is also
counted by its evidence (labelled object, junk, outside labels, low evidence, no labels) and its severity
(critical, high, medium, low); ``real_violations`` counts the pairs that lost an obstacle other than junk or a
low-evidence one (the headline's "excluding junk/low-evidence"), ``worst`` the pairs by their most severe finding.

**Reach.** The mean number of added points that reached the network per pair (``added_reached`` of the
records, :class:`lidarmt.lidar.mr1.inject.NetworkReach`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import lidarmt.engine.findings as fnd
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.types import CLASS_ORDER

MISSING_KINDS = ("vanished", "merged", "reclassified", "degraded")

# Zhou & Sun, CACM 62(3) 2019: |O| > |O'| over 1,000 frame pairs per n
STUDY_RATES = {10: 0.027, 100: 0.121, 1000: 0.335}

#: Size classes of a lost obstacle by its box volume (m³): (label, upper bound).
SIZE_CLASSES: tuple[tuple[str, float], ...] = (("<1 m³", 1.0), ("1–10 m³", 10.0), (">10 m³", math.inf))
#: Distance bands of a lost obstacle's centre from the sensor (m): (label, upper bound).
DISTANCE_BANDS: tuple[tuple[str, float], ...] = (("0–20 m", 20.0), ("20–40 m", 40.0), ("40+ m", math.inf))
UNKNOWN = "unknown"
#: what the labels say of a lost obstacle (journal field ``label``), and "not known" for records without it
LABEL_KINDS = ("labelled", "unlabelled", "outside", "not known")


def size_class(m: dict[str, Any]) -> str:
    """The size class of a journal's lost-obstacle record (:data:`SIZE_CLASSES`), ``"unknown"`` without a size."""
    size = m.get("size")
    if size is None:
        return UNKNOWN
    vol = float(size[0]) * float(size[1]) * float(size[2])
    return next(label for label, hi in SIZE_CLASSES if vol < hi)


def distance_band(m: dict[str, Any]) -> str:
    """The distance band of a lost-obstacle record (:data:`DISTANCE_BANDS`), ``"unknown"`` without a distance."""
    d = m.get("distance")
    if d is None:
        return UNKNOWN
    return next(label for label, hi in DISTANCE_BANDS if float(d) < hi)


@dataclass(frozen=True, slots=True)
class LostFilter:
    """Which lost obstacles count (``--min-points``, ``--min-size`` in m³); the default counts all."""

    min_points: int = 0
    min_size: float = 0.0

    def __post_init__(self) -> None:
        if self.min_points < 0:
            raise FuzzArgumentError(f"--min-points {self.min_points}: give 0 or more points")
        if not (math.isfinite(self.min_size) and self.min_size >= 0):
            raise FuzzArgumentError(f"--min-size {self.min_size}: give 0 or more cubic metres")

    @property
    def active(self) -> bool:
        return self.min_points > 0 or self.min_size > 0

    def keeps(self, m: dict[str, Any]) -> bool:
        """Whether a lost-obstacle record passes (records without points or size always do)."""
        if m.get("points") is not None and int(m["points"]) < self.min_points:
            return False
        size = m.get("size")
        return not (size is not None and float(size[0]) * float(size[1]) * float(size[2]) < self.min_size)

    def to_dict(self) -> dict[str, Any]:
        return {"min_points": self.min_points, "min_size_m3": self.min_size}

    def describe(self) -> str:
        parts = ([f"≥ {self.min_points} points"] if self.min_points else []) + (
            [f"≥ {self.min_size:g} m³"] if self.min_size else [])
        return "lost obstacles counted: " + (" and ".join(parts) if parts else "all")


@dataclass(slots=True)
class ClassTally:
    decreased: int = 0
    same: int = 0
    increased: int = 0
    source_total: int = 0
    follow_total: int = 0
    missing: int = 0  # source obstacles of this class without a match (subset relation)

    def to_dict(self) -> dict[str, int]:
        return {"decreased": self.decreased, "same": self.same, "increased": self.increased,
                "source_total": self.source_total, "follow_total": self.follow_total, "missing": self.missing}


@dataclass(slots=True)
class NTally:
    pairs: int = 0  # pairs judged (both perceptions ran)
    count_violations: int = 0  # |O| > |O'|
    any_class_violations: int = 0  # |O_c| > |O'_c| for some class c
    subset_violations: int = 0  # O not a subset of O'
    crashes: int = 0
    timeouts: int = 0
    source_obstacles: int = 0
    missing: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MISSING_KINDS, 0))
    classes: dict[str, ClassTally] = field(default_factory=lambda: {c.value: ClassTally() for c in CLASS_ORDER})
    lost_filtered_out: int = 0  # lost obstacles the filter left out
    breakdown: dict[str, dict[str, int]] = field(default_factory=dict)  # size class -> distance band -> lost
    reached_sum: int = 0  # added points that reached the network, over the pairs that recorded it
    reached_pairs: int = 0
    added_sum: int = 0  # added points in those pairs
    labelled_pairs: int = 0  # judged pairs whose source frame carries object labels
    labelled_violations: int = 0  # pairs that lost a labelled object (passing the filter)
    lost_by_label: dict[str, dict[str, int]] = field(default_factory=dict)  # label kind -> obstacle class -> lost
    labelled_as: dict[str, int] = field(default_factory=dict)  # class of the labelled objects lost -> count
    labelled_source: dict[str, int] = field(default_factory=dict)  # labelled objects among the source obstacles
    breakdown_labelled: dict[str, dict[str, int]] = field(default_factory=dict)  # as breakdown, labelled only
    real_violations: int = 0  # pairs that lost an obstacle other than junk or a low-evidence one
    by_severity: dict[str, int] = field(default_factory=lambda: dict.fromkeys(fnd.SEVERITIES, 0))
    by_evidence: dict[str, int] = field(default_factory=lambda: dict.fromkeys(fnd.EVIDENCE_KINDS, 0))
    worst: dict[str, int] = field(default_factory=lambda: dict.fromkeys(fnd.SEVERITIES, 0))  # pairs

    @property
    def reached_mean(self) -> float | None:
        """Mean added points per pair that reached the network (None when no record says)."""
        return self.reached_sum / self.reached_pairs if self.reached_pairs else None

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "count_violations": self.count_violations,
                "any_class_violations": self.any_class_violations, "subset_violations": self.subset_violations,
                "crashes": self.crashes, "timeouts": self.timeouts, "source_obstacles": self.source_obstacles,
                "missing": dict(self.missing), "classes": {k: v.to_dict() for k, v in self.classes.items()},
                "lost_filtered_out": self.lost_filtered_out, "breakdown": breakdown_dict(self.breakdown),
                "reached_mean": None if self.reached_mean is None else round(self.reached_mean, 3),
                "reached_pairs": self.reached_pairs, **self.labels_dict(), **self.findings_dict()}

    def findings_dict(self) -> dict[str, Any]:
        """Lost obstacles per severity and per evidence, pairs per worst severity, and the pairs that lost a real
        obstacle (not junk, not low evidence)."""
        return {"real_violations": self.real_violations, "by_severity": dict(self.by_severity),
                "by_evidence": dict(self.by_evidence), "worst_severity": dict(self.worst)}

    def labels_dict(self) -> dict[str, Any]:
        """The labelled/unlabelled split of the lost obstacles (every kind and class present, 0 when none)."""
        by = {k: {c.value: int(self.lost_by_label.get(k, {}).get(c.value, 0)) for c in CLASS_ORDER}
              for k in LABEL_KINDS}
        return {"labelled_pairs": self.labelled_pairs, "labelled_violations": self.labelled_violations,
                "lost_by_label": by,
                "labelled_as": {c.value: int(self.labelled_as.get(c.value, 0)) for c in CLASS_ORDER[:3]},
                "labelled_source": {c.value: int(self.labelled_source.get(c.value, 0)) for c in CLASS_ORDER[:3]},
                "breakdown_labelled": breakdown_dict(self.breakdown_labelled)}


def breakdown_dict(b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Size class -> distance band -> lost obstacles, every class and band present (0 when none), in order;
    an ``unknown`` row/column only when a record lacked the size or distance."""
    sizes = [lb for lb, _ in SIZE_CLASSES] + ([UNKNOWN] if UNKNOWN in b else [])
    bands = [lb for lb, _ in DISTANCE_BANDS] + ([UNKNOWN] if any(UNKNOWN in row for row in b.values()) else [])
    return {s: {d: int(b.get(s, {}).get(d, 0)) for d in bands} for s in sizes}


class KeyedTally:
    """What every relation's totals share: fold journal records key by key, each key once (a duplicate, e.g. a
    verdict written again by a resumed campaign, is ignored), order-independent, so a resumed or parallel
    campaign ends with exactly the totals of an uninterrupted one. Subclasses implement :meth:`_add`; records
    name their key in ``rec["key"]`` unless :meth:`key_of` says otherwise."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, ...]] = set()

    def key_of(self, rec: Any) -> tuple[int, ...]:
        return tuple(int(v) for v in rec["key"])

    def add(self, rec: Any) -> None:
        key = self.key_of(rec)
        if key in self._seen:
            return
        self._seen.add(key)
        self._add(key, rec)

    def _add(self, key: tuple[int, ...], rec: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def seen(self, key: tuple[int, ...]) -> bool:
        return tuple(key) in self._seen

    @property
    def done(self) -> int:
        return len(self._seen)


class Tally(KeyedTally):
    """Per-n totals of MR1; :meth:`add` each journal record once (duplicates of a key are ignored)."""

    def __init__(self, ns: Iterable[int], *, lost_filter: LostFilter | None = None) -> None:
        super().__init__()
        self.by_n: dict[int, NTally] = {int(n): NTally() for n in ns}
        self.lost_filter = lost_filter or LostFilter()

    def key_of(self, rec: Any) -> tuple[int, ...]:
        return int(rec["frame"]), int(rec["n"]), int(rec["trial"])

    def _add(self, key: tuple[int, ...], rec: Any) -> None:
        t = self.by_n.setdefault(key[1], NTally())
        status = rec["status"]
        if status == "crash":
            t.crashes += 1
            return
        if status == "timeout":
            t.timeouts += 1
            return
        v = rec["verdict"]
        t.pairs += 1
        flt = self.lost_filter
        kept = [m for m in v["missing"] if flt.keeps(m)]
        t.lost_filtered_out += len(v["missing"]) - len(kept)
        if flt.active:  # a pair counts only when it lost an obstacle that passes the filter (of that class)
            kept_cls = {m["class"] for m in kept}
            t.count_violations += bool(v["count_violation"] and kept)
            t.any_class_violations += any(c in kept_cls for c in v["class_violations"])
            t.subset_violations += bool(kept)
        else:
            t.count_violations += bool(v["count_violation"])
            t.any_class_violations += bool(v["class_violations"])
            t.subset_violations += bool(v["subset_violation"])
        t.source_obstacles += sum(v["counts_source"].values())
        t.labelled_pairs += bool(rec.get("labelled"))
        for c, k in (rec.get("labelled_source") or {}).items():  # source obstacles that are labelled objects
            t.labelled_source[c] = t.labelled_source.get(c, 0) + int(k)
        t.labelled_violations += any(m.get("label") == "labelled" for m in kept)
        t.real_violations += any(fnd.is_real(m) for m in kept)
        if kept:
            w = fnd.worst(kept)
            t.worst[w] = t.worst.get(w, 0) + 1
        for m in kept:
            t.missing[m["kind"]] = t.missing.get(m["kind"], 0) + 1
            sev, ev = fnd.severity(m), fnd.evidence(m)
            t.by_severity[sev] = t.by_severity.get(sev, 0) + 1
            t.by_evidence[ev] = t.by_evidence.get(ev, 0) + 1
            t.classes[m["class"]].missing += 1
            row = t.breakdown.setdefault(size_class(m), {})
            band = distance_band(m)
            row[band] = row.get(band, 0) + 1
            kind = m.get("label") if m.get("label") in LABEL_KINDS else "not known"
            per = t.lost_by_label.setdefault(kind, {})
            per[m["class"]] = per.get(m["class"], 0) + 1
            if kind == "labelled":
                lc = m.get("label_class") or m["class"]
                t.labelled_as[lc] = t.labelled_as.get(lc, 0) + 1
                row = t.breakdown_labelled.setdefault(size_class(m), {})
                row[band] = row.get(band, 0) + 1
        if rec.get("added_reached") is not None:
            t.reached_pairs += 1
            t.reached_sum += int(rec["added_reached"])
            t.added_sum += int(rec["n"])
        for c in CLASS_ORDER:
            a, b = v["counts_source"][c.value], v["counts_follow"][c.value]
            ct = t.classes[c.value]
            ct.source_total += a
            ct.follow_total += b
            if b < a:
                ct.decreased += 1
            elif b > a:
                ct.increased += 1
            else:
                ct.same += 1

    def to_dict(self) -> dict[str, Any]:
        return {str(n): self.by_n[n].to_dict() for n in sorted(self.by_n)}
