"""KITTI raw tracklets as labels: the XML reader (and its refusals), boxes and per-point labels per frame, the
labelled region, `lidarmt info`, and a cross-check of the box -> point labels against SqueezeSeg's grids."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.errors import UserError
from lidarmt.io import open_recording
from lidarmt.io.errors import FormatError
from lidarmt.io.kitti_raw import KittiRawRecording
from lidarmt.io.tracklets import (
    POSE_DTYPE,
    Tracklet,
    TrackletLabels,
    parse_tracklets,
    points_in_boxes,
    read_tracklets,
    write_tracklets,
)
from lidarmt.types import BOX_DTYPE, MetaType, make_points

# the real calibration of 2011_09_26 (camera 2's view: -40.5 .. +39.8 deg)
VELO_TO_CAM = """R: 7.533745e-03 -9.999714e-01 -6.166020e-04 1.480249e-02 7.280733e-04 -9.998902e-01 9.998621e-01 7.523790e-03 1.480755e-02
T: -4.069766e-03 -7.631618e-02 -2.717806e-01
"""  # noqa: E501
CAM_TO_CAM = """S_rect_02: 1.242000e+03 3.750000e+02
R_rect_00: 9.999239e-01 9.837760e-03 -7.445048e-03 -9.869795e-03 9.999421e-01 -4.278459e-03 7.402527e-03 4.351614e-03 9.999631e-01
P_rect_02: 7.215377e+02 0.000000e+00 6.095593e+02 4.485728e+01 0.000000e+00 7.215377e+02 1.728540e+02 2.163791e-01 0.000000e+00 0.000000e+00 1.000000e+00 2.745884e-03
"""  # noqa: E501


def poses(*rows):
    """POSE_DTYPE rows (tx, ty, tz, rz, state)."""
    a = np.zeros(len(rows), dtype=POSE_DTYPE)
    for k, (tx, ty, tz, rz, state) in enumerate(rows):
        a[k] = (tx, ty, tz, 0.0, 0.0, rz, state, 0, 0)
    return a


def tiny_tracklets():
    return [
        # a car ahead, labelled in frames 0 and 1, yawed 90 degrees in frame 1
        Tracklet("Car", 1.5, 1.8, 4.0, 0, poses((10.0, 0.0, -1.7, 0.0, 2), (10.0, 0.0, -1.7, math.pi / 2, 1))),
        # a cyclist from frame 1 on; its pose in frame 2 is unset (state 0) and skipped
        Tracklet("Cyclist", 1.7, 0.6, 1.8, 1, poses((8.0, 3.0, -1.7, 0.0, 2), (8.0, 3.0, -1.7, 0.0, 0))),
        Tracklet("Tram", 3.5, 2.5, 20.0, 2, poses((30.0, -5.0, -1.7, 0.0, 2))),
        Tracklet("Van", 2.0, 2.0, 5.0, 0, poses((-15.0, 0.0, -1.7, 0.0, 2))),  # behind: outside the view
        Tracklet("DontCare", 1.0, 1.0, 1.0, 0, poses((5.0, 5.0, -1.7, 0.0, 2))),
    ]


def write_tiny_drive(root, tracklets=None, *, calib=True):
    """A KITTI raw drive written by hand: 3 scans of a few points, tracklets, and (optionally) the camera
    calibration in the date folder."""
    date = root / "2011_09_26"
    drive = date / "2011_09_26_drive_0001_sync"
    data = drive / "velodyne_points" / "data"
    data.mkdir(parents=True)
    pts = np.array([
        [10.0, 0.0, -1.0, 0.5],   # inside the car (both yaws)
        [11.9, 0.0, -1.0, 0.5],   # inside the car at yaw 0 only (1.9 m ahead of its centre)
        [10.0, 0.0, -0.1, 0.5],   # above the car's top (z -1.7 + 1.5 = -0.2)
        [8.0, 3.0, -1.0, 0.5],    # the cyclist
        [30.0, -5.0, 0.0, 0.5],   # the tram
        [-15.0, 0.0, -1.0, 0.5],  # the van, behind the sensor
        [5.0, 5.0, -1.5, 0.5],    # in the DontCare box: background
    ], dtype=np.float32)
    for k in range(3):
        pts.tofile(data / f"{k:010d}.bin")
    if calib:
        (date / "calib_velo_to_cam.txt").write_text(VELO_TO_CAM)
        (date / "calib_cam_to_cam.txt").write_text(CAM_TO_CAM)
    write_tracklets(drive / "tracklet_labels.xml", tiny_tracklets() if tracklets is None else tracklets)
    return drive


def test_tiny_drive_boxes_points_and_region(tmp_path):
    drive = write_tiny_drive(tmp_path)
    with KittiRawRecording(drive) as rec:
        f0, f1, f2 = rec[0], rec[1], rec[2]
    b0 = f0.labels.boxes
    assert b0.dtype == BOX_DTYPE
    assert sorted(b0["meta"].tolist()) == [MetaType.SMALLMOT, MetaType.SMALLMOT]  # car + van; DontCare skipped
    car = b0[b0["instance"] == 0][0]
    assert (car["cx"], car["cy"]) == (10.0, 0.0)
    assert car["cz"] == pytest.approx(-1.7 + 0.75)  # tz is the bottom; the box centre is at mid-height
    assert (car["length"], car["width"], car["height"]) == (4.0, 1.8, 1.5)
    assert f0.labels.point_instance.tolist() == [0, 0, -1, -1, -1, 3, -1]
    assert f0.labels.point_meta.tolist() == [1, 1, -1, -1, -1, 1, -1]
    # frame 1: the car turned 90 degrees (so 1.9 m ahead is outside its 1.8 m width), the cyclist appears
    assert f1.labels.point_instance.tolist() == [0, -1, -1, 1, -1, -1, -1]
    assert f1.labels.point_meta.tolist() == [1, -1, -1, MetaType.NONMOT, -1, -1, -1]
    # frame 2: the cyclist's pose is unset (skipped), the tram is UNKNOWN
    assert f2.labels.boxes["instance"].tolist() == [2]
    assert f2.labels.point_meta.tolist() == [-1, -1, -1, -1, MetaType.UNKNOWN, -1, -1]
    # the labelled region is camera 2's view: the van behind the sensor is outside it
    region = f0.labels.region
    assert region is not None
    assert math.degrees(region.azimuth_min) == pytest.approx(-40.5, abs=0.2)
    assert math.degrees(region.azimuth_max) == pytest.approx(39.8, abs=0.2)
    assert region.contains(f0.points).tolist() == [True, True, True, True, True, False, False]  # (5, 5): 45 deg


def test_without_camera_calibration_the_region_is_unknown(tmp_path, capsys):
    drive = write_tiny_drive(tmp_path, calib=False)
    with open_recording(drive) as rec:
        assert rec[0].labels.region is None
    assert main(["info", str(drive)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "labelled region unknown" in out and "every point counts as labelled" in out


def test_info_shows_the_labels(tmp_path, capsys):
    drive = write_tiny_drive(tmp_path)
    assert main(["info", str(drive)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "5 tracklets" in out and "car 2, cyclist 1, unknown 1" in out
    assert "5 boxes in 3 frames" in out  # car 2 + van 1 + cyclist 1 + tram 1
    assert "azimuth -40.5 to +39.8 deg" in out


def test_round_trip_and_summary():
    tr = tiny_tracklets()
    from lidarmt.io.tracklets import format_tracklets

    back = parse_tracklets(format_tracklets(tr).encode())
    assert [t.object_type for t in back] == [t.object_type for t in tr]
    for a, b in zip(back, tr, strict=True):
        assert (a.h, a.w, a.l, a.first_frame) == (b.h, b.w, b.l, b.first_frame)
        assert np.array_equal(a.poses, b.poses)
    labels = TrackletLabels(back)
    assert labels.box_count == 5 and len(labels.boxes(7)) == 0


def test_point_in_two_boxes_takes_the_smaller():
    boxes = np.array([(0, 0, 0, 10, 10, 4, 0, 1, 7), (0, 0, 0, 1, 1, 2, 0, 4, 8)], dtype=BOX_DTYPE)
    pts = make_points(np.array([[0.1, 0.1, 0.0], [3.0, 3.0, 0.0], [6.0, 0.0, 0.0]], dtype=np.float32))
    inst, meta = points_in_boxes(pts, boxes)
    assert inst.tolist() == [8, 7, -1] and meta.tolist() == [4, 1, -1]


GOOD_HEAD = b'<?xml version="1.0"?>\n<!DOCTYPE boost_serialization>\n<boost_serialization>'


@pytest.mark.parametrize("body, message", [
    (b"<tracklets><count>1</count>", "not well-formed XML"),
    (b'<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><tracklets>&b;</tracklets>', "DTD entities"),
    (GOOD_HEAD + b"<tracklets><count>999999999</count></tracklets></boost_serialization>", "outside 0..100000"),
    (GOOD_HEAD + b"<tracklets><count>3</count><item/></tracklets></boost_serialization>",
     "says 3 items but 1"),
    (GOOD_HEAD + b"<foo/></boost_serialization>", "no <tracklets>"),
    (GOOD_HEAD + b"<tracklets><count>1</count><item><objectType>Car</objectType><h>nan</h><w>1</w><l>1</l>"
     b"<first_frame>0</first_frame><poses><count>0</count></poses></item></tracklets></boost_serialization>",
     "not finite"),
    (GOOD_HEAD + b"<tracklets><count>1</count><item><objectType>Car</objectType><h>1</h><w>1</w><l>1e9</l>"
     b"<first_frame>0</first_frame><poses><count>0</count></poses></item></tracklets></boost_serialization>",
     "not a box side"),
    (GOOD_HEAD + b"<tracklets><count>1</count><item><objectType>Car</objectType><h>1</h><w>1</w><l>1</l>"
     b"<first_frame>0</first_frame><poses><count>2000000000</count></poses></item></tracklets>"
     b"</boost_serialization>", "outside 0..10000000"),
])
def test_hostile_xml_is_refused_in_one_line(tmp_path, capsys, body, message):
    with pytest.raises(FormatError, match=message) as exc:
        parse_tracklets(body)
    assert "\n" not in str(exc.value)
    # the same file beside a drive: `lidarmt info` prints one line and exits 2
    drive = write_tiny_drive(tmp_path)
    (drive / "tracklet_labels.xml").write_bytes(body)
    with pytest.raises(UserError):
        KittiRawRecording(drive)
    assert main(["info", str(drive)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tracklet_labels.xml" in err and "Traceback" not in err


def test_too_large_a_file_is_refused_before_reading(tmp_path, monkeypatch):
    import lidarmt.io.tracklets as t

    path = tmp_path / "tracklet_labels.xml"
    write_tracklets(path, tiny_tracklets())
    monkeypatch.setattr(t, "MAX_BYTES", 100)
    with pytest.raises(FormatError, match="more than the 100"):
        read_tracklets(path)


# ----------------------------------------------------------------------------------------------- real data


SQUEEZESEG_CLASS = {MetaType.SMALLMOT: 1, MetaType.BIGMOT: 1, MetaType.PEDESTRIAN: 2, MetaType.NONMOT: 3}


@pytest.mark.parametrize("scan", [10, 30, 40, 50])
def test_point_labels_agree_with_squeezeseg(shared_data, scan):
    """SqueezeSeg's authors converted the same tracklets to per-point labels on a 64x512 front-view grid
    (+-45 deg): every valid grid point is a point of the .bin; its class must be ours."""
    drive = shared_data / "kitti_raw" / "2011_09_26" / "2011_09_26_drive_0001_sync"
    grid = np.load(shared_data / "kitti_raw" / "squeezeseg" / f"2011_09_26_0001_{scan:010d}.npy")
    g = grid.reshape(-1, 6)
    g = g[g[:, 4] > 0]  # valid cells (range > 0)
    with KittiRawRecording(drive) as rec:
        frame = rec[scan]
    p = frame.points
    ours_xyz = np.ascontiguousarray(np.c_[p["x"], p["y"], p["z"]].astype(np.float32)).view("V12").ravel()
    theirs_xyz = np.ascontiguousarray(g[:, :3].astype(np.float32)).view("V12").ravel()
    order = np.argsort(ours_xyz)
    pos = np.searchsorted(ours_xyz[order], theirs_xyz)
    pos = np.clip(pos, 0, len(order) - 1)
    idx = order[pos]
    assert np.array_equal(ours_xyz[idx], theirs_xyz)  # every grid point is a point of the sweep
    meta = frame.labels.point_meta[idx]
    ours = np.zeros(len(idx), dtype=np.int64)
    for m, c in SQUEEZESEG_CLASS.items():
        ours[meta == m] = c
    theirs = g[:, 5].astype(np.int64)
    assert (theirs > 0).sum() > 1000  # the frames hold cars (and cyclists in 40, 50)
    agree = (ours == theirs).mean()
    assert agree >= 0.999, f"agreement {agree:.5f}"
    for c in (1, 2, 3):
        both = ((ours == c) & (theirs == c)).sum()
        assert both >= 0.99 * (theirs == c).sum() and both >= 0.99 * (ours == c).sum()
    # the grid (+-45 deg, one point per cell) covers camera 2's view: every object we label in the view with
    # 20+ points is in the grid too
    inst = frame.labels.point_instance
    in_view = frame.labels.region.contains(p) & (inst >= 0)
    ids, counts = np.unique(inst[in_view], return_counts=True)
    assert set(ids[counts >= 20].tolist()) <= set(inst[idx][inst[idx] >= 0].tolist())
