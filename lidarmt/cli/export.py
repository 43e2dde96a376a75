"""``lidarmt export``: frames of any recording with a perception module's output, as one MCAP file for Foxglove."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._options import ForceOutputOption, QuietBarOption


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def parse_frames(spec: str, n: int) -> list[int]:
    """``--frames``: ``START:STOP[:STEP]`` (Python slice; either end may be left out, STOP is exclusive), a
    comma list ``0,3,7``, a single index, or ``all``; indices must lie in ``0..n-1`` (negative ones count from
    the end, as in Python)."""
    from lidarmt.errors import ArgumentError

    s = spec.strip()
    if s in ("", "all", ":"):
        return list(range(n))
    try:
        if ":" in s:
            parts = [p.strip() for p in s.split(":")]
            if len(parts) > 3:
                raise ValueError
            start, stop, step = ([int(p) if p else None for p in parts] + [None, None])[:3]
            if step == 0:
                raise ArgumentError(f"--frames {spec}: the step must not be 0")
            out = list(range(n))[slice(start, stop, step)]
        else:
            out = []
            for p in s.split(","):
                i = int(p.strip())
                j = i + n if i < 0 else i
                if not 0 <= j < n:
                    raise ArgumentError(f"--frames {spec}: frame {i} is out of range (the recording has {n} frame(s))")
                out.append(j)
    except ValueError as err:
        raise ArgumentError(f"--frames {spec!r}: give START:STOP[:STEP], a comma list such as 0,3,7, or all") from err
    if not out:
        raise ArgumentError(f"--frames {spec}: selects no frame (the recording has {n} frame(s), 0..{n - 1})")
    return out


def _roi_maker(map_path: str | None, recording: Path, *, roi_range: float, map_frame: str):
    """frame -> its ROI: the HD map loaded once and placed by each frame's pose (as ``perceive`` does), or the
    area the frame's ground labels cover."""
    from lidarmt.cli.perceive import _label_roi, _roi_for

    if map_path is None or map_path == "labels":
        return lambda frame: _label_roi(frame, recording, roi_range=roi_range)
    import numpy as np

    from lidarmt.lidar.roi import HDMapRoi, load_map

    first: dict[str, object] = {}

    def make(frame):
        if not first:  # the first frame goes through perceive's checks (map frame, pose) and one-line errors
            roi = _roi_for(Path(map_path), frame, roi_range=roi_range, map_frame=map_frame)
            hdmap = load_map(Path(map_path))
            first["sensor"] = map_frame == "sensor" or (map_frame == "auto"
                                                        and getattr(hdmap, "frame", "world") == "sensor")
            first["roi"] = HDMapRoi(hdmap, range=roi_range)
            return roi
        if first["sensor"]:
            return first["roi"].mask(np.eye(4))
        if frame.pose is None:
            return _roi_for(Path(map_path), frame, roi_range=roi_range, map_frame=map_frame)  # its one-line error
        return first["roi"].mask(frame.pose)

    return make


def export(
    recording: Annotated[Path, typer.Argument(help="A recording (bag, record, PCD or KITTI folder, .npz frames).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The MCAP file to write (a Foxglove layout is written "
                                                          "beside it as NAME.layout.json).")],
    frames: Annotated[str, typer.Option("--frames", help="Frames: START:STOP[:STEP] (STOP exclusive, e.g. 0:5), "
                                                        "a comma list (0,3,7) or all.")] = "all",
    perception: Annotated[str, typer.Option("--perception", "-p", help="The perception module run on each frame: "
                                                                       "a registered name (apollo, apollo-512, "
                                                                       "apollo-3.0) or package.module:callable.")]
    = "apollo",
    map_path: Annotated[str | None, typer.Option("--map", "--roi", help="The ROI: an HD map (Apollo "
                                                                        ".bin/.txt/.xml, GeoJSON) or 'labels' (the "
                                                                        "area the frames' ground labels cover). "
                                                                        "Default: labels.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Point-cloud topic or channel.")] = None,
    map_frame: Annotated[str, typer.Option(help="auto | world (place the map by the pose) | sensor.")] = "auto",
    roi_range: Annotated[float, typer.Option(help="Half-size of the ROI bitmap, m (Apollo 3.0: 70).")] = 70.0,
    mode: Annotated[str, typer.Option(help="CNN execution of Apollo's presets: exact or fast.")] = "exact",
    device: Annotated[str, typer.Option(help="Where Apollo's CNN runs: auto, cpu, cuda or cuda:N.")] = "cpu",
    quiet: QuietBarOption = False,
    force: ForceOutputOption = False,
) -> None:
    """Write frames of a recording with the obstacles a perception module finds in them as MCAP (Foxglove's
    schemas): per frame the cloud (/lidarmt/points), the obstacles as boxes coloured by class
    (/lidarmt/obstacles), the ROI's polygons (/lidarmt/lidar/roi) and the sensor pose (/tf).

    Examples:

    `lidarmt export bags/demo.bag --map hdmaps/demo --frames 0:5 --out demo.mcap`

    `lidarmt export sequences/08 --roi labels --frames 0,10,20 --perception apollo-3.0 --out seq08.mcap`
    """
    from lidarmt._paths import check_outputs
    from lidarmt.cli._common import console, track
    from lidarmt.engine.mcap import RecordingMcapWriter, write_layout
    from lidarmt.errors import ArgumentError
    from lidarmt.io import open_recording
    from lidarmt.lidar.perception.guard import SutFault, guarded_detect
    from lidarmt.lidar.perception.registry import BUILTINS, get_perception

    if out.suffix.lower() != ".mcap":
        raise ArgumentError(f"--out {out}: give a file name ending in .mcap")
    if out.is_dir():
        raise ArgumentError(f"--out {out} is a folder; give a file name ending in .mcap")
    if not (roi_range > 0 and roi_range < 1e4):
        raise ArgumentError(f"--roi-range {roi_range}: give a positive number of metres")
    layout = out.with_name(out.stem + ".layout.json")
    check_outputs((out, layout), inputs=(recording, map_path), force=force)  # never the recording's own file
    with open_recording(recording, topic=topic) as rec:
        chosen = parse_frames(frames, len(rec))
        sut = (get_perception(perception, mode=mode, device=device) if perception in BUILTINS
               else get_perception(perception))
        meta = {"recording": str(recording), "frames": chosen, "perception": getattr(sut, "name", perception),
                "roi": map_path or "labels"}
        frame_id = None
        counts = 0
        roi_of = _roi_maker(map_path, recording, roi_range=roi_range, map_frame=map_frame)
        with RecordingMcapWriter(out, metadata=meta) as w:
            items = chosen if quiet else track(chosen, total=len(chosen), description="export")
            for i in items:
                frame = rec[i]
                roi = roi_of(frame)
                try:
                    obstacles = guarded_detect(sut, frame, roi)
                except SutFault as err:
                    raise ArgumentError(f"frame {i}: {err}; fix the perception module {perception}") from err
                w.add(frame, obstacles, roi=roi, roi_indices=roi.indices(frame))
                counts += len(obstacles)
                frame_id = frame.frame_id
    write_layout(layout, "recording", frame_id=frame_id)
    console.print(f"wrote {out} ({len(chosen)} frame(s), {counts} obstacle(s)) and the Foxglove layout {layout}",
                  soft_wrap=True, highlight=False)
