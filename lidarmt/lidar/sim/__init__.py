"""The synthetic HDL-64E world: procedural towns, traffic, a Velodyne HDL-64E and a front camera.

* :func:`build_town` (lidarmt.lidar.sim.town): roads, lanes, junctions, sidewalks, crosswalks and the HD map.
* :func:`build_scene` (lidarmt.lidar.sim.scene): buildings, trees, street furniture, parked cars and traffic.
* :class:`Drive` (lidarmt.lidar.sim.drive): the ego's route and the labelled LiDAR frames.
* :func:`generate_dataset` (lidarmt.lidar.sim.dataset): many labelled .npz frames for training.
* :func:`simulate_recording` and :func:`ensure_demo` (lidarmt.lidar.sim.record): an Apollo-style ROS1 bag and map.

Names are imported lazily, so ``import lidarmt.lidar.sim`` stays cheap (open3d and numba load on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_town": "lidarmt.lidar.sim.town",
    "Town": "lidarmt.lidar.sim.town",
    "build_scene": "lidarmt.lidar.sim.scene",
    "Scene": "lidarmt.lidar.sim.scene",
    "Drive": "lidarmt.lidar.sim.drive",
    "Hdl64e": "lidarmt.lidar.sim.lidar",
    "hdl64e_elevations": "lidarmt.lidar.sim.lidar",
    "generate_dataset": "lidarmt.lidar.sim.dataset",
    "DatasetSummary": "lidarmt.lidar.sim.dataset",
    "simulate_recording": "lidarmt.lidar.sim.record",
    "ensure_demo": "lidarmt.lidar.sim.record",
    "write_town_map": "lidarmt.lidar.sim.record",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'lidarmt.lidar.sim' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
