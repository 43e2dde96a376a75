"""Reading and writing HD maps: Apollo binary/text protobuf, Apollo OpenDRIVE-style XML, and GeoJSON.

:func:`load_map` takes a file or a map folder and returns the project's :class:`~lidarmt.lidar.roi.model.HDMap`;
:func:`write_map` writes a model as ``base_map.bin`` / ``base_map.txt`` / ``base_map.geojson`` (atomically).

Formats, by file name (a name without a known suffix is sniffed from its first bytes):

* ``*.bin``: binary ``apollo.hdmap.Map`` (Apollo's ``base_map.bin``);
* ``*.txt``: protobuf text format of the same message (``base_map.txt``, ``sim_map.txt``);
* ``*.xml``: Apollo's OpenDRIVE-style map (WGS84 longitude/latitude converted to UTM, see :mod:`lidarmt.utm`);
* ``*.geojson`` / ``*.json``: a FeatureCollection of road/junction polygons (see :func:`load_geojson`), for users
  who have no Apollo map and want to draw a ROI by hand.

A folder is searched for ``base_map.bin``, then ``base_map.txt``, ``sim_map.txt``, ``base_map.xml``, then the
only ``*.geojson`` file in it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._atomic import atomic_write_bytes, atomic_write_text
from lidarmt._paths import open_readable, read_bytes
from lidarmt.errors import OutputError
from lidarmt.lidar.roi.errors import MapError, MapFormatError
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

FOLDER_PREFERENCE = ("base_map.bin", "base_map.txt", "sim_map.txt", "base_map.xml")
FORMATS = ("bin", "txt", "xml", "geojson")
_SUFFIX_FORMAT = {".bin": "bin", ".txt": "txt", ".xml": "xml", ".geojson": "geojson", ".json": "geojson"}
#: the largest map read (a city's Apollo base_map.bin is a few hundred MB)
MAX_MAP_BYTES = 4 << 30


# ----------------------------------------------------------------------------------------------- entry points


def resolve_map_path(path: str | os.PathLike[str]) -> Path:
    """The map file a ``--map`` argument names: the file itself, or the preferred file in a map folder."""
    p = Path(path)
    if not p.exists():
        raise MapError(f"{p}: no such map file or folder; pass an Apollo map folder (with base_map.bin) or a file")
    if p.is_file():
        return p
    for name in FOLDER_PREFERENCE:
        if (p / name).is_file():
            return p / name
    geo = sorted(p.glob("*.geojson"))
    if len(geo) == 1:
        return geo[0]
    if len(geo) > 1:
        raise MapError(f"{p}: holds several .geojson maps ({', '.join(g.name for g in geo)}); pass one file")
    raise MapError(
        f"{p}: no map in this folder; expected one of {', '.join(FOLDER_PREFERENCE)} or a .geojson file"
    )


def sniff_format(path: str | os.PathLike[str]) -> str:
    """The format of a map file: from its suffix, else from its first bytes ("bin", "txt", "xml", "geojson")."""
    p = Path(path)
    fmt = _SUFFIX_FORMAT.get(p.suffix.lower())
    if fmt is not None:
        return fmt
    with open_readable(p, max_bytes=MAX_MAP_BYTES, what="map", error=MapError) as fh:  # never a FIFO
        head = fh.read(4096)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return "geojson"
    if text.startswith(b"<"):
        return "xml"
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is not None and any(decoded.startswith(k) for k in ("header", "lane", "road", "junction", "crosswalk")):
        return "txt"
    if head[:1] in (b"\x0a", b"\x12", b"\x1a", b"\x22", b"\x5a"):  # field 1/2/3/4/11, wire type 2
        return "bin"
    raise MapError(
        f"{p}: unknown map format (name suffix {p.suffix or 'none'!r}); use base_map.bin, base_map.txt/sim_map.txt, "
        "base_map.xml or a .geojson file"
    )


def load_map(path: str | os.PathLike[str], *, format: str | None = None) -> HDMap:
    """Read an HD map (file or map folder) into the project's model; every failure is a one-line MapError."""
    p = resolve_map_path(path)
    fmt = format or sniff_format(p)
    if fmt not in FORMATS:
        raise MapError(f"{p}: unknown map format {fmt!r}; known: {', '.join(FORMATS)}")
    try:
        if fmt == "bin":
            hd = _load_proto(p, binary=True)
        elif fmt == "txt":
            hd = _load_proto(p, binary=False)
        elif fmt == "xml":
            from lidarmt.lidar.roi.xmlmap import load_xml

            hd = load_xml(p)
        else:
            hd = load_geojson(p)
    except OSError as err:
        raise MapError(f"{p}: cannot read the map: {err.strerror or err}") from err
    hd.source = str(p)
    if not hd.lanes and not hd.roads and not hd.junctions:
        raise MapError(f"{p}: the map holds no lanes, roads or junctions; is it really an HD map?")
    return hd


