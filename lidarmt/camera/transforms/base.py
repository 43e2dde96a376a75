"""The protocol of an image transformation.

A transformation is a deterministic function of (image, parameters, seed): the same three give the same bytes
on every run in one environment (the same NumPy and OpenCV builds on the same kind of CPU; vectorised float
maths such as ``exp`` may differ in the last bit between CPU families, so a weather image may differ by a grey
level elsewhere). ``grid`` is the list of parameter settings a campaign walks (DeepTest's Table 4 for the
simple ones; intensity levels for weather, whose style parameters are drawn from the seed when not given).
``space`` describes each continuous parameter's range, for search (TACTIC's ES). ``relation`` says what a
steering model's answer must do under it: ``"keep"`` (the angle must not change) or ``"negate"`` (the mirror).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class ParamRange:
    """A continuous (or integer) parameter's range, for searches over a transformation's space."""

    low: float
    high: float
    integer: bool = False


@runtime_checkable
class Transform(Protocol):
    name: str  # e.g. "brightness", "fog", "mirror"
    family: str  # "simple", "weather" or "mirror"
    relation: str  # "keep" or "negate"
    grid: Sequence[Mapping[str, Any]]  # parameter settings a campaign walks, in order
    space: Mapping[str, ParamRange]  # continuous parameters and their ranges (may be empty)
    description: str

    def apply(self, image: np.ndarray, params: Mapping[str, Any], seed: int) -> np.ndarray:
        """(H, W, 3) uint8 RGB in, (H, W, 3) uint8 RGB out (same size); never modifies ``image``."""
        ...

    def label(self, params: Mapping[str, Any]) -> str:
        """A short human label of a parameter setting, e.g. "β=40" or "fog 0.75"."""
        ...


@dataclass(frozen=True, slots=True)
class Applied:
    """A transformation with one parameter setting, as a campaign uses it."""

    transform: str
    param_index: int
    params: Mapping[str, Any] = field(default_factory=dict)


def apply_window(transform: Any, window: np.ndarray, params: Mapping[str, Any], seed: int) -> np.ndarray:
    """A transformation applied to every frame of a (T, H, W, 3) window with one setting and seed: in one call
    when the transformation batches (``apply_batch``: translators), frame by frame otherwise (the built-in
    ones through ``apply_same``, which makes what depends only on the setting and seed once per window, the
    same bytes as frame by frame). This is the reference implementation; campaigns and replay go through
    :func:`lidarmt.camera.transforms.batched.apply_window`, which comes here for ``"reference"`` (searches call it
    directly), so what a journal or bundle names is what is made again."""
    batch = getattr(transform, "apply_batch", None)
    if callable(batch):
        return np.asarray(batch(window, params, seed))
    same = getattr(transform, "apply_same", None)
    if callable(same) and len(window) > 1:
        return np.asarray(same(window, params, seed))
    return np.stack([transform.apply(img, params, seed) for img in window])


def transform_seed(seed: int, frame: int, transform: str, param: int, trial: int) -> int:
    """The seed a transformation gets for one pair: a 63-bit hash of the campaign seed and the pair's identity
    (by the transformation's *name*, so adding transformations to a campaign does not change the others)."""
    name = int.from_bytes(transform.encode("utf-8")[:16].ljust(16, b"\0"), "little")
    ss = np.random.SeedSequence([int(seed), int(frame), name & 0xFFFFFFFFFFFFFFFF, name >> 64, int(param),
                                 int(trial), 0x63616D])  # "cam"
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
