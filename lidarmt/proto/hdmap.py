"""``apollo.hdmap``: the HD-map messages of ``base_map.bin`` / ``sim_map.txt`` (apollo-proto-facts.md §1).

Every member of ``apollo.hdmap.Map`` up to field 14 is defined, with all of its fields, so that Apollo's real maps
parse with no unknown field left over and re-serialise to the original bytes. Field numbers come from Apollo's
public ``modules/map/proto/*.proto`` files (2.x-6.x layout); all messages are proto2 like Apollo's.

Use :func:`parse_map` / :func:`parse_map_text` to read a map and ``Map.SerializeToString()`` /
:func:`map_to_text` to write one.
"""

from __future__ import annotations

from google.protobuf import text_format

import lidarmt.proto.common  # noqa: F401  (defines apollo.common.PointENU, which the map file depends on)
from lidarmt.proto._schema import Enum, Field, Message, define_file
from lidarmt.proto.common import FILE as COMMON_FILE

FILE = "lidarmt/apollo/hdmap.proto"

_PT = ".apollo.common.PointENU"


def _id(name: str = "id", number: int = 1, *, repeated: bool = False) -> Field:
    return Field(name, number, "Id", repeated=repeated)


_MESSAGES = [
    # --- map_id.proto, map_geometry.proto
    Message("Id", [Field("id", 1, "string")]),
    Message("Polygon", [Field("point", 1, _PT, repeated=True)]),
    Message("LineSegment", [Field("point", 1, _PT, repeated=True)]),
    Message(
        "CurveSegment",
        [
            Field("line_segment", 1, "LineSegment", oneof="curve_type"),
            Field("s", 6, "double"),
            Field("start_position", 7, _PT),
            Field("heading", 8, "double"),
            Field("length", 9, "double"),
        ],
    ),
    Message("Curve", [Field("segment", 1, "CurveSegment", repeated=True)]),
    # --- map.proto header
    Message("Projection", [Field("proj", 1, "string")]),
    Message(
        "Header",
        [
            Field("version", 1, "bytes"),
            Field("date", 2, "bytes"),
            Field("projection", 3, "Projection"),
            Field("district", 4, "bytes"),
            Field("generation", 5, "bytes"),
            Field("rev_major", 6, "bytes"),
            Field("rev_minor", 7, "bytes"),
            Field("left", 8, "double"),
            Field("top", 9, "double"),
            Field("right", 10, "double"),
            Field("bottom", 11, "double"),
            Field("vendor", 12, "bytes"),
        ],
    ),
    # --- map_lane.proto
    Message(
        "LaneBoundaryType",
        [Field("s", 1, "double"), Field("types", 2, "enum:LaneBoundaryType.Type", repeated=True)],
        enums=[
            Enum(
                "Type",
                [
                    ("UNKNOWN", 0),
                    ("DOTTED_YELLOW", 1),
                    ("DOTTED_WHITE", 2),
                    ("SOLID_YELLOW", 3),
                    ("SOLID_WHITE", 4),
                    ("DOUBLE_YELLOW", 5),
                    ("CURB", 6),
                ],
            )
        ],
    ),
    Message(
        "LaneBoundary",
        [
            Field("curve", 1, "Curve"),
            Field("length", 2, "double"),
            Field("virtual", 3, "bool"),
            Field("boundary_type", 4, "LaneBoundaryType", repeated=True),
        ],
    ),
    Message("LaneSampleAssociation", [Field("s", 1, "double"), Field("width", 2, "double")]),
    Message(
        "Lane",
        [
            _id(),
            Field("central_curve", 2, "Curve"),
            Field("left_boundary", 3, "LaneBoundary"),
            Field("right_boundary", 4, "LaneBoundary"),
            Field("length", 5, "double"),
            Field("speed_limit", 6, "double"),
            _id("overlap_id", 7, repeated=True),
            _id("predecessor_id", 8, repeated=True),
            _id("successor_id", 9, repeated=True),
            _id("left_neighbor_forward_lane_id", 10, repeated=True),
            _id("right_neighbor_forward_lane_id", 11, repeated=True),
            Field("type", 12, "enum:Lane.LaneType"),
            Field("turn", 13, "enum:Lane.LaneTurn"),
            _id("left_neighbor_reverse_lane_id", 14, repeated=True),
            _id("right_neighbor_reverse_lane_id", 15, repeated=True),
            _id("junction_id", 16),
            Field("left_sample", 17, "LaneSampleAssociation", repeated=True),
            Field("right_sample", 18, "LaneSampleAssociation", repeated=True),
            Field("direction", 19, "enum:Lane.LaneDirection"),
            Field("left_road_sample", 20, "LaneSampleAssociation", repeated=True),
            Field("right_road_sample", 21, "LaneSampleAssociation", repeated=True),
            _id("self_reverse_lane_id", 22, repeated=True),
        ],
        enums=[
            Enum(
                "LaneType",
                [
                    ("NONE", 1),
                    ("CITY_DRIVING", 2),
                    ("BIKING", 3),
                    ("SIDEWALK", 4),
                    ("PARKING", 5),
                    ("SHOULDER", 6),
                    ("SHARED", 7),
                ],
            ),
            Enum("LaneTurn", [("NO_TURN", 1), ("LEFT_TURN", 2), ("RIGHT_TURN", 3), ("U_TURN", 4)]),
            Enum("LaneDirection", [("FORWARD", 1), ("BACKWARD", 2), ("BIDIRECTION", 3)]),
        ],
    ),
    # --- map_road.proto
    Message(
        "BoundaryEdge",
        [Field("curve", 1, "Curve"), Field("type", 2, "enum:BoundaryEdge.Type")],
        enums=[Enum("Type", [("UNKNOWN", 0), ("NORMAL", 1), ("LEFT_BOUNDARY", 2), ("RIGHT_BOUNDARY", 3)])],
    ),
    Message("BoundaryPolygon", [Field("edge", 1, "BoundaryEdge", repeated=True)]),
    Message(
        "RoadBoundary",
        [Field("outer_polygon", 1, "BoundaryPolygon"), Field("hole", 2, "BoundaryPolygon", repeated=True)],
    ),
    Message("RoadROIBoundary", [_id(), Field("road_boundaries", 2, "RoadBoundary", repeated=True)]),
    Message(
        "RoadSection",
        [_id(), _id("lane_id", 2, repeated=True), Field("boundary", 3, "RoadBoundary")],
    ),
    Message(
        "Road",
        [
            _id(),
            Field("section", 2, "RoadSection", repeated=True),
            _id("junction_id", 3),
            Field("type", 4, "enum:Road.Type"),
        ],
        enums=[Enum("Type", [("UNKNOWN", 0), ("HIGHWAY", 1), ("CITY_ROAD", 2), ("PARK", 3)])],
    ),
    # --- map_junction.proto, map_crosswalk.proto
    Message(
        "Junction",
        [_id(), Field("polygon", 2, "Polygon"), _id("overlap_id", 3, repeated=True),
         Field("type", 4, "enum:Junction.Type")],
        enums=[
            Enum(
                "Type",
                [("UNKNOWN", 0), ("IN_ROAD", 1), ("CROSS_ROAD", 2), ("FORK_ROAD", 3), ("MAIN_SIDE", 4),
                 ("DEAD_END", 5)],
            )
        ],
    ),
    Message("Crosswalk", [_id(), Field("polygon", 2, "Polygon"), _id("overlap_id", 3, repeated=True)]),
    # --- map_stop_sign.proto, map_signal.proto, map_yield_sign.proto, map_clear_area.proto, ...
    Message(
        "StopSign",
        [
            _id(),
            Field("stop_line", 2, "Curve", repeated=True),
            _id("overlap_id", 3, repeated=True),
            Field("type", 4, "enum:StopSign.StopType"),
        ],
        enums=[
            Enum(
                "StopType",
                [("UNKNOWN", 0), ("ONE_WAY", 1), ("TWO_WAY", 2), ("THREE_WAY", 3), ("FOUR_WAY", 4),
                 ("ALL_WAY", 5)],
            )
        ],
    ),
    Message(
        "Subsignal",
        [_id(), Field("type", 2, "enum:Subsignal.Type"), Field("location", 3, _PT)],
        enums=[
            Enum(
                "Type",
                [
                    ("UNKNOWN", 1),
                    ("CIRCLE", 2),
                    ("ARROW_LEFT", 3),
                    ("ARROW_FORWARD", 4),
                    ("ARROW_RIGHT", 5),
                    ("ARROW_LEFT_AND_FORWARD", 6),
                    ("ARROW_RIGHT_AND_FORWARD", 7),
                    ("ARROW_U_TURN", 8),
                ],
            )
        ],
    ),
    Message(
        "SignInfo",
        [Field("type", 1, "enum:SignInfo.Type")],
        enums=[Enum("Type", [("None", 0), ("NO_RIGHT_TURN_ON_RED", 1)])],
    ),
    Message(
        "Signal",
        [
            _id(),
            Field("boundary", 2, "Polygon"),
            Field("subsignal", 3, "Subsignal", repeated=True),
            _id("overlap_id", 4, repeated=True),
            Field("type", 5, "enum:Signal.Type"),
            Field("stop_line", 6, "Curve", repeated=True),
            Field("sign_info", 7, "SignInfo", repeated=True),
        ],
        enums=[
            Enum(
                "Type",
                [
                    ("UNKNOWN", 1),
                    ("MIX_2_HORIZONTAL", 2),
                    ("MIX_2_VERTICAL", 3),
                    ("MIX_3_HORIZONTAL", 4),
                    ("MIX_3_VERTICAL", 5),
                    ("SINGLE", 6),
                ],
            )
        ],
    ),
    Message(
        "YieldSign", [_id(), Field("stop_line", 2, "Curve", repeated=True), _id("overlap_id", 3, repeated=True)]
    ),
    Message("ClearArea", [_id(), _id("overlap_id", 2, repeated=True), Field("polygon", 3, "Polygon")]),
    Message(
        "SpeedBump", [_id(), _id("overlap_id", 2, repeated=True), Field("position", 3, "Curve", repeated=True)]
    ),
    Message(
        "ParkingSpace",
        [_id(), Field("polygon", 2, "Polygon"), _id("overlap_id", 3, repeated=True), Field("heading", 4, "double")],
    ),
    # --- map_pnc_junction.proto, map_rsu.proto
    Message(
        "Passage",
        [
            _id(),
            _id("signal_id", 2, repeated=True),
            _id("yield_id", 3, repeated=True),
            _id("stop_sign_id", 4, repeated=True),
            _id("lane_id", 5, repeated=True),
            Field("type", 6, "enum:Passage.Type"),
        ],
        enums=[Enum("Type", [("UNKNOWN", 0), ("ENTRANCE", 1), ("EXIT", 2)])],
    ),
    Message("PassageGroup", [_id(), Field("passage", 2, "Passage", repeated=True)]),
    Message(
        "PNCJunction",
        [
            _id(),
            Field("polygon", 2, "Polygon"),
            _id("overlap_id", 3, repeated=True),
            Field("passage_group", 4, "PassageGroup", repeated=True),
        ],
    ),
    Message("RSU", [_id(), _id("junction_id", 2), _id("overlap_id", 3, repeated=True)]),
    # --- map_overlap.proto
    Message(
        "LaneOverlapInfo",
        [
            Field("start_s", 1, "double"),
            Field("end_s", 2, "double"),
            Field("is_merge", 3, "bool"),
            _id("region_overlap_id", 4),
        ],
    ),
    Message("SignalOverlapInfo", []),
    Message("StopSignOverlapInfo", []),
    Message("CrosswalkOverlapInfo", [_id("region_overlap_id", 1)]),
    Message("JunctionOverlapInfo", []),
    Message("YieldOverlapInfo", []),
    Message("ClearAreaOverlapInfo", []),
    Message("SpeedBumpOverlapInfo", []),
    Message("ParkingSpaceOverlapInfo", []),
    Message("PNCJunctionOverlapInfo", []),
    Message("RSUOverlapInfo", []),
    Message(
        "ObjectOverlapInfo",
        [
            _id(),
            Field("lane_overlap_info", 3, "LaneOverlapInfo", oneof="overlap_info"),
            Field("signal_overlap_info", 4, "SignalOverlapInfo", oneof="overlap_info"),
            Field("stop_sign_overlap_info", 5, "StopSignOverlapInfo", oneof="overlap_info"),
            Field("crosswalk_overlap_info", 6, "CrosswalkOverlapInfo", oneof="overlap_info"),
            Field("junction_overlap_info", 7, "JunctionOverlapInfo", oneof="overlap_info"),
            Field("yield_sign_overlap_info", 8, "YieldOverlapInfo", oneof="overlap_info"),
            Field("clear_area_overlap_info", 9, "ClearAreaOverlapInfo", oneof="overlap_info"),
            Field("speed_bump_overlap_info", 10, "SpeedBumpOverlapInfo", oneof="overlap_info"),
            Field("parking_space_overlap_info", 11, "ParkingSpaceOverlapInfo", oneof="overlap_info"),
            Field("pnc_junction_overlap_info", 12, "PNCJunctionOverlapInfo", oneof="overlap_info"),
            Field("rsu_overlap_info", 13, "RSUOverlapInfo", oneof="overlap_info"),
        ],
    ),
    Message("RegionOverlapInfo", [_id(), Field("polygon", 2, "Polygon", repeated=True)]),
    Message(
        "Overlap",
        [
            _id(),
            Field("object", 2, "ObjectOverlapInfo", repeated=True),
            Field("region_overlap", 3, "RegionOverlapInfo", repeated=True),
        ],
    ),
    # --- map.proto
    Message(
        "Map",
        [
            Field("header", 1, "Header"),
            Field("crosswalk", 2, "Crosswalk", repeated=True),
            Field("junction", 3, "Junction", repeated=True),
            Field("lane", 4, "Lane", repeated=True),
            Field("stop_sign", 5, "StopSign", repeated=True),
            Field("signal", 6, "Signal", repeated=True),
            Field("yield", 7, "YieldSign", repeated=True),
            Field("overlap", 8, "Overlap", repeated=True),
            Field("clear_area", 9, "ClearArea", repeated=True),
            Field("speed_bump", 10, "SpeedBump", repeated=True),
            Field("road", 11, "Road", repeated=True),
            Field("parking_space", 12, "ParkingSpace", repeated=True),
            Field("pnc_junction", 13, "PNCJunction", repeated=True),
            Field("rsu", 14, "RSU", repeated=True),
        ],
    ),
]

