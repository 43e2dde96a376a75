"""Bundle and perceive pictures (issue 11): ROI outline, highlighted minimal points, labels that do not pile up."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lidarmt.lidar.bev import draw_bev, roi_outline  # noqa: E402
from lidarmt.lidar.mr1.bundle import _place_labels  # noqa: E402
from lidarmt.lidar.roi.bitmap import RoiMask  # noqa: E402
from lidarmt.types import Frame, make_points  # noqa: E402


def strip_mask(rotation=None) -> RoiMask:
    g = np.zeros((160, 160), dtype=bool)
    g[:, 70:90] = True  # |y| < 2.5 m over the whole ±20 m grid (local frame)
    return RoiMask.from_grid(g, rotation, range=20.0, cell=0.25)


def test_roi_outline_follows_the_bitmap_and_the_pose_rotation():
    fig, ax = plt.subplots()
    try:
        assert roi_outline(ax, strip_mask(), extent=20.0)
        xs = np.concatenate([p.vertices[:, 0] for c in ax.collections for p in c.get_paths()])
        assert np.abs(xs).max() <= 2.6  # the view's horizontal axis is -y: the strip's edges at |y| = 2.5 m
        ax.cla()
        c, s = np.cos(np.pi / 2), np.sin(np.pi / 2)
        rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])  # sensor x points to world y: the strip runs across
        assert roi_outline(ax, strip_mask(rot), extent=20.0)
        ys = np.concatenate([p.vertices[:, 1] for col in ax.collections for p in col.get_paths()])
        assert np.abs(ys).max() <= 2.6
        assert not roi_outline(ax, object(), extent=20.0)  # not a bitmap: nothing drawn
        assert not roi_outline(ax, RoiMask.from_grid(np.zeros((160, 160), bool), range=20.0), extent=20.0)
    finally:
        plt.close(fig)


def test_labels_near_the_sensor_do_not_pile_up():
    fig, ax = plt.subplots()
    try:
        items = [(0.5 + 0.1 * k, 0.5, f"#{k} car", {"fontsize": 6}) for k in range(20)]
        items.insert(0, (1.0, 1.0, "#99 car LOST", {"fontsize": 8, "always": True}))
        items.append((15.0, 15.0, "#50 car", {"fontsize": 6}))
        _place_labels(ax, items, extent=40.0)
        texts = [t.get_text() for t in ax.texts]
        assert "#99 car LOST" in texts and "#50 car" in texts  # lost obstacles are always labelled
        assert len(texts) == 2  # the 20 crowded labels next to the sensor and the lost obstacle are left out
    finally:
        plt.close(fig)


def test_draw_bev_with_roi_added_and_minimal_points(tmp_path):
    rng = np.random.default_rng(0)
    xyz = np.c_[rng.uniform(-15, 15, 2000), rng.uniform(-15, 15, 2000), np.zeros(2000)]
    frame = Frame(make_points(xyz, 1.0))
    mask = strip_mask()
    out = draw_bev(frame, [], roi_indices=mask.indices(frame), out=tmp_path / "bev.png", roi=mask,
                   added_from=1900, highlight=np.array([1950, 1960]))
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000
