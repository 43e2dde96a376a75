"""Guard-rails (issue 30): an unknown SUT or model option is one line listing the valid keys; ``camera predict``
says which of its frames trained the model (the card's split and labels' fingerprint)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_camera_predict_cli import udacity_folder
from test_fuzz_support import write_road_geojson, write_scenes

from lidarmt.camera.models.registry import training_frames
from lidarmt.camera.models.train import labels_fingerprint
from lidarmt.camera.sources import open_images
from lidarmt.cli import main
from lidarmt.errors import ArgumentError
from lidarmt.lidar.perception.registry import get_perception


def test_apollo_option_typo_lists_the_valid_keys():
    with pytest.raises(ArgumentError) as got:
        get_perception("apollo", wieghts="sim")
    msg = str(got.value)
    assert "'wieghts'" in msg and "did you mean weights" in msg and "objectness_thresh" in msg
    assert "\n" not in msg


def test_module_callable_option_typo_lists_the_valid_keys():
    with pytest.raises(ArgumentError) as got:
        get_perception("test_fuzz_support:GridSut", cel=2.0)
    msg = str(got.value)
    assert "'cel'" in msg and "cell, half, ground, min_roi_share" in msg
    assert get_perception("test_fuzz_support:GridSut", cell=2.0).cell == 2.0


def test_fuzz_sut_option_typo_is_one_line(tmp_path, capsys):
    rec = write_scenes(tmp_path / "frames", 1)
    world = write_road_geojson(tmp_path / "world.geojson")
    assert main(["fuzz", "--bag", str(rec), "--map", str(world), "--sut", "test_fuzz_support:GridSut",
                 "--sut-option", "hlaf=30", "--n", "10", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "valid keys: cell, half, ground, min_roi_share" in err and "did you mean half" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def _card(tmp_path, labels, *, train: int) -> str:
    """A weights path whose metrics file (the card ``camera train`` writes beside it) records a drive."""
    w = tmp_path / "m.pt"
    w.write_bytes(b"")  # training_frames reads the card only
    w.with_suffix(".json").write_text(json.dumps({
        "data": "drive", "data_frames": len(labels), "train_frames": train,
        "labels_sha256": labels_fingerprint(np.asarray(labels, dtype=np.float64))}))
    return str(w)


def test_training_frames_from_the_card(tmp_path):
    with open_images(udacity_folder(tmp_path / "drive")) as src:
        labels = src.labels()
    spec = _card(tmp_path, labels, train=5)
    assert training_frames(spec, {}, labels) == {"stop": 5, "frames": 7, "data": "drive", "card": "m.json"}
    other = [*labels[:-1], labels[-1] + 0.01]  # another drive (or another copy's labels)
    assert training_frames(spec, {}, other) is None
    assert training_frames(spec, {}, labels[:6]) is None  # not the whole drive: cannot tell the split
    assert training_frames(spec, {}, [None] * 7) is None  # no labels: no fingerprint


def test_predict_says_which_frames_trained_the_model(shared_data, capsys):
    drive = shared_data / "udacity"
    if not (drive / "steering.csv").is_file() and not any(drive.glob("*.csv")):
        pytest.skip("../shared/data/udacity is absent")
    assert main(["camera", "predict", str(drive), "--model", "dave2", "--frames", "12"]) == 0
    out = capsys.readouterr().out
    assert "12 of these 12 frame(s) trained dave2" in out and "held-out frames are 1760-2199" in out
    assert main(["camera", "predict", str(drive), "--model", "dave2", "--frames", "12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    o = doc["metrics"]["training_overlap"]
    assert o["trained_on"] == 12 and o["stop"] == 1760 and o["held_out"] is None