# ----------------------------------------------------------------------------------------------- protobuf


def _load_proto(p: Path, *, binary: bool) -> HDMap:
    from google.protobuf import message as pb_message
    from google.protobuf import text_format

    from lidarmt.proto import hdmap as pb

    if binary:
        data = read_bytes(p, max_bytes=MAX_MAP_BYTES, what="map", error=MapError)
        try:
            msg = pb.parse_map(data)
        except pb_message.DecodeError as err:
            raise MapFormatError(f"{p}: not a binary Apollo map (apollo.hdmap.Map): {err}; is the file truncated?") from err
        unknown = pb.count_unknown_fields(msg)
        if unknown and not (len(msg.lane) or len(msg.road) or len(msg.junction)):
            raise MapFormatError(f"{p}: not a binary Apollo map (no lane, road or junction decoded)")
        if unknown:
            warnings.warn(f"{p}: {unknown} map field(s) unknown to lidarmt were skipped", stacklevel=3)
    else:
        try:
            text = read_bytes(p, max_bytes=MAX_MAP_BYTES, what="map", error=MapError).decode("utf-8")
        except UnicodeDecodeError as err:
            raise MapFormatError(
                f"{p}: not a text map (not UTF-8 at byte {err.start}); binary maps must be named *.bin"
            ) from err
        try:
            msg = pb.parse_map_text(text)
        except text_format.ParseError as err:
            raise MapFormatError(f"{p}: not a protobuf-text Apollo map: {err}") from err
    return map_from_proto(msg)


def _points(pts: Iterable[Any]) -> np.ndarray:
    arr = np.array([(q.x, q.y, q.z) for q in pts], dtype=np.float64)
    return arr.reshape(-1, 3)


def _curve(curve: Any) -> tuple[np.ndarray, list[int]]:
    """All line_segment points of a Curve, plus the indices where a new segment starts."""
    parts = [_points(seg.line_segment.point) for seg in curve.segment if seg.HasField("line_segment")]
    if not parts:
        return np.zeros((0, 3)), []
    breaks = list(np.cumsum([len(a) for a in parts[:-1]]).astype(int)) if len(parts) > 1 else []
    return np.concatenate(parts), [int(b) for b in breaks]


def _text(b: bytes | str) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def map_from_proto(msg: Any) -> HDMap:
    """Convert a decoded ``apollo.hdmap.Map`` message into the project's model."""
    h = msg.header
    header = MapHeader(
        version=_text(h.version) if h.HasField("version") else MapHeader.version,
        date=_text(h.date),
        proj=h.projection.proj,
        district=_text(h.district),
        vendor=_text(h.vendor),
    )
    lanes = []
    for ln in msg.lane:
        central, _ = _curve(ln.central_curve)
        left = _curve(ln.left_boundary.curve)[0] if ln.HasField("left_boundary") else None
        right = _curve(ln.right_boundary.curve)[0] if ln.HasField("right_boundary") else None
        lb_types = list(ln.left_boundary.boundary_type[0].types) if len(ln.left_boundary.boundary_type) else []
        rb_types = list(ln.right_boundary.boundary_type[0].types) if len(ln.right_boundary.boundary_type) else []
        lanes.append(
            Lane(
                id=ln.id.id,
                central_curve=central,
                left_boundary=left,
                right_boundary=right,
                length=ln.length,
                speed_limit=ln.speed_limit,
                type=int(ln.type),
                turn=int(ln.turn),
                direction=int(ln.direction),
                left_boundary_types=[int(t) for t in lb_types],
                right_boundary_types=[int(t) for t in rb_types],
                predecessor_ids=[i.id for i in ln.predecessor_id],
                successor_ids=[i.id for i in ln.successor_id],
            )
        )

    def edges_of(poly: Any) -> list[BoundaryEdge]:
        out = []
        for e in poly.edge:
            pts, breaks = _curve(e.curve)
            out.append(BoundaryEdge(EdgeType(int(e.type)) if int(e.type) in (0, 1, 2, 3) else EdgeType.UNKNOWN,
                                    pts, breaks))
        return out

    roads = []
    for rd in msg.road:
        sections = []
        for sec in rd.section:
            b = sec.boundary
            sections.append(
                RoadSection(
                    id=sec.id.id,
                    lane_ids=[i.id for i in sec.lane_id],
                    edges=edges_of(b.outer_polygon) if b.HasField("outer_polygon") else [],
                    holes=[edges_of(hole) for hole in b.hole],
                )
            )
        roads.append(
            Road(
                id=rd.id.id,
                sections=sections,
                junction_id=rd.junction_id.id if rd.HasField("junction_id") else None,
                type=int(rd.type),
            )
        )
    junctions = [Junction(j.id.id, _points(j.polygon.point)) for j in msg.junction]
    crosswalks = [Crosswalk(c.id.id, _points(c.polygon.point)) for c in msg.crosswalk]
    return HDMap(header=header, lanes=lanes, roads=roads, junctions=junctions, crosswalks=crosswalks)


