"""``report.html``: a campaign's results as one static page to browse (no server, no network, no CDN).

The page sits beside ``report.md`` in the run folder; its CSS and JavaScript (``lidarmt/report/assets/``) are
inlined, every picture and file it shows is a *relative* link into the run folder (charts, each bug bundle's
pictures, ``report.md``, ``bundle.mcap`` and Foxglove layout), so the folder can be zipped and opened anywhere.
A Content-Security-Policy forbids any request that is not a file of the folder.

Pages are built from what the other reports are built from (the summary folded from the journal, the run's
bundle list, the journal itself), by :func:`lidarmt.report.common.write_report_set`, so ``--resume`` and
re-folding rewrite them with ``report.md``:

* :func:`campaign_page` — an MR1 campaign: the study's table (with any extra per-n column a newer tally adds),
  how lost obstacles were lost, the per-class and size × distance breakdowns, the charts, the bug bundles
  (sortable, with their bird's-eye pictures and links to the bundle, its report and its MCAP) and every
  violating pair of the journal (sortable, filterable);
* :func:`camera_page` — a camera campaign: DeepTest's Tables 7/8, DeepRoad's table, the per-transformation
  table, the charts and the worst cases with their pictures and MCAPs;
* :func:`bench_page` — ``lidarmt bench``: the modules and, per candidate, the paired comparison.

Everything taken from a file (journal, summary, bundle ids, paths, error messages) is data from strangers: it
is escaped with :func:`html.escape`, and link targets are percent-encoded path segments (never a scheme).
"""

from __future__ import annotations

import html as _html
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: At most this many violating pairs are listed (the journal has them all).
MAX_PAIR_ROWS = 3000
#: Page-wide policy: nothing but the page's own inline style/script and files beside it.
CSP = ("default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")


class Html(str):
    """Markup built here from escaped parts (never from raw file content)."""


def esc(value: Any) -> str:
    """Text escaped for HTML content and attribute values."""
    return _html.escape("" if value is None else str(value), quote=True)


def href(*parts: str) -> str:
    """A relative link from path segments, each percent-encoded (so no segment can be a scheme, ``..`` stays a
    literal name only when given as one), escaped for an attribute."""
    segs: list[str] = []
    for p in parts:
        segs += [quote(s, safe="") for s in str(p).split("/") if s]
    return esc("/".join(segs))


def link(target: str, text: Any, *, title: str | None = None) -> Html:
    """``<a>`` to an already-built :func:`href` target."""
    t = f' title="{esc(title)}"' if title else ""
    return Html(f'<a href="{target}"{t}>{esc(text)}</a>')


@dataclass(frozen=True, slots=True)
class Cell:
    """A table cell: text (escaped) or :class:`Html`, with an optional sort key and CSS class."""

    content: Any
    sort: Any = None
    cls: str = ""


def _cell(value: Any) -> str:
    if isinstance(value, Cell):
        body = value.content if isinstance(value.content, Html) else esc(value.content)
        attrs = f' data-sort="{esc(value.sort)}"' if value.sort is not None else ""
        cls = value.cls
        if not cls and isinstance(value.sort, int | float) and not isinstance(value.sort, bool):
            cls = "num"
        return f"<td{attrs}{f' class={chr(34)}{esc(cls)}{chr(34)}' if cls else ''}>{body}</td>"
    if isinstance(value, Html):
        return f"<td>{value}</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int | float):
        return f'<td class="num" data-sort="{esc(value)}">{esc(_num(value))}</td>'
    text = "" if value is None else str(value)
    cls = ' class="num"' if _looks_numeric(text) else ""
    return f"<td{cls}>{esc(text)}</td>"


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    return "–" if not math.isfinite(v) else f"{v:g}"


