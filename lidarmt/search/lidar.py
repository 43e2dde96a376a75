"""Critical noise conditions for MR1 (beyond the papers): a (1+1)-ES and a random search over the injector.

The study added n points uniform in a disk outside the ROI. Here the noise itself is searched: n, the ring
(inner/outer radius) and sector where the points lie, their z band and intensity band (fractions of the source
frame's ranges), and clustering (k clumps of radius r, or uniform) — :class:`~lidarmt.lidar.mr1.inject.NoiseCondition`.
A candidate condition is judged on a fixed *batch* of source frames: its fitness is the share of frames whose
obstacles are not all kept (MR1's O ⊄ O′), plus 0.1 × the mean *disturbance* of the source obstacles (1 − their
matching score in O′, 1 for a lost one: :func:`_disturbance`). The second term is a tie-breaker that lets the
ES climb while the rate is still 0 everywhere near it (violations are rare); it is at most 0.1 per frame
share, so a higher rate wins over any disturbance. The ES starts from the study's uniform noise at the largest n (``n_max``).

The search runs on the shared campaign engine as the campaign kind ``lidar-search``:

* items ``0 .. budget-1`` are search steps; a step's keys are ``(step, arm, 0)``, arm 0 the ES and arm 1 the
  random baseline (``--search es`` runs both, on the same budget: when the ES stops by TACTIC's rule, 60 steps
  without improvement, the random arm stops with it); ``--search random`` runs arm 1 alone;
* items ``budget + j`` validate on held-back frame j (frames the search never saw): keys ``(item, rank,
  variant)``, the ``top`` best conditions of each arm (rank ``arm·top + r``), variant 0 the condition, variant 1
  the study's uniform noise with the same n (:func:`~lidarmt.lidar.mr1.inject.make_follow_up`, the MR1 campaign's own
  injector and seed tuple ``(seed, frame, n, 0)``).

Every evaluated candidate is a journal record; a step's random choices come from (seed, step, arm) and a
follow-up's points from (seed, frame, step, arm), so ``--resume`` folds the journal back into the ES state and
continues exactly where a killed search stopped (the evaluator reads the run folder's journal on its first item).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, failure
from lidarmt.engine.errors import InjectionError
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.engine.tally import KeyedTally
from lidarmt.lidar.mr1.inject import (
    HDL64E_RANGE_M,
    Bounds,
    NoiseCondition,
    Region,
    make_conditioned_follow_up,
    make_follow_up,
)
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
from lidarmt.search.errors import SearchArgumentError
from lidarmt.search.es import Dim, EsState, Space, es_propose, es_tell, random_propose, step_rng

OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "search.png",
         "violations")
ARMS = ("es", "random")
LOST_WEIGHT = 0.1


def lidar_space(n_max: int, *, n_min: int = 10, radius: float = HDL64E_RANGE_M) -> Space:
    """The injector's searched parameters (see :func:`condition_of` for how they map to a condition)."""
    lo = math.log10(max(1, min(n_min, n_max)))
    return Space((
        Dim("log10_n", lo, math.log10(max(n_max, 1))), Dim("r_in", 0.0, radius - 20.0),
        Dim("ring_width", 5.0, radius), Dim("sector_start", -180.0, 180.0), Dim("sector_width", 10.0, 360.0),
        Dim("z_low", 0.0, 1.0), Dim("z_span", 0.05, 1.0), Dim("i_low", 0.0, 1.0), Dim("i_span", 0.05, 1.0),
        Dim("clumps", 0.0, 20.0, integer=True), Dim("clump_radius", 0.2, 5.0),
    ))


