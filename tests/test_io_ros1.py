"""ROS1 bags: Apollo layout round trip, generic PointCloud2 layouts, TF interpolation, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.io import (
    APOLLO_POINTCLOUD_TOPIC,
    Ros1BagWriter,
    open_recording,
    write_ros1_bag,
)
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.cloud import APOLLO_LAYOUT, from_points
from lidarmt.io.errors import (
    FormatError,
    NoPointCloudError,
    PoseError,
    RecordingError,
    TopicError,
    WriterError,
)
from lidarmt.io.pointcloud2 import POINTCLOUD2, parse_ros1, serialize_ros1
from lidarmt.io.ros1 import TYPESTORE, Ros1Recording
from lidarmt.types import Frame, make_points, make_pose


def _finite(f: Frame) -> np.ndarray:
    return f.points[np.isfinite(f.points["x"])]


def assert_same_frame(got: Frame, want: Frame, *, pose_tol: float = 1e-6) -> None:
    exp = _finite(want)
    assert len(got) == len(exp)
    for name in ("x", "y", "z", "intensity"):
        np.testing.assert_array_equal(got.points[name], exp[name])
    if "time" in (exp.dtype.names or ()):
        np.testing.assert_allclose(got.points["time"], exp["time"], rtol=0, atol=1e-6)
    if "ring" in (exp.dtype.names or ()):
        np.testing.assert_array_equal(got.points["ring"], exp["ring"])
    assert got.stamp == pytest.approx(want.stamp, abs=1e-6)
    assert got.frame_id == want.frame_id
    if want.pose is None:
        assert got.pose is None
    else:
        np.testing.assert_allclose(got.pose, want.pose, rtol=0, atol=pose_tol)


def test_apollo_layout_round_trip(tmp_path):
    frames = synthetic_frames(4, 2000, seed=1, ring=True, nan_points=5)
    ext = make_pose([0.2, -0.1, 1.9], [0.0, 0.0, np.sin(0.8), np.cos(0.8)])
    path = tmp_path / "a.bag"
    assert write_ros1_bag(path, frames, novatel_from_sensor=ext) == 4
    with open_recording(path) as rec:
        assert isinstance(rec, Ros1Recording)
        assert rec.topic == APOLLO_POINTCLOUD_TOPIC
        assert len(rec) == 4
        topics = {t.name: (t.msgtype, t.count) for t in rec.topics()}
        assert topics[APOLLO_POINTCLOUD_TOPIC] == (POINTCLOUD2, 4)
        assert topics["/tf"][1] == 4 and topics["/tf_static"][1] == 1
        assert "world→novatel" in rec.pose_source and "novatel→velodyne64" in rec.pose_source
        streamed = list(rec)
        for i, (got, want) in enumerate(zip(streamed, frames, strict=True)):
            assert_same_frame(got, want)
            assert got.dropped == 5
            assert got.provenance.format == "ros1" and got.provenance.index == i
            assert got.provenance.topic == APOLLO_POINTCLOUD_TOPIC
        # random access, any order, negative indices
        for i in (3, 0, 2, -1):
            assert_same_frame(rec[i], frames[i])
        with pytest.raises(IndexError):
            rec[4]
        assert [f.index for f in rec[::2]] == [0, 2] and [f.index for f in rec[-2:]] == [2, 3]


def test_point_layout_is_apollos(tmp_path):
    """The PointCloud2 carries Apollo's 32-byte point: x/y/z f32 at 0/4/8, intensity u8 at 16, timestamp f64 at 24."""
    path = tmp_path / "a.bag"
    write_ros1_bag(path, synthetic_frames(1, 50))
    from rosbags.rosbag1 import Reader

    with Reader(path) as r:
        conn = next(c for c in r.connections if c.topic == APOLLO_POINTCLOUD_TOPIC)
        assert conn.digest == "1158d486dd51d683ce2f1be655c3c181"
        _, _, raw = next(r.messages(connections=[conn]))
    msg = TYPESTORE.deserialize_ros1(raw, POINTCLOUD2)
    fields = {f.name: (f.offset, f.datatype, f.count) for f in msg.fields}
    assert fields == {"x": (0, 7, 1), "y": (4, 7, 1), "z": (8, 7, 1), "intensity": (16, 2, 1), "timestamp": (24, 8, 1)}
    assert msg.point_step == 32 and msg.row_step == 32 * 50 and msg.height == 1 and msg.width == 50
    assert msg.header.frame_id == "velodyne64" and not msg.is_bigendian
    assert b"compression=lz4" in path.read_bytes()  # LZ4 chunks, as the issue asks