def _looks_numeric(text: str) -> bool:
    """A number, a rate with its interval, ``8 → 6``, ``0 / 3 / 0 (0.0 %)``: right-aligned (not prose)."""
    t = text.strip().replace("−", "-")
    starts = bool(t) and (t[0].isdigit() or (t[0] in "+-." and len(t) > 1 and t[1].isdigit()))
    return starts and sum(ch.isalpha() for ch in t) <= 2


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]], *, ident: str | None = None, sortable: bool = True,
          caption: str | None = None, foot: Sequence[Sequence[Any]] = (), filter_box: bool = False) -> Html:
    """A table (sortable by a click on a column head unless ``sortable`` is False); ``foot`` rows (totals)
    stay at the bottom; ``filter_box`` adds a text box that hides rows not containing its text."""
    rows = list(rows)
    idattr = f' id="{esc(ident)}"' if ident else ""
    cls = ' class="sortable"' if sortable else ""
    out = []
    if filter_box and ident:
        out.append(f'<input class="filter" type="search" placeholder="filter rows…" data-filter-for="{esc(ident)}" '
                   f'data-count="{esc(ident)}-count" aria-label="filter rows"><span class="count" '
                   f'id="{esc(ident)}-count">{len(rows)} rows</span>')
    out.append(f'<div class="scroll"><table{idattr}{cls}>')
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th scope=\"col\">{h if isinstance(h, Html) else esc(h)}</th>"
                                        for h in head) + "</tr></thead>")
    out.append("<tbody>")
    out.extend("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    out.append("</tbody>")
    if foot:
        out.append("<tfoot>" + "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in foot) + "</tfoot>")
    out.append("</table></div>")
    return Html("\n".join(out))


def image(target: str, alt: str, *, cls: str = "chart", lazy: bool = False, link_to_self: bool = True) -> Html:
    """An ``<img>`` of an :func:`href` target, linked to the full picture."""
    img = f'<img class="{esc(cls)}" src="{target}" alt="{esc(alt)}"{" loading=" + chr(34) + "lazy" + chr(34) if lazy else ""}>'
    return Html(f'<a href="{target}">{img}</a>' if link_to_self else img)


def _asset(name: str) -> str:
    return resources.files("lidarmt.report").joinpath("assets", name).read_text(encoding="utf-8")


class Page:
    """A report page: a title, facts, then sections of HTML, rendered with the inline assets."""

    def __init__(self, title: str, *, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.facts: list[Html] = []
        self.sections: list[tuple[str, str, list[str]]] = []

    def fact(self, label: str, value: Any, *, code: bool = False) -> None:
        v = f"<code>{esc(value)}</code>" if code else (value if isinstance(value, Html) else esc(value))
        self.facts.append(Html(f"<li><strong>{esc(label)}</strong>: {v}</li>"))

    def section(self, ident: str, title: str) -> list[str]:
        body: list[str] = []
        self.sections.append((ident, title, body))
        return body

    def move_after(self, ident: str, after: str) -> None:
        """Put section ``ident`` right after section ``after`` (when both exist)."""
        ids = [i for i, _, _ in self.sections]
        if ident in ids and after in ids:
            sec = self.sections.pop(ids.index(ident))
            self.sections.insert([i for i, _, _ in self.sections].index(after) + 1, sec)

    def render(self) -> str:
        from lidarmt import __version__

        toc = " ".join(f'<a href="#{esc(i)}">{esc(t)}</a>' for i, t, b in self.sections if b)
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="referrer" content="no-referrer">',
            f"<title>{esc(self.title)}</title>",
            f"<style>\n{_asset('report.css')}</style>",
            "</head><body>",
            f'<header class="top"><h1>{esc(self.title)}</h1>'
            + (f'<p class="sub">{esc(self.subtitle)}</p>' if self.subtitle else "") + "</header>",
            f'<nav class="toc">{toc}</nav>' if toc else "",
            "<main>",
        ]
        if self.facts:
            parts.append('<ul class="facts">' + "".join(self.facts) + "</ul>")
        for ident, title, body in self.sections:
            if body:
                parts.append(f'<section id="{esc(ident)}"><h2>{esc(title)}</h2>')
                parts.extend(body)
                parts.append("</section>")
        parts += ["</main>",
                  f"<footer>written by lidarmt {esc(__version__)} from the run's journal; report.md holds the same "
                  "numbers. Click a column head to sort.</footer>",
                  f"<script>\n{_asset('report.js')}</script>", "</body></html>"]
        return "\n".join(p for p in parts if p) + "\n"


def p(text: Any, *, cls: str = "") -> str:
    return f'<p{f" class={chr(34)}{esc(cls)}{chr(34)}" if cls else ""}>{text if isinstance(text, Html) else esc(text)}</p>'


def _charts(out: Path, names: Iterable[str]) -> str:
    imgs = [image(href(n), n) for n in names if (out / n).is_file()]
    return '<div class="charts">' + "".join(imgs) + "</div>" if imgs else ""


def _file_links(out: Path, folder: str, names: Sequence[tuple[str, str]]) -> Html:
    """Links to the files of a bundle folder that exist: (file name, link text)."""
    parts = [link(href(folder, name), text) for name, text in names if (out / folder / name).is_file()]
    if (out / folder).is_dir():
        parts.append(link(href(folder) + "/", "folder"))
    return Html('<span class="files">' + " ".join(parts) + "</span>")


def _fmt_rate(r: Mapping[str, Any]) -> Cell:
    from lidarmt.report.stats import fmt_rate

    k, n = int(r.get("k", 0)), int(r.get("n", 0))
    return Cell(fmt_rate(k, n), sort=(k / n) if n else -1, cls="num")


def _env(run: Mapping[str, Any]) -> str:
    env = run.get("environment") or {}
    return (f"lidarmt {env.get('lidarmt', '?')}, numpy {env.get('numpy', '?')}, torch {env.get('torch', '–')}, "
            f"{env.get('cpu', '?')} ({env.get('cpus', '?')} CPUs)")


def _cmd(page: Page, run: Mapping[str, Any]) -> None:
    if run.get("command"):
        page.fact("command", run["command"], code=True)
    if run.get("throughput"):
        page.fact("throughput", f"{run['throughput']:.2f} per second over {run.get('ran', 0)} pairs with "
                                f"{run.get('workers', 1)} worker(s)")
    page.fact("environment", _env(run))


# ----------------------------------------------------------------------------------------------- LiDAR MR1


#: Per-n keys of summary.json that the study's table shows in its own columns (others are added as columns).
_KNOWN_BY_N = {"n", "pairs", "count_relation", "any_class_count_relation", "subset_relation", "study_rate",
               "crashes", "timeouts", "source_obstacles", "missing", "classes", "reached_mean", "reached_pairs",
               "lost_filtered_out", "breakdown"}


def _labelled(by_n: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any pair's frame carried ground-truth labels (the tally's ``labelled_pairs``)."""
    return any(int(r.get("labelled_pairs") or 0) > 0 for r in by_n)


def _label_key(k: str) -> bool:
    return k.startswith(("labelled", "lost_by_label", "breakdown_labelled"))


def _extra_columns(by_n: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per-n numbers a newer tally adds (e.g. lost labelled objects): shown as extra columns when present (the
    label columns only when some frame carried labels)."""
    keys: list[str] = []
    labelled = _labelled(by_n)
    for r in by_n:
        for k, v in r.items():
            if k not in _KNOWN_BY_N and k not in keys and (labelled or not _label_key(k)) and (
                    (isinstance(v, int | float) and not isinstance(v, bool))
                    or (isinstance(v, Mapping) and "k" in v and "n" in v)):
                keys.append(k)
    return keys


def _count_tables(by_n: Sequence[Mapping[str, Any]], labelled: bool) -> list[tuple[str, bool]]:
    """Per-n keys holding counts by something (e.g. lost obstacles by label and class) that a newer tally adds:
    (key, nested), nested when the counts are a dict of dicts; one small table each."""
    def count(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    keys: list[tuple[str, bool]] = []
    for r in by_n:
        for k, v in r.items():
            if (k in _KNOWN_BY_N or k in (x for x, _ in keys) or k.startswith("breakdown")
                    or not isinstance(v, Mapping) or not v or (_label_key(k) and not labelled) or {"k", "n"} <= set(v)):
                continue
            if all(count(x) for x in v.values()):
                keys.append((k, False))
            elif all(isinstance(x, Mapping) and all(count(y) for y in x.values()) for x in v.values()):
                keys.append((k, True))
    return keys


def _breakdown_table(by_n: Sequence[Mapping[str, Any]], key: str, *, row_head: str = "size") -> Html | None:
    """A two-way table of ``key`` per n: row -> column -> count (or -> {sub: count}), e.g. size × distance."""
    bands: list[str] = []
    for r in by_n:
        for per in (r.get(key) or {}).values():
            if isinstance(per, Mapping):
                bands += [str(d) for d in per if str(d) not in bands]
    rows = []
    for r in by_n:
        for size, per in (r.get(key) or {}).items():
            if not isinstance(per, Mapping):
                continue
            counts = [per.get(d, 0) for d in bands]
            total = sum(int(v) if isinstance(v, int | float) else sum(x for x in v.values()
                                                                       if isinstance(x, int | float))
                        for v in counts if isinstance(v, int | float | Mapping))
            rows.append([r["n"], size, *[_breakdown_cell(v) for v in counts], total])
    return table(["n", row_head, *bands, "all"], rows, ident=f"{key}-table") if rows else None


def _extra_cell(v: Any) -> Any:
    if isinstance(v, Mapping):
        return _fmt_rate(v)
    return v if v is not None else "–"


def _breakdown_cell(v: Any) -> Any:
    """A size × distance count: a number, or a dict of sub-counts (e.g. labelled / unlabelled)."""
    if isinstance(v, Mapping):
        total = sum(int(x) for x in v.values() if isinstance(x, int | float))
        return Cell(" / ".join(f"{k} {x}" for k, x in v.items()), sort=total, cls="num")
    return v


def campaign_page(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: Sequence[Mapping[str, Any]],
                  findings: Sequence[Mapping[str, Any]], out: Path) -> str:
    """The page of an MR1 campaign (see the module's docstring)."""
    from lidarmt.report.campaign import STUDY_REF
    from lidarmt.types import CLASS_ORDER

    cfg = summary["config"]
    src = cfg.get("source", {})
    page = Page("MR1 fuzz campaign", subtitle=f"{src.get('path', '')}: obstacles inside the ROI must survive n random "
                                              "points added outside it")
    page.fact("recording", src.get("path", ""), code=True)
    roi = cfg.get("roi", {})
    page.fact("ROI", "the area each source frame's ground labels cover (--roi labels)" if roi.get("map") == "labels"
              else f"map {roi.get('map')} (range {roi.get('range')} m)")
    sut = cfg.get("sut", {})
    page.fact("system under test", f"{sut.get('name')} {json.dumps(sut.get('options') or {}, sort_keys=True)}")
    page.fact("design", f"{len(cfg.get('frames', []))} frames, n = {', '.join(str(n) for n in cfg.get('ns', []))}, "
                        f"{cfg.get('trials')} trial(s), seed {cfg.get('seed')}, region "
                        f"{(cfg.get('region') or {}).get('shape')} {(cfg.get('region') or {}).get('size')} m")
    done = f"{summary.get('pairs_done')} of {summary.get('pairs_expected')}"
    page.fact("pairs judged", Html(esc(done) + ("" if summary.get("complete")
                                                 else ' <span class="bad">incomplete: run again with --resume</span>')))
    _cmd(page, run)

    by_n = summary.get("by_n", [])
    extra = _extra_columns(by_n)
    body = page.section("study", "Violations per n (the study's table)")
    head = ["n", "pairs", "reached", "|O| > |O′|", "rate (95 % CI)", "study", "O ⊄ O′", "rate (95 % CI)",
            "crashes", "timeouts", *[k.replace("_", " ") for k in extra]]
    rows = []
    for r in by_n:
        c, s = r["count_relation"], r["subset_relation"]
        reached = r.get("reached_mean")
        rows.append([r["n"], r["pairs"], Cell("–" if reached is None else f"{reached:.0f}",
                                               sort=-1 if reached is None else reached, cls="num"),
                     c["k"], _fmt_rate(c), Cell("–" if r.get("study_rate") is None else f"{100 * r['study_rate']:.1f} %",
                                                sort=r.get("study_rate") or -1, cls="num"),
                     s["k"], _fmt_rate(s), r.get("crashes", 0), r.get("timeouts", 0),
                     *[_extra_cell(r.get(k)) for k in extra]])
    body.append(table(head, rows, ident="study-table"))
    body.append(p(f"reached: mean added points per pair inside the CNN's grid and height band; study: the rates "
                  f"{STUDY_REF} published for |O| > |O′| (2.7 %, 12.1 %, 33.5 % for n = 10, 100, 1000).", cls="note"))
    flt = summary.get("filter") or {}
    if flt.get("min_points") or flt.get("min_size_m3"):
        body.append(p(f"filter: only lost obstacles with ≥ {flt.get('min_points', 0)} points and ≥ "
                      f"{flt.get('min_size_m3', 0)} m³ count", cls="note"))
    body.append(p("How the unmatched source obstacles were lost:"))
    body.append(table(["n", "source obstacles", "vanished", "merged", "reclassified", "degraded"],
                      [[r["n"], r.get("source_obstacles", 0), *[(r.get("missing") or {}).get(k, 0) for k in
                                                                 ("vanished", "merged", "reclassified", "degraded")]]
                       for r in by_n], ident="lost-table"))
    body.append(_charts(out, ["rates.png"]))

    body = page.section("classes", "Per class (the study's Figure 3)")
    head = ["n", *[f"{c.value}: decreased / same / increased" for c in CLASS_ORDER]]
    rows = []
    for r in by_n:
        cells: list[Any] = [r["n"]]
        for c in CLASS_ORDER:
            ct = (r.get("classes") or {}).get(c.value) or {}
            pct = f" ({100 * ct.get('decreased', 0) / r['pairs']:.1f} %)" if r.get("pairs") else ""
            cells.append(Cell(f"{ct.get('decreased', 0)} / {ct.get('same', 0)} / {ct.get('increased', 0)}{pct}",
                              sort=ct.get("decreased", 0), cls="num"))
        rows.append(cells)
    body.append(table(head, rows, ident="class-table"))
    body.append(_charts(out, ["classes.png"]))

    body = page.section("breakdown", "Lost obstacles by size and distance")
    labelled = _labelled(by_n)
    keys = ["breakdown"] + sorted({k for r in by_n for k in r if k.startswith("breakdown_")} if labelled else set())
    for key in keys:
        tab = _breakdown_table(by_n, key, row_head="size")
        if tab:
            if key != "breakdown":
                body.append(p(key.replace("breakdown_", "lost ").replace("_", " ") + " obstacles only:"))
            body.append(tab)
    if len(body):
        body.append(p("size: the lost obstacle's box volume l × w × h (junk is small; cars are 5–15 m³); distance: "
                      "of its centre from the sensor.", cls="note"))
    for key, nested in _count_tables(by_n, labelled):
        body.append(p(key.replace("_", " ") + ":"))
        if nested:
            body.append(_breakdown_table(by_n, key, row_head=""))
            continue
        cols: list[str] = []
        for r in by_n:
            cols += [str(c) for c in (r.get(key) or {}) if str(c) not in cols]
        body.append(table(["n", *cols], [[r["n"], *[(r.get(key) or {}).get(c, 0) for c in cols]] for r in by_n],
                          ident=f"{key}-table"))
    if not labelled and any(k.startswith("labelled") for r in by_n for k in r):
        body.append(p("No frame carries ground-truth labels, so lost obstacles are not split into labelled objects "
                      "and junk.", cls="note"))

    body = page.section("bundles", f"Bug bundles ({len(bundles)})")
    if bundles:
        body.append(table(*_lidar_bundle_rows(out, bundles), ident="bundles-table", filter_box=True))
        body.append(p("Each bundle replays with lidarmt replay FOLDER; bundle.mcap opens in Foxglove with "
                      "foxglove-layout.json (both clouds, added and minimal points, obstacles with the lost ones "
                      "red, the ROI, the pose).", cls="note"))
    else:
        body.append(p("No bug bundles (none asked for with --bundles 0, or no pair violates what the filter counts).",
                      cls="note"))

    pairs, more = _violating_pairs(out, summary)
    body = page.section("pairs", f"Violating pairs ({len(pairs) + more})")
    if pairs:
        bundled = {str(b.get("id")) for b in bundles if not b.get("error")}
        labelled = _labelled(by_n) and any("label" in m for rec in pairs for m in rec["verdict"].get("missing", []))
        head = ["n", "frame", "trial", "|O|", "|O′|", "|O| > |O′|", "lost", "how"]
        head += ["lost labelled"] if labelled else []
        head += ["bundle"]
        rows = []
        for rec in pairs:
            v = rec["verdict"]
            ns, nf = sum(v.get("counts_source", {}).values()), sum(v.get("counts_follow", {}).values())
            miss = v.get("missing", [])
            kinds: dict[str, int] = {}
            for m in miss:
                kinds[str(m.get("kind"))] = kinds.get(str(m.get("kind")), 0) + 1
            bid = f"n{rec['n']}-f{rec['frame']:06d}-t{rec['trial']}"
            row: list[Any] = [rec["n"], rec["frame"], rec["trial"], ns, nf,
                              Cell("yes" if v.get("count_violation") else "no",
                                   cls="bad" if v.get("count_violation") else ""),
                              len(miss), ", ".join(f"{n} {k}" for k, n in kinds.items())]
            if labelled:
                row.append(sum(1 for m in miss if m.get("label") == "labelled"))
            row.append(link(href("violations", bid, "report.md"), bid) if bid in bundled else "")
            rows.append(row)
        body.append(table(head, rows, ident="pairs-table", filter_box=True))
        if more:
            body.append(p(f"… and {more} more in journal.jsonl (the page lists the first {MAX_PAIR_ROWS}).",
                          cls="note"))
    else:
        body.append(p("No pair violates |O| ≤ |O′| or O ⊆ O′" + (" with the filter above." if flt.get("min_points")
                                                                  or flt.get("min_size_m3") else "."), cls="note"))

    if findings:
        body = page.section("findings", f"Crashes and timeouts of the perception module ({len(findings)})")
        body.append(table(["frame", "n", "trial", "stage", "status", "what"],
                          [[f.get("frame"), f.get("n"), f.get("trial"), f.get("stage"), f.get("status"),
                            str(f.get("error") or "").splitlines()[0][:300] if f.get("error") else ""]
                           for f in findings[:MAX_PAIR_ROWS]], ident="findings-table", filter_box=True))
    return page.render()


def _lidar_bundle_rows(out: Path, bundles: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    head = ["bundle", "n", "frame", "trial", "relation", "|O| → |O′|", "lost", "minimal subset", "picture", "files"]
    rows = []
    for b in bundles:
        bid = str(b.get("id", "?"))
        folder = f"violations/{bid}"
        if b.get("error"):
            rows.append([bid, "", "", "", "", "", Cell(f"failed: {str(b['error'])[:200]}", cls="bad"), "", "", ""])
            continue
        k = list(b.get("key") or [None, None, None]) + [None] * 3
        dd = b.get("ddmin") or {}
        mini = Cell(f"{dd.get('size')} point(s), " + ("1-minimal" if dd.get("one_minimal") else str(dd.get("stopped", "")))
                    if dd else "–", sort=dd.get("size", -1) if dd else -1, cls="num")
        ns, nf = b.get("n_source"), b.get("n_follow")
        pic = (image(href(folder, "bev.png"), f"{bid}: bird's-eye view", cls="thumb", lazy=True)
               if (out / folder / "bev.png").is_file() else Html(""))
        lost = (b.get("lost") or "") + (f": {b['lost_details']}" if b.get("lost_details") else "")
        rows.append([link(href(folder, "report.md"), bid) if (out / folder / "report.md").is_file() else bid,
                     k[1], k[0], k[2], b.get("relation", ""),
                     Cell(f"{ns} → {nf}", sort=(ns - nf) if isinstance(ns, int) and isinstance(nf, int) else 0,
                          cls="num"),
                     lost, mini, pic,
                     _file_links(out, folder, [("bundle.mcap", "MCAP"), ("foxglove-layout.json", "layout"),
                                               ("report.md", "report"), ("replay.bag", "bag"),
                                               ("bev_source.png", "source"), ("bev_followup.png", "follow-up")])])
    return head, rows


def _violating_pairs(out: Path, summary: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The journal's violating pairs (as the tally counts them: with the summary's lost-obstacle filter), the
    first :data:`MAX_PAIR_ROWS` sorted by (n, frame, trial), and how many more there are."""
    from lidarmt.fuzz.errors import FuzzInputError
    from lidarmt.fuzz.journal import JOURNAL_NAME, iter_records, record_key
    from lidarmt.fuzz.tally import LostFilter

    f = summary.get("filter") or {}
    try:
        flt = LostFilter(int(f.get("min_points", 0) or 0), float(f.get("min_size_m3", 0.0) or 0.0))
    except (TypeError, ValueError, Exception):  # noqa: BLE001 - a bad summary: count everything
        flt = LostFilter()
    found: dict[tuple, dict] = {}
    path = out / JOURNAL_NAME
    if not path.is_file():
        return [], 0
    try:
        for rec in iter_records(path):
            v = rec.get("verdict") if rec.get("status") == "ok" else None
            if not isinstance(v, Mapping) or not (v.get("count_violation") or v.get("subset_violation")):
                continue
            if flt.active and not any(flt.keeps(m) for m in v.get("missing", [])):
                continue
            found.setdefault(record_key(rec), rec)
    except (FuzzInputError, KeyError, TypeError, ValueError):
        pass
    items = [found[k] for k in sorted(found, key=lambda k: (k[1], k[0], k[2]))]
    return items[:MAX_PAIR_ROWS], max(0, len(items) - MAX_PAIR_ROWS)


# ----------------------------------------------------------------------------------------------- camera


def _rows_as_cells(rows: list[list[str]]) -> list[list[Any]]:
    return [[c for c in r] for r in rows]


def camera_page(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: Sequence[Mapping[str, Any]],
                findings: Sequence[Mapping[str, Any]], out: Path) -> str:
    """The page of a camera campaign (see the module's docstring)."""
    from lidarmt.report.camera import TABLES, mse_rows

    cfg = summary["config"]
    crit = summary.get("criteria") or {}
    page = Page("Camera metamorphic campaign",
                subtitle=f"{cfg.get('images', '')}: steering models under image transformations")
    page.fact("images", cfg.get("images", ""), code=True)
    page.fact("models", ", ".join(str(m.get("name")) for m in cfg.get("models", [])))
    page.fact("transformations", ", ".join(f"{t.get('name')} ({len(t.get('grid', []))})"
                                           for t in cfg.get("transforms", [])))
    page.fact("relations", f"DeepTest Eq. 2 at λ = {crit.get('lambda')}, Eq. 3 at ε = {crit.get('epsilon')}; "
                           f"DeepRoad at {crit.get('tolerance_deg')}°" + ("" if summary.get("labelled")
                                                                         else " (no labels: DeepRoad only)"))
    page.fact("pairs judged", f"{summary.get('pairs_done')}; findings (crash/timeout) {summary.get('findings')}")
    _cmd(page, run)
    for i, (title, fn) in enumerate((*TABLES, ("Per transformation and parameter", mse_rows))):
        head, rows = fn(summary)
        if not head:
            continue
        body = page.section(f"table-{i}", title)
        foot = [rows[-1]] if rows and rows[-1] and rows[-1][0] == "total" else []
        body.append(table(head, _rows_as_cells(rows[: len(rows) - len(foot)]), ident=f"camera-table-{i}",
                          foot=foot, filter_box=len(rows) > 20))
    body = page.section("charts", "Charts")
    body.append(_charts(out, ["mse.png", "worst.png"]))
    body = page.section("worst", f"Worst cases ({len(bundles)} bundles)")
    if bundles:
        head = ["bundle", "model", "transformation", "parameters", "frame", "label °", "θ(i) °", "θ(τ(i)) °",
                "change °", "relation", "picture", "files"]
        rows = []
        for b in bundles:
            bid = str(b.get("id", "?"))
            folder = f"violations/{bid}"
            if b.get("error"):
                rows.append([bid, "", "", "", "", "", "", "", "", "", Cell(f"failed: {str(b['error'])[:200]}",
                                                                           cls="bad"), ""])
                continue
            pic = (image(href(folder, "pair.png"), f"{bid}: seed and transformed image", cls="thumb", lazy=True)
                   if (out / folder / "pair.png").is_file() else Html(""))
            rows.append([link(href(folder, "report.md"), bid) if (out / folder / "report.md").is_file() else bid,
                         b.get("model", ""), b.get("transform", ""), b.get("params", ""), b.get("frame_id", ""),
                         _deg(b.get("label")), _deg(b.get("pred")), _deg(b.get("pred_t")),
                         _plain_deg(b.get("change_deg")), b.get("relation", ""), pic,
                         _file_links(out, folder, [("bundle.mcap", "MCAP"), ("foxglove-layout.json", "layout"),
                                                   ("report.md", "report"), ("seed.png", "seed"),
                                                   ("transformed.png", "transformed")])])
        body.append(table(head, rows, ident="worst-table", filter_box=True))
        body.append(p("Arrows in the pictures: label green, θ(i) blue, θ(τ(i)) red. bundle.mcap shows both "
                      "images with the angles as annotations in Foxglove (layout: foxglove-layout.json).",
                      cls="note"))
    if findings:
        body = page.section("findings", f"Crashes and timeouts of the models ({len(findings)})")
        body.append(table(["frame", "model", "transformation", "stage", "status", "what"],
                          [[f.get("frame"), f.get("model"), f.get("transform"), f.get("stage"), f.get("status"),
                            str(f.get("error") or "").splitlines()[0][:300] if f.get("error") else ""]
                           for f in findings[:MAX_PAIR_ROWS]], ident="findings-table", filter_box=True))
    page.move_after("worst", "table-2")  # the worst cases right after Table 8, where an engineer looks first
    page.move_after("charts", "worst")
    return page.render()


def _deg(rad: Any) -> Any:
    if not isinstance(rad, int | float) or isinstance(rad, bool) or not math.isfinite(rad):
        return "–"
    return Cell(f"{math.degrees(rad):+.2f}", sort=math.degrees(rad), cls="num")


def _plain_deg(deg: Any) -> Any:
    if not isinstance(deg, int | float) or isinstance(deg, bool) or not math.isfinite(deg):
        return "–"
    return Cell(f"{deg:+.2f}", sort=abs(deg), cls="num")


# ----------------------------------------------------------------------------------------------- bench


def _regression(text: str) -> bool:
    """A verdict that names a regression ("regression", "REGRESSION"; not "no regression")."""
    t = str(text).strip().lower()
    return "regress" in t and not t.startswith("no ")


def bench_page(summary: Mapping[str, Any], *, run: Mapping[str, Any], out: Path) -> str:
    """The page of ``lidarmt bench``: modules, the paired comparison per candidate, the verdict, the charts,
    links to each module's own run folder and report."""
    from lidarmt.report import bench as rb

    lidar = summary.get("kind") == "lidar-mr1"
    cfg = summary.get("config") or {}
    page = Page("Bench: " + ("LiDAR MR1" if lidar else "camera steering models"),
                subtitle="paired comparison of modules on the same frames, seeds and follow-ups")
    if lidar:
        page.fact("recording", (cfg.get("source") or {}).get("path", ""), code=True)
        page.fact("design", f"{len(cfg.get('frames', []))} frames, n = "
                            f"{', '.join(str(n) for n in cfg.get('ns', []))}, {cfg.get('trials')} trial(s), "
                            f"seed {cfg.get('seed')}")
    else:
        page.fact("images", cfg.get("images", ""), code=True)
    page.fact("baseline", summary.get("baseline", ""))
    page.fact("test", f"{summary.get('test')}, α = {summary.get('alpha')}, correction: {summary.get('correction')}")
    verdict = str(summary.get("verdict", ""))
    page.fact("verdict", Html(f'<span class="{"bad" if _regression(verdict) else "ok"}">'
                              f"{esc(rb.verdict_line(summary))}</span>"))
    _cmd(page, run)
    body = page.section("modules", "Modules")
    head, rows = rb.module_table(summary)
    body.append(table(head, rows, ident="modules-table"))
    links = []
    for m in summary.get("modules", []):
        name = str(m.get("name"))
        for f in ("report.html", "report.md", "journal.jsonl"):
            if (out / name / f).is_file():
                links.append(link(href(name, f), f"{name}/{f}"))
                break
    if links:
        body.append(p(Html("Module run folders (ordinary campaign run folders, resumable): " + ", ".join(links))))
    for i, comp in enumerate(summary.get("comparisons", [])):
        body = page.section(f"comparison-{i}", rb._title(comp))
        head, rows = rb.paired_table(summary, comp)
        rows = [[*r[:-1], Cell(r[-1], cls="bad" if _regression(r[-1]) else "")] for r in rows]
        body.append(table(head, rows, ident=f"paired-table-{i}"))
        body.append(p("b: pairs only the baseline violates; c: pairs only the candidate violates; "
                      "Δ = (c − b) / pairs.", cls="note"))
        if rb.agreement_line(comp):
            body.append(p(rb.agreement_line(comp)))
        qh, qr = rb.quality_table(summary, comp)
        if qr:
            body.append(table(qh, qr, ident=f"quality-table-{i}"))
    body = page.section("charts", "Charts")
    body.append(_charts(out, list(rb.charts(summary))))
    return page.render()


def page_writer(build: Callable[..., str], **kwargs: Any) -> Callable[[Path], str]:
    """``write_report_set``'s ``html`` argument: ``build(**kwargs, out=folder)``."""
    return lambda out: build(**kwargs, out=Path(out))


def check_links(page: str | os.PathLike[str]) -> list[str]:
    """The relative ``src``/``href`` targets of a written page that do not resolve to a file or folder beside
    it (for tests and ``make demo``); anchors (``#...``) are checked against the page's ids."""
    from html.parser import HTMLParser
    from urllib.parse import unquote, urlsplit

    path = Path(page)
    targets: list[str] = []
    ids: set[str] = set()

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            for k, v in attrs:
                if k in ("src", "href") and v is not None:
                    targets.append(v)
                if k == "id" and v:
                    ids.add(v)

    P().feed(path.read_text(encoding="utf-8"))
    bad = []
    for t in targets:
        u = urlsplit(t)
        if u.scheme or u.netloc:
            bad.append(f"{t} (not a file of the folder)")
        elif t.startswith("#"):
            if t[1:] not in ids:
                bad.append(f"{t} (no such anchor)")
        elif not (path.parent / unquote(u.path)).exists():
            bad.append(f"{t} (missing)")
    return bad


# ----------------------------------------------------------------------------------------------- any report.md

_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MD_CODE = re.compile(r"`([^`]+)`")
_MD_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def _md_target(url: str) -> str | None:
    """A Markdown link target as a relative :func:`href` (with its ``#anchor`` and trailing ``/``), or None
    for anything with a scheme or host (never followed: the page makes no request outside its folder)."""
    from urllib.parse import unquote, urlsplit

    u = urlsplit(url)
    if u.scheme or u.netloc or url.startswith("/"):
        return None
    path = unquote(u.path)
    target = href(path) + ("/" if path.endswith("/") and path.strip("/") else "")
    return target + (f"#{esc(quote(u.fragment, safe=''))}" if u.fragment else "")


def _md_inline(text: str) -> str:
    """One line of the project's Markdown as HTML: escaped, then code, bold, pictures and relative links."""
    codes: list[str] = []

    def keep_code(m: re.Match) -> str:
        codes.append(f"<code>{m.group(1)}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = _MD_CODE.sub(keep_code, esc(text.replace("\\|", "|")))

    def img(m: re.Match) -> str:
        t = _md_target(_html.unescape(m.group(2)))
        return image(t, _html.unescape(m.group(1)), cls="thumb" if "/" in m.group(2) else "chart") if t else m.group(0)

    def lnk(m: re.Match) -> str:
        t = _md_target(_html.unescape(m.group(2)))
        return f'<a href="{t}">{m.group(1)}</a>' if t else m.group(1)

    out = _MD_LINK.sub(lnk, _MD_IMAGE.sub(img, out))
    out = _MD_BOLD.sub(r"<strong>\1</strong>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)


def _md_cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a pipe inside a cell)."""
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return [c.strip() for c in re.split(r"(?<!\\)\|", s)]


def markdown_page(markdown: str, *, title: str = "lidarmt report") -> str:
    """``report.md`` as a page (for the reports without a page of their own: coverage, searches): headings,
    paragraphs, lists, code blocks, pictures, relative links and sortable tables, everything escaped."""
    lines = markdown.splitlines()
    heading = next((ln[2:].strip() for ln in lines if ln.startswith("# ")), title)
    page = Page(heading)
    body = page.section("report", "Report")
    n_tables = 0
    i = 0
    para: list[str] = []

    def flush() -> None:
        if para:
            body.append("<p>" + " ".join(_md_inline(x) for x in para) + "</p>")
            para.clear()

    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if s.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            body.append("<pre><code>" + esc("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
            continue
        if ln.startswith("# "):
            flush()
        elif ln.startswith(("## ", "### ")):
            flush()
            text = ln.split(" ", 1)[1].strip()
            if ln.startswith("## "):
                body = page.section(f"s{len(page.sections)}", text)
            else:
                body.append(f"<h3>{_md_inline(text)}</h3>")
        elif s.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            flush()
            head = _md_cells(s)
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append([Html(_md_inline(c)) if any(k in c for k in "`*[") else c.replace("\\|", "|")
                             for c in _md_cells(lines[j])])
                j += 1
            n_tables += 1
            body.append(table([Html(_md_inline(h)) for h in head], rows, ident=f"table-{n_tables}",
                              filter_box=len(rows) > 20))
            i = j
            continue
        elif s.startswith(("- ", "* ")):
            flush()
            items = []
            while i < len(lines) and lines[i].strip().startswith(("- ", "* ")):
                items.append(f"<li>{_md_inline(lines[i].strip()[2:])}</li>")
                i += 1
            body.append('<ul class="facts">' + "".join(items) + "</ul>")
            continue
        elif not s:
            flush()
        else:
            para.append(s)
        i += 1
    flush()
    return page.render()
