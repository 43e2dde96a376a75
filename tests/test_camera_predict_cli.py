"""``lidarmt camera predict`` and ``lidarmt camera models`` on tiny Udacity-style folders and Keras files."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
from test_camera_keras import keras2_layers, write_keras

from lidarmt.camera.models import registry
from lidarmt.camera.models.keras import load_keras
from lidarmt.camera.sources import open_images
from lidarmt.cli import main


def udacity_folder(root: Path, n: int = 7, *, seed: int = 0, labelled: bool = True) -> Path:
    """``n`` random 48x64 frames in ``center/`` and a steering.csv (frame_id, steering_angle in radians)."""
    rng = np.random.default_rng(seed)
    (root / "center").mkdir(parents=True)
    rows = ["frame_id,steering_angle"]
    for i in range(n):
        fid = 1479425441182877835 + i * 100_000_000
        img = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        img[:, : 8 * i + 4] //= 3  # frames differ visibly, so predictions differ
        assert cv2.imwrite(str(root / "center" / f"{fid}.jpg"), img)
        rows.append(f"{fid},{rng.uniform(-0.3, 0.3):.6f}")
    if labelled:
        (root / "steering.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture
def data(tmp_path) -> Path:
    udacity_folder(tmp_path / "drive")
    write_keras(tmp_path / "model.h5", keras2_layers(), version=2)
    return tmp_path


def test_predict_json_matches_the_model(data, capsys) -> None:
    sheet = data / "out" / "sheet.png"
    code = main(["camera", "predict", str(data / "drive"), "--model", str(data / "model.h5"), "--json",
                 "--out", str(sheet)])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["frames"]) == 7 and doc["input"]["height"] == 23
    with open_images(data / "drive") as src:
        images = np.stack([src[i].image for i in range(len(src))])
        labels = np.array([src[i].label for i in range(len(src))])
        ids = [src[i].frame_id for i in range(len(src))]
    want = load_keras(data / "model.h5").predict(images)
    got = np.array([r["prediction"] for r in doc["frames"]])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    assert [r["frame_id"] for r in doc["frames"]] == ids
    assert np.std(got) > 0
    mse = float(np.mean((want - labels) ** 2))
    assert doc["metrics"]["mse_rad2"] == pytest.approx(mse, rel=1e-6)
    assert doc["metrics"]["rmse_deg"] == pytest.approx(math.degrees(math.sqrt(mse)), rel=1e-6)
    assert doc["metrics"]["labelled"] == 7
    assert sheet.read_bytes()[:4] == b"\x89PNG"
    pic = cv2.imread(str(sheet))
    assert pic.shape[1] == 4 * 324 + 4 and pic.shape[0] > 2 * 240  # 7 tiles: 4 columns, 2 rows


def test_predict_text_and_frames_limit(data, capsys) -> None:
    assert (
        main(["camera", "predict", str(data / "drive"), "--model", str(data / "model.h5"), "--frames", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "3 frame(s)" in out and "RMSE" in out and "always 0°" in out


def test_predict_unlabelled_images(tmp_path, capsys) -> None:
    udacity_folder(tmp_path / "drive", n=3)
    write_keras(tmp_path / "model.h5", keras2_layers(), version=2)
    args = ["camera", "predict", str(tmp_path / "drive" / "center"), "--model", str(tmp_path / "model.h5")]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metrics"]["labelled"] == 0 and "rmse_deg" not in doc["metrics"]
    assert all(r["label"] is None for r in doc["frames"])


HISTORY_MODEL = textwrap.dedent("""
    import numpy as np
    from lidarmt.camera.models.base import InputSpec

    class Windowed:
        name = "windowed"
        input_spec = InputSpec(height=8, width=8, history=2)
        module = None

        def predict(self, images):
            assert images.ndim == 5 and images.shape[1] == 3
            return images[:, -1].mean(axis=(1, 2, 3)) - images[:, 0].mean(axis=(1, 2, 3))

    class Bad:
        name = "bad"
        input_spec = InputSpec(height=8, width=8)
        module = None

        def predict(self, images):
            return np.zeros((len(images), 2))