def test_own_serialiser_matches_typestore():
    pts = synthetic_frames(1, 100, seed=3)[0].points
    rec = from_points(pts, APOLLO_LAYOUT)
    raw = serialize_ros1(stamp_ns=1_500_000_000_123_456_789, frame_id="velodyne64", layout=APOLLO_LAYOUT, data=rec,
                         width=100, seq=7)
    msg = TYPESTORE.deserialize_ros1(raw, POINTCLOUD2)
    assert msg.header.seq == 7 and msg.header.stamp.sec == 1_500_000_000 and msg.header.stamp.nanosec == 123_456_789
    assert TYPESTORE.serialize_ros1(msg, POINTCLOUD2) == raw
    cloud = parse_ros1(raw)
    assert cloud.stamp_ns == 1_500_000_000_123_456_789 and cloud.num_points == 100
    assert bytes(cloud.data) == rec.tobytes()


def _pc2(fields: list[tuple[str, int, int]], step: int, rec: np.ndarray, stamp_ns: int, frame_id="lidar"):
    T = TYPESTORE.types
    hdr = T["std_msgs/msg/Header"](seq=0, stamp=T["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9,
                                   nanosec=stamp_ns % 10**9), frame_id=frame_id)
    pf = [T["sensor_msgs/msg/PointField"](name=n, offset=o, datatype=d, count=1) for n, o, d in fields]
    return T[POINTCLOUD2](header=hdr, height=1, width=len(rec), fields=pf, is_bigendian=False, point_step=step,
                          row_step=step * len(rec), data=np.frombuffer(rec.tobytes(), np.uint8), is_dense=False)


def test_generic_layouts(tmp_path):
    """float64 xyz + float32 intensity + ring + relative float32 'time'; xyz f32 + uint16 intensity + uint32 't' (ns)."""
    rng = np.random.default_rng(5)
    n = 300
    stamp_ns = 1_600_000_000 * 10**9
    a = np.zeros(n, dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8"), ("intensity", "<f4"), ("ring", "<u2"),
                           ("time", "<f4")])
    for k in "xyz":
        a[k] = rng.normal(size=n) * 10
    a["intensity"] = rng.uniform(0, 100, n)
    a["ring"] = rng.integers(0, 32, n)
    a["time"] = np.linspace(0, 0.1, n)
    a["x"][7] = np.inf
    b = np.zeros(n, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("_pad", "<f4"), ("intensity", "<u2"),
                           ("t", "<u4")])
    for k in "xyz":
        b[k] = rng.normal(size=n)
    b["intensity"] = rng.integers(0, 3000, n)
    b["t"] = np.arange(n) * 1000
    path = tmp_path / "generic.bag"
    with Ros1BagWriter(path) as w:
        w.write_message("/a", POINTCLOUD2, _pc2([("x", 0, 8), ("y", 8, 8), ("z", 16, 8), ("intensity", 24, 7),
                                                 ("ring", 28, 4), ("time", 30, 7)], 34, a, stamp_ns), stamp_ns)
        w.write_message("/b", "sensor_msgs/PointCloud2", _pc2([("x", 0, 7), ("y", 4, 7), ("z", 8, 7),
                                                               ("intensity", 16, 4), ("t", 18, 6)], 22, b, stamp_ns),
                        stamp_ns)
    with pytest.raises(TopicError, match="several PointCloud2 topics"):
        open_recording(path)
    with open_recording(path, topic="/a") as rec:
        f = rec[0]
        assert f.dropped == 1 and len(f) == n - 1 and f.frame_id == "lidar" and f.pose is None
        keep = np.isfinite(a["x"])
        np.testing.assert_array_equal(f.points["x"], a["x"][keep].astype(np.float32))
        np.testing.assert_array_equal(f.points["intensity"], a["intensity"][keep])
        np.testing.assert_array_equal(f.points["ring"], a["ring"][keep])
        np.testing.assert_allclose(f.points["time"], 1.6e9 + a["time"][keep].astype(np.float64), atol=1e-6)
    with open_recording(path, topic="b") as rec:  # a leading slash is optional
        f = rec[0]
        np.testing.assert_array_equal(f.points["intensity"], b["intensity"].astype(np.float32))
        np.testing.assert_allclose(f.points["time"] - 1.6e9, b["t"] * 1e-9, atol=1e-6)
        assert "ring" not in f.points.dtype.names


