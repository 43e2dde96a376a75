# ruff: noqa: F811 - the run fixtures of test_html_report are imported and used by name
"""Pages an engineer reads (issue 30): every bug bundle has a page (full-size pictures, obstacle tables, the
commands that reproduce it, links to its MCAP and bag), every report kind links its findings to their bundles'
pages, and in a 1,400 px headless Chromium window no page logs an error, every picture loads, every link
resolves and nothing is wider than the window (a table fits its column of the page: no sideways scrolling).

The runs are the small synthetic ones of test_html_report (grid SUT, tilt steering model) plus a campaign of
LiDAR transformations; Chromium is Debian's ``chromium`` (the browser tests skip with a reason without it).
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_fuzz_support import write_road_geojson, write_scenes
from test_html_report import CHROMIUM, bench_run, camera_run, lidar_run, needs_chromium  # noqa: F401 - fixtures

from lidarmt.cli import main
from lidarmt.engine.html import check_links

pytestmark = pytest.mark.slow  # whole campaigns end to end

WINDOW = 1400


@pytest.fixture(scope="module")
def transforms_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html-transforms")
    write_scenes(root / "frames", 3)
    write_road_geojson(root / "world.geojson")
    out = root / "run"
    assert main(["fuzz", "--bag", str(root / "frames"), "--map", str(root / "world.geojson"), "--sut",
                 "test_fuzz_support:grid_sut", "--transforms", "fog,remove,rotate", "--frames", "2", "--bundles", "1",
                 "--ddmin-budget", "4", "--out", str(out), "--quiet"]) == 0
    return out


def _runs(lidar_run, camera_run, bench_run, transforms_run) -> list[Path]:
    return [lidar_run / "run", camera_run, bench_run, transforms_run]


def _bundles(run: Path) -> list[Path]:
    v = run / "violations"
    return sorted(p for p in v.iterdir() if p.is_dir()) if v.is_dir() else []


def test_every_bundle_has_a_page(lidar_run, camera_run, transforms_run):
    for run, pictures in ((lidar_run / "run", ["bev.png"]), (camera_run, ["pair.png"]),
                          (transforms_run, ["bev_source.png", "bev_followup.png"])):
        bundles = _bundles(run)
        assert bundles, run
        for b in bundles:
            page = (b / "report.html").read_text(encoding="utf-8")
            for pic in pictures:  # at full size, not a thumbnail
                assert f'class="full" src="{pic}"' in page, (b, pic)
            assert "lidarmt replay" in page and 'href="bundle.mcap"' in page and 'href="report.md"' in page
            assert f"bug bundle {b.name}:" in page and ".tmp" not in page  # its id, not the staging folder's
            if run is not camera_run:
                assert 'id="source-table"' in page and 'id="followup-table"' in page
                assert 'href="replay.bag"' in page or 'href="source.pcd"' in page
            assert check_links(b / "report.html") == []
            manifest = json.loads((b / "MANIFEST.json").read_text())
            assert "report.html" in manifest["files"]  # sealed with the rest: replay checks it


def test_reports_link_findings_to_bundle_pages(lidar_run, camera_run, transforms_run):
    for run in (lidar_run / "run", camera_run, transforms_run):
        page = (run / "report.html").read_text(encoding="utf-8")
        for b in _bundles(run):
            assert f'href="violations/{b.name}/report.html"' in page, (run, b.name)
    # the transformations' findings, most severe first: a bundle column where the finding has one
    md = (transforms_run / "report.md").read_text(encoding="utf-8")
    ranking = md.split("## Findings, most severe first", 1)[1].split("\n## ", 1)[0]
    assert "| bundle |" in ranking and "/report.md)" in ranking


def test_the_closing_line_names_report_html(tmp_path):
    from lidarmt.engine.report import reports_line

    paths = {n: tmp_path / n for n in ("summary.json", "report.md", "junit.xml", "report.html")}
    line = reports_line(paths)
    assert line.startswith(f"reports: {tmp_path / 'report.html'} (open in a browser)") and "junit.xml" in line


# ----------------------------------------------------------------------------------------------- in a browser

_HEAD = """<script>window.__errs = [];
window.addEventListener("error", function (e) {
  __errs.push("error: " + (e.message || (e.target && (e.target.src || e.target.href)) || "?")); }, true);
