"""``lidarmt camera profile``, ``lidarmt camera coverage`` and ``lidarmt fuzz-coverage``; the shipped profiles;
the coverage studies' images are the campaign's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
from test_fuzz_support import write_scenes  # noqa: E402

from lidarmt.cli import main  # noqa: E402
from lidarmt.coverage import NeuronProbe, Profile  # noqa: E402
from lidarmt.coverage.camera import load_profile_for, profile_path_for, tracker_for  # noqa: E402


def ok(args: list[str], capsys) -> None:
    assert main(args) == 0
    capsys.readouterr()


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "Traceback" not in err and "\n" not in err, err
    return err


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    import cv2

    folder = tmp_path_factory.mktemp("cov") / "frames"
    folder.mkdir()
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:240, 0:320]
    for i in range(6):
        img = np.stack([(xx + 20 * i) % 256, (yy * 2) % 256, np.full_like(xx, 40 * i)], -1).astype(np.float64)
        img += rng.normal(0, 12, img.shape)
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.clip(img, 0, 255).astype(np.uint8))
    return folder


def test_shipped_profiles_match_the_shipped_models() -> None:
    from lidarmt.camera.models import zoo
    from lidarmt.coverage.camera import _hooked_predict, _inference_layers

    checked = 0
    for name in zoo.available():
        path = profile_path_for(name)
        assert path.is_file(), f"{name} ships no coverage profile: run scripts/train_camera_models.sh"
        prof = Profile.load(path)
        model = zoo.load(name)
        probe = NeuronProbe(model.module, layers=_inference_layers(model.module))
        x = np.zeros((1, 240, 320, 3), np.uint8)
        if model.input_spec.history:
            x = np.zeros((1, model.input_spec.history + 1, 240, 320, 3), np.uint8)
        probe.capture(lambda x=x, model=model: _hooked_predict(model)(x), 1)
        prof.check(probe.names, probe.sizes)
        assert prof.count >= 400 and prof.meta["split"] == "train"  # the Udacity training split
        assert (prof.low <= prof.high).all() and (prof.std >= 0).all()
        checked += 1
    assert checked == len(zoo.available()) >= 7


@pytest.mark.slow
def test_profile_cli_writes_a_loadable_profile(images, tmp_path, capsys) -> None:
    out = tmp_path / "dave2.profile.npz"
    args = ["camera", "profile", "--model", "dave2", "--images", str(images), "--out", str(out), "--split", "all"]
    ok(args, capsys)
    prof = Profile.load(out)
    assert prof.count == 6 and prof.meta["model"] == "dave2" and prof.meta["split"] == "all"
    assert main(args) == 2
    assert "exists" in one_line_error(capsys)
    ok([*args, "--force", "--split", "train"], capsys)
    assert Profile.load(out).count == 5  # the first 80 % of 6 frames
    assert main(["camera", "profile", "--model", "dave2", "--images", str(images), "--out", str(out), "--split",
                 "val"]) == 2
    assert "--split" in one_line_error(capsys)


def test_coverage_cli_quiet_and_history_note(images, tmp_path, capsys) -> None:
    args = ["camera", "coverage", "--model", "chauffeur", "--images", str(images), "--transforms", "mirror",
            "--frames", "1", "--profile", "none", "--out", str(tmp_path / "q"), "-q"]
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "reports: " in cap.out and "report.html" in cap.out and not any(c in cap.out for c in "┃━│")  # -q: no bar
    note = [line for line in cap.err.splitlines() if line.strip()]
    assert len(note) == 1 and "not a recorded sequence" in note[0] and "chauffeur (history 10)" in note[0]


@pytest.mark.slow
def test_coverage_cli_reports(images, tmp_path, capsys) -> None:
    prof = tmp_path / "p.npz"
    ok(["camera", "profile", "--model", "dave2", "--images", str(images), "--out", str(prof)], capsys)
    out = tmp_path / "run"
    args = ["camera", "coverage", "--model", "dave2", "--images", str(images), "--transforms", "brightness,rain",
            "--frames", "4", "--profile", str(prof), "--out", str(out)]
    ok(args, capsys)
    s = json.loads((out / "summary.json").read_text())
    assert s["seeds"] == 4 and s["transforms"] == ["brightness", "rain"]
    assert s["criteria"] == ["nc", "kmnc", "nbc", "snac", "tknc"]
    assert [len(t["params"]) for t in s["per_param"]] == [10, 4]
    j = np.array(s["jaccard"]["median"])
    assert j.shape == (2, 2) and np.all(np.diag(j) == 0) and np.allclose(j, j.T)
    for c, r in s["cumulative"]["table6"].items():
        assert r["baseline"]["covered"] <= r["together"]["covered"] <= r["baseline"]["units"], c
        assert r["transformed"]["covered"] <= r["together"]["covered"]
    steps = s["cumulative"]["per_seed_steps"]["mean_nc"]
    assert len(steps) == 3 and steps == sorted(steps)  # unions only grow
    assert s["rq1"]["seeds"]["images"] == 4 and s["rq1"]["all_images"]["images"] == 4 * 15
    for name in ("report.md", "table.txt", "jaccard.png", "params.png", "cumulative.png", "junit.xml"):
        assert (out / name).is_file(), name
    assert main(args) == 2
    assert "not empty" in one_line_error(capsys)
    assert main([*args, "--force", "--profile", str(tmp_path / "missing.npz")]) == 2
    assert "no such profile" in one_line_error(capsys)


def test_study_images_are_the_campaigns(images) -> None:
    """collect() judges exactly the images a camera campaign with the same seed makes (rain draws its streaks
    from the transform seed)."""
    from lidarmt.camera.campaign import transform_seed
    from lidarmt.camera.transforms.registry import select
    from lidarmt.coverage.study import collect, make_evaluator

    ev = make_evaluator(str(images), "dave2", select("rain"), (1, 4), seed=3)
    tracker = tracker_for(ev.models[0], profile=load_profile_for("dave2"))
    data = collect(ev, tracker)
    rain = ev.transforms[0]
    for k, frame in enumerate((1, 4)):
        img = ev.source[frame].image
        for p, params in enumerate(ev.config.transforms[0].grid):
            want = ev.models[0].predict(rain.apply(img, params, transform_seed(3, frame, "rain", p, 0))[None])[0]
            assert data.angles[0][p][k] == pytest.approx(want, abs=1e-6)


@pytest.mark.slow
def test_coverage_campaign_equals_the_in_memory_study_and_resumes(images, tmp_path, capsys) -> None:
    """The journaled campaign gives exactly the summary of collect() + analyse(); a run cut short resumes to it."""
    from lidarmt.camera.transforms.registry import select
    from lidarmt.coverage import CoverageConfig
    from lidarmt.coverage.study import analyse, collect, make_evaluator, seeds_for
    from lidarmt.engine.journal import JOURNAL_NAME

    out = tmp_path / "run"
    args = ["camera", "coverage", "--model", "dave2", "--images", str(images), "--transforms", "brightness,rain",
            "--frames", "3", "--seed", "2", "--kmnc-k", "50", "--out", str(out)]
    ok(args, capsys)
    got = json.loads((out / "summary.json").read_text())

    frames = seeds_for(6, 3, 2)
    ev = make_evaluator(str(images), "dave2", select("brightness,rain"), frames, seed=2)
    tracker = tracker_for(ev.models[0], profile=load_profile_for("dave2"), config=CoverageConfig(kmnc_k=50))
    want = json.loads(json.dumps(analyse(tracker, collect(ev, tracker))))
    assert got == want
    assert got["criteria"] == ["nc", "kmnc", "nbc", "snac", "tknc"] and got["images"] == 3 * 15

    journal = out / JOURNAL_NAME
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 1 + 45
    journal.write_bytes(b"".join(lines[:1 + 20]) + lines[21][:40])  # killed mid-record after 20 images
    (out / "summary.json").unlink()
    assert main(args) == 2
    assert "--resume" in one_line_error(capsys)
    ok([*args, "--resume"], capsys)
    assert json.loads((out / "summary.json").read_text()) == want
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from"] == 20
    assert main([*args, "--resume", "--nc-threshold", "0.3"]) == 2  # other settings than the journal's
    assert "other settings" in one_line_error(capsys)
    ok([*args, "--force", "--frames", "2"], capsys)
    assert json.loads((out / "summary.json").read_text())["seeds"] == 2


# ------------------------------------------------------------------------------------------ LiDAR


def small_apollo(**kw):
    """Apollo's pipeline with a 64x64 grid over ±30 m and random weights: the real CNN topology, small."""
    from lidarmt.lidar.perception.apollo.config import ApolloConfig
    from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP

    return ApolloLOP(ApolloConfig(grid=64, range=30.0), weights=None, allow_random=True, seed=1)


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("lidarcov") / "frames", 3)


