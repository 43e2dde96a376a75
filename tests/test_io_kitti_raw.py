"""KITTI raw drives read as they come: scans, OXTS poses in UTM (checked by hand), extrinsics, errors, `info`.

The hand-computed UTM coordinates use Snyder's Transverse Mercator series ("Map Projections: A Working Manual",
USGS 1987, eq. 8-9, 8-10, 3-21), a different formula from the Krüger series of lidarmt.utm: they agree to
about 0.4 mm in KITTI's zone.
"""

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
    damage,
    exercise,
    scratch,
    user_error_or_reads,
)

from lidarmt.cli import main
from lidarmt.io import open_recording, sniff
from lidarmt.io.errors import FormatError, NoPointCloudError, PoseError, RecordingError
from lidarmt.io.kitti_raw import KittiRawRecording, write_kitti_raw_drive
from lidarmt.io.oxts import (
    UtmZone,
    format_timestamp,
    parse_oxts_line,
    parse_timestamp,
    read_timestamps,
    rpy_matrix,
)
from lidarmt.types import Frame, make_points, make_pose

WGS84_A = 6378137.0
WGS84_E2 = (1 / 298.257223563) * (2 - 1 / 298.257223563)

# a real KITTI calibration (2011_09_26/calib_imu_to_velo.txt): velodyne <- imu
IMU_TO_VELO = """calib_time: 25-May-2012 16:30:16
R: 9.999976e-01 7.553071e-04 -2.035826e-03 -7.854027e-04 9.998898e-01 -1.482298e-02 2.024406e-03 1.482454e-02 9.998881e-01
T: -8.086759e-01 3.195559e-01 -7.997231e-01
"""  # noqa: E501
STAMP0 = "2011-09-26 13:02:25.964389445"
T0 = 1317042145.964389445


def snyder_utm(lat: float, lon: float, lon0: float) -> tuple[float, float]:
    """UTM easting, northing (north) by Snyder's series: the hand computation the reader is checked against."""
    e2, k0 = WGS84_E2, 0.9996
    ep2 = e2 / (1 - e2)
    phi = math.radians(lat)
    m = WGS84_A * ((1 - e2 / 4 - 3 * e2**2 / 64 - 5 * e2**3 / 256) * phi
                   - (3 * e2 / 8 + 3 * e2**2 / 32 + 45 * e2**3 / 1024) * math.sin(2 * phi)
                   + (15 * e2**2 / 256 + 45 * e2**3 / 1024) * math.sin(4 * phi)
                   - (35 * e2**3 / 3072) * math.sin(6 * phi))
    n = WGS84_A / math.sqrt(1 - e2 * math.sin(phi) ** 2)
    t, c = math.tan(phi) ** 2, ep2 * math.cos(phi) ** 2
    a = math.radians(lon - lon0) * math.cos(phi)
    x = k0 * n * (a + (1 - t + c) * a**3 / 6 + (5 - 18 * t + t * t + 72 * c - 58 * ep2) * a**5 / 120)
    y = k0 * (m + n * math.tan(phi) * (a * a / 2 + (5 - t + 9 * c + 4 * c * c) * a**4 / 24
                                      + (61 - 58 * t + t * t + 600 * c - 330 * ep2) * a**6 / 720))
    return 500000.0 + x, y


def oxts_line(lat, lon, alt, roll, pitch, yaw) -> str:
    return " ".join(str(v) for v in (lat, lon, alt, roll, pitch, yaw, *[0.1] * 19, 4, 10, 4, 4, 4))


