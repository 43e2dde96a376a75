"""LiDAR transformations: deterministic functions of (frame, parameters, seed) with per-point provenance.

    from lidarmt.lidar.transforms import get_transform, list_transforms
    fog = get_transform("fog")
    change = fog.apply(frame, fog.levels["moderate"], seed=0)
    change.frame, change.origin, change.modified

See :mod:`lidarmt.lidar.transforms.base` for the protocol and :mod:`lidarmt.lidar.transforms.registry` for the
names, families and plug-ins (entry points ``lidarmt.lidar_transform``); docs/lidar-transforms.md documents each
transformation's physical model.
"""

from lidarmt.lidar.transforms.base import (
    FAMILIES,
    LEVELS,
    LidarChange,
    LidarTransform,
    Param,
    TransformContext,
    apply_edits,
    n_edits,
    resolve_params,
)
from lidarmt.lidar.transforms.registry import get_transform, list_transforms, select

__all__ = ["FAMILIES", "LEVELS", "LidarChange", "LidarTransform", "Param", "TransformContext", "apply_edits",
           "get_transform", "list_transforms", "n_edits", "resolve_params", "select"]
