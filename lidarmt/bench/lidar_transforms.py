"""The LiDAR-transformation bench: the same transformed sweeps through several perception modules, compared
pairwise per (frame, transformation, level, trial).

Each module runs its own campaign of :mod:`lidarmt.lidar.campaign` (so its journal can be a later bench's
baseline); the follow-ups are the same for every module, since a transformation's seed depends only on
(campaign seed, frame, transformation, level, trial). A pair violates as ``lidarmt fuzz --transforms`` decides
it: the transformation's relation at the fold's thresholds (:func:`lidarmt.lidar.relations.judge_facts`).
Rows: one exact McNemar test per transformation and over all of them (and the crash/timeout row). Speed is the
median perception call of the follow-ups from the journals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lidarmt.bench.compare import Relation, decide, independence, median_ms, paired_rows
from lidarmt.bench.folder import BenchPlan, module_records
from lidarmt.engine.stats import rate
from lidarmt.lidar.relations import Thresholds, judge_facts

ALL = "all"
RELATION = "relation"


def _violates(config: Any, th: Thresholds, key: tuple[int, ...], rec: Mapping[str, Any]) -> bool:
    return bool(judge_facts(rec["facts"], config.transforms[key[1]].relation, th))


def summarize(plan: BenchPlan, *, thresholds: Thresholds, alpha: float, correction: str) -> dict[str, Any]:
    """The deterministic summary of a LiDAR-transformation bench (summary.json)."""
    cfg0 = plan.baseline.config
    names = [t.name for t in cfg0.transforms]
    groups = [*names, ALL]
    records = {m.name: module_records(plan.folder(m), m.config) for m in plan.modules}
    marked = {}
    for m in plan.modules:
        marked[m.name] = {k: ({**r, "_viol": _violates(m.config, thresholds, k, r)} if r["status"] == "ok" else r)
                          for k, r in records[m.name].items()}
    rels = [Relation(RELATION, "relation violated", lambda r: bool(r["_viol"]))]

    def groups_of(key: tuple[int, ...]) -> tuple[str, str]:
        return names[key[1]], ALL

    modules = []
    for i, m in enumerate(plan.modules):
        recs = marked[m.name]
        per: dict[str, Any] = {}
        for g in groups:
            ok = [r for k, r in recs.items() if r["status"] == "ok" and (g == ALL or names[k[1]] == g)]
            per[g] = rate(sum(bool(r["_viol"]) for r in ok), len(ok))
        modules.append({
            "name": m.name, "role": "baseline" if i == 0 else "candidate", "sut": m.config.sut.to_dict(),
            "origin": m.origin, "pairs_expected": m.config.total, "pairs_done": len(recs),
            "crashes": sum(r["status"] == "crash" for r in recs.values()),
            "timeouts": sum(r["status"] == "timeout" for r in recs.values()),
            "speed": {"median_ms": median_ms([r["sut_s"] for r in recs.values() if r["status"] == "ok"
                                              and "sut_s" in r]), "unit": "ms per follow-up"},
            "rates": {RELATION: per},
        })
    comparisons = []
    base = plan.baseline
    for m in plan.modules[1:]:
        rows = paired_rows(marked[base.name], marked[m.name], rels, groups_of, groups)
        for r in rows:
            r["transform"] = r.pop("group")
        decide(rows, alpha=alpha, correction=correction)
        comparisons.append({"baseline": base.name, "candidate": m.name, "rows": rows,
                            "independence": independence(marked[base.name], marked[m.name]),
                            "regressions": sum(r["regression"] for r in rows),
                            "improvements": sum(r["improvement"] for r in rows)})
    shared = {k: v for k, v in cfg0.to_dict().items() if k not in ("sut", "timeout")}
    return {
        "kind": "lidar-transform",
        "relation": "LiDAR relations per transformation (" + ", ".join(
            sorted({t.relation for t in cfg0.transforms})) + ")",
        "config": shared, "thresholds": thresholds.to_dict(), "alpha": alpha, "correction": correction,
        "baseline": base.name, "test": "exact McNemar (two-sided binomial test on the discordant pairs)",
        "modules": modules, "comparisons": comparisons,
        "regressions": sum(c["regressions"] for c in comparisons),
        "verdict": "regression" if any(c["regressions"] for c in comparisons) else "no regression",
    }