""")


def test_predict_history_windows_and_bad_outputs(data, monkeypatch, capsys) -> None:
    (data / "windowed_model_mod.py").write_text(HISTORY_MODEL)
    monkeypatch.syspath_prepend(str(data))
    try:
        assert main(["camera", "predict", str(data / "drive"), "--model", "windowed_model_mod:Windowed",
                     "--json"]) == 0  # fmt: skip
        doc = json.loads(capsys.readouterr().out)
        assert [r["index"] for r in doc["frames"]] == [2, 3, 4, 5, 6]  # the first two frames have no history
        with open_images(data / "drive") as src:
            means = [src[i].image.mean() for i in range(len(src))]
        assert doc["frames"][0]["prediction"] == pytest.approx(means[2] - means[0])
        assert main(["camera", "predict", str(data / "drive"), "--model", "windowed_model_mod:Bad"]) == 2
        err = capsys.readouterr().err
        assert "predict returned float64 (7, 2)" in err and err.count("\n") == 1
    finally:
        sys.modules.pop("windowed_model_mod", None)


@pytest.mark.parametrize(("what", "message"), [
    ("unsupported", "layer separable_conv2d_1 has type SeparableConv2D"),
    ("shape", "outputs shape (3,) per image"),
    ("garbage", "is not an HDF5 file"),
    ("unknown", "unknown steering model 'no-such-model'; available:"),
    ("option", "--model-option 'preprocess': use [MODEL:]KEY=VALUE"),
])  # fmt: skip
def test_predict_errors_are_one_line(data, capsys, what: str, message: str) -> None:
    model = str(data / "bad.h5")
    extra: list[str] = []
    if what == "unsupported":
        layers = keras2_layers()
        layers.insert(3, {"class_name": "SeparableConv2D", "config": {"name": "separable_conv2d_1"}})
        write_keras(data / "bad.h5", layers, version=2)
    elif what == "shape":
        write_keras(data / "bad.h5", keras2_layers(last_units=3), version=2)
    elif what == "garbage":
        (data / "bad.h5").write_bytes(b"GIF89a not a model")
    elif what == "unknown":
        model = "no-such-model"
    else:
        model, extra = str(data / "model.h5"), ["--model-option", "preprocess"]
    assert main(["camera", "predict", str(data / "drive"), "--model", model, *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_predict_refuses_a_bad_picture_name(data, capsys) -> None:
    assert main(["camera", "predict", str(data / "drive"), "--model", str(data / "model.h5"),
                 "--out", str(data / "sheet.gif")]) == 2  # fmt: skip
    assert "must be a .png or .jpg" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------
# lidarmt camera models
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_zoo(monkeypatch):
    class Zoo:
        @staticmethod
        def available():
            return ["dave-orig", "chauffeur"]

        @staticmethod
        def describe(name):
            return {
                "name": name,
                "kind": "zoo",
                "parameters": 2_100_000 if name == "dave-orig" else 300_000,
                "input": {
                    "height": 100,
                    "width": 100,
                    "colour": "bgr",
                    "history": 0 if name == "dave-orig" else 4,
                    "note": "resized",
                },
                "card": f"weights/{name}.md",
                "val_rmse_deg": 4.25,
            }

    monkeypatch.setattr(registry, "_zoo", lambda: Zoo)
    monkeypatch.setattr(registry, "entry_points", lambda group: [])


@pytest.mark.slow
def test_models_lists_zoo_and_keras_usage(fake_zoo, capsys) -> None:
    assert main(["camera", "models", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in doc["models"]] == ["dave-orig", "chauffeur"]
    assert doc["models"][1]["input"]["history"] == 4 and doc["models"][0]["val_rmse_deg"] == 4.25
    assert "dave2-udacity-sim" in doc["keras"]["presets"] and "66x200x3" in doc["keras"]["default_preset"]
    assert main(["camera", "models"]) == 0
    out = capsys.readouterr().out
    assert "dave-orig" in out and "2,100,000" in out and "4.25" in out and "weights/chauffeur.md" in out
    assert "preprocess=dave2-udacity-sim" in out and "lambda=" in out


@pytest.mark.slow
def test_models_details_of_a_keras_file(data, capsys) -> None:
    assert main(["camera", "models", str(data / "model.h5"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "keras" and doc["preprocess"] == "resize" and doc["input"]["width"] == 30
    assert doc["layers"][0] == "input_1:InputLayer" and doc["parameters"] > 0
    assert main(["camera", "models", str(data / "model.h5"), "--model-option", "preprocess=resize-yuv"]) == 0
    assert "resize-yuv" in capsys.readouterr().out


@pytest.mark.realdata
def test_models_on_the_shared_dave2(shared_data, capsys) -> None:
    path = shared_data / "models" / "dave2_udacity_simulator.h5"
    if not path.is_file():
        pytest.skip(f"shared DAVE-2 model not available at {path}")
    assert main(["camera", "models", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["preprocess"] == "dave2-udacity-sim" and doc["output"] == "udacity-sim"
    assert doc["parameters"] == 252_219 and doc["keras_version"] == "1.2.1"
