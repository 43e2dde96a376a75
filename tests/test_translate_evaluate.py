"""Measuring translators: SSIM, the Fréchet distance, the evaluation of tiny translators, the picture sheet and the
model cards."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _translators import image_folder, tiny_translator  # noqa: E402

from lidarmt.camera.errors import CameraArgumentError  # noqa: E402
from lidarmt.camera.translate import evaluate as ev  # noqa: E402

# ------------------------------------------------------------------------------------------------------ SSIM


def _ssim_reference(a: np.ndarray, b: np.ndarray, L: float = 255.0) -> np.ndarray:
    """SSIM map written from Wang et al.'s equation with scipy's Gaussian filter (mirrored borders, radius 5)."""
    from scipy.ndimage import gaussian_filter

    def g(x):
        return gaussian_filter(x, 1.5, mode="mirror", truncate=5 / 1.5)

    a, b = a.astype(np.float64), b.astype(np.float64)
    ma, mb = g(a), g(b)
    va, vb, cab = g(a * a) - ma ** 2, g(b * b) - mb ** 2, g(a * b) - ma * mb
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    return (2 * ma * mb + c1) * (2 * cab + c2) / ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2))


def test_ssim_of_two_flat_images_is_the_luminance_term_by_hand():
    a = np.full((32, 40), 100.0)
    b = np.full((32, 40), 150.0)
    c1 = (0.01 * 255) ** 2
    # no variance: SSIM = (2·100·150 + C1) / (100² + 150² + C1)
    assert ev.ssim(a, b) == pytest.approx((2 * 100 * 150 + c1) / (100 ** 2 + 150 ** 2 + c1), rel=1e-9)
    assert ev.ssim(a, b) == pytest.approx(30006.5025 / 32506.5025, rel=1e-12)


def test_ssim_of_an_image_and_its_negative_by_hand():
    # a two-level stripe pattern mirrored around 127.5: means equal where stripes are fine, covariance = −variance
    a = np.zeros((48, 48))
    a[:, ::2] = 255.0  # period 2: the Gaussian window's mean is ~127.5 everywhere inside
    b = 255.0 - a
    m = ev.ssim_map(a, b)
    inner = m[5:-5, 5:-5]
    # with μa ≈ μb and σab = −σ², SSIM ≈ (−2σ² + C2)/(2σ² + C2), σ² ≈ 127.5²
    c2 = (0.03 * 255) ** 2
    s2 = 127.5 ** 2
    assert np.allclose(inner, (-2 * s2 + c2) / (2 * s2 + c2), atol=2e-3)


def test_ssim_matches_a_scipy_reference_and_has_its_properties():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (40, 56)).astype(np.float64)
    a = (a + np.roll(a, 1, 0) + np.roll(a, 1, 1)) / 3  # some local structure
    b = np.clip(a + rng.normal(0, 20, a.shape), 0, 255)
    assert np.allclose(ev.ssim_map(a, b), _ssim_reference(a, b), atol=1e-9)
    assert ev.ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    assert ev.ssim(a, b) == pytest.approx(ev.ssim(b, a), abs=1e-12)
    noisier = np.clip(a + rng.normal(0, 60, a.shape), 0, 255)
    assert 1.0 > ev.ssim(a, b) > ev.ssim(a, noisier) > -1.0
    rgb = np.repeat(a.astype(np.uint8)[..., None], 3, axis=2)
    assert ev.ssim(rgb, rgb[..., 0]) == pytest.approx(1.0)
    with pytest.raises(CameraArgumentError):
        ev.ssim_map(a, b[:-1])


# ---------------------------------------------------------------------------------------- Fréchet distance


def test_frechet_distance_of_identical_sets_is_zero_and_of_gaussians_the_closed_form():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
    assert ev.feature_distance(f, f) == pytest.approx(0.0, abs=1e-8)
    # one dimension: (μ1 − μ2)² + (σ1 − σ2)²
    assert ev.frechet_distance(np.array([1.0]), np.array([[4.0]]), np.array([3.0]), np.array([[9.0]])) == \
        pytest.approx((1 - 3) ** 2 + (2 - 3) ** 2)
    # diagonal covariances: a sum over the dimensions
    v1, v2 = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 1.0])
    mu1, mu2 = np.zeros(3), np.array([1.0, 0.0, -2.0])
    want = 1 + 4 + np.sum((np.sqrt(v1) - np.sqrt(v2)) ** 2)
    assert ev.frechet_distance(mu1, np.diag(v1), mu2, np.diag(v2)) == pytest.approx(want)


def test_frechet_distance_matches_an_eigendecomposition_reference():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(300, 5)) @ rng.normal(size=(5, 5))
    b = rng.normal(size=(250, 5)) @ rng.normal(size=(5, 5)) + 0.5
    mu1, s1 = ev.gaussian_fit(a)
    mu2, s2 = ev.gaussian_fit(b)
    # tr((S1 S2)^½) = tr((S1^½ S2 S1^½)^½): the square root of a symmetric matrix from eigh
    w, v = np.linalg.eigh(s1)
    r1 = v @ np.diag(np.sqrt(w)) @ v.T
    inner = np.linalg.eigvalsh(r1 @ s2 @ r1)
    want = np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * np.sum(np.sqrt(np.clip(inner, 0, None)))
    got = ev.frechet_distance(mu1, s1, mu2, s2)
    assert got == pytest.approx(want, rel=1e-8)
    assert got == pytest.approx(ev.frechet_distance(mu2, s2, mu1, s1), rel=1e-8)
    assert got > 0
    with pytest.raises(CameraArgumentError):
        ev.gaussian_fit(a[:1])


# ----------------------------------------------------------------------------------------------- the draws


def test_weather_draws_are_per_frame_and_seed_and_in_range():
    draws = [ev.weather_draw(s, i) for s in range(3) for i in range(50)]
    assert all(0.6 <= inten <= 1.0 for inten, _ in draws)
    assert len({d[1] for d in draws}) == len(draws)
    assert ev.weather_draw(2, 7) == ev.weather_draw(2, 7)
    s = ev.style_for(8, 0, 5)
    assert s.shape == (8,) and s.dtype == np.float32
    assert np.array_equal(s, ev.style_for(8, 0, 5)) and not np.array_equal(s, ev.style_for(8, 1, 5))


# ------------------------------------------------------------------------------------------------ evaluation


class _Identity:
    """A translator that changes nothing: every 'translated' number must equal the clear frames'."""

    name, arch, style_dim, weather = "identity", "none", 0, "night"

    def translate(self, images, style=None, seed=0):
        return np.array(images, copy=True)

    def describe(self):
        return {"name": self.name, "arch": self.arch, "style_dim": 0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny-translators")
    src = image_folder(tmp / "frames", n=5, size=(48, 64), seed=4)
    return {"munit": tiny_translator(tmp / "m", "munit"), "unit": tiny_translator(tmp / "u", "unit"), "src": src}


@pytest.mark.slow
def test_evaluate_tiny_translators_on_a_tiny_folder(tiny, tmp_path):
    models = ["dave2", "epoch"]
    trs = [str(tiny["munit"]), str(tiny["unit"]), _Identity()]
    weathers = {"run-munit": "night", "run-unit": "snow"}
    res = ev.evaluate_translators(trs, tiny["src"], seeds=(0, 1), models=models, weathers=weathers)
    assert [s.name for s in res.scores] == ["run-munit", "run-unit", "identity"]
    assert [s.arch for s in res.scores][:2] == ["munit", "unit"]
    assert res.frame_indices == list(range(5)) and res.models == models and res.history_frames == 0
    for s in res.scores:
        assert s.frames == 5 and s.seeds == [0, 1]
        assert -1 <= s.ssim_translated <= 1 and -1 <= s.ssim_procedural <= 1
        assert min(s.fid_translated, s.fid_clear, s.fid_floor, s.fid_translated_clear, s.fid_blur_reference) >= 0
        assert 0 <= s.brightness["translated"] <= 255 and s.contrast["clear"] > 0
        for m in s.models:
            assert m.pairs == 10
            counts = [m.deeproad_translated[f"{e:g}"] for e in ev.EPSILONS_DEG]
            assert all(0 <= c <= m.pairs for c in counts) and counts == sorted(counts, reverse=True)
    munit, unit, ident = res.scores
    assert munit.style_dim == 3 and unit.style_dim == 0
    # the night translator is compared with procedural night, the snow one with snow
    assert munit.ssim_procedural != unit.ssim_procedural and munit.weather == "night"
    assert ident.ssim_procedural == munit.ssim_procedural  # one procedural set per weather, shared
    # at the translator's working size (16-pixel short side here) the procedural weather keeps less
    assert munit.ssim_procedural_resampled < munit.ssim_procedural and ident.ssim_procedural_resampled is None
    # procedural night is darker than the frames
    assert munit.brightness["procedural"] < munit.brightness["clear"]
    # the identity: SSIM 1, no distance to the clear frames, no steering change, moved = 1
    assert ident.ssim_translated == pytest.approx(1.0)
    assert ident.fid_translated_clear == pytest.approx(0.0, abs=1e-6)
    assert ident.moved == pytest.approx(1.0, rel=1e-6)
    assert ident.brightness["translated"] == pytest.approx(ident.brightness["clear"])
    assert all(m.mean_abs_deg_translated == 0 and sum(m.deeproad_translated.values()) == 0 for m in ident.models)
    assert any(m.mean_abs_deg_procedural > 0 for m in ident.models)
    # MUNIT: one decoder pass per (seed, frame), and the frames again under a second style; UNIT: each frame once
    assert munit.translated_images == 2 * 5 + 5 and unit.translated_images == 5
    assert munit.style_spread_translated > 0 and unit.style_spread_translated == 0
    assert ident.style_spread_procedural > 0  # two procedural draws of a frame differ
    # tables and JSON
    md = res.markdown()
    assert "run-munit" in md and "epoch" in md and "SSIM(t,x)" in md
    out = res.write_json(tmp_path / "eval.json")
    d = json.loads(out.read_text())
    assert d["frame_range"] == [0, 5] and d["feature_model"] == ev.FEATURE_MODEL
    assert d["translators"][0]["models"][0]["deeproad_translated"].keys() == {"10", "20", "30", "40"}
    # deterministic: the same numbers again (timings aside)
    again = ev.evaluate_translators(trs[:1], tiny["src"], seeds=(0, 1), models=models, weathers=weathers)
    a, b = again.scores[0].to_dict(), munit.to_dict()
    for k in ("translate_seconds", "images_per_s"):
        a.pop(k), b.pop(k)
    assert a == b


def test_models_with_history_see_windows_with_one_weather(tiny):
    # chauffeur (10 previous frames) on 2 of the 4 frames: windows padded with frame 0 before the source starts
    res = ev.evaluate_translators([str(tiny["munit"]), _Identity()], tiny["src"], frames=[1, 2, 3, 4],
                                  models=["chauffeur", "dave2"], weathers={"run-munit": "night"}, history_frames=2)
    assert res.history_frames == 2
    munit, ident = res.scores
    assert [m.pairs for m in munit.models] == [2, 4]
    # singles of the 4 frames + a window of 11 for each of the 2 judged by chauffeur
    assert munit.translated_images == 4 + 2 * 11 + 4
    assert ident.model("chauffeur").mean_abs_deg_translated == 0
    assert ident.model("chauffeur").mean_abs_deg_procedural > 0


def test_evaluate_refuses_what_it_cannot_measure(tiny):
    with pytest.raises(CameraArgumentError, match="cannot tell which procedural weather"):
        ev.evaluate_translators([str(tiny["unit"])], tiny["src"], models=["dave2"])
    with pytest.raises(CameraArgumentError, match="outside the 5 frames"):
        ev.evaluate_translators([_Identity()], tiny["src"], frames=[3, 9], models=["dave2"])
    with pytest.raises(CameraArgumentError, match="no translator"):
        ev.evaluate_translators([], tiny["src"])


def test_feature_extractor_pools_the_trunk():
    fe = ev.FeatureExtractor()
    imgs = np.random.default_rng(0).integers(0, 256, (3, 60, 80, 3), dtype=np.uint8)
    f = fe(imgs)
    assert f.shape == (3, 64) and np.isfinite(f).all()
    assert np.allclose(fe(imgs[1:2]), f[1:2])
    with pytest.raises(CameraArgumentError, match="windows"):
        ev.FeatureExtractor("chauffeur")
    assert math.isfinite(ev.feature_distance(f, f[::-1]))


# ----------------------------------------------------------------------------------------------------- sheet


def test_sheet_writes_a_png_of_the_layout(tiny, tmp_path):
    import cv2

    from lidarmt.camera.translate.model import LearnedTranslator
    from lidarmt.camera.translate.sheet import GAP, GROUP_GAP, MARGIN, sheet_size, translator_sheet

    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (2, 48, 64, 3), dtype=np.uint8)
    unit = LearnedTranslator("unit-snow", tiny["unit"], weather="snow")
    munit = LearnedTranslator("munit-night", tiny["munit"], weather="night")
    out = translator_sheet(frames, [unit, munit], tmp_path / "sheet.png", weathers=("night", "snow"), styles=2,
                           thumb_size=(40, 30), frame_indices=[10, 11])
    img = cv2.imread(str(out), cv2.IMREAD_COLOR)[:, :, ::-1]
    # groups: original (1), procedural night/snow (2), UNIT (1), MUNIT 2 styles (2)
    w, h = sheet_size(2, [1, 2, 1, 2], (40, 30))
    assert (w, h) == (2 * MARGIN + 6 * 40 + 2 * GAP + 3 * GROUP_GAP, img.shape[0]) and img.shape == (h, w, 3)
    top = h - MARGIN - 2 * 30 - GAP  # the first row of thumbnails
    first = img[top:top + 30, MARGIN:MARGIN + 40]
    assert np.array_equal(first, cv2.resize(frames[0], (40, 30), interpolation=cv2.INTER_AREA))
    # the two MUNIT columns use two styles
    x1 = w - MARGIN - 2 * 40 - GAP
    assert not np.array_equal(img[top:top + 30, x1:x1 + 40], img[top:top + 30, x1 + 42:x1 + 82])
    with pytest.raises(CameraArgumentError):
        translator_sheet(frames[:, :, :, 0], [unit], tmp_path / "bad.png")


