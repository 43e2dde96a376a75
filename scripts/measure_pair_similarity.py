"""Measure lidarmt.camera.pairs.scene_similarity: same scene under each camera transformation vs different scenes.

Seeds: every 137th Udacity frame of ../shared/data (17 frames). "Same scene": a seed and its transformed image at
the strongest setting of each transformation; "different scenes": every two seeds. Prints min and mean per
transformation and min / mean / p95 / max over the different scenes, against SAME_SCENE_MIN.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/measure_pair_similarity.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    from lidarmt.camera.pairs import SAME_SCENE_MIN, scene_similarity
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.registry import select

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    a = ap.parse_args()
    path = Path(a.data) / "udacity"
    if not path.is_dir():
        sys.exit(f"{path}: not there (the shared real data)")
    src = open_images(str(path))
    idx = list(range(0, len(src), 137))
    same: dict[str, list[float]] = {}
    diff = []
    for i in idx:
        f = src[i]
        for t in select("all"):
            out = np.asarray(t.apply(f.image, dict(t.grid[-1]), seed=1))
            same.setdefault(t.name, []).append(scene_similarity(f.image, out))
        diff += [scene_similarity(f.image, src[j].image) for j in idx if j != i]
    print(f"threshold SAME_SCENE_MIN = {SAME_SCENE_MIN}; {len(idx)} seeds")
    for k, v in same.items():
        print(f"  same scene, {k:>12} (strongest setting): min {min(v):.3f} mean {np.mean(v):.3f}; "
              f"below the threshold {sum(x < SAME_SCENE_MIN for x in v)} of {len(v)}")
    d = np.array(diff)
    print(f"  different scenes ({len(d)} pairs): min {d.min():.3f} mean {d.mean():.3f} p95 "
          f"{np.percentile(d, 95):.3f} max {d.max():.3f}; at or above the threshold {int((d >= SAME_SCENE_MIN).sum())}")


if __name__ == "__main__":
    main()
