"""Apollo's ROI bitmap on hand-made polygons: numba kernels vs the plain-Python reference (bit for bit) and vs
exact even-odd containment (agreement up to one cell diagonal from an edge)."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.roi import PointLabelRoi, RoiMask
from lidarmt.lidar.roi._reference import (
    PARALLEL_EDGE_BOUND,
    after_last_scan_line,
    boundary_distance,
    even_odd,
    perpendicular_edge_distance,
    reference_contains,
    reference_grid,
    reference_major,
)
from lidarmt.lidar.roi.bitmap import XMAJOR, YMAJOR, major_direction
from lidarmt.lidar.roi.errors import RoiArgumentError
from lidarmt.types import Frame, Roi, make_points, make_pose


def unpack(mask: RoiMask) -> np.ndarray:
    dims = mask.bitmap.shape[0]
    return np.unpackbits(mask.bitmap.byteswap().view(np.uint8), axis=1, bitorder="big")[:, :dims].astype(bool)


def check_against_references(polygons: list[np.ndarray], *, rng: float = 70.0, cell: float = 0.25,
                             n: int = 40_000, seed: int = 0) -> RoiMask:
    polygons = [np.asarray(p, dtype=np.float64) for p in polygons]
    m = RoiMask.from_polygons(polygons, range=rng, cell=cell)
    # 1. bit for bit against the independent Python reference
    assert m.major == reference_major(polygons, rng)
    ref = reference_grid(polygons, m.major, rng, cell, 0.0)
    assert np.array_equal(unpack(m), ref)
    # 2. bits beyond the grid's last cell are never set
    dims = m.bitmap.shape[0]
    full = np.unpackbits(m.bitmap.byteswap().view(np.uint8), axis=1, bitorder="big")
    assert not full[:, dims:].any()
    # 3. against exact even-odd containment, except within one cell diagonal of an edge
    g = np.random.default_rng(seed)
    x = g.uniform(-rng - 5, rng + 5, n).astype(np.float32)
    y = g.uniform(-rng - 5, rng + 5, n).astype(np.float32)
    got = m.contains_local(x, y)
    assert np.array_equal(got, reference_contains(ref, m.major, rng, cell, x, y))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    exact = even_odd(polygons, x64, y64) & (x64 >= -rng) & (x64 < rng) & (y64 >= -rng) & (y64 < rng)
    bad = got != exact
    major_coord = x64 if m.major == 0 else y64
    assert not got[major_coord >= rng - cell].any()  # Apollo never draws the last row along the scan axis
    bad &= ~(after_last_scan_line(polygons, m.major, rng, cell, x64, y64) & ~got)  # rows past the last scan line
    if bad.any():
        d = boundary_distance(polygons, x64[bad], y64[bad])
        perp = perpendicular_edge_distance(polygons, m.major, x64[bad], y64[bad])
        assert np.all((d <= cell * np.sqrt(2) + 1e-9) | (perp <= PARALLEL_EDGE_BOUND * cell + 1e-9)), d.max()
    assert bad.mean() < 0.01
    return m


def test_convex_polygon():
    m = check_against_references([np.array([[-20.3, -10.1], [30.7, -12.2], [35.1, 25.9], [-15.2, 20.4]])])
    assert m.contains_local(np.array([0.0]), np.array([0.0])).tolist() == [True]


def test_concave_polygon():
    star = [[np.cos(a) * (40 if i % 2 == 0 else 15), np.sin(a) * (40 if i % 2 == 0 else 15)]
            for i, a in enumerate(np.linspace(0, 2 * np.pi, 14, endpoint=False))]
    m = check_against_references([np.array(star) + [3.1, -2.7]])
    # the notch between two arms is outside
    assert not m.contains_local(np.array([np.cos(np.pi / 7) * 30 + 3.1]),
                                np.array([np.sin(np.pi / 7) * 30 - 2.7]))[0]


def test_polygon_with_a_hole_by_even_odd_over_two_rings():
    outer = np.array([[-30.0, -30.0], [30.0, -30.0], [30.0, 30.0], [-30.0, 30.0], [-30.0, -30.0]])
    inner = np.array([[-10.0, -10.0], [-10.0, 10.0], [10.0, 10.0], [10.0, -10.0], [-10.0, -10.0]])
    m = check_against_references([np.vstack([outer, inner])])
    inside = m.contains_local(np.array([0.0, 20.0, 35.0]), np.array([0.0, 0.0, 0.0]))
    assert inside.tolist() == [False, True, False]


def test_polygon_crossing_and_touching_the_bitmap_border():
    big = np.array([[-100.0, -5.0], [100.0, -5.0], [100.0, 5.0], [-100.0, 5.0]])
    edge = np.array([[-70.0, 40.0], [70.0, 40.0], [70.0, 50.0], [-70.0, 50.0]])  # exactly on the border
    m = check_against_references([big, edge])
    # IsExist: [-range, range) on both axes
    lx = np.array([-70.0, 69.99, 70.0, 0.0, 0.0], dtype=np.float32)
    ly = np.array([0.0, 0.0, 0.0, 70.0, -70.0], dtype=np.float32)
    assert m.contains_local(lx, ly).tolist() == [True, True, False, False, False]


def test_polygon_with_wholly_negative_coordinates():
    # max-accumulator quirk (numeric_limits<double>::min): the scan range runs up to ~0, harmlessly
    m = check_against_references([np.array([[-60.2, -50.3], [-20.4, -55.6], [-25.7, -10.8], [-55.9, -15.1]])])
    assert not m.empty


def test_vertices_exactly_on_scan_lines_and_cell_borders():
    # scan lines are at cell centres (-70 + (i + 0.5) * 0.25): put vertices on them and on cell borders
    on_scan = np.array([[-10.125, -10.125], [10.125, -10.125], [10.125, 10.125], [-10.125, 10.125]])
    on_border = np.array([[20.0, -5.0], [40.0, -5.0], [40.0, 15.0], [30.0, 25.0], [20.0, 15.0]])
    diamond = np.array([[-40.125, 30.0], [-30.125, 40.0], [-20.125, 30.0], [-30.125, 20.0]])
    check_against_references([on_scan])
    check_against_references([on_border])
    check_against_references([diamond])
    check_against_references([on_scan, on_border, diamond], rng=120.0)


def test_half_open_intervals_leave_the_cell_holding_the_upper_end_empty():
    # XMAJOR here (narrow in x); intervals run along y from -2.0 to 3.0: cells [-2.0, 3.0) are set, not 3.0's
    m = RoiMask.from_polygons([np.array([[-1.0, -2.0], [1.0, -2.0], [1.0, 3.0], [-1.0, 3.0]])])
    assert m.major == XMAJOR
    y = np.array([-2.0, -1.99, 2.99, 3.0, 3.1], dtype=np.float32)
    assert m.contains_local(np.zeros(5, dtype=np.float32), y).tolist() == [True, True, True, False, False]


def test_major_direction_and_ties():
    wide = [np.array([[-50.0, -1.0], [50.0, -1.0], [50.0, 1.0]])]
    tall = [np.array([[-1.0, -50.0], [1.0, -50.0], [1.0, 50.0]])]
    square = [np.array([[-5.0, -5.0], [5.0, -5.0], [5.0, 5.0]])]
    assert major_direction(wide, 70.0) == YMAJOR
    assert major_direction(tall, 70.0) == XMAJOR
    assert major_direction(square, 70.0) == YMAJOR  # x-extent not smaller -> YMAJOR
    # clipping to the range: both extents clip to 140 m -> YMAJOR
    assert major_direction([np.array([[-500.0, -200.0], [500.0, 200.0], [0.0, 300.0]])], 70.0) == YMAJOR


def test_random_polygons_match_reference_bit_for_bit():
    g = np.random.default_rng(42)
    for k in range(12):
        n = int(g.integers(3, 12))
        centre = g.uniform(-80, 80, 2)
        ang = np.sort(g.uniform(0, 2 * np.pi, n))
        rad = g.uniform(3, 60, n)
        poly = centre + np.stack([np.cos(ang) * rad, np.sin(ang) * rad], axis=1)
        if k % 3 == 0:  # snap to the 0.125 m lattice: many vertices on scan lines and cell borders
            poly = np.round(poly * 8) / 8
        polys = [poly, poly[::-1] * 0.5 + 10] if k % 2 else [poly]
        m = RoiMask.from_polygons(polys, range=70.0, cell=0.25)
        assert np.array_equal(unpack(m), reference_grid(polys, m.major, 70.0, 0.25, 0.0)), k


def test_extend_dist_widens_intervals():
    poly = [np.array([[-1.0, -2.0], [1.0, -2.0], [1.0, 3.0], [-1.0, 3.0]])]
    a = RoiMask.from_polygons(poly)
    b = RoiMask.from_polygons(poly, extend_dist=1.0)
    assert b.grid().sum() > a.grid().sum()
    assert np.array_equal(unpack(b), reference_grid(poly, b.major, 70.0, 0.25, 1.0))


def test_empty_roi_and_protocol():
    m = RoiMask.from_polygons([])
    assert m.empty and "no ROI polygon" in m.note
    frame = Frame(make_points(np.zeros((5, 3))))
    assert m.indices(frame).dtype == np.int64 and len(m.indices(frame)) == 0
    assert isinstance(m, Roi)


def test_contains_rotates_sensor_points_by_the_pose():
    # road strip along world y; the sensor faces +y (yaw 90°): sensor-frame x ahead maps onto world y
    strip = [np.array([[-2.0, -60.0], [2.0, -60.0], [2.0, 60.0], [-2.0, 60.0]])]
    pose = make_pose([0, 0, 0], [0, 0, np.sin(np.pi / 4), np.cos(np.pi / 4)])
    m = RoiMask.from_polygons(strip, pose[:3, :3])
    pts = np.array([[30.0, 0.0, 0.0], [0.0, 30.0, 0.0], [30.0, 1.5, -1.7]], dtype=np.float32)
    assert m.contains(pts).tolist() == [True, False, True]
    assert m.contains(pts[:, :2]).tolist() == [True, False, True]
    frame = Frame(make_points(pts))
    assert m.indices(frame).tolist() == [0, 2]
    assert np.array_equal(m.contains(frame.points), m.contains(pts))


def test_bad_grid_arguments():
    with pytest.raises(RoiArgumentError):
        RoiMask.from_polygons([], range=-1.0)
    with pytest.raises(RoiArgumentError):
        RoiMask.from_polygons([], cell=0.0)
    with pytest.raises(RoiArgumentError):
        RoiMask.from_polygons([], extend_dist=float("nan"))
    with pytest.raises(RoiArgumentError, match=r"\(N, 2\)"):
        RoiMask.from_polygons([]).contains(np.zeros(5))


def test_point_label_roi():
    g = np.random.default_rng(1)
    xyz = np.concatenate([g.uniform([-20, -3, -1.7], [40, 3, -1.6], (2000, 3)),
                          g.uniform([-20, 10, 0], [40, 30, 2], (500, 3))])
    frame = Frame(make_points(xyz.astype(np.float32)))
    labels = np.arange(len(xyz)) < 2000
    roi = PointLabelRoi(frame, labels)
    assert isinstance(roi, Roi) and not roi.empty
    assert roi.indices(frame).tolist() == list(range(2000))
    assert roi.contains(xyz[:2000]).all()
    # one cell of dilation, not more
    assert roi.contains(np.array([[0.0, 3.2], [0.0, 3.6], [0.0, 20.0], [100.0, 0.0]])).tolist() == [
        True, False, False, False]
    # a mutated frame with appended points: labelled points keep their indices; appended ones are tested
    extra = make_points(np.array([[0.0, 0.0, 5.0], [0.0, 20.0, 0.0]], dtype=np.float32))
    mutated = frame.with_extra_points(extra)
    assert roi.indices(mutated).tolist() == [*range(2000), 2500]
    with pytest.raises(RoiArgumentError):
        PointLabelRoi(frame, labels[:10])


def test_last_row_along_the_scan_axis_is_never_drawn():
    # Apollo's scan lines start at a cell centre and number floor((end - start) / cell): a polygon covering the
    # whole bitmap fills every row but the last one along the major axis
    m = RoiMask.from_polygons([np.array([[-100.0, -100.0], [100.0, -100.0], [100.0, 100.0], [-100.0, 100.0]])])
    g = m.grid()
    last = g[-1, :] if m.major == XMAJOR else g[:, -1]
    assert not last.any()
    assert g.sum() == 559 * 560


def test_non_finite_points_are_never_in_the_roi():
    m = RoiMask.from_polygons([np.array([[-100.0, -100.0], [100.0, -100.0], [100.0, 100.0], [-100.0, 100.0]])])
    pts = np.array([[np.nan, 0, 0], [np.inf, 0, 0], [-np.inf, 1, 0], [0, 0, np.nan], [1e30, 0, 0], [1, 1, 1]],
                   dtype=np.float32)
    assert m.contains(pts).tolist() == [False, False, False, False, False, True]


def test_edge_parallel_to_the_scan_lines_is_drawn_on_the_next_scan_line():
    # XMAJOR (narrow in x). The step's edge at x = 5.126, from y = -20 to -10, is parallel to the scan lines
    # (constant x): Apollo draws its interval on the next scan line (x = 5.375, the row [5.25, 5.5)), so points
    # up to 1.5 cells beyond that edge are in the ROI. The polygon's last partial row is never drawn (scan count
    # floor((10.3 - 0.125) / 0.25) = 40: the last scan line is at 9.875).
    step = np.array([[0.126, -20.0], [5.126, -20.0], [5.126, -10.0], [10.3, -10.0], [10.3, 20.0], [0.126, 20.0]])
    m = RoiMask.from_polygons([step])
    assert m.major == XMAJOR
    x = np.array([5.0, 5.49, 5.51, 9.9, 10.05, 10.2], dtype=np.float32)
    y = np.array([-15.0, -15.0, -15.0, 0.0, 0.0, 0.0], dtype=np.float32)
    assert m.contains_local(x, y).tolist() == [True, True, False, True, False, False]
    d = perpendicular_edge_distance([step], m.major, np.array([5.49]), np.array([-15.0]))
    assert 0.25 * np.sqrt(2) < d[0] <= 1.5 * 0.25
