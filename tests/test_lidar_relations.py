"""The LiDAR relations' oracle on small synthetic sweeps: raw facts, thresholds applied when folding, matching
through the change's provenance and geometry, the fold's totals and ranking, the moved ROI and partial changes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_fuzz_support import box_obstacle

from lidarmt.lidar.campaign import MovedRoi, edits_origin, transform_seed
from lidarmt.lidar.relations import LidarTally, Thresholds, judge_facts, pair_facts
from lidarmt.types import BOX_DTYPE, Frame, MetaType, ObstacleClass, Obstacles, make_points, xyz_of


def scene() -> Frame:
    """Ground and three objects: a car 8 m ahead, a pedestrian 20 m to the left, a car 45 m ahead."""
    rng = np.random.default_rng(0)
    parts = [np.c_[rng.uniform(-50, 50, (800, 2)), np.full(800, -1.7)]]
    for cx, cy, n, half in ((8.0, 0.0, 120, (2.0, 0.9)), (0.0, 20.0, 40, (0.3, 0.3)), (45.0, 2.0, 60, (2.0, 0.9))):
        parts.append(np.c_[rng.uniform([cx - half[0], cy - half[1]], [cx + half[0], cy + half[1]], (n, 2)),
                           rng.uniform(-1.2, 0.2, n)])
    xyz = np.concatenate(parts).astype(np.float32)
    return Frame(make_points(xyz, np.full(len(xyz), 10, np.float32)))


OBJECTS = ((800, 920, ObstacleClass.CAR), (920, 960, ObstacleClass.PEDESTRIAN), (960, 1020, ObstacleClass.CAR))


def detect(frame: Frame, objects=OBJECTS, *, index_map=None) -> Obstacles:
    """Obstacles of the given point ranges (of the source; ``index_map`` maps them into a follow-up)."""
    xyz = xyz_of(frame.points)
    out = []
    for lo, hi, cls in objects:
        idx = np.arange(lo, hi)
        if index_map is not None:
            idx = index_map[idx]
            idx = idx[idx >= 0]
        if len(idx) >= 3:
            out.append(box_obstacle(cls, idx, xyz))
    return Obstacles(out)


def identity(frame: Frame) -> np.ndarray:
    return np.arange(len(frame), dtype=np.int64)


def test_an_unchanged_sweep_keeps_every_obstacle_and_the_facts_name_them():
    f = scene()
    o = detect(f)
    facts = pair_facts(f, o, f, detect(f), identity(f))
    assert [r["class"] for r in facts["source"]] == ["car", "pedestrian", "car"]
    assert [r["score"] for r in facts["source"]] == [1.0, 1.0, 1.0]
    assert [r["kept"] for r in facts["source"]] == [120, 40, 60]
    assert facts["source"][0]["distance"] == pytest.approx(8.0, abs=0.3)
    for rel in ("robustness", "insertion", "removal", "equivariance"):
        assert judge_facts(facts, rel, Thresholds()) == []


def test_a_lost_obstacle_is_a_finding_within_the_safety_distance_only_and_thresholds_apply_when_folding():
    f = scene()
    o = detect(f)
    # the follow-up keeps every point, but the SUT misses the car 8 m ahead and the car 45 m ahead
    follow = detect(f, OBJECTS[1:2])
    facts = pair_facts(f, o, f, follow, identity(f))
    lost = judge_facts(facts, "robustness", Thresholds())
    assert [(x["class"], x["kind"]) for x in lost] == [("car", "vanished")]  # 45 m is beyond D = 30 m
    assert lost[0]["size"][0] == pytest.approx(4.0, abs=0.2) and lost[0]["distance"] == pytest.approx(8.0, abs=0.3)
    far = judge_facts(facts, "robustness", Thresholds(distance_m=60.0))
    assert sorted(x["distance"] for x in far) == [pytest.approx(8.0, abs=0.3), pytest.approx(45.0, abs=0.3)]
    # an obstacle that keeps fewer than k points is not required (the change took its points)
    assert judge_facts(facts, "robustness", Thresholds(min_points=200)) == []


def test_kept_points_come_through_the_provenance_and_occluded_obstacles_are_exempt():
    f = scene()
    o = detect(f)
    keep = np.ones(len(f), dtype=bool)
    keep[800:860] = False  # half the near car's points dropped (hidden behind something inserted)
    origin = np.flatnonzero(keep).astype(np.int64)
    index_map = np.full(len(f), -1, dtype=np.int64)
    index_map[origin] = np.arange(len(origin))
    g = f.with_points(f.points[keep])
    follow = detect(g, OBJECTS[1:], index_map=index_map)  # the SUT loses the half-hidden car
    facts = pair_facts(f, o, g, follow, origin)
    assert facts["source"][0]["kept"] == 60 and facts["source"][1]["kept"] == 40
    assert facts["source"][1]["score"] == 1.0 and facts["source"][2]["score"] == 1.0
    # robustness requires it (it keeps 60 ≥ k points); insertion does not (it lost half its points to the change)
    assert [x["class"] for x in judge_facts(facts, "robustness", Thresholds())] == ["car"]
    assert judge_facts(facts, "insertion", Thresholds()) == []
    assert [x["class"] for x in judge_facts(facts, "insertion", Thresholds(occlusion=0.6))] == ["car"]


def _rotated(f: Frame, angle: float) -> tuple[Frame, np.ndarray]:
    c, s = math.cos(angle), math.sin(angle)
    g = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    pts = f.points.copy()
    x, y = pts["x"].astype(np.float64), pts["y"].astype(np.float64)
    pts["x"], pts["y"] = (c * x - s * y).astype(np.float32), (s * x + c * y).astype(np.float32)
    return f.with_points(pts), g


def test_equivariance_matches_through_the_geometry_and_counts_spurious_obstacles():
    f = scene()
    o = detect(f)
    g_frame, geo = _rotated(f, math.radians(90))
    follow = detect(g_frame)
    facts = pair_facts(f, o, g_frame, follow, identity(f), geo)
    assert facts["geometry"] and [r["score"] for r in facts["source"]] == [1.0, 1.0, 1.0]
    assert [r["kept"] for r in facts["source"]] == [120, 40, 60]  # counted in the source's frame
    assert judge_facts(facts, "equivariance", Thresholds()) == []
    # boxes of a follow-up obstacle set that is not the rotated source's: matched by points only at Jaccard
    xyz = xyz_of(g_frame.points)
    extra = box_obstacle(ObstacleClass.CYCLIST, np.arange(0, 30), xyz)  # ground points as a "cyclist"
    extra.center = np.array([0.0, 5.0, -1.7])  # 5 m from the sensor, within D
    facts2 = pair_facts(f, o, g_frame, Obstacles([*follow, extra]), identity(f), geo)
    lost = judge_facts(facts2, "equivariance", Thresholds())
    assert [x["what"] for x in lost] == ["spurious"] and lost[0]["class"] == "cyclist"
    assert judge_facts(facts2, "robustness", Thresholds()) == []  # robustness does not look at extras


def test_insertion_requires_the_inserted_object_to_be_detected():
    f = scene()
    o = detect(f)
    box = np.zeros(1, dtype=BOX_DTYPE)
    box[0] = (20.0, -3.0, -0.9, 4.0, 1.8, 1.6, 0.0, int(MetaType.SMALLMOT), -1)
    rng = np.random.default_rng(1)
    car = np.c_[rng.uniform([18, -3.9], [22, -2.1], (80, 2)), rng.uniform(-1.5, 0.0, 80)].astype(np.float32)
    g = f.with_extra_points(make_points(car, np.full(80, 20, np.float32)))
    origin = np.r_[identity(f), np.full(80, -1, dtype=np.int64)]
    missed = pair_facts(f, o, g, detect(g), origin, inserted=box)
    assert missed["inserted"][0]["points"] == 80 and missed["inserted"][0]["overlap"] == 0.0
    lost = judge_facts(missed, "insertion", Thresholds())
    assert [(x["what"], x["class"]) for x in lost] == [("missed insert", "car")]
    seen = detect(g, (*OBJECTS, (len(f), len(f) + 80, ObstacleClass.CAR)))
    facts = pair_facts(f, o, g, seen, origin, inserted=box)
    assert facts["inserted"][0]["overlap"] > 0.8 and facts["inserted"][0]["overlap_class"] == "car"
    assert judge_facts(facts, "insertion", Thresholds()) == []
    # the inserted object is required only within D and with k points
    assert judge_facts(missed, "insertion", Thresholds(distance_m=15.0)) == []


def test_the_fold_is_order_independent_ignores_duplicates_and_ranks_by_distance():
    f = scene()
    o = detect(f)
    recs = []
    for i, objects in enumerate((OBJECTS, OBJECTS[1:], OBJECTS[:1], ())):
        facts = pair_facts(f, o, f, detect(f, objects), identity(f))
        recs.append({"key": [i, 0, i % 2, 0], "status": "ok", "facts": facts, "edits": 10})
    recs.append({"key": [9, 0, 1, 0], "status": "crash", "error": "boom"})
    a = LidarTally([("fog", "weather", "robustness")], [["light", "heavy"]], Thresholds(distance_m=25))
    b = LidarTally([("fog", "weather", "robustness")], [["light", "heavy"]], Thresholds(distance_m=25))
    for r in recs:
        a.add(r)
    for r in [*reversed(recs), recs[1]]:
        b.add(r)
    assert a.to_dict() == b.to_dict() and a.ranked() == b.ranked()
    cells = {c["level"]: c for c in a.to_dict()["cells"]}
    assert cells["light"]["violations"] == 1 and cells["heavy"]["violations"] == 2 and cells["heavy"]["crashes"] == 1
    assert cells["light"]["lost"]["pedestrian"] == 1 and cells["light"]["lost"]["car"] == 0  # 45 m > D
    assert cells["heavy"]["lost"]["car"] == 2 and cells["heavy"]["lost"]["pedestrian"] == 1
    d = [x["distance"] for x in a.ranked()]
    assert d == sorted(d) and len(d) == 4


def test_thresholds_are_checked():
    for bad in ({"distance_m": 0}, {"min_points": -1}, {"tolerance": 0}, {"occlusion": 1.0}, {"insert_overlap": 2}):
        with pytest.raises(Exception) as info:
            Thresholds(**bad)
        assert getattr(info.value, "exit_code", 2) == 2 and "--" in str(info.value)
    th = Thresholds(distance_m=12.5, min_points=3)
    assert Thresholds.from_dict(th.to_dict()) == th and "12.5 m" in th.describe()


def test_the_moved_roi_follows_a_rotation():
    from test_fuzz_support import StripRoi

    f = scene()
    roi = StripRoi(half_width=3.0, xmin=0.0, xmax=60.0)  # the road ahead
    g_frame, geo = _rotated(f, math.radians(90))  # the road now lies to the left
    moved = MovedRoi(roi, geo)
    assert np.array_equal(moved.indices(g_frame), roi.indices(f))
    assert moved.contains(np.array([[0.0, 20.0]]))[0] and not moved.contains(np.array([[20.0, 0.0]]))[0]


def test_partial_changes_keep_their_provenance():
    from lidarmt.lidar.transforms.base import apply_edits, make_change, n_edits

    f = scene()
    keep = np.ones(len(f), dtype=bool)
    keep[::7] = False
    pts = f.points[keep].copy()
    pts["intensity"][::5] += 1
    added = make_points(np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]], np.float32), np.ones(2, np.float32))
    change = make_change(f, keep, pts, added)
    rng = np.random.default_rng(5)
    for _ in range(5):
        sel = rng.random(n_edits(change)) < 0.5
        frame = apply_edits(f, change, sel)
        origin = edits_origin(change, sel)
        assert len(origin) == len(frame)
        src = origin >= 0
        # every kept point sits where its origin was (modified ones differ only in intensity here)
        assert np.array_equal(frame.points["x"][src], f.points["x"][origin[src]])
    assert np.array_equal(edits_origin(change, np.ones(n_edits(change), bool)), change.origin)


def test_seeds_depend_on_the_pair_only():
    a = transform_seed(0, 3, "fog", 1, 0)
    assert a == transform_seed(0, 3, "fog", 1, 0)
    assert len({a, transform_seed(1, 3, "fog", 1, 0), transform_seed(0, 4, "fog", 1, 0),
                transform_seed(0, 3, "rain", 1, 0), transform_seed(0, 3, "fog", 2, 0),
                transform_seed(0, 3, "fog", 1, 1)}) == 6
    assert 0 <= a < 2**63


def test_labels_tell_objects_from_junk_and_the_fold_can_require_objects_only():
    from lidarmt.types import Labels

    f = scene()
    boxes = np.zeros(1, dtype=BOX_DTYPE)  # the ground truth names the near car only
    boxes[0] = (8.0, 0.0, -0.5, 4.0, 1.8, 1.4, 0.0, int(MetaType.SMALLMOT), 1)
    f.labels = Labels(boxes)
    o = detect(f)
    facts = pair_facts(f, o, f, Obstacles([]), identity(f))  # the SUT loses everything
    assert [r["label"] for r in facts["source"]] == ["labelled", "unlabelled", "unlabelled"]
    assert facts["source"][0]["label_class"] == "car"
    every = judge_facts(facts, "robustness", Thresholds())
    assert [x["class"] for x in every] == ["car", "pedestrian"] and every[0]["label"] == "labelled"
    assert [x["class"] for x in judge_facts(facts, "robustness", Thresholds(labelled_only=True))] == ["car"]
    assert [x["class"] for x in judge_facts(facts, "robustness", Thresholds(min_volume=1.0))] == ["car"]
    th = Thresholds(min_volume=1.0, labelled_only=True)
    assert Thresholds.from_dict(th.to_dict()) == th and "labelled objects only" in th.describe()
    t = LidarTally([("fog", "weather", "robustness")], [["light"]])
    t.add({"key": [0, 0, 0, 0], "status": "ok", "facts": facts})
    assert t.to_dict()["cells"][0]["lost_labelled"] == 1
