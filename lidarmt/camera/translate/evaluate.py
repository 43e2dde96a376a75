"""How good is a learned weather translator? Measured against the procedural weather it learned from.

lidarmt's shipped translators learned to turn clear Udacity frames into the *procedural* night, rain and snow of
:mod:`lidarmt.camera.transforms` (``scripts/make_weather_domains.py``). On frames they never saw (Udacity frames
1200 on; the cards use 1760..2199, which the steering models did not train on either; any camera source in
general) three images are compared for each frame ``i`` and seed ``s``:

* ``x``: the frame itself;
* ``p``: its procedural weather, with the intensity drawn uniformly from [0.6, 1] and the style from ``(s, i)``,
  as the training domains were made (:func:`weather_draw`);
* ``t``: its translation; a multimodal translator (MUNIT) gets a style vector drawn from N(0, I) with
  ``(s, i)`` (:func:`style_for`), a unimodal one (UNIT) is deterministic.

The numbers (:func:`evaluate_translators`, one :class:`TranslatorScore` per translator):

a. **Content kept**: the mean SSIM (:func:`ssim`, Wang et al. 2004, greyscale) of ``t`` to ``x`` beside that of
   ``p`` to ``x``. The procedural weather keeps the scene by construction, so its SSIM is what "the same
   scene in that weather" scores; a translator that repaints the scene scores lower. A learned translator
   works at a smaller size (a 128-pixel short side for the shipped ones), so the procedural weather shrunk to
   that size and back is scored too (shrinking also smooths the rain streaks, flakes and grain, so that can
   score higher than ``p`` itself).
b. **Weather reached**: a Fréchet distance between Gaussians fitted to image features (FID's formula on a
   small extractor, :class:`FeatureExtractor`): ``d(t, p)`` beside the scale ``d(x, p)`` (how far clear
   frames are from the weather). ``moved = d(t, p) / d(x, p)``: 0 when the translations are as close to the
   procedural weather as it is to itself, 1 when they are as far as the clear frames. The floor ``d(p, p')``
   (two independent procedural draws of the same frames) is what a perfect translator would score with this
   many frames, and ``d(blur(p), p)`` (a Gaussian blur of σ = 4 pixels) what blur alone costs: the trunk sees
   frames at 100x100, so it weighs global tone and coarse structure, and fine detail much less (SSIM sees
   that). The features are **not** ImageNet Inception's, so the values are not comparable with published
   FIDs; they compare translators with each other and with the clear frames, on the same frames.
c. **What the steering models make of it**: per shipped steering model, the mean ``|θ(t) − θ(x)|`` beside
   the mean ``|θ(p) − θ(x)|`` in degrees, and DeepRoad's inconsistency counts ``|θ(t) − θ(x)| > ε`` at
   ε = 10, 20, 30, 40° for both. Models with history (Chauffeur) see windows of consecutive frames with the
   same weather (same draw, same style) on every frame of the window, as in ``lidarmt camera fuzz``; each
   window costs ``history + 1`` follow-ups, so they are judged on an evenly spaced subset of the frames
   (``history_frames``, 100 by default).
d. **Sanity**: the mean brightness (grey level) and RMS contrast (standard deviation of the grey levels) of
   ``t``, ``p`` and ``x``: a "night" translator whose frames are as bright as the clear ones is not one. And
   the *style spread*: how much two draws of one frame differ (mean absolute grey-level difference; two MUNIT
   styles against two procedural draws): a MUNIT whose styles all look alike gives a style search nothing.

Cost, on 300 frames: the procedural weathers and the clear frames' angles are computed once and shared; a
learned translator encodes each frame once; MUNIT then pays one decoder pass per frame and seed (plus the
windows of the history models). On the project's shared 2-core CPU all six shipped translators with the seven
shipped steering models take 13 minutes on 440 frames (``scripts/ship_translators.py --from-shipped``).

Everything is deterministic in (frames, seeds, translator weights) on one machine.

    from lidarmt.camera.translate.evaluate import evaluate_translators
    res = evaluate_translators(["munit-night", "unit-night"], "../shared/data/udacity",
                               frames=range(1760, 2200))
    print(res.markdown()); res.write_json("translators.json")
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._show import md_code
from lidarmt.camera.errors import CameraArgumentError

#: The weathers the shipped translators learned (procedural :mod:`lidarmt.camera.transforms` effects).
WEATHERS = ("night", "rain", "snow")
#: DeepRoad's thresholds (degrees) for |θ(t) − θ(x)| > ε.
EPSILONS_DEG = (10.0, 20.0, 30.0, 40.0)
#: The Udacity frames the shipped translators never saw (frames 0..1199 trained them).
HELD_BACK = range(1200, 1500)
#: The lowest procedural intensity of the training domains (``make_weather_domains.py --min-intensity``).
MIN_INTENSITY = 0.6
#: The steering model whose convolutional trunk gives the features of the Fréchet distance.
FEATURE_MODEL = "dave-dropout"
#: SSIM constants of Wang, Bovik, Sheikh & Simoncelli (IEEE TIP 13(4), 2004): K1, K2, an 11x11 Gaussian
#: window with sigma 1.5.
SSIM_K1, SSIM_K2, SSIM_WINDOW, SSIM_SIGMA = 0.01, 0.03, 11, 1.5
#: The Gaussian blur (pixels of the source frame) of the Fréchet distance's blur reference.
BLUR_SIGMA = 4.0


# --------------------------------------------------------------------------------------------------- SSIM


def to_grey(images: np.ndarray) -> np.ndarray:
    """RGB uint8 (H, W, 3) or (N, H, W, 3) → float64 grey levels 0..255 (ITU-R BT.601 luma, as OpenCV)."""
    import cv2

    a = np.asarray(images)
    if a.ndim == 2:
        return a.astype(np.float64)
    if a.ndim == 3 and a.shape[-1] != 3:  # already grey (N, H, W)
        return a.astype(np.float64)
    if a.ndim == 3:
        return cv2.cvtColor(np.ascontiguousarray(a), cv2.COLOR_RGB2GRAY).astype(np.float64)
    if a.ndim == 4 and a.shape[-1] == 3:
        return np.stack([to_grey(im) for im in a])
    raise CameraArgumentError(f"to_grey: expected (H, W, 3) or (N, H, W, 3) RGB images, got shape {a.shape}")


def ssim_map(a: np.ndarray, b: np.ndarray, *, data_range: float = 255.0) -> np.ndarray:
    """The local SSIM of two greyscale images (H, W) at every pixel (Wang et al. 2004, Eq. 13):

        SSIM = (2 μa μb + C1)(2 σab + C2) / ((μa² + μb² + C1)(σa² + σb² + C2)),

    C1 = (K1 L)², C2 = (K2 L)², L = ``data_range``; local means, variances and covariance weighted by an 11x11
    Gaussian window (σ = 1.5) with ``cv2.GaussianBlur`` (mirrored borders)."""
    import cv2

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise CameraArgumentError(f"ssim: expected two greyscale images of one shape, got {a.shape} and {b.shape}")
    c1 = (SSIM_K1 * data_range) ** 2
    c2 = (SSIM_K2 * data_range) ** 2

    def blur(x: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(x, (SSIM_WINDOW, SSIM_WINDOW), SSIM_SIGMA, borderType=cv2.BORDER_REFLECT_101)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a * mu_a
    var_b = blur(b * b) - mu_b * mu_b
    cov = blur(a * b) - mu_a * mu_b
    return ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))


def ssim(a: np.ndarray, b: np.ndarray, *, data_range: float = 255.0) -> float:
    """Mean SSIM of two images (greyscale (H, W), or RGB (H, W, 3) converted to grey) over the pixels whose
    whole window lies inside the image (Wang et al.'s 'valid' mean; the whole map when the image is smaller
    than the window). 1 for identical images; at most 1."""
    m = ssim_map(to_grey(a), to_grey(b), data_range=data_range)
    r = SSIM_WINDOW // 2
    inner = m[r:-r, r:-r] if min(m.shape) > 2 * r else m
    return float(inner.mean())


# ----------------------------------------------------------------------------------------- Fréchet distance


def gaussian_fit(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and covariance (d, d) of (N, d) features (unbiased, N - 1)."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2 or len(f) < 2:
        raise CameraArgumentError(f"gaussian_fit: expected (N >= 2, d) features, got shape {f.shape}")
    return f.mean(axis=0), np.atleast_2d(np.cov(f, rowvar=False))


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray, cov2: np.ndarray) -> float:
    """The Fréchet (2-Wasserstein²) distance of N(mu1, cov1) and N(mu2, cov2), the formula of FID
    (Heusel et al. 2017): ``|mu1 − mu2|² + tr(cov1 + cov2 − 2 (cov1 cov2)^½)``, with ``scipy.linalg.sqrtm``.
    A near-singular product gets ``1e-6 · I`` added to both covariances (as pytorch-fid does); the imaginary
    part that rounding leaves in the square root is dropped. Never negative."""
    from scipy import linalg

    mu1, mu2 = np.atleast_1d(mu1).astype(np.float64), np.atleast_1d(mu2).astype(np.float64)
    cov1, cov2 = np.atleast_2d(cov1).astype(np.float64), np.atleast_2d(cov2).astype(np.float64)
    if mu1.shape != mu2.shape or cov1.shape != cov2.shape or cov1.shape != (len(mu1), len(mu1)):
        raise CameraArgumentError(f"frechet_distance: shapes do not match ({mu1.shape}, {cov1.shape}; {mu2.shape}, "
                                  f"{cov2.shape})")
    diff = mu1 - mu2
    with warnings.catch_warnings(record=True) as caught:  # scipy warns about a singular product
        warnings.simplefilter("always")
        covmean = linalg.sqrtm(cov1 @ cov2)
    if caught or not np.isfinite(covmean).all():
        eps = 1e-6 * np.eye(len(mu1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            covmean = linalg.sqrtm((cov1 + eps) @ (cov2 + eps))
    covmean = np.real(covmean)
    d = float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2.0 * np.trace(covmean))
    return max(0.0, d)


def feature_distance(fa: np.ndarray, fb: np.ndarray) -> float:
    """Fréchet distance of Gaussians fitted to two feature sets (N, d) and (M, d)."""
    return frechet_distance(*gaussian_fit(fa), *gaussian_fit(fb))


class FeatureExtractor:
    """Pooled convolutional features of a shipped steering model: its preprocessing, then its convolutional
    trunk (``module.features`` of the zoo's feed-forward models), averaged over the spatial positions: one
    vector per image (64 values for ``dave-dropout``).

    Why ``dave-dropout`` (the default): every lidarmt install has it, it was trained on these very frames (the
    Udacity drive), it is small (three 3x3 convolutions) and fast, it sees the *whole* frame (resized to
    100x100), and its 64 pooled channels make a covariance that 300 frames estimate well (Inception's 2048
    would need thousands). How well it tells weather from the ordinary change of scenery
    (``scripts/feature_separation.py``: 150 frames, their procedural weather at intensity U[0.6, 1], and 150
    clear frames of 0..299; steering models retrained on the corrected labels, 2026-11-27): on frames 1200..1499
    the distance from clear to night / rain / snow is 9x / 14x / 32x the distance between the two stretches of
    the clear drive, where ``dave-orig`` gives 4x / 5x / 16x and ``dave2`` (which crops the frame to the road
    band) 1.9x / 0.6x / 5.8x; on the cards' frames 1760..2199, whose scenery differs more from the drive's start,
    1.5x / 1.6x / 3.5x (``dave-orig`` 2.0x / 1.8x / 5.2x, ``dave2`` 0.7x / 0.2x / 0.4x): for ``dave2`` weather is
    no farther from clear than another stretch of road, and on those late frames ``dave-dropout``'s distances
    compare translators with each other (``moved`` divides by the same frames' d(x, p)) better than they
    separate weather from scenery. The features come from a network trained to steer, not to recognise weather, so the
    distance says how differently *a steering network's trunk* sees two sets of frames.
    """

    def __init__(self, model: str = FEATURE_MODEL, *, device: str = "cpu", batch_size: int = 64) -> None:
        from lidarmt.camera.models import zoo
        from lidarmt.camera.models.archs import get_arch

        self.name = model
        self.arch = get_arch(model)
        if self.arch.input_spec.history:
            raise CameraArgumentError(f"feature model {model!r} takes windows of frames; pick a single-frame model "
                                      "(dave2, dave-orig, epoch ...)")
        net = zoo.load(model, device=device).module
        trunk = getattr(net, "features", None)
        if trunk is None:
            raise CameraArgumentError(f"feature model {model!r} has no convolutional trunk (module.features)")
        self.trunk = trunk.eval()
        self.device = device
        self.batch_size = max(1, int(batch_size))

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """(N, H, W, 3) uint8 RGB → (N, C) float64 pooled features."""
        import torch

        images = np.asarray(images)
        outs = []
        with torch.inference_mode():
            for i in range(0, len(images), self.batch_size):
                x = self.arch.preprocess(images[i:i + self.batch_size]).to(self.device)
                y = self.trunk(x)
                outs.append(y.float().mean(dim=(2, 3)).cpu().numpy().astype(np.float64))
        return np.concatenate(outs) if outs else np.zeros((0, 0))


# --------------------------------------------------------------------------------------- the draws


def weather_draw(seed: int, frame: int, *, min_intensity: float = MIN_INTENSITY) -> tuple[float, int]:
    """``(intensity, transformation seed)`` of frame ``frame``'s procedural weather under seed ``seed``:
    intensity uniform in [``min_intensity``, 1] (rounded to 3 decimals) and the style seed, drawn in that order
    from ``numpy.random.default_rng([seed, frame])`` as ``make_weather_domains.py`` draws them."""
    rng = np.random.default_rng([int(seed), int(frame)])
    intensity = float(rng.uniform(min_intensity, 1.0))
    return round(intensity, 3), int(rng.integers(0, 2**31 - 1))


def style_for(style_dim: int, seed: int, frame: int) -> np.ndarray:
    """The style vector (float32, from N(0, I)) frame ``frame`` is translated with under seed ``seed``."""
    return np.random.default_rng([int(seed), int(frame), 1]).standard_normal(style_dim).astype(np.float32)


def procedural(images: np.ndarray, weather: str, seed: int, frame: int, *,
               min_intensity: float = MIN_INTENSITY) -> np.ndarray:
    """``images`` (H, W, 3) or (T, H, W, 3) in frame ``frame``'s procedural ``weather`` (one draw for all)."""
    from lidarmt.camera.transforms.registry import get_transform

    t = get_transform(weather)
    intensity, tseed = weather_draw(seed, frame, min_intensity=min_intensity)
    params = {"intensity": intensity}
    if images.ndim == 3:
        return t.apply(images, params, tseed)
    return np.stack([t.apply(im, params, tseed) for im in images])


def weather_of(translator: Any) -> str:
    """The procedural weather a translator learned: its ``weather``, else its training domain B's folder name,
    else the last word of its name, when that names a weather transformation."""
    from lidarmt.camera.transforms.registry import available

    known = set(available())
    meta = getattr(translator, "meta", {}) or {}
    for cand in (getattr(translator, "weather", ""), Path(str(meta.get("domain_b", ""))).name,
                 str(getattr(translator, "name", "")).rsplit("-", 1)[-1]):
        if cand and cand in known:
            return cand
    raise CameraArgumentError(f"translator {getattr(translator, 'name', translator)!r}: cannot tell which procedural "
                              f"weather it learned; pass weathers={{name: 'night'}} (one of {', '.join(WEATHERS)})")


# ------------------------------------------------------------------------------------------ the results


@dataclass
class ModelErrors:
    """One steering model on one translator's frames: translated vs procedural."""

    model: str
    pairs: int
    mean_abs_deg_translated: float
    mean_abs_deg_procedural: float
    deeproad_translated: dict[str, int]  # str(ε in degrees) → frames with |θ(t) − θ(x)| > ε
    deeproad_procedural: dict[str, int]


@dataclass
class TranslatorScore:
    """Every number of one translator (see the module docstring)."""

    name: str
    arch: str
    weather: str
    style_dim: int
    frames: int
    seeds: list[int]
    ssim_translated: float  # mean SSIM(t, x), greyscale
    ssim_procedural: float  # mean SSIM(p, x)
    ssim_procedural_resampled: float | None  # mean SSIM(p at the translator's working size and back, x)
    fid_translated: float  # d(t, p)
    fid_clear: float  # d(x, p): the scale
    fid_floor: float  # d(p, p'): two procedural draws of the same frames
    fid_translated_clear: float  # d(t, x): how far the translation moved from the clear frames
    fid_blur_reference: float  # d(p blurred with a Gaussian of BLUR_SIGMA pixels, p): what blur alone costs
    moved: float  # d(t, p) / d(x, p); 0 = reached the weather, 1 = as far as the clear frames
    brightness: dict[str, float]  # mean grey level of "translated", "procedural", "clear"
    contrast: dict[str, float]  # mean RMS contrast (std of grey levels)
    models: list[ModelErrors] = field(default_factory=list)
    # mean |grey level difference| between two draws of one frame (two styles; two procedural draws)
    style_spread_translated: float = 0.0
    style_spread_procedural: float = 0.0
    translate_seconds: float = 0.0
    translated_images: int = 0

    @property
    def images_per_s(self) -> float:
        return self.translated_images / self.translate_seconds if self.translate_seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["images_per_s"] = self.images_per_s
        return d

    def model(self, name: str) -> ModelErrors:
        for m in self.models:
            if m.model == name:
                return m
        raise KeyError(name)


def _f(v: float | None, nd: int = 3) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{nd}f}"


def _g(v: float | None) -> str:
    """Three significant digits: the Fréchet distances' scale is the feature trunk's."""
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.3g}"


