"""The Recording interface every reader implements, and the summary ``lidarmt info`` prints.

A :class:`Recording` is a sequence of :class:`lidarmt.types.Frame`: ``len(rec)``, ``rec[i]`` (random access, for
sampling frames), ``for frame in rec`` (streaming: a 9 GB bag is never loaded whole) and ``rec.describe()``.
Subclasses implement :meth:`Recording._count`, :meth:`Recording._read` and, when they can stream faster than
random access, :meth:`Recording._iter`.
"""

from __future__ import annotations

import abc
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np

from lidarmt.io.errors import PoseError
from lidarmt.types import Frame


class PoseWarning(UserWarning):
    """A pose could only be approximated (e.g. no sensor extrinsic; identity used)."""


@dataclass(slots=True)
class TopicInfo:
    """One topic (ROS) or channel (Cyber) of a recording."""

    name: str
    msgtype: str
    count: int


@dataclass(slots=True)
class RecordingInfo:
    """What ``lidarmt info`` shows about a recording (``to_dict`` is its ``--json`` form)."""

    path: str
    format: str
    topic: str | None
    topics: list[TopicInfo] = field(default_factory=list)
    frame_count: int = 0
    start: float | None = None  # seconds since the Unix epoch (first frame or first message)
    end: float | None = None
    points_min: int | None = None
    points_median: float | None = None
    points_max: int | None = None
    frames_scanned: int = 0
    dropped_points: int = 0  # non-finite points dropped over the scanned frames
    pose_source: str = "none"
    frames_with_pose: int = 0
    sensor_range: dict[str, list[float]] | None = None  # x/y/z min..max of points, sensor frame
    position_range: dict[str, list[float]] | None = None  # x/y/z min..max of sensor origins, world frame
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def duration(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["duration"] = self.duration
        return _jsonable(d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class Recording(abc.ABC):
    """A LiDAR recording read frame by frame. Use as a context manager, or call :meth:`close`."""

    format: ClassVar[str] = "?"

    def __init__(self, path: str | Path, *, topic: str | None = None, require_pose: bool = False) -> None:
        self.path = Path(path)
        self.topic: str | None = topic
        self.require_pose = require_pose
        self._closed = False

    # ------------------------------------------------------------------ to implement

    @abc.abstractmethod
    def _count(self) -> int:
        """Number of frames."""

    @abc.abstractmethod
    def _read(self, i: int) -> Frame:
        """Frame ``i`` (0 <= i < len), with provenance set."""

    def _iter(self) -> Iterator[Frame]:
        for i in range(len(self)):
            yield self._read(i)

    def topics(self) -> list[TopicInfo]:
        """Topics or channels with types and message counts (empty for folder formats)."""
        return []

    @property
    def pose_source(self) -> str:
        """In words, where the frames' poses come from ("none" when they have none)."""
        return "none"

    def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------------ sequence protocol

    def __len__(self) -> int:
        return self._count()

    @overload
    def __getitem__(self, i: int) -> Frame: ...

    @overload
    def __getitem__(self, i: slice) -> list[Frame]: ...

    def __getitem__(self, i):
        """Frame ``i`` (negative counts from the end), or a list of frames for a slice (e.g. ``rec[::10]``)."""
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not isinstance(i, int | np.integer):
            raise TypeError(f"recording indices must be integers, not {type(i).__name__}")
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"frame index {i} out of range: {self.path} has {n} frame(s)")
        return self._check(self._read(j))

    def __iter__(self) -> Iterator[Frame]:
        for f in self._iter():
            yield self._check(f)

    def _check(self, frame: Frame) -> Frame:
        if self.require_pose and frame.pose is None:
            raise PoseError(
                f"{self.path}: frame {frame.index} (stamp {frame.stamp:.6f}) has no pose world <- {frame.frame_id} "
                f"(pose source: {self.pose_source}); record /tf and /tf_static (or .pose files) with the clouds, "
                f"or run without an HD map"
            )
        return frame

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, topic={self.topic!r})"

    # ------------------------------------------------------------------ summary

    def describe(
        self,
        *,
        sample: int | None = None,
        progress: Callable[[Iterator[Frame], int], Iterator[Frame]] | None = None,
    ) -> RecordingInfo:
        """Summarise the recording, reading every frame (or ``sample`` frames evenly spaced).

        ``progress(frames, total)`` may wrap the frame iterator (e.g. with a progress bar).
        """
        n = len(self)
        info = RecordingInfo(str(self.path), self.format, self.topic, topics=self.topics(), frame_count=n,
                             pose_source=self.pose_source)
        if sample is not None and 0 < sample < n:
            idx = np.unique(np.linspace(0, n - 1, sample).round().astype(int))
            frames: Iterator[Frame] = (self._read(int(i)) for i in idx)
        else:
            frames = self._iter()
        if progress is not None:
            total = min(n, sample) if sample else n
            frames = progress(frames, total)
        counts: list[int] = []
        lo = np.full(3, np.inf)
        hi = np.full(3, -np.inf)
        positions = []
        stamps = []
        dropped = 0
        for f in frames:
            counts.append(len(f))
            dropped += f.dropped
            stamps.append(f.stamp)
            if len(f):
                for k, axis in enumerate("xyz"):
                    col = f.points[axis]
                    lo[k] = min(lo[k], float(col.min()))
                    hi[k] = max(hi[k], float(col.max()))
            if f.pose is not None:
                positions.append(f.pose[:3, 3])
        info.frames_scanned = len(counts)
        info.dropped_points = dropped
        if counts:
            info.points_min = int(min(counts))
            info.points_median = float(np.median(counts))
            info.points_max = int(max(counts))
        if stamps and any(s != 0.0 for s in stamps):
            info.start, info.end = float(min(stamps)), float(max(stamps))
        if np.all(np.isfinite(lo)):
            info.sensor_range = {a: [float(lo[k]), float(hi[k])] for k, a in enumerate("xyz")}
        info.frames_with_pose = len(positions)
        if positions:
            p = np.asarray(positions)
            info.position_range = {a: [float(p[:, k].min()), float(p[:, k].max())] for k, a in enumerate("xyz")}
        if n == 0:
            info.notes.append("no point clouds in this recording")
        elif counts and max(counts) == 0:
            info.notes.append("every frame is empty (0 points)")
        elif counts and min(counts) == 0:
            info.notes.append(f"{sum(c == 0 for c in counts)} empty frame(s)")
        if dropped:
            info.notes.append(f"{dropped} non-finite point(s) dropped (NaN/Inf), as Apollo does")
        if positions and len(positions) < len(counts):
            info.notes.append(f"{len(counts) - len(positions)} frame(s) have no pose")
        self._describe_extra(info)
        return info

    def _describe_extra(self, info: RecordingInfo) -> None:  # noqa: B027 (an optional hook)
        """Hook for format-specific additions to the summary."""


def warn_pose(message: str) -> None:
    warnings.warn(message, PoseWarning, stacklevel=3)
