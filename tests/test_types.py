import numpy as np
import pytest

from lidarmt.io.npz import load_frame_npz, save_frame_npz
from lidarmt.types import (
    BOX_DTYPE,
    Frame,
    Labels,
    MetaType,
    Obstacle,
    ObstacleClass,
    Obstacles,
    Provenance,
    make_points,
    make_pose,
    matrix_to_quat,
    quat_to_matrix,
)


def test_quaternion_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        r = quat_to_matrix(*q)
        assert np.allclose(r @ r.T, np.eye(3), atol=1e-12)
        q2 = np.array(matrix_to_quat(r))
        assert np.allclose(quat_to_matrix(*q2), r, atol=1e-12)


def test_frame_rejects_points_without_xyzi():
    with pytest.raises(ValueError, match="intensity"):
        Frame(np.zeros(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")]))


def test_with_extra_points_keeps_indices_and_pads_labels():
    pts = make_points(np.arange(9, dtype=np.float32).reshape(3, 3), 10.0, ring=np.array([1, 2, 3]))
    lb = Labels(np.zeros(0, BOX_DTYPE), point_instance=np.array([0, 0, 1], np.int32))
    f = Frame(pts, pose=make_pose([1, 2, 3], [0, 0, 0, 1]), labels=lb)
    g = f.with_extra_points(make_points(np.ones((2, 3)), 5.0))
    assert len(g) == 5 and np.array_equal(g.points[:3], pts)
    assert list(g.points["ring"][3:]) == [0, 0]
    assert list(g.labels.point_instance) == [0, 0, 1, -1, -1]
    assert len(f) == 3  # the source frame is unchanged


def test_npz_round_trip(tmp_path):
    pts = make_points(np.random.default_rng(1).normal(size=(100, 3)), 7.0, time=np.linspace(0, 0.1, 100))
    boxes = np.zeros(2, BOX_DTYPE)
    boxes["meta"] = [MetaType.SMALLMOT, MetaType.PEDESTRIAN]
    f = Frame(pts, pose=make_pose([5, 6, 7], [0, 0, 0.3826834, 0.9238795]), stamp=12.5,
              provenance=Provenance("sim", "sim", 4), labels=Labels(boxes, np.arange(100, dtype=np.int32)))
    save_frame_npz(tmp_path / "f.npz", f)
    g = load_frame_npz(tmp_path / "f.npz")
    assert np.array_equal(g.points, f.points) and np.array_equal(g.pose, f.pose)
    assert g.stamp == 12.5 and g.index == 4 and np.array_equal(g.labels.boxes, boxes)


def test_obstacles_counts_and_json_round_trip():
    o = Obstacle(ObstacleClass.CAR, 0.9, np.array([1, 2, 3]), np.array([1.0, 2.0, -1.5]), 4.0, 1.8, 1.5,
                 np.array([0.0, 1.0, 0.0]), np.zeros((4, 3)), MetaType.SMALLMOT)
    obs = Obstacles([o, o])
    assert obs.counts()[ObstacleClass.CAR] == 2 and obs.counts()[ObstacleClass.CYCLIST] == 0
    back = Obstacles.from_list(obs.to_list())
    assert back.counts() == obs.counts()
    assert back[0].heading == pytest.approx(np.pi / 2)
    assert MetaType.NONMOT.obstacle_class is ObstacleClass.CYCLIST


def test_npz_is_byte_deterministic_and_readable_by_others(tmp_path):
    import os
    import stat

    f = Frame(make_points(np.random.default_rng(2).normal(size=(50, 3)), 3.0), pose=np.eye(4), stamp=1.0)
    save_frame_npz(tmp_path / "a.npz", f)
    save_frame_npz(tmp_path / "b.npz", f)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "a.npz").st_mode) == 0o666 & ~umask  # not mkstemp's 0600
