"""Externally made follow-ups: a campaign over pairs (source image, follow-up image) made elsewhere.

DeepRoad's and TACTIC's follow-ups come from GANs or diffusion editors run outside lidarmt. ``lidarmt camera fuzz
--pairs SOURCES FOLLOW_UPS`` matches the two image sources by frame id (an image folder's file name without its
extension, a Udacity folder's ``frame_id``), and the camera campaign judges each matched pair with the label-free
relations (DeepRoad's |θ(i) − θ(τ(i))| ≤ ε), on the one campaign engine: each follow-up source plays the part of a
transformation (:class:`FollowUps`, family ``external``, one setting; several sets, e.g. TACTIC's night, rain and
snow versions of the same frames, are several transformations, and a frame is judged only against the sets that
have its follow-up), so the journal, resume, reports and bundles are the camera campaign's own. A bundle carries both images (``window.npz``); replay predicts them again and never
needs the follow-up folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import CameraArgumentError, ImageSourceError

FAMILY = "external"
PREFIX = "follow-up:"


def transform_name(follow_ups: str | os.PathLike[str]) -> str:
    """The campaign's name for the follow-up source (``follow-up:<folder name>``)."""
    p = Path(str(follow_ups).rstrip("/"))
    return PREFIX + (p.name or str(p))


def frame_ids(src: Any) -> list[str]:
    """The frame ids of an image source in its order, without decoding images where the source lists them."""
    ids = getattr(src, "frame_ids", None)
    if isinstance(ids, list):
        return [str(i) for i in ids]
    files = getattr(src, "files", None)
    if isinstance(files, list) and type(src).__name__ == "ImageFolderSource":
        return [Path(f).stem for f in files]
    return [str(src[i].frame_id) for i in range(len(src))]


def _index(ids: list[str], path: str) -> dict[str, int]:
    seen: dict[str, int] = {}
    for i, fid in enumerate(ids):
        if fid in seen:
            raise ImageSourceError(f"{path}: two images are named {fid!r} (e.g. {fid}.jpg and {fid}.png); pairs "
                                   "are matched by name, so each name must be unique")
        seen[fid] = i
    return seen


@dataclass(frozen=True, slots=True)
class Pairing:
    """Source frames matched with follow-ups by frame id."""

    pairs: tuple[tuple[int, int], ...]  # (source index, follow-up index), in source order
    unmatched_sources: tuple[str, ...]
    unmatched_follow_ups: tuple[str, ...]

    def describe(self, *, limit: int = 5) -> str:
        def some(names: tuple[str, ...]) -> str:
            shown = ", ".join(names[:limit])
            return shown + (f", … ({len(names) - limit} more)" if len(names) > limit else "")

        parts = [f"{len(self.pairs)} pair(s) matched by name"]
        if self.unmatched_sources:
            parts.append(f"{len(self.unmatched_sources)} source image(s) without a follow-up "
                         f"({some(self.unmatched_sources)})")
        if self.unmatched_follow_ups:
            parts.append(f"{len(self.unmatched_follow_ups)} follow-up(s) without a source image "
                         f"({some(self.unmatched_follow_ups)})")
        return "; ".join(parts)


def match(sources: str, follow_ups: str, *, topic: str | None = None) -> Pairing:
    """Match two image sources by frame id; no match at all is one line naming both."""
    from lidarmt.camera.sources.factory import open_images

    with open_images(sources, topic=topic) as src:
        a = frame_ids(src)
    with open_images(follow_ups) as fu:
        b = frame_ids(fu)
    ia, ib = _index(a, sources), _index(b, follow_ups)
    pairs = tuple((i, ib[fid]) for i, fid in enumerate(a) if fid in ib)
    if not pairs:
        raise CameraArgumentError(f"--pairs {sources} {follow_ups}: no image of the follow-ups has the name of a "
                                  f"source image (e.g. {a[0]!r} and {b[0]!r}); pairs are matched by file name "
                                  "without the extension")
    return Pairing(pairs, tuple(fid for fid in a if fid not in ib), tuple(fid for fid in b if fid not in ia))


class FollowUps:
    """The follow-up images of a pairs campaign, as the campaign's one transformation (family ``external``):
    ``window(indices)`` gives the follow-ups of those source frames."""

    family = FAMILY
    relation = "keep"

    def __init__(self, follow_ups: str, source: Any) -> None:
        from lidarmt.camera.sources.factory import open_images

        self.path = str(follow_ups)
        self.name = transform_name(follow_ups)
        self.grid = ({},)
        self.follow = open_images(self.path)
        ids = _index(frame_ids(self.follow), self.path)
        src_ids = frame_ids(source)
        self._of = {i: ids[fid] for i, fid in enumerate(src_ids) if fid in ids}
        self._ids = src_ids

    def label(self, params: Any) -> str:
        return "made outside lidarmt"

    def window(self, indices: list[int]) -> np.ndarray:
        """The follow-ups of source frames ``indices`` as (T, H, W, 3) uint8."""
        missing = [self._ids[i] for i in indices if i not in self._of]
        if missing:
            raise ImageSourceError(f"{self.path}: no follow-up named {missing[0]!r}; a model with history needs "
                                   "the follow-ups of the frames before each pair too")
        imgs = [self.follow[self._of[i]].image for i in indices]
        if len({im.shape for im in imgs}) != 1:
            raise ImageSourceError(f"{self.path}: the follow-ups of frames {indices[0]}..{indices[-1]} differ in "
                                   "size; a model with history needs frames of one size")
        return np.stack(imgs)

    def bundle_info(self, index: int) -> dict[str, Any]:
        """What a bundle records of the follow-up of source frame ``index``."""
        fr = self.follow[self._of[index]]
        return {"source": self.path, "frame_id": fr.frame_id, "detail": dict(fr.detail)}

    def close(self) -> None:
        self.follow.close()