def write_drive(root, packets, *, scans=3, points=40, calib=True, velo_times=True, oxts_times=None,
                start_end=True):
    """A drive ``root/2011_09_26/2011_09_26_drive_0001_sync`` written by hand, as KITTI lays it out.

    ``packets``: (lat, lon, alt, roll, pitch, yaw) per OXTS packet; ``oxts_times``: their times (default: the
    scans' times, 0.1 s apart)."""
    date = root / "2011_09_26"
    drive = date / "2011_09_26_drive_0001_sync"
    (drive / "velodyne_points" / "data").mkdir(parents=True)
    (drive / "oxts" / "data").mkdir(parents=True)
    rng = np.random.default_rng(1)
    raws = []
    for k in range(scans):
        raw = rng.uniform(-20, 20, (points, 4)).astype(np.float32)
        raw[:, 3] = rng.uniform(0, 1, points)
        raw[k, 1] = np.nan  # one non-finite point per scan
        raw.tofile(drive / "velodyne_points" / "data" / f"{k:010d}.bin")
        raws.append(raw)
    times = [T0 + 0.1 * k for k in range(scans)]
    if velo_times:
        (drive / "velodyne_points" / "timestamps.txt").write_text("".join(format_timestamp(t) + "\n" for t in times))
    if start_end:
        for name, d in (("timestamps_start.txt", -0.05), ("timestamps_end.txt", 0.0518)):
            (drive / "velodyne_points" / name).write_text("".join(format_timestamp(t + d) + "\n" for t in times))
    for k, p in enumerate(packets):
        (drive / "oxts" / "data" / f"{k:010d}.txt").write_text(oxts_line(*p) + "\n")
    ot = times if oxts_times is None else oxts_times
    if ot is not False:
        (drive / "oxts" / "timestamps.txt").write_text("".join(format_timestamp(t) + "\n" for t in ot))
    if calib:
        (date / "calib_imu_to_velo.txt").write_text(IMU_TO_VELO)
        (date / "calib_velo_to_cam.txt").write_text(
            "calib_time: 15-Mar-2012 11:37:16\nR: 1 0 0 0 1 0 0 0 1\nT: 0 0 0\n"
            "delta_f: 0.000000e+00 0.000000e+00\ndelta_c: 0.000000e+00 0.000000e+00\n")
    return drive, raws


def velo_from_imu() -> np.ndarray:
    lines = dict(ln.split(":", 1) for ln in IMU_TO_VELO.splitlines())
    m = np.eye(4)
    m[:3, :3] = np.array(lines["R"].split(), float).reshape(3, 3)
    m[:3, 3] = np.array(lines["T"].split(), float)
    return m


# ----------------------------------------------------------------------------------------------- poses by hand


def test_oxts_pose_on_the_central_meridian_by_hand(tmp_path):
    # zone 32's central meridian is 9° E: easting 500 km, northing 0.9996 x the meridian arc, no convergence
    packets = [(49.0, 9.0, 112.5, 0.0, 0.0, 0.3), (49.0, 9.0, 112.5, 0.0, 0.0, 0.3), (49.0, 9.0, 112.5, 0, 0, 0.3)]
    drive, _ = write_drive(tmp_path, packets, calib=False)
    with open_recording(drive) as rec:
        assert isinstance(rec, KittiRawRecording) and len(rec) == 3
        f = rec[0]
    e, n = snyder_utm(49.0, 9.0, 9.0)
    assert e == 500000.0
    np.testing.assert_allclose(f.pose[:3, 3], [e, n, 112.5], rtol=0, atol=1e-3)
    c, s = math.cos(0.3), math.sin(0.3)  # identity extrinsic: the velodyne is the IMU; heading 0.3 rad from east
    np.testing.assert_allclose(f.pose[:3, :3], [[c, -s, 0], [s, c, 0], [0, 0, 1]], atol=1e-9)