def condition_of(params: Mapping[str, float], *, radius: float = HDL64E_RANGE_M) -> NoiseCondition:
    """The condition of a point of :func:`lidar_space`: n = round(10^log10_n), r_out = min(radius, r_in +
    ring_width), the z and intensity bands [low, low + span·(1 − low)]."""
    r_in = float(params["r_in"])
    z_lo, i_lo = float(params["z_low"]), float(params["i_low"])
    return NoiseCondition(
        n=int(round(10 ** float(params["log10_n"]))), r_in=r_in,
        r_out=min(radius, r_in + float(params["ring_width"])), sector_start=float(params["sector_start"]),
        sector_width=float(params["sector_width"]), z_low=z_lo,
        z_high=min(1.0, z_lo + float(params["z_span"]) * (1.0 - z_lo)), i_low=i_lo,
        i_high=min(1.0, i_lo + float(params["i_span"]) * (1.0 - i_lo)), clumps=int(params["clumps"]),
        clump_radius=float(params["clump_radius"]))


def uniform_start(space: Space) -> list[float]:
    """The unit point of the study's uniform noise at the largest n (the ES's start)."""
    at = {"log10_n": 1.0, "r_in": 0.0, "ring_width": 1.0, "sector_start": 0.0, "sector_width": 1.0, "z_low": 0.0,
          "z_span": 1.0, "i_low": 0.0, "i_span": 1.0, "clumps": 0.0, "clump_radius": 0.2}
    return [at[d.name] for d in space.dims]


@dataclass(frozen=True, slots=True)
class LidarSearchConfig:
    """Everything that determines a LiDAR search's records (``run_dir`` only says where its journal is)."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    frames: tuple[int, ...]  # the search batch
    fresh: tuple[int, ...]  # held-back frames for validation
    strategy: str = "es"
    budget: int = 30
    n_max: int = 1000
    seed: int = 0
    top: int = 3
    timeout: float | None = None
    run_dir: str | None = field(default=None, compare=False)

    kind: ClassVar[str] = "lidar-search"
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        if self.strategy not in ("es", "random"):
            raise SearchArgumentError(f"--search {self.strategy!r}: use es (the (1+1)-ES and the random baseline) "
                                      "or random")
        if self.budget < 1:
            raise SearchArgumentError(f"--budget {self.budget}: give at least 1 candidate condition")
        if not self.frames:
            raise SearchArgumentError("--frames: the search needs at least one source frame")
        if self.n_max < 1:
            raise SearchArgumentError(f"--n {self.n_max}: give at least 1 point")
        if self.top < 1:
            raise SearchArgumentError(f"top {self.top}: validate at least one condition")
        if self.top > self.budget:  # an arm tries at most `budget` conditions: validating more plans empty pairs
            raise SearchArgumentError(f"--top {self.top}: an arm tries at most --budget {self.budget} conditions, "
                                      f"so give --top from 1 to {self.budget}")

    @property
    def arms(self) -> tuple[int, ...]:
        return (0, 1) if self.strategy == "es" else (1,)

    @property
    def space(self) -> Space:
        return lidar_space(self.n_max)

    @property
    def items(self) -> tuple[int, ...]:
        return tuple(range(self.budget + len(self.fresh)))

    @property
    def total(self) -> int:
        return self.budget * len(self.arms) + len(self.fresh) * self.top * len(self.arms) * 2

    def keys_of(self, item: int) -> list[Key]:
        if item < self.budget:
            return [(item, a, 0) for a in self.arms]
        return [(item, r, v) for r in range(self.top * len(self.arms)) for v in (0, 1)]

    def key_fields(self, key: Key) -> dict[str, Any]:
        return {"key": list(key)}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        return "-".join(str(v) for v in key)

    def new_tally(self) -> LidarSearchTally:
        return LidarSearchTally(self)

    def evaluator(self, *, enforce_timeout: bool = True) -> LidarSearchEvaluator:
        return LidarSearchEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        return 900 * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_dict(), "roi": self.roi.to_dict(),
                "sut": self.sut.to_dict(), "frames": list(self.frames), "fresh": list(self.fresh),
                "strategy": self.strategy, "budget": self.budget, "n_max": self.n_max, "seed": self.seed,
                "top": self.top, "timeout": self.timeout}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LidarSearchConfig:
        return cls(SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]), SutSpec.from_dict(d["sut"]),
                   tuple(int(f) for f in d["frames"]), tuple(int(f) for f in d["fresh"]), str(d["strategy"]),
                   int(d["budget"]), int(d["n_max"]), int(d["seed"]), int(d["top"]), d.get("timeout"))


# ----------------------------------------------------------------------------------------------- state


class LidarSearchTally(KeyedTally):
    """The records of a LiDAR search, folded: per arm its evaluated candidates, and the validation pairs."""

    def __init__(self, config: LidarSearchConfig) -> None:
        super().__init__()
        self.config = config
        self.search: dict[int, list[dict[str, Any]]] = {a: [] for a in range(len(ARMS))}
        self.validation: list[dict[str, Any]] = []
        self.skipped = 0
        self.failed = 0

    def _add(self, key: Key, rec: Mapping[str, Any]) -> None:
        if rec.get("phase") == "validate":
            self.validation.append(dict(rec))
        elif rec["status"] == "skipped":
            self.skipped += 1
        else:
            self.search[key[1]].append(dict(rec))
            self.failed += rec["status"] != "ok"

    def es_state(self) -> EsState:
        d = self.config.space.d
        state = EsState()
        for rec in sorted(self.search[0], key=lambda r: r["step"]):
            state = es_tell(state, rec["unit"], float(rec["fitness"]), d)
        return state

    def es_stopped_at(self) -> int | None:
        """The step at which the ES stopped by TACTIC's rule (None while it runs)."""
        state = EsState()
        d = self.config.space.d
        for rec in sorted(self.search[0], key=lambda r: r["step"]):
            state = es_tell(state, rec["unit"], float(rec["fitness"]), d)
            if state.stopped():
                return int(rec["step"]) + 1
        return None

    def best(self, arm: int) -> list[dict[str, Any]]:
        """The arm's ``top`` best distinct conditions, best first (ties: the earlier step)."""
        from lidarmt.search.es import ranked

        recs = [r for r in self.search[arm] if r["status"] == "ok"]
        return list(ranked(recs, top=self.config.top, ident="condition"))

    def chosen(self) -> list[dict[str, Any] | None]:
        """The conditions validated, by rank ``arm_position·top + r`` (None where an arm found fewer)."""
        out: list[dict[str, Any] | None] = []
        for a in self.config.arms:
            best = self.best(a)
            out.extend(best[r] if r < len(best) else None for r in range(self.config.top))
        return out


