"""PCD files (three encodings, LZF), Apollo .pose files, PCD folders, npz folders, KITTI folders."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.io import (
    _lzf,
    open_recording,
    read_pcd,
    read_pose_file,
    read_pose_txt,
    write_npz_folder,
    write_pcd,
    write_pcd_folder,
    write_pose_file,
    write_pose_txt,
)
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.errors import FormatError, NoPointCloudError, RecordingError, TopicError, WriterError
from lidarmt.types import BOX_DTYPE, Frame, Labels, MetaType, make_points


def _finite(f: Frame) -> np.ndarray:
    return f.points[np.isfinite(f.points["x"])]


# ----------------------------------------------------------------------------------------------- LZF


@pytest.mark.parametrize("kind", ["empty", "one", "repeats", "small_alphabet", "floats", "zeros", "long_runs"])
def test_lzf_kernel_matches_reference(kind):
    rng = np.random.default_rng(11)
    data = {
        "empty": b"",
        "one": b"x",
        "repeats": b"abcabcabd" * 300,
        "small_alphabet": rng.integers(0, 3, 20000).astype(np.uint8).tobytes(),
        "floats": rng.normal(size=5000).astype(np.float32).tobytes(),
        "zeros": bytes(30000),
        "long_runs": np.repeat(rng.integers(0, 255, 200), rng.integers(1, 600, 200)).astype(np.uint8).tobytes(),
    }[kind]
    fast = _lzf.compress(data)
    assert fast == _lzf.compress_reference(data)
    assert _lzf.decompress(fast, len(data)).tobytes() == data
    assert _lzf.decompress_reference(fast, len(data)) == data


def test_lzf_rejects_corrupt_data():
    data = b"hello hello hello hello world" * 20
    c = _lzf.compress(data)
    with pytest.raises(FormatError, match="truncated"):
        _lzf.decompress(c[: len(c) // 2], len(data))
    with pytest.raises(FormatError):
        _lzf.decompress(c, len(data) - 5)
    with pytest.raises(FormatError, match="before the start"):
        _lzf.decompress(bytes([0xE0, 0x10, 0xFF]), 100)


# ----------------------------------------------------------------------------------------------- PCD


@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
def test_pcd_round_trip(tmp_path, encoding):
    f = synthetic_frames(1, 3000, seed=2, ring=True, nan_points=4)[0]
    path = tmp_path / f"a_{encoding}.pcd"
    write_pcd(path, f, encoding=encoding)
    got, header = read_pcd(path)
    assert header.data == encoding
    assert header.fields == ["x", "y", "z", "intensity", "ring", "timestamp"]
    assert header.types == ["F", "F", "F", "U", "U", "F"] and header.sizes == [4, 4, 4, 1, 2, 8]
    want = _finite(f)
    assert got.dropped == 4 and len(got) == len(want)
    for k in ("x", "y", "z", "intensity", "ring", "time"):
        np.testing.assert_array_equal(got.points[k], want[k])
    assert got.stamp == want["time"].max()
    with pytest.raises(WriterError, match="exists"):
        write_pcd(path, f, encoding=encoding)


def test_pcd_float_intensity_kept_exactly(tmp_path):
    pts = make_points(np.ones((5, 3)), np.array([0.5, 1.25, 300.0, 7.0, 0.0], np.float32))
    write_pcd(tmp_path / "f.pcd", Frame(pts), encoding="binary")
    got, h = read_pcd(tmp_path / "f.pcd")
    assert h.types[3] == "F"
    np.testing.assert_array_equal(got.points["intensity"], pts["intensity"])


def test_pcd_interoperates_with_open3d(tmp_path):
    """open3d (an independent PCD implementation with its own LZF) reads our files and writes files we read."""
    o3d = pytest.importorskip("open3d")
    f = synthetic_frames(1, 2000, seed=4, time=False)[0]
    for enc in ("binary", "binary_compressed", "ascii"):
        write_pcd(tmp_path / f"{enc}.pcd", f, encoding=enc)
        pc = o3d.io.read_point_cloud(str(tmp_path / f"{enc}.pcd"))
        np.testing.assert_allclose(np.asarray(pc.points), f.xyz, rtol=0, atol=1e-5 if enc == "ascii" else 0)
    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(f.xyz.astype(np.float64)))
    o3d.io.write_point_cloud(str(tmp_path / "o3d.pcd"), pc, write_ascii=False, compressed=True)
    got, h = read_pcd(tmp_path / "o3d.pcd")
    assert h.data == "binary_compressed"
    np.testing.assert_allclose(got.xyz, f.xyz, rtol=0, atol=1e-6)


def test_pcd_bad_files(tmp_path):
    f = synthetic_frames(1, 500)[0]
    write_pcd(tmp_path / "c.pcd", f, encoding="binary_compressed")
    data = (tmp_path / "c.pcd").read_bytes()
    (tmp_path / "cut.pcd").write_bytes(data[: len(data) - 100])
    with pytest.raises(FormatError, match="cut.pcd.*truncated"):
        read_pcd(tmp_path / "cut.pcd")
    (tmp_path / "junk.pcd").write_bytes(b"hello\nworld\n")
    with pytest.raises(FormatError, match="junk.pcd"):
        read_pcd(tmp_path / "junk.pcd")
    (tmp_path / "noxyz.pcd").write_bytes(b"FIELDS a b\nSIZE 4 4\nTYPE F F\nCOUNT 1 1\nWIDTH 1\nHEIGHT 1\n"
                                         b"POINTS 1\nDATA ascii\n1 2\n")
    with pytest.raises(FormatError, match="no 'x' field"):
        read_pcd(tmp_path / "noxyz.pcd")
    with pytest.raises(RecordingError, match="no such file"):
        read_pcd(tmp_path / "missing.pcd")


def test_pose_files(tmp_path):
    frames = synthetic_frames(3, 10)
    write_pose_file(tmp_path / "1.pose", 1, frames[0].stamp, frames[0].pose)
    r = read_pose_file(tmp_path / "1.pose")
    assert r.idx == 1 and r.stamp == frames[0].stamp
    np.testing.assert_allclose(r.pose, frames[0].pose, rtol=0, atol=1e-9)
    fields = (tmp_path / "1.pose").read_text().split()
    assert len(fields) == 9 and float(fields[2]) == frames[0].pose[0, 3]
    write_pose_txt(tmp_path / "pose.txt", [(i + 1, f.stamp, f.pose) for i, f in enumerate(frames)])
    recs = read_pose_txt(tmp_path / "pose.txt")
    assert sorted(recs) == [1, 2, 3]
    (tmp_path / "bad.pose").write_text("1 2 3\n")
    with pytest.raises(FormatError, match="9 numbers"):
        read_pose_file(tmp_path / "bad.pose")


@pytest.mark.parametrize("layout", ["beside", "pose_dir", "pose_txt"])
def test_pcd_folder_with_poses(tmp_path, layout):
    frames = synthetic_frames(3, 800, seed=9, nan_points=2)
    folder = tmp_path / "pcd"
    if layout == "beside":
        assert write_pcd_folder(folder, frames) == 3
    else:
        write_pcd_folder(folder, [f.with_points(f.points) for f in frames])
        for p in folder.glob("*.pose"):
            p.unlink()
        if layout == "pose_dir":
            for i, f in enumerate(frames, 1):
                write_pose_file(tmp_path / "pose" / f"{i}.pose", i, f.stamp, f.pose)
        else:
            write_pose_txt(folder / "pose.txt", [(i, f.stamp, f.pose) for i, f in enumerate(frames, 1)])
    with open_recording(folder) as rec:
        assert rec.format == "pcd" and len(rec) == 3
        for i, got in enumerate(rec):
            want = frames[i]
            np.testing.assert_array_equal(got.points["x"], _finite(want)["x"])
            np.testing.assert_allclose(got.pose, want.pose, atol=1e-9)
            assert got.stamp == want.stamp and got.dropped == 2
            assert got.provenance.detail == f"{i + 1}.pcd"
        assert "pose" in rec.pose_source
        info = rec.describe()
        assert info.frames_with_pose == 3 and info.dropped_points == 6
    # one file alone is a recording too
    with open_recording(folder / "2.pcd") as rec:
        assert len(rec) == 1 and rec[0].pose is not None


def test_pcd_folder_natural_order_and_errors(tmp_path):
    frames = synthetic_frames(11, 5)
    folder = tmp_path / "p"
    write_pcd_folder(folder, frames)
    with open_recording(folder) as rec:
        assert [f.provenance.detail for f in rec][:3] == ["1.pcd", "2.pcd", "3.pcd"]
        assert rec[10].provenance.detail == "11.pcd"
        with pytest.raises(TopicError):
            open_recording(folder, topic="/x")
    with pytest.raises(WriterError, match="exists"):
        write_pcd_folder(folder, frames)
    # overwrite replaces the folder: no stale frames from the longer recording remain
    assert write_pcd_folder(folder, frames[:2], overwrite=True) == 2
    with open_recording(folder) as rec:
        assert len(rec) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordingError, match="no recording"):
        open_recording(tmp_path / "empty")


# ----------------------------------------------------------------------------------------------- npz


def test_npz_folder(tmp_path):
    frames = synthetic_frames(3, 100, ring=True)
    boxes = np.zeros(1, dtype=BOX_DTYPE)
    boxes["meta"] = int(MetaType.SMALLMOT)
    frames[1].labels = Labels(boxes, point_instance=np.arange(100, dtype=np.int32))
    frames[2].pose = None
    assert write_npz_folder(tmp_path / "d", frames) == 3
    with open_recording(tmp_path / "d") as rec:
        assert rec.format == "npz" and len(rec) == 3
        got = list(rec)
        np.testing.assert_array_equal(got[0].points, frames[0].points)
        assert got[1].labels is not None and got[1].labels.boxes["meta"][0] == 1
        assert got[2].pose is None and got[0].pose is not None
        assert got[2].provenance.index == 2 and got[2].provenance.format == "npz"
    with open_recording(tmp_path / "d" / "000001.npz") as rec:
        assert len(rec) == 1
    with pytest.raises(WriterError, match="exists"):
        write_npz_folder(tmp_path / "d", frames)
    write_npz_folder(tmp_path / "d", frames[:1], overwrite=True)
    with open_recording(tmp_path / "d") as rec:
        assert len(rec) == 1
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "x.npz").write_bytes(b"garbage")
    with pytest.raises(RecordingError, match="x.npz"), open_recording(tmp_path / "e") as rec:
        rec[0]


def test_empty_folder_formats(tmp_path):
    (tmp_path / "velodyne").mkdir()
    with pytest.raises(NoPointCloudError, match="velodyne"):
        open_recording(tmp_path)
