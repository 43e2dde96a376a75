"""The numbers of the LiDAR CNN's model card (lidarmt/lidar/perception/apollo/weights/MODEL_CARD.md), one command each.

    python scripts/lidar_metrics.py report SET GRID WEIGHTS [key=value ...]   # issue 32's evaluation (below)
    python scripts/lidar_metrics.py pool NAME FILE.json FILE.json ...         # pool reports (leave-one-out folds;
                                                                              # ONLY_GROUPS=09,10: only those groups)
    python scripts/lidar_metrics.py ioubound SET                              # what limits the IoU rule (no CNN)
    python scripts/lidar_metrics.py table FILE.json ...                       # the model card's Markdown rows
    python scripts/lidar_metrics.py kitti40 GRID WEIGHTS [key=value ...]      # v3's test: 7 KITTI frames, road ROI
    python scripts/lidar_metrics.py drive GRID WEIGHTS [key=value ...]        # v3's validation: drive sweeps 86-107
    python scripts/lidar_metrics.py sim GRID WEIGHTS [key=value ...]          # held-out simulated frames

``report`` (issue 32) runs the pipeline once per frame and scores every detection by **two rules**:

* ``iou``: ``lidarmt evaluate``'s rule (:mod:`lidarmt.lidar.perception.apollo.evaluate`): rotated BEV IoU of
  MinBox's rectangle with the label box >= 0.5 (cars), >= 0.3 (pedestrians, cyclists), greedy by score.
* ``centre``: a detection counts when its centre (MinBox's) lies inside a labelled box of its class grown by
  0.5 m on every side (:func:`~lidarmt.lidar.perception.apollo.evaluate.centre_matrix`), greedy by score.

Ground truth with fewer than 5 points, or whose centre is outside the evaluated area, is ignored (a detection on
it is neither true nor false); UNKNOWN detections never count on real data. SET is one of:

* ``kitti``: the 7 KITTI object frames (env KITTI, default ``../shared/data/kitti/training``), camera 2's view
  (from the calibration), within 40 m, no road ROI (the whole grid). Groups: frames (7 scenes).
* ``drive``: KITTI raw drive 0001 (env DRIVE) sweeps 86-107 (env DRIVE_FRAMES), never trained on; tracklets,
  camera 2's view, 40 m, whole grid. One group (22 sweeps, 0.1 s apart, one street).
* ``sk:01,02,...``: SemanticKITTI sequences (env SK, default ``../shared/data/semantickitti/sequences``), the
  whole sweep, within 40 m, whole grid; boxes fitted to each instance's visible points (as MinBox's are).
  Groups: sequences.
* ``sim``: simulated frames (env SIM, default runs/data/sim_val; first SIM_FRAMES, default 24), Apollo's HD-map
  ROI, 60 m. Groups: towns.

Intervals (95 %): **Wilson** on the pooled counts (treats boxes and detections as independent) and a **cluster
bootstrap** over the groups (2000 resamples, seed 0: whole frames / sequences drawn with replacement), which
widens the interval when errors cluster. Both are printed; the bootstrap is the one to trust for SemanticKITTI
(errors cluster by street). BEV AP (:func:`lidarmt.lidar.ap.interpolated_ap`, AP|R40 and AP|R11) of each class
under each rule (the centre rule as a 0/1 overlap matrix). The pooled table and every frame's counts and
matrices go to ``$OUT`` (default ``runs/metrics/<set>_<grid>_<weights>.json``), so ``pool`` can combine reports
(leave-one-sequence-out: each fold's network on its own held-out sequence).

``weights`` may be a path or a shipped name (``sim``, ``default``, ``v3``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

from lidarmt.io import open_recording
from lidarmt.lidar.perception.apollo.config import ApolloConfig
from lidarmt.lidar.perception.apollo.evaluate import GridRoi, SimRoi, evaluate_frames, kitti_roi
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
from lidarmt.types import ObstacleClass

RADIUS = 40.0
CLASSES = (ObstacleClass.CAR, ObstacleClass.PEDESTRIAN, ObstacleClass.CYCLIST)
RULES = ("iou", "centre")


class Within:
    """A ROI cut to a disk of RADIUS metres around the sensor."""

    empty = False

    def __init__(self, roi):
        self.roi = roi

    def contains(self, xy):
        if getattr(xy, "dtype", None) is not None and xy.dtype.names:
            a = np.c_[xy["x"], xy["y"]].astype(np.float64)
        else:
            a = np.asarray(xy, dtype=np.float64)[:, :2]
        return self.roi.contains(xy) & (np.hypot(a[:, 0], a[:, 1]) < RADIUS)

    def indices(self, frame):
        idx = np.asarray(self.roi.indices(frame), dtype=np.int64)
        p = frame.points[idx]
        return idx[np.hypot(p["x"], p["y"]) < RADIUS]


# ------------------------------------------------------------------------------------------ issue 32's report


def _frames(set_name):
    """(description, [(group, frame)], roi_of, max_range)."""
    if set_name == "kitti":
        src = os.environ.get("KITTI", "../shared/data/kitti/training")
        with open_recording(src) as rec:
            frames = [(f"{rec[i].provenance.detail or i}", rec[i]) for i in range(len(rec))]
        return (f"{src}: camera 2's view, {RADIUS:g} m, whole grid", frames, lambda f: GridRoi(), RADIUS)
    if set_name == "drive":
        src = os.environ.get("DRIVE", "../shared/data/kitti_raw/2011_09_26/2011_09_26_drive_0001_sync")
        a, b = (int(v) for v in os.environ.get("DRIVE_FRAMES", "86:108").split(":"))
        with open_recording(src) as rec:
            frames = [("drive0001", rec[i]) for i in range(a, min(b, len(rec)))]
        return (f"{src}@{a}:{b}: camera 2's view, {RADIUS:g} m, whole grid", frames, lambda f: GridRoi(), RADIUS)
    if set_name.startswith("sk:"):
        root = Path(os.environ.get("SK", "../shared/data/semantickitti/sequences"))
        frames = []
        for seq in set_name[3:].split(","):
            with open_recording(root / seq) as rec:
                frames += [(seq, rec[i]) for i in range(len(rec))]
        return (f"{root}/{{{set_name[3:]}}}: whole sweep, {RADIUS:g} m, whole grid", frames, lambda f: GridRoi(),
                RADIUS)
    if set_name == "sim":
        src = os.environ.get("SIM", "runs/data/sim_val")
        n = int(os.environ.get("SIM_FRAMES", "24"))
        sim_roi = SimRoi(src)
        with open_recording(src) as rec:
            frames = [(f"town{sim_roi.town_of(rec[i].index)}", rec[i]) for i in range(min(n, len(rec)))]
        return (f"{src}: HD-map ROI, 60 m", frames, sim_roi, None)
    raise SystemExit(f"unknown set {set_name!r}: kitti, drive, sk:SEQ,SEQ,... or sim")


def _frame_record(group, frame, obstacles, roi, max_range):
    from lidarmt.lidar.perception.apollo.evaluate import (
        centre_matrix,
        evaluated_fov,
        frame_detections,
        frame_ground_truth,
        iou_matrix,
        match_frame,
    )

    fov = evaluated_fov(frame, 82.0)
    gts = frame_ground_truth(frame, roi, fov_deg=fov, max_range=max_range)
    dets = frame_detections(frame, obstacles, fov_deg=fov, max_range=max_range, count_unknown_fp=False)
    mats = {"iou": iou_matrix(dets, gts), "centre": centre_matrix(dets, gts)}
    rec = {"group": group, "frame": f"{frame.provenance.detail or frame.index}" if frame.provenance else None,
           "rules": {}}
    for rule, m in mats.items():
        thr = None if rule == "iou" else {c: 0.5 for c in ObstacleClass}
        counts = match_frame(gts, dets, iou=m, thresholds=thr)
        per_class = {}
        for c in CLASSES:
            di = [i for i, d in enumerate(dets) if d[1] == c]
            gj = [j for j, g in enumerate(gts) if g.cls == c]
            per_class[c.value] = {
                **{k: getattr(counts[c], k) for k in ("tp", "fp", "fn", "found")},
                "ap": {"iou": m[np.ix_(di, gj)].round(4).tolist(), "scores": [round(dets[i][2], 5) for i in di],
                       "det_ignored": [not dets[i][3] for i in di], "gt_ignored": [gts[j].ignored for j in gj],
                       "n_gt": len(gj)},
            }
        rec["rules"][rule] = per_class
    return rec


def _pooled(records):
    """Pooled counts, intervals and AP of every rule and class over per-frame records."""
    from lidarmt.lidar.ap import FrameScores, interpolated_ap
    from lidarmt.lidar.perception.apollo.evaluate import cluster_bootstrap, wilson_interval

    groups = sorted({r["group"] for r in records})
    out = {"frames": len(records), "groups": groups, "rules": {}}
    for rule in RULES:
        out["rules"][rule] = {}
        for c in CLASSES:
            rows = [r["rules"][rule][c.value] for r in records]
            tp, fp, fn, found = (sum(x[k] for x in rows) for k in ("tp", "fp", "fn", "found"))
            per_group = {}
            for g in groups:
                gr = [r["rules"][rule][c.value] for r in records if r["group"] == g]
                per_group[g] = {k: sum(x[k] for x in gr) for k in ("tp", "fp", "fn", "found")}
            g_tp = np.array([per_group[g]["tp"] for g in groups])
            g_gt = np.array([per_group[g]["tp"] + per_group[g]["fn"] for g in groups])
            g_det = np.array([per_group[g]["tp"] + per_group[g]["fp"] for g in groups])
            thr = 0.5 if rule == "centre" or c == ObstacleClass.CAR else 0.3
            fs = []
            for x in rows:
                a = x["ap"]
                n_det, n_gt = len(a["scores"]), a["n_gt"]
                fs.append(FrameScores(np.asarray(a["iou"], dtype=np.float64).reshape(n_det, n_gt),
                                      np.asarray(a["scores"], dtype=np.float64),
                                      np.asarray(a["gt_ignored"], dtype=bool), np.asarray(a["det_ignored"], dtype=bool)))
            ap = interpolated_ap(fs, thr)
            gt, det = tp + fn, tp + fp

            def rnd(v):
                return None if v is None else [round(v[0], 4), round(v[1], 4)]

            out["rules"][rule][c.value] = {
                "gt": gt, "det": det, "tp": tp, "fp": fp, "fn": fn, "found": found,
                "precision": round(tp / det, 4) if det else None, "recall": round(tp / gt, 4) if gt else None,
                "found_recall": round(found / gt, 4) if gt else None,
                "precision_wilson95": rnd(wilson_interval(tp, det)), "recall_wilson95": rnd(wilson_interval(tp, gt)),
                "precision_bootstrap95": rnd(cluster_bootstrap(g_tp, g_det)),
                "recall_bootstrap95": rnd(cluster_bootstrap(g_tp, g_gt)),
                "ap_r40": round(ap.ap_r40, 2), "ap_r11": round(ap.ap_r11, 2), "ap_match": thr,
                "per_group": per_group,
            }
    return out


def _print(title, pooled):
    def f(v):
        return "–" if v is None else f"{v:.3f}"

    def ci(v):
        return "–" if v is None else f"[{v[0]:.2f}, {v[1]:.2f}]"

    print(title)
    print(f"{'rule':<7}{'class':<11}{'GT':>5}{'det':>5}{'TP':>5}{'FP':>5}{'P':>7}{'P Wilson95':>15}{'P boot95':>15}"
          f"{'R':>7}{'R Wilson95':>15}{'R boot95':>15}{'found':>7}{'AP|R40':>8}")
    for rule in RULES:
        for c in CLASSES:
            d = pooled["rules"][rule][c.value]
            print(f"{rule:<7}{c.value:<11}{d['gt']:>5}{d['det']:>5}{d['tp']:>5}{d['fp']:>5}{f(d['precision']):>7}"
                  f"{ci(d['precision_wilson95']):>15}{ci(d['precision_bootstrap95']):>15}{f(d['recall']):>7}"
                  f"{ci(d['recall_wilson95']):>15}{ci(d['recall_bootstrap95']):>15}{f(d['found_recall']):>7}"
                  f"{d['ap_r40']:>8.1f}")
    car = pooled["rules"]["centre"]["car"]["per_group"]
    if len(car) > 1:
        print("cars by group (centre rule / IoU rule: TP/GT, FP):")
        iou = pooled["rules"]["iou"]["car"]["per_group"]
        print("  " + "; ".join(f"{g}: {v['tp']}/{v['tp'] + v['fn']}, {v['fp']} / {iou[g]['tp']}/"
                               f"{iou[g]['tp'] + iou[g]['fn']}, {iou[g]['fp']}" for g, v in car.items()))


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_")[-60:]


def report(argv):
    set_name, grid, weights, *sets = argv
    cfg = ApolloConfig(grid=int(grid), weights=weights).with_overrides(sets)
    lop = ApolloLOP(cfg)
    desc, frames, roi_of, max_range = _frames(set_name)
    records = []
    for group, frame in frames:
        roi = roi_of(frame)
        obstacles = lop.detect(frame, roi)
        records.append(_frame_record(group, frame, obstacles, roi, max_range))
    pooled = _pooled(records)
    import hashlib

    wpath = cfg.weights_path()
    digest = hashlib.sha256(Path(wpath).read_bytes()).hexdigest()
    doc = {"set": set_name, "description": desc, "grid": int(grid), "weights": weights, "weights_sha256": digest,
           "sets": sets, "command": "python scripts/lidar_metrics.py report " + " ".join(argv),
           "pooled": pooled, "records": records}
    out = os.environ.get("OUT") or os.path.join(os.environ.get("RUNS", "runs"), "metrics",
                                                f"{_slug(set_name)}_{grid}_{_slug(weights)}{'_' + _slug('_'.join(sets)) if sets else ''}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    Path(out).write_text(json.dumps(doc) + "\n", encoding="utf-8")
    _print(f"{set_name} · {desc} · grid {grid} · {weights} {' '.join(sets)} · {len(records)} frames -> {out}", pooled)


def pool(argv):
    name, *files = argv
    # ONLY_GROUPS=09,10: only those groups (not GROUPS: bash has its own)
    keep = set(os.environ["ONLY_GROUPS"].split(",")) if os.environ.get("ONLY_GROUPS") else None
    records = []
    for f in files:
        d = json.loads(Path(f).read_text(encoding="utf-8"))
        records += [r for r in d["records"] if keep is None or r["group"] in keep]
    pooled = _pooled(records)
    out = os.environ.get("OUT") or os.path.join(os.environ.get("RUNS", "runs"), "metrics", f"pool_{_slug(name)}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    Path(out).write_text(json.dumps({"name": name, "files": files, "command": "python scripts/lidar_metrics.py pool "
                                     + " ".join(argv), "pooled": pooled, "records": records}) + "\n", encoding="utf-8")
    _print(f"pooled {name}: {len(files)} reports, {len(records)} frames -> {out}", pooled)


def table(argv):
    """Markdown rows (one per report and rule) of the cars, with the pedestrian and cyclist counts: the model
    card's tables. ``argv``: report or pool JSON files."""
    def ci(v):
        return "–" if v is None else f"[{v[0]:.2f}, {v[1]:.2f}]"

    def f(v):
        return "–" if v is None else f"{v:.2f}"

    print("| report | rule | car GT | det | TP | FP | precision (Wilson; bootstrap) | recall (Wilson; bootstrap) | "
          "AP\\|R40 | ped TP/GT, FP | cyc TP/GT, FP |")
    print("|---|---|---:|---:|---:|---:|---|---|---:|---|---|")
    for fn in argv:
        d = json.loads(Path(fn).read_text(encoding="utf-8"))
        name = d.get("name") or f"{d['set']} {d['grid']} {d['weights']}"
        for rule in RULES:
            c = d["pooled"]["rules"][rule]["car"]
            p = d["pooled"]["rules"][rule]["pedestrian"]
            y = d["pooled"]["rules"][rule]["cyclist"]
            print(f"| {name} | {rule} | {c['gt']} | {c['det']} | {c['tp']} | {c['fp']} | **{f(c['precision'])}** "
                  f"{ci(c['precision_wilson95'])}; {ci(c['precision_bootstrap95'])} | **{f(c['recall'])}** "
                  f"{ci(c['recall_wilson95'])}; {ci(c['recall_bootstrap95'])} | {c['ap_r40']:.1f} | "
                  f"{p['tp']}/{p['gt']}, {p['fp']} | {y['tp']}/{y['gt']}, {y['fp']} |")


