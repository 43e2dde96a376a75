"""Effects of the camera's optics in bad conditions: sun glare, a wet lens (droplets), a dirty lens.

Like :mod:`lidarmt.camera.transforms.weather`, each takes ``intensity`` in [0, 1] (0 = identity, bit for bit)
and style parameters drawn from the seed unless given.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from lidarmt.camera.transforms._common import (
    TEXTURE_STREAM,
    RngFactory,
    linear_to_srgb,
    once,
    smooth_noise,
    srgb_to_linear,
    to_float,
    to_uint8,
)
from lidarmt.camera.transforms.base import ParamRange
from lidarmt.camera.transforms.weather import _INTENSITY, Weather, merge3


class Glare(Weather):
    """Sun glare: a bright source with bloom, veiling glare, and lens-flare ghosts.

    Model, in linear light (light adds): the sun's image is a saturated core spread by the lens's
    point-spread function into a bloom (Spencer, Shirley, Zimmerman & Greenberg, "Physically-based glare
    effects for digital images", SIGGRAPH 1995). Light scattered inside the lens and camera adds a veiling
    luminance that falls off roughly as the inverse square of the angle to the source (the Stiles-Holladay
    disability-glare law; Talvala et al., "Veiling glare in high dynamic range imaging", SIGGRAPH 2007) plus
    a uniform part: it lifts the blacks and lowers the contrast of the whole frame. Inter-reflections between
    lens elements form ghosts — tinted discs of the aperture's shape — that lie on the line through the light
    source and the optical centre, at positions mirrored through the centre (Hullin et al., "Physically-based
    real-time lens flare rendering", SIGGRAPH 2011).

    Style: ``x``, ``y`` (the source, as fractions of the width and height; above the horizon), ``size`` (a
    factor on the core and bloom), ``ghosts`` (their number), ``warmth`` (0 white … 1 a low sun's orange).
    """

    name = "glare"
    description = "sun glare: core + bloom (Spencer et al. 1995), veiling glare ~ 1/θ², ghosts via the centre"
    style = ("x", "y", "size", "ghosts", "warmth")
    space = {"intensity": _INTENSITY, "x": ParamRange(0.15, 0.85), "y": ParamRange(0.05, 0.35),
             "size": ParamRange(0.7, 1.4), "ghosts": ParamRange(3, 7, integer=True),
             "warmth": ParamRange(0.0, 1.0)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]

        def lens_light() -> np.ndarray:  # the light the lens adds, from the setting and seed alone
            s = h / 240.0 * p["size"]
            sx, sy = p["x"] * w, p["y"] * h
            colour = np.array([1.0, 0.93 - 0.13 * p["warmth"], 0.85 - 0.35 * p["warmth"]], np.float32)
            xs = np.arange(w, dtype=np.float32) - np.float32(sx)
            ys = np.arange(h, dtype=np.float32) - np.float32(sy)

            def gauss2d(sigma: float, peak: float) -> np.ndarray:  # separable: an outer product
                k = np.float32(-0.5 / sigma**2)
                return np.outer(np.exp(ys * ys * k) * np.float32(peak), np.exp(xs * xs * k))

            theta0 = np.float32(18.0 * s)
            r2 = np.add.outer(ys * ys, xs * xs)
            light = np.float32(0.5) * theta0**2 / (r2 + theta0**2)  # veiling glare, ∝ 1/θ² from the source
            light += np.float32(0.07)  # its uniform part
            light += gauss2d(5.0 * s, 6.0)  # the saturated core
            light += gauss2d(22.0 * s, 0.9)  # the bloom
            add = cv2.merge([light * colour[0], light * colour[1], light * colour[2]])
            # ghosts: discs on the line source → centre → beyond, tinted, soft-edged
            g = rng(TEXTURE_STREAM)
            cx, cy = w / 2.0, h / 2.0
            ghosts = np.zeros((h, w, 3), np.float32)
            for _ in range(p["ghosts"]):
                k = g.uniform(0.25, 2.0)  # position along the line: source + k·(centre − source)
                gx, gy = sx + k * (cx - sx), sy + k * (cy - sy)
                rad = g.uniform(4.0, 20.0) * s * (0.6 + 0.5 * k)
                tint = np.array([g.uniform(0.3, 1.0), g.uniform(0.5, 1.0), g.uniform(0.3, 1.0)])
                tint *= g.uniform(0.08, 0.22)
                layer = np.zeros((h, w, 3), np.float32)
                cv2.circle(layer, (int(round(gx * 16)), int(round(gy * 16))), max(1, int(round(rad * 16))),
                           tint.tolist(), -1, cv2.LINE_AA, 4)
                if g.random() < 0.4:  # a brighter rim, as the aperture's edge
                    cv2.circle(layer, (int(round(gx * 16)), int(round(gy * 16))), max(1, int(round(rad * 16))),
                               (tint * 1.8).tolist(), max(1, int(round(1.5 * s))), cv2.LINE_AA, 4)
                ghosts += layer
            ghosts = cv2.GaussianBlur(ghosts, (0, 0), 1.2 * s)
            add += ghosts
            return add * np.float32(i)

        add = once(rng, ("glare", h, w), lens_light)
        lin = srgb_to_linear(image)
        lin += add
        return linear_to_srgb(lin)


@lru_cache(maxsize=8)
def _pixel_grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    xs.flags.writeable = False
    ys.flags.writeable = False
    return xs, ys


class Droplets(Weather):
    """A wet lens or windscreen: water drops that refract the scene, out of focus.

    Model (Roser & Geiger, "Realistic modeling of water droplets for monocular adverse weather corrections",
    IEEE ITSC 2009; Halimeh & Roser, IEEE IV 2009): a drop on the glass is a small, thick plano-convex lens.
    Seen through it, a wide cone of the scene is imaged inverted and shrunk into the drop's outline (the sky
    at the bottom of the drop), a fisheye view whose angular width depends on the drop's contact angle, not
    on its size. Here each drop's pixel ``p`` shows the scene at ``c′ − (view·H / r)·(1 + 0.35ρ²)·(p − c)``:
    ``c`` the drop's centre, ``r`` its radius, ``ρ`` the normalised radius, ``view`` the half-height of the
    scene region every drop shows (a fraction of the image height ``H``), and ``c′`` a point a little above
    the drop, as the rays through a drop on a tilted windscreen come from higher up. The camera
    is focused far away, so drops and what they show are blurred (a Gaussian defocus of the refracted image
    and a soft outline); the total internal reflection at the rim darkens the edge, and the sky's
    reflection puts a highlight at the top. A thin water film also slightly blurs the whole frame.

    Style: ``size`` (a factor on drop radii), ``count`` (a factor on their number), ``view`` (see above),
    ``defocus`` (a factor on the blur).
    """

    name = "droplets"
    description = "wet lens: defocused drops, lenses showing an inverted view (Roser & Geiger 2009)"
    style = ("size", "count", "view", "defocus")
    space = {"intensity": _INTENSITY, "size": ParamRange(0.7, 1.5), "count": ParamRange(0.6, 1.4),
             "view": ParamRange(0.12, 0.3), "defocus": ParamRange(0.6, 1.4)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        i = p["intensity"]
        s = h / 240.0
        base = to_float(image)
        base = cv2.GaussianBlur(base, (0, 0), 0.2 + 0.5 * i * s)  # the water film
        drops = once(rng, ("droplets", h, w), lambda: self._merged_drops(h, w, p, rng))
        if drops is None:
            return to_uint8(base)
        mx, my, shade, highlight, soft = drops
        # out of focus: blur the refracted view (the outline, the shading: in the drops' layers)
        refr = cv2.remap(image, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)
        refr = cv2.GaussianBlur(to_float(refr), (0, 0), 2.0 * p["defocus"] * s)
        refr *= shade
        refr += highlight
        refr -= base
        refr *= soft
        base += refr
        return to_uint8(base)

    def _merged_drops(self, h: int, w: int, p: dict[str, Any],
                      rng: RngFactory) -> tuple[np.ndarray, ...] | None:
        """:meth:`drops` with the shading's, the highlight's and the outline's maps as (H, W, 3)."""
        drops = self.drops(h, w, p, rng)
        if drops is None:
            return None
        mx, my, shade, highlight, soft = drops
        return mx, my, merge3(shade), merge3(highlight), merge3(soft)

    def drops(self, h: int, w: int, p: dict[str, Any],
              rng: RngFactory) -> tuple[np.ndarray, ...] | None:
        """What depends on the setting and seed alone: the refraction's remap, and the shading's, the
        highlight's and the outline's (H, W) maps; None when there is no drop."""
        s = h / 240.0
        drawn = drop_label(h, w, p, rng, np.zeros((h, w), np.float32))
        if drawn is None:
            return None
        r, ecc, cx, cy, label = drawn
        ys, xs = np.nonzero(label)
        idx = label[ys, xs].astype(np.intp) - 1
        rk, ek, cxk, cyk = (a[idx].astype(np.float32) for a in (r, ecc, cx, cy))
        dx = xs.astype(np.float32) - cxk
        dy = ys.astype(np.float32) - cyk
        rho2 = np.minimum((dx * dx + (dy / ek) ** 2) / (rk * rk), 1.0)
        # refraction: an inverted, shrunk view of the scene around a point above the drop
        view = np.float32(p["view"] * h)
        k = view / rk * (1.0 + np.float32(0.35) * rho2)
        gx, gy = _pixel_grid(h, w)
        mx, my = gx.copy(), gy.copy()
        mx[ys, xs] = cxk - k * dx
        my[ys, xs] = cyk - np.float32(0.3) * view - k * dy
        # shading: darker rim (total internal reflection), a highlight towards the top (the sky's reflection)
        edge = np.clip((rho2 - 0.55) / 0.45, 0.0, 1.0)
        shade = np.ones((h, w), np.float32)
        shade[ys, xs] = 1.05 * (1.0 - 0.35 * edge * edge)
        hx, hy = dx + np.float32(0.35) * rk, dy + np.float32(0.45) * rk * ek
        highlight = np.zeros((h, w), np.float32)
        highlight[ys, xs] = 0.35 * np.exp(-(hx * hx + hy * hy) / (2 * (0.16 * rk) ** 2))
        mask = (label > 0).astype(np.float32)
        return (mx, my, *defocus_drops(shade, highlight, mask, p, s))


def drop_label(h: int, w: int, p: dict[str, Any], rng: RngFactory,
               label: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The drops of a setting and seed, drawn in order as filled ellipses into ``label`` (``(h, w)`` float32 of
    zeros, filled in place: drop k's pixels hold k + 1, a later drop covering an earlier one): (radii,
    eccentricities, centres x, centres y, label); None when the setting has no drop. The one drawing of
    :meth:`Droplets.drops` and of the batched implementation's layers."""
    i = p["intensity"]
    g = rng(TEXTURE_STREAM)
    n = int(round(60 * i * p["count"] * (h * w) / (320.0 * 240.0)))
    if n == 0:
        return None
    r = h * p["size"] * np.minimum(0.075, 0.012 + g.exponential(0.018, n))
    ecc = g.uniform(0.8, 1.15, n)  # drops are a little elongated, mostly vertically
    cx, cy = g.uniform(0, w, n), g.uniform(0, h, n)
    # int(round(v * 16)) for every drop at once (np.round rounds halves to even, as round does)
    ex, ey = np.round(cx * 16).astype(np.int64).tolist(), np.round(cy * 16).astype(np.int64).tolist()
    ax = np.maximum(1, np.round(r * 16).astype(np.int64)).tolist()
    ay = np.maximum(1, np.round(r * ecc * 16).astype(np.int64)).tolist()
    for k in range(n):
        cv2.ellipse(label, (ex[k], ey[k]), (ax[k], ay[k]), 0.0, 0.0, 360.0, float(k + 1), -1, cv2.LINE_8, 4)
    return r, ecc, cx, cy, label


def defocus_drops(shade: np.ndarray, highlight: np.ndarray, mask: np.ndarray, p: dict[str, Any],
                  s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out of focus: the drops' shading, highlight and outline blurred, as ``(shade, highlight, soft)``."""
    soft = cv2.GaussianBlur(mask, (0, 0), 0.9 * p["defocus"] * s)
    shade = cv2.GaussianBlur(shade, (0, 0), 0.9 * s)
    highlight = cv2.GaussianBlur(highlight, (0, 0), 0.8 * s)
    return shade, highlight, soft


class Dirt(Weather):
    """A dirty lens: blotches of mud and dust that attenuate, tint and blur the scene and scatter light.

    Model (Gu, Ramamoorthi, Belhumeur & Nayar, "Removing image artifacts due to dirty camera lenses and thin
    occluders", SIGGRAPH Asia 2009): ``I = I₀·α + β``, where the attenuation ``α`` follows the dirt pattern,
    defocused because the dirt sits on the lens, and ``β`` is light the dirt scatters into the image, a
    low-frequency function of the whole scene's brightness (here the scene blurred heavily, times the dirt's
    colour). The pattern is thresholded fractal noise (blotches) plus a few specks; the scene seen through the
    thinner parts of a blotch is also blurred.

    Style: ``coverage`` (fraction of the frame covered at intensity 1), ``opacity`` (of the thickest dirt),
    ``blotch`` (a factor on blotch size), ``brown`` (0 grey dust … 1 brown mud).
    """

    name = "dirt"
    description = "dirty lens: I = I₀·α + β (Gu et al. 2009), defocused blotches attenuate, blur and scatter"
    style = ("coverage", "opacity", "blotch", "brown")
    space = {"intensity": _INTENSITY, "coverage": ParamRange(0.2, 0.45), "opacity": ParamRange(0.6, 0.95),
             "blotch": ParamRange(0.7, 1.5), "brown": ParamRange(0.0, 1.0)}

    def _weather(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        s = h / 240.0

        def dirt() -> tuple[np.ndarray, np.ndarray]:  # the dirt's and its thin parts' (H, W, 3) maps
            m, thin = dirt_maps(h, w, p, rng)
            return merge3(m), merge3(thin)

        m, thin = once(rng, ("dirt", h, w), dirt)
        f = to_float(image)
        # the scene behind thin dirt is blurred (scattering in the layer)
        blurred = cv2.GaussianBlur(f, (0, 0), 3.0 * s)
        blurred -= f
        blurred *= thin
        f += blurred
        # I = I0·α + β: attenuation by the dirt, plus the light it scatters (the scene's low frequencies,
        # times the dirt's colour)
        small = cv2.resize(f, (max(1, w // 8), max(1, h // 8)), interpolation=cv2.INTER_AREA)
        small = cv2.GaussianBlur(small, (0, 0), 3.0)
        b = p["brown"]
        albedo = np.array([0.55 + 0.05 * b, 0.52 - 0.12 * b, 0.48 - 0.26 * b], np.float32)
        small *= albedo * np.float32(0.55)
        small += albedo * np.float32(0.08)
        scatter = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
        scatter -= f
        scatter *= m
        f += scatter
        return to_uint8(f)


def dirt_setup(h: int, w: int, p: dict[str, Any], rng: RngFactory,
               noise: Any) -> tuple[float, float, Any, np.ndarray, float, int]:
    """What the dirt's maps start from (the reference's and the batched implementation's alike): (intensity,
    image scale, the texture stream's Generator after the noise field's draws, the fractal noise field of
    ``noise``, the blotches' threshold on it, the number of specks)."""
    i = p["intensity"]
    g = rng(TEXTURE_STREAM)
    n = noise(g, h, w, cells=max(2, int(round(7 / p["blotch"]))), octaves=4)
    thr = float(np.quantile(n[:: 4, :: 4], 1.0 - p["coverage"] * i ** 0.7))
    return i, h / 240.0, g, n, thr, int(round(60 * i * (h * w) / (320.0 * 240.0)))


def dirt_maps(h: int, w: int, p: dict[str, Any], rng: RngFactory,
              noise: Any = smooth_noise) -> tuple[np.ndarray, np.ndarray]:
    """The dirt's opacity and its thin parts, (H, W) each, from the setting and seed alone: thresholded fractal
    noise (blotches, ``noise``: :func:`smooth_noise` or a function that makes the same field) and specks,
    defocused."""
    i, s, g, n, thr, nsp = dirt_setup(h, w, p, rng, noise)
    m = np.clip((n - thr) / 0.12, 0.0, 1.0)
    # specks: small defocused dots
    specks = np.zeros((h, w), np.float32)
    for _ in range(nsp):
        cv2.circle(specks, (int(g.uniform(0, w) * 16), int(g.uniform(0, h) * 16)),
                   int(g.uniform(1.0, 3.5) * s * 16), float(g.uniform(0.4, 0.9)), -1, cv2.LINE_AA, 4)
    m = np.maximum(m, specks)
    m = cv2.GaussianBlur(m, (0, 0), 2.0 * s)  # defocus: the dirt is on the lens
    m *= np.float32(p["opacity"] * min(1.0, 0.5 + i))
    thin = np.minimum(m * np.float32(2.5), np.float32(1.0))
    return m, thin
