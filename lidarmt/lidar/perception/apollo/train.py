"""Training Apollo's CNN-seg network on labelled frames (the simulator's dataset mode), since Apollo's weights
are not public.

One training step draws ``batch`` samples. A sample is: a frame picked at random, randomly augmented
(:mod:`lidarmt.lidar.perception.apollo.augment`), turned into Apollo's 8 feature channels on the full grid
(:func:`~lidarmt.lidar.perception.apollo.features.compute_features`) and into per-cell targets
(:func:`~lidarmt.lidar.perception.apollo.targets.build_targets`), then cropped to a ``crop`` x ``crop`` window (most
windows are placed on an object, the rest anywhere near the sensor). The crop keeps the network's compute small
while the position-dependent channels (direction, distance) stay those of the full grid.

Losses are computed on the raw 12-channel ``deconv0`` blob (logits, for numerically stable BCE), one per head
(see :func:`apollo_losses`). bf16 autocast runs the network where the CPU has native bf16 (AMX / AVX512-BF16);
losses are in fp32. AdamW with a linear warm-up and cosine decay.

**Data.** Each ``--data`` entry is a *source*: a folder of the simulator's labelled ``.npz`` frames (or one
such file), or a labelled recording: a KITTI raw drive with its ``tracklet_labels.xml``
(:mod:`lidarmt.io.tracklets`) or a SemanticKITTI sequence folder (:mod:`lidarmt.io.semantickitti`: every point
labelled, the instances are the objects; its "unlabeled"/"outlier" points carry no loss except the ego car's roof
ring, see :func:`~lidarmt.lidar.perception.apollo.targets.build_targets`). ``PATH@A:B`` keeps the source's frames ``A .. B-1`` (in its order: a drive's
sweeps in time, so ``drive@0:86`` trains on the first 86 sweeps and leaves the rest for validation). A step
picks each sample's source at random in proportion to ``data_weights`` (default: the sources' frame counts,
i.e. every frame equally likely), then a frame of it. Frames whose labels cover only part of the sweep
(``labels.region``) have the rest ignored by the losses (:mod:`~lidarmt.lidar.perception.apollo.targets`), and their
crops that are not placed on an object are centred on a labelled cell.

Everything random derives from ``seed``: the network's initialisation and, for each step, a generator seeded
with ``(seed, step)``, so a run resumed from a checkpoint draws the same samples as an uninterrupted one.
Threaded CPU kernels (oneDNN convolutions, reductions) are not bit-deterministic, so two runs with the same
seed agree only up to floating-point noise that grows over training.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.errors import ArgumentError, InputError, OutputError
from lidarmt.lidar.perception.apollo.augment import AugmentConfig, augment_frame
from lidarmt.lidar.perception.apollo.targets import NUM_CLASSES, Targets, build_targets
from lidarmt.types import Frame

#: Slices of the 12-channel deconv0 blob (apollo-lop-facts.md §3.3).
CATEGORY, INSTANCE, CONFIDENCE, CLASS, HEADING, HEIGHT = (
    slice(0, 1), slice(1, 3), slice(3, 4), slice(4, 9), slice(9, 11), slice(11, 12),
)  # fmt: skip


class TrainingError(InputError):
    """The training data cannot be used (no frames, frames without labels)."""


class TrainingOutputError(OutputError):
    """The run folder cannot be used (it holds a previous run and neither --resume nor --force was given)."""


@dataclass(frozen=True, slots=True)
class LossWeights:
    """Weight of each head's loss in the total, and the per-cell weighting of objects."""

    category: float = 1.0
    instance: float = 1.0
    confidence: float = 0.5
    classify: float = 1.0
    heading: float = 0.1
    height: float = 0.5
    #: objectness BCE: weight of an object cell relative to a background cell
    positive: float = 2.0
    #: per-class cell weights (unknown, small vehicle, big vehicle, non-motor, pedestrian): small objects
    #: have few cells, so they get more weight per cell
    class_cells: tuple[float, float, float, float, float] = (1.5, 1.0, 0.7, 1.5, 1.5)
    #: smooth-L1 transition of the regressions, metres
    beta: float = 0.3


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Everything that determines a training run (written into the checkpoint and the model card)."""

    data: tuple[str, ...]
    out: str
    seed: int = 0
    steps: int = 1500
    grid: int = 640
    range: float = 60.0
    in_channels: int = 8  # 8 (Apollo 2.x/3.0), 6 or 4 (Apollo 3.5+: config.FEATURE_CHANNELS)
    crop: int = 256
    batch: int = 4
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    object_crop_prob: float = 0.75  # fraction of crops placed on an object
    near_range: float = 40.0  # other crops are centred within +-near_range metres of the sensor
    augment: bool = True
    bf16: bool = True
    threads: int = 2
    checkpoint_minutes: float = 3.0
    max_minutes: float | None = None  # stop early (with a checkpoint) after this much wall time
    loss: LossWeights = field(default_factory=LossWeights)
    #: how often each --data source is sampled, relative (None: in proportion to its frame count)
    data_weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.crop % 32 or self.crop <= 0 or self.crop > self.grid:
            raise ArgumentError(f"crop must be a positive multiple of 32 and at most the grid ({self.grid}), got {self.crop}")
        from lidarmt.lidar.perception.apollo.config import FEATURE_CHANNELS

        if self.in_channels not in FEATURE_CHANNELS:
            raise ArgumentError(f"in_channels must be one of {', '.join(map(str, FEATURE_CHANNELS))}, got "
                                f"{self.in_channels}")
        if not self.range > 0:
            raise ArgumentError(f"range must be positive, got {self.range}")
        if self.batch < 1 or self.steps < 1:
            raise ArgumentError(f"batch and steps must be >= 1, got batch={self.batch}, steps={self.steps}")
        from lidarmt._limits import check_threads

        check_threads(self.threads, what="--threads", error=ArgumentError, zero_ok=True)  # 100000 segfaults torch
        if not self.lr > 0:
            raise ArgumentError(f"lr must be positive, got {self.lr}")
        if self.data_weights is not None:
            if len(self.data_weights) != len(self.data):
                raise ArgumentError(f"--data-weights: {len(self.data_weights)} weight(s) for {len(self.data)} "
                                    "--data source(s); give one per source")
            if min(self.data_weights) < 0 or not sum(self.data_weights) > 0:
                raise ArgumentError(f"--data-weights must be non-negative and not all 0, got {self.data_weights}")


# ------------------------------------------------------------------------------------------ data


def list_frames(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The .npz frames of the given folders (recursively) and files, sorted; an error if there are none.

    A file given directly must be a ``.npz`` frame: a recording (``.bag``, ``.record``, ...) is refused with a
    line saying what ``--data`` expects, before anything is written.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.rglob("*.npz")))
        elif p.is_file():
            if p.suffix.lower() != ".npz":
                raise TrainingError(f"--data {p}: not a labelled .npz frame; --data expects a folder of the "
                                    "simulator's training frames (`lidarmt simulate --dataset DIR --frames N`), "
                                    "not a recording")
            out.append(p)
        else:
            raise TrainingError(f"training data {p} does not exist; generate it with "
                                f"`lidarmt simulate --dataset {p} --frames 400 --seed 1`")
    if not out:
        raise TrainingError(f"no .npz frames under {', '.join(map(str, paths))}; generate them with "
                            "`lidarmt simulate --dataset DIR --frames N --seed S`")
    return out


_SLICE = re.compile(r"^(?P<path>.+)@(?P<a>\d*):(?P<b>\d*)$")


def split_spec(spec: str | os.PathLike[str]) -> tuple[Path, slice]:
    """``PATH`` or ``PATH@A:B`` (frames A .. B-1 of the source) -> (path, slice)."""
    text = str(spec)
    m = _SLICE.match(text)
    if m is None or Path(text).exists():
        return Path(text), slice(None)
    a, b = m["a"], m["b"]
    return Path(m["path"]), slice(int(a) if a else None, int(b) if b else None)


class Source:
    """One ``--data`` entry: the simulator's .npz frames, or a labelled recording (a KITTI raw drive with
    tracklets), restricted to a slice of its frames."""

    def __init__(self, spec: str | os.PathLike[str]) -> None:
        self.spec = str(spec)
        path, sl = split_spec(spec)
        self.path = path
        self._rec: Any = None
        #: semantic ids of points that are unlabelled rather than background (build_targets' ``unlabelled``)
        self.unlabelled: tuple[int, ...] = ()
        if (path.is_dir() and not _is_recording_dir(path)) or (path.is_file() and path.suffix.lower() == ".npz"):
            files = list_frames([path])
            self.kind = "npz"
            self.items: list[Any] = files[sl]
        elif path.exists():
            from lidarmt.io import open_recording

            try:
                self._rec = open_recording(path)
            except InputError as err:
                raise TrainingError(f"--data {self.spec}: {err}; --data expects the simulator's training frames "
                                    "(`lidarmt simulate --dataset DIR`) or a KITTI raw drive with its "
                                    "tracklet_labels.xml") from err
            self.kind = "recording"
            self.items = list(range(len(self._rec)))[sl]
            if getattr(self._rec, "format", None) == "semantickitti":
                # SemanticKITTI labels every point; its "unlabeled" and "outlier" points (the ego car's roof
                # ring, gaps) are not background: cells holding only those carry no loss
                from lidarmt.io.semantickitti import UNLABELLED_CLASSES

                self.unlabelled = UNLABELLED_CLASSES
        else:
            list_frames([path])  # the one wording for a missing folder
            raise AssertionError("unreachable")
        if not self.items:
            raise TrainingError(f"--data {self.spec}: no frames in that range")

    def __len__(self) -> int:
        return len(self.items)

    def load(self, k: int) -> Frame:
        """Frame ``k`` of the source (checked for per-point labels)."""
        if self.kind == "npz":
            return _load_frame(self.items[k])
        frame = self._rec[self.items[k]]
        if frame.labels is None or frame.labels.point_instance is None:
            raise TrainingError(f"--data {self.spec}: frame {self.items[k]} has no per-point labels (a KITTI raw "
                                "drive needs its tracklet_labels.xml, a SemanticKITTI sequence its labels/); train "
                                "on labelled frames")
        return frame

    def describe(self) -> str:
        return f"{self.spec} ({len(self)} {'frames' if self.kind == 'npz' else 'sweeps'})"


def _is_recording_dir(path: Path) -> bool:
    """A folder that is a recording rather than a folder of .npz frames: a KITTI raw drive or a SemanticKITTI
    sequence (``velodyne/`` beside ``labels/``)."""
    from lidarmt.io.kitti_raw import drive_folder
    from lidarmt.io.semantickitti import sequence_folder

    return drive_folder(path) is not None or sequence_folder(path) is not None


def open_sources(specs: Sequence[str | os.PathLike[str]]) -> list[Source]:
    """The training sources of ``--data`` (see the module docstring); a one-line error for unusable ones."""
    if not specs:
        raise TrainingError("no --data given")
    return [Source(s) for s in specs]


#: What a training run writes in its folder (``--force`` replaces these, and only these).
OWNED = ("last.pt", "log.jsonl")


def owned_files(out: Path) -> list[Path]:
    """The files of a training run in ``out``: ``last.pt``, ``log.jsonl`` and ``cnnseg<grid>.pt``."""
    if not out.is_dir():
        return []
    return sorted(q for q in out.iterdir() if q.name in OWNED or (q.name.startswith("cnnseg") and q.suffix == ".pt"))


def check_out(out: str | os.PathLike[str], *, resume: bool, force: bool) -> bool:
    """Check the run folder without touching it; True when ``<out>/last.pt`` is to be resumed.

    As ``lidarmt fuzz`` does: a folder that exists and is not empty is refused unless ``resume`` (continue from
    its ``last.pt``) or ``force`` (discard the previous run's files and start over).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TrainingOutputError(f"--out {out}: exists and is not a folder; --out names the run folder")
    if resume and force:
        raise ArgumentError("--resume and --force contradict each other: resume continues the run in --out, "
                            "force discards it")
    if resume:
        if (out / "last.pt").is_file():
            return True
        if owned_files(out):
            raise TrainingOutputError(f"--resume: {out} holds no checkpoint last.pt to continue from, but files of "
                                      "a training run; pass --force to start over, or choose a new --out")
        return False  # nothing to resume: a fresh run (--resume is safe to repeat after an interruption)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise TrainingOutputError(f"--out {out}: the folder exists; pass --resume to continue its training or "
                                  "--force to start over, or choose a new --out")
    return False


