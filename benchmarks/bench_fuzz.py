"""MR1 campaign throughput against perception-only throughput, memory against frames, and the study's campaign.

Measured in one run, on the same frames:

* **campaign**: ``run_campaign`` in this process (W=1), frames x n in {10, 100, 1000} x trials; follow-up
  verdicts per second (the journal's fsync, injection, oracle and the source frame's perception included;
  building the SUT excluded). **In the same run**, the journal holds each call's perception time and its CNN
  part (ApolloLOP's ``last_timings``): campaign throughput / CNN-only throughput = the share of the campaign's
  wall time spent in the CNN (immune to the load drifting between two runs on a shared machine);
* **perception only**: the same SUT's ``detect`` on the same source and follow-up frames (prepared beforehand),
  and its CNN part alone (``last_timings["cnn"]`` of ApolloLOP); expressed as verdicts per second a campaign
  would reach if nothing but perception (resp. the CNN) cost time: calls/s x V/(V+1) for V follow-ups per
  source frame (the source must be perceived once);
* **memory**: peak RSS of a child process running campaigns of few and of more frames (flat = no growth);
* **the study's campaign** (1,000 frames x n in {10, 100, 1000}, 1 trial): extrapolated from the measured
  seconds per source frame.

Data: the demo recording (``lidarmt.lidar.sim.ensure_demo``) when the simulator is installed, else a synthetic
HDL-64E-like recording (64 rings x 1,800 azimuths cast on a ground plane and walls, plus cars) written as a
ROS1 bag with a GeoJSON road map. SUT: ``apollo`` with its trained weights when shipped, else random weights.

    .venv/bin/python benchmarks/bench_fuzz.py [--frames 6] [--quick] [--bag REC --map MAP]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lidarmt._machine import with_machine  # noqa: E402
from lidarmt.lidar.mr1.campaign import CampaignConfig, Evaluator, environment, run_campaign  # noqa: E402
from lidarmt.lidar.mr1.inject import Bounds, Region  # noqa: E402
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fuzz.json"


# ----------------------------------------------------------------------------------------------- data


def synthetic_frame(i: int, rng: np.random.Generator):
    from lidarmt.types import Frame, Provenance, make_points

    elev = np.deg2rad(np.linspace(-24.8, 2.0, 64))
    azim = np.deg2rad(np.arange(1800) * 0.2)
    el, az = np.meshgrid(elev, azim, indexing="ij")
    d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1).reshape(-1, 3)
    h = 1.73
    r = np.full(len(d), np.inf)
    down = d[:, 2] < -1e-6
    r[down] = h / -d[down, 2]
    side = np.abs(d[:, 1]) > 1e-6
    rw = np.where(side, 18.0 / np.maximum(np.abs(d[:, 1]), 1e-9), np.inf)  # walls at |y| = 18 m
    r = np.minimum(r, rw)
    ok = r < 120
    p = d[ok] * r[ok, None]
    p[:, 2] = np.minimum(p[:, 2], 4.0)
    p += rng.normal(0, 0.02, p.shape)
    cars = []
    for _ in range(12):
        cx, cy = rng.uniform(-50, 50), rng.choice([-5.0, -1.8, 1.8, 5.0])
        cars.append(rng.uniform([cx - 2.2, cy - 0.9, -h], [cx + 2.2, cy + 0.9, -h + 1.5], size=(400, 3)))
    xyz = np.concatenate([p, *cars]).astype(np.float32)
    inten = rng.uniform(0, 255, len(xyz)).astype(np.float32)
    pose = np.eye(4)
    pose[:3, 3] = [500000.0 + 5.0 * i, 4100000.0, 10.0]
    return Frame(make_points(xyz, inten), pose=pose, stamp=1.6e9 + 0.1 * i,
                 provenance=Provenance("synthetic", "sim", i))


def make_data(folder: Path, frames: int, bag: str | None = None, hdmap: str | None = None) -> tuple[str, str, str]:
    """(recording, map, what) for the benchmark."""
    if bag and hdmap:
        return bag, hdmap, f"{bag} with map {hdmap}"
    try:
        from lidarmt.lidar.sim import ensure_demo  # type: ignore[attr-defined]
    except ImportError:
        ensure_demo = None
    if ensure_demo is not None:
        demo = ensure_demo()
        bag, hdmap = (demo if isinstance(demo, tuple) else (demo.bag, demo.map))[:2]
        return str(bag), str(hdmap), "demo recording (lidarmt.lidar.sim.ensure_demo)"
    from lidarmt.io import write_ros1_bag

    rng = np.random.default_rng(7)
    bag = folder / "synthetic.bag"
    write_ros1_bag(bag, (synthetic_frame(i, rng) for i in range(frames)))
    x0, y0 = 500000.0, 4100000.0
    ring = [[x0 - 200, y0 + 7], [x0 + 300, y0 + 7], [x0 + 300, y0 - 7], [x0 - 200, y0 - 7], [x0 - 200, y0 + 7]]
    doc = {"type": "FeatureCollection", "frame": "world", "features": [
        {"type": "Feature", "properties": {"kind": "road", "id": "r0"},
         "geometry": {"type": "Polygon", "coordinates": [ring]}}]}
    (folder / "road.geojson").write_text(json.dumps(doc))
    return str(bag), str(folder / "road.geojson"), "synthetic HDL-64E-like ROS1 bag (simulator not installed)"


def sut_spec(bag: str | None = None) -> tuple[SutSpec, str]:
    """Apollo with its shipped weights; else Apollo with a calibrated random network (so that the pipeline
    reports obstacles and the oracle has real work), else with raw random weights."""
    try:
        from lidarmt.lidar.perception.apollo.config import ApolloConfig

        if Path(ApolloConfig().weights_path()).is_file():
            return SutSpec("apollo"), "apollo (trained weights)"
    except Exception:  # noqa: BLE001
        pass
    if bag and (Path(__file__).resolve().parent / "bench_perception.py").is_file():
        return (SutSpec("bench_fuzz:calibrated_apollo", {"recording": bag}),
                "apollo with a calibrated random network (no trained weights shipped yet)")
    return SutSpec("apollo", {"weights": None, "allow_random": True}), "apollo (random weights: none shipped yet)"


# ----------------------------------------------------------------------------------------------- measurements


class NullSut:
    """A perception stand-in that costs (almost) nothing: 20 obstacles cut from the ROI points (roi.indices is
    computed, as a SUT would). Timing a campaign with it gives the cost of everything but perception."""

    name = "null"

    def detect(self, frame, roi):
        from lidarmt.types import Obstacle, ObstacleClass, Obstacles

        idx = roi.indices(frame)
        out = []
        for part in np.array_split(idx, 20):
            if len(part) < 3:
                continue
            x, y, z = frame.points["x"][part], frame.points["y"][part], frame.points["z"][part]
            c = np.array([(x.min() + x.max()) / 2, (y.min() + y.max()) / 2, z.min()], dtype=np.float64)
            poly = np.array([[x.max(), y.max(), z.min()], [x.max(), y.min(), z.min()], [x.min(), y.min(), z.min()],
                             [x.min(), y.max(), z.min()]], dtype=np.float64)
            out.append(Obstacle(ObstacleClass.CAR, 0.9, part, c, float(x.max() - x.min()), float(y.max() - y.min()),
                                float(z.max() - z.min()), np.array([1.0, 0, 0]), poly))
        return Obstacles(out)


def null_sut() -> NullSut:
    return NullSut()


def calibrated_apollo(recording: str, spread: float = 2.0, grid: int = 640):
    """ApolloLOP with bench_perception's *calibrated random* network (random weights whose object and
    confidence logits are rescaled on the recording's first frame), so the whole pipeline reports obstacles
    before trained weights exist. Deterministic (seed 0), so every worker and a replay build the same network.
    Its MR1 rates say nothing about Apollo's model; it exercises the campaign on realistic obstacle lists.

        PYTHONPATH=benchmarks lidarmt fuzz ... --sut bench_fuzz:calibrated_apollo --sut-option recording=REC
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_perception import calibrated_random_network

    from lidarmt.io import open_recording
    from lidarmt.lidar.perception.apollo.config import ApolloConfig
    from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP

    with open_recording(recording) as rec:
        frame = rec[0]
    p = ApolloLOP(ApolloConfig(grid=grid), network=calibrated_random_network(grid, frame, spread))
    p.name = "apollo-calibrated-random"
    return p


