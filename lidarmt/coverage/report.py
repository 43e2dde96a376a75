"""Reports of ``lidarmt camera coverage`` (DeepTest's coverage studies; numbers from :mod:`lidarmt.coverage.study`).

Written through :func:`lidarmt.engine.report.write_report_set`: ``summary.json`` (the study's dict),
``run.json``, ``table.txt`` (the tables below), ``jaccard.png`` (Figure 4: median Jaccard distance between the
neuron sets that pairs of transformations activate on a seed image), ``params.png`` (NC over the seeds per
transformation parameter), ``cumulative.png`` (Figure 4.2: mean per-seed NC as transformations are added),
``junit.xml`` (a case per transformation: it fails when the transformation's images activate no neuron the seed
images did not already), ``report.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lidarmt._show import md_code
from lidarmt.engine.report import (
    failure_body,
    junit_xml,
    markdown_table,
    rich_table,
    savefig,
    text_block,
    write_report_set,
)

DEEPTEST_REF = "Tian et al., DeepTest, ICSE 2018"
TITLES = {"nc": "NC", "kmnc": "KMNC", "nbc": "NBC", "snac": "SNAC", "tknc": "TKNC"}


def _pct(share: float | None, digits: int = 1) -> str:
    return "–" if share is None else f"{100 * share:.{digits}f} %"


def _p(v: float | None) -> str:
    if v is None:
        return "–"
    if v < 1e-15:  # below double precision's resolution next to 1: scipy gives 0
        return "< 1e-15"
    return f"{v:.1e}" if v < 1e-3 else f"{v:.3f}"


def _cov_cells(cov: Mapping[str, Any], criteria: list[str]) -> list[str]:
    return [_pct(cov[c]["share"], 2 if c == "kmnc" else 1) for c in criteria]


def per_param_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    crit = summary["criteria"]
    head = ["transformation", "parameter", *(TITLES[c] for c in crit), "image NC", "median ΔN", "median ΔN %",
            "mean |Δθ|°"]
    rows = []
    for t in summary["per_param"]:
        for r in t["params"]:
            rows.append([t["transform"], r["label"], *_cov_cells(r["coverage"], crit), _pct(r["mean_image_nc"]),
                         f"{r['median_increase']:+g}", "–" if r["median_increase_pct"] is None else
                         f"{r['median_increase_pct']:+.1f}", f"{r['mean_abs_angle_change_deg']:.2f}"])
    return head, rows


def per_transform_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    crit = summary["criteria"]
    head = ["transformation", "images", *(TITLES[c] for c in crit), "NC with seeds", "median ΔN", "median ΔN %",
            "Wilcoxon p", "Cohen's d"]
    rows = []
    for t in summary["per_transform"]:
        d = t["cohen_d"]
        rows.append([t["transform"], str(t["images"]), *_cov_cells(t["coverage"], crit),
                     _pct(t["coverage_with_seeds"]["nc"]["share"]) if "nc" in t["coverage_with_seeds"] else "–",
                     f"{t['median_increase']:+g}", "–" if t["median_increase_pct"] is None else
                     f"{t['median_increase_pct']:+.1f}", _p(t["wilcoxon_p"]),
                     "–" if d is None else f"{d:+.2f} ({t['effect']})"])
    return head, rows


def table6_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["criterion", "units", "baseline (seeds)", "transformed", "seeds + transformed", "increase"]
    rows = []
    for c in summary["criteria"]:
        r = summary["cumulative"]["table6"][c]
        cells = [TITLES[c], str(r["baseline"]["units"])]
        for k in ("baseline", "transformed", "together"):
            cells.append(f"{r[k]['covered']} ({_pct(r[k]['share'], 2 if c == 'kmnc' else 1)})")
        cells.append("–" if r["increase_pct"] is None else f"{r['increase_pct']:+.1f} %")
        rows.append(cells)
    return head, rows


def steps_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    st = summary["cumulative"]["per_seed_steps"]
    head = ["after", "mean per-seed NC"]
    labels = ["seed image"] + [f"∪ {n}" for n in st["labels"][1:]]
    return head, [[lab, _pct(v)] for lab, v in zip(labels, st["mean_nc"], strict=True)]


def jaccard_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    j = summary["jaccard"]
    head = ["", *j["transforms"]]
    return head, [[a, *(f"{v:.2f}" for v in row)] for a, row in zip(j["transforms"], j["median"], strict=True)]


def rq1_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["images", "n", "Spearman ρ (NC, θ)", "p", "left/right", "mean NC left", "mean NC right",
            "Mann-Whitney p", "Cohen's d"]
    rows = []
    for key, name in (("seeds", "seed images"), ("all_images", "seeds + transformed")):
        r = summary["rq1"][key]
        rho = r.get("spearman_rho")
        d = r.get("cohen_d")
        rows.append([name, str(r["images"]), "–" if rho is None else f"{rho:+.3f}", _p(r.get("spearman_p")),
                     f"{r['left']}/{r['right']}", _pct(r.get("left_mean_nc"), 2), _pct(r.get("right_mean_nc"), 2),
                     _p(r.get("direction_p")), "–" if d is None else f"{d:+.2f} ({r['effect']})"])
    return head, rows


TABLES = (
    ("Coverage per transformation (all its parameters; ΔN: neurons activated by the transformed image minus "
     "by its seed)", per_transform_rows),
    ("Table 6: the seeds' own coverage vs cumulative over the transformations", table6_rows),
    ("Figure 4.2: mean per-seed NC as transformations are added", steps_rows),
    ("Figure 4: median Jaccard distance between the NC neuron sets of two transformations of a seed",
     jaccard_rows),
    ("RQ1: NC vs steering angle (Spearman) and direction (left θ > 0 vs right θ < 0)", rq1_rows),
)


def text_table(summary: Mapping[str, Any], *, with_params: bool = True) -> str:
    out: list[str] = []
    tables = list(TABLES)
    if with_params:
        tables.insert(1, ("Coverage per transformation and parameter (cumulative over the seeds)", per_param_rows))
    for title, fn in tables:
        head, rows = fn(summary)
        out += text_block(title, head, rows)
    return "\n".join(out)


def rich_tables(summary: Mapping[str, Any]) -> list:
    return [rich_table(title, *fn(summary)) for title, fn in TABLES]


def markdown_report(summary: Mapping[str, Any], *, run: Mapping[str, Any]) -> str:
    cfg = summary["config"]
    lines = [
        f"# Neuron coverage of {summary['model']}: DeepTest's coverage studies",
        "",
        f"{summary['seeds']} seed frames of {md_code(run.get('images', '?'))} (campaign seed {summary['campaign_seed']}: "
        f"the frames and transformed images `lidarmt camera fuzz --seed {summary['campaign_seed']}` judges), "
        f"{len(summary['transforms'])} transformations, {summary['images']} images in all; "
        f"{summary['neurons']} neurons in {len(summary['layers'])} layers "
        f"(conv neurons are channel means). NC threshold {cfg['nc_threshold']}, KMNC k = {cfg['kmnc_k']}, "
        f"TKNC k = {cfg['tknc_k']}; KMNC/NBC/SNAC bounds: {run.get('profile') or 'no profile (NC and TKNC only)'}.",
        "",
        "Reference: " + DEEPTEST_REF + " (§5, RQ1-RQ3; Table 5 is RQ1, Table 6 the cumulative coverage, Figure 4 "
        "the Jaccard distances, Figure 5 the coverage per transformation).",
        "",
    ]
    sections = [("Coverage per transformation", per_transform_rows),
                ("Table 6: baseline vs cumulative", table6_rows),
                ("Figure 4.2: per-seed NC as transformations are added", steps_rows),
                ("Figure 4: Jaccard distances", jaccard_rows),
                ("RQ1: coverage and steering", rq1_rows),
                ("Coverage per transformation and parameter", per_param_rows)]
    for title, fn in sections:
        head, rows = fn(summary)
        lines += [f"## {title}", "", markdown_table(head, rows), ""]
        if fn is jaccard_rows:
            mp = summary["jaccard"]["median_of_pairs"]
            lines += [f"Median over the pairs: {mp if mp is not None else '–'} (DeepTest: 0.53 Chauffeur-CNN, "
                      "0.67 Epoch, 0.12-0.30 Rambo). ![Jaccard](jaccard.png)", ""]
        if fn is steps_rows:
            lines += ["![cumulative](cumulative.png) ![per parameter](params.png)", ""]
    return "\n".join(lines) + "\n"


def jaccard_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Figure 4 as a heat map: median Jaccard distance per pair of transformations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    j = summary["jaccard"]
    names = j["transforms"]
    m = np.asarray(j["median"], dtype=float).reshape(len(names), len(names))
    size = 1.6 + 0.55 * len(names)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(m, cmap="viridis", vmin=0, vmax=max(1e-9, float(m.max()) if m.size else 1.0))
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    for i in range(len(names)):
        for k in range(len(names)):
            ax.text(k, i, f"{m[i, k]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if m[i, k] < 0.6 * m.max() else "black")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="median Jaccard distance")
    ax.set_title(f"{summary['model']}: neurons activated by pairs of transformations\n"
                 f"({summary['seeds']} seeds, NC > {summary['config']['nc_threshold']})", fontsize=9)
    fig.tight_layout()
    savefig(fig, Path(path))


def params_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """NC over the seeds per parameter setting, one line per transformation, against the seeds' own NC."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    base = summary["cumulative"]["table6"]["nc"]["baseline"]["share"] if "nc" in summary["criteria"] else None
    for t in summary["per_param"]:
        ys = [100 * r["coverage"]["nc"]["share"] for r in t["params"]] if "nc" in summary["criteria"] else []
        ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, label=t["transform"])
    if base is not None:
        ax.axhline(100 * base, color="k", ls="--", lw=0.8, label="seed images")
    ax.set_xlabel("parameter setting (grid order)")
    ax.set_ylabel("NC over the seeds (%)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax.set_title(f"{summary['model']}: NC per transformation parameter", fontsize=9)
    fig.tight_layout()
    savefig(fig, Path(path))


def cumulative_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Figure 4.2: mean per-seed NC after the seed image and each added transformation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = summary["cumulative"]["per_seed_steps"]
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    ax.plot(range(len(st["mean_nc"])), [100 * v for v in st["mean_nc"]], marker="o")
    ax.set_xticks(range(len(st["labels"])), ["seed", *("+" + n for n in st["labels"][1:])], rotation=40,
                  ha="right", fontsize=8)
    ax.set_ylabel("mean per-seed NC (%)")
    ax.grid(alpha=0.3)
    ax.set_title(f"{summary['model']}: cumulative NC per seed image", fontsize=9)
    fig.tight_layout()
    savefig(fig, Path(path))


def junit(summary: Mapping[str, Any]) -> str:
    """A case per transformation: it fails when its images activate no NC neuron beyond the seeds' own."""
    cases = []
    base = summary["cumulative"]["table6"].get("nc", {}).get("baseline", {}).get("covered")
    for t in summary["per_transform"]:
        got = t["coverage_with_seeds"].get("nc", {}).get("covered")
        if base is None or got is None or got > base:
            cases.append((t["transform"], "ok", ""))
        else:
            cases.append((t["transform"], "failure", failure_body(
                "NoNewCoverage", f"{t['transform']} activates no neuron beyond the {summary['seeds']} seeds' {base}")))
    return junit_xml(f"coverage {summary['model']}", {"coverage": cases})


def write_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, run: Mapping[str, Any]
                  ) -> dict[str, Path]:
    return write_report_set(
        out, summary=summary, run=run, table=text_table(summary), markdown=markdown_report(summary, run=run),
        junit=junit(summary),
        charts={"jaccard.png": lambda p: jaccard_chart(summary, p), "params.png": lambda p: params_chart(summary, p),
                "cumulative.png": lambda p: cumulative_chart(summary, p)})


