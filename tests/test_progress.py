"""Progress where nobody watches a terminal (issue 30): periodic one-line reports on a non-terminal stderr (a CI
log), and a live violating count that ends equal to the report's."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from lidarmt.cli import _common, main


def _logged(monkeypatch, seconds: str) -> tuple[_common.LoggedProgress, io.StringIO]:
    monkeypatch.setenv("LIDARMT_PROGRESS_SECONDS", seconds)
    buf = io.StringIO()
    bar = _common.LoggedProgress(*_common.progress().columns, console=Console(file=buf, force_terminal=False,
                                                                               width=200))
    return bar, buf


def test_lines_when_stderr_is_no_terminal(monkeypatch):
    bar, buf = _logged(monkeypatch, "0")
    with bar:
        task = bar.add_task("fuzz", total=4, rate="")
        for i in range(1, 4):
            bar.update(task, advance=1, rate=f"1.00 verdicts/s, {i} violating, 0 crash/timeout")
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("fuzz: ")]
    assert len(lines) == 3  # one per step at 0 s; the final bar follows
    assert lines[0].startswith("fuzz: 1/4 (25%), 1.00 verdicts/s, 1 violating") and "elapsed 0:00:00" in lines[0]
    assert "ETA" in lines[-1] and "3/4 (75%)" in lines[-1]


def test_no_line_before_the_interval(monkeypatch):
    bar, buf = _logged(monkeypatch, "3600")
    with bar:
        task = bar.add_task("export", total=3, rate="")
        for _ in range(3):
            bar.advance(task)
    assert not [ln for ln in buf.getvalue().splitlines() if ln.startswith("export: ")]


def test_campaign_progress_needs_one_rule():
    with pytest.raises(TypeError):
        _common.CampaignProgress(quiet=True)


def test_camera_fuzz_live_count_equals_the_final_one(tmp_path, capsys, monkeypatch):
    """DeepTest's Eq. 2 is judged when folding (it needs every seed's MSE): the bar counts on a live tally by the
    same rule, so its last word equals the summary line's (it said 0 live, then 12)."""
    from test_camera_campaign import write_udacity

    monkeypatch.setenv("LIDARMT_PROGRESS_SECONDS", "0")
    src = write_udacity(tmp_path / "u")
    assert main(["camera", "fuzz", "--images", str(src), "--model", "test_camera_campaign:tilt", "--model-option",
                 "gain=1.0", "--transforms", "brightness,contrast,fog,mirror", "--out", str(tmp_path / "run"), "--lambda", "1",
                 "--bundles", "0"]) == 0
    got = capsys.readouterr()
    final = int(re.search(r"(\d+) violating pairs", got.out).group(1))
    live = [int(m) for m in re.findall(r"(\d+) violating, ", got.err)]
    assert final > 0 and live and live[-1] == final


def test_a_resumed_campaign_counts_its_earlier_verdicts(tmp_path, capsys, monkeypatch):
    """On --resume the bar starts from the journal's verdicts (folded into its live tally): its last count is the
    report's, not only the pairs judged in this invocation."""
    from test_camera_campaign import write_udacity

    from lidarmt.engine.journal import JOURNAL_NAME

    src = write_udacity(tmp_path / "u")
    args = ["camera", "fuzz", "--images", str(src), "--model", "test_camera_campaign:tilt", "--model-option",
            "gain=1.0", "--transforms", "brightness,contrast,fog,mirror", "--out", str(tmp_path / "run"), "--lambda", "1",
            "--bundles", "0"]
    assert main([*args, "--quiet"]) == 0
    capsys.readouterr()
    journal = tmp_path / "run" / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[: len(lines) // 2]))  # as if stopped half way
    monkeypatch.setenv("LIDARMT_PROGRESS_SECONDS", "0")
    assert main([*args, "--resume"]) == 0
    got = capsys.readouterr()
    final = int(re.search(r"(\d+) violating pairs", got.out).group(1))
    live = [int(m) for m in re.findall(r"(\d+) violating, ", got.err)]
    assert final > 0 and live and live[-1] == final