def _tf_msg(parent, child, t_ns, m):
    from lidarmt.io.ros1 import _tf_message

    return _tf_message(TYPESTORE, parent, child, t_ns, m)


def test_tf_interpolation(tmp_path):
    """Pose at a stamp between two /tf samples: linear translation, slerp rotation, composed with /tf_static."""
    path = tmp_path / "tf.bag"
    t0, t1 = 1_000 * 10**9, 1_000 * 10**9 + 100_000_000
    m0 = make_pose([10.0, 0.0, 0.0], [0, 0, 0, 1])
    m1 = make_pose([20.0, 4.0, 2.0], [0, 0, np.sin(np.pi / 4), np.cos(np.pi / 4)])  # 90 degrees about z
    ext = make_pose([1.0, 0.0, 2.0], [0, 0, 0, 1])
    frame = Frame(make_points(np.zeros((3, 3)) + 1), None, (t0 + 25_000_000) / 1e9)
    with Ros1BagWriter(path, novatel_from_sensor=ext) as w:
        w.write_message("/tf", "tf2_msgs/msg/TFMessage", _tf_msg("world", "novatel", t0, m0), t0)
        w.write_message("/tf", "tf2_msgs/msg/TFMessage", _tf_msg("world", "novatel", t1, m1), t1)
        w.write(frame)  # no pose: only /tf_static and the cloud
    with open_recording(path) as rec:
        f = rec[0]
    want_novatel = make_pose([12.5, 1.0, 0.5], [0, 0, np.sin(np.pi / 16), np.cos(np.pi / 16)])  # u = 0.25
    np.testing.assert_allclose(f.pose, want_novatel @ ext, atol=1e-9)


def test_frames_without_pose_and_require_pose(tmp_path):
    frames = synthetic_frames(2, 10)
    for f in frames:
        f.pose = None
    path = tmp_path / "nopose.bag"
    write_ros1_bag(path, frames)
    with open_recording(path) as rec:
        assert all(f.pose is None for f in rec)
        assert rec.pose_source.startswith("none")
    with open_recording(path, require_pose=True) as rec, pytest.raises(PoseError, match="has no pose"):
        rec[0]


def test_writer_refuses_overwrite_and_is_atomic(tmp_path):
    path = tmp_path / "x.bag"
    frames = synthetic_frames(1, 10)
    write_ros1_bag(path, frames)
    before = path.read_bytes()
    with pytest.raises(WriterError, match="exists"):
        write_ros1_bag(path, frames)
    # failing half-way leaves the old file and no temporary
    with pytest.raises(RuntimeError), Ros1BagWriter(path, overwrite=True) as w:
        w.write(frames[0])
        raise RuntimeError("boom")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bag"]
    write_ros1_bag(path, synthetic_frames(2, 10), overwrite=True)
    with open_recording(path) as rec:
        assert len(rec) == 2


def test_unknown_topic_lists_existing(tmp_path):
    path = tmp_path / "a.bag"
    write_ros1_bag(path, synthetic_frames(1, 10))
    with pytest.raises(TopicError) as ei:
        open_recording(path, topic="/nope")
    assert APOLLO_POINTCLOUD_TOPIC in str(ei.value) and "/nope" in str(ei.value)
    with pytest.raises(TopicError, match="not PointCloud2"):
        open_recording(path, topic="/tf")


def test_bag_without_pointcloud(tmp_path):
    path = tmp_path / "tf_only.bag"
    with Ros1BagWriter(path) as w:
        w.write_message("/tf", "tf2_msgs/msg/TFMessage", _tf_msg("world", "novatel", 10**9, np.eye(4)), 10**9)
    with pytest.raises(NoPointCloudError, match="no PointCloud2 topic"):
        open_recording(path)
    with open_recording(path, allow_empty=True) as rec:
        assert len(rec) == 0
        info = rec.describe()
        assert info.frame_count == 0 and [t.name for t in info.topics] == ["/tf"]


