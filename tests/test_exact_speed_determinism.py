"""The exact CNN at the matmul's pace (issue 34): version 2 of ``exact`` (channels-last fp32, ReLU fused into oneDNN's
kernels) is bit for bit the same from one run to the next on one machine, under the CPU's own ISA and under
``ONEDNN_MAX_CPU_ISA=AVX2`` (in subprocesses, since oneDNN reads the cap when torch loads); it agrees with version 1
(NCHW, what older bundles were made with) within replay's tolerances; bundles and journals name the implementation;
and a LiDAR bundle made with version 1 replays with version 2 as *identical* or *reproduced*, whether it names its
implementation or, like bundles written before implementations were recorded, does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lidarmt.engine.replay import TOLERANCES
from lidarmt.lidar.perception.apollo import config as apollo_config
from lidarmt.lidar.perception.apollo.network import EXACT_IMPLEMENTATIONS, CnnRunner, build_network

ROOT = Path(__file__).resolve().parents[1]
SIGMOID_HEADS = ("category_score", "confidence_score", "class_score")


def _grid(size: int = 128, seed: int = 0) -> np.ndarray:
    """A sparse feature grid like a sweep's: most cells empty, the non-empty ones with positive features."""
    rng = np.random.default_rng(seed)
    f = rng.random((8, size, size), dtype=np.float32) * 3
    f *= rng.random((1, size, size)) < 0.3
    f[7] = f[7] > 0
    return f


def _net(size: int = 128):
    net = build_network(size, seed=5)
    with torch.no_grad():  # livelier activations than the default init: fewer ReLUs cut everything to zero
        for p in net.parameters():
            p.mul_(1.5)
    return net


def test_v2_is_the_default_channels_last_and_names_itself():
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    r2, r1 = CnnRunner(net, mode="exact"), CnnRunner(net, mode="exact", exact_version=1)
    assert apollo_config.EXACT_VERSION == 2 and set(EXACT_IMPLEMENTATIONS) == {1, 2}
    assert r2.implementation == "exact-v2" and r2.channels_last and r1.implementation == "exact-v1"
    assert not r1.channels_last and not r1.relu_fused
    assert r2.net.conv0.weight.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # the caller's network untouched
    assert not net.relu_fused and CnnRunner(net, mode="fast").implementation.startswith("fast-")
    with pytest.raises(ValueError, match="exact_version"):
        CnnRunner(net, exact_version=3)
    assert apollo_config.implementations() == {"apollo_cnn_exact": "exact-v2"}


def test_v2_is_bit_identical_run_to_run_and_agrees_with_v1():
    net, f = _net(), _grid()
    a, b = CnnRunner(net, mode="exact"), CnnRunner(net, mode="exact")
    first = a(f)
    for again in (a(f), b(f)):  # the same runner twice, and a second runner
        for k, v in first.items():
            assert v.dtype == np.float32 and v.tobytes() == again[k].tobytes(), k
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the call
    import torch.utils.deterministic as det

    assert det.fill_uninitialized_memory  # torch's default restored too
    v1 = CnnRunner(net, mode="exact", exact_version=1)(f)
    moved = 0.0
    for k, v in first.items():
        diff = float(np.abs(v.astype(np.float64) - v1[k]).max())
        scale = 1.0 if k in SIGMOID_HEADS else max(1.0, float(np.abs(v1[k]).max()))
        # scores within replay's probability tolerance; raw heads (offsets, heading, height) within 1e-4 of their
        # scale: fp32 sums in another order, nothing more
        assert diff <= (TOLERANCES["probability"].abs if k in SIGMOID_HEADS else 1e-4 * scale), (k, diff)
        moved = max(moved, diff)
    assert np.abs(first["instance_pt"]).max() > 1e-3  # the comparison was not of zeros


def test_fused_relu_gives_the_values_of_a_separate_relu():
    """fuse_relu changes where the ReLU runs, not what comes out: the hooks a coverage probe puts on the layers
    still fire, on post-ReLU outputs, and the heads equal those of the same channels-last network unfused."""
    from lidarmt.lidar.perception.apollo.network import fuse_relu

    net, f = _net(), _grid(seed=1)
    runner = CnnRunner(net, mode="exact")
    if not runner.relu_fused:
        pytest.skip("this torch build has no oneDNN fused convolution (torch.ops.mkldnn._convolution_pointwise)")
    seen: dict[str, float] = {}
    handles = [m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, float(o.min())))
               for n, m in runner.net.named_children()]
    out = runner(f)
    for h in handles:
        h.remove()
    assert set(seen) == {n for n, _ in net.named_children()}  # every layer's hook fired
    assert all(v >= 0 for n, v in seen.items() if n != "deconv0")  # post-ReLU
    plain = _net().to(memory_format=torch.channels_last)
    assert not plain.relu_fused
    x = torch.from_numpy(f)[None].contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        ref = plain(x)
        assert fuse_relu(plain) and plain.relu_fused
        fused = plain(x)
    for k in ref:
        np.testing.assert_allclose(fused[k].numpy(), ref[k].numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["category_score"], ref["category_score"][0, 0].numpy(), rtol=0, atol=1e-5)