@dataclass(slots=True)
class Sample:
    """One cropped training sample: features (8, S, S) float32 and the matching targets."""

    features: np.ndarray
    targets: Targets


def make_sample(
    frame: Frame,
    rng: np.random.Generator,
    *,
    grid: int = 640,
    range_: float = 60.0,
    crop: int = 256,
    augment: AugmentConfig | None = None,
    object_crop_prob: float = 0.75,
    near_range: float = 40.0,
    in_channels: int = 8,
    unlabelled: tuple[int, ...] = (),
) -> Sample:
    """Augment (if ``augment``), featurise and crop one labelled frame (``in_channels``: the network's feature
    channels, ``config.FEATURE_CHANNELS``)."""
    from lidarmt.lidar.perception.apollo.features import compute_features

    if augment is not None:
        frame = augment_frame(frame, rng, augment)
    feats = compute_features(frame.points, grid=grid, range=range_)
    tg = build_targets(frame, grid=grid, range_=range_, unlabelled=unlabelled)
    # Apollo's mask is the feature generator's non-empty channel: use it so the two agree exactly.
    tg.nonempty = feats[7] > 0.5
    tg.objectness &= tg.nonempty
    scale = grid / (2.0 * range_)
    half = crop // 2
    obj_cells = np.flatnonzero(tg.objectness)
    labelled = None
    if frame.labels is not None and frame.labels.region is not None:
        # only part of the sweep is labelled: a crop not on an object goes to a labelled cell near the sensor
        cand = np.flatnonzero((tg.nonempty & ~tg.ignore).ravel())
        rows, cols = cand // grid, cand % grid
        near = (np.abs(range_ - (rows + 0.5) / scale) < near_range) & (np.abs(range_ - (cols + 0.5) / scale) < near_range)
        labelled = cand[near]
    if len(obj_cells) and rng.random() < object_crop_prob:
        # every object equally likely (a pedestrian as often as a bus), then one of its cells
        ids = tg.obj_id.ravel()[obj_cells]
        pick = rng.choice(np.unique(ids))
        cells = obj_cells[ids == pick]
        c = int(cells[rng.integers(len(cells))])
        r_c, c_c = c // grid, c % grid
        jitter = int(crop * 0.35)
        r_c += int(rng.integers(-jitter, jitter + 1))
        c_c += int(rng.integers(-jitter, jitter + 1))
    elif labelled is not None and len(labelled):
        c = int(labelled[rng.integers(len(labelled))])
        r_c, c_c = c // grid, c % grid
    else:
        x, y = rng.uniform(-near_range, near_range, 2)
        r_c, c_c = int((range_ - x) * scale), int((range_ - y) * scale)
    r0 = int(np.clip(r_c - half, 0, grid - crop))
    c0 = int(np.clip(c_c - half, 0, grid - crop))
    if in_channels == 8:
        f = np.ascontiguousarray(feats[:, r0 : r0 + crop, c0 : c0 + crop])
    else:
        from lidarmt.lidar.perception.apollo.config import FEATURE_CHANNELS

        f = np.ascontiguousarray(feats[list(FEATURE_CHANNELS[in_channels]), r0 : r0 + crop, c0 : c0 + crop])
    t = tg.crop(r0, c0, crop)
    t = Targets(*(np.ascontiguousarray(getattr(t, f.name)) for f in fields(Targets)))
    return Sample(f, t)


