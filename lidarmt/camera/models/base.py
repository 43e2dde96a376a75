"""The protocol every steering model follows (the camera half's system under test).

A model takes raw RGB frames as the source delivers them and does its own preprocessing (crop, resize, colour
space, normalisation), so that transformations act on the camera image, as in DeepTest, and not on a model's
private input. Models that look at previous frames (Chauffeur's LSTM, Rambo's frame differences) declare
``history = k``; they are then given windows of ``k + 1`` consecutive frames, oldest first, and the campaign
applies a transformation to every frame of the window with the same parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a model looks at: its own input size and colour space after its preprocessing, and its history."""

    height: int  # the network's input height after preprocessing
    width: int  # the network's input width after preprocessing
    colour: str = "rgb"  # "rgb", "yuv", "grey", "bgr"
    history: int = 0  # previous frames needed besides the current one
    note: str = ""  # e.g. "rows 60:-25 cropped, resized to 66x200, YUV"


@runtime_checkable
class SteeringModel(Protocol):
    """``predict(images)``: ``images`` is ``(N, H, W, 3) uint8`` RGB for ``history == 0``, else
    ``(N, history + 1, H, W, 3)``, oldest frame first; any H, W (the model resizes). Returns ``(N,)`` float64
    steering angles in radians (positive = left). ``module`` is the underlying ``torch.nn.Module`` (for coverage
    criteria) or None. ``card`` is the model card's text or path (may be empty)."""

    name: str
    input_spec: InputSpec

    def predict(self, images: np.ndarray) -> np.ndarray: ...

    @property
    def module(self) -> Any: ...