def test_truncated_and_garbage_bags(tmp_path):
    path = tmp_path / "a.bag"
    write_ros1_bag(path, synthetic_frames(3, 2000))
    data = path.read_bytes()
    cut = tmp_path / "cut.bag"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="cut.bag"), open_recording(cut) as rec:
        list(rec)
    bad = tmp_path / "bad.bag"
    bad.write_bytes(b"not a bag at all")
    with pytest.raises(RecordingError, match="not a ROS1 bag"):
        open_recording(bad)
    empty = tmp_path / "empty.bag"
    empty.write_bytes(b"")
    with pytest.raises(RecordingError):
        open_recording(empty)
    with pytest.raises(RecordingError, match="no such file"):
        open_recording(tmp_path / "missing.bag")
    # corrupt chunk bytes (same length): clear error when reading the frame
    corrupt = bytearray(data)
    mid = len(corrupt) // 3
    corrupt[mid : mid + 4000] = bytes(4000)
    cp = tmp_path / "corrupt.bag"
    cp.write_bytes(bytes(corrupt))
    with pytest.raises(RecordingError), open_recording(cp) as rec:
        list(rec)


def test_empty_frame_round_trip(tmp_path):
    frames = synthetic_frames(2, 10)
    frames[1] = frames[1].with_points(frames[1].points[:0])
    path = tmp_path / "e.bag"
    write_ros1_bag(path, frames)
    with open_recording(path) as rec:
        assert len(rec[1]) == 0 and rec[1].pose is not None
        info = rec.describe()
        assert info.points_min == 0 and "1 empty frame(s)" in info.notes


def test_tf_is_loaded_around_the_frames_read(tmp_path):
    """Random access reads only the /tf near the cloud (a long bag is not decoded whole for its poses)."""
    frames = synthetic_frames(30, 20, period=1.0)
    path = tmp_path / "long.bag"
    write_ros1_bag(path, frames, chunk_threshold=2000)
    with open_recording(path) as rec:
        f = rec[15]
        np.testing.assert_allclose(f.pose, frames[15].pose, atol=1e-6)
        assert len(rec.tf) <= 1 + 5  # the static extrinsic and /tf within +-2 s
        assert len(rec._chunks) <= 8
        for i, g in enumerate(rec):
            np.testing.assert_allclose(g.pose, frames[i].pose, atol=1e-6)


def test_write_other_messages(tmp_path):
    """The simulator writes camera images and a custom steering message next to the clouds."""
    from rosbags.rosbag1 import Reader

    from lidarmt.io.ros1 import register_type

    register_type("lidarmt_msgs/Steering", "std_msgs/Header header\nfloat64 angle")
    T = TYPESTORE.types
    stamp = T["builtin_interfaces/msg/Time"](sec=5, nanosec=0)
    img = T["sensor_msgs/msg/Image"](header=T["std_msgs/msg/Header"](seq=0, stamp=stamp, frame_id="camera"),
                                     height=2, width=3, encoding="rgb8", is_bigendian=0, step=9,
                                     data=np.arange(18, dtype=np.uint8))
    steer = T["lidarmt_msgs/msg/Steering"](header=T["std_msgs/msg/Header"](seq=0, stamp=stamp, frame_id=""),
                                           angle=-0.25)
    path = tmp_path / "cam.bag"
    with Ros1BagWriter(path) as w:
        w.write(synthetic_frames(1, 10)[0])
        w.write_message("/camera/image", "sensor_msgs/Image", img, 5 * 10**9)
        w.write_message("/steering", "lidarmt_msgs/Steering", steer, 5 * 10**9)
        with pytest.raises(WriterError, match="already has type"):
            w.write_message("/steering", "sensor_msgs/Image", img, 5 * 10**9)
    with Reader(path) as r:
        conn = next(c for c in r.connections if c.topic == "/steering")
        _, _, raw = next(r.messages(connections=[conn]))
        assert TYPESTORE.deserialize_ros1(raw, conn.msgtype).angle == -0.25
    with open_recording(path) as rec:
        assert len(rec) == 1 and {t.name for t in rec.topics()} >= {"/camera/image", "/steering"}


