"""Tiny translators for tests: trained for a few iterations on tiny synthetic folders by lidarmt's own trainer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from lidarmt.camera.translate.nets import NetConfig
from lidarmt.camera.translate.train import TrainConfig, train_translator

TINY_NET = {"dim": 4, "n_res": 2, "style_dim": 3, "mlp_dim": 8, "dis_dim": 4, "dis_layers": 2, "dis_scales": 1}


def image_folder(folder: Path, n: int = 6, *, dark: bool = False, size: tuple[int, int] = (24, 32),
                 seed: int = 0) -> Path:
    """``n`` small PNG images (gradients plus noise; ``dark`` ones are a quarter as bright)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    h, w = size
    for i in range(n):
        base = np.linspace(40, 220, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
        img = base + rng.normal(0, 20, (h, w, 3))
        if dark:
            img *= 0.25
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.clip(img, 0, 255).astype(np.uint8))
    return folder


def tiny_config(tmp: Path, arch: str = "munit", *, iterations: int = 2, **over) -> TrainConfig:
    a = image_folder(tmp / "a", seed=1)
    b = image_folder(tmp / "b", dark=True, seed=2)
    cfg = TrainConfig(domain_a=str(a), domain_b=str(b), out=str(tmp / f"run-{arch}"),
                      net=NetConfig(arch=arch, **TINY_NET), size=16, load_size=16, iterations=iterations,
                      sample_every=1, checkpoint_every=1, log_every=1, holdout=2)
    return replace(cfg, **over)


def tiny_translator(tmp: Path, arch: str = "munit", **over) -> Path:
    """The ``translator.pt`` of a 2-iteration run (a few kB)."""
    cfg = tiny_config(tmp, arch, **over)
    train_translator(cfg)
    return Path(cfg.out) / "translator.pt"


def shipped_dir(tmp: Path) -> Path:
    """A folder laid out like the shipped weights: ``munit-tiny.pt`` and ``unit-tiny.pt`` (2 iterations each);
    monkeypatch ``lidarmt.camera.translate.registry.WEIGHTS_DIR`` to it to make them "shipped"."""
    import shutil

    d = tmp / "weights"
    d.mkdir(parents=True)
    shutil.copy(tiny_translator(tmp / "m", "munit"), d / "munit-tiny.pt")
    shutil.copy(tiny_translator(tmp / "u", "unit"), d / "unit-tiny.pt")
    return d


def interrupt_training_at(monkeypatch, n: int) -> None:
    """Make the ``n``-th training step raise KeyboardInterrupt (as Ctrl-C would)."""
    from lidarmt.camera.translate.train import Trainer

    step, calls = Trainer.step, {"n": 0}

    def interrupted(self, xa, xb):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return step(self, xa, xb)

    monkeypatch.setattr(Trainer, "step", interrupted)
