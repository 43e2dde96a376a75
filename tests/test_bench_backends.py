"""lidarmt bench / lidarmt camera bench: --device, --backend and --address as lidarmt fuzz takes them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_camera_campaign import TiltModel, write_udacity
from test_fuzz_support import GridSut, write_scenes

from lidarmt.cli import main
from lidarmt.engine.journal import read_header

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

HAS_RAY = importlib.util.find_spec("ray") is not None


class DeviceSut(GridSut):
    """The grid SUT, taking a ``device`` as Apollo's pipeline does."""

    def __init__(self, device: str = "cpu", **kw) -> None:
        super().__init__(**kw)
        self.device = device


class DeviceTilt(TiltModel):
    def __init__(self, device: str = "cpu", **kw) -> None:
        super().__init__(**kw)
        self.device = device


def device_sut(**kw) -> DeviceSut:
    return DeviceSut(**kw)


def device_tilt(**kw) -> DeviceTilt:
    return DeviceTilt(**kw)


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("benchdev") / "frames", 3)


@pytest.fixture(scope="module")
def drive(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("cambenchdev") / "drive", 4)


def lidar(rec: Path, out: Path, *extra: str) -> list[str]:
    return ["bench", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10", "--radius", "30",
            "--sut", "test_bench_backends:device_sut", "--sut", "test_bench_backends:device_sut",
            "--out", str(out), "--quiet", *extra]


def camera(src: Path, out: Path, *extra: str) -> list[str]:
    return ["camera", "bench", "--images", str(src), "--transforms", "brightness,mirror", "--frames", "3",
            "--model", "test_bench_backends:device_tilt", "--model", "test_bench_backends:device_tilt",
            "--out", str(out), "--quiet", *extra]


def _one_line_error(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "\n" not in err and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize("extra,needle", [
    (("--backend", "nonsense"), "--backend 'nonsense'"),
    (("--address", "10.0.0.1:6379"), "needs --backend ray"),
    (("--device", "tpu"), "--device='tpu'"),
])
def test_bad_backend_and_device_are_one_line(rec, drive, tmp_path, capsys, extra, needle):
    assert main(lidar(rec, tmp_path / "l", *extra)) == 2
    _one_line_error(capsys, needle)
    assert main(camera(drive, tmp_path / "c", *extra)) == 2
    _one_line_error(capsys, needle)
    assert not (tmp_path / "l").exists() and not (tmp_path / "c").exists()


def test_device_reaches_every_module_unless_its_own_option_names_one(rec, drive, tmp_path):
    out = tmp_path / "lidar"
    assert main(lidar(rec, out, "--device", "cpu", "--sut-option", "2:device=cpu:explicit")) == 0
    s = json.loads((out / "summary.json").read_text())
    got = [read_header(out / m["name"] / "journal.jsonl")["config"]["sut"]["options"] for m in s["modules"]]
    assert got == [{"device": "cpu"}, {"device": "cpu:explicit"}]
    assert json.loads((out / "run.json").read_text())["backend"] == "local"
    out = tmp_path / "camera"
    assert main(camera(drive, out, "--device", "cpu")) == 0
    s = json.loads((out / "summary.json").read_text())
    for m in s["modules"]:
        (model,) = read_header(out / m["name"] / "journal.jsonl")["config"]["models"]
        assert model["options"] == {"device": "cpu"}


@pytest.mark.slow
@pytest.mark.skipif(not HAS_RAY, reason='ray is not installed (pip install "lidarmt[ray]")')
def test_camera_bench_on_ray_matches_local(drive, tmp_path):
    assert main(camera(drive, tmp_path / "local", "--timeout", "600")) == 0
    assert main(camera(drive, tmp_path / "ray", "--timeout", "600", "--backend", "ray", "--workers", "2")) == 0
    a = json.loads((tmp_path / "local" / "summary.json").read_text())
    b = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert a["comparisons"] == b["comparisons"] and a["verdict"] == b["verdict"]
    assert json.loads((tmp_path / "ray" / "run.json").read_text())["backend"] == "ray"
