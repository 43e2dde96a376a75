"""Reports of the searches (``lidarmt camera search``, ``lidarmt fuzz --search``), through the common report set.

Summaries are folded from the journal only (deterministic: a resumed search writes the same summary.json as an
uninterrupted one):

* DeepTest's guided search: the seeds' NC, the cumulative NC of the guided and the unguided mutants made on the
  same seeds with the same number of attempts, the mutants kept (DeepTest's "generated tests"), and the
  erroneous behaviours among them (DeepTest Table 7's "guided search" column: Eq. 2 at λ = 1..10 with labels;
  DeepRoad at 10/20/30/40° always);
* TACTIC's ES vs random search: per arm the critical conditions found, ranked by fitness, with their
  parameters, Fc, Fd, errors at 10/20/30/40° and the coverage reached (TACTIC's Tables 2/3 shape);
* the LiDAR noise-condition search: per arm the best conditions and, on held-back frames, their MR1 violation
  rates with Wilson intervals next to the study's uniform noise with the same n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._show import md_code, md_link, md_text
from lidarmt.engine.report import failure_body, junit_xml, savefig, write_report_set
from lidarmt.engine.stats import wilson

EPS_DEG = (10.0, 20.0, 30.0, 40.0)
LAMBDAS = tuple(float(v) for v in range(1, 11))


def _deeproad(pred: Sequence[float], pred_t: Sequence[float]) -> dict[str, int]:
    d = np.abs(np.asarray(pred_t, dtype=float) - np.asarray(pred, dtype=float))
    return {f"{e:g}": int(np.sum(d > math.radians(e))) for e in EPS_DEG}


def _eq2(labels: Sequence[float | None], pred_t: Sequence[float], mse_orig: float | None) -> dict[str, int] | None:
    if mse_orig is None:
        return None
    pairs = [(lab, p) for lab, p in zip(labels, pred_t, strict=True) if lab is not None]
    if not pairs:
        return None
    err = np.array([(p - lab) ** 2 for lab, p in pairs])
    return {f"{lam:g}": int(np.sum(err > lam * mse_orig)) for lam in LAMBDAS}


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.2f} %"


# ----------------------------------------------------------------------------------------------- camera


def camera_summary(config: Any, tally: Any) -> dict[str, Any]:
    """The deterministic summary of a camera search (from its tally)."""
    out: dict[str, Any] = {"kind": "camera-search", "config": config.to_dict(), "strategy": config.strategy,
                           "model": config.model.name, "seeds": len(config.frames), "skipped": tally.skipped}
    if config.strategy == "deeptest":
        out |= _deeptest_summary(config, tally)
    else:
        out |= _es_summary(config, tally)
    return out


def _deeptest_summary(config: Any, tally: Any) -> dict[str, Any]:
    arms = {}
    seed_nc = None
    for arm in (0, 1):
        recs = [r for r in tally.arm(arm) if r["status"] == "ok"]
        crashes = sum(1 for r in tally.arm(arm) if r["status"] != "ok")
        kept = [r for r in recs if r["kept"]]
        if recs:
            seed_nc = recs[0]["seed_nc"]
        labelled = [r for r in kept if r.get("label") is not None]
        mse = next((r["mse_orig"] for r in recs if r.get("mse_orig") is not None), None)
        pairs_used: dict[str, int] = {}
        for r in kept:
            tag = "+".join(s["transform"] for s in r["steps"])
            pairs_used[tag] = pairs_used.get(tag, 0) + 1
        curve = [float(r["coverage"]) for r in recs]
        arms[config.arm_names[arm]] = {
            "attempts": len(recs), "crashes": crashes, "kept": len(kept),
            "nc": curve[-1] if curve else seed_nc, "curve": curve,
            "deeptest_errors": _eq2([r["label"] for r in labelled], [r["pred_t"] for r in labelled], mse)
            if labelled else None,
            "deeproad_errors": _deeproad([r["pred"] for r in kept], [r["pred_t"] for r in kept]),
            "deeptest_errors_all": _eq2([r.get("label") for r in recs], [r["pred_t"] for r in recs], mse)
            if any(r.get("label") is not None for r in recs) else None,
            "compositions": dict(sorted(pairs_used.items(), key=lambda kv: (-kv[1], kv[0]))[:10]),
        }
    g, u = arms["guided"], arms["unguided"]
    higher = g["nc"] is not None and u["nc"] is not None and g["nc"] > u["nc"]
    verdict = (f"guided search reached {_pct(g['nc'])} cumulative NC, unguided {_pct(u['nc'])} on the same seeds "
               f"with the same number of attempts ({g['attempts']}); seeds alone {_pct(seed_nc)}: guided is "
               + ("higher" if higher else "NOT higher"))
    return {"seed_nc": seed_nc, "arms": arms, "guided_higher": bool(higher), "verdict": verdict}


def _best_curve(recs: Sequence[Mapping[str, Any]]) -> list[float]:
    best, out = -math.inf, []
    for r in recs:
        best = max(best, float(r["fitness"]))
        out.append(best)
    return out


def condition_row(r: Mapping[str, Any], criterion: str) -> dict[str, Any]:
    return {"step": int(r["key"][0]), "arm": r["arm"], "params": r["params"], "fc": r["fc"],
            "fd_deg": math.degrees(r["fd"]), "fitness": r["fitness"],
            "errors": _deeproad(r["pred"], r["pred_t"]),
            "deeptest_errors_lambda5": (_eq2(r["labels"], r["pred_t"], r["mse_orig"]) or {}).get("5"),
            "coverage": r["coverage"], "coverage_criterion": r["coverage"][criterion]}


def _es_summary(config: Any, tally: Any, top: int = 5) -> dict[str, Any]:
    from lidarmt.search.es import ranked

    arms = {}
    seed_cov = None
    for arm in config.arms:
        recs = [r for r in tally.arm(arm) if r["status"] == "ok"]
        if recs:
            seed_cov = recs[0]["seed_coverage"]
        best = [condition_row(r, config.criterion) for r in ranked(recs, top=top)]
        reach = max((r["coverage"][config.criterion] for r in recs), default=None)
        total_err = {f"{e:g}": sum(condition_row(r, config.criterion)["errors"][f"{e:g}"] for r in recs)
                     for e in EPS_DEG}
        arms[config.arm_names[arm]] = {
            "evaluations": len(recs), "crashes": sum(1 for r in tally.arm(arm) if r["status"] != "ok"),
            "best": best, "curve": _best_curve(recs), "max_coverage": reach, "errors_all": total_err,
            "sigma_last": recs[-1].get("sigma") if recs and arm == 0 else None}
    return {"space": config.space, "criterion": config.criterion, "seed_coverage": seed_cov, "arms": arms,
            "es_stopped_at": tally.es_stopped_at()}


def camera_table(summary: Mapping[str, Any]) -> str:
    lines = [f"{summary['strategy']} search on {summary['model']}, {summary['seeds']} seeds"]
    if summary["strategy"] == "deeptest":
        lines.append(f"seeds' own NC: {_pct(summary['seed_nc'])}")
        lines.append(f"{'arm':<10} {'attempts':>8} {'kept':>5} {'cum. NC':>9}  errors (DeepRoad 10/20/30/40°)  "
                     "Eq.2 λ=5 (kept)")
        for name, a in summary["arms"].items():
            dr = "/".join(str(a["deeproad_errors"][f"{e:g}"]) for e in EPS_DEG)
            eq = "–" if a["deeptest_errors"] is None else str(a["deeptest_errors"]["5"])
            lines.append(f"{name:<10} {a['attempts']:>8} {a['kept']:>5} {_pct(a['nc']):>9}  {dr:<30} {eq}")
        lines.append(summary["verdict"])
    else:
        c = summary["criterion"]
        lines.append(f"space {summary['space']}, criterion {c}; seeds' own coverage "
                     + ", ".join(f"{k} {_pct(v)}" for k, v in (summary["seed_coverage"] or {}).items()))
        for name, a in summary["arms"].items():
            lines.append(f"[{name}] {a['evaluations']} evaluations; best fitness "
                         f"{a['best'][0]['fitness']:.4f}" if a["best"] else f"[{name}] no evaluation")
            lines.append(f"  {'rank':<4} {'step':>4} {'fitness':>8} {'Fc':>8} {'Fd°':>6} {'err 10/20/30/40':<16} "
                         f"{c + ' reached':>12}  parameters")
            for i, r in enumerate(a["best"], 1):
                err = "/".join(str(r["errors"][f"{e:g}"]) for e in EPS_DEG)
                par = ", ".join(f"{k}={v:g}" for k, v in r["params"].items())
                lines.append(f"  {i:<4} {r['step']:>4} {r['fitness']:>8.4f} {r['fc']:>8.5f} {r['fd_deg']:>6.2f} "
                             f"{err:<16} {_pct(r['coverage_criterion']):>12}  {par}")
        if summary.get("comparison"):  # ES vs random vs DeepRoad-style translation, one row per arm
            from lidarmt.search.camera import comparison_table

            lines += ["", comparison_table(summary["comparison"]).rstrip()]
    return "\n".join(lines) + "\n"


def camera_markdown(summary: Mapping[str, Any], run: Mapping[str, Any], bundles: Sequence[Mapping[str, Any]]
                    ) -> str:
    md = [f"# Camera search: {summary['strategy']} on {summary['model']}", "",
          f"Command: {md_code(run.get('command') or '–')}", "", "```", camera_table(summary).rstrip(), "```", ""]
    if summary["strategy"] == "deeptest":
        md += ["Cumulative neuron coverage (NC, threshold "
               f"{summary['config']['nc_threshold']:g}) after each attempt: `search.png`. "
               "DeepTest's Algorithm 1: per seed, two transformations with the guided-search ranges of its code; "
               "a mutant is kept when it raises the cumulative NC, and its two transformations are queued for "
               "the seed's next attempts; a seed stops after "
               f"{summary['config']['tries']} failed attempts. The unguided arm makes two random "
               "transformations per attempt on the same seeds (no queue, all kept).", ""]
        for name, a in summary["arms"].items():
            if a["deeptest_errors"] is not None:
                md.append(f"- {name}: erroneous behaviours among the kept mutants by DeepTest Eq. 2, λ = 1..10: "
                          + ", ".join(f"{v}" for v in a["deeptest_errors"].values()))
            md.append(f"- {name}: most kept compositions: "
                      + (", ".join(f"{k} ({v})" for k, v in a["compositions"].items()) or "none"))
        md.append("")
    else:
        md += ["![best fitness vs evaluations](search.png)", "", "![the best conditions](conditions.png)", "",
               "Fitness = Fc + Fd/(Fd+1) (TACTIC): Fc the share of the seeds' uncovered "
               f"{summary['criterion'].upper()} units the transformed seeds cover, Fd the mean steering change "
               "(radians). Errors: seeds whose steering changes by more than 10/20/30/40°.", ""]
        if summary.get("es_stopped_at") is not None:
            md += [f"The ES stopped at step {summary['es_stopped_at']} (60 steps without improvement); the random "
                   "arm stopped with it (the same budget).", ""]
    if bundles:
        md += ["## Bundles", ""]
        md += [f"- {md_link('violations/' + str(b['id']) + '/report.md', 'violations/' + str(b['id']))}: "
               f"{md_text(b.get('params', ''))}, frame {md_code(b.get('frame_id'))}: "
               f"{math.degrees(b['pred']):+.1f}° → {math.degrees(b['pred_t']):+.1f}°" for b in bundles
               if not b.get("error")]
        md.append("")
    md += [f"{run.get('ran', 0)} candidates evaluated in {run.get('elapsed_s', 0):.1f} s in this invocation "
           f"(resumed from {run.get('resumed_from', 0)}).", ""]
    return "\n".join(md)


def _curves_chart(curves: Mapping[str, Sequence[float]], ylabel: str, title: str):
    def draw(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for name, ys in curves.items():
            if len(ys):
                ax.plot(np.arange(1, len(ys) + 1), ys, label=name)
        ax.set_xlabel("evaluations")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        savefig(fig, path)

    return draw


def write_camera_reports(out: Path, summary: Mapping[str, Any], *, run: Mapping[str, Any],
                         bundles: Sequence[Mapping[str, Any]]) -> dict[str, Path]:
    if summary["strategy"] == "deeptest":
        curves = {k: v["curve"] for k, v in summary["arms"].items()}
        chart = _curves_chart(curves, "cumulative NC", f"DeepTest guided vs unguided, {summary['model']}")
    else:
        curves = {k: v["curve"] for k, v in summary["arms"].items()}
        chart = _curves_chart(curves, "best fitness so far", f"{summary['space']}: ES vs random, {summary['model']}")
    cases = []
    for b in bundles:
        if b.get("error"):
            cases.append((b["id"], "error", failure_body("bundle", b["error"], tag="error")))
        else:
            cases.append((b["id"], "failure", failure_body(
                "steering", f"{math.degrees(b['pred']):+.1f}° → {math.degrees(b['pred_t']):+.1f}° under "
                f"{b.get('params', '')}")))
    for name in summary["arms"]:
        cases.append((f"{name} arm ran", "ok", ""))
    return write_report_set(out, summary=summary, run=run, table=camera_table(summary),
                            markdown=camera_markdown(summary, run, bundles),
                            junit=junit_xml("lidarmt camera search", {summary["strategy"]: cases}),
                            charts={"search.png": chart})


# ----------------------------------------------------------------------------------------------- LiDAR


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "wilson95": [lo, hi]}


def lidar_summary(config: Any, tally: Any) -> dict[str, Any]:
    """The deterministic summary of a LiDAR noise-condition search."""
    from lidarmt.lidar.mr1.inject import NoiseCondition
    from lidarmt.search.lidar import ARMS

    arms = {}
    for a in config.arms:
        recs = sorted((r for r in tally.search[a] if r["status"] == "ok"), key=lambda r: r["step"])
        arms[ARMS[a]] = {"evaluations": len(recs), "crashes": sum(1 for r in tally.search[a] if r["status"] != "ok"),
                         "curve": _best_curve(recs),
                         "best": [{"step": r["step"], "fitness": r["fitness"], "violations": r["violations"],
                                   "frames": len(config.frames), "condition": r["condition"],
                                   "describe": NoiseCondition.from_dict(r["condition"]).describe()}
                                  for r in tally.best(a)]}
    validated = []
    by_rank: dict[int, dict[str, list]] = {}
    for r in tally.validation:
        if r["status"] == "skipped":
            continue
        by_rank.setdefault(int(r["rank"]), {"condition": [], "uniform": [], "rec": [r]})[r["variant"]].append(r)
    for rank in sorted(by_rank):
        g = by_rank[rank]
        rec = g["rec"][0]
        ok_c = [r for r in g["condition"] if r["status"] == "ok"]
        ok_u = [r for r in g["uniform"] if r["status"] == "ok"]
        cond = NoiseCondition.from_dict(rec["condition"])
        validated.append({
            "rank": rank, "arm": ARMS[int(rec["candidate"][1])], "step": int(rec["candidate"][0]),
            "condition": rec["condition"], "describe": cond.describe(), "n": cond.n,
            "fresh": _rate(sum(r["subset_violation"] for r in ok_c), len(ok_c)),
            "fresh_count": _rate(sum(r["count_violation"] for r in ok_c), len(ok_c)),
            "uniform": _rate(sum(r["subset_violation"] for r in ok_u), len(ok_u)),
            "uniform_count": _rate(sum(r["count_violation"] for r in ok_u), len(ok_u)),
            "violating_frames": sorted(int(r["frame"]) for r in ok_c if r["subset_violation"])})
    worse = [v for v in validated if v["fresh"]["k"] > v["uniform"]["k"]]
    separated = [v for v in worse if v["fresh"]["wilson95"][0] > v["uniform"]["wilson95"][1]]
    if separated:
        verdict = (f"{len(separated)} condition(s) violate MR1 on held-back frames more often than uniform noise "
                   "with the same n, with non-overlapping 95 % Wilson intervals")
    elif worse:
        verdict = (f"{len(worse)} condition(s) violate MR1 on held-back frames more often than uniform noise with "
                   "the same n, but the 95 % Wilson intervals overlap: not a significant difference at this size")
    else:
        verdict = "no condition found violates MR1 on held-back frames more often than uniform noise with the same n"
    return {"kind": "lidar-search", "config": config.to_dict(), "strategy": config.strategy,
            "search_frames": list(config.frames), "fresh_frames": list(config.fresh), "arms": arms,
            "es_stopped_at": tally.es_stopped_at() if config.strategy == "es" else None,
            "validated": validated, "verdict": verdict}


def lidar_table(summary: Mapping[str, Any]) -> str:
    lines = [f"noise-condition search ({summary['strategy']}) on {len(summary['search_frames'])} frames; "
             f"validation on {len(summary['fresh_frames'])} held-back frames (MR1: O ⊄ O′)"]
    for name, a in summary["arms"].items():
        best = a["best"][0] if a["best"] else None
        lines.append(f"[{name}] {a['evaluations']} evaluations; best fitness "
                     + (f"{best['fitness']:.3f} ({best['violations']}/{best['frames']} frames)" if best else "–"))
    lines.append(f"{'rank':<4} {'arm':<7} {'step':>4}  {'held-back O⊄O′':<24} {'uniform, same n':<24} condition")
    for v in summary["validated"]:
        f, u = v["fresh"], v["uniform"]
        fs = f"{f['k']}/{f['n']} [{100 * f['wilson95'][0]:.1f}, {100 * f['wilson95'][1]:.1f}]"
        us = f"{u['k']}/{u['n']} [{100 * u['wilson95'][0]:.1f}, {100 * u['wilson95'][1]:.1f}]"
        lines.append(f"{v['rank']:<4} {v['arm']:<7} {v['step']:>4}  {fs:<24} {us:<24} {v['describe']}")
    lines.append(summary["verdict"])
    return "\n".join(lines) + "\n"


def write_lidar_reports(out: Path, summary: Mapping[str, Any], *, run: Mapping[str, Any],
                        bundles: Sequence[Mapping[str, Any]]) -> dict[str, Path]:
    chart = _curves_chart({k: v["curve"] for k, v in summary["arms"].items()}, "best fitness so far",
                          "MR1 noise conditions: ES vs random")
    cases = []
    for v in summary["validated"]:
        name = f"rank {v['rank']} ({v['arm']} step {v['step']}): {v['describe']}"
        if v["fresh"]["k"]:
            cases.append((name, "failure", failure_body("MR1", f"O ⊄ O′ on {v['fresh']['k']}/{v['fresh']['n']} "
                                                        "held-back frames")))
        else:
            cases.append((name, "ok", ""))
    md = ["# MR1 critical noise conditions", "", f"Command: {md_code(run.get('command') or '–')}", "", "```",
          lidar_table(summary).rstrip(), "```", "", "![best fitness vs evaluations](search.png)", "",
          "Fitness on the search frames: the share of frames with O ⊄ O′ plus 0.1 × the mean disturbance of the "
          "source obstacles (1 − matching score). Held-back frames were never seen by the search; 'uniform' is "
          "the study's injector (n points uniform in the 120 m disk) with the condition's n.", ""]
    for name, a in summary["arms"].items():
        md += [f"## {name}: best conditions on the search frames", ""]
        md += [f"- step {b['step']}: fitness {b['fitness']:.3f}, {b['violations']}/{b['frames']} frames; "
               f"{b['describe']}" for b in a["best"]]
        md.append("")
    if bundles:
        md += ["## Bundles", ""]
        md += [f"- [violations/{b['id']}](violations/{b['id']}/report.md): {b.get('n_source')} → {b.get('n_follow')} "
               f"obstacles, {b.get('lost')}"
               for b in bundles if not b.get("error")]
        md.append("")
    md += [f"{run.get('ran', 0)} records in {run.get('elapsed_s', 0):.1f} s in this invocation.", ""]
    return write_report_set(out, summary=summary, run=run, table=lidar_table(summary), markdown="\n".join(md),
                            junit=junit_xml("lidarmt fuzz --search", {"conditions": cases}),
                            charts={"search.png": chart})
