"""Camera campaigns on the shared engine: relations, tables, resume, workers, findings, bundles and replay."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs, transform_seed
from lidarmt.camera.models.base import InputSpec
from lidarmt.camera.relations import CameraTally, Criteria
from lidarmt.camera.transforms.registry import select
from lidarmt.cli import main
from lidarmt.engine.campaign import load_tally, run_campaign
from lidarmt.engine.journal import JOURNAL_NAME, iter_records

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


# ----------------------------------------------------------------------------------------------- fixtures


class TiltModel:
    """A cheap steering 'model': steers towards the brighter half of the image (mirror-antisymmetric)."""

    name = "tilt"
    input_spec = InputSpec(48, 64)
    module = None

    def __init__(self, gain: float = 0.8, fail: str = "") -> None:
        self.gain, self.fail = gain, fail

    def predict(self, images: np.ndarray) -> np.ndarray:
        x = images.astype(np.float64)
        w = x.shape[2]
        left, right = x[:, :, : w // 2].mean(axis=(1, 2, 3)), x[:, :, w - w // 2:].mean(axis=(1, 2, 3))
        out = self.gain * (left - right) / 255.0
        if self.fail == "nan" and len(images) > 1:
            out[0] = np.nan
        if self.fail == "shape":
            return out[:-1]
        if self.fail == "raise" and len(images) > 1:
            raise ZeroDivisionError("boom in the model")
        return out


def tilt(**kw) -> TiltModel:
    return TiltModel(**kw)


def write_udacity(folder: Path, n: int = 6, *, labels: bool = True) -> Path:
    import cv2

    (folder / "center").mkdir(parents=True)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        img = np.zeros((48, 64, 3), np.uint8)
        img[:, :32] = 40 + 20 * i
        img[:, 32:] = 160 - 15 * i
        img = np.clip(img.astype(int) + rng.integers(0, 30, img.shape), 0, 255).astype(np.uint8)
        fid = str(1479425441000000000 + i * 100000000)
        cv2.imwrite(str(folder / "center" / f"{fid}.jpg"), img[..., ::-1])
        rows.append((fid, 0.8 * ((40 + 20 * i) - (160 - 15 * i)) / 255.0 + 0.01 * (i % 2)))
    if labels:
        with open(folder / "steering.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["frame_id", "steering_angle"])
            w.writerows(rows)
    return folder


@pytest.fixture(scope="module")
def udacity(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("cam") / "drive")


def config(src: Path, *, transforms: str = "brightness,rotation,fog,mirror", model: str = "test_camera_campaign:tilt",
           options: dict | None = None, frames=(0, 2, 3, 5), **kw) -> CameraCampaignConfig:
    return CameraCampaignConfig(str(src), (ModelRef(model, options or {}),), transform_refs(select(transforms)),
                                tuple(frames), **kw)


# ----------------------------------------------------------------------------------------------- relations


def _rec(key, label, pred, pred_t):
    return {"key": list(key), "status": "ok", "label": label, "pred": pred, "pred_t": pred_t}


def test_deeptest_relation_and_filter_by_hand():
    t = CameraTally(["m"], [("brightness", "simple", "keep"), ("fog", "weather", "keep"),
                            ("mirror", "mirror", "negate")])
    labels = [0.1, -0.2, 0.0, 0.3]
    preds = [0.12, -0.15, 0.05, 0.25]  # MSE_orig = (0.0004 + 0.0025 + 0.0025 + 0.0025) / 4
    orig = float(np.mean([(p - lab) ** 2 for p, lab in zip(preds, labels, strict=True)]))
    for f in range(4):
        t.add(_rec((f, 0, 0, 0, 0), labels[f], preds[f], preds[f] + (0.3 if f == 1 else 0.0)))  # one big error
        t.add(_rec((f, 0, 1, 0, 0), labels[f], preds[f], preds[f]))
        t.add(_rec((f, 0, 2, 0, 0), labels[f], preds[f], -preds[f] + (0.5 if f == 2 else 0.0)))
    t.add(_rec((0, 0, 0, 0, 0), 9.0, 9.0, 9.0))  # a duplicate key is ignored
    assert t.done == 12
    assert t.mse_orig(0) == pytest.approx(orig)
    # Eq. 2 at λ = 5: only the perturbed pairs err
    assert t.deeptest_mask(0, 0, 0, 5.0).tolist() == [False, True, False, False]
    assert t.deeptest_mask(0, 2, 0, 5.0).tolist() == [False, False, True, False]  # mirror expects −label
    assert not t.deeptest_mask(0, 1, 0, 2.0).any() and t.deeptest_mask(0, 1, 0, 1.0).sum() == 3  # above the mean
    # Eq. 3: the brightness setting's MSE moved by (0.35² − 0.05²)/4 = 0.03: filtered at ε = 0.02, kept at 0.04
    mse_b = t.mse_group(0, 0, 0)
    assert abs(mse_b - orig) == pytest.approx(((0.35) ** 2 - 0.05 ** 2) / 4)
    assert t.deeptest_count(0, 0, 0, 5.0, 0.02) == 0 and t.deeptest_count(0, 0, 0, 5.0, 0.04) == 1
    assert t.deeptest_count(0, 2, 0, 5.0, 0.0001) == 1  # the mirror is never filtered
    # DeepRoad: |Δθ| in degrees against the seed's prediction
    assert t.deeproad_mask(0, 0, 0, 10.0).tolist() == [False, True, False, False]  # 0.3 rad = 17°
    assert t.deeproad_mask(0, 0, 0, 20.0).sum() == 0
    v = t.violations(Criteria(5.0, 0.04, 10.0))
    assert [k for k, _ in v] == [(2, 0, 2, 0, 0), (1, 0, 0, 0, 0)]  # worst first
    s = t.summary({"frames": [0, 1, 2, 3]}, Criteria(5.0, 0.04, 10.0), [["β=10"], ["fog 0.25"], ["mirror"]])
    assert s["labelled"] and s["table7"]["rows"][4]["lambda"] == 5.0
    assert s["table7"]["rows"][4]["simple"]["0.04"] == 1 and s["table7"]["rows"][4]["mirror"] == 1
    assert {r["transform"]: r["m"] for r in s["table8"]["rows"]} == {"brightness": 1, "fog": 0, "mirror": 1}


def test_label_free_tally_uses_deeproad():
    t = CameraTally(["m"], [("fog", "weather", "keep")])
    t.add(_rec((0, 0, 0, 0, 0), None, 0.0, math.radians(25)))
    t.add(_rec((1, 0, 0, 0, 0), None, 0.0, math.radians(5)))
    assert not t.has_labels() and t.mse_orig(0) is None
    assert [k for k, _ in t.violations(Criteria(tolerance_deg=10))] == [(0, 0, 0, 0, 0)]
    s = t.summary({}, Criteria(), [["fog 0.25"]])
    assert "table7" not in s and s["deeproad"][0]["inconsistent"] == {"10": 1, "20": 1, "30": 0, "40": 0}


def test_transform_seed_is_stable_and_distinct():
    a = transform_seed(0, 5, "fog", 2, 0)
    assert a == transform_seed(0, 5, "fog", 2, 0)
    assert len({a, transform_seed(1, 5, "fog", 2, 0), transform_seed(0, 6, "fog", 2, 0),
                transform_seed(0, 5, "rain", 2, 0), transform_seed(0, 5, "fog", 3, 0),
                transform_seed(0, 5, "fog", 2, 1)}) == 6


# ----------------------------------------------------------------------------------------------- campaigns


@pytest.mark.slow
def test_campaign_totals_resume_and_workers_agree(udacity, tmp_path):
    cfg = config(udacity)
    r = run_campaign(cfg, tmp_path / "a")
    per = 10 + 10 + 4 + 1
    assert r.ran == 4 * per == r.tally.done and r.tally.findings() == 0
    recs = list(iter_records(tmp_path / "a" / JOURNAL_NAME))
    assert len(recs) == 4 * per and all(x["status"] == "ok" for x in recs)
    assert {x["transform"] for x in recs} == {"brightness", "rotation", "fog", "mirror"}
    # labels come from the CSV; the mirror relation holds for this antisymmetric model
    assert all(x["label"] is not None for x in recs)
    mirror = [x for x in recs if x["transform"] == "mirror"]
    assert all(abs(x["pred_t"] + x["pred"]) < 1e-9 for x in mirror)
    # the journal re-folds to the same summary; a run with 2 workers gives the same records
    c2, t2 = load_tally(tmp_path / "a")
    crit = Criteria()
    assert t2.summary(c2.to_dict(), crit, c2.param_labels()) == r.tally.summary(cfg.to_dict(), crit,
                                                                                cfg.param_labels())
    r2 = run_campaign(cfg, tmp_path / "b", workers=2)
    a = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in recs}
    b = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in iter_records(tmp_path / "b" / JOURNAL_NAME)}
    assert a == b and r2.workers in (1, 2)
    # cut the journal and resume: the same records, none twice
    lines = (tmp_path / "a" / JOURNAL_NAME).read_text().splitlines(keepends=True)
    (tmp_path / "a" / JOURNAL_NAME).write_text("".join(lines[:30]) + lines[30][:17])  # a torn last line
    r3 = run_campaign(cfg, tmp_path / "a", resume=True)
    assert r3.resumed == 29 and r3.ran == 4 * per - 29
    c = {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in iter_records(tmp_path / "a" / JOURNAL_NAME)}
    assert c == a


@pytest.mark.parametrize("fail,needle", [("raise", "ZeroDivisionError: boom in the model"),
                                         ("nan", "non-finite"), ("shape", "angles for")])
def test_model_failures_are_findings(udacity, tmp_path, fail, needle):
    cfg = config(udacity, transforms="brightness", options={"fail": fail}, frames=(0, 1))
    r = run_campaign(cfg, tmp_path / "run")
    recs = list(iter_records(tmp_path / "run" / JOURNAL_NAME))
    assert len(recs) == 20
    bad = [x for x in recs if x["status"] == "crash"]
    assert bad and needle in bad[0]["error"]
    assert r.tally.findings() == len(bad)


@pytest.mark.slow
def test_cli_end_to_end_tables_bundles_and_replay(udacity, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["camera", "fuzz", "--images", str(udacity), "--model", "test_camera_campaign:tilt",
                 "--model-option", "gain=1.0", "--transforms", "brightness,contrast,fog,mirror", "--out", str(out),
                 "--quiet", "--lambda", "1", "--bundles", "1"])
    text = capsys.readouterr().out
    assert code == 0
    assert "Table 7" in text and "Table 8" in text and "DeepRoad" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["labelled"] and summary["pairs_done"] == 6 * (10 + 10 + 4 + 1)
    for name in ("report.md", "junit.xml", "table.txt", "mse.png", "run.json"):
        assert (out / name).is_file(), name
    bundles = sorted((out / "violations").iterdir())
    # gain 1 over labels made for 0.8 (gain 3 errs on every seed already: those errors are set apart)
    assert bundles, "a gain of 1 over labels made for 0.8 must violate Eq. 2 at λ = 1 under some transformation"
    assert (out / "worst.png").is_file()
    b = bundles[0]
    for name in ("seed.png", "transformed.png", "window.npz", "pair.png", "report.md", "bundle.json",
                 "MANIFEST.json"):
        assert (b / name).is_file(), name
    # the bundle's MCAP is stamped with the seed frame's time (the Udacity frame_id, ns), not 1970
    from lidarmt.engine.mcap import describe_mcap

    got = describe_mcap(b / "bundle.mcap")
    fid = int(json.loads((b / "bundle.json").read_text())["frame_id"])
    assert abs(got["start_ns"] - fid) < 1000 and got["end_ns"] == got["start_ns"]
    # the bundle names module:callable code: replay refuses it without --trust-code, replays with it
    assert main(["replay", str(b)]) == 2
    assert "--trust-code" in capsys.readouterr().err
    assert main(["replay", str(b), "--trust-code"]) == 0
    assert "bit for bit" in capsys.readouterr().out
    # a tampered transformed window is caught
    info = json.loads((b / "bundle.json").read_text())
    with np.load(b / "window.npz") as z:
        seed, tr = z["seed"], z["transformed"].copy()
    tr[..., 0] ^= 1
    np.savez_compressed(b / "window.npz", seed=seed, transformed=tr)
    assert main(["replay", str(b), "--trust-code"]) == 1
    assert "MANIFEST" in capsys.readouterr().out
    from lidarmt.engine.manifest import write_manifest

    write_manifest(b, ["seed.png", "transformed.png", "window.npz", "pair.png", "report.md", "bundle.json"])
    assert main(["replay", str(b), "--trust-code"]) == 1  # resealed: the regenerated pixels differ
    assert "regenerated" in capsys.readouterr().out
    assert info["kind"] == "camera" and info["relation"]["name"] == "deeptest"


def test_cli_without_labels_uses_deeproad_and_fail_on_violation(tmp_path, capsys):
    src = write_udacity(tmp_path / "plain", labels=False) / "center"
    out = tmp_path / "run"
    code = main(["camera", "fuzz", "--images", str(src), "--model", "test_camera_campaign:tilt", "--transforms",
                 "mirror,brightness", "--out", str(out), "--quiet", "--tolerance", "1", "--fail-on-violation"])
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["labelled"] and "table7" not in summary and "Table 7" not in text
    assert code == 1 and "DeepRoad at 1°" in text


def test_cli_user_errors_are_one_line(udacity, tmp_path, capsys):
    base = ["camera", "fuzz", "--images", str(udacity), "--out", str(tmp_path / "o"), "--quiet"]
    for extra, needle in ((["--model", "no-such-model"], "no-such-model"),
                          (["--transforms", "sepia"], "sepia"),
                          (["--lambda", "-1"], "--lambda"),
                          (["--frames", "99"], "--frames 99")):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (extra, err)
    assert not (tmp_path / "o").exists(), "nothing is written on a user error"
    assert main(["camera", "fuzz", "--images", str(tmp_path / "missing"), "--quiet"]) == 2