CHILD = r"""
import hashlib, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from test_exact_speed_determinism import _grid, _net
from lidarmt.lidar.perception.apollo.network import CnnRunner
from lidarmt import _machine
torch.set_num_threads(1)
runner = CnnRunner(_net(), mode="exact")
f = _grid(seed=2)
outs = [runner(f) for _ in range(2)]
same = all(outs[0][k].tobytes() == outs[1][k].tobytes() for k in outs[0])
h = hashlib.sha256(b"".join(outs[0][k].tobytes() for k in sorted(outs[0]))).hexdigest()
print(_machine.isa(), runner.implementation, same, h)
"""


def _child(isa: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)])})
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    got = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr
    return got.stdout.split()


@pytest.mark.parametrize("isa", [None, "AVX2"], ids=["default-isa", "avx2"])
def test_v2_is_bit_identical_in_two_processes(isa):
    from lidarmt import _machine

    if isa == "AVX2" and _machine.cpu_isa() not in ("amx", "avx512_bf16", "avx512", "avx2"):
        pytest.skip("AVX2 is above this CPU's ISA")  # pragma: no cover - no x86 with AVX2
    first, second = _child(isa), _child(isa)
    assert first[1] == "exact-v2" and first[2] == "True" and second[2] == "True"  # twice within each process
    assert first[3] == second[3]  # and the same bits in two processes
    if isa == "AVX2" and _machine.cpu_isa() != "avx2":
        assert first[0] == "avx2"  # the cap took


# ------------------------------------------------------------------------------------------ bundles and replay

STRICT = {"distance_m": 70.0, "min_points": 10, "tolerance": 0.95, "occlusion": 0.5, "insert_overlap": 0.95}


@pytest.fixture(scope="module")
def v1_bundle(tmp_path_factory):
    """A LiDAR-transformation bundle of Apollo's CNN (shipped 640 weights, exact mode) made with exact-v1, on a
    simulated sweep: what a bundle written before issue 34 holds, with the implementation it was made with."""
    pytest.importorskip("open3d")
    if not apollo_config.DEFAULT_WEIGHTS[640].is_file():
        pytest.skip("the shipped cnnseg640.pt is not here")
    from test_lidar_relations_support import simulated_frames

    from lidarmt.engine.campaign import make_bundles, run_campaign
    from lidarmt.lidar.campaign import LidarCampaignConfig, transform_refs
    from lidarmt.lidar.relations import Thresholds
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    root = tmp_path_factory.mktemp("exact-v1")
    frames_dir, map_dir = simulated_frames(root, frames=1)
    cfg = LidarCampaignConfig(SourceSpec(str(frames_dir)), RoiSpec(str(map_dir)), SutSpec("apollo"),
                              transform_refs(["crosstalk"], levels=("heavy",)), (0,), seed=3,
                              thresholds=Thresholds.from_dict(STRICT))
    out = root / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(apollo_config, "EXACT_VERSION", 1)
    try:
        run_campaign(cfg, out)
        (info,) = make_bundles(cfg, out, [(0, 0, 0, 0)], budget=6, thresholds=cfg.thresholds.to_dict())
    finally:
        mp.undo()
    return out / "violations" / info["id"]


@pytest.mark.slow
def test_a_bundle_made_with_exact_v1_replays_with_exact_v2(v1_bundle):
    from lidarmt.lidar.mr1.replay import replay_bundle

    info = json.loads((v1_bundle / "bundle.json").read_text())
    assert info["sut_implementation"] == "exact-v1" and apollo_config.EXACT_VERSION == 2
    res = replay_bundle(v1_bundle, trust_code=True)
    assert res.same, res.details
    assert res.outcome in ("identical", "reproduced"), (res.outcome, res.details, res.moved)
    assert res.implementation == "exact-v1" and res.implementation_now == "exact-v2" and res.other_implementation
    doc = res.to_dict()
    assert doc["made_with"] == "exact-v1" and doc["replayed_with"] == "exact-v2"
    assert "made with exact-v1, replayed with exact-v2" in res.summary()
    for d in res.drift:  # what moved, moved within its tolerance
        assert d.diff <= d.tolerance.abs


