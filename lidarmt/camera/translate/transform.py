"""A translator as an image transformation: ``lidarmt camera fuzz --transforms munit-night``.

:class:`TranslatorTransform` wraps any translator spec that :func:`lidarmt.camera.translate.registry.get_translator`
accepts (a shipped name, a plug-in, the path of a ``translator.pt``, ``package.module:callable``) in the
:class:`~lidarmt.camera.transforms.base.Transform` protocol, in the family ``"translator"`` with the relation
``"keep"`` (the weather must not change the steering angle: DeepRoad's relation).

* ``grid``: one setting, ``{}``: the style is drawn from the translator's prior N(0, I) with the pair's
  transformation seed (the campaign's per-(frame, setting, trial) seed), so ``--trials`` gives different
  styles, and every image is reproducible from the seed tuple alone. A unimodal (UNIT) translator ignores it.
* ``space`` (searches): ``s0 .. s{d-1}`` in [-3, 3] for a translator with a style vector of length d (MUNIT);
  a setting that gives all of them pins the style (a parameter left out is drawn from the prior with the seed,
  as with the weather's style parameters). Empty for UNIT: there is nothing to search.
* The translator is built on first use in each process (a campaign's worker builds its own), on the device the
  campaign gives (``with_options(device=...)``: the steering model's ``--device``), and shared by every
  campaign of the process that asks for the same spec on the same device.
* :meth:`apply_batch` translates a window of frames (a model with history) in one call with one style, and the
  content codes of the last few inputs are cached, so the trials of one frame cost one encoder pass and a
  decoder pass each. :meth:`apply` is ``apply_batch`` of one frame. Translating a window in one batch and
  frame by frame may differ in the last bit on some CPUs: campaigns, searches and replay all go through
  :func:`lidarmt.camera.transforms.base.apply_window`, which makes the batch call.
* :meth:`provenance`: the spec, the kind of spec and the SHA-256 of the weights file (shipped and path
  translators), which bug bundles record and replay checks.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms.base import ParamRange

STYLE_BOUND = 3.0  # a style coordinate's search range: ±3 standard deviations of the prior N(0, 1)
_CACHE_SIZE = 4  # content codes kept per translator (the trials of a frame, a window, a few seeds)

_loaded: dict[tuple[Any, ...], Any] = {}  # (spec, device, weights file, its stamp) -> translator, per process
_lock = threading.Lock()


def style_names(d: int) -> list[str]:
    return [f"s{i}" for i in range(d)]


def prior_style(d: int, seed: int) -> np.ndarray:
    """The style vector drawn from N(0, I) with ``seed`` (the same draw as ``LearnedTranslator.random_styles(1,
    seed)[0]``)."""
    return np.random.default_rng(int(seed)).standard_normal((1, d)).astype(np.float32)[0]


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_translator(spec: str, device: str = "cpu", *, trust_code: bool = True) -> Any:
    """The translator ``spec`` names on ``device``, built once per process (see the module docstring)."""
    from lidarmt.camera.translate.registry import get_translator, kind_of

    if kind_of(spec) == "code" and not trust_code:  # the gate holds even when it was built before
        return get_translator(spec, trust_code=False, device=device)
    w = weights_path(spec)  # a weights file replaced in place (retrained, another WEIGHTS_DIR) is read again
    st = w.stat() if w is not None and w.is_file() else None
    key = (spec, device, str(w.resolve()) if w is not None else "",
           (st.st_mtime_ns, st.st_size) if st is not None else None)
    with _lock:
        got = _loaded.get(key)
        if got is None:
            got = _loaded[key] = get_translator(spec, trust_code=trust_code, device=device)
        return got


def weights_path(spec: str) -> Path | None:
    """The weights file of a shipped or path translator, None for plug-ins and code."""
    from lidarmt.camera.translate.registry import WEIGHTS_DIR, kind_of

    kind = kind_of(spec)
    if kind == "builtin":
        return WEIGHTS_DIR / f"{spec}.pt"
    if kind == "path":
        return Path(spec)
    return None


class TranslatorTransform:
    """A translator spec as a Transformation (family ``"translator"``, relation ``"keep"``)."""

    family = "translator"
    relation = "keep"

    def __init__(self, spec: str, *, device: str = "cpu", trust_code: bool = True) -> None:
        self.name = str(spec).strip()
        self.device = str(device)
        self.trust_code = bool(trust_code)
        self.grid: tuple[Mapping[str, Any], ...] = ({},)
        self._codes: OrderedDict[tuple[str, tuple[int, ...]], Any] = OrderedDict()

    def __repr__(self) -> str:
        return f"<transform {self.name} (translator, keep, 1 setting, {self.device})>"

    def with_options(self, *, device: str | None = None, trust_code: bool | None = None) -> TranslatorTransform:
        """The same translator on another device (or behind the trust gate)."""
        return TranslatorTransform(self.name, device=self.device if device is None else device,
                                   trust_code=self.trust_code if trust_code is None else trust_code)

    # ------------------------------------------------------------------------------------- the translator
    @property
    def translator(self) -> Any:
        return load_translator(self.name, self.device, trust_code=self.trust_code)

    @property
    def style_dim(self) -> int:
        return int(getattr(self.translator, "style_dim", 0) or 0)

    @property
    def arch(self) -> str:
        return str(getattr(self.translator, "arch", ""))

    @property
    def space(self) -> dict[str, ParamRange]:
        return {n: ParamRange(-STYLE_BOUND, STYLE_BOUND) for n in style_names(self.style_dim)}

    @property
    def description(self) -> str:
        t = self.translator
        what = f"learned {getattr(t, 'weather', '') or 'translation'}"
        if self.style_dim:
            return (f"{what}: {str(t.arch).upper()}, style s0..s{self.style_dim - 1} in [-{STYLE_BOUND:g}, "
                    f"{STYLE_BOUND:g}] drawn from the seed")
        return f"{what}: {str(t.arch).upper()}, one output per frame"

    def provenance(self) -> dict[str, Any]:
        """What a bug bundle records about the translator: spec, kind, weights' SHA-256, arch, style length."""
        from lidarmt.camera.translate.registry import kind_of

        w = weights_path(self.name)
        return {"spec": self.name, "kind": kind_of(self.name), "device": self.device,
                "sha256": sha256_of(w) if w is not None and w.is_file() else None,
                "arch": self.arch, "style_dim": self.style_dim}

    # ------------------------------------------------------------------------------------- parameters
    def style(self, params: Mapping[str, Any] | None, seed: int) -> np.ndarray | None:
        """The style vector a setting gives (None for a unimodal translator): the prior's draw with ``seed``,
        with the coordinates the setting names replaced by their values."""
        params = dict(params or {})
        d = self.style_dim
        names = style_names(d)
        unknown = sorted(set(params) - set(names))
        if unknown:
            want = f"s0..s{d - 1} in [-{STYLE_BOUND:g}, {STYLE_BOUND:g}]" if d else "no parameter (UNIT)"
            raise TransformError(f"translator {self.name!r} has no parameter {', '.join(unknown)}; give {want}")
        if d == 0:
            return None
        s = prior_style(d, seed)
        for i, n in enumerate(names):
            if n in params:
                v = params[n]
                if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) or not (
                        -STYLE_BOUND <= float(v) <= STYLE_BOUND):
                    raise TransformError(f"parameter {n}={v!r} of translator {self.name!r}: give a number in "
                                         f"[-{STYLE_BOUND:g}, {STYLE_BOUND:g}]")
                s[i] = np.float32(v)
        return s

    def resolve(self, params: Mapping[str, Any] | None, seed: int = 0) -> dict[str, Any]:
        """The complete setting used: every style coordinate (MUNIT), nothing for UNIT."""
        s = self.style(params, seed)
        return {} if s is None else {n: float(v) for n, v in zip(style_names(len(s)), s, strict=True)}

    def label(self, params: Mapping[str, Any]) -> str:
        """``munit-night`` (the campaign's setting: the style from the seed) or ``munit-night s=(+0.12, ...)``
        (without building the translator)."""
        if not params:
            return self.name
        keys = sorted((k for k in params if k[1:].isdigit()), key=lambda k: int(k[1:]))
        return f"{self.name} s=({', '.join(f'{float(params[k]):+.2f}' for k in keys)})"

    # ------------------------------------------------------------------------------------- translation
    def encode(self, images: np.ndarray) -> Any:
        """Content codes of ``images`` (cached by content for the last few calls); None when the translator
        cannot split its work (a plug-in without ``encode``/``decode``)."""
        t = self.translator
        if not (callable(getattr(t, "encode", None)) and callable(getattr(t, "decode", None))):
            return None
        images = np.ascontiguousarray(images)
        key = (hashlib.blake2b(images.tobytes(), digest_size=16).hexdigest(), images.shape)
        got = self._codes.get(key)
        if got is None:
            got = self._codes[key] = t.encode(images)
            while len(self._codes) > _CACHE_SIZE:
                self._codes.popitem(last=False)
        else:
            self._codes.move_to_end(key)
        return got

    def decode(self, content: Any, style: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
        return self.translator.decode(content, style, size)

    def apply_batch(self, images: np.ndarray, params: Mapping[str, Any], seed: int) -> np.ndarray:
        """(T, H, W, 3) uint8 RGB frames (a model's window) translated with one style; a new array."""
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise TransformError(f"translator {self.name!r} needs (T, H, W, 3) uint8 RGB frames; got "
                                 f"{images.dtype} {images.shape}")
        style = self.style(params, seed)
        content = self.encode(images)
        if content is not None:
            out = self.decode(content, style, images.shape[1:3])
        else:
            s = None if style is None else np.broadcast_to(style, (len(images), len(style)))
            out = np.asarray(self.translator.translate(images, style=s, seed=int(seed)))
        if out.shape != images.shape or out.dtype != np.uint8:
            raise TransformError(f"translator {self.name!r} returned {out.dtype} {out.shape} for {images.shape} "
                                 "frames; a translator keeps the frames' size and type")
        return out

    def apply(self, image: np.ndarray, params: Mapping[str, Any], seed: int) -> np.ndarray:
        """One (H, W, 3) uint8 RGB frame translated (``apply_batch`` of one frame)."""
        image = np.asarray(image)
        if image.ndim != 3:
            raise TransformError(f"translator {self.name!r} needs an (H, W, 3) uint8 RGB image; got {image.shape}")
        return self.apply_batch(image[None], params, seed)[0]

