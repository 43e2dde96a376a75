"""Camera campaigns: the camera relations as a plug-in of the shared campaign engine (:mod:`lidarmt.engine.campaign`).

Source image ─► transformation ─► steering model ─► relation ─► verdict ─► journal ─► reports and bundles.

A key is ``(frame, model, transformation, parameter, trial)`` (indices into the campaign's lists); the unit of
work is one seed frame: every model predicts the seed once, every (transformation, parameter, trial) image is
made once and shared by the models, and each model judges all of them in batches (one forward pass per batch),
so transformations and bookkeeping stay cheap next to the models. In the campaign's own process, next to the
prefetch pool, the project's plain torch models judge a frame's batches two at a time, each on its share of
the cores (:meth:`CameraEvaluator._second_lane`): the same batches and records, without torch's threads and the
pool's fighting over the cores. Models with history (Chauffeur) get windows of
consecutive frames, oldest first; a transformation is applied to every frame of the window with the same
parameters and seed (the weather is the same across the window); before the first frames of a source the window
is padded by repeating the first frame.

Every random choice of a transformation (the weather's style, rain streaks, snow flakes, a translator's style
vector) comes from a seed derived from (campaign seed, frame, transformation, parameter, trial), so any pair can
be replayed alone. The built-in transformations are made by the implementation the configuration names
(``transform_impl``: ``batched-v1`` for new campaigns, ``reference`` for journals that name none;
:mod:`lidarmt.camera.transforms.batched`), a transformation's settings for a frame in one call.

Learned translators (``--transforms munit-night``, the family ``translator``) are transformations like the
others: one setting (the style drawn from the prior with that seed), built in each worker on the campaign's
device (the TransformRef's ``options``), a window translated in one call, the content codes of a frame reused
by its trials.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lidarmt.camera.errors import CameraArgumentError
from lidarmt.camera.relations import CameraTally, Criteria
from lidarmt.camera.transforms.base import transform_seed  # noqa: F401  (the campaign's seeds)
from lidarmt.camera.types import MAX_ANGLE_RAD
from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, SutTimeout, failure, pair_record
from lidarmt.engine.journal import JOURNAL_NAME
from lidarmt.errors import LidarmtError

LANES_ENV = "LIDARMT_MODEL_LANES"  # "0": a frame's batches one after the other (CameraEvaluator._second_lane)
OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "worst.png",
         "mse.png", "violations")


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A steering model to build: a registered name, a Keras ``.h5`` or weights ``.pt`` path, or
    ``package.module:callable``; ``sha256``: the model file's fingerprint when the model is a file (recorded
    only then, so journals of named models read as before), checked before the model is built."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "options": dict(self.options)}
        if self.sha256:
            d["sha256"] = self.sha256
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelRef:
        sha = d.get("sha256")
        return cls(str(d["name"]), dict(d.get("options", {})), None if sha is None else str(sha))


def model_ref(name: str, options: Mapping[str, Any] | None = None) -> ModelRef:
    """A ModelRef for ``name`` with its file's SHA-256 when the model is a file (Keras or weights)."""
    from lidarmt.camera.models.registry import file_sha256

    return ModelRef(name, dict(options or {}), file_sha256(name))


def build_model(ref: ModelRef, *, trust_code: bool = True) -> Any:
    """The steering model ``ref`` names; a model file whose SHA-256 differs from the recorded one is refused
    with one line before anything is read from it."""
    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.models.registry import file_sha256, get_model

    if ref.sha256:
        now = file_sha256(ref.name)
        if now != ref.sha256:
            what = "is missing" if now is None else f"has changed (SHA-256 {now[:16]}… now)"
            raise ModelError(f"model file {ref.name} {what}; the run recorded SHA-256 {ref.sha256[:16]}…: use "
                             "the same file, or pass the new one with --model")
    return get_model(ref.name, trust_code=trust_code, **dict(ref.options))


@dataclass(frozen=True, slots=True)
class TransformRef:
    """A transformation by name with the parameter settings the campaign walks (copied from its grid, so the
    journal says exactly what was applied), and its options (a translator's ``device``; recorded only when
    given, so journals without options read as before)."""

    name: str
    grid: tuple[Mapping[str, Any], ...]
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "grid": [dict(p) for p in self.grid]}
        if self.options:
            d["options"] = dict(self.options)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TransformRef:
        return cls(str(d["name"]), tuple(dict(p) for p in d["grid"]), dict(d.get("options") or {}))


