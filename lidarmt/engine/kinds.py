"""The kinds of campaign the engine runs, and rebuilding a configuration from a journal or bundle by its kind.

A run folder's journal header and a bug bundle store the configuration as plain data with a ``kind``; only the
kinds listed here are rebuilt (a kind read from a file never names code to import).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from lidarmt.engine.errors import FuzzInputError
from lidarmt.errors import UserError

# the relations this project ships: kind -> "module:ConfigClass" (a fixed table, never read from a file)
KINDS: dict[str, str] = {
    "lidar-mr1": "lidarmt.lidar.mr1.campaign:CampaignConfig",
    "camera": "lidarmt.camera.campaign:CameraCampaignConfig",
    "camera-search": "lidarmt.search.camera:CameraSearchConfig",
    "lidar-search": "lidarmt.search.lidar:LidarSearchConfig",
    "lidar-condition": "lidarmt.search.lidar:ConditionConfig",
    "camera-coverage": "lidarmt.coverage.campaign:CoverageCampaignConfig",
    "lidar-transform": "lidarmt.lidar.campaign:LidarCampaignConfig",
    "lidar-transform-search": "lidarmt.search.lidar_transforms:TransformSearchConfig",
    "lidar-robustness": "lidarmt.lidar.robustness:RobustnessConfig",
}
DEFAULT_KIND = "lidar-mr1"  # journals written before kinds existed are LiDAR MR1 campaigns


def config_from_dict(d: Mapping[str, Any]) -> Any:
    """Rebuild a campaign configuration from its ``to_dict`` form, by its ``kind`` (from :data:`KINDS` only)."""
    kind = str(d.get("kind", DEFAULT_KIND))
    target = KINDS.get(kind)
    if target is None:
        raise FuzzInputError(f"unknown campaign kind {kind!r} (this lidarmt knows {', '.join(sorted(KINDS))}); "
                             "the run folder or bundle was made by another version")
    mod, _, cls = target.partition(":")
    try:
        return getattr(importlib.import_module(mod), cls).from_dict(d)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as err:
        if isinstance(err, UserError):
            raise
        raise FuzzInputError(f"not a {kind} campaign configuration ({type(err).__name__}: {err}); the run folder "
                             "or bundle was edited or damaged") from err