# ----------------------------------------------------------------------------------------------------- cards


def test_wall_time_adds_sessions_of_a_resumed_run():
    from lidarmt.camera.translate.cards import _wall_seconds

    log = [{"iteration": 50, "seconds": 12.0}, {"iteration": 100, "seconds": 22.0}, {"iteration": 150, "seconds": 32.0},
           {"iteration": 150, "seconds": 14.0}, {"iteration": 200, "seconds": 24.0}, {"iteration": 250, "seconds": 34.0}]
    total, rate = _wall_seconds(log, 200)
    assert total == pytest.approx(32 + 24)
    assert rate == pytest.approx((20 + 10) / (100 + 50))


@pytest.mark.slow
def test_cost_counts_on_the_meta_device_what_a_real_step_costs():
    import torch
    from _translators import TINY_NET
    from torch.utils.flop_counter import FlopCounterMode

    from lidarmt.camera.translate.cards import compute_cost
    from lidarmt.camera.translate.nets import NetConfig
    from lidarmt.camera.translate.train import TrainConfig, Trainer

    net = NetConfig(arch="munit", **TINY_NET)
    cost = compute_cost(net, 32)
    trainer = Trainer(TrainConfig(domain_a="a", domain_b="b", out="-", net=net, size=32))
    x = torch.zeros(1, 3, 32, 32)
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.step(x, x)
    assert cost["gflop_per_iteration"] == pytest.approx(counter.get_total_flops() / 1e9)
    assert cost["generator_parameters"] == sum(p.numel() for p in trainer.gen.parameters())
    # twice the side: the convolutions cost about four times as much
    assert 3.5 < compute_cost(net, 64)["gflop_per_iteration"] / cost["gflop_per_iteration"] < 4.1


