"""Learned translators as transformations: the adapter, selection, camera fuzz end to end, resume, workers, bundles
and their replay (weights checked by SHA-256, code translators behind the trust gate)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from _translators import shipped_dir, tiny_translator  # noqa: E402
from test_camera_campaign import write_udacity  # noqa: E402

import lidarmt.camera.translate.registry as treg  # noqa: E402
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, TransformRef, transform_refs  # noqa: E402
from lidarmt.camera.errors import TransformError  # noqa: E402
from lidarmt.camera.transforms.base import ParamRange, apply_window  # noqa: E402
from lidarmt.camera.transforms.registry import get_transform, select  # noqa: E402
from lidarmt.camera.translate.model import LearnedTranslator  # noqa: E402
from lidarmt.camera.translate.registry import UntrustedTranslatorError  # noqa: E402
from lidarmt.camera.translate.transform import prior_style  # noqa: E402
from lidarmt.cli import main  # noqa: E402
from lidarmt.engine.campaign import config_from_dict, run_campaign  # noqa: E402
from lidarmt.engine.journal import JOURNAL_NAME, iter_records  # noqa: E402

_PLUGIN: dict[str, Path] = {}


def plugin(device: str = "cpu") -> LearnedTranslator:
    """A translator behind ``package.module:callable`` (what a bundle may name, and replay must gate)."""
    return LearnedTranslator("plug", _PLUGIN["path"], device=device, weather="dark")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A folder of 'shipped' translators: munit-tiny.pt and unit-tiny.pt, trained for 2 iterations."""
    d = shipped_dir(tmp_path_factory.mktemp("tr"))
    _PLUGIN["path"] = d / "munit-tiny.pt"
    return d


@pytest.fixture
def shipped(weights, monkeypatch) -> Path:
    monkeypatch.setattr(treg, "WEIGHTS_DIR", weights)
    return weights


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """Six frames without labels (DeepRoad's relation decides)."""
    return write_udacity(tmp_path_factory.mktemp("plain") / "drive", labels=False) / "center"