# ------------------------------------------------------------------------------------------ LiDAR (Apollo's CNN)


def lidar_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per n and criterion: the sources' coverage, with the follow-ups, and the pairs that go beyond."""
    head = ["n", "criterion", "sources", "sources + follow-ups", "new units", "pairs beyond", "mean beyond",
            "max beyond", "violations: beyond / not"]
    rows = []
    for r in summary["per_n"]:
        for c in summary["criteria"]:
            x = r["criteria"][c]
            digits = 2 if c == "kmnc" else 1
            rows.append([str(r["n"]), TITLES[c], f"{x['sources']} ({_pct(x['sources_share'], digits)})",
                         f"{x['with_follow_ups']} ({_pct(x['with_follow_ups_share'], digits)})",
                         f"+{x['new_units']}", f"{x['pairs_beyond']}/{r['pairs']} ({_pct(x['pairs_beyond_share'])})",
                         f"{x['mean_beyond']:.1f}", str(x["max_beyond"]),
                         f"{x['violations_beyond']} / {x['violations_not_beyond']}"])
    return head, rows


def lidar_shift_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["n", "pairs", "MR1 violations", "median shift (σ)", "max shift (σ)", "shift of violations (σ)",
            "neurons moved > 1σ: median", "max"]
    rows = []
    for r in summary["per_n"]:
        s = r["shift_sigma"]
        rows.append([str(r["n"]), str(r["pairs"]), str(r["violations"]),
                     "–" if s["median"] is None else f"{s['median']:.3g}",
                     "–" if s["max"] is None else f"{s['max']:.3g}",
                     "–" if s["violations_median"] is None else f"{s['violations_median']:.3g}",
                     "–" if s.get("moved_median") is None else f"{s['moved_median']:g}",
                     "–" if s.get("moved_max") is None else str(s["moved_max"])])
    return head, rows


