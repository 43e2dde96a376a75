"""DeepTest's seven simple transformations (Tian et al., ICSE 2018, Section 3.3, Tables 2 and 4).

Each one's ``grid`` is the 10 settings of the paper's Table 4, in order; ``space`` is the range a search may
use (wide enough for Table 4 and for the ranges of the reference code's guided search, e.g. brightness
−21..20, rotation ±30°).

Faithfulness to the reference code (ARiSE-Lab/deepTest, ``testgen/*_testgen_coverage.py``), item by item:

* **Affine ones** apply the 2×3 matrices of Table 2 with ``cv2.warpAffine(img, M, (W, H))`` and OpenCV's
  defaults, as the code did: the output keeps the input's size, bilinear interpolation, pixels mapped from
  outside the image are black (``BORDER_CONSTANT``, value 0).
* **Rotation** is about the image centre ``(W/2, H/2)`` (the code's ``cv2.getRotationMatrix2D``), not about
  the origin as Table 2's bare matrix would be; positive angles turn the content counter-clockwise.
* **Scale** follows Table 2's matrix ``[[sx, 0, 0], [0, sy, 0]]``, a scaling about the image origin (the
  top-left corner) with the output size kept: the top-left ``W/sx × H/sy`` part fills the frame. The code
  called ``cv2.resize(img, fx=sx, fy=sy, interpolation=INTER_CUBIC)``, an image ``s`` times larger whose
  top-left ``W × H`` corner is this same picture (up to half a pixel of resampling phase); we keep its bicubic
  interpolation. (It then handed the enlarged frame to the model's own crop/resize, which steering
  models with a fixed input size cannot take from a transformation that must keep the size.)
* **Shear** is horizontal, ``[[1, sx, 0], [0, 1, 0]]`` with Table 4's ``sx`` = −1.0..−0.1 (the code wrote
  ``factor = params * (-1.0)`` for params 0.1..1.0: the same matrices). A vertical ``sy`` may be given.
* **Contrast** multiplies every channel by α with saturation (the paper's ``α·x``). The code passed
  ``np.array([alpha])`` to ``cv2.multiply``, which current OpenCV reads as the scalar (α, 0, 0, 0): it scales
  the first channel and zeroes the other two. We follow the paper.
* **Brightness** adds β to every channel with saturation (the code's ``image_brightness2``: ``cv2.add`` per
  channel).
* **Blur** has the code's ten filters, in the code's order of ids 1..10: averaging 3, 4, 5; Gaussian 3, 5, 7
  (σ from the kernel size, ``sigma=0``); median 3, 5; averaging 6; bilateral (9, 75, 75). Table 4 lists a
  fourth Gaussian "3×3" where the code has averaging 6×6; we follow the code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np

from lidarmt.camera.transforms._common import BaseTransform, RngFactory
from lidarmt.camera.transforms.base import ParamRange


def _r(v: float) -> float:
    """Grid values without binary noise: 0.1 * 3 is 0.30000000000000004, the grid says 0.3."""
    return round(v, 6)


class Brightness(BaseTransform):
    """Add a bias β to every channel, saturating at 0 and 255: ``clip(x + β)`` (DeepTest's brightness)."""

    name = "brightness"
    description = "DeepTest brightness: x + β per channel, saturating (Table 4: β = 10..100)"
    required = ("beta",)
    space = {"beta": ParamRange(-100.0, 100.0)}
    grid = tuple({"beta": float(b)} for b in range(10, 101, 10))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        b = p["beta"]
        return cv2.add(image, (b, b, b, 0.0))

    def label(self, params: Mapping[str, Any]) -> str:
        return f"brightness β={float(params['beta']):g}"


class Contrast(BaseTransform):
    """Multiply every channel by a gain α, saturating: ``clip(round(α·x))`` (DeepTest's contrast)."""

    name = "contrast"
    description = "DeepTest contrast: α·x per channel, saturating (Table 4: α = 1.2..3.0)"
    required = ("alpha",)
    space = {"alpha": ParamRange(0.1, 3.0)}
    grid = tuple({"alpha": _r(1.2 + 0.2 * i)} for i in range(10))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        a = p["alpha"]
        return cv2.multiply(image, (a, a, a, 1.0))

    def label(self, params: Mapping[str, Any]) -> str:
        return f"contrast α={float(params['alpha']):g}"


def _warp(image: np.ndarray, m: np.ndarray, interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    h, w = image.shape[:2]
    return cv2.warpAffine(image, m, (w, h), flags=interpolation, borderMode=cv2.BORDER_CONSTANT,
                          borderValue=(0, 0, 0))


class Translation(BaseTransform):
    """Move the content by (tx, ty) pixels (right, down): Table 2's ``[[1, 0, tx], [0, 1, ty]]``."""

    name = "translation"
    description = "DeepTest translation by (tx, ty) px, black border (Table 4: (10,10)..(100,100))"
    required = ("tx", "ty")
    space = {"tx": ParamRange(-100.0, 100.0), "ty": ParamRange(-100.0, 100.0)}
    grid = tuple({"tx": float(t), "ty": float(t)} for t in range(10, 101, 10))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        return _warp(image, np.array([[1.0, 0.0, p["tx"]], [0.0, 1.0, p["ty"]]]))

    def label(self, params: Mapping[str, Any]) -> str:
        return f"translation ({float(params['tx']):g}, {float(params['ty']):g})"


class Scale(BaseTransform):
    """Scale about the image origin by (sx, sy), bicubic, size kept: Table 2's ``[[sx, 0, 0], [0, sy, 0]]``.
    """

    name = "scale"
    description = "DeepTest scale about the top-left origin, size kept, bicubic (Table 4: 1.5..6)"
    required = ("sx", "sy")
    space = {"sx": ParamRange(0.5, 6.0), "sy": ParamRange(0.5, 6.0)}
    grid = tuple({"sx": _r(1.5 + 0.5 * i), "sy": _r(1.5 + 0.5 * i)} for i in range(10))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        return _warp(image, np.array([[p["sx"], 0.0, 0.0], [0.0, p["sy"], 0.0]]), cv2.INTER_CUBIC)

    def label(self, params: Mapping[str, Any]) -> str:
        sx, sy = float(params["sx"]), float(params["sy"])
        return f"scale {sx:g}" if sx == sy else f"scale ({sx:g}, {sy:g})"


class Shear(BaseTransform):
    """Shear by ``[[1, sx, 0], [sy, 1, 0]]`` (Table 2); DeepTest's settings are horizontal (sy = 0)."""

    name = "shear"
    description = "DeepTest horizontal shear [[1, sx, 0], [0, 1, 0]], black border (Table 4: sx = -1.0..-0.1)"
    required = ("sx",)
    defaults = {"sy": 0.0}
    space = {"sx": ParamRange(-1.0, 1.0), "sy": ParamRange(-1.0, 1.0)}
    grid = tuple({"sx": _r(-1.0 + 0.1 * i)} for i in range(10))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        return _warp(image, np.array([[1.0, p["sx"], 0.0], [p["sy"], 1.0, 0.0]]))

    def label(self, params: Mapping[str, Any]) -> str:
        sy = float(params.get("sy", 0.0))
        return f"shear {float(params['sx']):g}" + (f", {sy:g}" if sy else "")


class Rotation(BaseTransform):
    """Rotate by ``angle`` degrees (counter-clockwise) about the image centre, black border."""

    name = "rotation"
    description = "DeepTest rotation about the centre (W/2, H/2), black border (Table 4: 3..30 degrees)"
    required = ("angle",)
    space = {"angle": ParamRange(-30.0, 30.0)}
    grid = tuple({"angle": float(a)} for a in range(3, 31, 3))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        h, w = image.shape[:2]
        # Table 2's rotation conjugated by the move to the centre, as the code built it
        m = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), p["angle"], 1.0)
        return _warp(image, m)

    def label(self, params: Mapping[str, Any]) -> str:
        return f"rotation {float(params['angle']):g}°"


