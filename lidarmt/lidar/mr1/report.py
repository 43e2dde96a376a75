"""Reports of an MR1 campaign, written atomically into its run folder.

* ``summary.json``: the configuration and the totals (deterministic: a resumed campaign writes the same file
  as an uninterrupted one; timings go to ``run.json``).
* ``table.txt`` and the printed rich table: the study's table (n, pairs, violations, rate with a 95 % Wilson
  interval) for |O| <= |O′| and for O ⊆ O′, with the study's published rates for reference; the per-class table.
* ``classes.png``: the study's Figure 3, a 100 %-stacked column per class and n: the share of pairs whose
  count of that class decreased / stayed / increased. ``rates.png``: violation rate against n with intervals.
* ``junit.xml``: one test case per pair (violations are failures, crashes and timeouts errors), for CI.
* ``report.md``: all of it in Markdown, with the pictures embedded and the bug bundles listed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from lidarmt._atomic import atomic_write_text
from lidarmt._show import md_code
from lidarmt.engine.findings import EVIDENCE_KINDS, LOW_EVIDENCE_RULE, SEVERITIES, SEVERITY_RULE
from lidarmt.engine.html import (
    MAX_PAIR_ROWS,
    Cell,
    Html,
    Page,
    bundle_link,
    bundle_thumb,
    chart_images,
    command_facts,
    esc,
    file_links,
    p,
    page_writer,
    rate_cell,
    table,
)
from lidarmt.engine.report import savefig, write_report_set
from lidarmt.engine.stats import fmt_rate, rate
from lidarmt.engine.tally import LABEL_KINDS, STUDY_RATES, Tally, breakdown_dict
from lidarmt.lidar.mr1.oracle import describe_lost
from lidarmt.lidar.perception.apollo.caffe import weights_note
from lidarmt.lidar.perception.apollo.evaluate import LABEL_MATCH_RULE
from lidarmt.types import CLASS_ORDER

STUDY_REF = "Zhou & Sun, CACM 62(3) 2019"


def summary_dict(config: Mapping[str, Any], tally: Tally) -> dict[str, Any]:
    """The deterministic summary of a campaign (what summary.json holds)."""
    rows = []
    for n in sorted(tally.by_n):
        t = tally.by_n[n]
        rows.append({
            "n": n,
            "pairs": t.pairs,
            "count_relation": rate(t.count_violations, t.pairs),
            "any_class_count_relation": rate(t.any_class_violations, t.pairs),
            "subset_relation": rate(t.subset_violations, t.pairs),
            "study_rate": STUDY_RATES.get(n),
            "crashes": t.crashes,
            "timeouts": t.timeouts,
            "source_obstacles": t.source_obstacles,
            "missing": t.missing,
            "classes": {c: ct.to_dict() | {"class_violation": rate(ct.decreased, t.pairs)}
                        for c, ct in t.classes.items()},
            # mean added points per pair inside the CNN's grid and height band (None: not recorded)
            "reached_mean": None if t.reached_mean is None else round(t.reached_mean, 3),
            "reached_pairs": t.reached_pairs,
            "lost_filtered_out": t.lost_filtered_out,
            # lost obstacles (that pass the filter) by size class and distance band
            "breakdown": breakdown_dict(t.breakdown),
            # what the source frames' labels say of the lost obstacles (labelled object / junk / outside)
            **t.labels_dict(),
            "labelled_relation": rate(t.labelled_violations, t.labelled_pairs),
            # lost obstacles per severity and evidence; pairs that lost a real obstacle (not junk/low evidence)
            **t.findings_dict(),
            "real_relation": rate(t.real_violations, t.pairs),
        })
    flt = getattr(tally, "lost_filter", None)
    return {"relation": "MR1: obstacles inside the ROI survive n random points added outside it",
            "label_matching": LABEL_MATCH_RULE, "evidence_rule": LOW_EVIDENCE_RULE, "severity_rule": SEVERITY_RULE,
            "config": dict(config), "pairs_expected": _expected(config), "pairs_done": tally.done,
            "complete": tally.done >= _expected(config),
            "filter": flt.to_dict() if flt is not None else {"min_points": 0, "min_size_m3": 0.0},
            "by_n": rows}


def _reach(r: Mapping[str, Any]) -> str:
    """Mean added points per pair that reached the network, ``"234 (23 %)"``; ``–`` when not recorded."""
    m = r.get("reached_mean")
    if m is None:
        return "–"
    return f"{m:.0f} ({100 * m / r['n']:.0f} %)" if r["n"] else f"{m:.0f}"


def _filter_note(summary: Mapping[str, Any]) -> str:
    f = summary.get("filter") or {}
    parts = ([f"≥ {f['min_points']} points"] if f.get("min_points") else []) + (
        [f"≥ {f['min_size_m3']:g} m³"] if f.get("min_size_m3") else [])
    if not parts:
        return ""
    out = sum(r.get("lost_filtered_out", 0) for r in summary["by_n"])
    return (f"filter: only lost obstacles with {' and '.join(parts)} count ({out} lost obstacle(s) left out; "
            "the journal keeps them)")


REAL_NOTE = ("excl. junk/low-ev.: pairs that lost an obstacle other than unlabelled junk or a low-evidence one "
             "(lidarmt.engine.findings)")


def _real(r: Mapping[str, Any]) -> tuple[str, str]:
    """(count, rate) of the pairs that lost a real obstacle; dashes for a summary written before it was kept."""
    rr = r.get("real_relation")
    if rr is None:
        return "–", "–"
    return str(rr["k"]), fmt_rate(rr["k"], rr["n"])


def has_labels(summary: Mapping[str, Any]) -> bool:
    """Whether any judged pair's source frame carried object labels (the labelled/unlabelled split is known)."""
    return any(r.get("labelled_pairs") for r in summary["by_n"])