def test_oxts_pose_off_the_meridian_with_attitude_and_extrinsic(tmp_path):
    lat, lon, alt, roll, pitch, yaw = 49.011, 8.43, 116.4, 0.02, -0.01, 1.2
    drive, raws = write_drive(tmp_path, [(lat, lon, alt, roll, pitch, yaw)] * 3)
    with open_recording(drive) as rec:
        f = rec[1]
        info = rec.describe()
    # convergence: grid north is turned from true north by atan(tan Δλ · sin φ) (Δλ = -0.57°, west: negative)
    gamma = math.atan(math.tan(math.radians(lon - 9.0)) * math.sin(math.radians(lat)))
    assert gamma == pytest.approx(-0.00995 * 0.7549, abs=1e-5)  # Δλ in rad x sin φ
    cr, sr, cp, sp = math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw + gamma), math.sin(yaw + gamma)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    world_from_imu = np.eye(4)
    world_from_imu[:3, :3] = rz @ ry @ rx
    world_from_imu[:3, 3] = [*snyder_utm(lat, lon, 9.0), alt]
    want = world_from_imu @ np.linalg.inv(velo_from_imu())  # world <- velodyne = world <- imu · imu <- velodyne
    np.testing.assert_allclose(f.pose[:3, :3], want[:3, :3], atol=2e-7)  # the convergence to ~1e-7 rad
    np.testing.assert_allclose(f.pose[:3, 3], want[:3, 3], rtol=0, atol=2e-3)
    # the velodyne is 0.81 m ahead of, 0.32 m right of and 0.80 m above the IMU (about -T in the IMU's axes)
    assert np.linalg.norm(f.pose[:3, 3] - world_from_imu[:3, 3]) == pytest.approx(1.18, abs=0.01)
    # scan content: float32 x y z, reflectance x 255, the NaN point dropped and counted
    keep = np.isfinite(raws[1]).all(axis=1)
    assert f.dropped == 1 and len(f) == keep.sum()
    np.testing.assert_array_equal(f.points["x"], raws[1][keep, 0])
    np.testing.assert_allclose(f.points["intensity"], raws[1][keep, 3] * 255, rtol=1e-6)
    assert f.stamp == pytest.approx(T0 + 0.1, abs=1e-6) and f.provenance.format == "kitti-raw"
    assert info.frames_with_pose == 3 and info.extra["utm_zone"] == "32N"
    assert info.extra["sweep_duration_s"] == pytest.approx(0.1018, abs=1e-5)
    assert "calib_imu_to_velo.txt" in info.extra["extrinsic"] and "calib_velo_to_cam" in info.extra[
        "camera_calibration"]
    assert "nearest in time" in info.pose_source and "identity" not in info.pose_source


def test_nearest_packet_in_time_and_by_index(tmp_path):
    # OXTS at 20 Hz (twice the scans' rate), 4 ms late: scan k takes packet 2k; each packet has its own latitude
    packets = [(49.0 + 1e-4 * j, 9.0, 100.0, 0, 0, 0) for j in range(6)]
    oxts_times = [T0 + 0.05 * j + 0.004 for j in range(6)]
    drive, _ = write_drive(tmp_path / "a", packets, oxts_times=oxts_times, calib=False)
    with open_recording(drive) as rec:
        norths = [f.pose[1, 3] for f in rec]
        detail = rec.describe().extra["oxts_matching"]
    want = [snyder_utm(49.0 + 2e-4 * k, 9.0, 9.0)[1] for k in range(3)]
    np.testing.assert_allclose(norths, want, rtol=0, atol=0.01)
    assert detail == "nearest in time (largest |Δt| 0.0040 s)"
    # a packet too far away in time: no pose for that scan, said in the summary
    drive, _ = write_drive(tmp_path / "b", packets[:1], oxts_times=[T0])
    with open_recording(drive) as rec:
        assert all(f.pose is not None for f in rec)  # 0.2 s is within the default gap of 0.5 s
    with KittiRawRecording(drive, max_oxts_gap=0.15) as rec:
        assert rec[1].pose is not None and rec[2].pose is None
        assert any(n.startswith("1 scan(s) have no pose (world <- sensor)") for n in rec.describe().notes)
    # no timestamps on one side: the packet with the scan's number, said in the pose source
    drive, _ = write_drive(tmp_path / "c", packets, oxts_times=False, calib=False)
    with open_recording(drive) as rec:
        np.testing.assert_allclose([f.pose[1, 3] for f in rec], [snyder_utm(49.0 + 1e-4 * k, 9.0, 9.0)[1]
                                                                for k in range(3)], rtol=0, atol=0.01)
        info = rec.describe()
    assert "by index" in info.pose_source and "oxts/timestamps.txt" in info.extra["oxts_matching"]
    assert "identity-extrinsic" in info.pose_source and any("identity-extrinsic" in n for n in info.notes)
    # no scan times: the stamp is the packet's time
    drive, _ = write_drive(tmp_path / "d", packets[:3], velo_times=False)
    with open_recording(drive) as rec:
        assert [f.stamp for f in rec] == pytest.approx([T0, T0 + 0.1, T0 + 0.2], abs=1e-6)
        assert "by index (no velodyne_points/timestamps.txt)" in rec.describe().extra["oxts_matching"]


