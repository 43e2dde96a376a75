"""How far the networks' outputs move between CPU kinds: the measurement behind replay's tolerances.

oneDNN (torch's CPU convolutions and matmuls) picks other kernels on another instruction set, so the same model on
the same input gives floats that differ in the last digits on an AMX Xeon, an AVX-512 EPYC and an AVX2 laptop.
``ONEDNN_MAX_CPU_ISA`` caps what oneDNN may use (it is read when torch loads, so each setting runs in a fresh
process), and ``ATEN_CPU_CAPABILITY`` does the same for torch's own vectorised kernels; together they emulate an
older CPU on this one.

Each setting runs the same work in a child process and saves its outputs; the parent compares every setting with
the default (this machine, uncapped):

* camera: the seven shipped steering models on the pre-layout fixture's four frames, the same frames brightened,
  darkened and mirrored, and eight seeded random images: steering angles (radians);
* LiDAR: Apollo's CNN (``exact`` mode, the shipped 640 weights) on three synthetic sweeps and their MR1 follow-ups
  (1000 points injected outside the ROI): the six heads' outputs, and the obstacle lists (count, classes, point
  indices, scores, boxes).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/isa_drift.py`` (a few minutes); it prints a table and writes
``benchmarks/results/isa_drift.json``. ``docs/replay-tolerances.md`` records the numbers and the tolerances chosen
from them (:data:`lidarmt.engine.replay.TOLERANCES`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {  # name -> environment added to the child's
    "default": {},
    "AVX512_CORE": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "AVX2+aten-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "SSE41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    "SSE41+aten-default": {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
}
MODELS = ("dave-orig", "dave-norminit", "dave-dropout", "dave2", "epoch", "chauffeur", "rambo")
LIDAR_FRAMES = (0, 1, 2)


def _camera_images() -> np.ndarray:
    from PIL import Image

    drive = ROOT / "tests" / "data" / "pre_layout" / "camera" / "drive" / "center"
    frames = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(drive.glob("*.jpg"))]
    h, w = frames[0].shape[:2]
    out = list(frames)
    out += [np.clip(f.astype(np.int16) + 40, 0, 255).astype(np.uint8) for f in frames]
    out += [np.clip(f.astype(np.int16) - 40, 0, 255).astype(np.uint8) for f in frames]
    out += [f[:, ::-1].copy() for f in frames]
    rng = np.random.default_rng(0)
    out += [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(8)]
    return np.stack(out)


def child(path: str) -> None:
    """Run every model on the fixed inputs and save the outputs to ``path`` (.npz + .json)."""
    import torch

    torch.set_num_threads(1)
    from lidarmt.camera.models.registry import get_model

    res: dict[str, np.ndarray] = {}
    images = _camera_images()
    for name in MODELS:
        net = get_model(name)
        h = int(net.input_spec.history)
        batch = np.stack([np.repeat(im[None], h + 1, axis=0) if h else im for im in images])
        res[f"camera/{name}"] = np.asarray(net.predict(batch), dtype=np.float64).reshape(-1)

    from lidarmt.lidar.mr1.inject import make_follow_up
    from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP
    from lidarmt.lidar.roi.query import region_roi
    from lidarmt.lidar.synthetic import synthetic_sweep
    from lidarmt.types import LabelledRegion

    sut = ApolloLOP()
    roi = region_roi(LabelledRegion(-np.pi / 2, np.pi / 2, 40.0, "isa-drift"))
    obstacles = {}
    for k in LIDAR_FRAMES:
        frame = synthetic_sweep(seed=k, n_azimuth=1024)
        fu = make_follow_up(frame, roi, 1000, seed=7, frame_index=k, trial=0)
        for tag, f in (("source", frame), ("followup", fu.frame)):
            idx = np.asarray(roi.indices(f), dtype=np.int64)
            heads = sut.runner(sut.features(f, idx))
            for head, arr in heads.items():
                res[f"cnn/{k}/{tag}/{head}"] = np.asarray(arr, dtype=np.float32)
            obstacles[f"{k}/{tag}"] = sut.detect(f, roi).to_list()
    np.savez(path, **res)
    Path(path + ".json").write_text(json.dumps(obstacles))


def _diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = np.abs(a - b)
    rel = d / np.maximum(np.abs(b), 1e-30)
    return float(d.max()) if d.size else 0.0, float(rel[d > 0].max()) if (d > 0).any() else 0.0


def _numbers(o: dict) -> dict[str, float]:
    """The floats of one obstacle (score, box) keyed by their name."""
    out: dict[str, float] = {}

    def walk(prefix: str, v) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        elif isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            if any(isinstance(x, float) for x in v):
                for i, x in enumerate(v):
                    out[f"{prefix}[{i}]"] = float(x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{prefix}[{i}]", x)
        elif isinstance(v, float):
            out[prefix] = v

    walk("", o)
    return out


def _shape(o: dict) -> str:
    """An obstacle without its floats (class, point indices, ...): what must match for its numbers to pair."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        if isinstance(v, list):
            return [strip(x) for x in v if not isinstance(x, float)]
        return None if isinstance(v, float) else v

    return json.dumps(strip(o), sort_keys=True)