@dataclass
class Evaluation:
    """The measurements of several translators on the same frames and seeds: tables and JSON."""

    source: str
    frame_indices: list[int]
    seeds: list[int]
    feature_model: str
    models: list[str]
    epsilons_deg: list[float]
    scores: list[TranslatorScore]
    seconds: float
    min_intensity: float = MIN_INTENSITY
    history_frames: int = 0  # frames the models with history were judged on

    def to_dict(self) -> dict[str, Any]:
        fr = self.frame_indices
        contiguous = bool(fr) and fr == list(range(fr[0], fr[-1] + 1))
        return {"source": self.source, "frames": len(fr),
                "frame_range": [fr[0], fr[-1] + 1] if contiguous else None,
                "frame_indices": None if contiguous else fr, "seeds": self.seeds,
                "feature_model": self.feature_model, "models": self.models, "epsilons_deg": self.epsilons_deg,
                "min_intensity": self.min_intensity, "history_frames": self.history_frames,
                "seconds": round(self.seconds, 2),
                "translators": [s.to_dict() for s in self.scores]}

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        from lidarmt._atomic import atomic_write_text

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, json.dumps(self.to_dict(), indent=2) + "\n")
        return p

    # -- tables: (head, rows) pairs for lidarmt.engine.report.markdown_table / rich_table
    def quality_rows(self) -> tuple[list[str], list[list[str]]]:
        head = ["translator", "weather", "SSIM(t,x)", "SSIM(p,x)", "SSIM(p↓,x)", "d(t,p)", "d(x,p)", "d(p,p′)",
                "d(blur p,p)", "moved",
                "grey t/p/x", "contrast t/p/x", "img/s"]
        rows = []
        for s in self.scores:
            b, c = s.brightness, s.contrast
            rows.append([s.name, s.weather, _f(s.ssim_translated), _f(s.ssim_procedural),
                         _f(s.ssim_procedural_resampled), _g(s.fid_translated),
                         _g(s.fid_clear), _g(s.fid_floor),
                         _g(s.fid_blur_reference), _f(s.moved, 2),
                         f"{b['translated']:.0f}/{b['procedural']:.0f}/{b['clear']:.0f}",
                         f"{c['translated']:.0f}/{c['procedural']:.0f}/{c['clear']:.0f}", _f(s.images_per_s, 1)])
        return head, rows

    def steering_rows(self) -> tuple[list[str], list[list[str]]]:
        eps = [f"{e:g}" for e in self.epsilons_deg]
        head = ["translator", "model", "mean |Δθ| t (°)", "mean |Δθ| p (°)",
                *[f">{e}° t/p" for e in eps], "pairs"]
        rows = []
        for s in self.scores:
            for m in s.models:
                rows.append([s.name, m.model, _f(m.mean_abs_deg_translated, 2), _f(m.mean_abs_deg_procedural, 2),
                             *[f"{m.deeproad_translated[e]}/{m.deeproad_procedural[e]}" for e in eps], str(m.pairs)])
        return head, rows

    def markdown(self) -> str:
        from lidarmt.engine.report import markdown_table

        fr = self.frame_indices
        where = f"frames {fr[0]}..{fr[-1]}" if fr == list(range(fr[0], fr[-1] + 1)) else f"{len(fr)} frames"
        intro = (f"{len(fr)} frames of {md_code(self.source)} ({where}) × seeds {', '.join(map(str, self.seeds))}; "
                 f"t = translated, p = procedural weather (intensity U[{self.min_intensity:g}, 1]), x = the frame, "
                 "p↓ = p at the translator's working size and back. "
                 f"d = Fréchet distance of {md_code(self.feature_model)}'s pooled conv features; moved = d(t,p)/d(x,p).")
        return "\n\n".join([intro, markdown_table(*self.quality_rows()), markdown_table(*self.steering_rows())])

    def rich_tables(self) -> list[Any]:
        from lidarmt.engine.report import rich_table

        return [rich_table("Translators against procedural weather", *self.quality_rows()),
                rich_table("Steering models: |θ(t) − θ(x)| and DeepRoad counts (translated/procedural)",
                           *self.steering_rows())]


