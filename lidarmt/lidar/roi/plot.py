"""Bird's-eye picture of a frame and its ROI (``lidarmt roi``): polygons, ROI cells, in/out points, sensor, scale."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_path
from lidarmt.lidar.roi.bitmap import RoiMask
from lidarmt.types import Frame, finite_mask


@dataclass(frozen=True, slots=True)
class RoiCounts:
    points: int
    in_roi: int
    polygons: int
    roads: int
    junctions: int
    area_m2: float

    @property
    def fraction(self) -> float:
        return self.in_roi / self.points if self.points else 0.0


def roi_counts(frame: Frame, mask: RoiMask) -> tuple[RoiCounts, np.ndarray]:
    """Counts for a frame and the per-point in-ROI flags (non-finite points are never in the ROI)."""
    inside = mask.contains(frame.points) & finite_mask(frame.points)
    junctions = sum(1 for i in mask.polygon_ids if i.startswith("junction:"))
    counts = RoiCounts(len(frame), int(inside.sum()), len(mask.polygons), len(mask.polygons) - junctions, junctions,
                       mask.area)
    return counts, inside


def draw_roi_png(
    frame: Frame,
    mask: RoiMask,
    out: str | os.PathLike[str],
    *,
    title: str = "",
    view: float | None = None,
    dpi: int = 130,
    max_points: int = 400_000,
) -> RoiCounts:
    """Write a PNG: ROI cells (light fill), ROI polygons (outlines), points in the ROI (orange) and outside it
    (grey), the sensor and its heading, a 10/20 m scale bar; axes are Apollo's local frame (world axes, origin at
    the sensor, metres). Returns the counts printed in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon as MplPolygon

    counts, inside = roi_counts(frame, mask)
    ok = finite_mask(frame.points)
    local = mask.to_local(frame.points[ok]).astype(np.float64)
    ins = inside[ok]
    if len(local) > max_points:  # keep the picture light; the counts above use every point
        sel = np.random.default_rng(0).choice(len(local), max_points, replace=False)
        local, ins = local[sel], ins[sel]
    r = mask.range
    view = float(view) if view else r + 5.0

    fig, ax = plt.subplots(figsize=(9, 9))
    ax.set_facecolor("#fbfbf8")
    grid = mask.grid()
    if grid.any():
        ax.imshow(np.ma.masked_where(~grid.T, grid.T), origin="lower", extent=(-r, r, -r, r),
                  cmap="Greens", vmin=0, vmax=3, alpha=0.45, interpolation="nearest", zorder=1)
    ax.add_patch(plt.Rectangle((-r, -r), 2 * r, 2 * r, fill=False, ls=":", lw=0.8, ec="#777777", zorder=2))
    for k, poly in enumerate(mask.polygons):
        is_j = k < len(mask.polygon_ids) and mask.polygon_ids[k].startswith("junction:")
        ax.add_patch(MplPolygon(poly[:, :2], closed=True, fill=False, lw=1.1, zorder=3,
                                ec="#1f5fa8" if not is_j else "#8a2be2"))
    ax.scatter(local[~ins, 0], local[~ins, 1], s=0.4, c="#9a9a9a", lw=0, zorder=4, label="outside ROI",
               rasterized=True)
    ax.scatter(local[ins, 0], local[ins, 1], s=0.6, c="#e8710a", lw=0, zorder=5, label="in ROI", rasterized=True)
    # sensor and its heading (sensor x axis in the local frame)
    head = mask.rotation[:2, 0]
    n = float(np.hypot(*head)) or 1.0
    ax.plot([0], [0], marker="o", ms=7, mfc="#d62728", mec="white", zorder=6)
    ax.annotate("", xy=(head[0] / n * 6, head[1] / n * 6), xytext=(0, 0), zorder=6,
                arrowprops={"arrowstyle": "-|>", "color": "#d62728", "lw": 1.6})
    # scale bar
    bar = 20.0 if view >= 40 else 10.0
    x0, y0 = -view + 0.06 * view, -view + 0.06 * view
    ax.plot([x0, x0 + bar], [y0, y0], color="black", lw=3, solid_capstyle="butt", zorder=7)
    ax.text(x0 + bar / 2, y0 + 0.02 * view, f"{bar:g} m", ha="center", va="bottom", fontsize=9, zorder=7)
    ax.set_xlim(-view, view)
    ax.set_ylim(-view, view)
    ax.set_aspect("equal")
    ax.set_xlabel("east of sensor [m]")
    ax.set_ylabel("north of sensor [m]")
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker="o", mfc="#e8710a", mec="none", label=f"in ROI ({counts.in_roi:,})"),
        Line2D([], [], ls="", marker="o", mfc="#9a9a9a", mec="none",
               label=f"outside ROI ({counts.points - counts.in_roi:,})"),
        Line2D([], [], color="#1f5fa8", label=f"road polygons ({counts.roads})"),
        Line2D([], [], color="#8a2be2", label=f"junction polygons ({counts.junctions})"),
        Line2D([], [], ls="", marker="o", mfc="#d62728", mec="white", label="sensor (arrow: heading)"),
    ]
    ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
    sub = (f"{counts.in_roi:,} / {counts.points:,} points in ROI ({100 * counts.fraction:.1f} %), "
           f"{counts.polygons} polygons, {counts.area_m2:,.0f} m², range ±{r:g} m, cell {mask.cell:g} m")
    if mask.empty:
        sub += f"\nempty ROI: {mask.note}"
    ax.set_title(f"{title}\n{sub}" if title else sub, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=dpi, format=out.suffix.lstrip(".").lower() or "png")
    plt.close(fig)
    return counts
