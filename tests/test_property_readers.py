"""Property-based tests of every reader: random clouds round-trip, damaged files end as a UserError.

Two families of properties, generated with hypothesis (derandomised, so CI sees the same examples every run):

* **round trips**: a random valid cloud (random size, coordinates, intensities, rings, per-point times, and a few
  NaN/±inf coordinates) written with the project's own writer reads back identically through
  :func:`lidarmt.io.open_recording` (or the format's own reader), with the non-finite points dropped and counted;
* **damage**: a valid file truncated, overwritten, given random bytes, huge or negative length fields...
  either reads (every point finite) or raises a :class:`lidarmt.errors.UserError`: never another exception,
  never a NumPy RuntimeWarning, never a hang (an alarm), never a huge allocation (``tracemalloc`` peak), and
  the damaged input is not modified.

The same hold for the HD-map loaders of :mod:`lidarmt.lidar.roi` (GeoJSON, protobuf text and binary).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import struct
import tempfile
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lidarmt.errors import UserError
from lidarmt.io import (
    _lzf,
    load_frame_npz,
    open_recording,
    read_pcd,
    read_pose_file,
    read_pose_txt,
    save_frame_npz,
    write_cyber_record,
    write_npz_folder,
    write_pcd,
    write_pcd_folder,
    write_pose_file,
    write_pose_txt,
    write_ros1_bag,
    write_ros2_bag,
)
from lidarmt.io.cloud import ROS_TYPES, Field, FieldLayout, to_points, to_points_reference
from lidarmt.io.pointcloud2 import parse_cdr, parse_ros1, serialize_cdr, serialize_ros1
from lidarmt.types import BOX_DTYPE, Frame, Labels, finite_mask, make_points, make_pose

# Sized so that the whole module takes well under a minute on a busy 2-core machine.
ROUND = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DAMAGE = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHEAP = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MEMORY_LIMIT = 64 << 20  # bytes a reader may allocate (traced peak) for a damaged file of a few kB
TIME_LIMIT = 300  # seconds one damaged file may take before we call it a hang: far above a loaded machine's
# worst (the first read of a format compiles its numba kernels: over 30 s at a load of 19 on 2 cores)


# ----------------------------------------------------------------------------------------------- strategies

NON_FINITE = st.sampled_from([np.nan, np.inf, -np.inf])
STAMP = st.floats(1.0e9, 2.0e9, allow_nan=False)


@st.composite
def clouds(draw, *, max_points: int = 24, intensity: str = "u8", non_finite_intensity: bool = False,
           allow_big: bool = True) -> np.ndarray:
    """A lidarmt point array: random finite points, some poisoned with NaN/±inf, maybe a ring and a time.

    ``intensity``: "u8" (whole numbers 0..255, what every format stores exactly), "u32" (whole numbers) or
    "float" (any non-negative float32). With ``allow_big`` the cloud is sometimes tiled past 1024 points, the
    size at which :func:`lidarmt.io.cloud.to_points` switches to its numba kernels.
    """
    n = draw(st.integers(0, max_points))
    xyz = draw(arrays(np.float32, (n, 3), elements=st.floats(-150.0, 150.0, width=32)))
    if intensity == "u8":
        inten = draw(arrays(np.uint8, n)).astype(np.float32)
    elif intensity == "u32":
        inten = draw(arrays(np.uint32, n, elements=st.integers(0, 2**24))).astype(np.float32)
    else:
        inten = draw(arrays(np.float32, n, elements=st.floats(0.0, 1e6, width=32)))
    ring = draw(st.none() | arrays(np.uint16, n))
    stamp = draw(STAMP)
    time = None
    if draw(st.booleans()):
        time = stamp - draw(arrays(np.float64, n, elements=st.floats(0.0, 0.1)))
    if n:
        for i, axis, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 3 if non_finite_intensity
                                                                                     else 2), NON_FINITE),
                                        max_size=4)):
            if axis == 3:
                inten[i] = v
            else:
                xyz[i, axis] = v
    pts = make_points(xyz, inten, ring=ring, time=time)
    if allow_big and n and draw(st.integers(0, 5)) == 0:
        pts = np.tile(pts, -(-1100 // n))
    return pts


@st.composite
def poses(draw) -> np.ndarray:
    t = draw(st.lists(st.floats(-1e5, 1e5), min_size=3, max_size=3))
    q = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4)))
    if np.linalg.norm(q) < 0.1:
        q = np.array([0.0, 0.0, 0.0, 1.0])
    return make_pose(t, q / np.linalg.norm(q))


@st.composite
def frames(draw, *, count: tuple[int, int] = (1, 3), posed: bool = True, **cloud_kw) -> list[Frame]:
    k = draw(st.integers(*count))
    t0 = draw(STAMP)
    out = []
    for i in range(k):
        pts = draw(clouds(**cloud_kw))
        stamp = t0 + 0.1 * i
        if "time" in (pts.dtype.names or ()):
            pts["time"] += stamp - pts["time"].max() if len(pts) else 0.0
        out.append(Frame(pts, draw(poses()) if posed else None, stamp, "velodyne64"))
    return out


INT_VALUES = st.sampled_from([0, 1, 2, 7, 255, 2**15, 2**31 - 1, 2**31, 2**32 - 1, 10**9, 2**63 - 1, 2**64 - 1])


@st.composite
def damage(draw, size: int) -> list[tuple]:
    """A list of edits to a file of ``size`` bytes; positions favour the first 512 bytes (headers)."""
    pos = st.integers(0, min(size - 1, 511)) | st.integers(0, max(size - 1, 0))
    op = st.one_of(
        st.tuples(st.just("truncate"), pos),
        st.tuples(st.just("set"), pos, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("int"), pos, st.sampled_from([2, 4, 8]), INT_VALUES | st.integers(0, 2**64 - 1)),
        st.tuples(st.just("insert"), pos, st.binary(min_size=1, max_size=32)),
        st.tuples(st.just("delete"), pos, st.integers(1, 64)),
        st.tuples(st.just("random"), st.binary(min_size=0, max_size=256)),
    )
    return draw(st.lists(op, min_size=1, max_size=4))


def apply_damage(data: bytes, ops: list[tuple]) -> bytes:
    b = bytearray(data)
    for op in ops:
        kind = op[0]
        if kind == "random":
            b = bytearray(op[1])
            continue
        p = op[1] % len(b) if b else 0
        if kind == "truncate":
            del b[p:]
        elif kind == "set":
            b[p : p + len(op[2])] = op[2]
        elif kind == "int":
            width, v = op[2], op[3]
            b[p : p + width] = (v % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "insert":
            b[p:p] = op[2]
        else:
            del b[p : p + op[2]]
    return bytes(b)


# ----------------------------------------------------------------------------------------------- helpers


def expected(points: np.ndarray) -> tuple[np.ndarray, int]:
    keep = finite_mask(points)
    return points[keep], int((~keep).sum())


def assert_points(got: np.ndarray, want: np.ndarray, *, fields=("x", "y", "z", "intensity"),
                  time_atol: float | None = None) -> None:
    assert len(got) == len(want)
    if not len(want):
        return  # an empty cloud: formats that store fields per point (Cyber) cannot say which fields it had
    for k in fields:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    if "ring" in (want.dtype.names or ()):
        np.testing.assert_array_equal(got["ring"], want["ring"])
    if "time" in (want.dtype.names or ()):
        if time_atol is None:
            np.testing.assert_array_equal(got["time"], want["time"])
        else:
            np.testing.assert_allclose(got["time"], want["time"], rtol=0, atol=time_atol)


def check_frame(f: Frame) -> None:
    """What every frame a reader returns satisfies, whatever the input."""
    names = f.points.dtype.names or ()
    assert {"x", "y", "z", "intensity"} <= set(names)
    assert bool(finite_mask(f.points).all()), "a reader returned a non-finite point"
    assert f.dropped >= 0
    assert f.pose is None or (f.pose.shape == (4, 4) and np.all(np.isfinite(f.pose)))


def exercise(path: Path, **kw) -> None:
    """Everything a user does with a recording: stream it, summarise it, read frames at random."""
    with open_recording(path, **kw) as rec:
        n = len(rec)
        for f in rec:
            check_frame(f)
        json.dumps(rec.describe().to_dict(), allow_nan=False)  # what `lidarmt info --json` prints: strict JSON
        if n:
            check_frame(rec[n - 1])
            check_frame(rec[0])


class Hang(Exception):
    """Raised by the alarm: a reader took longer than TIME_LIMIT on a tiny file."""


@contextlib.contextmanager
def guarded(*, memory: int = MEMORY_LIMIT, seconds: int = TIME_LIMIT) -> Iterator[None]:
    """Run a reader with RuntimeWarnings as errors, an alarm against hangs and a bound on traced memory."""

    def on_alarm(_sig, _frame):
        raise Hang(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", RuntimeWarning)
            yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        peak = tracemalloc.get_traced_memory()[1]
        if started:
            tracemalloc.stop()
        assert peak < memory, f"allocated {peak / 2**20:.0f} MiB for a small damaged input"


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def user_error_or_reads(root: Path, run: Callable[[], object]) -> None:
    """``run`` (a reader on files under ``root``) succeeds or raises a UserError; ``root`` is left unchanged."""
    before = tree_digest(root)
    try:
        with guarded():
            run()
    except UserError as err:
        msg = str(err)
        assert msg.strip() and "\n" not in msg.strip(), f"a user error must be one line: {msg!r}"
    assert tree_digest(root) == before, "reading modified its input"


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lidarmt-prop-") as d:
        yield Path(d)


# ----------------------------------------------------------------------------------------------- round trips


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
@ROUND
@given(pts=clouds(intensity="float", non_finite_intensity=True))
def test_pcd_round_trip(encoding, pts):
    if encoding == "ascii":
        pts = pts[:100]  # the ascii writer formats point by point: big clouds only in the binary encodings
    with scratch() as d:
        write_pcd(d / "a.pcd", Frame(pts, None, 0.0, "velodyne64"), encoding=encoding)
        with guarded():
            got, header = read_pcd(d / "a.pcd")
    want, dropped = expected(pts)
    assert header.data == encoding and got.dropped == dropped
    assert_points(got.points, want)
    names = pts.dtype.names or ()
    assert got.stamp == (float(want["time"].max()) if "time" in names and len(want) else 0.0)


@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
@pytest.mark.parametrize("n", [4, 1500])  # below and above the size where to_points switches to numba kernels
def test_pcd_with_plus_and_minus_inf_reads_without_runtime_warning(tmp_path, encoding, n):
    """issue 9: +inf + -inf in one point made drop_non_finite's sum NaN, and NumPy warned on stderr."""
    xyz = np.tile(np.array([[1, 2, 3], [np.inf, 0, 0], [-np.inf, np.inf, 0], [1, 1, -np.inf]], np.float32),
                  (n // 4, 1))
    inten = np.tile(np.array([1, 2, 3, np.inf], np.float32), n // 4)
    write_pcd(tmp_path / "inf.pcd", Frame(make_points(xyz, inten), None, 0.0), encoding=encoding)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with open_recording(tmp_path / "inf.pcd") as rec:
            (f,) = list(rec)
            info = rec.describe()
    assert len(f) == n // 4 and f.dropped == 3 * n // 4 and info.dropped_points == 3 * n // 4


@ROUND
@given(fs=frames(count=(1, 3)), encoding=st.sampled_from(["ascii", "binary", "binary_compressed"]))
def test_pcd_folder_with_pose_files_round_trip(fs, encoding):
    with scratch() as d:
        write_pcd_folder(d / "pcd", fs, encoding=encoding)
        with guarded(), open_recording(d / "pcd", require_pose=True) as rec:
            got = list(rec)
    assert len(got) == len(fs)
    for g, f in zip(got, fs, strict=True):
        want, dropped = expected(f.points)
        assert g.dropped == dropped and g.stamp == f.stamp
        assert_points(g.points, want)
        np.testing.assert_allclose(g.pose, f.pose, rtol=0, atol=1e-9 * (1 + np.abs(f.pose).max()))


def _check_bag_frames(got: list[Frame], fs: list[Frame], *, time_atol: float | None, intensity=True) -> None:
    assert len(got) == len(fs)
    for g, f in zip(got, fs, strict=True):
        want, dropped = expected(f.points)
        assert g.dropped == dropped
        assert abs(g.stamp - f.stamp) < 1e-6
        fields = ("x", "y", "z", "intensity") if intensity else ("x", "y", "z")
        if "time" in (f.points.dtype.names or ()):
            assert_points(g.points, want, fields=fields, time_atol=time_atol)
        else:  # written as the cloud's stamp for every point
            assert_points(g.points, want[[n for n in want.dtype.names if n != "time"]], fields=fields)
            np.testing.assert_allclose(g.points["time"], g.stamp, rtol=0, atol=1e-6)
        assert g.pose is not None
        np.testing.assert_allclose(g.pose, f.pose, rtol=0, atol=1e-6)


@ROUND
@given(fs=frames())
def test_ros1_bag_round_trip(fs):
    with scratch() as d:
        write_ros1_bag(d / "a.bag", fs, chunk_threshold=2000)
        with guarded(), open_recording(d / "a.bag") as rec:
            got = list(rec)
            if len(rec):
                check_frame(rec[len(rec) - 1])
    _check_bag_frames(got, fs, time_atol=None)


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
@settings(ROUND, max_examples=8)
@given(fs=frames())
def test_ros2_bag_round_trip(storage, fs):
    with scratch() as d:
        write_ros2_bag(d / "r2", fs, storage=storage)
        with guarded(), open_recording(d / "r2") as rec:
            got = list(rec)
            assert [rec[i].stamp for i in range(len(rec))] == [g.stamp for g in got]
    _check_bag_frames(got, fs, time_atol=None)


@pytest.mark.slow
@ROUND
@given(fs=frames(intensity="u32"))
def test_cyber_record_round_trip(fs):
    with scratch() as d:
        write_cyber_record(d / "a.record", fs, chunk_raw_size=3000)
        with guarded(), open_recording(d / "a.record") as rec:
            got = list(rec)
    _check_bag_frames(got, fs, time_atol=2e-6)  # per-point times are stored as whole nanoseconds


@ROUND
@given(raw=arrays(np.float32, st.tuples(st.integers(0, 30), st.just(4)),
                  elements=st.floats(-1e3, 1e3, width=32) | st.floats(width=32)))
def test_kitti_bin_round_trip(raw):
    with scratch() as d:
        (d / "velodyne").mkdir()
        raw.astype("<f4").tofile(d / "velodyne" / "000000.bin")
        with guarded(), open_recording(d) as rec:
            (got,) = list(rec)
    with np.errstate(over="ignore", invalid="ignore"):
        want = make_points(raw[:, :3], raw[:, 3] * np.float32(255.0))
    want, dropped = expected(want)
    assert got.dropped == dropped
    assert_points(got.points, want)


@ROUND
@given(fs=frames(count=(1, 3), intensity="float", non_finite_intensity=True), labelled=st.booleans())
def test_npz_round_trip(fs, labelled):
    if labelled:
        for k, f in enumerate(fs):
            n = len(f.points)
            boxes = np.zeros(k, dtype=BOX_DTYPE)
            f.labels = Labels(boxes, np.arange(n, dtype=np.int32), np.full(n, 1, np.int8), None)
    with scratch() as d:
        save_frame_npz(d / "one.npz", fs[0])
        write_npz_folder(d / "npz", fs)
        with guarded():
            exact = load_frame_npz(d / "one.npz")
            with open_recording(d / "npz") as rec:
                got = list(rec)
    assert exact.points.tobytes() == fs[0].points.tobytes()  # the file keeps NaN/inf; the Recording drops them
    np.testing.assert_array_equal(exact.pose, fs[0].pose)
    for g, f in zip(got, fs, strict=True):
        want, dropped = expected(f.points)
        assert g.dropped == dropped and g.stamp == f.stamp
        assert_points(g.points, want)
        np.testing.assert_array_equal(g.pose, f.pose)
        if labelled:
            np.testing.assert_array_equal(g.labels.point_instance, np.flatnonzero(finite_mask(f.points)))
            assert len(g.labels.boxes) == len(f.labels.boxes)


@st.composite
def layouts(draw) -> FieldLayout:
    """A random point layout: some of x/y/z/intensity/ring/t/extra fields, in any order, with padding."""
    names = ["x", "y", "z"] + draw(st.lists(st.sampled_from(["intensity", "ring", "t", "extra", "reflectivity"]),
                                            unique=True, max_size=4))
    names = draw(st.permutations(names))
    fields, off = [], 0
    for name in names:
        if name in "xyz":
            dt = draw(st.sampled_from(["f4", "f8"]))
        elif name == "ring":
            dt = draw(st.sampled_from(["u1", "u2", "u4"]))
        else:
            dt = draw(st.sampled_from(sorted(ROS_TYPES.values())))
        off += draw(st.integers(0, 3))
        fields.append(Field(name, off, dt, 1))
        off += np.dtype(dt).itemsize
    return FieldLayout(tuple(fields), off + draw(st.integers(0, 5)), draw(st.booleans()))


@CHEAP
@given(layout=layouts(), n=st.integers(0, 6), data=st.data(), frame_id=st.text(max_size=12),
       stamp_ns=st.integers(0, 2**31 * 10**9 - 1))  # the range both wire forms hold (ROS2: int32 seconds)
def test_pointcloud2_codec_round_trip(layout, n, data, frame_id, stamp_ns):
    body = data.draw(st.binary(min_size=n * layout.point_step, max_size=n * layout.point_step))
    for ser, parse in ((serialize_ros1, parse_ros1), (serialize_cdr, parse_cdr)):
        raw = ser(stamp_ns=stamp_ns, frame_id=frame_id, layout=layout, data=body, width=n)
        cloud = parse(raw)
        assert cloud.layout == layout and bytes(cloud.data) == body and cloud.num_points == n
        assert cloud.frame_id == frame_id and cloud.stamp_ns == stamp_ns
        view = layout.view(cloud.data, n)
        with guarded():
            pts, dropped = to_points(view, layout, stamp=stamp_ns * 1e-9)
            ref, ref_dropped = to_points_reference(view, layout, stamp=stamp_ns * 1e-9)
        assert dropped == ref_dropped and pts.tobytes() == ref.tobytes()
        assert bool(finite_mask(pts).all()) and len(pts) + dropped == n


@pytest.mark.parametrize("ser,stamp_ns", [(serialize_ros1, -1), (serialize_ros1, 2**32 * 10**9),
                                          (serialize_cdr, 2**31 * 10**9), (serialize_cdr, -(2**31) * 10**9 - 1)])
def test_pointcloud2_stamp_out_of_wire_range_is_writer_error(ser, stamp_ns):
    from lidarmt.io.errors import WriterError

    layout = FieldLayout((Field("x", 0, "f4"), Field("y", 4, "f4"), Field("z", 8, "f4")), 12)
    with pytest.raises(WriterError, match="outside"):
        ser(stamp_ns=stamp_ns, frame_id="v", layout=layout, data=b"", width=0)


@CHEAP
@given(raw=st.binary(max_size=300), cdr=st.booleans())
def test_pointcloud2_parsers_reject_garbage_with_format_errors(raw, cdr):
    def run():
        cloud = (parse_cdr if cdr else parse_ros1)(raw)
        cloud.layout.check_xyz("msg")
        view = cloud.layout.view(cloud.data, cloud.num_points)
        to_points(view, cloud.layout, stamp=cloud.stamp)

    with scratch() as d:
        user_error_or_reads(d, run)


@CHEAP
@given(idx=st.integers(0, 10**6), stamp=STAMP, pose=poses(), many=st.lists(st.tuples(st.integers(0, 99), STAMP,
                                                                                    poses()), max_size=4))
def test_pose_files_round_trip(idx, stamp, pose, many):
    with scratch() as d:
        write_pose_file(d / "1.pose", idx, stamp, pose)
        write_pose_txt(d / "pose.txt", many)
        rec = read_pose_file(d / "1.pose")
        table = read_pose_txt(d / "pose.txt")
    assert rec.idx == idx and rec.stamp == stamp
    np.testing.assert_allclose(rec.pose, pose, rtol=0, atol=1e-9 * (1 + np.abs(pose).max()))
    assert set(table) == {i for i, _t, _p in many}
    last = {i: (t, p) for i, t, p in many}
    for i, (t, p) in last.items():
        assert table[i].stamp == t
        np.testing.assert_allclose(table[i].pose, p, rtol=0, atol=1e-9 * (1 + np.abs(p).max()))


@CHEAP
@given(data=st.binary(max_size=600) | st.lists(st.sampled_from([b"ab", b"abc", b"\0" * 7, b"xyz1"]), max_size=200
                                                ).map(b"".join))
def test_lzf_round_trip_and_reference(data):
    c = _lzf.compress(data)
    assert c == _lzf.compress_reference(data)
    assert _lzf.decompress(c, len(data)).tobytes() == data
    assert _lzf.decompress_reference(c, len(data)) == data


@CHEAP
@given(src=st.binary(max_size=200), size=st.integers(0, 5000))
def test_lzf_decompress_of_garbage_is_format_error_or_bytes(src, size):
    from lidarmt.io.errors import FormatError

    try:
        fast = _lzf.decompress(src, size).tobytes()
    except FormatError:
        fast = None
    try:
        ref = _lzf.decompress_reference(src, size)
    except FormatError:
        ref = None
    assert fast == ref
    assert fast is None or len(fast) == size


# ----------------------------------------------------------------------------------------------- damage


def _small_frames(k: int = 3, n: int = 40) -> list[Frame]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(k):
        xyz = rng.uniform(-50, 50, (n, 3)).astype(np.float32)
        xyz[i, 0] = np.nan
        t = 1.5e9 + 0.1 * i
        pts = make_points(xyz, rng.integers(0, 256, n).astype(np.float32), ring=rng.integers(0, 64, n).astype(
            np.uint16), time=t - rng.uniform(0, 0.1, n))
        out.append(Frame(pts, make_pose([300000.0 + i, 4e6, 10.0], [0, 0, np.sin(0.1 * i), np.cos(0.1 * i)]), t))
    return out


def _build(kind: str, root: Path) -> tuple[Path, Path, dict]:
    """A valid recording of ``kind`` under ``root``: (path to open, file to damage, open_recording options)."""
    fs = _small_frames()
    if kind in ("pcd-ascii", "pcd-binary", "pcd-compressed"):
        enc = {"pcd-ascii": "ascii", "pcd-binary": "binary", "pcd-compressed": "binary_compressed"}[kind]
        write_pcd(root / "a.pcd", fs[0], encoding=enc)
        return root / "a.pcd", root / "a.pcd", {}
    if kind == "pcd-pose":
        write_pcd_folder(root / "pcd", fs[:2], encoding="binary")
        return root / "pcd", root / "pcd" / "2.pose", {"require_pose": True}
    if kind == "pose-txt":
        write_pcd_folder(root / "pcd", fs[:2], encoding="binary")
        for p in (root / "pcd").glob("*.pose"):
            p.unlink()
        write_pose_txt(root / "pcd" / "pose.txt", [(k + 1, f.stamp, f.pose) for k, f in enumerate(fs[:2])])
        return root / "pcd", root / "pcd" / "pose.txt", {}
    if kind in ("ros1", "ros1-recover"):
        write_ros1_bag(root / "a.bag", fs, chunk_threshold=1500)
        return root / "a.bag", root / "a.bag", {"recover": kind == "ros1-recover"}
    if kind.startswith("ros2-"):
        storage = "mcap" if kind == "ros2-mcap" else "sqlite3"
        write_ros2_bag(root / "r2", fs, storage=storage)
        target = root / "r2" / ("metadata.yaml" if kind == "ros2-metadata" else
                                f"r2.{'mcap' if storage == 'mcap' else 'db3'}")
        if not target.exists():
            target = next(p for p in (root / "r2").iterdir() if p.suffix in (".mcap", ".db3"))
        return root / "r2", target, {}
    if kind == "cyber":
        write_cyber_record(root / "a.record", fs, chunk_raw_size=2500)
        return root / "a.record", root / "a.record", {}
    if kind.startswith("kitti-"):
        tr = root / "training"
        for sub in ("velodyne", "label_2", "calib", "road_label"):
            (tr / sub).mkdir(parents=True)
        raw = np.stack([fs[0].points["x"], fs[0].points["y"], fs[0].points["z"],
                        fs[0].points["intensity"] / 255], axis=1).astype("<f4")
        raw.tofile(tr / "velodyne" / "000000.bin")
        np.arange(len(raw), dtype="<u4").tofile(tr / "road_label" / "000000.label")
        (tr / "calib" / "000000.txt").write_text(
            "R0_rect: 1 0 0 0 1 0 0 0 1\nTr_velo_to_cam: 0 -1 0 0 0 0 -1 -0.08 1 0 0 -0.27\n")
        (tr / "label_2" / "000000.txt").write_text(
            "Car 0.00 0 -1.57 599.41 156.40 629.75 189.25 1.73 1.66 4.10 -0.65 1.71 46.70 -1.59\n"
            "DontCare -1 -1 -10 503.89 169.71 590.61 190.13 -1 -1 -1 -1000 -1000 -1000 -10\n")
        target = {"kitti-bin": tr / "velodyne" / "000000.bin", "kitti-label": tr / "label_2" / "000000.txt",
                  "kitti-calib": tr / "calib" / "000000.txt", "kitti-road": tr / "road_label" / "000000.label"}[kind]
        return root, target, {}
    if kind.startswith("npz"):
        f = fs[0]
        f.labels = Labels(np.zeros(2, dtype=BOX_DTYPE), np.arange(len(f.points), dtype=np.int32))
        write_npz_folder(root / "npz", [f], compress=kind == "npz")
        return root / "npz", root / "npz" / "000000.npz", {}
    raise AssertionError(kind)


KINDS = ["pcd-ascii", "pcd-binary", "pcd-compressed", "pcd-pose", "pose-txt", "ros1", "ros1-recover",
         "ros2-sqlite3", "ros2-mcap", "ros2-metadata", "cyber", "kitti-bin", "kitti-label", "kitti-calib",
         "kitti-road", "npz", "npz-stored"]


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Callable[[str], tuple[Path, Path, Path, dict]]:
    """Builds (once per kind) a valid recording; returns (root, path to open, file to damage, options)."""
    cache: dict[str, tuple[Path, Path, Path, dict]] = {}

    def get(kind: str):
        if kind not in cache:
            root = tmp_path_factory.mktemp(kind)
            path, target, kw = _build(kind, root)
            exercise(path, **kw)  # the undamaged recording reads
            cache[kind] = (root, path, target, kw)
        return cache[kind]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@DAMAGE
@given(data=st.data())
def test_damaged_recording_reads_or_raises_user_error(valid, kind, data):
    root, path, target, kw = valid(kind)
    ops = data.draw(damage(target.stat().st_size), label="damage")
    with scratch() as d:
        shutil.copytree(root, d / "r")
        p = d / "r" / path.relative_to(root)
        t = d / "r" / target.relative_to(root)
        t.write_bytes(apply_damage(target.read_bytes(), ops))
        user_error_or_reads(d / "r", lambda: exercise(p, **kw))


@pytest.mark.parametrize("kind,ops", [
    ("ros1", [("delete", 82, 1)]),  # a record length misread as 64 MB: read(n) allocated n up front
    ("ros1-recover", [("delete", 82, 1)]),
    ("ros2-mcap", [("insert", 209, b"\x98l")]),  # an mcap record claiming 67 MB
    ("npz", [("set", 28, b"\x00")]),  # zlib.error escaped
    ("kitti-bin", [("insert", 0, b"\x00")]),  # reflectance x 255 overflowed: RuntimeWarning, inf intensity kept
], ids=lambda v: v if isinstance(v, str) else "")
def test_known_damage_reads_or_raises_user_error(valid, kind, ops):
    """Damage that hypothesis once found, kept as plain examples so that they run on every test run."""
    root, path, target, kw = valid(kind)
    with scratch() as d:
        shutil.copytree(root, d / "r")
        t = d / "r" / target.relative_to(root)
        t.write_bytes(apply_damage(target.read_bytes(), ops))
        user_error_or_reads(d / "r", lambda: exercise(d / "r" / path.relative_to(root), **kw))


HEADER_VALUES = st.sampled_from(["0", "-1", "1", "3", "10", "4294967295", "4294967296", str(10**12), str(10**30),
                                 "1e3", "nan", "-0", "x", "", "U", "F", "I", "4 4", "1 1 1 1 1 1 1 1 1"])


@pytest.mark.parametrize("encoding", ["ascii", "binary", "binary_compressed"])
@CHEAP
@given(key=st.sampled_from(["FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "HEIGHT", "POINTS", "DATA", "VIEWPOINT"]),
       slot=st.integers(0, 5), value=HEADER_VALUES, drop=st.booleans())
def test_pcd_header_values_are_checked_before_allocating(encoding, key, slot, value, drop):
    """A header line changed (e.g. POINTS 10**12, COUNT -1, SIZE 3) is refused or read, never allocated blindly."""
    f = _small_frames(1, 30)[0]
    with scratch() as d:
        write_pcd(d / "a.pcd", f, encoding=encoding)
        data = (d / "a.pcd").read_bytes()
        head, sep, body = data.partition(b"\nDATA ")
        lines = head.decode().split("\n")
        for i, line in enumerate(lines):
            words = line.split()
            if words and words[0] == key:
                if drop:
                    words = words[:1] + [w for j, w in enumerate(words[1:]) if j != slot % max(len(words) - 1, 1)]
                else:
                    words[1 + slot % max(len(words) - 1, 1) if len(words) > 1 else 0] = value
                lines[i] = " ".join(words)
        if key == "DATA":
            body = (value.encode() + b"\n" + body.partition(b"\n")[2]) if not drop else body.partition(b"\n")[2]
        (d / "a.pcd").write_bytes("\n".join(lines).encode() + sep + body)
        user_error_or_reads(d, lambda: exercise(d / "a.pcd"))


def test_pcd_compressed_size_claim_is_checked_before_allocating(tmp_path):
    """binary_compressed: POINTS and the uncompressed-size word both claim 1e9 points of 4 bytes."""
    head = b"VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 350000000\nHEIGHT 1\n" \
           b"POINTS 350000000\nDATA binary_compressed\n"
    (tmp_path / "a.pcd").write_bytes(head + struct.pack("<II", 4, 350_000_000 * 12) + b"\x00abc")
    user_error_or_reads(tmp_path, lambda: exercise(tmp_path / "a.pcd"))
    with pytest.raises(UserError):
        read_pcd(tmp_path / "a.pcd")


class Interrupted(Exception):
    """Raised by a frame stream part-way through, like a crash or Ctrl-C while a recording is written."""


WRITERS = {
    "ros1": ("a.bag", lambda p, fs, **kw: write_ros1_bag(p, fs, chunk_threshold=2000, **kw)),
    "ros2-sqlite3": ("r2", lambda p, fs, **kw: write_ros2_bag(p, fs, storage="sqlite3", **kw)),
    "ros2-mcap": ("r2", lambda p, fs, **kw: write_ros2_bag(p, fs, storage="mcap", **kw)),
    "cyber": ("a.record", lambda p, fs, **kw: write_cyber_record(p, fs, chunk_raw_size=2000, **kw)),
    "pcd": ("pcd", lambda p, fs, **kw: write_pcd_folder(p, fs, **kw)),
    "npz": ("npz", lambda p, fs, **kw: write_npz_folder(p, fs, **kw)),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
@settings(ROUND, max_examples=6)
@given(fs=frames(count=(1, 3), allow_big=False), cut=st.integers(0, 3), replace=st.booleans())
def test_an_interrupted_writer_leaves_nothing_half_written(kind, fs, cut, replace):
    """Frames stop with an exception after ``cut`` of them: no output, no temporary file, an old one intact."""
    name, write = WRITERS[kind]
    cut = min(cut, len(fs))

    def stream():
        yield from fs[:cut]
        raise Interrupted

    with scratch() as d:
        target = d / name
        if replace:
            write(target, fs)
        before = tree_digest(d)
        with pytest.raises(Interrupted):
            write(target, stream(), overwrite=True)
        assert tree_digest(d) == before, "an interrupted writer left a partial output or a temporary file"


def test_npz_frame_never_unpickles(tmp_path):
    """A .npz frame holding an object array (a pickle) is refused; the pickle's code never runs."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    np.savez(tmp_path / "evil.npz", points=np.array([Payload()], dtype=object),
             meta=np.frombuffer(b"{}", dtype=np.uint8))
    with pytest.raises(UserError, match="objects"):
        load_frame_npz(tmp_path / "evil.npz")
    assert not marker.exists()


def test_ros2_metadata_is_data_not_code(tmp_path):
    """A metadata.yaml with a Python object tag is refused as a damaged bag; nothing is executed."""
    marker = tmp_path / "pwned"
    write_ros2_bag(tmp_path / "r2", _small_frames(1, 10))
    meta = tmp_path / "r2" / "metadata.yaml"
    meta.write_text(f"!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ['{marker}']]\n"
                    + meta.read_text())
    with pytest.raises(UserError):
        exercise(tmp_path / "r2")
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------- HD maps


def _map_from(polys: list[np.ndarray], lanes: list[np.ndarray]):
    from lidarmt.lidar.roi import BoundaryEdge, EdgeType, HDMap, Junction, Lane, MapHeader, Road, RoadSection

    roads, lane_objs = [], []
    for k, poly in enumerate(polys):
        lane_ids = [f"lane_{k}"] if k < len(lanes) else []
        roads.append(Road(f"road_{k}", [RoadSection("1", lane_ids, [BoundaryEdge(EdgeType.LEFT_BOUNDARY, poly)])]))
    for k, c in enumerate(lanes):
        lane_objs.append(Lane(f"lane_{k}", c))
    junctions = [Junction(f"J_{k}", p) for k, p in enumerate(polys[:1])]
    return HDMap(header=MapHeader(proj="+proj=utm +zone=10 +ellps=WGS84 +datum=WGS84 +units=m +no_defs"),
                 lanes=lane_objs, roads=roads, junctions=junctions)


COORD = st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: round(v, 3))


@st.composite
def simple_rings(draw, *, min_points: int = 3, max_points: int = 7) -> np.ndarray:
    """A simple (non-self-intersecting) ring: one point per equal sector around a centre (angle jittered within
    its sector, so every gap is below 180 degrees and the centre lies inside), random radii."""
    n = draw(st.integers(min_points, max_points))
    cx, cy = draw(COORD), draw(COORD)
    jitter = np.array(draw(st.lists(st.floats(0.0, 0.9), min_size=n, max_size=n)))
    ang = (np.arange(n) + jitter * 0.5) * (2 * np.pi / n)
    r = np.array(draw(st.lists(st.floats(5.0, 200.0), min_size=n, max_size=n)))
    return np.round(np.stack([cx + r * np.cos(ang), cy + r * np.sin(ang)], axis=1), 3)


@st.composite
def hdmaps(draw):
    polys = [draw(simple_rings()) for _ in range(draw(st.integers(1, 3)))]
    lanes = [draw(simple_rings(min_points=2, max_points=5)) for _ in range(draw(st.integers(0, len(polys))))]
    return _map_from(polys, lanes)


@pytest.mark.parametrize("fmt", ["bin", "txt"])
@settings(ROUND, max_examples=10)
@given(hd=hdmaps())
def test_map_round_trip(fmt, hd):
    from lidarmt.lidar.roi import load_map, maps_equal, write_map

    with scratch() as d:
        paths = write_map(hd, d, formats=(fmt,))
        with guarded():
            back = load_map(paths[fmt])
    diffs: list[str] = []
    assert maps_equal(hd, back, details=diffs), diffs


@settings(ROUND, max_examples=10)
@given(hd=hdmaps())
def test_geojson_map_round_trip(hd):
    from lidarmt.lidar.roi import load_map, write_map

    with scratch() as d:
        paths = write_map(hd, d, formats=("geojson",))
        with guarded():
            back = load_map(paths["geojson"])
    assert [r.id for r in back.roads] == [r.id for r in hd.roads]
    for a, b in zip(back.roads, hd.roads, strict=True):
        np.testing.assert_array_equal(np.concatenate([e.points[:, :2] for e in a.sections[0].edges]),
                                      b.sections[0].edges[0].points[:, :2])
    assert [ln.id for ln in back.lanes] == [ln.id for ln in hd.lanes]
    for a, b in zip(back.lanes, hd.lanes, strict=True):
        np.testing.assert_array_equal(a.central_curve[:, :2], b.central_curve[:, :2])


@pytest.fixture(scope="module")
def valid_maps(tmp_path_factory) -> dict[str, Path]:
    from lidarmt.lidar.roi import write_map

    root = tmp_path_factory.mktemp("maps")
    square = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0]])
    hd = _map_from([square, square + 20], [np.array([[1.0, 1.0], [9.0, 9.0]])])
    paths = write_map(hd, root, formats=("bin", "txt", "geojson"))
    from lidarmt.lidar.roi.xmlmap import map_to_xml

    hd.header.proj = "+proj=utm +zone=10 +ellps=WGS84 +datum=WGS84 +units=m +no_defs"
    for poly in (square, square + 20):  # XML maps hold longitude/latitude: place the map in UTM zone 10
        poly += [500_000.0, 4_000_000.0]
    (root / "base_map.xml").write_text(map_to_xml(hd))
    paths["xml"] = root / "base_map.xml"
    return paths


@pytest.mark.parametrize("fmt", ["bin", "txt", "geojson", "xml"])
@DAMAGE
@given(data=st.data())
def test_damaged_map_loads_or_raises_user_error(valid_maps, fmt, data):
    from lidarmt.lidar.roi import load_map

    src = valid_maps[fmt]
    ops = data.draw(damage(src.stat().st_size), label="damage")
    with scratch() as d:
        p = d / src.name
        p.write_bytes(apply_damage(src.read_bytes(), ops))
        user_error_or_reads(d, lambda: load_map(p))


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON = st.recursive(JSON_SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6),
                                                                                            kids, max_size=4),
                    max_leaves=12)


def _json_paths(doc, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _json_paths(v, (*prefix, k))


@st.composite
def geojson_docs(draw):
    """A valid GeoJSON map with one or two members replaced by any JSON value (or removed)."""
    ring = [[float(x), float(y)] for x, y in draw(simple_rings())]
    ring.append(ring[0])
    doc = {"type": "FeatureCollection", "frame": "world", "proj": "", "features": [
        {"type": "Feature", "properties": {"kind": "road", "id": "r1", "left_points": 2, "lane_ids": ["l1"],
                                           "road_type": 2, "section": "1"},
         "geometry": {"type": "Polygon", "coordinates": [ring]}},
        {"type": "Feature", "properties": {"kind": "lane", "id": "l1", "road": "r1", "junction_id": None},
         "geometry": {"type": "LineString", "coordinates": ring[:2]}},
        {"type": "Feature", "properties": {"kind": "junction", "id": "j1"},
         "geometry": {"type": "MultiPolygon", "coordinates": [[ring]]}},
    ]}
    for _ in range(draw(st.integers(1, 2))):
        paths = list(_json_paths(doc))
        members = [q for q in paths if q and isinstance(q[-1], str)]  # mostly members, not coordinates
        path = draw(st.sampled_from(members) if members and draw(st.integers(0, 3)) else st.sampled_from(paths))
        if not path:
            doc = draw(JSON)
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON)
    return doc


@pytest.mark.slow
@settings(CHEAP, max_examples=150)
@given(doc=geojson_docs())
def test_malformed_geojson_is_user_error(doc):
    from lidarmt.lidar.roi import load_map

    with scratch() as d:
        (d / "m.geojson").write_text(json.dumps(doc))
        user_error_or_reads(d, lambda: load_map(d / "m.geojson"))


_RING = [[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 0.0]]


def _road(props=None, geometry=None):
    return {"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"kind": "road"} if props is None else props,
         "geometry": {"type": "Polygon", "coordinates": [_RING]} if geometry is None else geometry}]}


@pytest.mark.parametrize("text", [
    json.dumps(_road(props=5)),
    json.dumps(_road(props=[1])),
    json.dumps(_road(geometry={"type": "MultiPolygon", "coordinates": None})),
    json.dumps(_road(geometry={"type": "MultiPolygon", "coordinates": 7})),
    json.dumps(_road(props={"kind": "road", "lane_ids": 5})),
    json.dumps(_road(props={"kind": "road", "road_type": "x"})),
    json.dumps(_road(props={"kind": "road", "road_type": [2]})),
    "[" * 100_000 + "]" * 100_000,
    '{"type": "FeatureCollection", "features": ' + "[" * 100_000 + "]" * 100_000 + "}",
], ids=["props-int", "props-list", "multipolygon-null", "multipolygon-int", "lane-ids-int", "road-type-text",
        "road-type-list", "deep-json", "deep-features"])
def test_known_malformed_geojson_is_user_error(tmp_path, text):
    """GeoJSON maps that once escaped as AttributeError/TypeError/ValueError/RecursionError."""
    from lidarmt.lidar.roi import load_map

    (tmp_path / "m.geojson").write_text(text)
    user_error_or_reads(tmp_path, lambda: load_map(tmp_path / "m.geojson"))


@CHEAP
@given(proj=st.one_of(
    st.builds(lambda z, s, rest: f"+proj=utm +zone={z}{' +south' if s else ''} {rest}",
              st.integers(-5, 10**6).map(str) | st.sampled_from(["", "x", "9" * 5000, "10.5", "٣"]),
              st.booleans(), st.text(max_size=10)),
    st.text(max_size=40)))
def test_map_projection_zone_parses_to_a_utm_zone_or_none(proj):
    """The ``proj`` string of a map header (text from a file): a UTM zone 1..60 or None, never an exception."""
    from lidarmt.utm import parse_proj_zone

    got = parse_proj_zone(proj)
    assert got is None or (1 <= got[0] <= 60 and isinstance(got[1], bool)), got


def test_xml_map_entity_expansion_is_refused_or_bounded(tmp_path):
    """A 'billion laughs' XML map (entities expanding to gigabytes) is an error or tiny: never a memory blow-up."""
    from lidarmt.lidar.roi import load_map

    ents = "".join(f'<!ENTITY e{k} "{f"&e{k - 1};" * 10 if k else "lol" * 10}">' for k in range(9))
    (tmp_path / "base_map.xml").write_text(f'<?xml version="1.0"?><!DOCTYPE OpenDRIVE [{ents}]>'
                                           f"<OpenDRIVE><header><geoReference>&e8;</geoReference></header>"
                                           f"</OpenDRIVE>")
    user_error_or_reads(tmp_path, lambda: load_map(tmp_path / "base_map.xml"))


@CHEAP
@given(data=st.binary(max_size=2000), claim=st.integers(0, 2**64 - 1))
def test_lz4_chunk_content_size_claim_is_checked_before_allocating(data, claim):
    """A ROS1 chunk's LZ4 frame whose header announces more content than its bytes can hold is refused before
    lz4 allocates it; any other frame decodes exactly as lz4 does, or fails as a UserError."""
    import lz4.frame

    from lidarmt.io.ros1 import _lz4_decompress

    good = lz4.frame.compress(data, store_size=True)
    assert _lz4_decompress(good) == data
    bad = good[:6] + claim.to_bytes(8, "little") + good[14:]
    with guarded(memory=8 << 20):
        try:
            out = _lz4_decompress(bad)
        except UserError:
            return
        except RuntimeError:  # lz4's own error for a corrupt frame (a checksum): the readers wrap it
            return
    assert len(out) == claim


# ----------------------------------------------------------------------------------------------- image headers

#: every format opencv's imdecode reads in lidarmt's build, by the suffix cv2.imencode writes it under
IMAGE_EXTS = (".png", ".jpg", ".bmp", ".tiff", ".webp", ".ppm", ".pgm", ".pbm", ".pfm", ".ras", ".hdr", ".jp2",
              ".pam", ".avif", ".gif")


def _encode(ext: str, img: np.ndarray) -> bytes:
    import cv2

    if ext in (".pgm", ".pbm"):
        img = img[:, :, 0]
    ok, enc = cv2.imencode(ext, img)
    assert ok, ext
    return enc.tobytes()


@CHEAP
@given(ext=st.sampled_from(IMAGE_EXTS), w=st.integers(32, 64), h=st.integers(32, 64), seed=st.integers(0, 2**16))
def test_image_header_agrees_with_opencv_in_every_format(ext, w, h, seed):
    """The size read from the header of any format opencv decodes is the size opencv decodes (issue 29, item 1)."""
    from lidarmt._limits import image_header
    from lidarmt.camera.sources.decode import decode_bytes

    img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    data = _encode(ext, img)
    assert image_header(data)[:2] == (w, h), ext
    assert decode_bytes(data, "x").shape == (h, w, 3)


@DAMAGE
@given(ext=st.sampled_from(IMAGE_EXTS), at=st.integers(0, 63), patch=st.binary(min_size=1, max_size=8),
       w=st.integers(32, 40), h=st.integers(32, 40))
def test_a_damaged_image_header_is_refused_or_decodes_to_its_size(ext, at, patch, w, h):
    """Whatever a damaged header says, opencv never decodes more than lidarmt read from it: the image is refused
    (a UserError) or decodes to exactly the header's size, and the pixel cap is applied before decoding."""
    import lidarmt._limits as limits
    from lidarmt.camera.sources.decode import decode_bytes

    data = bytearray(_encode(ext, np.full((h, w, 3), 77, np.uint8)))
    data[at:at + len(patch)] = patch
    data = bytes(data)
    old, limits.MAX_IMAGE_PIXELS = limits.MAX_IMAGE_PIXELS, 1 << 16
    try:
        with guarded(memory=256 << 20):
            try:
                img = decode_bytes(data, "x")
            except UserError:
                return
    finally:
        limits.MAX_IMAGE_PIXELS = old
    head = limits.image_header(data)
    assert head is not None and img.shape[:2] == (head[1], head[0]), (ext, head, img.shape)
    assert head[0] * head[1] <= 1 << 16  # (opencv's JPEG 2000 decoder needs 32×32 at least)


# ----------------------------------------------------------------------------------------------- .pt files


@st.composite
def crafted_tensors(draw):
    """A tensor as a stranger's .pt may hold one: honest, a view at an offset, transposed, or expanded (stride 0)
    to claim far more elements than it stores."""
    import torch

    kind = draw(st.sampled_from(["honest", "expanded", "view", "transposed", "int"]))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)))
    if kind == "expanded":
        big = tuple(draw(st.lists(st.integers(1, 1 << 20), min_size=1, max_size=3)))  # numel < 2**63
        return torch.zeros(1, dtype=torch.float16).expand(*big) if len(big) else torch.zeros(1)
    if kind == "view":
        base = torch.zeros(256, dtype=torch.float16)
        n = int(np.prod(shape)) if shape else 1
        off = draw(st.integers(0, 256 - n))
        return base[off:off + n].view(shape)
    if kind == "transposed" and len(shape) >= 2:
        return torch.zeros(shape, dtype=torch.float16).transpose(0, 1)
    if kind == "int":
        return torch.zeros(shape, dtype=torch.int64)
    return torch.zeros(shape, dtype=torch.float16)


@st.composite
def meta_values(draw):
    depth = draw(st.integers(0, 3))
    if depth == 3:
        n = draw(st.integers(150, 50_000))
        return "[" * n + "]" * n
    return draw(st.one_of(st.just("{}"), st.text(max_size=40), st.integers(), st.none(),
                          st.just('{"a": [1, 2, {"b": null}]}'), st.binary(max_size=20)))


@ROUND  # each example builds and saves a 4 MB model
@given(arch=st.sampled_from(["dave-orig", "epoch", "nonsense", 3]), keep=st.floats(0, 1), data=st.data(),
       meta=meta_values())
def test_crafted_weights_files_load_or_raise_one_line(arch, keep, data, meta):
    """A steering weights file with any tensors (shapes, strides, expansions, names) and any ``meta`` either
    loads into its architecture or raises ModelError, with bounded memory and time (issue 29, item 3)."""
    import torch

    from lidarmt.camera.models.archs import ARCHS
    from lidarmt.camera.models.weightsfile import WEIGHTS_FORMAT, WEIGHTS_VERSION
    from lidarmt.camera.models.zoo import model_from_file

    real = ARCHS["dave-orig"].build().state_dict()
    names = list(real)
    state = {k: torch.zeros_like(v, dtype=torch.float16) for k, v in real.items()}
    for k in names[: int(keep * len(names))]:  # some tensors crafted, under a real name or a made-up one
        name = data.draw(st.sampled_from([k, k + ".x", "z" * 300]))
        state.pop(k)
        state[name] = data.draw(crafted_tensors())
    blob = {"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION, "arch": arch, "dtype": "float16",
            "state_dict": state, "meta": meta}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.pt"
        torch.save(blob, path)
        with guarded(memory=512 << 20):
            try:
                model = model_from_file(path)
            except UserError as err:
                assert "\n" not in str(err)
                return
    loaded = model.module.state_dict() if hasattr(model, "module") else None
    assert arch == "dave-orig" and (loaded is None or all(loaded[k].shape == v.shape for k, v in real.items()))


# ----------------------------------------------------------------------------------------------- label files

LABEL_TOKENS = st.one_of(st.sampled_from(["Car", "Van", "DontCare", "Pedestrian", "Tram", "Zeppelin", "nan", "inf",
                                          "-inf", "1e999", "-1", "0", "", "\u00e9"]),
                         st.floats(-1e6, 1e6).map(repr))


@st.composite
def kitti_label_files(draw) -> str:
    """label_2 text of any length: a few random lines (random tokens, numbers, nan/inf), maybe repeated past any
    count a frame may have."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            nums = draw(st.lists(st.floats(0, 60, allow_nan=False), min_size=14, max_size=14))
            lines.append(" ".join([draw(st.sampled_from(["Car", "Cyclist", "Misc"]))] + [repr(v) for v in nums]))
        else:
            lines.append(" ".join(draw(st.lists(LABEL_TOKENS, max_size=18))))
    repeat = draw(st.sampled_from([1, 1, 1, 2_000, 10_001]))
    return "\n".join(lines * repeat) + draw(st.sampled_from(["", "\n", "\r\n"]))


@CHEAP
@given(text=kitti_label_files())
def test_kitti_label_files_of_any_length_read_finite_boxes_or_one_line(text):
    """A label_2 file of any length and content gives finite boxes, at most MAX_BOXES_PER_FRAME of them, or a
    one-line UserError (issue 29, items 4 and 5)."""
    from lidarmt.io.kitti import read_label_boxes
    from lidarmt.io.tracklets import MAX_BOX_SIDE, MAX_BOXES_PER_FRAME

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "000000.txt"
        path.write_text(text, encoding="utf-8")
        with guarded():
            try:
                boxes = read_label_boxes(path, np.eye(4))
            except UserError as err:
                assert "\n" not in str(err)
                return
    assert len(boxes) <= MAX_BOXES_PER_FRAME
    assert all(np.isfinite(boxes[k]).all() for k in ("cx", "cy", "cz", "length", "width", "height", "yaw"))
    assert (boxes["length"] <= MAX_BOX_SIDE).all() and (boxes["height"] >= 0).all()


@st.composite
def boxes_and_points(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, m = draw(st.integers(0, 400)), draw(st.integers(0, 30))
    span = draw(st.sampled_from([1.0, 10.0, 100.0]))
    xyz = rng.uniform(-span, span, (n, 3)).astype(np.float32)
    if n and draw(st.booleans()):
        xyz[rng.integers(0, n, 3)] = np.nan
    boxes = np.zeros(m, BOX_DTYPE)
    for k in ("cx", "cy", "cz"):
        boxes[k] = rng.uniform(-span, span, m)
    for k in ("length", "width", "height"):
        boxes[k] = rng.uniform(0, span, m) * rng.choice([0.0, 0.1, 1.0, 10.0], m)
    boxes["yaw"] = rng.uniform(-7, 7, m)
    boxes["instance"] = rng.integers(-1, 5, m)
    boxes["meta"] = rng.integers(0, 5, m)
    if m >= 2 and draw(st.booleans()):
        boxes[1] = boxes[0]  # the same box twice: the tie rule
    return make_points(xyz), boxes, draw(st.sampled_from([0.0, 0.2, -0.05]))


@CHEAP
@given(case=boxes_and_points())
def test_points_in_boxes_agrees_with_its_numpy_reference(case):
    """The grid-indexed box membership labels exactly the points the boxes × points reference labels."""
    from lidarmt.io.tracklets import points_in_boxes, points_in_boxes_reference

    pts, boxes, margin = case
    got, want = points_in_boxes(pts, boxes, margin=margin), points_in_boxes_reference(pts, boxes, margin=margin)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
