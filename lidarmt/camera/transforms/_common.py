"""What every built-in transformation shares: parameter checking, seeded random streams, image checks.

A built-in transformation subclasses :class:`BaseTransform` and writes ``_apply(image, params, rng_factory)``;
the base class checks the image and the parameters (unknown or missing names, values outside ``space``,
non-finite numbers: :class:`~lidarmt.camera.errors.TransformError`), fills the optional parameters with their
defaults or, for weather style parameters, with values drawn from the seed, and guarantees that the caller's
array is never written to.

Random numbers come from NumPy Generators seeded with ``(seed, crc32(name), stream)``: the same seed gives the
same bytes on every run, each transformation gets its own stream (fog and rain with seed 3 are unrelated),
and the style parameters are drawn from a stream of their own, always all of them in a fixed order, so giving
one style parameter explicitly does not change the values drawn for the others.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms.base import ParamRange

#: Stream numbers of the Generators a transformation gets from ``rng(stream)``.
STYLE_STREAM = 0
TEXTURE_STREAM = 1
NOISE_STREAM = 2

RngFactory = Callable[[int], np.random.Generator]


def check_seed(seed: Any, name: str) -> int:
    """``seed`` as a non-negative Python int, or a TransformError naming the transformation."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TransformError(f"seed of transformation {name!r} must be an integer; got {seed!r}")
    seed = int(seed)
    if seed < 0:
        raise TransformError(f"seed of transformation {name!r} must be >= 0; got {seed}")
    return seed


def rng_factory(seed: int, name: str) -> RngFactory:
    """Generators for ``(seed, transformation, stream)``; see the module docstring. The factory carries a
    ``cache`` for :func:`once` (one per :meth:`BaseTransform.apply`, one per window in
    :meth:`BaseTransform.apply_same`)."""
    key = zlib.crc32(name.encode())

    def make(stream: int) -> np.random.Generator:
        return np.random.default_rng([seed, key, stream])

    make.cache = {}  # type: ignore[attr-defined]
    return make


def once(rng: RngFactory, key: Any, build: Callable[[], Any]) -> Any:
    """``build()``, made once per factory: what a transformation computes from its parameters, seed and the
    image's size alone (a weather's noise field, streak layer, drop map), shared by the frames of a window.

    ``build`` must not look at the image, and a Generator it uses (``rng(stream)``) must not be used outside
    it: then reusing its result gives the same bytes as computing it again. Callers must not write into what
    it returns (it is shared)."""
    cache = getattr(rng, "cache", None)
    if cache is None:
        return build()
    if key not in cache:
        cache[key] = build()
    return cache[key]


def check_image(image: Any, name: str) -> np.ndarray:
    """The image as a C-contiguous (H, W, 3) uint8 array (the caller's own array when it already is one)."""
    if not isinstance(image, np.ndarray):
        raise TransformError(
            f"transformation {name!r} needs a NumPy (H, W, 3) uint8 RGB image; got {type(image).__name__}"
        )
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise TransformError(
            f"transformation {name!r} needs an (H, W, 3) uint8 RGB image; got shape {image.shape} "
            f"dtype {image.dtype} (convert with np.asarray(img, np.uint8) or cv2.cvtColor first)"
        )
    if image.shape[0] < 2 or image.shape[1] < 2:
        raise TransformError(
            f"transformation {name!r} needs an image of at least 2x2 pixels; got {image.shape}"
        )
    return np.ascontiguousarray(image)


def _fmt(v: float) -> str:
    return f"{v:g}"


