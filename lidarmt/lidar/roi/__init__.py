"""HD maps and Apollo's HDMap ROI filter.

* :func:`load_map` / :func:`write_map`: Apollo ``base_map.bin`` / ``.txt`` / ``.xml`` and GeoJSON maps <-> the
  project's :class:`HDMap` model.
* :class:`HDMapRoi`: Apollo's query (lanes within 60 m -> road-section and junction polygons) and
  ``mask(pose) -> RoiMask``, the bitmap ROI (implements :class:`lidarmt.types.Roi`).
* :class:`SensorPolygonRoi`: the same for GeoJSON maps drawn in sensor coordinates (no pose).
* :class:`LabelRoi` / :func:`label_roi`: Apollo-style area ROI from per-point ground labels (``GROUND_LABELS``:
  road, parking, sidewalk, other-ground), for real frames without a map (``--roi labels``); every point above the
  labelled ground is inside. :class:`PointLabelRoi` (the labelled points themselves) is kept for the API only:
  no command uses it.

Example::

    hd = load_map("hdmaps/demo")            # a folder with base_map.bin, or a file
    roi = HDMapRoi(hd).mask(frame.pose)     # range 70 m, 0.25 m cells, as Apollo
    idx = roi.indices(frame)                # points perception may report obstacles from
"""

from lidarmt import utm  # noqa: F401  (lived here as lidarmt.roi.utm; kept as an attribute for old imports)
from lidarmt.lidar.roi.bitmap import PointLabelRoi, RoiMask
from lidarmt.lidar.roi.errors import MapError, MapFormatError, MapProjectionError, RoiArgumentError
from lidarmt.lidar.roi.mapio import (
    load_geojson,
    load_map,
    map_from_proto,
    map_to_proto,
    maps_equal,
    write_map,
)
from lidarmt.lidar.roi.model import (
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
from lidarmt.lidar.roi.query import (
    GROUND_LABELS,
    HDMapRoi,
    LabelRoi,
    SensorPolygonRoi,
    downsample_boundary,
    label_roi,
    section_polygon,
)

__all__ = [
    "GROUND_LABELS",
    "HDMapRoi",
    "LabelRoi",
    "label_roi",
    "PointLabelRoi",
    "RoiMask",
    "SensorPolygonRoi",
    "downsample_boundary",
    "section_polygon",
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
