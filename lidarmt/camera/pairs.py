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


#: Below this scene similarity (:func:`scene_similarity`) a source and its follow-up are taken to show different
#: scenes: DeepRoad's relation (the same road, another look) does not apply to the pair.
SAME_SCENE_MIN = 0.025
SIMILARITY_RULE = ("scene similarity: the share of ORB features (500 per image, after CLAHE) matched between the "
                   "two images (Lowe's ratio 0.8) that fit one homography (RANSAC, 5 px); weather, light and a "
                   f"GAN's style keep many, another road almost none; below {SAME_SCENE_MIN:g} the pair is taken to "
                   "show different scenes (scripts/measure_pair_similarity.py)")


def _features(img: np.ndarray) -> tuple[Any, Any]:
    import cv2

    g = cv2.cvtColor(np.ascontiguousarray(img[..., :3]), cv2.COLOR_RGB2GRAY)
    g = cv2.createCLAHE(2.0, (8, 8)).apply(g)
    return cv2.ORB_create(500).detectAndCompute(g, None)


def scene_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """How alike the scenes of two RGB images are, in [0, 1] (:data:`SIMILARITY_RULE`): the share of the smaller
    image's ORB features that match the other image's under one homography.

    Measured on the Udacity frames of ``../shared/data`` (scripts/measure_pair_similarity.py, 17 seeds 137 frames
    apart): two different frames of the drive score at most 0.023 (mean 0.007, 272 pairs); a frame and its fog,
    rain, night, glare, dirt, droplets, blur, brightness or contrast version at the strongest setting 0.027 or more
    (fog ≥ 0.079, night ≥ 0.027); heavy snow hides the road's features (mean 0.01) and would be flagged, as would
    a mirror or a strong zoom, which move every feature (not follow-ups of --pairs)."""
    import cv2

    ka, da = _features(a)
    kb, db = _features(b)
    if da is None or db is None or len(ka) < 8 or len(kb) < 8:
        return 0.0
    ms = cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(da, db, k=2)
    good = [m[0] for m in ms if len(m) == 2 and m[0].distance < 0.8 * m[1].distance]
    if len(good) < 8:
        return 0.0
    pa = np.float32([ka[m.queryIdx].pt for m in good])
    pb = np.float32([kb[m.trainIdx].pt for m in good])
    _h, mask = cv2.findHomography(pa, pb, cv2.RANSAC, 5.0)
    if mask is None:
        return 0.0
    return float(mask.sum()) / min(len(ka), len(kb))


def check_pairs(sources: str, follow_ups: str, pairs: list[tuple[int, int]], *, topic: str | None = None
                ) -> list[tuple[str, float]]:
    """``[(frame id, similarity)]`` of each (source index, follow-up index) pair (:func:`scene_similarity`)."""
    from lidarmt.camera.sources.factory import open_images

    out = []
    with open_images(sources, topic=topic) as src, open_images(follow_ups) as fu:
        for i, j in pairs:
            fa, fb = src[i], fu[j]
            out.append((str(fa.frame_id), round(scene_similarity(fa.image, fb.image), 4)))
    return out


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