class BaseTransform:
    """A transformation with declared parameters; subclasses set the class attributes and ``_apply``.

    * ``required``: parameter names a setting must give (DeepTest's simple transformations: their one knob;
      weather: ``intensity``).
    * ``defaults``: optional parameters and their values when absent (e.g. shear's ``sy = 0``).
    * ``style``: optional parameters drawn uniformly from ``space`` with the seed when absent (weather).
    * ``space``: the range of every numeric parameter; values outside are refused.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = "simple"
    relation: ClassVar[str] = "keep"
    description: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[Mapping[str, float]] = {}
    style: ClassVar[tuple[str, ...]] = ()
    space: Mapping[str, ParamRange] = {}
    grid: Sequence[Mapping[str, Any]] = ()

    def __repr__(self) -> str:
        return f"<transform {self.name} ({self.family}, {self.relation}, {len(self.grid)} settings)>"

    # -- parameters ------------------------------------------------------------------------------------------

    def _value(self, key: str, value: Any) -> float:
        rng = self.space[key]
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise TransformError(
                f"parameter {key}={value!r} of transformation {self.name!r} must be a number "
                f"in [{_fmt(rng.low)}, {_fmt(rng.high)}]"
            )
        v = float(value)
        if not math.isfinite(v) or not (rng.low <= v <= rng.high):
            raise TransformError(
                f"parameter {key}={value!r} of transformation {self.name!r} is out of range; "
                f"give a value in [{_fmt(rng.low)}, {_fmt(rng.high)}]"
            )
        if rng.integer:
            if v != round(v):
                raise TransformError(
                    f"parameter {key}={value!r} of transformation {self.name!r} must be an integer "
                    f"in [{_fmt(rng.low)}, {_fmt(rng.high)}]"
                )
            return int(round(v))
        return v

    def resolve(self, params: Mapping[str, Any] | None, seed: int = 0) -> dict[str, Any]:
        """The complete, checked parameter setting that ``apply(image, params, seed)`` uses.

        Missing optional parameters get their defaults; missing style parameters are drawn from the seed.
        Campaigns journal this dict, so that a result can be reproduced from it alone.
        """
        seed = check_seed(seed, self.name)
        params = {} if params is None else params
        if not isinstance(params, Mapping):
            raise TransformError(
                f"parameters of transformation {self.name!r} must be a mapping such as {dict(self.grid[0])}; "
                f"got {type(params).__name__}"
            )
        known = set(self.space) | set(self.required) | set(self.defaults) | set(self.style)
        unknown = sorted(str(k) for k in params if k not in known)
        if unknown:
            raise TransformError(
                f"unknown parameter(s) {', '.join(unknown)} of transformation {self.name!r}; "
                f"known: {', '.join(sorted(known)) or 'none'}"
            )
        missing = [k for k in self.required if k not in params]
        if missing:
            raise TransformError(
                f"transformation {self.name!r} needs parameter(s) {', '.join(missing)}; "
                f"e.g. {dict(self.grid[-1])}"
            )
        out: dict[str, Any] = {k: self._value(k, params[k]) for k in self.required}
        for k, v in self.defaults.items():
            out[k] = self._value(k, params[k]) if k in params else v
        if self.style:
            draw = np.random.default_rng([seed, zlib.crc32(self.name.encode()), STYLE_STREAM])
            u = draw.random(len(self.style))  # always every style value, in order: see the module docstring
            for k, ui in zip(self.style, u, strict=True):
                if k in params:
                    out[k] = self._value(k, params[k])
                else:
                    r = self.space[k]
                    v = r.low + float(ui) * (r.high - r.low)
                    out[k] = int(math.floor(v + 0.5)) if r.integer else v
        return out

    # -- application -----------------------------------------------------------------------------------------

    def apply(self, image: np.ndarray, params: Mapping[str, Any], seed: int = 0) -> np.ndarray:
        """The transformed image: a new (H, W, 3) uint8 RGB array; ``image`` is left untouched."""
        img = check_image(image, self.name)
        p = self.resolve(params, seed)
        return self._own(image, img, self._apply(img, p, rng_factory(int(seed), self.name)))

    def apply_same(self, images: Sequence[np.ndarray], params: Mapping[str, Any], seed: int = 0) -> np.ndarray:
        """``np.stack([apply(im, params, seed) for im in images])``, byte for byte, with what depends only on
        the setting, the seed and the image size (:func:`once`: a weather's layers) made once for all the
        images (the frames of a model's window; see :func:`~lidarmt.camera.transforms.base.apply_window`)."""
        if len(images) == 0:
            raise TransformError(f"transformation {self.name!r} got no images")
        check_image(images[0], self.name)  # the same error, first, as apply() on the first frame
        p = self.resolve(params, seed)
        rng = rng_factory(int(seed), self.name)
        outs = []
        for image in images:
            img = check_image(image, self.name)
            outs.append(self._own(image, img, self._apply(img, p, rng)))
        return np.stack(outs)

    @staticmethod
    def _own(image: np.ndarray, img: np.ndarray, out: np.ndarray) -> np.ndarray:
        if out is img or out is image or np.shares_memory(out, image):  # never hand back the caller's buffer
            out = out.copy()
        return out

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        raise NotImplementedError

    def label(self, params: Mapping[str, Any]) -> str:
        return f"{self.name} " + " ".join(f"{k}={_fmt(float(v))}" for k, v in params.items())


# -- numeric helpers shared by the weather effects -----------------------------------------------------------


def to_float(image: np.ndarray) -> np.ndarray:
    """uint8 → float32 in [0, 1]."""
    return image.astype(np.float32) * np.float32(1.0 / 255.0)


def to_uint8(f: np.ndarray) -> np.ndarray:
    """float32 in [0, 1] (values outside are clipped) → uint8, rounding to nearest."""
    g = np.clip(f, 0.0, 1.0)
    g *= 255.0
    g += 0.5
    return g.astype(np.uint8)


_SRGB_TO_LINEAR = np.where(
    (c := np.arange(256) / 255.0) <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4
).astype(np.float32)
_LINEAR_LUT_SIZE = 4096
_LINEAR_TO_SRGB = np.round(
    255.0 * np.where((x := np.linspace(0.0, 1.0, _LINEAR_LUT_SIZE)) <= 0.0031308, 12.92 * x,
                     1.055 * x ** (1 / 2.4) - 0.055)
).astype(np.uint8)


def srgb_to_linear(image: np.ndarray) -> np.ndarray:
    """uint8 sRGB → a new float32 array of linear light in [0, 1] (IEC 61966-2-1, by table)."""
    import cv2

    return cv2.LUT(image, _SRGB_TO_LINEAR)


def linear_to_srgb(lin: np.ndarray) -> np.ndarray:
    """float32 linear light (clipped to [0, 1]) → uint8 sRGB, through a 4096-entry table."""
    idx = np.clip(lin, 0.0, 1.0)
    idx *= _LINEAR_LUT_SIZE - 1
    idx += 0.5
    return _LINEAR_TO_SRGB[idx.astype(np.intp)]


def smooth_noise(rng: np.random.Generator, h: int, w: int, *, cells: int = 6, octaves: int = 3,
                 add_octave: Any = None) -> np.ndarray:
    """A smooth random field in [0, 1] of shape (h, w): value noise, ``octaves`` bicubically upsampled grids.

    The coarsest grid has ``cells`` cells across the longer side; each octave doubles the cells and halves
    the amplitude (a fractal sum, the usual model of heterogeneous fog density; Tarel et al. 2012).
    ``add_octave(grid, amp, acc)`` adds ``amp`` times the grid upsampled to (h, w) to ``acc`` in place (default:
    ``cv2.resize``'s bicubic; the batched implementation passes a kernel with the same taps).
    """
    if add_octave is None:
        import cv2

        def add_octave(grid: np.ndarray, amp: float, acc: np.ndarray) -> None:
            acc += amp * cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)

    acc = np.zeros((h, w), np.float32)
    amp, total = 1.0, 0.0
    n = cells
    for _ in range(octaves):
        gh = max(2, int(round(n * h / max(h, w))) + 1)
        gw = max(2, int(round(n * w / max(h, w))) + 1)
        grid = rng.random((gh, gw), dtype=np.float32)
        add_octave(grid, amp, acc)
        total += amp
        amp *= 0.5
        n *= 2
    acc /= total
    lo, hi = float(acc.min()), float(acc.max())
    if hi > lo:
        acc -= lo
        acc *= 1.0 / (hi - lo)
    else:
        acc[:] = 0.5
    return acc


def ground_depth(h: int, w: int, horizon: float, *, far: float, camera_height: float = 1.5,
                 hfov_deg: float = 60.0) -> np.ndarray:
    """Depth proxy (metres) per image row, shape (h, 1): a flat ground seen by a level pinhole camera.

    A ground point imaged ``v - v_h`` rows below the horizon row ``v_h = horizon * h`` lies at distance
    ``d = camera_height * f / (v - v_h)`` with ``f = (w / 2) / tan(hfov / 2)`` pixels; rows at or above the
    horizon (sky, far objects) and ground beyond ``far`` get ``far``. The Udacity camera's horizon lies near
    0.55-0.6 of the height, its field of view is about 60 degrees.
    """
    f = (w / 2.0) / math.tan(math.radians(hfov_deg) / 2.0)
    rows = np.arange(h, dtype=np.float64) + 0.5 - horizon * h
    with np.errstate(divide="ignore"):
        d = np.where(rows > 0, camera_height * f / np.maximum(rows, 1e-9), far)
    return np.minimum(d, far).astype(np.float32).reshape(h, 1)
