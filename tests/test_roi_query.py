"""Apollo's ROI query on the real maps: lane search, section polygons, junctions, and bitmap agreement."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from lidarmt.lidar.roi import HDMapRoi, load_map
from lidarmt.lidar.roi._reference import (
    PARALLEL_EDGE_BOUND,
    after_last_scan_line,
    boundary_distance,
    even_odd,
    perpendicular_edge_distance,
    reference_contains,
    reference_grid,
)
from lidarmt.lidar.roi.errors import MapProjectionError, MapProjectionWarning, RoiArgumentError
from lidarmt.lidar.roi.query import downsample_boundary, section_polygon
from lidarmt.types import Frame, make_points, make_pose


@pytest.fixture(scope="module")
def borregas(apollo_maps: Path):
    return load_map(apollo_maps / "borregas_ave")


@pytest.fixture(scope="module")
def shalun(apollo_maps: Path):
    return load_map(apollo_maps / "shalun")


def lane_positions(hd, n: int, seed: int) -> np.ndarray:
    """n positions on real lane centre lines (random lane, random point along it)."""
    g = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        c = hd.lanes[int(g.integers(len(hd.lanes)))].central_curve[:, :2]
        i = int(g.integers(len(c) - 1))
        t = g.uniform()
        out.append(c[i] * (1 - t) + c[i + 1] * t)
    return np.array(out)


def test_downsample_boundary_rules():
    three = np.array([[0.0, 0.0], [1.0, 5.0], [2.0, 0.0]])
    assert np.array_equal(downsample_boundary(three), three)  # <= 3 points: kept
    straight = np.stack([np.linspace(0, 100, 50), np.zeros(50)], axis=1)
    assert np.array_equal(downsample_boundary(straight), straight[[0, -1]])
    # an arc turning 2° per step: a point is kept each time the accumulated turn exceeds 5° (after 3 steps)
    ang = np.radians(np.arange(0, 31) * 2.0)
    arc = np.stack([np.cos(ang), np.sin(ang)], axis=1) * 100
    kept = downsample_boundary(arc)
    assert len(kept) < len(arc) and np.array_equal(kept[0], arc[0]) and np.array_equal(kept[-1], arc[-1])
    # duplicate points are skipped, not turned on
    dup = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert np.array_equal(downsample_boundary(dup), dup[[0, -1]])
    # a right-angle corner is kept
    corner = np.array([[0.0, 0.0], [5.0, 0.0], [10.0, 0.0], [10.0, 5.0], [10.0, 10.0]])
    assert np.array_equal(downsample_boundary(corner), corner[[0, 2, 4]])


def test_section_polygon_is_left_then_reversed_right(borregas):
    sec = next(s for r in borregas.roads if r.junction_id is None for s in r.sections)
    poly = section_polygon(sec)
    left = [e for e in sec.edges if e.type == 2]
    right = [e for e in sec.edges if e.type == 3]
    assert np.array_equal(poly[0], left[0].points[0, :2])
    assert np.array_equal(poly[-1], right[0].points[0, :2])
    assert len(poly) <= sum(len(e.points) for e in left + right)


def test_query_finds_roads_then_junctions(borregas):
    roi = HDMapRoi(borregas)
    j = borregas.junctions[0].polygon[:, :2].mean(axis=0)
    polys, ids = roi.query_with_ids(j)
    assert any(i.startswith("junction:") for i in ids) and any("/" in i for i in ids)
    first_junction = next(k for k, i in enumerate(ids) if i.startswith("junction:"))
    assert all(i.startswith("junction:") for i in ids[first_junction:])
    assert len(set(ids)) == len(ids)
    # every selected section has a lane whose centre line passes within 60 m
    lanes = {ln.id: ln for ln in borregas.lanes}
    for rid_sid in ids[:first_junction]:
        rid, sid = rid_sid.split("/")
        sec = next(s for r in borregas.roads if r.id == rid for s in r.sections if s.id == sid)
        d = min(np.hypot(*(lanes[lid].central_curve[:, :2] - j).T).min() for lid in sec.lane_ids)
        assert d <= 60.0 + 30.0  # vertex distance bounds the segment distance loosely
    # and a larger radius never finds fewer polygons
    assert len(HDMapRoi(borregas, map_radius=120.0).query(j)) >= len(polys)


def test_query_matches_a_brute_force_lane_scan(shalun):
    from lidarmt.lidar.roi.query import _segments_distance

    roi = HDMapRoi(shalun)
    for p in lane_positions(shalun, 20, seed=3) + [37.0, -21.0]:
        near = []
        for li, ln in enumerate(shalun.lanes):
            c = ln.central_curve[:, :2]
            if _segments_distance(p, c[:-1], c[1:]).min() <= 60.0:
                near.append(li)
        assert roi._index.owners_within(p, 60.0).tolist() == near


@pytest.mark.slow
def test_bitmap_agrees_with_exact_containment_on_real_maps(borregas, shalun):
    """50 sensor positions on real lane centre lines x 20k random points: >= 99 % agreement with exact even-odd
    containment of the same polygons; every disagreement lies within one cell diagonal of a polygon edge (1.8
    cells for an edge parallel to the scan lines, whose interval Apollo draws on the next scan line), or
    in a cell where Apollo's scan conversion itself departs from the exact fill: rows past a polygon's last scan
    line (Apollo stops up to two cells before its far end, and never draws the bitmap's last row), and
    self-intersecting polygons (the LGSVL maps' two-way sections give some: left edges of both directions, then
    right edges reversed), because Apollo re-sorts the active edges only when one starts or ends. The kernels
    equal the reference bit for bit, and the always-re-sorting reference meets the one-cell bound everywhere.
    (The benchmark runs 1,000 positions x 1e6 points.)"""
    g = np.random.default_rng(7)
    total = agree = 0
    diag = 0.25 * np.sqrt(2) + 1e-6
    for hd, seed in ((borregas, 1), (shalun, 2)):
        roi = HDMapRoi(hd)
        for pos in lane_positions(hd, 25, seed):
            yaw = g.uniform(-np.pi, np.pi)
            pose = make_pose([pos[0], pos[1], 3.0], [0, 0, np.sin(yaw / 2), np.cos(yaw / 2)])
            m = roi.mask(pose)
            assert not m.empty
            apollo = reference_grid(m.polygons, m.major, 70.0, 0.25, 0.0)
            sorted_fill = reference_grid(m.polygons, m.major, 70.0, 0.25, 0.0, resort_every_scan=True)
            assert np.array_equal(m.grid() if m.major == 0 else m.grid().T, apollo)
            pts = g.uniform([-75, -75, -3], [75, 75, 3], (20_000, 3)).astype(np.float32)
            got = m.contains(pts)
            local = m.to_local(pts)
            x, y = local[:, 0].astype(np.float64), local[:, 1].astype(np.float64)
            exact = even_odd(m.polygons, x, y) & (x >= -70) & (x < 70) & (y >= -70) & (y < 70)
            bad = got != exact
            total += len(pts)
            agree += int((~bad).sum())
            srt = reference_contains(sorted_fill, m.major, 70.0, 0.25, local[:, 0], local[:, 1])
            # Apollo draws floor((end - start) / cell) scan lines from a cell centre: the rows up to two cells
            # before a polygon's far end along the scan axis (and the bitmap's last row) are never drawn
            last_row = after_last_scan_line(m.polygons, m.major, 70.0, 0.25, x, y) & ~got
            off = (srt != exact) & ~last_row
            if off.any():
                d = boundary_distance(m.polygons, x[off], y[off])
                perp = perpendicular_edge_distance(m.polygons, m.major, x[off], y[off])
                assert np.all((d <= diag) | (perp <= PARALLEL_EDGE_BOUND * 0.25 + 1e-6))
            far = bad & ((got != srt) | last_row)  # Apollo's stale edge order / scan range, not rasterisation
            near = bad & ~far
            if near.any():
                d = boundary_distance(m.polygons, x[near], y[near])
                # an edge parallel to the scan lines is drawn on the next scan line: 1.5 cells across, 1 along
                perp = perpendicular_edge_distance(m.polygons, m.major, x[near], y[near])
                assert np.all((d <= diag) | (perp <= PARALLEL_EDGE_BOUND * 0.25 + 1e-6))
    assert agree / total >= 0.99


def test_local_polygons_are_the_world_polygons_translated(borregas):
    roi = HDMapRoi(borregas)
    pos = lane_positions(borregas, 1, seed=5)[0]
    pose = make_pose([pos[0], pos[1], 0.0], [0, 0, 0, 1])
    m = roi.mask(pose)
    world = roi.query(pos)
    assert len(world) == len(m.polygons)
    for w, loc in zip(world, m.polygons, strict=True):
        np.testing.assert_allclose(loc, w - pos, atol=1e-5)


def test_far_pose_gives_an_empty_roi_not_an_error(borregas):
    roi = HDMapRoi(borregas)
    x0, y0, x1, y1 = borregas.bounds()
    pose = make_pose([x1 + 2000.0, y1 + 2000.0, 0.0], [0, 0, 0, 1])
    with pytest.warns(MapProjectionWarning, match="outside the map"):
        m = roi.mask(pose)
    assert m.empty and "no lane within 60 m" in m.note
    frame = Frame(make_points(np.random.default_rng(0).normal(size=(100, 3))), pose=pose)
    assert len(m.indices(frame)) == 0
    # inside the bounds but away from every lane: empty without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inner = HDMapRoi(borregas, map_radius=1.0).mask(make_pose([x0 + 1, y0 + 1, 0], [0, 0, 0, 1]))
    assert inner.empty


def test_pose_from_another_projection_is_a_one_line_error(borregas):
    roi = HDMapRoi(borregas)
    # shalun (UTM zone 51) coordinates against the zone-10 borregas map: thousands of km away
    pose = make_pose([215_750.0, 2_546_150.0, 0.0], [0, 0, 0, 1])
    with pytest.raises(MapProjectionError) as ei:
        roi.mask(pose)
    msg = str(ei.value)
    assert "\n" not in msg and "km outside the bounds" in msg and "base_map.bin" in msg


def test_mask_needs_a_pose(borregas):
    roi = HDMapRoi(borregas)
    with pytest.raises(RoiArgumentError, match="pose"):
        roi.mask(None)
    with pytest.raises(RoiArgumentError):
        roi.mask(np.eye(3))
    with pytest.raises(RoiArgumentError):
        HDMapRoi(borregas, map_radius=0)


def test_range_120_covers_more(borregas):
    pos = borregas.junctions[0].polygon[:, :2].mean(axis=0)
    pose = make_pose([pos[0], pos[1], 0.0], [0, 0, 0, 1])
    a = HDMapRoi(borregas).mask(pose)
    b = HDMapRoi(borregas, range=120.0).mask(pose)
    assert a.bitmap.shape == (560, 9) and b.bitmap.shape == (960, 16)
    assert b.area >= a.area
    pts = np.random.default_rng(0).uniform(-69, 69, (5000, 3)).astype(np.float32)
    # inside both grids the two bitmaps agree except on scan-line placement near edges
    assert (a.contains(pts) == b.contains(pts)).mean() > 0.98


def test_masks_are_cached_by_pose(borregas):
    roi = HDMapRoi(borregas)
    pos = lane_positions(borregas, 2, seed=9)
    a = roi.mask(make_pose([*pos[0], 0.0], [0, 0, 0, 1]))
    assert roi.mask(make_pose([*pos[0], 0.0], [0, 0, 0, 1])) is a
    b = roi.mask(make_pose([*pos[1], 0.0], [0, 0, 0, 1]))
    assert b is not a
    for k in range(20):  # bounded
        roi.mask(make_pose([pos[0][0] + k, pos[0][1], 0.0], [0, 0, 0, 1]))
    assert len(roi._cache) <= 16


def test_map_without_geometry_is_a_map_error():
    from lidarmt.lidar.roi import HDMap, MapError

    with pytest.raises(MapError, match="no geometry"):
        HDMapRoi(HDMap())
