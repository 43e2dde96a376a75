"""Training lidarmt's steering models: time-ordered split, learning on a tiny synthetic drive, determinism,
Chauffeur's two stages, and the ``lidarmt camera train`` command (outputs, refusal of an existing --out, resume,
--ship)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

from lidarmt.camera.errors import CameraArgumentError  # noqa: E402
from lidarmt.camera.models.train import (  # noqa: E402
    Draws,
    LabelledFrames,
    TrainConfig,
    augment_images,
    draw_augmentations,
    load_labelled,
    read_weights,
    train,
    window_indices,
)
from lidarmt.cli import main  # noqa: E402


def _drive(n: int, *, h: int = 48, w: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Frames whose steering angle is readable: a bright vertical bar whose position encodes the angle
    (mirror-consistent: flipping the frame negates the angle)."""
    rng = np.random.default_rng(seed)
    images = np.empty((n, h, w, 3), np.uint8)
    labels = np.empty(n)
    for i in range(n):
        x = int(rng.integers(4, w - 4))
        img = rng.integers(40, 80, (h, w, 3), dtype=np.uint8)
        img[:, x - 3:x + 3] = (250, 240, 230)
        images[i] = img
        labels[i] = 0.8 * ((x + 0.5) / w - 0.5)
    return images, labels


