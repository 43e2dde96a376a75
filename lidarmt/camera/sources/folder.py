"""A plain folder of images (jpg, png, bmp), without labels, in natural name order.

``frame_007.png`` comes before ``frame_10.png`` (digit runs compare as numbers, the rest case-insensitively);
hidden files (a leading dot) and sub-folders are ignored. A single image file is a one-frame source. Frame ids are
the file stems; frames have no stamp and no label.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.sources._source import BaseImageSource
from lidarmt.camera.sources.decode import IMAGE_SUFFIXES, decode_file
from lidarmt.camera.types import CameraFrame

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """Sort key that orders ``img2`` before ``img10`` (ties broken by the plain name, so the order is total)."""
    parts = _DIGITS.split(name)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p), name


def is_image_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_SUFFIXES)


def list_images(folder: Path) -> list[str]:
    """Names of the image files directly in ``folder``, in natural order."""
    try:
        with os.scandir(folder) as it:
            names = [e.name for e in it if is_image_name(e.name) and e.is_file()]
    except OSError as err:
        raise ImageSourceError(f"{folder}: unreadable folder ({err.strerror or err})") from err
    return sorted(names, key=natural_key)


class ImageFolderSource(BaseImageSource):
    """The images of one folder (or one image file), unlabelled, in natural name order."""

    format = "images"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        super().__init__(str(p))
        if not p.exists():
            raise ImageSourceError(f"{p}: no such file or folder")
        if p.is_file():
            if not is_image_name(p.name):
                raise ImageSourceError(f"{p}: not an image file (expected {', '.join(IMAGE_SUFFIXES)})")
            self.folder, self.files = p.parent, [p.name]
        else:
            self.folder, self.files = p, list_images(p)
            if not self.files:
                raise ImageSourceError(f"{p}: no images in this folder (expected {', '.join(IMAGE_SUFFIXES)} "
                                       f"files, or a Udacity folder with center/ and a CSV)")

    def _count(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> CameraFrame:
        name = self.files[i]
        img = decode_file(self.folder / name)
        return CameraFrame(img, i, Path(name).stem, None, None, self.path, {"file": name})

    def _describe_extra(self, d: dict[str, Any]) -> None:
        d["folder"] = str(self.folder)
        if self.files:
            d["first_file"], d["last_file"] = self.files[0], self.files[-1]
