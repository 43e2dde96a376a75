"""Reports of a camera campaign (written through :func:`lidarmt.engine.report.write_report_set`).

* DeepTest's Table 7: erroneous behaviours by λ (rows) and ε (simple transformations, Eq. 3 filtered) and for
  each composite transformation (unfiltered), over every model; its Table 8: per transformation × model at the
  campaign's λ and ε; both only when the source has steering labels.
* DeepRoad's table: per model and transformation, inconsistent pairs at ε = 10/20/30/40°.
* Per (model, transformation, parameter): pairs, MSE against the labels, Eq. 3's filter, the mean |Δθ|.
* ``mse.png`` (MSE per transformation and model against MSE_orig), ``worst.png`` (the worst cases, seed and
  transformed image side by side with the steering arrows), ``junit.xml`` (a test case per model ×
  transformation × parameter; violations fail, model crashes and timeouts are errors), ``report.md``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lidarmt._show import md_code
from lidarmt.camera.relations import DEEPROAD_EPS_DEG, DEEPTEST_EPSILONS, DEEPTEST_TABLE7
from lidarmt.engine.html import (
    MAX_PAIR_ROWS,
    Cell,
    Page,
    bundle_link,
    bundle_thumb,
    chart_images,
    command_facts,
    file_links,
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

DEEPTEST_REF = "Tian et al., DeepTest, ICSE 2018"
DEEPROAD_REF = "Zhang et al., DeepRoad, ASE 2018"


def _deg(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def table7_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    t7 = summary.get("table7")
    if not t7:
        return [], []
    head = ["λ"]
    simple = "simple" in t7["columns"]
    if simple:
        head += [f"simple ε={e:g}" for e in DEEPTEST_EPSILONS]
    comp = [c for c in t7["columns"] if c != "simple"]
    head += comp
    rows = []
    for r in t7["rows"]:
        cells = [f"{r['lambda']:g}"]
        if simple:
            cells += [str(r["simple"][f"{e:g}"]) for e in DEEPTEST_EPSILONS]
        cells += [str(r[c]) for c in comp]
        rows.append(cells)
    return head, rows


def table8_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    t8 = summary.get("table8")
    if not t8:
        return [], []
    models = [m["model"] for m in summary["models"]]
    head = ["transformation", "family", *models, "total"]
    rows = []
    for r in sorted(t8["rows"], key=lambda r: (r["family"] != "simple", r["family"], r["transform"])):
        vals = [r[m] for m in models]
        rows.append([r["transform"], r["family"], *[str(v) for v in vals], str(sum(vals))])
    tot = [sum(r[m] for r in t8["rows"]) for m in models]
    rows.append(["total", "", *[str(v) for v in tot], str(sum(tot))])
    return head, rows


def deeproad_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["model", "transformation", "pairs", *[f"|Δθ|>{e:g}°" for e in DEEPROAD_EPS_DEG]]
    rows = [[r["model"], r["transform"], str(r["pairs"]), *[str(r["inconsistent"][f"{e:g}"]) for e in DEEPROAD_EPS_DEG]]
            for r in summary["deeproad"]]
    return head, rows


def mse_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    labelled = summary["labelled"]
    head = ["model", "transformation", "parameter", "pairs", "mean |Δθ|°"]
    if labelled:
        head += ["MSE", "MSE_orig", "Eq.3", "Eq.2 errors"]
    head += ["crash", "t/o"]
    orig = {m["model"]: m["mse_orig"] for m in summary["models"]}
    rows = []
    for g in summary["groups"]:
        cells = [g["model"], g["transform"], g["params"], str(g["pairs"]), _deg(g["mean_abs_change_deg"])]
        if labelled:
            cells += ["–" if g["mse"] is None else f"{g['mse']:.4f}",
                      "–" if orig[g["model"]] is None else f"{orig[g['model']]:.4f}",
                      "pass" if g.get("passes_filter") else "filtered", str(g.get("deeptest", 0))]
        cells += [str(g["crashes"]), str(g["timeouts"])]
        rows.append(cells)
    return head, rows


def models_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    if not summary["labelled"]:
        return [], []
    head = ["model", "seed images", "MSE_orig (rad²)", "RMSE_orig (°)"]
    rows = [[m["model"], str(m["seeds"]), "–" if m["mse_orig"] is None else f"{m['mse_orig']:.4f}",
             _deg(m["rmse_orig_deg"])] for m in summary["models"]]
    return head, rows


TABLES = (
    ("Seed images: the models' error against the labels", models_rows),
    (f"DeepTest Table 7: erroneous behaviours by λ and ε, over all models ({DEEPTEST_REF})", table7_rows),
    ("DeepTest Table 8: erroneous behaviours per transformation and model at the campaign's λ and ε", table8_rows),
    (f"DeepRoad: inconsistent pairs by ε ({DEEPROAD_REF})", deeproad_rows),
)


def text_table(summary: Mapping[str, Any], *, with_groups: bool = True) -> str:
    out = []
    for title, fn in (*TABLES, *((("Per transformation and parameter", mse_rows),) if with_groups else ())):
        head, rows = fn(summary)
        if not head:
            continue
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        out.append(title)
        out.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
        out.extend("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
        out.append("")
    return "\n".join(out)


def rich_tables(summary: Mapping[str, Any]) -> list:
    tables = []
    for title, fn in TABLES:
        head, rows = fn(summary)
        if head:
            tables.append(rich_table(title, head, rows))
    return tables


def markdown_report(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: list[dict],
                    findings: list[dict]) -> str:
    cfg = summary["config"]
    crit = summary["criteria"]
    env = run.get("environment", {})
    lines = [
        "# Camera metamorphic campaign",
        "",
        "**Relations.** DeepTest Eq. 2 (with labels): (θ(τ(i)) − θᵗᵢ)² ≤ λ·MSE_orig; Eq. 3 keeps a simple "
        "transformation's setting only when |MSE(trans, param) − MSE_orig| ≤ ε; DeepRoad (label-free): "
        "|θ(i) − θ(τ(i))| ≤ ε°; mirror: θ(mirror(i)) ≈ −θ(i). "
        f"Violations here: λ = {crit['lambda']:g}, ε = {crit['epsilon']:g}"
        + ("" if summary["labelled"] else f"; no labels, so DeepRoad at {crit['tolerance_deg']:g}°") + ".",
        "",
        f"- images: {md_code(cfg['images'])}" + (f" (topic {md_code(cfg['topic'])})" if cfg.get("topic") else ""),
        f"- models: {', '.join('`' + m['name'] + '`' for m in cfg['models'])}",
        "- transformations: " + ", ".join(f"{t['name']} ({len(t['grid'])})" for t in cfg["transforms"]),
        f"- seed frames: {len(cfg['frames'])}, trials {cfg['trials']}, seed {cfg['seed']}; pairs judged "
        f"{summary['pairs_done']}, findings (crash/timeout) {summary['findings']}",
        f"- environment: lidarmt {env.get('lidarmt', '?')}, torch {env.get('torch', '–')}, {env.get('cpu', '?')} "
        f"({env.get('cpus', '?')} CPUs)",
    ]
    if run.get("throughput"):
        lines.append(f"- throughput: {run['throughput']:.1f} pairs/s over {run.get('ran', 0)} pairs with "
                     f"{run.get('workers', 1)} worker(s)")
    lines.append("")
    for title, fn in (*TABLES, ("Per transformation and parameter", mse_rows)):
        head, rows = fn(summary)
        if head:
            lines += [f"## {title}", "", markdown_table(head, rows), ""]
    for pr in run.get("pairs") or []:
        if pr.get("different_scene"):
            lines += [f"**Warning** (`--pairs {pr.get('follow_ups')}`): {len(pr['different_scene'])} of the judged "
                      f"pairs do not look like the same scene (e.g. {', '.join(map(str, pr['different_scene'][:5]))}); "
                      f"DeepRoad's relation assumes the same road in another look. {pr.get('similarity_rule', '')}.",
                      ""]
    apart = summary.get("deeptest_apart")
    if apart:
        lines += [f"**Set apart** (not in Table 8 or the violations): {apart['seed_error']} DeepTest error(s) whose "
                  f"seed prediction was already in error, {apart['no_change']} whose angle moved less than "
                  f"{apart['min_change_deg']:g}° (no real change); {apart['errors']} remain. Table 7 counts every "
                  "Eq. 2 break, as DeepTest did.", ""]
    if summary.get("table7"):
        lines += [f"For reference, {DEEPTEST_REF} reported at λ = 5 over Chauffeur, Epoch and Rambo: "
                  f"{DEEPTEST_TABLE7[5][2]} simple-transformation errors at ε = 0.03, fog {DEEPTEST_TABLE7[5][5]}, "
                  f"rain {DEEPTEST_TABLE7[5][6]} (on their models and data, which were larger).", ""]
    lines += ["![MSE per transformation](mse.png)", ""]
    if bundles:
        lines += ["## Worst cases", "", "![worst cases](worst.png)", "",
                  "| bundle | model | transformation | frame | label | θ(i) | θ(τ(i)) |", "|---|---|---|---|---:|---:|---:|"]
        for b in bundles:
            if b.get("error"):
                lines.append(f"| {b['id']} | | | | | | failed: {str(b['error'])[:80]} |")
                continue
            lab = "–" if b.get("label") is None else f"{math.degrees(b['label']):+.1f}°"
            lines.append(f"| [{b['id']}](violations/{b['id']}/report.md) | {b.get('model')} | {b.get('transform')} "
                         f"{b.get('params', '')} | {b.get('frame_id')} | {lab} | {math.degrees(b['pred']):+.1f}° | "
                         f"{math.degrees(b['pred_t']):+.1f}° |")
        lines.append("")
    if findings:
        lines += ["## Crashes and timeouts of the models", "", "| frame | model | transformation | stage | what |",
                  "|---:|---|---|---|---|"]
        for f in findings[:50]:
            err = str(f.get("error", "")).splitlines()[0][:120] if f.get("error") else ""
            lines.append(f"| {f['frame']} | {f['model']} | {f['transform']} | {f['stage']} | {f['status']}: {err} |")
        lines.append("")
    return "\n".join(lines)


def mse_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Per model: the mean |Δθ| (or MSE with labels) per transformation, against the seed images' error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labelled = summary["labelled"]
    models = [m["model"] for m in summary["models"]]
    names = list(dict.fromkeys(g["transform"] for g in summary["groups"]))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(names) * max(1, len(models)) ** 0.5 + 2), 3.8))
    width = 0.8 / max(1, len(models))
    x = np.arange(len(names))
    for i, m in enumerate(models):
        vals = []
        for n in names:
            gs = [g for g in summary["groups"] if g["model"] == m and g["transform"] == n and g["pairs"]]
            key = "mse" if labelled else "mean_abs_change_deg"
            v = [g[key] for g in gs if g[key] is not None]
            vals.append(float(np.mean(v)) if v else 0.0)
        ax.bar(x + (i - (len(models) - 1) / 2) * width, vals, width, label=m)
        orig = summary["models"][i]["mse_orig"]
        if labelled and orig is not None:
            ax.axhline(orig, color=f"C{i}", lw=0.8, ls="--")
    ax.set_xticks(x, names, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("MSE vs label (rad²); dashed: seed images" if labelled else "mean |Δθ| (°)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    savefig(fig, Path(path))


def junit(summary: Mapping[str, Any], violations: Mapping[tuple[str, str, int], int]) -> str:
    """A test case per model × transformation × parameter: fails when any of its pairs violates the relation,
    errors when the model crashed or timed out on it."""
    suites: dict[str, list[tuple[str, str, str]]] = {}
    for g in summary["groups"]:
        case = f"{g['transform']} {g['params']}"
        k = violations.get((g["model"], g["transform"], g["param"]), 0)
        if g["crashes"] or g["timeouts"]:
            out = ("error", failure_body("crash", f"{g['crashes']} crash(es), {g['timeouts']} timeout(s) of the model",
                                         tag="error"))
        elif k:
            out = ("failure", failure_body("relation", f"{k} of {g['pairs']} pairs violate the relation"))
        else:
            out = ("ok", "")
        suites.setdefault(f"lidarmt.camera.{g['model']}", []).append((case, *out))
    return junit_xml("lidarmt.camera", suites)


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, run: Mapping[str, Any],
                  bundles: list[dict], findings: list[dict],
                  violations: Mapping[tuple[str, str, int], int]) -> dict[str, Path]:
    return write_report_set(out, summary=summary, run=run, table=text_table(summary),
                            markdown=markdown_report(summary, run=run, bundles=bundles, findings=findings),
                            junit=junit(summary, violations), charts={"mse.png": lambda p: mse_chart(summary, p)},
                            html=page_writer(camera_page, summary=summary, run=run, bundles=bundles,
                                             findings=findings))


# ----------------------------------------------------------------------------------------------- report.html


def _rows_as_cells(rows: list[list[str]]) -> list[list[Any]]:
    return [[c for c in r] for r in rows]


def camera_page(summary: Mapping[str, Any], *, run: Mapping[str, Any], bundles: Sequence[Mapping[str, Any]],
                findings: Sequence[Mapping[str, Any]], out: Path) -> str:
    """The page of a camera campaign (see the module's docstring)."""

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
    command_facts(page, run)
    for i, (title, fn) in enumerate((*TABLES, ("Per transformation and parameter", mse_rows))):
        head, rows = fn(summary)
        if not head:
            continue
        body = page.section(f"table-{i}", title)
        foot = [rows[-1]] if rows and rows[-1] and rows[-1][0] == "total" else []
        body.append(table(head, _rows_as_cells(rows[: len(rows) - len(foot)]), ident=f"camera-table-{i}",
                          foot=foot, filter_box=len(rows) > 20))
    body = page.section("charts", "Charts")
    body.append(chart_images(out, ["mse.png", "worst.png"]))
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
            pic = bundle_thumb(out, folder, "pair.png", f"{bid}: seed and transformed image")
            rows.append([bundle_link(out, folder, bid),
                         b.get("model", ""), b.get("transform", ""), b.get("params", ""), b.get("frame_id", ""),
                         _deg_cell(b.get("label")), _deg_cell(b.get("pred")), _deg_cell(b.get("pred_t")),
                         _plain_deg(b.get("change_deg")), b.get("relation", ""), pic,
                         file_links(out, folder, [("report.html", "page"), ("bundle.mcap", "MCAP"),
                                                   ("foxglove-layout.json", "layout"), ("seed.png", "seed"),
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


def _deg_cell(rad: Any) -> Any:
    if not isinstance(rad, int | float) or isinstance(rad, bool) or not math.isfinite(rad):
        return "–"
    return Cell(f"{math.degrees(rad):+.2f}", sort=math.degrees(rad), cls="num")


def _plain_deg(deg: Any) -> Any:
    if not isinstance(deg, int | float) or isinstance(deg, bool) or not math.isfinite(deg):
        return "–"
    return Cell(f"{deg:+.2f}", sort=abs(deg), cls="num")