def lidar_widened_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["n", "bounds widened by", "NBC: pairs beyond", "max units", "SNAC: pairs beyond", "max units",
            "violations beyond (NBC)"]
    rows = []
    for r in summary["per_n"]:
        for w, x in r.get("widened", {}).items():
            rows.append([str(r["n"]), f"{float(w):g} σ", f"{x['nbc']['pairs_beyond']}/{r['pairs']}",
                         str(x["nbc"]["max_beyond"]), f"{x['snac']['pairs_beyond']}/{r['pairs']}",
                         str(x["snac"]["max_beyond"]), str(x["nbc"]["violations_beyond"])])
    return head, rows


LIDAR_TABLES = (
    ("Coverage of Apollo's CNN: source frames vs MR1 follow-ups (units beyond: covered by a follow-up, by no "
     "source frame)", lidar_rows),
    ("NBC and SNAC with the bounds widened (a real excursion, not a hair across the sources' extreme)",
     lidar_widened_rows),
    ("How far a follow-up moves the CNN from its source (largest neuron change, in profile standard deviations "
     "floored at a tenth of the layer's mean)", lidar_shift_rows),
)


def lidar_text(summary: Mapping[str, Any]) -> str:
    out: list[str] = []
    for title, fn in LIDAR_TABLES:
        head, rows = fn(summary)
        out += text_block(title, head, rows)
    return "\n".join(out)


