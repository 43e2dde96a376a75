"""Reports of a robustness campaign (:mod:`lidarmt.lidar.robustness`), through
:func:`lidarmt.engine.report.write_report_set`.

* **The papers' table** (Robo3D, Kong et al. ICCV 2023, Table 2's shape): rows the modules, columns the clean AP,
  mCE and mRR and CE_i (then RR_i) per corruption; the headline AP is BEV AP|R40, the mean over car, pedestrian
  and cyclist (those with ground truth) at the project's IoU thresholds;
* **AP per corruption × severity** per module and class, at the project's thresholds, with the "found" rule
  (IoU >= 0.1) beside it; the JSON holds KITTI's thresholds and AP|R11 too;
* **the operating point**: precision and recall of each module's own output, and class-agnostic found recall;
* ``robustness.png`` (mean AP per corruption and severity, one panel per module, the clean AP as a line),
  ``junit.xml`` (a suite per module, a case per corruption: crashes and timeouts are errors), ``report.md``,
  ``report.html``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lidarmt.engine.report import (
    failure_body,
    junit_xml,
    markdown_table,
    rich_table,
    savefig,
    text_tables,
    write_report_set,
)
from lidarmt.lidar.robustness import CLASSES, CLEAN, HEADLINE_SET, IOU_SETS, MEAN, ROBO3D_REF, scores

SHORT = {"car": "car", "pedestrian": "ped", "cyclist": "cyc"}


def summary_dict(config: Mapping[str, Any], tally: Any, *, baseline: str | None) -> dict[str, Any]:
    """Deterministic totals and scores (a resumed campaign writes the same file as an uninterrupted one)."""
    from lidarmt.lidar.perception.apollo.evaluate import MATCHING_RULE

    cells = tally.to_dict()["cells"]
    cors = [{"name": c["name"], "levels": list(c["levels"])} for c in config["corruptions"]]
    sc = scores(cells, modules=list(config["modules"]), corruptions=cors, baseline=baseline)
    total = {"calls": sum(c["frames"] for c in cells), "crashes": sum(c["crashes"] for c in cells),
             "timeouts": sum(c["timeouts"] for c in cells)}
    return {"kind": "lidar-robustness", "config": dict(config), "baseline": baseline,
            "metric": {"ap": "BEV AP|R40 (40 recall points; lidarmt.lidar.ap.interpolated_ap), percent",
                       "headline": f"mean AP|R40 over {', '.join(sc['scored_classes']) or 'no class'} at the "
                                   f"{HEADLINE_SET} IoU thresholds",
                       "iou_sets": IOU_SETS, "ce": "CE_i = sum_l (1 - AP_il) / sum_l (1 - AP_il^baseline), percent",
                       "rr": "RR_i = sum_l AP_il / (L * AP_clean), percent", "reference": ROBO3D_REF,
                       "matching": MATCHING_RULE},
            "scores": sc, "cells": cells, "total": total}


def _f(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _cors(summary: Mapping[str, Any]) -> list[str]:
    return [c["name"] for c in summary["config"]["corruptions"]]


def ce_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The papers' table: module, clean AP, mCE, mRR, then CE_i per corruption (percent)."""
    cors = _cors(summary)
    head = ["module", "clean AP", "mCE", "mRR", *cors]
    rows = []
    for mod, per in summary["scores"]["modules"].items():
        s = per[HEADLINE_SET][MEAN]
        rows.append([mod + (" (baseline)" if mod == summary["baseline"] else ""), _f(s["clean"]), _f(s["mce"]),
                     _f(s["mrr"]), *(_f(s["corruptions"][c]["ce"]) for c in cors)])
    return head, rows


def rr_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    cors = _cors(summary)
    head = ["module", "mRR", *cors]
    rows = []
    for mod, per in summary["scores"]["modules"].items():
        s = per[HEADLINE_SET][MEAN]
        rows.append([mod, _f(s["mrr"]), *(_f(s["corruptions"][c]["rr"]) for c in cors)])
    return head, rows