def collate(samples: Sequence[Sample]) -> dict[str, Any]:
    """Stack samples into torch tensors (features and every target)."""
    import torch

    def st(name: str, dtype: Any = None) -> Any:
        a = np.stack([getattr(s.targets, name) for s in samples])
        return torch.from_numpy(a if dtype is None else a.astype(dtype))

    return {
        "features": torch.from_numpy(np.stack([s.features for s in samples])),
        "nonempty": st("nonempty"),
        "objectness": st("objectness"),
        "ignore": st("ignore"),
        "instance": st("instance"),
        "height": st("height"),
        "heading": st("heading"),
        "cls": st("cls", np.int64),
    }


# ------------------------------------------------------------------------------------------ losses


def apollo_losses(raw: Any, batch: dict[str, Any], weights: LossWeights | None = None) -> dict[str, Any]:
    """Per-head losses on the raw (B, 12, H, W) deconv0 blob; returns a dict of scalar tensors incl. ``total``.

    * ``category``: BCE-with-logits on non-empty, non-ignored cells; object cells weigh ``positive`` x their
      class weight, background cells 1; normalised by the total weight (empty cells carry no signal, as
      Apollo multiplies the objectness by the non-empty mask).
    * ``confidence``: plain BCE on the same cells, target = objectness.
    * ``instance``, ``height``, ``heading``: smooth-L1 on object cells (class-weighted mean).
    * ``classify``: BCE over the 5 sigmoid channels against the one-hot MetaType, on object cells.
    """
    import torch
    import torch.nn.functional as F

    w = weights or LossWeights()
    raw = raw.float()
    valid = batch["nonempty"] & ~batch["ignore"]
    obj = batch["objectness"] & valid
    cls = batch["cls"].clamp(min=0)
    cw_table = torch.tensor(w.class_cells, dtype=torch.float32)
    cell_w = torch.where(obj, cw_table[cls], torch.zeros((), dtype=torch.float32))  # (B, H, W)
    vf = valid.float()
    of = obj.float()

    cat_logit = raw[:, CATEGORY][:, 0]
    bce_cat = F.binary_cross_entropy_with_logits(cat_logit, of, reduction="none")
    wcat = vf * torch.where(obj, w.positive * cell_w, torch.ones((), dtype=torch.float32))
    l_cat = (bce_cat * wcat).sum() / wcat.sum().clamp(min=1.0)

    conf_logit = raw[:, CONFIDENCE][:, 0]
    l_conf = (F.binary_cross_entropy_with_logits(conf_logit, of, reduction="none") * vf).sum() / vf.sum().clamp(min=1.0)

    denom = cell_w.sum().clamp(min=1e-6)
    l_inst = (F.smooth_l1_loss(raw[:, INSTANCE], batch["instance"], reduction="none", beta=w.beta).sum(1) * cell_w).sum() / denom
    l_height = (F.smooth_l1_loss(raw[:, HEIGHT][:, 0], batch["height"], reduction="none", beta=w.beta) * cell_w).sum() / denom
    l_head = (F.smooth_l1_loss(raw[:, HEADING], batch["heading"], reduction="none", beta=w.beta).sum(1) * cell_w).sum() / denom
    onehot = F.one_hot(cls, NUM_CLASSES).permute(0, 3, 1, 2).float()
    l_cls = (F.binary_cross_entropy_with_logits(raw[:, CLASS], onehot, reduction="none").sum(1) * cell_w).sum() / denom

    total = (w.category * l_cat + w.confidence * l_conf + w.instance * l_inst + w.height * l_height
             + w.heading * l_head + w.classify * l_cls)
    return {"total": total, "category": l_cat, "confidence": l_conf, "instance": l_inst, "height": l_height,
            "heading": l_head, "classify": l_cls}


