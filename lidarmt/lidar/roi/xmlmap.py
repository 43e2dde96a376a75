"""Apollo's OpenDRIVE-style XML maps (``base_map.xml``), read into the project's model.

What the ROI needs is read (apollo-lop-facts.md §2.1): ``<road id junction="-1|id">`` with
``<lanes><laneSection><boundaries><boundary type="leftBoundary|rightBoundary|...">`` holding
``<geometry><pointSet><point x y z/>``; each lane's ``uid`` and ``<centerLine>`` (for the lane search); and
``<junction id><outline><cornerGlobal x y z/>``. Points are WGS84 longitude (x) / latitude (y), converted to UTM
as Apollo does. The zone is taken from the header's ``geoReference`` when it names ``+proj=utm +zone=N``, else
from the header's west/east longitudes (Apollo's rule), else from the first point. Coordinates that are clearly
metres already (outside ±180/±90) are kept as they are.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from lidarmt._paths import open_readable
from lidarmt.lidar.roi.errors import MapFormatError
from lidarmt.lidar.roi.model import (
    BoundaryEdge,
    EdgeType,
    HDMap,
    Junction,
    Lane,
    MapHeader,
    Road,
    RoadSection,
)
from lidarmt.utm import parse_proj_zone, utm_proj, wgs84_to_utm, zone_of

#: the largest XML map read
MAX_XML_BYTES = 4 << 30
_BOUNDARY_TYPES = {
    "leftboundary": EdgeType.LEFT_BOUNDARY,
    "rightboundary": EdgeType.RIGHT_BOUNDARY,
    "normal": EdgeType.NORMAL,
}
_TURN = {"noturn": 1, "leftturn": 2, "rightturn": 3, "uturn": 4}
_DIRECTION = {"forward": 1, "backward": 2, "bidirection": 3}
_LANE_TYPE = {"none": 1, "driving": 2, "biking": 3, "sidewalk": 4, "parking": 5, "shoulder": 6}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(el: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in el if _local(c.tag) == name]


def _child(el: ET.Element, name: str) -> ET.Element | None:
    for c in el:
        if _local(c.tag) == name:
            return c
    return None


def _points(el: ET.Element | None, tag: str, where: str) -> np.ndarray:
    if el is None:
        return np.zeros((0, 3))
    rows = []
    for p in el.iter():
        if _local(p.tag) != tag:
            continue
        try:
            rows.append((float(p.attrib["x"]), float(p.attrib["y"]), float(p.attrib.get("z", 0.0))))
        except (KeyError, ValueError) as err:
            raise MapFormatError(f"{where}: a <{tag}> needs numeric x and y attributes") from err
    return np.array(rows, dtype=np.float64).reshape(-1, 3)


def load_xml(path: str | os.PathLike[str]) -> HDMap:
    """Read an Apollo OpenDRIVE-style XML map."""
    p = Path(path)
    try:
        with open_readable(p, max_bytes=MAX_XML_BYTES, what="map", error=MapFormatError) as fh:  # never a FIFO
            root = ET.parse(fh).getroot()
    except ET.ParseError as err:
        raise MapFormatError(f"{p}: not well-formed XML: {err}") from err
    if _local(root.tag) != "OpenDRIVE":
        raise MapFormatError(f"{p}: not an Apollo OpenDRIVE map (root element <{_local(root.tag)}>, expected <OpenDRIVE>)")

    header_el = _child(root, "header")
    geo = ""
    attrs: dict[str, str] = {}
    if header_el is not None:
        attrs = dict(header_el.attrib)
        g = _child(header_el, "geoReference")
        geo = (g.text or "").strip() if g is not None else ""

    roads: list[Road] = []
    lanes: list[Lane] = []
    junctions: list[Junction] = []
    raw: list[np.ndarray] = []  # every point array, converted below in one go

    for r_el in root.iter():
        if _local(r_el.tag) != "road":
            continue
        rid = r_el.attrib.get("id")
        if rid is None:
            raise MapFormatError(f"{p}: a <road> without id")
        jid = r_el.attrib.get("junction", "-1")
        road = Road(rid, [], None if jid in ("-1", "") else jid)
        lanes_el = _child(r_el, "lanes")
        for k, sec_el in enumerate(_children(lanes_el, "laneSection") if lanes_el is not None else []):
            where = f"{p}: road {rid} section {k}"
            sec = RoadSection(sec_el.attrib.get("id", str(k + 1)))
            b_el = _child(sec_el, "boundaries")
            for bd in _children(b_el, "boundary") if b_el is not None else []:
                etype = _BOUNDARY_TYPES.get(bd.attrib.get("type", "").lower(), EdgeType.UNKNOWN)
                pts = _points(bd, "point", where)
                raw.append(pts)
                sec.edges.append(BoundaryEdge(etype, pts))
            for side in ("left", "center", "right"):
                s_el = _child(sec_el, side)
                for ln_el in _children(s_el, "lane") if s_el is not None else []:
                    lid = ln_el.attrib.get("uid") or f"{rid}_{k}_{ln_el.attrib.get('id', len(lanes))}"
                    centre = _points(_child(ln_el, "centerLine"), "point", where)
                    if len(centre) == 0:
                        continue  # the reference lane (id 0) has a border only
                    raw.append(centre)
                    borders = _children(ln_el, "border")
                    lane = Lane(
                        lid,
                        centre,
                        type=_LANE_TYPE.get(ln_el.attrib.get("type", "driving").lower(), 2),
                        turn=_TURN.get(ln_el.attrib.get("turnType", "noTurn").lower(), 1),
                        direction=_DIRECTION.get(ln_el.attrib.get("direction", "forward").lower(), 1),
                    )
                    if borders:
                        lane.left_boundary = _points(borders[0], "point", where)
                        raw.append(lane.left_boundary)
                    lanes.append(lane)
                    sec.lane_ids.append(lid)
            road.sections.append(sec)
        roads.append(road)

    for j_el in root.iter():
        if _local(j_el.tag) != "junction":
            continue
        jid = j_el.attrib.get("id")
        if jid is None:
            raise MapFormatError(f"{p}: a <junction> without id")
        poly = _points(_child(j_el, "outline"), "cornerGlobal", f"{p}: junction {jid}")
        raw.append(poly)
        junctions.append(Junction(jid, poly))

    if not raw or not any(len(a) for a in raw):
        raise MapFormatError(f"{p}: an OpenDRIVE file without road boundaries, lanes or junction outlines")

    # projection: geographic input converted to UTM in place
    allpts = np.concatenate([a for a in raw if len(a)])
    geographic = bool(np.all(np.abs(allpts[:, 0]) <= 180.0) and np.all(np.abs(allpts[:, 1]) <= 90.0))
    zone_south = parse_proj_zone(geo)
    if zone_south is None:
        try:
            west = float(attrs["west"])
            east = float(attrs["east"])
            zone_south = (zone_of(west), float(attrs.get("south", 1.0)) < 0)
            if zone_of(east) != zone_of(west):
                raise MapFormatError(f"{p}: the map spans UTM zones {zone_of(west)} and {zone_of(east)}; "
                                     "Apollo supports maps within one zone")
        except (KeyError, ValueError):
            zone_south = (zone_of(float(allpts[0, 0])), float(allpts[0, 1]) < 0) if geographic else None
    proj = utm_proj(*zone_south[:1], south=zone_south[1]) if zone_south else geo
    if geographic:
        if zone_south is None:
            raise MapFormatError(f"{p}: cannot tell the UTM zone (no +zone= in geoReference, no west/east)")
        for a in raw:
            if len(a):
                a[:, 0], a[:, 1] = wgs84_to_utm(a[:, 0], a[:, 1], zone_south[0], south=zone_south[1])

    header = MapHeader(
        version=attrs.get("version", MapHeader.version),
        date=attrs.get("date", ""),
        proj=proj,
        vendor=attrs.get("vendor", ""),
    )
    return HDMap(header=header, lanes=lanes, roads=roads, junctions=junctions)


def map_to_xml(hd: HDMap, *, zone: int | None = None, south: bool = False) -> str:
    """Apollo-style OpenDRIVE text of a model (points converted back to WGS84), for tests and exchange."""
    from lidarmt.utm import utm_to_wgs84

    if zone is None:
        zs = parse_proj_zone(hd.header.proj)
        if zs is None:
            raise ValueError("the map's projection is not UTM; pass zone=")
        zone, south = zs

    def pts_xml(arr: np.ndarray, tag: str, indent: str) -> str:
        lon, lat = utm_to_wgs84(arr[:, 0], arr[:, 1], zone, south=south)
        z = arr[:, 2] if arr.shape[1] > 2 else np.zeros(len(arr))
        return "".join(f'{indent}<{tag} x="{a!r}" y="{b!r}" z="{float(c)!r}"/>\n' for a, b, c in
                       zip(lon.tolist(), lat.tolist(), z.tolist(), strict=True))

    lane_by_id = {ln.id: ln for ln in hd.lanes}
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<OpenDRIVE>\n',
           f'  <header version="{hd.header.version}" vendor="{hd.header.vendor}">\n'
           f"    <geoReference><![CDATA[{utm_proj(zone, south=south)}]]></geoReference>\n  </header>\n"]
    for rd in hd.roads:
        out.append(f'  <road id="{rd.id}" junction="{rd.junction_id if rd.junction_id is not None else -1}">\n'
                   "    <lanes>\n")
        for sec in rd.sections:
            out.append(f'      <laneSection id="{sec.id}">\n        <boundaries>\n')
            for e in sec.edges:
                name = {EdgeType.LEFT_BOUNDARY: "leftBoundary", EdgeType.RIGHT_BOUNDARY: "rightBoundary"}.get(
                    e.type, "normal")
                out.append(f'          <boundary type="{name}"><geometry><pointSet>\n'
                           + pts_xml(e.points, "point", "            ")
                           + "          </pointSet></geometry></boundary>\n")
            out.append("        </boundaries>\n        <right>\n")
            for k, lid in enumerate(sec.lane_ids):
                ln = lane_by_id.get(lid)
                if ln is None:
                    continue
                out.append(f'          <lane id="{-(k + 1)}" uid="{lid}" type="driving" direction="forward">'
                           "<centerLine><geometry><pointSet>\n" + pts_xml(ln.central_curve, "point", "            ")
                           + "          </pointSet></geometry></centerLine></lane>\n")
            out.append("        </right>\n      </laneSection>\n")
        out.append("    </lanes>\n  </road>\n")
    for jn in hd.junctions:
        out.append(f'  <junction id="{jn.id}"><outline>\n' + pts_xml(jn.polygon, "cornerGlobal", "    ")
                   + "  </outline></junction>\n")
    out.append("</OpenDRIVE>\n")
    return "".join(out)
