"""apollo.hdmap messages and map loading on Apollo's real maps (counts from apollo-proto-facts.md §1.8)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lidarmt.lidar.roi import EdgeType, load_map, maps_equal, write_map
from lidarmt.proto import hdmap as pb

# (lanes, roads, sections, sections with outer polygon, edges UNKNOWN/NORMAL/LEFT/RIGHT, junctions,
#  crosswalks, roads with junction_id, zone)
EXPECTED = {
    "borregas_ave/base_map.bin": (60, 37, 37, 37, (0, 0, 46, 46), 2, 6, 28, 10),
    "shalun/base_map.bin": (235, 189, 189, 189, (0, 0, 209, 209), 17, 28, 152, 51),
    "borregas_ave_fix/sim_map.txt": (60, 37, 37, 37, (0, 0, 46, 46), 2, 6, 28, 10),
}


@pytest.mark.parametrize("name", ["borregas_ave/base_map.bin", "shalun/base_map.bin"])
def test_binary_maps_parse_without_unknown_fields_and_reserialise_identically(apollo_maps: Path, name: str):
    data = (apollo_maps / name).read_bytes()
    msg = pb.parse_map(data)
    assert pb.count_unknown_fields(msg) == 0
    assert msg.SerializeToString() == data
    assert msg.header.vendor == b"LGSVL"


def test_text_map_parses_without_unknown_fields_and_round_trips(apollo_maps: Path):
    text = (apollo_maps / "borregas_ave_fix/sim_map.txt").read_text()
    msg = pb.parse_map_text(text)
    assert pb.count_unknown_fields(msg) == 0
    again = pb.parse_map_text(pb.map_to_text(msg))
    assert again == msg
    # the same bytes as the binary form of the parsed text
    assert pb.parse_map(msg.SerializeToString()) == msg


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_counts_match_the_facts(apollo_maps: Path, name: str):
    lanes, roads, sections, with_outer, edges, junctions, crosswalks, in_junction, zone = EXPECTED[name]
    hd = load_map(apollo_maps / name)
    assert len(hd.lanes) == lanes
    assert len(hd.roads) == roads
    assert sum(len(r.sections) for r in hd.roads) == sections
    assert sum(1 for r in hd.roads for s in r.sections if s.edges) == with_outer
    all_edges = [e for r in hd.roads for s in r.sections for e in s.edges]
    assert tuple(sum(e.type == t for e in all_edges) for t in EdgeType) == edges
    assert sum(len(s.holes) for r in hd.roads for s in r.sections) == 0
    assert len(hd.junctions) == junctions and all(len(j.polygon) >= 3 for j in hd.junctions)
    assert len(hd.crosswalks) == crosswalks
    assert sum(r.junction_id is not None for r in hd.roads) == in_junction
    assert f"+zone={zone} " in hd.header.proj
    assert all(ln.type == 2 and ln.direction == 1 for ln in hd.lanes)  # CITY_DRIVING, FORWARD


def test_binary_and_text_forms_of_borregas_agree(apollo_maps: Path):
    a = load_map(apollo_maps / "borregas_ave")  # folder -> base_map.bin
    b = load_map(apollo_maps / "borregas_ave_fix")  # folder -> sim_map.txt
    assert Path(a.source).name == "base_map.bin" and Path(b.source).name == "sim_map.txt"
    assert [ln.id for ln in a.lanes] == [ln.id for ln in b.lanes]
    assert [r.id for r in a.roads] == [r.id for r in b.roads]
    assert [r.junction_id for r in a.roads] == [r.junction_id for r in b.roads]
    assert [s.lane_ids for r in a.roads for s in r.sections] == [s.lane_ids for r in b.roads for s in r.sections]
    np.testing.assert_allclose(a.bounds(), b.bounds(), atol=1e-3)
    np.testing.assert_allclose(a.bounds(), (586930.643, 4141182.145, 587177.732, 4141631.819), atol=1e-3)


@pytest.mark.parametrize("fmt", ["bin", "txt"])
def test_real_map_round_trips_through_write_map(apollo_maps: Path, tmp_path: Path, fmt: str):
    hd = load_map(apollo_maps / "shalun")
    paths = write_map(hd, tmp_path, formats=(fmt,))
    back = load_map(paths[fmt])
    details: list[str] = []
    assert maps_equal(hd, back, details=details), details[:5]
