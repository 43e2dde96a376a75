"""``device=auto|cpu|cuda|cuda:N`` for Apollo's CNN and ``--device`` for the campaigns and camera models.

This machine and CI have no GPU: the CPU paths and "asked for cuda, none here" are tested everywhere; the few
GPU-only checks are skipped (not passed) without CUDA.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_camera_keras import keras2_layers, write_keras
from test_camera_predict_cli import udacity_folder
from test_fuzz_support import make_scene, strip_roi

from lidarmt.cli import main
from lidarmt.errors import UserError
from lidarmt.lidar.perception.apollo.config import WEIGHTS_DIR, ApolloConfig
from lidarmt.lidar.perception.apollo.network import (
    CnnRunner,
    build_network,
    clamp_gpu_workers,
    resolve_device,
)
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
from lidarmt.lidar.perception.registry import get_perception

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (none on this machine)")
no_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the behaviour of a machine without CUDA")
WEIGHTS = WEIGHTS_DIR / "cnnseg640.pt"
# a small grid keeps the CNN fast; the network is fully convolutional, so the 640 weights run on any grid
SMALL = {"grid": 256, "range": 40.0}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_resolve_device_names() -> None:
    assert resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    assert resolve_device(None) == resolve_device("auto")
    assert resolve_device(" CPU ") == "cpu"
    for bad in ("gpu", "cuda:x", "cuda:", "tpu:0"):
        with pytest.raises(UserError, match="auto, cpu, cuda, cuda:N"):
            resolve_device(bad)
    with pytest.raises(UserError, match="device must be auto, cpu, cuda or cuda:N"):
        ApolloConfig(device="gpu")


@no_cuda
def test_cuda_without_a_gpu_is_one_user_error() -> None:
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(UserError, match="no usable CUDA GPU") as info:
            resolve_device(spec)
        assert "\n" not in str(info.value) and "device=cpu" in str(info.value)
    # the SUT option reaches the runner: building the SUT fails the same way, before any weights are read
    with pytest.raises(UserError, match="no usable CUDA GPU"):
        get_perception("apollo", device="cuda", weights=str(WEIGHTS))


@pytest.mark.skipif(not WEIGHTS.is_file(), reason="needs the shipped cnnseg640.pt")
def test_device_cpu_and_auto_give_the_default_obstacles_bit_for_bit() -> None:
    frame = make_scene(0)
    roi = strip_roi().roi_for(frame)
    default = ApolloLOP(ApolloConfig(**SMALL, weights=str(WEIGHTS)))
    cpu = get_perception("apollo", device="cpu", weights=str(WEIGHTS), **SMALL)
    assert default.runner.device.type == "cpu" and cpu.runner.device.type == "cpu"
    a, b = default.detect(frame, roi), cpu.detect(frame, roi)
    assert len(a) > 0, "the scene should give obstacles, or the comparison says nothing"
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.cls == y.cls and x.score == y.score
        np.testing.assert_array_equal(x.point_indices, y.point_indices)
        np.testing.assert_array_equal(x.center, y.center)
        np.testing.assert_array_equal(x.polygon, y.polygon)
    if not HAS_CUDA:
        auto = get_perception("apollo", device="auto", weights=str(WEIGHTS), **SMALL)
        assert auto.runner.device.type == "cpu" and "device=cpu" in repr(auto)


def test_batched_forward_matches_singles_and_reports_whether_it_is_exact() -> None:
    """run_many (one batch) gives the heads of single calls; bit for bit only where the kernels do not depend on
    the batch size: ``batch_is_exact`` says which, and it must agree with a direct comparison."""
    runner = CnnRunner(build_network(64, seed=3), mode="exact", threads=1)
    rng = np.random.default_rng(0)
    grids = [rng.random((8, 64, 64), dtype=np.float32) for _ in range(2)]
    singles = [runner(g) for g in grids]
    batch = runner.run_many(grids)
    assert runner.run_many([]) == []
    for s, b in zip(singles, batch, strict=True):
        assert s.keys() == b.keys()
        for k in s:
            assert s[k].shape == b[k].shape and s[k].dtype == np.float32
            np.testing.assert_allclose(b[k], s[k], rtol=1e-4, atol=1e-5)
    # batch_is_exact compares a pair of copies of one grid with a single call
    pair = runner.run_many([grids[0], grids[0]])
    direct = all(np.array_equal(singles[0][k], p[k]) for p in pair for k in singles[0])
    assert runner.batch_is_exact(grids[0]) == direct


def test_the_given_network_is_not_moved_or_cast() -> None:
    net = build_network(64, seed=1)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    CnnRunner(net, mode="fast", device="auto")
    for k, v in net.state_dict().items():
        assert v.device.type == "cpu" and v.dtype == torch.float32 and torch.equal(v, before[k])


def test_gpu_worker_clamp_leaves_cpu_campaigns_alone() -> None:
    assert clamp_gpu_workers(8, "cpu") == (8, "")
    assert clamp_gpu_workers(1, "cuda", per_worker=1 << 60) == (1, "")


@needs_cuda
def test_gpu_worker_clamp_by_free_memory() -> None:
    n, note = clamp_gpu_workers(4, "cuda", per_worker=1 << 50)  # a petabyte per worker: only one fits
    assert n == 1 and "--workers 4: using 1" in note and "GiB free" in note
    assert clamp_gpu_workers(2, "cuda", per_worker=1) == (2, "")


# ------------------------------------------------------------------------------------------ command line


@no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_fuzz_device_cuda_without_a_gpu_is_one_line_exit_2(tmp_path, capsys, spec) -> None:
    from test_fuzz_support import write_scenes

    rec = write_scenes(tmp_path / "frames", 1)
    out = tmp_path / "o"
    code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut", "apollo",
                 "--n", "10", "--out", str(out), "--quiet", "--device", spec])
    assert code == 2
    err = one_line_error(capsys)
    assert "--device" in err and "no usable CUDA GPU" in err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not WEIGHTS.is_file(), reason="needs the shipped cnnseg640.pt")
def test_fuzz_device_auto_records_cpu_and_gives_the_default_verdicts(tmp_path, capsys) -> None:
    from test_fuzz_support import write_scenes

    rec = write_scenes(tmp_path / "frames", 2)

    def campaign(name: str, *extra: str) -> tuple[dict, list[tuple]]:
        out = tmp_path / name
        code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut", "apollo",
                     "--sut-option", "grid=256", "--sut-option", f"weights={WEIGHTS}", "--n", "10,100",
                     "--trials", "2", "--bundles", "0", "--out", str(out), "--quiet", *extra])
        assert code == 0, capsys.readouterr().err
        capsys.readouterr()
        lines = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()]
        pairs = sorted((r["frame"], r["n"], r["trial"], json.dumps(r["verdict"], sort_keys=True))
                       for r in lines if r.get("type") == "pair")
        return lines[0]["config"]["sut"]["options"], pairs

    opts_default, default = campaign("a")
    opts_auto, auto = campaign("b", "--device", "auto")
    assert "device" not in opts_default
    assert opts_auto["device"] == ("cuda" if HAS_CUDA else "cpu")  # resolved once, recorded for replays
    assert len(default) == 8 and any('"pedestrian": 3' in v for *_, v in default)
    if not HAS_CUDA:
        assert auto == default


def test_fuzz_bad_device_name_is_one_line_exit_2(tmp_path, capsys) -> None:
    from test_fuzz_support import write_scenes

    rec = write_scenes(tmp_path / "frames", 1)
    code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10",
                 "--out", str(tmp_path / "o"), "--quiet", "--device", "gpu"])
    assert code == 2 and "--device='gpu'" in one_line_error(capsys)


@pytest.mark.slow
@pytest.mark.skipif(not WEIGHTS.is_file(), reason="needs the shipped cnnseg640.pt")
def test_perceive_device_auto_runs_here(tmp_path, capsys) -> None:
    from test_fuzz_support import write_road_geojson, write_scenes

    rec = write_scenes(tmp_path / "frames", 1)
    road = write_road_geojson(tmp_path / "road.geojson", frame="sensor")
    args = ["perceive", str(rec), "--map", str(road), "--grid", "256", "--weights", str(WEIGHTS)]
    code = main([*args, "--device", "auto"])
    text = capsys.readouterr()
    assert code == 0, text.err
    assert main([*args, "--device", "cpu"]) == 0

    def table(out: str) -> list[str]:  # the obstacles, without the timing line
        return [line for line in out.splitlines() if " ms" not in line]

    assert "counts: " in text.out and "pedestrian" in text.out
    assert table(capsys.readouterr().out) == table(text.out)  # same obstacles on cpu and auto (= cpu here)
    if not HAS_CUDA:
        assert main([*args, "--device", "cuda"]) == 2
        assert "no usable CUDA GPU" in one_line_error(capsys)


@pytest.fixture
def camera_data(tmp_path) -> Path:
    udacity_folder(tmp_path / "drive", n=4)
    write_keras(tmp_path / "model.h5", keras2_layers(), version=2)
    return tmp_path


def test_camera_predict_device_cpu_and_cuda(camera_data, capsys) -> None:
    base = ["camera", "predict", str(camera_data / "drive"), "--model", str(camera_data / "model.h5"), "--json"]
    assert main(base) == 0
    want = json.loads(capsys.readouterr().out)
    assert main([*base, "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == want["frames"]
    assert main([*base, "--device", "auto"]) == 0
    got = json.loads(capsys.readouterr().out)["frames"]
    if HAS_CUDA:
        np.testing.assert_allclose([r["prediction"] for r in got], [r["prediction"] for r in want[ "frames"]],
                                   rtol=1e-3, atol=1e-5)
    else:
        assert got == want["frames"]
        assert main([*base, "--device", "cuda"]) == 2
        err = one_line_error(capsys)
        assert "--device" in err and "no usable CUDA GPU" in err


@pytest.mark.slow
def test_camera_fuzz_device_cpu_gives_the_default_campaign(camera_data, capsys) -> None:
    def run(out: Path, *extra: str) -> dict:
        code = main(["camera", "fuzz", "--images", str(camera_data / "drive"), "--model",
                     str(camera_data / "model.h5"), "--transforms", "mirror,brightness", "--out", str(out),
                     "--quiet", "--bundles", "0", *extra])
        assert code in (0, 1), capsys.readouterr().err
        capsys.readouterr()
        doc = json.loads((out / "summary.json").read_text())
        return {k: v for k, v in doc.items() if k not in ("elapsed_s", "command", "created", "finished")}

    base = run(camera_data / "a")
    on_cpu = run(camera_data / "b", "--device", "cpu")
    assert on_cpu.pop("config")["models"][0]["options"] == {"device": "cpu"}
    assert base.pop("config")["models"][0]["options"] == {}
    assert on_cpu == base
    if not HAS_CUDA:
        assert main(["camera", "fuzz", "--images", str(camera_data / "drive"), "--model",
                     str(camera_data / "model.h5"), "--out", str(camera_data / "c"), "--quiet",
                     "--device", "cuda"]) == 2
        assert "no usable CUDA GPU" in one_line_error(capsys)
        assert not (camera_data / "c").exists()


# ------------------------------------------------------------------------------------------ GPU only


@needs_cuda
@pytest.mark.skipif(not WEIGHTS.is_file(), reason="needs the shipped cnnseg640.pt")
def test_gpu_exact_replays_bit_for_bit_and_is_close_to_the_cpu() -> None:
    frame = make_scene(1)
    gpu = ApolloLOP(ApolloConfig(**SMALL, weights=str(WEIGHTS), device="cuda"))
    cpu = ApolloLOP(ApolloConfig(**SMALL, weights=str(WEIGHTS)))
    feats = gpu.features(frame).copy()
    h1, h2, hc = gpu.runner(feats), gpu.runner(feats), cpu.runner(feats)
    for k in h1:
        np.testing.assert_array_equal(h1[k], h2[k])
        np.testing.assert_allclose(h1[k], hc[k], rtol=1e-3, atol=1e-4)
    assert gpu.runner.precision == "fp32"


@needs_cuda
def test_gpu_fast_mode_is_half_precision() -> None:
    runner = CnnRunner(build_network(64, seed=2), mode="fast", device="cuda")
    assert runner.precision in ("bf16", "fp16")
    heads = runner(np.random.default_rng(0).random((8, 64, 64), dtype=np.float32))
    assert all(v.dtype == np.float32 for v in heads.values())
