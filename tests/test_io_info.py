"""``lidarmt info`` on every format, and bad input: one line, non-zero exit, no traceback, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.io import APOLLO_POINTCLOUD_TOPIC, Ros1BagWriter, write_ros1_bag
from lidarmt.io._synthetic import synthetic_frames


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["info", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("lidarmt: error:")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def bag(tmp_path):
    path = tmp_path / "demo.bag"
    frames = synthetic_frames(4, 500, seed=3, nan_points=2)
    frames[2] = frames[2].with_points(frames[2].points[:0])
    write_ros1_bag(path, frames)
    return path


def test_info_ros1_text_and_json(bag, capsys):
    rc, out, err = run(capsys, bag)
    assert rc == 0, err
    assert "ros1" in out and "/tf_static" in out and "world→novatel" in out
    assert "1 empty frame(s)" in out and "non-finite" in out
    rc, out, _ = run(capsys, bag, "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["format"] == "ros1" and d["topic"] == APOLLO_POINTCLOUD_TOPIC and d["frame_count"] == 4
    assert d["points_min"] == 0 and d["points_max"] == 498 and d["dropped_points"] == 6
    assert d["duration"] == pytest.approx(0.3)
    assert d["frames_with_pose"] == 4
    assert {t["name"]: t["count"] for t in d["topics"]} == {APOLLO_POINTCLOUD_TOPIC: 4, "/tf": 4, "/tf_static": 1}
    x0 = 315323.45
    assert d["position_range"]["x"][0] == pytest.approx(x0, abs=1e-6)
    rc, out, _ = run(capsys, bag, "--json", "--sample", "2")
    assert rc == 0 and json.loads(out)["frames_scanned"] == 2


def test_info_kitti_like_and_pcd(tmp_path, capsys):
    from lidarmt.io import write_pcd_folder

    write_pcd_folder(tmp_path / "pcd", synthetic_frames(2, 100))
    rc, out, _ = run(capsys, tmp_path / "pcd", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["format"] == "pcd" and d["frame_count"] == 2 and "pose" in d["pose_source"]


@pytest.mark.realdata
def test_info_real_kitti(kitti_dir, capsys):
    rc, out, _ = run(capsys, kitti_dir)
    assert rc == 0
    assert "no pose (world <- sensor)" in " ".join(out.split())
    rc, out, _ = run(capsys, kitti_dir, "--json")
    d = json.loads(out)
    assert d["frame_count"] == 7 and d["points_min"] >= 110_000 and d["points_max"] <= 127_000
    assert d["pose_source"].startswith("none") and "identity" not in d["pose_source"]


# ----------------------------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path, capsys):
    rc, _, err = run(capsys, tmp_path / "nope.bag")
    assert_one_line_error(rc, err, "nope.bag", "no such file")


def test_directory_instead_of_file(tmp_path, capsys):
    d = tmp_path / "looks_like.bag"
    d.mkdir()
    rc, _, err = run(capsys, d)
    assert_one_line_error(rc, err, "looks_like.bag")


def test_truncated_bag(bag, tmp_path, capsys):
    data = bag.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 20):
        p = tmp_path / f"cut{cut}.bag"
        p.write_bytes(data[:cut])
        rc, _, err = run(capsys, p)
        assert_one_line_error(rc, err, p.name)


def test_corrupt_bag(bag, tmp_path, capsys):
    data = bytearray(bag.read_bytes())
    data[4000:9000] = bytes(range(256)) * 19 + bytes(136)
    p = tmp_path / "corrupt.bag"
    p.write_bytes(bytes(data))
    rc, _, err = run(capsys, p)
    assert_one_line_error(rc, err, "corrupt.bag")
    g = tmp_path / "garbage.bag"
    g.write_bytes(b"\x00" * 1000)
    rc, _, err = run(capsys, g)
    assert_one_line_error(rc, err, "garbage.bag", "not a ROS1 bag")


def test_bag_without_pointcloud2(tmp_path, capsys):
    from lidarmt.io.ros1 import TYPESTORE, _tf_message

    p = tmp_path / "tf_only.bag"
    with Ros1BagWriter(p) as w:
        w.write_message("/tf", "tf2_msgs/msg/TFMessage", _tf_message(TYPESTORE, "world", "novatel", 10**9, np.eye(4)),
                        10**9)
    rc, out, err = run(capsys, p)
    assert rc == 0, err  # a valid recording, only not one to perceive: a note, not an error
    assert "no point clouds" in out and "/tf" in out  # what the bag holds is listed


def test_unknown_topic_lists_existing(bag, capsys):
    rc, _, err = run(capsys, bag, "--topic", "/velodyne_points")
    assert_one_line_error(rc, err, "/velodyne_points", APOLLO_POINTCLOUD_TOPIC)


def test_nan_frames_are_counted_not_fatal(tmp_path, capsys):
    frames = synthetic_frames(2, 100, nan_points=100)  # every point NaN
    p = tmp_path / "nan.bag"
    write_ros1_bag(p, frames)
    rc, out, _ = run(capsys, p, "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["dropped_points"] == 200 and d["points_max"] == 0
    assert any("every frame is empty" in n for n in d["notes"])


def test_cloud_without_pose(tmp_path, capsys):
    frames = synthetic_frames(2, 50)
    frames[1].pose = None
    p = tmp_path / "half.bag"
    write_ros1_bag(p, frames)
    rc, out, _ = run(capsys, p, "--json")
    assert rc == 0 and json.loads(out)["frames_with_pose"] == 1
    before = sorted(x.name for x in tmp_path.iterdir())
    rc, _, err = run(capsys, p, "--require-pose")
    assert_one_line_error(rc, err, "half.bag", "no pose")
    assert sorted(x.name for x in tmp_path.iterdir()) == before  # nothing written


def test_unknown_format(tmp_path, capsys):
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    rc, _, err = run(capsys, p)
    assert_one_line_error(rc, err, "notes.txt", "unknown recording format")


def test_subprocess_entry_point(bag, tmp_path):
    """The installed-style entry point (python -m lidarmt) behaves the same: one line, exit 2."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "lidarmt", "info", str(tmp_path / "missing.bag")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("fmt", ["ros2-sqlite3", "ros2-mcap", "cyber", "pcd", "npz"])
