"""Bird's-eye picture of one frame's obstacles: points, ROI points, boxes coloured by class as Apollo's viewer.

``draw_bev(frame, obstacles, roi_indices=..., out="bev.png")`` writes a PNG (matplotlib, Agg backend): all
points light grey, ROI points darker, each obstacle's box (MinBox: centre, length, width, direction) and hull
in its class colour (car green, pedestrian pink, cyclist blue, unknown purple, as in Apollo's offline
visualizer), a heading tick, a legend with per-class counts, a scale bar and the sensor marker. The view is the
sensor frame seen from above with x (forward) up and y (left) to the left. When the frame carries labels, their
boxes are drawn dashed in black (the ground truth) and the edges of the labelled region (KITTI: camera 2's view)
dotted, so a picture shows which obstacles are labelled objects and what the labels cover.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_path
from lidarmt.errors import OutputError
from lidarmt.types import CLASS_ORDER, Frame, Obstacle, ObstacleClass

#: Apollo offline visualizer colours per class.
CLASS_COLORS: dict[ObstacleClass, str] = {
    ObstacleClass.CAR: "#00b000",
    ObstacleClass.PEDESTRIAN: "#ff5fa2",
    ObstacleClass.CYCLIST: "#1f4fff",
    ObstacleClass.UNKNOWN: "#9932cc",
}


def _star_size(k: int) -> float:
    """Marker area of the highlighted (minimal) points: large for a few, smaller when there are many."""
    return 140.0 if k <= 20 else 60.0 if k <= 100 else 25.0


def box_corners(o: Obstacle) -> np.ndarray:
    """(4, 2) x/y corners of an obstacle's box, counter-clockwise."""
    d = np.asarray(o.direction[:2], dtype=np.float64)
    n = np.linalg.norm(d)
    d = d / n if n > 0 else np.array([1.0, 0.0])
    w = np.array([-d[1], d[0]])
    c = np.asarray(o.center[:2], dtype=np.float64)
    hl, hw = 0.5 * o.length, 0.5 * o.width
    return np.array([c + hl * d + hw * w, c - hl * d + hw * w, c - hl * d - hw * w, c + hl * d - hw * w])