@pytest.mark.slow
def test_lidar_study_sources_vs_follow_ups(rec) -> None:
    from lidarmt.coverage.lidar import run_study
    from lidarmt.lidar.mr1.campaign import CampaignConfig, Evaluator
    from lidarmt.lidar.mr1.inject import Region
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    cfg = CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"),
                         SutSpec("test_coverage_cli:small_apollo"), (10, 2000), (0, 1, 2), seed=4,
                         region=Region("grid", 30.0))
    s = run_study(Evaluator(cfg, enforce_timeout=False))
    assert s["frames"] == [0, 1, 2] and s["neurons"] == sum(li["size"] for li in s["layers"])
    assert [li["relu"] for li in s["layers"]][-1] is False and all(li["relu"] for li in s["layers"][:-1])
    assert s["sources"]["nbc"]["covered"] == 0 and s["sources"]["snac"]["covered"] == 0  # profiled on themselves
    for row in s["per_n"]:
        assert row["pairs"] == 3
        for c, x in row["criteria"].items():
            assert x["with_follow_ups"] == x["sources"] + x["new_units"], c
            assert x["pairs_beyond"] == sum(p["beyond"][c] > 0 for p in row["pairs_detail"])
            assert x["new_units"] <= sum(p["beyond"][c] for p in row["pairs_detail"])
    for row in s["per_n"]:  # widening the bounds can only shrink what lies beyond them
        for c in ("nbc", "snac"):
            counts = [row["criteria"][c]["pairs_beyond"]] + [row["widened"][w][c]["pairs_beyond"] for w in ("0.5", "1.0")]
            assert counts == sorted(counts, reverse=True), (c, counts)
    big = s["per_n"][1]
    assert big["shift_sigma"]["median"] > s["per_n"][0]["shift_sigma"]["median"] > 0
    assert big["criteria"]["nbc"]["pairs_beyond"] > 0  # 2,000 points in the CNN's grid leave the sources' range


@pytest.mark.slow
def test_fuzz_coverage_cli(rec, tmp_path, capsys) -> None:
    out = tmp_path / "cov"
    args = ["fuzz-coverage", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
            "test_coverage_cli:small_apollo", "--n", "10,100", "--frames", "2", "--region", "grid", "--radius", "30",
            "--widen", "0.5", "--out", str(out)]
    ok(args, capsys)
    s = json.loads((out / "summary.json").read_text())
    assert s["ns"] == [10, 100] and len(s["frames"]) == 2 and s["config"]["widen"] == 0.5
    for name in ("report.md", "table.txt", "beyond.png", "junit.xml"):
        assert (out / name).is_file(), name
    assert main(args) == 2
    assert "not empty" in one_line_error(capsys)
    assert main([*args[:-2], "--region", "ring", "--out", str(tmp_path / "x")]) == 2
    assert "--region" in one_line_error(capsys)
