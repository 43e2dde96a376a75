"""What every image source shares: the sequence protocol, index checks and the summary ``describe()`` returns."""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from lidarmt.camera.types import CameraFrame

STRAIGHT_DEG = 1.0
"""Labels with ``|angle|`` below this many degrees count as "straight" in the summary (Udacity data is mostly
straight driving, which is what makes a constant-output model look good)."""


def label_stats(labels: list[float | None]) -> dict[str, Any] | None:
    """Count, min/max/mean/std in degrees and the share of ``|angle| < 1°`` of the labelled frames (None: none)."""
    vals = np.array([v for v in labels if v is not None], dtype=np.float64)
    if vals.size == 0:
        return None
    deg = np.degrees(vals)
    return {
        "count": int(vals.size),
        "unlabelled": len(labels) - int(vals.size),
        "min_deg": float(deg.min()),
        "max_deg": float(deg.max()),
        "mean_deg": float(deg.mean()),
        "std_deg": float(deg.std()),
        "straight_share": float(np.mean(np.abs(deg) < STRAIGHT_DEG)),
        "straight_below_deg": STRAIGHT_DEG,
    }


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class BaseImageSource(abc.ABC):
    """An :class:`lidarmt.camera.sources.base.ImageSource` built from four hooks.

    Subclasses set ``format`` and ``has_labels`` and implement :meth:`_count` and :meth:`_read` (decode frame
    ``i``); :meth:`_iter` (streaming, when faster than random access), :meth:`stamps` and :meth:`labels` (cheap
    lists, without decoding images) and :meth:`_describe_extra` are optional.
    """

    format: ClassVar[str] = "?"

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self.has_labels = False
        self.notes: list[str] = []
        self._closed = False

    # ------------------------------------------------------------------ to implement

    @abc.abstractmethod
    def _count(self) -> int:
        """Number of frames."""

    @abc.abstractmethod
    def _read(self, i: int) -> CameraFrame:
        """Frame ``i`` (0 <= i < len), decoded."""

    def _iter(self) -> Iterator[CameraFrame]:
        for i in range(len(self)):
            yield self._read(i)

    def stamps(self) -> list[float | None]:
        """Each frame's time in seconds since the epoch (None where unknown), without decoding images."""
        return [None] * len(self)

    def labels(self) -> list[float | None]:
        """Each frame's steering label in radians (None where it has none), without decoding images."""
        return [None] * len(self)

    def _describe_extra(self, d: dict[str, Any]) -> None:  # noqa: B027 (an optional hook)
        """Add format-specific entries to the summary."""

    # ------------------------------------------------------------------ sequence protocol

    def __len__(self) -> int:
        return self._count()

    def __getitem__(self, index: int) -> CameraFrame:
        """Frame ``index`` (0-based, time order). Negative indices are refused: a campaign names frames by index."""
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"image source indices must be integers, not {type(index).__name__}")
        n = len(self)
        if not 0 <= int(index) < n:
            raise IndexError(f"frame index {index} out of range: {self.path} has {n} frame(s) (0..{n - 1})")
        return self._read(int(index))

    def __iter__(self) -> Iterator[CameraFrame]:
        return self._iter()

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> BaseImageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # ------------------------------------------------------------------ summary

    def describe(self, *, sample: int | None = None) -> dict[str, Any]:
        """A JSON-able summary: format, path, frames, image sizes, time span and rate, label statistics, notes.

        Image sizes need decoding: every frame is read, or only ``sample`` frames evenly spaced. Times and labels
        come from the cheap lists (:meth:`stamps`, :meth:`labels`) and cover every frame.
        """
        n = len(self)
        d: dict[str, Any] = {"path": self.path, "format": self.format, "frames": n}
        if sample is not None and 0 < sample < n:
            idx = [int(i) for i in np.unique(np.linspace(0, n - 1, sample).round().astype(int))]
            frames: Iterator[CameraFrame] = (self._read(i) for i in idx)
        else:
            frames = self._iter()
        sizes: dict[tuple[int, int], int] = {}
        read = 0
        for f in frames:
            key = (f.width, f.height)
            sizes[key] = sizes.get(key, 0) + 1
            read += 1
        d["frames_read"] = read
        d["image_sizes"] = [{"width": w, "height": h, "frames": c}
                            for (w, h), c in sorted(sizes.items(), key=lambda kv: -kv[1])]
        st = [s for s in self.stamps() if s is not None]
        d["start"] = d["end"] = d["duration"] = d["rate_hz"] = None
        if st:
            d["start"], d["end"] = min(st), max(st)
            d["duration"] = d["end"] - d["start"]
            if len(st) > 1 and d["duration"] > 0:
                d["rate_hz"] = (len(st) - 1) / d["duration"]
        d["has_labels"] = bool(self.has_labels)
        d["labels"] = label_stats(self.labels()) if self.has_labels else None
        d["notes"] = list(self.notes)
        self._describe_extra(d)
        return _clean(d)