def _write_udacity(folder: Path, n: int, **kw) -> Path:
    images, labels = _drive(n, **kw)
    (folder / "center").mkdir(parents=True)
    rows = ["frame_id,steering_angle"]
    for i, (img, y) in enumerate(zip(images, labels, strict=True)):
        fid = str(1479425441182877835 + i * 100_000_000)
        cv2.imwrite(str(folder / "center" / f"{fid}.png"), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        rows.append(f"{fid},{float(y)!r}")
    (folder / "steering.csv").write_text("\n".join(rows) + "\n")
    return folder


def _frames(n: int, **kw) -> LabelledFrames:
    images, labels = _drive(n, **kw)
    return LabelledFrames(images, labels, tuple(str(i) for i in range(n)), "synthetic")


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def test_split_is_in_time_order_and_windows_stay_in_their_split():
    fr = _frames(10)
    assert fr.split(0.2) == 8  # frames 8, 9 validate
    w = window_indices(np.array([8, 9]), 3, 8)
    assert w.tolist() == [[8, 8, 8, 8], [8, 8, 8, 9]]
    assert window_indices(np.array([5]), 2, 0).tolist() == [[3, 4, 5]]
    with pytest.raises(CameraArgumentError):
        _frames(3).split(0.1)


@pytest.mark.slow
def test_training_lowers_the_loss_on_a_learnable_drive(tmp_path):
    fr = _frames(64)
    m = train(TrainConfig(arch="dave2", data="synthetic", out=str(tmp_path / "run"), epochs=6, batch_size=16,
                          lr=1e-3), frames=fr, log=lambda s: None)
    log = _log(tmp_path / "run")
    assert len(log) == 6
    assert log[-1]["train_mse"] < 0.5 * log[0]["train_mse"]
    assert m["val_mse"] < m["mean_mse"]  # beats the always-mean baseline on held-out frames
    best = min(log, key=lambda r: r["val_mse"])
    assert m["best_epoch"] == best["epoch"]
    assert m["val_mse"] == pytest.approx(best["val_mse"], rel=0.05, abs=1e-4)  # fp16 export


@pytest.mark.slow
def test_training_is_deterministic(tmp_path):
    fr = _frames(24)

    def run(out: str, seed: int) -> dict:
        train(TrainConfig(arch="dave2", data="synthetic", out=str(tmp_path / out), epochs=2, batch_size=8,
                          seed=seed), frames=fr, log=lambda s: None)
        return read_weights(tmp_path / out / "dave2.pt")[1]

    a, b, c = run("a", 0), run("b", 0), run("c", 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.slow
def test_chauffeur_trains_cnn_then_lstm(tmp_path):
    fr = _frames(30)
    m = train(TrainConfig(arch="chauffeur", data="synthetic", out=str(tmp_path / "run"), epochs=1, lstm_epochs=2,
                          batch_size=8), frames=fr, log=lambda s: None)
    assert [(r["stage"], r["epoch"]) for r in _log(tmp_path / "run")] == [("cnn", 1), ("lstm", 1), ("lstm", 2)]
    assert m["best_stage"] == "lstm" and m["val_frames"] == 6 and np.isfinite(m["val_mse"])
    card = (tmp_path / "run" / "chauffeur.md").read_text()
    assert "history 10" in card and "--lstm-epochs 2" in card


@pytest.mark.slow
def test_camera_train_cli(tmp_path, capsys, monkeypatch):
    data = _write_udacity(tmp_path / "drive", 30)
    assert load_labelled(data).labels.shape == (30,)
    out = tmp_path / "run"
    args = ["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(out), "--epochs", "1",
            "--batch-size", "8"]
    assert main(args) == 0
    for name in ("checkpoint.pt", "dave2.pt", "dave2.json", "dave2.md", "log.jsonl"):
        assert (out / name).is_file(), name
    assert len(_log(out)) == 1
    card = (out / "dave2.md").read_text()
    assert f"--data {data}" in card and "always zero" in card and "horizontal flip" in card
    capsys.readouterr()

    # an existing --out is refused with one line, exit status 2
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "already exists" in err and "--force" in err and len(err.splitlines()) == 1

    # --resume continues from the checkpoint: one more epoch, same log
    assert main(args[:-4] + ["--epochs", "2", "--batch-size", "8", "--resume"]) == 0
    assert [r["epoch"] for r in _log(out)] == [1, 2]

    # --force starts again; --ship copies weights, card and metrics into the package's weights folder
    ship = tmp_path / "weights"
    monkeypatch.setattr("lidarmt.camera.models.zoo.WEIGHTS_DIR", ship)
    assert main(args + ["--force", "--ship", "--augment", "none"]) == 0
    assert len(_log(out)) == 1
    assert sorted(p.name for p in ship.iterdir()) == ["dave2.json", "dave2.md", "dave2.pt"]
    card = (ship / "dave2.md").read_text()
    assert "Augmentation: none" in card and "--augment none" in card
    assert json.loads((ship / "dave2.json").read_text())["augmentations"] == []
    capsys.readouterr()

    # --validate re-measures a weights file on the validation split against both baselines
    assert main(["camera", "train", "--arch", "dave2", "--data", str(data), "--validate", str(ship / "dave2.pt")]) == 0
    text = capsys.readouterr().out
    m = json.loads((ship / "dave2.json").read_text())
    assert f"MSE {m['val_mse']:.5f}" in text and f"MSE {m['zero_mse']:.5f}" in text
    assert f"MSE {m['mean_mse']:.5f}" in text and "better baseline's" in text


@pytest.mark.parametrize("extra, message", [
    (["--val-fraction", "1.5"], "--val-fraction"),
    (["--arch", "resnet"], "unknown architecture"),
    (["--epochs", "0"], "--epochs"),
    (["--augment", "flip,blur"], "unknown augmentation 'blur'"),
    (["--shift-max", "0.9"], "--shift-max"),
    (["--weight-decay", "-0.1"], "--weight-decay"),
])
def test_camera_train_bad_arguments(tmp_path, capsys, extra, message):
    data = _write_udacity(tmp_path / "drive", 6)
    args = ["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(tmp_path / "run")] + extra
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_camera_train_needs_labelled_data(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "a.png"), np.zeros((8, 8, 3), np.uint8))
    for data, message in [(images, "no steering labels"), (tmp_path / "missing", "missing")]:
        assert main(["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


# ----------------------------------------------------------------------------------------------- augmentation


def _draws(n: int, **kw) -> Draws:
    base = dict(flip=np.zeros(n, bool), shift=np.zeros(n), gain=np.ones(n), shadow=np.zeros(n, bool),
                shadow_x=np.full((n, 2), 0.5), shadow_side=np.zeros(n, bool), shadow_gain=np.ones(n))
    base.update(kw)
    return Draws(**base)


def test_flip_and_shift_move_the_image_and_correct_the_angle():
    img = np.zeros((1, 4, 10, 3), np.float32)
    img[0, :, 2] = 200.0  # a bright column at x = 2
    flipped = augment_images(torch.from_numpy(img.copy()), _draws(1, flip=np.array([True])), "rgb").numpy()
    assert flipped[0, 0, :, 0].argmax() == 7
    shifted = augment_images(torch.from_numpy(img.copy()), _draws(1, shift=np.array([0.3])), "rgb").numpy()
    assert shifted[0, 0, :, 0].argmax() == 5  # content moved right by 3 of 10 pixels
    assert (shifted[0, 0, :3, 0] == 0).all()  # the left edge column repeated
    d = _draws(3, flip=np.array([True, False, True]), shift=np.array([0.0, 0.1, -0.2]))
    # flipped angle negated; content moved right -> steer right (more negative); 0.5 rad per image width
    np.testing.assert_allclose(d.angles(np.array([0.2, 0.2, 0.1]), 0.5), [-0.2, 0.15, 0.0])


def test_brightness_and_shadow_scale_the_luma_only():
    rng = np.random.default_rng(0)
    yuv = rng.uniform(40, 200, (2, 6, 8, 3)).astype(np.float32)
    out = augment_images(torch.from_numpy(yuv.copy()), _draws(2, gain=np.array([0.5, 1.0])), "yuv").numpy()
    np.testing.assert_allclose(out[0, ..., 0], 0.5 * yuv[0, ..., 0], rtol=1e-6)
    np.testing.assert_allclose(out[0, ..., 1:], 128 + 0.5 * (yuv[0, ..., 1:] - 128), rtol=1e-6)  # = RGB x 0.5
    np.testing.assert_allclose(out[1], yuv[1], rtol=1e-6)
    rgb = np.full((1, 4, 8, 3), 100.0, np.float32)
    d = _draws(1, shadow=np.array([True]), shadow_x=np.array([[0.5, 0.5]]), shadow_side=np.array([True]),
               shadow_gain=np.array([0.6]))
    out = augment_images(torch.from_numpy(rgb), d, "rgb").numpy()
    np.testing.assert_allclose(out[0, :, :4], 100.0)
    np.testing.assert_allclose(out[0, :, 4:], 60.0, rtol=1e-6)  # the right half darkened


def test_augmentation_draws_are_seeded_and_independent_of_each_other():
    a = draw_augmentations(np.random.default_rng(5), 50, ("flip", "shift", "brightness", "shadow"), shift_max=0.1,
                           width=200)
    b = draw_augmentations(np.random.default_rng(5), 50, ("flip", "shift", "brightness", "shadow"), shift_max=0.1,
                           width=200)
    c = draw_augmentations(np.random.default_rng(5), 50, ("flip", "brightness"), shift_max=0.1, width=200)
    for f in ("flip", "shift", "gain", "shadow"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    np.testing.assert_array_equal(a.flip, c.flip) and np.testing.assert_array_equal(a.gain, c.gain)
    assert not c.shift.any() and not c.shadow.any()
    assert a.flip.any() and a.shadow.any() and np.abs(a.shift).max() <= 0.1 and (a.gain != 1).all()
    np.testing.assert_allclose(np.round(a.shift * 200), a.shift * 200, atol=1e-9)  # whole pixels


def test_recipes_keep_one_model_without_photometric_augmentation():
    from lidarmt.camera.models.archs import ARCHS
    from lidarmt.camera.models.train import PHOTOMETRIC, RECIPES, parse_augment

    assert set(RECIPES) == set(ARCHS)
    plain = [n for n, r in RECIPES.items() if not set(parse_augment(r.augment)) & set(PHOTOMETRIC)]
    assert "dave-orig" in plain
    cfg = TrainConfig(arch="dave2", data="d", out="o", flip=False).resolved()
    assert "flip" not in cfg.augmentations() and cfg.flip is False


@pytest.mark.slow
def test_rambo_trains_on_windows_of_frame_differences(tmp_path):
    fr = _frames(16, h=48, w=64)
    m = train(TrainConfig(arch="rambo", data="synthetic", out=str(tmp_path / "run"), epochs=1, batch_size=8),
              frames=fr, log=lambda s: None)
    assert m["val_frames"] == 3 and np.isfinite(m["val_mse"]) and m["augmentations"]
    card = (tmp_path / "run" / "rambo.md").read_text()
    assert "history 2" in card and "--arch rambo" in card


def test_cosine_schedule_goes_from_lr_to_a_tenth():
    from lidarmt.camera.models.train import scheduled_lr

    lrs = [scheduled_lr(1e-3, e, 5, "cosine") for e in range(5)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))
    assert scheduled_lr(1e-3, 3, 5, "constant") == 1e-3
    with pytest.raises(CameraArgumentError, match="--lr-schedule"):
        TrainConfig(arch="dave2", data="d", out="o", lr_schedule="step").check()


@pytest.mark.slow
def test_weight_decay_shrinks_the_weights_and_is_recorded(tmp_path):
    """``weight_decay`` is an L2 penalty through Adam's gradient: same seed, same batches, smaller weights; the
    metrics, the card and the reproducing command say so, and a run without it says nothing about it."""
    fr = _frames(24)

    def run(out: str, wd: float | None) -> dict:
        train(TrainConfig(arch="dave2", data="synthetic", out=str(tmp_path / out), epochs=2, batch_size=8,
                          weight_decay=wd), frames=fr, log=lambda s: None)
        return read_weights(tmp_path / out / "dave2.pt")[1]

    plain, decayed = run("plain", None), run("decayed", 1.0)
    norm = {name: sum(float(torch.sum(w.float() ** 2)) for k, w in s.items() if k.endswith("weight"))
            for name, s in (("plain", plain), ("decayed", decayed))}
    assert norm["decayed"] < norm["plain"]
    m = json.loads((tmp_path / "decayed" / "dave2.json").read_text())
    assert m["config"]["weight_decay"] == 1.0
    card = (tmp_path / "decayed" / "dave2.md").read_text()
    assert "weight decay 1 (an L2 penalty" in card and "--weight-decay 1" in card
    plain_card = (tmp_path / "plain" / "dave2.md").read_text()
    assert "weight decay" not in plain_card and "--weight-decay" not in plain_card
