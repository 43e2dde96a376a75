"""Camera campaign throughput against model-only throughput, measured in the same run.

For each steering model: (1) model-only: ``predict`` on batches of already transformed images (the campaign's
batch size), images/s; (2) the campaign: ``run_campaign`` in this process over the same seed frames with every
transformation (DeepTest's 70 simple settings, 7 weathers × 4 intensities, the mirror), pairs/s, where each pair
is one transformed image judged (the seed predictions, the transformations, the journal and the bookkeeping
included). The ratio campaign / model-only says what everything around the model costs (target ≥ 0.8 when the
model dominates; for tiny models the transformations dominate and the ratio says so). Also reported: the
transformations' own cost per image and the engine's bookkeeping per pair.

Usage: ``python benchmarks/bench_camera_fuzz.py [--frames 12] [--models dave2,...]`` (Udacity frames from
../shared/data when present, else the demo bag's camera, else a synthetic folder). Writes
``benchmarks/results/camera_fuzz.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs, transform_seed  # noqa: E402
from lidarmt.camera.models.registry import available, get_model  # noqa: E402
from lidarmt.camera.sources.factory import open_images  # noqa: E402
from lidarmt.camera.transforms.registry import select  # noqa: E402
from lidarmt.fuzz.engine import environment, run_campaign, select_items  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--models", default="")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

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
        rows = []
        for name in models:
            model = get_model(name)
            h = int(model.input_spec.history)
            if h:
                x = np.repeat(batch[:, None], h + 1, axis=1)
            else:
                x = batch
            model.predict(x[:64])  # warm-up
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for i in range(0, len(x), 64):
                    model.predict(x[i:i + 64])
                best = min(best, time.perf_counter() - t0)
            model_ips = len(x) / best
            cfg = CameraCampaignConfig(images, (ModelRef(name),), transform_refs(transforms), frames)
            out = tmp / f"run-{len(rows)}"
            camp = float("inf")
            for _ in range(args.repeats):
                shutil.rmtree(out, ignore_errors=True)
                r = run_campaign(cfg, out)
                camp = min(camp, r.elapsed)
            pairs = r.ran
            camp_pps = pairs / camp
            rows.append({"model": Path(name).stem if name.endswith(".h5") else name, "history": h,
                         "model_only_images_per_s": model_ips, "campaign_pairs_per_s": camp_pps,
                         "ratio": camp_pps / model_ips, "pairs": pairs,
                         "overhead_ms_per_pair": 1e3 * (1 / camp_pps - 1 / model_ips)})
        head = f"{'model':<26} {'model-only img/s':>17} {'campaign pairs/s':>17} {'ratio':>6} {'overhead ms/pair':>17}"
        print(f"{len(frames)} seed frames × {len(made) // len(frames)} transformed images each, source {images}")
        print(f"transformations alone: {transform_ms:.2f} ms per 320x240 image (mean over every setting)")
        print(head)
        for r in rows:
            print(f"{r['model']:<26} {r['model_only_images_per_s']:>17.1f} {r['campaign_pairs_per_s']:>17.1f} "
                  f"{r['ratio']:>6.2f} {r['overhead_ms_per_pair']:>17.2f}")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"source": images, "frames": len(frames), "per_frame": len(made) // len(frames),
                                       "transform_ms_per_image": transform_ms, "torch_threads": torch.get_num_threads(),
                                       "models": rows, "environment": environment()}, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
