"""A resumed campaign's segment line: the machine and the implementations its later verdicts were computed with,
and machines() still counting which verdicts came from which ISA (journals written with the library's writer)."""

from __future__ import annotations

import json

from lidarmt._machine import isa_label, record
from lidarmt.engine.journal import create_journal, machines, segment_record


def _pair(i: int) -> dict:
    return {"type": "pair", "key": [i], "status": "ok"}


def test_a_segment_line_names_the_implementations_and_is_counted(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = create_journal(path, {"config": {}, "machine": {"isa": "sse41"},
                              "implementations": {"apollo": "exact-v1"}})
    for i in range(3):
        j.write(_pair(i))
    seg = segment_record({"apollo": "exact-v2"})
    assert seg["type"] == "segment" and seg["implementations"] == {"apollo": "exact-v2"}
    assert seg["machine"] == record()
    j.write(seg)
    for i in range(3, 5):
        j.write(_pair(i))
    j.write(segment_record())  # a campaign that records no implementations: the machine alone, as before
    j.write(_pair(5))
    j.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[4])["implementations"] == {"apollo": "exact-v2"}
    assert "implementations" not in json.loads(lines[7])
    here = isa_label(record())
    got = {m["isa"]: m["pairs"] for m in machines(path)}
    want = {"sse41": 3}  # a machine no CI runner is: the two segments stay apart
    want[here] = 3
    assert got == want
