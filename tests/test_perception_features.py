"""The cnnseg feature generator: numba kernel == NumPy reference, and Apollo's formulas on hand-placed points."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.perception.apollo.features import (
    FEATURE_NAMES,
    compute_features,
    compute_features_reference,
    point_cells,
)
from lidarmt.types import make_points


def _random_cloud(rng: np.random.Generator, n: int, span: float = 70.0) -> np.ndarray:
    xyz = np.c_[rng.uniform(-span, span, (n, 2)), rng.uniform(-6, 6, n)].astype(np.float32)
    pts = make_points(xyz, rng.integers(0, 256, n).astype(np.float32))
    # duplicates with equal z (top intensity: the first point wins), and exact boundary values
    pts[10:20] = pts[0:10]
    pts["intensity"][10:20] = 7.0
    pts["z"][20:25] = [-5.0, 5.0, 4.999, -4.999, 0.0]
    pts["x"][25:30] = [60.0, -60.0, 59.999, -59.999, 0.0]
    pts["y"][30:35] = [60.0, -60.0, 59.999, -59.999, 0.0]
    pts["x"][35] = np.nan
    pts["intensity"][36] = np.inf
    return pts


@pytest.mark.parametrize("grid", [512, 640])
def test_kernel_matches_reference(grid: int) -> None:
    rng = np.random.default_rng(grid)
    pts = _random_cloud(rng, 20000)
    a = compute_features(pts, grid=grid)
    b = compute_features_reference(pts, grid=grid)
    assert a.shape == (8, grid, grid) and a.dtype == np.float32
    for k, name in enumerate(FEATURE_NAMES):
        np.testing.assert_array_equal(a[k], b[k], err_msg=name)


def test_kernel_matches_reference_on_a_subset_and_plain_array() -> None:
    rng = np.random.default_rng(3)
    pts = _random_cloud(rng, 5000, span=20)
    idx = np.sort(rng.choice(len(pts), 1500, replace=False))
    a = compute_features(pts, grid=512, indices=idx)
    b = compute_features_reference(pts, grid=512, indices=idx)
    np.testing.assert_array_equal(a, b)
    plain = np.c_[pts["x"], pts["y"], pts["z"], pts["intensity"]]
    np.testing.assert_array_equal(compute_features(plain, grid=512), compute_features(pts, grid=512))
    # the subset really is a subset: fewer points than the full cloud
    assert a[7].sum() < compute_features(pts, grid=512)[7].sum()


def test_row_col_flips_and_channels_on_hand_placed_points() -> None:
    grid, rng_m = 640, 60.0
    cell = 2 * rng_m / grid  # 0.1875 m
    pts = make_points(
        np.array(
            [
                [59.95, 59.95, 1.0],  # row 0, col 0 (x ahead, y left)
                [59.95, 59.95, 2.0],
                [59.95, 59.95, 2.0],  # tie on the max: the first of the two keeps the top intensity
                [-59.95, -59.95, -1.0],  # last row, last col
                [0.1, -0.1, 0.5],
                [10.0, 0.0, 5.0],  # z >= max_height: skipped
                [10.0, 0.0, -5.0],  # z <= min_height: skipped
                [60.0, 0.0, 0.0],  # x = 60 -> row 0 (floor(0)); x = -60 -> row 640: outside
                [-60.0, 0.0, 0.0],
            ]
        ),
        np.array([10, 20, 30, 40, 50, 60, 70, 80, 90], dtype=np.float32),
    )
    f = compute_features(pts, grid=grid, range=rng_m)
    assert f[7, 0, 0] == 1 and f[7, -1, -1] == 1
    assert f[0, 0, 0] == 2.0 and f[1, 0, 0] == pytest.approx(5.0 / 3)
    assert f[4, 0, 0] == np.float32(20 / 255.0)  # first point reaching the max height
    assert f[5, 0, 0] == pytest.approx((10 + 20 + 30) / 3 / 255.0, rel=1e-6)
    assert f[2, 0, 0] == pytest.approx(np.log1p(3.0), rel=1e-6)
    assert f[0, -1, -1] == -1.0  # a negative max height is kept
    r, c = int((60 - 0.1) / cell), int((60 + 0.1) / cell)
    assert f[7, r, c] == 1
    r10 = int((60 - 10) / cell)
    c0 = int(60 / cell)
    assert f[7, r10, c0] == 0  # both strict height bounds
    assert f[7, 0, c0] == 1 and f[7].sum() == 4
    # empty cells: max height 0 (not -5), everything else 0
    assert f[0, 5, 5] == 0 and f[2, 5, 5] == 0
    # constant channels: direction atan2(cy, cx) / 2pi and distance hypot / 60 - 0.5
    cx = 60 - 0.5 * cell
    assert f[3, 0, 0] == pytest.approx(np.arctan2(cx, cx) / (2 * np.pi), abs=1e-6)
    assert f[6, 0, 0] == pytest.approx(np.hypot(cx, cx) / 60 - 0.5, abs=1e-6)
    assert f[3, grid // 2 - 1, grid - 1] == pytest.approx(np.arctan2(-cx, 0.5 * cell) / (2 * np.pi), abs=1e-6)


def test_large_counts_use_log() -> None:
    pts = make_points(np.tile([[1.0, 1.0, 0.0]], (300, 1)), 100.0)
    f = compute_features(pts, grid=512)
    b = compute_features_reference(pts, grid=512)
    assert f[2].max() == pytest.approx(np.log(301.0), rel=1e-6)
    np.testing.assert_array_equal(f, b)


def test_point_cells_has_no_height_test() -> None:
    pts = make_points(np.array([[0.1, 0.1, 9.0], [70.0, 0.0, 0.0], [59.99, 59.99, 0.0]]))
    cells = point_cells(pts, grid=640)
    assert cells[0] >= 0 and cells[1] == -1 and cells[2] == 0


def test_out_buffer_is_reused_and_checked() -> None:
    pts = make_points(np.array([[1.0, 2.0, 0.0]]))
    buf = np.full((8, 512, 512), 7, dtype=np.float32)
    out = compute_features(pts, grid=512, out=buf)
    assert out is buf and buf[7].sum() == 1
    with pytest.raises(ValueError):
        compute_features(pts, grid=640, out=buf)


def test_buffer_reuse_with_constants_filled_gives_the_same_features() -> None:
    rng = np.random.default_rng(9)
    a, b = _random_cloud(rng, 3000), _random_cloud(rng, 3000)
    buf = compute_features(a, grid=512).copy()
    again = compute_features(b, grid=512, out=buf, constants_filled=True)
    np.testing.assert_array_equal(again, compute_features_reference(b, grid=512))
