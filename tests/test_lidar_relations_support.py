"""Fixtures for the LiDAR-relation tests (no tests here): a simulated labelled sweep and a flawed SUT.

* :func:`simulated_frames`: ``lidarmt.lidar.sim`` drives one (or more) HDL-64E sweeps through the demo town and writes
  them with their ground truth (boxes, per-point instances) as a ``.npz`` folder, beside the town's HD map.
* :class:`RelativeSut`: the grid SUT of :mod:`test_fuzz_support` with a frame-relative classifier (an obstacle
  smaller than the frame's median obstacle is "unknown"): removing an object moves the median and re-classifies
  others, a flaw the removal relation must catch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from test_fuzz_support import GridSut

from lidarmt.types import ObstacleClass, Obstacles


def simulated_frames(root: Path, *, frames: int = 1, seed: int = 7) -> tuple[Path, Path]:
    """``(frames folder, map folder)`` of a simulated drive under ``root``."""
    from lidarmt.io import open_recording, save_frame_npz
    from lidarmt.lidar.sim.record import load_labels, simulate_recording

    root.mkdir(parents=True, exist_ok=True)
    simulate_recording(root / "demo.bag", root / "map", seed=seed, frames=frames, camera=False)
    labels = load_labels(root / "demo.bag")
    out = root / "frames"
    out.mkdir()
    with open_recording(str(root / "demo.bag")) as rec:
        for i in range(len(rec)):
            save_frame_npz(out / f"{i:06d}.npz", dataclasses.replace(rec[i], labels=labels[i]))
    return out, root / "map"


class RelativeSut(GridSut):
    name = "relative-test"

    def detect(self, frame, roi) -> Obstacles:
        obs = super().detect(frame, roi)
        if not len(obs):
            return obs
        areas = sorted(o.length * o.width for o in obs)
        median = areas[len(areas) // 2]
        for o in obs:
            if o.length * o.width < median:
                o.cls = ObstacleClass.UNKNOWN
        return obs


def relative_sut(**kw) -> RelativeSut:
    return RelativeSut(**kw)
