"""Coverage-guided and evolutionary search on steering models: DeepTest's Algorithm 1, TACTIC's (1+1)-ES.

Both run on the shared campaign engine as the campaign kind ``camera-search``; every evaluated candidate is a
journal record, every random choice comes from a generator seeded by the candidate's identity, and a resumed
search folds its journal back into its state (coverage bitsets are rebuilt by forwarding again the few
candidates that changed them), so it continues exactly where a killed one stopped.

**DeepTest, Algorithm 1** (``strategy="deeptest"``; Tian et al., ICSE 2018, with the parameter ranges of its
code's guided search, :data:`GUIDED_RANGES`). The seeds' own neuron coverage (NC, threshold 0.2) is taken
first. Then, per seed (an engine item), per attempt: transformation T1 (dequeued from the seed's queue when it
is not empty, else drawn at random) and T2 (at random), each with a random parameter, are applied to the seed
in turn; the mutant is kept when it raises the cumulative NC, and then T1 and T2 are queued for the next
attempts of this seed; a seed stops after ``tries`` (10) failed attempts, or at its share of the budget. Every
mutant is also judged by the camera relations (DeepTest Eq. 2 when the source has labels, DeepRoad's |Δθ|
otherwise). In the same attempt an *unguided* mutant (two random transformations, no queue, always kept) is
made on the same seed for the comparison: same seeds, the same number of mutants.

**TACTIC's (1+1)-ES** (``strategy="es"``; Li et al., ICML 2021) over one transformation's continuous space (its
``space``: intensity and style parameters), with a random-search arm on the same budget; ``strategy="random"``
is that arm alone. A candidate's fitness on the seed batch is Fc + Fd/(Fd + 1): Fc the share of the KMNC (or
NBC) units the seeds leave uncovered that the transformed batch covers, Fd the mean |θ(τ(i)) − θ(i)| in radians
(the model's output unit). The landscape is fixed (Fc is measured against the seeds' coverage, and the weather's
random textures are seeded per frame, not per step), so a candidate's fitness depends on its parameters only.

**TACTIC's style search** (``space`` a MUNIT translator, e.g. ``munit-night``): the space is the style vector
``s0 .. s{d-1}`` in [-3, 3] (σ₀ = 5 in style units, as TACTIC). The seeds' content codes are computed once
(``encode``), so a candidate costs one decoder pass over the seed batch (plus the model's forward). Next to ES
and random, a third arm, ``deeproad``, is DeepRoad's single-style translation (``baseline``: a UNIT translator,
or a MUNIT one at style 0, the prior's mode) applied once to the same seeds and judged by the same fitness and
error counts: one candidate, so the rest of its budget cannot be used. A UNIT translator has no style space:
it is a transformation for ``lidarmt camera fuzz``. Decoding the seed batch at once and translating one frame
alone can differ by a grey level in rare pixels (the style MLP's batched matmul), so a bundle, which
recomputes its mutant from scratch, may hold angles a hair away from the journal's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lidarmt.camera.campaign import ModelRef, TransformRef, transform_seed
from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, failure
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.engine.tally import KeyedTally
from lidarmt.search.errors import SearchArgumentError
from lidarmt.search.es import Dim, EsState, Space, es_propose, es_tell, random_propose, step_rng

OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "search.png",
         "conditions.png", "worst.png", "violations")
STRATEGIES = ("deeptest", "es", "random")
ARM_NAMES = {"deeptest": ("guided", "unguided"), "es": ("es", "random", "deeproad"),
             "random": ("es", "random", "deeproad")}
BASELINE_ARM = 2  # DeepRoad's single-style translation: one candidate, at step 0
EPS_DEG = (10.0, 20.0, 30.0, 40.0)
SIMPLE = ("translation", "scale", "shear", "rotation", "contrast", "brightness", "blur")


def _tenths(lo: int, hi: int) -> Callable[[np.random.Generator], float]:
    return lambda rng: round(0.1 * int(rng.integers(lo, hi)), 6)


#: DeepTest's guided-search parameter ranges (its code, ``guided/*``): translation −50..49 px (x and y drawn
#: apart), scale 0.5..1.9, shear −0.5..0.4, rotation −30..30°, contrast 0.1..1.9, brightness −21..20, blur 1..10
GUIDED_RANGES: dict[str, Callable[[np.random.Generator], dict[str, float]]] = {
    "translation": lambda rng: {"tx": float(rng.integers(-50, 50)), "ty": float(rng.integers(-50, 50))},
    "scale": lambda rng: (lambda s: {"sx": s, "sy": s})(_tenths(5, 20)(rng)),
    "shear": lambda rng: {"sx": _tenths(-5, 5)(rng)},
    "rotation": lambda rng: {"angle": float(rng.integers(-30, 31))},
    "contrast": lambda rng: {"alpha": _tenths(1, 20)(rng)},
    "brightness": lambda rng: {"beta": float(rng.integers(-21, 21))},
    "blur": lambda rng: {"id": int(rng.integers(1, 11))},
}


def attempt_rng(seed: int, pos: int, attempt: int, arm: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(pos), int(attempt), int(arm),
                                                                        0x64656570])))  # "deep"


def camera_space(transform: str) -> Space:
    """A transformation's continuous parameters as a search space (all of its ``space``; a MUNIT translator's
    style vector)."""
    from lidarmt.camera.transforms.registry import get_transform

    t = get_transform(transform)
    if t.family == "translator" and not t.space:
        raise SearchArgumentError(f"--space {transform}: a unimodal (UNIT) translator has no style space to "
                                  f"search; run it as a transformation: lidarmt camera fuzz --transforms {transform}")
    if not t.space:
        raise SearchArgumentError(f"--space {transform}: this transformation has no continuous parameters; use "
                                  "fog, rain, snow, night, glare, droplets, dirt or a simple one")
    return Space(tuple(Dim(k, float(r.low), float(r.high), bool(r.integer)) for k, r in t.space.items()))


@dataclass(frozen=True, slots=True)
class CameraSearchConfig:
    """Everything that determines a camera search's records (``run_dir`` only says where its journal is)."""

    images: str
    model: ModelRef
    strategy: str
    frames: tuple[int, ...]
    budget: int
    seed: int = 0
    space: str | None = None
    criterion: str = "kmnc"
    tries: int = 10
    topic: str | None = None
    timeout: float | None = None
    profile: str | None = "auto"
    nc_threshold: float = 0.2
    kmnc_k: int = 1000
    baseline: str | None = None
    run_dir: str | None = field(default=None, compare=False)

    kind: ClassVar[str] = "camera-search"
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise SearchArgumentError(f"--strategy {self.strategy!r}: use deeptest, es or random")
        if self.budget < 1:
            raise SearchArgumentError(f"--budget {self.budget}: give at least 1 candidate")
        if not self.frames:
            raise SearchArgumentError("--frames: the search needs at least one seed image")
        if self.strategy != "deeptest":
            if not self.space:
                raise SearchArgumentError(f"--strategy {self.strategy} needs --space (fog, rain, snow, night, ...)")
            if self.criterion not in ("kmnc", "nbc"):
                raise SearchArgumentError(f"--criterion {self.criterion!r}: use kmnc or nbc (TACTIC's criteria)")
        if self.tries < 1:
            raise SearchArgumentError(f"--tries {self.tries}: allow at least one failed try per seed")
        if self.baseline is not None and self.strategy == "deeptest":
            raise SearchArgumentError("--baseline: DeepRoad's single-style arm is for --strategy es or random")

    # ------------------------------------------------------------------------------------------ items

    @property
    def arms(self) -> tuple[int, ...]:
        """The arms that run: ES (0) and random (1), or random alone; the baseline (2) when there is one."""
        if self.strategy == "deeptest":
            return (0, 1)
        base = (1,) if self.strategy == "random" else (0, 1)
        return base + ((BASELINE_ARM,) if self.baseline else ())

    @property
    def search_arms(self) -> tuple[int, ...]:
        """The arms that spend the budget (every arm but the one-candidate baseline)."""
        return tuple(a for a in self.arms if a != BASELINE_ARM)

    @property
    def arm_names(self) -> tuple[str, ...]:
        return ARM_NAMES[self.strategy]

    @property
    def per_seed(self) -> int:
        """DeepTest: attempts a seed may use at most (its share of the budget)."""
        return max(1, self.budget // len(self.frames))

    @property
    def items(self) -> tuple[int, ...]:
        return tuple(range(len(self.frames) if self.strategy == "deeptest" else self.budget))

    @property
    def total(self) -> int:
        if self.strategy == "deeptest":
            return len(self.items) * self.per_seed * len(self.arms)
        return len(self.items) * len(self.search_arms) + (1 if self.baseline else 0)

    def keys_of(self, item: int) -> list[Key]:
        if self.strategy == "deeptest":
            return [(item, a, arm) for a in range(self.per_seed) for arm in self.arms]
        return [(item, 0, arm) for arm in self.arms if arm != BASELINE_ARM or item == 0]

    def key_fields(self, key: Key) -> dict[str, Any]:
        return {"key": list(key)}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        from lidarmt.camera.bundle import display_name

        model = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(display_name(self.model.name)).stem)
        a, b, arm, j = (tuple(key) + (0, 0, 0, 0))[:4]
        if self.strategy == "deeptest":
            return f"{model[:24]}-{self.arm_names[arm]}-seed{a:03d}-try{b:02d}"
        from lidarmt.camera.campaign import safe_name

        space = safe_name(str(self.baseline if arm == BASELINE_ARM else self.space), 40)
        return f"{model[:24]}-{space}-{self.arm_names[arm]}-s{a:03d}-i{j:03d}"

    def transform_names(self) -> tuple[str, ...]:
        if self.strategy == "deeptest":
            return SIMPLE
        extra = (str(self.baseline),) if self.baseline and self.baseline != self.space else ()
        return (str(self.space), *extra)

    def new_tally(self) -> CameraSearchTally:
        return CameraSearchTally(self)

    def evaluator(self, *, enforce_timeout: bool = True) -> CameraSearchEvaluator:
        return CameraSearchEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        return 600 * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "images": self.images, "model": self.model.to_dict(), "strategy": self.strategy,
                "frames": list(self.frames), "budget": self.budget, "seed": self.seed, "space": self.space,
                "criterion": self.criterion, "tries": self.tries, "topic": self.topic, "timeout": self.timeout,
                "profile": self.profile, "nc_threshold": self.nc_threshold, "kmnc_k": self.kmnc_k,
                **({"baseline": self.baseline} if self.baseline else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CameraSearchConfig:
        return cls(str(d["images"]), ModelRef.from_dict(d["model"]), str(d["strategy"]),
                   tuple(int(f) for f in d["frames"]), int(d["budget"]), int(d["seed"]), d.get("space"),
                   str(d.get("criterion", "kmnc")), int(d.get("tries", 10)), d.get("topic"), d.get("timeout"),
                   d.get("profile", "auto"), float(d.get("nc_threshold", 0.2)), int(d.get("kmnc_k", 1000)),
                   d.get("baseline"))


# ----------------------------------------------------------------------------------------------- tally


class CameraSearchTally(KeyedTally):
    """The records of a camera search, by arm, in key order when asked."""

    def __init__(self, config: CameraSearchConfig) -> None:
        super().__init__()
        self.config = config
        self.records: dict[int, list[dict[str, Any]]] = {0: [], 1: [], BASELINE_ARM: []}
        self.skipped_keys: set[Key] = set()

    @property
    def skipped(self) -> int:
        return len(self.skipped_keys)

    def _add(self, key: Key, rec: Mapping[str, Any]) -> None:
        if rec["status"] == "skipped":
            self.skipped_keys.add(key)
            return
        self.records[key[2]].append(dict(rec))

    def arm(self, arm: int) -> list[dict[str, Any]]:
        return sorted(self.records[arm], key=lambda r: tuple(r["key"]))

    def es_state(self) -> EsState:
        d = camera_space(str(self.config.space)).d
        state = EsState()
        for rec in self.arm(0):
            if rec["status"] == "ok":
                state = es_tell(state, rec["unit"], float(rec["fitness"]), d)
        return state

    def es_stopped_at(self) -> int | None:
        if self.config.strategy != "es":
            return None
        d = camera_space(str(self.config.space)).d
        state = EsState()
        for rec in self.arm(0):
            if rec["status"] == "ok":
                state = es_tell(state, rec["unit"], float(rec["fitness"]), d)
                if state.stopped():
                    return int(rec["key"][0]) + 1
        return None

    def seed_state(self, pos: int) -> tuple[list[str], int, int]:
        """DeepTest: (queue, failed tries, attempts) of seed ``pos`` after its journaled attempts."""
        queue: list[str] = []
        failed = attempts = 0
        for rec in self.arm(0):
            if rec["key"][0] != pos or rec["status"] != "ok":
                continue
            queue = list(rec["queue"])
            failed = int(rec["failed"])
            attempts += 1
        return queue, failed, attempts


# ----------------------------------------------------------------------------------------------- evaluator


class CameraSearchEvaluator(EvaluatorBase):
    """Builds the image source, the model with its coverage tracker, and runs the search's candidates."""

    what = "the steering model"

    def __init__(self, config: CameraSearchConfig, *, enforce_timeout: bool = True) -> None:
        from lidarmt.camera.campaign import CameraCampaignConfig, CameraEvaluator
        from lidarmt.camera.transforms.registry import is_translator
        from lidarmt.coverage import CoverageConfig
        from lidarmt.coverage.camera import load_profile_for, tracker_for

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        names = config.transform_names()
        device = config.model.options.get("device")  # a translator runs where the model does
        refs = tuple(TransformRef(n, ({},), {"device": str(device)} if device and is_translator(n) else {})
                     for n in names)
        self.cam = CameraEvaluator(CameraCampaignConfig(config.images, (config.model,), refs, config.frames,
                                                        seed=config.seed, topic=config.topic,
                                                        timeout=config.timeout), enforce_timeout=False)
        self.model = self.cam.models[0]
        self.history = int(self.model.input_spec.history)
        self.transforms = dict(zip(names, self.cam.transforms, strict=True))
        self._content: dict[str, list[tuple[list[int], Any, tuple[int, ...]]]] = {}  # translator -> seed codes
        profile = load_profile_for(config.model.name, config.profile) if config.profile else None
        if config.strategy != "deeptest" and profile is None:
            raise SearchArgumentError(f"--model {config.model.name}: {config.criterion} needs the model's profile "
                                      "(make one with lidarmt camera profile, or pass --profile FILE)")
        crit = ("nc",) if config.strategy == "deeptest" else (config.criterion, "kmnc", "nbc")
        cov = CoverageConfig(criteria=tuple(dict.fromkeys(crit)), nc_threshold=config.nc_threshold,
                             kmnc_k=config.kmnc_k)
        self.tracker = tracker_for(self.model, profile=profile if config.strategy != "deeptest" else None,
                                   config=cov)
        self.unguided = None
        self.tally = config.new_tally()
        self._ready = False
        self.seeds: dict[int, dict[str, Any]] = {}  # position -> window, label, pred

    # ------------------------------------------------------------------------------------------ set-up

    def _measure(self, tracker: Any, batch: np.ndarray, keys: Any) -> Any:
        return self.call(lambda b: tracker.update(b, commit=False), batch, keys=keys, stage="follow", work=len(batch))

    def prepare(self) -> None:
        """Forward the seeds once (their coverage is the baseline), then fold an earlier invocation's journal."""
        if self._ready:
            return
        self._ready = True
        wins = []
        for pos, f in enumerate(self.config.frames):
            window, cur = self.cam.window(f)
            self.seeds[pos] = {"frame": f, "window": window, "label": cur.label, "frame_id": cur.frame_id}
            wins.append(self.cam.model_input(window, self.history))
        preds = []
        for i in range(0, len(wins), 64):
            batch = np.stack(wins[i:i + 64])
            step = self.call(self.tracker.update, batch, stage="source", work=len(batch))
            preds.extend(float(v) for v in np.asarray(step.outputs).reshape(-1))
        for pos, p in enumerate(preds):
            self.seeds[pos]["pred"] = p
        labels = [s["label"] for s in self.seeds.values() if s["label"] is not None]
        self.mse_orig = (float(np.mean([(s["pred"] - s["label"]) ** 2 for s in self.seeds.values()
                                        if s["label"] is not None])) if labels else None)
        self.seed_cov = self.tracker.coverage()
        self.unguided = self.tracker.copy()
        if self.config.run_dir is None:
            return
        path = Path(self.config.run_dir) / JOURNAL_NAME
        if not path.is_file():
            return
        for rec in iter_records(path):
            self.tally.add(rec)
        if self.config.strategy == "deeptest":  # rebuild the cumulative coverage from the mutants that changed it
            for arm, tracker in ((0, self.tracker), (1, self.unguided)):
                for rec in self.tally.arm(arm):
                    if rec["status"] == "ok" and rec["new"] > 0:
                        batch = self.apply_steps(int(rec["key"][0]), rec["steps"])[None]
                        tracker.update(batch)

    # ------------------------------------------------------------------------------------------ images

    def apply_steps(self, pos: int, steps: Sequence[Mapping[str, Any]], *, window: np.ndarray | None = None
                    ) -> np.ndarray:
        """The model input of seed ``pos`` with ``steps`` applied in order to every frame of its window."""
        win = self.seeds[pos]["window"] if window is None else window
        return self.cam.model_input(self.compose(win, steps), self.history)

    def compose(self, window: np.ndarray, steps: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """A (T, H, W, 3) window with ``steps`` applied in turn (each to the whole window: a translator
        translates it in one call)."""
        from lidarmt.camera.transforms.base import apply_window

        for s in steps:
            window = apply_window(self.transforms[s["transform"]], window, s["params"], int(s["seed"]))
        return window

    # ------------------------------------------------------------------------------------------ translators

    def seed_content(self, name: str) -> list[tuple[list[int], Any, tuple[int, ...]]] | None:
        """The content codes of every seed window under translator ``name``, computed once: per frame size,
        (seed positions, codes of their windows' frames in order, window shape); None when the translator
        cannot split encoding from decoding."""
        if name in self._content:
            return self._content[name]
        t = getattr(self.transforms[name], "translator", None)
        if t is None or not (callable(getattr(t, "encode", None)) and callable(getattr(t, "decode", None))):
            return None
        groups: dict[tuple[int, ...], list[int]] = {}
        for pos in self.seeds:
            groups.setdefault(tuple(self.seeds[pos]["window"].shape), []).append(pos)
        out = []
        for shape, poss in groups.items():
            frames = np.concatenate([self.seeds[p]["window"] for p in poss])
            out.append((poss, self.call(t.encode, frames, stage="source", work=len(frames)), shape))
        self._content[name] = out
        return out

    def candidate_inputs(self, name: str, params: Mapping[str, Any]) -> np.ndarray:
        """The model inputs of every seed under transformation ``name`` with ``params``: for a translator whose
        style the parameters pin (every s_i given, or UNIT), one decoder pass over the cached content codes;
        otherwise the transformation applied to each window."""
        tr = self.transforms[name]
        content = None
        if tr.family == "translator":
            style_dim = int(getattr(tr, "style_dim", 0))
            if all(f"s{i}" in params for i in range(style_dim)):
                content = self.seed_content(name)
        if content is None:
            return np.stack([self.apply_steps(pos, self.condition_steps(pos, params, name)) for pos in self.seeds])
        style = tr.style(params, 0)  # pinned: the seed draws nothing
        inputs: dict[int, np.ndarray] = {}
        for poss, codes, shape in content:
            t, h, w = shape[0], shape[1], shape[2]
            frames = tr.decode(codes, style, (h, w)).reshape(len(poss), t, h, w, 3)
            for p, win in zip(poss, frames, strict=True):
                inputs[p] = self.cam.model_input(win, self.history)
        return np.stack([inputs[p] for p in self.seeds])

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        self.prepare()
        for key in keys:
            if self.config.strategy == "deeptest":
                rec = self.deeptest_step(key)
            else:
                rec = self.baseline_step(key) if key[2] == BASELINE_ARM else self.es_step(key)
            self.tally.add(rec)
            emit("pair", rec)

    # ------------------------------------------------------------------------------------------ DeepTest

    def deeptest_step(self, key: Key) -> dict[str, Any]:
        pos, attempt, arm = key
        cfg = self.config
        seed = self.seeds[pos]
        base = {"type": "pair", "key": list(key), "arm": cfg.arm_names[arm], "frame": seed["frame"],
                "attempt": attempt}
        queue, failed, _ = self.tally.seed_state(pos)
        if (failed >= cfg.tries) if arm == 0 else self.tally.seen((pos, attempt, 0)) and (
                (pos, attempt, 0) in self.tally.skipped_keys):
            return {**base, "status": "skipped", "why": f"the seed failed {cfg.tries} tries"}
        rng = attempt_rng(cfg.seed, pos, attempt, arm)
        names = list(SIMPLE)
        t1 = queue.pop(0) if arm == 0 and queue else names[int(rng.integers(len(names)))]
        t2 = names[int(rng.integers(len(names)))]
        steps = []
        for t in (t1, t2):
            steps.append({"transform": t, "params": GUIDED_RANGES[t](rng), "seed": int(rng.integers(2**62))})
        tracker = self.tracker if arm == 0 else self.unguided
        try:
            batch = self.apply_steps(pos, steps)[None]
            step = self._measure(tracker, batch, key)
        except Exception as err:
            fail = failure(err)
            return {**base, "status": fail["status"], "error": fail["error"], "traceback": fail["traceback"],
                    "steps": steps, "queue": queue, "failed": failed + (arm == 0)}
        new = int(step.new["nc"][0])
        kept = new > 0 if arm == 0 else True
        if kept:
            tracker.update_activations(step.acts, commit=True)
        if arm == 0:
            if new > 0:
                queue += [t1, t2]
            else:
                failed += 1
        pred_t = float(np.asarray(step.outputs).reshape(-1)[0])
        return {**base, "status": "ok", "steps": steps, "new": new, "kept": bool(kept),
                "coverage": tracker.coverage()["nc"], "queue": queue, "failed": failed, "label": seed["label"],
                "pred": seed["pred"], "pred_t": pred_t, "mse_orig": self.mse_orig,
                "seed_nc": self.seed_cov["nc"]}

    # ------------------------------------------------------------------------------------------ ES

    def es_step(self, key: Key) -> dict[str, Any]:
        step_i, _, arm = key
        cfg = self.config
        base = {"type": "pair", "key": list(key), "arm": cfg.arm_names[arm], "step": step_i}
        stop = self.tally.es_stopped_at()
        if stop is not None and step_i >= stop:
            return {**base, "status": "skipped", "why": f"the ES stopped at step {stop} (60 without improvement)"}
        space = camera_space(str(cfg.space))
        rng = step_rng(cfg.seed, step_i, arm)
        if arm == 0:
            state = self.tally.es_state()
            u = es_propose(state, space, rng)
            sigma = state.sigma
        else:
            u, sigma = random_propose(space, rng), None
        params = space.to_params(u)
        rec = {**base, "unit": [float(v) for v in u], "params": params, "sigma": sigma}
        return self.judge_candidate(rec, key, str(cfg.space), params)

    def baseline_step(self, key: Key) -> dict[str, Any]:
        """DeepRoad's single-style translation of the seeds (a UNIT translator, or a MUNIT one at style 0)."""
        cfg = self.config
        name = str(cfg.baseline)
        base = {"type": "pair", "key": list(key), "arm": cfg.arm_names[BASELINE_ARM], "step": int(key[0])}
        tr = self.transforms[name]
        params = {f"s{i}": 0.0 for i in range(int(getattr(tr, "style_dim", 0)))} if tr.family == "translator" \
            else {}
        rec = {**base, "transform": name, "unit": [], "params": params, "sigma": None}
        return self.judge_candidate(rec, key, name, params)

    def judge_candidate(self, rec: dict[str, Any], key: Key, name: str, params: Mapping[str, Any]
                        ) -> dict[str, Any]:
        """Fitness, coverage and predictions of the seeds under one condition (``rec`` completed)."""
        cfg = self.config
        try:
            batch = self.candidate_inputs(name, params)
            outs, new_units = [], {c: 0 for c in self.tracker.criteria}
            acts = []
            for i in range(0, len(batch), 64):
                st = self._measure(self.tracker, batch[i:i + 64], key)
                outs.extend(float(v) for v in np.asarray(st.outputs).reshape(-1))
                acts.append(st.acts)
            # Fc over the whole batch against the seeds' coverage (chunks measured together)
            st = self.tracker.update_activations(np.concatenate(acts), commit=False)
            for c in self.tracker.criteria:
                new_units[c] = int(st.new[c].sum())
        except Exception as err:
            fail = failure(err)
            return {**rec, "status": fail["status"], "error": fail["error"], "traceback": fail["traceback"]}
        preds = np.array([self.seeds[p]["pred"] for p in self.seeds])
        pred_t = np.asarray(outs)
        fd = float(np.mean(np.abs(pred_t - preds)))
        fc = float(st.gain[cfg.criterion])
        covered = self.tracker.covered_counts()
        reach = {c: (covered[c] + new_units[c]) / self.tracker.units(c) for c in self.tracker.criteria}
        return {**rec, "status": "ok", "fc": fc, "fd": fd, "fitness": fc + fd / (fd + 1.0),
                "pred": [float(v) for v in preds], "pred_t": [float(v) for v in pred_t],
                "labels": [self.seeds[p]["label"] for p in self.seeds], "mse_orig": self.mse_orig,
                "frames": [self.seeds[p]["frame"] for p in self.seeds], "coverage": reach,
                "seed_coverage": {c: self.seed_cov[c] for c in self.tracker.criteria}, "new_units": new_units}

    def condition_steps(self, pos: int, params: Mapping[str, Any], name: str | None = None
                        ) -> list[dict[str, Any]]:
        """One transformation (the space's, or ``name``) with the candidate's parameters; the random textures
        are seeded per frame."""
        name = str(self.config.space) if name is None else name
        return [{"transform": name, "params": dict(params),
                 "seed": transform_seed(self.config.seed, self.seeds[pos]["frame"], name, 0, 0)}]

    # ------------------------------------------------------------------------------------------ bundles

    def judge_steps(self, frame: int, steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Seed window and mutant of ``frame`` and both predictions, from scratch (bundles)."""
        window, cur = self.cam.window(frame)
        tw = self.compose(window, steps)
        pred = float(self.cam.predict(0, self.cam.model_input(window, self.history)[None], None, "bundle")[0])
        pred_t = float(self.cam.predict(0, self.cam.model_input(tw, self.history)[None], None, "bundle")[0])
        return {"frame": cur, "window": window, "transformed": tw, "pred": pred, "pred_t": pred_t}

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]:
        from lidarmt.camera.bundle import make_camera_bundle

        return make_camera_bundle(self, tuple(key), Path(out_dir), **opts)


def deeptest_errors(records: Sequence[Mapping[str, Any]], lam: float) -> int:
    """Mutants that break DeepTest's Eq. 2, (θ(τ(i)) − θᵗ)² > λ·MSE_orig (labelled seeds only)."""
    return sum(1 for r in records if r.get("label") is not None and r.get("mse_orig") is not None
               and (r["pred_t"] - r["label"]) ** 2 > lam * r["mse_orig"])


def deeproad_errors(pred: Sequence[float], pred_t: Sequence[float], eps_deg: float) -> int:
    """Pairs with |θ(τ(i)) − θ(i)| > ε."""
    return int(np.sum(np.abs(np.asarray(pred_t) - np.asarray(pred)) > math.radians(eps_deg)))


def arm_comparison(config: CameraSearchConfig, tally: CameraSearchTally, *, lam: float = 5.0
                   ) -> dict[str, Any] | None:
    """One row per arm of an ES/random search (with the DeepRoad-style baseline when there is one): candidates,
    images translated, the best candidate's KMNC and NBC (seeds plus its images), erroneous images (DeepRoad's
    |Δθ| > ε at 10/20/30/40°, DeepTest's Eq. 2 at ``lam`` when the seeds have labels), errors per image and the
    best fitness. Folded from the journal: a resumed search gives the same rows."""
    if config.strategy == "deeptest":
        return None
    seeds = len(config.frames)
    rows = []
    for arm in config.arms:
        recs = [r for r in tally.arm(arm) if r["status"] == "ok"]
        images = len(recs) * seeds
        errors = {f"{e:g}": sum(deeproad_errors(r["pred"], r["pred_t"], e) for r in recs) for e in EPS_DEG}
        labelled = any(lab is not None for r in recs for lab in r["labels"])
        eq2 = sum(1 for r in recs if r.get("mse_orig") is not None
                  for lab, pt in zip(r["labels"], r["pred_t"], strict=True)
                  if lab is not None and (pt - lab) ** 2 > lam * r["mse_orig"]) if labelled else None
        cov = {c: max((float(r["coverage"][c]) for r in recs if c in r["coverage"]), default=None)
               for c in ("kmnc", "nbc")}
        rows.append({
            "arm": config.arm_names[arm],
            "transform": str(config.baseline if arm == BASELINE_ARM else config.space),
            "candidates": len(recs), "crashes": sum(1 for r in tally.arm(arm) if r["status"] != "ok"),
            "images": images, "kmnc": cov["kmnc"], "nbc": cov["nbc"], "errors": errors,
            "errors_per_image": {k: (v / images if images else None) for k, v in errors.items()},
            "deeptest_errors": eq2, "lambda": lam,
            "best_fitness": max((float(r["fitness"]) for r in recs), default=None)})
    note = (f"Same budget: {config.budget} candidate conditions per searching arm on the same {seeds} seed "
            "images, judged by the same fitness and error counts.")
    if config.baseline:
        note += (f" The DeepRoad-style arm ({config.baseline}"
                 + (", at style 0, the prior's mode" if config.baseline == config.space else "")
                 + ") is a single-style translation: it has one candidate, so the rest of its budget is unusable.")
    return {"rows": rows, "budget": config.budget, "seeds": seeds, "baseline": config.baseline, "note": note}


def comparison_table(comparison: Mapping[str, Any]) -> str:
    """The arms side by side (text): what ``arm_comparison`` folded."""

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.2f} %"

    lam = comparison["rows"][0]["lambda"] if comparison["rows"] else 5.0
    lines = [f"{'arm':<9} {'translator/transformation':<26} {'cand.':>5} {'images':>6} {'KMNC':>8} {'NBC':>8}  "
             f"{'errors 10/20/30/40°':<20} {'per image (10°)':>15} {f'Eq.2 λ={lam:g}':>9} {'best fit.':>9}"]
    for r in comparison["rows"]:
        err = "/".join(str(r["errors"][f"{e:g}"]) for e in EPS_DEG)
        per = r["errors_per_image"]["10"]
        per_s = "–" if per is None else f"{per:.3f}"
        eq2 = "–" if r["deeptest_errors"] is None else str(r["deeptest_errors"])
        best = "–" if r["best_fitness"] is None else f"{r['best_fitness']:.4f}"
        lines.append(f"{r['arm']:<9} {r['transform'][:26]:<26} {r['candidates']:>5} {r['images']:>6} "
                     f"{pct(r['kmnc']):>8} {pct(r['nbc']):>8}  {err:<20} {per_s:>15} {eq2:>9} {best:>9}")
    lines.append(comparison["note"])
    return "\n".join(lines) + "\n"
