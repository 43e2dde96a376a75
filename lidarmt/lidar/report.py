"""Reports of a LiDAR-transformation campaign (through :func:`lidarmt.engine.report.write_report_set`).

* **Table 8's shape** (DeepTest, Tian et al. ICSE 2018): violating pairs per transformation × intensity, and
  the lost requirements per class (car, pedestrian, cyclist, unknown; missed insertions; spurious obstacles
  under equivariance), how many of them were labelled objects (where the frames carry labels), with the
  nearest loss;
* **families**: violating pairs per family (weather, sensor, motion, object, alignment), to set beside Dong et
  al. (CVPR 2023), who rank the families by how much they hurt detectors;
* **severity ranking** (Speth et al.): every finding, most severe first (:mod:`lidarmt.engine.findings`), then
  nearest to the sensor, with its evidence (labelled object, junk, low evidence, ...), lane, class, size and
  distance; counts per severity and per evidence, and the violating pairs excluding junk/low-evidence;
* the thresholds the fold applied, stated in every table's caption;
* ``violations.png`` (violation rate per transformation and intensity), ``junit.xml`` (a suite per
  transformation, a case per intensity; violations fail, crashes and timeouts are errors), ``report.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lidarmt.engine.findings as fnd
from lidarmt._show import md_code
from lidarmt.engine.report import (
    failure_body,
    junit_xml,
    markdown_table,
    rich_table,
    savefig,
    text_tables,
    write_report_set,
)
from lidarmt.lidar.perception.apollo.caffe import weights_note
from lidarmt.lidar.relations import MISSED_INSERT, SPURIOUS, WHATS, Thresholds, families

DEEPTEST_REF = "Tian et al., DeepTest, ICSE 2018, Table 8"
DONG_REF = "Dong et al., Benchmarking Robustness of 3D Object Detection to Common Corruptions, CVPR 2023"
SPETH_REF = "Speth et al., defect-based metamorphic relations for LiDAR detectors"
RANK_ROWS = 25
SHORT = {"car": "car", "pedestrian": "ped", "cyclist": "cyc", "unknown": "unk", MISSED_INSERT: "missed ins",
         SPURIOUS: "spurious"}


def summary_dict(config: Mapping[str, Any], tally: Any) -> dict[str, Any]:
    """Deterministic totals (a resumed campaign writes the same file as an uninterrupted one)."""
    body = tally.to_dict()
    ranked = tally.ranked()
    cells = body["cells"]
    total = {"pairs": sum(c["pairs"] for c in cells), "violations": sum(c["violations"] for c in cells),
             "real_violations": sum(c.get("real_violations", 0) for c in cells),
             "crashes": sum(c["crashes"] for c in cells), "timeouts": sum(c["timeouts"] for c in cells),
             "label_kept": sum(c.get("label_kept", 0) for c in cells),
             "improved": sum(c.get("improved", 0) for c in cells)}
    per = fnd.counts(ranked)
    return {"kind": "lidar-transform", "config": dict(config), "thresholds": body["thresholds"], "cells": cells,
            "families": families(cells), "total": total, "findings": len(ranked),
            "by_severity": per["severity"], "by_evidence": per["evidence"],
            "severity_rule": fnd.SEVERITY_RULE, "evidence_rule": fnd.LOW_EVIDENCE_RULE,
            "ranking": [{k: f[k] for k in ("what", "class", "distance", "size", "kind", "transform", "level",
                                           "relation", "key", "label", "lane", "severity", "evidence") if k in f}
                        for f in ranked[:RANK_ROWS]]}


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.0f}%)" if n else "–"


def table8_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["transformation", "family", "relation", "intensity", "violating pairs (all)",
            "excl. junk/low-ev.", *(SHORT[w] for w in WHATS), "labelled", "nearest m", "crash"]
    rows = []
    for c in summary["cells"]:
        rows.append([c["transform"], c["family"], c["relation"], c["level"], _rate(c["violations"], c["pairs"]),
                     _rate(c["real_violations"], c["pairs"]) if "real_violations" in c else "–",
                     *(str(c["lost"][w]) for w in WHATS), str(c.get("lost_labelled", 0)),
                     "–" if c["nearest_m"] is None else f"{c['nearest_m']:.1f}",
                     str(c["crashes"] + c["timeouts"])])
    return head, rows


def family_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    fam = summary["families"]
    order = sorted(fam, key=lambda f: (-(fam[f]["violations"] / fam[f]["pairs"]) if fam[f]["pairs"] else 0.0, f))
    return ["family", "violating pairs"], [[f, _rate(fam[f]["violations"], fam[f]["pairs"])] for f in order]


def ranking_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["#", "severity", "evidence", "distance m", "lane", "lost", "size m", "how", "transformation",
            "intensity", "frame"]
    rows = [[str(i + 1), f.get("severity", "–"), f.get("evidence", "–"), f"{float(f['distance']):.1f}",
             f.get("lane") or "–", f["what"] if f["what"] == f["class"] else f"{f['what']} ({f['class']})",
             "×".join(f"{v:.1f}" for v in f["size"]), f["kind"], f["transform"], f["level"], str(f["key"][0])]
            for i, f in enumerate(summary["ranking"])]
    return head, rows


def severity_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Findings per severity and per evidence (and the labelled objects a follow-up still fits: not findings)."""
    sev, ev = summary.get("by_severity") or {}, summary.get("by_evidence") or {}
    tot = summary.get("total") or {}
    head = ["findings", *fnd.SEVERITIES, *fnd.EVIDENCE_KINDS, "label still fitted", "improved"]
    return head, [[str(summary.get("findings", 0)), *(str(sev.get(k, 0)) for k in fnd.SEVERITIES),
                   *(str(ev.get(k, 0)) for k in fnd.EVIDENCE_KINDS), str(tot.get("label_kept", 0)),
                   str(tot.get("improved", 0))]]


