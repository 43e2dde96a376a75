"""``lidarmt evaluate``: per-class precision and recall of the Apollo pipeline on labelled frames."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import console, err_console, show
from lidarmt.cli._options import ForceOutputOption


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _labelled(data: Path, rec):
    from lidarmt.lidar.perception.apollo.evaluate import labelled_frames

    return labelled_frames(data, rec)


def _variants(roi: str, frame, *, data: Path, roi_range: float, map_frame: str, sim_roi=None):
    """``[(label, roi_of, note)]``: the ROIs to evaluate a source's frames in (``--roi``; ``frame`` is its first)."""
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.perception.apollo.evaluate import GridRoi, label_area_roi
    from lidarmt.lidar.roi.query import LabelRoi

    grid = ("whole-grid ROI", lambda _f: GridRoi(),
            "ROI: every point within the CNN grid (no road restriction), so off-road labelled objects count")
    road = ("road-label ROI", lambda f: LabelRoi(range=roi_range).mask(f),
            "ROI: the area covered by the road/parking/sidewalk/other-ground labels (closed morphologically, "
            "LabelRoi, as perceive, roi and fuzz build it)")
    if roi == "auto":
        if sim_roi is not None and sim_roi.kind == "hdmap":  # the map's ROI is the road only: add the sidewalks
            return [("hdmap ROI", sim_roi, sim_roi.describe()),
                    ("road+sidewalk labels ROI", label_area_roi,
                     "ROI: the area covered by the ground-truth road/parking/sidewalk points (closed "
                     "morphologically, LabelRoi): includes sidewalks, where most pedestrians are")]
        fmt = frame.provenance.format if frame.provenance is not None else ""
        if fmt not in ("kitti", "kitti-raw", "semantickitti"):  # the simulator's bags and frames, as before
            return [("labels ROI", label_area_roi,
                     "ROI: the area covered by the frames' road/parking/sidewalk/other-ground ground-truth labels "
                     "(morphologically closed, LabelRoi; the whole grid for frames without them)")]
        if LabelRoi.has_labels(frame):
            return [road, grid]
        return [("whole-grid ROI", lambda _f: GridRoi(),
                 "ROI: every point within the CNN grid: the frames have no road labels (no road_label/, labels/), "
                 "so they are evaluated in their labelled view without a ROI (give --roi MAP for an HD map or a "
                 "GeoJSON)")]
    if roi == "grid":
        return [grid]
    if roi == "labels":
        if not LabelRoi.has_labels(frame):
            raise ArgumentError(f"--roi labels: {data} has no per-point road labels (KITTI road_label/, "
                                "SemanticKITTI labels/); use --roi grid (the labelled view without a ROI) or "
                                "--roi MAP (an HD map, or a GeoJSON drawn in the sensor frame)")
        return [road]
    from lidarmt.lidar.specs import RoiSpec, build_roi_provider

    if not Path(roi).exists():
        from lidarmt.errors import InputError

        raise InputError(f"--roi {roi}: no such file or folder (give auto, labels, grid, or an HD map / GeoJSON)")
    provider = build_roi_provider(RoiSpec(roi, roi_range, map_frame))
    provider.roi_for(frame)  # fails early: unreadable map, no pose, ...
    return [(f"map ROI {Path(roi).name}", provider.roi_for,
             f"ROI: Apollo's HDMap ROI on {roi} (range {roi_range:g} m, map frame {map_frame})")]