# ----------------------------------------------------------------------------------------------- evaluator


def _disturbance(verdict: Any) -> float:
    """How much the source obstacles changed: the mean of 1 − matching score over them (a lost one counts 1)."""
    if not verdict.n_source:
        return 0.0
    kept = sum(float(score) for _, _, score in verdict.matches)
    return max(0.0, 1.0 - kept / verdict.n_source)


class LidarSearchEvaluator(EvaluatorBase):
    """Builds the SUT, ROI and recording (through the MR1 campaign's own evaluator) and runs search steps."""

    what = "perception"

    def __init__(self, config: LidarSearchConfig, *, enforce_timeout: bool = True) -> None:
        from lidarmt.lidar.mr1.campaign import CampaignConfig, Evaluator

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.base = Evaluator(CampaignConfig(config.source, config.roi, config.sut, (config.n_max,),
                                             config.frames + config.fresh, seed=config.seed, region=Region(),
                                             timeout=config.timeout), enforce_timeout=False)
        self.sut = self.base.sut
        self.tally = config.new_tally()
        self._loaded = False
        self._sources: dict[int, tuple[Any, Any, Bounds, Any]] = {}
        self._uniform: dict[tuple[int, int], Any] = {}

    # ------------------------------------------------------------------------------------------ state

    def _load_journal(self) -> None:
        """Fold what an earlier invocation journaled (a resumed search), once."""
        if self._loaded:
            return
        self._loaded = True
        if self.config.run_dir is None:
            return
        path = Path(self.config.run_dir) / JOURNAL_NAME
        if path.is_file():
            for rec in iter_records(path):
                self.tally.add(rec)

    def detect(self, frame: Any, roi: Any, *, key: Any = None, stage: str = "bundle") -> Any:
        return self.call(self.base._detect, frame, roi, keys=key, stage=stage)

    def source(self, index: int) -> tuple[Any, Any, Bounds, Any]:
        """(frame, ROI, bounds, obstacles) of a source frame, perceived once."""
        got = self._sources.get(index)
        if got is None:
            frame, roi = self.base.load(index)
            got = (frame, roi, Bounds.of(frame), self.detect(frame, roi, stage="source"))
            if index not in self.config.frames:  # keep the batch; a fresh frame is used by one item only
                self._sources = {k: v for k, v in self._sources.items() if k in self.config.frames}
            self._sources[index] = got
        return got

    # ------------------------------------------------------------------------------------------ items

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        self._load_journal()

        def out(rec: dict[str, Any]) -> None:
            self.tally.add(rec)
            emit("pair", rec)

        if index < self.config.budget:
            for key in keys:
                out(self.search_step(key))
        else:
            for key in keys:
                out(self.validate(key))

    def propose(self, step: int, arm: int) -> np.ndarray:
        space = self.config.space
        rng = step_rng(self.config.seed, step, arm)
        if arm == 0:
            return es_propose(self.tally.es_state(), space, rng, uniform_start(space))
        return random_propose(space, rng)

    def search_step(self, key: Key) -> dict[str, Any]:
        step, arm, _ = key
        cfg = self.config
        base = {"type": "pair", "key": list(key), "step": step, "arm": ARMS[arm]}
        stop = self.tally.es_stopped_at() if cfg.strategy == "es" else None
        if stop is not None and step >= stop:
            return {**base, "status": "skipped", "why": f"the ES stopped at step {stop} (60 without improvement)"}
        u = self.propose(step, arm)
        params = cfg.space.to_params(u)
        cond = condition_of(params)
        rec = {**base, "unit": [float(v) for v in u], "params": params, "condition": cond.to_dict()}
        if arm == 0:
            rec["sigma"] = self.tally.es_state().sigma
        per = []
        for f in cfg.frames:
            try:
                frame, roi, bounds, src = self.source(f)
                fu = make_conditioned_follow_up(frame, roi, cond, seed=(cfg.seed, f, step, arm), bounds=bounds)
                follow = self.detect(fu.frame, roi, key=key, stage="follow")
            except InjectionError as err:  # the condition cannot be drawn here (its region lies in the ROI)
                per.append({"frame": f, "error": str(err)})
                continue
            except Exception as err:
                fail = failure(err)
                return {**rec, "status": fail["status"], "error": fail["error"], "traceback": fail["traceback"]}
            per.append(_verdict_fields(f, src, follow))
        judged = [p for p in per if "error" not in p]
        rate = sum(p["subset_violation"] for p in judged) / len(cfg.frames)
        lost = float(np.mean([p["disturbance"] for p in judged])) if judged else 0.0
        return {**rec, "status": "ok", "frames": per, "violations": sum(p["subset_violation"] for p in judged),
                "count_violations": sum(p["count_violation"] for p in judged), "rate": rate,
                "fitness": rate + LOST_WEIGHT * lost}

    def validate(self, key: Key) -> dict[str, Any]:
        item, rank, variant = key
        cfg = self.config
        f = cfg.fresh[item - cfg.budget]
        base = {"type": "pair", "key": list(key), "phase": "validate", "frame": f, "rank": rank,
                "variant": "condition" if variant == 0 else "uniform"}
        chosen = self.tally.chosen()
        cand = chosen[rank] if rank < len(chosen) else None
        if cand is None:
            return {**base, "status": "skipped", "why": "the arm found fewer distinct conditions"}
        cond = NoiseCondition.from_dict(cand["condition"])
        base |= {"candidate": [cand["step"], ARMS.index(cand["arm"])], "condition": cand["condition"], "n": cond.n}
        try:
            frame, roi, bounds, src = self.source(f)
            if variant == 0:
                fu = make_conditioned_follow_up(frame, roi, cond, seed=(cfg.seed, f, cand["step"],
                                                                        ARMS.index(cand["arm"])), bounds=bounds)
                follow = self.detect(fu.frame, roi, key=key, stage="follow")
            else:
                follow = self._uniform.get((f, cond.n))
                if follow is None:
                    fu = make_follow_up(frame, roi, cond.n, seed=cfg.seed, frame_index=f, trial=0, bounds=bounds)
                    follow = self._uniform[(f, cond.n)] = self.detect(fu.frame, roi, key=key, stage="follow")
        except InjectionError as err:
            return {**base, "status": "ok", "error": str(err), "subset_violation": False, "count_violation": False}
        except Exception as err:
            fail = failure(err)
            return {**base, "status": fail["status"], "error": fail["error"], "traceback": fail["traceback"]}
        return {**base, "status": "ok", **_verdict_fields(f, src, follow)}


