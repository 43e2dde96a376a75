"""Realism guards: simulated sweeps stay close to the real KITTI HDL-64E frames on the statistics that the
calibration closed (benchmarks/bench_sim_realism.py prints the full comparison)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("open3d")

from lidarmt.io import open_recording  # noqa: E402
from lidarmt.lidar.sim import realism  # noqa: E402
from lidarmt.lidar.sim.drive import Drive  # noqa: E402
from lidarmt.types import Frame, Labels, make_points  # noqa: E402

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them


@pytest.fixture(scope="module")
def stats(kitti_dir):
    with open_recording(kitti_dir) as rec:
        real = realism.summarize([realism.frame_stats(f) for f in rec])
    sim = realism.summarize([realism.frame_stats(Drive.create(town_seed=s, seed=s, frames=4, sensor_height=1.73)
                                                 .frame(3)) for s in (1, 2)])
    return real, sim


@pytest.mark.realdata
def test_rings_and_point_count(stats) -> None:
    real, sim = stats
    assert real["ring_elevations"] is not None and len(real["ring_elevations"]) == 64
    np.testing.assert_allclose(sim["ring_elevations"], real["ring_elevations"], atol=0.05)
    assert abs(sim["points_mean"] / real["points_mean"] - 1) < 0.15


@pytest.mark.realdata
def test_range_and_intensity(stats) -> None:
    real, sim = stats
    assert np.abs(np.array(sim["range_hist"]) - real["range_hist"]).sum() < 0.25
    assert np.abs(np.array(sim["intensity_hist"]) - real["intensity_hist"]).sum() < 0.35
    assert abs(sim["intensity_mean"] - real["intensity_mean"]) < 12
    for a, b in zip(sim["road_intensity_by_range"][:3], real["road_intensity_by_range"][:3], strict=True):
        assert abs(a - b) < 15
    assert sim["surface_intensity"]["car"] < 20  # glossy paint and glass read dark, as on KITTI's cars


def test_ring_recovery_from_point_order() -> None:
    # three rings stored one after the other, each a full turn, starting mid-turn as KITTI's do
    az = np.linspace(-np.pi, np.pi, 400, endpoint=False)
    pts, want = [], []
    for k, el in enumerate(np.radians([2.0, -5.0, -20.0])):
        a = np.roll(az, 37 * k)
        pts.append(np.stack([10 * np.cos(a) * np.cos(el), 10 * np.sin(a) * np.cos(el), 10 * np.full(400, np.sin(el))], 1))
        want.append(np.full(400, k))
    p = make_points(np.concatenate(pts))
    els = realism.ring_elevations(p)
    np.testing.assert_allclose(els, [-20.0, -5.0, 2.0], atol=1e-6)
    counts = realism.ring_counts(p)
    assert counts.sum() == 1200 and len(counts) == 3
    f = Frame(p, labels=Labels(point_semantic=np.full(1200, 40, np.int32)))
    s = realism.frame_stats(f)
    assert s["ground_fraction"] == 1.0 and s["points"] == 1200
