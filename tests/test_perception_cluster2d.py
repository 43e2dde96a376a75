"""Cluster2D on hand-built CNN outputs, and the numba kernels against the literal reference."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.perception.apollo.cluster2d import cluster2d, cluster2d_reference, type_probs
from lidarmt.types import MetaType, ObstacleClass

H = 8
R = 4.0  # 1 m cells, scale 1: instance offsets are in cells


def heads(h: int = H) -> dict[str, np.ndarray]:
    """Empty outputs: nothing is an object; all offsets zero; confident; tall; class UNKNOWN."""
    cls = np.zeros((5, h, h), np.float32)
    cls[0] = 0.9
    return {
        "category_score": np.zeros((h, h), np.float32),
        "instance_pt": np.zeros((2, h, h), np.float32),
        "confidence_score": np.full((h, h), 0.9, np.float32),
        "class_score": cls,
        "height_pt": np.full((h, h), 3.0, np.float32),
    }


def cell_xy(r: int, c: int, n: int = 1) -> np.ndarray:
    """n points in the centre of cell (r, c) (sensor frame: row from x, column from y, both flipped)."""
    return np.tile([[R - (r + 0.5), R - (c + 0.5), 0.0]], (n, 1)).astype(np.float32)


def blob(out: dict[str, np.ndarray], cells: list[tuple[int, int]], centre: tuple[int, int]) -> None:
    for r, c in cells:
        out["category_score"][r, c] = 0.9
        out["instance_pt"][:, r, c] = (centre[0] - r, centre[1] - c)


def run(h: dict[str, np.ndarray], pts: np.ndarray, **kw):
    a = cluster2d(h, pts[:, 0], pts[:, 1], pts[:, 2], range=R, **kw)
    b = cluster2d_reference(h, pts[:, 0], pts[:, 1], pts[:, 2], range=R, **kw)
    assert a.num_obstacles == b.num_obstacles
    np.testing.assert_array_equal(a.id_img, b.id_img)
    assert [list(c.points) for c in a.clusters] == [list(c.points) for c in b.clusters]
    assert [c.score for c in a.clusters] == [c.score for c in b.clusters]
    return a


def test_two_blobs_pointing_at_two_centres_give_two_obstacles_in_row_major_order() -> None:
    h = heads()
    a_cells = [(5, 5), (5, 6), (6, 5), (6, 6)]
    b_cells = [(1, 1), (1, 2), (2, 1), (2, 2)]
    blob(h, a_cells, (5, 5))
    blob(h, b_cells, (2, 2))
    pts = np.concatenate([cell_xy(r, c) for r, c in a_cells + b_cells])
    out = run(h, pts)
    assert out.num_obstacles == 2 and len(out.clusters) == 2
    # ids follow the first object cell in row-major order: the blob at rows 1-2 is obstacle 0
    assert list(out.clusters[0].points) == [4, 5, 6, 7]
    assert list(out.clusters[1].points) == [0, 1, 2, 3]
    assert out.id_img[1, 1] == 0 and out.id_img[6, 6] == 1 and out.id_img[0, 0] == -1


def test_one_centre_merges_and_adjacent_centres_union() -> None:
    h = heads()
    cells = [(3, 1), (3, 2), (3, 5), (3, 6)]
    blob(h, cells[:2], (3, 3))  # two groups pointing at adjacent centre cells (3,3) and (3,4)
    blob(h, cells[2:], (3, 4))
    pts = np.concatenate([cell_xy(r, c, n=2) for r, c in cells])
    out = run(h, pts)
    assert len(out.clusters) == 1 and list(out.clusters[0].points) == list(range(8))
    # centres two cells apart do not union
    h2 = heads()
    blob(h2, cells[:2], (3, 3))
    blob(h2, cells[2:], (3, 5))
    assert len(run(h2, pts).clusters) == 2


def test_path_into_a_cycle_through_a_non_object_cell() -> None:
    h = heads()
    # (4,0) -> (4,1) -> (4,2) <-> (4,3): a two-cell cycle; (4,1) is not an object (score 0.2)
    for c, target in [(0, 1), (1, 2), (2, 3), (3, 2)]:
        h["category_score"][4, c] = 0.9
        h["instance_pt"][1, 4, c] = target - c
    h["category_score"][4, 1] = 0.2
    pts = np.concatenate([cell_xy(4, c, n=2) for c in range(4)])  # 2 points per cell
    out = run(h, pts)
    assert len(out.clusters) == 1
    # the points of the non-object cell are not assigned; the cell before it still joins the cycle's cluster
    assert list(out.clusters[0].points) == [0, 1, 4, 5, 6, 7]
    assert out.id_img[4, 1] == -1


def test_use_all_grids_dilutes_the_score_below_the_confidence_threshold() -> None:
    h = heads()
    roi_cells = [(2, 2), (2, 3), (3, 2)]
    extra = [(3, 3), (4, 2), (4, 3), (4, 4), (3, 4), (2, 4), (5, 3)]  # object cells without ROI points
    blob(h, roi_cells + extra, (3, 3))
    for r, c in roi_cells:
        h["confidence_score"][r, c] = 0.3
    for r, c in extra:
        h["confidence_score"][r, c] = 0.0
    pts = np.concatenate([cell_xy(r, c) for r, c in roi_cells])
    without = run(h, pts, use_all_grids=False)
    assert len(without.clusters) == 1 and without.clusters[0].score == pytest.approx(0.3)
    with_all = run(h, pts, use_all_grids=True)
    assert with_all.num_obstacles == 1 and with_all.scores[0] == pytest.approx(0.09, abs=1e-6)
    assert with_all.clusters == []  # averaged score 0.9 / 10 < 0.1: the obstacle vanishes


def test_height_cut_uses_the_cluster_mean_height() -> None:
    h = heads()
    cells = [(2, 2), (2, 3), (3, 2), (3, 3)]
    blob(h, cells, (2, 2))
    h["height_pt"][:] = 1.0
    pts = np.concatenate([cell_xy(r, c) for r, c in cells])
    pts[:, 2] = [0.0, 1.4, 1.5, 1.6]  # 1.5 <= 1.0 + 0.5 is kept (float32), 1.6 is cut
    out = run(h, pts)
    assert list(out.clusters[0].points) == [0, 1, 2]
    assert len(run(h, pts, height_thresh=-1.0).clusters[0].points) == 4  # < 0 disables the cut
    pts[:, 2] = [0.0, 1.6, 1.7, 1.8]  # only one point left: below min_pts_num = 3
    assert run(h, pts).clusters == []
    assert len(run(h, pts, min_pts_num=1).clusters) == 1


def test_objectness_threshold_and_min_points() -> None:
    h = heads()
    blob(h, [(1, 1), (1, 2)], (1, 1))
    h["category_score"][1, 2] = 0.49
    pts = np.concatenate([cell_xy(1, 1, n=2), cell_xy(1, 2, n=5)])
    out = run(h, pts)
    assert out.clusters == []  # only 2 points lie in object cells
    h["category_score"][1, 2] = 0.5  # >= objectness_thresh
    assert len(run(h, pts).clusters[0].points) == 7


@pytest.mark.parametrize(
    ("channel", "meta", "cls"),
    [
        (0, MetaType.UNKNOWN, ObstacleClass.UNKNOWN),
        (1, MetaType.SMALLMOT, ObstacleClass.CAR),
        (2, MetaType.BIGMOT, ObstacleClass.CAR),
        (3, MetaType.NONMOT, ObstacleClass.CYCLIST),
        (4, MetaType.PEDESTRIAN, ObstacleClass.PEDESTRIAN),
    ],
)
def test_class_is_the_argmax_of_averaged_class_scores(
    channel: int, meta: MetaType, cls: ObstacleClass
) -> None:
    h = heads()
    cells = [(2, 2), (2, 3), (3, 3)]
    blob(h, cells, (2, 2))
    h["class_score"][:] = 0.1
    h["class_score"][channel, 2, 2] = 0.9
    h["class_score"][channel, 3, 3] = 0.9
    h["class_score"][(channel + 1) % 5, 2, 3] = 0.95  # the highest single cell does not beat the average
    pts = np.concatenate([cell_xy(r, c) for r, c in cells])
    c = run(h, pts).clusters[0]
    assert c.meta_type == meta and meta.obstacle_class == cls
    tp = c.type_probs
    assert tp.shape == (6,) and tp[1] == 0 and tp[2] == 0
    m = c.meta_probs
    assert tp[0] == m[0] and tp[3] == m[4] and tp[4] == m[3] and tp[5] == pytest.approx(m[1] + m[2])


def test_first_maximum_wins_on_ties() -> None:
    assert np.argmax(np.array([0.2, 0.5, 0.5, 0.1, 0.0])) == 1
    assert list(type_probs(np.array([0.1, 0.2, 0.3, 0.4, 0.5], np.float32))) == pytest.approx(
        [0.1, 0, 0, 0.5, 0.4, 0.5]
    )


def test_filter_noise_drops_low_count_cells() -> None:
    h = heads()
    cells = [(2, 2), (2, 3), (3, 2), (3, 3)]
    blob(h, cells, (2, 2))
    log_count = np.zeros((H, H), np.float32)
    log_count[2, 2] = np.log(800.0)  # max (1 + count) >= 700 enables the filter
    log_count[2, 3] = np.log(31.0)
    log_count[3, 2] = np.log(5.0)
    log_count[3, 3] = np.log(2.0)
    pts = np.concatenate([cell_xy(r, c, n=2) for r, c in cells])
    kept = run(h, pts, filter_noise=True, log_count=log_count)
    assert list(kept.clusters[0].points) == [0, 1, 2, 3]
    assert len(run(h, pts).clusters[0].points) == 8
    log_count[2, 2] = np.log(600.0)  # below enable_filter_thresh: nothing is dropped
    assert len(run(h, pts, filter_noise=True, log_count=log_count).clusters[0].points) == 8


def test_centre_rounding_is_half_away_from_zero_and_outside_points_are_ignored() -> None:
    h = heads()
    # B = (2,2) points at column 2 + 0.5 = 2.5: std::round gives 3 (banker's rounding would give 2, itself);
    # (2,3) is not an object and points on to C = (2,5), a centre. So B joins C: one obstacle.
    blob(h, [(2, 2)], (2, 2))
    h["instance_pt"][1, 2, 2] = 0.5
    h["instance_pt"][1, 2, 3] = 2.0
    blob(h, [(2, 5)], (2, 5))
    far = np.array([[R + 1, 0, 0], [0, -R - 1, 0]], np.float32)  # outside the grid: never assigned
    pts = np.concatenate([cell_xy(2, 2, n=2), cell_xy(2, 5, n=2), far])
    out = run(h, pts)
    assert out.num_obstacles == 1 and list(out.clusters[0].points) == [0, 1, 2, 3]
    assert out.point_obstacle[4] == -1 and out.point_obstacle[5] == -1


@pytest.mark.parametrize("seed", range(6))
def test_kernels_equal_reference_on_random_grids(seed: int) -> None:
    rng = np.random.default_rng(seed)
    h = int(rng.choice([16, 32]))
    out = {
        "category_score": (rng.random((h, h)) * (rng.random((h, h)) < 0.7)).astype(np.float32),
        "instance_pt": (rng.normal(size=(2, h, h)) * rng.choice([0.5, 1.0, 3.0])).astype(np.float32),
        "confidence_score": (rng.random((h, h)) * 0.4).astype(np.float32),
        "class_score": rng.random((5, h, h)).astype(np.float32),
        "height_pt": rng.normal(size=(h, h)).astype(np.float32),
    }
    n = 600
    rr = float(h) / 2
    pts = np.c_[rng.uniform(-rr * 1.1, rr * 1.1, (n, 2)), rng.normal(size=n)].astype(np.float32)
    log_count = np.log1p(rng.integers(0, 10, (h, h))).astype(np.float32)
    for all_grids in (False, True):
        kw = {"use_all_grids": all_grids, "filter_noise": bool(seed % 2), "log_count": log_count}
        kw |= {"filter_thresh": 3.0, "enable_filter_thresh": 8.0}
        a = cluster2d(out, pts[:, 0], pts[:, 1], pts[:, 2], range=rr, **kw)
        b = cluster2d_reference(out, pts[:, 0], pts[:, 1], pts[:, 2], range=rr, **kw)
        assert a.num_obstacles == b.num_obstacles
        np.testing.assert_array_equal(a.id_img, b.id_img)
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.heights, b.heights)
        np.testing.assert_array_equal(a.point_obstacle, b.point_obstacle)
        assert len(a.clusters) == len(b.clusters)
        for ca, cb in zip(a.clusters, b.clusters, strict=True):
            np.testing.assert_array_equal(ca.points, cb.points)
            np.testing.assert_array_equal(ca.meta_probs, cb.meta_probs)


@pytest.mark.slow
def test_kernels_equal_reference_on_a_real_frame_at_640(kitti_dir) -> None:
    """A real KITTI frame, full 640 grid: object cells where the cloud has points, random offsets."""
    from lidarmt.io import open_recording
    from lidarmt.lidar.perception.apollo.features import compute_features

    frame = open_recording(kitti_dir)[0]
    sem = frame.labels.point_semantic & 0xFFFF
    roi = frame.points[np.isin(sem, (40, 44, 48))]
    feats = compute_features(frame.points, grid=640)
    rng = np.random.default_rng(0)
    n = 640
    out = {
        "category_score": (feats[7] * rng.uniform(0.3, 1.0, (n, n))).astype(np.float32),
        "instance_pt": rng.normal(0, 1.5, (2, n, n)).astype(np.float32),
        "confidence_score": rng.uniform(0, 0.6, (n, n)).astype(np.float32),
        "class_score": rng.random((5, n, n)).astype(np.float32),
        "height_pt": rng.normal(0.5, 1, (n, n)).astype(np.float32),
    }
    a = cluster2d(out, roi["x"], roi["y"], roi["z"])
    b = cluster2d_reference(out, roi["x"], roi["y"], roi["z"])
    assert a.num_obstacles > 100 and len(a.clusters) > 50
    assert a.num_obstacles == b.num_obstacles
    np.testing.assert_array_equal(a.id_img, b.id_img)
    np.testing.assert_array_equal(a.point_obstacle, b.point_obstacle)
    np.testing.assert_array_equal(a.scores, b.scores)
