"""A picture sheet of LiDAR transformations: the source sweep and each transformation's follow-up in bird's-eye
view, the points each changed coloured.

    from lidarmt.lidar.transforms import select
    from lidarmt.lidar.transforms.sheet import transform_sheet
    transform_sheet(frame, select("all"), "sheet.png", levels=("moderate",), seed=0)

Colours: points where they were in the source grey; points the transformation moved (fog's scattered returns, a
rotation; a changed intensity alone is not drawn) orange; added points (an inserted object) red; dropped source
points drawn faintly in pink under the follow-up; inserted boxes red, removed boxes blue. Written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lidarmt.lidar.transforms.base import LidarChange, TransformContext
from lidarmt.types import Frame


def _moved(source: Frame, change: LidarChange) -> np.ndarray:
    """Per follow-up point: derived from a source point whose position changed by more than 1 cm."""
    o = change.origin
    out = np.zeros(len(o), dtype=bool)
    src = o >= 0
    a = change.frame.xyz[src].astype(np.float64)
    b = source.xyz[o[src]].astype(np.float64)
    out[src] = np.linalg.norm(a - b, axis=1) > 0.01
    return out


def _box_outline(ax, boxes: np.ndarray, color: str) -> None:
    for b in boxes:
        c, s = np.cos(b["yaw"]), np.sin(b["yaw"])
        hl, hw = b["length"] / 2, b["width"] / 2
        corners = np.array([[hl, hw], [hl, -hw], [-hl, -hw], [-hl, hw], [hl, hw]])
        x = b["cx"] + c * corners[:, 0] - s * corners[:, 1]
        y = b["cy"] + s * corners[:, 0] + c * corners[:, 1]
        ax.plot(-y, x, color=color, lw=1.2, zorder=5)


def draw_panel(ax, source: Frame, change: LidarChange | None, *, extent: float, title: str) -> None:
    """One bird's-eye panel (x up, y to the left, as the car sees the road) on a matplotlib axis."""
    ax.set_facecolor("white")
    if change is None:
        p = source.points
        ax.scatter(-p["y"], p["x"], s=0.2, c="#707070", linewidths=0, rasterized=True)
    else:
        gone = source.points[change.dropped]
        ax.scatter(-gone["y"], gone["x"], s=0.3, c="#f4b6c8", linewidths=0, rasterized=True, zorder=1)
        p = change.frame.points
        added = change.origin < 0
        moved = _moved(source, change)
        same = ~added & ~moved
        ax.scatter(-p["y"][same], p["x"][same], s=0.2, c="#707070", linewidths=0, rasterized=True, zorder=2)
        ax.scatter(-p["y"][moved], p["x"][moved], s=0.6, c="#f08a24", linewidths=0, rasterized=True, zorder=3)
        ax.scatter(-p["y"][added], p["x"][added], s=1.2, c="#d62728", linewidths=0, rasterized=True, zorder=4)
        _box_outline(ax, change.inserted, "#d62728")
        _box_outline(ax, change.removed, "#1f77b4")
    ax.plot([0], [0], marker="^", color="#1f77b4", ms=5, zorder=6)
    ax.set_xlim(-extent, extent)
    ax.set_ylim(-extent, extent)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)


def panel_title(transform, level: str, change: LidarChange, source: Frame) -> str:
    """Three lines, e.g. ``fog (weather), moderate`` / ``visibility_m 150 m`` / ``19263 moved``."""
    params = transform.levels[level]
    units = {p.name: p.unit for p in transform.params}
    setting = ", ".join(f"{k} {v:g} {units.get(k, '')}".rstrip() for k, v in params.items()) or "no parameters"
    counts = []
    if len(change.dropped):
        counts.append(f"{len(change.dropped)} dropped")
    moved = int(np.count_nonzero(_moved(source, change)))
    if moved:
        counts.append(f"{moved} moved")
    elif change.n_modified:
        counts.append(f"{change.n_modified} changed")
    if change.n_added:
        counts.append(f"{change.n_added} added")
    return f"{transform.name} ({transform.family}), {level}\n{setting}\n{', '.join(counts) or 'no change'}"


def transform_sheet(frame: Frame, transforms: Sequence, path: str | os.PathLike[str], *,
                    levels: Sequence[str] = ("moderate",), seed: int = 0, context: TransformContext | None = None,
                    extent: float = 40.0, columns: int = 4, title: str | None = None, dpi: int = 110) -> Path:
    """Write a PNG: the source sweep, then each transformation at each of ``levels`` (one panel each), applied
    with ``seed`` and ``context``. Returns the path."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from lidarmt._atomic import atomic_path
    from lidarmt.errors import OutputError

    panels: list[tuple[str, LidarChange | None]] = [("source sweep", None)]
    for t in transforms:
        for level in levels:
            change = t.apply(frame, t.levels[level], seed=seed, context=context)
            panels.append((panel_title(t, level, change, frame), change))
    cols = max(1, min(columns, len(panels)))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.6 * rows + (0.4 if title else 0)), dpi=dpi,
                             squeeze=False)
    try:
        for ax, (name, change) in zip(axes.ravel(), panels, strict=False):
            draw_panel(ax, frame, change, extent=extent, title=name)
        for ax in axes.ravel()[len(panels):]:
            ax.axis("off")
        top = 1.0
        if title:
            fig.suptitle(title, fontsize=9)
            top = 1.0 - 0.4 / fig.get_figheight()
        fig.tight_layout(rect=(0.0, 0.0, 1.0, top))
        path = Path(path)
        try:
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format="png")
        except OSError as err:
            raise OutputError(f"cannot write {path}: {err.strerror or err}") from err
    finally:
        plt.close(fig)
    return path