def iou_bound(argv):
    """What limits the IoU rule: for every counted labelled car of SET, MinBox (Apollo's, lidarmt's port) fitted to
    the car's own points (perfect segmentation: the points inside its label box, or its instance's points) against
    the label box. The share of cars at IoU >= 0.5 is the recall the IoU rule allows a perfect CNN."""
    from shapely.geometry import Polygon

    from lidarmt.lidar.perception.apollo.evaluate import (
        _in_box,
        bev_iou,
        box_polygon,
        evaluated_fov,
        frame_ground_truth,
        rect_corners,
    )
    from lidarmt.lidar.perception.apollo.minbox import build_box

    (set_name,) = argv
    desc, frames, roi_of, max_range = _frames(set_name)
    rows = []
    for group, frame in frames:
        roi = roi_of(frame)
        gts = frame_ground_truth(frame, roi, fov_deg=evaluated_fov(frame, 82.0), max_range=max_range)
        lb = frame.labels
        for b, g in zip(lb.boxes, gts, strict=True):
            if g.ignored or g.cls != ObstacleClass.CAR:
                continue
            if lb.point_instance is not None and int(b["instance"]) >= 0:
                members = lb.point_instance == b["instance"]
            else:
                members = _in_box(frame.points, b)
            p = frame.points[members]
            xyz = np.c_[p["x"], p["y"], p["z"]].astype(np.float32)
            mb = build_box(xyz)
            yaw = float(np.arctan2(mb.direction[1], mb.direction[0]))
            poly = Polygon(rect_corners(float(mb.center[0]), float(mb.center[1]), max(mb.length, 1e-3),
                                        max(mb.width, 1e-3), yaw))
            rows.append({"group": group, "points": int(len(p)), "distance": round(float(np.hypot(b["cx"], b["cy"])), 1),
                         "label_lw": [round(float(b["length"]), 2), round(float(b["width"]), 2)],
                         "minbox_lw": [round(float(mb.length), 2), round(float(mb.width), 2)],
                         "iou": round(bev_iou(poly, box_polygon(b)), 3)})
    ious = np.array([r["iou"] for r in rows])
    n = len(ious)
    ok = int((ious >= 0.5).sum())
    print(f"{set_name} · {desc}: {n} labelled cars; MinBox of each car's own points vs its label box: "
          f"IoU >= 0.5 for {ok} ({ok / max(n, 1):.2f}), median IoU {np.median(ious) if n else float('nan'):.2f}")
    for r in rows:
        print(f"  {r['group']}: {r['points']:5d} pts at {r['distance']:5.1f} m, label {r['label_lw']}, "
              f"MinBox {r['minbox_lw']}, IoU {r['iou']:.2f}")
    out = os.environ.get("OUT") or os.path.join(os.environ.get("RUNS", "runs"), "metrics", f"ioubound_{_slug(set_name)}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    Path(out).write_text(json.dumps({"set": set_name, "description": desc, "cars": n, "iou_ge_0.5": ok,
                                     "rows": rows}) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------ v3's measurements


