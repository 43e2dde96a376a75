"""Where a camera campaign's own thread spends its time: one warm ``run_campaign`` under cProfile.

The campaign's thread judges the pairs (seed predictions, batches, checks, records); the prefetch pool's threads
make the transformed images (:mod:`lidarmt.camera.prefetch`). cProfile sees the calling thread only, which is
what is wanted here: time this thread spends waiting for the pool shows up as ``Future.result`` / lock waits,
time it spends on its own work under the functions that do it. The campaign is run once unprofiled first (the
numba kernels load, CUDA starts, the model's first batch), then once profiled, on the same seed frames as
``bench_camera_fuzz.py``.

Usage: ``python benchmarks/profile_camera_campaign.py --model dave2 [--frames 30] [--device cpu|cuda]
[--top 30] [--out profile.txt]`` (Udacity frames from ../shared/data when present, else the demo bag's camera,
else a synthetic folder). Prints, and writes to ``--out``, the pairs/s of both runs and the profiled run's
functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_camera_fuzz import _source  # noqa: E402

from lidarmt import _machine  # noqa: E402
from lidarmt.camera import prefetch  # noqa: E402
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs  # noqa: E402
from lidarmt.camera.sources.factory import open_images  # noqa: E402
from lidarmt.camera.transforms.batched import CURRENT  # noqa: E402
from lidarmt.camera.transforms.registry import select  # noqa: E402
from lidarmt.engine.campaign import run_campaign, select_items  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dave2")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--device", default="cpu", help="the model's device: cpu or cuda")
    ap.add_argument("--top", type=int, default=30, help="functions listed per ordering")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="profile-camera-"))
    try:
        images = _source(tmp)
        with open_images(images) as src:
            frames = select_items(len(src), min(args.frames, len(src)), 0, what="images")
        options = {} if args.device == "cpu" else {"device": args.device}
        cfg = CameraCampaignConfig(images, (ModelRef(args.model, options),), transform_refs(select("all")), frames,
                                   transform_impl=CURRENT)
        lines = [f"# {args.model} on {args.device}, {len(frames)} seed frames, {cfg.total} pairs, prefetch threads "
                 f"{prefetch.default_threads()}, machine {_machine.describe()}"]
        warm = run_campaign(cfg, tmp / "warm")
        lines.append(f"unprofiled: {warm.ran / warm.elapsed:.1f} pairs/s ({warm.elapsed:.2f} s)")
        prof = cProfile.Profile()
        prof.enable()
        r = run_campaign(cfg, tmp / "profiled")
        prof.disable()
        lines.append(f"profiled:   {r.ran / r.elapsed:.1f} pairs/s ({r.elapsed:.2f} s, cProfile slows Python code)")
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(args.top)
            lines.append(f"\n## by {key}\n" + buf.getvalue().split("\n\n", 1)[-1].rstrip())
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
