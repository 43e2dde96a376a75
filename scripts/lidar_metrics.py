"""The numbers of the LiDAR CNN's model card (lidarmt/lidar/perception/apollo/weights/MODEL_CARD.md), one command each.

    python scripts/lidar_metrics.py kitti40 GRID WEIGHTS [key=value ...]   # the TEST: 7 KITTI object frames
    python scripts/lidar_metrics.py drive GRID WEIGHTS [key=value ...]     # VALIDATION: drive 0001 sweeps 86-107
    python scripts/lidar_metrics.py sim GRID WEIGHTS [key=value ...]       # held-out simulated frames

* ``kitti40``: ``../shared/data/kitti/training`` (env KITTI), cars/pedestrians/cyclists within 40 m of the sensor
  in the road-label ROI (``kitti_roi``: the area the road/parking/sidewalk labels cover, cut to a 40 m disk)
  and in camera 2's view (the frames' labelled region, else +-41 deg of +x). UNKNOWN detections never count.
* ``drive``: the KITTI raw drive 2011_09_26_drive_0001 (env DRIVE) sweeps ``86..107`` (env DRIVE_FRAMES,
  ``A:B``), the sweeps training leaves out (it uses 0..85): tracklet labels, camera 2's view, 40 m, no ROI
  (whole grid: a raw drive has no road labels). Sweeps 0.1 s apart: a validation, not an independent test.
* ``sim``: the simulated frames of env SIM (default runs/data/sim_val, ``lidarmt simulate --dataset ... --seed 2``:
  towns never trained on), first SIM_FRAMES (default 24), with Apollo's HD-map ROI on each town's map, 60 m.

``weights`` may be a path or a shipped name (``sim``, ``default``). Each run prints a table and appends one
JSON line to ``$RUNS/metrics.jsonl`` (RUNS default runs). Matching: ``lidarmt.lidar.perception.apollo.evaluate``
(IoU >= 0.5 cars, 0.3 others; *found* = any class at IoU >= 0.1; ground truth needs 5 ROI points).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from lidarmt.io import open_recording
from lidarmt.lidar.perception.apollo.config import ApolloConfig
from lidarmt.lidar.perception.apollo.evaluate import GridRoi, SimRoi, evaluate_frames, kitti_roi
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
from lidarmt.types import ObstacleClass

RADIUS = 40.0
CLASSES = (ObstacleClass.CAR, ObstacleClass.PEDESTRIAN, ObstacleClass.CYCLIST)


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


def main(argv: list[str]) -> None:
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
        raise SystemExit(f"unknown measurement {what!r}: kitti40, drive or sim")
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
