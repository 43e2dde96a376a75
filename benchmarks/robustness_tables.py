"""Merge ``lidarmt robustness`` run folders of one recording into one table: the mCE/mRR table of README.md.

    python benchmarks/robustness_tables.py OUT.json RUN [RUN ...]

The runs must share the recording, frames, seed, modules, baseline and scoring options and differ only in their
corruptions. A corruption's sweeps depend on its name, the frame, the level and the seed, never on the other
corruptions of a run (``lidarmt.lidar.campaign.transform_seed``), so the union of such runs is the run of all
their corruptions: the clean cells, computed by every run, are checked to agree, the other cells are joined and
the scores recomputed with ``lidarmt.lidar.robustness.scores`` (Robo3D's CE/mCE and RR/mRR). Writes OUT.json
(the runs' commands, elapsed times and machines, the SHA-256 of every module's weights file, the merged cells and
scores) and prints the headline table as Markdown (CE_i / RR_i per corruption).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from lidarmt._atomic import atomic_write_text
from lidarmt.lidar.robustness import CLEAN, HEADLINE_SET, MEAN, scores

SAME = ("source", "frames", "seed", "modules", "suts", "roi", "min_points", "fov_deg", "max_range")


def weights_of(sut: dict) -> tuple[str, str] | None:
    """(path, SHA-256) of the weights file a built-in Apollo module loads."""
    from lidarmt.lidar.perception.registry import get_perception

    p = get_perception(sut["name"], **sut.get("options", {}))
    path = getattr(p, "weights_path", None)
    if path is None:
        return None
    path = Path(path).resolve()
    root = Path(__file__).resolve().parents[1]
    shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    return shown, hashlib.sha256(path.read_bytes()).hexdigest()


def merge(runs: list[Path]) -> dict:
    summaries = [json.loads((r / "summary.json").read_text()) for r in runs]
    infos = [json.loads((r / "run.json").read_text()) for r in runs]
    first = summaries[0]["config"]
    for s, r in zip(summaries[1:], runs[1:], strict=True):
        for k in SAME:
            if s["config"][k] != first[k]:
                raise SystemExit(f"{r}: {k} differs from {runs[0]}'s; these runs do not make one table")
        if s["baseline"] != summaries[0]["baseline"]:
            raise SystemExit(f"{r}: another baseline")
    cells: dict[tuple[str, str, str], dict] = {}
    corruptions: list[dict] = []
    for s in summaries:
        for c in s["cells"]:
            key = (c["module"], c["corruption"], c["level"])
            if key in cells and cells[key]["classes"] != c["classes"]:
                raise SystemExit(f"two runs disagree on {key}: not the same frames or seeds")
            cells[key] = c
        for cor in s["config"]["corruptions"]:
            if cor["name"] in {c["name"] for c in corruptions}:
                raise SystemExit(f"corruption {cor['name']} is in two runs")
            corruptions.append(cor)
    modules = first["modules"]
    baseline = summaries[0]["baseline"]
    merged = scores(list(cells.values()), modules=modules, corruptions=corruptions, baseline=baseline)
    weights = {}
    for sut in first["suts"]:
        w = weights_of(sut)
        if w is not None:
            weights[sut["name"] + "".join(f" {k}={v}" for k, v in sorted(sut.get("options", {}).items()))] = {
                "path": w[0], "sha256": w[1]}
    return {"source": first["source"], "frames": first["frames"], "seed": first["seed"], "modules": modules,
            "baseline": baseline, "corruptions": [c["name"] for c in corruptions], "weights": weights,
            "runs": [{"folder": str(r), "command": i.get("command"), "elapsed_s": i.get("elapsed_s"),
                      "calls": i.get("ran"), "environment": i.get("environment")} for r, i in zip(runs, infos, strict=True)],
            "cells": sorted(cells.values(), key=lambda c: (c["module"], c["corruption"] != CLEAN, c["corruption"],
                                                           c["level"])),
            "scores": merged}


def markdown(d: dict) -> str:
    names = d["corruptions"]
    head = "| module | clean AP | mCE | mRR | " + " | ".join(names) + " |"
    rows = [head, "|---|" + "---:|" * (3 + len(names))]
    for mod in d["modules"]:
        s = d["scores"]["modules"][mod][HEADLINE_SET][MEAN]

        def f(v: float | None) -> str:
            return "–" if v is None else f"{v:.0f}"

        label = mod + (" (baseline)" if mod == d["baseline"] else "")
        cols = [f"{f(s['corruptions'][n]['ce'])} / {f(s['corruptions'][n]['rr'])}" for n in names]
        clean = "–" if s["clean"] is None else f"{s['clean']:.1f}"
        mce = "–" if s["mce"] is None else f"{s['mce']:.1f}"
        mrr = "–" if s["mrr"] is None else f"{s['mrr']:.1f}"
        rows.append(f"| {label} | {clean} | {mce} | {mrr} | " + " | ".join(cols) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    out = Path(argv[0])
    d = merge([Path(a) for a in argv[1:]])
    atomic_write_text(out, json.dumps(d, indent=1, sort_keys=True) + "\n")
    print(markdown(d))
    print(f"scored classes: {', '.join(d['scores']['scored_classes'])}; weights: "
          + "; ".join(f"{k}: {v['sha256'][:16]}…" for k, v in d["weights"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
