"""Apollo's cnnseg network: topology, heads, weights files, exact/fast modes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lidarmt.errors import UserError
from lidarmt.lidar.perception.apollo.network import (
    CnnRunner,
    build_network,
    conv_flops,
    cpu_bf16_support,
    load_network,
    load_state_dict,
)


def _features(grid: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(8, grid, grid)).astype(np.float32)
    f[7] = (rng.random((grid, grid)) < 0.3).astype(np.float32)
    return f


def test_topology_follows_the_prototxt() -> None:
    net = build_network(640)
    sd = net.state_dict()
    # Apollo's layer names and shapes (conv: out, in, kh, kw; deconv: in, out, kh, kw)
    assert sd["conv0_1.weight"].shape == (24, 8, 1, 1)
    assert sd["conv1_1.weight"].shape == (48, 24, 3, 3) and net.conv1_1.stride == (2, 2)
    assert sd["conv5.weight"].shape == (192, 192, 3, 3)
    assert sd["deconv5_1.weight"].shape == (192, 192, 3, 3)
    assert sd["deconv4.weight"].shape == (192, 128, 4, 4)
    assert sd["deconv4_1.weight"].shape == (128, 256, 3, 3)
    assert sd["deconv1_1.weight"].shape == (48, 96, 3, 3)
    assert sd["deconv0.weight"].shape == (48, 12, 4, 4)
    assert all(k.endswith(("weight", "bias")) for k in sd)
    n_conv = sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())
    n_deconv = sum(isinstance(m, torch.nn.ConvTranspose2d) for m in net.modules())
    assert (n_conv, n_deconv) == (20, 5)
    assert conv_flops(640) == pytest.approx(42.74e9, rel=1e-3)
    assert conv_flops(512) / conv_flops(640) == pytest.approx((512 / 640) ** 2)
    with pytest.raises(ValueError):
        build_network(500)


@pytest.mark.parametrize("grid", [64, 96])
def test_heads_shapes_ranges_and_mask(grid: int) -> None:
    net = build_network(grid, seed=1)
    f = _features(grid)
    out = CnnRunner(net, mode="exact")(f)
    assert out["category_score"].shape == (grid, grid)
    assert out["instance_pt"].shape == (2, grid, grid)
    assert out["confidence_score"].shape == (grid, grid)
    assert out["class_score"].shape == (5, grid, grid)
    assert out["heading_pt"].shape == (2, grid, grid)
    assert out["height_pt"].shape == (grid, grid)
    assert all(v.dtype == np.float32 for v in out.values())
    assert np.all(out["category_score"][f[7] == 0] == 0)  # multiplied by the non-empty mask
    assert np.all(out["category_score"][f[7] == 1] > 0)
    for k in ("confidence_score", "class_score"):
        assert out[k].min() > 0 and out[k].max() < 1  # sigmoid
    # the slicing of deconv0 at [1, 3, 4, 9, 11]; instance, heading and height are raw
    with torch.no_grad():
        raw = net.forward_raw(torch.from_numpy(f)[None])[0].numpy()
    sig = 1 / (1 + np.exp(-raw.astype(np.float64)))
    np.testing.assert_allclose(out["category_score"], sig[0] * f[7], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["instance_pt"], raw[1:3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["confidence_score"], sig[3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["class_score"], sig[4:9], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["heading_pt"], raw[9:11], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["height_pt"], raw[11], rtol=1e-5, atol=1e-6)


def test_the_512_and_640_inputs_run_through() -> None:
    net = build_network(512, seed=0)
    runner = CnnRunner(net, mode="fast")
    for grid in (512, 640):
        out = runner(_features(grid))
        assert out["category_score"].shape == (grid, grid)


def test_exact_mode_is_deterministic_and_fast_mode_agrees() -> None:
    net = build_network(64, seed=2)
    f = _features(64, seed=3)
    exact = CnnRunner(net, mode="exact")
    a, b = exact(f), exact(f)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    fast = CnnRunner(build_network(64, seed=2), mode="fast")
    c = fast(f)
    tol = 5e-2 if fast.bf16 else 1e-4
    for k in a:
        assert np.abs(a[k] - c[k]).max() < tol, k
    assert fast.precision == ("bf16" if cpu_bf16_support() else "fp32")
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the exact call


def test_weights_round_trip_and_errors(tmp_path) -> None:
    net = build_network(64, seed=5)
    path = tmp_path / "w.pt"
    torch.save(net.state_dict(), path)
    loaded = load_network(path, grid=64)
    f = _features(64)
    np.testing.assert_array_equal(CnnRunner(net)(f)["instance_pt"], CnnRunner(loaded)(f)["instance_pt"])
    wrapped = tmp_path / "ckpt.pt"
    torch.save({"state_dict": net.state_dict(), "grid": 640, "epoch": 3}, wrapped)
    assert set(load_state_dict(wrapped)) == set(net.state_dict())
    with pytest.raises(UserError, match="lidarmt train"):
        load_network(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(UserError, match="is not a CNN weights file"):
        load_network(tmp_path / "junk.pt")
    bad = dict(net.state_dict())
    bad.pop("conv0.bias")
    torch.save(bad, tmp_path / "bad.pt")
    with pytest.raises(UserError, match="does not fit"):
        load_network(tmp_path / "bad.pt")


def test_forward_raw_trains() -> None:
    """The training loop backpropagates through forward_raw (whose ReLUs are in place)."""
    net = build_network(64, seed=0).train()
    x = torch.randn(2, 8, 64, 64).contiguous(memory_format=torch.channels_last)
    raw = net.forward_raw(x)
    assert raw.shape == (2, 12, 64, 64)
    raw.pow(2).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    assert net.conv0_1.weight.grad.abs().sum() > 0