def main(argv: list[str]) -> None:
    if argv and argv[0] == "report":
        return report(argv[1:])
    if argv and argv[0] == "pool":
        return pool(argv[1:])
    if argv and argv[0] == "table":
        return table(argv[1:])
    if argv and argv[0] == "ioubound":
        return iou_bound(argv[1:])
    if len(argv) < 3:
        print("usage: python scripts/lidar_metrics.py report SET GRID WEIGHTS [key=value ...] | pool NAME "
              "FILE.json ... | table FILE.json ... | ioubound SET | kitti40|drive|sim GRID WEIGHTS "
              "[key=value ...] (the module docstring says what each measures)", file=sys.stderr)
        raise SystemExit(2)
    what, grid, weights, *sets = argv
    cfg = ApolloConfig(grid=int(grid), weights=weights).with_overrides(sets)
    lop = ApolloLOP(cfg)
    if what == "kitti40":
        src = os.environ.get("KITTI", "../shared/data/kitti/training")
        with open_recording(src) as rec:
            res = evaluate_frames("kitti40", list(rec), lop, lambda f: Within(kitti_roi(f)), fov_deg=82.0,
                                  count_unknown_fp=False)
    elif what == "drive":
        src = os.environ.get("DRIVE", "../shared/data/kitti_raw/2011_09_26/2011_09_26_drive_0001_sync")
        a, b = (int(v) for v in os.environ.get("DRIVE_FRAMES", "86:108").split(":"))
        with open_recording(src) as rec:
            frames = [rec[i] for i in range(a, min(b, len(rec)))]
        grid_roi = GridRoi()
        res = evaluate_frames("drive", frames, lop, lambda f: Within(grid_roi), count_unknown_fp=False)
        src = f"{src}@{a}:{b}"
    elif what == "sim":
        src = os.environ.get("SIM", "runs/data/sim_val")
        n = int(os.environ.get("SIM_FRAMES", "24"))
        sim_roi = SimRoi(src)
        with open_recording(src) as rec:
            frames = [rec[i] for i in range(min(n, len(rec)))]
        res = evaluate_frames("sim", frames, lop, sim_roi)
    else:
        raise SystemExit(f"unknown measurement {what!r}: report, pool, kitti40, drive or sim")
    counts = {c.value: res.counts[c].to_dict() for c in res.counts}
    line = {"what": what, "source": src, "grid": int(grid), "weights": weights, "sets": sets,
            "frames": res.frames, "detections": res.detections, "classes": counts}
    print(f"{what} · {src} · grid {grid} · {weights} {' '.join(sets)} · {res.frames} frames, "
          f"{res.detections} detections")
    print(f"{'class':<11}{'GT':>5}{'det':>6}{'TP':>5}{'FP':>5}{'P':>8}{'R':>8}{'found':>8}")

    def f(v):
        return "–" if v is None else f"{v:.3f}"

    for c in CLASSES:
        d = counts.get(c.value)
        if d is None:
            continue
        print(f"{c.value:<11}{d['gt']:>5}{d['det']:>6}{d['tp']:>5}{d['fp']:>5}{f(d['precision']):>8}"
              f"{f(d['recall']):>8}{f(d['found_recall']):>8}")
    out = os.path.join(os.environ.get("RUNS", "runs"), "metrics.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
