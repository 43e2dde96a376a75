"""The procedural town: layout, lanes, junctions, ground raster and its HD map (read back by the ROI filter)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lidarmt.lidar.roi import EdgeType, HDMapRoi, load_map
from lidarmt.lidar.sim import geom
from lidarmt.lidar.sim.objects import Mat
from lidarmt.lidar.sim.town import build_town


@pytest.fixture(scope="module")
def town():
    return build_town(11, size=(3, 3))


def test_same_seed_same_town(town) -> None:
    again = build_town(11, size=(3, 3))
    np.testing.assert_array_equal(town.raster, again.raster)
    np.testing.assert_array_equal(town.origin, again.origin)
    assert list(town.lanes) == list(again.lanes)
    other = build_town(12, size=(3, 3))
    assert other.raster.shape != town.raster.shape or not np.array_equal(other.raster, town.raster)


def test_layout(town) -> None:
    degree = Counter()
    for r in town.roads:
        degree[r.a] += 1
        degree[r.b] += 1
        assert 1 <= r.n_fwd <= 3 and r.n_fwd == len(r.lanes_fwd)
        assert 3.0 < r.lane_width < 4.0
    assert min(degree.values()) >= 2  # corners, T and X junctions; no dead ends
    assert set(degree.values()) >= {2, 3} or 4 in degree.values()
    # every road lane continues through its junctions into another road
    for ln in town.driving_lanes():
        assert ln.successors, ln.id
        for s in ln.successors:
            j = town.lanes[s]
            assert j.junction is not None
            np.testing.assert_allclose(j.center[0], ln.center[-1], atol=1e-9)
            assert town.lanes[j.successors[0]].junction is None
    # forward lanes keep right (right-hand traffic): the lane lies to the right of the centre line
    r = town.roads[0]
    lane = town.lanes[r.lanes_fwd[0]]
    nrm = geom.left_normals(r.center)
    mid = len(r.center) // 2
    assert np.dot(lane.center[mid] - r.center[mid], nrm[mid]) < 0


def test_raster_surfaces(town) -> None:
    for ln in town.driving_lanes():
        codes = town.surface(ln.center[1:-1])
        assert np.isin(codes, [Mat.ASPHALT, Mat.MARKING, Mat.CROSSWALK]).mean() > 0.9
    r = town.roads[0]
    outside = geom.offset(r.center, r.half_left + town.sidewalk_width / 2)[3:-3]
    assert (town.surface(outside) == Mat.SIDEWALK).mean() > 0.8
    assert (town.ground_z(outside) - town.height(outside)) == pytest.approx(town.curb_height)
    on_road = town.driving_lanes()[0].center
    np.testing.assert_allclose(town.ground_z(on_road), town.height(on_road))


def test_terrain_rolls_gently(town) -> None:
    lo = town.raster_origin
    hi = lo + np.array(town.raster.shape[::-1]) * town.res
    xy = np.random.default_rng(0).uniform(lo, hi, (2000, 2))
    h = town.height(xy)
    grade = np.hypot(*town.slope(xy).T)
    assert 0.2 < h.max() - h.min() < 8.0  # not flat, no mountains
    assert grade.max() < 0.08 and grade.mean() > 0.002  # terrain waves up to ~5 % plus the road crown
    # the gradient is the derivative of the height
    e = 1e-4
    num = (town.height(xy + [e, 0]) - town.height(xy - [e, 0])) / (2 * e)
    np.testing.assert_allclose(num, town.slope(xy)[:, 0], atol=1e-6)
    assert (town.raster == Mat.MARKING).any() and (town.raster == Mat.CROSSWALK).any()


def test_hdmap_model(town) -> None:
    hd = town.hdmap()
    assert hd.header.proj.startswith("+proj=utm +zone=10")
    x0, y0, x1, y1 = hd.bounds()
    assert 580_000 < x0 < x1 < 595_000 and 4_135_000 < y0 < y1 < 4_147_000
    lanes = {ln.id for ln in hd.lanes}
    junction_ids = {j.id for j in hd.junctions}
    in_junction = [r for r in hd.roads if r.junction_id]
    assert len(in_junction) == len(hd.junctions)
    for road in hd.roads:
        for sec in road.sections:
            assert set(sec.lane_ids) <= lanes
            types = [e.type for e in sec.edges]
            assert types == [EdgeType.LEFT_BOUNDARY, EdgeType.RIGHT_BOUNDARY]
        if road.junction_id:
            assert road.junction_id in junction_ids
    assert hd.crosswalks


def test_written_map_feeds_the_roi_filter(town, tmp_path) -> None:
    from lidarmt.lidar.sim.record import write_town_map

    paths = write_town_map(town, tmp_path / "map")
    assert {p.name for p in paths.values()} == {"base_map.bin", "base_map.txt", "base_map.geojson"}
    hd = load_map(tmp_path / "map")
    assert len(hd.lanes) == len(town.lanes)
    roi = HDMapRoi(hd)
    lane = town.driving_lanes()[0]
    p = lane.center[len(lane.center) // 2] + town.origin
    pose = np.eye(4)
    pose[:2, 3] = p
    mask = roi.mask(pose)
    assert not mask.empty
    # points on the road are inside, points 20 m beyond the curb are not
    road = town.roads[0]
    on_road = road.center[5:-5:5] + town.origin - p
    off_road = geom.offset(road.center, road.half_left + town.sidewalk_width + 15)[5:-5:5] + town.origin - p
    near = np.linalg.norm(on_road, axis=1) < 55
    near_off = np.linalg.norm(off_road, axis=1) < 55
    if near.any():
        assert mask.contains(on_road[near]).all()
    if near_off.any():
        assert not mask.contains(off_road[near_off]).any()


def test_roads_are_crowned(town) -> None:
    rises = []
    for r in town.roads:
        c = r.center[5:-5:4]
        left, right = geom.offset(r.center, r.half_left)[5:-5:4], geom.offset(r.center, -r.half_right)[5:-5:4]
        rises.append(town.height(c) - 0.5 * (town.height(left) + town.height(right)))  # terrain trends cancel
    rise = np.concatenate(rises)
    assert np.median(rise) > 0.02 and (rise > 0).mean() > 0.95
