"""HD maps and Apollo's HDMap ROI filter.

* :func:`load_map` / :func:`write_map`: Apollo ``base_map.bin`` / ``.txt`` / ``.xml`` and GeoJSON maps <-> the
  project's :class:`HDMap` model.
"""

from lidarmt.roi.errors import MapError, MapFormatError, MapProjectionError, RoiArgumentError
from lidarmt.roi.mapio import load_geojson, load_map, map_from_proto, map_to_proto, maps_equal, write_map
from lidarmt.roi.model import (
    BoundaryEdge,
    Crosswalk,
    EdgeType,
    HDMap,
    Junction,
    Lane,
    MapHeader,
    Road,
    RoadSection,
)

__all__ = [
    "BoundaryEdge",
    "Crosswalk",
    "EdgeType",
    "HDMap",
    "Junction",
    "Lane",
    "MapError",
    "MapFormatError",
    "MapHeader",
    "MapProjectionError",
    "Road",
    "RoadSection",
    "RoiArgumentError",
    "load_geojson",
    "load_map",
    "map_from_proto",
    "map_to_proto",
    "maps_equal",
    "write_map",
]
