"""Training a UNIT or MUNIT translator on two unpaired image folders (``lidarmt camera train-translator``).

The recipe follows the authors' released configurations unless a setting says otherwise:

* **Data**: every image of each folder is read once, resized so that its short side is ``load_size`` (aspect
  kept) and kept in memory as ``uint8``; each iteration draws one image of each domain independently (unpaired),
  a random ``size``x``size`` crop of it and a horizontal flip with probability 1/2, scaled to [-1, 1].
* **Losses** (weights in :class:`TrainConfig`): least-squares GAN on a multi-scale discriminator per domain;
  MUNIT: image reconstruction (L1, ``recon_x_w`` = 10), content and style reconstruction (L1, 1 and 1), optional
  cycle reconstruction (``recon_x_cyc_w``); UNIT: image reconstruction (10), KL = mean(μ²) (0.01), cycle
  reconstruction (10) and its KL (0.01). The VGG perceptual loss of some MUNIT configurations is **not**
  available: it needs ImageNet VGG-16 weights, which cannot be downloaded here (``vgg_w`` is refused).
* **Optimiser**: Adam (lr 1e-4, β = (0.5, 0.999), weight decay 1e-4) for the generators and for the
  discriminators, learning rate halved every ``step_size`` iterations; one discriminator step, then one
  generator step, per iteration; batch size 1 as in the papers.
* **Determinism**: one seed for the initial weights and the data order; ``threads`` torch threads (1 by default,
  which makes CPU runs repeatable). A run resumed from its checkpoint continues where it stopped: the weights
  after N iterations resumed are bit for bit those of a straight run (on one machine and device).
* **Precision**: ``fp32``; ``bf16`` autocasts the networks to bfloat16 (CPU or GPU; no loss scaling needed);
  ``fp16`` (CUDA only) autocasts to float16 and scales the losses with a ``GradScaler`` per optimiser, so small
  gradients do not underflow.
* **Interruption**: checkpoints are written atomically, so stopping a run (Ctrl-C) at any moment leaves the last
  checkpoint valid; :class:`TrainingInterrupted` says which iteration it holds.

Outputs in ``out``: ``checkpoint.pt`` (every ``checkpoint_every`` iterations and at the end: all networks,
optimisers, random states), ``samples/iter_NNNNNN.png`` (every ``sample_every``: fixed held-out images of both
domains and their translations), ``log.jsonl`` (losses every ``log_every``), ``translator.pt`` (the A→B half,
fp16: what :class:`lidarmt.camera.translate.model.LearnedTranslator` reads) and ``config.json``.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._atomic import atomic_open, atomic_path
from lidarmt._limits import loads_json
from lidarmt._paths import read_text
from lidarmt.camera.errors import CameraArgumentError, CameraOutputError, ImageSourceError
from lidarmt.camera.translate.nets import NetConfig

CHECKPOINT_FORMAT = "lidarmt-translator-checkpoint"
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a translator training run (stored in ``config.json`` and the checkpoint)."""

    domain_a: str
    domain_b: str
    out: str
    net: NetConfig = field(default_factory=NetConfig)
    size: int = 256  # training crop side (TACTIC: 256; DeepRoad: 240x320 frames)
    load_size: int = 0  # short side the images are resized to before cropping; 0 = size
    iterations: int = 1_000_000
    lr: float = 1e-4
    beta1: float = 0.5
    beta2: float = 0.999
    weight_decay: float = 1e-4
    step_size: int = 100_000  # lr halves every step_size iterations
    gan_w: float = 1.0
    recon_x_w: float = 10.0
    recon_s_w: float = 1.0  # MUNIT
    recon_c_w: float = 1.0  # MUNIT
    recon_x_cyc_w: float = -1.0  # -1 = the architecture's published default: MUNIT 0, UNIT 10
    recon_kl_w: float = 0.01  # UNIT
    recon_kl_cyc_w: float = 0.01  # UNIT
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    precision: str = "fp32"  # "bf16": autocast the networks to bfloat16 (losses stay fp32), ~1.4x faster on AVX-512 bf16 CPUs
    sample_every: int = 1000
    checkpoint_every: int = 1000
    log_every: int = 100
    max_images: int = 20_000
    holdout: int = 4  # images of each domain kept out of training for the sample sheets

    @property
    def cyc_w(self) -> float:
        if self.recon_x_cyc_w >= 0:
            return self.recon_x_cyc_w
        return 10.0 if self.net.arch == "unit" else 0.0

    def check(self) -> None:
        m = self.net.multiple
        least = max(4 * m, 16 if self.net.arch == "munit" else 0)  # MUNIT's style encoder halves 4 times
        if self.size < least or self.size % m:
            raise CameraArgumentError(f"--size {self.size}: expected a multiple of {m} of at least {least}")
        if self.load_size and self.load_size < self.size:
            raise CameraArgumentError(f"--load-size {self.load_size} is smaller than --size {self.size}")
        for name in ("iterations", "step_size", "sample_every", "checkpoint_every", "log_every", "max_images",
                     "threads"):
            if getattr(self, name) < 1:
                raise CameraArgumentError(f"{name}={getattr(self, name)}: expected a positive integer")
        for name in ("lr", "gan_w", "recon_x_w", "recon_s_w", "recon_c_w", "recon_kl_w", "recon_kl_cyc_w",
                     "weight_decay"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise CameraArgumentError(f"{name}={v}: expected a finite number >= 0")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not (0.0 <= v < 1.0):
                raise CameraArgumentError(f"{name}={v}: expected a number in [0, 1)")
        if not math.isfinite(self.recon_x_cyc_w):
            raise CameraArgumentError(f"recon_x_cyc_w={self.recon_x_cyc_w}: expected a finite number (-1 = default)")
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise CameraArgumentError(f"--precision {self.precision}: expected fp32, bf16 or fp16")
        if self.precision == "fp16" and not str(self.device).startswith("cuda"):
            raise CameraArgumentError("--precision fp16 needs a CUDA device; use bf16 on a CPU")
        from lidarmt._limits import check_threads

        check_threads(self.threads, what="--threads", error=CameraArgumentError)  # 100000 segfaults torch
        if not 0 <= self.seed < 2**63:
            raise CameraArgumentError(f"--seed {self.seed}: expected an integer from 0 to 2^63-1")
        if self.holdout < 1:
            raise CameraArgumentError(f"holdout={self.holdout}: expected at least 1")
        from lidarmt._limits import check_memory
        from lidarmt.camera.translate.nets import parameter_count

        # weights, gradients and Adam's two moments, plus a lower bound on one image's full-size feature maps
        n = self.net
        check_memory(16 * parameter_count(n) + 4 * 16 * self.size * self.size * n.dim,
                     what=f"training a {n.arch} translator with --dim {n.dim}, --dis-dim {n.dis_dim}, --mlp-dim "
                          f"{n.mlp_dim}, --n-res {n.n_res} at --size {self.size}", error=CameraArgumentError,
                     hint="the shipped translators use --dim 16 --dis-dim 32 --size 128")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["net"] = self.net.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        d["net"] = NetConfig.from_dict(d.get("net", {}))
        return cls(**d)


#: The settings ``--set KEY=VALUE`` may change (loss weights, optimiser, cadence, data), with their types.
TUNABLE: dict[str, type] = {
    "lr": float, "beta1": float, "beta2": float, "weight_decay": float, "step_size": int, "gan_w": float,
    "recon_x_w": float, "recon_s_w": float, "recon_c_w": float, "recon_x_cyc_w": float, "recon_kl_w": float,
    "recon_kl_cyc_w": float, "log_every": int, "max_images": int, "holdout": int,
}


def apply_settings(cfg: TrainConfig, settings: dict[str, Any], *, flag: str = "--set") -> TrainConfig:
    """``cfg`` with the :data:`TUNABLE` ``settings`` changed (values converted to the setting's type); an
    unknown key or a value of the wrong type raises :class:`CameraArgumentError` naming it."""
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        kind = TUNABLE.get(key)
        if kind is None:
            raise CameraArgumentError(f"{flag} {key}=...: unknown setting; known: {', '.join(sorted(TUNABLE))}")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is int:
            ok = ok and float(value).is_integer()
        if not ok:
            raise CameraArgumentError(f"{flag} {key}={value!r}: expected {'an integer' if kind is int else 'a number'}")
        changes[key] = kind(value)
    return replace(cfg, **changes)


# ------------------------------------------------------------------------------------------------ data


def read_domain(folder: str | os.PathLike[str], *, short_side: int, max_images: int,
                progress: Callable[[int, int, str], None] | None = None) -> np.ndarray:
    """Every image of ``folder`` (sorted by name; at most ``max_images``, evenly spaced) resized so that the
    short side is ``short_side``, as an (N, H, W, 3) uint8 RGB array; all images must share one aspect
    ratio after resizing (the first image's), others are centre-cropped to it."""
    import cv2

    from lidarmt._limits import check_image
    from lidarmt.camera.sources.folder import list_images

    p = Path(folder)
    if not p.exists():
        raise ImageSourceError(f"{p}: no such folder; give a folder of images (png, jpg)")
    if not p.is_dir():
        raise ImageSourceError(f"{p}: not a folder; give the folder that holds the domain's images (png, jpg)")
    names = list_images(p)
    if len(names) < 2:
        raise ImageSourceError(f"{p}: found {len(names)} image(s); a domain needs at least 2 (png, jpg, bmp) "
                               "directly in the folder (sub-folders are not read)")
    if len(names) > max_images:
        keep = np.linspace(0, len(names) - 1, max_images).round().astype(int)
        names = [names[i] for i in keep]
    out: np.ndarray | None = None
    for i, name in enumerate(names):
        try:
            data = np.fromfile(p / name, dtype=np.uint8)
            if data.size:  # a bomb, in any format opencv decodes: by its header, before decoding
                try:
                    check_image(data.tobytes(), what=str(p / name), error=ImageSourceError)
                except ImageSourceError as err:
                    raise ImageSourceError(f"{err}; remove it or convert it to png/jpg") from err
            img = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
        except (OSError, cv2.error) as err:
            raise ImageSourceError(f"{p / name}: not a readable image ({type(err).__name__}); remove it or "
                                   "convert it to png/jpg") from err
        if img is None:
            raise ImageSourceError(f"{p / name}: not a readable image; remove it or convert it to png/jpg")
        h, w = img.shape[:2]
        scale = short_side / min(h, w)
        nh, nw = max(short_side, round(h * scale)), max(short_side, round(w * scale))
        img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        if out is None:
            out = np.empty((len(names), nh, nw, 3), np.uint8)
        th, tw = out.shape[1:3]
        if img.shape[:2] != (th, tw):  # another aspect ratio: resize to cover, centre-crop
            s = max(th / img.shape[0], tw / img.shape[1])
            img = cv2.resize(img, (max(tw, round(img.shape[1] * s)), max(th, round(img.shape[0] * s))))
            y0, x0 = (img.shape[0] - th) // 2, (img.shape[1] - tw) // 2
            img = img[y0:y0 + th, x0:x0 + tw]
        out[i] = img[:, :, ::-1]
        if progress is not None and (i + 1) % 100 == 0:
            progress(i + 1, len(names), f"reading {p.name}")
    assert out is not None
    return out


def _batch(images: np.ndarray, idx: int, size: int, rng: np.random.Generator, device: str) -> Any:
    import torch

    img = images[idx]
    h, w = img.shape[:2]
    y = int(rng.integers(0, h - size + 1))
    x = int(rng.integers(0, w - size + 1))
    crop = img[y:y + size, x:x + size]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    t = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).float().div_(127.5).sub_(1.0)
    return t.unsqueeze(0).to(device)


