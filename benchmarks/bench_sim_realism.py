"""How close are simulated HDL-64E sweeps to real ones? Side-by-side statistics against the 7 KITTI frames.

    .venv/bin/python benchmarks/bench_sim_realism.py [--frames 16] [--kitti ../shared/data/kitti/training]

The simulated frames (16 by default) come from as many towns (seeds 1..N), one sweep each (sweep 10 of a drive), with the
sensor mounted at KITTI's 1.73 m. Statistics: lidarmt.lidar.sim.realism. Prints a table and writes
benchmarks/results/sim_realism.json.
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
from lidarmt.lidar.sim import realism  # noqa: E402


def kitti_frames(path: Path):
    from lidarmt.io import open_recording

    with open_recording(path) as rec:
        return list(rec)


def sim_frames(n: int, seed0: int):
    from lidarmt.lidar.sim.drive import Drive

    out = []
    for i in range(n):
        d = Drive.create(town_seed=seed0 + i, seed=seed0 + i, frames=12, sensor_height=1.73)
        out.append(d.frame(10))
    return out


def _fmt(v, f="{:.3f}"):
    return "-" if v is None else f.format(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kitti", type=Path, default=ROOT.parent / "shared" / "data" / "kitti" / "training")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sim_realism.json")
    args = ap.parse_args(argv)
    if not args.kitti.is_dir():
        print(f"KITTI frames not found at {args.kitti}; pass --kitti", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    real = realism.summarize([realism.frame_stats(f) for f in kitti_frames(args.kitti)])
    sim = realism.summarize([realism.frame_stats(f) for f in sim_frames(args.frames, args.seed)])
    rows = [
        ("points per frame (mean)", _fmt(real["points_mean"], "{:,.0f}"), _fmt(sim["points_mean"], "{:,.0f}")),
        ("points per frame (min..max)", f"{real['points_min']:,}..{real['points_max']:,}",
         f"{sim['points_min']:,}..{sim['points_max']:,}"),
        ("ground fraction", _fmt(real["ground_fraction"]), _fmt(sim["ground_fraction"])),
        ("intensity mean (0..255)", _fmt(real["intensity_mean"], "{:.1f}"), _fmt(sim["intensity_mean"], "{:.1f}")),
    ]
    rows.append(("roadside structure (share, <3 m of road/sidewalk)", _fmt(real.get("roadside_structure")),
                 _fmt(sim.get("roadside_structure"))))
    for name in realism.CLASS_MIX:
        rows.append((f"share of points: {name}", _fmt((real["class_mix"] or {}).get(name)),
                     _fmt((sim["class_mix"] or {}).get(name))))
    for name in realism.SURFACES:
        rows.append((f"median intensity: {name}", _fmt(real["surface_intensity"][name], "{:.0f}"),
                     _fmt(sim["surface_intensity"][name], "{:.0f}")))
    for i, lab in enumerate(("0-10", "10-20", "20-30", "30-50")):
        rows.append((f"road intensity {lab} m", _fmt((real["road_intensity_by_range"] or [None] * 4)[i], "{:.0f}"),
                     _fmt((sim["road_intensity_by_range"] or [None] * 4)[i], "{:.0f}")))
    for i, lab in enumerate(("3-10", "10-20", "20-40")):
        rz, sz = (real["road_z_by_range"] or [None] * 3)[i], (sim["road_z_by_range"] or [None] * 3)[i]

        def zf(v):
            return "-" if v is None else (f"{v['median_z_range'][0]:.2f}..{v['median_z_range'][1]:.2f}; "
                                          f"{v['spread_p90_p10']:.2f}")
        rows.append((f"road z {lab} m (frame medians; p90-p10)", zf(rz), zf(sz)))
    b = realism.RANGE_BINS
    for i in range(len(b) - 1):
        rows.append((f"range {b[i]:g}-{b[i + 1]:g} m", _fmt(real["range_hist"][i]), _fmt(sim["range_hist"][i])))
    ib = realism.INTENSITY_BINS
    for i in range(len(ib) - 1):
        rows.append((f"intensity {ib[i]}-{ib[i + 1] - 1}", _fmt(real["intensity_hist"][i]), _fmt(sim["intensity_hist"][i])))
    for band in realism.CAR_BANDS:
        rc, sc = real["car_points"][band], sim["car_points"][band]
        rows.append((f"points on a car at ~{band} (median; n cars)", f"{_fmt(rc['median'], '{:.0f}')}; {rc['cars']}",
                     f"{_fmt(sc['median'], '{:.0f}')}; {sc['cars']}"))
    re, se = real["ring_elevations"], sim["ring_elevations"]
    if re is not None and se is not None:
        diff = np.array(se) - np.array(re)
        rows.append(("ring elevation |sim-real| mean/max (deg)", "", f"{np.abs(diff).mean():.3f} / {np.abs(diff).max():.3f}"))
        rows.append(("ring elevation top / bottom (deg)", f"{re[-1]:.2f} / {re[0]:.2f}", f"{se[-1]:.2f} / {se[0]:.2f}"))
    rows.append(("rings recovered per frame", str(real["rings_found"]), str(sim["rings_found"])))
    w = max(len(r[0]) for r in rows)
    print(f"{'statistic':<{w}}  {'KITTI (7 real)':>22}  {'lidarmt.lidar.sim (' + str(args.frames) + ')':>22}")
    for name, a, c in rows:
        print(f"{name:<{w}}  {a:>22}  {c:>22}")
    result = {"kitti": real, "sim": sim, "sim_frames": args.frames, "sim_seed": args.seed,
              "seconds": round(time.perf_counter() - t0, 2), "command": "benchmarks/bench_sim_realism.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(result), indent=1) + "\n")
    print("note: KITTI's recordings cut ranges at 80 m; the simulated HDL-64E keeps its 120 m (range 80-120 m row)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
