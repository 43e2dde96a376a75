"""Average precision (lidarmt.lidar.ap): hand-worked cases for both computations, their agreement with many
ground truths, and properties of any input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lidarmt.lidar.ap import FrameScores, interpolated_ap, kitti_ap

SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=60)

# One frame, two cars. Detection A (score 0.9) covers car 0 (IoU 0.8), B (0.8) covers nothing, C (0.7) covers
# car 1 (IoU 0.6).
HAND = [FrameScores(iou=np.array([[0.8, 0.0], [0.0, 0.0], [0.0, 0.6]]), scores=np.array([0.9, 0.8, 0.7]))]


def test_interpolated_ap_by_hand():
    # ranks: A tp (P 1, R .5), B fp (P .5, R .5), C tp (P 2/3, R 1). Envelope: 1 up to recall .5, 2/3 beyond.
    # R40: points 1/40..20/40 -> 1, 21/40..40/40 -> 2/3: (20 + 40/3) / 40 = 83.333...
    # R11: points 0..0.5 (6) -> 1, 0.6..1.0 (5) -> 2/3: (6 + 10/3) / 11 = 84.848...
    r = interpolated_ap(HAND, 0.5)
    assert r.n_gt == 2 and r.n_det == 3
    assert r.ap_r40 == pytest.approx(100 * (20 + 40 / 3) / 40)
    assert r.ap_r11 == pytest.approx(100 * (6 + 10 / 3) / 11)
    assert r.precision == pytest.approx([1.0, 0.5, 2 / 3]) and r.recall == pytest.approx([0.5, 0.5, 1.0])


def test_kitti_devkit_ap_by_hand():
    # First pass: each car takes the best-scoring detection over the IoU: true-positive scores 0.9, 0.7.
    # getThresholds with 2 cars: 0.9 (recall .5 is past the first 1/40 step), then 0.7 (the last): 2 thresholds.
    # At 0.9: A only, tp 1 fp 0 -> precision 1. At 0.7: A, B, C: tp 2 fp 1 -> 2/3. Precision array (41 points)
    # [1, 2/3, 0, ...]: R40 sums points 1..40 -> (2/3) / 40; R11 sums points 0, 4, ..., 40 -> 1 / 11.
    r = kitti_ap(HAND, 0.5)
    assert r.ap_r40 == pytest.approx(100 * (2 / 3) / 40)
    assert r.ap_r11 == pytest.approx(100 / 11)
    assert r.precision == pytest.approx([1.0, 2 / 3])


def test_the_devkit_needs_strictly_more_than_the_threshold():
    at = [FrameScores(iou=np.array([[0.5]]), scores=np.array([0.9]))]
    assert kitti_ap(at, 0.5).ap_r40 == 0.0
    assert interpolated_ap(at, 0.5).ap_r40 == 100.0


def test_ignored_ground_truth_and_detections_are_not_counted():
    # car 1 is ignored (too few points): C matching it is neither tp nor fp; D is ignored (outside the region)
    fr = FrameScores(iou=np.array([[0.8, 0.0], [0.0, 0.6], [0.0, 0.0]]), scores=np.array([0.9, 0.7, 0.5]),
                     gt_ignored=np.array([False, True]), det_ignored=np.array([False, False, True]))
    for fn in (interpolated_ap, kitti_ap):
        r = fn([fr], 0.5)
        assert r.n_gt == 1
    assert interpolated_ap([fr], 0.5).ap_r40 == 100.0
    assert kitti_ap([fr], 0.5).precision == [1.0]


def test_a_perfect_detector_and_an_empty_one():
    frames = [FrameScores(iou=np.eye(3) * 0.9, scores=np.array([0.9, 0.8, 0.7])) for _ in range(20)]
    assert interpolated_ap(frames, 0.5).ap_r40 == pytest.approx(100.0)
    assert kitti_ap(frames, 0.5).ap_r40 == pytest.approx(100.0)  # 60 cars: one threshold per 1/40 of recall
    empty = [FrameScores(iou=np.zeros((0, 3)), scores=np.zeros(0))]
    assert interpolated_ap(empty, 0.5).ap_r40 == 0.0 and kitti_ap(empty, 0.5).ap_r40 == 0.0
    none = [FrameScores(iou=np.zeros((2, 0)), scores=np.array([0.5, 0.4]))]
    assert interpolated_ap(none, 0.5).n_gt == 0 and interpolated_ap(none, 0.5).ap_r40 == 0.0


def test_with_many_cars_the_two_computations_agree():
    rng = np.random.default_rng(3)
    frames = []
    for _ in range(60):
        n_gt, n_det = rng.integers(2, 8), rng.integers(2, 10)
        iou = np.where(rng.random((n_det, n_gt)) < 0.25, rng.uniform(0.3, 0.95, (n_det, n_gt)), 0.0)
        frames.append(FrameScores(iou=iou, scores=rng.random(n_det)))
    a, b = interpolated_ap(frames, 0.5), kitti_ap(frames, 0.5)
    assert a.n_gt > 200 and 10 < a.ap_r40 < 90
    assert abs(a.ap_r40 - b.ap_r40) < 3.0  # the devkit samples the same envelope at one threshold per 1/40


def test_shape_mismatch_is_a_value_error():
    with pytest.raises(ValueError, match="expected"):
        interpolated_ap([FrameScores(iou=np.zeros((2, 2)), scores=np.zeros(3))], 0.5)
    with pytest.raises(ValueError, match="finite"):
        kitti_ap([FrameScores(iou=np.array([[np.nan]]), scores=np.array([0.5]))], 0.5)


@st.composite
def frame_sets(draw):
    frames = []
    for _ in range(draw(st.integers(0, 5))):
        n_det, n_gt = draw(st.integers(0, 6)), draw(st.integers(0, 6))
        vals = draw(st.lists(st.sampled_from([0.0, 0.0, 0.2, 0.5, 0.51, 0.7, 1.0]), min_size=n_det * n_gt,
                             max_size=n_det * n_gt))
        scores = draw(st.lists(st.floats(0, 1), min_size=n_det, max_size=n_det))
        gi = draw(st.lists(st.booleans(), min_size=n_gt, max_size=n_gt))
        frames.append(FrameScores(np.array(vals, dtype=float).reshape(n_det, n_gt), np.array(scores, dtype=float),
                                  np.array(gi, dtype=bool)))
    return frames


@SETTINGS
@given(frames=frame_sets())
def test_ap_is_a_percentage_and_monotone_in_the_threshold(frames):
    for fn in (interpolated_ap, kitti_ap):
        lo, hi = fn(frames, 0.3), fn(frames, 0.7)
        for r in (lo, hi):
            assert 0.0 <= r.ap_r40 <= 100.0 + 1e-9 and 0.0 <= r.ap_r11 <= 100.0 + 1e-9
    # a stricter IoU never raises the definition's AP: every match at 0.7 is one at 0.3
    assert interpolated_ap(frames, 0.7).ap_r40 <= interpolated_ap(frames, 0.3).ap_r40 + 1e-9
