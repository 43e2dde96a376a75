"""Coverage overhead as a ratio of plain prediction, measured in the same run (target ≤ 1.5×).

For each steering model, over the same frames already decoded in memory (1,500 Udacity frames by default, the
issue's number): (1) plain ``model.predict`` in batches of 64; (2) profiling: the same forward passes with the
coverage hooks on (:class:`lidarmt.coverage.NeuronProbe`) and the per-neuron min/max/mean/std accumulated
(``lidarmt camera profile``'s work without the decoding); (3) tracking: :meth:`CoverageTracker.update` per batch
with all five criteria (NC, KMNC k = 1000, NBC, SNAC, TKNC) against the shipped profile (what a search pays per
mutant batch). The three are timed batch by batch, back to back (a load spike on the shared machine hits all
three alike), ``--repeats`` passes, the minimum total of each kept; the ratios (2)/(1) and (3)/(1) are the
overheads.

Usage: ``python benchmarks/bench_coverage.py [--frames 1500] [--models dave-orig,...] [--repeats 2]``.
Writes ``benchmarks/results/coverage.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.camera.models.registry import get_model  # noqa: E402
from lidarmt.camera.models.zoo import available  # noqa: E402
from lidarmt.coverage import CoverageTracker, NeuronProbe, ProfileAccumulator  # noqa: E402
from lidarmt.coverage.camera import load_profile_for  # noqa: E402
from lidarmt.engine.campaign import environment  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "coverage.json"
UDACITY = ROOT.parent / "shared" / "data" / "udacity"
BATCH = 64


def _frames(count: int) -> tuple[np.ndarray, str]:
    if UDACITY.is_dir():
        from lidarmt.camera.sources.factory import open_images

        with open_images(UDACITY) as src:
            n = min(count, len(src))
            return np.stack([src[i].image for i in range(n)]), f"{UDACITY} (first {n} frames)"
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (count, 240, 320, 3), dtype=np.uint8), "synthetic noise frames (no shared data)"


def _timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def _pass(model, frames: np.ndarray, profile) -> tuple[float, float, float | None, dict[str, float]]:
    """One pass over the frames, batch by batch: plain prediction, profiling and tracking of each batch timed
    back to back, so a load spike on the shared machine hits the three alike."""
    probe = NeuronProbe(model.module)
    acc = ProfileAccumulator()
    tracker = CoverageTracker(NeuronProbe(model.module), run=model.predict, profile=profile) if profile else None
    plain = prof = track = 0.0
    for i in range(0, len(frames), BATCH):
        chunk = frames[i:i + BATCH]
        plain += _timed(model.predict, chunk)[0]
        dt, (_, acts) = _timed(probe.capture, lambda c=chunk: model.predict(c), len(chunk))
        prof += dt + _timed(acc.add, acts)[0]
        if tracker is not None:
            track += _timed(tracker.update, chunk)[0]
    prof += _timed(acc.result, probe.names, probe.sizes or [])[0]
    return plain, prof, (track if tracker is not None else None), (tracker.coverage() if tracker else {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1500)
    ap.add_argument("--models", default=",".join(n for n in available() if n != "chauffeur"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import torch

    frames, what = _frames(args.frames)
    rows = []
    print(f"{len(frames)} frames: {what}; torch threads {torch.get_num_threads()}")
    print(f"{'model':<14} {'neurons':>7} {'predict s':>9} {'fps':>7} {'profile s':>9} {'ratio':>6} "
          f"{'track s':>8} {'ratio':>6}  coverage after the frames")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        model = get_model(name)
        profile = load_profile_for(name)
        model.predict(frames[:BATCH])  # warm-up
        plain, prof, track = [], [], []
        cov: dict[str, float] = {}
        for _ in range(args.repeats):
            a, b, c, cov = _pass(model, frames, profile)
            plain.append(a)
            prof.append(b)
            if c is not None:
                track.append(c)
        p, q = min(plain), min(prof)
        r = min(track) if track else None
        neurons = profile.size if profile is not None else None
        row = {"model": name, "frames": len(frames), "neurons": neurons, "predict_s": round(p, 3),
               "predict_fps": round(len(frames) / p, 1), "profile_s": round(q, 3),
               "profile_ratio": round(q / p, 3), "track_s": None if r is None else round(r, 3),
               "track_ratio": None if r is None else round(r / p, 3),
               "coverage": {k: round(v, 4) for k, v in cov.items()}, "repeats": args.repeats,
               "all_predict_s": [round(v, 3) for v in plain], "all_profile_s": [round(v, 3) for v in prof],
               "all_track_s": [round(v, 3) for v in track]}
        rows.append(row)
        covs = " ".join(f"{k}={v:.3f}" for k, v in row["coverage"].items())
        print(f"{name:<14} {neurons or '-':>7} {p:9.2f} {len(frames) / p:7.1f} {q:9.2f} {q / p:6.2f} "
              f"{'-' if r is None else f'{r:8.2f}':>8} {'-' if r is None else f'{r / p:6.2f}':>6}  {covs}")
    out = {"benchmark": "coverage", "target_ratio": 1.5, "frames": len(frames), "source": what, "batch": BATCH,
           "rows": rows, "environment": environment()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(with_machine(out), indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