# ------------------------------------------------------------------------------------------ training


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to 2 % of it at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t))))


def _load_frame(path: Path) -> Frame:
    from lidarmt.io.npz import load_frame_npz

    try:
        frame = load_frame_npz(path)
    except InputError as err:
        raise TrainingError(f"{err}; --data expects the simulator's labelled frames "
                            "(`lidarmt simulate --dataset DIR`)") from err
    if frame.labels is None or frame.labels.point_instance is None:
        raise TrainingError(f"{path} has no per-point instance labels; train on the simulator's dataset frames")
    return frame


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """``last.pt`` as a dict with ``model``, ``optimizer`` and ``step``; one line when it is anything else."""
    from lidarmt.lidar.perception.apollo.network import read_torch_file

    hint = f"pass --force to start over (it discards {path.parent}'s run)"
    ck = read_torch_file(path, what="lidarmt training checkpoint", hint=hint)
    if not isinstance(ck, dict) or not {"model", "optimizer", "step"} <= set(ck):
        from lidarmt.lidar.perception.apollo.errors import WeightsError

        raise WeightsError(f"{path} is not a lidarmt training checkpoint (no model/optimizer/step); {hint}")
    return ck


def export_weights(state: dict[str, Any], path: str | os.PathLike[str], *, meta: dict[str, Any]) -> None:
    """Write the shipped weights: ``{"state_dict": fp32 tensors, "meta": {...}}``, loadable with
    ``torch.load(weights_only=True)`` (and by :func:`lidarmt.lidar.perception.apollo.network.load_state_dict`)."""
    import torch

    from lidarmt._atomic import atomic_path

    sd = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in state.items()}
    with atomic_path(path) as tmp:
        torch.save({"state_dict": sd, "meta": json.loads(json.dumps(meta))}, tmp)


