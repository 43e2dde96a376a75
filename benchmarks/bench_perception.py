"""Apollo perception speed per stage, exact vs fast, CNN efficiency against the matmul peak of its precision.

Measured in one process, on the same frames (real KITTI HDL-64E frames of ../shared/data when present,
110k-127k points, ROI = the road/parking/sidewalk points; otherwise synthetic 130k-point frames with a box ROI):

* each stage's median time (ROI indices, features, CNN, Cluster2D, MinBox) and the whole ``detect`` call, in
  ``exact`` (fp32, deterministic) and ``fast`` (channels_last + bf16 autocast where the CPU has it) modes,
  optionally ``fast + torch.compile`` (--compile);
* the CNN's arithmetic rate: its FLOPs counted analytically from the layer shapes (``conv_flops``) over its
  time, as a fraction of a 4096x4096 matmul's rate *in the precision the CNN runs in* (exact: fp32; fast: bf16
  where the CPU computes it natively, else fp32) measured in the same process with the same threads (the
  machine is shared: ratios within a run are what to compare). The CPU's ISA is detected once
  (:mod:`lidarmt._machine`: amx, avx512_bf16, avx512, avx2) and written into the JSON; bf16 products are never
  timed where bf16 is emulated (AVX2: under 1 GFLOP/s, a 4096² product takes minutes);
* fast-vs-exact agreement: per head the max absolute difference, the fraction of cells (all, and non-empty)
  whose objectness decision (category >= 0.5) flips, and whether the obstacle counts agree per frame; the same
  for ``exact`` against ``exact-v1`` (the exact implementation before issue 34: NCHW), which old bundles name;
* where the CNN's time goes (``cnn`` in the JSON): per layer (every convolution and deconvolution, timed with
  forward hooks; "other" is the rest of the forward pass: ReLUs, concatenations, heads, layout copies) its ms,
  GFLOP, and GFLOP/s over the matmul's, for ``exact`` and ``exact-v1``; and each mode's CNN rate over the fp32
  matmul in pairs (matmul, CNN) by wall clock and by process CPU time (robust where the machine is shared: time
  spent descheduled is not counted), medians of ``--repeat`` pairs;
* ``--isa default,AVX512_CORE,AVX2``: the CNN part again in a child process per setting, with oneDNN capped by
  ``ONEDNN_MAX_CPU_ISA`` and MKL (torch's matmul) by ``MKL_ENABLE_INSTRUCTIONS`` at the same level, so both sides
  of the ratio run the capped instruction set (``isa_runs`` in the JSON). A cap above the CPU's own ISA is
  skipped.

GPU (when CUDA is available, or ``--device cuda``): the same pipelines with ``device=cuda`` (exact = fp32 with
cuDNN deterministic and TF32 off; fast = bf16, fp16 where the GPU has no bf16): per-stage medians and
detects/s (one detect = one verdict's SUT call), the CNN alone timed with CUDA events at batch 1 and batched
(``--gpu-batch``, the follow-ups of a frame in one pass), its achieved FLOP/s over a 8192x8192 matmul's FLOP/s in
the same precision on the same GPU in the same run (bf16/fp16 and fp32), and GPU-vs-CPU agreement of exact mode.
``--device cpu`` skips it; ``--skip-cpu`` times the GPU only.

Weights: the shipped cnnseg640.pt when present, else random weights whose category/confidence biases are shifted
so that half of the first frame's non-empty cells are objects (so that agreement and cluster costs mean something).

    .venv/bin/python benchmarks/bench_perception.py [--frames 4] [--repeat 3] [--grid 640] [--compile]
        [--device auto|cpu|cuda] [--gpu-batch 8] [--skip-cpu] [--isa default,AVX512_CORE,AVX2] [--cnn-only]
        [--heap kept|system]

``--heap``: ``kept`` (the default, what the ``lidarmt`` command does: freed memory is kept for the next
allocation, :mod:`lidarmt._heap`) or ``system`` (glibc's defaults: every call page-faults its activations in
again; the figures before that change). ``machine.heap`` in the JSON says which.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from _timing import add_heap_option, apply_heap  # noqa: E402

from lidarmt import _machine  # noqa: E402
from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.lidar.perception.apollo.config import ApolloConfig  # noqa: E402
from lidarmt.lidar.perception.apollo.network import conv_flops, cpu_bf16_support, resolve_device  # noqa: E402
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP  # noqa: E402
from lidarmt.types import Frame, make_points  # noqa: E402

KITTI = ROOT.parent / "shared" / "data" / "kitti" / "training"
ROAD_IDS = (40, 44, 48)  # SemanticKITTI road, parking, sidewalk (as lidarmt.lidar.perception.apollo.evaluate)
STAGES = ("roi", "features", "cnn", "cluster", "minbox", "total")


class IndexRoi:
    """A fixed set of ROI point indices (the frame's labelled road points)."""

    empty = False

    def __init__(self, idx: np.ndarray) -> None:
        self._idx = np.asarray(idx, dtype=np.int64)

    def contains(self, xy: np.ndarray) -> np.ndarray:  # not used by the pipeline
        raise NotImplementedError

    def indices(self, frame: Frame) -> np.ndarray:
        return self._idx


class BoxRoi:
    empty = False

    def contains(self, xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy)
        return (np.abs(xy[:, 0]) < 50) & (np.abs(xy[:, 1]) < 8)

    def indices(self, frame: Frame) -> np.ndarray:
        return np.flatnonzero(self.contains(np.c_[frame.points["x"], frame.points["y"]])).astype(np.int64)


def kitti_frames(n: int) -> list[tuple[Frame, object]]:
    from lidarmt.io import open_recording

    out = []
    rec = open_recording(KITTI)
    for i in range(min(n, len(rec))):
        f = rec[i]
        sem = f.labels.point_semantic if f.labels is not None else None
        roi = BoxRoi() if sem is None else IndexRoi(np.flatnonzero(np.isin(sem & 0xFFFF, ROAD_IDS)))
        out.append((f, roi))
    return out


def synthetic_frames(n: int, seed: int = 0) -> list[tuple[Frame, object]]:
    """64 rings x 2,048 azimuths on a ground plane at -1.73 m, walls at |y| = 12 m and a few car boxes."""
    rng = np.random.default_rng(seed)
    out = []
    elev = np.deg2rad(np.linspace(-24.8, 2.0, 64))
    az = np.linspace(-np.pi, np.pi, 2048, endpoint=False)
    e, a = np.meshgrid(elev, az, indexing="ij")
    d = np.stack([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)], -1).reshape(-1, 3)
    for _ in range(n):
        t = np.full(len(d), 100.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            tg = np.where(d[:, 2] < 0, -1.73 / d[:, 2], np.inf)
            tw = np.where(np.abs(d[:, 1]) > 1e-6, 12.0 / np.abs(d[:, 1]), np.inf)
        t = np.minimum(t, np.minimum(tg, tw))
        for _car in range(12):
            c = np.array([rng.uniform(-45, 45), rng.uniform(-9, 9), -0.9])
            h = np.array([2.2, 0.9, 0.8])
            with np.errstate(divide="ignore", invalid="ignore"):
                t1 = (c - h) / d
                t2 = (c + h) / d
            tmin = np.nanmax(np.minimum(t1, t2), axis=1)
            tmax = np.nanmin(np.maximum(t1, t2), axis=1)
            hit = (tmax >= tmin) & (tmin > 0)
            t = np.where(hit, np.minimum(t, tmin), t)
        xyz = d * t[:, None] + rng.normal(0, 0.02, (len(d), 3))
        pts = make_points(xyz[t < 100], rng.uniform(0, 255, int((t < 100).sum())).astype(np.float32))
        out.append((Frame(pts), BoxRoi()))
    return out


def matmul_gflops(dtype: torch.dtype, size: int = 4096, repeat: int = 3) -> float:
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def cpu_peaks(measure=matmul_gflops) -> dict[str, float]:
    """The 4096² matmul rate of each precision this CPU computes natively (fp32; bf16 only with AVX512-BF16 or
    AMX: an emulated bf16 product is never timed)."""
    return {pr: measure(DTYPES[pr]) for pr in _machine.matmul_precisions()}


def _warm_matmul(p: ApolloLOP, features: np.ndarray, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 4096^2 matrices in ``dtype``, after one call of the CNN and one product (the warm-up of each)."""
    a = torch.randn(4096, 4096).to(dtype)
    b = torch.randn(4096, 4096).to(dtype)
    p.runner(features)
    a @ b
    return a, b


def _timed_pairs(p: ApolloLOP, features: np.ndarray, a: torch.Tensor, b: torch.Tensor,
                 repeat: int) -> list[tuple[float, ...]]:
    """``repeat`` pairs of the product ``a @ b`` and the CNN on ``features``, back to back: (matmul wall s, matmul
    CPU s, CNN wall s, CNN CPU s) per pair."""
    out = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        a @ b
        c1, t1 = time.process_time(), time.perf_counter()
        p.runner(features)
        c2, t2 = time.process_time(), time.perf_counter()
        out.append((t1 - t0, c1 - c0, t2 - t1, c2 - c1))
    return out


def paired_cnn_rate(p: ApolloLOP, features: np.ndarray, flops: int, repeat: int) -> dict:
    """CNN forward and a 4096^2 matmul in the CNN's own precision timed back to back, ``repeat`` times: the
    machine is shared, so the ratio of the two rates within each pair is what stays comparable; medians over
    the pairs. Each pair is timed by wall clock and by process CPU time (``*_cpu``: with one thread, time spent
    descheduled by other jobs is not counted; with more, spinning threads are)."""
    precision = p.runner.precision
    if precision not in _machine.matmul_precisions():  # never time an emulated bf16 product
        raise RuntimeError(f"the CNN runs in {precision}, which this CPU ({_machine.isa()}) emulates")
    ratios, cnn_s, mm, ratios_cpu = [], [], [], []
    a, b = _warm_matmul(p, features, DTYPES[precision])
    for mm_w, mm_c, cnn_w, cnn_c in _timed_pairs(p, features, a, b, repeat):
        mm_rate = 2 * 4096**3 / mm_w / 1e9
        ratios.append(flops / cnn_w / 1e9 / mm_rate)
        ratios_cpu.append(mm_c / max(cnn_c, 1e-9) * flops / (2 * 4096**3))
        cnn_s.append(cnn_w)
        mm.append(mm_rate)
    return {
        "precision": precision,
        "implementation": getattr(p.runner, "implementation", None),
        "cnn_s_median": statistics.median(cnn_s),
        "cnn_gflops_median": flops / statistics.median(cnn_s) / 1e9,
        "matmul_gflops_median": statistics.median(mm),
        "cnn_over_matmul_median": statistics.median(ratios),
        "cnn_over_matmul_all": ratios,
        "cnn_over_matmul_cpu_median": statistics.median(ratios_cpu),
        "cnn_over_matmul_cpu_all": ratios_cpu,
    }


def _layer_flops(module: torch.nn.Module, inp: torch.Tensor, out: torch.Tensor) -> int:
    """Multiply-adds x 2 of one convolution (output pixels) or transposed convolution (input pixels)."""
    kh, kw = module.kernel_size
    pixels = inp.shape[2] * inp.shape[3] if isinstance(module, torch.nn.ConvTranspose2d) else out.shape[2] * out.shape[3]
    return 2 * inp.shape[0] * module.in_channels * module.out_channels * kh * kw * pixels


def layer_profile(p: ApolloLOP, features: np.ndarray, repeat: int) -> dict:
    """Where one CNN call's time goes: every convolution and deconvolution of ``p.runner.net`` timed with
    forward hooks (wall clock and process CPU time, medians of ``repeat`` calls; the ReLU that follows each is
    not in the module, so it counts under "other"), "other" = the rest of the call (ReLUs, concatenations, the
    heads, layout copies, the input and output conversions). A 4096^2 fp32 matmul is timed before each call;
    each layer's GFLOP/s is given over the median matmul's (``over_matmul``; ``over_matmul_cpu`` by CPU time)."""
    net = p.runner.net
    convs = {n: m for n, m in net.named_modules() if isinstance(m, torch.nn.Conv2d | torch.nn.ConvTranspose2d)}
    wall: dict[str, list[float]] = {n: [] for n in convs}
    cpu: dict[str, list[float]] = {n: [] for n in convs}
    flops: dict[str, int] = {}
    started: dict[str, tuple[float, float]] = {}

    def pre(name):
        def hook(_m, _inp):
            started[name] = (time.perf_counter(), time.process_time())
        return hook

    def post(name):
        def hook(m, inp, out):
            t, c = started.pop(name)
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            flops[name] = _layer_flops(m, inp[0], out)
        return hook

    a, b = _warm_matmul(p, features, torch.float32)  # before the hooks: the warm-up call is not a sample
    handles = [h for n, m in convs.items() for h in (m.register_forward_pre_hook(pre(n)), m.register_forward_hook(post(n)))]
    try:
        pairs = _timed_pairs(p, features, a, b, repeat)
    finally:
        for h in handles:
            h.remove()
    mm_w, mm_c, total_w, total_c = (list(col) for col in zip(*pairs, strict=True))
    mm_gflop = 2 * 4096**3 / 1e9
    rate_w, rate_c = mm_gflop / statistics.median(mm_w), mm_gflop / statistics.median(mm_c)
    layers = {}
    for n in convs:
        w, c = statistics.median(wall[n]), statistics.median(cpu[n])
        g = flops[n] / 1e9
        layers[n] = {"ms": w * 1e3, "cpu_ms": c * 1e3, "gflop": g, "over_matmul": g / w / rate_w,
                     "over_matmul_cpu": g / max(c, 1e-9) / rate_c}
    tw, tc = statistics.median(total_w), statistics.median(total_c)
    in_layers_w = sum(v["ms"] for v in layers.values()) / 1e3
    in_layers_c = sum(v["cpu_ms"] for v in layers.values()) / 1e3
    gflop = sum(flops.values()) / 1e9
    return {
        "implementation": getattr(p.runner, "implementation", None),
        "matmul_gflops": rate_w, "matmul_gflops_cpu": rate_c,
        "call_ms": tw * 1e3, "call_cpu_ms": tc * 1e3, "gflop": gflop,
        "over_matmul": gflop / tw / rate_w, "over_matmul_cpu": gflop / max(tc, 1e-9) / rate_c,
        "layers": layers,
        "other": {"ms": (tw - in_layers_w) * 1e3, "cpu_ms": (tc - in_layers_c) * 1e3,
                  "what": "ReLUs, concatenations, heads, layout and dtype conversions"},
    }


def exact_v1(p: ApolloLOP) -> ApolloLOP:
    """``p`` (an exact-mode pipeline) with the exact implementation before issue 34 (NCHW, version 1), the one
    older bundles name: its runner is swapped, everything else is shared."""
    import copy

    from lidarmt.lidar.perception.apollo.network import CnnRunner

    q = copy.copy(p)
    q.runner = CnnRunner(p.network, mode="exact", threads=p.config.threads, device=p.config.device, exact_version=1)
    return q


#: ONEDNN_MAX_CPU_ISA cap -> the MKL_ENABLE_INSTRUCTIONS that holds torch's matmul (MKL) at the same level
MKL_CAPS = {"AVX2": "AVX2", "AVX512_CORE": "AVX512", "SSE41": "SSE4_2"}


def cnn_section(pipes: dict[str, ApolloLOP], features: np.ndarray, flops: int, repeat: int) -> dict:
    """The CNN alone under this process's ISA: each mode's rate over the matmul (pairs, wall and CPU time) and
    the per-layer split of ``exact`` and ``exact-v1``."""
    out: dict = {"machine": _machine.describe(), "threads": torch.get_num_threads(),
                 "mkl_cap": os.environ.get("MKL_ENABLE_INSTRUCTIONS") or None, "modes": {}, "layers": {}}
    for m, p in pipes.items():
        if p.runner.precision in _machine.matmul_precisions():
            out["modes"][m] = paired_cnn_rate(p, features, flops, repeat)
    for m in ("exact", "exact-v1"):
        if m in pipes:
            out["layers"][m] = layer_profile(pipes[m], features, repeat)
    out["loadavg_end"] = _machine.load_average()
    return out


def isa_child(setting: str, args) -> dict:
    """:func:`cnn_section` in a fresh process with oneDNN and MKL capped at ``setting`` (``default``: no cap)."""
    import subprocess
    import tempfile

    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                                                            "MKL_ENABLE_INSTRUCTIONS")}
    if setting != "default":
        env["ONEDNN_MAX_CPU_ISA"] = setting
        if setting in MKL_CAPS:
            env["MKL_ENABLE_INSTRUCTIONS"] = MKL_CAPS[setting]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cnn.json"
        cmd = [sys.executable, __file__, "--cnn-only", "--frames", str(args.frames), "--repeat", str(args.repeat),
               "--grid", str(args.grid), "--device", "cpu", "--heap", args.heap, "--out", str(out)] \
            + (["--synthetic"] if args.synthetic else [])
        subprocess.run(cmd, env=env, check=True)
        return json.loads(out.read_text())


def isa_allowed(setting: str) -> bool:
    """Whether a cap is at or below this CPU's own ISA (a cap above it would measure nothing new)."""
    if setting == "default":
        return True
    cap = _machine.ONEDNN_CAPS.get(setting.upper())
    if cap is None:
        raise SystemExit(f"--isa: unknown ONEDNN_MAX_CPU_ISA value {setting!r} (e.g. AVX2, AVX512_CORE)")
    return _machine.ISAS.index(cap) >= _machine.ISAS.index(_machine.cpu_isa())


def print_cnn(sec: dict, label: str) -> None:
    m = sec["machine"]
    print(f"# CNN alone, {label}: kernels {m['isa']}{' (caps ' + str(m.get('isa_caps')) + ', MKL ' + str(sec['mkl_cap']) + ')' if m.get('isa_caps') else ''}, "
          f"{sec['threads']} thread(s), load {m['loadavg']} -> {sec['loadavg_end']}")  # fmt: skip
    for mode, r in sec["modes"].items():
        print(f"#   {mode:<12} {r['implementation'] or '':<12} {r['cnn_s_median'] * 1e3:8.0f} ms  "
              f"/matmul {r['cnn_over_matmul_median']:.2f} (wall), {r['cnn_over_matmul_cpu_median']:.2f} (CPU time); "
              f"matmul {r['matmul_gflops_median']:.0f} GFLOP/s")  # fmt: skip
    lay = sec["layers"]
    if {"exact", "exact-v1"} <= set(lay):
        v1, v2 = lay["exact-v1"], lay["exact"]
        print(f"#   {'layer':<11}{'GFLOP':>7}{'v1 ms':>9}{'v1 /mm':>8}{'v2 ms':>9}{'v2 /mm':>8}   (CPU-time medians)")
        for n, r in v2["layers"].items():
            o = v1["layers"][n]
            print(f"#   {n:<11}{r['gflop']:>7.2f}{o['cpu_ms']:>9.1f}{o['over_matmul_cpu']:>8.2f}{r['cpu_ms']:>9.1f}"
                  f"{r['over_matmul_cpu']:>8.2f}")  # fmt: skip
        print(f"#   {'other':<11}{'':>7}{v1['other']['cpu_ms']:>9.1f}{'':>8}{v2['other']['cpu_ms']:>9.1f}")
        print(f"#   {'call':<11}{v2['gflop']:>7.2f}{v1['call_cpu_ms']:>9.1f}{v1['over_matmul_cpu']:>8.2f}"
              f"{v2['call_cpu_ms']:>9.1f}{v2['over_matmul_cpu']:>8.2f}")  # fmt: skip


def calibrated_random_network(grid: int, frame: Frame, spread: float = 2.0):
    """Random weights (seed 0) whose category and confidence outputs are rescaled like a trained network's: on
    ``frame``'s non-empty cells their logits get median 0 and standard deviation ``spread`` (the output layer's
    rows for those two channels are scaled, the biases shifted). Half of the non-empty cells are then objects
    and the logits spread over the thresholds, so the fast-vs-exact agreement (flips, counts) and the cost of
    the clustering stages mean something before trained weights exist. (A raw random network's outputs are
    almost constant: every cell would sit at the threshold.)"""
    from lidarmt.lidar.perception.apollo.features import compute_features
    from lidarmt.lidar.perception.apollo.network import build_network

    net = build_network(grid, seed=0).eval()
    feats = compute_features(frame.points, grid=grid)
    nonempty = torch.from_numpy(feats[7] > 0)
    with torch.no_grad():
        raw = net.forward_raw(torch.from_numpy(feats)[None])[0]
        for ch in (0, 3):
            v = raw[ch][nonempty]
            w = net.deconv0.weight[:, ch]  # ConvTranspose2d weight: (in, out, kh, kw)
            b = net.deconv0.bias[ch]
            scale = spread / float(v.std())
            # logit' = scale * (logit - b) + b' with median(logit') = 0
            net.deconv0.weight[:, ch] = w * scale
            net.deconv0.bias[ch] = -scale * (float(v.median()) - float(b))
    return net


def stress_network(grid: int):
    """A network whose outputs make every non-empty cell an object and its own centre (confident, tall,
    'car'): the most obstacles the non-CNN stages can be given on a frame (an upper bound of their cost)."""
    from lidarmt.lidar.perception.apollo.network import build_network

    net = build_network(grid, seed=0)
    with torch.no_grad():
        net.deconv0.weight.zero_()
        bias = torch.zeros(12)
        bias[0], bias[3], bias[11] = 10.0, 3.0, 10.0
        bias[4:9] = -5.0
        bias[5] = 5.0
        net.deconv0.bias.copy_(bias)
    return net


def time_pipeline(p: ApolloLOP, frames, repeat: int) -> dict[str, float]:
    per: dict[str, list[float]] = {k: [] for k in STAGES}
    p.detect(*frames[0])  # warm-up (numba compile cache, oneDNN primitives, torch.compile)
    for _ in range(repeat):
        for f, roi in frames:
            t: dict[str, float] = {}
            t0 = time.perf_counter()
            p.detect(f, roi, timings=t)
            t["total"] = time.perf_counter() - t0
            for k in STAGES:
                per[k].append(t.get(k, 0.0))
    return {k: statistics.median(v) for k, v in per.items()}


def agreement(exact: ApolloLOP, fast: ApolloLOP, frames) -> dict:
    diffs: dict[str, float] = {}
    flips_all, flips_ne, counts_equal, dcount = [], [], 0, []
    for f, roi in frames:
        a = exact.stages(f, roi)
        b = fast.stages(f, roi)
        if a.heads is None or b.heads is None:
            continue
        for k in a.heads:
            diffs[k] = max(diffs.get(k, 0.0), float(np.abs(a.heads[k] - b.heads[k]).max()))
        oa = a.heads["category_score"] >= 0.5
        ob = b.heads["category_score"] >= 0.5
        ne = a.features[7] > 0
        flips_all.append(float((oa != ob).mean()))
        flips_ne.append(float((oa != ob)[ne].mean()) if ne.any() else 0.0)
        counts_equal += len(a.obstacles) == len(b.obstacles)
        dcount.append(abs(len(a.obstacles) - len(b.obstacles)))
    return {
        "max_abs_diff": diffs,
        "objectness_flip_fraction_all_cells": statistics.mean(flips_all) if flips_all else None,
        "objectness_flip_fraction_nonempty_cells": statistics.mean(flips_ne) if flips_ne else None,
        "frames_with_equal_obstacle_count": counts_equal,
        "frames": len(frames),
        "mean_abs_obstacle_count_difference": statistics.mean(dcount) if dcount else None,
    }


# ------------------------------------------------------------------------------------------ GPU


def gpu_matmul_tflops(dtype: torch.dtype, device: torch.device, size: int = 8192, repeat: int = 10) -> float:
    """A ``size``^2 matmul's rate on the GPU (TFLOP/s, best of ``repeat``, CUDA events); fp32 with TF32 off, so
    that it is the peak an fp32 (exact mode) network can be compared with."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        best = float("inf")
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1000)
        return 2 * size**3 / best / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def gpu_cnn_rate(p: ApolloLOP, features: np.ndarray, flops: int, *, batch: int, repeat: int) -> dict:
    """The CNN alone on the GPU: the forward pass timed with CUDA events on an input already on the device
    (batch 1 and ``batch``), and the whole call from NumPy to NumPy (upload, forward, download) at batch 1."""
    runner = p.runner
    dev = runner.device  # the input goes up once, outside the timed part
    out: dict = {}
    for b in sorted({1, batch}):
        x = runner.prepare(torch.from_numpy(np.stack([features] * b)).to(dev))
        for _ in range(3):
            runner.forward_prepared(x)
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            runner.forward_prepared(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        med = statistics.median(times)
        out[f"batch{b}"] = {"forward_s_median": med, "frames_per_s": b / med, "tflops": b * flops / med / 1e12}
    runner(features)
    calls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        runner(features)
        calls.append(time.perf_counter() - t0)
    out["numpy_to_numpy_s_median"] = statistics.median(calls)
    return out


def gpu_section(args, frames, base: ApolloConfig, net, flops: int, cpu_exact: ApolloLOP | None) -> dict:
    device = torch.device(resolve_device(args.device))
    name = torch.cuda.get_device_name(device)
    half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    half_name = "bf16" if half == torch.bfloat16 else "fp16"
    peaks = {"fp32": gpu_matmul_tflops(torch.float32, device), half_name: gpu_matmul_tflops(half, device)}
    modes = {"exact": base.replace(device=str(device)), "fast": base.replace(mode="fast", device=str(device))}
    pipes = {m: (ApolloLOP(c) if net is None else ApolloLOP(c, network=net)) for m, c in modes.items()}
    feats0 = pipes["exact"].features(frames[0][0], frames[0][1].indices(frames[0][0])).copy()
    res: dict = {"device": name, "matmul_8192_tflops": peaks, "modes": {}}
    for m, p in pipes.items():
        t = time_pipeline(p, frames, args.repeat)
        cnn = gpu_cnn_rate(p, feats0, flops, batch=args.gpu_batch, repeat=max(args.repeat, 10))
        peak = peaks[p.runner.precision]
        res["modes"][m] = {
            "precision": p.runner.precision,
            "median_s": t,
            "detects_per_s": 1 / t["total"],
            "cnn": cnn,
            "cnn_over_matmul": {k: v["tflops"] / peak for k, v in cnn.items() if k.startswith("batch")},
            "obstacles_mean": float(np.mean([len(p.detect(f, r)) for f, r in frames])),
        }
    if cpu_exact is not None:
        g = pipes["exact"]
        diffs, same = 0.0, 0
        for f, roi in frames:
            a, b = cpu_exact.stages(f, roi), g.stages(f, roi)
            if a.heads is not None and b.heads is not None:
                diffs = max(diffs, max(float(np.abs(a.heads[k] - b.heads[k]).max()) for k in a.heads))
            same += len(a.obstacles) == len(b.obstacles)
        res["agreement_gpu_exact_vs_cpu_exact"] = {"max_abs_diff": diffs, "frames_with_equal_obstacle_count": same,
                                                   "frames": len(frames)}
    replay = [pipes["exact"].runner(feats0) for _ in range(2)]
    res["exact_replays_bit_for_bit"] = all(np.array_equal(replay[0][k], replay[1][k]) for k in replay[0])
    return res


def print_gpu(res: dict, batch: int) -> None:
    pk = res["matmul_8192_tflops"]
    print(f"# GPU {res['device']}: matmul 8192^2 " + ", ".join(f"{k} {v:.1f} TFLOP/s" for k, v in pk.items()))
    print(f"{'mode':<14}{'prec':<6}" + "".join(f"{s:>10}" for s in STAGES) + f"{'det/s':>8}"
          + f"{'b1 TF/s':>9}{'/matmul':>9}{f'b{batch} TF/s':>10}{'/matmul':>9}")  # fmt: skip
    for m, r in res["modes"].items():
        t, c, o = r["median_s"], r["cnn"], r["cnn_over_matmul"]
        print(f"{m:<14}{r['precision']:<6}" + "".join(f"{t[s] * 1000:>10.2f}" for s in STAGES)
              + f"{r['detects_per_s']:>8.1f}{c['batch1']['tflops']:>9.2f}{o['batch1']:>9.3f}"
              + f"{c[f'batch{batch}']['tflops']:>10.2f}{o[f'batch{batch}']:>9.3f}")  # fmt: skip
    if "agreement_gpu_exact_vs_cpu_exact" in res:
        ag = res["agreement_gpu_exact_vs_cpu_exact"]
        print(f"# GPU exact vs CPU exact: max |diff| {ag['max_abs_diff']:.3g}, obstacle counts equal on "
              f"{ag['frames_with_equal_obstacle_count']}/{ag['frames']} frames")  # fmt: skip
    print(f"# GPU exact replays bit for bit: {res['exact_replays_bit_for_bit']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--grid", type=int, default=640)
    ap.add_argument("--compile", action="store_true", help="also time fast mode with torch.compile")
    ap.add_argument(
        "--synthetic", action="store_true", help="use synthetic frames even when KITTI is present"
    )
    ap.add_argument("--device", default="auto", help="auto (also time the GPU when CUDA is there), cpu, cuda")
    ap.add_argument("--gpu-batch", type=int, default=8, help="GPU: grids per batched CNN pass")
    ap.add_argument("--skip-cpu", action="store_true", help="GPU only: skip the CPU timings")
    ap.add_argument("--isa", default="", help="also time the CNN alone in a child process per ONEDNN_MAX_CPU_ISA "
                    "setting, comma-separated: default,AVX512_CORE,AVX2 (MKL capped alike)")
    ap.add_argument("--cnn-only", action="store_true", help="only the CNN section (what --isa's children run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "perception.json")
    add_heap_option(ap)
    args = ap.parse_args()
    apply_heap(args)  # before anything is allocated; the --isa children are given the same --heap
    isas = [x.strip() for x in args.isa.split(",") if x.strip()]
    for x in isas:
        isa_allowed(x)  # an unknown name stops here, before anything is timed
    from lidarmt.errors import UserError

    try:
        use_gpu = resolve_device(args.device, flag="--device").startswith("cuda")
    except UserError as err:
        ap.error(str(err))
    if args.skip_cpu and not use_gpu:
        ap.error("--skip-cpu needs a CUDA GPU (--device cuda or auto with one)")

    frames = (
        synthetic_frames(args.frames) if args.synthetic or not KITTI.is_dir() else kitti_frames(args.frames)
    )
    source = "synthetic" if args.synthetic or not KITTI.is_dir() else "kitti"
    base = ApolloConfig(grid=args.grid)
    shipped = base.weights_path().is_file()
    modes = {"exact": base, "fast": base.replace(mode="fast")}
    if args.compile and not args.cnn_only:
        modes["fast+compile"] = base.replace(mode="fast", compile=True)
    net = None if shipped else calibrated_random_network(args.grid, frames[0][0])
    if shipped:
        pipes = {m: ApolloLOP(c) for m, c in modes.items()}
    else:  # one random network shared by every mode, so that exact and fast see the same weights
        pipes = {m: ApolloLOP(c, network=net) for m, c in modes.items()}
    pipes = {"exact": pipes["exact"], "exact-v1": exact_v1(pipes["exact"]), **pipes}
    flops = conv_flops(args.grid)
    if args.cnn_only:
        feats0 = pipes["exact"].features(frames[0][0], frames[0][1].indices(frames[0][0])).copy()
        sec = cnn_section(pipes, feats0, flops, max(args.repeat, 3))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(sec, indent=2) + "\n")
        return
    if args.skip_cpu:
        res = gpu_section(args, frames, base, net, flops, None)
        print(f"# Apollo perception on the GPU, grid {args.grid}, {len(frames)} {source} frames, "
              f"CNN = {flops / 1e9:.1f} GFLOP")
        print_gpu(res, args.gpu_batch)
        out = args.out.with_name(args.out.stem + "-gpu.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        from lidarmt._atomic import atomic_write_text

        atomic_write_text(out, json.dumps(with_machine({"grid": args.grid, "source": source, "gpu": res}), indent=2) + "\n")
        print(f"# written {out}")
        return

    threads = torch.get_num_threads()
    peaks = cpu_peaks()
    results: dict = {
        "machine": {"platform": platform.platform(), "torch": torch.__version__, "threads": threads,
                    "cpu_bf16": cpu_bf16_support() or "none",
                    "cpu_capability": str(torch.backends.cpu.get_cpu_capability()), **_machine.describe()},
        "data": {"source": source, "frames": len(frames), "points_mean": float(np.mean([len(f) for f, _ in frames])),
                 "roi_points_mean": float(np.mean([len(r.indices(f)) for f, r in frames]))},
        "weights": "shipped" if shipped else "random, calibrated (no shipped weights)",
        "grid": args.grid,
        "cnn_gflop": flops / 1e9,
        "matmul_4096_gflops": peaks,
        "modes": {},
    }  # fmt: skip
    feats0 = pipes["exact"].features(frames[0][0], frames[0][1].indices(frames[0][0])).copy()
    for m, p in pipes.items():
        t = time_pipeline(p, frames, args.repeat)
        results["modes"][m] = {
            "precision": p.runner.precision,
            "median_s": t,
            "cnn_gflops": flops / t["cnn"] / 1e9,
            "paired_with_matmul": paired_cnn_rate(p, feats0, flops, max(args.repeat, 3)),
            "non_cnn_s": t["total"] - t["cnn"],
            "obstacles_mean": float(np.mean([len(p.detect(f, r)) for f, r in frames])),
        }
    stress = ApolloLOP(base.replace(mode="fast"), network=stress_network(args.grid))
    results["non_cnn_stress"] = {
        "what": "fast mode, a network making every non-empty cell an object: upper bound of the non-CNN cost",
        "median_s": time_pipeline(stress, frames, args.repeat),
        "obstacles_mean": float(np.mean([len(stress.detect(f, r)) for f, r in frames])),
    }
    results["agreement_fast_vs_exact"] = agreement(pipes["exact"], pipes["fast"], frames)
    results["agreement_exact_vs_exact_v1"] = agreement(pipes["exact-v1"], pipes["exact"], frames)
    results["cnn"] = cnn_section(pipes, feats0, flops, max(args.repeat, 3))
    results["isa_runs"] = {}
    for x in isas:
        if isa_allowed(x):
            results["isa_runs"][x] = isa_child(x, args)
        else:
            results["isa_runs"][x] = {"skipped": f"the CPU's own ISA is {_machine.cpu_isa()}"}

    d = results["data"]
    print(f"# Apollo perception, grid {args.grid}, {len(frames)} {source} frames (~{d['points_mean']:.0f} points, "
          f"~{d['roi_points_mean']:.0f} in the ROI), weights: {results['weights']}, {threads} threads, "
          f"CPU bf16: {results['machine']['cpu_bf16']}")  # fmt: skip
    print(f"# CPU {results['machine']['cpu']}: {results['machine']['isa']}, bf16 {results['machine']['bf16']}; "
          f"load {results['machine']['loadavg']}")  # fmt: skip
    print("# matmul 4096^2 at start: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
          + f"; CNN = {flops / 1e9:.1f} GFLOP")  # fmt: skip
    print(f"{'mode':<14}{'prec':<6}" + "".join(f"{s:>10}" for s in STAGES) + f"{'CNN GF/s':>10}{'/matmul':>9}"
          + "   (ms, medians; /matmul: CNN rate over a matmul's in the CNN's precision timed just before it, "
          "median of pairs)")  # fmt: skip
    for m, r in results["modes"].items():
        t, pr = r["median_s"], r["paired_with_matmul"]
        print(f"{m:<14}{r['precision']:<6}" + "".join(f"{t[s] * 1000:>10.1f}" for s in STAGES)
              + f"{pr['cnn_gflops_median']:>10.0f}{pr['cnn_over_matmul_median']:>9.2f}")  # fmt: skip
    st = results["non_cnn_stress"]
    print(f"{'stress (fast)':<14}{stress.runner.precision:<6}" + "".join(f"{st['median_s'][s] * 1000:>10.1f}" for s in STAGES)
          + f"   <- every non-empty cell an object: {st['obstacles_mean']:.0f} obstacles/frame")  # fmt: skip
    ag = results["agreement_fast_vs_exact"]
    print("# fast vs exact: max |diff| " + ", ".join(f"{k} {v:.3g}" for k, v in ag["max_abs_diff"].items()))
    print(f"# objectness flips: {ag['objectness_flip_fraction_all_cells']:.2e} of all cells, "
          f"{ag['objectness_flip_fraction_nonempty_cells']:.2e} of non-empty cells; obstacle counts equal on "
          f"{ag['frames_with_equal_obstacle_count']}/{ag['frames']} frames")  # fmt: skip
    ag = results["agreement_exact_vs_exact_v1"]
    print("# exact (v2) vs exact-v1: max |diff| " + ", ".join(f"{k} {v:.3g}" for k, v in ag["max_abs_diff"].items())
          + f"; obstacle counts equal on {ag['frames_with_equal_obstacle_count']}/{ag['frames']} frames")
    print_cnn(results["cnn"], "this process")
    for x, sec in results["isa_runs"].items():
        if "skipped" in sec:
            print(f"# --isa {x}: skipped ({sec['skipped']})")
        else:
            print_cnn(sec, f"--isa {x}")
    if use_gpu:
        results["gpu"] = gpu_section(args, frames, base, net, flops, pipes["exact"])
        print_gpu(results["gpu"], args.gpu_batch)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from lidarmt._atomic import atomic_write_text

    atomic_write_text(args.out, json.dumps(results, indent=2) + "\n")
    print(f"# written {args.out}")


if __name__ == "__main__":
    main()
