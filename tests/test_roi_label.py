"""The label ROI (issue 11): the area a frame's ground labels cover, as an Apollo bitmap, for every command."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.roi.bitmap import RoiMask
from lidarmt.lidar.roi.errors import RoiArgumentError
from lidarmt.lidar.roi.query import GROUND_LABELS, LabelRoi, label_roi
from lidarmt.types import Frame, Labels, make_points


def street(seed: int = 0) -> tuple[Frame, dict[str, slice]]:
    """A road strip (|y| < 4 m, 0 < x < 30 m) labelled road, with a car standing on it (hiding the road under it),
    a sidewalk (other-ground) beside it, and a house off the road."""
    rng = np.random.default_rng(seed)
    road = np.c_[rng.uniform(0, 30, 20000), rng.uniform(-4, 4, 20000), np.full(20000, -1.7)]
    road = road[~((np.abs(road[:, 0] - 15) < 2.5) & (np.abs(road[:, 1]) < 1.2))]
    walk = np.c_[rng.uniform(0, 30, 3000), rng.uniform(4, 6, 3000), np.full(3000, -1.5)]
    car = np.c_[rng.uniform(13, 17, 400), rng.uniform(-1, 1, 400), rng.uniform(-1.5, 0, 400)]
    house = np.c_[rng.uniform(5, 10, 300), rng.uniform(12, 15, 300), rng.uniform(-1.7, 3, 300)]
    xyz = np.concatenate([road, walk, car, house])
    sem = np.r_[np.full(len(road), 40), np.full(len(walk), 49), np.full(len(car), 10), np.full(len(house), 50)]
    sem = sem.astype(np.int32) | (7 << 16)  # an instance id in the upper bits is ignored (int32, as the readers)
    k = np.cumsum([0, len(road), len(walk), len(car), len(house)])
    parts = {name: slice(k[i], k[i + 1]) for i, name in enumerate(("road", "walk", "car", "house"))}
    return Frame(make_points(xyz, 10.0), labels=Labels(point_semantic=sem)), parts


def test_from_grid_round_trips_and_looks_up_like_apollo():
    rng = np.random.default_rng(1)
    grid = rng.random((80, 80)) < 0.3
    mask = RoiMask.from_grid(grid, range=10.0, cell=0.25)
    assert np.array_equal(mask.grid(), grid) and mask.n_cells == grid.sum()
    xy = rng.uniform(-11, 11, size=(5000, 2))
    ix, iy = np.floor((xy[:, 0] + 10) / 0.25).astype(int), np.floor((xy[:, 1] + 10) / 0.25).astype(int)
    inside = (np.abs(xy) < 10).all(axis=1)
    want = np.zeros(len(xy), dtype=bool)
    want[inside] = grid[ix[inside], iy[inside]]
    assert np.array_equal(mask.contains(xy), want)
    with pytest.raises(RoiArgumentError, match="80x80"):
        RoiMask.from_grid(grid[:10], range=10.0, cell=0.25)


def test_the_car_on_the_road_is_inside_and_the_house_is_not():
    frame, part = street()
    mask = LabelRoi().mask(frame)
    inside = mask.contains(frame.points)
    assert inside[part["road"]].mean() > 0.99 and inside[part["walk"]].mean() > 0.99  # 49 other-ground counts
    assert inside[part["car"]].all()  # above the (hidden) road: inside, whatever its own label
    assert not inside[part["house"]].any()
    assert set(mask.indices(frame)) >= set(range(part["car"].start, part["car"].stop))
    # membership is by position only: a point added above the road at any height is inside, one off it is not
    extra = make_points(np.array([[15.0, 0.0, 2.5], [15.0, 0.0, -3.0], [20.0, 30.0, 0.0]]), 5.0)
    follow = frame.with_extra_points(extra)
    got = mask.contains(follow.points[len(frame):])
    assert got.tolist() == [True, True, False]
    assert np.array_equal(label_roi(frame).bitmap, mask.bitmap)  # a function of the labelled frame alone


def test_only_ground_ids_make_the_area():
    frame, part = street()
    assert 10 not in GROUND_LABELS and 50 not in GROUND_LABELS
    road_only = LabelRoi(ids=(40,)).mask(frame)
    assert not road_only.contains(frame.points[part["walk"]]).all()


def test_labels_beyond_the_range_are_ignored_and_empty_rois_say_why():
    frame, _ = street()
    small = LabelRoi(range=5.0).mask(frame)
    assert small.contains(np.array([[2.0, 0.0]])).tolist() == [True]
    assert not small.contains(np.array([[20.0, 0.0]])).any()
    far = Frame(make_points(np.array([[200.0, 0.0, -1.7]] * 3), 1.0),
                labels=Labels(point_semantic=np.full(3, 40, dtype=np.uint32)))
    empty = LabelRoi().mask(far)
    assert empty.empty and "no point labelled as ground" in empty.note


def test_a_frame_without_labels_is_refused_in_one_line():
    frame = Frame(make_points(np.zeros((4, 3)), 1.0))
    with pytest.raises(RoiArgumentError, match="no per-point ground labels") as err:
        LabelRoi().mask(frame)
    assert "\n" not in str(err.value)
    with pytest.raises(RoiArgumentError, match="close_radius"):
        LabelRoi(close_radius=-1)


def test_evaluate_uses_the_same_roi():
    from lidarmt.lidar.perception.apollo.evaluate import kitti_roi, labelled_area

    frame, _ = street()
    assert np.array_equal(kitti_roi(frame).bitmap, LabelRoi().mask(frame).bitmap)
    assert np.array_equal(labelled_area(frame), LabelRoi().mask(frame).contains(frame.points))


def test_the_shipped_example_geojson_roi_is_a_sensor_frame_map():
    from pathlib import Path

    from lidarmt.lidar.roi import load_map
    from lidarmt.lidar.roi.query import SensorPolygonRoi

    path = Path(__file__).resolve().parents[1] / "examples" / "roi-sensor.geojson"
    hd = load_map(path)
    assert hd.frame == "sensor" and len(hd.roads) == 4 and len(hd.junctions) == 1
    mask = SensorPolygonRoi(hd).mask()
    # the street ahead and behind, the junction and the cross street are in; the corner lots are not
    pts = np.array([[0.0, 0.0], [-50.0, 3.0], [25.0, 0.0], [25.0, 40.0], [10.0, 10.0], [40.0, -20.0]])
    assert mask.contains(pts).tolist() == [True, True, True, True, False, False]


@pytest.mark.realdata
@pytest.mark.slow
def test_perceive_on_a_real_kitti_frame_builds_obstacles_from_car_points(kitti_dir, capsys):
    """Issue 11: with the labels as the ROI, perceive built every obstacle from ground points and none from the
    1,000+ car points. With the label area, the cars on labelled ground are in the ROI and in obstacles (cars
    parked beyond the labelled ground are not: 67 % of the car points of frame 0 are in it)."""
    import json

    from lidarmt.cli import main
    from lidarmt.io import open_recording

    assert main(["perceive", str(kitti_dir), "--roi", "labels", "--json", "--points", "--cold"]) == 0
    doc = json.loads(capsys.readouterr().out)
    with open_recording(kitti_dir) as rec:
        frame = rec[0]
    sem = np.asarray(frame.labels.point_semantic) & 0xFFFF
    cars = np.flatnonzero(sem == 10)
    roi = LabelRoi().mask(frame)
    assert roi.contains(frame.points[cars]).mean() > 0.5 and doc["roi_points"] == len(roi.indices(frame))
    held = np.concatenate([o["point_indices"] for o in doc["obstacles"]])
    assert np.isin(cars, held).sum() > 0.3 * len(cars)
    assert np.isin(sem[held], GROUND_LABELS).mean() < 0.5


@pytest.mark.slow
def test_roi_command_draws_the_label_roi(tmp_path, capsys):
    from lidarmt.cli import main
    from lidarmt.io.npzdir import write_npz_folder

    frame, part = street()
    write_npz_folder(tmp_path / "rec", [frame])
    for i, extra in enumerate(([], ["--roi", "labels"])):
        out = tmp_path / f"roi{i}.png"
        assert main(["roi", str(tmp_path / "rec"), "--out", str(out), *extra]) == 0
        text = capsys.readouterr().out
        inside = len(frame) - (part["house"].stop - part["house"].start)
        assert f"points in ROI: {inside:,} / {len(frame):,}" in text and "ground labels" in text
        assert out.read_bytes()[:4] == b"\x89PNG"
    write_npz_folder(tmp_path / "bare", [Frame(make_points(np.zeros((3, 3)), 1.0))])
    assert main(["roi", str(tmp_path / "bare"), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "no per-point ground labels" in err and "--map" in err and len(err.strip().splitlines()) == 1