# ----------------------------------------------------------------------------------------------- model


class Trainer:
    """The networks, optimisers and one iteration's updates of a UNIT or MUNIT run."""

    def __init__(self, cfg: TrainConfig) -> None:
        import torch

        from lidarmt.camera.translate.nets import build_discriminators, build_generators

        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.gen = build_generators(cfg.net).to(cfg.device)
        self.dis = build_discriminators(cfg.net).to(cfg.device)
        betas = (cfg.beta1, cfg.beta2)
        self.opt_g = torch.optim.Adam([p for p in self.gen.parameters() if p.requires_grad], lr=cfg.lr, betas=betas,
                                      weight_decay=cfg.weight_decay)
        self.opt_d = torch.optim.Adam(self.dis.parameters(), lr=cfg.lr, betas=betas, weight_decay=cfg.weight_decay)
        self.sched_g = torch.optim.lr_scheduler.StepLR(self.opt_g, cfg.step_size, gamma=0.5)
        self.sched_d = torch.optim.lr_scheduler.StepLR(self.opt_d, cfg.step_size, gamma=0.5)
        # fp16 needs loss scaling (small gradients underflow in float16); disabled scalers are pass-throughs
        fp16 = cfg.precision == "fp16"
        kind = "cuda" if str(cfg.device).startswith("cuda") else "cpu"
        self.scaler_g = torch.amp.GradScaler(kind, enabled=fp16)
        self.scaler_d = torch.amp.GradScaler(kind, enabled=fp16)

    def _update(self, loss: Any, opt: Any, scaler: Any) -> None:
        """Backward and optimiser step through ``scaler`` (a plain ``backward(); step()`` unless fp16)."""
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    # -- translation (used for sample sheets)
    def translate(self, x: Any, direction: str, style: Any | None = None) -> Any:
        import torch

        with torch.no_grad():
            if self.cfg.net.arch == "munit":
                src, dst = (self.gen["a"], self.gen["b"]) if direction == "ab" else (self.gen["b"], self.gen["a"])
                c = src.enc_content(x)
                if style is None:
                    style = torch.zeros(x.shape[0], self.cfg.net.style_dim, 1, 1, device=x.device)
                return dst.decode(c, style)
            pair = self.gen["pair"]
            a, b = ("a", "b") if direction == "ab" else ("b", "a")
            return pair.decode(pair.encode(x, a), b)

    # -- one iteration
    def autocast(self) -> Any:
        import torch

        kind = "cuda" if str(self.cfg.device).startswith("cuda") else "cpu"
        if self.cfg.precision == "fp32":
            return torch.autocast(kind, enabled=False)
        return torch.autocast(kind, dtype=torch.bfloat16 if self.cfg.precision == "bf16" else torch.float16)

    def step(self, xa: Any, xb: Any) -> dict[str, float]:
        with self.autocast():
            losses = self._munit_step(xa, xb) if self.cfg.net.arch == "munit" else self._unit_step(xa, xb)
        with warnings.catch_warnings():
            # a loss-scaled step skipped for overflowing gradients still counts in the schedule (by design)
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            self.sched_g.step()
            self.sched_d.step()
        return losses

    def _dis_step(self, fake_a: Any, fake_b: Any, xa: Any, xb: Any) -> float:
        self.opt_d.zero_grad(set_to_none=True)
        loss = self.cfg.gan_w * (self.dis["a"].loss_d(fake_a.detach(), xa) + self.dis["b"].loss_d(fake_b.detach(), xb))
        self._update(loss, self.opt_d, self.scaler_d)
        return float(loss.detach())

    def _munit_step(self, xa: Any, xb: Any) -> dict[str, float]:
        import torch
        from torch.nn.functional import l1_loss

        cfg, ga, gb = self.cfg, self.gen["a"], self.gen["b"]
        sd = cfg.net.style_dim
        sa = torch.randn(xa.shape[0], sd, 1, 1, device=xa.device)
        sb = torch.randn(xb.shape[0], sd, 1, 1, device=xb.device)
        # discriminators
        with torch.no_grad():
            ca, cb = ga.enc_content(xa), gb.enc_content(xb)
            fake_a, fake_b = ga.decode(cb, sa), gb.decode(ca, sb)
        loss_d = self._dis_step(fake_a, fake_b, xa, xb)
        # generators
        self.opt_g.zero_grad(set_to_none=True)
        ca, sa_p = ga.encode(xa)
        cb, sb_p = gb.encode(xb)
        xa_rec, xb_rec = ga.decode(ca, sa_p), gb.decode(cb, sb_p)
        xba, xab = ga.decode(cb, sa), gb.decode(ca, sb)
        cb_rec, sa_rec = ga.encode(xba)
        ca_rec, sb_rec = gb.encode(xab)
        gan = self.dis["a"].loss_g(xba) + self.dis["b"].loss_g(xab)
        rx = l1_loss(xa_rec, xa) + l1_loss(xb_rec, xb)
        rs = l1_loss(sa_rec, sa) + l1_loss(sb_rec, sb)
        rc = l1_loss(ca_rec, ca.detach()) + l1_loss(cb_rec, cb.detach())
        loss = cfg.gan_w * gan + cfg.recon_x_w * rx + cfg.recon_s_w * rs + cfg.recon_c_w * rc
        out = {"d": loss_d, "gan": float(gan.detach()), "x": float(rx.detach()), "s": float(rs.detach()),
               "c": float(rc.detach())}
        if cfg.cyc_w > 0:
            cyc = l1_loss(ga.decode(ca_rec, sa_p), xa) + l1_loss(gb.decode(cb_rec, sb_p), xb)
            loss = loss + cfg.cyc_w * cyc
            out["cyc"] = float(cyc.detach())
        self._update(loss, self.opt_g, self.scaler_g)
        out["g"] = float(loss.detach())
        return out

    def _unit_step(self, xa: Any, xb: Any) -> dict[str, float]:
        import torch
        from torch.nn.functional import l1_loss

        cfg, pair = self.cfg, self.gen["pair"]
        with torch.no_grad():
            ha, hb = pair.encode(xa, "a"), pair.encode(xb, "b")
            fake_a = pair.decode(hb + torch.randn_like(hb), "a")
            fake_b = pair.decode(ha + torch.randn_like(ha), "b")
        loss_d = self._dis_step(fake_a, fake_b, xa, xb)
        self.opt_g.zero_grad(set_to_none=True)
        ha, hb = pair.encode(xa, "a"), pair.encode(xb, "b")
        za, zb = ha + torch.randn_like(ha), hb + torch.randn_like(hb)
        xa_rec, xb_rec = pair.decode(za, "a"), pair.decode(zb, "b")
        xba, xab = pair.decode(zb, "a"), pair.decode(za, "b")
        hb_rec, ha_rec = pair.encode(xba, "a"), pair.encode(xab, "b")
        xaba = pair.decode(ha_rec + torch.randn_like(ha_rec), "a")
        xbab = pair.decode(hb_rec + torch.randn_like(hb_rec), "b")
        gan = self.dis["a"].loss_g(xba) + self.dis["b"].loss_g(xab)
        rx = l1_loss(xa_rec, xa) + l1_loss(xb_rec, xb)
        kl = torch.mean(ha ** 2) + torch.mean(hb ** 2)
        cyc = l1_loss(xaba, xa) + l1_loss(xbab, xb)
        kl_cyc = torch.mean(ha_rec ** 2) + torch.mean(hb_rec ** 2)
        loss = (cfg.gan_w * gan + cfg.recon_x_w * rx + cfg.recon_kl_w * kl + cfg.cyc_w * cyc
                + cfg.recon_kl_cyc_w * kl_cyc)
        self._update(loss, self.opt_g, self.scaler_g)
        return {"d": loss_d, "gan": float(gan.detach()), "x": float(rx.detach()), "kl": float(kl.detach()),
                "cyc": float(cyc.detach()), "g": float(loss.detach())}

    # -- state
    def state(self) -> dict[str, Any]:
        s = {"gen": self.gen.state_dict(), "dis": self.dis.state_dict(), "opt_g": self.opt_g.state_dict(),
             "opt_d": self.opt_d.state_dict(), "sched_g": self.sched_g.state_dict(),
             "sched_d": self.sched_d.state_dict()}
        if self.scaler_g.is_enabled():
            s["scaler_g"], s["scaler_d"] = self.scaler_g.state_dict(), self.scaler_d.state_dict()
        return s

    def load_state(self, s: dict[str, Any]) -> None:
        """Restore :meth:`state` (checkpoints written before loss scaling existed have no scaler states)."""
        self.gen.load_state_dict(s["gen"])
        self.dis.load_state_dict(s["dis"])
        self.opt_g.load_state_dict(s["opt_g"])
        self.opt_d.load_state_dict(s["opt_d"])
        self.sched_g.load_state_dict(s["sched_g"])
        self.sched_d.load_state_dict(s["sched_d"])
        if self.scaler_g.is_enabled() and "scaler_g" in s:
            self.scaler_g.load_state_dict(s["scaler_g"])
            self.scaler_d.load_state_dict(s["scaler_d"])


