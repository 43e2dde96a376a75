"""The bird's-eye obstacle picture."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.errors import UserError
from lidarmt.lidar.bev import CLASS_COLORS, box_corners, draw_bev
from lidarmt.types import Frame, MetaType, Obstacle, ObstacleClass, make_points


def _obstacle(cls: ObstacleClass, cx: float, cy: float, heading: float, idx: np.ndarray) -> Obstacle:
    d = np.array([np.cos(heading), np.sin(heading), 0.0])
    return Obstacle(cls=cls, score=0.9, point_indices=idx, center=np.array([cx, cy, -1.0]), length=4.0,
                    width=2.0, height=1.5, direction=d, polygon=np.zeros((0, 3)), meta_type=MetaType.SMALLMOT)  # fmt: skip


def test_box_corners_follow_heading_and_size() -> None:
    o = _obstacle(ObstacleClass.CAR, 10.0, 2.0, np.pi / 2, np.arange(3))
    c = box_corners(o)
    assert c.shape == (4, 2)
    np.testing.assert_allclose(np.sort(c[:, 0]), [9, 9, 11, 11], atol=1e-12)  # width 2 across x
    np.testing.assert_allclose(np.sort(c[:, 1]), [0, 0, 4, 4], atol=1e-12)  # length 4 along y


def test_draw_bev_writes_a_png(tmp_path) -> None:
    rng = np.random.default_rng(0)
    pts = make_points(np.c_[rng.uniform(-30, 30, (5000, 2)), rng.uniform(-2, 1, 5000)], 10.0)
    frame = Frame(pts)
    obs = [
        _obstacle(c, 5.0 * k, -3.0 + k, 0.3 * k, np.arange(10 * k, 10 * k + 10))
        for k, c in enumerate(CLASS_COLORS)
    ]
    out = draw_bev(frame, obs, roi_indices=np.arange(0, 5000, 3), out=tmp_path / "x" / "bev.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert not list((tmp_path / "x").glob("*.tmp"))  # written atomically
    with pytest.raises(UserError, match="cannot write"):
        draw_bev(frame, obs, out=tmp_path / "x" / "bev.png" / "sub.png")