def lost_label_rows(summary: Mapping[str, Any]) -> list[tuple[int, str, list[int]]]:
    """[(n, class of the lost obstacle, [labelled, unlabelled, outside, not known])] for the classes that lost any,
    then an "all" row per n."""
    rows = []
    for r in summary["by_n"]:
        by = r.get("lost_by_label") or {}
        tot = [0] * len(LABEL_KINDS)
        for c in CLASS_ORDER:
            counts = [int((by.get(k) or {}).get(c.value, 0)) for k in LABEL_KINDS]
            tot = [a + b for a, b in zip(tot, counts, strict=True)]
            if sum(counts):
                rows.append((r["n"], c.value, counts))
        rows.append((r["n"], "all", tot))
    return rows


def _labelled_as(r: Mapping[str, Any]) -> str:
    """``"2 car of 41 in O (car 38, cyclist 3)"``: the labelled objects lost, of those among the source obstacles
    (summed over the pairs)."""
    la = r.get("labelled_as") or {}
    lost = ", ".join(f"{v} {k}" for k, v in la.items() if v) or "none"
    src = r.get("labelled_source") or {}
    if not any(src.values()):
        return lost
    return (f"{lost} of {sum(src.values())} in O ("
            + ", ".join(f"{k} {v}" for k, v in src.items() if v) + ")")


def breakdown_rows(summary: Mapping[str, Any], key: str = "breakdown") -> tuple[list[str], list[tuple[int, str, list[int]]]]:
    """The size × distance breakdown as (distance bands, [(n, size class, counts per band)]); ``key``
    ``breakdown_labelled``: of the lost labelled objects only."""
    bands: list[str] = []
    rows: list[tuple[int, str, list[int]]] = []
    for r in summary["by_n"]:
        b = r.get(key) or {}
        for size, per in b.items():
            for d in per:
                if d not in bands:
                    bands.append(d)
            rows.append((r["n"], size, [int(per.get(d, 0)) for d in bands]))
    return bands, [(n, s, (c + [0] * len(bands))[: len(bands)]) for n, s, c in rows]


def _labelled_cells(summary: Mapping[str, Any]) -> dict[tuple[int, str, str], str]:
    """``{(n, size, band): " (3 L)"}``: the lost labelled objects of a breakdown cell, where there are any."""
    out = {}
    for r in summary["by_n"]:
        for size, per in (r.get("breakdown_labelled") or {}).items():
            for band, k in per.items():
                if k:
                    out[(r["n"], size, band)] = f" ({k} L)"
    return out


def _expected(config: Mapping[str, Any]) -> int:
    return len(config.get("frames", [])) * len(config.get("ns", [])) * int(config.get("trials", 1))


# ----------------------------------------------------------------------------------------------- tables