def write_start_checkpoint(weights: str | os.PathLike[str], out: str | os.PathLike[str], *, grid: int = 640,
                           lr: float = 2e-3, weight_decay: float = 1e-4, in_channels: int = 8) -> Path:
    """Start a fine-tuning run: write ``<out>/last.pt`` at step 0 holding ``weights`` (a shipped
    ``cnnseg*.pt``) and a fresh AdamW state, so that ``lidarmt train --out OUT --resume`` continues from these
    weights with its own schedule instead of a random initialisation.

    The 640 and 512 networks share one topology, so either grid can start from either file. ``lr`` and
    ``weight_decay`` must be the ones the run will use (``--lr``, ``--weight-decay``): the optimizer state
    carries them. The checkpoint records ``init`` (the file and its sha256), which the run's weights keep in
    their ``meta``. Refuses an ``out`` that already holds a training run. ``in_channels`` 6 or 4 (Apollo 3.5+)
    starts that network from an 8-channel file: ``conv0_1`` keeps the weights of the channels it still has."""
    import hashlib

    import torch

    from lidarmt._atomic import atomic_path
    from lidarmt.lidar.perception.apollo.network import load_network

    out = Path(out)
    if owned_files(out):
        raise TrainingOutputError(f"{out} already holds a training run; choose a new folder")
    net = load_network(weights, grid=grid)
    if net.in_channels != in_channels and net.in_channels != 8:
        raise ArgumentError(f"{weights} is a {net.in_channels}-channel network; a {in_channels}-channel run starts "
                            "from an 8-channel one or its own kind")
    if net.in_channels != in_channels:
        from lidarmt.lidar.perception.apollo.config import FEATURE_CHANNELS
        from lidarmt.lidar.perception.apollo.network import build_network

        state = net.state_dict()
        state["conv0_1.weight"] = state["conv0_1.weight"][:, list(FEATURE_CHANNELS[in_channels])].clone()
        net = build_network(grid, in_channels=in_channels)
        net.load_state_dict(state, strict=True)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    digest = hashlib.sha256(Path(weights).read_bytes()).hexdigest()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "last.pt"
    with atomic_path(path) as tmp:
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "step": 0, "elapsed": 0.0,
                    "init": {"weights": str(weights), "sha256": digest}}, tmp)
    return path


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train (or resume) and write ``<out>/last.pt`` (checkpoint with optimizer) and ``<out>/cnnseg{grid}.pt``
    (weights only) every ``checkpoint_minutes`` and at the end; also ``<out>/log.jsonl`` (one line per logged
    step). Returns a summary (steps done, wall time, mean losses of the last 100 steps).

    A non-empty ``out`` is refused unless ``resume`` (continue from its ``last.pt``) or ``force`` (replace the
    previous run's files); see :func:`check_out`. The data, the run folder and the checkpoint are all checked
    before anything is written."""
    import torch

    from lidarmt._atomic import atomic_path
    from lidarmt.lidar.perception.apollo.network import build_network, cpu_bf16_support

    sources = open_sources(cfg.data)
    out = Path(cfg.out)
    resuming = check_out(out, resume=resume, force=force)
    for src in sources:
        src.load(0)  # foreign .npz files or an unlabelled recording fail here, before the run folder is touched
    counts = np.array([len(src) for src in sources], dtype=np.float64)
    weights = counts if cfg.data_weights is None else np.asarray(cfg.data_weights, dtype=np.float64)
    probs = weights / weights.sum()
    n_frames = int(counts.sum())
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    net = build_network(cfg.grid, seed=cfg.seed, in_channels=cfg.in_channels)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = 0
    elapsed_before = 0.0
    init_from: dict[str, Any] | None = None  # the weights a fine-tuning run started from (write_start_checkpoint)
    ckpt_path = out / "last.pt"
    weights_path = out / f"cnnseg{cfg.grid}.pt"
    log_path = out / "log.jsonl"
    if resuming:
        ck = _read_checkpoint(ckpt_path)
        try:
            net.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            start = int(ck["step"])
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            from lidarmt.lidar.perception.apollo.errors import WeightsError

            first = (str(err).strip().splitlines() or ["mismatch"])[0]
            raise WeightsError(f"{ckpt_path} does not fit this run (--grid {cfg.grid}): {first}; resume with the "
                               "options it was trained with, or pass --force to start over") from err
        elapsed_before = float(ck.get("elapsed", 0.0))
        init_from = ck.get("init")
        log(f"resumed from {ckpt_path} at step {start}")
    else:
        for old in owned_files(out):  # only with --force (or --resume of a folder without a run): start over
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    net = net.to(memory_format=torch.channels_last).train()
    use_bf16 = cfg.bf16 and bool(cpu_bf16_support())
    aug = AugmentConfig() if cfg.augment else None
    cfg_dict = asdict(cfg)
    log(f"training on {n_frames} frames ({'; '.join(f'{s.describe()} p={q:.2f}' for s, q in zip(sources, probs, strict=True))}), {cfg.steps} steps of {cfg.batch} x {cfg.crop}^2 crops, "
        f"{'bf16 autocast' if use_bf16 else 'fp32'}, {torch.get_num_threads()} threads")

    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    last_ckpt = t0
    step = start

    def meta(done: int) -> dict[str, Any]:
        tail = history[-100:]
        means = {k: float(np.mean([h[k] for h in tail])) for k in tail[0]} if tail else {}
        return {"config": cfg_dict, "steps_done": done, "frames": n_frames,
                "wall_seconds": round(elapsed_before + time.perf_counter() - t0, 1),
                "final_losses_mean_last_100": means, "precision": "bf16-autocast" if use_bf16 else "fp32",
                "torch": torch.__version__, "init": init_from}

    def checkpoint(done: int) -> None:
        with atomic_path(ckpt_path) as tmp:
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "step": done,
                        "elapsed": elapsed_before + time.perf_counter() - t0, "init": init_from}, tmp)
        export_weights(net.state_dict(), weights_path, meta=meta(done))

    stopped_early = False
    with open(log_path, "a", encoding="utf-8") as logf:
        for step in range(start, cfg.steps):
            rng = np.random.default_rng([cfg.seed, step])
            t_data = time.perf_counter()
            samples = []
            for _ in range(cfg.batch):
                if len(sources) == 1 or cfg.data_weights is None:  # every frame equally likely (as before)
                    k = int(rng.integers(n_frames))
                    i = int(np.searchsorted(np.cumsum(counts), k, side="right"))
                    frame = sources[i].load(k - int(counts[:i].sum()))
                else:
                    i = int(rng.choice(len(sources), p=probs))
                    frame = sources[i].load(int(rng.integers(len(sources[i]))))
                samples.append(make_sample(frame, rng, grid=cfg.grid, range_=cfg.range, crop=cfg.crop, augment=aug,
                                           object_crop_prob=cfg.object_crop_prob, near_range=cfg.near_range,
                                           in_channels=cfg.in_channels, unlabelled=sources[i].unlabelled))
            batch = collate(samples)
            t_net = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg)
            x = batch["features"].contiguous(memory_format=torch.channels_last)
            if use_bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    raw = net.forward_raw(x)
            else:
                raw = net.forward_raw(x)
            losses = apollo_losses(raw, batch, cfg.loss)
            opt.zero_grad(set_to_none=True)
            losses["total"].backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
            opt.step()
            t_end = time.perf_counter()
            rec = {k: float(v.detach()) for k, v in losses.items()}
            if not math.isfinite(rec["total"]):
                raise FloatingPointError(f"loss became {rec['total']} at step {step}; lower --lr")
            history.append(rec)
            logf.write(json.dumps({"step": step + 1, "lr": lr_at(step, cfg), "data_s": round(t_net - t_data, 3),
                                   "net_s": round(t_end - t_net, 3), **{k: round(v, 5) for k, v in rec.items()}}) + "\n")
            logf.flush()
            if (step + 1) % 20 == 0 or step == start:
                tail = history[-20:]
                msg = " ".join(f"{k}={np.mean([h[k] for h in tail]):.4f}" for k in rec)
                log(f"step {step + 1}/{cfg.steps} lr={lr_at(step, cfg):.2e} {msg} "
                    f"({t_net - t_data:.2f}s data, {t_end - t_net:.2f}s net)")
            now = time.perf_counter()
            if now - last_ckpt > cfg.checkpoint_minutes * 60:
                checkpoint(step + 1)
                last_ckpt = now
            if cfg.max_minutes is not None and elapsed_before + now - t0 > cfg.max_minutes * 60:
                stopped_early = step + 1 < cfg.steps
                step += 1
                break
        else:
            step = cfg.steps
    done = max(step, start)
    checkpoint(done)
    summary = meta(done)
    summary["stopped_early"] = stopped_early
    log(f"wrote {weights_path} after {done} steps ({summary['wall_seconds']:.0f} s)")
    return summary
