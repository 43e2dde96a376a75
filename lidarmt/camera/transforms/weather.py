"""Composite weather: fog, rain, snow and night, each a physically motivated image model.

Every weather transformation takes ``intensity`` in [0, 1] (0 returns the image unchanged, bit for bit; 1 is
the heaviest setting) and a few *style* parameters (listed in ``space``). A campaign walks the intensities
0.25, 0.5, 0.75, 1.0 and lets the seed draw the style, so that each (frame, seed) sees a different fog or rain
of the same strength; give style values explicitly to pin them (``Fog().resolve({"intensity": 1}, seed)``
shows the ones drawn).

DeepTest composed its fog and rain from Photoshop filters and released no code; DeepRoad and TACTIC learned
them with GANs. These models are instead written from the physics of each effect (the docstrings cite the
model), so that they are cheap (a few milliseconds on a 320x240 frame), deterministic and explainable.

All of them work in float32; the ones that add or remove light (night) do so in linear light, through the sRGB
transfer function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np

from lidarmt.camera.transforms._common import (
    NOISE_STREAM,
    TEXTURE_STREAM,
    BaseTransform,
    RngFactory,
    ground_depth,
    linear_to_srgb,
    once,
    smooth_noise,
    srgb_to_linear,
    to_float,
    to_uint8,
)
from lidarmt.camera.transforms.base import ParamRange

#: The intensities a campaign walks for every weather transformation.
WEATHER_LEVELS = (0.25, 0.5, 0.75, 1.0)

_INTENSITY = ParamRange(0.0, 1.0)


class Weather(BaseTransform):
    """A weather effect: ``intensity`` in [0, 1] (0 = identity) plus style parameters drawn from the seed."""

    family = "weather"
    required = ("intensity",)
    grid = tuple({"intensity": v} for v in WEATHER_LEVELS)

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        if p["intensity"] == 0.0:
            return image.copy()
        return self._weather(image, p, rng)

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        raise NotImplementedError

    def label(self, params: Mapping[str, Any]) -> str:
        return f"{self.name} {float(params['intensity']):g}"


def _blend_to(f: np.ndarray, colour: np.ndarray, alpha: np.ndarray | float) -> np.ndarray:
    """``f·(1 − α) + colour·α`` = ``f − α·(f − colour)``, α a scalar or an (H, W) map; in place on ``f``.

    Per-channel constants go through OpenCV's scalar arithmetic and (H, W) maps through ``cv2.merge``: both
    are several times faster than NumPy broadcasting over a 3-long last axis.
    An (H, W, 3) ``alpha`` is taken as the map already merged (:func:`merge3`, made once per window).
    """
    c = [float(v) for v in np.asarray(colour).ravel()[:3]]
    d = cv2.subtract(f, (c[0], c[1], c[2], 0.0))
    if isinstance(alpha, np.ndarray):
        d *= alpha if alpha.ndim == 3 else merge3(alpha)
    else:
        d *= np.float32(alpha)
    f -= d
    return f


def merge3(a: np.ndarray) -> np.ndarray:
    """An (H, W) map as float32 (H, W, 3), the same value in every channel (``cv2.merge``)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    return cv2.merge([a, a, a])


