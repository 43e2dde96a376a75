"""The LiDAR bench: MR1 campaigns of several perception modules on the same injected points, compared.

Relations compared per n (each a McNemar row, :mod:`lidarmt.bench.compare`): the study's count relation
|O| > |O′|, the strict subset relation O ⊄ O′, the count relation per class |O_c| > |O′_c|, and crashes or
timeouts. Where the source frames carry ground truth (a simulated bag's ``<name>.labels.npz``, labelled
``.npz`` frames, KITTI folders), each module's detections on the source frames are matched to it with
:mod:`lidarmt.lidar.perception.apollo.evaluate` (per-class precision, recall and class-agnostic "found"), and the
recall of each class is compared frame by frame with the sign test on the true positives. Speed is the median
perception call (source frames and follow-ups) from each journal's timings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lidarmt._atomic import atomic_write_text
from lidarmt.bench.compare import Relation, decide, independence, median_ms, paired_rows
from lidarmt.bench.folder import BenchPlan, module_records
from lidarmt.bench.stats import sign_test
from lidarmt.engine.stats import rate
from lidarmt.types import CLASS_ORDER, Frame

DETECTION_FILE = "detection.json"
#: KITTI labels only the front camera's view: frames whose calibration gives no region (``Labels.region``) count
#: this forward sector (as ``lidarmt evaluate`` does)
KITTI_FOV_DEG = 82.0


def relations() -> list[Relation]:
    """The MR1 outcomes a LiDAR bench compares (the crash/timeout row is added by the pairing)."""
    rels = [Relation("count", "|O| > |O′|", lambda r: bool(r["verdict"]["count_violation"])),
            Relation("subset", "O ⊄ O′", lambda r: bool(r["verdict"]["subset_violation"]))]
    for c in CLASS_ORDER:
        rels.append(Relation(f"class:{c.value}", f"{c.value}: |O_c| > |O′_c|",
                             lambda r, v=c.value: v in r["verdict"]["class_violations"]))
    return rels


# ----------------------------------------------------------------------------------------------- ground truth


def labelled_frames(source: Any) -> tuple[Callable[[int], Frame] | None, str]:
    """``(frame_at, note)``: random access to the recording's frames *with* their ground truth, or
    ``(None, why not)`` when the recording has none. ``source`` is a
    :class:`~lidarmt.lidar.specs.SourceSpec`.

    A simulated bag keeps its ground truth beside it (``x.labels.npz``, aligned point for point); labelled
    ``.npz`` frames and KITTI folders carry it in the frames."""

    from lidarmt.lidar.specs import open_source

    rec = open_source(source)  # a simulated bag comes with the truth beside it (specs.with_simulator_labels)
    path = Path(source.path)
    truth = getattr(rec, "labels_path", None)
    if truth is not None and len(rec) and rec[0].labels is not None:
        return rec.__getitem__, f"ground truth from {truth}"
    if len(rec) and rec[0].labels is not None:
        return rec.__getitem__, f"ground truth carried by the frames of {path}"
    return None, f"{path} carries no ground truth: no precision/recall"


def evaluate_module(config: Any, folder: Path, frame_at: Callable[[int], Frame], *, min_points: int = 5,
                    name: str = "") -> dict[str, Any]:
    """Per-class detection counts of one module on the bench's source frames (and per frame, for the paired
    recall test), cached in ``folder/detection.json`` for the same module, frames, ROI and ``min_points``."""
    from lidarmt.lidar.perception.apollo.evaluate import evaluate_frames
    from lidarmt.lidar.perception.guard import guarded_detect
    from lidarmt.lidar.specs import build_roi_provider, build_sut

    want = {"source": config.source.to_dict(), "roi": config.roi.to_dict(), "sut": config.sut.to_dict(),
            "frames": list(config.frames), "min_points": min_points}
    path = folder / DETECTION_FILE
    if path.is_file():
        try:
            got = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(got, dict) and got.get("config") == want:
                return got
        except (OSError, ValueError, RecursionError):  # a reused baseline's copy is a stranger's file: recompute
            pass
    sut = build_sut(config.sut)
    rois = build_roi_provider(config.roi)

    class _Guarded:  # the module's read-only contract, as in campaigns
        def detect(self, frame, roi):
            return guarded_detect(sut, frame, roi)

    per_frame: dict[str, dict[str, dict[str, int]]] = {}
    current: list[int] = []

    def frames():
        for i in config.frames:
            current[:] = [i]
            yield frame_at(i)

    def on_frame(frame, obstacles, counts) -> None:
        per_frame[str(current[0])] = {c.value: {"tp": v.tp, "fp": v.fp, "fn": v.fn, "found": v.found}
                                      for c, v in counts.items()}

    first = frame_at(config.frames[0])
    is_kitti = first.provenance is not None and first.provenance.format == "kitti"
    try:
        # as `lidarmt evaluate` counts: the labels' region (KITTI: camera 2's view; the fov only for KITTI frames
        # without one), UNKNOWN detections false positives only where the labels name unknown objects
        res = evaluate_frames(name or config.sut.name, frames(), _Guarded(), rois.roi_for,
                              min_points=min_points, fov_deg=KITTI_FOV_DEG if is_kitti else None,
                              on_frame=on_frame)
    except Exception as err:  # the module failed on a source frame: no detection quality for it
        from lidarmt.errors import UserError

        if isinstance(err, UserError):
            raise
        return {"config": want, "error": f"{type(err).__name__}: {err}"}
    d = {"config": want, "frames": res.frames, "seconds": round(res.seconds, 3),
         "classes": {c.value: res.counts[c].to_dict() for c in CLASS_ORDER}, "per_frame": per_frame,
         "kitti_fov_deg": KITTI_FOV_DEG if is_kitti else None, "evaluated_area": res.area()["description"]}
    atomic_write_text(path, json.dumps(d, indent=1, sort_keys=True) + "\n")
    return d


# ----------------------------------------------------------------------------------------------- summary


def speed(records: Mapping[tuple[int, ...], Mapping[str, Any]]) -> dict[str, Any]:
    """Median perception call of a module from its journal: source frames (once each) and follow-ups."""
    source: dict[int, float] = {}
    follow: list[float] = []
    for key, r in records.items():
        if r.get("status") != "ok":
            continue
        if "source_s" in r:
            source.setdefault(int(key[0]), float(r["source_s"]))
        if "sut_s" in r:
            follow.append(float(r["sut_s"]))
    calls = [*source.values(), *follow]
    return {"median_ms": median_ms(calls), "source_median_ms": median_ms(list(source.values())),
            "follow_median_ms": median_ms(follow), "calls": len(calls)}


def module_rates(records: Mapping[tuple[int, ...], Mapping[str, Any]], ns: list[int]) -> dict[str, Any]:
    """Each relation's violation rate per n over the module's own ok pairs (for tables and charts)."""
    out: dict[str, dict[str, Any]] = {}
    for rel in relations():
        per = {}
        for n in ns:
            ok = [r for k, r in records.items() if k[1] == n and r["status"] == "ok"]
            per[str(n)] = rate(sum(bool(rel.violated(r)) for r in ok), len(ok))
        out[rel.name] = per
    return out


def source_agreement(base: Mapping[tuple[int, ...], Mapping[str, Any]],
                     cand: Mapping[tuple[int, ...], Mapping[str, Any]]) -> dict[str, Any]:
    """How alike two modules see the source frames: frames where both report the same number of obstacles, and
    the mean absolute difference of the counts (from the journals' verdicts, one per frame)."""

    def counts(recs: Mapping[tuple[int, ...], Mapping[str, Any]]) -> dict[int, int]:
        out: dict[int, int] = {}
        for k, r in recs.items():
            if r["status"] == "ok":
                out.setdefault(int(k[0]), sum(r["verdict"]["counts_source"].values()))
        return out

    a, b = counts(base), counts(cand)
    frames = sorted(set(a) & set(b))
    diffs = [abs(a[f] - b[f]) for f in frames]
    return {"frames": len(frames), "same_count": sum(d == 0 for d in diffs),
            "mean_abs_diff": (sum(diffs) / len(diffs)) if diffs else None,
            "mean_obstacles_baseline": (sum(a[f] for f in frames) / len(frames)) if frames else None,
            "mean_obstacles_candidate": (sum(b[f] for f in frames) / len(frames)) if frames else None}


def recall_rows(base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per class with ground truth: both modules' recall and the sign test of true positives per frame."""
    rows = []
    if base.get("error") or cand.get("error"):
        return rows
    frames = sorted(set(base.get("per_frame", {})) & set(cand.get("per_frame", {})), key=int)
    for c in CLASS_ORDER:
        bc, cc = base["classes"][c.value], cand["classes"][c.value]
        if not bc["gt"]:
            continue
        tb = [base["per_frame"][f][c.value]["tp"] for f in frames]
        tc = [cand["per_frame"][f][c.value]["tp"] for f in frames]
        t = sign_test(tb, tc)
        rows.append({"relation": f"recall:{c.value}", "label": f"recall {c.value}", "group": "source",
                     "baseline": {"recall": bc["recall"], "precision": bc["precision"], "tp": bc["tp"],
                                  "gt": bc["gt"]},
                     "candidate": {"recall": cc["recall"], "precision": cc["precision"], "tp": cc["tp"],
                                   "gt": cc["gt"]}, **t.to_dict()})
    return rows


def summarize(plan: BenchPlan, *, alpha: float, correction: str,
              detection: Mapping[str, Mapping[str, Any] | None], ground_truth: str = "") -> dict[str, Any]:
    """The deterministic summary of a LiDAR bench (summary.json): modules, per-candidate paired rows against
    the baseline (adjusted p-values, regression flags), detection quality, and the verdict."""
    cfg0 = plan.baseline.config
    ns = list(cfg0.ns)
    records = {m.name: module_records(plan.folder(m), m.config) for m in plan.modules}
    modules = []
    for i, m in enumerate(plan.modules):
        recs = records[m.name]
        det = detection.get(m.name)
        modules.append({
            "name": m.name, "role": "baseline" if i == 0 else "candidate", "sut": m.config.sut.to_dict(),
            "origin": m.origin, "pairs_expected": m.config.total, "pairs_done": len(recs),
            "crashes": sum(r["status"] == "crash" for r in recs.values()),
            "timeouts": sum(r["status"] == "timeout" for r in recs.values()),
            "speed": speed(recs), "rates": module_rates(recs, ns),
            "detection": None if det is None else {k: det.get(k) for k in ("classes", "frames", "error",
                                                                              "kitti_fov_deg")},
        })
    comparisons = []
    base = plan.baseline
    for m in plan.modules[1:]:
        rows = paired_rows(records[base.name], records[m.name], relations(), lambda k: (int(k[1]),), ns)
        for r in rows:
            r["n"] = r.pop("group")
        rec_rows = []
        if detection.get(base.name) and detection.get(m.name):
            rec_rows = recall_rows(detection[base.name], detection[m.name])  # type: ignore[arg-type]
        decide([*rows, *rec_rows], alpha=alpha, correction=correction)
        regressions = [r for r in [*rows, *rec_rows] if r["regression"]]
        comparisons.append({"baseline": base.name, "candidate": m.name, "rows": rows,
                            "independence": independence(records[base.name], records[m.name]), "recall": rec_rows,
                            "source_agreement": source_agreement(records[base.name], records[m.name]),
                            "regressions": len(regressions),
                            "improvements": sum(r["improvement"] for r in [*rows, *rec_rows])})
    shared = {k: v for k, v in cfg0.to_dict().items() if k not in ("sut", "timeout")}
    return {
        "kind": "lidar-mr1", "relation": "MR1: obstacles inside the ROI survive n random points added "
                                         "outside it",
        "config": shared, "alpha": alpha, "correction": correction, "baseline": base.name,
        "test": "exact McNemar (two-sided binomial test on the discordant pairs); recall: sign test on the "
                "true positives per source frame",
        "ground_truth": ground_truth, "modules": modules, "comparisons": comparisons,
        "regressions": sum(c["regressions"] for c in comparisons),
        "verdict": "regression" if any(c["regressions"] for c in comparisons) else "no regression",
    }

