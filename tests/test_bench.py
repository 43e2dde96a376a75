"""lidarmt bench: the paired statistics by hand, and benches of small test SUTs end to end through the CLI."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_support import GridSut, StripRoi, make_scene, source_size, write_scenes

from lidarmt.bench.compare import decide
from lidarmt.bench.stats import holm, mcnemar_counts, mcnemar_exact, sign_test
from lidarmt.cli import main
from lidarmt.io.npz import save_frame_npz
from lidarmt.types import BOX_DTYPE, Labels, MetaType, ObstacleClass, Obstacles

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


# ----------------------------------------------------------------------------------------------- test SUTs


class DropSut(GridSut):
    """The grid SUT, but it loses its first obstacle on every follow-up (never on a source frame)."""

    name = "drop-test"

    def detect(self, frame, roi) -> Obstacles:
        out = super().detect(frame, roi)
        if len(frame) != source_size(frame.index) and len(out):
            return Obstacles(list(out)[1:])
        return out


def drop_sut(**kw) -> DropSut:
    return DropSut(**kw)


class NoCarSut(GridSut):
    """The grid SUT without cars, on every frame (the count relation is unchanged, car recall drops)."""

    name = "nocar-test"

    def detect(self, frame, roi) -> Obstacles:
        return Obstacles([o for o in super().detect(frame, roi) if o.cls != ObstacleClass.CAR])


def nocar_sut(**kw) -> NoCarSut:
    return NoCarSut(**kw)


def grid_sut(**kw) -> GridSut:
    return GridSut(**kw)


# ----------------------------------------------------------------------------------------------- statistics


@pytest.mark.slow
def test_mcnemar_exact_by_hand():
    # b = 1 (baseline only), c = 9 (candidate only): p = 2 * (C(10,9) + C(10,10)) / 2^10 = 22/1024
    t = mcnemar_counts(40, 5, 13, 1, 9)
    assert t.p == pytest.approx(22 / 1024, rel=1e-12)
    assert t.diff == pytest.approx(8 / 40) and t.odds_ratio == 9 and t.worse
    lo, hi = t.or_ci
    assert lo < 9 < hi and lo > 1  # the exact interval excludes 1 here, as p < 0.05 says
    # symmetric: swapping the modules gives the same p and the inverse odds ratio
    s = mcnemar_counts(40, 13, 5, 9, 1)
    assert s.p == t.p and s.odds_ratio == pytest.approx(1 / 9) and not s.worse
    # b = 0, c = 5: p = 2 / 2^5; odds ratio infinite
    z = mcnemar_counts(10, 0, 5, 0, 5)
    assert z.p == pytest.approx(0.0625) and math.isinf(z.odds_ratio) and z.to_dict()["odds_ratio"] == "inf"
    # no discordant pairs: nothing to tell apart
    assert mcnemar_counts(10, 4, 4, 0, 0).p == 1.0 and mcnemar_counts(10, 4, 4, 0, 0).odds_ratio is None
    # from the paired outcomes themselves
    a = [True, True, False, False, False, True]
    b = [True, False, True, True, False, True]
    e = mcnemar_exact(a, b)
    assert (e.n, e.k_a, e.k_b, e.b, e.c) == (6, 3, 4, 1, 2) and e.p == pytest.approx(1.0)
    with pytest.raises(ValueError):
        mcnemar_counts(10, 2, 2, 3, 3)  # b > k_a


def test_sign_test_holm_and_decisions_by_hand():
    t = sign_test([3, 2, 5, 1, 4, 2], [2, 1, 4, 0, 3, 2])  # worse on 5 units, one tie
    assert (t.worse, t.better) == (5, 0) and t.p == pytest.approx(2 / 32)
    assert sign_test([1, 2], [1, 2]).p == 1.0
    # Holm: sorted 0.01, 0.03, 0.04 -> 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # one family: worse (c > b), better, worse, nothing; Holm-adjusted 0.04, 0.06, 0.06, 0.5
    rows = [{"p": 0.01, "b": 0, "c": 9}, {"p": 0.02, "b": 9, "c": 1}, {"p": 0.03, "b": 1, "c": 8},
            {"p": 0.5, "b": 2, "c": 3}]
    decide(rows, alpha=0.05, correction="holm")
    assert [r["p_adj"] for r in rows] == pytest.approx([0.04, 0.06, 0.06, 0.5])
    assert [r["regression"] for r in rows] == [True, False, False, False]
    assert not any(r["improvement"] for r in rows)
    decide(rows, alpha=0.05, correction="none")
    assert [r["regression"] for r in rows] == [True, False, True, False]
    assert [r["improvement"] for r in rows] == [False, True, False, False]


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("bench") / "frames", 6)


_CLS_META = {ObstacleClass.CAR: MetaType.SMALLMOT, ObstacleClass.PEDESTRIAN: MetaType.PEDESTRIAN,
             ObstacleClass.CYCLIST: MetaType.NONMOT, ObstacleClass.UNKNOWN: MetaType.UNKNOWN}


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """Scenes whose ground truth is what the grid SUT sees (boxes of its obstacles, point instances)."""
    folder = tmp_path_factory.mktemp("bench") / "labelled"
    folder.mkdir()
    sut, roi = GridSut(), StripRoi()
    for i in range(8):
        f = make_scene(i)
        obs = list(sut.detect(f, roi))
        boxes = np.zeros(len(obs), dtype=BOX_DTYPE)
        inst = np.full(len(f), -1, np.int32)
        meta = np.full(len(f), -1, np.int8)
        for k, o in enumerate(obs):
            boxes[k] = (o.center[0], o.center[1], o.center[2] + o.height / 2, o.length, o.width, max(o.height, 0.1),
                        0.0, int(_CLS_META[o.cls]), k)
            inst[o.point_indices], meta[o.point_indices] = k, int(_CLS_META[o.cls])
        f.labels = Labels(boxes, inst, meta)
        save_frame_npz(folder / f"{i:06d}.npz", f, compress=False)
    return folder


def _bench(rec: Path, out: Path, *suts: str, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["bench", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10,300", "--trials", "3",
            "--radius", "30", "--out", str(out), "--quiet"]
    for s in suts:
        args += ["--sut", s]
    return [*args, *extra]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _row(summary: dict, relation: str, n: int, k: int = 0) -> dict:
    return next(r for r in summary["comparisons"][k]["rows"] if r["relation"] == relation and r["n"] == n)


# ----------------------------------------------------------------------------------------------- benches


@pytest.mark.slow
def test_identical_modules_no_regression(rec, tmp_path, capsys):
    out = tmp_path / "same"
    assert main(_bench(rec, out, "test_bench:grid_sut", "test_bench:grid_sut", extra=("--fail-on-regression",))) == 0
    s = _summary(out)
    assert [m["name"] for m in s["modules"]] == ["test_bench-grid_sut", "test_bench-grid_sut-2"]
    assert s["verdict"] == "no regression" and s["regressions"] == 0
    rows = s["comparisons"][0]["rows"]
    assert len(rows) == 7 * 2  # (count, subset, 4 classes, crash/timeout) x 2 n
    assert all(r["b"] == 0 and r["c"] == 0 and r["p"] == 1.0 and r["pairs"] == 18 for r in rows)
    assert all(r["k_baseline"] == r["k_candidate"] for r in rows)
    agree = s["comparisons"][0]["source_agreement"]
    assert agree["frames"] == agree["same_count"] == 6 and agree["mean_abs_diff"] == 0
    junit = (out / "junit.xml").read_text()
    assert 'tests="14" failures="0"' in junit
    for name in ("report.md", "table.txt", "relations.png", "class-car.png", "class-unknown.png", "bench.json"):
        assert (out / name).is_file(), name
    for m in s["modules"]:
        assert (out / m["name"] / "journal.jsonl").is_file() and m["speed"]["median_ms"] > 0
    assert "NO REGRESSION" in capsys.readouterr().out


@pytest.mark.slow
def test_regression_detected_and_fail_on_regression(rec, tmp_path, capsys):
    out = tmp_path / "reg"
    rc = main(_bench(rec, out, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--fail-on-regression",)))
    assert rc == 1
    s = _summary(out)
    assert s["verdict"] == "regression"
    r = _row(s, "count", 10)
    # the candidate loses an obstacle on every follow-up: each of the 18 pairs violates |O| <= |O'| (unless the
    # injected points added one), the baseline none at n = 10
    assert r["pairs"] == 18 and r["b"] == 0 and r["c"] == r["k_candidate"] >= 15
    assert r["p"] == pytest.approx(2 * 0.5 ** r["c"]) and r["regression"] and r["diff"] > 0.8
    assert _row(s, "subset", 10)["regression"]
    # the report set tells the same: a failed JUnit case per regressed row, the verdict line in report.md
    junit = (out / "junit.xml").read_text()
    assert junit.count("<failure") == s["regressions"] >= 2
    assert "REGRESSION" in (out / "report.md").read_text()
    printed = capsys.readouterr().out
    assert "REGRESSION" in printed and "exact McNemar" in printed
    # the same bench resumed: nothing to run, the same summary
    before = (out / "summary.json").read_text()
    assert main(_bench(rec, out, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--resume",))) == 0
    assert (out / "summary.json").read_text() == before


@pytest.mark.slow
def test_existing_folder_and_bad_arguments_are_one_line(rec, tmp_path, capsys):
    out = tmp_path / "b"
    assert main(_bench(rec, out, "test_bench:grid_sut", "test_bench:grid_sut")) == 0
    capsys.readouterr()
    cases = [
        (_bench(rec, out, "test_bench:grid_sut", "test_bench:grid_sut"), "--resume"),  # exists
        (_bench(rec, out, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--resume",)), "repeat its modules"),
        (_bench(rec, out, "test_bench:grid_sut", "test_bench:grid_sut", extra=("--resume", "--seed", "3")),
         "other settings"),
        (_bench(rec, tmp_path / "c", "test_bench:grid_sut"), "--baseline"),  # one module
        (_bench(rec, tmp_path / "c", "test_bench:grid_sut", "test_bench:grid_sut", extra=("--alpha", "2")), "--alpha"),
        (_bench(rec, tmp_path / "c", "test_bench:grid_sut", "test_bench:grid_sut", extra=("--sut-option", "3:cell=2")),
         "module 3"),
        (_bench(rec, tmp_path / "c", "test_bench:grid_sut", "test_bench:nosuch"), "nosuch"),
    ]
    for args, word in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("lidarmt: error:") and word in err, err
    assert not (tmp_path / "c").exists()  # nothing half-made by a refused bench
    # --force starts over
    assert main(_bench(rec, out, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--force",))) == 0
    assert [m["name"] for m in _summary(out)["modules"]] == ["test_bench-grid_sut", "test_bench-drop_sut"]
    assert not (out / "test_bench-grid_sut-2").exists()


@pytest.mark.slow
def test_baseline_reused_from_an_earlier_bench(rec, tmp_path, capsys):
    first = tmp_path / "v1"
    assert main(_bench(rec, first, "test_bench:grid_sut", "test_bench:drop_sut")) == 0
    second = tmp_path / "v2"
    assert main(_bench(rec, second, "test_bench:drop_sut", extra=("--baseline", str(first), "--trust-code"))) == 0
    s1, s2 = _summary(first), _summary(second)
    base = s2["modules"][0]
    assert base["name"] == "test_bench-grid_sut" and base["origin"] and base["role"] == "baseline"
    assert (second / "test_bench-grid_sut" / "journal.jsonl").read_bytes() == \
        (first / "test_bench-grid_sut" / "journal.jsonl").read_bytes()
    for a, b in zip(s1["comparisons"][0]["rows"], s2["comparisons"][0]["rows"], strict=True):
        assert (a["b"], a["c"], a["p"]) == (b["b"], b["c"], b["p"])
    # a baseline run with other inputs is refused in one line
    capsys.readouterr()
    for extra in (("--seed", "5"), ("--n", "10"), ("--frames", "4")):
        args = _bench(rec, tmp_path / "v3", "test_bench:drop_sut", extra=("--baseline", str(first), "--trust-code", *extra))
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--baseline" in err and "same frames" in err, err
    (tmp_path / "empty").mkdir()
    assert main(_bench(rec, tmp_path / "v3", "test_bench:drop_sut", extra=("--baseline", str(tmp_path / "empty")))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds no campaign journal" in err, err


@pytest.mark.slow
def test_module_folders_that_lead_outside_are_refused(rec, tmp_path, capsys):
    """Issue 29 items 6 and 12: a module folder that is a symbolic link out of its bench folder is neither read
    (``--baseline``: the baseline's journal would be copied from anywhere) nor written through (``--resume``:
    a file outside replaced, a record appended, a lock left)."""
    import os
    import shutil

    first = tmp_path / "v1"
    assert main(_bench(rec, first, "test_bench:grid_sut", "test_bench:drop_sut")) == 0
    elsewhere = tmp_path / "elsewhere"
    shutil.move(first / "test_bench-grid_sut", elsewhere)
    os.symlink("../elsewhere", first / "test_bench-grid_sut")
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(_bench(rec, tmp_path / "v2", "test_bench:drop_sut", extra=("--baseline", str(first),
                                                                            "--trust-code"))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--baseline" in err and "outside" in err, err
    assert not (tmp_path / "v2" / "test_bench-grid_sut").exists()
    assert main(_bench(rec, first, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--resume",))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "module folder" in err and "outside" in err, err
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == before
    # --force starts over: the link is removed, never what it points at
    assert main(_bench(rec, first, "test_bench:grid_sut", "test_bench:drop_sut", extra=("--force",))) == 0
    assert not (first / "test_bench-grid_sut").is_symlink()
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == before


@pytest.mark.slow
def test_a_baseline_made_on_another_isa_is_refused_unless_told(rec, tmp_path, capsys):
    from lidarmt._machine import isa_label, record

    first = tmp_path / "v1"
    args = ["bench", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10", "--frames", "2",
            "--radius", "30", "--quiet", "--sut", "test_bench:drop_sut", "--trust-code"]
    assert main(["bench", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10", "--frames", "2",
                 "--radius", "30", "--out", str(first), "--quiet", "--sut", "test_bench:grid_sut",
                 "--sut", "test_bench:drop_sut"]) == 0
    journal = first / "test_bench-grid_sut" / "journal.jsonl"
    header, *rest = journal.read_text().splitlines(keepends=True)
    assert json.loads(header)["machine"] == record()  # each journal names the machine its verdicts came from
    # the same baseline as if run on an AVX2 laptop
    other = {"cpu": "another CPU", "isa": "avx2" if record()["isa"] != "avx2" else "amx", "bf16": "emulated",
             "cores": 16}
    journal.write_text(json.dumps({**json.loads(header), "machine": other}) + "\n" + "".join(rest))
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "v2"), "--baseline", str(first)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"the --baseline ran on {other['isa']}" in err, err
    assert f"this machine ran on {isa_label(record())}" in err and "--mixed-isa" in err
    assert not (tmp_path / "v2").exists()  # refused before anything was made
    assert main([*args, "--out", str(tmp_path / "v3"), "--baseline", str(first), "--mixed-isa"]) == 0
    run = json.loads((tmp_path / "v3" / "run.json").read_text())
    assert run["isas"] == sorted({other["isa"], isa_label(record())})
    assert "--mixed-isa: comparing verdicts made on" in capsys.readouterr().err


@pytest.mark.slow
def test_recall_regression_on_labelled_frames(labelled, tmp_path):
    out = tmp_path / "recall"
    args = ["bench", "--bag", str(labelled), "--map", "test_fuzz_support:strip_roi", "--n", "10", "--radius", "30",
            "--sut", "test_bench:grid_sut", "--sut", "test_bench:nocar_sut", "--out", str(out), "--quiet",
            "--correction", "none", "--min-points", "3"]
    assert main(args) == 0
    s = _summary(out)
    base, cand = (m["detection"]["classes"] for m in s["modules"])
    # the baseline's own boxes are the ground truth: perfect precision and recall; the candidate finds no car
    assert base["car"]["gt"] > 0 and base["car"]["recall"] == 1.0 and base["car"]["precision"] == 1.0
    assert cand["car"]["recall"] == 0.0 and cand["car"]["gt"] == base["car"]["gt"]
    rec_rows = {r["relation"]: r for r in s["comparisons"][0]["recall"]}
    car = rec_rows["recall:car"]
    assert car["worse"] == 8 and car["better"] == 0 and car["p"] == pytest.approx(2 / 2 ** 8)
    assert car["regression"] and s["verdict"] == "regression"
    if "recall:pedestrian" in rec_rows:
        assert not rec_rows["recall:pedestrian"]["regression"]
    assert "recall" in (out / "table.txt").read_text()
    # cached per module: a resumed bench does not evaluate again (same file, same numbers)
    det = (out / "test_bench-grid_sut" / "detection.json").read_text()
    assert main([*args, "--resume"]) == 0
    assert (out / "test_bench-grid_sut" / "detection.json").read_text() == det


@pytest.mark.slow
def test_baseline_from_a_fuzz_run_folder(rec, tmp_path):
    fuzz = tmp_path / "fuzz-run"
    assert main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut", "test_bench:grid_sut",
                 "--n", "10,300", "--trials", "3", "--radius", "30", "--out", str(fuzz), "--quiet",
                 "--bundles", "0"]) == 0
    out = tmp_path / "bench"
    assert main(_bench(rec, out, "test_bench:drop_sut", extra=("--baseline", str(fuzz), "--trust-code"))) == 0
    s = _summary(out)
    assert [m["name"] for m in s["modules"]] == ["test_bench-grid_sut", "test_bench-drop_sut"]
    assert s["modules"][0]["origin"] == str(fuzz) and _row(s, "count", 10)["c"] >= 15


def test_module_names_and_options():
    from lidarmt.bench.errors import BenchArgumentError
    from lidarmt.bench.folder import folder_names, module_label
    from lidarmt.cli.bench import parse_module_options

    assert module_label("apollo", {"mode": "fast"}) == "apollo-mode=fast"
    assert module_label("apollo-512", {"weights": "runs/x/new.pt"}) == "apollo-512-weights=new.pt"
    assert folder_names(["apollo", "apollo", "pkg.mod-make", "a b/c", "violations"]) == \
        ["apollo", "apollo-2", "pkg.mod-make", "a-b-c", "violations-2"]
    opts = parse_module_options(["2:weights=new.pt", "threads=1", "1:mode=\"exact\"", "2:grid=512"], 3,
                                flag="--sut-option", error=BenchArgumentError)
    assert opts == [{"threads": 1, "mode": "exact"}, {"weights": "new.pt", "threads": 1, "grid": 512},
                    {"threads": 1}]
    for bad in ("4:x=1", "0:x=1", "novalue", "2:=3"):
        with pytest.raises(BenchArgumentError):
            parse_module_options([bad], 3, flag="--sut-option", error=BenchArgumentError)
