#!/usr/bin/env python3
"""Reference server of the lidarmt exec protocol, version 1 (docs/exec-sut.md): any lidarmt perception module
behind stdin/stdout, as a C++ or ROS wrapper would put its own detector behind them.

    lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo \\
        --sut "exec:$PWD/.venv/bin/python $PWD/examples/exec_sut/reference_server.py --sut apollo" \\
        --sut-option mode=fast

What it does, in the order the protocol says:

1. reads lidarmt's handshake line ``{"lidarmt_exec": 1, "versions": [1], "options": {...}}`` and builds the
   perception named by ``--sut`` (a built-in such as ``apollo``, an installed plug-in, or
   ``package.module:callable``) with those options; answers ``{"lidarmt_exec": 1, "name": ...}``, or
   ``{"lidarmt_exec": 1, "error": ...}`` when it cannot build it (and exits);
2. per request: reads the 48-byte header and the body it announces, rebuilds the frame (points, pose, stamp,
   frame index) and an ROI made of the in-ROI point indices, runs ``detect`` and writes one reply line with
   every obstacle field (box included, so lidarmt gets exactly the obstacles the module computed; with
   ``--no-box`` it sends classes and points only and lidarmt builds the MinBox boxes), or ``{"error": ...}``
   with the exception's traceback when ``detect`` raises;
3. exits at the end of its input.

Only stdout carries the protocol: everything else (the banner below, warnings) goes to stderr, which lidarmt
keeps the tail of and puts into crash and timeout findings.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import numpy as np

from lidarmt.lidar.perception.exec_sut import (
    PROTOCOL_VERSION,
    decode_request,
    obstacles_to_reply,
    read_request,
)
from lidarmt.lidar.perception.registry import get_perception
from lidarmt.types import Frame, Provenance


class IndexRoi:
    """The ROI of one request: the points lidarmt says are inside (the protocol sends indices, not a map)."""

    def __init__(self, indices: np.ndarray, empty: bool) -> None:
        self._indices, self._empty = indices, empty

    @property
    def empty(self) -> bool:
        return self._empty

    def indices(self, frame: Frame) -> np.ndarray:
        return self._indices

    def contains(self, xy: np.ndarray) -> np.ndarray:
        raise NotImplementedError("the exec protocol sends the ROI as the indices of the frame's points inside it; "
                                  "use roi.indices(frame)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sut", default="apollo", help="the lidarmt perception to serve (name or module:callable)")
    ap.add_argument("--no-box", action="store_true", help="send classes and points only (lidarmt fills the boxes)")
    args = ap.parse_args(argv)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer

    def reply(obj: dict) -> None:
        stdout.write((json.dumps(obj) + "\n").encode())
        stdout.flush()

    hello = json.loads(stdin.readline() or "{}")
    if PROTOCOL_VERSION not in hello.get("versions", [hello.get("lidarmt_exec")]):
        reply({"lidarmt_exec": PROTOCOL_VERSION, "error": f"this server speaks version {PROTOCOL_VERSION} only"})
        return 1
    try:
        sut = get_perception(args.sut, **hello.get("options", {}))
    except Exception as err:  # noqa: BLE001 - told to lidarmt, which reports it as one line
        reply({"lidarmt_exec": PROTOCOL_VERSION, "error": f"cannot build {args.sut!r}: {type(err).__name__}: {err}"})
        return 1
    name = str(getattr(sut, "name", args.sut))
    print(f"reference_server: serving {name!r} ({args.sut})", file=sys.stderr, flush=True)
    reply({"lidarmt_exec": PROTOCOL_VERSION, "name": name})
    while (data := read_request(stdin)) is not None:
        req = decode_request(data)
        frame = Frame(req["points"], pose=req["pose"], stamp=req["stamp"],
                      provenance=Provenance("exec", "exec", int(req["frame_index"])))
        try:
            obstacles = sut.detect(frame, IndexRoi(req["roi_indices"], req["roi_empty"]))
            line = obstacles_to_reply(obstacles, seq=req["seq"], with_box=not args.no_box)
        except Exception as err:  # noqa: BLE001 - a SUT exception is an error reply, not the server's death
            reply({"seq": req["seq"], "error": f"{type(err).__name__}: {err}\n{traceback.format_exc()}"})
            continue
        stdout.write(line)
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
