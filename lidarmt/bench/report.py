"""Reports of a bench (``lidarmt bench``, ``lidarmt camera bench``), written with the shared report set.

* ``summary.json``: modules, the paired rows of every candidate against the baseline, the verdict
  (deterministic: a resumed bench writes the same file);
* ``table.txt`` and the printed tables: the modules (pairs, findings, speed, detection quality), then per
  candidate one row per relation and n (LiDAR) or transformation (camera): both violation rates with 95 %
  Wilson intervals, the discordant pairs b (baseline only) and c (candidate only), the difference, the odds
  ratio c/b with its exact interval, McNemar's exact p-value and the adjusted one, and the verdict;
* charts: LiDAR ``relations.png`` (|O| > |O′| and O ⊄ O′ against n, per module) and ``class-<class>.png`` (the
  per-class count relation against n, per module); camera ``transforms.png`` (violation rate per
  transformation and model);
* ``junit.xml``: a test case per row, a regression is a failure;
* ``report.md``: all of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lidarmt._show import md_code
from lidarmt.engine.html import (
    Cell,
    Html,
    Page,
    chart_images,
    command_facts,
    esc,
    href,
    link,
    p,
    page_writer,
    table,
)
from lidarmt.engine.report import (
    failure_body,
    junit_xml,
    markdown_table,
    rich_table,
    savefig,
    write_report_set,
)
from lidarmt.engine.stats import fmt_rate

CLASSES = ("car", "pedestrian", "cyclist", "unknown")


# ----------------------------------------------------------------------------------------------- cells


def fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_or(row: Mapping[str, Any]) -> str:
    o = row.get("odds_ratio")
    if o is None:
        return "–"
    ci = row.get("odds_ratio_ci")

    def f(v: Any) -> str:
        return "∞" if v == "inf" else f"{float(v):.2g}"

    return f"{f(o)} [{f(ci[0])}, {f(ci[1])}]" if ci else f(o)


def fmt_diff(d: float | None) -> str:
    return "–" if d is None else f"{100 * d:+.1f} pp"


def verdict_cell(row: Mapping[str, Any]) -> str:
    return "REGRESSION" if row.get("regression") else ("improved" if row.get("improvement") else "")


def _rate_cell(r: Mapping[str, Any]) -> str:
    return fmt_rate(int(r["k"]), int(r["n"]))


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def _frac(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def module_table(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the modules table."""
    lidar = summary["kind"] in ("lidar-mr1", "lidar-transform")  # LiDAR: per perception call
    head = ["module", "role", "pairs", "crash", "t/o", "median ms" + ("" if lidar else "/image")]
    if lidar:
        det = [m for m in summary["modules"] if m.get("detection") and m["detection"].get("classes")]
        if det:
            head += [f"{c} P/R" for c in CLASSES[:3]]
    else:
        det = []
        head += ["angle spread (°)"]
        if summary.get("labelled"):
            head += ["RMSE (°) on seeds"]
    rows = []
    for m in summary["modules"]:
        row = [m["name"] + (" (reused)" if m.get("origin") else ""), m["role"],
               f"{m['pairs_done']}/{m['pairs_expected']}", str(m["crashes"]), str(m["timeouts"]),
               _ms(m["speed"]["median_ms"])]
        if lidar and det:
            d = (m.get("detection") or {}).get("classes")
            for c in CLASSES[:3]:
                row.append("–" if not d else f"{_frac(d[c]['precision'])}/{_frac(d[c]['recall'])}")
        if not lidar:
            row.append("–" if m.get("spread_deg") is None else f"{m['spread_deg']:.2f}")
        if not lidar and summary.get("labelled"):
            row.append("–" if m.get("rmse_deg") is None else f"{m['rmse_deg']:.2f}")
        rows.append(row)
    return head, rows