# ------------------------------------------------------------------------------------------ the run


RUN_FILES = ("checkpoint.pt", "translator.pt", "config.json", "log.jsonl")


class TrainingInterrupted(KeyboardInterrupt):
    """A training run stopped by Ctrl-C (``KeyboardInterrupt``). Checkpoints are written atomically, so the
    run's ``checkpoint.pt`` is valid: it holds ``checkpoint_iteration`` (0: none was written yet), and
    resuming goes on from there. ``iteration`` is the iteration that was running when the run stopped."""

    def __init__(self, out: Path, iteration: int, checkpoint_iteration: int) -> None:
        super().__init__(f"interrupted at iteration {iteration}; {out / 'checkpoint.pt'} holds iteration "
                         f"{checkpoint_iteration}")
        self.out, self.iteration, self.checkpoint_iteration = out, iteration, checkpoint_iteration


def check_out(out: Path, *, force: bool, resume: bool) -> None:
    """Refuse to overwrite an earlier run unless ``resume`` or ``force``. ``force`` (without ``resume``) removes
    the run's own files only (:data:`RUN_FILES` and ``samples/iter_*.png``); anything else in ``out`` stays."""
    if out.exists() and not out.is_dir():
        raise CameraOutputError(f"--out {out}: exists and is not a folder; pick a folder for the run")
    present = [n for n in RUN_FILES if (out / n).exists()]
    if present and not (force or resume):
        raise CameraOutputError(f"--out {out}: holds a translator run ({', '.join(present)}); pass --resume to go "
                                "on with it or --force to start again")
    if force and not resume:
        for n in RUN_FILES:
            (out / n).unlink(missing_ok=True)
        samples = out / "samples"
        if samples.is_dir():
            for f in samples.glob("iter_*.png"):
                f.unlink()


