"""ApolloLOP end to end on small synthetic frames, with a CNN whose outputs are set through deconv0's bias."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lidarmt.errors import UserError
from lidarmt.lidar.perception.apollo import ApolloConfig
from lidarmt.lidar.perception.apollo.network import build_network
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
from lidarmt.lidar.perception.base import Perception
from lidarmt.types import Frame, MetaType, ObstacleClass, make_points

GRID, RANGE = 64, 16.0  # 0.5 m cells: small and quick


class BoxRoi:
    """ROI = |x| < half_x and |y| < half_y (sensor frame)."""

    def __init__(self, half_x: float = 10.0, half_y: float = 4.0, empty: bool = False) -> None:
        self.half_x, self.half_y, self.empty = half_x, half_y, empty

    def contains(self, xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy)
        return (np.abs(xy[:, 0]) < self.half_x) & (np.abs(xy[:, 1]) < self.half_y)

    def indices(self, frame: Frame) -> np.ndarray:
        return np.flatnonzero(self.contains(np.c_[frame.points["x"], frame.points["y"]])).astype(np.int64)


def blob_network(meta: MetaType = MetaType.SMALLMOT, *, confidence: float = 8.0) -> torch.nn.Module:
    """Every non-empty cell is an object and its own centre; confident; tall; class ``meta``."""
    net = build_network(GRID, seed=0)
    with torch.no_grad():
        net.deconv0.weight.zero_()
        b = torch.zeros(12)
        b[0] = 10.0  # category: sigmoid(10) * mask
        b[3] = confidence
        b[4:9] = -5.0
        b[4 + int(meta)] = 5.0
        b[11] = 10.0  # height_pt: no height cut
        net.deconv0.bias.copy_(b)
    return net


def square(cx: float, cy: float, side: float, step: float = 0.25, z: float = 0.0) -> np.ndarray:
    g = np.arange(-side / 2, side / 2 + 1e-9, step)
    xx, yy = np.meshgrid(g + cx, g + cy)
    return np.c_[xx.ravel(), yy.ravel(), np.full(xx.size, z)]


def frame_of(*parts: np.ndarray) -> Frame:
    xyz = np.concatenate(parts)
    return Frame(make_points(xyz, 100.0))


def lop(**cfg) -> ApolloLOP:
    config = ApolloConfig(grid=GRID, range=RANGE, **cfg)
    return ApolloLOP(config, network=blob_network())


def test_two_separate_objects_in_the_roi() -> None:
    a = square(5.0, 1.0, 1.5)
    b = square(-4.0, -2.0, 1.0)
    outside = square(12.0, 9.0, 1.0)  # outside the ROI: never reported
    frame = frame_of(a, b, outside)
    p = lop()
    assert isinstance(p, Perception) and p.name == "apollo-64"
    timings: dict[str, float] = {}
    obs = p.detect(frame, BoxRoi(), timings=timings)
    assert len(obs) == 2
    # obstacle ids follow row-major order: row 0 is x = +range, so the object ahead (x = 5) comes first
    assert sorted(obs[0].point_indices) == list(range(len(a)))
    assert sorted(obs[1].point_indices) == list(range(len(a), len(a) + len(b)))
    o = obs[0]
    assert o.cls is ObstacleClass.CAR and o.meta_type is MetaType.SMALLMOT
    assert o.score == pytest.approx(1 / (1 + np.exp(-8.0)), rel=1e-5)
    assert o.type_probs is not None and len(o.type_probs) == 6
    assert o.center[:2] == pytest.approx([5.0, 1.0], abs=0.05)
    assert o.length == pytest.approx(1.5, abs=0.05) and o.width == pytest.approx(1.5, abs=0.05)
    assert set(timings) >= {"roi", "features", "cnn", "cluster", "minbox", "total"}
    assert p.last_timings == timings
    assert frame.points["x"][0] == a[0, 0]  # the frame is not modified


def test_points_outside_the_roi_merge_obstacles_through_use_all_grids() -> None:
    # two ROI objects 2.5 m apart along y; a bridge of points just beyond the ROI edge x = 10 joins them
    a = square(9.0, -1.0, 1.0)
    b = square(9.0, 1.5, 1.0)
    bridge = np.c_[np.full(12, 10.5), np.linspace(-1.0, 1.5, 12), np.zeros(12)]
    around = np.concatenate([square(10.25, y, 0.5) for y in (-1.0, 1.5)])  # touch both objects beyond x = 10
    base = frame_of(a, b)
    p = lop()
    assert len(p.detect(base, BoxRoi())) == 2
    mutated = frame_of(a, b, bridge, around)
    obs = p.detect(mutated, BoxRoi())
    assert len(obs) == 1  # |O| dropped from 2 to 1: the CACM paper's violation, reproduced
    assert obs[0].num_points == len(a) + len(b)  # only ROI points are reported
    # Apollo's defaults are what makes this happen: without the full cloud the bridge is invisible
    assert len(lop(use_full_cloud=False).detect(mutated, BoxRoi())) == 2


def test_empty_roi_and_no_points() -> None:
    frame = frame_of(square(5.0, 1.0, 1.5))
    p = lop()
    assert len(p.detect(frame, BoxRoi(empty=True))) == 0
    assert len(p.detect(frame, BoxRoi(half_x=0.1, half_y=0.1))) == 0
    st = p.stages(frame, BoxRoi(empty=True))
    assert st.features is None and len(st.obstacles) == 0


def test_nan_points_are_dropped_and_indices_index_the_full_frame() -> None:
    a = square(3.0, 0.0, 1.0)
    junk = np.array([[np.nan, 0.0, 0.0], [2.9, 0.1, np.nan]])
    frame = frame_of(junk, a)
    obs = lop().detect(frame, BoxRoi())
    assert len(obs) == 1 and sorted(obs[0].point_indices) == list(range(2, 2 + len(a)))


def test_low_confidence_drops_everything_and_classes_map() -> None:
    frame = frame_of(square(5.0, 1.0, 1.5))
    cfg = ApolloConfig(grid=GRID, range=RANGE)
    assert len(ApolloLOP(cfg, network=blob_network(confidence=-3.0)).detect(frame, BoxRoi())) == 0
    for meta, cls in [
        (MetaType.PEDESTRIAN, ObstacleClass.PEDESTRIAN),
        (MetaType.NONMOT, ObstacleClass.CYCLIST),
    ]:
        (o,) = ApolloLOP(cfg, network=blob_network(meta)).detect(frame, BoxRoi())
        assert o.cls is cls


def test_forward_grid_and_stages() -> None:
    frame = frame_of(square(5.0, 1.0, 1.5))
    p = lop()
    g = p.forward_grid(frame)
    assert g["features"].shape == (8, GRID, GRID) and g["category_score"].shape == (GRID, GRID)
    st = p.stages(frame, BoxRoi())
    assert st.heads is not None and st.clusters is not None and len(st.obstacles) == 1
    assert st.clusters.num_obstacles >= 1 and st.features is not None


def test_fast_mode_gives_the_same_obstacles_here() -> None:
    frame = frame_of(square(5.0, 1.0, 1.5), square(-4.0, -2.0, 1.0))
    a = lop().detect(frame, BoxRoi())
    b = lop(mode="fast").detect(frame, BoxRoi())
    assert [sorted(o.point_indices) for o in a] == [sorted(o.point_indices) for o in b]


def test_weights_are_required_unless_random_is_asked_for(tmp_path) -> None:
    cfg = ApolloConfig(grid=GRID, range=RANGE, weights=str(tmp_path / "nope.pt"))
    with pytest.raises(UserError, match=r"nope\.pt.*lidarmt train"):
        ApolloLOP(cfg)
    with pytest.raises(UserError, match="allow_random"):
        ApolloLOP(cfg, weights=None)
    p = ApolloLOP(cfg, weights=None, allow_random=True)
    assert p.weights_path is None
    net = blob_network()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    p = ApolloLOP(cfg.replace(weights=str(tmp_path / "w.pt")))
    assert len(p.detect(frame_of(square(5.0, 1.0, 1.5)), BoxRoi())) == 1


def test_default_weights_location_message(tmp_path, monkeypatch) -> None:
    import lidarmt.lidar.perception.apollo.config as config_mod

    # As on a checkout without the shipped file: the default location holds nothing.
    monkeypatch.setattr(config_mod, "DEFAULT_WEIGHTS", {640: tmp_path / "weights" / "cnnseg640.pt"})
    with pytest.raises(UserError, match=r"cnnseg640\.pt.*lidarmt train"):
        ApolloLOP(ApolloConfig())


def test_config_overrides() -> None:
    cfg = ApolloConfig().with_overrides(
        ["objectness_thresh=0.6", "use_all_grids_for_clustering=false", "grid=512"]
    )
    assert cfg.objectness_thresh == 0.6 and cfg.use_all_grids is False and cfg.grid == 512
    assert ApolloConfig.apollo_2_0().grid == 512 and ApolloConfig.apollo_3_0().filter_noise
    for bad in (["nokey=1"], ["grid=abc"], ["mode=slow"], ["grid=500"], ["novalue"]):
        with pytest.raises(UserError):
            ApolloConfig().with_overrides(bad)