def test_info_every_format(tmp_path, capsys, fmt):
    from lidarmt.io import write_cyber_record, write_npz_folder, write_pcd_folder, write_ros2_bag

    frames = synthetic_frames(3, 200, seed=8, nan_points=1)
    path = tmp_path / "rec"
    if fmt.startswith("ros2"):
        write_ros2_bag(path, frames, storage=fmt.split("-")[1])
    elif fmt == "cyber":
        path = tmp_path / "rec.record"
        write_cyber_record(path, frames)
    elif fmt == "pcd":
        write_pcd_folder(path, frames)
    else:
        write_npz_folder(path, frames)
    rc, out, err = run(capsys, path, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["format"] == fmt.split("-")[0] and d["frame_count"] == 3 and d["frames_with_pose"] == 3
    assert d["points_min"] == 199 and d["dropped_points"] == 3
    assert d["position_range"]["x"][0] == pytest.approx(315323.45, abs=1e-5)
    rc, out, _ = run(capsys, path)
    assert rc == 0 and "points / frame" in out


def test_truncated_bag_with_recover(bag, tmp_path, capsys):
    data = bag.read_bytes()
    p = tmp_path / "cut.bag"
    p.write_bytes(data[: len(data) - 200])  # the closing index is damaged
    rc, _, err = run(capsys, p)
    assert_one_line_error(rc, err, "cut.bag", "--recover")
    rc, out, err = run(capsys, p, "--recover", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["frame_count"] == 4 and any("scanning" in n for n in d["notes"])
