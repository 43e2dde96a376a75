"""The oracle: count relation per class and overall, strict subset matching and how obstacles were lost."""

from __future__ import annotations

import numpy as np
from test_fuzz_support import box_obstacle

from lidarmt.lidar.mr1.oracle import judge
from lidarmt.types import ObstacleClass, Obstacles

CAR, PED, UNK = ObstacleClass.CAR, ObstacleClass.PEDESTRIAN, ObstacleClass.UNKNOWN

XYZ = np.random.default_rng(0).uniform(-1, 1, size=(200, 3))
XYZ[:50, 0] += 10  # points 0-49 around x=10
XYZ[50:100, 0] += 20  # 50-99 around x=20
XYZ[100:150, 0] += 30  # 100-149 around x=30


def ob(cls, idx):
    return box_obstacle(cls, np.asarray(idx), XYZ)


def test_same_obstacles_no_violation():
    o = Obstacles([ob(CAR, range(50)), ob(PED, range(50, 100))])
    v = judge(o, Obstacles([ob(CAR, range(50)), ob(PED, range(50, 100))]))
    assert not v.count_violation and not v.subset_violation and not v.class_violations
    assert sorted((i, j) for i, j, _ in v.matches) == [(0, 0), (1, 1)]


def test_vanished_counts_and_class():
    o = Obstacles([ob(CAR, range(50)), ob(PED, range(50, 100))])
    v = judge(o, Obstacles([ob(CAR, range(50))]))
    assert v.count_violation and v.class_violations == [PED]
    assert [(m.source, m.kind) for m in v.missing] == [(1, "vanished")]


def test_merged_names_partner():
    o = Obstacles([ob(CAR, range(50)), ob(CAR, range(50, 70))])
    v = judge(o, Obstacles([ob(CAR, range(70))]))  # Jaccard 50/70 with #0, 20/70 with #1
    assert v.count_violation
    (m,) = v.missing
    assert (m.source, m.kind, m.into, m.partner) == (1, "merged", 0, 0)


def test_reclassified_is_a_subset_but_not_a_count_violation():
    o = Obstacles([ob(CAR, range(50))])
    v = judge(o, Obstacles([ob(UNK, range(50))]))
    assert not v.count_violation and v.class_violations == [CAR] and v.subset_violation
    assert v.missing[0].kind == "reclassified" and v.missing[0].to_cls == UNK


def test_degraded_when_overlap_too_small_and_boxes_apart():
    o = Obstacles([ob(CAR, range(50))])
    left = np.sort(np.argsort(XYZ[:50, 0])[:8])  # a sliver at the obstacle's back: Jaccard 0.16, IoU small
    v = judge(o, Obstacles([ob(CAR, left), ob(CAR, range(100, 150))]))
    assert not v.count_violation and v.subset_violation
    assert v.missing[0].kind == "degraded" and v.missing[0].into == 0


def test_bev_iou_matches_when_point_indices_differ():
    # same place, disjoint indices (e.g. re-sampled points): the boxes still match by IoU
    o = Obstacles([ob(CAR, range(0, 50, 2))])
    v = judge(o, Obstacles([ob(CAR, range(1, 50, 2))]))
    assert not v.subset_violation and len(v.matches) == 1


def test_one_to_one_assignment_and_roundtrip():
    o = Obstacles([ob(CAR, range(50)), ob(CAR, range(50, 100))])
    f = Obstacles([ob(CAR, range(50, 100)), ob(CAR, range(50)), ob(PED, range(100, 150))])
    v = judge(o, f)
    assert sorted((i, j) for i, j, _ in v.matches) == [(0, 1), (1, 0)]
    assert not v.subset_violation and not v.count_violation
    from lidarmt.lidar.mr1.oracle import Verdict

    assert Verdict.from_dict(v.to_dict()).to_dict() == v.to_dict()


def test_empty_lists():
    assert not judge(Obstacles(), Obstacles()).subset_violation
    v = judge(Obstacles([ob(CAR, range(5))]), Obstacles())
    assert v.count_violation and v.missing[0].kind == "vanished"


def test_a_verdict_stored_with_sorted_keys_shows_its_classes_in_class_order():
    """A bundle's JSON is written with sorted keys (car, cyclist, pedestrian, unknown); reloaded, the verdict's
    counts come back in CLASS_ORDER, so that replay regenerates the report's "4 car, 1 pedestrian, 3 cyclist"
    byte for byte (it once wrote "3 cyclist, 1 pedestrian" and replay called the bundle not reproduced)."""
    import json

    from lidarmt.lidar.mr1.bundle import _counts
    from lidarmt.lidar.mr1.oracle import Verdict
    from lidarmt.types import CLASS_ORDER

    cyc = ObstacleClass.CYCLIST
    o = Obstacles([ob(CAR, range(50)), ob(PED, range(50, 100)), ob(cyc, range(100, 120)), ob(cyc, range(120, 150))])
    v = judge(o, Obstacles([ob(CAR, range(50))]))
    stored = json.loads(json.dumps(v.to_dict(), sort_keys=True))
    assert list(stored["counts_source"]) == sorted(stored["counts_source"])  # not class order
    back = Verdict.from_dict(stored)
    assert list(back.counts_source) == list(CLASS_ORDER) == list(v.counts_source)
    assert _counts(back.counts_source) == _counts(v.counts_source) == "1 car, 1 pedestrian, 2 cyclist"
    assert back.to_dict() == v.to_dict()
    # a count stored without some classes keeps only those it has, in class order
    partial = Verdict.from_dict({"counts_source": {"unknown": 1, "car": 2}, "counts_follow": {"car": 2}})
    assert list(partial.counts_source) == [CAR, UNK] and _counts(partial.counts_source) == "2 car, 1 unknown"