def rich_tables(summary: Mapping[str, Any]):
    """The study's table and the per-class table as rich Tables."""
    from rich.table import Table

    caption = (f"study: the rates {STUDY_REF} published for |O| > |O′|; reached: mean added points per pair "
               "inside the CNN's grid and height band")
    if _filter_note(summary):
        caption += "\n" + _filter_note(summary)
    caption += "\n" + REAL_NOTE
    main = Table(title="MR1 violations per n (rate with 95 % Wilson interval)", caption=caption)
    for col in ("n", "pairs", "reached", "|O|>|O′|", "rate", "study", "O⊄O′ all", "rate", "excl. junk/low-ev.",
                "rate", "crash", "t/o"):
        main.add_column(col, justify="right", no_wrap=True)
    for r in summary["by_n"]:
        c, s = r["count_relation"], r["subset_relation"]
        study = f"{100 * r['study_rate']:.1f} %" if r["study_rate"] is not None else "–"
        rk, rr = _real(r)
        main.add_row(str(r["n"]), str(r["pairs"]), _reach(r), str(c["k"]), fmt_rate(c["k"], c["n"]), study,
                     str(s["k"]), fmt_rate(s["k"], s["n"]), rk, rr, str(r["crashes"]), str(r["timeouts"]))
    per = Table(title="Per class: pairs where the count decreased / stayed / increased (rate of |O_c|>|O′_c|)")
    per.add_column("n", justify="right")
    for c in CLASS_ORDER:
        per.add_column(c.value, justify="right", no_wrap=True)
    for r in summary["by_n"]:
        cells = []
        for c in CLASS_ORDER:
            ct = r["classes"][c.value]
            pct = f"{100 * ct['decreased'] / r['pairs']:.1f}%" if r["pairs"] else "–"
            cells.append(f"{ct['decreased']}/{ct['same']}/{ct['increased']} ({pct})")
        per.add_row(str(r["n"]), *cells)
    bands, rows = breakdown_rows(summary)
    size = Table(title="Lost obstacles by size and distance")
    for col in ("n", "size", *bands, "all"):
        size.add_column(col, justify="right", no_wrap=True)
    labelled = has_labels(summary)
    lab_of = _labelled_cells(summary) if labelled else {}
    for n, s_, counts in rows:
        cells = [f"{c}{lab_of.get((n, s_, b), '')}" for b, c in zip(bands, counts, strict=True)]
        size.add_row(str(n), s_, *cells, str(sum(counts)))
    if labelled:
        size.caption = "(L): of them, lost LABELLED objects (real cars, pedestrians, cyclists)"
    sev = Table(title="Findings (lost obstacles) per severity and per evidence", caption=SEVERITY_RULE + "; "
                + LOW_EVIDENCE_RULE)
    for col in ("n", *SEVERITIES, "|", *EVIDENCE_KINDS):
        sev.add_column(col, justify="right")
    for r in summary["by_n"]:
        bs, be = r.get("by_severity") or {}, r.get("by_evidence") or {}
        sev.add_row(str(r["n"]), *(str(bs.get(k, 0)) for k in SEVERITIES), "|",
                    *(str(be.get(k, 0)) for k in EVIDENCE_KINDS))
    if not labelled:
        return main, per, size, sev
    lab = Table(title="Lost obstacles and the labels: LABELLED objects (real objects lost) vs unlabelled junk",
                caption="class: of the lost obstacle; " + LABEL_MATCH_RULE)
    for col in ("n", "class", *LABEL_KINDS, "pairs losing a labelled object", "labelled objects lost (of those in O)"):
        lab.add_column(col, justify="right")
    by_n = {r["n"]: r for r in summary["by_n"]}
    for n, cls, counts in lost_label_rows(summary):
        r = by_n[n]
        lr = r.get("labelled_relation") or {"k": 0, "n": 0}
        extra = ([f"{lr['k']} of {lr['n']} ({fmt_rate(lr['k'], lr['n'])})", _labelled_as(r)] if cls == "all"
                 else ["", ""])
        lab.add_row(str(n), cls, *map(str, counts), *extra)
    return main, per, size, sev, lab


