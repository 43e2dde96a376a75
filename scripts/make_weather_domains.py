"""Make the unpaired training domains of lidarmt's shipped weather translators.

Domain A is the first ``--train`` frames of a Udacity folder (in time order; the rest are held back for
evaluation). Each weather domain B holds one procedural-weather version of every training frame
(lidarmt.camera.transforms: night, rain, snow, fog), with the intensity drawn uniformly from
[--min-intensity, 1] and every style parameter drawn from the frame's own seed, so the translator sees a
distribution of weathers, not one. Training draws A and B images independently, so the pairs are never seen
as pairs. Images are written at the source resolution as PNG.

    python scripts/make_weather_domains.py --udacity ../shared/data/udacity --out /tmp/domains
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import cv2
import numpy as np


def main(argv: list[str] | None = None) -> int:
    from lidarmt.camera.sources.udacity import UdacitySource
    from lidarmt.camera.transforms import registry

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--udacity", required=True, help="a Udacity folder (center/*.jpg + steering.csv)")
    ap.add_argument("--out", required=True, help="folder to create clear/ and one folder per weather in")
    ap.add_argument("--weathers", default="night,rain,snow,fog")
    ap.add_argument("--train", type=int, default=1200, help="frames used for training (the rest are held back)")
    ap.add_argument("--min-intensity", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=20261124)
    a = ap.parse_args(argv)
    src = UdacitySource(a.udacity)
    n = min(a.train, len(src))
    out = Path(a.out)
    (out / "clear").mkdir(parents=True, exist_ok=True)
    weathers = [w.strip() for w in a.weathers.split(",") if w.strip()]
    for w in weathers:
        (out / w).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for i in range(n):
        img = src[i].image
        cv2.imwrite(str(out / "clear" / f"{i:05d}.png"), img[:, :, ::-1])
        for w in weathers:
            t = registry.get_transform(w)
            intensity = float(rng.uniform(a.min_intensity, 1.0))
            seed = int(rng.integers(0, 2**31 - 1))
            y = t.apply(img, {"intensity": round(intensity, 3)}, seed)
            cv2.imwrite(str(out / w / f"{i:05d}.png"), y[:, :, ::-1])
        if (i + 1) % 200 == 0:
            print(f"{i + 1}/{n} frames", file=sys.stderr, flush=True)
    print(f"wrote {n} frames x (clear + {', '.join(weathers)}) under {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
