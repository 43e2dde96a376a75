"""The protocol every image source follows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from lidarmt.camera.types import CameraFrame


@runtime_checkable
class ImageSource(Protocol):
    """A time-ordered, randomly accessible sequence of camera frames.

    ``len(src)`` frames, known as soon as the source is open; ``src[i]`` decodes frame ``i`` (0-based, time
    order; negative indices are not accepted: ``IndexError``); iteration streams them in order and yields the
    same frames as random access. ``has_labels`` says whether frames carry steering labels (a labelled source
    may still have frames whose ``label`` is None, e.g. a camera frame with no steering message near it).
    ``describe()`` returns a JSON-able summary (format, path, frames, image size, labels, topic...) for
    ``lidarmt camera info``; implementations accept ``describe(sample=N)`` to decode only N frames for the image
    sizes. ``close()`` releases file handles (also via ``with``).

    Opening a source reads only what indexes its frames (a CSV, a folder listing, a bag index) and depends on
    nothing but its path and options, so campaign workers re-open it cheaply and see the same frames. Bad input
    raises :class:`lidarmt.camera.errors.ImageSourceError` (one line naming the file or message at fault):
    structural problems when the source is opened, an undecodable image when that frame is read.
    Implementations: :func:`lidarmt.camera.sources.open_images`.
    """

    path: str
    format: str
    has_labels: bool

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> CameraFrame: ...

    def __iter__(self) -> Iterator[CameraFrame]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