def perception_only(config: CampaignConfig) -> dict:
    """Time the SUT alone on the campaign's source and follow-up frames (prepared beforehand)."""
    ev = Evaluator(config)
    calls = []
    for f in config.frames:
        frame, roi = ev.load(f)
        bounds = Bounds.of(frame)
        fus = [ev.follow_up(frame, roi, k, bounds).frame for k in config.keys_of(f)]
        calls.append((frame, roi))
        calls.extend((fu, roi) for fu in fus)
    ev.detect(*calls[0])  # warm
    total = cnn = 0.0
    for fr, roi in calls:
        t0 = time.perf_counter()
        ev.sut.detect(fr, roi)
        total += time.perf_counter() - t0
        cnn += float(getattr(ev.sut, "last_timings", {}).get("cnn", np.nan))
    return {"calls": len(calls), "detect_s": total, "cnn_s": cnn}


def campaign(config: CampaignConfig, out: Path) -> dict:
    """Run a campaign; also sum, from its journal, the time its perception calls and their CNN part took."""
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records

    r = run_campaign(config, out, force=True)
    sut = cnn = cnn_follow = 0.0
    seen_frames: set[int] = set()
    for rec in iter_records(out / JOURNAL_NAME):
        if rec["status"] != "ok":
            continue
        sut += rec["sut_s"]
        cnn += rec.get("cnn_s", np.nan)
        cnn_follow += rec.get("cnn_s", np.nan)
        if rec["frame"] not in seen_frames:  # the source frame's call, once
            seen_frames.add(rec["frame"])
            sut += rec["source_s"]
            cnn += rec.get("source_cnn_s", np.nan)
    return {"verdicts": r.ran, "elapsed_s": r.elapsed, "sut_s": sut, "cnn_s": cnn, "cnn_follow_s": cnn_follow}


