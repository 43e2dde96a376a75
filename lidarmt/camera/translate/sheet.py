"""A picture sheet of learned weather next to procedural weather, on the same frames.

    from lidarmt.camera.translate.sheet import translator_sheet
    translator_sheet(frames, ["unit-night", "unit-rain", "munit-night", "munit-rain"], "sheet.png",
                     frame_indices=[1210, 1300])

One row per frame; the columns are the original frame, its procedural weathers (``weathers``, drawn as
:mod:`lidarmt.camera.translate.evaluate` draws them: intensity in [0.6, 1] and style from (seed, frame)), then
each translator in the order given: a unimodal one (UNIT) in one column, a multimodal one (MUNIT) in ``styles``
columns, one style vector per column (the same in every row, so a column shows one "weather condition").
Labels on top name the group (procedural, UNIT, MUNIT) and the weather (and style). Translations run on the
whole frame and are then shrunk (area averaging), so a thumbnail shows what a steering model would see at a
smaller size. Composed with Pillow and matplotlib's DejaVu Sans (as the transformation sheet is), written
atomically as PNG.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import CameraArgumentError
from lidarmt.camera.translate.evaluate import WEATHERS, procedural, weather_of

#: Pixels around the sheet, between thumbnails, and of the two label lines on top.
MARGIN, GAP, GROUP_GAP = 6, 2, 8


def _label_height(th: int) -> int:
    return max(12, th // 9) + 3


def sheet_size(rows: int, groups: Sequence[int], thumb_size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) in pixels of a sheet with ``rows`` frames and column groups of the given widths
    (in thumbnails), for ``thumb_size`` = (width, height) thumbnails."""
    tw, th = thumb_size
    cols = sum(groups)
    width = 2 * MARGIN + cols * tw + (cols - len(groups)) * GAP + (len(groups) - 1) * GROUP_GAP
    height = 2 * MARGIN + 2 * _label_height(th) + rows * th + (rows - 1) * GAP
    return width, height


def _style_vectors(style_dim: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng([int(seed), 7]).standard_normal((n, style_dim)).astype(np.float32)


def translator_sheet(frames: np.ndarray | Sequence[np.ndarray], translators: Sequence[Any],
                     path: str | os.PathLike[str], *, weathers: Sequence[str] = WEATHERS, styles: int = 2,
                     seed: int = 0, frame_indices: Sequence[int] | None = None,
                     thumb_size: tuple[int, int] = (160, 120), device: str = "cpu") -> Path:
    """Write the sheet (see the module docstring) of ``frames`` ((N, H, W, 3) uint8 RGB, one row each) and
    return its path. ``translators``: names/paths for :func:`~lidarmt.camera.translate.registry.get_translator`
    or translator objects; ``weathers``: the procedural columns (empty: none); ``styles``: columns per
    multimodal translator; ``seed``: the procedural draws and the style vectors; ``frame_indices``: the frames'
    indices in their source (what the procedural draws depend on; default 0..N-1)."""
    import cv2
    from PIL import Image, ImageDraw

    from lidarmt._atomic import atomic_path
    from lidarmt.camera.transforms.sheet import _font
    from lidarmt.camera.translate.registry import get_translator

    imgs = [np.asarray(f) for f in frames]
    if not imgs or any(f.ndim != 3 or f.shape[-1] != 3 or f.dtype != np.uint8 for f in imgs):
        raise CameraArgumentError("translator_sheet: expected (H, W, 3) uint8 RGB frames, at least one")
    if len({f.shape for f in imgs}) != 1:
        raise CameraArgumentError("translator_sheet: the frames must share one size")
    idx = list(frame_indices) if frame_indices is not None else list(range(len(imgs)))
    if len(idx) != len(imgs):
        raise CameraArgumentError(f"translator_sheet: {len(idx)} frame indices for {len(imgs)} frames")
    tw, th = thumb_size
    if tw < 32 or th < 24 or styles < 1:
        raise CameraArgumentError(f"thumb_size {thumb_size} must be at least 32x24 and styles >= 1")
    trs = [get_translator(str(t), device=device) if isinstance(t, str | os.PathLike) else t for t in translators]
    batch = np.stack(imgs)

    def thumb(a: np.ndarray) -> np.ndarray:
        return cv2.resize(a, (tw, th), interpolation=cv2.INTER_AREA)

    # columns: (group label, column label, (N, th, tw, 3) thumbnails)
    groups: list[tuple[str, list[tuple[str, np.ndarray]]]] = [("", [("original", np.stack([thumb(f)
                                                                                           for f in imgs]))])]
    if weathers:
        groups.append(("procedural", [(w, np.stack([thumb(procedural(f, w, seed, i)) for f, i in zip(imgs, idx,
                                                                                                    strict=True)]))
                                      for w in weathers]))
    for tr in trs:
        sd = int(getattr(tr, "style_dim", 0) or 0)
        try:
            w = weather_of(tr)
        except CameraArgumentError:
            w = str(tr.name)
        head = str(getattr(tr, "arch", "") or tr.name).upper()
        if sd == 0:
            cols = [(w, np.stack([thumb(a) for a in tr.translate(batch)]))]
        else:
            vecs = _style_vectors(sd, styles, seed)
            cols = [(f"{w} · style {k + 1}", np.stack([thumb(a) for a in tr.translate(batch, style=v)]))
                    for k, v in enumerate(vecs)]
        if groups[-1][0] == head:  # consecutive translators of one architecture share a group label
            groups[-1][1].extend(cols)
        else:
            groups.append((head, cols))

    width, height = sheet_size(len(imgs), [len(c) for _, c in groups], thumb_size)
    lh = _label_height(th)
    sheet = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    font_g, font_c = _font(max(10, th // 9)), _font(max(9, th // 11))
    x = MARGIN
    for gname, cols in groups:
        if gname:
            draw.text((x + 2, MARGIN), gname, fill=(0, 0, 0), font=font_g)
        for cname, thumbs in cols:
            draw.text((x + 2, MARGIN + lh), cname, fill=(40, 40, 40), font=font_c)
            for r, a in enumerate(thumbs):
                sheet.paste(Image.fromarray(a), (x, MARGIN + 2 * lh + r * (th + GAP)))
            x += tw + GAP
        x += GROUP_GAP - GAP
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        sheet.save(tmp, format="PNG", optimize=True)
    return path