class Fog(Weather):
    """Homogeneous-plus-patchy fog by Koschmieder's law over a ground-plane depth proxy.

    Model (Koschmieder 1924; Narasimhan & Nayar, IJCV 2002): a scene point at distance ``d`` seen through fog
    of extinction coefficient ``β`` keeps the fraction ``t = exp(−β·d)`` of its radiance and is veiled by the
    airlight ``A``: ``I = J·t + A·(1 − t)``. The meteorological visibility (2 % contrast threshold) is
    ``V = 3.912 / β``. Depth comes from a flat-ground, level-camera model (row below the horizon → distance,
    see :func:`ground_depth`); what lies above the horizon is taken to be ``far`` metres away. The extinction
    varies smoothly across the image, ``β·(1 + patchiness·(2n − 1))`` with ``n`` fractal value noise, the
    heterogeneous fog of Tarel et al. (IEEE ITS Magazine 2012, FRIDA).

    Intensity sets the visibility: ``V = visibility / intensity^1.5`` (``visibility`` is the one at intensity
    1, 50-80 m: dense fog, the road 20 m ahead keeps a fifth to two fifths of its contrast; intensity 0.5
    gives 140-230 m, intensity 0.25 400-640 m, a light haze). Style: ``visibility``, ``horizon`` (the horizon
    row as a fraction of the height), ``far`` (the depth given to the sky and to everything above the
    horizon), ``patchiness``, ``airlight`` (its brightness) and ``tint`` (−1 warm … +1 blue-grey).
    """

    name = "fog"
    description = "fog: Koschmieder's law I = J·t + A·(1 − t), t = exp(−β·d), ground-plane depth, patchy β"
    style = ("visibility", "horizon", "far", "patchiness", "airlight", "tint")
    space = {"intensity": _INTENSITY, "visibility": ParamRange(50.0, 80.0), "horizon": ParamRange(0.5, 0.62),
             "far": ParamRange(25.0, 50.0), "patchiness": ParamRange(0.0, 0.6),
             "airlight": ParamRange(0.72, 0.92), "tint": ParamRange(-1.0, 1.0)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]

        def veil() -> np.ndarray:  # the fog's opacity 1 − t, from the setting and seed alone
            beta = 3.912 * i**1.5 / p["visibility"]
            d = ground_depth(h, w, p["horizon"], far=p["far"])
            n = smooth_noise(rng(TEXTURE_STREAM), h, w, cells=4, octaves=3)
            ext = n * np.float32(2.0 * p["patchiness"])
            ext += np.float32(1.0 - p["patchiness"])
            ext *= d * np.float32(-beta)
            t = np.exp(ext, out=ext)
            return merge3(1.0 - t)

        alpha = once(rng, ("fog", h, w), veil)
        tint = 0.04 * p["tint"]
        airlight = np.array([1.0 - tint, 1.0, 1.0 + tint]) * p["airlight"]
        f = to_float(image)
        return to_uint8(_blend_to(f, airlight, alpha))


def _line_kernel_streaks(layer: np.ndarray, rng: np.random.Generator, n: int, length: float, angle: float,
                         thickness: int) -> None:
    """Draw ``n`` anti-aliased streaks of about ``length`` px at ``angle`` (radians from vertical)."""
    if n <= 0:
        return
    h, w = layer.shape
    lens = length * rng.uniform(0.6, 1.3, n)
    dx, dy = np.sin(angle) * lens, np.cos(angle) * lens
    x0 = rng.uniform(-abs(dx).max() - 2, w + abs(dx).max() + 2, n)
    y0 = rng.uniform(-lens.max(), h, n)
    val = rng.uniform(0.55, 1.0, n)
    pts = np.stack([np.stack([x0, y0], 1), np.stack([x0 + dx, y0 + dy], 1)], 1)
    pts = np.round(pts * 16).astype(np.int32)  # 4 fractional bits: sub-pixel endpoints
    # three brightness groups: one polylines call each
    for lo, hi in ((0.55, 0.7), (0.7, 0.85), (0.85, 1.01)):
        sel = (val >= lo) & (val < hi)
        if sel.any():
            cv2.polylines(layer, list(pts[sel]), False, float((lo + hi) / 2), thickness, cv2.LINE_AA, 4)


class Rain(Weather):
    """Falling rain: motion-blurred drops as slanted streaks, over a dimmer, greyer, slightly blurred scene.

    Model (Garg & Nayar, "Vision and Rain", IJCV 2007; "Photorealistic rendering of rain streaks", SIGGRAPH
    2006): a drop falls several pixels during the exposure and leaves a semi-transparent streak along its
    motion, ``I = J·(1 − α) + E·α``, where ``α`` is the fraction of the exposure the drop covers the pixel and
    the drop's radiance ``E`` is bright (a drop refracts light from a wide cone of the sky). Streaks come in
    two depth layers (far: short, thin, dense and faint; near: long, thicker, sparse and brighter). The rainy
    scene is also dimmer (overcast sky), loses contrast to the rain haze and is slightly blurred, the look of
    DeepTest's Photoshop rain (Tian et al. 2018, Fig. 1b of DeepRoad).

    Style: ``angle`` (streak slant, degrees from vertical), ``length`` (streak length as a fraction of the
    image height), ``density`` (a factor on the number of drops), ``darkness`` (how much the sky dims the
    scene).
    """

    name = "rain"
    description = "rain: slanted motion-blurred streaks (Garg & Nayar 2007) + dimming, haze and slight blur"
    style = ("angle", "length", "density", "darkness")
    space = {"intensity": _INTENSITY, "angle": ParamRange(-25.0, 25.0), "length": ParamRange(0.06, 0.16),
             "density": ParamRange(0.6, 1.4), "darkness": ParamRange(0.4, 1.0)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]
        s = h / 240.0
        f = to_float(image)
        # overcast dimming, haze (contrast loss towards a grey veil) and the blur of a wet atmosphere
        f *= np.float32(1.0 - 0.45 * i * p["darkness"])
        veil = 0.35 * i
        grey = float(f.mean())
        f *= np.float32(1.0 - veil)
        f += np.float32(veil * (0.5 * grey + 0.25))
        sigma = 0.3 + 0.8 * i * s
        f = cv2.GaussianBlur(f, (0, 0), sigma)
        alpha = once(rng, ("rain", h, w), lambda: merge3(rain_alpha(h, w, p, rng)))
        drop = np.array([0.82, 0.84, 0.88]) * min(1.0, 0.75 + grey)
        return to_uint8(_blend_to(f, drop, alpha))


