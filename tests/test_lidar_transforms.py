"""LiDAR transformations: registry, determinism, parameter checks, provenance (apply_edits), geometry, motion."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lidarmt.errors import ArgumentError
from lidarmt.lidar.errors import LidarTransformError
from lidarmt.lidar.sensor import rings_of
from lidarmt.lidar.synthetic import synthetic_sweep, with_front_camera
from lidarmt.lidar.transforms import (
    FAMILIES,
    TransformContext,
    apply_edits,
    get_transform,
    list_transforms,
    n_edits,
    resolve_params,
    select,
)
from lidarmt.lidar.transforms.base import make_change, map_boxes, map_xy
from lidarmt.lidar.transforms.objects import ObjectLibrary
from lidarmt.lidar.transforms.registry import available, check_transform

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)
#: transformations whose output depends on the seed (the others are deterministic in the parameters alone)
RANDOM = {"fog", "rain", "snow", "beam-loss", "range-noise", "crosstalk", "insert", "remove", "sunlight", "impulse",
          "object-shear", "object-scale", "object-rotate", "spatial-misalignment"}


def _stream(n_azimuth: int):
    """``frame_at`` of a synthetic camera stream (the misalignments pair a sweep with another of its stream)."""
    return lambda j: with_front_camera(synthetic_sweep(seed=int(j), n_azimuth=n_azimuth))


@pytest.fixture(scope="module")
def sweep():
    return with_front_camera(synthetic_sweep(n_azimuth=512))  # with a camera: every transformation applies


@pytest.fixture(scope="module")
def context(sweep):
    return TransformContext(library=ObjectLibrary.from_frames([synthetic_sweep(seed=5, n_azimuth=1024)],
                                                              min_points=20), frame_at=_stream(512))


def _change_bytes(c) -> bytes:
    return c.frame.points.tobytes() + c.origin.tobytes() + c.modified.tobytes()


def test_registry_lists_at_least_ten_across_the_five_families():
    ts = list_transforms()
    assert len(ts) >= 10
    assert {t.family for t in ts} == set(FAMILIES)
    for t in ts:
        check_transform(t, t.name)  # levels resolve, params are Param, family known
        assert t.doc and set(t.levels) == {"light", "moderate", "heavy"}
    assert [t.name for t in select("weather")] == ["fog", "rain", "snow", "sunlight", "wet-ground"]
    assert [t.name for t in select("mirror,fog,mirror")] == ["mirror", "fog"]
    assert len(select("all")) == len(available())


def test_unknown_names_are_one_line_errors():
    with pytest.raises(LidarTransformError, match="unknown LiDAR transformation 'haze'; known: fog") as e:
        get_transform("haze")
    assert "\n" not in str(e.value) and isinstance(e.value, ArgumentError)
    with pytest.raises(LidarTransformError, match="unknown LiDAR transformation 'haze' in"):
        select("fog,haze")


@pytest.mark.parametrize(("name", "params", "match"), [
    ("fog", {"visibility_m": 5.0}, r"fog: visibility_m=5 is outside its range \[10, 2000\] m"),
    ("fog", {"visibilty": 50.0}, r"fog: unknown parameter\(s\) visibilty; its parameters are visibility_m"),
    ("beam-skip", {"every": 2.5}, "beam-skip: every=2.5 must be a whole number"),
    ("rain", {"rate_mm_h": float("nan")}, "rain: rate_mm_h=nan is outside its range"),
    ("rain", {"rate_mm_h": "x"}, "rain: rate_mm_h='x' is not a number"),
    ("rotate", "extreme", "rotate: unknown level 'extreme'; levels are light, moderate, heavy"),
])
def test_parameter_validation(sweep, name, params, match):
    with pytest.raises(LidarTransformError, match=match) as e:
        get_transform(name).apply(sweep, params, seed=0)
    assert "\n" not in str(e.value)


def test_missing_parameters_come_from_the_moderate_level():
    t = get_transform("intensity")
    assert resolve_params(t, {"gain": 2.0}) == {"gain": 2.0, "saturation": t.levels["moderate"]["saturation"]}
    assert resolve_params(t, "heavy") == t.levels["heavy"]


@pytest.mark.parametrize("name", [n for n in available()])
def test_each_transformation_is_deterministic(sweep, context, name):
    t = get_transform(name)
    a = t.apply(sweep, "moderate", seed=3, context=context)
    b = t.apply(sweep, "moderate", seed=3, context=context)
    assert _change_bytes(a) == _change_bytes(b) and a.info == b.info
    assert json.loads(json.dumps(a.info)) == a.info  # info is JSON-able (bundles and journals store it)
    assert a.frame.points.dtype == sweep.points.dtype
    assert a.origin.dtype == np.int64 and len(a.origin) == len(a.frame.points) == len(a.modified)
    assert sweep.points.tobytes() == synthetic_sweep(n_azimuth=512).points.tobytes()  # input untouched
    kept = a.origin[a.origin >= 0]
    assert np.all(np.diff(kept) > 0), "source points keep their order"
    assert np.all(a.origin[len(kept):] == -1), "added points come last"
    assert n_edits(a) > 0, f"{name} changed nothing at its moderate level"
    others = {_change_bytes(t.apply(sweep, "moderate", seed=s, context=context)) for s in (4, 5, 6)}
    if name in RANDOM:  # (a draw of a few among few, as remove's, may repeat for one other seed)
        assert others - {_change_bytes(a)}, f"{name} ignores its seed"
    else:
        assert others == {_change_bytes(a)}, f"{name} depends on its seed"


def test_modified_flags_are_exact(sweep):
    c = get_transform("crosstalk").apply(sweep, "heavy", seed=1)
    src = sweep.points[c.origin]
    same = np.array([a.tobytes() == b.tobytes() for a, b in zip(c.frame.points, src, strict=True)])
    assert np.array_equal(~same, c.modified)
    assert c.n_modified == c.info["n_spurious"]


@pytest.mark.slow
@settings(SETTINGS)
@given(name=st.sampled_from(sorted(set(available()))), seed=st.integers(0, 2**32 - 1),
       mask_seed=st.integers(0, 2**32 - 1), p=st.floats(0.0, 1.0))
def test_apply_edits_all_none_and_subsets(name, seed, mask_seed, p):
    sweep = with_front_camera(synthetic_sweep(n_azimuth=64, seed=1))
    lib = ObjectLibrary.from_frames([synthetic_sweep(n_azimuth=256)], min_points=5)
    c = get_transform(name).apply(sweep, "heavy", seed=seed, context=TransformContext(library=lib,
                                                                                       frame_at=_stream(64)))
    n = n_edits(c)
    full = apply_edits(sweep, c, np.ones(n, dtype=bool))
    assert full.points.tobytes() == c.frame.points.tobytes()
    none = apply_edits(sweep, c, np.zeros(n, dtype=bool))
    assert none.points.tobytes() == sweep.points.tobytes()
    keep = np.random.default_rng(mask_seed).random(n) < p
    part = apply_edits(sweep, c, keep)
    nd = len(c.dropped)
    kd, ka = keep[:nd], keep[n - c.n_added:]
    assert len(part.points) == len(sweep.points) - int(kd.sum()) + int(ka.sum())
    if part.labels is not None:
        assert len(part.labels.point_instance) == len(part.points)


def test_apply_edits_rejects_a_wrong_mask(sweep):
    c = get_transform("beam-loss").apply(sweep, "light", seed=0)
    with pytest.raises(ValueError, match="edits"):
        apply_edits(sweep, c, np.ones(n_edits(c) + 1, dtype=bool))


def test_make_change_marks_dropped_and_added(sweep):
    keep = np.ones(len(sweep.points), dtype=bool)
    keep[[0, 5, 9]] = False
    added = sweep.points[:2].copy()
    c = make_change(sweep, keep, sweep.points[keep], added)
    assert c.dropped.tolist() == [0, 5, 9] and c.n_added == 2 and c.n_modified == 0
    assert n_edits(c) == 5
    assert c.frame.labels.point_instance[-2:].tolist() == [-1, -1]


def test_beam_loss_and_skip_remove_whole_rings(sweep):
    c = get_transform("beam-skip").apply(sweep, {"every": 4}, seed=0)
    assert set(np.unique(rings_of(c.frame.points)) % 4) == {0, 1, 2}
    assert len(c.dropped) == int(np.count_nonzero(sweep.points["ring"] % 4 == 3))
    c = get_transform("beam-loss").apply(sweep, {"fraction": 0.25}, seed=0)
    lost = set(c.info["lost_rings"])
    assert len(lost) == 16 and not lost & set(np.unique(c.frame.points["ring"]).tolist())
    # without a ring field, rings come from the elevation angle and agree with the simulator's
    bare = synthetic_sweep(n_azimuth=512, ring=False)
    assert np.array_equal(rings_of(bare.points), sweep.points["ring"].astype(np.int64))


def test_range_noise_moves_points_along_their_rays(sweep):
    c = get_transform("range-noise").apply(sweep, {"sigma_cm": 10.0}, seed=0)
    a, b = sweep.xyz.astype(np.float64), c.frame.xyz.astype(np.float64)
    ra, rb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    cos = np.sum(a * b, axis=1) / (ra * rb)
    assert np.all(cos > 1 - 1e-9)
    assert 0.08 < np.std(rb - ra) < 0.12


def test_fov_loss_drops_the_sector(sweep):
    c = get_transform("fov-loss").apply(sweep, {"width_deg": 60.0, "center_deg": 90.0}, seed=0)
    az = np.degrees(np.arctan2(c.frame.points["y"], c.frame.points["x"]))
    assert not np.any((az > 60.5) & (az < 119.5))
    src = np.degrees(np.arctan2(sweep.points["y"], sweep.points["x"]))
    assert len(c.dropped) == int(np.count_nonzero(np.abs(src - 90.0) <= 30.0))


def test_intensity_gain_and_saturation(sweep):
    c = get_transform("intensity").apply(sweep, {"gain": 3.0, "saturation": 100.0}, seed=0)
    want = np.minimum(sweep.points["intensity"].astype(np.float64) * 3.0, 100.0).astype(np.float32)
    assert np.array_equal(c.frame.points["intensity"], want)


@pytest.mark.parametrize("angle", [30.0, -135.0, 180.0])
def test_rotation_moves_points_and_boxes_by_its_geometry(sweep, angle):
    c = get_transform("rotate").apply(sweep, {"angle_deg": angle}, seed=0)
    moved = map_xy(c.geometry, np.c_[sweep.points["x"], sweep.points["y"]])
    assert np.allclose(moved, np.c_[c.frame.points["x"], c.frame.points["y"]], atol=1e-4)
    assert np.array_equal(c.frame.points["z"], sweep.points["z"])
    boxes = c.frame.labels.boxes
    a = math.radians(angle)
    b0 = sweep.labels.boxes[0]
    assert boxes[0]["cx"] == pytest.approx(b0["cx"] * math.cos(a) - b0["cy"] * math.sin(a))
    assert math.cos(boxes[0]["yaw"] - b0["yaw"] - a) == pytest.approx(1.0)
    # every labelled object's points are still inside its moved box
    for b in boxes:
        inst = c.frame.labels.point_instance == b["instance"]
        from lidarmt.lidar.transforms.objects import box_mask

        assert box_mask(c.frame.points[inst], b, clearance=-0.5, margin=0.05).all()


def test_mirror_negates_y_and_yaw(sweep):
    c = get_transform("mirror").apply(sweep, None, seed=0)
    assert np.array_equal(c.frame.points["y"], -sweep.points["y"])
    assert np.array_equal(c.frame.points["x"], sweep.points["x"])
    assert np.allclose(map_boxes(c.geometry, sweep.labels.boxes)["yaw"], -sweep.labels.boxes["yaw"])


def test_rolling_shutter_then_deskew_restores_the_sweep(sweep):
    straight = get_transform("rolling-shutter").apply(sweep, {"speed_mps": 20.0, "yaw_rate_dps": 0.0}, seed=0)
    # a point fired at the sweep's start (behind the car) moves by the distance driven in one sweep, 2 m
    assert 1.98 < straight.info["max_shift_m"] <= 2.0
    p = {"speed_mps": 20.0, "yaw_rate_dps": 20.0}
    distorted = get_transform("rolling-shutter").apply(sweep, p, seed=0)
    back = get_transform("deskew").apply(distorted.frame, p, seed=0).frame
    err = np.linalg.norm(back.xyz - sweep.xyz, axis=1)
    # the firing time is recomputed from the distorted azimuth: the residual is small against the 2 m shift
    assert np.median(err) < 0.02 and np.percentile(err, 99) < 0.2


def test_rolling_shutter_uses_per_point_times_when_given(sweep):
    from lidarmt.types import make_points

    pts = make_points(sweep.xyz, sweep.points["intensity"], time=np.full(len(sweep.points), sweep.stamp - 0.05))
    f = sweep.with_points(pts)
    c = get_transform("rolling-shutter").apply(f, {"speed_mps": 10.0, "yaw_rate_dps": 0.0}, seed=0)
    assert c.info["firing_time"] == "time field"
    assert np.allclose(c.frame.points["x"] - pts["x"], 0.5, atol=1e-3)  # every point 50 ms before: 0.5 m


def test_entry_point_plugins_are_checked(monkeypatch, sweep):
    from lidarmt.lidar.transforms import registry

    class Bad:
        name = "bad"

    class FakeEP:
        name = "bad"
        value = "pkg:Bad"

        def load(self):
            return Bad

    monkeypatch.setattr(registry.REGISTRY, "plugins", lambda: {"bad": FakeEP()})
    registry.REGISTRY.forget("bad")
    with pytest.raises(LidarTransformError, match="plug-in 'bad' gave a Bad, which lacks"):
        registry.get_transform("bad")

    class Good:
        name = "dust"
        family = "sensor"
        params = ()
        doc = "adds nothing"
        levels = {"light": {}, "moderate": {}, "heavy": {}}

        def apply(self, frame, params, *, seed, context=None):
            return make_change(frame, np.arange(len(frame.points)), frame.points.copy())

    class GoodEP(FakeEP):
        name = "dust"

        def load(self):
            return Good

    monkeypatch.setattr(registry.REGISTRY, "plugins", lambda: {"dust": GoodEP()})
    assert registry.get_transform("dust").apply(sweep, {}, seed=0).n_added == 0
    assert "dust" in registry.available()
    registry.REGISTRY.forget("dust")


@pytest.mark.parametrize("name", [n for n in available()])
def test_degenerate_frames(context, name):
    """No points, points at the sensor's origin, non-finite points: a change, never an exception or a warning."""
    import warnings

    from lidarmt.types import Frame, make_points

    frames = [Frame(make_points(np.zeros((0, 3)))), Frame(make_points(np.zeros((3, 3)), 10.0)),
              Frame(make_points(np.array([[np.nan, 0, 0], [5, 0, 0], [1, 2, np.inf]]), [10.0, np.nan, 3.0]))]
    t = get_transform(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for f in map(with_front_camera, frames):
            c = t.apply(f, "heavy", seed=0, context=dataclasses.replace(context, frame_at=lambda j, f=f: f))
            n = n_edits(c)
            assert apply_edits(f, c, np.ones(n, dtype=bool)).points.tobytes() == c.frame.points.tobytes()
            if name in ("fog", "rain", "snow") and len(f) == 3:
                assert c.info["n_lost"] == 3  # no range or no finite value: no return