def _set_points(field: Any, pts: np.ndarray | None) -> None:
    if pts is None:
        return
    pts = np.asarray(pts, dtype=np.float64)
    for row in pts:
        q = field.add()
        q.x = float(row[0])
        q.y = float(row[1])
        if len(row) > 2 and row[2] != 0.0:
            q.z = float(row[2])


def _polyline_length(pts: np.ndarray) -> float:
    if pts is None or len(pts) < 2:
        return 0.0
    return float(np.sum(np.hypot(*np.diff(np.asarray(pts)[:, :2], axis=0).T)))


def _fill_curve(curve: Any, pts: np.ndarray, breaks: Sequence[int] = ()) -> None:
    pts = np.asarray(pts, dtype=np.float64)
    pieces = np.split(pts, list(breaks)) if breaks else [pts]
    s = 0.0
    for piece in pieces:
        seg = curve.segment.add()
        _set_points(seg.line_segment.point, piece)
        seg.s = s
        if len(piece):
            seg.start_position.x = float(piece[0, 0])
            seg.start_position.y = float(piece[0, 1])
            if piece.shape[1] > 2 and piece[0, 2] != 0.0:
                seg.start_position.z = float(piece[0, 2])
        length = _polyline_length(piece)
        seg.length = length
        s += length


def map_to_proto(hd: HDMap) -> Any:
    """Convert the model into an ``apollo.hdmap.Map`` message (what ``base_map.bin`` holds)."""
    from lidarmt.proto import hdmap as pb

    msg = pb.Map()
    h = msg.header
    h.version = hd.header.version.encode()
    if hd.header.date:
        h.date = hd.header.date.encode()
    if hd.header.proj:
        h.projection.proj = hd.header.proj
    if hd.header.district:
        h.district = hd.header.district.encode()
    if hd.header.vendor:
        h.vendor = hd.header.vendor.encode()
    for cw in hd.crosswalks:
        c = msg.crosswalk.add()
        c.id.id = cw.id
        _set_points(c.polygon.point, cw.polygon)
    for jn in hd.junctions:
        j = msg.junction.add()
        j.id.id = jn.id
        _set_points(j.polygon.point, jn.polygon)
    for ln in hd.lanes:
        m = msg.lane.add()
        m.id.id = ln.id
        _fill_curve(m.central_curve, ln.central_curve)
        for bound, arr, types in (
            (m.left_boundary, ln.left_boundary, ln.left_boundary_types),
            (m.right_boundary, ln.right_boundary, ln.right_boundary_types),
        ):
            if arr is None:
                continue
            _fill_curve(bound.curve, arr)
            bound.length = _polyline_length(arr)
            bt = bound.boundary_type.add()
            bt.s = 0.0
            bt.types.extend(types)
        m.length = ln.length
        m.speed_limit = ln.speed_limit
        for i in ln.predecessor_ids:
            m.predecessor_id.add().id = i
        for i in ln.successor_ids:
            m.successor_id.add().id = i
        m.type = ln.type
        m.turn = ln.turn
        m.direction = ln.direction
    for rd in hd.roads:
        r = msg.road.add()
        r.id.id = rd.id
        for sec in rd.sections:
            s = r.section.add()
            s.id.id = sec.id
            for lid in sec.lane_ids:
                s.lane_id.add().id = lid
            if sec.edges:
                for e in sec.edges:
                    pe = s.boundary.outer_polygon.edge.add()
                    _fill_curve(pe.curve, e.points, e.breaks)
                    pe.type = int(e.type)
            for hole in sec.holes:
                ph = s.boundary.hole.add()
                for e in hole:
                    pe = ph.edge.add()
                    _fill_curve(pe.curve, e.points, e.breaks)
                    pe.type = int(e.type)
        if rd.junction_id is not None:
            r.junction_id.id = rd.junction_id
        r.type = rd.type
    return msg