def text_table(summary: Mapping[str, Any]) -> str:
    lines = [f"{'n':>8} {'pairs':>6} {'reached':>11} {'|O|>|O′|':>9} {'rate (95% CI)':>24} {'study':>7} "
             f"{'O⊄O′ all':>8} {'rate (95% CI)':>24} {'excl. junk':>10} {'rate (95% CI)':>24} {'crash':>6} {'t/o':>4}"]
    for r in summary["by_n"]:
        c, s = r["count_relation"], r["subset_relation"]
        study = f"{100 * r['study_rate']:.1f} %" if r["study_rate"] is not None else "–"
        rk, rr = _real(r)
        lines.append(f"{r['n']:>8} {r['pairs']:>6} {_reach(r):>11} {c['k']:>9} {fmt_rate(c['k'], c['n']):>24} "
                     f"{study:>7} {s['k']:>8} {fmt_rate(s['k'], s['n']):>24} {rk:>10} {rr:>24} {r['crashes']:>6} "
                     f"{r['timeouts']:>4}")
    lines.append(REAL_NOTE)
    lines.append("reached: mean added points per pair inside the CNN's grid and height band; study: the rates "
                 f"{STUDY_REF} published for |O| > |O′|")
    if _filter_note(summary):
        lines.append(_filter_note(summary))
    lines.append("")
    lines.append("per class, pairs decreased/stayed/increased:")
    lines.append(f"{'n':>8} " + " ".join(f"{c.value:>18}" for c in CLASS_ORDER))
    for r in summary["by_n"]:
        lines.append(f"{r['n']:>8} " + " ".join(
            f"{'/'.join(str(r['classes'][c.value][k]) for k in ('decreased', 'same', 'increased')):>18}"
            for c in CLASS_ORDER))
    lines += ["", "findings (lost obstacles) per severity | per evidence:",
              f"{'n':>8} " + " ".join(f"{k:>9}" for k in SEVERITIES) + " | "
              + " ".join(f"{k:>15}" for k in EVIDENCE_KINDS)]
    for r in summary["by_n"]:
        bs, be = r.get("by_severity") or {}, r.get("by_evidence") or {}
        lines.append(f"{r['n']:>8} " + " ".join(f"{bs.get(k, 0):>9}" for k in SEVERITIES) + " | "
                     + " ".join(f"{be.get(k, 0):>15}" for k in EVIDENCE_KINDS))
    lines += [SEVERITY_RULE, LOW_EVIDENCE_RULE]
    bands, rows = breakdown_rows(summary)
    lines += ["", "lost obstacles (O ⊄ O′) by size (box volume) and distance from the sensor:",
              f"{'n':>8} {'size':>9} " + " ".join(f"{b:>8}" for b in bands) + f" {'all':>6}"]
    lab_of = _labelled_cells(summary) if has_labels(summary) else {}
    for n, size, counts in rows:
        cells = [f"{str(c) + lab_of.get((n, size, b), ''):>8}" for b, c in zip(bands, counts, strict=True)]
        lines.append(f"{n:>8} {size:>9} " + " ".join(cells) + f" {sum(counts):>6}")
    if has_labels(summary):
        lines += ["(k L): of them, k lost LABELLED objects", "",
                  "lost obstacles and the labels (class of the lost obstacle): LABELLED object / unlabelled / "
                  "outside the labelled region / not known:",
                  f"{'n':>8} {'class':>10} " + " ".join(f"{k:>10}" for k in LABEL_KINDS)]
        for n, cls, counts in lost_label_rows(summary):
            lines.append(f"{n:>8} {cls:>10} " + " ".join(f"{c:>10}" for c in counts))
        for r in summary["by_n"]:
            lr = r.get("labelled_relation") or {"k": 0, "n": 0}
            lines.append(f"n={r['n']}: {lr['k']} of {lr['n']} labelled pairs lost a labelled object; labelled "
                         f"objects lost: {_labelled_as(r)}")
        lines.append("rule: " + LABEL_MATCH_RULE)
    return "\n".join(lines) + "\n"