def ap_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """AP|R40 per module × corruption × severity: the mean and each class at the project's thresholds, and the
    mean at the found rule."""
    head = ["module", "corruption", "severity", "mean AP", *(f"{SHORT[c]} AP" for c in CLASSES), "mean AP@found"]
    rows = []
    for mod, per in summary["scores"]["modules"].items():
        main, found = per[HEADLINE_SET], per["found"]
        rows.append([mod, CLEAN, "–", _f(main[MEAN]["clean"]), *(_f(main[c]["clean"]) for c in CLASSES),
                     _f(found[MEAN]["clean"])])
        for cfg in summary["config"]["corruptions"]:
            name = cfg["name"]
            for i, lv in enumerate(cfg["levels"]):
                rows.append([mod, name, lv, _f(main[MEAN]["corruptions"][name]["ap"][i]),
                             *(_f(main[c]["corruptions"][name]["ap"][i]) for c in CLASSES),
                             _f(found[MEAN]["corruptions"][name]["ap"][i])])
    return head, rows


def operating_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Precision / recall (and found recall) of each module's own output, per cell and class."""
    head = ["module", "corruption", "severity", *(f"{SHORT[c]} P/R/found" for c in CLASSES), "failed"]
    rows = []
    for c in summary["cells"]:
        def prf(k: Mapping[str, Any]) -> str:
            return f"{_f(k['precision'], 2)}/{_f(k['recall'], 2)}/{_f(k['found_recall'], 2)} ({k['gt']})"

        rows.append([c["module"], c["corruption"], "–" if c["level"] == CLEAN else c["level"],
                     *(prf(c["classes"][k]) for k in CLASSES), str(c["crashes"] + c["timeouts"])])
    return head, rows


TABLES = (("Corruption error CE_i and mCE (percent; the baseline = 100), mRR", ce_rows),
          ("Resilience rate RR_i (percent of the module's clean AP)", rr_rows),
          ("BEV AP|R40 per corruption and severity", ap_rows),
          ("Operating point: precision / recall / found recall (ground truths)", operating_rows))


def caption(summary: Mapping[str, Any]) -> str:
    sc = summary["scores"]
    thr = IOU_SETS[HEADLINE_SET]
    base = (f"CE against {summary['baseline']}" if summary["baseline"] else "no baseline: no CE")
    return (f"AP: BEV AP|R40 (percent), mean over {', '.join(sc['scored_classes']) or 'no class with ground truth'}"
            f" at IoU car {thr['car']:g}, pedestrian {thr['pedestrian']:g}, cyclist {thr['cyclist']:g}; {base}; "
            f"RR against each module's clean AP; CE and RR as {ROBO3D_REF.split(':')[0]} define them")


def text_table(summary: Mapping[str, Any]) -> str:
    return text_tables(caption(summary), TABLES, summary)


def rich_tables(summary: Mapping[str, Any], *, tables: int = 3) -> list:
    return [rich_table(title, *fn(summary), caption=caption(summary) if i == 0 else None)
            for i, (title, fn) in enumerate(TABLES[:tables])]


def markdown_report(summary: Mapping[str, Any], *, run: Mapping[str, Any]) -> str:
    cfg = summary["config"]
    tot = summary["total"]
    lines = ["# Robustness: detection quality under corruption", "",
             f"- recording `{cfg['source']['path']}`, {len(cfg['frames'])} frame(s), ROI `{cfg['roi']['map']}`, "
             f"modules {', '.join(f'`{m}`' for m in cfg['modules'])}, baseline `{summary['baseline']}`, seed "
             f"{cfg['seed']}",
             f"- {tot['calls']} perception calls; {tot['crashes']} crashes, {tot['timeouts']} timeouts (counted as "
             "frames without detections)",
             f"- {caption(summary)}",
             f"- matching: {summary['metric']['matching']}", ""]
    for title, fn in TABLES:
        head, rows = fn(summary)
        lines += [f"## {title}", "", markdown_table(head, rows) if rows else "(none)", ""]
    lines += ["![AP per corruption and severity](robustness.png)", ""]
    if run.get("command"):
        lines += ["```sh", str(run["command"]), "```", ""]
    return "\n".join(lines)


