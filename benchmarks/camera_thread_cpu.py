"""Where a camera campaign's CPU time goes, thread by thread: the campaign's thread, the prefetch pool's, the model's
second lane and any native thread (OpenMP, OpenCV), in CPU milliseconds per pair.

Runs the campaign ``bench_camera_fuzz.py`` times (every built-in transformation, batched-v1, prefetch and model
lanes as campaigns have them, torch's default threads) once to warm up and once measured, in this process with
freed memory kept as the ``lidarmt`` command does; reads each thread's user + system time from
``/proc/self/task/*/stat`` (Linux) before and after the measured run, and names it by Python's thread name
(``native:COMM`` for threads Python did not start). Also times each transformation alone on one core (thread CPU
time, as ``bench_camera_fuzz.py``'s table), so that the pool's CPU per pair can be set against what the same
images cost made alone.

Usage: ``python benchmarks/camera_thread_cpu.py [--model dave-orig] [--frames 6] [--out FILE]``; prints a table and
writes ``benchmarks/results/camera_thread_cpu.json`` (the machine and its ISA included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lidarmt import _heap, _machine  # noqa: E402
from lidarmt._atomic import atomic_write_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "camera_thread_cpu.json"


def thread_cpu() -> dict[str, tuple[str, float]]:
    """{thread id: (name, CPU seconds so far)} for every thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (names.get(tid, f"native:{comm}"), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _role(name: str) -> str:
    """A pool thread's name without its number (``lidarmt-transform_0`` -> ``lidarmt-transform``)."""
    head, _, tail = name.rpartition("_")
    return head if head and tail.isdigit() else name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dave-orig")
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if not Path("/proc/self/task").is_dir():
        ap.error("needs Linux's /proc/self/task")
    _heap.keep_freed_memory()
    from bench_camera_fuzz import _source, transform_costs

    from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.batched import BATCHED, CURRENT
    from lidarmt.camera.transforms.registry import select
    from lidarmt.engine.campaign import run_campaign, select_items

    mach = _machine.describe()
    tmp = Path(tempfile.mkdtemp(prefix="camera-thread-cpu-"))
    try:
        images = _source(tmp)
        transforms = select("all")
        with open_images(images) as src:
            frames = select_items(len(src), min(args.frames, len(src)), 0, what="images")
            seeds = [src[i].image for i in frames]
        cfg = CameraCampaignConfig(images, (ModelRef(args.model, {}),), transform_refs(transforms), frames,
                                   transform_impl=CURRENT)
        run_campaign(cfg, tmp / "warm")  # numba kernels loaded, the model built and warm
        before = thread_cpu()
        c0 = time.process_time()
        run = run_campaign(cfg, tmp / "run")
        process_cpu = time.process_time() - c0
        after = thread_cpu()
        per: dict[str, float] = {}
        for tid, (name, secs) in after.items():
            per[_role(name)] = per.get(_role(name), 0.0) + secs - before.get(tid, (name, 0.0))[1]
        costs = transform_costs(transforms, frames, seeds)
        made = sum(c["settings"] for c in costs.values())
        alone = sum(c["ms_per_image"][BATCHED] * c["settings"] for c in costs.values()) / made
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pairs = run.ran
    rows = {k: 1e3 * v / pairs for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0}
    print(f"# CPU {mach['cpu']} ({mach['isa']}), {mach['cores']} cores, load {mach['loadavg']}; {args.model}, "
          f"{len(frames)} frames, {pairs} pairs in {run.elapsed:.2f} s ({pairs / run.elapsed:.0f} pairs/s)")
    print(f"{'thread':<28} {'CPU ms per pair':>16}")
    for k, v in rows.items():
        print(f"{k:<28} {v:>16.2f}")
    print(f"{'process (all threads)':<28} {1e3 * process_cpu / pairs:>16.2f}")
    print(f"the transformations alone, one core: {alone:.2f} ms per image ({BATCHED})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps({
        "command": " ".join(["benchmarks/camera_thread_cpu.py", *sys.argv[1:]]), "isa": mach["isa"],
        "machine": mach, "model": args.model, "frames": len(frames), "pairs": pairs, "elapsed_s": run.elapsed,
        "cpu_ms_per_pair": rows, "process_cpu_ms_per_pair": 1e3 * process_cpu / pairs,
        "transform_alone_ms_per_image": alone, "transform_impl": CURRENT,
        "loadavg_end": _machine.load_average()}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