def safe_name(name: str, limit: int = 24) -> str:
    """A transformation's or model's name as it may appear in a folder name: a path by its stem (a
    ``translator.pt`` by its folder), other characters than letters, digits, ``-`` and ``_`` replaced."""
    p = Path(name)
    if "/" in name or name.endswith((".pt", ".h5", ".hdf5", ".keras")):
        name = p.parent.name if p.stem == "translator" and p.parent.name else p.stem
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:limit]


@dataclass(frozen=True, slots=True)
class CameraCampaignConfig:
    """Everything that determines a camera campaign's records (workers, progress and thresholds do not: the
    relations' thresholds are applied to the journal's raw predictions afterwards)."""

    images: str
    models: tuple[ModelRef, ...]
    transforms: tuple[TransformRef, ...]
    frames: tuple[int, ...]
    seed: int = 0
    trials: int = 1
    topic: str | None = None
    timeout: float | None = None
    batch_size: int = 64
    # a pairs campaign (lidarmt.camera.pairs): the sources of follow-ups made elsewhere, one per transformation,
    # and per follow-up source the source frames that have a follow-up in it (sorted)
    follow_ups: tuple[str, ...] = ()
    paired: tuple[tuple[int, ...], ...] = ()
    # the transformations' implementation (lidarmt.camera.transforms.batched): "reference" (every journal made
    # before it was recorded, and the default of configurations built in code) or "batched-v1" (new camera
    # campaigns: implementation_for); recorded in the journal only when not the reference
    transform_impl: str = "reference"

    kind: ClassVar[str] = "camera"
    owned: ClassVar[tuple[str, ...]] = OWNED
    journal_sync_interval: ClassVar[float] = 0.5  # ~100 pairs/s: fsync twice a second, not per record

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise CameraArgumentError(f"--trials {self.trials}: use at least 1")
        if self.seed < 0:
            raise CameraArgumentError(f"--seed {self.seed}: give a non-negative integer")
        if not self.models:
            raise CameraArgumentError("--model: give at least one steering model")
        if not self.transforms:
            raise CameraArgumentError("--transforms: give at least one transformation")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise CameraArgumentError(f"--timeout {self.timeout}: give a positive number of seconds")
        if self.batch_size < 1:
            raise CameraArgumentError(f"--batch-size {self.batch_size}: use at least 1")
        from lidarmt.camera.transforms.batched import check_implementation

        check_implementation(self.transform_impl, error=CameraArgumentError)
        if self.follow_ups and (self.trials != 1 or len(self.transforms) != len(self.follow_ups)
                                or len(self.paired) != len(self.follow_ups)):
            raise CameraArgumentError("--pairs: a pairs campaign has one transformation per follow-up source, "
                                      "one setting and one trial")

    @property
    def items(self) -> tuple[int, ...]:
        return self.frames

    @property
    def per_frame(self) -> int:
        return len(self.models) * sum(len(t.grid) for t in self.transforms) * self.trials

    @property
    def total(self) -> int:
        if self.follow_ups:
            return len(self.models) * sum(sum(1 for f in self.frames if self._has_pair(t, f))
                                          for t in range(len(self.paired)))
        return len(self.frames) * self.per_frame

    def _has_pair(self, t: int, frame: int) -> bool:
        import bisect

        got = self.paired[t]
        i = bisect.bisect_left(got, frame)
        return i < len(got) and got[i] == frame

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, m, t, p, r) for m in range(len(self.models)) for t, tr in enumerate(self.transforms)
                if not self.follow_ups or self._has_pair(t, frame)
                for p in range(len(tr.grid)) for r in range(self.trials)]

    def key_fields(self, key: Key) -> dict[str, Any]:
        f, m, t, p, r = key
        return {"key": list(key), "frame": f, "model": self.models[m].name, "transform": self.transforms[t].name,
                "param": p, "trial": r}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        f, m, t, p, r = key
        name = self.models[m].name
        stem = Path(name).stem + ("_pt" if name.lower().endswith((".pt", ".pth")) else "")
        model = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:24]
        return f"{model}-{safe_name(self.transforms[t].name, 40)}-p{p}-f{f:06d}-t{r}"

    def new_tally(self) -> CameraTally:
        from lidarmt.camera.transforms.registry import get_transform

        info = []
        for tr in self.transforms if not self.follow_ups else ():
            t = get_transform(tr.name)
            info.append((tr.name, t.family, t.relation))
        if self.follow_ups:
            from lidarmt.camera.pairs import FAMILY

            info = [(tr.name, FAMILY, "keep") for tr in self.transforms]
        from lidarmt.camera.bundle import display_name

        names = [display_name(m.name) for m in self.models]
        names = [n if names.count(n) == 1 else m.name for n, m in zip(names, self.models, strict=True)]
        return CameraTally(names, info)

    def evaluator(self, *, enforce_timeout: bool = True) -> CameraEvaluator:
        return CameraEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        """Bytes one worker holds: the models (a few MB of weights each), torch, a frame's transformed images,
        and the translators (weights and activations of a frame: a few hundred MB each at most)."""
        from lidarmt.camera.transforms.registry import is_translator

        translators = sum(1 for t in self.transforms if is_translator(t.name))
        return (400 + 100 * len(self.models) + 200 * translators) * 2**20

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind, "images": self.images, "topic": self.topic,
             "models": [m.to_dict() for m in self.models], "transforms": [t.to_dict() for t in self.transforms],
             "frames": list(self.frames), "seed": self.seed, "trials": self.trials, "timeout": self.timeout,
             "batch_size": self.batch_size}
        if self.follow_ups:
            d["follow_ups"] = list(self.follow_ups)
            d["paired"] = [list(p) for p in self.paired]
        if self.transform_impl != "reference":
            d["transform_impl"] = self.transform_impl
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CameraCampaignConfig:
        return cls(str(d["images"]), tuple(ModelRef.from_dict(m) for m in d["models"]),
                   tuple(TransformRef.from_dict(t) for t in d["transforms"]), tuple(int(f) for f in d["frames"]),
                   int(d["seed"]), int(d["trials"]), d.get("topic"), d.get("timeout"), int(d.get("batch_size", 64)),
                   tuple(str(f) for f in d.get("follow_ups") or ()),
                   tuple(tuple(sorted(int(i) for i in p)) for p in d.get("paired") or ()),
                   str(d.get("transform_impl", "reference")))

    def param_labels(self) -> list[list[str]]:
        from lidarmt.camera.transforms.registry import get_transform

        if self.follow_ups:
            return [["made outside lidarmt"] for _ in self.transforms]

        return [[get_transform(t.name).label(p) for p in t.grid] for t in self.transforms]


