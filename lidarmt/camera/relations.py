"""The camera relations and their totals, folded from a campaign's journal.

A camera pair is (seed image i, transformed image τ(i)) judged by one steering model; its journal record holds
the raw numbers (the label θᵗ when the source has one, the predictions θ(i) and θ(τ(i))), so every relation can
be evaluated afterwards at any threshold:

* **DeepTest, Eq. 2** (needs labels): (θ(τ(i)) − θᵗᵢ)² ≤ λ · MSE_orig, where MSE_orig is the model's mean squared
  error on the seed images of the same campaign. For the mirror the expected label is −θᵗᵢ.
* **DeepTest, Eq. 3** (a filter for the simple transformations): a (transformation, parameter) counts only when
  |MSE(trans, param) − MSE_orig| ≤ ε: transformations that change the correct answer itself (a 30° rotation)
  are set aside. DeepTest does not filter the composite (weather) transformations; neither do we, nor the mirror.
* **DeepRoad** (label-free): |θ(i) − θ(τ(i))| ≤ ε_deg, reported at 10, 20, 30 and 40°; for the mirror,
  |θ(τ(i)) + θ(i)| ≤ ε_deg.

**Errors set apart.** A DeepTest error (Eq. 2 broken) is not the transformation's doing when the model was
already wrong on the seed: its seed prediction breaks Eq. 2 by itself, (θ(i) − θᵗᵢ)² > λ · MSE_orig (*seed already
in error*); nor when the answer barely moved, |θ(τ(i)) − θ(i)| < Δθ (*no real change*; Δθ = 2° by default,
``Criteria.min_change_deg``; for the mirror |θ(τ(i)) + θ(i)|). Both are counted apart (a seed in error first)
and kept out of the headline: Table 8, the per-group counts and the campaign's violations (bundles, junit, exit
code). Table 7 counts every Eq. 2 break, as DeepTest did, to compare with the paper.

A crash, non-finite output or timeout of the model is a *finding*, counted apart, never a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lidarmt.camera.types import MAX_ANGLE_RAD
from lidarmt.engine.tally import KeyedTally


def angle_value(v: Any, what: str, *, allow_none: bool = False) -> float:
    """``v`` as a finite angle of at most :data:`MAX_ANGLE_RAD` in magnitude (NaN for None with ``allow_none``);
    else ValueError naming ``what``."""
    if v is None and allow_none:
        return float("nan")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what} {v!r} is not a number")
    x = float(v)
    if not (math.isfinite(x) and abs(x) <= MAX_ANGLE_RAD):
        raise ValueError(f"{what} {v!r} is not a steering angle (finite, at most {MAX_ANGLE_RAD:g} rad)")
    return x

DEEPROAD_EPS_DEG = (10.0, 20.0, 30.0, 40.0)
DEEPTEST_LAMBDAS = tuple(float(v) for v in range(1, 11))
DEEPTEST_EPSILONS = (0.01, 0.02, 0.03, 0.04, 0.05)

# DeepTest (Tian et al., ICSE 2018), Table 7: erroneous behaviours over Chauffeur, Epoch and Rambo; rows
# λ = 1..10, columns simple transformations at ε = 0.01..0.05, then fog, rain, guided search
DEEPTEST_TABLE7 = {
    1: (15666, 18520, 23391, 24952, 29649, 9018, 6133, 1148),
    2: (4066, 5033, 6778, 7362, 9259, 6503, 2650, 1026),
    3: (1396, 1741, 2414, 2627, 3376, 5452, 1483, 930),
    4: (501, 642, 965, 1064, 4884, 4884, 997, 872),
    5: (95, 171, 330, 382, 641, 4448, 741, 820),
    6: (49, 85, 185, 210, 359, 4063, 516, 764),
    7: (13, 24, 89, 105, 189, 3732, 287, 721),
    8: (3, 5, 34, 45, 103, 3391, 174, 668),
    9: (0, 1, 12, 19, 56, 3070, 111, 637),
    10: (0, 0, 3, 5, 23, 2801, 63, 597),
}


def _mean(values) -> float:
    """A correctly rounded mean (math.fsum): the same bits whatever order the journal holds the records in (workers,
    resume, Ray), so summary.json is byte-identical across runs."""
    vals = [float(v) for v in values]
    return math.fsum(vals) / len(vals)


def expected(value: float, relation: str) -> float:
    """What the follow-up's answer must be near: the value itself ("keep") or its negation ("negate")."""
    return -value if relation == "negate" else value