window.addEventListener("securitypolicyviolation", function (e) {
  __errs.push("csp: " + e.violatedDirective + " " + e.blockedURI); });
(function () { var ce = console.error; console.error = function () {
  __errs.push("console: " + Array.prototype.join.call(arguments, " ")); ce.apply(console, arguments); }; })();
</script>"""

_PROBE = """<script>
(async function () {
  const r = {};
  const imgs = Array.from(document.images);
  imgs.forEach(function (i) { i.loading = "eager"; });
  await Promise.all(imgs.map(function (i) {
    return (i.complete && i.naturalWidth) ? null : new Promise(function (ok) { i.onload = ok; i.onerror = ok; });
  }));
  r.images = imgs.length;
  r.broken = imgs.filter(function (i) { return !(i.naturalWidth > 0); }).map(function (i) { return i.getAttribute("src"); });
  r.inner = window.innerWidth;
  r.page = document.documentElement.scrollWidth;
  r.wide = [];
  document.querySelectorAll("table, img, pre, ul, p, h1, h2, figure").forEach(function (el) {
    const box = el.getBoundingClientRect();
    const room = el.parentElement ? el.parentElement.clientWidth : window.innerWidth;
    if (el.tagName === "TABLE" ? box.width > room + 1 : box.right > window.innerWidth + 1) {
      r.wide.push(el.tagName + "#" + el.id + " " + Math.round(box.width) + " px in " + room);
    }
  });
  r.errs = window.__errs;
  const pre = document.createElement("pre");
  pre.id = "lidarmt-probe";
  pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
})();
</script>"""


def look(page: Path, *, extra: str = "") -> dict:
    """Load ``page`` (a copy beside it, with the probe) in a 1,400 px wide headless Chromium; what it saw."""
    text = page.read_text(encoding="utf-8")
    copy = page.with_name(".probe-" + page.name)
    copy.write_text(text.replace("<head>", "<head>" + _HEAD, 1).replace("</body>", extra + _PROBE + "</body>"),
                    encoding="utf-8")
    try:
        for _ in range(2):  # one retry: a browser start can fail on a machine under heavy load
            proc = subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                 f"--window-size={WINDOW},900", "--allow-file-access-from-files", "--virtual-time-budget=8000",
                 "--dump-dom", copy.as_uri()],
                capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(page.parent)})
            m = re.search(r'<pre id="lidarmt-probe">(.*?)</pre>', proc.stdout, re.S)
            if m:
                break
    finally:
        copy.unlink(missing_ok=True)
    assert m, f"the probe did not run (chromium exit {proc.returncode}): {proc.stderr[-800:]}"
    return json.loads(html.unescape(m.group(1)))


def _pages(runs: list[Path]) -> list[Path]:
    out = []
    for run in runs:
        out.append(run / "report.html")
        out += [b / "report.html" for b in _bundles(run) if (b / "report.html").is_file()]
    return out


@needs_chromium
def test_pages_in_a_1400_px_window(lidar_run, camera_run, bench_run, transforms_run):
    pages = _pages(_runs(lidar_run, camera_run, bench_run, transforms_run))
    assert len(pages) >= 10
    for page in pages:
        assert check_links(page) == [], page  # every link and picture is a file of the folder
        r = look(page)
        assert r["inner"] == WINDOW
        assert r["errs"] == [], (page, r["errs"])
        assert r["broken"] == [], (page, r["broken"])
        assert r["page"] <= r["inner"] and r["wide"] == [], (page, r["page"], r["wide"])


@needs_chromium
def test_the_probe_sees_errors_and_wide_things(camera_run):
    """The browser checks can fail: an error logged, a missing picture, a table wider than the window."""
    wide = ('<table id="too-wide"><tr><td style="white-space:nowrap;max-width:none;overflow-wrap:normal">' + "x" * 400 + "</td></tr></table>"
            '<img src="no-such.png" alt=""><script>console.error("boom")</script>')
    r = look(camera_run / "report.html", extra=wide)
    assert any("boom" in e for e in r["errs"]) and "no-such.png" in r["broken"]
    assert any(w.startswith("TABLE#too-wide") for w in r["wide"]) and r["page"] > r["inner"]
