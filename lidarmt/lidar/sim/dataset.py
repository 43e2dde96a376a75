"""Training data without a bag: many short drives through several seed-derived towns, one .npz per frame.

Layout of a dataset folder::

    data/train/
        dataset.json        what was generated and by what: arguments, drives (town seed, drive seed, frames,
                            sweeps, map), the towns' maps, and the simulator's provenance (see below)
        000000.npz          lidarmt.io.npz frames: points (x, y, z, intensity, ring, time), pose, Labels
        000001.npz
        ...
        maps/town_<seed>/   the HD map of every town the drives use (base_map.bin, .txt, .geojson), so the
                            ROI of a frame can be rebuilt exactly even after the simulator changes

Frame ``i`` belongs to the drive whose ``frames`` range ``[first, last]`` in ``dataset.json`` contains it; that
drive names its ``town_seed`` and its ``map`` folder (relative to the dataset folder). Each frame's provenance
``detail`` also says ``town <seed> drive <seed> sweep <k>``.

``dataset.json["provenance"]`` says which simulator made the frames: the lidarmt version, the git commit of
the checkout lidarmt was imported from (null when it is not a git checkout or git is missing) and whether
``lidarmt/lidar/sim`` had uncommitted changes, a sha256 fingerprint of the simulator's sources (works without git,
see :func:`simulator_fingerprint`), and the arguments of the call with the equivalent ``lidarmt simulate``
command line. It holds no time stamps: the same arguments and sources give a byte-identical ``dataset.json``.

Variety: drive ``d`` of a dataset with seed ``S`` runs in town ``town_seed = S * 1000 + d // drives_per_town``
with scene seed ``S * 100000 + d``; every drive has its own traffic, parked cars, pedestrians, sensor
height (1.73-1.95 m) and speed, and each town its own road layout. Of each drive only every ``stride``-th
sweep is kept so neighbouring samples differ. Generation is deterministic: the same arguments give
byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lidarmt._atomic import atomic_write_text, remove_stale_temporaries
from lidarmt.lidar.sim.errors import SimArgumentError, SimOutputError


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    out_dir: Path
    frames: int
    drives: int
    towns: int
    seconds: float
    #: hidden temporaries of the dataset's files that an interrupted (SIGKILLed) earlier run had left, now deleted
    removed: tuple[Path, ...] = ()


FORMAT = "lidarmt-sim-dataset/2"
#: folder of a town's map inside a dataset folder (evaluation looks here, see lidarmt.lidar.perception.apollo.evaluate)
MAP_DIR = "maps/town_{seed}"
#: the files of a dataset folder (frames and dataset.json), as a regular expression of their names
DATASET_FILES = r"\d{6}\.npz|dataset\.json"
_SIM_DIR = Path(__file__).resolve().parent


def simulator_fingerprint(sim_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """sha256 over the simulator's sources: for each ``lidarmt/lidar/sim/*.py`` in sorted name order, the file name,
    a NUL byte, the file's bytes and a NUL byte. Two datasets with the same fingerprint (and arguments) were
    made by the same simulator code, whether or not it came from a git checkout."""
    folder = Path(sim_dir) if sim_dir is not None else _SIM_DIR
    h = hashlib.sha256()
    files = sorted(folder.glob("*.py"), key=lambda p: p.name)
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return {"sha256": h.hexdigest(), "files": [f.name for f in files]}


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None  # git missing or hanging
    return r.stdout if r.returncode == 0 else None


def git_state(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``{"commit": HEAD or None, "dirty": bool or None}`` of the git checkout lidarmt was imported from.

    ``root`` defaults to the folder holding the ``lidarmt`` package. Only a checkout whose top level *is* that
    folder counts (an installed copy inside some other repository gives None). ``dirty`` says whether
    ``git status --porcelain -- lidarmt/lidar/sim`` lists anything (uncommitted simulator changes)."""
    base = Path(root) if root is not None else _SIM_DIR.parents[2]
    top = _git(base, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != base.resolve():
        return {"commit": None, "dirty": None}
    head = _git(base, "rev-parse", "HEAD")
    status = _git(base, "status", "--porcelain", "--", "lidarmt/lidar/sim")
    return {"commit": head.strip() if head else None, "dirty": None if status is None else bool(status.strip())}


def provenance(arguments: dict[str, Any]) -> dict[str, Any]:
    """The ``provenance`` block of ``dataset.json`` for a dataset made with ``arguments``."""
    import lidarmt

    a = arguments
    command = (f"lidarmt simulate --dataset DIR --frames {a['frames']} --seed {a['seed']} --density {a['density']!r} "
               f"--frames-per-drive {a['frames_per_drive']} --drives-per-town {a['drives_per_town']} "
               f"--stride {a['stride']}")
    return {"lidarmt_version": lidarmt.__version__, "git": git_state(), "simulator": simulator_fingerprint(),
            "arguments": dict(arguments), "command": command}


def _clear_stale_maps(out: Path, keep: set[int]) -> None:
    """Remove ``maps/town_<seed>`` folders of an overwritten dataset whose towns the new plan does not use."""
    maps = out / "maps"
    if not maps.is_dir():
        return
    for d in maps.iterdir():
        m = re.fullmatch(r"town_(\d+)", d.name)
        if d.is_dir() and m and int(m.group(1)) not in keep:
            shutil.rmtree(d)


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
    sensor: str = "hdl64",
) -> DatasetSummary:
    """Write ``frames`` labelled frames as ``out_dir/NNNNNN.npz``, each town's HD map as
    ``out_dir/maps/town_<seed>/`` and ``dataset.json`` (see the module doc).

    ``on_frame(done, total)`` is called after each frame (for progress bars). Refuses a non-empty
    ``out_dir`` unless ``overwrite`` (then the old ``*.npz`` frames and ``maps/town_*`` folders there are
    replaced). ``dataset.json`` is written last, so a folder with one describes a finished dataset.
    """
    import time

    from lidarmt.io.npz import save_frame_npz
    from lidarmt.lidar.sim.drive import STAMP0, Drive
    from lidarmt.lidar.sim.lidar import sensor_model

    if frames < 1:
        raise SimArgumentError(f"--frames must be at least 1, got {frames}")
    if frames_per_drive < 1 or drives_per_town < 1 or stride < 1:
        raise SimArgumentError("frames_per_drive, drives_per_town and stride must be at least 1")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise SimOutputError(f"{out} exists and is not a folder; choose another --dataset path")
    # a run killed by SIGKILL leaves hidden temporaries (.000012.npz.1a2b3c4d.tmp) that no later run would touch:
    # remove lidarmt's own temporaries of the dataset's files (none that a process holds open)
    removed = remove_stale_temporaries(out, DATASET_FILES)
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise SimOutputError(f"{out} is not empty; pass --overwrite to replace its frames, or choose a new folder")
        (out / "dataset.json").unlink(missing_ok=True)  # written again once the new frames are complete
        for old in out.glob("*.npz"):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    plan = drive_plan(frames, seed, frames_per_drive=frames_per_drive, drives_per_town=drives_per_town, stride=stride)
    arguments = {"frames": frames, "seed": seed, "frames_per_drive": frames_per_drive,
                 "drives_per_town": drives_per_town, "stride": stride, "density": density}
    if sensor != "hdl64":  # the default leaves dataset.json as it read before sensor profiles
        arguments["sensor"] = sensor
    prov = provenance(arguments)  # before simulating: the sources that are about to run
    if overwrite:
        _clear_stale_maps(out, {p[0] for p in plan})
    towns: dict[int, object] = {}
    index = 0
    drives_meta = []
    from lidarmt.lidar.sim.record import MAP_FILES, write_town_map
    from lidarmt.lidar.sim.scene import build_scene
    from lidarmt.lidar.sim.town import build_town

    model = sensor_model(sensor)
    for d, (town_seed, drive_seed, n) in enumerate(plan):
        if town_seed not in towns:
            towns.clear()  # keep one town in memory
            towns[town_seed] = build_town(town_seed)
            removed += remove_stale_temporaries(out / MAP_DIR.format(seed=town_seed), MAP_FILES)
            # towns follow each other in the plan, so each is built, and its map written, once
            write_town_map(towns[town_seed], out / MAP_DIR.format(seed=town_seed), name=f"lidarmt_town_{town_seed}",
                           overwrite=True)
        town = towns[town_seed]
        scene = build_scene(town, drive_seed, duration=(n * stride + 1) / 10.0, density=density)  # type: ignore[arg-type]
        drive = Drive(town, scene, seed=drive_seed, stamp0=STAMP0 + d * 1000.0, source=str(out),  # type: ignore[arg-type]
                      sensor=model)
        first = index
        for j in range(n):
            frame = drive.frame(j * stride, index=index)
            save_frame_npz(out / f"{index:06d}.npz", frame)
            index += 1
            if on_frame is not None:
                on_frame(index, frames)
        drives_meta.append({"drive": d, "town_seed": town_seed, "drive_seed": drive_seed, "frames": [first, index - 1],
                            "map": MAP_DIR.format(seed=town_seed), "sweeps": [j * stride for j in range(n)],
                            "sensor_height": round(scene.ego.sensor_height, 4), "speed": round(scene.ego.speed, 3)})
    town_seeds = sorted({p[0] for p in plan})
    summary = {"format": FORMAT, "seed": seed, "frames": frames, "frames_per_drive": frames_per_drive,
               "drives_per_town": drives_per_town, "stride": stride, "density": density,
               "towns": town_seeds, "maps": {str(t): MAP_DIR.format(seed=t) for t in town_seeds},
               "provenance": prov, "drives": drives_meta,
               "labels": "Labels.point_meta: -1 background, 0 unknown static, 1 SMALLMOT, 2 BIGMOT, 3 NONMOT, 4 PEDESTRIAN"}
    atomic_write_text(out / "dataset.json", json.dumps(summary, indent=1) + "\n")
    return DatasetSummary(out, frames, len(plan), len(summary["towns"]), time.perf_counter() - t0, tuple(removed))