def _to_view(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sensor x/y -> plot (horizontal, vertical) = (-y, x): forward is up, left is left."""
    xy = np.asarray(xy)
    return -xy[..., 1], xy[..., 0]


def roi_outline(ax, roi: object, *, extent: float, color: str = "#2a7fd4", label: str | None = "ROI outline") -> bool:
    """Draw the outline of an ROI bitmap (anything with ``grid()``, ``range``, ``cell`` and ``rotation``, as
    :class:`~lidarmt.lidar.roi.bitmap.RoiMask`) on a view axis (forward up, left to the left); False when the ROI is
    not a bitmap or is empty. The cells are in Apollo's local frame (world axes at the sensor), so they are
    rotated back into the sensor frame first."""
    grid_of = getattr(roi, "grid", None)
    if grid_of is None or getattr(roi, "empty", False):
        return False
    try:
        grid = np.asarray(grid_of(), dtype=bool)
        rng, cell = float(roi.range), float(roi.cell)
        rot = np.asarray(getattr(roi, "rotation", np.eye(3)), dtype=np.float64)[:2, :2]
    except (AttributeError, TypeError, ValueError):
        return False
    if not grid.any():
        return False
    step = max(1, int(round(0.5 / cell)))  # about 0.5 m resolution is plenty for an outline
    g = grid[::step, ::step].astype(np.float32)
    c = -rng + (np.arange(g.shape[0]) * step + 0.5 * step) * cell
    lx, ly = np.meshgrid(c, c, indexing="ij")
    # local = R_xy @ sensor_xy (rotation only) -> sensor_xy = R_xy^T @ local (exact for a level sensor)
    sx = rot[0, 0] * lx + rot[1, 0] * ly
    sy = rot[0, 1] * lx + rot[1, 1] * ly
    near = (np.abs(sx) <= extent * 1.5) & (np.abs(sy) <= extent * 1.5)
    if not (near & (g > 0)).any():
        return False
    ax.contour(-sy, sx, g, levels=[0.5], colors=color, linewidths=1.0, zorder=2)
    if label:
        ax.plot([], [], color=color, lw=1.0, label=label)
    return True


def draw_bev(
    frame: Frame,
    obstacles: Sequence[Obstacle] | Iterable[Obstacle],
    *,
    roi_indices: np.ndarray | None = None,
    out: str | os.PathLike[str],
    extent: float | None = None,
    title: str | None = None,
    dpi: int = 130,
    size_in: float = 9.0,
    roi: object | None = None,
    added_from: int | None = None,
    highlight: np.ndarray | None = None,
    show_labels: bool = True,
) -> Path:
    """Write the bird's-eye PNG of ``frame`` with ``obstacles`` to ``out`` (atomically); returns the path.

    ``extent`` is the half-size of the view in metres (default: enough for the obstacles and the ROI points,
    at least 20 m, at most 80 m). ``roi``: an ROI bitmap (:class:`~lidarmt.lidar.roi.bitmap.RoiMask`) whose outline is
    drawn. ``added_from``: points from this index on were added by a mutation (drawn orange); ``highlight``:
    indices of points to mark (large red stars, e.g. the minimal subset of the added points that still breaks
    MR1). ``show_labels``: draw the frame's labelled boxes and labelled region, when it has them. The axis labels
    and title are always inside the picture.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Polygon as MplPolygon

    obstacles = list(obstacles)
    pts = frame.points
    finite = np.isfinite(pts["x"]) & np.isfinite(pts["y"])
    xy = np.c_[pts["x"], pts["y"]].astype(np.float64)
    if extent is None:
        far = [20.0]
        if roi_indices is not None and len(roi_indices):
            far.append(float(np.percentile(np.abs(xy[roi_indices][finite[roi_indices]]), 99.5)) + 5)
        for o in obstacles:
            far.append(float(np.abs(o.center[:2]).max()) + o.length + 5)
        extent = float(min(max(far), 80.0))
    in_view = finite & (np.abs(xy[:, 0]) <= extent) & (np.abs(xy[:, 1]) <= extent)
    roi_mask = np.zeros(len(pts), dtype=bool)
    if roi_indices is not None and len(roi_indices):
        roi_mask[np.asarray(roi_indices, dtype=np.int64)] = True

    fig, ax = plt.subplots(figsize=(size_in, size_in), dpi=dpi)
    try:
        ax.set_facecolor("white")
        h, v = _to_view(xy[in_view & ~roi_mask])
        ax.scatter(h, v, s=0.15, c="#c8c8c8", linewidths=0, rasterized=True, zorder=1)
        h, v = _to_view(xy[in_view & roi_mask])
        ax.scatter(h, v, s=0.35, c="#505050", linewidths=0, rasterized=True, zorder=2)
        extra_handles = []
        if roi is not None and roi_outline(ax, roi, extent=extent, label=None):
            extra_handles.append(Line2D([], [], color="#2a7fd4", lw=1.0, label="ROI outline"))
        if added_from is not None and added_from < len(pts):
            added = np.zeros(len(pts), dtype=bool)
            added[added_from:] = True
            h, v = _to_view(xy[in_view & added])
            ax.scatter(h, v, s=5, c="#ff7f0e", linewidths=0, rasterized=True, zorder=2)
            extra_handles.append(Line2D([], [], ls="", marker="o", ms=4, color="#ff7f0e",
                                        label=f"added points ({len(pts) - added_from})"))
        if highlight is not None and len(highlight):
            hl = np.asarray(highlight, dtype=np.int64)
            h, v = _to_view(xy[hl])
            ax.scatter(h, v, s=_star_size(len(h)), marker="*", c="#d62728", edgecolors="black",
                           linewidths=0.6, zorder=7)
            extra_handles.append(Line2D([], [], ls="", marker="*", ms=10, color="#d62728", mec="black",
                                        label=f"minimal subset ({len(hl)})"))
        counts = dict.fromkeys(CLASS_ORDER, 0)
        for o in obstacles:
            color = CLASS_COLORS.get(o.cls, CLASS_COLORS[ObstacleClass.UNKNOWN])
            counts[o.cls] = counts.get(o.cls, 0) + 1
            if len(o.point_indices):
                h, v = _to_view(xy[np.asarray(o.point_indices, dtype=np.int64)])
                ax.scatter(h, v, s=1.2, c=color, linewidths=0, alpha=0.7, rasterized=True, zorder=3)
            ch, cv = _to_view(box_corners(o))
            ax.add_patch(MplPolygon(np.c_[ch, cv], closed=True, fill=False, ec=color, lw=1.4, zorder=4))
            if len(o.polygon) >= 3:
                ph, pv = _to_view(np.asarray(o.polygon)[:, :2])
                ax.add_patch(MplPolygon(np.c_[ph, pv], closed=True, fill=True, fc=color, alpha=0.15, ec="none",
                                        zorder=3))  # fmt: skip
            c = np.asarray(o.center[:2], dtype=np.float64)
            d = np.asarray(o.direction[:2], dtype=np.float64)
            tip = c + d / max(np.linalg.norm(d), 1e-9) * 0.5 * o.length
            (th, tv) = _to_view(np.array([c, tip]))
            ax.plot(th, tv, color=color, lw=1.0, zorder=5)
        lb = frame.labels if show_labels else None
        if lb is not None and len(lb.boxes):
            for b in lb.boxes:
                c, sn = np.cos(float(b["yaw"])), np.sin(float(b["yaw"]))
                hl, hw = 0.5 * float(b["length"]), 0.5 * float(b["width"])
                local = np.array([[hl, hw], [-hl, hw], [-hl, -hw], [hl, -hw]])
                corners = local @ np.array([[c, -sn], [sn, c]]).T + [float(b["cx"]), float(b["cy"])]
                bh, bv = _to_view(corners)
                ax.add_patch(MplPolygon(np.c_[bh, bv], closed=True, fill=False, ec="black", lw=0.9, ls="--",
                                        zorder=4))
            extra_handles.append(Line2D([], [], color="black", lw=0.9, ls="--",
                                        label=f"labelled boxes ({len(lb.boxes)})"))
        if lb is not None and lb.region is not None:
            reach = extent * 1.5 if lb.region.max_range is None else lb.region.max_range
            for az in (lb.region.azimuth_min, lb.region.azimuth_max):
                eh, ev = _to_view(np.array([[0.0, 0.0], [reach * np.cos(az), reach * np.sin(az)]]))
                ax.plot(eh, ev, color="#555555", lw=0.9, ls=":", zorder=2)
            extra_handles.append(Line2D([], [], color="#555555", lw=0.9, ls=":",
                                        label=f"labelled region ({lb.region.width_deg:.0f}°)"))
        # sensor marker: a triangle pointing forward (+x, up)
        ax.plot([0], [0], marker="^", ms=9, color="#d62728", mec="black", mew=0.6, zorder=6)
        # scale bar: 10 m (5 m for small views) in the lower left corner
        bar = 10.0 if extent >= 25 else 5.0
        x0, y0 = -extent * 0.92, -extent * 0.92
        ax.plot([x0, x0 + bar], [y0, y0], color="black", lw=2.5, zorder=6)
        ax.text(
            x0 + bar / 2, y0 + extent * 0.02, f"{bar:g} m", ha="center", va="bottom", fontsize=9, zorder=6
        )
        handles = [
            Line2D([], [], color=CLASS_COLORS[c], lw=2, label=f"{c.value} ({counts.get(c, 0)})")
            for c in CLASS_ORDER
        ]
        handles += [
            Line2D(
                [], [], ls="", marker="o", ms=4, color="#505050", label=f"ROI points ({int(roi_mask.sum())})"
            ),
            Line2D(
                [],
                [],
                ls="",
                marker="o",
                ms=4,
                color="#c8c8c8",
                label=f"other points ({int((~roi_mask).sum())})",
            ),
            Line2D([], [], ls="", marker="^", ms=7, color="#d62728", mec="black", label="sensor (x forward)"),
            *extra_handles,
        ]
        ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
        ax.set_xlim(-extent, extent)
        ax.set_ylim(-extent, extent)
        ax.set_aspect("equal")
        ax.set_xlabel("← y (left)   [m]    right →")
        ax.set_ylabel("x (forward) [m]")
        ticks = ax.get_xticks()
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{(-t) + 0.0:g}" for t in ticks])  # show sensor y, which grows to the left
        ax.set_xlim(-extent, extent)
        ax.grid(True, lw=0.3, color="#e0e0e0", zorder=0)
        ax.set_title(title or f"{len(obstacles)} obstacles", fontsize=11)
        fig.tight_layout()
        target = Path(out)
        try:
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format="png", bbox_inches="tight", pad_inches=0.15)
        except OSError as err:  # e.g. the folder cannot be made: one clear line, not a traceback
            raise OutputError(f"cannot write {target}: {err.strerror or err}") from err
    finally:
        plt.close(fig)
    return target
