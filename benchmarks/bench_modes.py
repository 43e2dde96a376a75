"""Do Apollo's ``exact`` (fp32) and ``fast`` (bf16) modes report the same obstacles on a recording?

For every frame of a recording (default: the demo, built by ``lidarmt.lidar.sim.ensure_demo``) with its HD-map ROI, the
pipeline runs in both modes; per frame we compare the obstacle counts (overall and per class) and, with the
fuzzer's own oracle (``lidarmt.lidar.mr1.oracle.judge``: same class and shared-point Jaccard >= 0.5, else BEV IoU),
how many exact-mode obstacles have no fast-mode counterpart and vice versa. Also the time per frame of each mode,
so the speed-up is a ratio from one run.

    .venv/bin/python benchmarks/bench_modes.py [--bag bags/demo.bag --map hdmaps/demo] [--frames 30]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.io import open_recording
from lidarmt.lidar.mr1.oracle import judge
from lidarmt.lidar.perception.registry import get_perception
from lidarmt.lidar.roi import HDMapRoi, load_map

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bag", type=Path, default=None)
    ap.add_argument("--map", type=Path, default=None)
    ap.add_argument("--frames", type=int, default=None, help="first N frames (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "modes.json")
    args = ap.parse_args()
    if args.bag is None:
        from lidarmt.lidar.sim import ensure_demo

        ensure_demo()
        args.bag, args.map = ROOT / "bags" / "demo.bag", ROOT / "hdmaps" / "demo"
    roi_of = HDMapRoi(load_map(args.map))
    exact, fast = get_perception("apollo", mode="exact"), get_perception("apollo", mode="fast")
    rows = []
    with open_recording(args.bag) as rec:
        n = len(rec) if args.frames is None else min(args.frames, len(rec))
        for i in range(n):
            frame = rec[i]
            roi = roi_of.mask(frame.pose)
            if i == 0:  # warm-up: numba kernels and oneDNN primitives are built on the first call
                exact.detect(frame, roi)
                fast.detect(frame, roi)
            t0 = time.perf_counter()
            oe = exact.detect(frame, roi)
            t1 = time.perf_counter()
            of = fast.detect(frame, roi)
            t2 = time.perf_counter()
            ve, vf = judge(oe, of), judge(of, oe)
            rows.append({
                "frame": i,
                "exact": len(oe), "fast": len(of),
                "classes_equal": oe.counts() == of.counts(),
                "exact_unmatched": len(ve.missing), "fast_unmatched": len(vf.missing),
                "exact_s": t1 - t0, "fast_s": t2 - t1,
            })
    ex, fa = np.array([r["exact"] for r in rows]), np.array([r["fast"] for r in rows])
    summary = {
        "recording": str(args.bag), "map": str(args.map), "frames": len(rows),
        "count_equal_frames": int((ex == fa).sum()),
        "class_counts_equal_frames": int(sum(r["classes_equal"] for r in rows)),
        "mean_abs_count_difference": float(np.abs(ex - fa).mean()),
        "obstacles_exact": int(ex.sum()), "obstacles_fast": int(fa.sum()),
        "exact_obstacles_without_fast_match": int(sum(r["exact_unmatched"] for r in rows)),
        "fast_obstacles_without_exact_match": int(sum(r["fast_unmatched"] for r in rows)),
        "median_s": {"exact": float(np.median([r["exact_s"] for r in rows])),
                     "fast": float(np.median([r["fast_s"] for r in rows]))},
        "per_frame": rows,
    }
    s = summary
    print(f"# {s['frames']} frames of {s['recording']} with the HD-map ROI of {s['map']}")
    print(f"obstacle counts equal in {s['count_equal_frames']}/{s['frames']} frames "
          f"(per class: {s['class_counts_equal_frames']}/{s['frames']}); mean |difference| "
          f"{s['mean_abs_count_difference']:.2f} of {ex.mean():.1f} obstacles per frame")
    print(f"obstacles: exact {s['obstacles_exact']}, fast {s['obstacles_fast']}; without a counterpart in the "
          f"other mode (fuzzer's matching rule): exact {s['exact_obstacles_without_fast_match']}, "
          f"fast {s['fast_obstacles_without_exact_match']}")
    print(f"median time per frame: exact {s['median_s']['exact'] * 1e3:.0f} ms, fast "
          f"{s['median_s']['fast'] * 1e3:.0f} ms (speed-up {s['median_s']['exact'] / s['median_s']['fast']:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(summary), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