def markdown_tables(summary: Mapping[str, Any]) -> str:
    out = ["| n | pairs | reached | \\|O\\| > \\|O′\\| | rate (95 % CI) | study | O ⊄ O′ (all) | rate (95 % CI) | "
           "O ⊄ O′ excluding junk/low-evidence | rate (95 % CI) | crashes | timeouts |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary["by_n"]:
        c, s = r["count_relation"], r["subset_relation"]
        study = f"{100 * r['study_rate']:.1f} %" if r["study_rate"] is not None else "–"
        rk, rr = _real(r)
        out.append(f"| {r['n']} | {r['pairs']} | {_reach(r)} | {c['k']} | {fmt_rate(c['k'], c['n'])} | {study} | "
                   f"{s['k']} | {fmt_rate(s['k'], s['n'])} | {rk} | {rr} | {r['crashes']} | {r['timeouts']} |")
    out += ["", f"*{REAL_NOTE}*", "", "**Findings per severity and per evidence** (lost obstacles; "
            + SEVERITY_RULE + "; " + LOW_EVIDENCE_RULE + "):", "",
            "| n | " + " | ".join(SEVERITIES) + " | " + " | ".join(EVIDENCE_KINDS) + " |",
            "|---:|" + "---:|" * (len(SEVERITIES) + len(EVIDENCE_KINDS))]
    for r in summary["by_n"]:
        bs, be = r.get("by_severity") or {}, r.get("by_evidence") or {}
        out.append(f"| {r['n']} | " + " | ".join(str(bs.get(k, 0)) for k in SEVERITIES) + " | "
                   + " | ".join(str(be.get(k, 0)) for k in EVIDENCE_KINDS) + " |")
    out += ["", "*reached*: mean added points per pair that fell inside the CNN's grid and height band (the others "
            f"cannot change any obstacle); *study*: the rates {STUDY_REF} published for \\|O\\| > \\|O′\\|."]
    if _filter_note(summary):
        out += ["", f"*{_filter_note(summary)}*"]
    out += ["", "Per class: pairs where the count of the class decreased / stayed / increased "
            "(rate of |O_c| > |O′_c|):", "",
            "| n | " + " | ".join(c.value for c in CLASS_ORDER) + " |", "|---:|" + "---:|" * len(CLASS_ORDER)]
    for r in summary["by_n"]:
        cells = []
        for c in CLASS_ORDER:
            ct = r["classes"][c.value]
            cells.append(f"{ct['decreased']} / {ct['same']} / {ct['increased']} ({fmt_rate(ct['decreased'], r['pairs'])})")
        out.append(f"| {r['n']} | " + " | ".join(cells) + " |")
    out += ["", "How the unmatched source obstacles (O ⊄ O′) were lost:", "",
            "| n | source obstacles | vanished | merged | reclassified | degraded |", "|---:|---:|---:|---:|---:|---:|"]
    for r in summary["by_n"]:
        m = r["missing"]
        out.append(f"| {r['n']} | {r['source_obstacles']} | {m.get('vanished', 0)} | {m.get('merged', 0)} | "
                   f"{m.get('reclassified', 0)} | {m.get('degraded', 0)} |")
    bands, rows = breakdown_rows(summary)
    out += ["", "Lost obstacles by size (box volume l × w × h) and distance of their centre from the sensor "
            "(junk is small; cars are 5–15 m³):", "",
            "| n | size | " + " | ".join(bands) + " | all |", "|---:|---|" + "---:|" * (len(bands) + 1)]
    lab_of = _labelled_cells(summary) if has_labels(summary) else {}
    for n, size, counts in rows:
        cells = [f"{c}{lab_of.get((n, size, b), '')}" for b, c in zip(bands, counts, strict=True)]
        out.append(f"| {n} | {size} | " + " | ".join(cells) + f" | {sum(counts)} |")
    if has_labels(summary):
        out += ["", "*(k L)*: of them, k lost **labelled** objects (real cars, pedestrians, cyclists).", "",
                "**Lost labelled objects.** What the source frames' labels say of each lost obstacle: a LABELLED "
                "object (a real object was lost), unlabelled (junk, or something the labels do not name), outside "
                "the labelled region, or not known (a record from before the labels were matched). Rule: "
                + LABEL_MATCH_RULE + ".", "",
                "| n | class (of the lost obstacle) | labelled | unlabelled | outside | not known | pairs losing a "
                "labelled object | labelled objects lost (of the source obstacles that are labelled objects, "
                "summed over pairs) |", "|---:|---|---:|---:|---:|---:|---:|---|"]
        by_n = {r["n"]: r for r in summary["by_n"]}
        for n, cls, counts in lost_label_rows(summary):
            r = by_n[n]
            lr = r.get("labelled_relation") or {"k": 0, "n": 0}
            extra = (f"{lr['k']} of {lr['n']} ({fmt_rate(lr['k'], lr['n'])}) | {_labelled_as(r)}" if cls == "all"
                     else " | ")
            out.append(f"| {n} | {cls} | " + " | ".join(map(str, counts)) + f" | {extra} |")
    else:
        out += ["", "*The source frames carry no object labels: lost obstacles cannot be told from junk by their "
                "labels (labelled recordings: KITTI object folders, KITTI raw drives with tracklets, SemanticKITTI, "
                "simulated .npz frames).*"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------- charts


_savefig = savefig


def class_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """The study's Figure 3: per class, a 100 %-stacked column per n (decreased / stayed / increased)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = summary["by_n"]
    fig, axes = plt.subplots(1, len(CLASS_ORDER), figsize=(3.0 * len(CLASS_ORDER), 3.6), sharey=True)
    colours = {"decreased": "#d62728", "same": "#bbbbbb", "increased": "#1f77b4"}
    x = np.arange(len(rows))
    for ax, c in zip(axes, CLASS_ORDER, strict=True):
        bottom = np.zeros(len(rows))
        for part in ("decreased", "same", "increased"):
            vals = np.array([100.0 * r["classes"][c.value][part] / r["pairs"] if r["pairs"] else 0.0 for r in rows])
            ax.bar(x, vals, bottom=bottom, color=colours[part], label=part, width=0.7)
            for xi, (b, v) in enumerate(zip(bottom, vals, strict=True)):
                if v >= 6:
                    ax.text(xi, b + v / 2, f"{v:.0f}", ha="center", va="center", fontsize=7)
            bottom += vals
        ax.set_xticks(x, [str(r["n"]) for r in rows])
        ax.set_xlabel("points added (n)")
        ax.set_title(c.value)
        ax.set_ylim(0, 100)
    axes[0].set_ylabel("share of pairs (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, [f"count {lb} in t′" for lb in labels], loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("MR1: how each class's obstacle count changed after adding n points outside the ROI", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _savefig(fig, Path(path))


def rate_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Violation rate against n for both relations, with 95 % Wilson intervals and the study's rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary["by_n"] if r["pairs"]]
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ns = [r["n"] for r in rows]
    for key, label, colour, shift in (("count_relation", "|O| > |O′| (study's check)", "#d62728", 0.94),
                                      ("subset_relation", "O ⊄ O′ (strict)", "#9467bd", 1.06)):
        y = [100 * r[key]["rate"] for r in rows]
        lo = [max(0.0, 100 * (r[key]["rate"] - r[key]["ci_low"])) for r in rows]
        hi = [max(0.0, 100 * (r[key]["ci_high"] - r[key]["rate"])) for r in rows]
        ax.errorbar([n * shift for n in ns], y, yerr=[lo, hi], marker="o", capsize=3, label=label, color=colour)
    ref = [(n, 100 * v) for n, v in sorted(STUDY_RATES.items())]
    ax.plot([n for n, _ in ref], [v for _, v in ref], "k--", marker="s", label=f"study ({STUDY_REF})", lw=1)
    ax.set_xscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("points added outside the ROI (n)")
    ax.set_ylabel("violating pairs (%)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, Path(path))


# ----------------------------------------------------------------------------------------------- junit


def write_junit(path: str | os.PathLike[str], records: Iterable[dict[str, Any]], ns: Iterable[int], *,
                name: str = "lidarmt.mr1") -> None:
    """JUnit XML: a test suite per n, a test case per pair; violations fail, crashes/timeouts are errors."""
    suites: dict[int, list[tuple[tuple[int, int], str]]] = {int(n): [] for n in ns}
    stats: dict[int, list[int]] = {int(n): [0, 0, 0] for n in suites}  # tests, failures, errors
    for rec in records:
        n = int(rec["n"])
        case = f'frame {rec["frame"]:06d} trial {rec["trial"]}'
        body = ""
        st = stats.setdefault(n, [0, 0, 0])
        st[0] += 1
        if rec["status"] != "ok":
            st[2] += 1
            body = (f"<error type={quoteattr(rec['status'])} message={quoteattr(rec.get('error', ''))}>"
                    f"{escape(rec.get('traceback', ''))}</error>")
        else:
            v = rec["verdict"]
            if v["count_violation"] or v["subset_violation"]:
                st[1] += 1
                ns_, nf = sum(v["counts_source"].values()), sum(v["counts_follow"].values())
                what = "|O| > |O′|" if v["count_violation"] else "O ⊄ O′"
                msg = f"{what}: {ns_} obstacles in t, {nf} in t′; {len(v['missing'])} source obstacle(s) unmatched"
                lost = [f"#{m['source']} {m['class']} {m['kind']}"
                        + (f" ({describe_lost(m)})" if describe_lost(m) else "") for m in v["missing"]]
                if lost:
                    msg += ": " + "; ".join(lost[:3]) + (f"; … {len(lost) - 3} more" if len(lost) > 3 else "")
                detail = "\n".join(lost)
                body = f"<failure type={quoteattr('MR1')} message={quoteattr(msg)}>{escape(detail)}</failure>"
        suites.setdefault(n, []).append(((int(rec["frame"]), int(rec["trial"])),
            f'    <testcase classname={quoteattr(f"{name}.n{n}")} name={quoteattr(case)}>{body}</testcase>'))
    total = [sum(s[i] for s in stats.values()) for i in range(3)]
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name={quoteattr(name)} tests="{total[0]}" failures="{total[1]}" errors="{total[2]}">']
    for n in sorted(suites):
        t, f, e = stats.get(n, [0, 0, 0])
        out.append(f'  <testsuite name={quoteattr(f"{name}.n{n}")} tests="{t}" failures="{f}" errors="{e}">')
        out.extend(text for _, text in sorted(suites[n]))  # frame order, whatever order the journal has
        out.append("  </testsuite>")
    out.append("</testsuites>")
    atomic_write_text(path, "\n".join(out) + "\n")


# ----------------------------------------------------------------------------------------------- markdown


def markdown_report(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: list[dict],
                    findings: list[dict]) -> str:
    cfg = summary["config"]
    env = run.get("environment", {})
    lines = [
        "# MR1 fuzz campaign",
        "",
        "**Relation (MR1).** For a source frame t with obstacles O, the follow-up t′ adds n points at random in "
        "the 3-D space outside t's ROI (z and intensity uniform between t's minimum and maximum); the "
        "obstacles O′ of t′ must include O. The study checked the weaker |O| ≤ |O′| "
        f"({STUDY_REF}: 2.7 %, 12.1 %, 33.5 % violations for n = 10, 100, 1000).",
        "",
        f"- recording: {md_code(cfg['source']['path'])}" + (f" (topic {md_code(cfg['source']['topic'])})" if cfg['source'].get('topic') else ""),
        (f"- ROI: the area each source frame's ground labels cover, or without ground labels its labelled region "
         f"(`--roi labels`, range {cfg['roi']['range']:g} m)"
         if cfg['roi']['map'] == "labels" else
         f"- map: {md_code(cfg['roi']['map'])} (ROI range {cfg['roi']['range']:g} m, map frame {cfg['roi']['map_frame']})"),
        f"- system under test: {md_code(cfg['sut']['name'])} {json.dumps(cfg['sut']['options']) if cfg['sut']['options'] else ''}"
        + weights_note(cfg["sut"]["options"]),
        f"- frames: {len(cfg['frames'])}, n: {', '.join(str(n) for n in cfg['ns'])}, trials: {cfg['trials']}, "
        f"seed: {cfg['seed']}, region: {cfg['region']['shape']} {cfg['region']['size']:g} m"
        + (f", timeout {cfg['timeout']:g} s" if cfg.get("timeout") else ""),
        f"- pairs judged: {summary['pairs_done']} of {summary['pairs_expected']}"
        + ("" if summary["complete"] else " (**incomplete**: run again with --resume)"),
        f"- environment: lidarmt {env.get('lidarmt', '?')}, numpy {env.get('numpy', '?')}, "
        f"torch {env.get('torch', '–')}, {env.get('cpu', '?')} ({env.get('cpus', '?')} CPUs)",
    ]
    if run.get("throughput"):
        lines.append(f"- throughput: {run['throughput']:.2f} verdicts/s over {run.get('ran', 0)} pairs "
                     f"with {run.get('workers', 1)} worker(s)")
    lines += ["", "## Violations", "", markdown_tables(summary), "![rates](rates.png)", "",
              "## Per class (the study's Figure 3)", "", "![classes](classes.png)", ""]
    if findings:
        lines += ["## Crashes and timeouts of the perception module", "", "| frame | n | trial | stage | what |",
                  "|---:|---:|---:|---|---|"]
        for f in findings[:50]:
            lines.append(f"| {f['frame']} | {f['n']} | {f['trial']} | {f['stage']} | {f['status']}: "
                         f"{str(f.get('error', '')).splitlines()[0][:120] if f.get('error') else ''} |")
        if len(findings) > 50:
            lines.append(f"\n… and {len(findings) - 50} more in journal.jsonl")
        lines.append("")
    if bundles:
        lines += ["## Bug bundles", "", "| bundle | n | frame | trial | \\|O\\| → \\|O′\\| | lost | minimal subset | picture |",
                  "|---|---:|---:|---:|---|---|---|---|"]
        for b in bundles:
            if b.get("error"):
                lines.append(f"| {b['id']} | | | | | | failed: {b['error'][:100]} | |")
                continue
            k = b.get("key", [None, None, None])
            mini = b.get("ddmin") or {}
            ms = (f"{mini.get('size')} point(s), {'1-minimal' if mini.get('one_minimal') else mini.get('stopped', '')}"
                  if mini else "–")
            pic = f"![bev](violations/{b['id']}/bev.png)" if b.get("has_bev") else ""
            lines.append(f"| [{b['id']}](violations/{b['id']}/report.md) | {k[1]} | {k[0]} | {k[2]} | "
                         f"{b.get('n_source', '?')} → {b.get('n_follow', '?')} | {b.get('lost', '')}"
                         f"{': ' + b['lost_details'] if b.get('lost_details') else ''} | {ms} | {pic} |")
        lines.append("")
    return "\n".join(lines)


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, records: Iterable[dict],
                  run: Mapping[str, Any], bundles: list[dict], findings: list[dict]) -> dict[str, Path]:
    """Write every report of a campaign into ``out``; returns their paths by name."""
    return write_report_set(
        out, summary=summary, run=run, table=text_table(summary),
        markdown=markdown_report(summary, run=run, bundles=bundles, findings=findings),
        junit=lambda path: write_junit(path, records, summary["config"]["ns"]),
        charts={"classes.png": lambda p: class_chart(summary, p), "rates.png": lambda p: rate_chart(summary, p)},
        html=page_writer(campaign_page, summary=summary, run=run, bundles=bundles, findings=findings))


# ----------------------------------------------------------------------------------------------- report.html

#: Per-n keys of summary.json that the study's table shows in its own columns (others are added as columns).
_KNOWN_BY_N = {"n", "pairs", "count_relation", "any_class_count_relation", "subset_relation", "study_rate",
               "crashes", "timeouts", "source_obstacles", "missing", "classes", "reached_mean", "reached_pairs",
               "lost_filtered_out", "breakdown", "real_violations", "real_relation"}


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
        return rate_cell(v)
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
    command_facts(page, run)

    by_n = summary.get("by_n", [])
    extra = _extra_columns(by_n)
    body = page.section("study", "Violations per n (the study's table)")
    head = ["n", "pairs", "reached", "|O| > |O′|", "rate (95 % CI)", "study", "O ⊄ O′ (all)", "rate (95 % CI)",
            "excl. junk/low-evidence", "rate (95 % CI)", "crashes", "timeouts", *[k.replace("_", " ") for k in extra]]
    rows = []
    for r in by_n:
        c, s = r["count_relation"], r["subset_relation"]
        reached = r.get("reached_mean")
        rows.append([r["n"], r["pairs"], Cell("–" if reached is None else f"{reached:.0f}",
                                               sort=-1 if reached is None else reached, cls="num"),
                     c["k"], rate_cell(c), Cell("–" if r.get("study_rate") is None else f"{100 * r['study_rate']:.1f} %",
                                                sort=r.get("study_rate") or -1, cls="num"),
                     s["k"], rate_cell(s),
                     *((r["real_relation"]["k"], rate_cell(r["real_relation"])) if r.get("real_relation")
                       else ("–", "–")),
                     r.get("crashes", 0), r.get("timeouts", 0),
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
    body.append(chart_images(out, ["rates.png"]))

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
    body.append(chart_images(out, ["classes.png"]))

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
            row.append(bundle_link(out, f"violations/{bid}", bid) if bid in bundled else "")
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
        pic = bundle_thumb(out, folder, "bev.png", f"{bid}: bird's-eye view")
        lost = (b.get("lost") or "") + (f": {b['lost_details']}" if b.get("lost_details") else "")
        rows.append([bundle_link(out, folder, bid),
                     k[1], k[0], k[2], b.get("relation", ""),
                     Cell(f"{ns} → {nf}", sort=(ns - nf) if isinstance(ns, int) and isinstance(nf, int) else 0,
                          cls="num"),
                     lost, mini, pic,
                     file_links(out, folder, [("report.html", "page"), ("bundle.mcap", "MCAP"),
                                               ("foxglove-layout.json", "layout"), ("replay.bag", "bag"),
                                               ("bev.png", "picture"), ("bev_source.png", "source"),
                                               ("bev_followup.png", "follow-up")])])
    return head, rows


def _violating_pairs(out: Path, summary: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The journal's violating pairs (as the tally counts them: with the summary's lost-obstacle filter), the
    first :data:`MAX_PAIR_ROWS` sorted by (n, frame, trial), and how many more there are."""
    from lidarmt.engine.errors import FuzzInputError
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records, record_key
    from lidarmt.engine.tally import LostFilter

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
