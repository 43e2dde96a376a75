"""Critical settings of a LiDAR transformation: a (1+1)-ES and a random search over its parameters.

``lidarmt fuzz --transforms fog --search es`` searches the transformation's own parameter box (each
:class:`~lidarmt.lidar.transforms.base.Param` mapped to [0, 1] by its physical range: a visibility in metres,
a rain rate in mm/h, an angle in degrees) for the setting that breaks its relation (robustness, insertion,
removal, equivariance; :mod:`lidarmt.lidar.relations`) on most frames of a fixed batch. A candidate's fitness is
the share of batch frames whose pair violates the relation at the campaign's thresholds, plus 0.1 × the mean
*disturbance* of the required obstacles (1 − their match score), a tie-breaker that lets the ES climb while no
frame is violated yet; a higher rate always wins. The ES starts at the transformation's moderate level; the
random arm draws uniform settings on the same budget (``--search es`` runs both; ``--search random`` the random
arm alone). TACTIC's stop rule ends the ES (and the random arm with it).

It runs on the campaign engine as the kind ``lidar-transform-search``: item ``s`` is search step s, its keys
``(s, arm, 0)``. Every candidate is a journal record (its setting, and per frame the violation, the lost
requirements and the nearest one's distance); a candidate's transformation seed comes from (seed, frame,
transformation, step, arm), so a killed search resumes exactly (the evaluator folds the run folder's journal
on its first item). The thresholds steer the search, so unlike a campaign's they are part of its settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, failure
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.engine.tally import KeyedTally
from lidarmt.lidar.relations import Thresholds, judge_facts, required
from lidarmt.lidar.sensors import sensor_record
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
from lidarmt.search.errors import SearchArgumentError
from lidarmt.search.es import Dim, EsState, Space, es_propose, es_tell, random_propose, ranked, step_rng

KIND = "lidar-transform-search"
OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "search.png")
ARMS = ("es", "random")
LOST_WEIGHT = 0.1


def transform_space(name: str) -> Space:
    """The searched box of a transformation: its parameters with their physical ranges."""
    from lidarmt.lidar.transforms.registry import get_transform

    t = get_transform(name)
    if not t.params:
        raise SearchArgumentError(f"--search: {name} has no parameter to search (it is one setting); search "
                                  "a transformation with parameters (lidarmt transforms lists them)")
    return Space(tuple(Dim(p.name, float(p.lo), float(p.hi), bool(p.integer)) for p in t.params))


def start_point(name: str, space: Space) -> list[float]:
    """The moderate level of the transformation in unit-box terms (the ES's start)."""
    from lidarmt.lidar.transforms.registry import get_transform

    mod = get_transform(name).levels["moderate"]
    return [(float(mod[d.name]) - d.low) / (d.high - d.low) if d.high > d.low else 0.0 for d in space.dims]


@dataclass(frozen=True, slots=True)
class TransformSearchConfig:
    """Everything that determines a transformation search's records (``run_dir`` says where its journal is)."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    transform: str
    relation: str
    frames: tuple[int, ...]
    strategy: str = "es"
    budget: int = 30
    seed: int = 0
    library: str | None = None
    timeout: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    run_dir: str | None = field(default=None, compare=False)
    sensor: str = "hdl64"  # the sensor profile the transformation models (lidarmt.lidar.sensors)

    kind: ClassVar[str] = KIND
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        from lidarmt.lidar.sensors import get_sensor

        object.__setattr__(self, "sensor", get_sensor(self.sensor).name)  # an unknown name: one line
        if self.strategy not in ("es", "random"):
            raise SearchArgumentError(f"--search {self.strategy!r}: use es (the (1+1)-ES and the random "
                                      "baseline) or random")
        if self.budget < 1:
            raise SearchArgumentError(f"--budget {self.budget}: give at least 1 candidate setting")
        if not self.frames:
            raise SearchArgumentError("--frames: the search needs at least one source frame")

    @property
    def arms(self) -> tuple[int, ...]:
        return (0, 1) if self.strategy == "es" else (1,)

    @property
    def space(self) -> Space:
        return transform_space(self.transform)

    @property
    def items(self) -> tuple[int, ...]:
        return tuple(range(self.budget))

    @property
    def total(self) -> int:
        return self.budget * len(self.arms)

    def keys_of(self, item: int) -> list[Key]:
        return [(item, a, 0) for a in self.arms]

    def key_fields(self, key: Key) -> dict[str, Any]:
        return {"key": list(key)}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        return "-".join(str(v) for v in key)

    def new_tally(self) -> TransformSearchTally:
        return TransformSearchTally(self)

    def evaluator(self, *, enforce_timeout: bool = True) -> TransformSearchEvaluator:
        return TransformSearchEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        return 1000 * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_dict(), "roi": self.roi.to_dict(),
                "sut": self.sut.to_dict(), "transform": self.transform, "relation": self.relation,
                "frames": list(self.frames), "strategy": self.strategy, "budget": self.budget, "seed": self.seed,
                "library": self.library, "timeout": self.timeout, "thresholds": self.thresholds.to_dict(),
                **sensor_record(self.sensor)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TransformSearchConfig:
        return cls(SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]), SutSpec.from_dict(d["sut"]),
                   str(d["transform"]), str(d["relation"]), tuple(int(f) for f in d["frames"]),
                   str(d["strategy"]), int(d["budget"]), int(d["seed"]), d.get("library"), d.get("timeout"),
                   Thresholds.from_dict(d.get("thresholds")), sensor=str(d.get("sensor", "hdl64")))


class TransformSearchTally(KeyedTally):
    """The candidates of a transformation search, per arm, folded from the journal."""

    def __init__(self, config: TransformSearchConfig) -> None:
        super().__init__()
        self.config = config
        self.search: dict[int, list[dict[str, Any]]] = {a: [] for a in range(len(ARMS))}
        self.skipped = 0
        self.failed = 0

    def _add(self, key: Key, rec: Mapping[str, Any]) -> None:
        if rec["status"] == "skipped":
            self.skipped += 1
            return
        self.search[key[1]].append(dict(rec))
        self.failed += rec["status"] != "ok"

    def _ok(self, arm: int) -> list[dict[str, Any]]:
        return sorted((r for r in self.search[arm] if r["status"] == "ok"), key=lambda r: r["step"])

    def es_state(self) -> EsState:
        state = EsState()
        for rec in self._ok(0):
            state = es_tell(state, rec["unit"], float(rec["fitness"]), self.config.space.d)
        return state

    def es_stopped_at(self) -> int | None:
        state = EsState()
        for rec in self._ok(0):
            state = es_tell(state, rec["unit"], float(rec["fitness"]), self.config.space.d)
            if state.stopped():
                return int(rec["step"]) + 1
        return None

    def best(self, arm: int, top: int = 3) -> list[dict[str, Any]]:
        return list(ranked(self._ok(arm), top=top, ident="params"))

    def to_dict(self) -> dict[str, Any]:
        arms = {}
        for a in self.config.arms:
            ok = self._ok(a)
            first = next((r["step"] for r in ok if r["violations"]), None)
            arms[ARMS[a]] = {"candidates": len(ok), "violating_candidates": sum(bool(r["violations"]) for r in ok),
                             "first_violation_step": first,
                             "best": [{k: r[k] for k in ("step", "params", "rate", "fitness", "violations",
                                                         "nearest_m")} for r in self.best(a)],
                             "curve": [round(max(float(x["fitness"]) for x in ok[:i + 1]), 6)
                                       for i in range(len(ok))]}
        return {"arms": arms, "skipped": self.skipped, "failed": self.failed,
                "es_stopped_at": self.es_stopped_at() if self.config.strategy == "es" else None}


class TransformSearchEvaluator(EvaluatorBase):
    """Builds the SUT, ROI, recording and transformation (through the campaign's own evaluator), runs steps."""

    what = "perception"

    def __init__(self, config: TransformSearchConfig, *, enforce_timeout: bool = True) -> None:
        from lidarmt.lidar.campaign import LidarCampaignConfig, LidarEvaluator, LidarTransformRef
        from lidarmt.lidar.transforms.base import resolve_params
        from lidarmt.lidar.transforms.registry import get_transform

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        t = get_transform(config.transform)
        ref = LidarTransformRef(t.name, ("moderate",), (resolve_params(t, "moderate"),), config.relation)
        self.base = LidarEvaluator(LidarCampaignConfig(config.source, config.roi, config.sut, (ref,),
                                                       config.frames, seed=config.seed, library=config.library,
                                                       timeout=config.timeout, thresholds=config.thresholds,
                                                       sensor=config.sensor),
                                   enforce_timeout=False)
        self.sut = self.base.sut
        self.transform = t
        self.tally = config.new_tally()
        self._loaded = False
        self._sources: dict[int, tuple[Any, Any, Any]] = {}

    def _load_journal(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.config.run_dir is not None and (Path(self.config.run_dir) / JOURNAL_NAME).is_file():
            for rec in iter_records(Path(self.config.run_dir) / JOURNAL_NAME):
                self.tally.add(rec)

    def detect(self, frame: Any, roi: Any, *, key: Any = None, stage: str = "bundle") -> Any:
        from lidarmt.lidar.perception.guard import guarded_detect

        return self.call(guarded_detect, self.sut, frame, roi, keys=key, stage=stage)

    def source(self, index: int) -> tuple[Any, Any, Any]:
        got = self._sources.get(index)
        if got is None:
            frame, roi = self.base.load(index)
            got = self._sources[index] = (frame, roi, self.detect(frame, roi, stage="source"))
        return got

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        self._load_journal()
        for key in keys:
            rec = self.step(key)
            self.tally.add(rec)
            emit("pair", rec)

    def propose(self, step: int, arm: int) -> np.ndarray:
        space = self.config.space
        rng = step_rng(self.config.seed, step, arm)
        if arm == 0:
            return es_propose(self.tally.es_state(), space, rng, start_point(self.config.transform, space))
        return random_propose(space, rng)

    def step(self, key: Key) -> dict[str, Any]:
        from lidarmt.lidar.campaign import follow_roi, transform_seed

        step, arm, _ = key
        cfg = self.config
        base = {"type": "pair", "key": list(key), "step": step, "arm": ARMS[arm]}
        stop = self.tally.es_stopped_at() if cfg.strategy == "es" else None
        if stop is not None and step >= stop:
            return {**base, "status": "skipped", "why": f"the ES stopped at step {stop} (60 without improvement)"}
        u = self.propose(step, arm)
        params = cfg.space.to_params(u)
        rec = {**base, "unit": [float(v) for v in u], "params": params}
        if arm == 0:
            rec["sigma"] = self.tally.es_state().sigma
        per = []
        for f in cfg.frames:
            try:
                frame, roi, src = self.source(f)
                change = self.transform.apply(frame, params, seed=transform_seed(cfg.seed, f, cfg.transform,
                                                                                 2 + 2 * step + arm, 0),
                                              context=self.base.context(0, roi))
                follow = self.detect(change.frame, follow_roi(roi, change), key=key, stage="follow")
            except Exception as err:
                fail = failure(err)
                return {**rec, "status": fail["status"], "error": fail["error"], "traceback": fail["traceback"]}
            facts = self.base.facts(frame, src, change, follow)
            lost = judge_facts(facts, cfg.relation, cfg.thresholds)
            req = [r for r in facts["source"] if required(r, cfg.relation, cfg.thresholds)]
            dist = float(np.mean([1.0 - min(1.0, float(r["score"])) for r in req])) if req else 0.0
            per.append({"frame": f, "violation": bool(lost), "lost": len(lost), "disturbance": round(dist, 6),
                        "nearest_m": min((float(x["distance"]) for x in lost), default=None)})
        rate = sum(p["violation"] for p in per) / len(per)
        nearest = [p["nearest_m"] for p in per if p["nearest_m"] is not None]
        return {**rec, "status": "ok", "frames": per, "violations": sum(p["violation"] for p in per),
                "rate": rate, "fitness": rate + LOST_WEIGHT * float(np.mean([p["disturbance"] for p in per])),
                "nearest_m": min(nearest) if nearest else None}

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]:  # pragma: no cover
        raise SearchArgumentError("a transformation search makes no bundles: run lidarmt fuzz --transforms "
                                  "NAME --levels 'SETTING' with the best setting to bundle its violations")


# ----------------------------------------------------------------------------------------------- reports


def summary_dict(config: TransformSearchConfig, tally: TransformSearchTally) -> dict[str, Any]:
    return {"kind": KIND, "config": config.to_dict(), **tally.to_dict()}


def _rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["arm", "candidates", "violating", "first violation at step", "best setting", "rate", "fitness",
            "nearest m"]
    rows = []
    for arm, a in summary["arms"].items():
        best = a["best"][0] if a["best"] else None
        rows.append([arm, str(a["candidates"]), str(a["violating_candidates"]),
                     "–" if a["first_violation_step"] is None else str(a["first_violation_step"]),
                     "–" if best is None else ", ".join(f"{k}={v:g}" for k, v in best["params"].items()),
                     "–" if best is None else f"{best['rate']:.2f}", "–" if best is None else f"{best['fitness']:.3f}",
                     "–" if best is None or best["nearest_m"] is None else f"{best['nearest_m']:.1f}"])
    return head, rows


def write_reports(out: str | Path, summary: Mapping[str, Any], *, run: Mapping[str, Any]) -> dict[str, Path]:
    from lidarmt.engine.report import (
        failure_body,
        junit_xml,
        markdown_table,
        savefig,
        text_block,
        write_report_set,
    )

    cfg = summary["config"]
    head, rows = _rows(summary)
    title = (f"{cfg['transform']} ({cfg['relation']}): settings searched on {len(cfg['frames'])} frame(s), "
             f"budget {cfg['budget']} per arm")
    th = Thresholds.from_dict(cfg["thresholds"]).describe()
    table = "\n".join([*text_block(title, head, rows), "thresholds: " + th, ""])
    md = "\n".join([f"# Search: {title}", "", f"- thresholds: {th}", "", markdown_table(head, rows), "",
                    "![best fitness per step](search.png)", ""])

    def chart(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.4))
        for arm, a in summary["arms"].items():
            ax.plot(range(1, len(a["curve"]) + 1), a["curve"], label=arm)
        ax.set_xlabel("candidate")
        ax.set_ylabel("best fitness so far")
        ax.set_title(title, fontsize=8)
        ax.legend(fontsize=8)
        fig.tight_layout()
        savefig(fig, path)

    cases = [(arm, "failure", failure_body(cfg["relation"], f"{a['violating_candidates']} of {a['candidates']} "
                                           "candidate settings violate it")) if a["violating_candidates"]
             else (arm, "ok", "") for arm, a in summary["arms"].items()]
    return write_report_set(out, summary=summary, run=run, table=table, markdown=md,
                            junit=junit_xml("lidarmt transform search", {cfg["transform"]: cases}),
                            charts={"search.png": chart})