def night_profiles(h: int, w: int, p: dict[str, Any]) -> tuple[float, float, float, np.ndarray, np.ndarray,
                                                               np.ndarray]:
    """Night's illumination as profiles (the reference's and the batched implementation's alike; no draws):
    (intensity, image scale, the ambient level (stops down), the headlights' fall-off on the ground per row (1/d²,
    (H,)), their ±15° beam per column ((W,)), the blue shift's colour matrix)."""
    i = p["intensity"]
    d = ground_depth(h, w, p["horizon"], far=1e4)[:, 0]
    fpx = (w / 2.0) / math.tan(math.radians(30.0))
    az = (np.arange(w, dtype=np.float32) + 0.5 - w / 2.0) / np.float32(fpx)
    beam = np.exp(-0.5 * (az / 0.26) ** 2).astype(np.float32)
    fall = np.minimum((10.0 / d) ** 2, 1.0).astype(np.float32)
    shift = np.outer([0.7, 0.95, 1.45], [0.2126, 0.7152, 0.0722]).astype(np.float32)
    return i, h / 240.0, 2.0 ** (-p["darkness"] * i), fall, beam, shift


def rain_streak_layers(s: float) -> tuple[tuple[int, float, int, float, float], ...]:
    """Rain's two streak layers at image scale ``s`` (height / 240): (count at 320×240, length factor, thickness,
    blur σ, opacity); far ones first."""
    return ((900, 0.5, 1, 0.6, 0.22), (160, 1.0, max(1, round(s)), 0.9, 0.5))


