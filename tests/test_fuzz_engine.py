"""The shared campaign engine: run-folder lock, worker clamping, automatic time limits, interrupted bundles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_fuzz_support import write_scenes

from lidarmt.engine import campaign as engine
from lidarmt.engine import timeouts
from lidarmt.engine.campaign import RunLock, auto_timeout, clamp_workers, config_from_dict, run_campaign
from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError, FuzzOutputError
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.mr1.campaign import CampaignConfig
from lidarmt.lidar.mr1.inject import Region
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("rec") / "frames", 3)


def config(rec: Path, sut: str = "test_fuzz_support:grid_sut", **kw) -> CampaignConfig:
    opts = kw.pop("sut_options", {})
    base = dict(ns=(10, 1000), frames=(0, 1, 2), seed=0, trials=1, region=Region.disk(30.0))
    base.update(kw)
    return CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"), SutSpec(sut, opts), **base)


def test_lock_refuses_a_second_holder_in_another_process(tmp_path):
    out = tmp_path / "run"
    with RunLock(out) as lock:
        lock.acquire()
        with RunLock(out):  # re-entrant in one process
            pass
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                "from lidarmt.engine.campaign import RunLock\n"
                "from lidarmt.errors import UserError\n"
                f"try:\n    RunLock({str(out)!r}).__enter__()\nexcept UserError as e:\n    print(e); sys.exit(2)\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "another lidarmt campaign" in p.stdout and str(os.getpid()) in p.stdout
    # released: now another process gets it
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout


@pytest.mark.slow
def test_two_resumes_at_once_do_not_interleave(rec, tmp_path):
    """The second campaign on a run folder gets one clear line; the journal holds each pair once."""
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}"}
    out = tmp_path / "run"
    base = [sys.executable, "-m", "lidarmt", "fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi",
            "--sut", "test_fuzz_support:hang_sut", "--sut-option", "bad_frame=99", "--sut-option", "sleep=0",
            "--n", "10,1000", "--trials", "3", "--radius", "30", "--out", str(out), "--quiet", "--bundles", "0"]
    first = subprocess.Popen(base, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / JOURNAL_NAME).exists():
        time.sleep(0.02)
    second = subprocess.run([*base, "--resume"], env=env, capture_output=True, text=True, timeout=120)
    first.communicate(timeout=120)
    assert first.returncode == 0
    if second.returncode == 2:
        assert "another lidarmt campaign" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    else:  # the first had already finished: the resume found nothing left to do
        assert second.returncode == 0
    recs = list(iter_records(out / JOURNAL_NAME))
    assert len(recs) == 3 * 2 * 3 == len({(r["frame"], r["n"], r["trial"]) for r in recs})


def test_resume_of_a_locked_folder_is_refused_in_process(rec, tmp_path):
    out = tmp_path / "run"
    run_campaign(config(rec), out)
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
            "from lidarmt.engine.campaign import RunLock\n"
            f"l = RunLock({str(out)!r}).__enter__(); print('locked', flush=True); time.sleep(30)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FuzzOutputError, match="another lidarmt campaign"):
            run_campaign(config(rec), out, resume=True)
    finally:
        holder.kill()
        holder.wait()


def test_clamp_workers(monkeypatch):
    monkeypatch.setattr(engine, "_cores", lambda: 2)
    monkeypatch.setattr(engine, "_available_memory", lambda: 3 * 2**30)
    assert clamp_workers(1, items=10, per_worker=2**30) == (1, "")
    n, note = clamp_workers(1000, items=10, per_worker=2**29)
    assert n == 2 and "1000" in note and "CPU core" in note
    n, note = clamp_workers(8, items=10, per_worker=2 * 2**30)
    assert n == 1 and "memory" in note and "GiB" in note
    n, note = clamp_workers(8, items=1, per_worker=1)
    assert n == 1 and "1 source item" in note
    with pytest.raises(FuzzArgumentError):
        clamp_workers(0, items=3, per_worker=1)


@pytest.mark.slow
def test_workers_1000_reports_the_number_used(rec, tmp_path, capsys):
    from lidarmt.cli import main

    sys.path.insert(0, str(TESTS))
    out = tmp_path / "run"
    code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                 "test_fuzz_support:grid_sut", "--n", "10", "--radius", "30", "--out", str(out), "--quiet",
                 "--bundles", "0", "--workers", "1000"])
    assert code == 0
    err = capsys.readouterr().err
    assert "--workers 1000: using" in err
    used = json.loads((out / "run.json").read_text())["workers"]
    assert 1 <= used <= min(3, os.cpu_count() or 1)
    assert "1000" not in (out / "report.md").read_text().split("throughput")[-1].split("\n")[0]


def test_auto_timeout_scales_with_the_first_call():
    assert auto_timeout(None) == engine.AUTO_TIMEOUT_FIRST
    assert auto_timeout(0.01) == engine.AUTO_TIMEOUT_MIN
    assert auto_timeout(10.0) == 10.0 * engine.AUTO_TIMEOUT_FACTOR
    # the limit scales with the call's units of work: a batch of 64 images gets 64 times one image's limit
    assert auto_timeout(1.0, 64) == 64 * engine.AUTO_TIMEOUT_FACTOR
    assert auto_timeout(0.01, 64) == engine.AUTO_TIMEOUT_MIN


def test_a_hung_sut_without_timeout_is_stopped(rec, tmp_path, monkeypatch):
    """No --timeout: the automatic limit (scaled from the first call) turns a hang into a finding."""
    monkeypatch.setattr(timeouts, "AUTO_TIMEOUT_MIN", 1.0)
    monkeypatch.setattr(timeouts, "AUTO_TIMEOUT_FACTOR", 5.0)
    cfg = config(rec, "test_fuzz_support:hang_sut", sut_options={"bad_frame": 2, "sleep": 600}, ns=(10,))
    t0 = time.perf_counter()
    r = run_campaign(cfg, tmp_path / "run")
    assert time.perf_counter() - t0 < 300  # stopped, not slept out (a margin for a loaded machine)
    assert r.tally.by_n[10].timeouts == 1 and r.tally.by_n[10].pairs == 2


def test_config_from_dict_only_knows_its_own_kinds(rec):
    cfg = config(rec)
    assert config_from_dict(cfg.to_dict()) == cfg
    with pytest.raises(FuzzInputError, match="unknown campaign kind"):
        config_from_dict({**cfg.to_dict(), "kind": "os:system"})


def test_ctrl_c_during_bundles_says_how_to_resume(rec, tmp_path, capsys, monkeypatch):
    from lidarmt.cli import main

    sys.path.insert(0, str(TESTS))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "make_bundles", interrupted)
    code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                 "test_fuzz_support:grid_sut", "--n", "1000", "--radius", "30", "--out", str(tmp_path / "o"),
                 "--quiet", "--bundles", "1"])
    assert code == 130
    err = capsys.readouterr().err
    assert "interrupted: every verdict so far is in" in err and "--resume" in err


# --- the SUT boundary inside campaigns (issue 9, items 5 and 7)


class _Junk:
    """A SUT that returns what it was built to return (malformed output) or writes into its input."""

    name = "junk"

    def __init__(self, what: str = "string") -> None:
        self.what = what

    def detect(self, frame, roi):
        from test_fuzz_support import GridSut

        if self.what == "string":
            return "no obstacles today"
        if self.what == "none":
            return [None]
        if self.what == "index":
            obs = list(GridSut().detect(frame, roi))
            if not obs:
                raise AssertionError("fixture frame without obstacles")
            import dataclasses

            return [dataclasses.replace(obs[0], point_indices=__import__("numpy").array([10**12]))]
        if self.what == "mutate":
            pts = frame.points
            try:
                pts["x"][:10] = 0.0
            except ValueError:  # read-only: force it
                pts.setflags(write=True)
                pts["x"][:10] = 0.0
            return GridSut().detect(frame, roi)
        raise AssertionError(self.what)


def junk_sut(what: str = "string") -> _Junk:
    return _Junk(what)


@pytest.mark.parametrize("what,needle", [("string", "str"), ("none", "None"), ("index", "1000000000000"),
                                         ("mutate", "")])
def test_malformed_or_mutating_sut_is_a_crash_finding(rec, tmp_path, what, needle):
    sys.path.insert(0, str(TESTS))
    cfg = config(rec, "test_fuzz_engine:junk_sut", sut_options={"what": what}, ns=(10,), frames=(0, 1))
    r = run_campaign(cfg, tmp_path / "run")
    recs = list(iter_records(tmp_path / "run" / JOURNAL_NAME))
    assert len(recs) == 2 and all(x["status"] == "crash" for x in recs), recs
    assert r.tally.by_n[10].crashes == 2
    kind = "InputModified" if what == "mutate" else "MalformedOutput"
    assert kind in recs[0]["error"] and needle in recs[0]["error"]
    # the source frames on disk are untouched
    from lidarmt.lidar.specs import open_source

    src = open_source(SourceSpec(str(rec)))
    assert float(abs(src[0].points["x"][:10]).sum()) > 0