def _verdict_fields(frame: int, source: Any, follow: Any) -> dict[str, Any]:
    from lidarmt.lidar.mr1.oracle import judge

    v = judge(source, follow)
    return {"frame": frame, "subset_violation": v.subset_violation, "count_violation": v.count_violation,
            "n_source": v.n_source, "n_follow": v.n_follow, "lost": len(v.missing), "disturbance": _disturbance(v)}


# ----------------------------------------------------------------------------------------------- bundles


@dataclass(frozen=True, slots=True)
class ConditionConfig:
    """One found condition as an MR1 campaign of its own, for bug bundles: keys ``(frame, n, 0)``, the
    follow-up drawn from the condition with the search's seed tuple ``(seed, frame, step, arm)``."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    condition: NoiseCondition
    seed: int
    step: int
    arm: int
    timeout: float | None = None

    kind: ClassVar[str] = "lidar-condition"
    owned: ClassVar[tuple[str, ...]] = ()

    @property
    def region(self) -> Region:
        return Region.disk(self.condition.r_out)

    def bundle_id(self, key: Key) -> str:
        return f"{ARMS[self.arm]}-s{self.step:03d}-n{key[1]}-f{key[0]:06d}"

    def evaluator(self, *, enforce_timeout: bool = True) -> Any:
        from lidarmt.lidar.mr1.campaign import CampaignConfig, Evaluator

        cfg = self

        class _ConditionEvaluator(Evaluator):
            def follow_up(self, frame, roi, key, bounds=None):  # noqa: ANN001, ANN202
                return make_conditioned_follow_up(frame, roi, cfg.condition, seed=(cfg.seed, key[0], cfg.step,
                                                                                    cfg.arm), bounds=bounds)

        ev = _ConditionEvaluator(CampaignConfig(self.source, self.roi, self.sut, (self.condition.n,), (0,),
                                                seed=self.seed, timeout=self.timeout),
                                 enforce_timeout=enforce_timeout)
        ev.config = self  # bundles record this configuration (with the condition), not the stand-in campaign
        return ev

    def worker_memory(self) -> int:
        return 900 * 2**20

    def follow_up_of(self, frame: Any, roi: Any, seed_tuple: Sequence[int]) -> Any:
        """The follow-up a bundle's seed tuple names (for replay)."""
        return make_conditioned_follow_up(frame, roi, self.condition, seed=tuple(int(v) for v in seed_tuple))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_dict(), "roi": self.roi.to_dict(),
                "sut": self.sut.to_dict(), "condition": self.condition.to_dict(), "seed": self.seed,
                "step": self.step, "arm": self.arm, "timeout": self.timeout,
                # what the MR1 bundle report names (the condition's outer disk; the condition itself is above)
                "region": {"shape": "disk", "size": self.condition.r_out}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConditionConfig:
        return cls(SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]), SutSpec.from_dict(d["sut"]),
                   NoiseCondition.from_dict(d["condition"]), int(d["seed"]), int(d["step"]), int(d["arm"]),
                   d.get("timeout"))