def rain_setup(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> tuple[float, float, Any, float, float, float]:
    """What rain's streak layers start from (the reference's and the batched implementation's alike): (intensity,
    image scale, the texture stream's Generator, area factor against 320×240, streak angle in radians, streak
    length in pixels)."""
    return (p["intensity"], h / 240.0, rng(TEXTURE_STREAM), h * w / (320.0 * 240.0), math.radians(p["angle"]),
            p["length"] * h)


def rain_alpha(h: int, w: int, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
    """Rain's streak opacity, (H, W): the far layer then the near layer, each blurred a little (motion and
    defocus); from the setting and seed alone."""
    i, s, g, area, angle, length = rain_setup(h, w, p, rng)
    alpha = np.zeros((h, w), np.float32)
    for count, scale, thick, blur, opacity in rain_streak_layers(s):
        layer = np.zeros((h, w), np.float32)
        n = int(round(count * i * p["density"] * area))
        _line_kernel_streaks(layer, g, n, length * scale, angle + g.normal(0, 0.03), thick)
        layer = cv2.GaussianBlur(layer, (0, 0), blur * s)
        alpha = np.maximum(alpha, layer * np.float32(opacity))
    return np.minimum(alpha, 1.0)


def _splat(layer: np.ndarray, ys: np.ndarray, xs: np.ndarray, vals: np.ndarray, sigma_x: float,
           sigma_y: float) -> np.ndarray:
    """Gaussian splats of peak ``vals`` at (ys, xs) (integer pixels): deltas blurred, peak renormalised."""
    np.add.at(layer, (ys, xs), vals)
    kx = cv2.getGaussianKernel(2 * math.ceil(3 * sigma_x) + 1, sigma_x, cv2.CV_32F)
    ky = cv2.getGaussianKernel(2 * math.ceil(3 * sigma_y) + 1, sigma_y, cv2.CV_32F)
    out = cv2.sepFilter2D(layer, -1, kx, ky, borderType=cv2.BORDER_CONSTANT)
    out *= np.float32(1.0 / (float(kx.max()) * float(ky.max())))
    return out


class Snow(Weather):
    """Falling snow: flakes of several sizes at several depths, a snow haze and a brighter, flatter scene.

    Model: the snow composition of DesnowNet (Liu et al., IEEE TIP 2018, Snow100K), ``I = K·z + J·(1 − z)``
    with ``z`` the flake opacity mask and ``K`` the flake's (white) colour, with flakes in three depth layers:
    far ones are many and one pixel wide, near ones are few, large, defocused and stretched by their fall
    during the exposure. Falling snow also scatters light like fog (Koschmieder's law, ``t = exp(−β·d)``,
    over the ground-plane depth proxy, with a bright airlight), and an overcast snowy scene is brighter and
    of lower contrast (the diffuse light of the snow cover and the cloud): the scene is pulled towards light
    grey.

    Style: ``flake_size`` (a factor on flake sizes), ``density`` (a factor on their number), ``visibility``
    (metres, at intensity 1), ``horizon`` (fraction of the height).
    """

    name = "snow"
    description = "snow: flakes in 3 depth layers (DesnowNet: I = K·z + J·(1−z)), Koschmieder haze, brighter"
    style = ("flake_size", "density", "visibility", "horizon")
    space = {"intensity": _INTENSITY, "flake_size": ParamRange(0.7, 1.5), "density": ParamRange(0.6, 1.4),
             "visibility": ParamRange(80.0, 200.0), "horizon": ParamRange(0.5, 0.62)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]
        s = h / 240.0
        f = to_float(image)
        # brighter and flatter: towards light grey
        k = np.float32(0.35 * i)
        f *= 1.0 - k
        f += k * np.float32(0.78)
        def layers() -> tuple[np.ndarray, np.ndarray]:  # the haze's and the flakes' opacities
            # snow haze
            d = ground_depth(h, w, p["horizon"], far=60.0)
            t = np.exp(d * np.float32(-3.912 * i * i / p["visibility"]))
            haze = merge3(np.broadcast_to(1.0 - t, (h, w)))
            # flakes
            g = rng(TEXTURE_STREAM)
            area = h * w / (320.0 * 240.0)
            z = np.zeros((h, w), np.float32)
            fs = p["flake_size"] * s
            for count, sx, sy, opacity in ((1400, 0.55, 0.7, 0.75), (320, 1.1, 1.6, 0.85), (45, 2.6, 3.8, 0.6)):
                n = int(round(count * i * p["density"] * area))
                if n == 0:
                    continue
                ys, xs = g.integers(0, h, n), g.integers(0, w, n)
                vals = g.uniform(0.6, 1.0, n).astype(np.float32)
                layer = _splat(np.zeros((h, w), np.float32), ys, xs, vals, sx * fs, sy * fs)
                np.maximum(z, np.minimum(layer, 1.0) * np.float32(opacity), out=z)
            return haze, merge3(z)

        haze, flakes = once(rng, ("snow", h, w), layers)
        f = _blend_to(f, np.array([0.9, 0.92, 0.95]), haze)
        return to_uint8(_blend_to(f, np.array([0.97, 0.97, 1.0]), flakes))


class Night(Weather):
    """Night: less light, a blue shift, headlights on the road, lamps with blooms, and sensor noise.

    Model, in linear light: the ambient illumination the image shows falls by ``darkness·intensity`` stops;
    the car's headlights light the road with an irradiance that falls with the square of the distance (the
    ground-plane depth proxy) inside a beam of about ±15° — a brightening of the lower centre — and glow
    faintly in the air; street lamps are point sources with a bloom (the lens's point-spread function;
    Spencer et al., SIGGRAPH 1995). Where light is scarce colour vision gives way to the rods: the image is
    desaturated and shifted to blue (the Purkinje shift as rendered by Thompson, Shirley & Ferwerda, "A
    spatial post-processing algorithm for images of night scenes", 2002). To show even that much, the camera
    has raised its gain by ``gain·intensity`` stops, so the sensor collected ``2^gain`` times fewer
    electrons than the picture suggests, and its Poisson-Gaussian noise (Foi et al., IEEE TIP 2008: variance
    ``x + σ_read²`` in electrons for a signal of ``x`` electrons, photon shot noise plus read noise; a
    4,000-electron full well, 4 electrons of read noise) is amplified by the gain: the noise grows as the
    light falls, most in the dark parts. (The added noise is also scaled by the intensity, so that low
    intensities tend smoothly to the unchanged picture, whose own daylight noise is already in it.)

    Style: ``darkness`` (stops of under-exposure at intensity 1), ``gain`` (stops of camera gain at intensity
    1), ``blue`` (strength of the blue shift), ``headlights`` (their strength), ``lamps`` (number of light
    sources), ``horizon`` (fraction of the height).
    """

    name = "night"
    description = "night: less light, blue shift, headlights ~ 1/d², lamps with bloom, Poisson-Gaussian noise"
    style = ("darkness", "gain", "blue", "headlights", "lamps", "horizon")
    space = {"intensity": _INTENSITY, "darkness": ParamRange(4.0, 6.0), "gain": ParamRange(1.5, 3.5),
             "blue": ParamRange(0.4, 1.0), "headlights": ParamRange(0.4, 1.0),
             "lamps": ParamRange(0, 4, integer=True),
             "horizon": ParamRange(0.5, 0.62)}

    FULL_WELL = 4000.0  # electrons at saturation of the (modelled) sensor
    READ_NOISE = 4.0  # electrons rms

    def _layers(self, h: int, w: int, p: dict[str, Any], rng: RngFactory) -> tuple[np.ndarray, ...]:
        """What depends on the setting and seed alone: the colour matrix of the blue shift, the blue shift's
        and the illumination's (H, W, 3) maps, the light sources' glow, and the unit sensor noise."""
        i, s, ambient, fall, beam, shift = night_profiles(h, w, p)
        horizon = p["horizon"]
        head = np.float32(i * p["headlights"]) * fall[:, None] * beam[None, :]
        illum = head + np.float32(ambient)
        m = np.float32(p["blue"] * i) * np.clip(1.0 - illum * 2.0, 0.0, 1.0)
        # light sources: street lamps above the horizon (core + bloom), and a faint glow of the headlights,
        # one (H, W) map per channel
        g = rng(TEXTURE_STREAM)
        xs = np.arange(w, dtype=np.float32) + 0.5
        ys = np.arange(h, dtype=np.float32) + 0.5

        def gauss(u: np.ndarray, c: float, sigma: float) -> np.ndarray:
            return np.exp(-0.5 * ((u - np.float32(c)) / np.float32(sigma)) ** 2)

        # headlight glow (scatter in the air and the windscreen), below the image's lower centre
        glow2d = np.outer(gauss(ys, 1.05 * h, 0.25 * h), gauss(xs, w / 2.0, 0.32 * w))
        glow2d *= np.float32(0.05 * p["headlights"] * i)
        glow = [glow2d * np.float32(c) for c in (1.0, 0.97, 0.9)]
        for _ in range(p["lamps"]):  # Gaussians are separable: outer products of row and column profiles
            x, y = g.uniform(0.05, 0.95) * w, g.uniform(0.12, horizon - 0.08) * h
            colour = (1.0, 0.62, 0.28) if g.random() < 0.6 else (0.9, 0.95, 1.0)
            prof = np.outer(gauss(ys, y, 1.6 * s), gauss(xs, x, 1.6 * s) * np.float32(4.0 * i))
            prof += np.outer(gauss(ys, y, 14.0 * s), gauss(xs, x, 14.0 * s) * np.float32(0.12 * i))
            for c in range(3):
                glow[c] += prof * np.float32(colour[c])
        noise = rng(NOISE_STREAM).standard_normal((h, w, 3), dtype=np.float32)
        return shift, cv2.merge([m, m, m]), cv2.merge([illum, illum, illum]), cv2.merge(glow), noise

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]
        layers = once(rng, ("night", h, w), lambda: self._layers(h, w, p, rng))
        shift, blue, illum, glow, noise = layers
        lin = srgb_to_linear(image)  # a new float32 array
        # blue shift where it is dark: lin + m·(B·lum − lin), a per-pixel mix towards a blue-tinted luminance
        # (B·lum is one 3x3 colour matrix), then the illumination; 3-channel maps via cv2.merge, which is
        # much faster than NumPy broadcasting over the channel axis
        diff = cv2.transform(lin, shift)
        diff -= lin
        diff *= blue
        lin += diff
        lin *= illum
        lin += glow
        # the camera's gain and the sensor's Poisson-Gaussian noise: sd = sqrt(electrons + read²) electrons
        gain = 2.0 ** (p["gain"] * i)
        sd = cv2.max(lin, 0.0)
        sd *= np.float32(self.FULL_WELL / gain)
        sd += np.float32(self.READ_NOISE**2)
        sd = cv2.sqrt(sd)
        sd *= np.float32(i * gain / self.FULL_WELL)
        lin += noise * sd
        return linear_to_srgb(lin)
