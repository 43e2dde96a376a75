"""lidarmt: metamorphic fuzzing of LiDAR obstacle perception.

The shared vocabulary lives in :mod:`lidarmt.types` (Frame, Obstacle, ...); errors in :mod:`lidarmt.errors`.
"""

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
