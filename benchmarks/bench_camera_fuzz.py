"""Camera campaign throughput against model-only throughput, measured in the same run.

For each steering model: (1) model-only: ``predict`` on batches of already transformed images (the campaign's
batch size), images/s; (2) the campaign: ``run_campaign`` in this process over the same seed frames with every
transformation (DeepTest's 70 simple settings, 7 weathers × 4 intensities, the mirror), pairs/s, where each pair
is one transformed image judged (the seed predictions, the transformations, the journal and the bookkeeping
included), with the transformations made ahead in a thread pool (:mod:`lidarmt.camera.prefetch`, the default)
and without (``ratio_serial``), interleaved. The ratio campaign / model-only says what everything around the
model costs (target ≥ 0.8 when the model dominates; for tiny models the transformations dominate and the ratio
says so). The JSON records the CPU's ISA and the load average (``machine``). Also reported: the
transformations' own cost per image and the engine's bookkeeping per pair.

GPU (when CUDA is available, or ``--device cuda``; ``--device cpu`` skips it): the same two measures with every
model on the GPU (``device=cuda``; images are transformed on the CPU and uploaded per batch), plus the network
alone: its forward pass on a batch already on the GPU, timed with CUDA events, its FLOPs counted by
``torch.utils.flop_counter``, and the achieved FLOP/s over a 8192x8192 matmul's FLOP/s on the same GPU in the same
run (fp32 with TF32 off, and bf16). The models run in fp32.

Usage: ``python benchmarks/bench_camera_fuzz.py [--frames 12] [--models dave2,...] [--device auto|cpu|cuda]
[--skip-cpu]`` (Udacity frames from ../shared/data when present, else the demo bag's camera, else a synthetic
folder). Writes ``benchmarks/results/camera_fuzz.json``.
"""

from __future__ import annotations

import argparse
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

from lidarmt import _machine  # noqa: E402
from lidarmt.camera import prefetch  # noqa: E402
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs, transform_seed  # noqa: E402
from lidarmt.camera.models.registry import available, get_model  # noqa: E402
from lidarmt.camera.sources.factory import open_images  # noqa: E402
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


def measure(name: str, images: str, frames, transforms, batch: np.ndarray, tmp: Path, *, repeats: int,
            device: str, index: int) -> dict:
    """Model-only images/s and campaign pairs/s of one model on ``device`` (and, on a GPU, its FLOP/s)."""
    options = {} if device == "cpu" else {"device": device}
    model = get_model(name, **options)
    h = int(model.input_spec.history)
    x = np.repeat(batch[:, None], h + 1, axis=1) if h else batch
    model.predict(x[:64])  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(0, len(x), 64):
            model.predict(x[i:i + 64])
        best = min(best, time.perf_counter() - t0)
    model_ips = len(x) / best
    cfg = CameraCampaignConfig(images, (ModelRef(name, options),), transform_refs(transforms), frames)
    out = tmp / f"run-{device.replace(':', '')}-{index}"
    # the campaign with the transformations made ahead in a thread pool (the default) and without (every image
    # made before the models run, as before issue 23), interleaved so that load drift hits both alike
    camp = {"prefetch": float("inf"), "serial": float("inf")}
    threads = prefetch.default_threads() or 2
    for _ in range(repeats):
        for how, n in (("prefetch", threads), ("serial", 0)):
            shutil.rmtree(out, ignore_errors=True)
            os.environ[prefetch.ENV] = str(n)
            try:
                r = run_campaign(cfg, out)
            finally:
                os.environ.pop(prefetch.ENV, None)
            camp[how] = min(camp[how], r.elapsed)
    pairs = r.ran
    camp_pps = pairs / camp["prefetch"]
    serial_pps = pairs / camp["serial"]
    row = {"model": Path(name).stem if name.endswith(".h5") else name, "history": h, "device": device,
           "model_only_images_per_s": model_ips, "campaign_pairs_per_s": camp_pps,
           "ratio": camp_pps / model_ips, "pairs": pairs, "prefetch_threads": threads,
           "campaign_serial_pairs_per_s": serial_pps, "ratio_serial": serial_pps / model_ips,
           "overhead_ms_per_pair": 1e3 * (1 / camp_pps - 1 / model_ips)}
    if device != "cpu" and hasattr(model, "module"):
        xb = x[:64]
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
    args = ap.parse_args()
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
        # the transformations' own cost, per transformed image
        t0 = time.perf_counter()
        made = []
        for f, img in zip(frames, seeds, strict=True):
            for t in transforms:
                for p, params in enumerate(t.grid):
                    made.append(t.apply(img, params, transform_seed(0, f, t.name, p, 0)))
        transform_ms = 1e3 * (time.perf_counter() - t0) / len(made)
        batch = np.stack(made)
        devices = ([] if args.skip_cpu else ["cpu"]) + ([gpu] if gpu != "cpu" else [])
        rows = [measure(name, images, frames, transforms, batch, tmp, repeats=args.repeats, device=dev, index=k)
                for dev in devices for k, name in enumerate(models)]
        peaks = {}
        if gpu != "cpu":
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from bench_perception import gpu_matmul_tflops

            dev = torch.device(gpu)
            peaks = {"fp32": gpu_matmul_tflops(torch.float32, dev), "bf16": gpu_matmul_tflops(torch.bfloat16, dev)}
            for r in rows:
                if "forward_tflops" in r:
                    r["forward_over_matmul"] = {k: r["forward_tflops"] / v for k, v in peaks.items()}
        head = (f"{'model':<26} {'device':<7} {'model-only img/s':>17} {'campaign pairs/s':>17} {'ratio':>6} "
                f"{'serial':>7} {'overhead ms/pair':>17}")
        print(f"# CPU {mach['cpu']} ({mach['isa']}, bf16 {mach['bf16']}), {mach['cores']} cores, load "
              f"{mach['loadavg']} at start; ratio: campaign with prefetch / model-only, serial: without prefetch")
        print(f"{len(frames)} seed frames × {len(made) // len(frames)} transformed images each, source {images}")
        print(f"transformations alone: {transform_ms:.2f} ms per 320x240 image (mean over every setting)")
        print(head)
        for r in rows:
            print(f"{r['model']:<26} {r['device']:<7} {r['model_only_images_per_s']:>17.1f} "
                  f"{r['campaign_pairs_per_s']:>17.1f} {r['ratio']:>6.2f} {r['ratio_serial']:>7.2f} "
                  f"{r['overhead_ms_per_pair']:>17.2f}")
        if peaks:
            print(f"# GPU {torch.cuda.get_device_name(torch.device(gpu))}: matmul 8192^2 fp32 (TF32 off) "
                  f"{peaks['fp32']:.1f} TFLOP/s, bf16 {peaks['bf16']:.1f} TFLOP/s")
            for r in rows:
                if "forward_tflops" in r:
                    o = r["forward_over_matmul"]
                    print(f"{r['model']:<26} forward (batch {r['forward_batch']}, fp32): "
                          f"{r['gflop_per_image']:.3f} GFLOP/image, {r['forward_tflops']:.2f} TFLOP/s = "
                          f"{o['fp32']:.3f} of the fp32 matmul, {o['bf16']:.3f} of the bf16 matmul")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from lidarmt._atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps({"source": images, "frames": len(frames), "per_frame": len(made) // len(frames),
                                       "transform_ms_per_image": transform_ms, "torch_threads": torch.get_num_threads(),
                                       "models": rows, "gpu_matmul_8192_tflops": peaks, "machine": mach,
                                       "loadavg_end": _machine.load_average(),
                                       "environment": environment()}, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
