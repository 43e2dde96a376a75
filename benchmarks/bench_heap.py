"""What keeping freed memory (:mod:`lidarmt._heap`) buys each network: glibc's defaults against freed memory kept.

For each network, in ``--repeats`` interleaved rounds (glibc's defaults, then kept, so that load drift hits both
alike): one warm-up call under the round's setting, then one timed call; wall and process CPU seconds and the
minor page faults of the timed call. Reported per network: the median call under each setting, the median of the
per-round speed-ups (defaults / kept, wall and CPU) and the median page faults; and whether the two settings gave
the same bytes (they must: only where the buffers lie changes).

Networks: Apollo's cnnseg at ``--grid`` (exact mode, one thread, random weights and features: the arithmetic does
not depend on the values) and the camera models named by ``--models`` on a batch of ``--batch`` random 320x240
images (torch's default threads; Chauffeur's encoder-feature cache cleared before each call), what
``bench_camera_fuzz.py``'s model-only figure calls.

Usage: ``python benchmarks/bench_heap.py [--repeats 6] [--grid 640] [--batch 64] [--models dave-orig,...]``;
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


def ab(call: Callable[[], str], repeats: int) -> dict:
    """Interleaved rounds of ``call`` (which returns a digest of its outputs) under glibc's defaults and kept."""
    got: dict[str, dict[str, list]] = {s: {"wall": [], "cpu": [], "faults": [], "digest": []}
                                      for s in ("system", "kept")}
    for _ in range(repeats):
        for setting in ("system", "kept"):
            if setting == "kept":
                _heap.keep_freed_memory()
            else:
                _heap.restore_system_heap()
            call()  # warm-up under this setting (the heap shaped as the next call will meet it)
            f0, c0, t0 = _faults(), time.process_time(), time.perf_counter()
            d = call()
            g = got[setting]
            g["wall"].append(time.perf_counter() - t0)
            g["cpu"].append(time.process_time() - c0)
            g["faults"].append(_faults() - f0)
            g["digest"].append(d)
    out = {s: {"wall_s_median": statistics.median(g["wall"]), "cpu_s_median": statistics.median(g["cpu"]),
               "faults_median": statistics.median(g["faults"])} for s, g in got.items()}
    out["speedup_wall_median"] = statistics.median(
        a / b for a, b in zip(got["system"]["wall"], got["kept"]["wall"], strict=True))
    out["speedup_cpu_median"] = statistics.median(
        a / b for a, b in zip(got["system"]["cpu"], got["kept"]["cpu"], strict=True))
    out["same_bytes"] = len(set(got["system"]["digest"]) | set(got["kept"]["digest"])) == 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--grid", type=int, default=640, help="cnnseg's grid (0: skip it)")
    ap.add_argument("--batch", type=int, default=64, help="camera models: images per predict call")
    ap.add_argument("--models", default="dave-orig,dave2,epoch,rambo", help="camera models, comma-separated")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.repeats < 1 or args.batch < 1 or args.grid < 0:
        ap.error("--repeats and --batch must be positive, --grid at least 0")
    import torch

    mach = _machine.describe()
    rows: dict[str, dict] = {}
    print(f"# CPU {mach['cpu']} ({mach['isa']}), {mach['cores']} cores, load {mach['loadavg']}; interleaved "
          f"rounds, median of {args.repeats}")
    print(f"{'network':<22} {'defaults ms':>12} {'kept ms':>9} {'speed-up':>9} {'CPU speed-up':>13} "
          f"{'faults (defaults)':>18} {'faults (kept)':>14} {'same bytes':>11}", flush=True)

    def show(name: str, r: dict, per: int) -> None:
        rows[name] = r
        print(f"{name:<22} {1e3 * r['system']['wall_s_median'] / per:>12.2f} "
              f"{1e3 * r['kept']['wall_s_median'] / per:>9.2f} {r['speedup_wall_median']:>8.2f}x "
              f"{r['speedup_cpu_median']:>12.2f}x {r['system']['faults_median']:>18.0f} "
              f"{r['kept']['faults_median']:>14.0f} {r['same_bytes']!s:>11}", flush=True)

    if args.grid:
        from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network

        runner = CnnRunner(build_network(args.grid, seed=0), mode="exact", threads=1)
        grid = torch.rand(1, 8, args.grid, args.grid, generator=torch.Generator().manual_seed(1))
        r = ab(lambda: _digest(v.numpy() for v in runner.run_tensor(grid).values()), args.repeats)
        r.update(what=f"cnnseg {args.grid}x{args.grid}, exact ({runner.implementation}), 1 thread, per call")
        show(f"cnnseg{args.grid}-exact", r, 1)
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

        r = ab(call, args.repeats)
        r.update(what=f"predict on {args.batch} images ({torch.get_num_threads()} threads), per image")
        show(name, r, args.batch)
    _heap.keep_freed_memory()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps({
        "command": " ".join(["benchmarks/bench_heap.py", *sys.argv[1:]]), "isa": mach["isa"], "machine": mach,
        "torch_threads": torch.get_num_threads(), "repeats": args.repeats, "networks": rows,
        "loadavg_end": _machine.load_average()}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
