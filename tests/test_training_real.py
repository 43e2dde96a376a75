"""Training on real sweeps: unlabelled points (outside ``labels.region``) carry no loss, augmentations move the
labelled region with the scene, global scaling and dropped beams, KITTI raw drives (with a frame range) as
training sources, and shipped weights chosen by name."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from test_io_tracklets import write_tiny_drive
from test_training_targets import GRID, R, _frame

from lidarmt.io.tracklets import points_in_boxes
from lidarmt.lidar.perception.apollo.augment import (
    AugmentConfig,
    augment_frame,
    beam_of,
    drop_beams,
    flip_y,
    rotate_z,
    rotation_range,
    scale_xyz,
)
from lidarmt.lidar.perception.apollo.targets import build_targets, point_cells
from lidarmt.types import Frame, LabelledRegion, Labels, make_points

VIEW = LabelledRegion(math.radians(-40.5), math.radians(39.8), None, "camera 2")


def _region_frame(seed: int = 0) -> Frame:
    """The hand-made frame of test_training_targets with a labelled 80 degree view ahead."""
    f = _frame(seed)
    lb = f.labels
    return dataclasses.replace(f, labels=Labels(lb.boxes, lb.point_instance, lb.point_meta, None, VIEW))


def test_cells_outside_the_labelled_region_carry_no_loss():
    f = _region_frame()
    t = build_targets(f, grid=GRID, range_=R)
    plain = build_targets(_frame(), grid=GRID, range_=R)
    cell = point_cells(f.points["x"], f.points["y"], f.points["z"], grid=GRID, range_=R)
    inside = VIEW.contains(f.points)
    labelled_cells = np.unique(cell[(cell >= 0) & inside])
    ign = t.ignore.ravel()
    # a cell with a point inside the view is labelled (kept), every other non-empty cell is ignored ...
    assert not ign[labelled_cells].any()
    others = np.setdiff1d(np.flatnonzero(t.nonempty.ravel()), labelled_cells)
    obj = t.objectness.ravel()
    assert ign[others[~obj[others]]].all()
    # ... except object cells: the car ahead-left (3, 2) is inside, the pedestrian behind (-2.5, -3) outside the
    # view; its cells stay objects (a labelled object is labelled wherever its points are)
    assert np.array_equal(t.objectness, plain.objectness)
    assert not (t.ignore & t.objectness).any()
    assert ign.sum() > 0.5 * (~plain.ignore.ravel() & plain.nonempty.ravel() & ~obj).sum()


@pytest.mark.parametrize("angle", [0.3, -1.2, 2.4, -2.43])
def test_rotation_and_flip_move_the_region_with_the_points(angle):
    f = _region_frame()
    before = VIEW.contains(f.points)
    r = rotate_z(f, angle)
    assert np.array_equal(r.labels.region.contains(r.points), before)
    assert r.labels.region.width_deg == pytest.approx(VIEW.width_deg)
    m = flip_y(r)
    assert np.array_equal(m.labels.region.contains(m.points), before)
    assert m.labels.region.azimuth_min == -r.labels.region.azimuth_max


def test_rotation_that_would_wrap_the_sector_is_refused_and_never_drawn():
    lo, hi = rotation_range(VIEW, math.pi)
    assert math.degrees(lo) == pytest.approx(-139.5, abs=0.01) and math.degrees(hi) == pytest.approx(140.2, abs=0.01)
    with pytest.raises(ValueError, match="wraps"):
        rotate_z(_region_frame(), math.radians(150))
    f = _region_frame()
    before = VIEW.contains(f.points)
    cfg = AugmentConfig(dropout=(0.0, 0.0), range_dropout_prob=0.0, xyz_jitter=0.0, beam_drop_prob=0.0,
                        scale=(1.0, 1.0), z_shift=0.0, warp_prob=0.0)
    for seed in range(40):
        out = augment_frame(f, np.random.default_rng(seed), cfg)
        reg = out.labels.region
        assert -math.pi <= reg.azimuth_min < reg.azimuth_max <= math.pi
        assert np.array_equal(reg.contains(out.points), before)


def test_scaling_keeps_points_in_their_boxes():
    f = _frame()
    inst, _ = points_in_boxes(f.points, f.labels.boxes, margin=-0.01)  # clear of the faces (float32 rounding)
    out, _ = points_in_boxes(f.points, f.labels.boxes, margin=0.01)
    inside, outside = inst >= 0, out < 0
    assert inside.sum() > 1000 and outside.sum() > 1000
    for s in (0.9, 1.07):
        g = scale_xyz(f, s)
        after, _ = points_in_boxes(g.points, g.labels.boxes)
        assert np.array_equal(after[inside], inst[inside]) and (after[outside] < 0).all()
        assert g.labels.boxes["length"][0] == pytest.approx(f.labels.boxes["length"][0] * s)
        assert g.points["z"][0] == pytest.approx(f.points["z"][0] * s, rel=1e-6)


def test_dropped_beams_remove_whole_rings():
    rng = np.random.default_rng(0)
    # a ring-major sweep without a ring field (as KITTI's .bin): 8 rings, each one turn in azimuth
    az = np.tile(np.linspace(np.pi - 0.01, -np.pi + 0.01, 50), 8)  # clockwise, as the HDL-64E stores them
    elev = np.repeat(np.radians(np.linspace(-20, 2, 8)), 50)
    xyz = np.c_[10 * np.cos(az), 10 * np.sin(az), 10 * np.tan(elev)]
    f = Frame(make_points(xyz, 10.0))
    ring = beam_of(f.points)
    assert np.array_equal(ring, np.repeat(np.arange(8), 50))
    g = drop_beams(f, 0.25, rng)
    assert len(g.points) == 300
    kept = np.unique(beam_of(g.points))
    assert len(kept) == 6
    with_ring = make_points(xyz, 10.0, ring=np.repeat(np.arange(8)[::-1], 50).astype(np.uint16))
    assert np.array_equal(beam_of(with_ring), np.repeat(np.arange(8)[::-1], 50))


def test_a_kitti_raw_drive_with_a_frame_range_is_a_training_source(tmp_path):
    from lidarmt.errors import UserError
    from lidarmt.lidar.perception.apollo.train import TrainConfig, open_sources, train

    drive = write_tiny_drive(tmp_path)
    (src,) = open_sources([f"{drive}@1:3"])
    assert src.kind == "recording" and len(src) == 2
    f = src.load(0)  # the drive's sweep 1
    assert f.labels.region is not None and (f.labels.point_instance >= 0).sum() == 2
    (whole,) = open_sources([str(drive)])
    assert len(whole) == 3
    with pytest.raises(UserError, match="no frames in that range"):
        open_sources([f"{drive}@5:"])
    # a drive without tracklets has no labels to train on: refused in one line before anything is written
    (drive / "tracklet_labels.xml").unlink()
    cfg = TrainConfig(data=(str(drive),), out=str(tmp_path / "run"), steps=1, grid=GRID, range=R, crop=32,
                      batch=1, warmup=1, threads=1, bf16=False)
    with pytest.raises(UserError, match="no per-point labels"):
        train(cfg, log=lambda _m: None)
    assert not (tmp_path / "run").exists()


def test_training_mixes_sources_by_weight(tmp_path):
    pytest.importorskip("torch")
    from lidarmt.errors import ArgumentError
    from lidarmt.io.npz import save_frame_npz
    from lidarmt.lidar.perception.apollo.train import TrainConfig, train

    drive = write_tiny_drive(tmp_path)
    data = tmp_path / "sim"
    save_frame_npz(data / "0000.npz", _region_frame(0))
    with pytest.raises(ArgumentError, match="one per source"):
        TrainConfig(data=(str(data), str(drive)), data_weights=(1.0,), out="x")
    cfg = TrainConfig(data=(str(data), f"{drive}@0:2"), data_weights=(1.0, 1.0), out=str(tmp_path / "run"),
                      steps=2, grid=GRID, range=R, crop=32, batch=2, warmup=1, threads=1, bf16=False)
    msgs: list[str] = []
    s = train(cfg, log=msgs.append)
    assert s["steps_done"] == 2 and s["frames"] == 3
    assert "p=0.50" in msgs[0]


def test_shipped_weights_by_name():
    from lidarmt.lidar.perception.apollo.config import NAMED_WEIGHTS, WEIGHTS_DIR, ApolloConfig
    from lidarmt.lidar.perception.apollo.errors import ConfigError

    assert ApolloConfig(weights="sim").weights_path() == WEIGHTS_DIR / "cnnseg640_sim.pt"
    # issue 32: the 640 default is v4 ("streets"); v3, the default before it, by name
    assert ApolloConfig(weights="default").weights_path() == WEIGHTS_DIR / "cnnseg640_streets.pt"
    assert ApolloConfig().weights_path() == ApolloConfig(weights="streets").weights_path()
    assert ApolloConfig(weights="v3").weights_path() == WEIGHTS_DIR / "cnnseg640.pt"
    assert ApolloConfig(grid=512).weights_path() == ApolloConfig(grid=512, weights="v3").weights_path()
    assert ApolloConfig(grid=512, weights="sim").weights_path() == WEIGHTS_DIR / "cnnseg512_sim.pt"
    for name, grids in NAMED_WEIGHTS.items():  # every name points at a file that ships
        for grid in grids:
            assert ApolloConfig(grid=grid, weights=name).weights_path().is_file(), (name, grid)
    assert ApolloConfig().with_overrides(["weights=sim"]).weights_path().parent == WEIGHTS_DIR
    assert str(ApolloConfig(weights="some/where.pt").weights_path()) == "some/where.pt"
    with pytest.raises(ConfigError, match="not a shipped name"):
        ApolloConfig(weights="nosuch").weights_path()
