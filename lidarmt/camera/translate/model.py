"""A trained UNIT or MUNIT translator as lidarmt uses it: frames of domain A in, frames of domain B out.

:class:`LearnedTranslator` implements the translator protocol (:mod:`lidarmt.camera.translate.base`):
``translate(images, style=None, seed=0)`` takes (N, H, W, 3) uint8 RGB frames of any size and returns frames of
the same size. Inside, each frame is resized so that its short side is the translator's ``load_size`` (the
long side rounded to a multiple of the encoder stride), translated whole (the networks are fully
convolutional) and resized back with bicubic interpolation. So the output carries the translator's
resolution: detail finer than ``load_size`` is lost, as it was in DeepRoad's 240x320 and TACTIC's 256² outputs.

For search over MUNIT's style space the two halves are exposed: :meth:`encode` (the content codes, computed
once per frame and cached by the caller) and :meth:`decode` (content codes + a style vector → frames), so that
each new style costs one decoder pass.

The weights file (``translator.pt``, written by training) holds tensors and JSON only and is read with
``torch.load(weights_only=True)``: never code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import ModelError

TRANSLATOR_FORMAT = "lidarmt-translator"
TRANSLATOR_VERSION = 1


def write_translator(path: str | os.PathLike[str], state: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write an A→B translator file: fp16 tensors plus JSON metadata, atomically."""
    import torch

    from lidarmt._atomic import atomic_path

    blob = {"format": TRANSLATOR_FORMAT, "version": TRANSLATOR_VERSION, "meta": json.dumps(meta),
            "state_dict": {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu())
                           for k, v in state.items()}}
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)


