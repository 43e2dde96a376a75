"""lidarmt: metamorphic fuzzing of LiDAR obstacle perception.

The shared vocabulary lives in :mod:`lidarmt.types` (Frame, Obstacle, ...); errors in :mod:`lidarmt.errors`.
The tree (ARCHITECTURE.md): :mod:`lidarmt.engine` (the campaign engine both halves run on), :mod:`lidarmt.lidar` and
:mod:`lidarmt.camera` (the two halves), :mod:`lidarmt.coverage`, :mod:`lidarmt.search` and :mod:`lidarmt.bench`
across both, :mod:`lidarmt.cli` on top. Module paths from before that layout still import (:mod:`lidarmt._compat`).
"""

from lidarmt import _compat
from lidarmt.types import (
    Frame,
    Labels,
    MetaType,
    Obstacle,
    ObstacleClass,
    Obstacles,
    Provenance,
)

__version__ = "0.1.0"

_compat.install()

__all__ = [
    "Frame",
    "Labels",
    "MetaType",
    "Obstacle",
    "ObstacleClass",
    "Obstacles",
    "Provenance",
    "__version__",
]
