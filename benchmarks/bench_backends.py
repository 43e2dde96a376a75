"""Overhead per verdict of campaign workers as Ray actors (``--backend ray``) against the local worker pool.

The same campaign runs on both backends with the same worker count, alternately (local, ray, local, ray, ...)
so that a drifting load on a shared machine hits both alike; each run reports the wall time of judging (the
campaign's ``elapsed``: building the SUT in the workers is excluded) and, separately, the time to start the
workers (the run's wall time minus ``elapsed``). Reported per campaign:

* ms per verdict for each backend (median over the repeats), and the Ray backend's overhead per verdict
  (ray − local, in ms) and ratio (ray / local), each the median over the repeats of the ratio *within* a
  repeat (both backends measured back to back);
* seconds to start the workers (spawned processes vs. Ray actors, their imports and SUT included).

Campaigns:

* **cheap**: a trivial SUT (one obstacle per frame, no work) on small synthetic frames, so the backend's own
  cost per verdict shows: messages ("start" around each call, "pair", "done"), scheduling, the parent's loop;
* **apollo**: Apollo's CNN-seg pipeline on a few frames of the demo recording (``bags/demo.bag`` with
  ``hdmaps/demo``), when they exist, to show the overhead next to a real SUT's cost.

Ray is started on this machine with as many CPUs as it has (``ray_backend.connect(None, num_cpus=...)``); a cluster's network
adds its own latency on top (see docs/ray.md).

    .venv/bin/python benchmarks/bench_backends.py [--workers 2] [--repeats 3] [--quick] [--no-apollo]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lidarmt._machine import with_machine  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "backends.json"


# ----------------------------------------------------------------------------------------------- cheap SUT
# (imported by the workers as bench_backends:..., from this file's folder, which both backends put on their path)


class _AllRoi:
    empty = False

    def contains(self, xy):
        return np.abs(np.asarray(xy)[:, 1]) <= 5.0

    def indices(self, frame):
        from lidarmt.types import xyz_of

        return np.flatnonzero(np.abs(xyz_of(frame.points)[:, 1]) <= 5.0).astype(np.int64)


class _RoiProvider:
    def roi_for(self, frame):
        return _AllRoi()


def strip_roi() -> _RoiProvider:
    """A road |y| <= 5 m (sensor frame)."""
    return _RoiProvider()


class CheapSut:
    """One fixed obstacle made of the frame's first ROI points: no work, so only the campaign's cost shows."""

    name = "cheap"

    def detect(self, frame, roi):
        from lidarmt.types import Obstacle, ObstacleClass, Obstacles

        idx = roi.indices(frame)[:4]
        c = np.zeros(3)
        poly = np.array([[1.0, 1, 0], [1, -1, 0], [-1, -1, 0], [-1, 1, 0]])
        return Obstacles([Obstacle(ObstacleClass.CAR, 0.9, idx, c, 2.0, 2.0, 1.5, np.array([1.0, 0, 0]), poly)])


def cheap_sut() -> CheapSut:
    return CheapSut()


def write_frames(folder: Path, count: int) -> Path:
    from lidarmt.io.npz import save_frame_npz
    from lidarmt.types import Frame, Provenance, make_points

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        rng = np.random.default_rng([7, i])
        xyz = rng.uniform([-40, -20, -1.8], [40, 20, 1.0], size=(2000, 3)).astype(np.float32)
        pts = make_points(xyz, rng.uniform(0, 100, len(xyz)).astype(np.float32))
        pose = np.eye(4)
        save_frame_npz(folder / f"{i:06d}.npz", Frame(pts, pose=pose, stamp=1.5e9 + 0.1 * i,
                                                       provenance=Provenance("bench", "sim", i)), compress=False)
    return folder


# ----------------------------------------------------------------------------------------------- measuring


def run_once(cfg, backend: str, workers: int, out: Path) -> dict:
    from lidarmt.engine.campaign import run_campaign

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    r = run_campaign(cfg, out, workers=workers, backend=backend)
    wall = time.perf_counter() - t0
    bad = sum(t.crashes + t.timeouts for t in r.tally.by_n.values())
    if bad:
        raise SystemExit(f"{backend}: {bad} crash/timeout findings in a benchmark campaign; fix the setup")
    return {"pairs": r.ran, "workers": r.workers, "elapsed_s": r.elapsed, "start_s": wall - r.elapsed,
            "ms_per_verdict": 1e3 * r.elapsed / max(1, r.ran)}


def measure(name: str, cfg, workers: int, repeats: int, tmp: Path) -> dict:
    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    for i in range(repeats):
        for backend in ("local", "ray") if i % 2 == 0 else ("ray", "local"):
            res = run_once(cfg, backend, workers, tmp / f"{name}-{backend}")
            runs[backend].append(res)
            print(f"  {name:6} {backend:5} run {i + 1}/{repeats}: {res['pairs']} verdicts, "
                  f"{res['ms_per_verdict']:.2f} ms/verdict, workers started in {res['start_s']:.1f} s", flush=True)
    med = {b: statistics.median(r["ms_per_verdict"] for r in rs) for b, rs in runs.items()}
    ratios = [b["ms_per_verdict"] / a["ms_per_verdict"] for a, b in zip(runs["local"], runs["ray"], strict=True)]
    diffs = [b["ms_per_verdict"] - a["ms_per_verdict"] for a, b in zip(runs["local"], runs["ray"], strict=True)]
    return {
        "campaign": name, "pairs": runs["local"][0]["pairs"], "workers": runs["local"][0]["workers"],
        "repeats": repeats,
        "local_ms_per_verdict": round(med["local"], 3), "ray_ms_per_verdict": round(med["ray"], 3),
        "ray_overhead_ms_per_verdict": round(statistics.median(diffs), 3),
        "ray_over_local": round(statistics.median(ratios), 3),
        "ratios": [round(x, 3) for x in ratios],
        "local_start_s": round(statistics.median(r["start_s"] for r in runs["local"]), 2),
        "ray_start_s": round(statistics.median(r["start_s"] for r in runs["ray"]), 2),
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frames", type=int, default=20, help="source frames of the cheap campaign")
    ap.add_argument("--apollo-frames", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="1 repeat, 8 frames, 2 Apollo frames")
    ap.add_argument("--no-apollo", action="store_true")
    ap.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(ROOT)}")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.frames, args.apollo_frames = 1, 8, 2

    from lidarmt.errors import require

    ray = require("ray", extra="ray", purpose="benchmarks/bench_backends.py")
    from lidarmt.engine.campaign import _cores, environment
    from lidarmt.lidar.mr1.campaign import CampaignConfig
    from lidarmt.lidar.mr1.inject import Region
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    cores = _cores()
    t0 = time.perf_counter()
    from lidarmt.engine.ray_backend import connect

    connect(None, num_cpus=max(cores, args.workers))  # a Ray of its own, even with a cluster registered here
    ray_init_s = time.perf_counter() - t0
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as td:
        tmp = Path(td)
        frames = write_frames(tmp / "frames", args.frames)
        cheap = CampaignConfig(SourceSpec(str(frames)), RoiSpec("bench_backends:strip_roi"),
                               SutSpec("bench_backends:cheap_sut"), ns=(10, 100), frames=tuple(range(args.frames)),
                               seed=0, trials=5, region=Region.disk(30.0), timeout=60.0)
        print(f"cheap SUT: {cheap.total} verdicts, {args.workers} workers, {args.repeats} repeat(s)", flush=True)
        results.append(measure("cheap", cheap, args.workers, args.repeats, tmp))
        bag, hdmap = ROOT / "bags" / "demo.bag", ROOT / "hdmaps" / "demo"
        if not args.no_apollo and bag.is_file() and hdmap.exists():
            from lidarmt.lidar.specs import open_source

            src = open_source(SourceSpec(str(bag)))
            step = max(1, len(src) // args.apollo_frames)
            picked = tuple(range(0, len(src), step))[: args.apollo_frames]
            apollo = CampaignConfig(SourceSpec(str(bag)), RoiSpec(str(hdmap)), SutSpec("apollo"), ns=(10, 100),
                                    frames=picked, seed=0, trials=1, region=Region.disk(120.0), timeout=600.0)
            print(f"Apollo on {len(picked)} demo frames: {apollo.total} verdicts", flush=True)
            results.append(measure("apollo", apollo, args.workers, max(1, min(args.repeats, 2)), tmp))
        else:
            print("Apollo campaign skipped (no bags/demo.bag with hdmaps/demo, or --no-apollo)")
    ray.shutdown()

    head = f"{'campaign':8} {'verdicts':>8} {'W':>2} {'local ms/v':>10} {'ray ms/v':>9} {'ray−local':>10} " \
           f"{'ray/local':>9} {'start local':>11} {'start ray':>9}"
    print()
    print(head)
    for r in results:
        print(f"{r['campaign']:8} {r['pairs']:>8} {r['workers']:>2} {r['local_ms_per_verdict']:>10.2f} "
              f"{r['ray_ms_per_verdict']:>9.2f} {r['ray_overhead_ms_per_verdict']:>10.2f} "
              f"{r['ray_over_local']:>9.2f} {r['local_start_s']:>10.1f}s {r['ray_start_s']:>8.1f}s")
    print(f"(ray.init on this machine: {ray_init_s:.1f} s, once per process; load average at the end: "
          f"{os.getloadavg()[0]:.1f} on {cores} core(s))")
    if not args.no_write:
        from lidarmt._atomic import atomic_write_text

        doc = {"command": "benchmarks/bench_backends.py " + " ".join(sys.argv[1:]), "ray_init_s": round(ray_init_s, 2),
               "load_average_end": round(os.getloadavg()[0], 2), "cores": cores,
               "ray": ray.__version__, "environment": environment(), "results": results}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(RESULTS, json.dumps(with_machine(doc), indent=2) + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
