"""Weather transformations: fog's published qualitative behaviour with numbers, rain and snow, and the numba
kernels against their NumPy references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lidarmt.lidar.synthetic import synthetic_sweep
from lidarmt.lidar.transforms import _weather_kernels as K
from lidarmt.lidar.transforms import get_transform
from lidarmt.lidar.transforms.weather import (
    NOISE_FLOOR,
    OVERLAP_M,
    PULSE_LEN,
    R1,
    R2,
    Rain,
    Snow,
    _echo_table,
    fog_coefficients,
)
from lidarmt.types import Frame, make_points


@pytest.fixture(scope="module")
def sweep():
    return synthetic_sweep(n_azimuth=1024)


def _ranges(frame: Frame) -> np.ndarray:
    return np.linalg.norm(frame.xyz.astype(np.float64), axis=1)


def test_fog_coefficients_follow_koschmieder_and_rasshofer():
    alpha, beta = fog_coefficients(50.0)
    assert alpha == pytest.approx(math.log(20) / 50) and beta == pytest.approx(0.046 / 50)
    # two-way transmission to the visibility range is 1/400 (5 % contrast, squared)
    assert math.exp(-2 * alpha * 50) == pytest.approx(1 / 400)
    assert abs(PULSE_LEN - 5.996) < 1e-3  # c x 20 ns


def test_fog_returns_beyond_visibility_disappear_and_near_scatter_appears(sweep):
    r = _ranges(sweep)
    assert np.count_nonzero(r > 50) == 1038 and np.count_nonzero(r < 4) == 0  # the street as built
    counts, lost, far = {}, {}, {}
    for v in (2000.0, 600.0, 150.0, 50.0):
        c = get_transform("fog").apply(sweep, {"visibility_m": v}, seed=0)
        assert c.info["overlap_m"] == OVERLAP_M == 9.5
        rr = _ranges(c.frame)
        counts[v], lost[v], far[v] = c.info["n_scattered"], c.info["n_lost"], int(np.count_nonzero(rr > 50))
        assert np.count_nonzero(rr > v) == 0  # nothing is seen beyond the visibility
        # every scattered return lies on its source point's ray, in the fog's echo: from 1.0 m to where the echo
        # of a fog seen through the overlap ramp (0.9 -> 9.5 m) falls under half its peak (~8 m)
        sc = c.modified & (np.abs(rr - r[c.origin]) > 1e-3)
        assert np.count_nonzero(sc) == c.info["n_scattered"]
        if sc.any():
            assert rr[sc].min() >= 1.0 - 1e-4 and rr[sc].max() < 8.1
            d0, d1 = sweep.xyz[c.origin[sc]].astype(np.float64), c.frame.xyz[sc].astype(np.float64)
            cos = np.sum(d0 * d1, axis=1) / (np.linalg.norm(d0, axis=1) * np.linalg.norm(d1, axis=1))
            assert cos.min() > 1 - 1e-6
        assert np.count_nonzero(rr < 4) <= c.info["n_scattered"]
        assert len(c.frame.points) == len(sweep.points) - c.info["n_lost"]
    # measured on this 64 x 1024 street sweep (64,142 points): scattered 0 / 0 / 2,986 / 16,850, lost 267 / 488 /
    # 0 / 0, returns beyond 50 m 771 / 562 / 0 / 0 (of 1,038) at 2000 / 600 / 150 / 50 m. Seen through the overlap
    # ramp the fog's echo reaches the HDL-64E's detection threshold only in dense fog (beta x peak = 1.8e-6 at
    # 2 km against 1.27e-5): in light fog a return that fades under the threshold is lost, not replaced. With
    # Hahner et al.'s complete overlap from 1 m (overlap_m=1) the same sweep gives 358 / 2,950 / 19,263 / 46,752
    # scattered and none lost: the first metre of fog would outshine everything beyond ~15 m even at 600 m
    n = len(sweep.points)
    assert counts[2000.0] == counts[600.0] == 0 < counts[150.0] < counts[50.0] < 0.5 * n
    assert counts[50.0] > 0.15 * n
    assert 0 < lost[2000.0] < lost[600.0] and lost[150.0] == lost[50.0] == 0
    assert far[2000.0] > far[600.0] > 0.5 * 1038 and far[150.0] == far[50.0] == 0
    hahner = {v: get_transform("fog").apply(sweep, {"visibility_m": v, "overlap_m": 1.0}, seed=0).info
              for v in (600.0, 50.0)}
    assert hahner[600.0]["n_scattered"] > 0.04 * n and hahner[50.0]["n_scattered"] > 2.5 * counts[50.0]


def _one_point(r: float, intensity: float) -> Frame:
    return Frame(make_points(np.array([[r, 0.0, 0.0]]), intensity))


def test_fog_decision_for_single_targets_by_hand():
    from lidarmt.lidar.transforms.base import TransformContext

    fog = get_transform("fog")

    def echo(v, overlap=OVERLAP_M):  # the fog's echo power beta x peak, beyond ~30 m (the table's last entry)
        alpha, beta = fog_coefficients(v)
        return beta * _echo_table(alpha, overlap)[0][-1]

    def hard(rho, r, v):  # the return's power (rho / pi) exp(-2 alpha R) / R^2
        return rho / math.pi * math.exp(-2 * fog_coefficients(v)[0] * r) / r**2

    # a white target at 20 m in 1 km fog: its return (7.1e-4) beats the fog's echo (3.5e-6): kept, intensity x
    # exp(-2 alpha R)
    alpha, _ = fog_coefficients(1000.0)
    assert hard(1.0, 20.0, 1000.0) > 20 * echo(1000.0)
    c = fog.apply(_one_point(20.0, 255.0), {"visibility_m": 1000.0}, seed=0)
    assert c.info["n_kept"] == 1
    assert c.frame.points["intensity"][0] == pytest.approx(255 * math.exp(-2 * alpha * 20), rel=1e-6)
    # a white target at 50 m in 30 m fog: 5.9e-9 against the fog's echo 6.9e-5: replaced by a fog return near the
    # sensor, with the intensity of the reflectance that returns that power from there, 255 pi P r^2
    p = echo(30.0)
    assert 6.0e-5 < p < 8.0e-5 and hard(1.0, 50.0, 30.0) < 1e-8
    c = fog.apply(_one_point(50.0, 255.0), {"visibility_m": 30.0}, seed=0)
    r = float(c.frame.points["x"][0])
    assert c.info["n_scattered"] == 1 and 1.0 <= r < 8.1
    assert c.frame.points["intensity"][0] == pytest.approx(255 * math.pi * p * r * r, rel=1e-5)
    # the reflectance decides (the intensity calibration): at 20 m in 100 m fog (echo 3.0e-5) a white target
    # (2.4e-4) is kept, a dark one (reflectance 0.10: 2.4e-5) gives way to the fog; at 5 m in 50 m fog even the
    # dark one (7.0e-4 against 5.1e-5) is kept
    assert hard(0.1, 20.0, 100.0) < echo(100.0) < hard(1.0, 20.0, 100.0)
    assert fog.apply(_one_point(20.0, 255.0), {"visibility_m": 100.0}, seed=0).info["n_kept"] == 1
    assert fog.apply(_one_point(20.0, 25.5), {"visibility_m": 100.0}, seed=0).info["n_scattered"] == 1
    assert fog.apply(_one_point(5.0, 25.5), {"visibility_m": 50.0}, seed=0).info["n_kept"] == 1
    # the overlap decides how bright the fog's first metres are: with Hahner et al.'s complete overlap from 1 m
    # (echo 1.0e-4 at 300 m) that dark target at 20 m gives way even in light fog; seen through the overlap ramp
    # to 9.5 m (1.1e-5, under the threshold) it is kept
    assert hard(0.1, 20.0, 300.0) < echo(300.0, 1.0) and echo(300.0) < NOISE_FLOOR < hard(0.1, 20.0, 300.0)
    assert fog.apply(_one_point(20.0, 25.5), {"visibility_m": 300.0}, seed=0).info["n_kept"] == 1
    assert fog.apply(_one_point(20.0, 25.5), {"visibility_m": 300.0, "overlap_m": 1.0},
                     seed=0).info["n_scattered"] == 1
    # the same reading is a brighter target on a sensor whose diffuse targets read 0..100 (VLP-16: 70 is
    # reflectance 0.70, on KITTI's HDL-64E 0.27): at 30 m in 100 m fog
    assert hard(70 / 255, 30.0, 100.0) < echo(100.0) < hard(0.70, 30.0, 100.0)
    assert fog.apply(_one_point(30.0, 70.0), {"visibility_m": 100.0}, seed=0).info["n_scattered"] == 1
    c = fog.apply(_one_point(30.0, 70.0), {"visibility_m": 100.0}, seed=0, context=TransformContext(sensor="vlp16"))
    assert c.info["n_kept"] == 1 and c.info["sensor"] == "vlp16"
    # a target nearer than the fields of view overlap (0.95 m) has no fog in front of it to see: kept; on a
    # sensor whose threshold the 2 km fog's echo does not reach (VLP-16: 2.55e-5), a return that falls under
    # the threshold is lost, not replaced (the far, dark return at the edge of detection)
    assert fog.apply(_one_point(0.95, 0.0), {"visibility_m": 50.0}, seed=0).info["n_kept"] == 1
    assert echo(2000.0) < 2.55e-5
    c = fog.apply(_one_point(99.0, 0.0), {"visibility_m": 2000.0}, seed=0, context=TransformContext(sensor="vlp16"))
    assert c.info["n_lost"] == 1
    assert abs(NOISE_FLOOR - 1.2732e-5) < 1e-9


@pytest.mark.parametrize("alpha", [0.003, 0.06, 0.3])
@pytest.mark.parametrize("r2", [R2, OVERLAP_M])
def test_fog_echo_table_kernel_matches_reference(alpha, r2):
    kw = {"dr": 0.05, "r0_max": 12.0 if r2 == R2 else 40.0, "pulse_len": PULSE_LEN, "r1": R1, "r2": r2}
    got = K.fog_echo_table(alpha, **kw)
    want = K.fog_echo_table_reference(alpha, **kw)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    peak = got[0]
    assert peak[0] == 0.0  # a target nearer than the overlap: no fog in front of it to see
    assert np.all(np.diff(peak) >= -1e-15)  # more fog in front of a farther target, never less
    assert np.ptp(peak[-20:]) < 1e-9  # beyond ~10 m the target no longer cuts the echo


def test_fog_decide_kernel_matches_reference():
    rng = np.random.default_rng(0)
    n = 5000
    r0 = rng.uniform(0.0, 80.0, n)
    r0[:5] = 0.0
    beta0 = rng.uniform(0.0, 0.3, n)
    beta0[5:10] = 0.0
    u = rng.random(n)
    peak, lo, hi = K.fog_echo_table(0.06, dr=0.05, r0_max=30.0, pulse_len=PULSE_LEN, r1=R1, r2=R2)
    args = (r0, beta0, u, peak, lo, hi, 0.05, 0.06, 0.046 / 50, NOISE_FLOOR)
    for a, b in zip(K.fog_decide(*args), K.fog_decide_reference(*args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    action = K.fog_decide(*args)[0]
    assert set(np.unique(action)) == {K.KEEP, K.SCATTER, K.LOST}


def test_strongest_per_ray_kernel_matches_reference():
    rng = np.random.default_rng(1)
    ray = np.sort(rng.integers(0, 300, 2000))
    power = rng.random(2000)
    power[10] = power[11]  # a tie
    np.testing.assert_array_equal(K.strongest_per_ray(ray, power, 400),
                                  K.strongest_per_ray_reference(ray, power, 400))
    assert np.array_equal(K.strongest_per_ray(ray[:0], power[:0], 3), [-1, -1, -1])


@pytest.mark.parametrize(("cls", "rate", "alpha"), [
    (Rain, 25.0, math.pi * 8000 / (4.1 * 25 ** -0.21) ** 3 * 1e-6),  # Marshall-Palmer: 2.77e-3 1/m
    (Snow, 2.0, math.pi * 3800 * 2 ** -0.87 / (2.55 * 2 ** -0.48) ** 3 * 1e-6),  # Gunn-Marshall
])
def test_precipitation_extinction_from_size_distribution(sweep, cls, rate, alpha):
    t = cls()
    c = t.apply(sweep, {"rate_mm_h": rate}, seed=0)
    assert c.info["alpha"] == pytest.approx(alpha, rel=1e-12)
    # returns that stay are attenuated by exactly exp(-2 alpha R)
    r = _ranges(sweep)
    rr = _ranges(c.frame)
    hard = ~(np.abs(rr - r[c.origin]) > 1e-3)
    want = (sweep.points["intensity"][c.origin[hard]].astype(np.float64) * np.exp(-2 * alpha * r[c.origin[hard]]))
    np.testing.assert_allclose(c.frame.points["intensity"][hard], want.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("name", ["rain", "snow"])
def test_precipitation_clutter_grows_with_the_rate(sweep, name):
    t = get_transform(name)
    r = _ranges(sweep)
    counts = []
    for level in ("light", "moderate", "heavy"):
        c = t.apply(sweep, level, seed=0)
        rr = _ranges(c.frame)
        sc = np.abs(rr - r[c.origin]) > 1e-3
        assert np.count_nonzero(sc) == c.info["n_scattered"]
        assert np.all(rr[sc] < r[c.origin[sc]]) and rr[sc].min() >= 1.5  # a particle in front of its target
        assert rr[sc].max() < 25.0  # beyond ~22 m no drop or flake can reach the noise floor
        counts.append(c.info["n_scattered"])
    assert counts[0] < counts[1] < counts[2]
    # measured on this street sweep (64,142 points): rain 32 / 126 / 426 drop echoes at 5 / 25 / 100 mm/h; snow
    # 8 / 36 / 127 flake echoes at 0.5 / 2 / 8 mm/h (melted-equivalent rates: fewer, weaker particles)
    n = len(sweep.points)
    assert counts[2] < 0.01 * n and counts[2] > 20 * max(counts[0], 1) ** 0.5


def test_a_fog_setting_recorded_before_overlap_existed_replays_as_it_was_made():
    """Journals and bundles made before fog had ``overlap_m`` recorded only the visibility; read back, the setting
    means what was computed then (complete overlap from Hahner et al.'s 1 m), whose output is pinned here: the
    digests were made by the release before the parameter (045a1f2) and the new code with overlap_m=1 gives the
    same bytes."""
    import hashlib

    from lidarmt.lidar.campaign import LidarTransformRef
    from lidarmt.lidar.transforms.registry import complete_recorded

    assert complete_recorded("fog", {"visibility_m": 50}) == {"visibility_m": 50.0, "overlap_m": 1.0}
    assert complete_recorded("fog", {"visibility_m": 50, "overlap_m": 9.5})["overlap_m"] == 9.5
    assert complete_recorded("rain", {"rate_mm_h": 10}) == {"rate_mm_h": 10.0}  # nothing added, nothing checked
    assert complete_recorded("no-such-plugin", {"a": 1}) == {"a": 1.0}
    ref = LidarTransformRef.from_dict({"name": "fog", "levels": ["heavy"], "params": [{"visibility_m": 50}],
                                       "relation": "mr1"})
    assert ref.params == ({"visibility_m": 50.0, "overlap_m": 1.0},)
    # a new record keeps its own overlap; a level named today resolves to the default
    assert LidarTransformRef.from_dict(ref.to_dict()) == ref
    assert get_transform("fog").levels["heavy"]["overlap_m"] == OVERLAP_M
    sweep = synthetic_sweep(seed=2, n_azimuth=1024)
    want = {50.0: [-1.5178833620157093, 57.77663198276423, -40060.15914536221, 477616.4299544096],
            300.0: [3710.813257528469, 538.6603848570958, -75526.00201566052, 2434865.708629288]}
    for v, sums in want.items():
        c = get_transform("fog").apply(sweep, ref.params[0] | {"visibility_m": v}, seed=7)
        pts = c.frame.points
        assert len(pts) == 64142 and int(c.modified.sum()) == 64142
        assert hashlib.sha256(c.origin.tobytes()).hexdigest()[:16] == "b67322fc38455500"
        np.testing.assert_allclose([float(np.sum(pts[k].astype(np.float64))) for k in ("x", "y", "z", "intensity")],
                                   sums, rtol=1e-9, atol=1e-6)
        new = get_transform("fog").apply(sweep, {"visibility_m": v}, seed=7)
        assert not np.array_equal(new.frame.points["intensity"], pts["intensity"])  # the default differs