def test_paths_a_drive_can_be_given_as(tmp_path):
    drive, _ = write_drive(tmp_path, [(49.0, 9.0, 100.0, 0, 0, 0)] * 3)
    data = drive / "velodyne_points" / "data"
    for p in (drive, drive / "velodyne_points", data, data / "0000000002.bin"):
        assert sniff(p) == "kitti-raw"
        with open_recording(p) as rec:
            assert len(rec) == (1 if p.is_file() else 3)
            assert rec[-1].stamp == pytest.approx(T0 + 0.2, abs=1e-6) and rec[-1].pose is not None
    # streaming and random access agree
    with open_recording(drive) as rec:
        streamed = list(rec)
        for i, f in enumerate(streamed):
            assert rec[i].points.tobytes() == f.points.tobytes() and np.array_equal(rec[i].pose, f.pose)
    # a .bin anywhere else is a plain KITTI scan (no pose)
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "scan.bin").write_bytes((data / "0000000000.bin").read_bytes())
    assert sniff(tmp_path / "loose" / "scan.bin") == "kitti"
    with open_recording(tmp_path / "loose" / "scan.bin") as rec:
        assert len(rec) == 1 and rec[0].pose is None and rec[0].dropped == 1
    # the date folder holds drives: say which to open
    with pytest.raises(RecordingError, match="folder of 1 KITTI raw drive.*open one drive folder"):
        sniff(drive.parent)


def test_no_oxts_no_pose(tmp_path):
    drive, _ = write_drive(tmp_path, [])
    with open_recording(drive) as rec:
        assert rec[0].pose is None and rec.pose_source.startswith("none (no OXTS packets")
    with open_recording(drive, require_pose=True) as rec, pytest.raises(PoseError, match="no pose"):
        rec[0]


# ----------------------------------------------------------------------------------------------- bad input


def test_bad_drive_files_are_one_line_errors(tmp_path):
    drive, _ = write_drive(tmp_path, [(49.0, 9.0, 100.0, 0, 0, 0)] * 3)
    packet = drive / "oxts" / "data" / "0000000001.txt"
    packet.write_text(" ".join(oxts_line(49.0, 9.0, 100.0, 0, 0, 0).split()[:29]) + "\n")
    with open_recording(drive) as rec, pytest.raises(FormatError, match="expected 30 OXTS values.*got 29"):
        rec[1]
    packet.write_text(oxts_line(49.0, "nan", 100.0, 0, 0, 0))
    with open_recording(drive) as rec, pytest.raises(FormatError, match="non-finite OXTS lon"):
        rec[1]
    packet.write_text(oxts_line(88.0, 9.0, 100.0, 0, 0, 0))
    with open_recording(drive) as rec, pytest.raises(FormatError, match="outside UTM"):
        rec[1]
    packet.write_text(oxts_line(49.0, 9.0, 100.0, 0, 0, 0))
    stamps = drive / "velodyne_points" / "timestamps.txt"
    stamps.write_text(STAMP0 + "\n")
    with pytest.raises(FormatError, match=r"1 times for scans numbered up to 2"):
        open_recording(drive)
    stamps.write_text("yesterday\n" * 3)
    with pytest.raises(FormatError, match=r"timestamps.txt:1: expected a time"):
        open_recording(drive)
    stamps.write_text((STAMP0 + "\n") * 3)
    (drive.parent / "calib_imu_to_velo.txt").write_text("R: 1 0 0\nT: 0 0 0\n")
    with pytest.raises(FormatError, match="expected 'R:' with 9 numbers"):
        open_recording(drive)
    (drive.parent / "calib_imu_to_velo.txt").write_text("R: 2 0 0 0 1 0 0 0 1\nT: 0 0 0\n")
    with pytest.raises(FormatError, match="not a rotation"):
        open_recording(drive)
    (drive.parent / "calib_imu_to_velo.txt").unlink()
    for f in (drive / "velodyne_points" / "data").iterdir():
        f.rename(f.with_suffix(".txt"))
    with pytest.raises(NoPointCloudError, match="text"):
        open_recording(drive)


