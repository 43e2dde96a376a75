"""Speed of every image transformation: milliseconds per 320x240 RGB frame (median of repeats).

Usage::

    .venv/bin/python benchmarks/bench_camera_transforms.py [--repeat 30] [--frame PATH] [--transforms all]
        [--threads N]

The frame is a real Udacity frame from ../shared/data/udacity (320x240) when present, else a synthetic road
picture of the same size. Each transformation runs once to warm up (imports, tables), then ``--repeat``
times at the heaviest setting of its grid (intensity 1 for weather, the last Table 4 setting for the simple
ones) with seeds 0, 1, 2, ... (weather styles differ per seed, as in a campaign); the median, best and
90th-percentile wall times are reported, with the process CPU time per call (OpenCV may use a second thread
for some filters), for the reference implementation and for the batched one campaigns use
(:mod:`lidarmt.camera.transforms.batched`, ``batched_*`` fields; ``speedup``: reference median over batched
median). Results go to benchmarks/results/camera_transforms.json, with the machine (its ISA).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.camera.transforms import select  # noqa: E402

DEFAULT_FRAME = ROOT.parent / "shared" / "data" / "udacity" / "center" / "1479425441182877835.jpg"


def load_frame(path: Path) -> tuple[np.ndarray, str]:
    import cv2

    if path.is_file():
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is not None:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            if rgb.shape[:2] != (240, 320):
                rgb = cv2.resize(rgb, (320, 240), interpolation=cv2.INTER_AREA)
            return np.ascontiguousarray(rgb), str(path.name)
    rng = np.random.default_rng(0)
    img = np.zeros((240, 320, 3), np.uint8)
    img[:130] = (120, 160, 220)
    img[130:] = (95, 95, 100)
    img = np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)
    return img, "synthetic"


def main() -> None:
    import cv2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--frame", type=Path, default=DEFAULT_FRAME)
    ap.add_argument("--transforms", default="all")
    ap.add_argument("--threads", type=int, default=-1,
                    help="cv2.setNumThreads(N) before measuring (default: leave OpenCV's own setting)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "camera_transforms.json")
    args = ap.parse_args()

    if args.threads >= 0:
        cv2.setNumThreads(args.threads)
    image, frame_name = load_frame(args.frame)
    load = os.getloadavg()
    rows = []
    from lidarmt.camera.transforms.batched import BATCHED, apply_window

    def timed(run) -> dict:
        run(0)  # warm-up (imports, tables, numba kernels)
        wall, cpu = [], []
        for k in range(args.repeat):
            c = time.process_time()
            s = time.perf_counter()
            run(k)
            wall.append(time.perf_counter() - s)
            cpu.append(time.process_time() - c)
        wall.sort()
        return {"median_ms": round(1e3 * statistics.median(wall), 3), "best_ms": round(1e3 * wall[0], 3),
                "p90_ms": round(1e3 * wall[min(len(wall) - 1, int(0.9 * len(wall)))], 3),
                "cpu_ms_median": round(1e3 * statistics.median(cpu), 3)}

    for t in select(args.transforms):
        params = t.grid[-1]
        ref = timed(lambda k, t=t, params=params: t.apply(image, params, k))
        fast = timed(lambda k, t=t, params=params: apply_window(t, image[None], params, k, BATCHED))
        rows.append({"transform": t.name, "family": t.family, "setting": t.label(params), **ref,
                     **{f"batched_{k}": v for k, v in fast.items()},
                     "speedup": round(ref["median_ms"] / max(fast["median_ms"], 1e-6), 2)})
        r = rows[-1]
        print(f"{r['transform']:12s} {r['median_ms']:8.2f} ms  (best {r['best_ms']:.2f}, "
              f"p90 {r['p90_ms']:.2f}, CPU {r['cpu_ms_median']:.2f}); {BATCHED} {r['batched_median_ms']:.2f} ms  "
              f"{r['setting']}", flush=True)

    print()
    print(f"{'transform':12s} {'family':8s} {'median ms':>10s} {'best ms':>8s} {'p90 ms':>8s} {'CPU ms':>8s} "
          f"{BATCHED + ' ms':>15s} {'speed-up':>9s}")
    for r in rows:
        print(f"{r['transform']:12s} {r['family']:8s} {r['median_ms']:10.2f} {r['best_ms']:8.2f} "
              f"{r['p90_ms']:8.2f} {r['cpu_ms_median']:8.2f} {r['batched_median_ms']:15.2f} {r['speedup']:8.1f}x")
    over = [r["transform"] for r in rows if r["median_ms"] > 10.0]
    print(f"over 10 ms per frame (median): {', '.join(over) if over else 'none'}")
    print(f"frame {frame_name} {image.shape[1]}x{image.shape[0]}; load average at start: "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; OpenCV {cv2.__version__} "
          f"with {cv2.getNumThreads()} threads")
    result = {
        "benchmark": "camera_transforms",
        "command": " ".join(["benchmarks/bench_camera_transforms.py", *sys.argv[1:]]),
        "frame": frame_name,
        "image_size": [image.shape[1], image.shape[0]],
        "repeat": args.repeat,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(),
                    "numpy": np.__version__, "opencv": cv2.__version__, "opencv_threads": cv2.getNumThreads(),
                    "loadavg_at_start": [round(v, 2) for v in load]},
        "transforms": rows,
        "over_10_ms": over,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(result), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
