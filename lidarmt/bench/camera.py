"""The camera bench: camera campaigns of several steering models on the same transformed images, compared
pairwise per (image, transformation, parameter, trial).

Each model runs its own one-model campaign (so a model's journal can be reused as a later bench's baseline);
the transformed images are the same for every model, since a transformation's seed depends only on (campaign
seed, frame, transformation, parameter, trial). A pair violates as ``lidarmt camera fuzz`` decides it
(:meth:`lidarmt.camera.relations.CameraTally.violations`): DeepTest's Eq. 2 at λ with Eq. 3's filter at ε
where the seeds have labels (each model against its own MSE on the seeds, as DeepTest defines it), else
DeepRoad's |θ(i) − θ(τ(i))| > ε; with labels DeepRoad's relation is compared as well. Rows are per
transformation and over all of them. With labels, the models' errors on the seed images are compared with the
sign test (RMSE in the table). Speed is the median model time per image from the journals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lidarmt.bench.compare import Relation, decide, independence, median_ms, paired_rows
from lidarmt.bench.folder import BenchPlan, module_records
from lidarmt.bench.stats import sign_test
from lidarmt.engine.stats import rate

ALL = "all"


def _tally(config: Any, records: Mapping[tuple[int, ...], Mapping[str, Any]]) -> Any:
    tally = config.new_tally()
    for r in records.values():
        tally.add(r)
    return tally


def violating(tally: Any, criteria: Any) -> dict[str, set[tuple[int, ...]]]:
    """The keys each relation finds violated in a one-model tally: "deeptest" (with labels, Eq. 3 filtered) or
    "deeproad" at the criteria's tolerance (always)."""
    out: dict[str, set[tuple[int, ...]]] = {"deeproad": set()}
    for (m, t, p), g in tally.groups.items():
        mask = tally.deeproad_mask(m, t, p, criteria.tolerance_deg)
        out["deeproad"].update(g.keys[i] for i in np.flatnonzero(mask))
    if tally.has_labels():
        out["deeptest"] = set()
        for (m, t, p), g in tally.groups.items():
            if tally.passes_filter(m, t, p, criteria.epsilon):
                mask = tally.deeptest_mask(m, t, p, criteria.lam)
                out["deeptest"].update(g.keys[i] for i in np.flatnonzero(mask))
    return out


def violating_count(tally: Any, criteria: Any) -> int:
    """Pairs of a one-model tally that violate the bench's headline relation (DeepTest's with labels, else
    DeepRoad's): the number its progress bar shows, the same as its table's."""
    viol = violating(tally, criteria)
    return len(viol.get("deeptest", viol["deeproad"]))


def _marked(records: Mapping[tuple[int, ...], Mapping[str, Any]], viol: Mapping[str, set]) -> dict:
    return {k: {**r, "_viol": {name: k in keys for name, keys in viol.items()}} for k, r in records.items()}


def _rmse_deg(mse: float | None) -> float | None:
    return math.degrees(math.sqrt(mse)) if mse is not None else None


def _spread_deg(tally: Any) -> float | None:
    """Standard deviation of the model's angles on the seed images, in degrees: a model that barely steers
    keeps the label-free relations trivially, so its spread belongs next to its violation rates."""
    preds = [p for (_m, _f), (_lab, p) in tally.source.items()]
    return math.degrees(float(np.std(preds))) if len(preds) > 1 else None


def seed_errors(tally: Any) -> dict[int, float]:
    """|θ(i) − θᵗ| in radians per labelled seed frame of a one-model tally."""
    return {int(f): abs(p - lab) for (_m, f), (lab, p) in tally.source.items() if not math.isnan(lab)}