@pytest.mark.slow
def test_a_bundle_from_before_implementations_were_recorded_replays(v1_bundle, tmp_path):
    import shutil

    from lidarmt.engine.manifest import read_manifest, write_manifest
    from lidarmt.lidar.mr1.replay import replay_bundle

    old = tmp_path / v1_bundle.name
    shutil.copytree(v1_bundle, old)
    info = json.loads((old / "bundle.json").read_text())
    del info["sut_implementation"]  # as bundle.json was before issue 34
    (old / "bundle.json").write_text(json.dumps(info, indent=2))
    listed, _ = read_manifest(old)
    write_manifest(old, sorted(listed))
    res = replay_bundle(old, trust_code=True)
    assert res.outcome in ("identical", "reproduced"), (res.outcome, res.details, res.moved)
    assert res.implementation is None and res.implementation_now == "exact-v2" and res.other_implementation
    assert "an unrecorded implementation" in res.summary()


def test_same_implementation_explains_nothing():
    """A bundle that names the implementation running now, on the same kernels: listed differences with no number
    moved stay unexplained (not reproduced), as before issue 34."""
    from lidarmt._machine import record
    from lidarmt.engine.replay import ReplayResult

    res = ReplayResult(Path("."), True, machine=record(), implementation="exact-v2", implementation_now="exact-v2")
    res.differ("source obstacles", "3 now, 2 stored")
    assert not res.other_implementation and res.outcome == "not reproduced"
    res.implementation = "exact-v1"
    assert res.other_implementation and res.outcome == "reproduced"


@pytest.mark.parametrize("shape", [(1, 8, 64, 48), (2, 12, 32, 32), (3, 1, 5, 7), (1, 12, 1, 1)])
def test_layout_copies_move_values_only(shape):
    """The blocked transpositions between NCHW and channels-last (the CNN's input and output) copy values exactly,
    in any dtype, for a batch too."""
    from lidarmt.lidar.perception.apollo.network import to_channels_last, to_nchw

    x = torch.rand(shape)
    y = to_channels_last(x)
    assert y.is_contiguous(memory_format=torch.channels_last) and torch.equal(y, x)
    half = to_channels_last(x, torch.bfloat16)
    assert half.dtype == torch.bfloat16 and torch.equal(half, x.to(torch.bfloat16))
    z = to_nchw(y)
    assert z.is_contiguous() and torch.equal(z, x)
    assert to_nchw(x) is x  # already NCHW: no copy


def test_a_campaign_journal_names_the_implementations(tmp_path, monkeypatch):
    """`lidarmt fuzz` writes the versions of the implementations it runs into the journal's header, beside the
    environment (a small MR1 campaign with the grid test SUT; the header is what matters)."""
    from test_fuzz_support import write_road_geojson, write_scenes
    from test_replay_hardening import _install_plugin

    from lidarmt.cli import main
    from lidarmt.engine.journal import JOURNAL_NAME, read_header

    _install_plugin(monkeypatch)
    rec = write_scenes(tmp_path / "frames", 1)
    world = write_road_geojson(tmp_path / "world.geojson")
    assert main(["fuzz", "--bag", str(rec), "--map", str(world), "--sut", "grid-test", "--radius", "30",
                 "--n", "10", "--bundles", "0", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    header = read_header(tmp_path / "run" / JOURNAL_NAME)
    assert header["implementations"] == {"apollo_cnn_exact": "exact-v2"} and "environment" in header


def test_a_copy_of_a_fused_network_computes_with_its_own_weights():
    import copy

    runner = CnnRunner(_net(), mode="exact")
    if not runner.relu_fused:
        pytest.skip("this torch build has no oneDNN fused convolution")
    twin = copy.deepcopy(runner.net)
    assert twin.conv0.forward.__self__ is twin.conv0 and twin.relu_fused
    x = torch.from_numpy(_grid(seed=3))[None].contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        before = twin(x)["instance_pt"].clone()
        twin.conv0.weight.mul_(0.5)  # the copy's weights, not the original's, decide its outputs
        assert not torch.equal(twin(x)["instance_pt"], before)
        assert torch.equal(runner.net(x)["instance_pt"], before)
