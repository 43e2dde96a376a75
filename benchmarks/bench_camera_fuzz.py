"""Camera campaign throughput against model-only throughput, measured in the same run.

For each steering model, in ``--repeats`` interleaved rounds (so that load drift hits them alike):
(1) model-only: ``predict`` on the campaign's own follow-up inputs, images/s: every transformed image (a window
of transformed frames for models with history) of every seed frame, made by the campaign's evaluator (the same
bytes), cut into the campaign's batches (``batch_size`` 64 per seed frame), with Chauffeur's encoder-feature
cache cold at the start as in a campaign; only the ``predict`` calls are timed; (2) the campaign:
``run_campaign`` in this process over the same seed frames with every transformation (DeepTest's 70 simple
settings, 7 weathers × 4 intensities, the mirror), pairs/s, where each pair is one transformed image judged
(the seed predictions, the transformations, the journal and the bookkeeping included), with the batched
transformations (``batched-v1``, :mod:`lidarmt.camera.transforms.batched`, what campaigns use) made ahead in a
thread pool (:mod:`lidarmt.camera.prefetch`, the default) and the project's torch models judging a frame's
batches two at a time on half of torch's threads each (``model_lanes`` in the JSON; ``LIDARMT_MODEL_LANES=0``
turns that off); (3) the same campaign with the reference
transformations (``ratio_reference``); with ``--serial`` also (4) the batched campaign without prefetch
(``ratio_serial``). The ratio campaign / model-only says what everything around the model costs (target ≥ 0.8).
Reported: the best of the rounds of each, the median of the per-round ratios, and the process's CPU
milliseconds per model-only image and per campaign pair (all threads; other processes on a loaded machine
disturb CPU time less than wall time). Also reported, per transformation, its milliseconds per transformed image
with each implementation (every setting on every seed frame, one core, thread CPU time, the best of two passes).
The JSON records the command, the CPU's ISA (``isa``; ``machine`` also has the load average at the start), the
load per round and at the end.

(Before issue 23 the model-only figure repeated one transformed image ``history + 1`` times to make a window
and timed it warm over repeats: for Chauffeur, whose feature cache then held every frame, that timed the LSTM
alone, 11x faster than encoding the campaign's windows of distinct frames.)

GPU (when CUDA is available, or ``--device cuda``; ``--device cpu`` skips it): the same two measures with every
model on the GPU (``device=cuda``; images are transformed on the CPU and uploaded per batch), plus the network
alone: its forward pass on a batch already on the GPU, timed with CUDA events, its FLOPs counted by
``torch.utils.flop_counter``, and the achieved FLOP/s over a 8192x8192 matmul's FLOP/s on the same GPU in the same
run (fp32 with TF32 off, and bf16). The models run in fp32.

Usage: ``python benchmarks/bench_camera_fuzz.py [--frames 12] [--repeats 3] [--models dave2,...]
[--device auto|cpu|cuda] [--skip-cpu] [--serial] [--heap kept|system]`` (``--heap``: ``kept``, the default, keeps
freed memory for the next allocation as the ``lidarmt`` command does, :mod:`lidarmt._heap`; ``system``: glibc's
defaults, the figures before that change; ``machine.heap`` in the JSON) (Udacity frames from ../shared/data when
present, else the demo bag's camera, else a synthetic folder). Writes ``benchmarks/results/camera_fuzz.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import add_heap_option, apply_heap  # noqa: E402

from lidarmt import _machine  # noqa: E402
from lidarmt.camera import prefetch  # noqa: E402
from lidarmt.camera.campaign import (  # noqa: E402
    LANES_ENV,
    CameraCampaignConfig,
    ModelRef,
    transform_refs,
    transform_seed,
)
from lidarmt.camera.models.registry import available  # noqa: E402
from lidarmt.camera.sources.factory import open_images  # noqa: E402
from lidarmt.camera.transforms.batched import BATCHED, CURRENT, IMPLEMENTATIONS, REFERENCE, apply_settings  # noqa: E402
from lidarmt.camera.transforms.registry import select  # noqa: E402
from lidarmt.engine.campaign import environment, run_campaign, select_items  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "camera_fuzz.json"
UDACITY = ROOT.parent / "shared" / "data" / "udacity"
KERAS_DAVE2 = ROOT.parent / "shared" / "data" / "models" / "dave2_udacity_simulator.h5"


def _source(tmp: Path) -> str:
    if UDACITY.is_dir():
        return str(UDACITY)
    demo = ROOT / "bags" / "demo.bag"
    if demo.is_file():
        return str(demo)
    import cv2

    folder = tmp / "synthetic"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(40):
        cv2.imwrite(str(folder / f"{i:04d}.png"), rng.integers(0, 255, (240, 320, 3), dtype=np.uint8))
    return str(folder)


def module_flops(model, x: np.ndarray) -> int:
    """FLOPs of one forward pass of the model's network on ``x`` (already shaped for ``predict``), counted by
    ``torch.utils.flop_counter`` (convolutions and matmuls; element-wise operations are not counted)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    t = model._pre(x).to(model.device)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model.module(t)
    return int(counter.get_total_flops())