TABLES = (("Violations per transformation × intensity × class (the shape of DeepTest's Table 8)", table8_rows),
          ("Violating pairs per family", family_rows),
          ("Findings per severity and per evidence (lidarmt.engine.findings)", severity_rows),
          ("Findings, most severe first, then nearest to the sensor", ranking_rows))


def caption(summary: Mapping[str, Any]) -> str:
    return "thresholds (applied when folding the journal): " + Thresholds.from_dict(summary["thresholds"]).describe()


def text_table(summary: Mapping[str, Any]) -> str:
    return text_tables(caption(summary), TABLES, summary)


def rich_tables(summary: Mapping[str, Any]) -> list:
    return [rich_table(title, *fn(summary), caption=caption(summary) if i == 0 else None)
            for i, (title, fn) in enumerate(TABLES)]


def markdown_report(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: list[dict]) -> str:
    cfg = summary["config"]
    tot = summary["total"]
    lines = [
        "# LiDAR transformation campaign",
        "",
        f"- recording {md_code(cfg['source']['path'])}, {len(cfg['frames'])} frame(s), ROI {md_code(cfg['roi']['map'])}, SUT "
        f"{md_code(cfg['sut']['name'])}{weights_note(cfg['sut']['options'])}, seed {cfg['seed']}, {cfg['trials']} trial(s)",
        f"- {tot['pairs']} pairs judged, **{tot['violations']}** violate their relation (all findings), "
        f"**{tot.get('real_violations', '–')}** excluding junk and low-evidence obstacles; {tot['crashes']} crashes, "
        f"{tot['timeouts']} timeouts",
        f"- labelled objects the matching missed but a follow-up obstacle still fits as well (not lost): "
        f"{tot.get('label_kept', 0)}; fits better (e.g. a split car made whole: an improvement): {tot.get('improved', 0)}",
        f"- {caption(summary)}",
        f"- {fnd.SEVERITY_RULE}; {fnd.LOW_EVIDENCE_RULE}",
        "",
    ]
    bundled = {tuple(b["key"]): b["id"] for b in bundles if b.get("key") is not None and not b.get("error")}
    for title, fn in TABLES:
        head, rows = fn(summary)
        if fn is ranking_rows and bundled:  # each finding links to its bundle, where it has one
            head = [*head, "bundle"]
            rows = [[*r, (f"[{bundled[tuple(f['key'])]}](violations/{bundled[tuple(f['key'])]}/report.md)"
                          if tuple(f.get("key") or ()) in bundled else "–")]
                    for r, f in zip(rows, summary["ranking"], strict=True)]
        lines += [f"## {title}", "", markdown_table(head, rows) if rows else "(none)", ""]
    lines += [f"Table shape after {DEEPTEST_REF}; families after {DONG_REF}; ranking by distance after {SPETH_REF}.",
              "", "![violation rates](violations.png)", ""]
    if bundles:
        lines += ["## Bug bundles", "", "| bundle | relation | findings | edits | minimal |", "|---|---|---|---:|---|"]
        for b in bundles:
            if b.get("error"):
                lines.append(f"| {b['id']} | – | failed: {b['error']} | – | – |")
                continue
            dd = b.get("ddmin")
            mini = (f"{dd['size']} ({'1-minimal' if dd['one_minimal'] else dd['stopped']})" if dd
                    else (b.get("ddmin_skipped") or "–"))
            lines.append(f"| [{b['id']}](violations/{b['id']}/report.md) | {b.get('relation', '')} | "
                         f"{b.get('findings', '')} | {b.get('edits', '')} | {mini} |")
        lines.append("")
    if run.get("command"):
        lines += ["```sh", str(run["command"]), "```", ""]
    return "\n".join(lines)


