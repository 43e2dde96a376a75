"""SemanticKITTI sequences read as they come: scans, labels, poses.txt + calib.txt (a pose checked by hand)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_property_readers import (
    DAMAGE,
    ROUND,
    apply_damage,
    check_frame,
    clouds,
    damage,
    exercise,
    expected,
    poses,
    scratch,
    user_error_or_reads,
)

from lidarmt.cli import main
from lidarmt.io import open_recording, sniff
from lidarmt.io.errors import FormatError, PoseError, RecordingError
from lidarmt.io.semantickitti import SemanticKittiRecording, write_semantickitti_sequence
from lidarmt.types import Frame, Labels, finite_mask

# Tr (camera 0 <- velodyne): cam x = -velo y, cam y = -velo z, cam z = velo x, then a shift
TR = np.array([[0, -1, 0, 0.1], [0, 0, -1, -0.2], [1, 0, 0, -0.3]], dtype=float)
CALIB = "".join(f"P{k}: " + " ".join(["0"] * 12) + "\n" for k in range(4)) + "Tr: " + " ".join(
    str(v) for v in TR.ravel()) + "\n"


def pose_line(m: np.ndarray) -> str:
    return " ".join(str(float(v)) for v in np.asarray(m)[:3, :].ravel())


def write_sequence(root, *, scans=3, points=30, poses_txt=True, calib=True, labels=True):
    """``root/sequences/08`` by hand: scan 1 is 5 m ahead of scan 0 (camera z) and turned 90° about camera y."""
    seq = root / "sequences" / "08"
    (seq / "velodyne").mkdir(parents=True)
    rng = np.random.default_rng(2)
    raws, labs = [], []
    for k in range(scans):
        raw = rng.uniform(-30, 30, (points, 4)).astype(np.float32)
        raw[:, 3] = rng.uniform(0, 1, points)
        raw[2, 2] = np.inf
        raw.tofile(seq / "velodyne" / f"{k:06d}.bin")
        lab = rng.choice([10, 40, 44, 48, 70], points).astype(np.uint32) | (np.uint32(k + 3) << np.uint32(16))
        if labels:
            (seq / "labels").mkdir(exist_ok=True)
            lab.tofile(seq / "labels" / f"{k:06d}.label")
        raws.append(raw)
        labs.append(lab)
    cam = [np.eye(4) for _ in range(scans)]
    if scans > 1:
        cam[1] = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 5.0], [0, 0, 0, 1]], dtype=float)  # Ry(90°), z+5
    if poses_txt:
        (seq / "poses.txt").write_text("".join(pose_line(m) + "\n" for m in cam))
    if calib:
        (seq / "calib.txt").write_text(CALIB)
    (seq / "times.txt").write_text("".join(f"{0.1 * k:e}\n" for k in range(scans)))
    return seq, raws, labs


def test_sequence_pose_by_hand_and_labels(tmp_path):
    seq, raws, labs = write_sequence(tmp_path)
    with open_recording(seq) as rec:
        assert isinstance(rec, SemanticKittiRecording) and len(rec) == 3
        f0, f1 = rec[0], rec[1]
        info = rec.describe()
    np.testing.assert_allclose(f0.pose, np.eye(4), atol=1e-12)  # scan 0 is the world
    # By hand: the velodyne origin of scan 1 goes to camera 1 as Tr's shift (0.1, -0.2, -0.3); Ry(90°) turns it
    # to (-0.3, -0.2, -0.1), the 5 m step makes (-0.3, -0.2, 4.9) in camera 0; less the shift: (-0.4, 0, 5.2);
    # in velodyne axes (x = cam z, y = -cam x, z = -cam y): (5.2, 0.4, 0). Its x axis (cam z) is turned to
    # cam x = velodyne -y: a yaw of -90°.
    np.testing.assert_allclose(f1.pose[:3, 3], [5.2, 0.4, 0.0], atol=1e-12)
    np.testing.assert_allclose(f1.pose[:3, :3], [[0, 1, 0], [-1, 0, 0], [0, 0, 1]], atol=1e-12)
    assert math.atan2(f1.pose[1, 0], f1.pose[0, 0]) == pytest.approx(-math.pi / 2)
    # labels: class ids (low 16 bits) aligned with the finite points; the instance (high 16 bits) is not a class
    keep = np.isfinite(raws[1]).all(axis=1)
    assert f1.dropped == 1 and len(f1) == keep.sum()
    np.testing.assert_array_equal(f1.labels.point_semantic, (labs[1][keep] & 0xFFFF).astype(np.int32))
    # the class-10 points (car) share instance id 4: one object, numbered 0, with a box around them
    car = (labs[1][keep] & 0xFFFF) == 10
    assert len(f1.labels.boxes) == 1 and f1.labels.boxes[0]["meta"] == 1 and f1.labels.boxes[0]["instance"] == 0
    np.testing.assert_array_equal(f1.labels.point_instance, np.where(car, 0, -1))
    np.testing.assert_array_equal(f1.labels.point_meta, np.where(car, 1, -1))
    assert f1.labels.region is None and f1.stamp == pytest.approx(0.1)
    np.testing.assert_allclose(f1.points["intensity"], raws[1][keep, 3] * 255, rtol=1e-6)
    assert info.frames_with_pose == 3 and info.extra["frames_with_point_labels"] == 3
    assert "inv(Tr) · pose · Tr" in info.pose_source
    assert any("relative to scan 0" in n for n in info.notes)


def test_paths_a_sequence_can_be_given_as(tmp_path):
    seq, _, _ = write_sequence(tmp_path)
    for p in (seq, seq / "velodyne", seq / "velodyne" / "000001.bin"):
        assert sniff(p) == "semantickitti"
        with open_recording(p) as rec:
            f = rec[-1]
            assert len(rec) == (1 if p.is_file() else 3) and f.labels is not None
            if p.is_file():
                np.testing.assert_allclose(f.pose[:3, 3], [5.2, 0.4, 0.0], atol=1e-12)
    with open_recording(seq) as rec:
        streamed = list(rec)
        for i, f in enumerate(streamed):
            g = rec[i]
            assert g.points.tobytes() == f.points.tobytes() and np.array_equal(g.pose, f.pose)
            assert np.array_equal(g.labels.point_semantic, f.labels.point_semantic)
    with pytest.raises(RecordingError, match="folder of 1 SemanticKITTI sequence.*open one"):
        sniff(seq.parent)
    # a KITTI object folder (label_2/, calib/) stays a KITTI object folder
    (tmp_path / "training" / "velodyne").mkdir(parents=True)
    (tmp_path / "training" / "calib").mkdir()
    (seq / "velodyne" / "000000.bin").rename(tmp_path / "training" / "velodyne" / "000000.bin")
    assert sniff(tmp_path / "training") == "kitti" and sniff(tmp_path / "training" / "velodyne") == "kitti"


def test_missing_parts(tmp_path):
    seq, _, _ = write_sequence(tmp_path / "a", calib=False)
    with open_recording(seq) as rec:
        assert rec[1].pose is None and "calib.txt" in rec.pose_source
        assert any("camera-0 coordinates" in n for n in rec.describe().notes)
    seq, _, _ = write_sequence(tmp_path / "b", poses_txt=False, labels=False)
    with open_recording(seq) as rec:
        f = rec[0]
        assert f.pose is None and f.labels is None and rec.pose_source.startswith("none (no poses.txt")
    with open_recording(seq, require_pose=True) as rec, pytest.raises(PoseError, match="no pose"):
        rec[0]


def test_calib_without_tr_reads_the_sweeps_and_leaves_the_poses_unused(tmp_path):
    # the docstring's rule: without Tr the poses cannot reach the velodyne frame; the sweeps are still read
    seq, _, _ = write_sequence(tmp_path)
    (seq / "calib.txt").write_text("P0: " + " ".join(["0"] * 12) + "\n")
    with open_recording(seq) as rec:
        assert len(rec) == 3 and rec[1].pose is None and rec[1].labels is not None
        assert "no 'Tr:' line" in rec.pose_source
        assert any("poses are not used" in n and "no 'Tr:' line" in n for n in rec.describe().notes)
    with open_recording(seq, require_pose=True) as rec, pytest.raises(PoseError, match="no pose"):
        rec[0]


def test_bad_sequence_files_are_one_line_errors(tmp_path):
    seq, _, _ = write_sequence(tmp_path)
    poses_txt = (seq / "poses.txt").read_text()
    (seq / "poses.txt").write_text("".join(poses_txt.splitlines(keepends=True)[:2]))
    with pytest.raises(PoseError, match=r"2 poses for 3 scans .*numbered up to 2"):
        open_recording(seq)
    (seq / "poses.txt").write_text(poses_txt.replace("5.0", ""))
    with pytest.raises(FormatError, match=r"poses.txt:2: expected 12 numbers .*got 11"):
        open_recording(seq)
    (seq / "poses.txt").write_text(poses_txt)
    (seq / "calib.txt").write_text("P0: 1 2 3\nTr: 1 0 0 0\n")
    with pytest.raises(FormatError, match="no 'Tr:' line of 12 numbers"):
        open_recording(seq)
    (seq / "calib.txt").write_text(CALIB)
    (seq / "times.txt").write_text("0.0\n")
    with pytest.raises(FormatError, match="1 times for 3 scans"):
        open_recording(seq)
    (seq / "times.txt").unlink()
    (seq / "labels" / "000002.label").write_bytes(b"\0" * 10)
    with open_recording(seq) as rec:
        rec[1]
        with pytest.raises(FormatError, match=r"2 labels \(and a partial one\) for 30 points in 000002.bin"):
            rec[2]


def test_info_prints_the_sequence_and_its_poses(tmp_path, capsys):
    seq, _, _ = write_sequence(tmp_path)
    assert main(["info", str(seq)]) == 0
    out = capsys.readouterr().out
    assert "semantickitti" in out and "poses world ← sensor" in out and "frames with point labels" in out
    assert main(["info", str(seq), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "semantickitti" and d["frames_with_pose"] == 3
    p = d["extra"]["poses"][1]
    assert (p["x"], p["y"], p["z"]) == pytest.approx((5.2, 0.4, 0.0)) and p["heading"] == pytest.approx(-math.pi / 2)


def test_info_require_pose_wording(tmp_path, capsys):
    seq, _, _ = write_sequence(tmp_path, poses_txt=False)
    assert main(["info", str(seq), "--require-pose"]) == 2
    err = capsys.readouterr().err
    assert "3 of 3 frame(s) have no pose (world <- sensor)" in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------- properties


@st.composite
def sequences(draw) -> list[Frame]:
    k = draw(st.integers(1, 3))
    out = []
    for i in range(k):
        pts = draw(clouds(max_points=20, allow_big=False))
        pts = pts[[n for n in pts.dtype.names if n in ("x", "y", "z", "intensity")]]
        sem = np.array(draw(st.lists(st.integers(0, 259), min_size=len(pts), max_size=len(pts))), dtype=np.int32)
        out.append(Frame(pts, draw(poses()), 0.1 * i, "velodyne64", labels=Labels(point_semantic=sem)))
    return out


@ROUND
@given(fs=sequences())
def test_sequence_round_trip(fs):
    with scratch() as d:
        write_semantickitti_sequence(d / "08", fs, tr=TR)
        with open_recording(d / "08", require_pose=True) as rec:
            got = list(rec)
    assert len(got) == len(fs)
    for g, f in zip(got, fs, strict=True):
        check_frame(g)
        want, dropped = expected(f.points)
        assert g.dropped == dropped and g.stamp == f.stamp
        for axis in "xyz":
            np.testing.assert_array_equal(g.points[axis], want[axis])
        np.testing.assert_allclose(g.points["intensity"], want["intensity"], rtol=1e-6, atol=1e-4)
        np.testing.assert_array_equal(g.labels.point_semantic, f.labels.point_semantic[finite_mask(f.points)])
        np.testing.assert_allclose(g.pose, f.pose, rtol=0, atol=1e-9 * (1 + np.abs(f.pose).max()))


@DAMAGE
@given(which=st.sampled_from(["poses.txt", "calib.txt", "times.txt", "labels/000001.label", "velodyne/000002.bin"]),
       data=st.data())
def test_damaged_sequence_reads_or_is_a_user_error(which, data):
    with scratch() as d:
        seq, _, _ = write_sequence(d, points=8)
        target = seq / which
        raw = target.read_bytes()
        target.write_bytes(apply_damage(raw, data.draw(damage(len(raw)))))
        user_error_or_reads(d, lambda: exercise(seq))