def gpu_forward(model, x: np.ndarray, repeats: int) -> float:
    """Median seconds of the network's forward pass on ``x`` preprocessed and already on the GPU (CUDA events)."""
    import statistics

    import torch

    t = model._pre(x).to(model.device)
    times = []
    with torch.inference_mode():
        for _ in range(3):
            model.module(t)
        for _ in range(max(repeats, 10)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model.module(t)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def _clear_cache(model) -> None:
    clear = getattr(model, "clear_cache", None)  # Chauffeur's encoder-feature cache: every round starts cold
    if callable(clear):
        clear()


def model_only(ev, model, frames, cfg) -> tuple[float, int, np.ndarray, float]:
    """Seconds ``model.predict`` takes on the campaign's own follow-up inputs (every transformed window of every
    seed frame, made by the campaign's evaluator, so the same bytes), cut into the campaign's batches
    (``cfg.batch_size`` per frame), with Chauffeur's feature cache cold at the start as in a campaign. Only the
    ``predict`` calls are timed. Returns (seconds, images, the first batch, CPU seconds of the process in the
    ``predict`` calls)."""
    h = int(model.input_spec.history)
    _clear_cache(model)
    total, n, first, cpu = 0.0, 0, None, 0.0
    for f in frames:
        window, _ = ev.window(f)
        inputs = [ev.model_input(ev.transformed(window, f, k[2], k[3], k[4]), h) for k in cfg.keys_of(f)]
        for i in range(0, len(inputs), cfg.batch_size):
            batch = np.stack(inputs[i:i + cfg.batch_size])
            first = batch if first is None else first
            c0, t0 = time.process_time(), time.perf_counter()
            model.predict(batch)
            total += time.perf_counter() - t0
            cpu += time.process_time() - c0
            n += len(batch)
        del inputs
    return total, n, first, cpu


def transform_costs(transforms, frames, seeds) -> dict:
    """Milliseconds per transformed image of each transformation, over every setting of its grid on every seed
    frame, for the reference and the batched implementation (one core: the campaign's own thread); thread CPU
    time, the best of two passes, so that other processes on a loaded machine weigh less."""
    out = {}
    for t in transforms:
        sets = [[(params, transform_seed(0, f, t.name, p, 0)) for p, params in enumerate(t.grid)] for f in frames]
        row = {}
        for impl in IMPLEMENTATIONS:
            apply_settings(t, seeds[0][None], sets[0][:1], impl)  # warm-up (numba kernels compile or load)
            best = float("inf")
            for _ in range(2):
                t0 = time.thread_time()
                for img, ss in zip(seeds, sets, strict=True):
                    apply_settings(t, img[None], ss, impl)
                best = min(best, time.thread_time() - t0)
            row[impl] = 1e3 * best / (len(frames) * len(t.grid))
        out[t.name] = {"settings": len(t.grid), "ms_per_image": row,
                       "speedup": row[REFERENCE] / max(row[BATCHED], 1e-9)}
    return out


def measure(name: str, images: str, frames, transforms, tmp: Path, *, repeats: int, device: str,
            index: int, serial: bool = False) -> dict:
    """Model-only images/s and campaign pairs/s of one model on ``device`` (and, on a GPU, its FLOP/s), in
    ``repeats`` interleaved rounds (model-only, the campaign with the batched transformations, with the
    reference ones, and with ``serial`` the batched ones without prefetch), best of each; also the CPU seconds
    of the process per image and per pair (all threads), which other processes on a loaded machine disturb less
    than wall time."""
    options = {} if device == "cpu" else {"device": device}
    cfg = CameraCampaignConfig(images, (ModelRef(name, options),), transform_refs(transforms), frames,
                               transform_impl=CURRENT)
    ref_cfg = dataclasses.replace(cfg, transform_impl=REFERENCE)
    ev = cfg.evaluator()  # its model and its transformed windows: exactly the campaign's inputs
    model = ev.models[0]
    h = int(model.input_spec.history)
    window, _ = ev.window(frames[0])
    warm = np.stack([ev.model_input(window, h)] * min(8, cfg.batch_size))
    model.predict(warm)  # warm-up
    _clear_cache(model)
    out = tmp / f"run-{device.replace(':', '')}-{index}"
    threads = prefetch.default_threads() or 2
    runs = [("batched", cfg, threads), ("reference", ref_cfg, threads)] + ([("serial", cfg, 0)] if serial else [])
    best = {k: float("inf") for k in ["model", *(r[0] for r in runs)]}
    cpu = dict(best)
    rounds = []
    pairs = images_n = 0
    xb = None
    for _ in range(repeats):
        # interleaved, so that load drift hits them alike: model-only; the campaign with the batched
        # transformations made ahead in a thread pool (the default); with the reference ones; without prefetch
        secs, images_n, xb, secs_cpu = model_only(ev, model, frames, cfg)
        got, got_cpu = {"model": secs}, {"model": secs_cpu}
        for how, c, n in runs:
            shutil.rmtree(out, ignore_errors=True)
            os.environ[prefetch.ENV] = str(n)
            c0 = time.process_time()
            try:
                r = run_campaign(c, out)
            finally:
                os.environ.pop(prefetch.ENV, None)
            got[how], got_cpu[how] = r.elapsed, time.process_time() - c0
            pairs = r.ran
        for k, v in got.items():
            best[k] = min(best[k], v)
            cpu[k] = min(cpu[k], got_cpu[k])
        rnd = {"model_only_images_per_s": images_n / got["model"], "loadavg": _machine.load_average()}
        for how, _, _ in runs:
            rnd[f"{how}_pairs_per_s"] = pairs / got[how]
            rnd[f"ratio_{how}"] = (pairs / got[how]) / (images_n / got["model"])
        rounds.append(rnd)
    model_ips = images_n / best["model"]
    camp_pps = pairs / best["batched"]
    row = {"model": Path(name).stem if name.endswith(".h5") else name, "history": h, "device": device,
           "model_only_images_per_s": model_ips, "model_only_images": images_n, "campaign_pairs_per_s": camp_pps,
           "ratio": camp_pps / model_ips, "pairs": pairs, "prefetch_threads": threads,
           "transform_impl": CURRENT,
           "ratio_median_of_rounds": float(np.median([r["ratio_batched"] for r in rounds])),
           "overhead_ms_per_pair": 1e3 * (1 / camp_pps - 1 / model_ips),
           "model_cpu_ms_per_image": 1e3 * cpu["model"] / images_n,
           "rounds": rounds}
    for how, _, _ in runs[1:]:
        pps = pairs / best[how]
        row[f"campaign_{how}_pairs_per_s"] = pps
        row[f"ratio_{how}"] = pps / model_ips
        row[f"ratio_{how}_median_of_rounds"] = float(np.median([r[f"ratio_{how}"] for r in rounds]))
    for how, _, _ in runs:
        row[f"campaign_{how}_cpu_ms_per_pair"] = 1e3 * cpu[how] / pairs
    if device != "cpu" and hasattr(model, "module") and xb is not None:
        xb = xb[:64]
        flops = module_flops(model, xb)
        fwd = gpu_forward(model, xb, repeats)
        row.update(forward_batch=len(xb), forward_s_median=fwd, gflop_per_image=flops / len(xb) / 1e9,
                   forward_tflops=flops / fwd / 1e12)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--models", default="")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto", help="auto (also time the GPU when CUDA is there), cpu, cuda")
    ap.add_argument("--skip-cpu", action="store_true", help="GPU only: skip the CPU timings")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    ap.add_argument("--serial", action="store_true", help="also time the campaign without prefetch")
    add_heap_option(ap)
    args = ap.parse_args()
    apply_heap(args)  # before anything is allocated
    import torch

    from lidarmt.errors import UserError
    from lidarmt.lidar.perception.apollo.network import resolve_device

    try:
        gpu = resolve_device(args.device, flag="--device")
    except UserError as err:
        ap.error(str(err))
    if gpu == "cpu" and args.skip_cpu:
        ap.error("--skip-cpu needs a CUDA GPU (--device cuda or auto with one)")

    mach = _machine.describe()  # the load when the benchmark starts
    tmp = Path(tempfile.mkdtemp(prefix="bench-camera-"))
    try:
        images = _source(tmp)
        models = [m for m in args.models.split(",") if m] or available()
        if not args.models and KERAS_DAVE2.is_file():
            models.append(str(KERAS_DAVE2))
        transforms = select("all")
        with open_images(images) as src:
            frames = select_items(len(src), min(args.frames, len(src)), 0, what="images")
            seeds = [src[i].image for i in frames]
        # the transformations' own cost, per transformed image, per transformation and over all settings
        costs = transform_costs(transforms, frames, seeds)
        made = len(frames) * sum(len(t.grid) for t in transforms)
        transform_ms = {impl: sum(c["ms_per_image"][impl] * c["settings"] for c in costs.values())
                        * len(frames) / made for impl in IMPLEMENTATIONS}
        devices = ([] if args.skip_cpu else ["cpu"]) + ([gpu] if gpu != "cpu" else [])
        head = (f"{'model':<26} {'device':<7} {'model-only img/s':>17} {'campaign pairs/s':>17} {'ratio':>6} "
                f"{'ref.':>6}" + (f" {'serial':>7}" if args.serial else "") + f" {'overhead ms/pair':>17} "
                f"{'CPU ms: model/img':>18} {'pair':>6} {'ref. pair':>9}")
        print(f"# CPU {mach['cpu']} ({mach['isa']}, bf16 {mach['bf16']}), {mach['cores']} cores, load "
              f"{mach['loadavg']} at start; ratio: campaign ({CURRENT} transformations, prefetch) / model-only; "
              f"ref.: the same with the reference transformations" + ("; serial: without prefetch" if args.serial
                                                                      else ""))
        print(f"{len(frames)} seed frames × {made // len(frames)} transformed images each, source {images}")
        print(f"{'transformation':<14} {'settings':>8} {'reference ms/img':>17} {CURRENT + ' ms/img':>17} "
              f"{'speed-up':>9}  (one core, thread CPU time)")
        for name, c in costs.items():
            ms = c["ms_per_image"]
            print(f"{name:<14} {c['settings']:>8} {ms[REFERENCE]:>17.3f} {ms[BATCHED]:>17.3f} {c['speedup']:>8.1f}x")
        print(f"{'all (mean)':<14} {made // len(frames):>8} {transform_ms[REFERENCE]:>17.3f} "
              f"{transform_ms[BATCHED]:>17.3f} {transform_ms[REFERENCE] / transform_ms[BATCHED]:>8.1f}x")
        print(head, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from lidarmt._atomic import atomic_write_text

        peaks: dict = {}

        def write(rows: list, complete: bool) -> None:  # after every model, so a cut-short run keeps its rows
            atomic_write_text(args.out, json.dumps({
                "command": " ".join(["benchmarks/bench_camera_fuzz.py", *sys.argv[1:]]), "complete": complete,
                "source": images, "frames": len(frames), "per_frame": made // len(frames),
                "transform_impl": CURRENT, "isa": mach["isa"], "transform_ms_per_image": transform_ms,
                "transforms": costs, "torch_threads": torch.get_num_threads(), "models": rows,
                "model_lanes": os.environ.get(LANES_ENV, "").strip() != "0",  # CameraEvaluator._second_lane
                "gpu_matmul_8192_tflops": peaks, "machine": mach, "loadavg_end": _machine.load_average(),
                "environment": environment()}, indent=2) + "\n")

        rows = []
        for dev in devices:
            for k, name in enumerate(models):
                r = measure(name, images, frames, transforms, tmp, repeats=args.repeats, device=dev, index=k,
                            serial=args.serial)
                rows.append(r)
                print(f"{r['model']:<26} {r['device']:<7} {r['model_only_images_per_s']:>17.1f} "
                      f"{r['campaign_pairs_per_s']:>17.1f} {r['ratio']:>6.2f} {r['ratio_reference']:>6.2f}"
                      + (f" {r['ratio_serial']:>7.2f}" if args.serial else "")
                      + f" {r['overhead_ms_per_pair']:>17.2f} {r['model_cpu_ms_per_image']:>18.2f} "
                      f"{r['campaign_batched_cpu_ms_per_pair']:>6.2f} {r['campaign_reference_cpu_ms_per_pair']:>9.2f}",
                      flush=True)
                write(rows, False)
        if gpu != "cpu":
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from bench_perception import gpu_matmul_tflops

            dev = torch.device(gpu)
            peaks.update(fp32=gpu_matmul_tflops(torch.float32, dev), bf16=gpu_matmul_tflops(torch.bfloat16, dev))
            for r in rows:
                if "forward_tflops" in r:
                    r["forward_over_matmul"] = {k: r["forward_tflops"] / v for k, v in peaks.items()}
            print(f"# GPU {torch.cuda.get_device_name(torch.device(gpu))}: matmul 8192^2 fp32 (TF32 off) "
                  f"{peaks['fp32']:.1f} TFLOP/s, bf16 {peaks['bf16']:.1f} TFLOP/s")
            for r in rows:
                if "forward_tflops" in r:
                    o = r["forward_over_matmul"]
                    print(f"{r['model']:<26} forward (batch {r['forward_batch']}, fp32): "
                          f"{r['gflop_per_image']:.3f} GFLOP/image, {r['forward_tflops']:.2f} TFLOP/s = "
                          f"{o['fp32']:.3f} of the fp32 matmul, {o['bf16']:.3f} of the bf16 matmul")
        write(rows, True)
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
