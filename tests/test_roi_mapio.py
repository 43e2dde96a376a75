"""Map writers, GeoJSON maps and one-line errors for bad map input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lidarmt.errors import InputError, OutputError, UserError
from lidarmt.lidar.roi import (
    BoundaryEdge,
    EdgeType,
    HDMap,
    HDMapRoi,
    Junction,
    Lane,
    MapError,
    MapHeader,
    Road,
    RoadSection,
    load_map,
    maps_equal,
    write_map,
)
from lidarmt.lidar.roi.mapio import sniff_format


def small_map() -> HDMap:
    """Two straight 100 m roads joined by a junction, in UTM-like coordinates, built in code."""
    x0, y0 = 500_000.0, 4_000_000.0

    def straight(i: int, xa: float, xb: float) -> tuple[Lane, Road]:
        xs = np.linspace(xa, xb, 11)
        centre = np.stack([xs, np.full_like(xs, y0 + 1.75), np.zeros_like(xs)], axis=1)
        left = centre + [0, 1.75, 0]
        right = centre - [0, 1.75, 0]
        lane = Lane(f"lane_{i}", centre, left, right, length=abs(xb - xa), speed_limit=11.0,
                    left_boundary_types=[3], right_boundary_types=[4], successor_ids=[f"lane_{i + 1}"])
        sec = RoadSection("1", [lane.id], [BoundaryEdge(EdgeType.LEFT_BOUNDARY, left[:, :2] + [0, 1.75]),
                                            BoundaryEdge(EdgeType.RIGHT_BOUNDARY, right[:, :2] - [0, 1.75]),
                                            BoundaryEdge(EdgeType.NORMAL, np.array([[xa, y0], [xa, y0 + 3.5]]))])
        return lane, Road(f"road_{i}", [sec])

    l0, r0 = straight(0, x0, x0 + 100)
    l1, r1 = straight(1, x0 + 130, x0 + 230)
    xs = np.linspace(x0 + 100, x0 + 130, 4)
    l2 = Lane("lane_2", np.stack([xs, np.full_like(xs, y0 + 1.75)], axis=1), length=30.0, turn=1)
    r2 = Road("road_j", [RoadSection("1", ["lane_2"])], junction_id="J_0")
    jpoly = np.array([[x0 + 100, y0 - 5], [x0 + 130, y0 - 5], [x0 + 130, y0 + 10], [x0 + 100, y0 + 10]])
    return HDMap(
        header=MapHeader(proj="+proj=utm +zone=10 +ellps=WGS84 +datum=WGS84 +units=m +no_defs", vendor="test"),
        lanes=[l0, l1, l2],
        roads=[r0, r1, r2],
        junctions=[Junction("J_0", jpoly)],
    )


@pytest.mark.parametrize("fmt", ["bin", "txt"])
def test_small_map_round_trips(tmp_path: Path, fmt: str):
    hd = small_map()
    out = write_map(hd, tmp_path, formats=(fmt,))
    assert set(out) == {fmt} and out[fmt].name == f"base_map.{fmt}"
    back = load_map(out[fmt])
    details: list[str] = []
    assert maps_equal(hd, back, details=details), details
    assert back.lanes[0].central_curve.shape == (11, 3)


def test_write_map_writes_all_formats_and_folder_prefers_bin(tmp_path: Path):
    out = write_map(small_map(), tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["base_map.bin", "base_map.geojson", "base_map.txt"]
    assert Path(load_map(tmp_path / "m").source).name == "base_map.bin"
    assert set(out) == {"bin", "txt", "geojson"}


def test_write_map_refuses_to_overwrite(tmp_path: Path):
    write_map(small_map(), tmp_path, formats=("bin",))
    before = (tmp_path / "base_map.bin").read_bytes()
    with pytest.raises(OutputError, match="already exist"):
        write_map(small_map(), tmp_path, formats=("bin",))
    assert (tmp_path / "base_map.bin").read_bytes() == before
    write_map(small_map(), tmp_path, formats=("bin",), overwrite=True)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_geojson_round_trip_keeps_the_roi(tmp_path: Path):
    hd = small_map()
    out = write_map(hd, tmp_path, formats=("geojson",))
    doc = json.loads(out["geojson"].read_text())
    assert doc["type"] == "FeatureCollection" and doc["frame"] == "world"
    kinds = sorted(f["properties"]["kind"] for f in doc["features"])
    assert kinds == ["junction", "lane", "lane", "lane", "road", "road"]  # the junction road has no outline
    back = load_map(out["geojson"])
    pose = np.eye(4)
    pose[:3, 3] = [500_050.0, 4_000_001.0, 0.0]
    a, b = HDMapRoi(hd).mask(pose), HDMapRoi(back).mask(pose)
    assert not a.empty
    assert np.array_equal(a.bitmap, b.bitmap)


def test_geojson_without_lanes_is_queried_by_polygon(tmp_path: Path):
    doc = {
        "type": "FeatureCollection",
        "features": [
            {"type": "Feature", "properties": {"kind": "road", "id": "r"},
             "geometry": {"type": "Polygon", "coordinates": [[[0, -5], [200, -5], [200, 5], [0, 5], [0, -5]]]}},
            {"type": "Feature", "properties": {"kind": "junction", "id": "far"},
             "geometry": {"type": "Polygon", "coordinates": [[[900, 900], [910, 900], [910, 910]]]}},
        ],
    }
    p = tmp_path / "drawn.geojson"
    p.write_text(json.dumps(doc))
    hd = load_map(p)
    roi = HDMapRoi(hd)
    polys, ids = roi.query_with_ids([100.0, 0.0])  # inside the road, 100 m from its ends
    assert ids == ["r/1"] and len(polys) == 1
    assert roi.query([100.0, 300.0]) == []
    pose = np.eye(4)
    pose[:3, 3] = [100.0, 0.0, 0.0]
    m = roi.mask(pose)
    assert m.contains(np.array([[0.0, 0.0], [50.0, 4.0], [0.0, 6.0]])).tolist() == [True, True, False]


def test_geojson_in_sensor_frame_needs_no_pose(tmp_path: Path):
    from lidarmt.lidar.roi import SensorPolygonRoi

    doc = {
        "type": "FeatureCollection",
        "frame": "sensor",
        "features": [{"type": "Feature", "properties": {"kind": "road"},
                      "geometry": {"type": "Polygon",
                                   "coordinates": [[[-10, -4], [40, -4], [40, 4], [-10, 4]]]}}],
    }
    p = tmp_path / "sensor.geojson"
    p.write_text(json.dumps(doc))
    hd = load_map(p)
    assert hd.frame == "sensor"
    m = SensorPolygonRoi(hd).mask()
    assert m.contains(np.array([[0.0, 0.0, 0.0], [39.0, 3.0, 1.0], [41.0, 0.0, 0.0], [0.0, -4.5, 0.0]])).tolist() == [
        True, True, False, False]
    assert np.array_equal(HDMapRoi(hd).mask(None).bitmap, m.bitmap)


# ----------------------------------------------------------------------------------------------- bad input


def assert_one_line(err: BaseException) -> None:
    msg = str(err)
    assert msg and "\n" not in msg


def test_missing_map_is_a_one_line_input_error(tmp_path: Path):
    with pytest.raises(MapError) as ei:
        load_map(tmp_path / "nope" / "base_map.bin")
    assert isinstance(ei.value, InputError) and isinstance(ei.value, UserError)
    assert_one_line(ei.value)
    assert "no such map" in str(ei.value)


def test_empty_folder_names_what_it_looked_for(tmp_path: Path):
    with pytest.raises(MapError, match="base_map.bin") as ei:
        load_map(tmp_path)
    assert_one_line(ei.value)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        # fixed noise (a seeded draw, not os.urandom): every process collects the same test (pytest-xdist)
        ("base_map.bin", np.random.default_rng(64).bytes(64) + b"\xff\xff\xff", "not a binary Apollo map"),
        ("base_map.bin", b"", "holds no lanes"),
        ("base_map.txt", b"lane { id { id: 'x' } bogus: 1 }", "not a protobuf-text Apollo map"),
        ("base_map.txt", b"\xff\xfe\x00binary", "not a text map"),
        ("m.geojson", b"{not json", "not valid JSON"),
        ("m.geojson", b'{"type": "Feature"}', "FeatureCollection"),
        ("m.geojson", b'{"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {"kind": "road"},'
                      b' "geometry": {"type": "Point", "coordinates": [0, 0]}}]}', "Polygon"),
        ("m.xml", b"<notopendrive/>", "OpenDRIVE"),
        ("map.dat", b"\x00\x01\x02garbage", "unknown map format"),
    ],
)
def test_corrupt_or_unknown_maps_are_one_line_errors(tmp_path: Path, name: str, content: bytes, match: str):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(MapError, match=match) as ei:
        load_map(p)
    assert_one_line(ei.value)
    assert str(p) in str(ei.value)


def test_truncated_real_map_is_reported(apollo_maps: Path, tmp_path: Path):
    data = (apollo_maps / "borregas_ave/base_map.bin").read_bytes()
    p = tmp_path / "base_map.bin"
    p.write_bytes(data[: len(data) // 2 + 7])
    with pytest.raises(MapError, match="truncated") as ei:
        load_map(p)
    assert_one_line(ei.value)


def test_sniffing_a_file_without_suffix(tmp_path: Path):
    write_map(small_map(), tmp_path, formats=("bin", "txt", "geojson"))
    for src, fmt in (("base_map.bin", "bin"), ("base_map.txt", "txt"), ("base_map.geojson", "geojson")):
        q = tmp_path / f"noext_{fmt}"
        q.write_bytes((tmp_path / src).read_bytes())
        assert sniff_format(q) == fmt
        assert len(load_map(q).lanes) == 3


# ----------------------------------------------------------------------------------------------- XML and UTM


def test_utm_known_values():
    from lidarmt.utm import utm_to_wgs84, wgs84_to_utm, zone_of

    # central meridian at 45°N: northing = 0.9996 x the WGS84 meridian arc to 45° (4,984,944.378 m)
    e, n = wgs84_to_utm(3.0, 45.0, 31)
    assert abs(e - 500_000.0) < 1e-9 and abs(n - 0.9996 * 4_984_944.378) < 1e-3
    # the Borregas map header's single lon/lat point is the round UTM point (587070, 4141577) of zone 10
    e, n = wgs84_to_utm(-122.01603666045537, 37.416905633399246, zone_of(-122.01603666045537))
    assert zone_of(-122.016) == 10 and abs(e - 587070.0) < 0.02 and abs(n - 4141577.0) < 0.02
    lon, lat = utm_to_wgs84(np.array([587070.0, 215750.0]), np.array([4141577.0, 2546150.0]), 10)
    e2, n2 = wgs84_to_utm(lon, lat, 10)
    np.testing.assert_allclose([e2, n2], [[587070.0, 215750.0], [4141577.0, 2546150.0]], atol=1e-6)


def test_xml_map_round_trip_matches_the_model(apollo_maps: Path, tmp_path: Path):
    from lidarmt.lidar.roi.xmlmap import map_to_xml

    hd = load_map(apollo_maps / "borregas_ave")
    p = tmp_path / "base_map.xml"
    p.write_text(map_to_xml(hd))
    back = load_map(tmp_path)  # folder without .bin/.txt -> base_map.xml
    assert Path(back.source).name == "base_map.xml"
    assert "+zone=10" in back.header.proj
    assert [r.id for r in back.roads] == [r.id for r in hd.roads]
    assert [r.junction_id for r in back.roads] == [r.junction_id for r in hd.roads]
    for ra, rb in zip(hd.roads, back.roads, strict=True):
        for sa, sb in zip(ra.sections, rb.sections, strict=True):
            assert sa.lane_ids == sb.lane_ids
            for ea, eb in zip(sa.edges, sb.edges, strict=True):
                assert ea.type == eb.type
                np.testing.assert_allclose(eb.points[:, :2], ea.points[:, :2], atol=1e-6)
    for ja, jb in zip(hd.junctions, back.junctions, strict=True):
        np.testing.assert_allclose(jb.polygon[:, :2], ja.polygon[:, :2], atol=1e-6)
    # the same ROI at a junction
    pos = hd.junctions[0].polygon[:, :2].mean(axis=0)
    pose = np.eye(4)
    pose[:2, 3] = pos
    a, b = HDMapRoi(hd).mask(pose), HDMapRoi(back).mask(pose)
    assert a.polygon_ids == b.polygon_ids
    assert (a.grid() != b.grid()).sum() <= 10  # micrometre differences may move a vertex across a scan line


def test_xml_zone_from_header_west_east(tmp_path: Path):
    xml = """<OpenDRIVE><header west="121.2" east="121.3" north="23.1" south="23.0"/>
      <road id="r" junction="-1"><lanes><laneSection><boundaries>
        <boundary type="leftBoundary"><geometry><pointSet><point x="121.25" y="23.05"/><point x="121.26" y="23.05"/></pointSet></geometry></boundary>
        <boundary type="rightBoundary"><geometry><pointSet><point x="121.25" y="23.049"/><point x="121.26" y="23.049"/></pointSet></geometry></boundary>
      </boundaries></laneSection></lanes></road></OpenDRIVE>"""
    p = tmp_path / "base_map.xml"
    p.write_text(xml)
    hd = load_map(p)
    assert "+zone=51" in hd.header.proj
    e = hd.roads[0].sections[0].edges[0].points
    assert 300_000 < e[0, 0] < 350_000 and 2_500_000 < e[0, 1] < 2_600_000
