"""Decoding speed of the image sources: frames/s on the real Udacity frames (1,500 JPEGs, 320x240).

Usage::

    .venv/bin/python benchmarks/bench_camera_sources.py [--images ../shared/data/udacity] [--repeat 3]
                                                        [--bag-frames 300]

Measured, each ``--repeat`` times after one warm-up pass (page cache), best and median reported:

* opening the source (CSV parsing and folder listing: what every campaign worker pays);
* streaming all frames (``for f in src``) and random access (``src[i]`` in a shuffled order);
* the floor: a bare ``cv2.imread`` + ``cvtColor`` loop over the same files, so the source's overhead is a
  ratio measured in the same run (the machines are shared and noisy);
* the same first ``--bag-frames`` frames as a camera topic of a ROS1 bag, raw ``rgb8`` and JPEG
  ``CompressedImage``, streamed and randomly accessed (with steering labels paired).

Results go to benchmarks/results/camera_sources.json.
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _timing import interleaved, timed  # noqa: E402

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.camera.sources import open_images  # noqa: E402


def stream(path: Path, **kw) -> int:
    n = 0
    with open_images(path, **kw) as src:
        for f in src:
            n += f.image.shape[0] > 0
    return n


def random_access(path: Path, order: np.ndarray, **kw) -> int:
    with open_images(path, **kw) as src:
        for i in order:
            src[int(i)]
    return len(order)


def bare_cv2(files: list[Path]) -> int:
    import cv2

    for p in files:
        cv2.cvtColor(cv2.imread(str(p), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return len(files)


def write_bag(path: Path, src_path: Path, n: int, *, compressed: bool) -> None:
    """The first ``n`` frames as lidarmt simulate's camera topic (+ steering), raw rgb8 or JPEG."""
    import cv2

    from lidarmt.camera.sources.recording import SIM_CAMERA_TOPIC, SIM_STEERING_TOPIC
    from lidarmt.io import Ros1BagWriter
    from lidarmt.io.ros1 import TYPESTORE

    T = TYPESTORE.types
    with open_images(src_path) as src, Ros1BagWriter(path) as w:
        for i in range(min(n, len(src))):
            f = src[i]
            t = int(f.frame_id)
            hdr = T["std_msgs/msg/Header"](seq=i, stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9,
                                                                                      nanosec=t % 10**9),
                                           frame_id="front_6mm")
            if compressed:
                data = (src.root / f.detail["file"]).read_bytes()
                msg = T["sensor_msgs/msg/CompressedImage"](header=hdr, format="jpeg",
                                                          data=np.frombuffer(data, np.uint8))
                w.write_message(SIM_CAMERA_TOPIC, "sensor_msgs/msg/CompressedImage", msg, t)
            else:
                h, wd, _ = f.image.shape
                msg = T["sensor_msgs/msg/Image"](header=hdr, height=h, width=wd, encoding="rgb8", is_bigendian=0,
                                                 step=3 * wd, data=f.image.reshape(-1))
                w.write_message(SIM_CAMERA_TOPIC, "sensor_msgs/msg/Image", msg, t)
            w.write_message(SIM_STEERING_TOPIC, "std_msgs/msg/Float64", T["std_msgs/msg/Float64"](data=f.label), t)
    _ = cv2  # opencv is what decodes the JPEGs when reading


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, default=ROOT.parent / "shared" / "data" / "udacity")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bag-frames", type=int, default=300, help="frames written to the ROS1 bags (0: skip)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "camera_sources.json")
    args = ap.parse_args()
    if not args.images.exists():
        sys.exit(f"bench_camera_sources: {args.images} is absent; pass --images FOLDER (a Udacity-style folder)")

    import cv2

    load = os.getloadavg()
    with open_images(args.images) as src:
        n = len(src)
        files = [src.root / f for f in src.files] if hasattr(src, "files") else []
        size = src[0].image.shape
    rows = []

    def add(name: str, frames: int, times: list[float], cpus: list[float], note: str = "") -> dict:
        best, med = min(times), statistics.median(times)
        cpu = min(cpus)
        row = {"case": name, "frames": frames, "best_s": round(best, 4), "median_s": round(med, 4),
               "fps_best": round(frames / best, 1), "fps_median": round(frames / med, 1),
               "cpu_s_best": round(cpu, 4), "fps_per_cpu_second": round(frames / cpu, 1), "note": note}
        rows.append(row)
        print(f"{name:34s} {frames / best:9.1f} frames/s  (median {frames / med:.1f}; {frames / cpu:.1f} per "
              f"CPU-second)  {note}", flush=True)
        return row

    opening, _ = timed(lambda: open_images(args.images).close(), args.repeat)
    stream(args.images)  # warm-up: page cache
    order = np.random.default_rng(0).permutation(n)
    fns = {"stream": lambda: stream(args.images), "random": lambda: random_access(args.images, order)}
    if files:
        fns["bare"] = lambda: bare_cv2(files)
    t, c = interleaved(fns, args.repeat)
    seq = add("folder: stream", n, t["stream"], c["stream"])
    ra = add("folder: random access", n, t["random"], c["random"])
    floor = add("bare cv2.imread + cvtColor", n, t["bare"], c["bare"], "the floor: no source") if files else None
    extra: dict[str, float] = {"open_ms_best": round(min(opening) * 1e3, 2),
                               "open_ms_median": round(statistics.median(opening) * 1e3, 2)}
    if floor:
        extra["stream_over_bare_cv2"] = round(seq["best_s"] / floor["best_s"], 3)
        extra["random_over_bare_cv2"] = round(ra["best_s"] / floor["best_s"], 3)
        extra["stream_over_bare_cv2_cpu"] = round(seq["cpu_s_best"] / floor["cpu_s_best"], 3)
        extra["random_over_bare_cv2_cpu"] = round(ra["cpu_s_best"] / floor["cpu_s_best"], 3)
    if args.bag_frames > 0:
        tmp = Path(tempfile.mkdtemp(prefix="lidarmt-bench-cam-"))
        try:
            for compressed in (False, True):
                kind = "jpeg" if compressed else "rgb8"
                bag = tmp / f"{kind}.bag"
                write_bag(bag, args.images, args.bag_frames, compressed=compressed)
                m = min(args.bag_frames, n)
                mb = bag.stat().st_size / 1e6
                stream(bag)
                o = np.random.default_rng(1).permutation(m)
                fns = {"stream": lambda b=bag: stream(b), "random": lambda b=bag, o=o: random_access(b, o)}
                if files:
                    fns["bare"] = lambda m=m: bare_cv2(files[:m])
                t, c = interleaved(fns, args.repeat)
                add(f"ROS1 bag {kind}: stream", m, t["stream"], c["stream"], f"{mb:.0f} MB bag, labels paired")
                add(f"ROS1 bag {kind}: random access", m, t["random"], c["random"])
                if files and compressed:
                    add(f"bare cv2 on the same {m} files", m, t["bare"], c["bare"], "the floor for the JPEG bag")
                t_open, _ = timed(lambda b=bag: open_images(b).close(), args.repeat)
                extra[f"ros1_{kind}_open_ms_best"] = round(min(t_open) * 1e3, 2)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'case':34s} {'frames/s':>10s} {'median':>10s} {'f/CPU-s':>9s} {'frames':>7s}")
    for r in rows:
        print(f"{r['case']:34s} {r['fps_best']:10.1f} {r['fps_median']:10.1f} {r['fps_per_cpu_second']:9.1f} "
              f"{r['frames']:7d}")
    print(f"opening the folder source: {extra['open_ms_best']:.1f} ms (CSV of {n} rows + folder listing)")
    if floor:
        print(f"source / bare opencv: wall time stream {extra['stream_over_bare_cv2']:.2f}x, random access "
              f"{extra['random_over_bare_cv2']:.2f}x; CPU time stream {extra['stream_over_bare_cv2_cpu']:.2f}x, "
              f"random access {extra['random_over_bare_cv2_cpu']:.2f}x")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; "
          f"opencv {cv2.__version__} with {cv2.getNumThreads()} threads")
    result = {
        "benchmark": "camera_sources",
        "command": " ".join(["benchmarks/bench_camera_sources.py", *sys.argv[1:]]),
        "images": str(args.images),
        "frames": n,
        "image_shape": list(size),
        "repeat": args.repeat,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "opencv": cv2.__version__, "loadavg_at_start": [round(v, 2) for v in load]},
        "cases": rows,
        **extra,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(with_machine(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
