"""The batched implementation of the built-in camera transformations, beside the reference one.

A transformation has two implementations, named by :data:`IMPLEMENTATIONS`:

* ``"reference"``: the code in :mod:`.simple`, :mod:`.weather` and :mod:`.optics` (``transform.apply``), which
  every bundle made before implementations were recorded used, and which stays the definition;
* ``"batched-v1"`` (:data:`BATCHED`): the same models, made faster for campaigns — a transformation's settings
  for one seed window are made in one call (:func:`apply_settings`), each image by fused numba kernels
  (:mod:`._batched_kernels`) that read the weathers' layers as row and column profiles or (H, W) maps instead of
  (H, W, 3) ones, with the same random draws as the reference (the same Generators, streams and order), so the
  same style, streaks, flakes, drops and ghosts.

What batched-v1 changes, transformation by transformation (``tests/test_camera_batched.py`` states and checks
each tolerance against the reference; docs/camera-batched.md explains them):

* contrast: a 256-entry table made by the reference operation itself (``cv2.LUT``): identical bytes;
* translation: whole-pixel shifts (every setting of DeepTest's grid) copied: identical; fractional ones by the
  reference;
* brightness, blur, mirror, rotation, shear, scale: the reference's OpenCV calls, which are already the fast path
  on a CPU (a saturating SIMD add, OpenCV's filters and fixed-point warps; numba versions of the warps measured
  slower): identical;
* fog, rain, snow, glare, droplets, dirt: fused kernels; float32 in the reference's order, ``exp``/``sqrt``
  compiled by LLVM rather than NumPy's SIMD loops, snow's flakes splatted as patches rather than filtered layers,
  the fractal noise's bicubic upsampling by a kernel rather than ``cv2.resize``: a grey level on a few pixels;
* night: fused as the others, and its sensor noise — 230,400 fresh normal draws per image in the reference, most
  of its cost — is read from a fixed field of standard normal values (drawn once per process from a fixed seed) at
  an offset, channel rotation and sign drawn from the pair's seed: the same distribution per pixel, another
  realisation; with the reference's noise given, the kernel matches the reference within a grey level.

The implementation a campaign uses is recorded in its journal (the configuration's ``transform_impl``) and in
every bundle (``transform_impl`` in bundle.json); a journal or bundle without it used the reference. Determinism:
for one implementation, the same (image, setting, seed) give the same bytes run to run on one machine.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms._common import (
    _LINEAR_TO_SRGB,
    _SRGB_TO_LINEAR,
    NOISE_STREAM,
    TEXTURE_STREAM,
    BaseTransform,
    RngFactory,
    check_image,
    ground_depth,
    once,
    rng_factory,
    to_float,
)
from lidarmt.camera.transforms.base import apply_window as reference_window

REFERENCE = "reference"
BATCHED = "batched-v1"
#: the implementations this version knows, oldest first
IMPLEMENTATIONS = (REFERENCE, BATCHED)
#: what new campaigns use
CURRENT = BATCHED

#: How far batched-v1's pixels may lie from the reference's (grey levels, max |difference|), by transformation;
#: measured over every grid setting, 18 seeds and three images (a Udacity frame at 320×240 and 160×120, 57×83
#: random bytes): 0 where the batched code is the reference's or a table made by it, 1 (on at most 0.01 % of the
#: pixels) where fused float32 kernels round differently. None: not comparable pixel by pixel (night's noise is
#: another realisation; with the reference's noise given, its kernel is within 1: ``night_kernel``).
TOLERANCE: dict[str, int | None] = {
    "brightness": 0, "contrast": 0, "translation": 0, "scale": 0, "shear": 0, "rotation": 0, "blur": 0,
    "mirror": 0, "fog": 1, "rain": 1, "snow": 1, "glare": 1, "droplets": 1, "dirt": 1, "night": None,
}

FastApply = Callable[[np.ndarray, dict[str, Any], RngFactory, dict], np.ndarray]


def check_implementation(name: Any, *, error: type[Exception] = TransformError) -> str:
    """``name`` when it is a known implementation, else ``error`` with one line naming the known ones."""
    if name not in IMPLEMENTATIONS:
        raise error(f"transformation implementation {name!r} is not one this version of lidarmt knows; known: "
                    f"{', '.join(IMPLEMENTATIONS)}")
    return str(name)


def has_batched(transform: Any) -> bool:
    """Whether ``transform`` is a built-in with a batched implementation (plug-ins, translators and follow-ups
    made elsewhere have only their own)."""
    return (isinstance(transform, BaseTransform) and type(transform).__module__.startswith("lidarmt.camera.transforms.")
            and transform.name in _FAST)


def apply_window(transform: Any, window: np.ndarray, params: Mapping[str, Any], seed: int,
                 implementation: str = REFERENCE) -> np.ndarray:
    """:func:`lidarmt.camera.transforms.base.apply_window` with the implementation named: the reference, or
    batched-v1 for the built-ins that have it (the reference for the others)."""
    if implementation == REFERENCE or not has_batched(transform):
        return reference_window(transform, window, params, seed)
    return apply_settings(transform, window, [(params, seed)], implementation)[0]


def apply_settings(transform: Any, window: np.ndarray, settings: Sequence[tuple[Mapping[str, Any], int]],
                   implementation: str = BATCHED) -> list[np.ndarray]:
    """Every setting ``(params, seed)`` of one transformation applied to a (T, H, W, 3) window: one (T, H, W, 3)
    uint8 array per setting, as :func:`apply_window` gives them one by one. What depends only on a setting and its
    seed (a weather's layers) is made once per window, as in the reference."""
    check_implementation(implementation)
    if implementation == REFERENCE or not has_batched(transform):
        return [reference_window(transform, window, params, seed) for params, seed in settings]
    window = np.asarray(window)
    if window.ndim != 4 or len(window) == 0:
        raise TransformError(f"transformation {transform.name!r} needs a (T, H, W, 3) window; got shape "
                             f"{window.shape}")
    frames = [check_image(img, transform.name) for img in window]
    fast = _FAST[transform.name]
    shared: list[dict] = [{} for _ in frames]  # per frame, what every setting makes alike from the image alone
    outs = []
    for params, seed in settings:
        p = transform.resolve(params, seed)
        rng = rng_factory(int(seed), transform.name)
        if p.get("intensity", 1.0) == 0.0 and transform.family == "weather":
            outs.append(np.stack([img.copy() for img in frames]))
            continue
        made = [fast(img, p, rng, shared[f]) for f, img in enumerate(frames)]
        outs.append(made[0][None] if len(made) == 1 else np.stack(made))
    return outs


# -- simple transformations -----------------------------------------------------------------------------------

_LUTS: dict[tuple[str, float], np.ndarray] = {}
_LUT_LOCK = threading.Lock()


def _table(kind: str, v: float) -> np.ndarray:
    """The 256-entry table of brightness β or contrast α, made by the reference's own OpenCV call on 0..255."""
    key = (kind, float(v))
    lut = _LUTS.get(key)
    if lut is None:
        import cv2

        ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
        lut = (cv2.add(ramp, (v, 0, 0, 0)) if kind == "b" else cv2.multiply(ramp, (v, 0, 0, 0))).reshape(256)
        with _LUT_LOCK:
            if len(_LUTS) > 4096:
                _LUTS.clear()
            _LUTS[key] = lut
    return lut


def _lut(kind: str, key: str) -> FastApply:
    def run(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
        import cv2

        return cv2.LUT(image, _table(kind, p[key]))

    return run


def _translation(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    """A shift by whole pixels is a copy (what OpenCV's bilinear warp gives at whole-pixel positions); a
    fractional one is the reference's warp."""
    tx, ty = p["tx"], p["ty"]
    if tx != round(tx) or ty != round(ty):
        return _reference("translation")(image, p, rng, shared)
    dx, dy = int(round(tx)), int(round(ty))
    h, w = image.shape[:2]
    out = np.zeros_like(image)
    if abs(dx) < w and abs(dy) < h:
        out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
            image[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


def _reference(name: str) -> FastApply:
    """The reference ``_apply`` of a built-in (blur, mirror): OpenCV's filters are the fast path already."""
    def run(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
        from lidarmt.camera.transforms.registry import get_transform

        return get_transform(name)._apply(image, p, rng)

    return run


# -- weather --------------------------------------------------------------------------------------------------

_SCRATCH = threading.local()
#: what one thread's scratch arrays may hold before they are dropped and made again (bytes)
SCRATCH_BYTES = 64 << 20


def _scratch(tag: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """The calling thread's own uninitialised array for a temporary ``tag`` of this shape and type, the same one
    call after call: a weather's intermediate images (~1 MB each at 320×240) made afresh for every image cost more
    in page faults than in arithmetic, as malloc hands large blocks back to the system when they are freed. Only
    for what a function uses and drops before it returns (never what it returns or :func:`once` keeps). Tags name
    a role (``f3a``: a first (H, W, 3) float32 image, ``f1a``: a first (H, W) map, ``u3a``: a uint8 image), shared
    by the transformations, which run one at a time in a thread: a layer builder a transformation calls uses only
    tags in which the transformation holds nothing live at that point (droplets: its film in ``f3a``, its drops'
    builder ``f1a``–``f1d``).
    Per thread, so the prefetch pool's threads never share one, and bounded (:data:`SCRATCH_BYTES`)."""
    pool = getattr(_SCRATCH, "pool", None)
    if pool is None:
        pool = _SCRATCH.pool = {}
    key = (tag, shape, np.dtype(dtype).char)
    a = pool.get(key)
    if a is None:
        a = np.empty(shape, dtype)
        if sum(b.nbytes for b in pool.values()) + a.nbytes > SCRATCH_BYTES:
            pool.clear()
        pool[key] = a
    return a


def _cubic_taps(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output index along one axis, the four source indices and weights of ``cv2.resize(...,
    INTER_CUBIC)``: source position (i + 0.5)·n_in/n_out − 0.5, Keys' kernel with A = −0.75, indices clamped to
    the edge."""
    a = -0.75
    scale = n_in / n_out
    idx = np.empty((n_out, 4), np.int64)
    wts = np.empty((n_out, 4), np.float32)
    for i in range(n_out):
        f = (i + 0.5) * scale - 0.5
        s = math.floor(f)
        t = f - s
        c0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
        c1 = ((a + 2) * t - (a + 3)) * t * t + 1
        c2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
        for k, c in enumerate((c0, c1, c2, 1.0 - c0 - c1 - c2)):
            idx[i, k] = min(max(s - 1 + k, 0), n_in - 1)
            wts[i, k] = c
    return idx, wts


_TAPS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _taps(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    got = _TAPS.get((n_out, n_in))
    if got is None:
        got = _TAPS[(n_out, n_in)] = _cubic_taps(n_out, n_in)
    return got


def smooth_noise_fast(rng: np.random.Generator, h: int, w: int, *, cells: int = 6,
                      octaves: int = 3) -> np.ndarray:
    """:func:`lidarmt.camera.transforms._common.smooth_noise` with the same draws, each octave's bicubic
    upsampling done by a numba kernel with ``cv2.resize``'s taps (rows, then columns) and added in place: the same
    field to float32 rounding."""
    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms._common import smooth_noise

    def add_octave(grid: np.ndarray, amp: float, acc: np.ndarray) -> None:
        K.upsample_add(grid, *_taps(h, grid.shape[0]), *_taps(w, grid.shape[1]), np.float32(amp), acc)

    return smooth_noise(rng, h, w, cells=cells, octaves=octaves, add_octave=add_octave)


def _f32(v: float) -> np.float32:
    return np.float32(v)


def _fog(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    i = p["intensity"]

    def layers() -> tuple[np.ndarray, np.ndarray]:
        d = ground_depth(h, w, p["horizon"], far=p["far"])[:, 0].copy()
        n = smooth_noise_fast(rng(TEXTURE_STREAM), h, w, cells=4, octaves=3)
        return n, d

    n, d = once(rng, ("fog", h, w), layers)
    beta = 3.912 * i**1.5 / p["visibility"]
    tint = 0.04 * p["tint"]
    air = (np.array([1.0 - tint, 1.0, 1.0 + tint]) * p["airlight"]).astype(np.float32)
    out = np.empty_like(image)
    K.fog_u8(image, n, d, _f32(2.0 * p["patchiness"]), _f32(1.0 - p["patchiness"]), _f32(-beta), air, out)
    return out


def rain_layers(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
    """:func:`lidarmt.camera.transforms.weather.rain_alpha` with the same draws and the same OpenCV calls, the
    layers drawn and blurred in the thread's scratch arrays and taken into the opacity by a kernel (the same
    float32 products, maxima and minimum): the same bytes."""
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms.weather import _line_kernel_streaks, rain_setup, rain_streak_layers

    i, s, g, area, angle, length = rain_setup(h, w, p, rng)
    alpha = np.zeros((h, w), np.float32)
    layer = _scratch("f1a", (h, w))
    blurred = _scratch("f1b", (h, w))
    for count, scale, thick, blur, opacity in rain_streak_layers(s):
        layer.fill(0.0)
        n = int(round(count * i * p["density"] * area))
        _line_kernel_streaks(layer, g, n, length * scale, angle + g.normal(0, 0.03), thick)
        blurred = cv2.GaussianBlur(layer, (0, 0), blur * s, dst=blurred)
        K.max_scaled(alpha, blurred, np.float32(opacity))
    np.minimum(alpha, np.float32(1.0), out=alpha)
    return alpha


def _rain(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    i = p["intensity"]
    s = h / 240.0
    dim = _f32(1.0 - 0.45 * i * p["darkness"])
    veil = 0.35 * i
    grey = float(K.mean_dimmed(image, dim))
    f = _scratch("f3a", image.shape)
    K.dim_veil(image, dim, _f32(1.0 - veil), _f32(veil * (0.5 * grey + 0.25)), f)
    fb = _scratch("f3b", image.shape)
    fb = cv2.GaussianBlur(f, (0, 0), 0.3 + 0.8 * i * s, dst=fb)
    alpha = once(rng, ("rain", h, w), lambda: rain_layers(h, w, p, rng))
    drop = (np.array([0.82, 0.84, 0.88]) * min(1.0, 0.75 + grey)).astype(np.float32)
    out = np.empty_like(image)
    K.blend_u8(fb, alpha, drop, out)
    return out


def _snow(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    i = p["intensity"]
    s = h / 240.0

    def layers() -> tuple[np.ndarray, np.ndarray]:  # the haze per row and the flakes' opacity (H, W)
        d = ground_depth(h, w, p["horizon"], far=60.0)[:, 0]
        t = np.exp(d * np.float32(-3.912 * i * i / p["visibility"]))
        haze = (1.0 - t).astype(np.float32)
        g = rng(TEXTURE_STREAM)
        area = h * w / (320.0 * 240.0)
        z = np.zeros((h, w), np.float32)
        scratch = np.empty((h, w), np.float32)
        fs = p["flake_size"] * s
        for count, sx, sy, opacity in ((1400, 0.55, 0.7, 0.75), (320, 1.1, 1.6, 0.85), (45, 2.6, 3.8, 0.6)):
            n = int(round(count * i * p["density"] * area))
            if n == 0:
                continue
            ys, xs = g.integers(0, h, n), g.integers(0, w, n)
            vals = g.uniform(0.6, 1.0, n).astype(np.float32)
            sgx, sgy = sx * fs, sy * fs
            kx = cv2.getGaussianKernel(2 * math.ceil(3 * sgx) + 1, sgx, cv2.CV_32F).ravel()
            ky = cv2.getGaussianKernel(2 * math.ceil(3 * sgy) + 1, sgy, cv2.CV_32F).ravel()
            norm = np.float32(1.0 / (float(kx.max()) * float(ky.max())))
            K.splat_max(z, ys.astype(np.int64), xs.astype(np.int64), vals, kx, ky, norm, np.float32(opacity),
                        scratch)
        return haze, z

    haze, z = once(rng, ("snow", h, w), layers)
    k = np.float32(0.35 * i)
    out = np.empty_like(image)
    K.snow_u8(image, np.float32(1.0 - k), np.float32(k * np.float32(0.78)), haze,
              np.array([0.9, 0.92, 0.95], np.float32), z, np.array([0.97, 0.97, 1.0], np.float32), out)
    return out


_BANK_SHAPE = (768, 1024, 3)
_BANK_SEED = 0x6E69676874  # "night"
_bank: np.ndarray | None = None
_bank_lock = threading.Lock()


def noise_bank() -> np.ndarray:
    """The fixed field of standard normal float32 values night's sensor noise is read from (drawn once per
    process, always from the same seed: the same values everywhere)."""
    global _bank
    if _bank is None:
        with _bank_lock:
            if _bank is None:
                bank = np.random.default_rng(_BANK_SEED).standard_normal(_BANK_SHAPE, dtype=np.float32)
                bank.flags.writeable = False
                _bank = bank
    return _bank


def night_layers(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> dict[str, Any]:
    """Night's layers as profiles: the illumination's rows and columns, the glow's separable terms, the colour
    matrix, and where the noise is read in the bank; the reference's draws in the reference's order."""
    from lidarmt.camera.transforms.weather import night_profiles

    i, s, ambient, fall, beam, shift = night_profiles(h, w, p)
    horizon = p["horizon"]
    g = rng(TEXTURE_STREAM)
    xs = np.arange(w, dtype=np.float32) + 0.5
    ys = np.arange(h, dtype=np.float32) + 0.5

    def gauss(u: np.ndarray, c: float, sigma: float) -> np.ndarray:
        return np.exp(-0.5 * ((u - np.float32(c)) / np.float32(sigma)) ** 2)

    hy = gauss(ys, 1.05 * h, 0.25 * h).astype(np.float32)
    hx = gauss(xs, w / 2.0, 0.32 * w).astype(np.float32)
    la, lxa, lb, lxb, col = [], [], [], [], []
    for _ in range(p["lamps"]):
        x, y = g.uniform(0.05, 0.95) * w, g.uniform(0.12, horizon - 0.08) * h
        colour = (1.0, 0.62, 0.28) if g.random() < 0.6 else (0.9, 0.95, 1.0)
        la.append(gauss(ys, y, 1.6 * s))
        lxa.append(gauss(xs, x, 1.6 * s) * np.float32(4.0 * i))
        lb.append(gauss(ys, y, 14.0 * s))
        lxb.append(gauss(xs, x, 14.0 * s) * np.float32(0.12 * i))
        col.append(colour)

    def rows(a: list, n: int) -> np.ndarray:
        return np.array(a, np.float32).reshape(len(a), n)

    bank = noise_bank()
    draw = rng(NOISE_STREAM)
    oy, ox, oc = (int(v) for v in draw.integers(0, (bank.shape[0], bank.shape[1], 3)))
    sign = np.float32(1.0 if draw.random() < 0.5 else -1.0)
    return {"shift": shift, "fall": fall, "beam": beam, "head_gain": np.float32(i * p["headlights"]),
            "ambient": np.float32(ambient), "blue": np.float32(p["blue"] * i), "hy": hy, "hx": hx,
            "hs": np.float32(0.05 * p["headlights"] * i), "hc": np.array([1.0, 0.97, 0.9], np.float32),
            "ly_a": rows(la, h), "lx_a": rows(lxa, w), "ly_b": rows(lb, h), "lx_b": rows(lxb, w),
            "lcol": np.array(col, np.float32).reshape(len(col), 3), "bank": bank, "oy": oy, "ox": ox, "oc": oc,
            "sign": sign}


def night_kernel(image: np.ndarray, p: dict[str, Any], L: Mapping[str, Any]) -> np.ndarray:
    """Night's per-pixel pass with layers ``L`` (:func:`night_layers`; tests give the reference's noise as the
    bank, at offset 0)."""
    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms.weather import Night

    i = p["intensity"]
    gain = 2.0 ** (p["gain"] * i)
    out = np.empty_like(image)
    K.night_u8(image, _SRGB_TO_LINEAR, L["shift"], L["fall"], L["beam"], L["head_gain"], L["ambient"], L["blue"],
               L["hy"], L["hx"], L["hs"], L["hc"], L["ly_a"], L["lx_a"], L["ly_b"], L["lx_b"], L["lcol"],
               np.float32(Night.FULL_WELL / gain), np.float32(Night.READ_NOISE**2),
               np.float32(i * gain / Night.FULL_WELL), L["bank"], L["oy"], L["ox"], L["oc"], L["sign"],
               _LINEAR_TO_SRGB, out)
    return out


def _night(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    h, w = image.shape[:2]
    return night_kernel(image, p, once(rng, ("night", h, w), lambda: night_layers(h, w, p, rng)))


def _glare(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    i = p["intensity"]

    def layers() -> dict[str, Any]:
        s = h / 240.0 * p["size"]
        sx, sy = p["x"] * w, p["y"] * h
        xs = np.arange(w, dtype=np.float32) - np.float32(sx)
        ys = np.arange(h, dtype=np.float32) - np.float32(sy)

        def profiles(sigma: float, peak: float) -> tuple[np.ndarray, np.ndarray]:
            k = np.float32(-0.5 / sigma**2)
            return (np.exp(ys * ys * k) * np.float32(peak)).astype(np.float32), np.exp(xs * xs * k).astype(np.float32)

        theta0 = np.float32(18.0 * s)
        core = profiles(5.0 * s, 6.0)
        bloom = profiles(22.0 * s, 0.9)
        # ghosts as the reference draws them, each into its own patch (the disc's box), summed, then blurred
        g = rng(TEXTURE_STREAM)
        cx, cy = w / 2.0, h / 2.0
        ghosts = _scratch("f3a", (h, w, 3))
        ghosts.fill(0.0)
        for _ in range(p["ghosts"]):
            k = g.uniform(0.25, 2.0)
            gx, gy = sx + k * (cx - sx), sy + k * (cy - sy)
            rad = g.uniform(4.0, 20.0) * s * (0.6 + 0.5 * k)
            tint = np.array([g.uniform(0.3, 1.0), g.uniform(0.5, 1.0), g.uniform(0.3, 1.0)])
            tint *= g.uniform(0.08, 0.22)
            rim = g.random() < 0.4
            centre = (int(round(gx * 16)), int(round(gy * 16)))
            r16 = max(1, int(round(rad * 16)))
            thick = max(1, int(round(1.5 * s)))
            margin = r16 // 16 + thick + 4
            x0, x1 = max(0, centre[0] // 16 - margin), min(w, centre[0] // 16 + margin + 1)
            y0, y1 = max(0, centre[1] // 16 - margin), min(h, centre[1] // 16 + margin + 1)
            if x1 <= x0 or y1 <= y0:
                continue
            patch = np.zeros((y1 - y0, x1 - x0, 3), np.float32)
            local = (centre[0] - 16 * x0, centre[1] - 16 * y0)
            cv2.circle(patch, local, r16, tint.tolist(), -1, cv2.LINE_AA, 4)
            if rim:
                cv2.circle(patch, local, r16, (tint * 1.8).tolist(), thick, cv2.LINE_AA, 4)
            ghosts[y0:y1, x0:x1] += patch
        ghosts = cv2.GaussianBlur(ghosts, (0, 0), 1.2 * s)
        colour = np.array([1.0, 0.93 - 0.13 * p["warmth"], 0.85 - 0.35 * p["warmth"]], np.float32)
        return {"ys": ys, "xs": xs, "theta2": np.float32(theta0**2), "c_half": np.float32(np.float32(0.5) * theta0**2),
                "core": core, "bloom": bloom, "colour": colour, "ghosts": ghosts}

    L = once(rng, ("glare", h, w), layers)
    out = np.empty_like(image)
    K.glare_u8(image, _SRGB_TO_LINEAR, L["ys"], L["xs"], L["theta2"], L["c_half"], L["core"][0], L["core"][1],
               L["bloom"][0], L["bloom"][1], L["colour"], L["ghosts"], np.float32(i), _LINEAR_TO_SRGB, out)
    return out


def drop_layers(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> tuple[np.ndarray, ...] | None:
    """:meth:`lidarmt.camera.transforms.optics.Droplets.drops` with the same drops (:func:`~lidarmt.camera.
    transforms.optics.drop_label`) and blurs (:func:`~lidarmt.camera.transforms.optics.defocus_drops`), the maps
    made by one kernel pass over the label image instead of NumPy passes over the drops' pixels (the label and
    the unblurred maps in the thread's scratch arrays)."""
    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms.optics import _pixel_grid, defocus_drops, drop_label

    s = h / 240.0
    label = _scratch("f1a", (h, w))
    label.fill(0.0)
    drawn = drop_label(h, w, p, rng, label)
    if drawn is None:
        return None
    r, ecc, cx, cy, label = drawn
    gx, gy = _pixel_grid(h, w)
    mx, my = gx.copy(), gy.copy()
    shade = _scratch("f1b", (h, w))
    highlight = _scratch("f1c", (h, w))
    mask = _scratch("f1d", (h, w))
    shade.fill(1.0)
    highlight.fill(0.0)
    mask.fill(0.0)
    K.drop_maps(label, r.astype(np.float32), ecc.astype(np.float32), cx.astype(np.float32), cy.astype(np.float32),
                np.float32(p["view"] * h), mx, my, shade, highlight, mask)
    return (mx, my, *defocus_drops(shade, highlight, mask, p, s))


def _float_of(image: np.ndarray, shared: dict) -> np.ndarray:
    """``to_float(image)``, made once per frame for all the settings of a call (``shared``: the frame's)."""
    f = shared.get("float")
    if f is None:
        f = shared["float"] = to_float(image)
    return f


def _droplets(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    i = p["intensity"]
    s = h / 240.0
    base = _scratch("f3a", image.shape)
    base = cv2.GaussianBlur(_float_of(image, shared), (0, 0), 0.2 + 0.5 * i * s, dst=base)  # the water film
    drops = once(rng, ("droplets", h, w), lambda: drop_layers(h, w, p, rng))
    out = np.empty_like(image)
    if drops is None:
        K.droplets_u8(base, base, np.ones((h, w), np.float32), np.zeros((h, w), np.float32),
                      np.zeros((h, w), np.float32), out)
        return out
    mx, my, shade, highlight, soft = drops
    refr8 = _scratch("u3a", image.shape, np.uint8)
    refr8 = cv2.remap(image, mx, my, cv2.INTER_LINEAR, dst=refr8, borderMode=cv2.BORDER_REFLECT_101)
    rf = _scratch("f3b", image.shape)
    K.u8_to_float(refr8, rf)
    refr = _scratch("f3c", image.shape)
    refr = cv2.GaussianBlur(rf, (0, 0), 2.0 * p["defocus"] * s, dst=refr)
    K.droplets_u8(base, refr, shade, highlight, soft, out)
    return out


def dirt_layers(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lidarmt.camera.transforms.optics.dirt_maps` with the same draws (the specks' four values each drawn
    in one call, in the same order), the same noise field (:func:`smooth_noise_fast`) and the same OpenCV calls;
    the blotches' threshold and the specks taken in by a kernel (the same float32 operations): the same bytes."""
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms.optics import dirt_setup

    i, s, g, n, thr, nsp = dirt_setup(h, w, p, rng, smooth_noise_fast)
    # per speck, in the reference's order: x, y, radius, opacity (one uniform draw each)
    u = g.uniform(np.array([0.0, 0.0, 1.0, 0.4]), np.array([w, h, 3.5, 0.9], np.float64), size=(nsp, 4))
    xs, ys = (u[:, 0] * 16).astype(np.int64).tolist(), (u[:, 1] * 16).astype(np.int64).tolist()
    rs, vs = (u[:, 2] * s * 16).astype(np.int64).tolist(), u[:, 3].tolist()
    specks = _scratch("f1a", (h, w))
    specks.fill(0.0)
    for k in range(nsp):
        cv2.circle(specks, (xs[k], ys[k]), rs[k], vs[k], -1, cv2.LINE_AA, 4)
    m0 = _scratch("f1b", (h, w))
    K.blotches(n, np.float32(thr), specks, m0)
    m = cv2.GaussianBlur(m0, (0, 0), 2.0 * s)  # defocus: the dirt is on the lens
    m *= np.float32(p["opacity"] * min(1.0, 0.5 + i))
    thin = np.minimum(m * np.float32(2.5), np.float32(1.0))
    return m, thin


def _dirt(image: np.ndarray, p: dict[str, Any], rng: RngFactory, shared: dict) -> np.ndarray:
    import cv2

    from lidarmt.camera.transforms import _batched_kernels as K

    h, w = image.shape[:2]
    s = h / 240.0
    m, thin = once(rng, ("dirt", h, w), lambda: dirt_layers(h, w, p, rng))
    if "dirt" not in shared:  # the scene's blur behind the dirt: the same for every setting
        shared["dirt"] = cv2.GaussianBlur(_float_of(image, shared), (0, 0), 3.0 * s)
    f, blurred = _float_of(image, shared), shared["dirt"]
    f2 = _scratch("f3a", image.shape)
    K.dirt_mix(f, blurred, thin, f2)
    small = cv2.resize(f2, (max(1, w // 8), max(1, h // 8)), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), 3.0)
    b = p["brown"]
    albedo = np.array([0.55 + 0.05 * b, 0.52 - 0.12 * b, 0.48 - 0.26 * b], np.float32)
    small *= albedo * np.float32(0.55)
    small += albedo * np.float32(0.08)
    scatter = _scratch("f3b", image.shape)
    scatter = cv2.resize(small, (w, h), dst=scatter, interpolation=cv2.INTER_LINEAR)
    out = np.empty_like(image)
    K.dirt_u8(f2, scatter, m, out)
    return out


#: the batched implementation of each built-in, by name (some are the reference's OpenCV calls: see above)
_FAST: dict[str, FastApply] = {
    "brightness": _reference("brightness"), "contrast": _lut("c", "alpha"), "translation": _translation,
    "scale": _reference("scale"), "shear": _reference("shear"), "rotation": _reference("rotation"),
    "blur": _reference("blur"),
    "mirror": _reference("mirror"), "fog": _fog, "rain": _rain, "snow": _snow, "night": _night,
    "glare": _glare, "droplets": _droplets, "dirt": _dirt,
}
