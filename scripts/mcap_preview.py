"""Draw what a LiDAR bundle's ``bundle.mcap`` holds, from its decoded messages (not from the bundle's other files).

    .venv/bin/python scripts/mcap_preview.py runs/demo/violations/<id>/bundle.mcap docs/images/bundle-mcap.png

Two bird's-eye panels as the shipped Foxglove layout arranges them: the source cloud with its obstacles (boxes in
the colours the messages carry, lost ones red with their LOST label) and the ROI polygons; the follow-up cloud
with the added points (orange), the minimal subset (red) and its obstacles. It is a check that the file carries
everything an engineer looks at in Foxglove, and the picture the README shows of it (Foxglove itself is a web
application that needs the network, which the project's machines do not have).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np


def _cloud(msg) -> np.ndarray:
    arr = np.frombuffer(msg.data, dtype="<f4").reshape(-1, msg.point_stride // 4)
    return arr[:, :3].astype(np.float64)


def _view(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return -xy[:, 1], xy[:, 0]  # forward up, left to the left


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mcap", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--extent", type=float, default=45.0, help="half-size of the view, m")
    a = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon

    from lidarmt.engine.mcap import (
        TOPIC_ADDED_POINTS,
        TOPIC_FOLLOW_OBSTACLES,
        TOPIC_FOLLOW_POINTS,
        TOPIC_MINIMAL_POINTS,
        TOPIC_ROI,
        TOPIC_SOURCE_OBSTACLES,
        TOPIC_SOURCE_POINTS,
        read_messages,
        summarize,
    )

    msgs = dict(read_messages(a.mcap))
    topics = summarize(a.mcap)
    ext = a.extent
    fig, axes = plt.subplots(1, 2, figsize=(14, 7.4), sharex=True, sharey=True)
    panels = ((axes[0], TOPIC_SOURCE_POINTS, TOPIC_SOURCE_OBSTACLES, False),
              (axes[1], TOPIC_FOLLOW_POINTS, TOPIC_FOLLOW_OBSTACLES, True))
    for ax, pts_topic, obs_topic, follow in panels:
        xyz = _cloud(msgs[pts_topic])
        keep = (np.abs(xyz[:, :2]) <= ext).all(axis=1)
        h, v = _view(xyz[keep])
        ax.scatter(h, v, s=0.25, c=xyz[keep, 2], cmap="Greys_r", vmin=-3, vmax=3, linewidths=0, rasterized=True)
        if TOPIC_ROI in msgs:
            for line in msgs[TOPIC_ROI].entities[0].lines:
                p = np.array([[q.x, q.y] for q in line.points] + [[line.points[0].x, line.points[0].y]])
                ax.plot(*_view(p), color="#2a7fd4", lw=0.9)
        if follow:
            added = _cloud(msgs[TOPIC_ADDED_POINTS])
            ax.scatter(*_view(added), s=5, c="#ff7f0e", linewidths=0, label=f"{TOPIC_ADDED_POINTS} ({len(added)})")
            mini = _cloud(msgs[TOPIC_MINIMAL_POINTS])
            if len(mini):
                ax.scatter(*_view(mini), s=90, marker="*", c="#ff0000", edgecolors="k", linewidths=0.4,
                           label=f"{TOPIC_MINIMAL_POINTS} ({len(mini)})", zorder=6)
        for e in msgs[obs_topic].entities:
            c = e.cubes[0]
            yaw = 2 * math.atan2(c.pose.orientation.z, c.pose.orientation.w)
            d, w = np.array([math.cos(yaw), math.sin(yaw)]), np.array([-math.sin(yaw), math.cos(yaw)])
            ctr = np.array([c.pose.position.x, c.pose.position.y])
            hl, hw = c.size.x / 2, c.size.y / 2
            corners = np.array([ctr + hl * d + hw * w, ctr - hl * d + hw * w, ctr - hl * d - hw * w,
                                ctr + hl * d - hw * w])
            rgba = (c.color.r, c.color.g, c.color.b)
            lost = e.texts and e.texts[0].text.startswith("LOST")
            ax.add_patch(Polygon(np.c_[_view(corners)], closed=True, fill=True, fc=(*rgba, 0.35), ec=rgba,
                                 lw=2.5 if lost else 1.2, zorder=5))
            if lost:
                ax.text(*(t[0] for t in _view(ctr[None])), " " + e.texts[0].text.split(" (")[0], color="#c00000",
                        fontsize=8, fontweight="bold", zorder=7, clip_on=True)
        n_lost = sum(1 for e in msgs[obs_topic].entities if e.texts and e.texts[0].text.startswith("LOST"))
        ax.set_title(f"{pts_topic} ({len(xyz)} points), {obs_topic}: {len(msgs[obs_topic].entities)} obstacles"
                     + (f", {n_lost} lost" if n_lost else ""), fontsize=9)
        ax.set_aspect("equal")
        ax.set_xlim(-ext, ext)
        ax.set_ylim(-ext, ext)
        ax.grid(True, lw=0.3, color="#e0e0e0")
        ax.set_xlabel("−y (left ←) [m]")
        if follow:
            ax.legend(loc="upper right", fontsize=7)
    axes[0].set_ylabel("x (forward) [m]")
    fig.suptitle(f"{a.mcap.parent.name}/{a.mcap.name}, decoded with the mcap reader: "
                 f"{len(topics)} topics ({', '.join(sorted({v['schema'] for v in topics.values()}))})", fontsize=10)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=100, bbox_inches="tight", pad_inches=0.15)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
