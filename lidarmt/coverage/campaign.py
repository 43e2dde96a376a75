"""``lidarmt camera coverage`` as a campaign of the shared engine (:mod:`lidarmt.engine.campaign`): journal, resume,
run-folder lock.

An item is a seed frame; its keys are ``(frame, -1, -1)`` (the seed image itself) and ``(frame, t, p)`` for every
transformation ``t`` and parameter setting ``p`` (indices into the campaign's lists). The evaluator forwards the
seed and all its transformed images in one batch, exactly as :func:`lidarmt.coverage.study.collect` does (the
same images as ``lidarmt camera fuzz`` with the same seed), and journals per image what the studies need in
compact form: the steering angle and, per criterion, what the image covers (:func:`~lidarmt.coverage.study.
image_hits`): a base64 of the packed bitset for NC, NBC, SNAC and TKNC, and for KMNC a base64 of the
zlib-compressed section per neuron (little-endian int16, −1 = none). The tally keeps the records;
:meth:`CoverageTally.study_data` rebuilds the :class:`~lidarmt.coverage.study.StudyData` from them, so
:func:`~lidarmt.coverage.study.analyse` gives the same numbers as the in-memory study.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lidarmt.camera.campaign import ModelRef, TransformRef
from lidarmt.camera.errors import CameraArgumentError
from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, pair_record
from lidarmt.engine.journal import JOURNAL_NAME
from lidarmt.engine.tally import KeyedTally

OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "jaccard.png",
         "params.png", "cumulative.png")
SEED = -1  # the transformation index of a seed image's key


@dataclass(frozen=True, slots=True)
class CoverageCampaignConfig:
    """Everything that determines a coverage campaign's records: the source, the model, the transformations and
    their grids, the seed frames and seed, the neuron profile's path and the criteria's parameters."""

    images: str
    model: ModelRef
    transforms: tuple[TransformRef, ...]
    frames: tuple[int, ...]
    seed: int = 0
    topic: str | None = None
    profile: str | None = None  # a .profile.npz path, or None for no profile (NC and TKNC only)
    nc_threshold: float = 0.2
    kmnc_k: int = 1000
    tknc_k: int = 2
    timeout: float | None = None

    kind: ClassVar[str] = "camera-coverage"
    owned: ClassVar[tuple[str, ...]] = OWNED
    journal_sync_interval: ClassVar[float] = 0.5

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise CameraArgumentError(f"--seed {self.seed}: give a non-negative integer")
        if not self.frames:
            raise CameraArgumentError("--frames: give at least one seed frame")

    @property
    def items(self) -> tuple[int, ...]:
        return self.frames

    @property
    def per_frame(self) -> int:
        return 1 + sum(len(t.grid) for t in self.transforms)

    @property
    def total(self) -> int:
        return len(self.frames) * self.per_frame

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, SEED, SEED)] + [(frame, t, p) for t, tr in enumerate(self.transforms)
                                        for p in range(len(tr.grid))]

    def key_fields(self, key: Key) -> dict[str, Any]:
        f, t, p = key
        return {"key": list(key), "frame": f, "transform": None if t == SEED else self.transforms[t].name,
                "param": None if t == SEED else p}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        f, t, p = key
        return f"seed-f{f:06d}" if t == SEED else f"{self.transforms[t].name}-p{p}-f{f:06d}"

    def new_tally(self) -> CoverageTally:
        return CoverageTally(self)

    def evaluator(self, *, enforce_timeout: bool = True) -> CoverageEvaluator:
        return CoverageEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        return 600 * 2**20

    def coverage_config(self) -> Any:
        from lidarmt.coverage import CoverageConfig

        return CoverageConfig(nc_threshold=self.nc_threshold, kmnc_k=self.kmnc_k, tknc_k=self.tknc_k)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "images": self.images, "topic": self.topic, "model": self.model.to_dict(),
                "transforms": [t.to_dict() for t in self.transforms], "frames": list(self.frames),
                "seed": self.seed, "profile": self.profile, "nc_threshold": self.nc_threshold,
                "kmnc_k": self.kmnc_k, "tknc_k": self.tknc_k, "timeout": self.timeout}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CoverageCampaignConfig:
        return cls(str(d["images"]), ModelRef.from_dict(d["model"]),
                   tuple(TransformRef.from_dict(t) for t in d["transforms"]), tuple(int(f) for f in d["frames"]),
                   int(d["seed"]), d.get("topic"), d.get("profile"), float(d["nc_threshold"]), int(d["kmnc_k"]),
                   int(d["tknc_k"]), d.get("timeout"))


def _section_dtype(kmnc_k: int) -> str:
    return "<i2" if kmnc_k < 2**15 else "<i4"


def encode_hits(hits: Mapping[str, np.ndarray], row: int, kmnc_k: int) -> dict[str, str]:
    """One image's hits (row ``row`` of :func:`~lidarmt.coverage.study.image_hits`) as base64 strings: packed
    bitsets; for KMNC the zlib-compressed section per neuron (int16 when ``kmnc_k`` allows, −1 = none)."""
    out = {}
    for c, h in hits.items():
        if c == "kmnc":
            n = h.shape[1]
            sec = np.where(h[row] >= 0, h[row] - np.arange(n, dtype=np.int64) * kmnc_k, -1)
            raw = zlib.compress(sec.astype(_section_dtype(kmnc_k)).tobytes(), 6)
            out[c] = base64.b64encode(raw).decode("ascii")
        else:
            out[c] = base64.b64encode(np.packbits(h[row]).tobytes()).decode("ascii")
    return out


def decode_hits(enc: Mapping[str, str], neurons: int, kmnc_k: int) -> dict[str, np.ndarray]:
    """The inverse of :func:`encode_hits` for an image of a network with ``neurons`` neurons: (1, ...) arrays."""
    out = {}
    for c, s in enc.items():
        raw = base64.b64decode(s)
        if c == "kmnc":
            sec = np.frombuffer(zlib.decompress(raw), dtype=_section_dtype(kmnc_k)).astype(np.int64)
            if sec.size != neurons:
                raise CameraArgumentError(f"a journal record holds KMNC sections of {sec.size} neurons, the model "
                                          f"has {neurons}; run again with --force")
            out[c] = np.where(sec >= 0, np.arange(neurons, dtype=np.int64) * kmnc_k + sec, -1)[None]
        else:
            units = 2 * neurons if c == "nbc" else neurons
            out[c] = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=units).astype(bool)[None]
    return out


class CoverageTally(KeyedTally):
    """The records of a coverage campaign by key (what the engine folds the journal into; each key once)."""

    def __init__(self, config: CoverageCampaignConfig) -> None:
        super().__init__()
        self.config = config
        self.records: dict[Key, dict[str, Any]] = {}

    def add(self, rec: Any) -> None:
        if rec.get("type") == "pair":
            super().add(rec)

    def _add(self, key: tuple[int, ...], rec: Any) -> None:
        self.records[key] = dict(rec)

    def study_data(self, tracker: Any) -> Any:
        """The :class:`~lidarmt.coverage.study.StudyData` of a finished campaign (hits instead of neuron values);
        ``tracker``: the model's tracker, which has seen an input (its probe knows the layers)."""
        from lidarmt.coverage.study import StudyData

        cfg = self.config
        missing = [k for f in cfg.frames for k in cfg.keys_of(f) if k not in self.records]
        if missing:
            raise CameraArgumentError(f"the coverage campaign is incomplete ({len(missing)} images missing); "
                                      "continue it with --resume")
        neurons = int(tracker.probe.offsets[-1])

        def stack(keys: list[Key]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
            hits = [decode_hits(self.records[k]["hits"], neurons, cfg.kmnc_k) for k in keys]
            return (np.asarray([float(self.records[k]["angle"]) for k in keys]),
                    {c: np.concatenate([h[c] for h in hits]) for c in hits[0]})

        seed_angles, seed_hits = stack([(f, SEED, SEED) for f in cfg.frames])
        angles, hits = [], []
        for t, tr in enumerate(cfg.transforms):
            row_a, row_h = [], []
            for p in range(len(tr.grid)):
                a, h = stack([(f, t, p) for f in cfg.frames])
                row_a.append(a)
                row_h.append(h)
            angles.append(row_a)
            hits.append(row_h)
        labels = [self.records[(f, SEED, SEED)].get("label") for f in cfg.frames]
        from lidarmt.camera.transforms.registry import get_transform

        return StudyData(
            model=self.records[(cfg.frames[0], SEED, SEED)]["model"], frames=list(cfg.frames),
            labels=np.asarray([math.nan if v is None else float(v) for v in labels]),
            transforms=[t.name for t in cfg.transforms],
            param_labels=[[get_transform(t.name).label(p) for p in t.grid] for t in cfg.transforms],
            seed_angles=seed_angles, seed_acts=np.zeros((len(cfg.frames), 0), np.float32), angles=angles,
            acts=None, campaign_seed=int(cfg.seed), seed_hits=seed_hits, hits=hits)


class CoverageEvaluator(EvaluatorBase):
    """Forwards a seed frame and all its transformed images once (hooks on) and journals each image's hits."""

    what = "the steering model"

    def __init__(self, config: CoverageCampaignConfig, *, enforce_timeout: bool = True) -> None:
        from lidarmt.coverage.camera import load_profile_for, tracker_for
        from lidarmt.coverage.study import make_evaluator

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.camera = make_evaluator(config.images, config.model.name, _transforms(config.transforms),
                                     config.frames, seed=config.seed, topic=config.topic,
                                     model_options=dict(config.model.options))
        self.model = self.camera.models[0]
        prof = load_profile_for(config.model.name, config.profile) if config.profile is not None else None
        self.tracker = tracker_for(self.model, profile=prof, config=config.coverage_config())

    def batch(self, frame: int) -> tuple[np.ndarray, Any]:
        """The model inputs of ``frame``: the seed, then every (transformation, parameter) image, as collect()."""
        ev, h = self.camera, int(self.model.input_spec.history)
        window, cur = ev.window(frame)
        batch = [ev.model_input(window, h)]
        for t, tr in enumerate(self.config.transforms):
            for p in range(len(tr.grid)):
                batch.append(ev.model_input(ev.transformed(window, frame, t, p, 0), h))
        return np.stack(batch), cur

    def prime(self) -> Any:
        """Forward the first seed image once so the tracker's probe knows the layers; returns the tracker."""
        if self.tracker.probe.sizes is None:
            window, _ = self.camera.window(self.config.frames[0])
            self.tracker.measure(self.camera.model_input(window, int(self.model.input_spec.history))[None])
        return self.tracker

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        from lidarmt.coverage.study import image_hits

        # always the whole batch, as collect() forwards it, so a resumed frame gets the very same values
        batch, cur = self.batch(index)
        self.on_call(keys, "follow", len(batch))
        angles, acts = self.tracker.measure(batch)
        self.on_call(keys, "", len(batch))
        angles = np.asarray(angles, dtype=np.float64).reshape(-1)
        hits = image_hits(self.tracker, acts)
        row = {k: i for i, k in enumerate(self.config.keys_of(index))}
        label = None if cur.label is None else float(cur.label)
        for k in keys:
            i = row[tuple(k)]
            extra: dict[str, Any] = {"angle": float(angles[i]), "nc_active": int(hits["nc"][i].sum()),
                                     "hits": encode_hits(hits, i, self.config.kmnc_k)}
            if k[1] == SEED:
                extra.update(model=self.model.name, label=label, frame_id=cur.frame_id)
            emit("pair", pair_record(self.config, tuple(k), "ok", "follow", **extra))

    def make_bundle(self, key: Key, out_dir: Any, **opts: Any) -> dict[str, Any]:
        raise CameraArgumentError("coverage campaigns write no bundles")


def _transforms(refs: Sequence[TransformRef]) -> list[Any]:
    """Transform-like objects with the refs' names and grids (what make_evaluator reads)."""
    return [_Named(r.name, r.grid) for r in refs]


@dataclass(frozen=True)
class _Named:
    name: str
    grid: tuple[Mapping[str, Any], ...]
