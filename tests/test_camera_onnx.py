"""ONNX steering models: the input recipe, `camera models`, damage, and a campaign beside a zoo model that replays."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from test_camera_campaign import write_udacity

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.registry import file_sha256, get_model, kind_of
from lidarmt.cli import main

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _export(module: torch.nn.Module, path: Path, shape: tuple[int, int, int], *, nhwc: bool = False) -> Path:
    class Nhwc(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = module

        def forward(self, x):
            return self.m(x.permute(0, 3, 1, 2))

    c, h, w = shape
    net = Nhwc() if nhwc else module
    dummy = torch.zeros(1, h, w, c) if nhwc else torch.zeros(1, c, h, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (dummy,), str(path), dynamo=False, input_names=["image"],
                          output_names=["steering"], opset_version=17,
                          dynamic_axes={"image": {0: "n"}, "steering": {0: "n"}})
    return path


@pytest.fixture(scope="module")
def dave2_onnx(tmp_path_factory) -> Path:
    m = get_model("dave2")
    return _export(m.module, tmp_path_factory.mktemp("onnx") / "dave2.onnx", (3, 66, 200))


def test_onnx_model_runs_with_the_keras_recipe(dave2_onnx, tmp_path):
    assert kind_of(str(dave2_onnx)) == "onnx"
    m = get_model(str(dave2_onnx))
    assert m.module is None and m.onnx.layout == "nchw" and m.onnx.input_shape == (66, 200, 3)
    assert m.input_spec.colour == "yuv"  # 66x200x3: DAVE-2's preset, as for a Keras file
    imgs = np.random.default_rng(0).integers(0, 255, (3, 120, 160, 3), dtype=np.uint8)
    a = m.predict(imgs)
    assert a.shape == (3,) and np.isfinite(a).all()
    # the recipe's options apply: the zoo model's own preparation gives the zoo model's angles
    zoo = get_model("dave2")
    same = get_model(str(dave2_onnx), preprocess="resize-yuv", scale="x/127.5-1", output="radians")
    x = zoo.module.eval()
    with torch.no_grad():
        from lidarmt.camera.models.keras import _prepare_batch

        ref = x(torch.from_numpy(_prepare_batch(imgs, same.recipe, (66, 200)))).numpy().reshape(-1)
    np.testing.assert_allclose(same.predict(imgs), ref, rtol=0, atol=1e-4)
    assert not np.allclose(same.predict(imgs), a)
    # channels-last files (tf2onnx's Keras exports) are recognised by their channel axis
    nhwc = get_model(str(_export(zoo.module, tmp_path / "nhwc.onnx", (3, 66, 200), nhwc=True)),
                     preprocess="resize-yuv", scale="x/127.5-1", output="radians")
    assert nhwc.onnx.layout == "nhwc"
    np.testing.assert_allclose(nhwc.predict(imgs), same.predict(imgs), rtol=0, atol=1e-4)


def test_camera_models_shows_an_onnx_file(dave2_onnx, capsys):
    assert main(["camera", "models", str(dave2_onnx), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "onnx" and doc["sha256"] == file_sha256(str(dave2_onnx)) and "coverage" in doc
    assert main(["camera", "models"]) == 0
    assert "ONNX files" in capsys.readouterr().out


def test_damaged_or_foreign_onnx_is_one_line(dave2_onnx, tmp_path, capsys):
    data = write_udacity(tmp_path / "drive", 2)
    for i, bad in enumerate((dave2_onnx.read_bytes()[:3000], b"\x08\x07garbage" * 50)):
        p = tmp_path / f"bad{i}.onnx"
        p.write_bytes(bad)
        with pytest.raises(ModelError):
            get_model(str(p))
        assert main(["camera", "predict", str(data), "--model", str(p)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(p) in err, err
    # a model with two outputs per image is refused when it is opened
    two = _export(torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 2)),
                  tmp_path / "two.onnx", (3, 32, 32))
    with pytest.raises(ModelError, match="one value per image"):
        get_model(str(two))


@pytest.mark.slow
def test_fuzz_onnx_beside_a_zoo_model_and_replay(dave2_onnx, tmp_path, capsys):
    from test_camera_model_paths import _write_udacity

    # 12 of 30 frames at λ = 1: errors whose seed was already wrong are set apart (issue 30); enough remain
    data = _write_udacity(tmp_path / "drive", 30)
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--images", str(data), "--model", f"{dave2_onnx},dave2", "--transforms",
                 "rotation,mirror", "--frames", "12", "--lambda", "1", "--bundles", "2", "--out", str(out),
                 "-q"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    models = json.dumps(summary["config"])
    assert "dave2.onnx" in models and file_sha256(str(dave2_onnx)) in models
    bundles = [b for b in sorted((out / "violations").iterdir())
               if json.loads((b / "bundle.json").read_text())["model"]["name"].endswith(".onnx")]
    assert bundles, "the ONNX model has bundles"
    info = json.loads((bundles[0] / "bundle.json").read_text())
    assert info["model"]["sha256"] == file_sha256(str(dave2_onnx))
    assert main(["replay", str(bundles[0])]) == 0
