"""Dong et al.'s and Hahner et al.'s corruptions that lidarmt added (issue 33 item 3): sunlight, impulse, wet ground,
object shear/scale/rotation. Each test checks a physical property; determinism, degenerate frames and delta
debugging come from the parametrized tests of test_lidar_transforms.py over every registered transformation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lidarmt.lidar.transforms._corruption_kernels as KC
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.lidar.robustness import corruption_refs
from lidarmt.lidar.synthetic import synthetic_sweep
from lidarmt.lidar.transforms import apply_edits, get_transform, n_edits
from lidarmt.lidar.transforms._common import ranges_of
from lidarmt.lidar.transforms.ground import GROUND_BAND, fit_ground_plane, fresnel_unpolarised, wet_factor
from lidarmt.lidar.transforms.local import assign_points
from lidarmt.lidar.transforms.noise import MIN_RANGE
from lidarmt.lidar.transforms.objects import box_mask
from lidarmt.lidar.transforms.weather import FRESNEL_WATER
from lidarmt.types import Frame, Labels


@pytest.fixture(scope="module")
def sweep():
    return synthetic_sweep(n_azimuth=512)


def _xyz(points: np.ndarray) -> np.ndarray:
    return np.column_stack([points[c].astype(np.float64) for c in ("x", "y", "z")])


# ----------------------------------------------------------------------------------------------- kernels


def test_grid_min_z_kernel_matches_its_reference():
    rng = np.random.default_rng(0)
    ix = rng.integers(-2, 12, 5000)
    iy = rng.integers(-2, 12, 5000)
    z = rng.normal(0, 1, 5000)
    a = KC.grid_min_z(ix, iy, z, 10, 10)
    b = KC.grid_min_z_reference(ix, iy, z, 10, 10)
    assert np.array_equal(a, b) and np.isfinite(a).all()
    assert np.isinf(KC.grid_min_z(ix[:0], iy[:0], z[:0], 3, 3)).all()


def test_box_index_kernel_matches_its_reference(sweep):
    boxes = sweep.labels.boxes
    overlapping = np.concatenate([boxes, boxes[:2]])  # a point in two boxes belongs to the first
    overlapping["cx"][-2:] += 0.5
    for bx in (boxes, overlapping, boxes[:0]):
        a = assign_points(sweep.points, bx)
        b = assign_points(sweep.points, bx, kernel=KC.box_index_reference)
        assert np.array_equal(a, b)
    owner = assign_points(sweep.points, boxes)
    assert (owner >= 0).sum() > 500
    for k, box in enumerate(boxes):  # the rule of objects.box_mask, one rule in one place
        first = box_mask(sweep.points, box) & ~np.isin(owner, np.arange(k))
        assert np.array_equal(first, owner == k)


def test_ground_plane_kernel_and_reference_agree(sweep):
    assert fit_ground_plane(sweep.points) == fit_ground_plane(sweep.points, kernel=KC.grid_min_z_reference)
    a, b, c = fit_ground_plane(sweep.points)
    assert abs(a) < 1e-3 and abs(b) < 1e-3 and abs(c + 1.73) < 0.02  # the synthetic street: flat, sensor 1.73 m up


# ----------------------------------------------------------------------------------------------- sunlight, impulse


def test_sunlight_adds_points_within_the_sensors_range_on_real_rays(sweep):
    t = get_transform("sunlight")
    for level in ("light", "moderate", "heavy"):
        c = t.apply(sweep, level, seed=2)
        p = t.levels[level]
        n_src = len(sweep.points)
        assert c.n_added == int(p["fraction"] * n_src) > 0 and c.n_modified == 0 and len(c.dropped) == 0
        assert c.frame.points[:n_src].tobytes() == sweep.points.tobytes()  # real returns kept as they were
        added = c.frame.points[n_src:]
        r = ranges_of(added)
        assert r.min() >= MIN_RANGE - 1e-4 and r.max() <= p["max_range_m"] + 1e-3
        assert added["intensity"].max() < 10.0
        # on a real ray: the direction of some source return (same laser, same azimuth)
        d_add = _xyz(added) / r[:, None]
        d_src = _xyz(sweep.points) / ranges_of(sweep.points)[:, None]
        best = (d_add @ d_src.T).max(axis=1) if len(added) < 2000 else None
        if best is not None:
            assert best.min() > 1 - 1e-9
        assert set(np.unique(added["ring"])) <= set(np.unique(sweep.points["ring"]))
    small = t.apply(sweep, {"fraction": 0.05, "max_range_m": 20.0}, seed=0)
    assert ranges_of(small.frame.points[len(sweep.points):]).max() <= 20.0 + 1e-3


def test_impulse_moves_a_share_by_plus_minus_the_magnitude(sweep):
    c = get_transform("impulse").apply(sweep, {"fraction": 0.1, "magnitude_cm": 10.0}, seed=1)
    assert c.n_modified == int(0.1 * len(sweep.points)) == c.info["n_hit"]
    moved = c.modified
    d = _xyz(c.frame.points[moved]) - _xyz(sweep.points[moved])
    assert np.allclose(np.abs(d), 0.1, atol=2e-6)
    assert np.array_equal(c.frame.points["intensity"], sweep.points["intensity"])
    assert np.array_equal(c.frame.points[~moved], sweep.points[~moved])
    assert (d > 0).mean() == pytest.approx(0.5, abs=0.02)  # signs drawn evenly


# ----------------------------------------------------------------------------------------------- wet ground


def test_fresnel_reflectance_of_water():
    assert fresnel_unpolarised(np.array([1.0]))[0] == pytest.approx(FRESNEL_WATER, rel=1e-12)
    assert fresnel_unpolarised(np.array([0.0]))[0] == pytest.approx(1.0)
    assert np.all(np.diff(fresnel_unpolarised(np.linspace(1.0, 0.0, 50))) >= 0)  # grazing reflects more
    assert np.allclose(wet_factor(np.linspace(0, 1, 5), 0.0, 1.2), 1.0)  # dry: unchanged
    assert np.all(wet_factor(np.linspace(0, 1, 5), 5.0, 1.2) < 1 / 1.328**2 + 1e-12)


def test_wet_ground_darkens_the_ground_and_never_touches_what_stands_on_it(sweep):
    t = get_transform("wet-ground")
    a, b, c0 = fit_ground_plane(sweep.points)
    xyz = _xyz(sweep.points)
    height = (xyz[:, 2] - (a * xyz[:, 0] + b * xyz[:, 1] + c0)) / math.sqrt(a * a + b * b + 1)
    ground = np.abs(height) <= GROUND_BAND
    above = height > GROUND_BAND
    assert ground.sum() > 1000 and above.sum() > 1000
    lost_before = -1
    for level in ("light", "moderate", "heavy"):
        c = t.apply(sweep, level, seed=0)
        present = np.zeros(len(sweep.points), dtype=bool)
        present[c.origin] = True
        assert present[above].all()  # nothing above the ground is lost ...
        j = np.flatnonzero(above[c.origin])
        assert c.frame.points[j].tobytes() == sweep.points[c.origin[j]].tobytes()  # ... or changed
        assert np.all(~present <= ground)  # only ground returns are lost
        g = np.flatnonzero(ground[c.origin])
        new_i = c.frame.points["intensity"][g]
        old_i = sweep.points["intensity"][c.origin[g]]
        assert np.all(new_i <= old_i) and new_i.mean() < old_i.mean()
        n_lost = len(c.dropped)
        assert n_lost > lost_before  # more water, more lost
        lost_before = n_lost
        # the far ground goes first: the mean range of lost returns exceeds that of the ground kept
        if n_lost:
            assert ranges_of(sweep.points[c.dropped]).mean() > ranges_of(sweep.points[c.origin[g]]).mean()
    dry = t.apply(sweep, {"water_mm": 0.0}, seed=0)
    assert n_edits(dry) == 0


def test_wet_ground_without_ground_leaves_the_sweep(sweep):
    wall = sweep.points[: 5].copy()
    c = get_transform("wet-ground").apply(Frame(wall), "heavy", seed=0)
    assert n_edits(c) == 0 and c.info["reason"] == "no ground found"


# ----------------------------------------------------------------------------------------------- objects


def test_object_rotation_turns_points_and_boxes_alike(sweep):
    c = get_transform("object-rotate").apply(sweep, "heavy", seed=3)
    boxes, new = sweep.labels.boxes, c.frame.labels.boxes
    owner = assign_points(sweep.points, boxes)
    assert np.array_equal(c.modified, owner >= 0)  # only the objects' points move
    for k, box in enumerate(boxes):
        beta = new["yaw"][k] - box["yaw"]
        assert 8.0 <= abs(math.degrees(beta)) <= 10.0
        idx = np.flatnonzero(owner == k)
        if len(idx) == 0:
            continue
        p0 = _xyz(sweep.points[idx]) - [box["cx"], box["cy"], box["cz"]]
        p1 = _xyz(c.frame.points[idx]) - [box["cx"], box["cy"], box["cz"]]
        turned = np.column_stack([math.cos(beta) * p0[:, 0] - math.sin(beta) * p0[:, 1],
                                  math.sin(beta) * p0[:, 0] + math.cos(beta) * p0[:, 1], p0[:, 2]])
        assert np.allclose(turned, p1, atol=1e-4)
        assert box_mask(c.frame.points[idx], new[k], margin=0.11).all()  # the turned box holds them


def test_object_scale_changes_one_axis_and_keeps_the_bottom(sweep):
    t = get_transform("object-scale")
    for seed in range(6):
        c = t.apply(sweep, "heavy", seed=seed)
        boxes, new = sweep.labels.boxes, c.frame.labels.boxes
        owner = assign_points(sweep.points, boxes)
        for k, box in enumerate(boxes):
            ratios = [new[k][f] / box[f] for f in ("length", "width", "height")]
            changed = [r for r in ratios if abs(r - 1) > 1e-12]
            assert len(changed) == 1 and abs(abs(changed[0] - 1) - 0.2) < 1e-9
            assert new[k]["cz"] - new[k]["height"] / 2 == pytest.approx(box["cz"] - box["height"] / 2)
            idx = np.flatnonzero(owner == k)
            if len(idx):
                assert box_mask(c.frame.points[idx], new[k], margin=0.13, clearance=0.0).all()


def test_object_shear_keeps_points_within_their_box(sweep):
    c = get_transform("object-shear").apply(sweep, "heavy", seed=0)
    boxes = sweep.labels.boxes
    assert c.frame.labels.boxes.tobytes() == boxes.tobytes()
    owner = assign_points(sweep.points, boxes)
    assert np.array_equal(c.modified, owner >= 0) and c.n_modified > 500
    for k, box in enumerate(boxes):  # after the shear, within the box's extent on each axis (normalize_gt)
        idx = np.flatnonzero(owner == k)
        d = _xyz(c.frame.points[idx]) - [box["cx"], box["cy"], box["cz"]]
        cs, sn = math.cos(box["yaw"]), math.sin(box["yaw"])
        local = np.column_stack([cs * d[:, 0] + sn * d[:, 1], -sn * d[:, 0] + cs * d[:, 1], d[:, 2]])
        assert np.all(np.abs(local) <= np.array([box["length"], box["width"], box["height"]]) / 2 + 1e-4)


def test_object_corruptions_without_labels_change_nothing(sweep):
    bare = Frame(sweep.points)
    for name in ("object-shear", "object-scale", "object-rotate"):
        c = get_transform(name).apply(bare, "heavy", seed=0)
        assert n_edits(c) == 0 and c.info["n_objects"] == 0


def test_delta_debugging_can_keep_one_object(sweep):
    c = get_transform("object-rotate").apply(sweep, "moderate", seed=0)
    owner = assign_points(sweep.points, sweep.labels.boxes)
    mod_src = c.origin[c.modified]
    keep = owner[mod_src] == 0
    part = apply_edits(sweep, c, keep)
    assert len(part.points) == len(sweep.points)
    row = lambda a: a.view(np.uint8).reshape(len(a), -1)  # noqa: E731
    moved = np.flatnonzero(np.any(row(part.points) != row(sweep.points), axis=1))
    assert len(moved) and set(owner[moved]) == {0}  # only the first object turned


def test_object_corruptions_are_judged_by_robustness_in_fuzz():
    from lidarmt.lidar.campaign import default_relation

    for name in ("object-shear", "object-scale", "object-rotate", "sunlight", "impulse", "wet-ground"):
        assert default_relation(get_transform(name)) == "robustness"
    assert default_relation(get_transform("remove")) == "removal"


def test_robustness_scores_the_new_corruptions_and_refuses_what_moves_objects_elsewhere():
    """sunlight, impulse and wet ground are scored against the clean labels, the object-level ones against their
    follow-ups' changed boxes (tests/test_robustness.py); insertion, removal and the rigid motions stay refused."""
    names = ["sunlight", "impulse", "wet-ground", "object-shear", "object-scale", "object-rotate"]
    assert [r.name for r in corruption_refs(names)] == names
    for name in ("insert", "remove", "rotate", "mirror"):
        with pytest.raises(FuzzArgumentError, match="labels do not describe"):
            corruption_refs([name])


def test_labels_follow_points_for_point_labels(sweep):
    c = get_transform("sunlight").apply(sweep, "light", seed=0)
    assert isinstance(c.frame.labels, Labels)
    assert (c.frame.labels.point_instance[len(sweep.points):] == -1).all()
