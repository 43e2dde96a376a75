"""Models by path and as users bring them: a weights file from ``camera train`` used without --ship (predict,
fuzz, bundles with the file's SHA-256, replay refusing a changed file), weights files that are refused (unknown
architecture, a pickle payload), ``camera predict``'s baselines, per-model options when built-in and Keras models
are mixed, and pairs campaigns over follow-ups made elsewhere (``camera fuzz --pairs``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

from lidarmt.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_camera_campaign import write_udacity  # noqa: E402
from test_camera_train import _write_udacity  # noqa: E402


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(labelled drive, weights file) of a dave2 trained for one epoch by `lidarmt camera train`, not shipped."""
    root = tmp_path_factory.mktemp("trained")
    data = _write_udacity(root / "drive", 30)
    out = root / "run"
    assert main(["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(out), "--epochs", "1",
                 "--batch-size", "8", "-q"] if _train_has_quiet() else
                ["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(out), "--epochs", "1",
                 "--batch-size", "8"]) == 0
    return data, out / "dave2.pt"


def _train_has_quiet() -> bool:
    import inspect

    from lidarmt.cli.camera import train as train_cli

    return "quiet" in inspect.signature(train_cli.train).parameters


def test_predict_by_path_reports_both_baselines(trained, capsys) -> None:
    from lidarmt.camera.sources import open_images

    data, weights = trained
    capsys.readouterr()
    assert main(["camera", "predict", str(data), "--model", str(weights), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["metrics"]
    with open_images(data) as src:
        labels = np.asarray([f.label for f in src])
    pred = np.asarray([r["prediction"] for r in doc["frames"]])
    assert m["labelled"] == 30 and np.all(np.isfinite(pred))
    assert m["zero_mse_rad2"] == pytest.approx(float(np.mean(labels ** 2)))
    train_mean = float(np.mean(labels[:24]))  # camera train's split: the first 80 % train
    assert m["train_mean_rad"] == pytest.approx(train_mean) and m["train_mean_source"]
    assert m["mean_mse_rad2"] == pytest.approx(float(np.mean((labels - train_mean) ** 2)))
    assert m["mean_rmse_deg"] == pytest.approx(math.degrees(math.sqrt(m["mean_mse_rad2"])))
    assert m["mse_ratio_zero"] == pytest.approx(m["mse_rad2"] / m["zero_mse_rad2"])
    assert m["correlation"] == pytest.approx(float(np.corrcoef(pred, labels)[0, 1]))
    # the table view says the same in one line
    assert main(["camera", "predict", str(data), "--model", str(weights), "-n", "10"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "always 0°" in text and "always the training mean" in text and "Pearson correlation" in text


def test_models_shows_a_weights_file(trained, capsys) -> None:
    from lidarmt.camera.models.registry import file_sha256

    _data, weights = trained
    capsys.readouterr()
    assert main(["camera", "models", str(weights), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "weights" and doc["architecture"] == "dave2" and doc["sha256"] == file_sha256(str(weights))
    assert doc["input"]["height"] == 66 and doc["train_mean_rad"] is not None


def test_predict_says_when_the_training_mean_is_unknown(trained, tmp_path, capsys) -> None:
    from lidarmt.camera.models.train import read_weights

    data, weights = trained
    copy = tmp_path / "copy" / "dave2.pt"  # the weights alone: no metrics file beside them
    copy.parent.mkdir()
    copy.write_bytes(weights.read_bytes())
    meta = read_weights(copy)[2]
    capsys.readouterr()
    assert main(["camera", "predict", str(data), "--model", str(copy), "-n", "8"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    if "train_mean_rad" not in meta:
        assert "always the training mean: unknown" in text
    else:
        assert "always the training mean (" in text


def test_weights_naming_an_unknown_architecture_are_refused(tmp_path, capsys) -> None:
    from lidarmt.camera.models.archs import get_arch
    from lidarmt.camera.models.train import export_weights

    data = write_udacity(tmp_path / "drive", 2)
    path = tmp_path / "odd.pt"
    export_weights(get_arch("dave2").build(), path, arch="resnet-9000", meta={})
    assert main(["camera", "predict", str(data), "--model", str(path)]) == 2
    _one_line_error(capsys, "unknown architecture", "resnet-9000")
    export_weights(get_arch("dave2").build(), path, arch="x" * 100_000, meta={})  # a name of 100 kB
    assert main(["camera", "predict", str(data), "--model", str(path)]) == 2
    assert len(_one_line_error(capsys, "unknown architecture")) < 600


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_weights_file_carrying_a_pickle_payload_is_refused(tmp_path, capsys) -> None:
    data = write_udacity(tmp_path / "drive", 2)
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save({"format": "lidarmt-steering-weights", "version": 1, "arch": "dave2", "state_dict": {},
                "payload": _Payload(marker)}, path)
    assert main(["camera", "predict", str(data), "--model", str(path)]) == 2
    _one_line_error(capsys, str(path))
    assert not marker.exists()
    assert main(["camera", "fuzz", "--images", str(data), "--model", str(path), "--transforms", "mirror",
                 "--out", str(tmp_path / "run"), "-q"]) == 2
    _one_line_error(capsys, str(path))
    assert not marker.exists()


def test_fuzz_by_path_records_the_sha256_and_replay_refuses_a_changed_file(trained, tmp_path, capsys) -> None:
    from lidarmt.camera.campaign import model_ref

    data, weights = trained
    mine = tmp_path / "dave2.pt"
    mine.write_bytes(weights.read_bytes())
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--images", str(data), "--model", str(mine), "--transforms", "rotation,mirror",
                 "--frames", "30", "--lambda", "1", "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    bundles = sorted((out / "violations").iterdir())
    assert bundles and bundles[0].name.startswith("dave2_pt-")
    info = json.loads((bundles[0] / "bundle.json").read_text())
    assert info["model"]["sha256"] == model_ref(str(mine)).sha256 and len(info["model"]["sha256"]) == 64
    assert main(["replay", str(bundles[0])]) == 0
    capsys.readouterr()
    with open(mine, "ab") as fh:  # the same name, another file
        fh.write(b"\0")
    assert main(["replay", str(bundles[0])]) == 2
    _one_line_error(capsys, "has changed", str(mine))
    assert main(["camera", "fuzz", "--images", str(data), "--model", str(mine), "--transforms", "rotation,mirror",
                 "--frames", "30", "--lambda", "1", "--out", str(out), "--resume", "-q"]) == 2
    capsys.readouterr()


# ------------------------------------------------------------------------------------------------ options


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory) -> Path:
    from test_camera_keras import keras2_layers, write_keras

    return write_keras(tmp_path_factory.mktemp("keras") / "tiny.h5", keras2_layers(), version=2)


def test_options_go_to_the_model_that_takes_them(keras_file, tmp_path, capsys) -> None:
    from lidarmt.cli.camera.predict import model_options

    names = ["dave2", str(keras_file)]
    got = model_options(names, ["crop=2:-2", "1:device=cpu", "tiny.h5:colour=bgr"])
    assert got[0] == {"device": "cpu"}
    assert got[1] == {"crop": "2:-2", "colour": "bgr"}
    data = write_udacity(tmp_path / "drive", 3)
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--images", str(data), "--model", f"dave2,{keras_file}", "--model-option",
                 "crop=2:-2", "--transforms", "mirror", "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    header = json.loads((out / "journal.jsonl").read_text().splitlines()[0])
    models = header["config"]["models"]
    assert models[0]["options"] == {} and models[1]["options"] == {"crop": "2:-2"} and "sha256" in models[1]
    assert "sha256" not in models[0]
    summary = json.loads((out / "summary.json").read_text())
    assert {m["model"] for m in summary["models"]} == {"dave2", "tiny"}


@pytest.mark.parametrize(("option", "needles"), [
    ("colour_space=yuv", ["unknown option 'colour_space'", "dave2 takes weights, device", "crop"]),
    ("1:crop=60:-25", ["unknown option 'crop' for dave2", "takes weights, device"]),
    ("3:crop=1:2", ["not one of the models"]),
    ("crop=60", ["START:STOP"]),
    ("sign=sideways", ["sign="]),
    ("frame=99999x2", ["between 1 and"]),
])  # fmt: skip
def test_bad_model_options_are_one_line(keras_file, tmp_path, capsys, option, needles) -> None:
    data = write_udacity(tmp_path / "drive", 2)
    assert main(["camera", "fuzz", "--images", str(data), "--model", f"dave2,{keras_file}", "--model-option",
                 option, "--transforms", "mirror", "--out", str(tmp_path / "run"), "-q"]) == 2
    _one_line_error(capsys, *needles)


def test_recipe_file_beside_the_model_is_used_and_recorded(keras_file, tmp_path, capsys) -> None:
    from lidarmt.camera.models import keras as K

    model = tmp_path / "m.h5"
    model.write_bytes(keras_file.read_bytes())
    K.recipe_file_for(model).write_text(json.dumps({"crop": "1:-1,2:-2", "colour": "yuv", "sign": -1,
                                                    "note": "as its author prepared frames"}))
    data = write_udacity(tmp_path / "drive", 2)
    capsys.readouterr()
    assert main(["camera", "predict", str(data), "--model", str(model), "--json"]) == 0
    side = json.loads(capsys.readouterr().out)
    assert side["options"] == {"crop": "1:-1,2:-2", "colour": "yuv", "sign": -1}
    # the same recipe given by hand gives the same angles; without it, other angles
    assert main(["camera", "predict", str(data), "--model", str(keras_file), "--json", "--model-option",
                 "crop=1:-1,2:-2", "--model-option", "colour=yuv", "--model-option", "sign=-1"]) == 0
    hand = json.loads(capsys.readouterr().out)
    assert [r["prediction"] for r in side["frames"]] == [r["prediction"] for r in hand["frames"]]
    # an option given on the command line wins over the file
    assert main(["camera", "predict", str(data), "--model", str(model), "--json", "--model-option", "sign=1"]) == 0
    flipped = json.loads(capsys.readouterr().out)
    assert [r["prediction"] for r in flipped["frames"]] == [-r["prediction"] for r in side["frames"]]
    # --recipe names another file; a bad one is one line naming it
    bad = tmp_path / "bad.json"
    for text, needle in (('{"crop": "1:-1", "zoom": 2}', "unknown recipe key 'zoom'"), ("[1, 2]", "one JSON object"),
                         ("[" * 50000, "not a JSON recipe"), (" " * 70000, "small JSON object"), ('{"colour": "infrared"}', "colour=")):
        bad.write_text(text)
        assert main(["camera", "predict", str(data), "--model", str(model), "--recipe", str(bad)]) == 2
        _one_line_error(capsys, str(bad), needle)
    assert main(["camera", "predict", str(data), "--model", "dave2", "--recipe", str(bad)]) == 2
    _one_line_error(capsys, "recipe")


def test_recipe_steps_match_a_numpy_pipeline(keras_file) -> None:
    """crop (rows and columns), resize, colour, scale, output and sign, against the same steps written here."""
    from test_camera_keras import keras2_layers, np_forward

    from lidarmt.camera.models import keras as K

    layers = keras2_layers()
    model = K.load_keras(keras_file, crop="3:-5,4:", resize="nearest", colour="bgr", scale="x/255",
                         output="degrees", sign="right")
    frames = np.random.default_rng(8).integers(0, 256, (2, 40, 50, 3), dtype=np.uint8)
    h, w = model.input_spec.height, model.input_spec.width
    x = np.stack([cv2.resize(f[3:-5, 4:], (w, h), interpolation=cv2.INTER_NEAREST)[..., ::-1] for f in frames])
    want = np_forward(layers, x.astype(np.float64) / 255.0, lambda v: v / 255.0 - 0.5).reshape(-1)
    np.testing.assert_allclose(model.predict(frames), -want * math.pi / 180, rtol=1e-4, atol=1e-6)
    assert "crop 3:-5,4:" in model.input_spec.note and "sign flipped" in model.input_spec.note
    with pytest.raises(K.ModelError, match="leaves nothing"):
        K.load_keras(keras_file, crop="30:-30").predict(frames)


@pytest.mark.realdata
def test_third_party_dave2_with_its_authors_crop_on_real_frames(shared_data: Path) -> None:
    """The shared behavioural-cloning model with its author's preprocessing (rows 60:-25 of the frame, then
    resize to 66x200, YUV) on real Udacity frames, against the same steps through the bare module."""
    from lidarmt.camera.models import keras as K
    from lidarmt.camera.sources import open_images

    path = shared_data / "models" / "dave2_udacity_simulator.h5"
    folder = shared_data / "udacity"
    if not path.is_file() or not (folder / "steering.csv").is_file():
        pytest.skip(f"shared DAVE-2 model or Udacity frames not available under {shared_data}")
    with open_images(folder) as src:
        frames = np.stack([src[i].image for i in range(0, len(src), max(1, len(src) // 40))])
    model = K.load_keras(path, frame="none", crop="60:-25")
    got = model.predict(frames)
    x = np.stack([cv2.cvtColor(cv2.resize(f[60:-25], (200, 66), interpolation=cv2.INTER_LINEAR),
                               cv2.COLOR_RGB2YUV) for f in frames]).astype(np.float32).transpose(0, 3, 1, 2)
    with torch.inference_mode():
        raw = model.module(torch.from_numpy(x)).numpy().reshape(-1).astype(np.float64)
    np.testing.assert_allclose(got, raw * -math.radians(25.0), rtol=1e-6, atol=1e-9)
    assert np.all(np.isfinite(got)) and np.all(np.abs(got) < math.pi)
    assert not np.allclose(got, K.load_keras(path).predict(frames))  # the default resizes to 160x320 first


# ------------------------------------------------------------------------------------------------ pairs


def _folder(path: Path, names: list[str], *, flip: bool) -> Path:
    path.mkdir()
    for i, name in enumerate(names):
        img = np.full((48, 64, 3), 60, np.uint8)
        img[:, :32] = 200 - 10 * i
        if flip:
            img = img[:, ::-1]
        cv2.imwrite(str(path / name), np.ascontiguousarray(img[..., ::-1]))
    return path


def test_pairs_campaign_matches_by_name_and_bundles_carry_both_images(tmp_path, capsys) -> None:
    src = _folder(tmp_path / "sunny", ["a.png", "b.png", "c.png", "e.png"], flip=False)
    fu = _folder(tmp_path / "night", ["a.png", "b.jpg", "d.png", "e.png"], flip=True)
    out = tmp_path / "run"
    args = ["camera", "fuzz", "--pairs", str(src), str(fu), "--model", "test_camera_campaign:tilt",
            "--tolerance", "5", "--out", str(out), "--bundles", "3", "-q"]
    assert main(args) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "3 pair(s) matched by name" in err and "without a follow-up (c)" in err
    assert "without a source image (d)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_done"] == 3 and summary["labelled"] is False
    assert summary["groups"][0]["family"] == "external" and summary["groups"][0]["deeproad"]["10"] == 3
    run = json.loads((out / "run.json").read_text())
    assert run["pairs"][0]["unmatched_sources"] == ["c"] and run["pairs"][0]["unmatched_follow_ups"] == ["d"]
    bundles = sorted((out / "violations").iterdir())
    assert len(bundles) == 3
    info = json.loads((bundles[0] / "bundle.json").read_text())
    assert info["family"] == "external" and info["follow_up"]["source"] == str(fu)
    with np.load(bundles[0] / "window.npz") as z:
        seed, follow = z["seed"], z["transformed"]
    assert np.array_equal(follow[-1], seed[-1][:, ::-1])  # the follow-up image itself, as made elsewhere
    assert main(["replay", str(bundles[0]), "--trust-code"]) == 0  # the model is module:callable
    # one journal, resumable like any campaign
    assert main(args + ["--resume"]) == 0
    assert sum(1 for line in (out / "journal.jsonl").read_text().splitlines() if '"pair"' in line) == 3


def test_several_follow_up_sets_are_reported_apart(tmp_path, capsys) -> None:
    """TACTIC's released scenes: one source frame and its night, rain, snow versions, each set a column."""
    src = _folder(tmp_path / "sunny", ["a.png", "b.png", "c.png"], flip=False)
    night = _folder(tmp_path / "night", ["a.png", "b.png"], flip=True)
    rain = _folder(tmp_path / "rain", ["a.png", "b.png", "c.png"], flip=False)  # unchanged: consistent
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--pairs", str(src), f"{night},{rain}", "--model", "test_camera_campaign:tilt",
                 "--tolerance", "5", "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_done"] == 5
    table = {row["transform"]: row for row in summary["deeproad"]}
    assert table["follow-up:night"]["pairs"] == 2 and table["follow-up:night"]["inconsistent"]["10"] == 2
    assert table["follow-up:rain"]["pairs"] == 3 and table["follow-up:rain"]["inconsistent"]["10"] == 0
    assert main(["camera", "fuzz", "--pairs", str(src), f"{night},{tmp_path / 'x' / 'night'}", "--model",
                 "test_camera_campaign:tilt", "--out", str(tmp_path / "r2"), "-q"]) == 2
    _one_line_error(capsys, "share a name")


def test_pairs_refusals_are_one_line(tmp_path, capsys) -> None:
    src = _folder(tmp_path / "src", ["a.png"], flip=False)
    other = _folder(tmp_path / "other", ["z.png"], flip=False)
    twice = _folder(tmp_path / "twice", ["a.png", "a.jpg"], flip=False)
    base = ["--model", "test_camera_campaign:tilt", "--out", str(tmp_path / "run"), "-q"]
    for args, needle in (
        (["--pairs", str(src), str(other)], "no image of the follow-ups has the name"),
        (["--pairs", str(src), str(twice)], "two images are named 'a'"),
        (["--pairs", str(src), str(src), "--images", str(src)], "either --images"),
        (["--pairs", str(src), str(src), "--trials", "2"], "--trials"),
        ([], "either --images"),
    ):
        assert main(["camera", "fuzz", *args, *base]) == 2
        _one_line_error(capsys, needle)
