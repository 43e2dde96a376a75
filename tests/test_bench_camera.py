"""lidarmt camera bench: steering models compared per (image, transformation, parameter, trial)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_camera_campaign import TiltModel, write_udacity

from lidarmt.cli import main

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


class JitterModel(TiltModel):
    """The tilt model plus a swing of up to ±0.5 rad that depends on the exact pixel sum: any transformation
    changes it, so the label-free relation (DeepRoad) breaks on most pairs."""

    name = "jitter"

    def predict(self, images: np.ndarray) -> np.ndarray:
        s = images.astype(np.float64).sum(axis=(1, 2, 3))
        return super().predict(images) + 0.5 * np.sin(s * 0.0137)


def tilt(**kw) -> TiltModel:
    return TiltModel(**kw)


def jitter(**kw) -> JitterModel:
    return JitterModel(**kw)


@pytest.fixture(scope="module")
def drive(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("cambench") / "drive", 8)


def _bench(src: Path, out: Path, *models: str, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["camera", "bench", "--images", str(src), "--transforms", "brightness,contrast,mirror", "--out", str(out),
            "--quiet"]
    for m in models:
        args += ["--model", m]
    return [*args, *extra]


def test_camera_identical_models_no_regression(drive, tmp_path):
    out = tmp_path / "same"  # the images without their labels: DeepRoad only
    args = _bench(drive / "center", out, "test_bench_camera:tilt", "test_bench_camera:tilt", extra=("--fail-on-regression",))
    assert main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["verdict"] == "no regression" and not s["labelled"]
    rows = s["comparisons"][0]["rows"]
    assert {r["relation"] for r in rows} == {"deeproad", "crash/timeout"}
    assert {r["transform"] for r in rows} == {"brightness", "contrast", "mirror", "all"}
    assert all(r["b"] == 0 and r["c"] == 0 for r in rows)
    # pairs: every (image, parameter) of a transformation, judged by both models
    per = {r["transform"]: r["pairs"] for r in rows if r["relation"] == "deeproad"}
    assert per["all"] == per["brightness"] + per["contrast"] + per["mirror"] == s["modules"][0]["pairs_done"]
    for name in ("transforms.png", "junit.xml", "report.md", "table.txt"):
        assert (out / name).is_file()


def test_camera_regression_detected(drive, tmp_path, capsys):
    out = tmp_path / "reg"
    args = _bench(drive, out, "test_bench_camera:tilt", "test_bench_camera:jitter", extra=("--fail-on-regression",))
    assert main(args) == 1
    s = json.loads((out / "summary.json").read_text())
    everything = next(r for r in s["comparisons"][0]["rows"] if r["relation"] == "deeproad" and r["transform"] == "all")
    assert everything["c"] > everything["b"] and everything["regression"] and everything["p_adj"] < 0.05
    text = capsys.readouterr().out
    assert s["verdict"] == "regression" and "REGRESSION" in text
    # 8 seed images, many correlated pairs each: the verdict says how little it rests on
    ind = s["comparisons"][0]["independence"]
    assert ind["seeds"] == 8 and ind["pairs"] == everything["pairs"] and len(ind["warnings"]) == 2
    assert "only 8 seed frame(s)" in text and "rests on 8 independent seed(s)" in text
    assert "rests on 8 independent seed(s)" in (out / "report.md").read_text()
    assert s["labelled"] and {r["relation"] for r in s["comparisons"][0]["rows"]} >= {"deeptest", "deeproad"}
    assert s["comparisons"][0]["errors"][0]["candidate"]["rmse_deg"] > s["modules"][0]["rmse_deg"]
    assert all(m["spread_deg"] > 0 for m in s["modules"])
    assert (out / "junit.xml").read_text().count("<failure") == s["regressions"]
    # an earlier bench's baseline, reused for the next candidate; other transformations are refused in one line
    out2 = tmp_path / "reuse"
    assert main(_bench(drive, out2, "test_bench_camera:jitter", extra=("--baseline", str(out), "--trust-code"))) == 0
    s2 = json.loads((out2 / "summary.json").read_text())
    again = next(r for r in s2["comparisons"][0]["rows"] if r["relation"] == "deeproad" and r["transform"] == "all")
    assert (again["b"], again["c"]) == (everything["b"], everything["c"])
    capsys.readouterr()
    bad = ["camera", "bench", "--images", str(drive), "--transforms", "brightness", "--out", str(tmp_path / "x"),
           "--quiet", "--model", "test_bench_camera:jitter", "--baseline", str(out), "--trust-code"]
    assert main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--baseline" in err and "transforms" in err, err
