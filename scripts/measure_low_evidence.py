"""Measure the low-evidence thresholds of lidarmt.engine.findings on real frames against their labels.

Runs the built-in Apollo pipeline on the seven KITTI object frames of ../shared/data (ROI: their road labels,
as `lidarmt fuzz --roi labels`) and, with --raw N, on N sweeps of KITTI raw drive 0001 (its tracklets), matches
every obstacle to the labels (lidarmt.lidar.perception.apollo.evaluate.label_lost) and prints, for labelled
objects and unlabelled obstacles (junk), the distribution of points, box height and footprint, and how many of
each the thresholds in lidarmt.engine.findings flag as low evidence.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/measure_low_evidence.py [--raw 10] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def obstacles_of(path: Path, frames: list[int] | None):
    from lidarmt.lidar.perception.apollo.evaluate import label_lost
    from lidarmt.lidar.perception.guard import guarded_detect
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec, build_roi_provider, build_sut, open_source

    rec = open_source(SourceSpec(str(path)))
    rois = build_roi_provider(RoiSpec("labels", 70.0, "auto"))
    sut = build_sut(SutSpec("apollo", {}))
    idx = frames if frames is not None else list(range(len(rec)))
    rows = []
    for i in idx:
        f = rec[i]
        obs = guarded_detect(sut, f, rois.roi_for(f))
        lab = label_lost(f, obs, range(len(obs))) or {}
        for k, o in enumerate(obs):
            kind = (lab.get(k) or {}).get("label", "not known")
            rows.append((kind, len(o.point_indices), float(o.height), float(o.length) * float(o.width)))
        print(f"  {path.name} frame {i}: {len(obs)} obstacles", file=sys.stderr)
    return rows


def main() -> None:
    from lidarmt.engine.findings import (
        LOW_EVIDENCE_MIN_FOOTPRINT_M2,
        LOW_EVIDENCE_MIN_HEIGHT_M,
        LOW_EVIDENCE_MIN_POINTS,
        low_evidence,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--raw", type=int, default=0, help="also this many sweeps of KITTI raw drive 0001 (spread)")
    a = ap.parse_args()
    data = Path(a.data)
    kitti = data / "kitti" / "training"
    if not kitti.is_dir():
        sys.exit(f"{kitti}: not there (the shared real data)")
    rows = obstacles_of(kitti, None)
    if a.raw:
        drive = data / "kitti_raw" / "2011_09_26" / "2011_09_26_drive_0001_sync"
        rows += obstacles_of(drive, sorted({int(v) for v in np.linspace(0, 107, a.raw).round()}))
    print(f"thresholds: points < {LOW_EVIDENCE_MIN_POINTS}, height < {LOW_EVIDENCE_MIN_HEIGHT_M} m, "
          f"footprint < {LOW_EVIDENCE_MIN_FOOTPRINT_M2} m²")
    print(f"{len(rows)} obstacles on {'7 KITTI object frames' + (f' + {a.raw} raw sweeps' if a.raw else '')}")
    for kind in ("labelled", "unlabelled", "outside"):
        sel = [r for r in rows if r[0] == kind]
        if not sel:
            continue
        pts = np.array([r[1] for r in sel])
        h = np.array([r[2] for r in sel])
        fp = np.array([r[3] for r in sel])
        flagged = sum(low_evidence({"points": r[1], "size": [r[3], 1.0, r[2]]}) for r in sel)
        q = (0, 5, 25, 50)
        print(f"{kind:>10}: {len(sel):4d} obstacles; low evidence {flagged} ({100 * flagged / len(sel):.0f} %)")
        print(f"{'':>12}points   min/p5/p25/median {' / '.join(f'{np.percentile(pts, v):.0f}' for v in q)}")
        print(f"{'':>12}height m min/p5/p25/median {' / '.join(f'{np.percentile(h, v):.2f}' for v in q)}")
        print(f"{'':>12}footprint m² min/p5/p25/median {' / '.join(f'{np.percentile(fp, v):.2f}' for v in q)}")
        for name, col, th in (("points", pts, LOW_EVIDENCE_MIN_POINTS), ("height", h, LOW_EVIDENCE_MIN_HEIGHT_M),
                              ("footprint", fp, LOW_EVIDENCE_MIN_FOOTPRINT_M2)):
            print(f"{'':>12}{name} below its threshold: {int(np.sum(col < th))}")


if __name__ == "__main__":
    main()
