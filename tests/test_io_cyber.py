"""Apollo Cyber records: container layout, PointCloud codec, poses from /tf or localization, real record."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from lidarmt.io import (
    APOLLO_POINTCLOUD_TOPIC,
    CyberRecordWriter,
    _pbpoints,
    open_recording,
    write_cyber_record,
)
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.base import PoseWarning
from lidarmt.io.cyber import RFU_FROM_FLU, CyberRecording
from lidarmt.io.errors import FormatError, NoPointCloudError, RecordingError, TopicError, WriterError
from lidarmt.proto import record as R
from lidarmt.proto.drivers import PointCloud
from lidarmt.types import make_pose


def _same_points(got, want):
    m = np.isfinite(want.points["x"])
    for k in ("x", "y", "z", "intensity"):
        np.testing.assert_array_equal(got.points[k], want.points[k][m])
    np.testing.assert_allclose(got.points["time"], want.points["time"][m], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_point_codec_matches_protobuf():
    f = synthetic_frames(1, 500, seed=2, ring=True)[0]
    pts = f.points
    ts = np.rint(pts["time"] * 1e9).astype(np.uint64)
    body = _pbpoints.encode_points(pts["x"], pts["y"], pts["z"], pts["intensity"].astype(np.uint64), ts, pts["ring"])
    head = PointCloud(frame_id="velodyne64", width=500, height=1, measurement_time=f.stamp)
    content = head.SerializeToString() + body
    msg = PointCloud.FromString(content)  # protobuf reads what the kernel wrote
    assert len(msg.point) == 500 and msg.frame_id == "velodyne64"
    assert msg.point[7].x == pts["x"][7] and msg.point[7].timestamp == ts[7] and msg.point[7].ring == pts["ring"][7]
    fast, ring, rest = _pbpoints.decode(content)
    ref, ring_ref, _ = _pbpoints.decode_reference(content)
    assert ring and ring_ref
    np.testing.assert_array_equal(fast, ref)
    assert PointCloud.FromString(rest).measurement_time == f.stamp
    # a point with missing fields decodes to the proto2 defaults (NaN x, y, z)
    sparse = PointCloud()
    sparse.point.add(intensity=5)
    got, ring, _ = _pbpoints.decode(sparse.SerializeToString())
    assert np.isnan(got["x"][0]) and got["intensity"][0] == 5 and not ring
    with pytest.raises(FormatError):
        _pbpoints.decode(content[:-3])


def test_container_layout(tmp_path):
    path = tmp_path / "a.record"
    write_cyber_record(path, synthetic_frames(2, 100))
    data = path.read_bytes()
    typ, size = struct.unpack_from("<i4xq", data, 0)
    assert typ == 0
    hdr = R.Header.FromString(data[16 : 16 + size])
    assert data[16 + size : 16 + size + 1] == b"0" and set(data[17 + size : 2064]) <= {0}
    assert hdr.is_complete and hdr.size == len(data) and hdr.message_number == 2 + 2 + 2 + 1
    assert hdr.channel_number == 4 and hdr.chunk_number == 1
    assert struct.unpack_from("<i4xq", data, 2064)[0] == 4  # the first section is a CHANNEL
    ityp, isize = struct.unpack_from("<i4xq", data, hdr.index_position)
    index = R.Index.FromString(data[hdr.index_position + 16 : hdr.index_position + 16 + isize])
    assert ityp == 3
    caches = {e.channel_cache.name: e.channel_cache.message_number for e in index.indexes if e.type == 4}
    assert caches == {"/tf_static": 1, "/tf": 2, "/apollo/localization/pose": 2, APOLLO_POINTCLOUD_TOPIC: 2}
    for e in index.indexes:
        assert struct.unpack_from("<i4xq", data, e.position)[0] == e.type


@pytest.mark.parametrize("mode", ["tf", "localization"])
def test_round_trip(tmp_path, mode):
    frames = synthetic_frames(3, 3000, seed=4, ring=True, nan_points=3)
    ext = make_pose([0.1, 0.3, 1.5], [0.0, 0.0, np.sin(np.pi / 4 + 0.01), np.cos(np.pi / 4 + 0.01)])
    path = tmp_path / "r.record"
    n = write_cyber_record(path, frames, novatel_from_sensor=ext, tf=(mode == "tf"), chunk_raw_size=20_000)
    assert n == 3
    with open_recording(path) as rec:
        assert isinstance(rec, CyberRecording) and len(rec) == 3 and rec.topic == APOLLO_POINTCLOUD_TOPIC
        assert ("world→novatel" in rec.pose_source) == (mode == "tf")
        got = list(rec)
        for i, (g, w) in enumerate(zip(got, frames, strict=True)):
            _same_points(g, w)
            np.testing.assert_array_equal(g.points["ring"], w.points["ring"][np.isfinite(w.points["x"])])
            assert g.dropped == 3 and g.stamp == w.stamp and g.frame_id == "velodyne64"
            np.testing.assert_allclose(g.pose, w.pose, rtol=0, atol=1e-6)
            assert g.provenance.format == "cyber" and g.provenance.index == i
        for i in (2, 0, -2):
            _same_points(rec[i], frames[i])
        info = rec.describe()
        assert info.frame_count == 3 and info.extra["localization"]["count"] == 3


def test_localization_without_extrinsic_warns(tmp_path):
    frames = synthetic_frames(2, 100)
    path = tmp_path / "r.record"
    write_cyber_record(path, frames, tf=False, tf_static=False)  # default mount: RFU_FROM_FLU
    with open_recording(path) as rec, pytest.warns(PoseWarning, match="no novatel→velodyne64 extrinsic"):
        assert "RFU→FLU" in rec.pose_source
        f = rec[1]
    np.testing.assert_allclose(f.pose, frames[1].pose, atol=1e-6)
    # the localization quaternion is RFU: heading = yaw(q) + pi/2 = the sensor's yaw (x forward)
    from lidarmt.proto.localization import LocalizationEstimate

    with CyberRecording(path) as rec:
        _, _, content = next(rec.messages({"/apollo/localization/pose"}))
    loc = LocalizationEstimate.FromString(bytes(content))
    sensor_yaw = np.arctan2(frames[0].pose[1, 0], frames[0].pose[0, 0])
    assert loc.pose.heading == pytest.approx(sensor_yaw, abs=1e-9)
    assert np.allclose(RFU_FROM_FLU[:3, :3] @ [1, 0, 0], [0, 1, 0])  # sensor x forward = RFU y


def test_incomplete_and_truncated_records(tmp_path):
    frames = synthetic_frames(4, 500, seed=1)
    path = tmp_path / "r.record"
    write_cyber_record(path, frames, chunk_raw_size=10_000)  # several chunks
    data = bytearray(path.read_bytes())
    typ, size = struct.unpack_from("<i4xq", data, 0)
    hdr = R.Header.FromString(bytes(data[16 : 16 + size]))
    # recorder killed: no index, header says incomplete -> sections are scanned
    hdr.is_complete = False
    hdr.index_position = 0
    raw = hdr.SerializeToString()
    inc = bytes(data[:16]) + raw + b"0" + bytes(2048 - len(raw) - 1)
    inc = struct.pack("<i4xq", 0, len(raw)) + inc[16:]
    body = bytes(data[2064 : R.Header.FromString(bytes(data[16 : 16 + size])).index_position])
    (tmp_path / "inc.record").write_bytes(inc + body)
    with open_recording(tmp_path / "inc.record") as rec:
        assert len(rec) == 4
        _same_points(rec[3], frames[3])
        assert any("incomplete" in n for n in rec.describe().notes)
    # cut in the middle of the last chunk: the frames before it are still read
    (tmp_path / "cut.record").write_bytes(inc + body[: len(body) - 3000])
    with open_recording(tmp_path / "cut.record") as rec:
        assert 1 <= len(rec) < 4
        _same_points(rec[0], frames[0])
        assert any("truncated" in n for n in rec.describe().notes)


def test_bad_records(tmp_path):
    path = tmp_path / "r.record"
    write_cyber_record(path, synthetic_frames(1, 100))
    with pytest.raises(TopicError, match=APOLLO_POINTCLOUD_TOPIC):
        open_recording(path, topic="/apollo/sensor/lidar128/compensator/PointCloud2")
    with pytest.raises(TopicError, match="not apollo.drivers.PointCloud"):
        open_recording(path, topic="/tf")
    (tmp_path / "junk.record").write_bytes(b"\x07" * 100)
    with pytest.raises(FormatError, match="not an Apollo Cyber record"):
        open_recording(tmp_path / "junk.record")
    (tmp_path / "tiny.record").write_bytes(b"\0" * 5)
    with pytest.raises(RecordingError, match="too short"):
        open_recording(tmp_path / "tiny.record")
    # corrupt chunk body
    data = bytearray(path.read_bytes())
    with CyberRecording(path) as rec:
        body = rec._c.chunks[0].body_pos + 16
    data[body + 30 : body + 230] = b"\xff" * 200
    (tmp_path / "bad.record").write_bytes(bytes(data))
    with pytest.raises(RecordingError), open_recording(tmp_path / "bad.record") as rec:
        list(rec)
    with pytest.raises(WriterError, match="exists"):
        CyberRecordWriter(path)


# ----------------------------------------------------------------------------------------------- real record


@pytest.fixture(scope="module")
def example_record(shared_data):
    p = shared_data / "apollo" / "records" / "example.record.00000"
    if not p.is_file():
        pytest.skip(f"{p} is absent")
    return p


@pytest.mark.realdata
def test_real_record(example_record):
    with pytest.raises(NoPointCloudError, match="no apollo.drivers.PointCloud"):
        open_recording(example_record)
    with open_recording(example_record, allow_empty=True) as rec:
        assert len(rec) == 0
        counts = {t.name: (t.msgtype, t.count) for t in rec.topics()}
        assert counts == {
            "/apollo/planning": ("apollo.planning.ADCTrajectory", 1),
            "/apollo/routing_request": ("apollo.routing.RoutingRequest", 0),
            "/apollo/monitor": ("apollo.common.monitor.MonitorMessage", 0),
            "/apollo/routing_response": ("apollo.routing.RoutingResponse", 0),
            "/apollo/routing_response_history": ("apollo.routing.RoutingResponse", 1),
            "/apollo/localization/pose": ("apollo.localization.LocalizationEstimate", 15),
            "/apollo/canbus/chassis": ("apollo.canbus.Chassis", 15),
            "/apollo/prediction": ("apollo.prediction.PredictionObstacles", 2),
        }
        # the chunk holds exactly what the index says
        walked: dict[str, int] = {}
        for name, _t, _c in rec.messages():
            walked[name] = walked.get(name, 0) + 1
        assert walked == {k: v[1] for k, v in counts.items() if v[1]}
        ts, ps, qs = rec.localization()
        assert len(ts) == 15 and ts == sorted(ts)
        for p, q in zip(ps, qs, strict=True):
            assert p[0] == pytest.approx(315323.45, abs=0.01) and p[1] == pytest.approx(5068388.18, abs=0.01)
            assert q[3] == pytest.approx(0.3358, abs=1e-3) and q[2] == pytest.approx(0.9419, abs=1e-3)
        info = rec.describe()
        loc = info.extra["localization"]
        assert loc["count"] == 15 and all(p["heading"] == pytest.approx(-2.2556, abs=1e-3) for p in loc["poses"])
        assert info.extra["messages"] == 34 and info.extra["complete"] is True
        assert info.start == pytest.approx(1627031535.114943571)


@pytest.mark.realdata
def test_info_on_real_record(example_record, capsys):
    import json

    from lidarmt.cli import main

    rc = main(["info", str(example_record), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and "no point clouds" in err and err.count("\n") == 1  # a note, not an error
    d = json.loads(out)
    assert d["format"] == "cyber" and d["frame_count"] == 0 and len(d["topics"]) == 8
    assert d["extra"]["localization"]["count"] == 15
    rc = main(["info", str(example_record)])
    out, _ = capsys.readouterr()
    assert "/apollo/canbus/chassis" in out and "315323.446" in out and "15 decoded" in out


@pytest.mark.parametrize("tf", [True, False])
def test_poses_are_loaded_around_the_frames_read(tmp_path, tf):
    frames = synthetic_frames(30, 20, period=1.0)
    path = tmp_path / "long.record"
    write_cyber_record(path, frames, tf=tf, chunk_raw_size=500)
    with open_recording(path) as rec:
        f = rec[15]
        np.testing.assert_allclose(f.pose, frames[15].pose, atol=1e-6)
        assert len(rec.tf) <= 1 + 5 and len(rec._loc_rows) <= 5
        for i, g in enumerate(rec):
            np.testing.assert_allclose(g.pose, frames[i].pose, atol=1e-6)


def test_embedded_descriptors_decode_the_messages(tmp_path):
    """What a Cyber tool does with our record: build classes from each channel's ProtoDesc and decode."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    frames = synthetic_frames(1, 50)
    path = tmp_path / "r.record"
    write_cyber_record(path, frames)
    with CyberRecording(path) as rec:
        descs = {c.name: (c.message_type, c.proto_desc) for c in rec._c.channels.values()}
        msgs = {name: content for name, _t, content in rec.messages()}
    for name, (mtype, raw_desc) in descs.items():
        pool = descriptor_pool.DescriptorPool()

        def add(pd, pool=pool):
            for dep in pd.dependencies:
                add(dep)
            fdp = descriptor_pb2.FileDescriptorProto.FromString(pd.desc)
            try:
                pool.FindFileByName(fdp.name)
            except KeyError:
                pool.Add(fdp)

        add(R.ProtoDesc.FromString(raw_desc))
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(mtype))
        m = cls.FromString(msgs[name])
        if mtype == "apollo.drivers.PointCloud":
            assert len(m.point) == 50 and m.point[0].x == frames[0].points["x"][0]
        elif name == "/apollo/localization/pose":
            assert m.pose.position.x == pytest.approx(frames[0].pose[0, 3], abs=1e-6)  # default mount: no lever arm
        else:
            assert m.transforms[0].child_frame_id in ("novatel", "velodyne64")