@pytest.mark.slow
def test_cost_of_tactics_configuration():
    from lidarmt.camera.translate.cards import PAPERS, compute_cost

    p = PAPERS["munit"]
    c = compute_cost(p.net, p.size, cyc_w=p.cyc_w)
    assert 1500 < c["gflop_per_iteration"] < 3500  # the issue quotes about 2.6 TFLOP with the VGG loss
    assert c["generator_parameters"] > 20_000_000


@pytest.mark.slow
def test_card_renders_from_a_metrics_dict(tiny, tmp_path):
    from lidarmt.camera.translate import cards

    facts = cards.training_facts(tiny["munit"].parent, machine="a test machine")
    assert facts["iterations"] == 2 and facts["seconds_per_iteration"] > 0
    assert facts["command"].startswith("lidarmt camera train-translator --arch munit --domain-a domains/a")
    assert "--iterations 2" in facts["command"] and "--dim 4" in facts["command"]
    res = ev.evaluate_translators([str(tiny["munit"])], tiny["src"], models=["dave2"],
                                  weathers={"run-munit": "night"})
    paper = {"gflop_per_iteration": 2000.0, "generator_parameters": 30_000_000, "discriminator_parameters": 16_000_000}
    m = cards.translator_metrics("munit-night", facts, res.scores[0], res, paper_cost=paper,
                                 notes=["the sky turns purple"])
    m = json.loads(json.dumps(m))  # what the .json file holds
    assert m["weather"] == "night" and m["arch"] == "munit" and m["style_dim"] == 3
    assert m["ssim_to_source"] == res.scores[0].ssim_translated and m["fid_like"] == res.scores[0].fid_translated
    assert m["cost"]["this"]["gflop_per_iteration"] > 0
    text = cards.model_card(m)
    assert text.startswith("# `munit-night`: MUNIT night translator (a learned stand-in for TACTIC's MUNIT)")
    for want in ("not a reproduction", "VGG", "## Size", "## Measured", "| dave2 |", "## Known failure modes",
                 "a test machine", "lidarmt camera search --space munit-night", "the sky turns purple", f"{res.scores[0].ssim_translated:.3f}"):
        assert want in text
    # a UNIT card names DeepRoad and offers no style search
    facts_u = cards.training_facts(tiny["unit"].parent)
    res_u = ev.evaluate_translators([str(tiny["unit"])], tiny["src"], models=["dave2"], weathers={"run-unit": "snow"})
    mu = cards.translator_metrics("unit-snow", facts_u, res_u.scores[0], res_u, paper_cost=paper)
    text_u = cards.model_card(mu)
    assert "DeepRoad's UNIT" in text_u and "--space" not in text_u and "style vector" not in text_u