# ----------------------------------------------------------------------------------------------- GeoJSON


def section_ring(section: RoadSection) -> tuple[np.ndarray, int]:
    """The section's outline as Apollo joins it (LEFT edges, then RIGHT edges reversed), raw (no downsampling),
    and how many of its points come from the left boundary."""
    left = [e.points[:, :2] for e in section.edges if e.type == EdgeType.LEFT_BOUNDARY]
    right = [e.points[:, :2] for e in section.edges if e.type == EdgeType.RIGHT_BOUNDARY]
    lp = np.concatenate(left) if left else np.zeros((0, 2))
    rp = np.concatenate(right) if right else np.zeros((0, 2))
    return np.concatenate([lp, rp[::-1]]), len(lp)


def _ring_coords(ring: np.ndarray) -> list[list[float]]:
    pts = [[float(x), float(y)] for x, y in np.asarray(ring)[:, :2]]
    if pts and pts[0] != pts[-1]:
        pts.append(list(pts[0]))  # GeoJSON rings are closed
    return pts


def map_to_geojson(hd: HDMap) -> dict[str, Any]:
    """A GeoJSON FeatureCollection of the map: road sections and junctions as polygons, lanes as lines."""
    feats: list[dict[str, Any]] = []
    for rd in hd.roads:
        for sec in rd.sections:
            ring, n_left = section_ring(sec)
            if len(ring) < 3:
                continue
            props: dict[str, Any] = {"kind": "road", "id": rd.id, "section": sec.id, "lane_ids": sec.lane_ids,
                                     "left_points": n_left, "road_type": rd.type}
            if rd.junction_id is not None:
                props["junction_id"] = rd.junction_id
            feats.append({"type": "Feature", "properties": props,
                          "geometry": {"type": "Polygon", "coordinates": [_ring_coords(ring)]}})
    for jn in hd.junctions:
        if len(jn.polygon) < 3:
            continue
        feats.append({"type": "Feature", "properties": {"kind": "junction", "id": jn.id},
                      "geometry": {"type": "Polygon", "coordinates": [_ring_coords(jn.polygon)]}})
    lane_road = {lid: rd for rd in hd.roads for sec in rd.sections for lid in sec.lane_ids}
    for ln in hd.lanes:
        lprops: dict[str, Any] = {"kind": "lane", "id": ln.id}
        if ln.id in lane_road:
            lprops["road"] = lane_road[ln.id].id
            if lane_road[ln.id].junction_id is not None:
                lprops["junction_id"] = lane_road[ln.id].junction_id
        feats.append({"type": "Feature", "properties": lprops,
                      "geometry": {"type": "LineString",
                                   "coordinates": [[float(x), float(y)] for x, y in ln.central_curve[:, :2]]}})
    for cw in hd.crosswalks:
        if len(cw.polygon) < 3:
            continue
        feats.append({"type": "Feature", "properties": {"kind": "crosswalk", "id": cw.id},
                      "geometry": {"type": "Polygon", "coordinates": [_ring_coords(cw.polygon)]}})
    out: dict[str, Any] = {"type": "FeatureCollection", "frame": hd.frame}
    if hd.header.proj:
        out["proj"] = hd.header.proj
    out["features"] = feats
    return out


