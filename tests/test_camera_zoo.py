"""lidarmt's own steering models: architectures and preprocessing, the weights format, the zoo API, the shipped
weights and their model cards (re-measured on the shared Udacity frames when present)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from _approx import ABS, REL

torch = pytest.importorskip("torch")

from lidarmt.camera.errors import ModelError  # noqa: E402
from lidarmt.camera.models import zoo  # noqa: E402
from lidarmt.camera.models.archs import ARCHS, count_parameters, get_arch  # noqa: E402
from lidarmt.camera.models.base import SteeringModel  # noqa: E402
from lidarmt.camera.models.train import (  # noqa: E402
    export_weights,
    labels_fingerprint,
    load_labelled,
    read_weights,
    validation_metrics,
)
from lidarmt.errors import UserError  # noqa: E402

NAMES = list(ARCHS)


def _frames(n: int, h: int, w: int, *, history: int = 0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (n, history + 1, h, w, 3) if history else (n, h, w, 3)
    return rng.integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [(240, 320), (150, 200)])
def test_forward_shape_and_preprocessing(name, size):
    arch = get_arch(name)
    spec = arch.input_spec
    torch.manual_seed(0)
    module = arch.build().eval()
    images = _frames(3, *size, history=spec.history)
    x = arch.preprocess(images)
    want = (3, spec.history + 1, 3, spec.height, spec.width) if spec.history else (3, 3, spec.height, spec.width)
    if arch.window_normalise:  # Rambo: the window's frame differences
        want = (3, spec.history, spec.height, spec.width)
    assert tuple(x.shape) == want and x.dtype == torch.float32
    with torch.inference_mode():
        y = module(x)
    assert tuple(y.shape) == (3, 1) and torch.isfinite(y).all()
    if name.startswith("dave-"):  # DeepXplore's 2*atan output layer bounds the angle by pi
        assert float(y.abs().max()) < math.pi


@pytest.mark.parametrize("name", NAMES)
def test_prepare_is_left_right_symmetric(name):
    """Training flips prepared images instead of frames: that needs prepare(flip(x)) == flip(prepare(x))."""
    arch = get_arch(name)
    for h, w in [(240, 320), (480, 640)]:
        x = _frames(2, h, w, seed=1)
        a = arch.prepare(x)[:, :, ::-1]
        b = arch.prepare(np.ascontiguousarray(x[:, :, ::-1]))
        assert np.array_equal(a, b)


def test_preprocessing_matches_the_published_recipes():
    img = np.zeros((1, 240, 320, 3), np.uint8)
    img[0, :120] = (255, 0, 0)  # top half red, bottom half blue
    img[0, 120:] = (0, 0, 255)
    # Dave: caffe mode, BGR order minus the ImageNet means
    x = ARCHS["dave-orig"].preprocess(img)
    assert x[0, :, 0, 0].tolist() == pytest.approx([-103.939, -116.779, 255 - 123.68])
    # Chauffeur sees only the bottom half (all blue): constant Y, equalised to one value
    c = ARCHS["chauffeur"].prepare(img)
    assert c.shape == (1, 120, 320, 3) and len(np.unique(c[..., 1])) == 1
    # Epoch drops the top 100 of 240 rows: 20 red rows of 140 remain -> 128 * 20 / 140 ~ 18 red rows
    e = ARCHS["epoch"].prepare(img)
    red_rows = int((e[0, :, 0, 0] > 128).sum())
    assert 17 <= red_rows <= 19
    # DAVE-2 keeps rows 90:202: from 90 to 120 red (30 of 112 rows) -> about 18 of 66 rows
    d = ARCHS["dave2"].prepare(img)
    assert d.shape == (1, 66, 200, 3)


def test_chauffeur_uses_its_history():
    arch = get_arch("chauffeur")
    torch.manual_seed(0)
    module = arch.build().eval()
    images = _frames(1, 240, 320, history=arch.input_spec.history, seed=3)
    changed = images.copy()
    changed[0, 0] = 255 - changed[0, 0]  # only the oldest frame of the window differs
    with torch.inference_mode():
        a, b = module(arch.preprocess(images)), module(arch.preprocess(changed))
    assert float(a) != float(b)


def test_rambo_sees_differences_of_consecutive_grey_frames():
    arch = get_arch("rambo")
    assert arch.input_spec.history == 2 and arch.input_spec.colour == "grey"
    still = np.repeat(_frames(1, 240, 320, seed=5)[:, None], 3, axis=1)  # the same frame three times
    assert float(arch.preprocess(still).abs().max()) == 0.0  # no motion, no input
    win = still.copy()
    win[0, 2] = 255 - win[0, 2]  # only the newest frame changes: only the newest difference (channel 0) moves
    x = arch.preprocess(win)
    assert float(x[0, 0].abs().max()) > 0.1 and float(x[0, 1].abs().max()) == 0.0
    g = arch.prepare(win[0])[..., 0].astype(np.float32) * (10 / 255)
    np.testing.assert_allclose(x[0, 0].numpy(), g[2] - g[1], atol=1e-5)
    with pytest.raises(ModelError, match="needs windows of 3 frames"):
        arch.preprocess(win[:, 0])
    torch.manual_seed(0)
    module = arch.build().eval()
    with torch.inference_mode():
        branches = module.branches(x)
        np.testing.assert_allclose(module(x).numpy()[:, 0], branches.mean(1).numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_chauffeur_feature_cache_equals_the_uncached_path(tmp_path):
    """Each frame's CNN features are computed once and reused by every window that holds the frame."""
    arch = get_arch("chauffeur")
    torch.manual_seed(2)
    export_weights(arch.build(), tmp_path / "chauffeur.pt", arch="chauffeur", meta={})
    model = zoo.model_from_file(tmp_path / "chauffeur.pt", batch_size=4)
    drive = _frames(12, 60, 80, seed=6)  # any size: prepare resizes
    t = arch.input_spec.history + 1
    wins = np.stack([drive[np.maximum(np.arange(i - t + 1, i + 1), 0)] for i in range(len(drive))])
    cached = np.concatenate([model.predict(wins[i:i + 1]) for i in range(len(wins))])  # one window a call
    assert model.cache_misses == len(drive) and model.cache_hits == len(wins) * t - len(drive)
    some = [0, 4, 11]
    plain = model.predict_uncached(wins[some])  # every window encoded whole
    np.testing.assert_allclose(cached[some], plain, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.predict(wins[3:9]), cached[3:9], rtol=0, atol=1e-6)  # several windows a call
    assert model.cache_misses == len(drive)
    model.cache_frames = 3  # a small cache evicts the least recently used frames and stays right
    model.clear_cache()
    np.testing.assert_allclose(model.predict(wins[4:5]), plain[1:2], rtol=0, atol=1e-6)
    assert len(model._cache) == 3


