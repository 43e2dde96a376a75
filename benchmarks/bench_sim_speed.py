"""Speed of the simulator: scene building and LiDAR sweeps (cast + post-processing), separately.

    .venv/bin/python benchmarks/bench_sim_speed.py [--frames 20] [--towns 2] [--camera]

Per town: time to build the town (roads, raster), to populate it (scene meshes, traffic), and the first sweep
(which also builds the static Embree BVH); then ``--frames`` sweeps, split into agent meshes, ray casting
(static + dynamic scenes + analytic ground) and post-processing (noise, drop-outs, intensity, labels, boxes).
Prints a table and writes benchmarks/results/sim_speed.json. The machine is shared, so the load average is
recorded with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lidarmt._machine import with_machine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--towns", type=int, default=2)
    ap.add_argument("--camera", action="store_true", help="also time the front camera (640x480)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sim_speed.json")
    args = ap.parse_args(argv)

    from lidarmt.lidar.sim import drive as drive_mod
    from lidarmt.lidar.sim.drive import Drive
    from lidarmt.lidar.sim.scene import build_scene
    from lidarmt.lidar.sim.town import build_town

    # warm the numba kernels and open3d so that start-up is not counted
    t0 = time.perf_counter()
    Drive.create(town_seed=999, seed=999, frames=2).frame(0)
    warm = time.perf_counter() - t0

    rows = []
    for i in range(args.towns):
        seed = 100 + i
        load0 = os.getloadavg()[0]
        t = time.perf_counter()
        town = build_town(seed)
        t_town = time.perf_counter() - t
        t = time.perf_counter()
        scene = build_scene(town, seed, duration=(args.frames + 2) / 10)
        t_scene = time.perf_counter() - t
        d = Drive(town, scene, seed=seed)
        t = time.perf_counter()
        _ = d.caster
        t_bvh = time.perf_counter() - t
        pts = []
        t = time.perf_counter()
        c = time.process_time()
        for k in range(args.frames):
            f = d.frame(k)
            pts.append(len(f.points))
        t_frames = time.perf_counter() - t
        c_frames = time.process_time() - c
        parts = d.timings
        t_cam = None
        if args.camera:
            from lidarmt.lidar.sim.camera import Camera

            cam = Camera()
            t = time.perf_counter()
            for k in range(min(args.frames, 5)):
                cam.render(d, k)
            t_cam = (time.perf_counter() - t) / min(args.frames, 5)
        rows.append({
            "town_seed": seed, "raster_cells": int(town.raster.size), "static_triangles": int(len(scene.static_mesh.triangles)),
            "agents": len(scene.agents), "build_town_s": t_town, "build_scene_s": t_scene, "build_bvh_s": t_bvh,
            "frames": args.frames, "sweep_s": t_frames / args.frames, "sweep_cpu_s": c_frames / args.frames, "frames_per_s": args.frames / t_frames,
            "agents_s": parts["agents"] / args.frames, "cast_s": parts["cast"] / args.frames,
            "post_s": parts["post"] / args.frames, "points_mean": float(np.mean(pts)),
            "camera_frame_s": t_cam, "loadavg_1min": [load0, os.getloadavg()[0]],
        })
    print(f"warm-up (numba cache, open3d import, one sweep): {warm:.2f} s; cores: {os.cpu_count()}")
    hdr = ("town", "build town", "build scene", "BVH", "sweep", "sweep CPU", "frames/s", "agents", "cast", "post",
           "points", "load")
    print("  ".join(f"{h:>11}" for h in hdr))
    for r in rows:
        vals = (r["town_seed"], f"{r['build_town_s']:.2f} s", f"{r['build_scene_s']:.2f} s", f"{r['build_bvh_s']:.2f} s",
                f"{r['sweep_s'] * 1000:.0f} ms", f"{r['sweep_cpu_s'] * 1000:.0f} ms", f"{r['frames_per_s']:.2f}", f"{r['agents_s'] * 1000:.0f} ms",
                f"{r['cast_s'] * 1000:.0f} ms", f"{r['post_s'] * 1000:.0f} ms", f"{r['points_mean']:,.0f}",
                f"{r['loadavg_1min'][0]:.1f}")
        print("  ".join(f"{v:>11}" for v in vals))
        if r["camera_frame_s"] is not None:
            print(f"{'':>11}  camera 640x480: {r['camera_frame_s'] * 1000:.0f} ms per image")
    fps = [r["frames_per_s"] for r in rows]
    print(f"LiDAR sweeps (cast + post-processing): {np.mean(fps):.2f} frames/s wall (min {min(fps):.2f}); "
          f"CPU time per sweep {np.mean([r['sweep_cpu_s'] for r in rows]) * 1000:.0f} ms (all threads)")
    result = {"rows": rows, "frames_per_s_mean": float(np.mean(fps)), "warmup_s": warm, "cpu_count": os.cpu_count(),
              "dynamic_radius_m": drive_mod.DYNAMIC_RADIUS, "command": "benchmarks/bench_sim_speed.py " + " ".join(argv or sys.argv[1:])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(result), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