@pytest.mark.slow
def test_ship_script_makes_weights_cards_metrics_and_sheet(tmp_path):
    import dataclasses
    import importlib.util

    from _translators import tiny_config

    from lidarmt.camera.translate.model import read_translator
    from lidarmt.camera.translate.train import train_translator

    runs = tmp_path / "runs"
    for name in ("unit-night", "munit-snow"):
        cfg = tiny_config(tmp_path / f"data-{name}", name.split("-")[0])
        train_translator(dataclasses.replace(cfg, out=str(runs / name)))
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("*")}
    src = image_folder(tmp_path / "frames", n=4, size=(48, 64), seed=9)
    spec = importlib.util.spec_from_file_location("ship", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "ship_translators.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    out = tmp_path / "weights"
    args = ["--runs", str(runs), "--names", "unit-night,munit-snow", "--udacity", str(src), "--frames", "0:4",
            "--models", "dave2", "--out", str(out),
            "--sheet", str(tmp_path / "sheet.png"), "--sheet-frames", "0,3", "--json", str(tmp_path / "eval.json")]
    assert ship.main(args) == 0
    for name in ("unit-night", "munit-snow"):
        assert (out / f"{name}.pt").read_bytes() == (runs / name / "translator.pt").read_bytes()
        m = json.loads((out / f"{name}.json").read_text())
        assert m["weather"] == name.split("-")[1] and m["iterations"] == 2
        assert [x["model"] for x in m["evaluation"]["score"]["models"]] == ["dave2"]
        assert (out / f"{name}.md").read_text().startswith(f"# `{name}`")
        read_translator(out / f"{name}.pt")
    assert (tmp_path / "sheet.png").stat().st_size > 0
    assert json.loads((tmp_path / "eval.json").read_text())["frames"] == 4
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*")} == before  # the runs are only read


def _ship_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ship", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "ship_translators.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    return ship


def test_ship_script_picks_frames_nobody_trained_on_and_the_card_says_who_saw_what(tmp_path):
    from lidarmt.camera.translate import cards

    ship = _ship_module()
    src = tmp_path / "drive"
    facts = {"unit-night": {"data_recipe": f"python scripts/make_weather_domains.py --udacity {src} --out d "
                                           "--train 5 --seed 1"}}
    steer = {"m1": {"sha256": "ab" * 32, "training_frames": [0, 8], "validation_frames": [8, 10], "history": 0},
             "m2": {"sha256": "cd" * 32, "training_frames": [0, 3], "validation_frames": [3, 10], "history": 2},
             "other": {"sha256": None, "training_frames": None, "validation_frames": None, "history": 0}}
    assert ship._unseen(src, 10, facts, steer) == [8, 9]  # after the steering models' 8 and the translators' 5
    del steer["m1"]
    assert ship._unseen(src, 10, facts, steer) == [5, 6, 7, 8, 9]
    assert ship._unseen(tmp_path / "elsewhere", 10, facts, steer) == [3, 4, 5, 6, 7, 8, 9]  # translators: other data
    prov = ship._provenance(src, [4, 5, 6], facts, steer, earliest=2)["unit-night"]
    assert prov["translator_training_frames"] == [0, 5] and prov["translators_saw"] == 1
    assert prov["steering_models"]["m2"]["saw"] == 0 and prov["steering_models"]["other"]["saw"] is None
    ev_ = {"frames": 3, "frame_range": [4, 7], "source": str(src), "provenance": prov}
    text = "\n".join(cards._frames_lines(ev_))
    assert "Measured on frames 4..6" in text and "1 of the measured frames are among them" in text
    assert "m2: trained on frames 0..2 and never on the measured frames, which are its validation frames 3..9" in text
    assert "other: trained on another source" in text and "from frame 2 on" in text and "m2 `cdcdcdcdcdcd`" in text
    assert cards._history_models(ev_) == "m2"
    # the old cards, without provenance, keep their sentence
    assert cards._frames_lines({"frames": 300}) == [
        "- Frames 1200..1499 were never seen in training: the numbers below are measured on them."]
    assert cards.recipe_training_frames("python scripts/make_weather_domains.py --train=7") == 7
    assert cards.recipe_training_frames("something else --train 7") is None


@pytest.mark.slow
def test_ship_script_remeasures_shipped_weights_keeping_their_training_facts(tmp_path, monkeypatch):
    import hashlib
    import shutil

    from lidarmt.camera.models import zoo
    from lidarmt.camera.translate import cards

    ship = _ship_module()
    pt = tiny_translator(tmp_path / "run", "unit")
    facts = cards.training_facts(pt.parent, machine="a test machine")
    out = tmp_path / "weights"  # a tiny shipped folder: weights and a card made from made-up numbers
    out.mkdir()
    shutil.copy(pt, out / "unit-night.pt")
    score = {"weather": "night", "ssim_translated": 0.5, "ssim_procedural": 0.6, "fid_translated": 1.0,
             "fid_clear": 2.0, "moved": 0.5, "models": [{"mean_abs_deg_translated": 9.0,
                                                         "mean_abs_deg_procedural": 1.0}]}
    cost = {"gflop_per_iteration": 1.5, "generator_parameters": 10, "discriminator_parameters": 20}
    old = cards.translator_metrics("unit-night", facts, score, {"frames": 300, "models": ["old"]}, cost=cost,
                                   paper_cost={**cost, "gflop_per_iteration": 99.0}, notes=["a hand-written note"])
    (out / "unit-night.json").write_text(json.dumps(old))
    (out / "unit-night.md").write_text("old card")
    pt_stat = (out / "unit-night.pt").stat().st_mtime_ns, (out / "unit-night.pt").read_bytes()
    src = image_folder(tmp_path / "frames", n=4, size=(48, 64), seed=9)
    args = ["--from-shipped", "--names", "unit-night", "--udacity", str(src), "--frames", "1:4", "--models",
            "dave2", "--out", str(out), "--sheet", str(tmp_path / "sheet.png"), "--sheet-frames", "1,3",
            "--json", str(tmp_path / "eval.json")]

    # weights changed while measuring: nothing is written
    real, calls = ship._steering_facts, []

    def moving(models, source):
        got = real(models, source)
        calls.append(1)
        return {m: {**d, "sha256": "0" * 64} for m, d in got.items()} if len(calls) > 1 else got

    monkeypatch.setattr(ship, "_steering_facts", moving)
    assert ship.main(args) == 1
    assert (out / "unit-night.md").read_text() == "old card" and not (tmp_path / "eval.json").exists()
    monkeypatch.setattr(ship, "_steering_facts", real)

    assert ship.main(args) == 0
    new = json.loads((out / "unit-night.json").read_text())
    for k in ("name", "arch", "weather", "title", "style_dim", "parameters", "iterations", "seconds",
              "seconds_per_iteration", "training", "cost", "notes"):
        assert new[k] == old[k], k
    assert ((out / "unit-night.pt").stat().st_mtime_ns, (out / "unit-night.pt").read_bytes()) == pt_stat
    e = new["evaluation"]
    assert e["frames"] == 3 and e["frame_range"] == [1, 4] and e["models"] == ["dave2"]
    assert new["ssim_to_source"] == e["score"]["ssim_translated"] != 0.5
    sha = hashlib.sha256(zoo.shipped_weights("dave2").read_bytes()).hexdigest()
    assert e["provenance"]["steering_models"]["dave2"]["sha256"] == sha
    card = (out / "unit-night.md").read_text()
    assert card.startswith("# `unit-night`") and "a hand-written note" in card and "a test machine" in card
    assert "Measured on frames 1..3" in card and f"dave2 `{sha[:12]}`" in card and "| dave2 |" in card
    assert "Frames 1200..1499" not in card
    assert json.loads((tmp_path / "eval.json").read_text())["provenance"]["steering_models"]["dave2"]["sha256"] == sha
    assert (tmp_path / "sheet.png").stat().st_size > 0

    # a card that does not describe the weights beside it is refused
    (out / "unit-night.json").write_text(json.dumps({**old, "iterations": 7}))
    with pytest.raises(SystemExit):
        ship.main(args)
    (out / "unit-night.json").unlink()
    with pytest.raises(SystemExit):
        ship.main(args)