class ModelInputModified(LidarmtError):
    """A steering model wrote into the images it was given: a finding about the model (a ``crash`` pair)."""


def _bad_angle(model: str, v: float) -> str:
    if not math.isfinite(v):
        return f"model {model} returned a non-finite angle ({v})"
    return f"model {model} returned an angle out of range ({v:g} rad; at most {MAX_ANGLE_RAD:g})"


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same bytes (as 8-byte words when they can be viewed so: a few times faster than
    ``np.array_equal`` on images)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.nbytes % 8 == 0 and a.flags.c_contiguous and b.flags.c_contiguous and a.nbytes:
        return bool(np.array_equal(a.reshape(-1).view(np.uint64), b.reshape(-1).view(np.uint64)))
    return bool(np.array_equal(a, b))


def _finite(values: np.ndarray, n: int, model: str) -> np.ndarray:
    from lidarmt.camera.errors import ModelError

    out = np.asarray(values, dtype=np.float64).reshape(-1)
    if out.shape != (n,):
        raise ModelError(f"model {model} returned {out.shape[0]} angles for {n} images")
    return out


def _lane_safe(model: Any) -> bool:
    """Whether ``model`` may be called from two threads at once: the project's plain torch models on the CPU
    (:class:`~lidarmt.camera.models.torchmodel.TorchSteeringModel` itself with the project's own preprocessing
    and layers: the zoo and Keras files, stateless in inference). Not models with a cache (Chauffeur's), ONNX
    sessions, plug-ins (even ones built on TorchSteeringModel), nor a GPU."""
    from lidarmt.camera.models.torchmodel import TorchSteeringModel

    if type(model) is not TorchSteeringModel or getattr(model.device, "type", None) != "cpu":
        return False
    ours = "lidarmt.camera.models."
    steps = [model._pre] + ([model._post] if model._post is not None else [])
    return (all(str(getattr(f, "__module__", "")).startswith(ours) for f in steps)
            and all(type(mod).__module__.startswith((ours, "torch.nn.")) for mod in model.module.modules()))