# ----------------------------------------------------------------------------------------- measuring


def _grey_stats(images: Iterable[np.ndarray]) -> tuple[float, float]:
    means, stds = [], []
    for im in images:
        g = to_grey(im)
        means.append(float(g.mean()))
        stds.append(float(g.std()))
    return float(np.mean(means)), float(np.mean(stds))


def _resample(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image`` shrunk to (height, width) ``size`` and back, as a learned translator resizes its frames."""
    import cv2

    h, w = image.shape[:2]
    small = cv2.resize(image, (size[1], size[0]), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def _spread_of(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute grey-level difference of two sets of the same frames, frame by frame."""
    return float(np.mean([np.abs(to_grey(x) - to_grey(y)).mean() for x, y in zip(a, b, strict=True)]))


def _spread(idx: list[int], most: int | None) -> list[int]:
    """At most ``most`` of ``idx``, evenly spaced (all of them when ``most`` is None or 0)."""
    if not most or len(idx) <= most:
        return list(idx)
    keep = np.linspace(0, len(idx) - 1, most).round().astype(int)
    return [idx[k] for k in sorted(set(keep.tolist()))]


class _Runner:
    """The frames, the models and how one *set* of follow-ups is judged.

    A set is one way of changing every frame (nothing, a procedural weather under a seed, a translator under a
    seed), given by two functions: ``single(frames)`` → (n, H, W, 3) follow-ups, and ``windows(frames)`` →
    (n, history + 1, H, W, 3) follow-up windows (the frame's own change applied to every frame of its window).
    Single-frame models judge the singles of every frame; models with history judge the windows of
    ``hidx`` (at most ``history_frames`` frames)."""

    def __init__(self, steer: list[Any], idx: list[int], hidx: list[int], base: dict[int, np.ndarray],
                 history: int, chunk: int) -> None:
        self.steer, self.idx, self.hidx, self.base = steer, idx, hidx, base
        self.history = history
        self.chunk = max(1, chunk)
        self.hists = [int(m.input_spec.history) for m in steer]

    def window(self, i: int) -> list[int]:
        """Source frames ``i - history .. i`` (before the first frame: the first frame, as campaigns pad)."""
        return [max(0, j) for j in range(i - self.history, i + 1)]

    def frames_of(self, k: int) -> list[int]:
        return self.hidx if self.hists[k] else self.idx

    def judge(self, single: Callable[[list[int]], np.ndarray],
              windows: Callable[[list[int]], np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """(singles of every frame, angles per model in radians on its frames)."""
        singles = np.concatenate([single(self.idx[k:k + self.chunk]) for k in range(0, len(self.idx), self.chunk)])
        theta: list[np.ndarray] = []
        flat = [k for k, h in enumerate(self.hists) if h == 0]
        for k in flat:
            theta.append(np.asarray(self.steer[k].predict(singles), dtype=np.float64))
        deep = [k for k, h in enumerate(self.hists) if h > 0]
        per: dict[int, list[np.ndarray]] = {k: [] for k in deep}
        if deep:
            for c in range(0, len(self.hidx), self.chunk):
                wins = windows(self.hidx[c:c + self.chunk])
                for k in deep:
                    h = self.hists[k]
                    x = np.ascontiguousarray(wins[:, wins.shape[1] - h - 1:])
                    per[k].append(np.asarray(self.steer[k].predict(x), dtype=np.float64))
        out: list[np.ndarray] = []
        fi = iter(theta)
        for k, h in enumerate(self.hists):
            out.append(np.concatenate(per[k]) if h else next(fi))
        return singles, out


def _translate_sets(tr: Any, sd: int, run: _Runner, need: list[int], seeds: list[int]
                    ) -> tuple[np.ndarray, list[list[np.ndarray]], float, int, np.ndarray | None]:
    """Judge translator ``tr`` under each seed: (translated singles of every (seed, frame), angles per seed and
    model, seconds spent translating, images translated, the frames under a second style when multimodal). A unimodal translator translates each needed frame
    once; a multimodal one with ``encode``/``decode`` encodes each frame once and decodes per style."""
    base = run.base
    h, wd = base[need[0]].shape[:2]
    split = hasattr(tr, "encode") and hasattr(tr, "decode")
    clock = {"s": 0.0, "n": 0}
    t0 = time.perf_counter()
    codes: dict[int, Any] = {}
    cache: dict[int, np.ndarray] = {}  # unimodal translations, per source frame
    if split:
        enc = tr.encode(np.stack([base[j] for j in need]))
        codes = {j: enc[k:k + 1] for k, j in enumerate(need)}
    if sd == 0:
        if split:
            import torch

            out = tr.decode(torch.cat([codes[j] for j in need]), None, (h, wd))
        else:
            out = tr.translate(np.stack([base[j] for j in need]))
        cache = dict(zip(need, out, strict=True))
        clock["n"] += len(need)
    clock["s"] += time.perf_counter() - t0

    def styled(frames_: list[int], owners: list[int], s: int) -> np.ndarray:
        """Translations of source frames ``frames_``, each with the style of frame ``owners[k]`` (seed ``s``)."""
        t1 = time.perf_counter()
        styles = np.stack([style_for(sd, s, o) for o in owners])
        if split:
            import torch

            out = tr.decode(torch.cat([codes[j] for j in frames_]), styles, (h, wd))
        else:
            out = np.concatenate([tr.translate(base[j][None], style=st) for j, st in zip(frames_, styles,
                                                                                         strict=True)])
        clock["s"] += time.perf_counter() - t1
        clock["n"] += len(out)
        return out

    def cached_single(c: list[int]) -> np.ndarray:
        return np.stack([cache[i] for i in c])

    def cached_windows(c: list[int]) -> np.ndarray:
        return np.stack([np.stack([cache[j] for j in run.window(i)]) for i in c])

    singles, thetas = [], []
    for s in seeds:
        if sd == 0:
            ts, th = run.judge(cached_single, cached_windows)
        else:
            def single(c: list[int], s: int = s) -> np.ndarray:
                return styled(c, c, s)

            def windows(c: list[int], s: int = s) -> np.ndarray:
                flat = styled([j for i in c for j in run.window(i)], [i for i in c for _ in run.window(i)], s)
                return flat.reshape(len(c), run.history + 1, *flat.shape[1:])

            ts, th = run.judge(single, windows)
        singles.append(ts)
        thetas.append(th)
    alt = styled(run.idx, run.idx, seeds[0] + 1_000_003) if sd else None
    return np.concatenate(singles), thetas, clock["s"], int(clock["n"]), alt


def evaluate_translators(
    translators: Sequence[Any],
    source: str | os.PathLike[str] | Any,
    *,
    frames: Iterable[int] | None = None,
    seeds: Sequence[int] = (0,),
    models: Sequence[str] | None = None,
    feature_model: str = FEATURE_MODEL,
    weathers: Mapping[str, str] | None = None,
    epsilons_deg: Sequence[float] = EPSILONS_DEG,
    min_intensity: float = MIN_INTENSITY,
    history_frames: int | None = 100,
    device: str = "cpu",
    chunk: int = 16,
    progress: Callable[[str], None] | None = None,
) -> Evaluation:
    """Measure ``translators`` (names or paths for :func:`~lidarmt.camera.translate.registry.get_translator`, or
    translator objects) on ``frames`` of ``source`` (any camera source :func:`~lidarmt.camera.sources.
    open_images` reads, or an open one; default: :data:`HELD_BACK` when the source is that long, else every
    frame) under each of ``seeds``, against the procedural weather each learned (``weathers`` maps a translator's
    name to it when :func:`weather_of` cannot tell).

    ``models``: steering models (names for :func:`~lidarmt.camera.models.registry.get_model`; default every
    shipped one); models with history (Chauffeur) are judged on at most ``history_frames`` of the frames,
    evenly spaced (None or 0: all), because each of their windows costs ``history + 1`` follow-up images;
    ``feature_model``: the trunk of the Fréchet distance (:class:`FeatureExtractor`). Procedural weather and
    clear predictions are computed once per weather and seed and shared by the translators of that weather; a
    translator with ``encode``/``decode`` (the learned ones) encodes each frame once. See the module docstring
    for what is measured.
    """
    import cv2

    from lidarmt.camera.models.registry import available as available_models
    from lidarmt.camera.models.registry import get_model
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.translate.registry import get_translator

    t_start = time.perf_counter()
    say = progress or (lambda _msg: None)
    if not translators:
        raise CameraArgumentError("evaluate_translators: no translator given")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise CameraArgumentError("evaluate_translators: give at least one seed")
    trs = [get_translator(str(t), device=device) if isinstance(t, str | os.PathLike) else t for t in translators]
    wmap = dict(weathers or {})
    tw = [wmap.get(t.name) or weather_of(t) for t in trs]
    model_names = list(models) if models is not None else available_models()
    if not model_names:
        raise CameraArgumentError("evaluate_translators: no steering model (none shipped); pass models=[...]")
    opts = {} if device == "cpu" else {"device": device}
    steer = [get_model(m, **opts) for m in model_names]
    history = max([int(m.input_spec.history) for m in steer] + [0])
    extractor = FeatureExtractor(feature_model, device=device)
    eps = [float(e) for e in epsilons_deg]

    own = isinstance(source, str | os.PathLike)
    src = open_images(source) if own else source
    try:
        n_src = len(src)
        if frames is None:
            idx = list(HELD_BACK) if n_src >= HELD_BACK.stop else list(range(n_src))
        else:
            idx = [int(i) for i in frames]
        bad = [i for i in idx if not 0 <= i < n_src]
        if bad:
            raise CameraArgumentError(f"frames {bad[:3]}: outside the {n_src} frames of {src.path}; pick frames "
                                      f"0..{n_src - 1}")
        if len(idx) < 2:
            raise CameraArgumentError(f"evaluate_translators: need at least 2 frames, got {len(idx)}")
        hidx = _spread(idx, history_frames) if history else []
        say(f"reading {len(idx)} frames (+{history} of history) of {src.path}")
        need = sorted(set(idx) | {max(0, j) for i in hidx for j in range(i - history, i + 1)})
        base = {j: src[j].image for j in need}
        source_name = str(getattr(src, "path", source))
    finally:
        if own:
            src.close()

    run = _Runner(steer, idx, hidx, base, history, chunk)

    def stack(frames_: list[int]) -> np.ndarray:
        return np.stack([base[j] for j in frames_])

    # the clear frames: angles, features, grey levels (seed-independent)
    clear, theta_x = run.judge(stack, lambda c: np.stack([stack(run.window(i)) for i in c]))
    feat_x = np.tile(extractor(clear), (len(seeds), 1))  # one row per (seed, frame), as the follow-ups
    grey_x = _grey_stats(clear)
    theta_x_rep = [np.tile(t, len(seeds)) for t in theta_x]

    # procedural weather per (weather, seed), shared by the translators of that weather; and the floor's draw
    proc: dict[str, dict[str, Any]] = {}
    for w in dict.fromkeys(tw):
        say(f"procedural {w} for {len(idx)} frames x {len(seeds)} seed(s)")
        singles, thetas = [], []
        for s in seeds:
            ps, th = run.judge(
                lambda c, w=w, s=s: np.stack([procedural(base[i], w, s, i, min_intensity=min_intensity) for i in c]),
                lambda c, w=w, s=s: np.stack([procedural(stack(run.window(i)), w, s, i, min_intensity=min_intensity)
                                              for i in c]))
            singles.append(ps)
            thetas.append(th)
        ps = np.concatenate(singles)
        floor = np.stack([procedural(base[i], w, s + 1_000_003, i, min_intensity=min_intensity)
                          for s in seeds for i in idx])
        proc[w] = {"images": ps, "theta": [np.concatenate([t[k] for t in thetas]) for k in range(len(steer))],
                   "features": extractor(ps), "floor": extractor(floor),
                   "ssim": float(np.mean([ssim(p, clear[n % len(idx)]) for n, p in enumerate(ps)])),
                   "grey": _grey_stats(ps), "spread": _spread_of(ps, floor),
                   "blur": feature_distance(extractor(np.stack([cv2.GaussianBlur(q, (0, 0), BLUR_SIGMA) for q in ps])),
                                            extractor(ps))}

    scores: list[TranslatorScore] = []
    for tr, w in zip(trs, tw, strict=True):
        say(f"translating with {tr.name} ({w})")
        sd = int(getattr(tr, "style_dim", 0) or 0)
        ts, thetas, t_translate, made, alt = _translate_sets(tr, sd, run, need, seeds)
        p = proc[w]
        feat_t = extractor(ts)
        resampled = None
        if hasattr(tr, "work_size"):  # what the procedural weather keeps at the translator's resolution
            size = tr.work_size(*clear.shape[1:3])
            resampled = float(np.mean([ssim(_resample(q, size), clear[n % len(idx)])
                                       for n, q in enumerate(p["images"])]))
        d_tp = feature_distance(feat_t, p["features"])
        d_xp = feature_distance(feat_x, p["features"])
        errs = []
        for k, m in enumerate(steer):
            dt = np.abs(np.concatenate([t[k] for t in thetas]) - theta_x_rep[k])
            dp = np.abs(p["theta"][k] - theta_x_rep[k])
            errs.append(ModelErrors(
                model=str(getattr(m, "name", model_names[k])), pairs=len(dt),
                mean_abs_deg_translated=float(np.degrees(dt.mean())),
                mean_abs_deg_procedural=float(np.degrees(dp.mean())),
                deeproad_translated={f"{e:g}": int((dt > math.radians(e)).sum()) for e in eps},
                deeproad_procedural={f"{e:g}": int((dp > math.radians(e)).sum()) for e in eps}))
        gt = _grey_stats(ts)
        scores.append(TranslatorScore(
            name=str(tr.name), arch=str(getattr(tr, "arch", "?")), weather=w, style_dim=sd, frames=len(idx),
            seeds=list(seeds),
            ssim_translated=float(np.mean([ssim(t, clear[n % len(idx)]) for n, t in enumerate(ts)])),
            ssim_procedural=p["ssim"], ssim_procedural_resampled=resampled, fid_translated=d_tp, fid_clear=d_xp,
            fid_floor=feature_distance(p["floor"], p["features"]), fid_translated_clear=feature_distance(feat_t, feat_x),
            fid_blur_reference=p["blur"],
            moved=d_tp / d_xp if d_xp > 0 else float("nan"),
            brightness={"translated": gt[0], "procedural": p["grey"][0], "clear": grey_x[0]},
            contrast={"translated": gt[1], "procedural": p["grey"][1], "clear": grey_x[1]},
            models=errs, style_spread_translated=_spread_of(ts[:len(idx)], alt) if alt is not None else 0.0,
            style_spread_procedural=p["spread"], translate_seconds=t_translate, translated_images=made))
    return Evaluation(source=source_name, frame_indices=idx, seeds=seeds, feature_model=feature_model,
                      models=[str(getattr(m, "name", n)) for m, n in zip(steer, model_names, strict=True)],
                      epsilons_deg=eps, scores=scores, seconds=time.perf_counter() - t_start,
                      min_intensity=min_intensity, history_frames=len(hidx))
