"""What every campaign's reports share: the set of files a run folder gets, written atomically.

Each relation supplies the contents (its summary, tables, charts, JUnit cases, Markdown); this module writes
them the one way: ``summary.json`` (deterministic: a resumed campaign writes the same file as an uninterrupted
one), ``run.json`` (timings, workers, environment), ``table.txt``, the charts, ``junit.xml``, ``report.md`` and
the static page ``report.html`` (:mod:`lidarmt.engine.html`: a page of its own for MR1, camera and bench, else
``report.md`` as a page).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from lidarmt._atomic import atomic_path, atomic_write_text


def savefig(fig, path: str | os.PathLike[str]) -> None:
    """Save a matplotlib figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
    finally:
        plt.close(fig)


def junit_xml(name: str, suites: Mapping[str, Iterable[tuple[str, str, str]]]) -> str:
    """JUnit XML text: ``suites`` maps a suite name to (case name, outcome, body) triples, outcome "ok",
    "failure" or "error"; ``body`` is the element's inner XML (already escaped) or ""."""
    out_suites = []
    total = [0, 0, 0]
    for suite, cases in suites.items():
        lines, st = [], [0, 0, 0]
        for case, outcome, body in cases:
            st[0] += 1
            st[1] += outcome == "failure"
            st[2] += outcome == "error"
            lines.append(f"    <testcase classname={quoteattr(suite)} name={quoteattr(case)}>{body}</testcase>")
        total = [a + b for a, b in zip(total, st, strict=True)]
        out_suites.append(f'  <testsuite name={quoteattr(suite)} tests="{st[0]}" failures="{st[1]}" '
                          f'errors="{st[2]}">')
        out_suites.extend(lines)
        out_suites.append("  </testsuite>")
    head = ['<?xml version="1.0" encoding="UTF-8"?>',
            f'<testsuites name={quoteattr(name)} tests="{total[0]}" failures="{total[1]}" errors="{total[2]}">']
    return "\n".join([*head, *out_suites, "</testsuites>"]) + "\n"


def failure_body(kind: str, message: str, detail: str = "", *, tag: str = "failure") -> str:
    return f"<{tag} type={quoteattr(kind)} message={quoteattr(message)}>{escape(detail)}</{tag}>"


def write_report_set(out: str | os.PathLike[str], *, summary: Mapping[str, Any], run: Mapping[str, Any],
                     table: str, markdown: str, junit: str | Callable[[Path], None],
                     charts: Mapping[str, Callable[[Path], None]],
                     html: Callable[[Path], str] | None = None) -> dict[str, Path]:
    """Write a campaign's reports into ``out``; returns their paths by name. ``junit`` is the XML text or a
    function writing it to a path; ``charts`` map file names to functions writing each picture; ``html``
    builds ``report.html`` from the run folder (:mod:`lidarmt.engine.html`), last, once the pictures and
    bundles it links to are written (default: ``markdown`` as a page)."""
    out = Path(out)
    paths = {name: out / name for name in ("summary.json", "run.json", "table.txt", *charts, "junit.xml",
                                           "report.md")}
    summary = {**summary, **machines_of_run(out)}
    atomic_write_text(paths["summary.json"], json.dumps(summary, indent=2, sort_keys=True) + "\n")
    atomic_write_text(paths["run.json"], json.dumps(run, indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(paths["table.txt"], table)
    for name, draw in charts.items():
        draw(paths[name])
    if callable(junit):
        junit(paths["junit.xml"])
    else:
        atomic_write_text(paths["junit.xml"], junit)
    atomic_write_text(paths["report.md"], markdown)
    if html is None:  # no page of its own (coverage, searches): report.md as a page
        from lidarmt.engine.html import markdown_page

        def html(_: Path) -> str:
            return markdown_page(markdown, folder=out)
    paths["report.html"] = out / "report.html"
    atomic_write_text(paths["report.html"], html(out))
    return paths


def reports_line(paths: Mapping[str, Path]) -> str:
    """The closing line of every command that writes a report set: the page to open first, then the rest."""
    names = [n for n in ("report.html", "report.md", "summary.json", "junit.xml") if n in paths]
    first = f"reports: {paths[names[0]]}" + (" (open in a browser)" if names[0] == "report.html" else "")
    return "  ".join([first, *(str(paths[n]) for n in names[1:])])


def machines_of_run(out: Path) -> dict[str, Any]:
    """What summary.json says of the machines a run folder's verdicts came from (its journal's
    :func:`lidarmt.engine.journal.machines`), only when there is more than one ISA (a campaign resumed on another
    CPU: floats folded from both differ in the last digits from a run on either alone, and a verdict on a
    threshold can differ): ``machines`` (ISA and pairs each) and ``machines_note``. A run on one machine's
    summary is unchanged."""
    from lidarmt.engine.journal import JOURNAL_NAME, machines

    path = out / JOURNAL_NAME
    if not path.is_file():
        return {}
    try:
        got = machines(path)
    except Exception:  # noqa: BLE001 - a journal the campaign could fold but this cannot read: say nothing
        return {}
    if len(got) < 2:
        return {}
    return {"machines": got, "machines_note": "verdicts from more than one ISA: " + ", ".join(
        f"{m['pairs']} pair(s) on {m['isa']}" for m in got)}


def text_block(title: str, head: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table for table.txt: its title, the header and the rows right-aligned in columns as wide as
    their widest cell, then a blank line."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    return [title, "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)),
            *("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows), ""]


def text_tables(caption: str, tables, summary: Mapping[str, Any]) -> str:
    """table.txt of a report whose tables are ``(title, rows_function)`` pairs: the caption, then each table as
    :func:`text_block` draws it from ``rows_function(summary)``."""
    out = [caption, ""]
    for title, fn in tables:
        out += text_block(title, *fn(summary))
    return "\n".join(out)


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the first column left-aligned, the others right-aligned, ``|`` escaped in cells."""
    def esc(text: str) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in head) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def rich_table(title: str, head: list[str], rows: list[list[str]], *, caption: str | None = None,
               row_style: Callable[[list[str]], str | None] | None = None):
    """A rich Table with the house layout: first column left, numbers right, cells never wrapped."""
    from rich.table import Table

    t = Table(title=title, caption=caption)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r, style=row_style(r) if row_style else None)
    return t
