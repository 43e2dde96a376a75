"""Apollo 2.5/3.0's LowObjectFilter: hand-made obstacles, Apollo's if/else-if min/max scan, the kernel against
its plain-Python twin, and the pipeline option (on for apollo-3.0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lidarmt.lidar.perception.apollo import ApolloConfig
from lidarmt.lidar.perception.apollo.low_object import apollo_min_max, low_object_keep, low_object_keep_ref
from lidarmt.lidar.perception.apollo.network import build_network
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
from lidarmt.lidar.perception.registry import get_perception
from lidarmt.types import Frame, MetaType, make_points


def grouped(*objects: list[float]) -> tuple[np.ndarray, np.ndarray]:
    z = np.concatenate([np.asarray(o, dtype=np.float32) for o in objects])
    offsets = np.concatenate([[0], np.cumsum([len(o) for o in objects])]).astype(np.int64)
    return z, offsets


def test_hand_made_obstacles() -> None:
    ground_arc = [-1.75, -1.73, -1.74, -1.72, -1.76]  # a scan-line arc on the road: 4 cm tall, top -1.72
    car = [-1.70, -0.60, -1.20, -0.30, -1.50]  # 1.4 m tall
    flat_but_high = [-1.00, -0.98, -0.97, -0.99]  # a flat roof at -1 m: top above -1.6, kept
    low_but_tall_enough = [-1.90, -1.85, -1.78, -1.65]  # 25 cm: above the height threshold, kept
    z, off = grouped(ground_arc, car, flat_but_high, low_but_tall_enough)
    keep = low_object_keep(z, off)
    assert keep.tolist() == [False, True, True, True]
    assert low_object_keep_ref(z, off).tolist() == keep.tolist()


def test_thresholds_are_strict_and_configurable() -> None:
    # span exactly 0.125 (representable) vs threshold 0.125: not "< threshold", kept
    z, off = grouped([-2.0, -1.875])
    assert low_object_keep(z, off, height_threshold=0.125).tolist() == [True]
    assert low_object_keep(z, off, height_threshold=0.126).tolist() == [False]
    # top exactly at the position threshold: not "< threshold", kept
    z, off = grouped([-2.0, -1.5])
    assert low_object_keep(z, off, height_threshold=1.0, position_threshold=-1.5).tolist() == [True]


def test_apollo_scan_is_if_else_if() -> None:
    # the first point only sets the minimum; a point that lowers the minimum never raises the maximum
    assert apollo_min_max([-1.0]) == (-1.0, -100.0)
    assert apollo_min_max([-1.0, -0.5]) == (-1.0, -0.5)
    # z descending: every point is a new minimum, the maximum stays -100 -> a 2 m pole listed top-down is
    # erased as "low and flat", while the same points bottom-up are kept
    pole_top_down = [0.2, -0.3, -0.8, -1.3, -1.8]
    assert apollo_min_max(pole_top_down) == (pytest.approx(-1.8), -100.0)
    z, off = grouped(pole_top_down, pole_top_down[::-1])
    assert low_object_keep(z, off).tolist() == [False, True]
    assert low_object_keep_ref(z, off).tolist() == [False, True]


def test_kernel_matches_reference_on_random_objects() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 12, 300)
    z = (rng.uniform(-2.1, -1.4, sizes.sum()) * rng.choice([1.0, 0.02], sizes.sum())).astype(np.float32)
    z += np.repeat(rng.uniform(-1.9, -1.5, len(sizes)), sizes).astype(np.float32)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    k = low_object_keep(z, off)
    assert k.tolist() == low_object_keep_ref(z, off).tolist()
    assert 0 < k.sum() < len(k)  # both outcomes occur
    assert low_object_keep(np.zeros(0, np.float32), np.zeros(1, np.int64)).shape == (0,)


GRID, RANGE = 64, 16.0


def _blob_network() -> torch.nn.Module:
    """Every non-empty cell is a confident object cell and its own centre (class car)."""
    net = build_network(GRID, seed=0)
    with torch.no_grad():
        net.deconv0.weight.zero_()
        b = torch.zeros(12)
        b[0], b[3], b[11] = 10.0, 8.0, 10.0
        b[4:9] = -5.0
        b[4 + int(MetaType.SMALLMOT)] = 5.0
        net.deconv0.bias.copy_(b)
    return net


class _All:
    def indices(self, frame: Frame) -> np.ndarray:
        return np.arange(len(frame.points), dtype=np.int64)


def _square(cx: float, cy: float, z: np.ndarray) -> np.ndarray:
    g = np.arange(-0.5, 0.51, 0.25)
    xx, yy = np.meshgrid(g + cx, g + cy)
    n = xx.size
    return np.c_[xx.ravel(), yy.ravel(), np.resize(z, n)]


@pytest.mark.parametrize("on", [False, True])
def test_pipeline_option_drops_only_the_low_flat_obstacle(on: bool) -> None:
    arc = _square(5.0, 3.0, np.array([-1.74, -1.72, -1.73]))  # ground: flat and low
    box = _square(-5.0, -3.0, np.array([-1.7, -0.2, -1.0]))  # a car-sized height range
    frame = Frame(make_points(np.concatenate([arc, box]), 50.0))
    lop = ApolloLOP(ApolloConfig(grid=GRID, range=RANGE, low_object_filter=on), network=_blob_network())
    obs = lop.detect(frame, _All())
    heights = sorted(round(o.height, 2) for o in obs)
    assert heights == ([1.5] if on else [0.02, 1.5])
    if on:
        assert set(obs[0].point_indices.tolist()) == set(range(len(arc), len(arc) + len(box)))


def test_apollo_3_0_turns_it_on() -> None:
    p3 = get_perception("apollo-3.0", weights=None, allow_random=True)
    assert p3.config.low_object_filter and p3.config.filter_noise
    assert ApolloConfig.apollo_3_0().low_object_filter
    assert not get_perception("apollo", weights=None, allow_random=True).config.low_object_filter
    cfg = ApolloConfig().with_overrides(["low_object_filter=true", "object_height_threshold=0.2"])
    assert cfg.low_object_filter and cfg.object_height_threshold == 0.2