def evaluate(
    data: Annotated[Path | None, typer.Option("--data", help="Labelled frames: a simulator dataset folder (held out: "
                                              "generated with a seed not used for training), a bag from `lidarmt "
                                              "simulate --out` (its .labels.npz beside it), a KITTI object folder, a "
                                              "KITTI raw drive with tracklet_labels.xml, or a SemanticKITTI sequence "
                                              "(its instances are the objects).")] = None,
    weights: Annotated[Path | None, typer.Option("--weights", help="CNN weights (default: the shipped ones).")] = None,
    kitti: Annotated[Path | None, typer.Option("--kitti", help="KITTI object folder (velodyne, label_2, calib, "
                                               "road_label optional) to measure recall on real HDL-64E frames; "
                                               "evaluated after --data.")] = None,
    frames: Annotated[int | None, typer.Option("--frames", help="Evaluate at most this many frames of --data.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the results as JSON here.")] = None,
    mode: Annotated[str, typer.Option(help="CNN execution: exact (fp32, deterministic) or fast (bf16 where supported).")] = "exact",
    grid: Annotated[int, typer.Option(help="Feature grid of the model (640 or 512).")] = 640,
    min_points: Annotated[int, typer.Option(help="Ground truth with fewer ROI points than this is ignored.")] = 5,
    roi: Annotated[str, typer.Option("--roi", "--map", help="auto (simulator datasets: their towns' HD maps and "
                                     "the road+sidewalk labels; frames with road labels: those and the whole grid; "
                                     "others: the whole grid), labels (the road-label ROI), grid (no ROI: every "
                                     "point in the CNN grid), or an HD map / GeoJSON (placed by the frames' poses, "
                                     "or drawn in the sensor frame).")] = "auto",
    roi_range: Annotated[float, typer.Option("--roi-range", help="ROI half-size in metres (labels and maps).")] = 70.0,
    map_frame: Annotated[str, typer.Option("--map-frame", help="With --roi MAP: auto, world or sensor.")] = "auto",
    max_range: Annotated[float | None, typer.Option("--max-range", help="Count only ground truth and detections "
                                                    "whose centre is within this many metres of the sensor (e.g. 40).")] = None,
    fov: Annotated[float, typer.Option(help="KITTI frames whose calibration gives no labelled region (no P2): the "
                                       "horizontal field of view counted, degrees ahead.")] = 82.0,
    sut: Annotated[str | None, typer.Option("--sut", help="Apollo preset to evaluate: apollo, apollo-512 or apollo-3.0 "
                                            "(default: apollo, or apollo-512 with --grid 512).")] = None,
    force: ForceOutputOption = False,
) -> None:
    """Per-class precision/recall of the full Apollo pipeline (ROI, CNN, Cluster2D, MinBox).

    One matching rule for every layout: a detection matches a ground-truth box of its class when their rotated
    bird's-eye-view IoU is >= 0.5 (cars) or >= 0.3 (pedestrians, cyclists, unknown); "found" is class-agnostic
    recall at IoU >= 0.1. Box labels (KITTI label_2, tracklets, the simulator's) are used as they are; point
    labels (SemanticKITTI) give one box per instance, fitted to its points. Where the labels cover only part of
    the sweep (KITTI: camera 2's view, from the calibration), ground truth and detections outside that region
    are not counted; the JSON and the printed notes state the region used.

    Examples:

    `lidarmt evaluate --data data/val --kitti ../shared/data/kitti/training --out eval.json`

    `lidarmt evaluate --kitti ../shared/data/kitti/training --roi labels --max-range 40`  (cars within 40 m)

    `lidarmt evaluate --data sequences/08 --frames 20`  (SemanticKITTI: its instances are the objects)

    `lidarmt evaluate --data data/val --weights runs/cnnseg640/cnnseg640.pt --frames 40`
    """
    import json

    from rich.table import Table

    from lidarmt._atomic import atomic_write_text
    from lidarmt._paths import check_writable
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.perception.apollo.evaluate import IOU_THRESHOLD, MATCHING_RULE, SimRoi, evaluate_frames
    from lidarmt.lidar.perception.registry import get_perception
    from lidarmt.types import CLASS_ORDER

    if out is not None:
        check_writable(out, inputs=(data, kitti, weights), force=force)
    if data is None and kitti is None:
        raise ArgumentError("nothing to evaluate: pass --data DIR (labelled frames) and/or --kitti DIR")
    if mode not in ("exact", "fast"):
        raise ArgumentError(f"--mode must be exact or fast, got {mode!r}")
    if frames is not None and frames < 1:  # -1 evaluated nothing and printed "0/-1" and an all-zero table, rc 0
        raise ArgumentError(f"--frames {frames}: give a positive number of frames (or leave it out: all of them)")
    if max_range is not None and not max_range > 0:
        raise ArgumentError(f"--max-range {max_range}: give a positive number of metres")
    if map_frame not in ("auto", "world", "sensor"):
        raise ArgumentError(f"--map-frame must be auto, world or sensor, got {map_frame!r}")
    name = sut or ("apollo" if grid == 640 else "apollo-512")
    if name not in ("apollo", "apollo-640", "apollo-512", "apollo-3.0"):
        raise ArgumentError(f"--sut {name!r}: evaluate measures the Apollo presets apollo, apollo-512, apollo-3.0")
    from lidarmt.cli._common import track
    from lidarmt.io import open_recording

    sources = []  # the data first: a recording without ground truth is refused before the model loads
    for path, limit in ((data, frames), (kitti, None)):
        if path is None:
            continue
        rec = open_recording(path)
        frame_at = _labelled(path, rec)
        n = len(rec) if limit is None else min(limit, len(rec))
        sim_roi = SimRoi(str(path)) if path.is_dir() else None
        kind = sim_roi.kind if sim_roi is not None and sim_roi.kind == "hdmap" else rec.format
        variants = _variants(roi, frame_at(0), data=path, roi_range=roi_range, map_frame=map_frame,
                             sim_roi=sim_roi if roi == "auto" else None)
        sources.append((path, kind, frame_at, n, variants))
    options = {"mode": mode, "grid": grid} if sut is None else {"mode": mode}
    if weights is not None:
        options["weights"] = str(weights)
    lop = get_perception(name, **options)  # the one place a named SUT is built (as fuzz and perceive do)
    results = []
    for path, kind, frame_at, n, variants in sources:
        for label, roi_of, note in variants:
            it = (frame_at(i) for i in range(n))
            res = evaluate_frames(f"{kind} ({label}):{path}", track(it, total=n, description=f"{kind}, {label}"),
                                  lop, roi_of, min_points=min_points, fov_deg=fov, max_range=max_range)
            res.notes.append(note)
            res.notes.append("evaluated area: " + res.area()["description"])
            if not res.area()["unknown_detections_counted"]:
                res.notes.append("UNKNOWN detections never count as false positives (these labels name no poles, "
                                 "signs or walls)")
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
            err_console.print(f"  {show(note)}", highlight=False)
    err_console.print(f"matching: {MATCHING_RULE}", highlight=False)
    if out is not None:
        cfg = getattr(lop, "config", None)
        payload = {"weights": str(weights) if weights else "shipped", "sut": name, "mode": mode,
                   "grid": getattr(cfg, "grid", grid), "min_points": min_points, "max_range_m": max_range,
                   "matching": MATCHING_RULE, "results": [r.to_dict() for r in results]}
        atomic_write_text(out, json.dumps(payload, indent=2) + "\n")
        console.print(f"wrote {out}")
