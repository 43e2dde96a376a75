"""report.html (issue 24): the static campaign page of MR1 campaigns, camera campaigns and bench.

Pages come from real runs on small synthetic data (the grid test SUT, the tilt steering model). Python checks
what the page says and that every picture and link is a file of the run folder; a headless Chromium (Debian's
``chromium``; the browser tests skip with a reason where it is absent) loads each page, clicks column heads
and reports what it rendered: the rows of each table, the order after sorting, and whether every picture
decoded.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from test_camera_campaign import write_udacity
from test_fuzz_support import write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine.html import check_links
from lidarmt.lidar.mr1.report import campaign_page

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

PLUGIN = EntryPoint(name="grid-test", value="test_fuzz_support:grid_sut", group="lidarmt.perception")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                                               "(apt-get install chromium)")


def _install_plugin(mp: pytest.MonkeyPatch) -> None:
    import lidarmt.lidar.perception.registry as registry

    mp.setattr(registry, "_plugins", lambda: {PLUGIN.name: PLUGIN})


def _fuzz(root: Path, out: Path, *extra: str) -> list[str]:
    return ["fuzz", "--bag", str(root / "frames"), "--map", str(root / "world.geojson"), "--sut", "grid-test",
            "--radius", "30", "--n", "10,1000", "--trials", "2", "--bundles", "2", "--ddmin-budget", "6",
            "--out", str(out), "--quiet", *extra]


@pytest.fixture(scope="module")
def lidar_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    write_scenes(root / "frames", 3)
    write_road_geojson(root / "world.geojson")
    with pytest.MonkeyPatch.context() as mp:
        _install_plugin(mp)
        assert main(_fuzz(root, root / "run")) == 0
    return root


@pytest.fixture(scope="module")
def camera_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html-camera")
    src = write_udacity(root / "udacity")
    out = root / "run"
    # gain 1 (labels made for 0.8): some seeds right, so some errors are the transformation's (with gain 3 every
    # seed is already in error, and those errors are set apart: no violation, no bundle)
    assert main(["camera", "fuzz", "--images", str(src), "--model", "test_camera_campaign:tilt", "--model-option",
                 "gain=1.0", "--transforms", "brightness,fog,mirror", "--out", str(out), "--quiet", "--lambda", "1",
                 "--bundles", "3"]) == 0
    return out


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html-bench")
    rec = write_scenes(root / "frames", 4)
    out = root / "bench"
    assert main(["bench", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--n", "10,300", "--trials",
                 "2", "--radius", "30", "--out", str(out), "--quiet", "--sut", "test_bench:grid_sut", "--sut",
                 "test_bench:drop_sut"]) == 0
    return out


def _violating(run: Path) -> int:
    from lidarmt.lidar.mr1.campaign import violating_keys

    return len(violating_keys(run))


# ----------------------------------------------------------------------------------------------- page content


def test_lidar_page_tables_links_and_bundles(lidar_run):
    run = lidar_run / "run"
    page = (run / "report.html").read_text()
    for ident in ("study-table", "lost-table", "class-table", "bundles-table", "pairs-table"):
        assert f'id="{ident}"' in page, ident
    assert check_links(run / "report.html") == []
    bundles = sorted(p.name for p in (run / "violations").iterdir())
    assert bundles
    for b in bundles:  # each bundle: its picture, its page, its MCAP and layout, its folder
        for f in ("bev.png", "report.html", "bundle.mcap", "foxglove-layout.json"):
            assert f'href="violations/{b}/{f}"' in page, (b, f)
        assert f'src="violations/{b}/bev.png"' in page
    # every violating pair of the journal is a row of the pairs table
    rows = re.search(r'<table id="pairs-table".*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    assert rows.count("<tr>") == _violating(run) > 0
    assert "<script>" in page and "http://" not in page and "https://" not in page  # inline, no network
    assert "Content-Security-Policy" in page


def test_resume_and_refolding_rewrite_the_page(lidar_run, monkeypatch):
    """--resume with a lost-obstacle filter re-folds the journal: the page lists only what the filter counts."""
    _install_plugin(monkeypatch)
    run = lidar_run / "run"
    before = (run / "report.html").read_text()
    assert main(_fuzz(lidar_run, run, "--resume", "--min-points", "100000")) == 0
    after = (run / "report.html").read_text()
    assert after != before
    assert 'id="pairs-table"' not in after and "Violating pairs (0)" in after
    assert "only lost obstacles with ≥ 100000 points" in after
    assert main(_fuzz(lidar_run, run, "--resume")) == 0  # back to counting everything
    assert (run / "report.html").read_text().count("<tr>") == before.count("<tr>")


def test_everything_from_files_is_escaped(tmp_path):
    """Journals, summaries and bundle lists are files from strangers: no markup or script gets through."""
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    summary = {"config": {"source": {"path": evil}, "roi": {"map": evil, "range": 70}, "sut": {"name": evil,
                                                                                               "options": {}},
                          "frames": [0], "ns": [10], "trials": 1, "seed": 0, "region": {"shape": evil, "size": 1}},
               "pairs_done": 1, "pairs_expected": 1, "complete": True, "filter": {},
               "by_n": [{"n": 10, "pairs": 1, "count_relation": {"k": 1, "n": 1}, "subset_relation": {"k": 1, "n": 1},
                         "study_rate": None, "crashes": 0, "timeouts": 0, "source_obstacles": 1, "missing": {},
                         "classes": {}, "breakdown": {evil: {evil: 1}}}]}
    bundles = [{"id": "javascript:alert(1)", "key": [0, 10, 0], "n_source": 1, "n_follow": 0, "lost": evil,
                "lost_details": evil, "ddmin": None},
               {"id": "../../etc", "error": evil}]
    run = {"command": evil, "environment": {"cpu": evil}}
    findings = [{"frame": 0, "n": 10, "trial": 0, "stage": evil, "status": "crash", "error": evil}]
    page = campaign_page(summary, run=run, bundles=bundles, findings=findings, out=tmp_path)
    assert "<script>alert" not in page and "<img src=x" not in page and "onerror=alert" not in page.replace(
        "onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    hrefs = re.findall(r'(?:href|src)="([^"]*)"', page)
    assert all(not h.lower().startswith(("javascript:", "http", "//", "/")) for h in hrefs)
    # a page whose links leave the folder is reported
    (tmp_path / "p.html").write_text('<a href="https://example.org/x">x</a><img src="missing.png"><a href="#nope">')
    assert len(check_links(tmp_path / "p.html")) == 3


def test_camera_page(camera_run):
    page = (camera_run / "report.html").read_text()
    assert "DeepTest Table 7" in page and "DeepTest Table 8" in page and "DeepRoad" in page
    assert 'id="worst-table"' in page
    assert check_links(camera_run / "report.html") == []
    for b in (camera_run / "violations").iterdir():
        assert f'src="violations/{b.name}/pair.png"' in page and f'href="violations/{b.name}/bundle.mcap"' in page
    assert 'src="mse.png"' in page and 'src="worst.png"' in page


def test_bench_page(bench_run):
    page = (bench_run / "report.html").read_text()
    summary = json.loads((bench_run / "summary.json").read_text())
    assert 'id="modules-table"' in page and 'id="paired-table-0"' in page
    assert summary["verdict"].upper() in page and "exact McNemar" in page
    regressed = summary["verdict"] == "regression"
    assert re.search(r'<span class="(ok|bad)">verdict at', page).group(1) == ("bad" if regressed else "ok")
    for m in summary["modules"]:  # each module's own run folder is linked
        assert f'href="{m["name"]}/' in page
    assert check_links(bench_run / "report.html") == []
    assert 'src="relations.png"' in page


# ----------------------------------------------------------------------------------------------- in a browser

_PROBE = """
<script>
(async function () {
  const res = {tables: {}};
  const imgs = Array.from(document.images);
  imgs.forEach(function (i) { i.loading = "eager"; });
  await Promise.all(imgs.map(function (i) {
    return (i.complete && i.naturalWidth) ? null : new Promise(function (r) { i.onload = r; i.onerror = r; });
  }));
  res.images = imgs.length;
  res.broken = imgs.filter(function (i) { return !(i.naturalWidth > 0); }).map(function (i) { return i.getAttribute("src"); });
  document.querySelectorAll("table").forEach(function (t) {
    res.tables[t.id] = t.tBodies[0] ? t.tBodies[0].rows.length : 0;
  });
  const t = document.getElementById("__TABLE__"), col = __COL__;
  const th = t.tHead.rows[0].cells[col];
  const read = function () {
    return Array.from(t.tBodies[0].rows).map(function (r) {
      const c = r.cells[col];
      const s = c.getAttribute("data-sort");
      return s !== null ? s : c.textContent.trim();
    });
  };
  res.before = read();
  th.click();
  res.asc = read(); res.ascAria = th.getAttribute("aria-sort");
  th.click();
  res.desc = read(); res.descAria = th.getAttribute("aria-sort");
  const box = document.querySelector('input.filter[data-filter-for="__TABLE__"]');
  if (box && res.before.length) {
    box.value = "\\u0001no-row-has-this";
    box.dispatchEvent(new Event("input"));
    res.filtered = Array.from(t.tBodies[0].rows).filter(function (r) { return !r.hidden; }).length;
  }
  const pre = document.createElement("pre");
  pre.id = "lidarmt-probe";
  pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
})();
</script>
"""


def browse(page: Path, table_id: str, column: int) -> dict:
    """Load ``page`` (a copy beside it with the probe script) in headless Chromium; what the probe saw."""
    text = page.read_text(encoding="utf-8")
    probe = _PROBE.replace("__TABLE__", table_id).replace("__COL__", str(column))
    copy = page.with_name(".probe-" + page.name)
    copy.write_text(text.replace("</body>", probe + "</body>"), encoding="utf-8")
    try:
        for _ in range(2):  # one retry: a browser start can fail on a machine under heavy load
            proc = subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                 "--allow-file-access-from-files", "--virtual-time-budget=8000", "--dump-dom", copy.as_uri()],
                capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(page.parent)})
            m = re.search(r'<pre id="lidarmt-probe">(.*?)</pre>', proc.stdout, re.S)
            if m:
                break
    finally:
        copy.unlink(missing_ok=True)
    assert m, f"the probe did not run (chromium exit {proc.returncode}): {proc.stderr[-800:]}"
    return json.loads(html.unescape(m.group(1)))


def _num(v: str) -> float:
    return float(re.match(r"[-+]?[\d.]+", v.replace("−", "-")).group(0))


def _check_sort(res: dict) -> None:
    assert sorted(res["asc"]) == sorted(res["before"]) == sorted(res["desc"])  # the same rows, reordered
    nums = [_num(v) for v in res["asc"]]
    assert nums == sorted(nums) and res["ascAria"] == "ascending"
    assert [_num(v) for v in res["desc"]] == sorted(nums, reverse=True) and res["descAria"] == "descending"


@needs_chromium
def test_lidar_page_in_chromium(lidar_run):
    run = lidar_run / "run"
    # the pairs table sorted by frame (column 1): frames are mixed across n before, ordered after
    res = browse(run / "report.html", "pairs-table", 1)
    assert res["broken"] == [] and res["images"] >= 2 + len(list((run / "violations").iterdir()))
    assert res["tables"]["pairs-table"] == _violating(run)
    assert res["tables"]["study-table"] == 2 and res["tables"]["class-table"] == 2
    assert res["tables"]["bundles-table"] == len(list((run / "violations").iterdir()))
    _check_sort(res)
    assert res["filtered"] == 0
    # the study's table sorted by the O ⊄ O′ rate (column 7, its data-sort is the fraction)
    _check_sort(browse(run / "report.html", "study-table", 7))


@needs_chromium
def test_camera_and_bench_pages_in_chromium(camera_run, bench_run):
    res = browse(camera_run / "report.html", "worst-table", 8)  # worst cases by |change|
    assert res["broken"] == [] and res["tables"]["worst-table"] == len(list((camera_run / "violations").iterdir()))
    _check_sort(res)
    res = browse(bench_run / "report.html", "paired-table-0", 2)  # pairs per row
    assert res["broken"] == [] and res["images"] >= 1
    assert res["tables"]["paired-table-0"] == len(json.loads((bench_run / "summary.json").read_text())
                                                  ["comparisons"][0]["rows"])
    assert res["asc"] and sorted(res["asc"]) == sorted(res["before"])


def test_reports_without_a_page_of_their_own_get_report_md_as_one(tmp_path):
    """Coverage and search reports: write_report_set renders their report.md (escaped, relative links only)."""
    from lidarmt.engine.html import markdown_page
    from lidarmt.engine.report import write_report_set

    def chart(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from lidarmt.engine.report import savefig

        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        savefig(fig, path)

    (tmp_path / "violations" / "a b").mkdir(parents=True)
    (tmp_path / "violations" / "a b" / "report.md").write_text("x")
    md = "\n".join([
        "# Coverage study <script>alert(1)</script>", "", "Intro with `code<b>` and **bold**.", "",
        "## Numbers", "", "| model | NC | note |", "|---|---:|---|", "| m2 | 0.50 | a \\| b |", "| m1 | 0.75 | "
        "[bundle](violations/a%20b/report.md) |", "| m3 | 0.25 | [evil](javascript:alert(1)) |", "",
        "![chart](chart.png)", "", "- one", "- two", "", "```", "<raw> & code", "```"])
    paths = write_report_set(tmp_path, summary={}, run={}, table="", markdown=md, junit="<x/>",
                             charts={"chart.png": chart})
    page = paths["report.html"].read_text()
    assert page == markdown_page(md)
    assert "<title>Coverage study &lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    assert "<script>alert" not in page and "javascript:" not in page and "&lt;raw&gt; &amp; code" in page
    assert '<code>code&lt;b&gt;</code>' in page and "<strong>bold</strong>" in page
    assert 'href="violations/a%20b/report.md"' in page and 'src="chart.png"' in page
    assert 'id="table-1" class="sortable"' in page and "a | b" in page
    assert check_links(paths["report.html"]) == []
    if CHROMIUM:  # and it sorts in a browser
        res = browse(paths["report.html"], "table-1", 1)
        assert res["broken"] == [] and res["asc"] == ["0.25", "0.50", "0.75"] and res["desc"][0] == "0.75"
