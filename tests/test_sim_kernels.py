"""The simulator's numba kernels agree with their NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.sim import _kernels


@pytest.mark.parametrize("seed", range(6))
def test_fill_polygon_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 9))
    ang = np.sort(rng.uniform(0, 2 * np.pi, k))
    rad = rng.uniform(5, 30, k)
    poly = np.stack([40 + rad * np.cos(ang), 35 + rad * np.sin(ang)], axis=1)
    if seed % 2:  # a self-touching, non-convex one too
        poly = np.concatenate([poly, poly[::-1][1:-1] * 0.5 + 15])
    a = np.zeros((80, 90), np.uint8)
    b = np.zeros((80, 90), np.uint8)
    _kernels.fill_polygon(a, np.ascontiguousarray(poly), 3)
    _kernels.fill_polygon_ref(b, poly, 3)
    assert (a == 3).sum() > 0
    np.testing.assert_array_equal(a, b)


def _raster(rng: np.random.Generator) -> np.ndarray:
    r = np.full((200, 200), 4, np.uint8)  # terrain
    r[60:140, :] = 0  # a road across
    r[95:105, 20:180:7] = 1  # markings
    r[140:150, :] = 3  # sidewalk
    r[rng.integers(0, 200, 50), rng.integers(0, 200, 50)] = 2
    return r


def _grid(waves: np.ndarray, shape=(30, 30), res: float = 2.0) -> tuple[np.ndarray, float, float]:
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]] * res
    g = np.zeros(shape)
    for a, kx, ky, ph in waves:
        g += a * np.sin(kx * xx + ky * yy + ph)
    return g, res, _kernels.slope_bound(g, res)


FLAT = _grid(np.zeros((0, 4)))
ROLLING = _grid(np.array([[0.4, 2 * np.pi / 120 * 0.8, 2 * np.pi / 120 * 0.6, 0.3],  # 120 m waves, 2 % grades
                          [0.25, 0.0, 2 * np.pi / 70, 1.1]]))


@pytest.mark.parametrize("terrain", [FLAT, ROLLING], ids=["flat", "rolling"])
def test_cast_ground_matches_reference(terrain) -> None:
    rng = np.random.default_rng(1)
    raster = _raster(rng)
    n = 6000
    d = rng.normal(size=(n, 3))
    d[:, 2] = -np.abs(d[:, 2]) * rng.uniform(0.02, 1.0, n)
    d[rng.random(n) < 0.1, 2] *= -1  # some upward rays: no ground
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    grid, hres, gmax = terrain
    o = np.tile([20.0, 20.0, 1.8 + float(_kernels.height_ref(grid, 0.0, 0.0, hres, 20.0, 20.0))], (n, 1))
    args = (raster, 0.0, 0.0, 0.2, 0.15, 100.0, 4, grid, hres, gmax)
    t1, c1 = _kernels.cast_ground(o, d, *args)
    t2, c2 = _kernels.cast_ground_ref(o, d, *args)  # marching + bisection: an independent method
    same = c1 == c2
    assert same.mean() > 0.999  # a ray may land within a micrometre of a cell edge
    np.testing.assert_allclose(t1[same], t2[same], rtol=1e-4, atol=1e-4)
    assert np.isfinite(t1).mean() > 0.5
    assert np.isinf(t1[d[:, 2] >= 0]).all()
    assert (c1 == _kernels.CURB_FACE).any()  # some rays hit the curb between road and sidewalk


def test_cast_ground_geometry() -> None:
    raster = np.zeros((100, 100), np.uint8)  # all road
    raster[:, 80:] = 3  # raised sidewalk from x = 16 m
    el = np.radians(-10.0)
    o = np.array([[5.0, 10.0, 1.73]])
    d = np.array([[np.cos(el), 0.0, np.sin(el)]])
    t, c = _kernels.cast_ground(o, d, raster, 0.0, 0.0, 0.2, 0.15, 100.0, 4, *FLAT)
    assert c[0] == 0
    assert t[0] == pytest.approx(1.73 / np.sin(-el), rel=1e-6)  # hits the road 9.8 m ahead, at x = 14.8 m
    o2 = np.array([[6.7, 10.0, 1.73]])
    t2, c2 = _kernels.cast_ground(o2, d, raster, 0.0, 0.0, 0.2, 0.15, 100.0, 4, *FLAT)
    # the ray reaches x = 16 m at height 1.73 - 9.3 tan(10 deg) = 0.09 < curb 0.15: it hits the curb face
    assert c2[0] == _kernels.CURB_FACE
    assert (o2[0, 0] + t2[0] * d[0, 0]) == pytest.approx(16.0, abs=0.01)
    o3 = np.array([[9.0, 10.0, 1.73]])  # reaches x = 16 m at 0.5 m: lands on the sidewalk at curb height
    t3, c3 = _kernels.cast_ground(o3, d, raster, 0.0, 0.0, 0.2, 0.15, 100.0, 4, *FLAT)
    assert c3[0] == 3
    assert t3[0] == pytest.approx((1.73 - 0.15) / np.sin(-el), rel=1e-6)


def test_cast_ground_on_a_slope() -> None:
    # a plane rising 3 % towards +x
    k = 2 * np.pi / 1e5
    terrain = _grid(np.array([[0.03 / k, k, 0.0, 0.0]]), shape=(30, 220))
    raster = np.zeros((50, 2000), np.uint8)  # all road, 400 m long
    el = np.radians(-3.0)
    o = np.array([[10.0, 5.0, 1.8]])
    d = np.array([[np.cos(el), 0.0, np.sin(el)]])
    t, c = _kernels.cast_ground(o, d, raster, 0.0, 0.0, 0.2, 0.15, 150.0, 4, *terrain)
    # the ground is at 0.03 x: 1.8 - t sin(3 deg) = 0.03 (10 + t cos(3 deg))  ->  t = 1.5 / (sin 3 + 0.03 cos 3)
    hit_x = 10.0 + t[0] * np.cos(el)
    assert t[0] == pytest.approx(1.5 / (np.sin(-el) + 0.03 * np.cos(el)), rel=1e-3) and c[0] == 0
    assert hit_x == pytest.approx(10.0 + 1.5 / (np.tan(-el) + 0.03), rel=1e-3)
    up = np.array([[np.cos(np.radians(1.0)), 0.0, np.sin(np.radians(1.0))]])  # climbs slower than the hill
    t_up, _ = _kernels.cast_ground(o, up, raster, 0.0, 0.0, 0.2, 0.15, 150.0, 4, *terrain)
    assert np.isfinite(t_up[0])  # an upward ray still meets the 3 % hill (sin 1 deg < 3 %)