def test_parsers_by_hand():
    assert parse_timestamp(STAMP0, where="x") == pytest.approx(T0, abs=1e-6)
    assert parse_timestamp("1970-01-01 00:00:01", where="x") == 1.0
    assert format_timestamp(T0)[:-3] == STAMP0[:-3]  # float64 seconds keep the time to a few hundred ns
    assert format_timestamp(1.5) == "1970-01-01 00:00:01.500000000"
    with pytest.raises(FormatError, match="valid date"):
        parse_timestamp("2011-13-26 13:02:25.1", where="x")
    v = parse_oxts_line(oxts_line(49.0, 8.4, 110.0, 0.1, 0.2, 0.3), where="x")
    assert v.shape == (30,) and v[3] == 0.1 and v[-1] == 4


def test_read_timestamps_blank_lines(tmp_path):
    p = tmp_path / "timestamps.txt"
    p.write_text(f"{STAMP0}\n\n{STAMP0}\n\n\n")
    t = read_timestamps(p)
    assert len(t) == 3 and np.isnan(t[1]) and t[2] == t[0]


# ----------------------------------------------------------------------------------------------- lidarmt info


def test_info_prints_the_drive_and_its_poses(tmp_path, capsys):
    drive, _ = write_drive(tmp_path, [(49.0, 9.0, 100.0, 0, 0, 0.5)] * 3)
    assert main(["info", str(drive)]) == 0
    out = capsys.readouterr().out
    assert "kitti-raw" in out and "UTM zone 32N" in out and "poses world ← sensor" in out
    assert main(["info", str(drive), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "kitti-raw" and d["frames_with_pose"] == 3 and len(d["extra"]["poses"]) == 3
    p = d["extra"]["poses"][2]
    assert p["frame"] == 2 and p["heading"] == pytest.approx(0.5, abs=0.02)  # 0.5 + the extrinsic's small yaw
    assert p["z"] == pytest.approx(100.0 + 0.8, abs=0.05)  # the velodyne is 0.8 m above the IMU


# ----------------------------------------------------------------------------------------------- properties


@st.composite
def drives(draw):
    """Frames with random UTM poses near KITTI (zone 32) and random attitudes, and a random extrinsic."""
    k = draw(st.integers(1, 3))
    frames = []
    for i in range(k):
        n = draw(st.integers(0, 20))
        xyz = np.array(draw(st.lists(st.floats(-80, 80, width=32), min_size=3 * n, max_size=3 * n)),
                       dtype=np.float32).reshape(n, 3)
        inten = np.array(draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)), dtype=np.float32)
        rpy = draw(st.tuples(st.floats(-0.3, 0.3), st.floats(-0.3, 0.3), st.floats(-3.1, 3.1)))
        e = draw(st.floats(300_000, 700_000))
        nn = draw(st.floats(5_300_000, 5_500_000))
        pose = np.eye(4)
        pose[:3, :3] = rpy_matrix(*rpy)
        pose[:3, 3] = (e, nn, draw(st.floats(-50, 3000)))
        frames.append(Frame(make_points(xyz, inten), pose, 1.3e9 + 0.1 * i, "velodyne64"))
    q = draw(st.tuples(*[st.floats(-1, 1)] * 3))
    ext = make_pose(draw(st.tuples(*[st.floats(-2, 2)] * 3)), [*q, 2.0])
    return frames, ext


@ROUND
@given(case=drives())
def test_drive_round_trip(case):
    frames, ext = case
    with scratch() as d:
        write_kitti_raw_drive(d / "2011_09_26" / "x_sync", frames, velo_from_imu=ext)
        with open_recording(d / "2011_09_26" / "x_sync", require_pose=True) as rec:
            got = list(rec)
    assert len(got) == len(frames)
    for g, f in zip(got, frames, strict=True):
        check_frame(g)
        for axis in "xyz":
            np.testing.assert_array_equal(g.points[axis], f.points[axis])
        np.testing.assert_allclose(g.points["intensity"], f.points["intensity"], rtol=1e-6, atol=1e-4)
        np.testing.assert_allclose(g.pose[:3, :3], f.pose[:3, :3], rtol=0, atol=1e-9)
        np.testing.assert_allclose(g.pose[:3, 3], f.pose[:3, 3], rtol=0, atol=1e-6)
        assert abs(g.stamp - f.stamp) < 1e-6