def _image(seed: int = 0, shape=(48, 64, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


# ----------------------------------------------------------------------------------------------- the adapter


def test_translator_is_a_seeded_transformation(shipped):
    t = get_transform("munit-tiny")
    assert (t.family, t.relation, tuple(t.grid)) == ("translator", "keep", ({},))
    assert t.space == {f"s{i}": ParamRange(-3.0, 3.0) for i in range(3)}
    img = _image()
    before = img.copy()
    a = t.apply(img, {}, 7)
    assert np.array_equal(img, before), "the input is never modified"
    assert a.shape == img.shape and a.dtype == np.uint8
    assert np.array_equal(a, t.apply(img, {}, 7)) and not np.array_equal(a, t.apply(img, {}, 8))
    # the campaign's setting: the style drawn from the prior with the pair's seed
    assert np.array_equal(a, t.translator.translate(img[None], style=prior_style(3, 7))[0])
    assert np.array_equal(prior_style(3, 7), t.translator.random_styles(1, 7)[0])
    assert t.resolve({}, 7) == pytest.approx({f"s{i}": float(v) for i, v in enumerate(prior_style(3, 7))})
    # all given: the style is pinned, the seed draws nothing
    pinned = {"s0": 0.5, "s1": -1.0, "s2": 2.0}
    p = t.apply(img, pinned, 1)
    assert np.array_equal(p, t.apply(img, pinned, 2))
    assert np.array_equal(p, t.translator.translate(img[None], style=np.array([0.5, -1.0, 2.0], np.float32))[0])
    part = t.resolve({"s1": 1.5}, 7)
    assert part["s1"] == 1.5 and part["s0"] == pytest.approx(float(prior_style(3, 7)[0]))
    assert t.label({}) == "munit-tiny" and t.label(pinned) == "munit-tiny s=(+0.50, -1.00, +2.00)"
    for bad, needle in (({"s7": 0.0}, "s7"), ({"s0": 4.0}, "[-3, 3]"), ({"s0": "x"}, "[-3, 3]")):
        with pytest.raises(TransformError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            t.apply(img, bad, 0)
    u = get_transform("unit-tiny")
    assert u.space == {} and u.resolve({}, 3) == {}
    assert np.array_equal(u.apply(img, {}, 1), u.apply(img, {}, 2)), "UNIT is deterministic"
    prov = t.provenance()
    assert prov["kind"] == "builtin" and prov["arch"] == "munit" and prov["style_dim"] == 3
    assert prov["sha256"] == hashlib.sha256((shipped / "munit-tiny.pt").read_bytes()).hexdigest()


def test_selection_families_paths_and_refusals(shipped, tmp_path, capsys):
    assert [t.name for t in select("translator")] == ["munit-tiny", "unit-tiny"]
    assert all(t.family != "translator" for t in select("all")), "all stays simple + weather + mirror"
    assert [t.name for t in select("fog,unit-tiny,translator")] == ["fog", "unit-tiny", "munit-tiny"]
    path = str(shipped / "munit-tiny.pt")
    t = get_transform(path)
    assert t.family == "translator" and np.array_equal(t.apply(_image(), {}, 4),
                                                       get_transform("munit-tiny").apply(_image(), {}, 4))
    assert main(["camera", "transforms"]) == 0  # the listing shows the installed translators
    listing = capsys.readouterr().out
    assert "munit-tiny" in listing and "unit-tiny" in listing and "translator" in listing
    with pytest.raises(UntrustedTranslatorError, match="--trust-code"):
        get_transform("test_translate_transform:plugin", trust_code=False)
    assert get_transform("test_translate_transform:plugin").apply(_image(), {}, 4).shape == (48, 64, 3)
    empty = tmp_path / "none"
    empty.mkdir()
    treg.WEIGHTS_DIR = empty  # restored by the fixture's monkeypatch
    with pytest.raises(TransformError, match="train-translator"):
        select("translator")
    assert [t.name for t in select("fog,translator")] == ["fog"]
    with pytest.raises(TransformError, match="unknown transformation 'sepia'"):
        select("sepia")


def test_window_in_one_call_and_content_reused_by_trials(shipped, monkeypatch):
    t = get_transform("munit-tiny")
    window = np.stack([_image(i) for i in range(3)])
    out = apply_window(t, window, {}, 5)  # one style for the whole window
    assert np.array_equal(out, t.translator.translate(window, style=prior_style(3, 5)))
    calls = []
    real = t.translator.encode
    monkeypatch.setattr(t.translator, "encode", lambda imgs: calls.append(len(imgs)) or real(imgs))
    t2 = get_transform("munit-tiny")
    for seed in (1, 2, 3):  # three trials of one frame: one encoder pass
        t2.apply_batch(window, {}, seed)
    assert calls == [3]
    t2.apply_batch(window[:1], {}, 1)
    assert calls == [3, 1]


def test_device_goes_to_translators_only():
    refs = transform_refs(select("fog,test_translate_transform:plugin"), device="cpu")
    assert refs[0].options == {} and refs[1].options == {"device": "cpu"}
    assert "options" not in refs[0].to_dict() and refs[1].to_dict()["options"] == {"device": "cpu"}
    assert TransformRef.from_dict(refs[1].to_dict()) == refs[1]
    assert TransformRef.from_dict({"name": "fog", "grid": [{}]}).options == {}  # journals written before


# ----------------------------------------------------------------------------------------------- campaigns


@pytest.mark.slow
def test_fuzz_cli_end_to_end_resume_bundle_replay(shipped, plain, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["camera", "fuzz", "--images", str(plain), "--model", "test_camera_campaign:tilt", "--transforms",
            "munit-tiny,unit-tiny", "--trials", "2", "--tolerance", "0.05", "--bundles", "1", "--out", str(out),
            "--quiet"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "munit-tiny" in text and "unit-tiny" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_done"] == 6 * 2 * 2 and not summary["labelled"]
    recs = list(iter_records(out / JOURNAL_NAME))
    assert all(r["status"] == "ok" for r in recs)
    by = {(r["transform"], r["frame"], r["trial"]): r["pred_t"] for r in recs}
    assert any(by[("munit-tiny", f, 0)] != by[("munit-tiny", f, 1)] for f in range(6)), "trials: other styles"
    assert all(by[("unit-tiny", f, 0)] == by[("unit-tiny", f, 1)] for f in range(6)), "UNIT: one output"
    bundles = sorted((out / "violations").iterdir())
    assert bundles, "the translated frames change the tilt model's angle by more than 0.05°"
    b = next((x for x in bundles if "munit-tiny" in x.name), bundles[0])
    info = json.loads((b / "bundle.json").read_text())
    name = info["transform"]
    assert info["family"] == "translator" and info["translators"][0]["spec"] == name
    assert info["translators"][0]["sha256"] == hashlib.sha256((shipped / f"{name}.pt").read_bytes()).hexdigest()
    assert main(["replay", str(b), "--trust-code"]) == 0
    assert "bit for bit" in capsys.readouterr().out
    # a finished campaign resumes to the same summary
    assert main([*args, "--resume"]) == 0
    assert json.loads((out / "summary.json").read_text()) == summary
    # other weights under the same name: replay says so
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(tiny_translator(tmp_path / "o", "munit" if name == "munit-tiny" else "unit", seed=9),
                other / f"{name}.pt")
    treg.WEIGHTS_DIR = other
    capsys.readouterr()
    assert main(["replay", str(b), "--trust-code"]) == 1
    assert "weights (SHA-256)" in capsys.readouterr().out


@pytest.mark.slow
def test_campaign_resumes_and_workers_agree(shipped, plain, tmp_path):
    path = str(shipped / "munit-tiny.pt")  # a path: worker processes find it without the monkeypatch
    cfg = CameraCampaignConfig(str(plain), (ModelRef("test_camera_campaign:tilt"),),
                               transform_refs(select(f"{path},brightness")), (0, 2, 3, 5), trials=2)
    assert config_from_dict(cfg.to_dict()) == cfg
    assert cfg.bundle_id((0, 0, 0, 0, 1)) == "test_camera_campaign_til-munit-tiny-p0-f000000-t1"
    r = run_campaign(cfg, tmp_path / "a")
    assert r.ran == 4 * (2 + 10 * 2) and r.tally.findings() == 0
    full = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in iter_records(tmp_path / "a" / JOURNAL_NAME)}
    lines = (tmp_path / "a" / JOURNAL_NAME).read_text().splitlines(keepends=True)
    (tmp_path / "a" / JOURNAL_NAME).write_text("".join(lines[:20]))
    r2 = run_campaign(cfg, tmp_path / "a", resume=True)
    assert r2.resumed == 19
    again = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in iter_records(tmp_path / "a" / JOURNAL_NAME)}
    assert again == full
    r3 = run_campaign(cfg, tmp_path / "b", workers=2)  # each worker builds its own translator
    par = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in iter_records(tmp_path / "b" / JOURNAL_NAME)}
    assert par == full and r3.workers in (1, 2)


def test_code_translator_bundle_needs_trust(weights, plain, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--images", str(plain), "--model", "test_camera_campaign:tilt", "--transforms",
                 "test_translate_transform:plugin", "--tolerance", "0.05", "--frames", "3", "--out", str(out),
                 "--quiet"]) == 0
    b = sorted((out / "violations").iterdir())[0]
    info = json.loads((b / "bundle.json").read_text())
    assert info["translators"][0]["kind"] == "code" and info["translators"][0]["sha256"] is None
    from lidarmt.camera.replay import replay_camera_bundle

    with pytest.raises(UntrustedTranslatorError, match="--trust-code"):  # the model alone would be allowed
        replay_camera_bundle(b, info, trust_code=False, model="dave-orig")
    assert replay_camera_bundle(b, info, trust_code=True).same


def test_fuzz_refusals_are_one_line(shipped, plain, tmp_path, capsys):
    empty = tmp_path / "none"
    empty.mkdir()
    base = ["camera", "fuzz", "--images", str(plain), "--model", "test_camera_campaign:tilt", "--quiet",
            "--out", str(tmp_path / "o")]
    for extra, needle, weights_dir in ((["--transforms", "translator"], "train-translator", empty),
                                       (["--transforms", str(tmp_path / "gone" / "translator.pt")],
                                        "no such translator file", shipped),
                                       (["--transforms", "munit-tiny,sepia"], "sepia", shipped)):
        treg.WEIGHTS_DIR = weights_dir
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (extra, err)
    assert not (tmp_path / "o").exists(), "nothing is written on a user error"