def _save_checkpoint(path: Path, trainer: Trainer, it: int, rng: np.random.Generator, cfg: TrainConfig, *,
                     seconds: float) -> None:
    import torch

    blob = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "iteration": it,
            "config": json.dumps(cfg.to_dict()), "state": trainer.state(), "seconds": float(seconds),
            "torch_rng": torch.get_rng_state(), "numpy_rng": json.dumps(rng.bit_generator.state)}
    if str(cfg.device).startswith("cuda"):  # the dropout-free nets draw their noise on the device
        blob["cuda_rng"] = torch.cuda.get_rng_state(torch.device(cfg.device))
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)


_CHECKPOINT_KEYS = ("iteration", "config", "state", "torch_rng", "numpy_rng")


def _load_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """A checkpoint written by this module, read as data (``weights_only=True``) and checked; ``mmap`` maps the
    tensors instead of reading them (for a look at the settings of a large run)."""
    from lidarmt._torchfile import load_blob

    hint = "pass --force to start again (or restore the file from a backup)"
    blob = load_blob(path, fmt=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, what="translator checkpoint",
                     short="checkpoint", hint=hint, error=CameraOutputError, on_old_version=f"; {hint}", mmap=mmap)
    missing = [k for k in _CHECKPOINT_KEYS if k not in blob]
    if missing or not isinstance(blob["iteration"], int) or blob["iteration"] < 0:
        raise CameraOutputError(f"{path}: corrupt translator checkpoint (missing or bad "
                                f"{', '.join(missing) or 'iteration'}); {hint}")
    return blob


