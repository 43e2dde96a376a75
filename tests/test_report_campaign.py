"""Campaign reports: Wilson intervals, tables, JUnit, charts, Markdown."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from lidarmt.engine.stats import fmt_rate, wilson
from lidarmt.engine.tally import Tally
from lidarmt.lidar.mr1.report import markdown_report, summary_dict, text_table, write_reports


def test_wilson_known_values():
    lo, hi = wilson(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = wilson(335, 1000)
    assert lo == pytest.approx(0.3063, abs=1e-3) and hi == pytest.approx(0.3650, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    assert fmt_rate(0, 0) == "–"
    with pytest.raises(ValueError):
        wilson(3, 2)


def rec(frame, n, status="ok", count=False, subset=False, src=None, fol=None):
    src = src or {"car": 2, "pedestrian": 1, "cyclist": 0, "unknown": 0}
    fol = fol or src
    r = {"type": "pair", "frame": frame, "n": n, "trial": 0, "status": status, "stage": "follow"}
    if status == "ok":
        r["verdict"] = {"counts_source": src, "counts_follow": fol, "count_violation": count,
                        "class_violations": ["car"] if count else [], "subset_violation": subset or count,
                        "missing": [{"source": 0, "class": "car", "kind": "vanished", "shared": 0.0}] if count else [],
                        "matches": []}
    else:
        r["error"], r["traceback"] = "ZeroDivisionError: boom <&>", "Traceback ..."
    return r


RECORDS = [
    rec(0, 10), rec(1, 10), rec(0, 100, count=True, fol={"car": 1, "pedestrian": 1, "cyclist": 0, "unknown": 0}),
    rec(1, 100, status="crash"), rec(0, 1000, subset=True),
    rec(1, 1000, fol={"car": 3, "pedestrian": 1, "cyclist": 0, "unknown": 0}),
]
CONFIG = {"ns": [10, 100, 1000], "frames": [0, 1], "trials": 1, "seed": 0,
          "source": {"path": "demo.bag", "topic": None}, "roi": {"map": "m", "range": 70.0, "map_frame": "world"},
          "sut": {"name": "apollo", "options": {}}, "region": {"shape": "disk", "size": 120.0}, "timeout": None}


def tally():
    t = Tally([10, 100, 1000])
    for r in RECORDS + RECORDS[:2]:  # duplicates are ignored
        t.add(r)
    return t


def test_summary_and_tables():
    s = summary_dict(CONFIG, tally())
    by = {r["n"]: r for r in s["by_n"]}
    assert s["pairs_done"] == 6 and s["complete"]
    assert by[100]["pairs"] == 1 and by[100]["crashes"] == 1 and by[100]["count_relation"]["k"] == 1
    assert by[1000]["subset_relation"]["k"] == 1 and by[1000]["count_relation"]["k"] == 0
    assert by[1000]["classes"]["car"]["increased"] == 1 and by[100]["classes"]["car"]["decreased"] == 1
    assert by[10]["study_rate"] == 0.027
    txt = text_table(s)
    assert "33.5 %" in txt and "100.0 % [20.7, 100.0]" in txt


@pytest.mark.slow
def test_reports_written(tmp_path):
    s = summary_dict(CONFIG, tally())
    paths = write_reports(tmp_path, s, records=iter(RECORDS), run={"environment": {}, "workers": 1},
                          bundles=[{"id": "n100-f000000-t0", "key": [0, 100, 0], "n_source": 3, "n_follow": 2,
                                    "lost": "1 vanished", "ddmin": {"size": 3, "one_minimal": True}}],
                          findings=[RECORDS[3]])
    assert json.loads(paths["summary.json"].read_text()) == json.loads(json.dumps(s))
    root = ET.parse(paths["junit.xml"]).getroot()
    assert root.get("tests") == "6" and root.get("failures") == "2" and root.get("errors") == "1"
    suites = {ts.get("name"): ts for ts in root}
    assert suites["lidarmt.mr1.n100"].find("testcase/error").get("message") == "ZeroDivisionError: boom <&>"
    for png in ("classes.png", "rates.png"):
        data = paths[png].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    md = paths["report.md"].read_text()
    assert "![classes](classes.png)" in md and "violations/n100-f000000-t0/report.md" in md
    assert "1-minimal" in md and "ZeroDivisionError" in md


def test_markdown_marks_incomplete():
    t = Tally([10])
    t.add(RECORDS[0])
    s = summary_dict({**CONFIG, "ns": [10]}, t)
    assert "incomplete" in markdown_report(s, run={}, bundles=[], findings=[])
