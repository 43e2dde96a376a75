"""KITTI folders: synthetic box conversion with a known calibration, and the 7 real frames."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.io import open_recording
from lidarmt.io.errors import FormatError
from lidarmt.io.kitti import KittiRecording
from lidarmt.types import MetaType

# Tr_velo_to_cam of the usual KITTI axes swap: cam x = -velo y, cam y = -velo z, cam z = velo x; then a shift
_TR = np.array([[0, -1, 0, 0.1], [0, 0, -1, -0.2], [1, 0, 0, -0.3]], dtype=float)


def _write_kitti(root, n_points=50, *, labels: str):
    for d in ("velodyne", "label_2", "calib", "road_label"):
        (root / "training" / d).mkdir(parents=True)
    rng = np.random.default_rng(0)
    pts = rng.uniform(-10, 10, (n_points, 4)).astype(np.float32)
    pts[:, 3] = rng.uniform(0, 1, n_points)
    pts[3, 0] = np.nan
    pts.tofile(root / "training" / "velodyne" / "000000.bin")
    (root / "training" / "label_2" / "000000.txt").write_text(labels)
    calib = "P0: " + " ".join(["0"] * 12) + "\nR0_rect: 1 0 0 0 1 0 0 0 1\nTr_velo_to_cam: " + " ".join(
        str(v) for v in _TR.ravel()) + "\n"
    (root / "training" / "calib" / "000000.txt").write_text(calib)
    sem = rng.integers(0, 80, n_points).astype(np.uint32) | (np.uint32(7) << np.uint32(16))  # instance in high bits
    sem.tofile(root / "training" / "road_label" / "000000.label")
    return pts, sem


def test_synthetic_kitti_boxes_and_labels(tmp_path):
    labels = (
        "Car 0.00 0 0.0 0 0 10 10 1.5 1.8 4.2 1.0 1.7 20.0 0.0\n"
        "Pedestrian 0.00 0 0.0 0 0 10 10 1.8 0.6 0.8 -2.0 1.7 8.0 1.5707963\n"
        "DontCare -1 -1 -10 0 0 1 1 -1 -1 -1 -1000 -1000 -1000 -10\n"
        "Tram 0 0 0 0 0 1 1 3.5 2.5 15 0 1.7 30 3.14159265\n"
    )
    pts, sem = _write_kitti(tmp_path, labels=labels)
    for path in (tmp_path, tmp_path / "training", tmp_path / "training" / "velodyne" / "000000.bin"):
        with open_recording(path) as rec:
            assert isinstance(rec, KittiRecording) and len(rec) == 1
    with open_recording(tmp_path) as rec:
        f = rec[0]
        assert f.pose is None and f.dropped == 1 and len(f) == 49
        keep = np.isfinite(pts).all(axis=1)
        np.testing.assert_allclose(f.points["intensity"], pts[keep, 3] * 255, rtol=1e-6)
        np.testing.assert_array_equal(f.labels.point_semantic, (sem[keep] & 0xFFFF).astype(np.int32))
        b = f.labels.boxes
        assert list(b["meta"]) == [MetaType.SMALLMOT, MetaType.PEDESTRIAN, MetaType.UNKNOWN]  # a tram is no car
        assert list(b["instance"]) == [0, 1, 3]
        # car: cam (1.0, 1.7 - 0.75, 20) -> velo: x = cz + 0.3, y = -(cx - 0.1), z = -(cy + 0.2)
        np.testing.assert_allclose([b["cx"][0], b["cy"][0], b["cz"][0]], [20.3, -0.9, -1.15], atol=1e-9)
        np.testing.assert_allclose([b["length"][0], b["width"][0], b["height"][0]], [4.2, 1.8, 1.5])
        np.testing.assert_allclose(b["yaw"][0], -np.pi / 2, atol=1e-9)  # ry = 0: facing camera x = velo -y
        np.testing.assert_allclose(b["yaw"][1], -np.pi, atol=1e-6)  # ry = pi/2 -> facing velo -x (wrapped)
        info = rec.describe()
        assert info.pose_source.startswith("none") and "identity" not in info.pose_source
        assert info.frames_with_pose == 0


def test_bad_kitti_files(tmp_path):
    _write_kitti(tmp_path, labels="Car 0 0 0 0 0 1 1 1.5 1.8\n")
    with open_recording(tmp_path) as rec, pytest.raises(FormatError, match="15 values"):
        rec[0]
    (tmp_path / "training" / "label_2" / "000000.txt").write_text("")
    (tmp_path / "training" / "road_label" / "000000.label").write_bytes(b"\0" * 8)
    with open_recording(tmp_path) as rec, pytest.raises(FormatError, match="labels for"):
        rec[0]
    (tmp_path / "training" / "velodyne" / "000000.bin").write_bytes(b"\0" * 10)
    with open_recording(tmp_path) as rec, pytest.raises(FormatError, match="truncated"):
        rec[0]


@pytest.mark.realdata
def test_real_kitti_frames(kitti_dir):
    with open_recording(kitti_dir) as rec:
        assert len(rec) == 7
        sizes = []
        for f in rec:
            sizes.append(len(f))
            assert f.pose is None and f.labels is not None
            assert f.labels.point_semantic is not None and len(f.labels.point_semantic) == len(f)
            assert len(f.labels.boxes) >= 1
            assert f.points["intensity"].min() >= 0 and f.points["intensity"].max() <= 255
            # road (40) is the most common or at least present class; boxes lie in front of the car, near ground
            assert 40 in set(np.unique(f.labels.point_semantic).tolist())
            b = f.labels.boxes
            assert np.all(np.abs(b["cz"]) < 4) and np.all(b["length"] > 0)
        assert min(sizes) >= 110_000 and max(sizes) <= 127_000
        # the labels land on the points: every box closer than 30 m holds > 50 points, its lowest one near the
        # box bottom (ground contact), which a wrong calibration or camera/velodyne axis mix-up would break
        checked = 0
        for f in rec:
            xyz = f.xyz
            for box in f.labels.boxes:
                if np.hypot(box["cx"], box["cy"]) > 30:
                    continue
                c, s = np.cos(-box["yaw"]), np.sin(-box["yaw"])
                dx, dy = xyz[:, 0] - box["cx"], xyz[:, 1] - box["cy"]
                lx, ly = c * dx - s * dy, s * dx + c * dy
                m = ((np.abs(lx) < box["length"] / 2) & (np.abs(ly) < box["width"] / 2)
                     & (np.abs(xyz[:, 2] - box["cz"]) < box["height"] / 2))
                assert m.sum() > 50
                assert xyz[m, 2].min() - (box["cz"] - box["height"] / 2) < 0.3
                checked += 1
        assert checked >= 5