def compare(base: Path, other: Path) -> dict:
    a, b = np.load(str(base)), np.load(str(other))
    out: dict = {"camera": {}, "cnn": {}, "obstacles": {}}
    cam_abs = cam_rel = 0.0
    for name in MODELS:
        d_abs, d_rel = _diff(b[f"camera/{name}"], a[f"camera/{name}"])
        out["camera"][name] = {"max_abs": d_abs, "max_rel": d_rel,
                               "bit_identical": bool(np.array_equal(a[f"camera/{name}"], b[f"camera/{name}"]))}
        cam_abs, cam_rel = max(cam_abs, d_abs), max(cam_rel, d_rel)
    out["camera_max_abs"], out["camera_max_rel"] = cam_abs, cam_rel
    cnn_abs = 0.0
    for key in a.files:
        if key.startswith("cnn/"):
            d_abs, _ = _diff(b[key], a[key])
            head = key.rsplit("/", 1)[1]
            out["cnn"][head] = max(out["cnn"].get(head, 0.0), d_abs)
            cnn_abs = max(cnn_abs, d_abs)
    out["cnn_max_abs"] = cnn_abs
    oa = json.loads(Path(str(base) + ".json").read_text())
    ob = json.loads(Path(str(other) + ".json").read_text())
    same_lists = changed = 0
    num_abs = 0.0
    for key, la in oa.items():
        lb = ob[key]
        if [_shape(o) for o in la] == [_shape(o) for o in lb]:
            same_lists += 1
            for x, y in zip(la, lb, strict=True):
                nx, ny = _numbers(x), _numbers(y)
                for k in nx:
                    num_abs = max(num_abs, abs(nx[k] - ny[k]))
        else:
            changed += 1
    out["obstacles"] = {"lists": len(oa), "same_structure": same_lists, "changed": changed,
                        "max_abs_number": num_abs,
                        "counts": {k: [len(oa[k]), len(ob[k])] for k in oa}}
    return out


def main() -> int:
    from lidarmt._machine import with_machine

    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, extra in SETTINGS.items():
            p = Path(tmp) / f"{name}.npz"
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}
            for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
                if k not in extra:
                    env.pop(k, None)
            subprocess.run([sys.executable, __file__, "--child", str(p)], env=env, check=True, cwd=ROOT)
            paths[name] = p
        results = {name: compare(paths["default"], p) for name, p in paths.items() if name != "default"}
    print(f"{'setting':22} {'camera max |Δθ| rad':>20} {'rel':>9} {'CNN max |Δ|':>12} {'obstacle lists changed':>24} "
          f"{'obstacle max |Δ|':>17}")
    for name, r in results.items():
        o = r["obstacles"]
        print(f"{name:22} {r['camera_max_abs']:20.3e} {r['camera_max_rel']:9.2e} {r['cnn_max_abs']:12.3e} "
              f"{o['changed']:>17} of {o['lists']:<4} {o['max_abs_number']:17.3e}")
    out = ROOT / "benchmarks" / "results" / "isa_drift.json"
    out.write_text(json.dumps(with_machine({"settings": SETTINGS, "models": list(MODELS),
                                            "lidar_frames": list(LIDAR_FRAMES), "results": results}), indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sys.exit(main())