def rate_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    cells = summary["cells"]
    names = list(dict.fromkeys(c["transform"] for c in cells))
    levels = list(dict.fromkeys(c["level"] for c in cells))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(names) + 2), 4.0))
    width = 0.8 / max(1, len(levels))
    x = np.arange(len(names))
    for i, lv in enumerate(levels):
        vals = []
        for n in names:
            c = next((c for c in cells if c["transform"] == n and c["level"] == lv), None)
            vals.append(100.0 * c["violations"] / c["pairs"] if c and c["pairs"] else 0.0)
        ax.bar(x + (i - (len(levels) - 1) / 2) * width, vals, width, label=lv)
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("violating pairs (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("LiDAR relations: violation rate per transformation and intensity", fontsize=10)
    fig.tight_layout()
    savefig(fig, path)


def junit(summary: Mapping[str, Any]) -> str:
    suites: dict[str, list[tuple[str, str, str]]] = {}
    for c in summary["cells"]:
        cases = suites.setdefault(f"{c['transform']} ({c['relation']})", [])
        if c["crashes"] + c["timeouts"]:
            cases.append((c["level"], "error", failure_body(
                "crash", f"{c['crashes']} crashes, {c['timeouts']} timeouts", tag="error")))
        elif c["violations"]:
            lost = ", ".join(f"{v} {w}" for w, v in c["lost"].items() if v)
            cases.append((c["level"], "failure", failure_body(
                c["relation"], f"{c['violations']} of {c['pairs']} pairs violate {c['relation']} ({lost})")))
        else:
            cases.append((c["level"], "ok", ""))
    return junit_xml("lidarmt lidar relations", suites)


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, run: Mapping[str, Any],
                  bundles: list[dict]) -> dict[str, Path]:
    return write_report_set(out, summary=summary, run=run, table=text_table(summary),
                            markdown=markdown_report(summary, run=run, bundles=bundles), junit=junit(summary),
                            charts={"violations.png": lambda p: rate_chart(summary, p)})
