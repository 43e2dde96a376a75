"""Training data without a bag: many short drives through several seed-derived towns, one .npz per frame.

Layout of a dataset folder::

    data/train/
        dataset.json        what was generated: seed, frame count, drives (town seed, drive seed, sweeps)
        000000.npz          lidarmt.io.npz frames: points (x, y, z, intensity, ring, time), pose, Labels
        000001.npz
        ...

Variety: drive ``d`` of a dataset with seed ``S`` runs in town ``town_seed = S * 1000 + d // drives_per_town``
with scene seed ``S * 100000 + d``; every drive has its own traffic, parked cars, pedestrians, sensor
height (1.73-1.95 m) and speed, and each town its own road layout. Of each drive only every ``stride``-th
sweep is kept so neighbouring samples differ. Generation is deterministic: the same arguments give
byte-identical files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lidarmt._atomic import atomic_write_text
from lidarmt.sim.errors import SimArgumentError, SimOutputError


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    out_dir: Path
    frames: int
    drives: int
    towns: int
    seconds: float


def drive_plan(frames: int, seed: int, *, frames_per_drive: int, drives_per_town: int, stride: int
               ) -> list[tuple[int, int, int]]:
    """(town seed, drive seed, sweeps kept) of each drive needed for ``frames`` frames."""
    plan = []
    left, d = frames, 0
    while left > 0:
        n = min(frames_per_drive, left)
        plan.append((seed * 1000 + d // drives_per_town, seed * 100000 + d, n))
        left -= n
        d += 1
    return plan


def generate_dataset(
    out_dir: str | os.PathLike[str],
    *,
    frames: int,
    seed: int,
    overwrite: bool = False,
    frames_per_drive: int = 20,
    drives_per_town: int = 3,
    stride: int = 2,
    density: float = 1.0,
    on_frame: Callable[[int, int], None] | None = None,
) -> DatasetSummary:
    """Write ``frames`` labelled frames as ``out_dir/NNNNNN.npz`` plus ``dataset.json``.

    ``on_frame(done, total)`` is called after each frame (for progress bars). Refuses a non-empty
    ``out_dir`` unless ``overwrite`` (then the old ``*.npz`` frames there are replaced).
    """
    import time

    from lidarmt.io.npz import save_frame_npz
    from lidarmt.sim.drive import STAMP0, Drive

    if frames < 1:
        raise SimArgumentError(f"--frames must be at least 1, got {frames}")
    if frames_per_drive < 1 or drives_per_town < 1 or stride < 1:
        raise SimArgumentError("frames_per_drive, drives_per_town and stride must be at least 1")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SimOutputError(f"{out} exists and is not a folder; choose another --dataset path")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise SimOutputError(f"{out} is not empty; pass --overwrite to replace its frames, or choose a new folder")
        for old in out.glob("*.npz"):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    plan = drive_plan(frames, seed, frames_per_drive=frames_per_drive, drives_per_town=drives_per_town, stride=stride)
    towns: dict[int, object] = {}
    index = 0
    drives_meta = []
    from lidarmt.sim.scene import build_scene
    from lidarmt.sim.town import build_town

    for d, (town_seed, drive_seed, n) in enumerate(plan):
        if town_seed not in towns:
            towns.clear()  # keep one town in memory
            towns[town_seed] = build_town(town_seed)
        town = towns[town_seed]
        scene = build_scene(town, drive_seed, duration=(n * stride + 1) / 10.0, density=density)  # type: ignore[arg-type]
        drive = Drive(town, scene, seed=drive_seed, stamp0=STAMP0 + d * 1000.0, source=str(out))  # type: ignore[arg-type]
        first = index
        for j in range(n):
            frame = drive.frame(j * stride, index=index)
            save_frame_npz(out / f"{index:06d}.npz", frame)
            index += 1
            if on_frame is not None:
                on_frame(index, frames)
        drives_meta.append({"drive": d, "town_seed": town_seed, "drive_seed": drive_seed, "frames": [first, index - 1],
                            "sweeps": [j * stride for j in range(n)],
                            "sensor_height": round(scene.ego.sensor_height, 4), "speed": round(scene.ego.speed, 3)})
    summary = {"format": "lidarmt-sim-dataset/1", "seed": seed, "frames": frames, "frames_per_drive": frames_per_drive,
               "drives_per_town": drives_per_town, "stride": stride, "density": density,
               "towns": sorted({p[0] for p in plan}), "drives": drives_meta,
               "labels": "Labels.point_meta: -1 background, 0 unknown static, 1 SMALLMOT, 2 BIGMOT, 3 NONMOT, 4 PEDESTRIAN"}
    atomic_write_text(out / "dataset.json", json.dumps(summary, indent=1) + "\n")
    return DatasetSummary(out, frames, len(plan), len(summary["towns"]), time.perf_counter() - t0)
