"""Campaigns: totals, findings (crash, timeout), worker processes, resume after SIGKILL, bundles and replay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_fuzz_support import write_scenes

from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.mr1.campaign import CampaignConfig, load_tally, make_bundles, run_campaign, violating_keys
from lidarmt.lidar.mr1.inject import Region
from lidarmt.lidar.mr1.replay import replay_bundle
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("rec") / "frames", 5)


def config(rec: Path, sut: str = "test_fuzz_support:grid_sut", **kw) -> CampaignConfig:
    opts = kw.pop("sut_options", {})
    base = dict(ns=(10, 300, 1000), frames=(0, 1, 2, 3), seed=0, trials=2, region=Region.disk(30.0))
    base.update(kw)
    return CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"), SutSpec(sut, opts), **base)


def test_campaign_totals_and_violations_happen(rec, tmp_path):
    r = run_campaign(config(rec), tmp_path / "run")
    assert r.ran == 4 * 3 * 2 and r.tally.done == 24
    big = r.tally.by_n[1000]
    assert big.pairs == 8 and big.count_violations > 0 and big.subset_violations >= big.count_violations
    assert r.tally.by_n[10].crashes == 0
    lines = (tmp_path / "run" / JOURNAL_NAME).read_text().splitlines()
    assert json.loads(lines[0])["type"] == "header" and len(lines) == 25
    # re-folding the journal gives the same totals
    _, t2 = load_tally(tmp_path / "run")
    assert t2.to_dict() == r.tally.to_dict()


def test_crashes_are_findings_not_stops(rec, tmp_path):
    r = run_campaign(config(rec, "test_fuzz_support:crash_sut", sut_options={"bad_frame": 1}), tmp_path / "run")
    assert r.tally.done == 24
    crashes = [x for x in iter_records(tmp_path / "run" / JOURNAL_NAME) if x["status"] == "crash"]
    assert len(crashes) == 6 and {c["frame"] for c in crashes} == {1}
    assert "ZeroDivisionError: boom in the SUT" in crashes[0]["error"]
    assert "Traceback" in crashes[0]["traceback"] and "detect" in crashes[0]["traceback"]
    assert sum(t.crashes for t in r.tally.by_n.values()) == 6


def test_timeout_in_process(rec, tmp_path):
    cfg = config(rec, "test_fuzz_support:hang_sut", sut_options={"bad_frame": 2, "sleep": 600}, timeout=4.0,
                 ns=(10,), trials=1)
    t0 = time.perf_counter()
    r = run_campaign(cfg, tmp_path / "run")
    assert time.perf_counter() - t0 < 300  # stopped, not slept out (a margin for a loaded machine)
    assert r.tally.by_n[10].timeouts == 1 and r.tally.by_n[10].pairs == 3
    (t,) = [x for x in iter_records(tmp_path / "run" / JOURNAL_NAME) if x["status"] == "timeout"]
    assert "time.sleep" in t["traceback"] or "sleep" in t["traceback"]


def test_workers_kill_hung_sut_and_match_in_process_totals(rec, tmp_path):
    cfg = config(rec, "test_fuzz_support:hang_sut", sut_options={"bad_frame": 2, "sleep": 120}, timeout=4.0,
                 ns=(10, 1000), trials=1)
    r2 = run_campaign(cfg, tmp_path / "w2", workers=2)
    timeouts = [x for x in iter_records(tmp_path / "w2" / JOURNAL_NAME) if x["status"] == "timeout"]
    assert {(t["frame"], t["n"]) for t in timeouts} == {(2, 10), (2, 1000)}
    assert "killed" in timeouts[0]["error"]
    assert all("test_fuzz_support.py" in t["traceback"] and "in detect" in t["traceback"] for t in timeouts)
    r1 = run_campaign(cfg, tmp_path / "w1", workers=1)
    assert r1.tally.to_dict() == r2.tally.to_dict()


def test_worker_death_is_a_crash_finding(rec, tmp_path):
    cfg = config(rec, "test_fuzz_support:die_sut", sut_options={"bad_frame": 3}, ns=(10, 1000), trials=1,
                 frames=(0, 3))
    r = run_campaign(cfg, tmp_path / "run", workers=2)
    recs = {(x["frame"], x["n"]): x for x in iter_records(tmp_path / "run" / JOURNAL_NAME)}
    assert len(recs) == 4 and recs[(0, 10)]["status"] == "ok" and recs[(0, 1000)]["status"] == "ok"
    for n in (10, 1000):
        assert recs[(3, n)]["status"] == "crash" and "exit code 77" in recs[(3, n)]["error"]
    assert sum(t.crashes for t in r.tally.by_n.values()) == 2


def _cli(rec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lidarmt", "fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi",
            "--sut", "test_fuzz_support:grid_sut", "--n", "10,300,1000", "--frames", "4", "--trials", "2",
            "--radius", "30", "--out", str(out), "--quiet", "--bundles", "0",
            "--timeout", "600", *extra]  # an explicit, generous limit: the verdicts must not depend on the load


def test_sigkill_then_resume_gives_the_same_summary(rec, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}"}
    from lidarmt.cli import main

    assert main(_cli(rec, tmp_path / "full")[3:]) == 0  # the uninterrupted campaign, in this process
    journal = tmp_path / "cut" / JOURNAL_NAME
    proc = subprocess.Popen(_cli(rec, tmp_path / "cut"), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        if journal.exists() and len(journal.read_bytes().splitlines()) >= 8:  # header + 7 verdicts
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(journal.read_bytes().splitlines()) - 1
    assert 7 <= n_before < 24, "the campaign was not interrupted mid-way"
    assert not (tmp_path / "cut" / "summary.json").exists()
    done = subprocess.run(_cli(rec, tmp_path / "cut", "--resume"), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    a = json.loads((tmp_path / "full" / "summary.json").read_text())
    b = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert a == b and a["complete"]
    assert (tmp_path / "full" / "junit.xml").read_text() == (tmp_path / "cut" / "junit.xml").read_text()
    recs = list(iter_records(journal))
    assert len(recs) == 24 and len({(r["frame"], r["n"], r["trial"]) for r in recs}) == 24
    run = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert run["resumed_from"] == n_before and run["ran"] == 24 - n_before


def test_bundles_and_replay(rec, tmp_path):
    cfg = config(rec, ns=(1000,), trials=1)
    out = tmp_path / "run"
    run_campaign(cfg, out)
    viol = violating_keys(out)
    assert viol
    key = viol[0][0]
    (info,) = make_bundles(cfg, out, [key], budget=40, command="lidarmt fuzz ...")
    b = out / "violations" / info["id"]
    for name in ("source.pcd", "followup.pcd", "added.npy", "minimal.npy", "obstacles_source.json",
                 "obstacles_followup.json", "bev.png", "replay.bag", "report.md", "bundle.json", "source.npz",
                 "followup.npz"):
        assert (b / name).is_file(), name
    meta = json.loads((b / "bundle.json").read_text())
    assert meta["seed_tuple"] == [0, key[0], 1000, key[2]] and meta["reproduced"]
    assert meta["ddmin"]["calls"] <= 40 and isinstance(meta["ddmin"]["one_minimal"], bool)
    assert "lidarmt replay" in (b / "report.md").read_text()
    # the replay bag holds both frames on the topic, with poses
    from lidarmt.io import open_recording

    with open_recording(b / "replay.bag") as bag:
        assert len(bag) == 2 and bag[0].pose is not None
        assert len(bag[1]) == len(bag[0]) + 1000
    res = replay_bundle(b, trust_code=True)  # the test SUT and ROI are module:callable specs: code
    assert res.same, res.details
    assert replay_bundle(b, from_recording=True, trust_code=True).same
    # a tampered bundle does not replay
    fj = json.loads((b / "obstacles_followup.json").read_text())
    fj.append(fj[0])
    (b / "obstacles_followup.json").write_text(json.dumps(fj))
    bad = replay_bundle(b, trust_code=True)
    assert not bad.same and bad.outcome == "not reproduced" and not bad.checks["file checksums (MANIFEST.json)"]
    assert any(m.startswith("follow-up obstacles: ") for m in bad.moved)  # listed, with what changed
    # bundles already made are skipped when asked again (resume)
    (again,) = make_bundles(cfg, out, [key])
    assert again.get("existing")


def test_workers_do_not_outlive_a_killed_campaign(rec, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}"}
    args = [sys.executable, "-m", "lidarmt", "fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi",
            "--sut", "test_fuzz_support:hang_sut", "--sut-option", "bad_frame=0", "--sut-option", "sleep=300",
            "--n", "10", "--out", str(tmp_path / "o"), "--quiet", "--workers", "2"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = tmp_path / "o" / JOURNAL_NAME
    deadline = time.time() + 60
    while time.time() < deadline and not (journal.exists() and len(journal.read_bytes().splitlines()) >= 2):
        time.sleep(0.05)
    children = _children(proc.pid)
    assert children, "no worker processes seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # far below the 300 s hang, not near a loaded machine's start-up: a worker still importing when its campaign
    # dies sets its death signal too late and leaves through its parent check (about 1 s) once started
    deadline = time.time() + 90
    while time.time() < deadline and any(_alive(c) for c in children):
        time.sleep(0.1)
    assert not any(_alive(c) for c in children)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
