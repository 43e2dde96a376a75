"""The project's own HD-map model: what the ROI filter needs from an Apollo map, nothing more.

Loaders (Apollo binary/text protobuf, OpenDRIVE-style XML, GeoJSON) build it; writers turn it back into those
formats (the simulator writes its towns this way). Coordinates are world/map metres (UTM-like), float64,
arrays of shape (N, 2) or (N, 3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np


class EdgeType(enum.IntEnum):
    """apollo.hdmap.BoundaryEdge.Type."""

    UNKNOWN = 0
    NORMAL = 1
    LEFT_BOUNDARY = 2
    RIGHT_BOUNDARY = 3


@dataclass(slots=True)
class BoundaryEdge:
    type: EdgeType
    points: np.ndarray  # (N, 2|3) polyline (the line_segment points of the edge's curve)
    # Point indices (> 0) at which a new CurveSegment of the curve starts; empty for a one-segment curve.
    # Apollo downsamples each line_segment on its own, so the pieces are kept apart (added by the roi helper).
    breaks: list[int] = field(default_factory=list)

    def pieces(self) -> list[np.ndarray]:
        """The polyline split into its curve segments (one array when ``breaks`` is empty)."""
        if not self.breaks:
            return [self.points]
        return list(np.split(self.points, self.breaks))


@dataclass(slots=True)
class RoadSection:
    id: str
    lane_ids: list[str] = field(default_factory=list)
    edges: list[BoundaryEdge] = field(default_factory=list)  # outer polygon's edges
    holes: list[list[BoundaryEdge]] = field(default_factory=list)


@dataclass(slots=True)
class Road:
    id: str
    sections: list[RoadSection] = field(default_factory=list)
    junction_id: str | None = None
    type: int = 2  # Road.Type CITY_ROAD


@dataclass(slots=True)
class Lane:
    id: str
    central_curve: np.ndarray  # (N, 2|3)
    left_boundary: np.ndarray | None = None
    right_boundary: np.ndarray | None = None
    length: float = 0.0
    speed_limit: float = 0.0
    type: int = 2  # LaneType CITY_DRIVING
    turn: int = 1  # LaneTurn NO_TURN
    direction: int = 1  # LaneDirection FORWARD
    left_boundary_types: list[int] = field(default_factory=list)  # LaneBoundaryType.Type values
    right_boundary_types: list[int] = field(default_factory=list)
    predecessor_ids: list[str] = field(default_factory=list)
    successor_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Junction:
    id: str
    polygon: np.ndarray  # (N, 2|3)


@dataclass(slots=True)
class Crosswalk:
    id: str
    polygon: np.ndarray


@dataclass(slots=True)
class MapHeader:
    version: str = "1.500000"
    date: str = ""
    proj: str = ""  # PROJ.4, e.g. "+proj=utm +zone=10 +ellps=WGS84 +datum=WGS84 +units=m +no_defs"
    district: str = ""
    vendor: str = ""


@dataclass(slots=True)
class HDMap:
    header: MapHeader = field(default_factory=MapHeader)
    lanes: list[Lane] = field(default_factory=list)
    roads: list[Road] = field(default_factory=list)
    junctions: list[Junction] = field(default_factory=list)
    crosswalks: list[Crosswalk] = field(default_factory=list)
    source: str = ""  # file it was read from, for messages
    frame: str = "world"  # "world", or "sensor" for a GeoJSON map drawn in sensor coordinates

    def bounds(self) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) over every vertex of the map's geometry."""
        pts = [ln.central_curve[:, :2] for ln in self.lanes]
        pts += [j.polygon[:, :2] for j in self.junctions]
        pts += [e.points[:, :2] for r in self.roads for s in r.sections for e in s.edges]
        if not pts:
            raise ValueError("the map holds no geometry")
        a = np.concatenate(pts)
        return float(a[:, 0].min()), float(a[:, 1].min()), float(a[:, 0].max()), float(a[:, 1].max())