def _timed(fn: Any, x: np.ndarray) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(x)
    return out, time.perf_counter() - t0


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


class CameraEvaluator(EvaluatorBase):
    """Builds a campaign's image source, models and transformations, and judges the keys of a frame."""

    what = "the steering model"

    def __init__(self, config: CameraCampaignConfig, *, enforce_timeout: bool = True,
                 trust_code: bool = True) -> None:
        from lidarmt.camera.sources.factory import open_images
        from lidarmt.camera.transforms.registry import build

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.source = open_images(config.images, topic=config.topic)
        self.models = [build_model(m, trust_code=trust_code) for m in config.models]
        if config.follow_ups:  # a pairs campaign: the follow-ups were made elsewhere
            from lidarmt.camera.pairs import FollowUps

            self.transforms = [FollowUps(f, self.source) for f in config.follow_ups]
        else:
            self.transforms = [build(t.name, dict(t.options), trust_code=trust_code) for t in config.transforms]
        for t in self.transforms:  # translators: built now, once per process, so a bad one is a one-line error
            if t.family == "translator":
                getattr(t, "translator", None)
        self.history = max(int(m.input_spec.history) for m in self.models)
        self._decoded: dict[int, Any] = {}  # the last few decoded frames (windows of consecutive seeds overlap)
        self._prefetch: Any = None  # lidarmt.camera.prefetch: the next frame's images made while models judge
        self._lanes: Any = None  # the second lane of model batches (:meth:`_second_lane`); False: none

    def _images(self, index: int, wanted: list[tuple[int, int, int]]) -> Any:
        """The transformed images ``wanted`` of frame ``index`` (:mod:`lidarmt.camera.prefetch`: made in a
        thread pool, the next frame's while the models judge this one's; the same bytes either way)."""
        import lidarmt.camera.prefetch as prefetch

        if self._prefetch is None:
            threads = prefetch.default_threads()
            cfg = self.config
            safe = lambda t: not cfg.follow_ups and prefetch.pool_safe(self.transforms[t])  # noqa: E731
            if threads == 0:  # in this thread, a built-in transformation's settings in one batched call
                window, cur = self.window(index)
                got: dict = {}
                for t, settings in prefetch.groups(wanted, safe):
                    got.update(prefetch.make_group(self.transformed_many if safe(t) else None, self.transformed,
                                                   window, index, t, settings))
                return prefetch.collect(window, cur, wanted, got)
            self._prefetch = prefetch.Prefetcher(
                window=self.window, make=self.transformed, order=cfg.frames, keys_of=cfg.keys_of, threads=threads,
                safe=safe, make_many=self.transformed_many)
        return self._prefetch.images(index, wanted)

    def _frame(self, index: int) -> Any:
        got = self._decoded.get(index)
        if got is None:
            got = self._decoded[index] = self.source[index]
            while len(self._decoded) > self.history + 2:
                del self._decoded[next(iter(self._decoded))]
        return got

    # ------------------------------------------------------------------------------------------ inputs

    def window(self, frame: int) -> tuple[np.ndarray, Any]:
        """The frames ``frame - history .. frame`` as (T, H, W, 3) uint8 (padded with the first frame), and the
        current CameraFrame."""
        cur = self._frame(frame)
        if self.history == 0:
            return cur.image[None], cur
        imgs = [self._frame(max(0, i)).image for i in range(frame - self.history, frame + 1)]
        return np.stack(imgs), cur

    def transformed(self, window: np.ndarray, frame: int, t: int, p: int, trial: int) -> np.ndarray:
        """The window with transformation t, parameter setting p applied to every frame (same seed), by the
        campaign's implementation (:mod:`lidarmt.camera.transforms.batched`)."""
        from lidarmt.camera.transforms.batched import apply_window

        tr = self.transforms[t]
        if self.config.follow_ups:  # the follow-ups of the window's frames (padded as the window)
            return tr.window([max(0, i) for i in range(frame - self.history, frame + 1)])
        params = self.config.transforms[t].grid[p]
        seed = transform_seed(self.config.seed, frame, tr.name, p, trial)
        return apply_window(tr, window, params, seed, self.config.transform_impl)

    def transformed_many(self, window: np.ndarray, frame: int, t: int,
                         settings: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """:meth:`transformed` for several (parameter, trial) settings of transformation t at once (one batched
        call: :func:`lidarmt.camera.transforms.batched.apply_settings`), the same bytes as one by one."""
        from lidarmt.camera.transforms.batched import apply_settings

        if self.config.follow_ups:
            return [self.transformed(window, frame, t, p, r) for p, r in settings]
        tr = self.transforms[t]
        grid = self.config.transforms[t].grid
        return apply_settings(tr, window, [(grid[p], transform_seed(self.config.seed, frame, tr.name, p, r))
                                           for p, r in settings], self.config.transform_impl)

    @staticmethod
    def model_input(window: np.ndarray, history: int) -> np.ndarray:
        """What a model with ``history`` previous frames is given from a (T, H, W, 3) window."""
        return window[-1] if history == 0 else window[len(window) - history - 1:]

    # ------------------------------------------------------------------------------------------ judging

    def predict(self, m: int, batch: np.ndarray, keys: Any, stage: str,
                sources: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """One model call on a private, read-only ``batch``, verified after the call (a model can switch
        ``writeable`` back on): a model that writes into its images can change neither what the other models
        and later pairs see nor its own verdicts unnoticed; it is a finding (:class:`ModelInputModified`).
        ``sources``: the arrays ``batch`` was just stacked from (then ``batch`` is already private: no copy is
        made, and it is checked against them); without them the call gets a copy of ``batch``."""
        model = self.models[m]
        if sources is None:
            given = np.array(batch, copy=True)
            sources = [batch]
            whole = True
        else:
            given = batch
            whole = False
        given.flags.writeable = False
        out = self.call(model.predict, given, keys=keys, stage=stage, work=len(batch))
        return self._checked(m, given, out, sources, whole)

    def _checked(self, m: int, given: np.ndarray, out: Any, sources: Sequence[np.ndarray], whole: bool) -> np.ndarray:
        """What :meth:`predict` returns for ``out``, the model's answer on ``given``, after checking that the model
        left its images as they were (:class:`ModelInputModified`) and answered one finite number per image."""
        model = self.models[m]
        if not (_same_bytes(given, sources[0]) if whole else
                len(sources) == len(given) and all(_same_bytes(g, s) for g, s in zip(given, sources, strict=True))):
            raise ModelInputModified(f"model {model.name} wrote into its input images during predict; a steering "
                                     "model must not modify the images it is given")
        return _finite(out, len(given), model.name)

    # ------------------------------------------------------------------------------------------ two lanes

    def _second_lane(self) -> tuple[Any, int] | None:
        """(a one-thread executor, torch threads per lane) when a frame's follow-up batches are judged two at a
        time, else None.

        In the campaign's own process, with the prefetch pool making the next frame's images
        (:mod:`lidarmt.camera.prefetch`), a model that ran on all the cores would share them with the pool's
        threads: torch's OpenMP threads then wait for one another at every layer while a pool thread holds the
        core (on 2 cores with other work on the machine, a dave-orig campaign ran 2-3x slower for it). So the
        model's batches run two at a time instead, each
        on half of torch's threads (at least one; one each on 2 cores): the second batch of a pair in a helper
        thread, the first in the campaign's thread, and the pool fills what is left. The batches are
        the same, each is judged by one call with the same number of threads, records are emitted by the
        campaign's thread in the order of the keys, and the time limit covers the wait for the helper's batch
        (:meth:`EvaluatorBase.call`). Only in the campaign's process (worker processes get their share of the
        cores from the engine) and only for models known to be safe to call from two threads at once: the
        project's plain torch models on the CPU (:func:`_lane_safe`). ``LIDARMT_MODEL_LANES=0`` turns it off
        (then the model runs on all of torch's threads, one batch after the other, as before: a model's last
        digits depend on its number of threads, so that reproduces a journal made that way bit for bit)."""
        if self._lanes is None:
            import lidarmt.camera.prefetch as prefetch
            from lidarmt._limits import cpu_cores

            pool, cores = prefetch.default_threads(), cpu_cores()
            self._lanes = False
            wanted = os.environ.get(LANES_ENV, "").strip() != "0"
            if wanted and self._enforce and pool > 0 and cores >= 2 and any(_lane_safe(m) for m in self.models):
                from concurrent.futures import ThreadPoolExecutor

                import torch

                self._lanes = (ThreadPoolExecutor(1, thread_name_prefix="lidarmt-model"),
                               max(1, torch.get_num_threads() // 2))
        return self._lanes or None


    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        cfg = self.config
        # Batches are cut from the frame's whole key list, so that a frame judged in part before (a resumed
        # campaign, a worker lost midway) gets the same batches as an uninterrupted run: a model's batched sums
        # may depend on what else is in the batch (in the last digits). Only the asked keys are recorded.
        asked = {tuple(k) for k in keys}
        full = [tuple(k) for k in cfg.keys_of(index)]
        if asked != set(full):
            keys = [k for k in full if k in asked]  # in the order of the whole list
            model_asked = {k[1] for k in keys}
            keys_for_images = [k for k in full if k[1] in model_asked]
        else:
            keys_for_images = keys
        # every (transformation, parameter, trial) image once, shared by the models; a transformation's own
        # failure is recorded, not the model's
        wanted = sorted({(k[2], k[3], k[4]) for k in keys_for_images})
        got = self._images(index, wanted)
        for m, model in enumerate(self.models):
            mkeys = [k for k in keys if k[1] == m]
            if not mkeys:
                continue
            lane = self._second_lane() if _lane_safe(model) else None
            with _torch_threads(lane[1]) if lane is not None else contextlib.nullcontext():
                self._judge(m, mkeys, [k for k in keys_for_images if k[1] == m], asked, got, len(wanted), emit,
                            lane)

    def _start(self, pool: Any, m: int, chunk: list[Key], made: Mapping[Any, np.ndarray],
               h: int) -> tuple[list[np.ndarray], np.ndarray, Any] | None:
        """Start judging ``chunk`` in the second lane: (its inputs, its read-only batch, the future of
        (predictions, seconds)); None when its batch cannot be stacked (the campaign's thread then meets the
        same error at the same point as without lanes)."""
        inputs = [self.model_input(made[(k[2], k[3], k[4])], h) for k in chunk]
        try:
            batch = np.stack(inputs)
        except Exception:
            return None
        batch.flags.writeable = False
        return inputs, batch, pool.submit(_timed, self.models[m].predict, batch)

    def _finish(self, m: int, batch: np.ndarray, chunk: list[Key], inputs: list[np.ndarray],
                started: Any) -> tuple[np.ndarray, float] | None:
        """The checked predictions of a batch judged in the second lane and its seconds per image. Waiting for
        it is the SUT call (announced, under the time limit); a wait that runs past the limit turns the second
        lane off for the rest of the campaign (the helper may still be inside the model) and is the batch's
        timeout. None when the batch failed in the second lane (the model raised, wrote into its images,
        answered the wrong number of angles): the caller judges it again in the campaign's thread, on a fresh
        batch, so that its finding is recorded exactly as without lanes (the same text and traceback)."""
        try:
            out, secs = self.call(started.result, keys=chunk, stage="follow", work=len(batch))
            return self._checked(m, batch, out, inputs, False), secs / len(chunk)
        except SutTimeout:
            self._lanes = False
            raise
        except Exception:
            return None

    def _judge(self, m: int, mkeys: list[Key], image_keys: list[Key], asked: set, got: Any, n_wanted: int,
               emit: Emit, lane: tuple[Any, int] | None) -> None:
        """Judge model ``m``'s keys ``mkeys`` of a frame (``image_keys``: its keys whose images were made, in
        the order of the frame's whole key list, so that batches are cut as in an uninterrupted run) on the
        frame's images ``got``; ``lane``: the second lane (:meth:`_second_lane`) or None."""
        cfg = self.config
        model = self.models[m]
        window, cur, made, broken, t_transform = got.window, got.current, got.made, got.broken, got.seconds
        label = None if cfg.follow_ups else cur.label  # pairs: the label-free relations only
        h = int(model.input_spec.history)
        try:
            pred = float(self.predict(m, self.model_input(window, h)[None], mkeys, "source")[0])
        except Exception as err:
            fail = failure(err)
            status = fail.pop("status")
            for k in mkeys:
                emit("pair", pair_record(cfg, k, status, "source", **fail))
            return
        if not math.isfinite(pred) or abs(pred) > MAX_ANGLE_RAD:
            for k in mkeys:
                emit("pair", pair_record(cfg, k, "crash", "source", error=_bad_angle(model.name, pred)))
            return
        todo = []
        for k in image_keys:
            tpr = (k[2], k[3], k[4])
            if tpr in broken:
                if k in asked:
                    emit("pair", pair_record(cfg, k, stage="follow", **broken[tpr]))
            else:
                todo.append(k)
        chunks = [c for c in (todo[i:i + cfg.batch_size] for i in range(0, len(todo), cfg.batch_size))
                  if any(k in asked for k in c)]  # a batch judged before is not run again
        ahead: tuple[list[np.ndarray], np.ndarray, Any] | None = None  # the next batch, in the second lane
        for j, chunk in enumerate(chunks):
            if ahead is not None:
                (inputs, batch, started), ahead = ahead, None
            else:
                inputs = [self.model_input(made[(k[2], k[3], k[4])], h) for k in chunk]
                batch = np.stack(inputs)
                started = None
                if lane is not None and j + 1 < len(chunks) and self._lanes:
                    ahead = self._start(lane[0], m, chunks[j + 1], made, h)
            try:
                done = None if started is None else self._finish(m, batch, chunk, inputs, started)
                if done is None:  # in this thread (again, on a fresh batch, when the second lane failed)
                    if started is not None:
                        batch = np.stack(inputs)
                    t1 = time.perf_counter()
                    preds = self.predict(m, batch, chunk, "follow", sources=inputs)
                    done = preds, (time.perf_counter() - t1) / len(chunk)
                preds, per = done
            except Exception as err:
                fail = failure(err)
                status = fail.pop("status")
                for k in chunk:
                    if k in asked:
                        emit("pair", pair_record(cfg, k, status, "follow", **fail))
                continue
            for k, v in zip(chunk, preds, strict=True):
                if k not in asked:
                    continue
                if not math.isfinite(v) or abs(v) > MAX_ANGLE_RAD:
                    emit("pair", pair_record(cfg, k, "crash", "follow", error=_bad_angle(model.name, v)))
                    continue
                emit("pair", pair_record(cfg, k, "ok", "follow", frame_id=cur.frame_id, label=label, pred=pred,
                                         pred_t=float(v), model_s=round(per, 7),
                                         transform_s=round(t_transform / max(1, n_wanted), 7)))

    def judge_key(self, key: Key) -> dict[str, Any]:
        """Recompute one pair from scratch (for bundles and replay)."""
        f, m, t, p, r = key
        window, cur = self.window(f)
        tw = self.transformed(window, f, t, p, r)
        h = int(self.models[m].input_spec.history)
        pred = float(self.predict(m, self.model_input(window, h)[None], None, "bundle")[0])
        pred_t = float(self.predict(m, self.model_input(tw, h)[None], None, "bundle")[0])
        return {"frame": cur, "window": window, "transformed": tw, "pred": pred, "pred_t": pred_t}

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]:
        from lidarmt.camera.bundle import make_camera_bundle

        return make_camera_bundle(self, tuple(key), Path(out_dir), **opts)


def criteria_of(d: Mapping[str, Any] | None) -> Criteria:
    d = d or {}
    return Criteria(float(d.get("lambda", 5.0)), float(d.get("epsilon", 0.03)), float(d.get("tolerance_deg", 10.0)),
                    float(d.get("min_change_deg", 2.0)))


def transform_refs(names: Sequence[Any], *, device: str | None = None) -> tuple[TransformRef, ...]:
    """TransformRefs from Transform objects (their full campaign grids); ``device`` (a resolved torch device)
    goes to the translators, which run where the steering models do."""
    return tuple(TransformRef(t.name, tuple(dict(p) for p in t.grid),
                              {"device": device} if device is not None and t.family == "translator" else {})
                 for t in names)


def implementation_for(out: Path | None, *, resume: bool) -> str:
    """The transformations' implementation a camera campaign in ``out`` uses: the one its journal recorded when
    it is resumed (a journal without one used the reference), else the current one
    (:data:`lidarmt.camera.transforms.batched.CURRENT`)."""
    from lidarmt.camera.transforms.batched import CURRENT

    if resume and out is not None and (Path(out) / JOURNAL_NAME).is_file():
        from lidarmt.engine.journal import read_header

        try:
            stored = read_header(Path(out) / JOURNAL_NAME).get("config")
        except LidarmtError:
            return CURRENT  # the engine's own --resume checks say what is wrong with the journal
        if isinstance(stored, dict) and stored.get("kind") == CameraCampaignConfig.kind:
            return str(stored.get("transform_impl", "reference"))
    return CURRENT