#: The reference code's blur ids 1..10: (filter, kernel size) — bilateral is (9, 75, 75).
BLUR_FILTERS: dict[int, tuple[str, int]] = {
    1: ("average", 3), 2: ("average", 4), 3: ("average", 5),
    4: ("gaussian", 3), 5: ("gaussian", 5), 6: ("gaussian", 7),
    7: ("median", 3), 8: ("median", 5), 9: ("average", 6), 10: ("bilateral", 9),
}


class Blur(BaseTransform):
    """One of DeepTest's ten blur filters, chosen by ``id`` (1..10, the reference code's numbering)."""

    name = "blur"
    description = ("DeepTest blur: averaging 3/4/5/6, Gaussian 3/5/7, median 3/5, bilateral (9, 75, 75); "
                   "id 1..10 as in the reference code")
    required = ("id",)
    space = {"id": ParamRange(1, 10, integer=True)}
    grid = tuple({"id": i} for i in range(1, 11))

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        kind, k = BLUR_FILTERS[p["id"]]
        if kind == "average":
            return cv2.blur(image, (k, k))
        if kind == "gaussian":
            return cv2.GaussianBlur(image, (k, k), 0)
        if kind == "median":
            return cv2.medianBlur(image, k)
        return cv2.bilateralFilter(image, 9, 75, 75)

    def label(self, params: Mapping[str, Any]) -> str:
        kind, k = BLUR_FILTERS[int(params["id"])]
        return "blur bilateral 9/75/75" if kind == "bilateral" else f"blur {kind} {k}×{k}"


class Mirror(BaseTransform):
    """Flip left-right. The road bends the other way, so the steering angle must change sign."""

    name = "mirror"
    family = "mirror"
    relation = "negate"
    description = "horizontal flip; relation: the steering angle changes sign"
    grid = ({},)

    def _apply(self, image: np.ndarray, p: dict[str, Any], rng: RngFactory) -> np.ndarray:
        return cv2.flip(image, 1)

    def label(self, params: Mapping[str, Any]) -> str:
        return "mirror"


SIMPLE = (Brightness, Contrast, Translation, Scale, Shear, Rotation, Blur)