def deeptest_violation(pred_t: float, label: float, relation: str, mse_orig: float, lam: float) -> bool:
    """Eq. 2 broken: (θ(τ(i)) − θᵗ)² > λ · MSE_orig (θᵗ negated for the mirror)."""
    return (pred_t - expected(label, relation)) ** 2 > lam * mse_orig


def deeproad_violation(pred_s: float, pred_t: float, relation: str, eps_deg: float) -> bool:
    """DeepRoad's relation broken: |θ(τ(i)) − θ(i)| > ε (θ(i) negated for the mirror)."""
    return abs(pred_t - expected(pred_s, relation)) > math.radians(eps_deg)


@dataclass(frozen=True, slots=True)
class Criteria:
    """The thresholds that decide which pairs are *the* violations of a campaign (bundles, junit, exit code)."""

    lam: float = 5.0  # DeepTest Eq. 2
    epsilon: float = 0.03  # DeepTest Eq. 3 filter (simple transformations)
    tolerance_deg: float = 10.0  # DeepRoad's ε, used when the source has no labels
    min_change_deg: float = 2.0  # Δθ: a DeepTest error whose angle moved less is "no real change" (set apart)

    def to_dict(self) -> dict[str, float]:
        return {"lambda": self.lam, "epsilon": self.epsilon, "tolerance_deg": self.tolerance_deg,
                "min_change_deg": self.min_change_deg}


@dataclass(slots=True)
class _Group:
    """The pairs of one (model, transformation, parameter)."""

    frames: list[int] = field(default_factory=list)
    labels: list[float] = field(default_factory=list)  # NaN where the source has none
    pred_s: list[float] = field(default_factory=list)
    pred_t: list[float] = field(default_factory=list)
    keys: list[tuple[int, ...]] = field(default_factory=list)
    crashes: int = 0
    timeouts: int = 0


