"""Issue 32: SemanticKITTI sequences as training sources (whole-sweep instance labels, "unlabeled" points carry
no loss) and the evaluation's centre rule and intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lidarmt.io.semantickitti import UNLABELLED_CLASSES, write_semantickitti_sequence
from lidarmt.lidar.perception.apollo.targets import build_targets, point_cells
from lidarmt.types import Frame, Labels, MetaType, make_points

GRID, R = 64, 16.0


def sk_frame(seed: int = 0) -> Frame:
    """Road (class 40) all around, a car (10, instance 0) ahead, a person (30, instance 1) behind-left, and a
    ring of "unlabeled" (class 0) points 2 m from the sensor, as SemanticKITTI labels the ego car's roof, and a patch
    of unlabelled points 10-17 m away."""
    rng = np.random.default_rng(seed)
    ground = np.c_[rng.uniform(-14, 14, (900, 2)), np.full(900, -1.7)]
    car = np.c_[rng.uniform([6, -1], [10, 1], (80, 2)), rng.uniform(-1.5, -0.3, 80)]
    person = np.c_[rng.uniform([-6.3, 4.7], [-5.7, 5.3], (20, 2)), rng.uniform(-1.6, 0.0, 20)]
    a = np.linspace(-math.pi, math.pi, 60, endpoint=False)
    ring = np.c_[2.0 * np.cos(a), 2.0 * np.sin(a), np.full(60, -0.7)]
    gap = np.c_[rng.uniform([-12, -12], [-8, -8], (30, 2)), rng.uniform(-1.0, 1.0, 30)]  # unlabelled, far from the car
    pts = make_points(np.concatenate([ground, car, person, ring, gap]).astype(np.float32), 20.0)
    sem = np.r_[np.full(900, 40), np.full(80, 10), np.full(20, 30), np.zeros(90)].astype(np.int32)
    inst = np.r_[np.full(900, -1), np.full(80, 0), np.full(20, 1), np.full(90, -1)].astype(np.int32)
    return Frame(pts, labels=Labels(point_semantic=sem, point_instance=inst))


@pytest.fixture
def sequence(tmp_path):
    seq = tmp_path / "sequences" / "03"
    write_semantickitti_sequence(seq, [sk_frame(0), sk_frame(1), sk_frame(2)], tr=np.eye(4)[:3])
    return seq


def test_a_semantickitti_sequence_with_a_frame_range_is_a_training_source(sequence):
    from lidarmt.lidar.perception.apollo.train import open_sources

    (src,) = open_sources([f"{sequence}@1:3"])
    assert src.kind == "recording" and len(src) == 2 and src.unlabelled == UNLABELLED_CLASSES
    f = src.load(0)
    assert f.labels.region is None  # every point labelled: the whole sweep
    assert len(f.labels.boxes) == 2 and (f.labels.point_instance >= 0).sum() == 100
    metas = sorted(int(m) for m in f.labels.boxes["meta"])
    assert metas == sorted([int(MetaType.SMALLMOT), int(MetaType.PEDESTRIAN)])
    (whole,) = open_sources([str(sequence)])
    assert len(whole) == 3 and "3 sweeps" in whole.describe()


def test_whole_sweep_targets_from_instances_and_unlabelled_cells_ignored(sequence):
    from lidarmt.lidar.perception.apollo.train import open_sources

    (src,) = open_sources([str(sequence)])
    f = src.load(0)
    t = build_targets(f, grid=GRID, range_=R, unlabelled=src.unlabelled)
    plain = build_targets(f, grid=GRID, range_=R)
    # the car behind the sensor's view of a camera is as much an object as the one ahead: whole sweep
    assert np.array_equal(t.objectness, plain.objectness)
    cls = set(np.unique(t.cls[t.objectness]).tolist())
    assert cls == {int(MetaType.SMALLMOT), int(MetaType.PEDESTRIAN)}
    # heights: the box top of each object (z max of its points)
    car = f.labels.point_instance == 0
    assert t.height[t.cls == int(MetaType.SMALLMOT)].max() == pytest.approx(float(f.points["z"][car].max()), abs=1e-4)
    # cells holding only "unlabeled" points are left out of the losses, except the ego car's roof ring (within
    # EGO_RADIUS_M), which Apollo's feature generator sees like any point: background there
    cell = point_cells(f.points["x"], f.points["y"], f.points["z"], grid=GRID, range_=R)
    sem = f.labels.point_semantic
    r = np.hypot(f.points["x"], f.points["y"])
    only0 = np.setdiff1d(np.unique(cell[sem == 0]), np.unique(cell[sem != 0]))
    ring_cells = np.intersect1d(only0, np.unique(cell[(sem == 0) & (r < 3)]))
    gap_cells = np.intersect1d(only0, np.unique(cell[(sem == 0) & (r > 8)]))
    assert len(ring_cells) > 10 and len(gap_cells) > 10
    assert t.ignore.ravel()[gap_cells].all() and not plain.ignore.ravel()[gap_cells].any()
    assert not t.ignore.ravel()[ring_cells].any() and not t.objectness.ravel()[ring_cells].any()
    road_only = np.setdiff1d(np.unique(cell[sem == 40]), np.unique(cell[sem != 40]))
    assert not t.ignore.ravel()[road_only].any()  # background (objects only under a box's footprint)
    assert t.objectness.ravel()[road_only].sum() < 0.1 * len(road_only)


def test_training_on_a_sequence_and_a_slice(sequence, tmp_path):
    pytest.importorskip("torch")
    from lidarmt.lidar.perception.apollo.train import TrainConfig, train

    cfg = TrainConfig(data=(str(sequence), f"{sequence}@0:1"), data_weights=(3.0, 1.0), out=str(tmp_path / "run"),
                      steps=2, grid=GRID, range=R, crop=32, batch=2, warmup=1, threads=1, bf16=False)
    msgs: list[str] = []
    s = train(cfg, log=msgs.append)
    assert s["steps_done"] == 2 and s["frames"] == 4
    assert "p=0.75" in msgs[0] and "p=0.25" in msgs[0]
    assert (tmp_path / "run" / f"cnnseg{GRID}.pt").is_file()


def test_cli_train_takes_a_sequence(sequence, tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from lidarmt.cli import app

    r = CliRunner().invoke(app, ["train", "--data", f"{sequence}@0:2", "--out", str(tmp_path / "run"), "--steps", "1",
                                 "--grid", "64", "--range", "16", "--crop", "32", "--batch", "1", "--warmup", "1",
                                 "--threads", "1", "--fp32"])
    assert r.exit_code == 0, r.output
    assert "trained 1 steps" in r.output


# ------------------------------------------------------------------------------------------ evaluation helpers


def test_centre_rule_counts_a_detection_inside_the_grown_box():
    from lidarmt.lidar.perception.apollo.evaluate import GroundTruth, box_polygon, centre_matrix, match_frame
    from lidarmt.types import BOX_DTYPE, ObstacleClass

    box = np.array([(10.0, 0.0, -1.0, 4.0, 2.0, 1.5, 0.0, int(MetaType.SMALLMOT), 0)], dtype=BOX_DTYPE)[0]
    gts = [GroundTruth(box_polygon(box), ObstacleClass.CAR, False, 50)]

    def det(x, y, length=1.0):
        return (box_polygon(np.array([(x, y, -1.0, length, 0.5, 1.0, 0.0, 1, 0)], dtype=BOX_DTYPE)[0]),
                ObstacleClass.CAR, 0.9, True)

    # centres at 2.4 m (inside the 4 m box grown by 0.5: half-length 2.5) and 2.6 m ahead of the box centre
    m = centre_matrix([det(12.4, 0.0), det(12.6, 0.0), det(10.0, 1.45)], gts)
    assert m[:, 0].tolist() == [1.0, 0.0, 1.0]
    c = match_frame(gts, [det(12.4, 0.0)], iou=centre_matrix([det(12.4, 0.0)], gts),
                    thresholds={k: 0.5 for k in ObstacleClass})
    assert (c[ObstacleClass.CAR].tp, c[ObstacleClass.CAR].fp) == (1, 0)
    # the same detection fails the IoU rule: a 1 m box at the car's end
    c = match_frame(gts, [det(12.4, 0.0)])
    assert (c[ObstacleClass.CAR].tp, c[ObstacleClass.CAR].fp, c[ObstacleClass.CAR].fn) == (0, 1, 1)


def test_wilson_and_cluster_bootstrap_intervals():
    from lidarmt.lidar.perception.apollo.evaluate import cluster_bootstrap, wilson_interval

    lo, hi = wilson_interval(38, 46)  # published example values: 38/46 -> about [0.69, 0.91]
    assert lo == pytest.approx(0.6915, abs=2e-3) and hi == pytest.approx(0.9087, abs=2e-3)
    assert wilson_interval(0, 0) is None
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35
    # identical clusters: no spread; one odd cluster among nine widens the interval
    same = cluster_bootstrap(np.full(9, 8), np.full(9, 10))
    assert same == pytest.approx((0.8, 0.8))
    num, den = np.r_[np.full(8, 8), 0], np.full(9, 10)
    lo, hi = cluster_bootstrap(num, den)
    assert lo < 71 / 90 - 0.01 and hi == pytest.approx(0.8) and lo > 0.5
    assert cluster_bootstrap(np.array([1]), np.array([2])) is None
    assert cluster_bootstrap(num, den) == (lo, hi)  # seeded: same seed, same interval