def _xy(coords: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(coords, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise MapFormatError(f"{where}: coordinates are not numbers") from err
    if arr.ndim != 2 or arr.shape[1] < 2 or not np.all(np.isfinite(arr[:, :2])):
        raise MapFormatError(f"{where}: coordinates must be a list of finite [x, y] pairs")
    out = np.zeros((len(arr), 3))
    out[:, : min(3, arr.shape[1])] = arr[:, :3]
    return out


def _open_ring(ring: np.ndarray) -> np.ndarray:
    if len(ring) > 1 and np.array_equal(ring[0, :2], ring[-1, :2]):
        return ring[:-1]
    return ring


def _valid_parts(outer: np.ndarray, holes: list[np.ndarray], where: str
                 ) -> tuple[list[tuple[np.ndarray, list[np.ndarray]]], str]:
    """A polygon as simple parts: ``([(outer, holes)], "")`` when its outer ring is simple already, else the
    repair of that ring by shapely's ``make_valid`` (a bowtie becomes its two triangles, a ring that runs back
    over itself loses the doubled part) and the reason it was invalid. Raises MapFormatError when nothing with an
    area is left.

    Apollo's scan conversion assumes simple rings: a self-intersecting one is filled by neither the even-odd nor
    the non-zero rule (it gives a bowtie of 1,800 m² an ROI of 2,685 m²), so the repaired parts are used instead.
    Only the outer ring decides, as the ROI ignores holes; a hole is kept with the part that holds it.
    """
    import shapely
    from shapely.geometry import Point, Polygon

    shell = Polygon(outer[:, :2])
    if shell.is_valid:
        return [(outer, holes)], ""
    reason = shapely.is_valid_reason(shell)
    todo, parts = [shapely.make_valid(shell)], []
    while todo:
        g = todo.pop()
        if g.geom_type == "Polygon":
            if g.area > 0:
                parts.append(g)
        elif hasattr(g, "geoms"):
            todo.extend(g.geoms)
    if not parts:
        raise MapFormatError(f"{where}: the polygon encloses no area ({reason}); draw it as a simple ring")
    parts.sort(key=lambda q: q.bounds)  # a deterministic order, whatever GEOS returns
    z = float(np.median(outer[:, 2]))

    def ring(r: Any) -> np.ndarray:
        xy = np.asarray(r.coords, dtype=np.float64)[:, :2]
        return _open_ring(np.c_[xy, np.full(len(xy), z)])

    out = []
    for q in parts:
        kept = [h for h in holes if len(h) and q.contains(Point(*h[0, :2]))]
        out.append((ring(q.exterior), [ring(i) for i in q.interiors] + kept))
    return out, reason


def load_geojson(path: str | os.PathLike[str]) -> HDMap:
    """Read a GeoJSON map.

    The file is a ``FeatureCollection``. Top-level members: ``"frame"`` is ``"world"`` (default; map metres such
    as UTM, like an Apollo map) or ``"sensor"`` (coordinates in the LiDAR's own frame, x forward, y left: the ROI
    then needs no pose); ``"proj"`` optionally names the projection. Each feature has ``properties.kind``:

    * ``"road"``: a ``Polygon`` (or ``MultiPolygon``) of drivable area. Its exterior ring becomes one road section;
      with ``properties.left_points = n`` (what :func:`write_map` writes) the first n ring points are the left
      boundary and the rest the right boundary reversed, otherwise the whole ring is one LEFT_BOUNDARY edge.
      Interior rings (holes) are kept as section holes and, as in Apollo, ignored by the ROI.
    * ``"junction"``: a ``Polygon`` used as a junction outline.
    * ``"lane"``: a ``LineString`` lane centre line (optional; ``properties.road`` links it to a road id, and
      ``properties.junction_id`` marks a road inside a junction, whose ROI is the junction polygon). With lanes,
      the ROI query is Apollo's (lanes within the radius); without, road/junction polygons within the radius.
    * ``"crosswalk"``: kept for drawing, not part of the ROI.

    ``properties.id`` names the object (a default id is made when absent).

    A self-intersecting polygon (a bowtie, a ring that doubles back) is repaired with shapely's ``make_valid``
    and a warning: a road becomes one section per valid part (ids ``<section>``, ``<section>_1``, ...;
    ``left_points`` no longer applies, so each part is one LEFT_BOUNDARY ring), a junction or crosswalk one
    object per part (ids ``<id>``, ``<id>_1``, ...). A polygon with no area left is refused, and so is one that
    falls apart into several parts in a map with lanes (Apollo's lane query takes one polygon per lane).
    """
    p = Path(path)
    try:
        doc = json.loads(read_bytes(p, max_bytes=MAX_MAP_BYTES, what="map", error=MapError).decode("utf-8"))
    except UnicodeDecodeError as err:
        raise MapFormatError(f"{p}: not a GeoJSON map (not UTF-8 text)") from err
    except RecursionError as err:
        raise MapFormatError(f"{p}: not a GeoJSON map (JSON nested too deep to read)") from err
    except json.JSONDecodeError as err:
        raise MapFormatError(f"{p}: not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from err
    if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
        raise MapFormatError(f'{p}: a GeoJSON map must be a FeatureCollection (top-level "type")')
    props_top = doc.get("properties") if isinstance(doc.get("properties"), dict) else {}
    frame = doc.get("frame", props_top.get("frame", "world"))
    if frame not in ("world", "sensor"):
        raise MapFormatError(f'{p}: "frame" must be "world" or "sensor", not {frame!r}')
    feats = doc.get("features")
    if not isinstance(feats, list):
        raise MapFormatError(f'{p}: "features" must be a list')
    hd = HDMap(header=MapHeader(proj=str(doc.get("proj", "")), vendor="lidarmt-geojson"), frame=frame)
    lane_road: dict[str, str] = {}
    lane_junction: dict[str, str] = {}
    roads: dict[str, Road] = {}
    repaired: list[str] = []  # self-intersecting polygons made valid
    split: list[str] = []  # repaired polygons that fell apart into several parts
    for k, f in enumerate(feats):
        where = f"{p}: feature {k}"
        if not isinstance(f, dict) or not isinstance(f.get("geometry"), dict):
            raise MapFormatError(f"{where}: not a GeoJSON Feature with a geometry")
        props = f.get("properties") or {}
        if not isinstance(props, dict):
            raise MapFormatError(f"{where}: \"properties\" must be an object, not {type(props).__name__}")
        kind = props.get("kind")
        geom = f["geometry"]
        gtype = geom.get("type")
        coords = geom.get("coordinates")
        fid = str(props.get("id", f"{kind}_{k}"))
        if kind in ("road", "junction", "crosswalk"):
            if gtype == "Polygon":
                polys = [coords]
            elif gtype == "MultiPolygon":
                polys = coords
            else:
                raise MapFormatError(f"{where}: a {kind} must be a Polygon or MultiPolygon, not {gtype}")
            if not isinstance(polys, list):
                raise MapFormatError(f"{where}: \"coordinates\" must be a list of polygons")
            for q, rings in enumerate(polys):
                if not isinstance(rings, list) or not rings:
                    raise MapFormatError(f"{where}: empty polygon")
                outer = _open_ring(_xy(rings[0], where))
                if len(outer) < 3:
                    raise MapFormatError(f"{where}: a polygon needs at least 3 distinct points")
                holes = [_open_ring(_xy(r, where)) for r in rings[1:]]
                parts, reason = _valid_parts(outer, holes, where)
                if reason:
                    repaired.append(f"feature {k} ({kind} {fid!r}: {reason}, {len(parts)} part(s))")
                    if len(parts) > 1 and kind != "crosswalk":
                        split.append(f"feature {k} ({kind} {fid!r}, {reason})")
                qid = fid if len(polys) == 1 else f"{fid}_{q}"
                if kind in ("junction", "crosswalk"):
                    for j, (part, _holes) in enumerate(parts):
                        pid = qid if j == 0 else f"{qid}_{j}"
                        if kind == "junction":
                            hd.junctions.append(Junction(pid, part))
                        else:
                            hd.crosswalks.append(Crosswalk(pid, part))
                    continue
                rd = roads.get(qid)
                if rd is None:
                    jid = props.get("junction_id")
                    road_type = props.get("road_type", 2)
                    if not isinstance(road_type, int) or isinstance(road_type, bool):
                        raise MapFormatError(f"{where}: \"road_type\" must be an integer (Apollo's Road.Type), "
                                             f"not {road_type!r}")
                    rd = Road(qid, [], None if jid is None else str(jid), road_type)
                    roads[qid] = rd
                    hd.roads.append(rd)
                section_id = str(props.get("section", "1"))
                raw_ids = props.get("lane_ids", [])
                if not isinstance(raw_ids, list):
                    raise MapFormatError(f"{where}: \"lane_ids\" must be a list of lane ids")
                lane_ids = [str(i) for i in raw_ids]
                for j, (part, part_holes) in enumerate(parts):
                    n_left = props.get("left_points")
                    if not reason and isinstance(n_left, int) and 0 < n_left < len(part):
                        edges = [BoundaryEdge(EdgeType.LEFT_BOUNDARY, part[:n_left]),
                                 BoundaryEdge(EdgeType.RIGHT_BOUNDARY, part[n_left:][::-1].copy())]
                    else:
                        edges = [BoundaryEdge(EdgeType.LEFT_BOUNDARY, part)]
                    sec = RoadSection(section_id if j == 0 else f"{section_id}_{j}", list(lane_ids), edges,
                                      [[BoundaryEdge(EdgeType.NORMAL, h)] for h in part_holes])
                    rd.sections.append(sec)
        elif kind == "lane":
            if gtype != "LineString":
                raise MapFormatError(f"{where}: a lane must be a LineString, not {gtype}")
            hd.lanes.append(Lane(fid, _xy(coords, where)))
            if "road" in props:
                lane_road[fid] = str(props["road"])
                if props.get("junction_id") is not None:
                    lane_junction[fid] = str(props["junction_id"])
        elif kind is None:
            raise MapFormatError(f'{where}: properties.kind is missing (use "road", "junction", "lane")')
        else:
            raise MapFormatError(f'{where}: unknown kind {kind!r} (use "road", "junction", "lane", "crosswalk")')
    for lid, rid in lane_road.items():
        rd = roads.get(rid)
        if rd is None and lid in lane_junction:  # a road inside a junction: the junction's polygon is its ROI
            rd = roads[rid] = Road(rid, [RoadSection("1", [])], lane_junction[lid])
            hd.roads.append(rd)
        if rd is None:
            raise MapFormatError(f"{p}: lane {lid!r} names road {rid!r}, which is not in the file")
        if rd.sections and lid not in rd.sections[0].lane_ids:
            rd.sections[0].lane_ids.append(lid)
    if split and hd.lanes:
        raise MapFormatError(f"{p}: {split[0]} crosses itself and falls apart into several polygons; with lanes, "
                             "Apollo's ROI takes one polygon per lane's road section or junction: redraw it as a "
                             "simple ring (one feature per part)")
    if repaired:
        warnings.warn(f"{p}: self-intersecting polygon(s) repaired with shapely's make_valid (the ROI covers the "
                      f"parts the ring encloses, not Apollo's fill of a crossed ring): {'; '.join(repaired)}; "
                      "redraw them as simple rings to silence this", stacklevel=3)
    if any(sec.holes for rd in hd.roads for sec in rd.sections):
        warnings.warn(f"{p}: road polygons with holes: the holes are ignored by the ROI, as in Apollo", stacklevel=3)
    return hd


# ----------------------------------------------------------------------------------------------- writers


_WRITE_NAMES = {"bin": "base_map.bin", "txt": "base_map.txt", "geojson": "base_map.geojson"}


def write_map(
    hdmap: HDMap,
    folder: str | os.PathLike[str],
    *,
    formats: Sequence[str] = ("bin", "txt", "geojson"),
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write the model into a map folder as ``base_map.bin``, ``base_map.txt`` and/or ``base_map.geojson``.

    Each file is written atomically. An existing file is an :class:`OutputError` unless ``overwrite``. Returns
    the written paths by format. Only what the model holds is written (no overlaps, signals or lane samples);
    lane lengths and speed limits are written as given.
    """
    folder = Path(folder)
    unknown = [f for f in formats if f not in _WRITE_NAMES]
    if unknown:
        raise ValueError(f"unknown map format(s) {unknown}; write_map writes {sorted(_WRITE_NAMES)}")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a folder; choose another --map-out")
    targets = {f: folder / _WRITE_NAMES[f] for f in formats}
    if not overwrite:
        taken = [str(t) for t in targets.values() if t.exists()]
        if taken:
            raise OutputError(f"{', '.join(taken)}: already exist(s); pass overwrite=True (--force) to replace")
    if hdmap.frame == "sensor" and {"bin", "txt"} & set(formats):
        warnings.warn(f"{folder}: the map is drawn in sensor coordinates; base_map.bin/.txt cannot say so (only the "
                      ".geojson keeps it)", stacklevel=2)
    msg = map_to_proto(hdmap) if ({"bin", "txt"} & set(formats)) else None
    # every file is made in a hidden folder beside the map folder, then moved into place: a run killed midway
    # (kill -9) leaves no half map folder, only that hidden folder, which the next write removes
    import re

    from lidarmt._atomic import remove_stale_temporaries, staging_folder

    if folder.parent.is_dir():
        remove_stale_temporaries(folder.parent, re.escape(folder.name))
    stage = staging_folder(folder)
    try:
        for fmt, target in targets.items():
            if fmt == "bin":
                atomic_write_bytes(stage / target.name, msg.SerializeToString())
            elif fmt == "txt":
                from lidarmt.proto.hdmap import map_to_text

                atomic_write_text(stage / target.name, map_to_text(msg))
            else:
                atomic_write_text(stage / target.name, json.dumps(map_to_geojson(hdmap), indent=1) + "\n")
        if not folder.exists():
            os.replace(stage, folder)  # the whole folder at once
        else:  # a folder that exists (other files, --force): each file replaced whole
            for target in targets.values():
                os.replace(stage / target.name, target)
    except OSError as err:
        raise OutputError(f"cannot write the map in {folder}: {err.strerror or err}") from err
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
    return targets


# ----------------------------------------------------------------------------------------------- comparison


def _arr_eq(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) != len(b):
        return False
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] != b.shape[1]:
        w = max(a.shape[1], b.shape[1])
        a = np.pad(a, ((0, 0), (0, w - a.shape[1])))
        b = np.pad(b, ((0, 0), (0, w - b.shape[1])))
    return bool(np.array_equal(a, b))


def maps_equal(a: HDMap, b: HDMap, *, details: list[str] | None = None) -> bool:
    """True when two models hold the same geometry and attributes (points compared exactly, z padded with 0)."""
    diffs: list[str] = [] if details is None else details

    def chk(cond: bool, what: str) -> None:
        if not cond:
            diffs.append(what)

    chk(a.header == b.header, "header")
    chk(a.frame == b.frame, "frame")
    chk(len(a.lanes) == len(b.lanes), "lane count")
    for la, lb in zip(a.lanes, b.lanes, strict=False):
        for name in ("id", "type", "turn", "direction", "left_boundary_types", "right_boundary_types",
                     "predecessor_ids", "successor_ids"):
            chk(getattr(la, name) == getattr(lb, name), f"lane {la.id} {name}")
        for name in ("length", "speed_limit"):
            chk(math.isclose(getattr(la, name), getattr(lb, name), rel_tol=0, abs_tol=0), f"lane {la.id} {name}")
        for name in ("central_curve", "left_boundary", "right_boundary"):
            chk(_arr_eq(getattr(la, name), getattr(lb, name)), f"lane {la.id} {name}")
    chk(len(a.roads) == len(b.roads), "road count")
    for ra, rb in zip(a.roads, b.roads, strict=False):
        chk((ra.id, ra.junction_id, ra.type) == (rb.id, rb.junction_id, rb.type), f"road {ra.id}")
        chk(len(ra.sections) == len(rb.sections), f"road {ra.id} sections")
        for sa, sb in zip(ra.sections, rb.sections, strict=False):
            chk((sa.id, sa.lane_ids) == (sb.id, sb.lane_ids), f"section {ra.id}/{sa.id}")
            for ea_list, eb_list, what in [(sa.edges, sb.edges, "edges")] + [
                (ha, hb, "hole") for ha, hb in zip(sa.holes, sb.holes, strict=False)
            ]:
                chk(len(ea_list) == len(eb_list), f"section {ra.id}/{sa.id} {what} count")
                for ea, eb in zip(ea_list, eb_list, strict=False):
                    chk(ea.type == eb.type and list(ea.breaks) == list(eb.breaks) and _arr_eq(ea.points, eb.points),
                        f"section {ra.id}/{sa.id} {what}")
            chk(len(sa.holes) == len(sb.holes), f"section {ra.id}/{sa.id} holes")
    for name in ("junctions", "crosswalks"):
        xa, xb = getattr(a, name), getattr(b, name)
        chk(len(xa) == len(xb), f"{name} count")
        for ja, jb in zip(xa, xb, strict=False):
            chk(ja.id == jb.id and _arr_eq(ja.polygon, jb.polygon), f"{name} {ja.id}")
    return not diffs
