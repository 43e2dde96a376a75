"""The protocol every image source follows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from lidarmt.camera.types import CameraFrame


@runtime_checkable
class ImageSource(Protocol):
    """A time-ordered, randomly accessible sequence of camera frames.

    ``len(src)`` frames; ``src[i]`` decodes frame ``i`` (0-based, time order; negative indices are not
    accepted); iteration streams them in order. ``has_labels`` says whether frames carry steering labels.
    ``describe()`` returns a JSON-able summary (format, path, frames, image size, labels, topic...) for
    ``lidarmt camera info``. ``close()`` releases file handles (also via ``with``).
    """

    path: str
    format: str
    has_labels: bool

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> CameraFrame: ...

    def __iter__(self) -> Iterator[CameraFrame]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
