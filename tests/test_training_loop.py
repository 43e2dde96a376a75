"""Training: losses, samples, a few steps of overfitting a tiny grid, resume, and the shipped weights."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_training_targets import GRID, R, _frame  # noqa: E402

from lidarmt.io.npz import save_frame_npz  # noqa: E402
from lidarmt.lidar.perception.apollo.train import (  # noqa: E402
    TrainConfig,
    apollo_losses,
    collate,
    lr_at,
    make_sample,
    train,
    write_start_checkpoint,
)


def test_sample_crop_shapes_and_consistency():
    rng = np.random.default_rng(0)
    s = make_sample(_frame(), rng, grid=GRID, range_=R, crop=32, augment=None, object_crop_prob=1.0)
    assert s.features.shape == (8, 32, 32)
    assert s.targets.objectness.shape == (32, 32)
    assert np.array_equal(s.targets.nonempty, s.features[7] > 0.5)
    assert s.targets.objectness.any()  # the crop was placed on an object


def test_losses_are_zero_signal_on_empty_cells_and_finite():
    rng = np.random.default_rng(0)
    batch = collate([make_sample(_frame(k), rng, grid=GRID, range_=R, crop=GRID, augment=None) for k in range(2)])
    raw = torch.zeros(2, 12, GRID, GRID, requires_grad=True)
    losses = apollo_losses(raw, batch)
    assert all(torch.isfinite(v) for v in losses.values())
    losses["total"].backward()
    g = raw.grad[:, 0]  # category logit gradient
    empty = ~batch["nonempty"]
    assert empty.any()
    assert torch.all(g[empty] == 0)
    assert torch.any(g[batch["objectness"]] < 0)  # object cells are pushed up
    # a perfect prediction of the regressions gives zero regression loss
    raw2 = torch.zeros(2, 12, GRID, GRID)
    raw2[:, 1:3] = batch["instance"]
    raw2[:, 11] = batch["height"]
    raw2[:, 9:11] = batch["heading"]
    l2 = apollo_losses(raw2, batch)
    assert float(l2["instance"]) == 0 and float(l2["height"]) == 0 and float(l2["heading"]) == 0


@pytest.mark.slow
def test_overfitting_a_tiny_grid_reduces_the_loss():
    from lidarmt.lidar.perception.apollo.network import build_network

    torch.manual_seed(0)
    net = build_network(GRID, seed=0)
    rng = np.random.default_rng(0)
    batch = collate([make_sample(_frame(0), rng, grid=GRID, range_=R, crop=GRID, augment=None)])
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    hist = []
    for _ in range(60):
        losses = apollo_losses(net.forward_raw(batch["features"]), batch)
        opt.zero_grad()
        losses["total"].backward()
        opt.step()
        hist.append({k: float(v.detach()) for k, v in losses.items()})
    first = hist[0]
    last = {k: float(np.mean([h[k] for h in hist[-5:]])) for k in first}
    assert last["total"] < 0.6 * first["total"]
    assert last["category"] < first["category"]
    assert last["instance"] < first["instance"]  # the offsets need ~50 steps to start moving
    assert last["classify"] < 0.5 * first["classify"]


def test_lr_schedule():
    cfg = TrainConfig(data=("x",), out="y", steps=1000, warmup=100, lr=1e-3, grid=64, crop=32)
    assert lr_at(0, cfg) == pytest.approx(1e-5)
    assert lr_at(99, cfg) == pytest.approx(1e-3)
    assert lr_at(999, cfg) < 5e-5


def test_train_writes_loadable_weights_and_resumes(tmp_path):
    from lidarmt.lidar.perception.apollo.network import load_network

    data = tmp_path / "data"
    for k in range(2):
        save_frame_npz(data / f"{k:04d}.npz", _frame(k))
    cfg = TrainConfig(data=(str(data),), out=str(tmp_path / "run"), steps=3, grid=GRID, range=R, crop=32,
                      batch=1, warmup=1, threads=1, bf16=False)
    s1 = train(cfg, log=lambda _m: None)
    assert s1["steps_done"] == 3
    w = tmp_path / "run" / f"cnnseg{GRID}.pt"
    obj = torch.load(w, weights_only=True)
    assert obj["meta"]["steps_done"] == 3
    net = load_network(w, grid=GRID)
    assert net.conv0_1.weight.shape == (24, 8, 1, 1)
    # resuming a finished run does nothing more; a longer run continues from step 3
    cfg2 = dataclasses.replace(cfg, steps=4)
    s2 = train(cfg2, resume=True, log=lambda _m: None)
    assert s2["steps_done"] == 4
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    assert len(lines) == 4


def test_fine_tuning_starts_from_given_weights(tmp_path):
    import hashlib

    from lidarmt.lidar.perception.apollo.network import build_network, load_network
    from lidarmt.lidar.perception.apollo.train import TrainingOutputError, export_weights

    data = tmp_path / "data"
    save_frame_npz(data / "0000.npz", _frame(0))
    start = build_network(GRID, seed=42)
    init = tmp_path / "start.pt"
    export_weights(start.state_dict(), init, meta={})
    out = tmp_path / "run"
    write_start_checkpoint(init, out, grid=GRID, lr=1e-3)
    with pytest.raises(TrainingOutputError):  # a folder that holds a run is refused
        write_start_checkpoint(init, out, grid=GRID)
    cfg = TrainConfig(data=(str(data),), out=str(out), steps=1, grid=GRID, range=R, crop=32, batch=1, warmup=1,
                      threads=1, bf16=False, lr=1e-3, seed=7)
    s = train(cfg, resume=True, log=lambda _m: None)
    assert s["steps_done"] == 1
    assert s["init"] == {"weights": str(init), "sha256": hashlib.sha256(init.read_bytes()).hexdigest()}
    tuned = load_network(out / f"cnnseg{GRID}.pt", grid=GRID).state_dict()
    fresh = build_network(GRID, seed=7).state_dict()  # what a run from scratch with this seed starts from
    k = "conv0_1.weight"
    d_start = (tuned[k] - start.state_dict()[k]).abs().max()
    d_fresh = (tuned[k] - fresh[k]).abs().max()
    assert d_start < 0.01 < d_fresh  # one small step away from the given weights, far from a random start
    assert torch.load(out / f"cnnseg{GRID}.pt", weights_only=True)["meta"]["init"]["sha256"] == s["init"]["sha256"]


def test_missing_data_is_a_user_error(tmp_path):
    from lidarmt.errors import UserError

    cfg = TrainConfig(data=(str(tmp_path / "nope"),), out=str(tmp_path / "run"), steps=1, grid=GRID, crop=32)
    with pytest.raises(UserError, match="lidarmt simulate --dataset"):
        train(cfg, log=lambda _m: None)


@pytest.mark.parametrize("grid", [640, 512])
def test_shipped_weights_load_with_weights_only(grid):
    from lidarmt.lidar.perception.apollo.config import DEFAULT_WEIGHTS
    from lidarmt.lidar.perception.apollo.network import build_network

    path = DEFAULT_WEIGHTS[grid]  # where apollo / apollo-512 look for them
    if not path.is_file():
        pytest.skip(f"shipped weights {path.name} not trained yet")
    obj = torch.load(path, map_location="cpu", weights_only=True)
    sd = obj.get("state_dict", obj)
    ref = build_network(grid).state_dict()
    assert set(sd) == set(ref)
    for k, v in ref.items():
        assert sd[k].shape == v.shape, k
        assert torch.isfinite(sd[k].float()).all(), k
    assert path.stat().st_size <= 15 * 1024 * 1024
    assert obj["meta"]["config"]["grid"] == grid


def test_train_cli_rejects_bad_class_weights(tmp_path, capsys):
    from lidarmt.cli import main

    save_frame_npz(tmp_path / "d" / "0.npz", _frame(0))
    assert main(["train", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "r"), "--class-weights", "1,2"]) == 2
    assert "--class-weights" in capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "r")]) == 2
    assert "lidarmt simulate --dataset" in capsys.readouterr().err
