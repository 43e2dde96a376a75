"""The protocol of an image-to-image translator (a learned weather, DeepRoad's UNIT, TACTIC's MUNIT).

A translator turns frames of its source domain (fine weather) into frames of its target domain (night, rain,
snow, ...): ``translate(images, style=None, seed=0)`` takes (N, H, W, 3) uint8 RGB frames and returns frames
of the same shape and type. A *multimodal* translator (``style_dim`` > 0, MUNIT) draws the target's
appearance from a style vector: ``style`` is one vector of length ``style_dim`` for every frame, or one row
per frame; without one, the translator draws a style per frame from its prior with ``seed``. A unimodal one
(``style_dim`` == 0, UNIT) ignores both. Same inputs, same output, on one machine.

Translators that can split the work (``encode``/``decode``, as :class:`~lidarmt.camera.translate.model.
LearnedTranslator` does) let a search over the style space encode each frame once and pay one decoder pass
per candidate style.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Translator(Protocol):
    name: str
    arch: str  # "unit", "munit" or anything a plug-in calls itself
    style_dim: int  # 0 for a unimodal translator
    weather: str  # the target domain in a word ("night", "rain", ...), "" when unknown

    def translate(self, images: np.ndarray, style: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
        """(N, H, W, 3) uint8 RGB → (N, H, W, 3) uint8 RGB in the target domain."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ``lidarmt camera translators`` shows: at least ``name``, ``arch``, ``style_dim``."""
        ...
