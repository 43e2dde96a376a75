"""The injector: the numba kernel against its NumPy reference, ROI/region/range guarantees, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from test_fuzz_support import StripRoi, make_scene

from lidarmt.engine.errors import InjectionError
from lidarmt.lidar.mr1 import _kernels
from lidarmt.lidar.mr1.inject import Bounds, Region, make_follow_up, rng_for, sample_outside
from lidarmt.types import Frame, make_points


@pytest.mark.parametrize("shape", [_kernels.DISK, _kernels.SQUARE])
def test_kernel_matches_numpy_reference(shape):
    u = np.random.default_rng(3).random((5000, 4))
    a = _kernels.uniform_to_points(u, shape, 120.0, -2.0, 3.0, 0.0, 255.0)
    b = _kernels.uniform_to_points_numpy(u, shape, 120.0, -2.0, 3.0, 0.0, 255.0)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


@pytest.mark.parametrize("region", [Region.disk(120.0), Region.grid(60.0), Region.disk(25.0)])
def test_points_outside_roi_inside_region_and_in_range(region):
    frame = make_scene(0)
    roi = StripRoi()
    fu = make_follow_up(frame, roi, 3000, seed=5, frame_index=0, trial=0, region=region)
    extra = fu.frame.points[len(frame):]
    xy = np.c_[extra["x"], extra["y"]]
    assert len(extra) == 3000
    assert not roi.contains(xy).any()
    assert region.contains(xy).all()
    b = Bounds.of(frame)
    assert extra["z"].min() >= b.zmin and extra["z"].max() <= b.zmax
    assert extra["intensity"].min() >= b.imin and extra["intensity"].max() <= b.imax
    # the whole region is used: points on both sides of the road and far out
    assert (xy[:, 1] > 6).any() and (xy[:, 1] < -6).any()
    assert np.hypot(xy[:, 0], xy[:, 1]).max() > 0.8 * region.size


def test_source_points_kept_in_place_and_added_appended():
    frame = make_scene(1)
    fu = make_follow_up(frame, StripRoi(), 100, seed=0, frame_index=1)
    assert len(fu.frame) == len(frame) + 100
    for name in ("x", "y", "z", "intensity"):
        np.testing.assert_array_equal(fu.frame.points[name][: len(frame)], frame.points[name])
        np.testing.assert_array_equal(fu.frame.points[name][len(frame):], fu.extra[name])
    np.testing.assert_array_equal(fu.added_indices, np.arange(len(frame), len(frame) + 100))
    assert fu.seed == (0, 1, 100, 0)


def test_deterministic_from_seed_tuple_and_distinct_otherwise():
    frame = make_scene(2)
    roi = StripRoi()

    def pts(seed, f, n, t):
        return make_follow_up(frame, roi, n, seed=seed, frame_index=f, trial=t).extra

    a, b = pts(1, 2, 500, 0), pts(1, 2, 500, 0)
    assert a.tobytes() == b.tobytes()
    for other in (pts(2, 2, 500, 0), pts(1, 3, 500, 0), pts(1, 2, 500, 1)):
        assert other.tobytes() != a.tobytes()
    # numba and NumPy paths give the same points (same uniforms, same rejection)
    c = sample_outside(roi, 500, rng=rng_for(1, 2, 500, 0), bounds=Bounds.of(frame), use_numba=False)
    np.testing.assert_allclose(c["x"], a["x"], atol=1e-4)


def test_roi_covering_the_region_is_a_clear_error():
    frame = make_scene(0)
    with pytest.raises(InjectionError, match="covers"):
        make_follow_up(frame, StripRoi(half_width=1e6, xmin=-1e6, xmax=1e6), 10, seed=0, frame_index=0)


def test_empty_frame_and_bad_sizes():
    empty = Frame(make_points(np.zeros((0, 3))))
    with pytest.raises(InjectionError, match="no finite points"):
        Bounds.of(empty)
    with pytest.raises(InjectionError):
        Region("disk", -1.0)
    with pytest.raises(InjectionError):
        sample_outside(StripRoi(), -1, rng=rng_for(0, 0, 0, 0), bounds=Bounds(0, 1, 0, 1))
    assert len(sample_outside(StripRoi(), 0, rng=rng_for(0, 0, 0, 0), bounds=Bounds(0, 1, 0, 1))) == 0


def test_added_points_take_the_source_fields():
    from lidarmt.types import make_points

    src = make_scene(0)
    xyz = np.c_[src.points["x"], src.points["y"], src.points["z"]]
    pts = make_points(xyz, src.points["intensity"], ring=np.ones(len(xyz), np.uint16), time=np.full(len(xyz), 5.0))
    frame = src.with_points(pts)
    fu = make_follow_up(frame, StripRoi(), 50, seed=0, frame_index=0)
    assert fu.extra.dtype == pts.dtype
    assert (fu.frame.points["time"][len(frame):] == frame.stamp).all()
    assert (fu.frame.points["ring"][len(frame):] == 0).all()
    plain = make_follow_up(src, StripRoi(), 50, seed=0, frame_index=0)
    np.testing.assert_array_equal(plain.extra["x"], fu.extra["x"])  # same points, whatever the dtype


def test_real_roi_mask_of_the_follow_up_is_the_sources(tmp_path):
    """The campaign hands t's ROI object to the SUT for t′: with Apollo's bitmap ROI the follow-up's ROI points
    are exactly the source's (added points are outside by construction; the filter is point-wise)."""
    from test_fuzz_support import write_road_geojson

    from lidarmt.lidar.roi import HDMapRoi, load_map

    frame = make_scene(3)
    roi = HDMapRoi(load_map(write_road_geojson(tmp_path / "road.geojson"))).mask(frame.pose)
    fu = make_follow_up(frame, roi, 5000, seed=1, frame_index=3, region=Region.disk(80.0))
    src_idx = roi.indices(frame)
    assert len(src_idx) > 100
    np.testing.assert_array_equal(roi.indices(fu.frame), src_idx)
