"""What keeping freed memory (:mod:`lidarmt._heap`) buys each network: glibc's defaults against freed memory kept.

In ``--repeats`` interleaved rounds (glibc's defaults, then kept, so that load drift hits both alike), each arm
in a fresh process (glibc's adaptive mmap threshold cannot be restored once changed, so ``system`` is a process
that never touches it, ``LIDARMT_HEAP=system``): per network one warm-up call, then ``--calls`` timed calls;
wall and process CPU seconds and the minor page faults of each. Reported per network: the median under each
setting, the median of the per-round speed-ups (defaults / kept, wall and CPU) and the median page faults; and
whether the two settings gave the same bytes (they must: only where the buffers lie changes).

Networks: Apollo's cnnseg at ``--grid`` (exact mode, one thread, random weights and features: the arithmetic does
not depend on the values) and the camera models named by ``--models`` on a batch of ``--batch`` random 320x240
images (torch's default threads; Chauffeur's encoder-feature cache cleared before each call), what
``bench_camera_fuzz.py``'s model-only figure calls.

Usage: ``python benchmarks/bench_heap.py [--repeats 4] [--calls 3] [--grid 640] [--batch 64] [--models dave-orig,...]``;
writes ``benchmarks/results/heap.json`` (``--out``), the machine and its ISA included.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lidarmt import _heap, _machine  # noqa: E402
from lidarmt._atomic import atomic_write_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "heap.json"


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def child(args) -> None:
    """One arm of one round, in this fresh process: each network's warm-up call, then ``--calls`` timed calls;
    prints one JSON line per network (wall, CPU seconds and minor page faults of each timed call, the outputs'
    digest)."""
    import torch

    if args.child == "kept":
        _heap.keep_freed_memory()
    nets: list[tuple[str, int, Callable[[], str]]] = []
    if args.grid:
        from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network

        runner = CnnRunner(build_network(args.grid, seed=0), mode="exact", threads=1)
        grid = torch.rand(1, 8, args.grid, args.grid, generator=torch.Generator().manual_seed(1))
        nets.append((f"cnnseg{args.grid}-exact", 1,
                     lambda: _digest(v.numpy() for v in runner.run_tensor(grid).values())))
    from lidarmt.camera.models.registry import get_model

    rng = np.random.default_rng(2)
    for name in [m for m in args.models.split(",") if m]:
        model = get_model(name)
        h = int(model.input_spec.history)
        images = rng.integers(0, 255, (args.batch, *((h + 1,) if h else ()), 240, 320, 3), dtype=np.uint8)
        clear = getattr(model, "clear_cache", None)  # Chauffeur's encoder-feature cache: every call starts cold

        def call(m=model, x=images, clear=clear) -> str:
            if callable(clear):
                clear()
            return _digest([m.predict(x)])

        nets.append((name, args.batch, call))
    for name, per, call in nets:
        call()  # warm-up: the heap shaped as the next calls meet it
        got: dict[str, list] = {"wall": [], "cpu": [], "faults": []}
        for _ in range(args.calls):
            f0, c0, t0 = _faults(), time.process_time(), time.perf_counter()
            d = call()
            got["wall"].append((time.perf_counter() - t0) / per)
            got["cpu"].append((time.process_time() - c0) / per)
            got["faults"].append(_faults() - f0)
        print(json.dumps({"name": name, "heap": _heap.state(), "digest": d, "threads": torch.get_num_threads(),
                          **{k: statistics.median(v) for k, v in got.items()}}), flush=True)


def round_of(args, setting: str) -> dict[str, dict]:
    """One arm of a round in a fresh process (``LIDARMT_HEAP`` set for ``system``: glibc untouched)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != _heap.ENV}
    if setting == "system":
        env[_heap.ENV] = "system"
    cmd = [sys.executable, __file__, "--child", setting, "--grid", str(args.grid), "--batch", str(args.batch),
           "--models", args.models, "--calls", str(args.calls)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert all(r["heap"] == setting for r in rows), rows
    return {r["name"]: r for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4, help="interleaved rounds (each arm a fresh process)")
    ap.add_argument("--calls", type=int, default=3, help="timed calls per network per arm (their median)")
    ap.add_argument("--grid", type=int, default=640, help="cnnseg's grid (0: skip it)")
    ap.add_argument("--batch", type=int, default=64, help="camera models: images per predict call")
    ap.add_argument("--models", default="dave-orig,dave2,epoch,rambo", help="camera models, comma-separated")
    ap.add_argument("--child", choices=("system", "kept"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.repeats < 1 or args.calls < 1 or args.batch < 1 or args.grid < 0:
        ap.error("--repeats, --calls and --batch must be positive, --grid at least 0")
    if args.child:
        child(args)
        return
    mach = _machine.describe()
    print(f"# CPU {mach['cpu']} ({mach['isa']}), {mach['cores']} cores, load {mach['loadavg']}; {args.repeats} "
          f"interleaved rounds, each arm a fresh process, median of {args.calls} calls each")
    print(f"{'network':<22} {'defaults ms':>12} {'kept ms':>9} {'speed-up':>9} {'CPU speed-up':>13} "
          f"{'faults (defaults)':>18} {'faults (kept)':>14} {'same bytes':>11}   (ms per call or image)", flush=True)
    arms: dict[str, list[dict[str, dict]]] = {"system": [], "kept": []}
    for _ in range(args.repeats):
        for setting in ("system", "kept"):
            arms[setting].append(round_of(args, setting))
    rows: dict[str, dict] = {}
    for name in arms["system"][0]:
        sys_, kept = [r[name] for r in arms["system"]], [r[name] for r in arms["kept"]]
        r = {s: {"wall_s_median": statistics.median(x["wall"] for x in v),
                 "cpu_s_median": statistics.median(x["cpu"] for x in v),
                 "faults_median": statistics.median(x["faults"] for x in v)} for s, v in (("system", sys_),
                                                                                      ("kept", kept))}
        r["speedup_wall_median"] = statistics.median(a["wall"] / b["wall"] for a, b in zip(sys_, kept, strict=True))
        r["speedup_cpu_median"] = statistics.median(a["cpu"] / b["cpu"] for a, b in zip(sys_, kept, strict=True))
        r["same_bytes"] = len({x["digest"] for x in sys_ + kept}) == 1
        r["what"] = ("per call, exact mode, 1 thread" if name.startswith("cnnseg")
                     else f"per image, predict on {args.batch} images, {sys_[0]['threads']} threads")
        rows[name] = r
        print(f"{name:<22} {1e3 * r['system']['wall_s_median']:>12.2f} {1e3 * r['kept']['wall_s_median']:>9.2f} "
              f"{r['speedup_wall_median']:>8.2f}x {r['speedup_cpu_median']:>12.2f}x "
              f"{r['system']['faults_median']:>18.0f} {r['kept']['faults_median']:>14.0f} "
              f"{r['same_bytes']!s:>11}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps({
        "command": " ".join(["benchmarks/bench_heap.py", *sys.argv[1:]]), "isa": mach["isa"], "machine": mach,
        "repeats": args.repeats, "calls": args.calls, "networks": rows,
        "loadavg_end": _machine.load_average()}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