def ap_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Mean AP|R40 per corruption and severity, a panel per module, its clean AP as a dashed line."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    mods = list(summary["scores"]["modules"])
    cors = summary["config"]["corruptions"]
    names = [c["name"] for c in cors]
    levels = list(dict.fromkeys(lv for c in cors for lv in c["levels"]))
    fig, axes = plt.subplots(len(mods), 1, figsize=(max(6.0, 0.7 * len(names) + 2), 2.6 * len(mods) + 0.6),
                             squeeze=False)
    x = np.arange(len(names))
    width = 0.8 / max(1, len(levels))
    for ax, mod in zip(axes[:, 0], mods, strict=True):
        s = summary["scores"]["modules"][mod][HEADLINE_SET][MEAN]
        for i, lv in enumerate(levels):
            vals = []
            for c in cors:
                ap = s["corruptions"][c["name"]]["ap"]
                vals.append(ap[c["levels"].index(lv)] if lv in c["levels"] and ap[c["levels"].index(lv)] is not None
                            else 0.0)
            ax.bar(x + (i - (len(levels) - 1) / 2) * width, vals, width, label=lv)
        if s["clean"] is not None:
            ax.axhline(s["clean"], color="k", ls="--", lw=1, label="clean")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_ylabel("mean AP|R40 (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{mod}: mCE {_f(s['mce'])}, mRR {_f(s['mrr'])}", fontsize=9)
        ax.legend(fontsize=7, ncol=len(levels) + 1)
    fig.tight_layout()
    savefig(fig, path)


def junit(summary: Mapping[str, Any]) -> str:
    suites: dict[str, list[tuple[str, str, str]]] = {}
    for c in summary["cells"]:
        cases = suites.setdefault(c["module"], [])
        name = c["corruption"] if c["level"] == CLEAN else f"{c['corruption']} {c['level']}"
        if c["crashes"] + c["timeouts"]:
            cases.append((name, "error", failure_body("crash", f"{c['crashes']} crashes, {c['timeouts']} timeouts",
                                                      tag="error")))
        else:
            cases.append((name, "ok", ""))
    return junit_xml("lidarmt robustness", suites)


def robustness_page(summary: Mapping[str, Any], run: Mapping[str, Any], out: Path) -> str:
    """``report.html``: the papers' table, AP per severity, the operating point and the chart."""
    from lidarmt.engine import html as H

    cfg = summary["config"]
    page = H.Page("lidarmt robustness", subtitle="detection quality under corruption (Robo3D's CE/RR)")
    page.fact("recording", cfg["source"]["path"], code=True)
    page.fact("frames", len(cfg["frames"]))
    page.fact("modules", ", ".join(cfg["modules"]))
    page.fact("baseline", summary["baseline"] or "–")
    page.fact("metric", caption(summary))
    H.command_facts(page, run)
    for i, (title, fn) in enumerate(TABLES):
        body = page.section(f"t{i}", title)
        head, rows = fn(summary)
        body.append(H.table(head, rows, ident=f"table{i}", filter_box=len(rows) > 30))
    chart = page.section("chart", "AP per corruption and severity")
    chart.append(H.chart_images(out, ["robustness.png"]))
    chart.append(H.p(H.Html(H.link(H.href("report.md"), "report.md") + " and " + H.link(H.href("summary.json"),
                                                                                         "summary.json"))))
    return page.render()


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, run: Mapping[str, Any]) -> dict[str, Path]:
    from lidarmt.engine.html import page_writer

    return write_report_set(out, summary=summary, run=run, table=text_table(summary),
                            markdown=markdown_report(summary, run=run), junit=junit(summary),
                            charts={"robustness.png": lambda p: ap_chart(summary, p)},
                            html=page_writer(robustness_page, summary=summary, run=run))
