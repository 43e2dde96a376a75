"""The synthetic HDL-64E world: procedural towns, traffic, a Velodyne HDL-64E and a front camera.

* :func:`build_town` (lidarmt.sim.town): roads, lanes, junctions, sidewalks, crosswalks and the HD map.
* :func:`build_scene` (lidarmt.sim.scene): buildings, trees, street furniture, parked cars and traffic.
* :class:`Drive` (lidarmt.sim.drive): the ego's route and the labelled LiDAR frames.
* :func:`generate_dataset` (lidarmt.sim.dataset): many labelled .npz frames for training.
* :func:`simulate_recording` and :func:`ensure_demo` (lidarmt.sim.record): an Apollo-style ROS1 bag and map.

Names are imported lazily, so ``import lidarmt.sim`` stays cheap (open3d and numba load on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_town": "lidarmt.sim.town",
    "Town": "lidarmt.sim.town",
    "build_scene": "lidarmt.sim.scene",
    "Scene": "lidarmt.sim.scene",
    "Drive": "lidarmt.sim.drive",
    "Hdl64e": "lidarmt.sim.lidar",
    "hdl64e_elevations": "lidarmt.sim.lidar",
    "generate_dataset": "lidarmt.sim.dataset",
    "DatasetSummary": "lidarmt.sim.dataset",
    "simulate_recording": "lidarmt.sim.record",
    "ensure_demo": "lidarmt.sim.record",
    "write_town_map": "lidarmt.sim.record",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'lidarmt.sim' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