def child_memory(args) -> None:
    bag, hdmap, frames = args.child_memory
    sut, _ = sut_spec(bag)
    cfg = CampaignConfig(SourceSpec(bag), RoiSpec(hdmap), sut, (10,), tuple(range(int(frames))), region=Region())
    with tempfile.TemporaryDirectory() as d:
        run_campaign(cfg, Path(d) / "run")
    print(json.dumps({"frames": int(frames), "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def memory(bag: str, hdmap: str, counts: list[int]) -> list[dict]:
    out = []
    for k in counts:
        p = subprocess.run([sys.executable, __file__, "--child-memory", bag, hdmap, str(k)], capture_output=True,
                           text=True, check=True)
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="2 frames, no memory runs")
    ap.add_argument("--bag", help="recording to use (default: the demo, built by lidarmt.lidar.sim.ensure_demo)")
    ap.add_argument("--map", dest="hdmap", help="its map (with --bag)")
    ap.add_argument("--child-memory", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_memory:
        child_memory(args)
        return
    frames = 2 if args.quick else args.frames
    from rich.console import Console
    from rich.table import Table

    con = Console(width=150)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bag, hdmap, data_what = make_data(tmp, max(frames, 8), args.bag, args.hdmap)
        sut, sut_what = sut_spec(bag)
        ns = (10, 100, 1000)
        rows = []
        # warm numba caches and torch once (a one-frame campaign)
        run_campaign(CampaignConfig(SourceSpec(bag), RoiSpec(hdmap), sut, (10,), (0,)), tmp / "warm")
        for trials in (1, 2):
            cfg = CampaignConfig(SourceSpec(bag), RoiSpec(hdmap), sut, ns, tuple(range(frames)), trials=trials)
            c = campaign(cfg, tmp / f"run{trials}")
            p = perception_only(cfg)
            v = len(ns) * trials  # follow-ups per source frame
            share = v / (v + 1)
            camp_rate = c["verdicts"] / c["elapsed_s"]
            det_rate = p["calls"] / p["detect_s"] * share
            cnn_rate = p["calls"] / p["cnn_s"] * share if np.isfinite(p["cnn_s"]) else float("nan")
            rows.append({"trials": trials, "frames": frames, "verdicts": c["verdicts"],
                         # in the same run: the share of the campaign's wall time spent in perception / in the CNN
                         # (= campaign throughput / the throughput if only perception / the CNN cost time)
                         "in_run_perception_share": c["sut_s"] / c["elapsed_s"],
                         "in_run_cnn_share": c["cnn_s"] / c["elapsed_s"],
                         "in_run_follow_up_cnn_share": c["cnn_follow_s"] / c["elapsed_s"],
                         "campaign_s": round(c["elapsed_s"], 3), "campaign_verdicts_per_s": camp_rate,
                         "perception_only_verdicts_per_s": det_rate, "cnn_only_verdicts_per_s": cnn_rate,
                         "ratio_to_perception": camp_rate / det_rate, "ratio_to_cnn": camp_rate / cnn_rate,
                         "cnn_calls_per_s": p["calls"] / p["cnn_s"], "ratio_to_raw_cnn_calls": camp_rate / (p["calls"] / p["cnn_s"]),
                         "seconds_per_source_frame": c["elapsed_s"] / frames})
        study_s = rows[0]["seconds_per_source_frame"] * 1000
        # everything but perception: the same campaign with a SUT that costs nothing
        null_cfg = CampaignConfig(SourceSpec(bag), RoiSpec(hdmap), SutSpec("bench_fuzz:null_sut"), ns,
                                  tuple(range(frames)), trials=2)
        nc = campaign(null_cfg, tmp / "null")
        overhead_ms = 1000 * nc["elapsed_s"] / nc["verdicts"]
        mem = [] if args.quick else memory(bag, hdmap, [2, 8])
    t = Table(title=f"MR1 campaign throughput ({frames} frames, n = 10, 100, 1000; W=1): in the same run")
    for col in ("trials", "verdicts", "campaign v/s", "CNN-only v/s (same run)", "campaign / CNN-only",
                "campaign / perception-only", "follow-up CNN share"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["trials"]), str(r["verdicts"]), f"{r['campaign_verdicts_per_s']:.3f}",
                  f"{r['campaign_verdicts_per_s'] / r['in_run_cnn_share']:.3f}",
                  f"{100 * r['in_run_cnn_share']:.1f} %", f"{100 * r['in_run_perception_share']:.1f} %",
                  f"{100 * r['in_run_follow_up_cnn_share']:.1f} %")
    con.print(t)
    t2 = Table(title="the same, against a separate perception-only pass over the same frames (sensitive to load drift)")
    for col in ("trials", "perception-only v/s", "CNN-only v/s", "campaign/perception", "campaign/CNN",
                "campaign / raw CNN calls/s"):
        t2.add_column(col, justify="right")
    for r in rows:
        t2.add_row(str(r["trials"]), f"{r['perception_only_verdicts_per_s']:.3f}",
                   f"{r['cnn_only_verdicts_per_s']:.3f}", f"{100 * r['ratio_to_perception']:.1f} %",
                   f"{100 * r['ratio_to_cnn']:.1f} %", f"{100 * r['ratio_to_raw_cnn_calls']:.1f} %")
    con.print(t2)
    con.print(f"data: {data_what}; SUT: {sut_what}")
    con.print(f"the study's campaign (1,000 frames x n in {{10, 100, 1000}}, 1 trial) would take about "
              f"{study_s / 3600:.2f} h on this machine (extrapolated from {rows[0]['seconds_per_source_frame']:.2f} s "
              f"per source frame measured above, W=1)")
    con.print(f"everything but perception (same campaign, a SUT that costs nothing): {overhead_ms:.1f} ms per verdict "
              f"(recording read + ROI mask per source frame, injection, oracle, fsync'd journal), vs "
              f"{1000 / rows[0]['cnn_calls_per_s']:.0f} ms per CNN call")
    con.print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if mem:
        con.print("memory (peak RSS, n = 10): " + ", ".join(f"{m['frames']} frames: {m['maxrss_mib']:.0f} MiB" for m in mem))
    result = {"environment": environment(), "data": data_what, "sut": sut_what, "rows": rows,
              "study_campaign_hours_extrapolated": study_s / 3600, "memory": mem,
              "overhead_ms_per_verdict_without_perception": overhead_ms, "loadavg_1min": os.getloadavg()[0],
              "command": "python benchmarks/bench_fuzz.py " + " ".join(sys.argv[1:])}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(with_machine(result), indent=2, default=float) + "\n")
    con.print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
