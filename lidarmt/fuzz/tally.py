"""Totals of a campaign, folded from its journal records (order-independent, so resumes add up exactly)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lidarmt.types import CLASS_ORDER

MISSING_KINDS = ("vanished", "merged", "reclassified", "degraded")

# Zhou & Sun, CACM 62(3) 2019: |O| > |O'| over 1,000 frame pairs per n
STUDY_RATES = {10: 0.027, 100: 0.121, 1000: 0.335}


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

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "count_violations": self.count_violations,
                "any_class_violations": self.any_class_violations, "subset_violations": self.subset_violations,
                "crashes": self.crashes, "timeouts": self.timeouts, "source_obstacles": self.source_obstacles,
                "missing": dict(self.missing), "classes": {k: v.to_dict() for k, v in self.classes.items()}}


class Tally:
    """Per-n totals; :meth:`add` each journal record once (duplicates of a key are ignored)."""

    def __init__(self, ns: Iterable[int]) -> None:
        self.by_n: dict[int, NTally] = {int(n): NTally() for n in ns}
        self._seen: set[tuple[int, int, int]] = set()

    def add(self, rec: dict[str, Any]) -> None:
        key = (int(rec["frame"]), int(rec["n"]), int(rec["trial"]))
        if key in self._seen:
            return
        self._seen.add(key)
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
        t.count_violations += bool(v["count_violation"])
        t.any_class_violations += bool(v["class_violations"])
        t.subset_violations += bool(v["subset_violation"])
        t.source_obstacles += sum(v["counts_source"].values())
        for m in v["missing"]:
            t.missing[m["kind"]] = t.missing.get(m["kind"], 0) + 1
            t.classes[m["class"]].missing += 1
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

    def seen(self, key: tuple[int, ...]) -> bool:
        return tuple(key) in self._seen

    @property
    def done(self) -> int:
        return len(self._seen)

    def to_dict(self) -> dict[str, Any]:
        return {str(n): self.by_n[n].to_dict() for n in sorted(self.by_n)}
