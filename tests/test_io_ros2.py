"""ROS2 bags (sqlite3 and mcap): round trip, CDR codec, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.io import APOLLO_POINTCLOUD_TOPIC, Ros2BagWriter, open_recording, write_ros2_bag
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.cloud import APOLLO_LAYOUT_RING, from_points
from lidarmt.io.errors import FormatError, NoPointCloudError, RecordingError, TopicError, WriterError
from lidarmt.io.pointcloud2 import POINTCLOUD2, parse_cdr, serialize_cdr
from lidarmt.io.ros2 import TYPESTORE, Ros2Recording
from lidarmt.types import make_pose


def test_cdr_codec_matches_typestore():
    pts = synthetic_frames(1, 64, seed=1, ring=True)[0].points
    rec = from_points(pts, APOLLO_LAYOUT_RING)
    for fid in ("velodyne64", "v", ""):  # string lengths change the alignment of what follows
        raw = serialize_cdr(stamp_ns=1_600_000_000_000_000_123, frame_id=fid, layout=APOLLO_LAYOUT_RING, data=rec,
                            width=64)
        msg = TYPESTORE.deserialize_cdr(raw, POINTCLOUD2)
        assert msg.header.frame_id == fid and msg.header.stamp.nanosec == 123 and msg.width == 64
        assert [f.name for f in msg.fields] == ["x", "y", "z", "intensity", "ring", "timestamp"]
        assert bytes(TYPESTORE.serialize_cdr(msg, POINTCLOUD2)) == raw
        cloud = parse_cdr(raw)
        assert cloud.frame_id == fid and cloud.num_points == 64 and bytes(cloud.data) == rec.tobytes()
        assert cloud.layout == APOLLO_LAYOUT_RING


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_round_trip(tmp_path, storage):
    frames = synthetic_frames(4, 1500, seed=6, ring=True, nan_points=2)
    frames[1].pose = None
    ext = make_pose([0.0, 0.5, 1.8], [0.0, 0.0, 0.7071067811865476, 0.7071067811865476])
    path = tmp_path / "bag2"
    assert write_ros2_bag(path, frames, storage=storage, novatel_from_sensor=ext) == 4
    names = sorted(p.name for p in path.iterdir())
    assert names == ["bag2.db3" if storage == "sqlite3" else "bag2.mcap", "metadata.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bag2"]  # no temporaries left
    with open_recording(path) as rec:
        assert isinstance(rec, Ros2Recording) and rec.topic == APOLLO_POINTCLOUD_TOPIC and len(rec) == 4
        streamed = list(rec)
        for i in (3, 1, 0, 2, -1):
            f, w = rec[i], frames[i]
            m = np.isfinite(w.points["x"])
            for k in ("x", "y", "z", "intensity", "ring"):
                np.testing.assert_array_equal(f.points[k], w.points[k][m])
                np.testing.assert_array_equal(streamed[i].points[k], f.points[k])
            np.testing.assert_allclose(f.points["time"], w.points["time"][m], atol=1e-6)
            np.testing.assert_allclose(streamed[i].pose, f.pose, atol=1e-9)  # one-pass streaming = random access
            assert streamed[i].provenance.index == i % 4
            assert f.dropped == 2 and f.stamp == pytest.approx(w.stamp, abs=1e-6)
            if w.pose is None:  # no /tf at this stamp: interpolated between its neighbours, as tf2 does
                mid = (frames[0].pose[:3, 3] + frames[2].pose[:3, 3]) / 2
                np.testing.assert_allclose(f.pose[:3, 3], mid, atol=1e-6)
            else:
                np.testing.assert_allclose(f.pose, w.pose, atol=1e-6)
            assert f.provenance.format == "ros2"
        topics = {t.name: t.count for t in rec.topics()}
        assert topics == {APOLLO_POINTCLOUD_TOPIC: 4, "/tf": 3, "/tf_static": 1}
    # the storage file itself opens its folder
    with open_recording(next(p for p in path.iterdir() if p.suffix in (".db3", ".mcap"))) as rec:
        assert len(rec) == 4


def test_writer_refuses_overwrite_and_replaces_atomically(tmp_path):
    path = tmp_path / "b"
    write_ros2_bag(path, synthetic_frames(1, 10))
    with pytest.raises(WriterError, match="exists"):
        write_ros2_bag(path, synthetic_frames(1, 10))
    with pytest.raises(RuntimeError), Ros2BagWriter(path, overwrite=True) as w:
        w.write(synthetic_frames(1, 10)[0])
        raise RuntimeError("boom")
    with open_recording(path) as rec:
        assert len(rec) == 1
    write_ros2_bag(path, synthetic_frames(3, 10), storage="mcap", overwrite=True)
    with open_recording(path) as rec:
        assert len(rec) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
    with pytest.raises(WriterError, match="storage"):
        Ros2BagWriter(tmp_path / "c", storage="zip")


def test_bad_ros2_input(tmp_path):
    path = tmp_path / "b"
    write_ros2_bag(path, synthetic_frames(2, 10))
    with pytest.raises(TopicError, match=APOLLO_POINTCLOUD_TOPIC):
        open_recording(path, topic="/points_raw")
    # no PointCloud2
    only_tf = tmp_path / "tf"
    with Ros2BagWriter(only_tf) as w:
        from lidarmt.io.ros1 import TFMESSAGE, _tf_message

        w.write_message("/tf", TFMESSAGE, _tf_message(TYPESTORE, "world", "novatel", 10**9, np.eye(4), ros2=True),
                        10**9)
    with pytest.raises(NoPointCloudError, match="no PointCloud2 topic"):
        open_recording(only_tf)
    # a storage file without metadata.yaml
    (path / "metadata.yaml").unlink()
    with pytest.raises(FormatError, match="metadata.yaml"):
        open_recording(path)
    # a damaged database
    p2 = tmp_path / "d"
    write_ros2_bag(p2, synthetic_frames(2, 2000))
    db = p2 / "d.db3"
    db.write_bytes(db.read_bytes()[:5000])
    with pytest.raises(RecordingError), open_recording(p2) as rec:
        list(rec)