@ROUND
@given(t=st.floats(0, 4e9))
def test_timestamp_round_trip(t):
    assert abs(parse_timestamp(format_timestamp(t), where="x") - t) < 1e-6


@ROUND
@given(lat=st.floats(-79.9, 83.9), lon=st.floats(-180, 180), rpy=st.tuples(st.floats(-1.5, 1.5),
                                                                            st.floats(-1.5, 1.5), st.floats(-3.1, 3.1)))
def test_packet_pose_round_trip(lat, lon, rpy):
    zone = UtmZone.of(lat, lon)
    pose = zone.pose(np.array([lat, lon, 10.0, *rpy]))
    back = zone.packet(pose)
    np.testing.assert_allclose(back[:3], (lat, lon, 10.0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(zone.pose(np.array(back)), pose, rtol=0, atol=1e-6)


@DAMAGE
@given(which=st.sampled_from(["oxts", "stamps", "oxts_stamps", "calib", "scan"]), data=st.data())
def test_damaged_drive_reads_or_is_a_user_error(which, data):
    with scratch() as d:
        drive, _ = write_drive(d, [(49.0, 8.4, 100.0, 0.01, 0.02, 0.3)] * 3, scans=3, points=8)
        target = {"oxts": drive / "oxts" / "data" / "0000000001.txt",
                  "stamps": drive / "velodyne_points" / "timestamps.txt",
                  "oxts_stamps": drive / "oxts" / "timestamps.txt",
                  "calib": drive.parent / "calib_imu_to_velo.txt",
                  "scan": drive / "velodyne_points" / "data" / "0000000002.bin"}[which]
        raw = target.read_bytes()
        target.write_bytes(apply_damage(raw, data.draw(damage(len(raw)))))
        user_error_or_reads(d, lambda: exercise(drive))


# ----------------------------------------------------------------------------------------------- info wording
# (issue 11's `info` bullets; they sit here beside the reader that needs them, not in test_io_info.py)


def test_info_says_no_pose_as_roi_does(tmp_path, capsys):
    from lidarmt.io.kitti import KittiRecording

    (tmp_path / "velodyne").mkdir()
    np.zeros((5, 4), dtype="<f4").tofile(tmp_path / "velodyne" / "000000.bin")
    with KittiRecording(tmp_path) as rec:
        info = rec.describe()
    assert "identity" not in info.pose_source and info.pose_source.startswith("none")
    assert any(n.startswith("no pose (world <- sensor)") for n in info.notes)
    assert main(["info", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no pose (world <- sensor)" in out and "identity" not in out
    (tmp_path / "map.geojson").write_text(json.dumps({"type": "FeatureCollection", "frame": "world", "features": [
        {"type": "Feature", "properties": {"kind": "road"},
         "geometry": {"type": "Polygon", "coordinates": [[[0, -5], [50, -5], [50, 5], [0, 5], [0, -5]]]}}]}))
    rc = main(["roi", str(tmp_path), "--map", str(tmp_path / "map.geojson"), "--out", str(tmp_path.parent / f"{tmp_path.name}-r.png")])
    err = capsys.readouterr().err
    assert rc == 2 and "frame 0 has no pose (world <- sensor)" in err and "identity" not in err


def test_info_on_a_pcd_parent_folder_says_what_it_did_not_read(tmp_path, capsys):
    from lidarmt.io import write_pcd_folder
    from lidarmt.io._synthetic import synthetic_frames

    write_pcd_folder(tmp_path / "pcd", synthetic_frames(2, 20))
    write_pcd_folder(tmp_path / "pcd" / "drive_b", synthetic_frames(1, 20))
    assert main(["info", str(tmp_path / "pcd")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "read only the 2 .pcd file(s) at the top level" in out and "1 sub-folder(s)" in out and "drive_b/" in out
    assert main(["info", str(tmp_path / "pcd" / "drive_b")]) == 0
    assert "sub-folder" not in capsys.readouterr().out
    (tmp_path / "only").mkdir()
    (tmp_path / "pcd" / "drive_b").rename(tmp_path / "only" / "drive_b")
    assert main(["info", str(tmp_path / "only")]) == 2
    err = capsys.readouterr().err
    assert "holds no .pcd file itself but 1 sub-folder(s)" in err and "only/drive_b" in err
