"""benchmarks/profile_camera_campaign.py runs a camera campaign under cProfile and reports its functions."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_profile_reports_both_runs_and_the_campaigns_own_functions(tmp_path: Path) -> None:
    out = tmp_path / "profile.txt"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_camera_campaign.py"), "--model",
                           "dave2", "--frames", "1", "--top", "15", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    assert text.strip() == proc.stdout.strip()  # what is printed is what is written
    assert re.match(r"# dave2 on cpu, 1 seed frames, [1-9][0-9]* pairs", text)
    assert "unprofiled:" in text and "profiled:" in text
    assert "## by cumulative" in text and "## by tottime" in text
    assert "run_campaign" in text  # the profiled call is the campaign itself


@pytest.mark.slow
def test_thread_cpu_names_the_campaigns_threads_and_sums_to_the_process(tmp_path: Path) -> None:
    import json

    out = tmp_path / "threads.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "camera_thread_cpu.py"), "--model", "dave2",
                           "--frames", "1", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    threads = doc["cpu_ms_per_pair"]
    assert "MainThread" in threads and doc["pairs"] > 0
    # each thread's CPU time is part of the process's: their sum cannot exceed it by more than /proc's tick
    assert sum(threads.values()) <= doc["process_cpu_ms_per_pair"] + 1e3 * 0.02 * len(threads) / doc["pairs"] + 1e-9
    assert doc["transform_alone_ms_per_image"] > 0 and doc["machine"]["isa"] == doc["isa"]