class CameraTally(KeyedTally):
    """Totals of a camera campaign; :meth:`add` each journal record once (duplicate keys are ignored).

    ``transforms`` maps a transformation's index in the campaign to (name, family, relation); ``models`` lists the
    models' names in campaign order.
    """

    def __init__(self, models: Sequence[str], transforms: Sequence[tuple[str, str, str]]) -> None:
        super().__init__()
        self.models = list(models)
        self.transforms = list(transforms)
        self.groups: dict[tuple[int, int, int], _Group] = {}
        self.source: dict[tuple[int, int], tuple[float, float]] = {}  # (model, frame) -> (label, θ(i))

    def _add(self, key: tuple[int, ...], rec: Mapping[str, Any]) -> None:
        frame, m, t, p, _trial = key
        g = self.groups.get((m, t, p))
        if g is None:
            g = self.groups[(m, t, p)] = _Group()
        if rec["status"] == "timeout":
            g.timeouts += 1
            return
        if rec["status"] != "ok":
            g.crashes += 1
            return
        lab = angle_value(rec.get("label"), "label", allow_none=True)  # a journal is a file: checked
        pred, pred_t = angle_value(rec["pred"], "pred"), angle_value(rec["pred_t"], "pred_t")
        g.frames.append(frame)
        g.labels.append(lab)
        g.pred_s.append(pred)
        g.pred_t.append(pred_t)
        g.keys.append(key)
        self.source.setdefault((m, frame), (lab, pred))

    # ------------------------------------------------------------------------------------------ measures

    def has_labels(self) -> bool:
        return any(not math.isnan(lab) for lab, _ in self.source.values())

    def mse_orig(self, m: int) -> float | None:
        """The model's MSE on the seed images (each seed once) that have labels."""
        vals = [(p - lab) ** 2 for (mm, _), (lab, p) in self.source.items() if mm == m and not math.isnan(lab)]
        return _mean(vals) if vals else None

    def mse_group(self, m: int, t: int, p: int) -> float | None:
        g = self.groups.get((m, t, p))
        if g is None or not g.frames:
            return None
        rel = self.transforms[t][2]
        labels = np.asarray(g.labels)
        ok = ~np.isnan(labels)
        if not ok.any():
            return None
        exp = -labels[ok] if rel == "negate" else labels[ok]
        return _mean((np.asarray(g.pred_t)[ok] - exp) ** 2)

    def passes_filter(self, m: int, t: int, p: int, epsilon: float) -> bool:
        """Eq. 3 for simple transformations; composite (weather) and mirror pass unfiltered, as in DeepTest."""
        if self.transforms[t][1] != "simple":
            return True
        mse, orig = self.mse_group(m, t, p), self.mse_orig(m)
        return mse is not None and orig is not None and abs(mse - orig) <= epsilon

    def deeptest_mask(self, m: int, t: int, p: int, lam: float) -> np.ndarray:
        """Per pair of the group: Eq. 2 broken (False where there is no label)."""
        g = self.groups.get((m, t, p))
        orig = self.mse_orig(m)
        if g is None or not g.frames or orig is None:
            return np.zeros(0 if g is None else len(g.frames), dtype=bool)
        rel = self.transforms[t][2]
        labels = np.asarray(g.labels)
        exp = -labels if rel == "negate" else labels
        with np.errstate(invalid="ignore"):
            bad = (np.asarray(g.pred_t) - exp) ** 2 > lam * orig
        return bad & ~np.isnan(labels)

    def apart_masks(self, m: int, t: int, p: int, lam: float, min_change_deg: float
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Per pair of the group: (seed already in error, no real change) (module docstring); a pair in both
        counts as a seed in error."""
        g = self.groups.get((m, t, p))
        orig = self.mse_orig(m)
        n = 0 if g is None else len(g.frames)
        if g is None or not g.frames or orig is None:
            return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        rel = self.transforms[t][2]
        labels = np.asarray(g.labels)
        s = np.asarray(g.pred_s)
        with np.errstate(invalid="ignore"):
            seed = ((s - labels) ** 2 > lam * orig) & ~np.isnan(labels)
        moved = np.abs(np.asarray(g.pred_t) - (-s if rel == "negate" else s))
        return seed, (moved < math.radians(min_change_deg)) & ~seed

    def deeptest_split(self, m: int, t: int, p: int, criteria: Criteria) -> dict[str, int]:
        """The group's DeepTest errors (after the Eq. 3 filter): ``{"errors": headline, "seed_error": n,
        "no_change": n}``."""
        if not self.passes_filter(m, t, p, criteria.epsilon):
            return {"errors": 0, "seed_error": 0, "no_change": 0}
        bad = self.deeptest_mask(m, t, p, criteria.lam)
        seed, still = self.apart_masks(m, t, p, criteria.lam, criteria.min_change_deg)
        if not len(bad):
            return {"errors": 0, "seed_error": 0, "no_change": 0}
        return {"errors": int((bad & ~seed & ~still).sum()), "seed_error": int((bad & seed).sum()),
                "no_change": int((bad & still).sum())}

    def deeptest_count(self, m: int, t: int, p: int, lam: float, epsilon: float, *,
                       min_change_deg: float | None = None) -> int:
        """Eq. 2 errors of a group after the Eq. 3 filter; with ``min_change_deg``, without those set apart
        (seed already in error, no real change)."""
        if not self.passes_filter(m, t, p, epsilon):
            return 0
        if min_change_deg is None:
            return int(self.deeptest_mask(m, t, p, lam).sum())
        return self.deeptest_split(m, t, p, Criteria(lam, epsilon, 10.0, min_change_deg))["errors"]

    def deeproad_mask(self, m: int, t: int, p: int, eps_deg: float) -> np.ndarray:
        g = self.groups.get((m, t, p))
        if g is None or not g.frames:
            return np.zeros(0, dtype=bool)
        rel = self.transforms[t][2]
        s = np.asarray(g.pred_s)
        exp = -s if rel == "negate" else s
        return np.abs(np.asarray(g.pred_t) - exp) > math.radians(eps_deg)

    def violations(self, criteria: Criteria) -> list[tuple[tuple[int, ...], float]]:
        """The campaign's violations, (key, |deviation| in radians), worst first: DeepTest's Eq. 2 (with the Eq. 3
        filter) when the source has labels, else DeepRoad's relation at ``criteria.tolerance_deg``."""
        out: list[tuple[tuple[int, ...], float]] = []
        labelled = self.has_labels()
        for (m, t, p), g in self.groups.items():
            if not g.frames:
                continue
            rel = self.transforms[t][2]
            if labelled:
                if not self.passes_filter(m, t, p, criteria.epsilon):
                    continue
                seed, still = self.apart_masks(m, t, p, criteria.lam, criteria.min_change_deg)
                mask = self.deeptest_mask(m, t, p, criteria.lam)
                if len(mask):
                    mask = mask & ~seed & ~still  # set apart: not the transformation's doing
                ref = np.asarray(g.labels)
            else:
                mask = self.deeproad_mask(m, t, p, criteria.tolerance_deg)
                ref = np.asarray(g.pred_s)
            dev = np.abs(np.asarray(g.pred_t) - (-ref if rel == "negate" else ref))
            out.extend((g.keys[i], float(dev[i])) for i in np.flatnonzero(mask))
        out.sort(key=lambda kd: (-kd[1], kd[0]))
        return out

    def findings(self) -> int:
        return sum(g.crashes + g.timeouts for g in self.groups.values())

    # ------------------------------------------------------------------------------------------ tables

    def summary(self, config: Mapping[str, Any], criteria: Criteria, params: Sequence[Sequence[str]]) -> dict:
        """The deterministic summary (summary.json): per model MSE_orig; per (model, transformation, parameter)
        pairs, MSE, the Eq. 3 filter, DeepTest and DeepRoad counts; DeepTest's Tables 7 and 8; DeepRoad's table.
        ``params[t][p]`` is the human label of parameter setting p of transformation t."""
        labelled = self.has_labels()
        models = []
        for m, name in enumerate(self.models):
            orig = self.mse_orig(m)
            seeds = [v for (mm, _), v in self.source.items() if mm == m]
            models.append({"model": name, "seeds": len(seeds), "mse_orig": orig,
                           "rmse_orig_deg": math.degrees(math.sqrt(orig)) if orig is not None else None})
        rows = []
        for (m, t, p) in sorted(self.groups):
            g = self.groups[(m, t, p)]
            name, family, rel = self.transforms[t]
            row = {"model": self.models[m], "transform": name, "family": family, "relation": rel, "param": p,
                   "params": params[t][p] if t < len(params) and p < len(params[t]) else str(p),
                   "pairs": len(g.frames), "crashes": g.crashes, "timeouts": g.timeouts,
                   "mse": self.mse_group(m, t, p),
                   "deeproad": {f"{e:g}": int(self.deeproad_mask(m, t, p, e).sum()) for e in DEEPROAD_EPS_DEG},
                   "mean_abs_change_deg": (math.degrees(_mean(np.abs(
                       np.asarray(g.pred_t) - np.asarray([expected(s, rel) for s in g.pred_s]))))
                       if g.frames else None)}
            if labelled:
                row["passes_filter"] = self.passes_filter(m, t, p, criteria.epsilon)
                split = self.deeptest_split(m, t, p, criteria)
                row["deeptest"] = split["errors"]
                row["deeptest_seed_error"] = split["seed_error"]
                row["deeptest_no_change"] = split["no_change"]
                row["deeptest_unfiltered"] = int(self.deeptest_mask(m, t, p, criteria.lam).sum())
            rows.append(row)
        out: dict[str, Any] = {
            "relation": "camera: DeepTest Eq. 2/3 (with labels), DeepRoad |Δθ| ≤ ε (label-free), mirror θ → −θ",
            "config": dict(config), "criteria": criteria.to_dict(), "labelled": labelled,
            "pairs_done": self.done, "findings": self.findings(), "models": models, "groups": rows,
            "deeproad": self._deeproad_table(),
        }
        if labelled:
            out["table7"] = self._table7()
            out["table8"] = self._table8(criteria)
            out["deeptest_apart"] = {
                "errors": sum(r["deeptest"] for r in rows), "seed_error": sum(r["deeptest_seed_error"] for r in rows),
                "no_change": sum(r["deeptest_no_change"] for r in rows), "min_change_deg": criteria.min_change_deg,
                "rule": (f"set apart, not in the headline: seed already in error (the seed's own prediction breaks "
                         f"Eq. 2 at λ = {criteria.lam:g}), no real change (|Δθ| < {criteria.min_change_deg:g}°)")}
        return out

    def _transform_ids(self, family: str | None = None) -> list[int]:
        return [t for t, (_, fam, _) in enumerate(self.transforms) if family is None or fam == family]

    def _table7(self) -> dict[str, Any]:
        """DeepTest's Table 7: rows λ = 1..10; simple transformations (Eq. 3 filtered) at ε = 0.01..0.05; each
        composite (weather) transformation and the mirror unfiltered; over every model of the campaign."""
        composite = [t for t in range(len(self.transforms)) if self.transforms[t][1] != "simple"]
        simple = self._transform_ids("simple")
        rows = []
        for lam in DEEPTEST_LAMBDAS:
            row: dict[str, Any] = {"lambda": lam}
            if simple:
                row["simple"] = {f"{e:g}": sum(self.deeptest_count(m, t, p, lam, e) for (m, t, p) in self.groups
                                               if t in simple) for e in DEEPTEST_EPSILONS}
            for t in composite:
                row[self.transforms[t][0]] = sum(int(self.deeptest_mask(m, tt, p, lam).sum())
                                                 for (m, tt, p) in self.groups if tt == t)
            rows.append(row)
        return {"columns": (["simple"] if simple else []) + [self.transforms[t][0] for t in composite],
                "rows": rows}

    def _table8(self, criteria: Criteria) -> dict[str, Any]:
        """DeepTest's Table 8: erroneous behaviours per transformation × model at the campaign's λ and ε."""
        table: dict[str, dict[str, int]] = {}
        for (m, t, p) in sorted(self.groups):
            name = self.transforms[t][0]
            cell = table.setdefault(name, dict.fromkeys(self.models, 0))
            cell[self.models[m]] += self.deeptest_split(m, t, p, criteria)["errors"]
        return {"lambda": criteria.lam, "epsilon": criteria.epsilon, "min_change_deg": criteria.min_change_deg,
                "rows": [{"transform": n, "family": self._family(n), **c} for n, c in table.items()]}

    def _family(self, name: str) -> str:
        return next((fam for (n, fam, _) in self.transforms if n == name), "")

    def _deeproad_table(self) -> list[dict[str, Any]]:
        """DeepRoad's table: per model and transformation, inconsistent pairs at ε = 10/20/30/40°."""
        acc: dict[tuple[int, int], dict[str, int]] = {}
        pairs: dict[tuple[int, int], int] = {}
        for (m, t, p) in sorted(self.groups):
            cell = acc.setdefault((m, t), {f"{e:g}": 0 for e in DEEPROAD_EPS_DEG})
            for e in DEEPROAD_EPS_DEG:
                cell[f"{e:g}"] += int(self.deeproad_mask(m, t, p, e).sum())
            pairs[(m, t)] = pairs.get((m, t), 0) + len(self.groups[(m, t, p)].frames)
        return [{"model": self.models[m], "transform": self.transforms[t][0], "family": self.transforms[t][1],
                 "pairs": pairs[(m, t)], "inconsistent": c} for (m, t), c in sorted(acc.items())]


def fold(records: Iterable[Mapping[str, Any]], tally: CameraTally) -> CameraTally:
    for rec in records:
        tally.add(rec)
    return tally