def test_organized_big_endian_cloud(tmp_path):
    """An organized cloud (height 4 x width 5) stored big-endian, with NaN for missing returns."""
    n = 20
    be = np.zeros(n, dtype=[("x", ">f4"), ("y", ">f4"), ("z", ">f4"), ("intensity", ">f4")])
    be["x"] = np.arange(n)
    be["y"] = -np.arange(n)
    be["z"] = 0.5
    be["intensity"] = 7
    be["x"][[3, 11]] = np.nan
    T = TYPESTORE.types
    hdr = T["std_msgs/msg/Header"](seq=0, stamp=T["builtin_interfaces/msg/Time"](sec=1, nanosec=0), frame_id="/velo")
    pf = [T["sensor_msgs/msg/PointField"](name=k, offset=4 * j, datatype=7, count=1) for j, k in enumerate("xyz")]
    pf.append(T["sensor_msgs/msg/PointField"](name="intensity", offset=12, datatype=7, count=1))
    msg = T[POINTCLOUD2](header=hdr, height=4, width=5, fields=pf, is_bigendian=True, point_step=16, row_step=80,
                         data=np.frombuffer(be.tobytes(), np.uint8), is_dense=False)
    path = tmp_path / "org.bag"
    with Ros1BagWriter(path) as w:
        w.write_message("/points", POINTCLOUD2, msg, 10**9)
    with open_recording(path) as rec:
        f = rec[0]
    keep = np.isfinite(be["x"])
    assert len(f) == 18 and f.dropped == 2 and f.frame_id == "velo"
    np.testing.assert_array_equal(f.points["x"], be["x"][keep].astype("<f4"))
    np.testing.assert_array_equal(f.points["intensity"], np.full(18, 7, np.float32))


def test_tf_found_when_bag_times_differ_from_stamps(tmp_path):
    """/tf recorded with bag times far from its header stamps (sim time vs wall clock) is still used."""
    frames = synthetic_frames(3, 20, period=1.0)
    path = tmp_path / "skew.bag"
    with Ros1BagWriter(path) as w:
        for f in frames:
            t = int(round(f.stamp * 1e9))
            w.write_message("/tf", "tf2_msgs/msg/TFMessage", _tf_msg("world", "novatel", t, f.pose), t + 5000 * 10**9)
            w.write(Frame(f.points, None, f.stamp))
    with open_recording(path) as rec:
        for i, g in enumerate(rec):
            np.testing.assert_allclose(g.pose, frames[i].pose, atol=1e-6)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_streaming_with_and_without_prefetch(tmp_path, prefetch):
    frames = synthetic_frames(6, 3000, seed=12)
    path = tmp_path / "p.bag"
    write_ros1_bag(path, frames, chunk_threshold=20_000)
    with open_recording(path) as rec:
        rec.PREFETCH = prefetch
        got = list(rec)
        assert not rec._prefetched
    for g, w in zip(got, frames, strict=True):
        assert_same_frame(g, w)


def test_recover_unindexed_and_truncated_bags(tmp_path):
    frames = synthetic_frames(5, 3000, seed=21, ring=True)
    path = tmp_path / "a.bag"
    write_ros1_bag(path, frames, chunk_threshold=30_000)
    data = bytearray(path.read_bytes())
    # recorder killed before writing the index: index_pos = 0 in the bag header
    k = data.index(b"index_pos=") + len(b"index_pos=")
    unindexed = bytes(data[:k]) + bytes(8) + bytes(data[k + 8 :])
    (tmp_path / "noindex.bag").write_bytes(unindexed)
    with pytest.raises(FormatError, match="recover=True"):
        open_recording(tmp_path / "noindex.bag")
    with open_recording(tmp_path / "noindex.bag", recover=True) as rec:
        assert len(rec) == 5
        for i, g in enumerate(rec):
            assert_same_frame(g, frames[i])
            np.testing.assert_array_equal(g.points["ring"], frames[i].points["ring"])
        assert any("scanning" in n for n in rec.describe().notes)
    # cut inside the 4th frame's chunk (no index section, no index data for that chunk): 3 complete frames
    with open_recording(path) as rec:
        cut_at = rec._entries[3].chunk_pos + 100
    (tmp_path / "cut.bag").write_bytes(unindexed[:cut_at])
    with open_recording(tmp_path / "cut.bag", recover=True) as rec:
        assert len(rec) == 3
        for i in (2, 0):
            assert_same_frame(rec[i], frames[i])
        assert any("truncated record" in n for n in rec.describe().notes)
    # nothing complete at all: still an error
    (tmp_path / "head.bag").write_bytes(unindexed[:5000])
    with pytest.raises(FormatError, match="no complete chunk"):
        open_recording(tmp_path / "head.bag", recover=True)
