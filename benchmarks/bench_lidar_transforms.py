"""What every LiDAR transformation does to a real sweep, and how fast: counts and milliseconds per application.

Usage::

    .venv/bin/python benchmarks/bench_lidar_transforms.py [--frame 5] [--repeat 5]

On frame ``--frame`` of the shared KITTI object frames (../shared/data/kitti) when present, else on the
synthetic HDL-64E street sweep (lidarmt.lidar.synthetic). Each transformation runs at its three levels with seeds
0.. ``--repeat``-1 (the first call also warms the numba kernels and is not timed); reported per level: points
dropped, moved (position changed by > 1 cm), otherwise changed (intensity only, or moved by less than 1 cm), added (medians over the seeds), and the
median wall time per application, with the ratio to copying the frame's points once (``np.copy``), measured in
the same run because the machine is shared and noisy. ``insert`` cuts its objects from the KITTI raw drive 0001
(tracklets) when present, else from a synthetic sweep, and places them on the frame's labelled road
(``LabelRoi``). Results go to benchmarks/results/lidar_transforms.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import timed  # noqa: E402
from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.lidar.transforms import LEVELS, TransformContext, list_transforms  # noqa: E402
from lidarmt.lidar.transforms.objects import ObjectLibrary  # noqa: E402
from lidarmt.lidar.transforms.sheet import _moved  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
DRIVE = DATA / "kitti_raw" / "2011_09_26" / "2011_09_26_drive_0001_sync"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frame", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from lidarmt.lidar.synthetic import synthetic_sweep

    if (DATA / "kitti").is_dir():
        from lidarmt.io import open_recording
        from lidarmt.lidar.roi.query import LabelRoi

        with open_recording(str(DATA / "kitti")) as rec:
            frame = rec[args.frame]
        roi = LabelRoi().mask(frame)
        where = f"KITTI object frame {args.frame}"
    else:
        frame, roi, where = synthetic_sweep(n_azimuth=2083), None, "synthetic street sweep"
    lib = (ObjectLibrary.from_recording(str(DRIVE), every=10) if DRIVE.is_dir()
           else ObjectLibrary.from_frames([synthetic_sweep(seed=1, n_azimuth=2083)], min_points=20))
    ctx = TransformContext(roi=roi, library=lib)
    copy_wall, _ = timed(lambda: np.copy(frame.points), 20)
    copy_ms = 1e3 * statistics.median(copy_wall)
    rows = []
    print(f"{where}: {len(frame.points)} points; object library: {len(lib)} objects; copy {copy_ms:.3f} ms")
    print(f"{'transformation':16s} {'level':9s} {'dropped':>8s} {'moved':>8s} {'intens.':>8s} {'added':>7s} "
          f"{'ms':>8s} {'x copy':>8s}")
    from lidarmt.lidar.transforms.misalignment import camera_problem

    for t in list_transforms():
        why = camera_problem(t, frame)  # a misalignment needs the frame's camera (temporal: a stream)
        if why:
            print(f"skipped {why}")
            continue
        for level in LEVELS:
            t.apply(frame, level, seed=0, context=ctx)  # warm-up (kernels, tables)
            counts = []
            walls = []
            for seed in range(args.repeat):
                box = {}

                def run(seed=seed, box=box, t=t, level=level):
                    box["c"] = t.apply(frame, level, seed=seed, context=ctx)

                w, _ = timed(run, 1)
                walls += w
                c = box["c"]
                moved = int(np.count_nonzero(_moved(frame, c)))
                counts.append((len(c.dropped), moved, c.n_modified - moved, c.n_added))
            med = [int(statistics.median(x)) for x in zip(*counts, strict=True)]
            ms = 1e3 * statistics.median(walls)
            rows.append({"transform": t.name, "family": t.family, "level": level, "params": t.levels[level],
                         "dropped": med[0], "moved": med[1], "intensity_only": med[2], "added": med[3],
                         "ms": round(ms, 2), "ratio_to_copy": round(ms / copy_ms, 1)})
            print(f"{t.name:16s} {level:9s} {med[0]:8d} {med[1]:8d} {med[2]:8d} {med[3]:7d} {ms:8.1f} "
                  f"{ms / copy_ms:8.0f}")
    out = ROOT / "benchmarks" / "results" / "lidar_transforms.json"
    out.write_text(json.dumps(with_machine({"frame": where, "points": len(frame.points), "library_objects": len(lib),
                               "repeat": args.repeat, "copy_ms": round(copy_ms, 3), "rows": rows,
                               "machine": platform.machine(), "python": platform.python_version(),
                               "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}), indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
