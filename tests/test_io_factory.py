"""open_recording / sniff: which reader a path gets, and the errors for paths that are no recording."""

from __future__ import annotations

import pytest

from lidarmt.io import sniff, write_cyber_record, write_pcd, write_ros1_bag, write_ros2_bag
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.errors import RecordingError


def test_sniff_by_content_and_name(tmp_path):
    f = synthetic_frames(1, 10)
    write_ros1_bag(tmp_path / "x.bag", f)
    (tmp_path / "renamed.dat").write_bytes((tmp_path / "x.bag").read_bytes())
    write_cyber_record(tmp_path / "r.record.00003", f)
    (tmp_path / "nameless").write_bytes((tmp_path / "r.record.00003").read_bytes())
    write_ros2_bag(tmp_path / "b2", f, storage="mcap")
    write_pcd(tmp_path / "a.pcd", f[0])
    assert sniff(tmp_path / "x.bag") == "ros1"
    assert sniff(tmp_path / "renamed.dat") == "ros1"  # the magic decides
    assert sniff(tmp_path / "r.record.00003") == "cyber"
    assert sniff(tmp_path / "nameless") == "cyber"  # a Cyber header section
    assert sniff(tmp_path / "b2") == "ros2" and sniff(tmp_path / "b2" / "b2.mcap") == "ros2"
    assert sniff(tmp_path / "a.pcd") == "pcd"


def test_folders_that_hold_several_recordings(tmp_path):
    f = synthetic_frames(1, 10)
    (tmp_path / "bags").mkdir()
    write_ros1_bag(tmp_path / "bags" / "a.bag", f)
    with pytest.raises(RecordingError, match="folder of ROS1 bags; open one"):
        sniff(tmp_path / "bags")
    (tmp_path / "recs").mkdir()
    write_cyber_record(tmp_path / "recs" / "a.record.00000", f)
    with pytest.raises(RecordingError, match="folder of Cyber records"):
        sniff(tmp_path / "recs")
    (tmp_path / "x.bag").write_bytes(b"#ROSBAG V1.2\n")
    with pytest.raises(RecordingError, match="not a ROS1 bag"):
        sniff(tmp_path / "x.bag")