def test_history_models_say_so_on_a_folder_of_images(tmp_path):
    import cv2

    from lidarmt.camera.sources import open_images

    for k in range(3):
        cv2.imwrite(str(tmp_path / f"img{k}.png"), np.full((8, 8, 3), 40 * k, np.uint8))
    with open_images(tmp_path) as src:
        note = zoo.history_note(src, [("dave2", 0), ("chauffeur", 10), ("rambo", 2)])
        assert zoo.history_note(src, [("dave2", 0)]) is None
    assert "\n" not in note and "not a recorded sequence" in note
    assert "chauffeur (history 10)" in note and "rambo (history 2)" in note and "dave2" not in note


def test_epoch_deviation_keeps_weights_small():
    module = get_arch("epoch").build()
    assert count_parameters(module) == 8_483_905  # 33.6 M without the extra pooling
    assert count_parameters(module) * 2 < 20e6  # fp16 bytes


def test_weights_round_trip(tmp_path):
    arch = get_arch("dave2")
    torch.manual_seed(1)
    module = arch.build().eval()
    path = tmp_path / "dave2.pt"
    export_weights(module, path, arch="dave2", meta={"note": "test"})
    name, state, meta = read_weights(path)
    assert name == "dave2" and meta == {"note": "test"}
    assert all(v.dtype == torch.float32 for v in state.values())
    model = zoo.model_from_file(path)
    assert isinstance(model, SteeringModel) and model.name == "dave2"
    images = _frames(4, 240, 320, seed=2)
    with torch.inference_mode():
        direct = module(arch.preprocess(images)).reshape(-1).double().numpy()
    assert np.allclose(model.predict(images), direct, atol=2e-3)  # fp16 storage
    with pytest.raises(ModelError, match="not epoch"):
        zoo.load("epoch", weights=path)


