"""TACTIC's search over a MUNIT translator's style space: ES and random with the DeepRoad-style single-style arm on
the same seeds, the cached content codes (one decoder pass per candidate), resume, the arm comparison, bundles and
the refusals."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from _translators import shipped_dir  # noqa: E402
from test_camera_campaign import write_udacity  # noqa: E402

import lidarmt.camera.translate.registry as treg  # noqa: E402
from lidarmt.camera.campaign import ModelRef  # noqa: E402
from lidarmt.cli import main  # noqa: E402
from lidarmt.engine.campaign import config_from_dict, run_campaign  # noqa: E402
from lidarmt.engine.journal import JOURNAL_NAME, iter_records  # noqa: E402
from lidarmt.search.camera import BASELINE_ARM, CameraSearchConfig, arm_comparison, camera_space  # noqa: E402
from lidarmt.search.errors import SearchArgumentError  # noqa: E402


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return shipped_dir(tmp_path_factory.mktemp("trs"))


@pytest.fixture
def shipped(weights, monkeypatch) -> Path:
    monkeypatch.setattr(treg, "WEIGHTS_DIR", weights)
    return weights


@pytest.fixture(scope="module")
def udacity(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("trsearch") / "drive", 6)


def _records(out: Path) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k != "traceback"} for r in iter_records(out / JOURNAL_NAME)),
                  key=lambda r: tuple(r["key"]))


def test_style_space_and_config(shipped):
    space = camera_space("munit-tiny")
    assert [d.name for d in space.dims] == ["s0", "s1", "s2"] and {(d.low, d.high) for d in space.dims} == {(-3, 3)}
    with pytest.raises(SearchArgumentError, match="camera fuzz --transforms unit-tiny"):
        camera_space("unit-tiny")
    cfg = CameraSearchConfig("x", ModelRef("dave-orig"), "es", (0, 1), 5, space="munit-tiny", baseline="unit-tiny")
    assert cfg.arms == (0, 1, BASELINE_ARM) and cfg.total == 5 * 2 + 1
    assert cfg.keys_of(0) == [(0, 0, 0), (0, 0, 1), (0, 0, 2)] and cfg.keys_of(3) == [(3, 0, 0), (3, 0, 1)]
    assert cfg.transform_names() == ("munit-tiny", "unit-tiny")
    assert config_from_dict(cfg.to_dict()) == cfg
    rnd = CameraSearchConfig("x", ModelRef("dave-orig"), "random", (0, 1), 5, space="munit-tiny",
                             baseline="munit-tiny")
    assert rnd.arms == (1, BASELINE_ARM) and rnd.total == 6 and rnd.transform_names() == ("munit-tiny",)
    plain = CameraSearchConfig("x", ModelRef("dave-orig"), "es", (0, 1), 5, space="fog")
    assert "baseline" not in plain.to_dict() and plain.arms == (0, 1)  # journals of before read the same


def test_cached_content_equals_translate(shipped, udacity, tmp_path):
    cfg = CameraSearchConfig(str(udacity), ModelRef("dave-orig"), "es", (0, 2, 4), 2, space="munit-tiny",
                             criterion="nbc", baseline="unit-tiny")
    ev = cfg.evaluator(enforce_timeout=False)
    ev.prepare()
    tr = ev.transforms["munit-tiny"]
    calls = []
    real = tr.translator.encode
    tr.translator.encode = lambda imgs: calls.append(len(imgs)) or real(imgs)
    try:
        ev._content.clear()
        styles = ([0.5, -1.0, 2.0], [0.0, 0.0, 0.0], [-3.0, 3.0, 1.0])
        cached = [ev.candidate_inputs("munit-tiny", {f"s{i}": v for i, v in enumerate(st)}) for st in styles]
        assert calls == [3], "the seeds are encoded once for every candidate"
        frames = np.concatenate([ev.seeds[p]["window"] for p in ev.seeds])
        for style, got in zip(styles, cached, strict=True):
            uncached = tr.translator.translate(frames, style=np.array(style, np.float32))
            assert np.array_equal(got, uncached), "one decoder pass over the codes = translate()"
            # a single seed translated alone (what a bundle recomputes) differs by a grey level at most
            one = ev.apply_steps(1, ev.condition_steps(1, {f"s{i}": v for i, v in enumerate(style)}))
            assert np.abs(one.astype(int) - got[1]).max() <= 1
        u = ev.candidate_inputs("unit-tiny", {})
        assert np.array_equal(u, ev.transforms["unit-tiny"].translator.translate(frames))
    finally:
        tr.translator.encode = real


def test_es_search_with_deeproad_arm_resumes(shipped, udacity, tmp_path):
    out = tmp_path / "es"
    cfg = CameraSearchConfig(str(udacity), ModelRef("dave-orig"), "es", (0, 2, 4), budget=3, seed=1,
                             space="munit-tiny", criterion="nbc", baseline="unit-tiny", run_dir=str(out))
    run_campaign(cfg, out)
    full = _records(out)
    assert len(full) == 3 * 2 + 1 and all(r["status"] == "ok" for r in full)
    assert [r["arm"] for r in full if r["key"][2] == BASELINE_ARM] == ["deeproad"]
    base = next(r for r in full if r["arm"] == "deeproad")
    assert base["transform"] == "unit-tiny" and base["params"] == {} and base["unit"] == []
    for r in full:
        assert r["fitness"] == pytest.approx(r["fc"] + r["fd"] / (r["fd"] + 1))
        if r["arm"] != "deeproad":
            assert set(r["params"]) == {"s0", "s1", "s2"} and all(-3 <= v <= 3 for v in r["params"].values())
    lines = (out / JOURNAL_NAME).read_text(encoding="utf-8").splitlines(keepends=True)
    (out / JOURNAL_NAME).write_text("".join(lines[:1 + 4]), encoding="utf-8")
    res = run_campaign(cfg, out, resume=True)
    assert res.resumed == 4 and _records(out) == full
    comp = arm_comparison(cfg, res.tally)
    rows = {r["arm"]: r for r in comp["rows"]}
    assert set(rows) == {"es", "random", "deeproad"}
    assert rows["deeproad"]["candidates"] == 1 and rows["deeproad"]["images"] == 3
    assert rows["es"]["candidates"] == rows["random"]["candidates"] == 3 and rows["es"]["images"] == 9
    assert rows["deeproad"]["best_fitness"] == pytest.approx(base["fitness"])
    assert rows["deeproad"]["errors"]["10"] == int(np.sum(np.abs(np.subtract(base["pred_t"], base["pred"]))
                                                         > np.radians(10)))
    assert rows["es"]["deeptest_errors"] is not None, "the seeds have labels: Eq. 2 is counted"
    assert "one candidate" in comp["note"] and "unusable" in comp["note"]


@pytest.mark.slow
def test_search_cli_translator_space_end_to_end(shipped, udacity, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["camera", "search", "--strategy", "es", "--space", "munit-tiny", "--model", "dave-orig", "--images",
            str(udacity), "--budget", "2", "--frames", "3", "--criterion", "nbc", "--tolerance", "0.01",
            "--bundles", "2", "--out", str(out), "-q"]
    assert main(args) == 0
    text = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["baseline"] == "unit-tiny", "munit-X is compared with unit-X when it is installed"
    assert set(s["arms"]) == {"es", "random", "deeproad"} and s["arms"]["deeproad"]["evaluations"] == 1
    assert [r["arm"] for r in s["comparison"]["rows"]] == ["es", "random", "deeproad"]
    assert "unusable" in text and "deeproad" in text
    for name in ("report.md", "table.txt", "search.png", "conditions.png"):
        assert (out / name).is_file(), name
    bundles = sorted((out / "violations").iterdir())
    assert bundles, "a tolerance of 0.01° makes some seed erroneous"
    info = json.loads((bundles[0] / "bundle.json").read_text())
    assert info["family"] == "translator" and info["translators"][0]["sha256"]
    assert main(["replay", str(bundles[0])]) == 0
    assert main([*args, "--resume"]) == 0
    assert json.loads((out / "summary.json").read_text()) == s


def test_search_random_and_mode_baseline(weights, udacity, tmp_path, monkeypatch, capsys):
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(weights / "munit-tiny.pt", only / "munit-tiny.pt")
    monkeypatch.setattr(treg, "WEIGHTS_DIR", only)
    out = tmp_path / "rnd"
    assert main(["camera", "search", "--strategy", "random", "--space", "munit-tiny", "--model", "dave-orig",
                 "--images", str(udacity), "--budget", "1", "--frames", "2", "--criterion", "nbc", "--bundles", "0",
                 "--device", "cpu", "--out", str(out), "-q"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["model"]["options"] == {"device": "cpu"}  # the translators run where the model does
    cfg = config_from_dict(s["config"])
    ev = cfg.evaluator(enforce_timeout=False)
    assert [t.options for t in ev.cam.config.transforms] == [{"device": "cpu"}]
    assert ev.transforms["munit-tiny"].device == "cpu"
    recs = _records(out)
    assert [r["arm"] for r in recs] == ["random", "deeproad"]
    assert recs[1]["transform"] == "munit-tiny" and recs[1]["params"] == {"s0": 0.0, "s1": 0.0, "s2": 0.0}
    assert "style 0" in s["comparison"]["note"]


def test_search_refusals_are_one_line(shipped, udacity, tmp_path, capsys):
    base = ["camera", "search", "--images", str(udacity), "--out", str(tmp_path / "x"), "-q", "--model",
            "dave-orig"]
    for extra, want in ((["--strategy", "es", "--space", "unit-tiny"], "camera fuzz --transforms unit-tiny"),
                        (["--strategy", "es", "--space", "munit-tiny", "--baseline", "fog"], "not a translator"),
                        (["--strategy", "deeptest", "--baseline", "unit-tiny"], "--strategy es or random")):
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert want in err and "\n" not in err, err
    assert not (tmp_path / "x").exists()