def lidar_rich_tables(summary: Mapping[str, Any]) -> list:
    return [rich_table(title, *fn(summary)) for title, fn in LIDAR_TABLES]


def lidar_markdown(summary: Mapping[str, Any], *, run: Mapping[str, Any]) -> str:
    cfg = summary["config"]
    lines = [
        "# Coverage of Apollo's CNN over source frames and MR1 follow-ups",
        "",
        f"Recording {md_code(run.get('bag', '?'))}, map {md_code(run.get('map', '?'))}: {len(summary['frames'])} source frames "
        f"({summary['skipped_empty_roi']} skipped: empty ROI), n = {', '.join(map(str, summary['ns']))}, "
        f"{summary['trials']} trial(s), seed {summary['seed']}, region {summary['region']['shape']} "
        f"{summary['region']['size']:g} m: the follow-ups `lidarmt fuzz` judges with the same options. "
        f"{summary['neurons']} neurons (channel means of the {len(summary['layers'])} conv/deconv layers, after "
        f"ReLU). Profile (KMNC/NBC/SNAC bounds): {summary['profile']} ({summary['profile_count']} frames), "
        f"widened by {cfg['widen']} σ; NC threshold {cfg['nc_threshold']}, KMNC k = {cfg['kmnc_k']}, TKNC k = "
        f"{cfg['tknc_k']}.",
        "",
    ]
    for title, fn in LIDAR_TABLES:
        head, rows = fn(summary)
        lines += [f"## {title}", "", markdown_table(head, rows), ""]
    lines += ["![units beyond the sources per n](beyond.png)", ""]
    return "\n".join(lines) + "\n"


def lidar_chart(summary: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Per n: the share of follow-ups that cover a unit no source frame covers, per criterion."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ns = [r["n"] for r in summary["per_n"]]
    crit = summary["criteria"]
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    width = 0.8 / max(1, len(crit))
    x = np.arange(len(ns))
    for i, c in enumerate(crit):
        ax.bar(x + (i - (len(crit) - 1) / 2) * width, [100 * r["criteria"][c]["pairs_beyond_share"]
                                                       for r in summary["per_n"]], width, label=TITLES[c])
    ax.set_xticks(x, [f"n = {n}" for n in ns])
    ax.set_ylabel("follow-ups beyond the sources (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=len(crit))
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("Apollo CNN: do added points outside the ROI reach new neuron states?", fontsize=9)
    fig.tight_layout()
    savefig(fig, Path(path))


def lidar_junit(summary: Mapping[str, Any]) -> str:
    """A case per n: it fails when some follow-up drives an NC neuron active that no source frame activates
    (a coverage finding: points outside the ROI reach the network's decisions)."""
    cases = []
    for r in summary["per_n"]:
        nc = r["criteria"].get("nc")
        if nc is None or nc["pairs_beyond"] == 0:
            cases.append((f"n={r['n']}", "ok", ""))
        else:
            cases.append((f"n={r['n']}", "failure", failure_body(
                "NewNeurons", f"{nc['pairs_beyond']} of {r['pairs']} follow-ups activate NC neurons no source "
                f"frame activates (+{nc['new_units']} in all)")))
    return junit_xml("coverage apollo cnn", {"coverage-lidar": cases})


def write_lidar_reports(out: str | os.PathLike[str], summary: Mapping[str, Any], *, run: Mapping[str, Any]
                        ) -> dict[str, Path]:
    return write_report_set(out, summary=summary, run=run, table=lidar_text(summary),
                            markdown=lidar_markdown(summary, run=run), junit=lidar_junit(summary),
                            charts={"beyond.png": lambda p: lidar_chart(summary, p)})
