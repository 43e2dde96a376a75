"""Write docs/images/transforms.png: every image transformation at three strengths on one real Udacity frame.

Usage::

    .venv/bin/python scripts/make_transform_sheet.py
        [--frame ../shared/data/udacity/center/1479425441182877835.jpg]
        [--out docs/images/transforms.png] [--seed 0] [--transforms all]

The frame comes from the Udacity self-driving challenge 2 test drive as shared by DeepXplore (MIT licence; see
../shared/data/README.md). The sheet itself is :func:`lidarmt.camera.transforms.sheet.transform_sheet`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_FRAME = ROOT.parent / "shared" / "data" / "udacity" / "center" / "1479425441182877835.jpg"


def main() -> None:
    import cv2

    from lidarmt.camera.transforms import select
    from lidarmt.camera.transforms.sheet import transform_sheet

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frame", type=Path, default=DEFAULT_FRAME)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "transforms.png")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transforms", default="all")
    args = ap.parse_args()
    bgr = cv2.imread(str(args.frame), cv2.IMREAD_COLOR)
    if bgr is None:
        sys.exit(f"cannot read {args.frame}: give a JPEG/PNG frame with --frame")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    title = f"lidarmt image transformations on a Udacity frame ({args.frame.name}), seed {args.seed}"
    out = transform_sheet(rgb, select(args.transforms), args.out, seed=args.seed, title=title)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