def checkpoint_config(blob: dict[str, Any], path: Path) -> TrainConfig:
    """The :class:`TrainConfig` a checkpoint was written with."""
    try:
        return TrainConfig.from_dict(loads_json(blob["config"], what=f"{path}: corrupt translator checkpoint "
                                                "(config; pass --force to start again)", error=CameraOutputError))
    except (TypeError, ValueError, KeyError) as err:
        raise CameraOutputError(f"{path}: corrupt translator checkpoint (its settings do not parse: "
                                f"{type(err).__name__}); pass --force to start again") from err


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _same_kind(got: Any, fresh: Any) -> bool:
    """Whether a scheduler's or scaler's state value read from a checkpoint is of the kind the fresh object's
    is: a finite number where it has a number, a bool where a bool, a list of as many numbers where a list."""
    if isinstance(fresh, bool) or fresh is None:
        return type(got) is type(fresh)
    if isinstance(fresh, (int, float)):
        return _number(got) and (isinstance(got, int) or not isinstance(fresh, int))
    if isinstance(fresh, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(fresh) and all(map(_same_kind, got, fresh))
    return type(got) is type(fresh)


def _check_state(blob: dict[str, Any], trainer: Trainer, path: Path) -> None:
    """A resumed checkpoint's contents checked against the run's networks before anything is loaded, so that a
    crafted or damaged file is one line (:class:`CameraOutputError`), never a traceback, an allocation of
    gigabytes or a run that goes on from NaN: the networks' tensors dense, of their shapes
    (:func:`lidarmt._torchfile.check_tensors`); the optimisers' moments of their parameters' shapes and finite;
    the schedulers' and scalers' states of the kinds theirs are; the RNG states and ``seconds`` well formed."""
    import torch

    from lidarmt._torchfile import check_tensors

    def bad(why: str) -> CameraOutputError:
        return CameraOutputError(f"{path}: corrupt translator checkpoint ({why}); pass --force to start again")

    state = blob["state"]
    if not isinstance(state, dict):
        raise bad("state")
    for name, module in (("gen", trainer.gen), ("dis", trainer.dis)):
        if not isinstance(state.get(name), dict):
            raise bad(f"state {name}")
        check_tensors(state[name], path=path, short="translator checkpoint", error=CameraOutputError,
                      expect={k: tuple(v.shape) for k, v in module.state_dict().items()},
                      misfit=f"corrupt translator checkpoint ({name} does not fit the {trainer.cfg.net.arch} "
                             "networks)")
    for name, opt in (("opt_g", trainer.opt_g), ("opt_d", trainer.opt_d)):
        s = state.get(name)
        params = [p for g in opt.param_groups for p in g["params"]]
        if not (isinstance(s, dict) and isinstance(s.get("state"), dict) and isinstance(s.get("param_groups"), list)
                and _same_kind([len(g.get("params", ())) if isinstance(g, dict) else None for g in s["param_groups"]],
                               [len(g["params"]) for g in opt.param_groups])):
            raise bad(f"{name}: not the optimiser of these networks")
        flat: dict[str, Any] = {}
        for idx, per in s["state"].items():
            if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(params) \
                    or not isinstance(per, dict):
                raise bad(f"{name}: state of parameter {str(idx)[:40]!r}")
            for key, t in per.items():
                if not isinstance(t, torch.Tensor):
                    if not _number(t):
                        raise bad(f"{name}: {str(key)[:40]!r} of parameter {idx}")
                    continue
                flat[f"{idx}.{key}"] = t
        check_tensors(flat, path=path, short="translator checkpoint", error=CameraOutputError)
        for key, t in flat.items():
            idx = int(key.split(".", 1)[0])
            if tuple(t.shape) not in ((), tuple(params[idx].shape)) or not t.is_floating_point() \
                    or not bool(torch.isfinite(t).all()):
                raise bad(f"{name}: {key[:60]!r} of shape {tuple(t.shape)} is not a finite moment of parameter "
                          f"{idx}, shape {tuple(params[idx].shape)}")
    fresh = trainer.state()
    for name in ("sched_g", "sched_d", "scaler_g", "scaler_d"):
        if name not in fresh and name not in state:
            continue
        if name.startswith("scaler") and name not in state:  # written before loss scaling existed
            continue
        s, f = state.get(name), fresh.get(name)
        if f is None or not isinstance(s, dict) or set(s) != set(f) or not all(_same_kind(s[k], f[k]) for k in f):
            raise bad(f"{name}: not the state of this run's {'scheduler' if 'sched' in name else 'loss scaler'}")
    rng_state = blob["torch_rng"]
    if not isinstance(rng_state, torch.Tensor) or rng_state.dtype != torch.uint8:
        raise bad("torch_rng")
    check_tensors({"torch_rng": rng_state}, path=path, short="translator checkpoint", error=CameraOutputError,
                  expect={"torch_rng": tuple(torch.get_rng_state().shape)}, misfit="corrupt translator checkpoint "
                  "(torch_rng is not a CPU random state)")
    if not isinstance(blob["numpy_rng"], str) or not isinstance(
            loads_json(blob["numpy_rng"], what=f"{path}: corrupt translator checkpoint (numpy_rng)",
                       error=CameraOutputError), dict):
        raise bad("numpy_rng")
    if "seconds" in blob and not (_number(blob["seconds"]) and blob["seconds"] >= 0):
        raise bad(f"seconds {blob['seconds']!r}")
    if isinstance(blob["iteration"], bool):
        raise bad("iteration")


def read_run_config(out: str | os.PathLike[str]) -> TrainConfig | None:
    """The settings of the run in ``out`` (its checkpoint's; None when it has no checkpoint)."""
    path = Path(out) / "checkpoint.pt"
    if not path.is_file():
        return None
    return checkpoint_config(_load_checkpoint(path, mmap=True), path)


def _trim_log(path: Path, upto: int) -> float:
    """Drop the records of ``log.jsonl`` after iteration ``upto`` (written after the checkpoint a run resumes
    from, so they would appear twice); returns the last kept record's ``seconds`` (0.0 when none)."""
    if not path.is_file():
        return 0.0
    kept: list[str] = []
    seconds = 0.0
    for line in read_text(path, error=CameraOutputError).splitlines():
        try:
            rec = loads_json(line, what="log.jsonl", error=CameraOutputError)
            it = int(rec["iteration"])
        except (CameraOutputError, ValueError, KeyError, TypeError, OverflowError):
            continue  # a line cut short by a crash
        if it <= upto:
            kept.append(line)
            if _number(rec.get("seconds")) and rec["seconds"] >= 0:  # never NaN, inf or a string
                seconds = float(rec["seconds"])
    with atomic_open(path) as fh:
        fh.write("".join(k + "\n" for k in kept))
    return seconds


def sample_sheet(trainer: Trainer, held_a: Any, held_b: Any, path: Path, *, seed: int = 0) -> None:
    """A PNG: rows of held-out A images, their A→B translations (MUNIT: 2 fixed random styles), then held-out
    B images and their B→A translations."""
    import cv2
    import torch

    from lidarmt._atomic import atomic_write_bytes

    g = torch.Generator().manual_seed(seed)
    rows = [held_a]
    if trainer.cfg.net.arch == "munit":
        for _ in range(2):
            s = torch.randn(1, trainer.cfg.net.style_dim, 1, 1, generator=g).to(held_a.device)
            rows.append(trainer.translate(held_a, "ab", s.expand(held_a.shape[0], -1, -1, -1)))
    else:
        rows.append(trainer.translate(held_a, "ab"))
    rows.append(held_b)
    rows.append(trainer.translate(held_b, "ba"))

    def strip(t: Any) -> np.ndarray:
        arr = ((t.detach().cpu().clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
        return np.concatenate(list(arr), axis=1)

    sheet = np.concatenate([strip(r) for r in rows], axis=0)
    ok, buf = cv2.imencode(".png", sheet[:, :, ::-1])
    if ok:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.tobytes())


def train_translator(cfg: TrainConfig, *, resume: bool = False, force: bool = False,
                     progress: Callable[[int, int, str], None] | None = None,
                     tick: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Train (or go on training) the translator ``cfg`` describes; returns a summary (iterations, seconds,
    last losses, outputs). See the module docstring for the recipe and the files written.

    ``resume`` goes on from ``<out>/checkpoint.pt`` with the run's own settings; what may change is the
    length of the run (``iterations``), the cadence of outputs, ``threads``, ``device`` and the domain folders'
    paths (for data that moved). ``progress(done, total, text)`` is told about image reading ("reading NAME")
    and, every ``log_every`` iterations, the mean losses; ``tick(iteration, iterations)`` is called after every
    iteration. Ctrl-C raises :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) with the last checkpoint's
    iteration.
    """
    import torch

    cfg.check()
    out = Path(cfg.out)
    check_out(out, force=force, resume=resume)
    ckpt_path = out / "checkpoint.pt"
    start = 0
    blob: dict[str, Any] | None = None
    if resume and ckpt_path.is_file():
        blob = _load_checkpoint(ckpt_path)
        old = checkpoint_config(blob, ckpt_path)
        cfg = replace(old, iterations=cfg.iterations, sample_every=cfg.sample_every,
                      checkpoint_every=cfg.checkpoint_every, log_every=cfg.log_every, threads=cfg.threads,
                      device=cfg.device, domain_a=cfg.domain_a, domain_b=cfg.domain_b, out=cfg.out)
        cfg.check()
        start = int(blob["iteration"])
    torch.set_num_threads(cfg.threads)
    load = cfg.load_size or cfg.size
    dom_a = read_domain(cfg.domain_a, short_side=load, max_images=cfg.max_images, progress=progress)
    dom_b = read_domain(cfg.domain_b, short_side=load, max_images=cfg.max_images, progress=progress)
    for name, d in (("--domain-a", dom_a), ("--domain-b", dom_b)):
        if len(d) <= cfg.holdout:
            raise ImageSourceError(f"{name}: {len(d)} images; need more than the {cfg.holdout} held out for "
                                   f"samples (add images or --set holdout=1)")
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "config.json") as fh:
        json.dump(cfg.to_dict(), fh, indent=2)
    trainer = Trainer(cfg)
    rng = np.random.default_rng(cfg.seed)
    if blob is not None:
        _check_state(blob, trainer, ckpt_path)
        try:
            trainer.load_state(blob["state"])
            torch.set_rng_state(blob["torch_rng"])
            rng.bit_generator.state = json.loads(blob["numpy_rng"])
            if "cuda_rng" in blob and str(cfg.device).startswith("cuda"):
                torch.cuda.set_rng_state(blob["cuda_rng"], torch.device(cfg.device))
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise CameraOutputError(f"{ckpt_path}: corrupt translator checkpoint ({first[:200]}); pass --force to "
                                    "start again") from err
    # seconds spent before this session: the checkpoint's (or, for checkpoints without it, the log's)
    elapsed0 = _trim_log(out / "log.jsonl", start) if resume else 0.0
    if blob is not None and isinstance(blob.get("seconds"), float):
        elapsed0 = blob["seconds"]
    # the last `holdout` images of each folder are never trained on; the sheets show them
    na, nb = len(dom_a) - cfg.holdout, len(dom_b) - cfg.holdout

    def held(d: np.ndarray) -> Any:
        imgs = []
        for img in d[-cfg.holdout:]:
            h, w = img.shape[:2]
            y, x = (h - cfg.size) // 2, (w - cfg.size) // 2
            imgs.append(img[y:y + cfg.size, x:x + cfg.size])
        return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float().div(127.5).sub(1).to(cfg.device)

    held_a, held_b = held(dom_a), held(dom_b)
    t0 = time.perf_counter()
    last: dict[str, float] = {}
    acc: dict[str, list[float]] = {}
    it = saved = start
    try:
        with open(out / "log.jsonl", "a", encoding="utf-8") as log:
            for it in range(start + 1, cfg.iterations + 1):
                xa = _batch(dom_a, int(rng.integers(0, na)), cfg.size, rng, cfg.device)
                xb = _batch(dom_b, int(rng.integers(0, nb)), cfg.size, rng, cfg.device)
                losses = trainer.step(xa, xb)
                if not all(math.isfinite(v) for v in losses.values()):
                    raise CameraOutputError(
                        f"iteration {it}: a loss is not finite ({', '.join(f'{k} {v:.3g}' for k, v in losses.items())})"
                        f"; resume from the last checkpoint (iteration {saved}) with a lower --set lr=..., or use "
                        "--precision fp32")
                for k, v in losses.items():
                    acc.setdefault(k, []).append(v)
                if it % cfg.log_every == 0 or it == cfg.iterations:
                    last = {k: float(np.mean(v)) for k, v in acc.items()}
                    acc = {}
                    rec = {"iteration": it, "seconds": round(elapsed0 + time.perf_counter() - t0, 2),
                           **{k: round(v, 5) for k, v in last.items()}}
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    if progress is not None:
                        progress(it, cfg.iterations, " ".join(f"{k} {v:.3f}" for k, v in last.items()))
                if it % cfg.sample_every == 0 or it == cfg.iterations:
                    trainer.gen.eval()
                    sample_sheet(trainer, held_a, held_b, out / "samples" / f"iter_{it:07d}.png", seed=cfg.seed)
                    trainer.gen.train()
                if it % cfg.checkpoint_every == 0 or it == cfg.iterations:
                    _save_checkpoint(ckpt_path, trainer, it, rng, cfg, seconds=elapsed0 + time.perf_counter() - t0)
                    saved = it
                    export_translator(trainer, out / "translator.pt", cfg=cfg, iteration=it)
                if tick is not None:
                    tick(it, cfg.iterations)
    except KeyboardInterrupt as err:
        raise TrainingInterrupted(out, it, saved) from err
    if start >= cfg.iterations:
        export_translator(trainer, out / "translator.pt", cfg=cfg, iteration=start)
    seconds = time.perf_counter() - t0
    return {"arch": cfg.net.arch, "iterations": it, "started_at": start, "seconds": round(seconds, 2),
            "seconds_total": round(elapsed0 + seconds, 2),
            "seconds_per_iteration": round(seconds / (it - start), 4) if it > start else None,
            "losses": last, "out": str(out), "translator": str(out / "translator.pt"),
            "samples": str(out / "samples"), "images_a": len(dom_a), "images_b": len(dom_b)}


def export_translator(trainer: Trainer, path: Path, *, cfg: TrainConfig, iteration: int) -> None:
    """Write the A→B half of the generators (fp16) with the settings to rebuild it."""
    from lidarmt.camera.translate.model import write_translator

    gen = trainer.gen
    if cfg.net.arch == "munit":
        parts = {"enc_content": gen["a"].enc_content, "enc_style": gen["b"].enc_style, "dec": gen["b"].dec,
                 "enc_style_a": gen["a"].enc_style}
    else:
        pair = gen["pair"]
        parts = {"enc": pair.enc_a, "enc_shared": pair.enc_shared, "dec_shared": pair.dec_shared, "dec": pair.dec_b}
    state = {f"{k}.{n}": t for k, m in parts.items() for n, t in m.state_dict().items()}
    meta = {"net": cfg.net.to_dict(), "size": cfg.size, "load_size": cfg.load_size or cfg.size,
            "iterations": iteration, "domain_a": cfg.domain_a, "domain_b": cfg.domain_b, "seed": cfg.seed,
            "train": {k: v for k, v in cfg.to_dict().items() if k not in ("net", "domain_a", "domain_b", "out")}}
    write_translator(path, state, meta)