_classes = define_file(FILE, "apollo.hdmap", _MESSAGES, dependencies=[COMMON_FILE])

Id = _classes["Id"]
Polygon = _classes["Polygon"]
LineSegment = _classes["LineSegment"]
CurveSegment = _classes["CurveSegment"]
Curve = _classes["Curve"]
Projection = _classes["Projection"]
Header = _classes["Header"]
LaneBoundaryType = _classes["LaneBoundaryType"]
LaneBoundary = _classes["LaneBoundary"]
LaneSampleAssociation = _classes["LaneSampleAssociation"]
Lane = _classes["Lane"]
BoundaryEdge = _classes["BoundaryEdge"]
BoundaryPolygon = _classes["BoundaryPolygon"]
RoadBoundary = _classes["RoadBoundary"]
RoadROIBoundary = _classes["RoadROIBoundary"]
RoadSection = _classes["RoadSection"]
Road = _classes["Road"]
Junction = _classes["Junction"]
Crosswalk = _classes["Crosswalk"]
StopSign = _classes["StopSign"]
Subsignal = _classes["Subsignal"]
SignInfo = _classes["SignInfo"]
Signal = _classes["Signal"]
YieldSign = _classes["YieldSign"]
ClearArea = _classes["ClearArea"]
SpeedBump = _classes["SpeedBump"]
ParkingSpace = _classes["ParkingSpace"]
Passage = _classes["Passage"]
PassageGroup = _classes["PassageGroup"]
PNCJunction = _classes["PNCJunction"]
RSU = _classes["RSU"]
LaneOverlapInfo = _classes["LaneOverlapInfo"]
SignalOverlapInfo = _classes["SignalOverlapInfo"]
StopSignOverlapInfo = _classes["StopSignOverlapInfo"]
CrosswalkOverlapInfo = _classes["CrosswalkOverlapInfo"]
JunctionOverlapInfo = _classes["JunctionOverlapInfo"]
YieldOverlapInfo = _classes["YieldOverlapInfo"]
ClearAreaOverlapInfo = _classes["ClearAreaOverlapInfo"]
SpeedBumpOverlapInfo = _classes["SpeedBumpOverlapInfo"]
ParkingSpaceOverlapInfo = _classes["ParkingSpaceOverlapInfo"]
PNCJunctionOverlapInfo = _classes["PNCJunctionOverlapInfo"]
RSUOverlapInfo = _classes["RSUOverlapInfo"]
ObjectOverlapInfo = _classes["ObjectOverlapInfo"]
RegionOverlapInfo = _classes["RegionOverlapInfo"]
Overlap = _classes["Overlap"]
Map = _classes["Map"]


def parse_map(data: bytes):
    """Decode a binary ``apollo.hdmap.Map`` (raises ``google.protobuf.message.DecodeError`` when malformed)."""
    msg = Map()
    msg.ParseFromString(data)
    return msg


def parse_map_text(text: str):
    """Decode a protobuf-text ``apollo.hdmap.Map`` (raises ``text_format.ParseError`` when malformed)."""
    msg = Map()
    text_format.Parse(text, msg)
    return msg


def map_to_text(msg) -> str:
    """Protobuf text format of a map, as Apollo's ``sim_map.txt`` files are written."""
    return text_format.MessageToString(msg)


def count_unknown_fields(msg) -> int:
    """Number of unknown fields anywhere in a message tree (0 when the schema covers the whole input)."""
    from google.protobuf import unknown_fields

    total = len(unknown_fields.UnknownFieldSet(msg))
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.is_repeated:
            for sub in value:
                total += count_unknown_fields(sub)
        else:
            total += count_unknown_fields(value)
    return total


__all__ = [name for name in dir() if name[:1].isupper()] + [
    "FILE",
    "count_unknown_fields",
    "map_to_text",
    "parse_map",
    "parse_map_text",
]
