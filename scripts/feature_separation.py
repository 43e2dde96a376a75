"""How well a steering model's trunk tells weather from scenery: the Fréchet distance (``lidarmt.camera.translate.
evaluate``) from clear frames to their procedural night / rain / snow, as a multiple of the distance between two
stretches of the clear drive (the ordinary change of scenery). Measures the choice of ``FEATURE_MODEL``.

    OMP_NUM_THREADS=1 python scripts/feature_separation.py --frames 1760:2200 --other 0:300 dave-dropout dave-orig
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from lidarmt.camera.models import zoo
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.translate.evaluate import FeatureExtractor, feature_distance, procedural

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="shipped single-frame steering models")
    ap.add_argument("--udacity", type=Path, default=ROOT.parent / "shared" / "data" / "udacity")
    ap.add_argument("--frames", default="1760:2200", help="A:B, the stretch put in weather")
    ap.add_argument("--other", default="0:300", help="A:B, the other stretch of the clear drive")
    ap.add_argument("-n", type=int, default=150, help="frames taken from each stretch, evenly spaced")
    a = ap.parse_args(argv)

    def spread(text: str) -> list[int]:
        lo, hi = (int(v) for v in text.split(":", 1))
        return sorted(set(np.linspace(lo, hi - 1, a.n).round().astype(int).tolist()))

    fa_idx, fb_idx = spread(a.frames), spread(a.other)
    with open_images(a.udacity) as src:
        xa = np.stack([src[i].image for i in fa_idx])
        xb = np.stack([src[i].image for i in fb_idx])
    weathers = {w: np.stack([procedural(im, w, 0, i) for i, im in zip(fa_idx, xa, strict=True)])
                for w in ("night", "rain", "snow")}
    print(f"frames {a.frames} ({len(fa_idx)}) against {a.other} ({len(fb_idx)}); procedural weather seed 0")
    for m in a.models:
        fx = FeatureExtractor(m)
        fa = fx(xa)
        base = feature_distance(fa, fx(xb))
        sha = hashlib.sha256(zoo.shipped_weights(m).read_bytes()).hexdigest()[:12]
        print(f"{m} ({sha}): scenery {base:.3g}; " + ", ".join(
            f"{w} {feature_distance(fa, fx(p)) / base:.1f}x" for w, p in weathers.items()), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
