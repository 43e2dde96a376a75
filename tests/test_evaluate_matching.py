"""Evaluation: rotated BEV IoU and the matching rule on hand-made boxes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lidarmt.lidar.perception.apollo.evaluate import (
    GroundTruth,
    bev_iou,
    box_polygon,
    evaluate_frames,
    frame_ground_truth,
    in_fov,
    match_frame,
    obstacle_polygon,
)
from lidarmt.types import BOX_DTYPE, Frame, Labels, MetaType, Obstacle, ObstacleClass, Obstacles, make_points

CAR, PED = ObstacleClass.CAR, ObstacleClass.PEDESTRIAN


def _box(cx, cy, length, width, yaw, meta=MetaType.SMALLMOT, instance=0, cz=-1.0, h=1.5):
    b = np.zeros(1, dtype=BOX_DTYPE)
    b[0] = (cx, cy, cz, length, width, h, yaw, int(meta), instance)
    return b[0]


def _obstacle(cx, cy, length, width, yaw, cls=CAR, score=0.9):
    d = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    return Obstacle(cls=cls, score=score, point_indices=np.arange(5), center=np.array([cx, cy, -1.7]),
                    length=length, width=width, height=1.5, direction=d, polygon=np.zeros((0, 3)))


def test_iou_of_rotated_rectangles():
    a = box_polygon(_box(0, 0, 4, 2, 0))
    assert bev_iou(a, a) == pytest.approx(1.0)
    # shifted by half its length: overlap 2x2=4, union 12
    assert bev_iou(a, box_polygon(_box(2, 0, 4, 2, 0))) == pytest.approx(4 / 12)
    # a square rotated by 90 degrees is itself; a 4x2 rotated by 90 overlaps in a 2x2 square
    assert bev_iou(a, box_polygon(_box(0, 0, 4, 2, math.pi / 2))) == pytest.approx(4 / 12)
    # a 2x2 square rotated 45 degrees vs itself axis-aligned: intersection is an octagon of area 8(sqrt2-1)
    sq = box_polygon(_box(0, 0, 2, 2, 0))
    assert bev_iou(sq, box_polygon(_box(0, 0, 2, 2, math.pi / 4))) == pytest.approx(
        8 * (math.sqrt(2) - 1) / (8 - 8 * (math.sqrt(2) - 1)))
    # the detection's polygon follows its direction (heading)
    ob = obstacle_polygon(_obstacle(5, 1, 4, 2, 0.3))
    assert bev_iou(ob, box_polygon(_box(5, 1, 4, 2, 0.3))) == pytest.approx(1.0)
    assert bev_iou(ob, box_polygon(_box(50, 1, 4, 2, 0.3))) == 0.0


def test_matching_rule_thresholds_and_classes():
    car_gt = GroundTruth(box_polygon(_box(0, 0, 4, 2, 0)), CAR)
    ped_gt = GroundTruth(box_polygon(_box(10, 0, 0.6, 0.6, 0, MetaType.PEDESTRIAN)), PED)
    dets = [
        (box_polygon(_box(0.5, 0, 4, 2, 0)), CAR, 0.9, True),  # IoU 3.5/4.5 = 0.78: TP
        (box_polygon(_box(0.0, 0, 4, 2, 0)), CAR, 0.5, True),  # duplicate: FP
        (box_polygon(_box(10.2, 0, 0.6, 0.6, 0)), CAR, 0.8, True),  # overlaps the pedestrian, wrong class: FP
    ]
    c = match_frame([car_gt, ped_gt], dets)
    assert (c[CAR].tp, c[CAR].fp, c[CAR].fn) == (1, 2, 0)
    assert (c[PED].tp, c[PED].fp, c[PED].fn) == (0, 0, 1)
    # the pedestrian was found (IoU 0.4/0.8=0.5 >= 0.3) by a detection of another class
    assert c[PED].found == 1 and c[CAR].found == 1
    assert c[CAR].precision == pytest.approx(1 / 3) and c[CAR].recall == 1.0 and c[PED].recall == 0.0


def test_car_iou_threshold_is_half_and_pedestrian_threshold_is_0_3():
    car_gt = GroundTruth(box_polygon(_box(0, 0, 4, 2, 0)), CAR)
    # shift 1.5 m: IoU = 2.5*2 / (16 - 5) = 0.4545 < 0.5 -> miss
    c = match_frame([car_gt], [(box_polygon(_box(1.5, 0, 4, 2, 0)), CAR, 0.9, True)])
    assert c[CAR].tp == 0 and c[CAR].fp == 1 and c[CAR].fn == 1
    assert c[CAR].found == 1  # overlapped (IoU >= 0.1) though not matched
    c = match_frame([car_gt], [(box_polygon(_box(3.8, 0, 4, 2, 0)), CAR, 0.9, True)])  # IoU 0.2/7.8
    assert c[CAR].found == 0
    ped_gt = GroundTruth(box_polygon(_box(0, 0, 1, 1, 0, MetaType.PEDESTRIAN)), PED)
    # shift 0.45: IoU = 0.55 / 1.45 = 0.379 >= 0.3 -> hit
    c = match_frame([ped_gt], [(box_polygon(_box(0.45, 0, 1, 1, 0)), PED, 0.9, True)])
    assert c[PED].tp == 1 and c[PED].fp == 0


def test_ignored_ground_truth_and_uncounted_detections():
    ign = GroundTruth(box_polygon(_box(0, 0, 4, 2, 0)), CAR, ignored=True)
    c = match_frame([ign], [(box_polygon(_box(0, 0, 4, 2, 0)), CAR, 0.9, True)])
    assert (c[CAR].tp, c[CAR].fp, c[CAR].fn) == (0, 0, 0)
    c = match_frame([], [(box_polygon(_box(0, 0, 4, 2, 0)), CAR, 0.9, False)])
    assert c[CAR].fp == 0
    c = match_frame([], [(box_polygon(_box(0, 0, 4, 2, 0)), CAR, 0.9, True)])
    assert c[CAR].fp == 1


class _AllRoi:
    empty = False

    def contains(self, xy):
        return np.ones(len(xy), dtype=bool)

    def indices(self, frame):
        return np.arange(len(frame), dtype=np.int64)


class _Oracle:
    """A perception double that reports every labelled box (with one extra false alarm)."""

    name = "oracle"

    def detect(self, frame, roi):
        obs = [_obstacle(b["cx"], b["cy"], b["length"], b["width"], b["yaw"], MetaType(int(b["meta"])).obstacle_class)
               for b in frame.labels.boxes]
        obs.append(_obstacle(30, 30, 4, 2, 0))
        return Obstacles(obs)


def _labelled_frame():
    rng = np.random.default_rng(0)
    boxes = np.array([_box(8, 0, 4, 2, 0.2, instance=1), _box(12, -3, 0.6, 0.6, 0, MetaType.PEDESTRIAN, 2),
                      _box(-20, 5, 4, 2, 0, instance=3)], dtype=BOX_DTYPE)
    xyz = np.concatenate([np.c_[rng.normal(8, 0.5, 50), rng.normal(0, 0.3, 50), np.full(50, -1.0)],
                          np.c_[rng.normal(12, 0.1, 20), rng.normal(-3, 0.1, 20), np.full(20, -1.0)],
                          np.c_[rng.normal(-20, 0.5, 2), rng.normal(5, 0.3, 2), np.full(2, -1.0)]])
    inst = np.r_[np.full(50, 1), np.full(20, 2), np.full(2, 3)].astype(np.int32)
    return Frame(points=make_points(xyz, 10.0), labels=Labels(boxes, inst, np.zeros(72, dtype=np.int8)))


def test_ground_truth_with_too_few_points_is_ignored_and_fov():
    frame = _labelled_frame()
    gts = frame_ground_truth(frame, _AllRoi(), min_points=5)
    assert [g.ignored for g in gts] == [False, False, True]
    assert [g.num_points for g in gts] == [50, 20, 2]
    gts = frame_ground_truth(frame, _AllRoi(), min_points=5, fov_deg=20)
    assert [g.ignored for g in gts] == [False, True, True]  # the pedestrian is at -14 degrees
    assert in_fov(10, 0, 90) and not in_fov(-10, 0, 90) and not in_fov(1, 2, 90)


def test_evaluate_frames_with_an_oracle():
    res = evaluate_frames("t", [_labelled_frame()], _Oracle(), lambda f: _AllRoi())
    d = res.to_dict()
    assert d["classes"]["car"]["tp"] == 1 and d["classes"]["car"]["fp"] == 1  # the far car is ignored, false alarm
    assert d["classes"]["pedestrian"]["recall"] == 1.0
    assert res.frames == 1 and res.detections == 4


def test_labelled_area_covers_objects_standing_on_the_road():
    from lidarmt.lidar.perception.apollo.evaluate import GridRoi, labelled_area

    rng = np.random.default_rng(0)
    road = np.c_[rng.uniform(0, 30, 20000), rng.uniform(-4, 4, 20000), np.full(20000, -1.7)]
    in_car = (np.abs(road[:, 0] - 15) < 2.5) & (np.abs(road[:, 1]) < 1.2)
    road = road[~in_car]  # the car hides the road under it
    car = np.c_[rng.uniform(13, 17, 300), rng.uniform(-1, 1, 300), rng.uniform(-1.5, 0, 300)]
    house = np.c_[rng.uniform(5, 10, 300), rng.uniform(12, 15, 300), rng.uniform(-1.7, 3, 300)]
    xyz = np.concatenate([road, car, house])
    sem = np.r_[np.full(len(road), 40), np.full(300, 10), np.full(300, 50)].astype(np.uint32)
    frame = Frame(points=make_points(xyz, 10.0), labels=Labels(point_semantic=sem))
    inside = labelled_area(frame)
    assert inside[: len(road)].mean() > 0.99
    assert inside[len(road) : len(road) + 300].all()  # the car's points are over the (hidden) road
    assert not inside[len(road) + 300 :].any()  # the house is not
    g = GridRoi(10.0)
    assert g.contains(np.array([[9.0, -9.0], [11.0, 0.0]])).tolist() == [True, False]
