"""A picture sheet: every transformation of a list at three strengths, as labelled thumbnails.

    from lidarmt.camera.transforms import select
    from lidarmt.camera.transforms.sheet import transform_sheet
    transform_sheet(frame_rgb, select("all"), "docs/images/transforms.png", seed=0)

Weather effects are shown at intensities 0.33, 0.66 and 1.0; DeepTest's simple transformations at the low,
middle and high settings of their grid (Table 4); the mirror once, beside the original frame. The picture
is composed with Pillow (a dependency of matplotlib) using matplotlib's DejaVu Sans font, so that labels can
say β, α, ° and ×, and written atomically as PNG.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms._common import check_image
from lidarmt.camera.transforms.base import Transform

SHEET_INTENSITIES = (0.33, 0.66, 1.0)


def sheet_settings(transform: Transform) -> list[Mapping[str, Any]]:
    """The (at most three) parameter settings the sheet shows for ``transform``."""
    if transform.family == "weather" and "intensity" in transform.space:
        return [{"intensity": v} for v in SHEET_INTENSITIES]
    grid = list(transform.grid)
    if len(grid) <= 3:
        return grid
    return [grid[0], grid[(len(grid) - 1) // 2], grid[-1]]


def _font(size: int):
    from PIL import ImageFont

    try:
        from matplotlib import font_manager

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans"), size)
    except Exception:  # no matplotlib font: Pillow's own bitmap font (ASCII labels still read)
        return ImageFont.load_default()


def transform_sheet(image: np.ndarray, transforms: Sequence[Transform] | str, path: str | os.PathLike[str], *,
                    seed: int = 0, thumb_size: tuple[int, int] = (160, 120), blocks_per_row: int = 2,
                    title: str | None = None) -> Path:
    """Write a PNG sheet of ``transforms`` applied to ``image`` (H, W, 3 uint8 RGB) and return its path.

    ``transforms`` is a list of transformations or a spec for :func:`~lidarmt.camera.transforms.select`
    (``"all"``, ``"weather"``, ``"fog,rain"``...).

    Each transformation is a block of three thumbnails (``thumb_size`` = width, height) with a label under
    each; ``blocks_per_row`` blocks side by side. Transformations run on the full image, then the result is
    shrunk (area averaging), so the thumbnails show what a model would see, at a smaller size. ``seed`` is
    passed to every transformation (weather styles are drawn from it). The file is replaced atomically.
    """
    import cv2
    from PIL import Image, ImageDraw

    from lidarmt._atomic import atomic_path

    img = check_image(image, "transform_sheet")
    if isinstance(transforms, str):
        from lidarmt.camera.transforms.registry import select

        transforms = select(transforms)
    if not transforms:
        raise TransformError("transform_sheet needs at least one transformation; e.g. select('all')")
    tw, th = thumb_size
    if tw < 16 or th < 12 or blocks_per_row < 1:
        raise TransformError(f"thumb_size {thumb_size} must be at least 16x12 and blocks_per_row >= 1")

    def thumb(a: np.ndarray) -> np.ndarray:
        return cv2.resize(a, (tw, th), interpolation=cv2.INTER_AREA)

    cells_per_block = 3
    blocks: list[list[tuple[np.ndarray, str]]] = []
    for t in transforms:
        cells = [(thumb(t.apply(img, params, seed)), t.label(params)) for params in sheet_settings(t)]
        if len(cells) < cells_per_block:
            cells.insert(0, (thumb(img), "original"))
        blocks.append(cells[:cells_per_block])

    font = _font(max(9, th // 10))
    label_h = max(12, th // 8) + 4
    gap, block_gap, margin = 2, 10, 6
    title_h = (label_h + 8) if title else 0
    block_w = cells_per_block * tw + (cells_per_block - 1) * gap
    ncols = min(blocks_per_row, len(blocks))
    nrows = -(-len(blocks) // ncols)
    width = 2 * margin + ncols * block_w + (ncols - 1) * block_gap
    height = 2 * margin + title_h + nrows * (th + label_h) + (nrows - 1) * gap
    sheet = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((margin, margin), title, fill=(0, 0, 0), font=_font(max(11, th // 8)))
    for b, cells in enumerate(blocks):
        row, col = divmod(b, ncols)
        x0 = margin + col * (block_w + block_gap)
        y0 = margin + title_h + row * (th + label_h + gap)
        for c, (a, text) in enumerate(cells):
            x = x0 + c * (tw + gap)
            sheet.paste(Image.fromarray(a), (x, y0))
            draw.text((x + 2, y0 + th + 1), text, fill=(20, 20, 20), font=font)
    path = Path(path)
    with atomic_path(path) as tmp:
        sheet.save(tmp, format="PNG", optimize=True)
    return path