def paired_table(summary: Mapping[str, Any], comp: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one candidate's paired table."""
    group = "n" if summary["kind"] == "lidar-mr1" else "transformation"
    head = ["relation", group, "pairs", f"{comp['baseline']} (95% CI)", f"{comp['candidate']} (95% CI)", "b",
            "c",
            "Δ", "odds ratio c/b", "p", "p adj", "verdict"]
    rows = []
    for r in comp["rows"]:
        rows.append([r["label"], str(r.get("n", r.get("transform"))), str(r["pairs"]),
                     _rate_cell(r["baseline"]),
                     _rate_cell(r["candidate"]), str(r["b"]), str(r["c"]), fmt_diff(r["diff"]), fmt_or(r),
                     fmt_p(r["p"]), fmt_p(r["p_adj"]), verdict_cell(r)])
    return head, rows


def quality_table(summary: Mapping[str, Any], comp: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one candidate's detection-quality (LiDAR) or seed-error (camera) comparison."""
    if summary["kind"] == "lidar-mr1":
        head = ["class", f"recall {comp['baseline']}", f"recall {comp['candidate']}",
                f"precision {comp['baseline']}", f"precision {comp['candidate']}", "frames worse/better", "p",
                "p adj", "verdict"]
        rows = []
        for r in comp.get("recall", []):
            a, b = r["baseline"], r["candidate"]
            rows.append([r["relation"].split(":", 1)[1], f"{_frac(a['recall'])} ({a['tp']}/{a['gt']})",
                         f"{_frac(b['recall'])} ({b['tp']}/{b['gt']})", _frac(a["precision"]),
                         _frac(b["precision"]),
                         f"{r['worse']}/{r['better']}", fmt_p(r["p"]), fmt_p(r["p_adj"]), verdict_cell(r)])
        return head, rows
    head = ["measure", f"RMSE (°) {comp['baseline']}", f"RMSE (°) {comp['candidate']}", "seeds worse/better",
            "p",
            "p adj", "verdict"]
    rows = []
    for r in comp.get("errors", []):
        a, b = r["baseline"]["rmse_deg"], r["candidate"]["rmse_deg"]
        rows.append([r["label"], "–" if a is None else f"{a:.2f}", "–" if b is None else f"{b:.2f}",
                     f"{r['worse']}/{r['better']}", fmt_p(r["p"]), fmt_p(r["p_adj"]), verdict_cell(r)])
    return head, rows


def agreement_line(comp: Mapping[str, Any]) -> str:
    """LiDAR: how often both modules saw as many obstacles on the source frames ("" for camera benches)."""
    a = comp.get("source_agreement")
    if not a or not a["frames"]:
        return ""
    return (f"source frames: {comp['candidate']} and {comp['baseline']} report the same number of obstacles "
            f"in {a['same_count']} of {a['frames']} (mean |difference| {a['mean_abs_diff']:.2f} of "
            f"{a['mean_obstacles_baseline']:.1f} obstacles per frame)")


def verdict_line(summary: Mapping[str, Any]) -> str:
    corr = "Holm-adjusted " if summary["correction"] == "holm" else ""
    parts = []
    for c in summary["comparisons"]:
        what = f"{c['regressions']} regression(s)" if c["regressions"] else "no regression"
        if c["improvements"]:
            what += f", {c['improvements']} improvement(s)"
        parts.append(f"{c['candidate']} vs {c['baseline']}: {what}")
    return (f"verdict at α = {summary['alpha']:g} ({corr}exact McNemar p): " + "; ".join(parts)
            + f" → {summary['verdict'].upper()}")


def independence_lines(summary: Mapping[str, Any]) -> list[str]:
    """One "warning: …" line per doubt about a comparison's independence (few seeds, correlated pairs:
    :func:`lidarmt.bench.compare.independence`), naming the candidate; [] when none (or an older summary)."""
    out = []
    for c in summary["comparisons"]:
        ind = c.get("independence") or {}
        for w in ind.get("warnings", []):
            out.append(f"warning: {c['candidate']} vs {c['baseline']}: {w}")
    return out


# ----------------------------------------------------------------------------------------------- text forms


def _text(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _title(comp: Mapping[str, Any]) -> str:
    return f"{comp['candidate']} vs baseline {comp['baseline']}"


def text_table(summary: Mapping[str, Any]) -> str:
    out = ["modules", _text(*module_table(summary)), ""]
    for comp in summary["comparisons"]:
        out += [_title(comp), _text(*paired_table(summary, comp)), ""]
        if agreement_line(comp):
            out += [agreement_line(comp), ""]
        head, rows = quality_table(summary, comp)
        if rows:
            out += [_text(head, rows), ""]
    out += independence_lines(summary)
    out.append(verdict_line(summary))
    return "\n".join(out) + "\n"


def rich_tables(summary: Mapping[str, Any]) -> list[Any]:
    """The modules table and, per candidate, the paired and quality tables, as rich Tables."""
    def table(title: str, head: list[str], rows: list[list[str]], caption: str | None = None) -> Any:
        return rich_table(title, head, rows, caption=caption,
                          row_style=lambda r: "bold red" if r[-1] == "REGRESSION" else None)

    out = [table("Modules", *module_table(summary))]
    for comp in summary["comparisons"]:
        head, rows = paired_table(summary, comp)
        shown = [r for r, src in zip(rows, comp["rows"], strict=True)
                 if src["k_baseline"] or src["k_candidate"]]
        hidden = len(rows) - len(shown)
        caption = "b: pairs only the baseline violates; c: only the candidate; Δ: candidate − baseline"
        if hidden:
            caption += f"; {hidden} row(s) where neither module violated are in table.txt"
        if agreement_line(comp):
            caption += "\n" + agreement_line(comp)
        out.append(table(_title(comp) + " (paired, exact McNemar)", head, shown, caption=caption))
        head, rows = quality_table(summary, comp)
        if rows:
            what = (": detection on the source frames" if summary["kind"] == "lidar-mr1"
                    else ": error on the seed images (sign test)")
            out.append(table(_title(comp) + what, head, rows))
    return out


# ----------------------------------------------------------------------------------------------- charts


def _plot_rates(ax: Any, summary: Mapping[str, Any], relation: str, title: str) -> None:
    """Draw a relation's violation rate against n for every module, with 95 % Wilson intervals, on ``ax``."""
    ns = [int(n) for n in summary["config"]["ns"]]
    k = len(summary["modules"])
    for i, m in enumerate(summary["modules"]):
        per = m["rates"][relation]
        pts = [(n, per[str(n)]) for n in ns if per[str(n)]["n"]]
        if not pts:
            continue
        shift = 1.0 + 0.06 * (i - (k - 1) / 2)
        y = [100 * r["rate"] for _, r in pts]
        lo = [max(0.0, 100 * (r["rate"] - r["ci_low"])) for _, r in pts]
        hi = [max(0.0, 100 * (r["ci_high"] - r["rate"])) for _, r in pts]
        ax.errorbar([n * shift for n, _ in pts], y, yerr=[lo, hi], marker="o", capsize=3,
                    label=f"{m['name']} ({m['role']})")
    ax.set_xscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("points added outside the ROI (n)")
    ax.set_ylabel("violating pairs (%)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def class_chart(summary: Mapping[str, Any], relation: str, title: str, path: str | os.PathLike[str]) -> None:
    """One relation's violation rate against n for every module (a class's count relation, say)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    _plot_rates(ax, summary, relation, title)
    fig.tight_layout()
    savefig(fig, Path(path))


def relations_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """The count and the subset relation against n for every module, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.4, 3.6))
    _plot_rates(axes[0], summary, "count", "|O| > |O′| (the study's relation)")
    _plot_rates(axes[1], summary, "subset", "O ⊄ O′ (strict)")
    fig.tight_layout()
    savefig(fig, Path(path))


def transform_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Camera: violation rate per transformation, a bar per model, with 95 % Wilson intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rel = ("relation" if summary["kind"] == "lidar-transform"  # the LiDAR relations, each its own
           else "deeptest" if summary.get("labelled") else "deeproad")
    groups = list(summary["modules"][0]["rates"][rel])
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(groups) + 2), 3.6))
    k = len(summary["modules"])
    width = 0.8 / k
    x = np.arange(len(groups))
    for i, m in enumerate(summary["modules"]):
        rs = [m["rates"][rel][g] for g in groups]
        y = [100 * (r["rate"] or 0.0) for r in rs]
        lo = [max(0.0, y[j] - 100 * r["ci_low"]) for j, r in enumerate(rs)]
        hi = [max(0.0, 100 * r["ci_high"] - y[j]) for j, r in enumerate(rs)]
        ax.bar(x + (i - (k - 1) / 2) * width, y, width, yerr=[lo, hi], capsize=2,
               label=f"{m['name']} ({m['role']})")
    ax.set_xticks(x, groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("violating pairs (%)")
    ax.set_title({"deeptest": "DeepTest Eq. 2", "deeproad": "DeepRoad"}.get(rel, "LiDAR relation")
                 + " violations per transformation",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    savefig(fig, Path(path))


def charts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """File name -> function drawing it, for the bench's kind."""
    if summary["kind"] != "lidar-mr1":
        return {"transforms.png": lambda p: transform_chart(summary, p)}
    out: dict[str, Any] = {"relations.png": lambda p: relations_chart(summary, p)}
    for c in CLASSES:
        out[f"class-{c}.png"] = (lambda p, c=c: class_chart(
            summary, f"class:{c}", f"|O_{c}| > |O′_{c}|: pairs where the {c} count dropped", p))
    return out


# ----------------------------------------------------------------------------------------------- junit, md


def junit(summary: Mapping[str, Any]) -> str:
    """A suite per candidate, a case per row; a regression is a failure."""
    suites: dict[str, list[tuple[str, str, str]]] = {}
    for comp in summary["comparisons"]:
        cases = []
        for r in [*comp["rows"], *comp.get("recall", []), *comp.get("errors", [])]:
            where = r.get("n", r.get("transform", r.get("group", "")))
            name = f"{r['relation']} {'n=' if 'n' in r else ''}{where}"
            if r["regression"]:
                if "c" in r:
                    msg = (f"{r['label']}: {r['k_candidate']}/{r['pairs']} pairs violate with "
                           f"{comp['candidate']}, {r['k_baseline']}/{r['pairs']} with {comp['baseline']} "
                           f"(b={r['b']}, c={r['c']}, adjusted p={r['p_adj']:.3g})")
                else:
                    msg = (f"{r['label']}: worse on {r['worse']} units, better on {r['better']} "
                           f"(adjusted p={r['p_adj']:.3g})")
                cases.append((name, "failure", failure_body("regression", msg, json.dumps(r, default=str))))
            else:
                cases.append((name, "ok", ""))
        suites[f"lidarmt.bench.{comp['candidate']}"] = cases
    return junit_xml("lidarmt.bench", suites)


def markdown(summary: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    cfg = summary["config"]
    lidar = summary["kind"] == "lidar-mr1"
    lines = ["# Bench: " + ("LiDAR MR1" if lidar else "LiDAR transformations" if summary["kind"] ==
                            "lidar-transform" else "camera steering models"), ""]
    if summary["kind"] == "lidar-transform":
        from lidarmt.lidar.relations import Thresholds

        lines += [f"- recording: {md_code(cfg['source']['path'])}, ROI {md_code(cfg['roi']['map'])}, frames: {len(cfg['frames'])}, "
                  f"seed: {cfg['seed']}, trials: {cfg['trials']}",
                  "- transformations: " + ", ".join(f"{t['name']} ({t['relation']}; {', '.join(t['levels'])})"
                                                    for t in cfg["transforms"]),
                  "- thresholds: " + Thresholds.from_dict(summary["thresholds"]).describe()]
    elif lidar:
        lines += [f"- recording: {md_code(cfg['source']['path'])}, map {md_code(cfg['roi']['map'])}",
                  f"- frames: {len(cfg['frames'])}, n: {', '.join(str(n) for n in cfg['ns'])}, trials: "
                  f"{cfg['trials']}, seed: {cfg['seed']}, region: {cfg['region']['shape']} "
                  f"{cfg['region']['size']:g} m",
                  f"- ground truth: {summary.get('ground_truth') or 'none'}"]
    else:
        crit = summary["criteria"]
        lines += [f"- images: {md_code(cfg['images'])}, frames: {len(cfg['frames'])}, transformations: "
                  f"{', '.join(t['name'] for t in cfg['transforms'])}, trials: {cfg['trials']}, seed: "
                  f"{cfg['seed']}",
                  "- relations: " + (f"DeepTest Eq. 2 at λ = {crit['lambda']:g} with Eq. 3 at ε = "
                                     f"{crit['epsilon']:g} "
                                      "(the seeds have labels), and " if summary["labelled"] else "")
                  + f"DeepRoad at {crit['tolerance_deg']:g}°"]
    lines += [f"- baseline: {md_code(summary['baseline'])}; test: {summary['test']}; α = {summary['alpha']:g}, "
              f"correction: {summary['correction']} (one family per candidate)",
              f"- command: {md_code(run.get('command', ''))}" if run.get("command") else "",
              "", "## Modules", "", markdown_table(*module_table(summary)), ""]
    for comp in summary["comparisons"]:
        lines += [f"## {_title(comp)}", "", markdown_table(*paired_table(summary, comp)), "",
                  "b: pairs only the baseline violates; c: pairs only the candidate violates; Δ = (c − b) / "
                  "pairs.",
                  "", agreement_line(comp), ""]
        head, rows = quality_table(summary, comp)
        if rows:
            lines += [markdown_table(head, rows), ""]
    lines += ["## Verdict", "", *(f"- {w}" for w in independence_lines(summary)),
              *([""] if independence_lines(summary) else []), verdict_line(summary), ""]
    lines += ["## Charts", ""]
    for name in charts(summary):
        lines.append(f"![{name}]({name})")
    lines.append("")
    folders = ", ".join(f"[`{m['name']}/`]({m['name']}/)" for m in summary["modules"])
    lines += [f"Module folders (ordinary campaign run folders): {folders}", ""]
    return "\n".join(x for x in lines if x is not None)


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *,
                  run: Mapping[str, Any]) -> dict[str, Path]:
    """Write every report of a bench into ``out``; returns their paths by name."""
    return write_report_set(out, summary=summary, run=run, table=text_table(summary),
                            markdown=markdown(summary, run), junit=junit(summary), charts=charts(summary),
                            html=page_writer(bench_page, summary=summary, run=run))


# ----------------------------------------------------------------------------------------------- report.html


def _regression(text: str) -> bool:
    """A verdict that names a regression ("regression", "REGRESSION"; not "no regression")."""
    t = str(text).strip().lower()
    return "regress" in t and not t.startswith("no ")


def bench_page(summary: Mapping[str, Any], *, run: Mapping[str, Any], out: Path) -> str:
    """The page of ``lidarmt bench``: modules, the paired comparison per candidate, the verdict, the charts,
    links to each module's own run folder and report."""

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
                              f"{esc(verdict_line(summary))}</span>"))
    for w in independence_lines(summary):
        page.fact("warning", w)
    command_facts(page, run)
    body = page.section("modules", "Modules")
    head, rows = module_table(summary)
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
        body = page.section(f"comparison-{i}", _title(comp))
        head, rows = paired_table(summary, comp)
        rows = [[*r[:-1], Cell(r[-1], cls="bad" if _regression(r[-1]) else "")] for r in rows]
        body.append(table(head, rows, ident=f"paired-table-{i}"))
        body.append(p("b: pairs only the baseline violates; c: pairs only the candidate violates; "
                      "Δ = (c − b) / pairs.", cls="note"))
        if agreement_line(comp):
            body.append(p(agreement_line(comp)))
        qh, qr = quality_table(summary, comp)
        if qr:
            body.append(table(qh, qr, ident=f"quality-table-{i}"))
    body = page.section("charts", "Charts")
    body.append(chart_images(out, list(charts(summary))))
    return page.render()
