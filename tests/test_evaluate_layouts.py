"""Issue 19: one evaluation path for every labelled layout (KITTI object, KITTI raw tracklets, SemanticKITTI point
labels, the simulator's boxes), the labelled region, the range cut, and `lidarmt evaluate` on each layout."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lidarmt.io import open_recording
from lidarmt.io.semantickitti import fit_box, instance_labels, write_semantickitti_sequence
from lidarmt.lidar.perception.apollo.evaluate import (
    LABEL_MATCH_RULE,
    MATCHING_RULE,
    GridRoi,
    evaluate_frames,
    frame_ground_truth,
    label_lost,
    rect_corners,
)
from lidarmt.types import (
    BOX_DTYPE,
    Frame,
    LabelledRegion,
    Labels,
    MetaType,
    Obstacle,
    ObstacleClass,
    Obstacles,
    Provenance,
    make_points,
)

# the real calibration of a KITTI object frame (camera 2's view: -40.5 .. +39.8 deg)
KITTI_CALIB = """P0: 7.215377e+02 0 6.095593e+02 0 0 7.215377e+02 1.728540e+02 0 0 0 1 0
P2: 7.215377e+02 0.000000e+00 6.095593e+02 4.485728e+01 0.000000e+00 7.215377e+02 1.728540e+02 2.163791e-01 0.000000e+00 0.000000e+00 1.000000e+00 2.745884e-03
R0_rect: 9.999239e-01 9.837760e-03 -7.445048e-03 -9.869795e-03 9.999421e-01 -4.278459e-03 7.402527e-03 4.351614e-03 9.999631e-01
Tr_velo_to_cam: 7.533745e-03 -9.999714e-01 -6.166020e-04 -4.069766e-03 1.480249e-02 7.280733e-04 -9.998902e-01 -7.631618e-02 9.998621e-01 7.523790e-03 1.480755e-02 -2.717806e-01
"""  # noqa: E501
SECTOR = LabelledRegion(math.radians(-40.5), math.radians(39.8), None, "test")


def detection(cls: ObstacleClass, cx: float, cy: float, length: float = 4.0, width: float = 1.8, yaw: float = 0.0,
              score: float = 0.9) -> Obstacle:
    corners = rect_corners(cx, cy, length, width, yaw)
    return Obstacle(cls, score, np.zeros(0, dtype=np.int64), np.array([cx, cy, -1.7]), length, width, 1.5,
                    np.array([math.cos(yaw), math.sin(yaw), 0.0]), np.c_[corners, np.full(4, -1.7)])


class Fixed:
    """A perception module that returns the same detections for every frame."""

    name = "fixed"

    def __init__(self, dets: list[Obstacle]) -> None:
        self.dets = dets

    def detect(self, frame, roi) -> Obstacles:
        return Obstacles(list(self.dets))


def cloud_frame(cars: list[tuple[float, float]], *, region=None, fmt="kitti") -> Frame:
    """50 points in each 4 x 1.8 m car box, a little ground; boxes labelled, ``region`` as given."""
    rng = np.random.default_rng(0)
    parts = [np.c_[rng.uniform(-50, 50, (400, 2)), np.full(400, -1.7)]]
    rows = []
    for k, (cx, cy) in enumerate(cars):
        parts.append(np.c_[rng.uniform([cx - 1.9, cy - 0.8], [cx + 1.9, cy + 0.8], (50, 2)), rng.uniform(-1.5, -0.4, 50)])
        rows.append((cx, cy, -0.95, 4.0, 1.8, 1.5, 0.0, int(MetaType.SMALLMOT), k))
    pts = make_points(np.concatenate(parts).astype(np.float32), 10.0)
    labels = Labels(np.array(rows, dtype=BOX_DTYPE), region=region)
    return Frame(pts, provenance=Provenance("test", fmt, 0), labels=labels)


# ----------------------------------------------------------------------------------------------- the region


def test_the_labelled_region_decides_what_counts():
    front, behind = (15.0, 0.0), (-15.0, 0.0)
    dets = [detection(ObstacleClass.CAR, *front), detection(ObstacleClass.CAR, *behind),  # both match a label
            detection(ObstacleClass.CAR, 0.0, -20.0),  # junk beside the car: outside the camera view
            detection(ObstacleClass.CAR, 25.0, 5.0),  # junk ahead: a false positive
            detection(ObstacleClass.UNKNOWN, 20.0, -5.0)]  # KITTI labels no unknown objects
    frame = cloud_frame([front, behind], region=SECTOR)
    res = evaluate_frames("t", [frame], Fixed(dets), lambda f: GridRoi())
    car = res.counts[ObstacleClass.CAR]
    assert (car.gt, car.tp, car.fp, car.fn) == (1, 1, 1, 0)  # the car behind and the junk beside: not counted
    assert res.counts[ObstacleClass.UNKNOWN].fp == 0
    area = res.to_dict()["evaluated_area"]
    assert "azimuth -40.5 to +39.8 deg" in area["description"] and area["frames_without_region"] == 0
    assert not area["unknown_detections_counted"] and res.to_dict()["matching"] == MATCHING_RULE
    # the same frame labelled all around (the simulator): everything counts
    sim = cloud_frame([front, behind], region=None, fmt="sim")
    res = evaluate_frames("t", [sim], Fixed(dets), lambda f: GridRoi())
    car = res.counts[ObstacleClass.CAR]
    assert (car.gt, car.tp, car.fp, car.fn) == (2, 2, 2, 0) and res.counts[ObstacleClass.UNKNOWN].fp == 1
    assert "the whole sweep" in res.area()["description"]
    # a KITTI frame without a region (no P2 in its calibration) falls back to the forward sector
    res = evaluate_frames("t", [cloud_frame([front, behind])], Fixed(dets), lambda f: GridRoi(), fov_deg=82.0)
    assert res.counts[ObstacleClass.CAR].gt == 1 and "forward 82 deg sector" in res.area()["description"]


def test_max_range_cuts_ground_truth_and_detections():
    frame = cloud_frame([(20.0, 0.0), (45.0, 0.0)], region=SECTOR)
    dets = [detection(ObstacleClass.CAR, 45.0, 0.0), detection(ObstacleClass.CAR, 50.0, 10.0)]
    res = evaluate_frames("t", [frame], Fixed(dets), lambda f: GridRoi(), max_range=40.0)
    car = res.counts[ObstacleClass.CAR]
    assert (car.gt, car.tp, car.fp, car.fn) == (1, 0, 0, 1)  # the car at 45 m and both detections are beyond
    assert "within 40 m" in res.area()["description"] and res.to_dict()["evaluated_area"]["max_range_m"] == 40.0
    gts = frame_ground_truth(frame, GridRoi(), max_range=None)
    assert [g.ignored for g in gts] == [False, False]


# ----------------------------------------------------------------------------------------------- KITTI object


def write_kitti_object(root, *, road: bool = False):
    """A KITTI object folder by hand: one scan with a car 15 m ahead (label_2 + calib with P2)."""
    for sub in ("velodyne", "label_2", "calib"):
        (root / sub).mkdir(parents=True)
    frame = cloud_frame([(15.0, 0.0)])
    raw = np.c_[frame.points["x"], frame.points["y"], frame.points["z"], np.full(len(frame), 0.1)].astype("<f4")
    raw.tofile(root / "velodyne" / "000000.bin")
    (root / "calib" / "000000.txt").write_text(KITTI_CALIB)
    from lidarmt.io.kitti import read_calib, velo_to_rect

    # the label's bottom centre in the rectified camera frame; rotation_y -pi/2 is yaw 0 (along +x)
    x, y, z, _ = velo_to_rect(read_calib(root / "calib" / "000000.txt"), "calib") @ np.array([15.0, 0.0, -1.7, 1.0])
    (root / "label_2" / "000000.txt").write_text(
        f"Car 0.00 0 0.0 500 150 700 250 1.50 1.80 4.00 {x:.4f} {y:.4f} {z:.4f} {-math.pi / 2:.6f}\n"
        "DontCare -1 -1 -10 0 0 10 10 -1 -1 -1 -1000 -1000 -1000 -10\n")
    if road:
        (root / "road_label").mkdir()
        sem = np.where(frame.points["z"] < -1.6, 40, 10).astype("<u4")
        sem.tofile(root / "road_label" / "000000.label")
    return root


def test_kitti_object_frames_carry_camera_2s_view(tmp_path):
    root = write_kitti_object(tmp_path / "training")
    f = open_recording(root)[0]
    region = f.labels.region
    assert region is not None and "calib/000000.txt" in region.source
    assert math.degrees(region.azimuth_min) == pytest.approx(-40.5, abs=0.2)
    assert math.degrees(region.azimuth_max) == pytest.approx(39.8, abs=0.2)
    (car,) = f.labels.boxes
    assert (car["cx"], car["cy"]) == pytest.approx((15.0, 0.0), abs=0.05)
    # a calibration without P2 gives no region (the forward sector is then used), never a refusal
    (root / "calib" / "000000.txt").write_text("\n".join(KITTI_CALIB.splitlines()[2:]) + "\n")
    assert open_recording(root)[0].labels.region is None


# ----------------------------------------------------------------------------------------------- SemanticKITTI


def test_fit_box_is_the_minimum_area_rectangle():
    rng = np.random.default_rng(3)
    yaw = math.radians(30)
    local = rng.uniform([-2.2, -0.9], [2.2, 0.9], (400, 2))
    local[:4] = [[-2.2, -0.9], [2.2, -0.9], [2.2, 0.9], [-2.2, 0.9]]
    c, s = math.cos(yaw), math.sin(yaw)
    xy = local @ np.array([[c, s], [-s, c]]) + [12.0, -3.0]
    cx, cy, cz, length, width, height, got = fit_box(xy[:, 0], xy[:, 1], np.linspace(-1.7, -0.2, 400))
    assert (cx, cy, cz) == pytest.approx((12.0, -3.0, -0.95), abs=1e-6)
    assert (length, width, height) == pytest.approx((4.4, 1.8, 1.5), abs=1e-6)
    assert math.sin(2 * (got - yaw)) == pytest.approx(0.0, abs=1e-6)  # along the long side (either way)
    assert fit_box(np.array([1.0]), np.array([2.0]), np.array([0.0]))[:2] == (1.0, 2.0)  # one point: no crash


def semantic_frame() -> Frame:
    """Ground (road 40) and two instances: a car (class 10, instance 0) and a person (30, instance 1), plus a
    car-class point without an instance id (not an object), as a SemanticKITTI writer would label them."""
    rng = np.random.default_rng(5)
    ground = np.c_[rng.uniform(-30, 30, (600, 2)), np.full(600, -1.7)]
    car = np.c_[rng.uniform([8, -1], [12, 1], (80, 2)), rng.uniform(-1.5, -0.3, 80)]
    person = np.c_[rng.uniform([-6.3, 4.7], [-5.7, 5.3], (20, 2)), rng.uniform(-1.6, 0.0, 20)]
    stray = np.array([[20.0, 20.0, -1.0]])
    pts = make_points(np.concatenate([ground, car, person, stray]).astype(np.float32), 20.0)
    sem = np.r_[np.full(600, 40), np.full(80, 10), np.full(20, 30), [10]].astype(np.int32)
    inst = np.r_[np.full(600, -1), np.full(80, 0), np.full(20, 1), [-1]].astype(np.int32)
    return Frame(pts, labels=Labels(point_semantic=sem, point_instance=inst))


def test_semantickitti_instances_are_objects_with_boxes(tmp_path):
    write_semantickitti_sequence(tmp_path / "08", [semantic_frame()], tr=np.eye(4)[:3])
    raw = np.fromfile(tmp_path / "08" / "labels" / "000000.label", dtype="<u4")
    assert (raw[600] >> 16, raw[600] & 0xFFFF, raw[-1] >> 16) == (1, 10, 0)  # instance k written as id k + 1
    f = open_recording(tmp_path / "08")[0]
    lb = f.labels
    assert lb.region is None and len(lb.boxes) == 2
    by_meta = {int(b["meta"]): b for b in lb.boxes}
    car, person = by_meta[int(MetaType.SMALLMOT)], by_meta[int(MetaType.PEDESTRIAN)]
    assert (car["cx"], car["cy"]) == pytest.approx((10.0, 0.0), abs=0.15) and car["length"] == pytest.approx(4, abs=0.2)
    assert np.count_nonzero(lb.point_instance == car["instance"]) == 80
    assert np.count_nonzero(lb.point_instance == person["instance"]) == 20
    assert lb.point_meta[-1] == -1 and lb.point_instance[-1] == -1  # the stray car point has no instance id
    np.testing.assert_array_equal(lb.point_semantic[:600], 40)
    # evaluated as the simulator's objects: both count (they were 0 before), unknown detections are no FP
    dets = [detection(ObstacleClass.CAR, 10.0, 0.0), detection(ObstacleClass.UNKNOWN, -20.0, 0.0)]
    res = evaluate_frames("t", [f], Fixed(dets), lambda fr: GridRoi())
    assert (res.counts[ObstacleClass.CAR].gt, res.counts[ObstacleClass.CAR].tp) == (1, 1)
    assert res.counts[ObstacleClass.PEDESTRIAN].gt == 1 and res.counts[ObstacleClass.UNKNOWN].fp == 0
    boxes, point_instance, _meta = instance_labels(f.points, raw[np.r_[0:len(raw)]])
    assert len(boxes) == 2 and (point_instance >= 0).sum() == 100


# ----------------------------------------------------------------------------------------------- lost obstacles


def test_lost_obstacles_are_told_apart_by_the_labels():
    frame = cloud_frame([(15.0, 0.0), (-15.0, 0.0)], region=SECTOR)
    obs = Obstacles([detection(ObstacleClass.CAR, 15.5, 0.2, 3.0, 1.6),  # most of the labelled car
                     detection(ObstacleClass.PEDESTRIAN, 25.0, 3.0, 0.5, 0.5),  # junk in the view
                     detection(ObstacleClass.CAR, -15.0, 0.0),  # the car behind: not labelled there
                     detection(ObstacleClass.CAR, 13.0, 0.0, 0.4, 0.3)])  # a sliver of the car: IoU < 0.1
    got = label_lost(frame, obs, range(4))
    assert got[0]["label"] == "labelled" and got[0]["label_class"] == "car" and got[0]["label_iou"] > 0.5
    assert got[1] == {"label": "unlabelled"} and got[2] == {"label": "outside"}
    assert got[3] == {"label": "unlabelled"}
    assert "IoU >= 0.1" in LABEL_MATCH_RULE
    # road labels alone say nothing of the objects: not known
    bare = Frame(frame.points, labels=Labels(point_semantic=np.zeros(len(frame), dtype=np.int32)))
    assert label_lost(bare, obs, range(4)) is None
    # a KITTI frame whose label file lists nothing: everything in view is junk
    empty = Frame(frame.points, labels=Labels(region=SECTOR))
    assert label_lost(empty, obs, [0])[0] == {"label": "unlabelled"}


# ----------------------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def w64(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from lidarmt.lidar.perception.apollo.network import build_network

    path = tmp_path_factory.mktemp("w") / "w64.pt"
    torch.save(build_network(64, seed=0).state_dict(), path)
    return path


def run_evaluate(capsys, w64, out, *args) -> dict:
    from lidarmt.cli import main

    assert main(["evaluate", *args, "--weights", str(w64), "--grid", "64", "--out", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


@pytest.mark.slow
def test_evaluate_a_kitti_object_folder_without_road_labels(tmp_path, capsys, w64):
    from lidarmt.cli import main

    root = write_kitti_object(tmp_path / "training")
    d = run_evaluate(capsys, w64, tmp_path / "e.json", "--kitti", str(root), "--max-range", "40")
    (res,) = d["results"]  # refused before: no road_label/; now the labelled view without a ROI
    assert "whole-grid" in res["name"] and res["classes"]["car"]["gt"] == 1
    assert "azimuth -40.5 to +39.8 deg" in res["evaluated_area"]["description"]
    assert d["max_range_m"] == 40.0 and d["matching"] == MATCHING_RULE
    assert main(["evaluate", "--kitti", str(root), "--roi", "labels", "--weights", str(w64), "--grid", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "road labels" in err and "--roi grid" in err
    # with road labels: the road-label ROI and the whole grid, as before
    root2 = write_kitti_object(tmp_path / "with_road" / "training", road=True)
    d = run_evaluate(capsys, w64, tmp_path / "e2.json", "--kitti", str(root2))
    assert [("road-label" in r["name"], "whole-grid" in r["name"]) for r in d["results"]] == [(True, False),
                                                                                              (False, True)]


def test_evaluate_a_semantickitti_sequence_counts_its_instances(tmp_path, capsys, w64):
    write_semantickitti_sequence(tmp_path / "08", [semantic_frame()], tr=np.eye(4)[:3])
    d = run_evaluate(capsys, w64, tmp_path / "e.json", "--data", str(tmp_path / "08"))
    grid = next(r for r in d["results"] if "whole-grid" in r["name"])
    assert grid["classes"]["car"]["gt"] == 1 and grid["classes"]["pedestrian"]["gt"] == 1
    assert "the whole sweep" in grid["evaluated_area"]["description"]


def test_evaluate_a_kitti_raw_drive_with_its_tracklets(tmp_path, capsys, w64):
    from test_io_tracklets import write_tiny_drive

    drive = write_tiny_drive(tmp_path)
    d = run_evaluate(capsys, w64, tmp_path / "e.json", "--data", str(drive), "--min-points", "1")
    (res,) = d["results"]  # no road labels: the labelled view without a ROI
    c = res["classes"]
    # the car (frames 0, 1), the cyclist (frame 1), the tram (unknown, frame 2); the van behind is outside the view
    assert (c["car"]["gt"], c["cyclist"]["gt"], c["unknown"]["gt"]) == (2, 1, 1)
    assert "azimuth -40.5 to +39.8 deg" in res["evaluated_area"]["description"]


def test_bev_draws_the_labelled_boxes_and_region(tmp_path):
    from lidarmt.lidar.bev import draw_bev

    frame = cloud_frame([(15.0, 0.0), (-15.0, 0.0)], region=SECTOR)
    with_labels = draw_bev(frame, [detection(ObstacleClass.CAR, 15.0, 0.0)], out=tmp_path / "a.png", extent=30.0)
    without = draw_bev(frame, [detection(ObstacleClass.CAR, 15.0, 0.0)], out=tmp_path / "b.png", extent=30.0,
                       show_labels=False)
    assert with_labels.read_bytes()[:4] == b"\x89PNG" and with_labels.read_bytes() != without.read_bytes()


def test_npz_frames_keep_the_labelled_region(tmp_path):
    import json as _json
    import zipfile

    from lidarmt.errors import InputError
    from lidarmt.io.npz import load_frame_npz, save_frame_npz

    save_frame_npz(tmp_path / "a.npz", cloud_frame([(15.0, 0.0)], region=SECTOR))
    assert load_frame_npz(tmp_path / "a.npz").labels.region == SECTOR  # bundles' source.npz: --roi labels replays
    save_frame_npz(tmp_path / "b.npz", cloud_frame([(15.0, 0.0)]))
    assert load_frame_npz(tmp_path / "b.npz").labels.region is None
    # a hostile region is refused in one line, not trusted
    with zipfile.ZipFile(tmp_path / "a.npz") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    import io as _io

    meta = json.loads(np.load(_io.BytesIO(members["meta.npy"])).tobytes())
    meta["region"]["azimuth_max"] = float("nan")
    buf = _io.BytesIO()
    np.save(buf, np.frombuffer(_json.dumps(meta).encode(), dtype=np.uint8))
    members["meta.npy"] = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "c.npz", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(InputError, match="corrupt 'region'"):
        load_frame_npz(tmp_path / "c.npz")
