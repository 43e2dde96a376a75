"""``lidarmt evaluate``: per-class precision and recall of the Apollo pipeline on labelled frames."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import console, err_console


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _labelled(data: Path, rec):
    """``frame(i)``: the recording's frame ``i`` with its ground truth, or an InputError (one line) when ``data``
    holds none.

    A simulated bag (``lidarmt simulate --out x.bag``) keeps its ground truth beside it in ``x.labels.npz``
    (:func:`lidarmt.sim.record.load_labels`), aligned point for point with its clouds; labelled .npz frames and
    KITTI folders carry theirs in the frames.
    """
    import dataclasses

    from lidarmt.errors import InputError

    if data.is_file():
        from lidarmt.sim.record import labels_path, load_labels

        lab = labels_path(data)
        if lab.is_file():
            labels = load_labels(lab)
            if len(labels) != len(rec):
                raise InputError(f"{lab}: ground truth of {len(labels)} sweep(s) for the {len(rec)} point clouds of "
                                 f"{data}; simulate the bag and its labels again together")

            def frame(i: int):
                f = rec[i]
                lb = labels[i]
                if f.dropped or lb.point_meta is None or len(lb.point_meta) != len(f.points):
                    raise InputError(f"{lab}: sweep {i} labels {0 if lb.point_meta is None else len(lb.point_meta)} "
                                     f"points but {data} holds {len(f.points)} (+{f.dropped} dropped); the labels "
                                     "do not belong to this bag")
                return dataclasses.replace(f, labels=lb)

            return frame
    if len(rec) and rec[0].labels is None:
        beside = (f" and no {labels_path(data).name} beside it" if data.is_file() else "")
        raise InputError(f"--data {data}: its frames carry no ground truth{beside}; evaluate needs labelled frames "
                         "(`lidarmt simulate --dataset DIR`, or a bag from `lidarmt simulate --out` with its "
                         ".labels.npz)")
    return rec.__getitem__


def evaluate(
    data: Annotated[Path | None, typer.Option("--data", help="Folder of labelled simulator .npz frames "
                                              "(held out: generated with a seed not used for training).")] = None,
    weights: Annotated[Path | None, typer.Option("--weights", help="CNN weights (default: the shipped ones).")] = None,
    kitti: Annotated[Path | None, typer.Option("--kitti", help="KITTI object folder (velodyne, label_2, calib, "
                                               "road_label) to measure recall on real HDL-64E frames.")] = None,
    frames: Annotated[int | None, typer.Option("--frames", help="Evaluate at most this many simulated frames.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the results as JSON here.")] = None,
    mode: Annotated[str, typer.Option(help="CNN execution: exact (fp32, deterministic) or fast (bf16 where supported).")] = "exact",
    grid: Annotated[int, typer.Option(help="Feature grid of the model (640 or 512).")] = 640,
    min_points: Annotated[int, typer.Option(help="Ground truth with fewer ROI points than this is ignored.")] = 5,
    fov: Annotated[float, typer.Option(help="KITTI: horizontal field of view of the labelled camera, degrees.")] = 82.0,
) -> None:
    """Per-class precision/recall of the full Apollo pipeline (ROI, CNN, Cluster2D, MinBox).

    A detection matches a ground-truth box of its class when their rotated bird's-eye-view IoU is >= 0.5 (cars)
    or >= 0.3 (pedestrians, cyclists, unknown). "found" is class-agnostic recall at IoU >= 0.1. Simulated frames use Apollo's
    HDMap ROI on the map of their town (from the dataset's dataset.json); KITTI frames the area covered by their
    road/parking/sidewalk labels, and only detections inside the camera's field of view are counted (KITTI
    labels nothing outside it).

    --data is a folder of labelled frames or a bag simulated by `lidarmt simulate --out` (its ground truth is read
    from the <name>.labels.npz the simulator writes beside it); a recording without ground truth is refused.

    Examples:

    `lidarmt evaluate --data data/val --kitti ../shared/data/kitti/training --out eval.json`

    `lidarmt evaluate --data data/val --weights runs/cnnseg640/cnnseg640.pt --frames 40`
    """
    import json

    from rich.table import Table

    from lidarmt._atomic import atomic_write_text
    from lidarmt.errors import ArgumentError
    from lidarmt.perception.apollo.config import ApolloConfig
    from lidarmt.perception.apollo.evaluate import IOU_THRESHOLD, SimRoi, evaluate_frames, kitti_roi
    from lidarmt.perception.apollo.pipeline import ApolloLOP
    from lidarmt.types import CLASS_ORDER

    if data is None and kitti is None:
        raise ArgumentError("nothing to evaluate: pass --data DIR (simulated frames) and/or --kitti DIR")
    if mode not in ("exact", "fast"):
        raise ArgumentError(f"--mode must be exact or fast, got {mode!r}")
    from lidarmt.cli._common import track
    from lidarmt.io import open_recording

    sources = []
    if data is not None:  # the data first: a recording without ground truth is refused before the model loads
        rec = open_recording(data)
        sources.append((rec, _labelled(data, rec)))
    cfg = ApolloConfig(grid=grid, mode=mode, weights=None if weights is None else str(weights))
    lop = ApolloLOP(cfg)
    results = []

    if data is not None:
        from lidarmt.perception.apollo.evaluate import label_area_roi

        rec, frame_at = sources[0]
        n = len(rec) if frames is None else min(frames, len(rec))
        sim_roi = SimRoi(str(data) if data.is_dir() else None)
        variants = [(sim_roi.kind, sim_roi, sim_roi.describe())]
        if sim_roi.kind == "hdmap":  # the map's ROI is the road only: add the one with sidewalks (pedestrians)
            variants.append(("road+sidewalk labels", label_area_roi,
                             "ROI: the area covered by the ground-truth road/parking/sidewalk points (closed "
                             "morphologically, LabelRoi): includes sidewalks, where most pedestrians are"))
        for label, roi_of, note in variants:
            it = (frame_at(i) for i in range(n))
            res = evaluate_frames(f"sim ({label} ROI):{data}", track(it, total=n, description=f"sim, {label} ROI"),
                                  lop, roi_of, min_points=min_points)
            res.notes.append(note)
            results.append(res)
    if kitti is not None:
        from lidarmt.perception.apollo.evaluate import GridRoi

        rec = open_recording(kitti)
        variants = [("road-label ROI", kitti_roi,
                     "ROI: the area covered by the road/parking/sidewalk/other-ground labels (closed morphologically, "
                     "LabelRoi, as perceive, roi and fuzz build it)"),
                    ("whole-grid ROI", lambda _f: GridRoi(),
                     "ROI: every point within the CNN grid (no road restriction), so off-road labelled objects count")]
        for label, roi_of, note in variants:
            it = (rec[i] for i in range(len(rec)))
            res = evaluate_frames(f"kitti ({label}):{kitti}", track(it, total=len(rec), description=f"KITTI, {label}"),
                                  lop, roi_of, min_points=min_points, fov_deg=fov, count_unknown_fp=False)
            res.notes.append(note)
            res.notes.append(f"only detections within +-{fov / 2:g} deg of +x counted (KITTI labels only the camera "
                             "view); UNKNOWN detections never count as false positives (KITTI labels no poles or signs)")
            results.append(res)

    from lidarmt.cli._common import wide_console

    out_console = wide_console()  # piped or logged: do not squeeze the tables
    for res in results:
        t = Table(title=f"{res.name}: {res.frames} frames, {res.detections} detections, {res.seconds:.0f} s")
        for col in ("class", "IoU≥", "GT", "det", "TP", "FP", "FN", "precision", "recall", "found (any class, IoU≥0.1)"):
            t.add_column(col, justify="left" if col == "class" else "right")
        for c in CLASS_ORDER:
            k = res.counts[c]
            t.add_row(c.value, f"{IOU_THRESHOLD[c]:g}", str(k.gt), str(k.det), str(k.tp), str(k.fp), str(k.fn),
                      _fmt(k.precision), _fmt(k.recall), _fmt(k.found_recall))
        out_console.print(t)
        for note in res.notes:
            err_console.print(f"  {note}", highlight=False)
    if out is not None:
        payload = {"weights": cfg.weights or "shipped", "mode": mode, "grid": grid, "min_points": min_points,
                   "results": [r.to_dict() for r in results]}
        atomic_write_text(out, json.dumps(payload, indent=2) + "\n")
        console.print(f"wrote {out}")