def read_translator(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(fp32 state dict, meta)`` of a translator file, read as data (``weights_only=True``)."""
    from lidarmt._torchfile import read_meta, read_tensor_blob

    p = Path(path)
    blob, state = read_tensor_blob(p, fmt=TRANSLATOR_FORMAT, version=TRANSLATOR_VERSION, what="lidarmt translator file",
                                   short="translator file", error=ModelError,
                                   hint="pass a translator.pt written by 'lidarmt camera train-translator'")
    meta = read_meta(blob, path=p, short="translator file", error=ModelError)
    if not isinstance(meta, dict) or not isinstance(meta.get("net"), dict):
        raise ModelError(f"{p}: corrupt translator file (no network settings)")
    return state, meta


class LearnedTranslator:
    """A UNIT (unimodal) or MUNIT (multimodal, ``style_dim`` > 0) A→B translator from a translator file.

    Parameters: ``name`` (how campaigns and reports call it), ``path`` (the ``translator.pt``), ``device``
    (``cpu``, ``cuda``, ``cuda:N``; resolve ``auto`` before), ``batch_size`` (frames per forward pass),
    ``card`` (the model card's path, when there is one).
    """

    def __init__(self, name: str, path: str | os.PathLike[str], *, device: str = "cpu", batch_size: int = 8,
                 card: str = "", weather: str = "", title: str = "") -> None:
        import torch

        from lidarmt.camera.translate.nets import (
            AdaINDecoder,
            ContentEncoder,
            NetConfig,
            ResBlock,
            StyleEncoder,
            _downsampler,
            _upsampler,
        )

        state, meta = read_translator(path)
        try:
            self.net = NetConfig.from_dict(meta["net"])
        except (TypeError, ValueError) as err:
            raise ModelError(f"{path}: corrupt translator file (network settings: {err})") from err
        self.name = name
        self.path = str(path)
        self.meta = meta
        self.arch = self.net.arch
        self.style_dim = self.net.style_dim if self.arch == "munit" else 0
        try:
            self.load_size = int(meta.get("load_size") or meta.get("size") or 128)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{path}: corrupt translator file (load_size {meta.get('load_size')!r})") from err
        if self.load_size < self.net.multiple:
            raise ModelError(f"{path}: corrupt translator file (load_size {self.load_size} is smaller than the "
                             f"encoder stride {self.net.multiple})")
        self.device = device
        self.batch_size = max(1, int(batch_size))
        self.card = card
        self.weather = weather
        self.title = title or f"{self.arch.upper()} translator {name}"
        cfg = self.net
        from lidarmt._limits import check_memory
        from lidarmt.camera.translate.nets import parameter_count

        check_memory(4 * parameter_count(cfg), what=f"{path}: the translator its settings describe", error=ModelError)
        if self.arch == "munit":
            enc = ContentEncoder(cfg)
            parts: dict[str, Any] = {"enc_content": enc, "enc_style": StyleEncoder(cfg),
                                     "dec": AdaINDecoder(cfg, enc.out_dim), "enc_style_a": StyleEncoder(cfg)}
        else:
            layers, dim = _downsampler(cfg)
            private = cfg.n_res - 1
            parts = {"enc": torch.nn.Sequential(*layers, *[ResBlock(dim, "in") for _ in range(private)]),
                     "enc_shared": ResBlock(dim, "in"), "dec_shared": ResBlock(dim, "in"),
                     "dec": torch.nn.Sequential(*[ResBlock(dim, "in") for _ in range(private)],
                                                *_upsampler(dim, cfg))}
        self.parts = torch.nn.ModuleDict(parts)
        try:
            self.parts.load_state_dict(state, strict=True)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else "mismatch"
            raise ModelError(f"{path}: weights do not fit its own {self.arch} settings ({first})") from err
        self.parts.eval().to(device)
        self.parameters = int(sum(p.numel() for p in self.parts.parameters()))

    # -------------------------------------------------------------------------------------- geometry
    def work_size(self, h: int, w: int) -> tuple[int, int]:
        """The (height, width) a frame of (h, w) is translated at: short side ``load_size``, both sides
        rounded to multiples of the encoder stride."""
        m = self.net.multiple
        s = self.load_size / min(h, w)
        return max(m, round(h * s / m) * m), max(m, round(w * s / m) * m)

    def _to_tensor(self, images: np.ndarray) -> Any:
        import cv2
        import torch

        h, w = images.shape[1:3]
        th, tw = self.work_size(h, w)
        small = np.stack([cv2.resize(im, (tw, th), interpolation=cv2.INTER_AREA) for im in images])
        t = torch.from_numpy(small).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
        return t.to(self.device)

    @staticmethod
    def _from_tensor(t: Any, h: int, w: int) -> np.ndarray:
        import cv2

        arr = ((t.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
        return np.stack([cv2.resize(a, (w, h), interpolation=cv2.INTER_CUBIC) for a in arr])

    def _check(self, images: np.ndarray) -> np.ndarray:
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8 or 0 in images.shape[1:3]:
            raise ModelError(f"{self.name}: expected (N, H, W, 3) uint8 RGB frames, got {images.dtype} "
                             f"{images.shape}")
        return images

    def _styles(self, style: Any, n: int) -> np.ndarray:
        """``style`` as (n, style_dim) float32: one vector for all ``n`` frames or one row per frame, finite."""
        s = np.asarray(style, dtype=np.float32)
        if s.shape not in ((self.style_dim,), (n, self.style_dim)):
            raise ModelError(f"{self.name}: style must have shape ({self.style_dim},) or ({n}, {self.style_dim}), "
                             f"got {s.shape}")
        if not np.all(np.isfinite(s)):
            raise ModelError(f"{self.name}: the style vector has non-finite values")
        return np.array(np.broadcast_to(s, (n, self.style_dim)), dtype=np.float32)  # a writable copy

    # ----------------------------------------------------------------------------------------- styles
    def random_styles(self, n: int, seed: int) -> np.ndarray:
        """``n`` style vectors drawn from the prior N(0, I) with ``seed`` (float32, (n, style_dim))."""
        return np.random.default_rng(seed).standard_normal((n, self.style_dim)).astype(np.float32)

    def style_of(self, images: np.ndarray) -> np.ndarray:
        """The style codes of domain-B frames (MUNIT's style encoder), (N, style_dim): the style of a given
        weather picture, as DeepRoad-style single-style translation uses."""
        import torch

        if self.arch != "munit":
            raise ModelError(f"{self.name}: a UNIT translator has no style space")
        images = self._check(images)
        outs = []
        with torch.no_grad():
            for i in range(0, len(images), self.batch_size):
                t = self._to_tensor(images[i:i + self.batch_size])
                outs.append(self.parts["enc_style"](t).reshape(len(t), -1).float().cpu().numpy())
        return np.concatenate(outs)

    # ------------------------------------------------------------------------------------- translation
    def encode(self, images: np.ndarray) -> Any:
        """Content codes of frames (a torch tensor on the translator's device, (N, C, h, w))."""
        import torch

        images = self._check(images)
        if not len(images):
            raise ModelError(f"{self.name}: no frames to encode")
        outs = []
        with torch.no_grad():
            for i in range(0, len(images), self.batch_size):
                t = self._to_tensor(images[i:i + self.batch_size])
                if self.arch == "munit":
                    outs.append(self.parts["enc_content"](t))
                else:
                    outs.append(self.parts["enc_shared"](self.parts["enc"](t)))
        return torch.cat(outs)

    def decode(self, content: Any, style: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
        """Frames of (height, width) ``size`` from content codes and one style vector (or one per code);
        ``style`` is ignored by UNIT and must be given to MUNIT."""
        import torch

        h, w = size
        if not len(content):
            return np.empty((0, h, w, 3), np.uint8)
        styles = None
        if self.arch == "munit":
            if style is None:
                raise ModelError(f"{self.name}: MUNIT decoding needs a style vector")
            styles = self._styles(style, len(content))
        outs = []
        with torch.no_grad():
            for i in range(0, len(content), self.batch_size):
                c = content[i:i + self.batch_size].to(self.device)
                if styles is not None:
                    st = torch.from_numpy(styles[i:i + len(c)]).reshape(len(c), self.style_dim, 1, 1)
                    y = self.parts["dec"](c, st.to(self.device))
                else:
                    y = self.parts["dec"](self.parts["dec_shared"](c))
                outs.append(self._from_tensor(y, h, w))
        return np.concatenate(outs)

    def translate(self, images: np.ndarray, style: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
        """Domain-A frames → domain-B frames of the same size. MUNIT uses ``style`` (one vector for all frames
        or one per frame); without one it draws a style per frame from N(0, I) with ``seed``. UNIT ignores
        ``style`` and ``seed`` (its translation is deterministic)."""
        images = self._check(images)
        h, w = images.shape[1:3]
        if not len(images):
            return images.copy()
        if self.arch == "munit":
            style = self.random_styles(len(images), seed) if style is None else self._styles(style, len(images))
        return self.decode(self.encode(images), style, (h, w))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "style_dim": self.style_dim, "load_size": self.load_size,
                "parameters": self.parameters, "iterations": self.meta.get("iterations"), "weights": self.path,
                "card": self.card, "weather": self.weather, "title": self.title, "net": self.net.to_dict()}

    def __repr__(self) -> str:
        return f"LearnedTranslator({self.name!r}, {self.arch}, style_dim={self.style_dim}, device={self.device!r})"
