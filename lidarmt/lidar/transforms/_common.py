"""What the built-in transformations share: parameter resolution, the seeded Generator, ranges and rays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from lidarmt.lidar.transforms.base import LidarChange, Param, TransformContext, resolve_params, rng_for
from lidarmt.types import Frame


class Builtin:
    """Base of the built-in transformations: ``apply`` resolves and checks the parameters, seeds the Generator
    and calls ``_apply(frame, params, rng, context)``."""

    name: ClassVar[str]
    family: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    doc: ClassVar[str]
    summary: ClassVar[str]  # one line for listings
    levels: ClassVar[dict[str, dict[str, float]]]

    def apply(self, frame: Frame, params: Mapping[str, float] | str | None = None, *, seed: int = 0,
              context: TransformContext | None = None) -> LidarChange:
        p = resolve_params(self, params)
        with np.errstate(invalid="ignore", divide="ignore"):  # non-finite points (readers drop them) stay quiet
            return self._apply(frame, p, rng_for(seed, self.name), context)

    def _apply(self, frame: Frame, p: dict[str, float], rng: np.random.Generator,
               context: TransformContext | None) -> LidarChange:  # pragma: no cover - abstract
        raise NotImplementedError

    def label(self, params: Mapping[str, float]) -> str:
        """A short label of a setting, e.g. ``visibility 50 m``."""
        units = {p.name: p.unit for p in self.params}
        return ", ".join(f"{k} {v:g} {units.get(k, '')}".rstrip() for k, v in params.items()) or self.name

    def __repr__(self) -> str:
        return f"<LiDAR transformation {self.name} ({self.family})>"


def ranges_of(points: np.ndarray) -> np.ndarray:
    """float64 distance of each point from the sensor origin."""
    x = points["x"].astype(np.float64)
    y = points["y"].astype(np.float64)
    z = points["z"].astype(np.float64)
    return np.sqrt(x * x + y * y + z * z)


def scale_along_ray(points: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """A copy of ``points`` with each point moved along its ray by ``factor`` (new range = factor x range)."""
    out = points.copy()
    for c in ("x", "y", "z"):
        out[c] = (points[c].astype(np.float64) * factor).astype(np.float32)
    return out


def describe_params(params: tuple[Param, ...]) -> str:
    return ", ".join(p.describe() for p in params) or "(none)"


def to_info(d: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-able copy: NumPy scalars become Python numbers."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out