def summarize(plan: BenchPlan, *, criteria: Any, alpha: float, correction: str) -> dict[str, Any]:
    """The deterministic summary of a camera bench (summary.json)."""
    cfg0 = plan.baseline.config
    names = [t.name for t in cfg0.transforms]
    groups = [*names, ALL]
    records = {m.name: module_records(plan.folder(m), m.config) for m in plan.modules}
    tallies = {m.name: _tally(m.config, records[m.name]) for m in plan.modules}
    labelled = any(t.has_labels() for t in tallies.values())
    viols = {name: violating(t, criteria) for name, t in tallies.items()}
    rel_names = ["deeptest", "deeproad"] if labelled else ["deeproad"]
    labels = {"deeptest": f"DeepTest Eq. 2 (λ={criteria.lam:g}, ε={criteria.epsilon:g})",
              "deeproad": f"DeepRoad |Δθ| > {criteria.tolerance_deg:g}°"}
    rels = [Relation(n, labels[n], lambda r, n=n: bool(r["_viol"].get(n, False))) for n in rel_names]

    def groups_of(key: tuple[int, ...]) -> tuple[str, str]:
        return names[key[2]], ALL

    modules = []
    for i, m in enumerate(plan.modules):
        recs, tally = records[m.name], tallies[m.name]
        mse = tally.mse_orig(0)
        per: dict[str, dict[str, Any]] = {}
        for rel in rel_names:
            per[rel] = {}
            for g in groups:
                ok = [k for k, r in recs.items() if r["status"] == "ok" and (g == ALL or names[k[2]] == g)]
                per[rel][g] = rate(sum(k in viols[m.name].get(rel, set()) for k in ok), len(ok))
        modules.append({
            "name": m.name, "role": "baseline" if i == 0 else "candidate",
            "model": m.config.models[0].to_dict(),
            "origin": m.origin, "pairs_expected": m.config.total, "pairs_done": len(recs),
            "crashes": sum(r["status"] == "crash" for r in recs.values()),
            "timeouts": sum(r["status"] == "timeout" for r in recs.values()),
            "seeds_labelled": len(seed_errors(tally)),
            "rmse_deg": _rmse_deg(mse), "spread_deg": _spread_deg(tally),
            "speed": {"median_ms": median_ms([r["model_s"] for r in recs.values() if r["status"] == "ok"
                                              and "model_s" in r]), "unit": "ms per image"},
            "rates": per,
        })
    comparisons = []
    base = plan.baseline
    for m in plan.modules[1:]:
        rows = paired_rows(_marked(records[base.name], viols[base.name]),
                           _marked(records[m.name], viols[m.name]), rels, groups_of, groups)
        for r in rows:
            r["transform"] = r.pop("group")
        err_rows = []
        ea, eb = seed_errors(tallies[base.name]), seed_errors(tallies[m.name])
        common = sorted(set(ea) & set(eb))
        if common:
            t = sign_test([-ea[f] for f in common], [-eb[f] for f in common])  # higher is better: −|error|
            ra, rb = tallies[base.name].mse_orig(0), tallies[m.name].mse_orig(0)
            err_rows.append({"relation": "seed-error", "label": "|θ − θᵗ| on the seed images",
                             "transform": "seeds", "baseline": {"rmse_deg": _rmse_deg(ra)},
                             "candidate": {"rmse_deg": _rmse_deg(rb)}, **t.to_dict()})
        decide([*rows, *err_rows], alpha=alpha, correction=correction)
        comparisons.append({"baseline": base.name, "candidate": m.name, "rows": rows,
                            "independence": independence(records[base.name], records[m.name]), "errors": err_rows,
                            "regressions": sum(r["regression"] for r in [*rows, *err_rows]),
                            "improvements": sum(r["improvement"] for r in [*rows, *err_rows])})
    shared = {k: v for k, v in cfg0.to_dict().items() if k not in ("models", "timeout", "batch_size")}
    return {
        "kind": "camera",
        "relation": "camera: " + ("DeepTest Eq. 2/3 and DeepRoad" if labelled else "DeepRoad"),
        "config": shared, "criteria": criteria.to_dict(), "labelled": labelled, "alpha": alpha,
        "correction": correction, "baseline": base.name,
        "test": "exact McNemar (two-sided binomial test on the discordant pairs); seed errors: sign test per "
                "seed",
        "modules": modules, "comparisons": comparisons,
        "regressions": sum(c["regressions"] for c in comparisons),
        "verdict": "regression" if any(c["regressions"] for c in comparisons) else "no regression",
    }
