"""Reading speed of every recording reader: frames/s and MB/s on 130k-point HDL-64E-sized frames.

Usage::

    .venv/bin/python benchmarks/bench_io.py [--frames 25] [--points 130000] [--repeat 3]

Each format is written once with lidarmt's own writer into a temporary folder (ROS1 bag with LZ4 chunks, ROS2
sqlite3 and mcap, Cyber record, PCD binary and binary_compressed folders with .pose files, npz folder), read once
to warm the page cache and compile the numba kernels, then read ``--repeat`` times in full (points, poses and
provenance of every frame); the best and median runs are reported. MB/s is the recording's size on disk divided by
the read time. For ROS1 the same run also measures the generic route (rosbags' typestore deserialiser + NumPy
field copy) to state the speed-up of lidarmt's zero-copy PointCloud2 parsing as a ratio, and random access
(``rec[i]`` in shuffled order). Results go to benchmarks/results/io.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _timing import timed  # noqa: E402

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.io import (  # noqa: E402
    open_recording,
    write_cyber_record,
    write_npz_folder,
    write_pcd_folder,
    write_ros1_bag,
    write_ros2_bag,
)
from lidarmt.io._synthetic import synthetic_frames  # noqa: E402


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def read_all(path: Path) -> tuple[int, int]:
    n = pts = 0
    with open_recording(path) as rec:
        for f in rec:
            n += 1
            pts += len(f)
            assert f.pose is not None
    return n, pts


def generic_ros1(path: Path) -> int:
    """The straightforward route: rosbags deserialises each PointCloud2, NumPy copies the fields."""
    from rosbags.rosbag1 import Reader

    from lidarmt.io.ros1 import TYPESTORE
    from lidarmt.types import make_points

    n = 0
    with Reader(path) as r:
        conns = [c for c in r.connections if c.msgtype == "sensor_msgs/msg/PointCloud2"]
        for _c, _t, raw in r.messages(connections=conns):
            msg = TYPESTORE.deserialize_ros1(raw, "sensor_msgs/msg/PointCloud2")
            dt = np.dtype({"names": [f.name for f in msg.fields],
                           "formats": [{7: "<f4", 2: "u1", 8: "<f8"}[f.datatype] for f in msg.fields],
                           "offsets": [f.offset for f in msg.fields], "itemsize": msg.point_step})
            a = np.frombuffer(msg.data, dtype=dt)
            p = make_points(np.stack([a["x"], a["y"], a["z"]], axis=1), a["intensity"], time=a["timestamp"])
            p = p[np.isfinite(p["x"]) & np.isfinite(p["y"]) & np.isfinite(p["z"])]
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--points", type=int, default=130_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--readers", default="", help="comma-separated substrings: run only matching readers")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "io.json")
    args = ap.parse_args()

    frames = synthetic_frames(args.frames, args.points, seed=0, ring=False, time=True)
    tmp = Path(tempfile.mkdtemp(prefix="lidarmt-bench-io-"))
    writers = {
        "ROS1 bag (LZ4)": ("a.bag", lambda p: write_ros1_bag(p, frames)),
        "ROS2 sqlite3": ("r2s", lambda p: write_ros2_bag(p, frames, storage="sqlite3")),
        "ROS2 mcap": ("r2m", lambda p: write_ros2_bag(p, frames, storage="mcap")),
        "Cyber record": ("a.record", lambda p: write_cyber_record(p, frames)),
        "PCD binary": ("pcdb", lambda p: write_pcd_folder(p, frames, encoding="binary")),
        "PCD binary_compressed": ("pcdc", lambda p: write_pcd_folder(p, frames, encoding="binary_compressed")),
        "npz": ("npz", lambda p: write_npz_folder(p, frames, compress=False)),
    }
    if args.readers:
        keys = [k.strip().lower() for k in args.readers.split(",") if k.strip()]
        writers = {k: v for k, v in writers.items() if any(x in k.lower() for x in keys)}
    load = os.getloadavg()
    rows = []
    extra: dict[str, float] = {}
    try:
        for name, (fname, write) in writers.items():
            path = tmp / fname
            t = time.perf_counter()
            write(path)
            t_write = time.perf_counter() - t
            size = size_of(path)
            n, pts = read_all(path)  # warm-up: page cache, numba compilation
            assert n == args.frames
            fn = lambda p=path: read_all(p)  # noqa: E731
            times, cpus = timed(fn, args.repeat)
            best, med = min(times), statistics.median(times)
            cpu = min(cpus)
            rows.append({"reader": name, "frames": n, "points": pts, "bytes": size, "write_s": round(t_write, 3),
                         "best_s": round(best, 4), "median_s": round(med, 4),
                         "fps_best": round(n / best, 1), "fps_median": round(n / med, 1),
                         "mb_s_best": round(size / best / 1e6, 1), "mb_s_median": round(size / med / 1e6, 1),
                         "cpu_s_best": round(cpu, 4), "fps_per_cpu_second": round(n / cpu, 1)})
            print(f"{name:24s} {n / best:8.1f} fps  {size / best / 1e6:8.1f} MB/s   (median {n / med:.1f} fps; "
                  f"{n / cpu:.1f} frames per CPU-second)", flush=True)
            if name.startswith("ROS1"):
                generic_ros1(path)
                g, _ = timed(lambda p=path: generic_ros1(p), args.repeat)
                extra["ros1_generic_fps_best"] = round(n / min(g), 1)
                extra["ros1_zero_copy_speedup"] = round(min(g) / best, 2)
                order = np.random.default_rng(0).permutation(n)

                def random_access(p=path, order=order):
                    with open_recording(p) as rec:
                        for i in order:
                            rec[int(i)]

                ra, _ = timed(random_access, args.repeat)
                extra["ros1_random_access_fps_best"] = round(n / min(ra), 1)
            else:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'reader':24s} {'frames/s':>10s} {'MB/s':>8s} {'median f/s':>11s} {'f/CPU-s':>8s} {'size MB':>8s}")
    for r in rows:
        print(f"{r['reader']:24s} {r['fps_best']:10.1f} {r['mb_s_best']:8.1f} {r['fps_median']:11.1f} "
              f"{r['fps_per_cpu_second']:8.1f} {r['bytes'] / 1e6:8.1f}")
    if extra:
        print(f"ROS1 generic route (rosbags deserialiser): {extra['ros1_generic_fps_best']} fps; lidarmt's parser is "
              f"{extra['ros1_zero_copy_speedup']}x faster in the same run; ROS1 random access "
              f"{extra['ros1_random_access_fps_best']} fps")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    result = {
        "benchmark": "io",
        "command": " ".join(["benchmarks/bench_io.py", *sys.argv[1:]]),
        "frames": args.frames,
        "points_per_frame": args.points,
        "repeat": args.repeat,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "loadavg_at_start": [round(v, 2) for v in load]},
        "readers": rows,
        **extra,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