def test_bad_weights_files_are_one_line_errors(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    for p in (text, other, tmp_path / "missing.pt"):
        with pytest.raises(ModelError) as info:
            zoo.load("dave2", weights=p)
        assert isinstance(info.value, UserError)
        assert "\n" not in str(info.value) and str(p) in str(info.value)


def test_weights_file_is_data_never_code(tmp_path):
    """A pickle that would run code on load is refused by weights_only loading."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    torch.save({"format": "lidarmt-steering-weights", "version": 1, "state_dict": Evil()}, path)
    with pytest.raises(ModelError, match="not a lidarmt steering weights file"):
        zoo.load("dave2", weights=path)
    assert not marker.exists()


def test_weights_of_another_shape_are_refused(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "w.pt"
    export_weights(get_arch("dave-orig").build(), path, arch="dave2", meta={})
    with pytest.raises(ModelError, match="do not fit architecture dave2"):
        zoo.load("dave2", weights=path)


def test_unknown_name():
    with pytest.raises(ModelError, match="unknown architecture 'nope'"):
        zoo.describe("nope")


# ----------------------------------------------------------------------------------------- shipped weights


@pytest.mark.parametrize("name", NAMES)
def test_shipped_weights_load_and_predict(name):
    assert name in zoo.available(), f"no shipped weights for {name}: run scripts/train_camera_models.sh"
    path = zoo.shipped_weights(name)
    assert path.stat().st_size <= 20e6
    model = zoo.load(name)
    spec = model.input_spec
    images = _frames(2, 240, 320, history=spec.history, seed=4)
    out = model.predict(images)
    assert out.shape == (2,) and out.dtype == np.float64 and np.isfinite(out).all()
    assert model.card.endswith(f"{name}.md")


@pytest.mark.parametrize("name", NAMES)
def test_describe_matches_the_card(name):
    info = zoo.describe(name)
    arch = get_arch(name)
    assert info["input"]["height"] == arch.input_spec.height and info["input"]["history"] == arch.input_spec.history
    assert info["parameters"] == count_parameters(arch.build())
    card = zoo.WEIGHTS_DIR.joinpath(f"{name}.md").read_text(encoding="utf-8")
    for key in ("val_rmse_deg", "zero_rmse_deg", "mean_rmse_deg"):
        assert f"| {info[key]:.2f} |" in card
    augs = [a for a in info["augmentation"].split(", ") if a != "none"]
    assert ("horizontal flip with the angle negated" in card) == ("flip" in augs)
    assert ("brightness jitter" in card) == ("brightness" in augs) and ("random shadow" in card) == ("shadow" in augs)
    assert ("No photometric augmentation" in card) == (not {"brightness", "shadow"} & set(augs))
    assert f"{info['parameters']:,}" in card and f"the last {info['val_frames']}" in card
    assert f"**{info['mse_ratio']:.3f}**" in card and f"--validate lidarmt/camera/models/weights/{name}.pt" in card
    assert ("has not learned to steer" in card) == (info["label_lag1_autocorrelation"] < 0.5)
    m = json.loads(zoo.WEIGHTS_DIR.joinpath(f"{name}.json").read_text(encoding="utf-8"))
    assert re.search(re.escape(f"--arch {name} "), card) and m["config"]["seed"] == info["seed"]
    json.dumps(info)  # printable / JSON-able


@pytest.fixture(scope="module")
def udacity(shared_data):
    path = shared_data / "udacity"
    if not (path / "steering.csv").is_file():
        pytest.skip(f"Udacity frames not available at {path}")
    return load_labelled(path)


@pytest.fixture
def one_thread():
    """One torch thread (as the training measured): faster on a busy 2-core machine than two contending."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dave2", "dave-dropout", "chauffeur"])
def test_shipped_validation_rmse_is_reproduced(udacity, one_thread, name):
    info = zoo.describe(name)
    n = len(udacity.labels)
    if info.get("labels_sha256") != labels_fingerprint(udacity.labels):
        pytest.skip(f"the shipped {name} was trained on another copy of the Udacity frames; retrain it")
    m = validation_metrics(zoo.load(name), udacity, val_fraction=0.2)
    # the last 20 % of the drive validates, in time order
    assert m["val_frames"] == info["val_frames"] == round(0.2 * n) and m["train_frames"] == n - m["val_frames"]
    # the card's number was made on another machine: angles differ there by up to 2.3e-5 degrees (tests/_approx.py)
    assert m["val_rmse_deg"] == pytest.approx(info["val_rmse_deg"], rel=REL, abs=ABS)
    assert m["val_mse"] <= 0.8 * min(m["zero_mse"], m["mean_mse"])  # it has learned to steer
    assert m["zero_rmse_deg"] == pytest.approx(info["zero_rmse_deg"], rel=1e-9)
    assert m["mean_rmse_deg"] == pytest.approx(info["mean_rmse_deg"], rel=1e-9)


#: Shipped models known to miss issue 18's bar (their cards say what was tried); strict, so that a retrained model
#: that meets it turns the expected failure into a failure until it is taken off this list.
BELOW_THE_BAR: dict[str, str] = {}  # name -> why its shipped weights miss the bar (a strict xfail); none now


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=BELOW_THE_BAR[n]))
                                  if n in BELOW_THE_BAR else n for n in NAMES])
def test_shipped_model_beats_both_baselines(name):
    """Issue 18's bar, as the shipped metrics say: validation MSE at most 0.8x the better baseline's (always zero,
    always the training mean), on the labels the shared data carries now."""
    m = json.loads(zoo.WEIGHTS_DIR.joinpath(f"{name}.json").read_text(encoding="utf-8"))
    assert m["data_frames"] == m["train_frames"] + m["val_frames"] and m.get("labels_sha256")
    assert m["val_mse"] <= 0.8 * min(m["zero_mse"], m["mean_mse"])


def test_the_best_shipped_model_is_below_065_of_the_baselines():
    ratios = {n: zoo.describe(n)["mse_ratio"] for n in NAMES}
    assert min(ratios.values()) < 0.65, ratios
