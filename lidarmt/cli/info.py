"""``lidarmt info``: what is in a recording (topics, frames, points, poses, ranges)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt._show import term
from lidarmt.cli._common import console, err_console, show


def register(app: typer.Typer) -> None:
    app.command("info")(info)


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "–" if v is None else fmt.format(v)


def _range(r: dict[str, list[float]] | None, fmt: str = "{:.2f}") -> str:
    if not r:
        return "–"
    return "  ".join(f"{a} {fmt.format(lo)} … {fmt.format(hi)}" for a, (lo, hi) in r.items())


def info(
    path: Annotated[Path, typer.Argument(help="A ROS1 .bag, ROS2 bag folder, Apollo .record, .pcd file or folder, "
                                         "KITTI object folder or .bin scan, KITTI raw drive (…_sync folder), "
                                         "SemanticKITTI sequence (sequences/NN), or folder of lidarmt .npz "
                                         "frames.")],
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Point-cloud topic or channel to read "
                                              "(default: Apollo's velodyne64 compensator topic, or the only "
                                              "point-cloud topic).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")] = False,
    sample: Annotated[int | None, typer.Option("--sample", min=1, help="Read only this many frames, evenly "
                                               "spaced, for the point statistics (faster on big bags).")] = None,
    require_pose: Annotated[bool, typer.Option("--require-pose", help="Fail when a frame has no pose "
                                               "world <- sensor (what an HD-map ROI needs).")] = False,
    recover: Annotated[bool, typer.Option("--recover", help="Read a ROS1 bag without a usable index (truncated "
                                          "or still being recorded) by scanning its complete chunks.")] = False,
) -> None:
    """Topics and message counts, frame count, duration, points per frame, pose source, poses and coordinate
    ranges.

    Poses are printed as found (a few frames, evenly spaced: position and heading of world <- sensor); a frame
    without one is reported in the same words `roi` and `perceive` use. A KITTI raw drive's poses come from its
    OXTS packets (UTM) and calib_imu_to_velo.txt; a SemanticKITTI sequence's from poses.txt and calib.txt.

    Exits with status 2 and one line on stderr when the path is not a readable recording or the topic does not
    exist. A valid recording without point clouds (e.g. a Cyber record of planning and localization only) is
    summarised with a note and exit status 0; `fuzz`, `perceive` and `roi` refuse it.

    Examples:

    `lidarmt info bags/demo.bag`

    `lidarmt info ../shared/data/kitti/training --json`

    `lidarmt info 2011_09_26/2011_09_26_drive_0005_sync`

    `lidarmt info dataset/sequences/08 --sample 20`

    `lidarmt info huge.bag --sample 50 --topic /apollo/sensor/velodyne64/PointCloud2`
    """
    import json
    import sys

    import numpy as np

    from lidarmt.io import open_recording
    from lidarmt.io.errors import NO_POSE

    poses: list[dict] = []

    def keep_poses(frames):
        for f in frames:
            if f.pose is not None:
                poses.append(_pose_row(f))
            yield f

    from lidarmt.io.factory import is_plain_mcap

    if is_plain_mcap(path):  # lidarmt's own MCAP (export, bug bundles) or any other non-ROS MCAP file
        _mcap_info(path, json_out=json_out)
        return
    with open_recording(path, topic=topic, allow_empty=True, recover=recover) as rec:
        n = len(rec)
        bar = not json_out and err_console.is_terminal and n > 50 and (sample is None or sample > 50)

        def progress(frames, total):
            if bar:
                from lidarmt.cli._common import track

                frames = track(frames, total=total, description="reading frames")
            return keep_poses(frames)

        summary = rec.describe(sample=sample, progress=progress)
    if poses:
        pick = np.unique(np.linspace(0, len(poses) - 1, min(len(poses), POSE_ROWS)).round().astype(int))
        summary.extra["poses"] = [poses[int(k)] for k in pick]
    nested = _nested_pcd_folders(path) if summary.format == "pcd" else []
    if nested:
        shown = ", ".join(f"{d.name}/" for d in nested[:3]) + (", …" if len(nested) > 3 else "")
        summary.notes.append(f"read only the {summary.frame_count} .pcd file(s) at the top level of {path}; "
                             f"{len(nested)} sub-folder(s) also hold .pcd files and were not read ({shown}): "
                             f"open each as its own recording")

    note = None
    if summary.frame_count == 0:  # a valid recording, just not one to perceive: say so, it is no error
        what = f"topic {summary.topic}" if summary.topic else "recording"
        note = (f"no point clouds in this {what}; fuzz, perceive and roi need a recording with point clouds"
                + (" (see the topics listed above)" if summary.topics and not json_out else ""))
    if json_out:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
        if note:
            print(f"lidarmt: note: {term(path)}: {term(note)}", file=sys.stderr)
    else:
        if note:  # in place of the reader's shorter note
            summary.notes = [note] + [n for n in summary.notes if n != "no point clouds in this recording"]
        _print(summary)
    if require_pose and summary.frames_with_pose < summary.frames_scanned:
        from lidarmt.io.errors import PoseError

        missing = summary.frames_scanned - summary.frames_with_pose
        raise PoseError(f"{path}: {missing} of {summary.frames_scanned} frame(s) have {NO_POSE} "
                        f"(pose source: {summary.pose_source}); record /tf and /tf_static (or .pose files, or "
                        f"OXTS packets) with the clouds")


def _mcap_info(path: Path, *, json_out: bool) -> None:
    """An MCAP file of Foxglove messages (``lidarmt export``, a bug bundle's ``bundle.mcap``): profile, time
    range, topics with schemas and message counts, and lidarmt's metadata record."""
    import json
    import sys

    from rich.table import Table
    from rich.text import Text

    from lidarmt.engine.mcap import describe_mcap
    from lidarmt.io.errors import FormatError

    try:
        d = describe_mcap(path)
    except Exception as err:  # noqa: BLE001 - a damaged file is the user's data: one line
        raise FormatError(f"{path}: unreadable MCAP file ({type(err).__name__}: {err})"[:300]) from err
    if json_out:
        sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + "\n")
        return
    def shown(v: object) -> Text:  # text from the file: no markup, no control characters
        return Text("".join(c if c.isprintable() else "?" for c in str(v)))

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    head.add_row("path", shown(path))
    head.add_row("format", shown(f"MCAP (profile {d['profile'] or 'none'}, written by {d['library'] or '?'})"))
    head.add_row("messages", f"{d['messages']:,}")
    if d["start_ns"] is not None:
        s0, s1 = d["start_ns"] * 1e-9, d["end_ns"] * 1e-9
        head.add_row("time", f"{s0:.6f} … {s1:.6f}  (duration {s1 - s0:.3f} s)")
    for name, rec in d["metadata"].items():
        line = ", ".join(f"{k}={v}" for k, v in list(rec.items())[:8])
        head.add_row(shown(f"metadata {name}"), shown(line[:400] + ("…" if len(line) > 400 else "")))
    console.print(head)
    t = Table(title="topics", title_justify="left")
    t.add_column("topic", overflow="fold")
    t.add_column("schema", overflow="fold")
    t.add_column("messages", justify="right")
    for name, ti in sorted(d["topics"].items()):
        t.add_row(shown(name), shown(ti["schema"]), f"{ti['messages']:,}")
    console.print(t)


POSE_ROWS = 5  # poses printed by `lidarmt info` (evenly spaced over the frames read)


def _pose_row(frame) -> dict:
    """One frame's pose world <- sensor as printed: position and heading (yaw of the sensor's x axis)."""
    import math

    p = frame.pose
    return {"frame": int(frame.index), "stamp": float(frame.stamp), "x": float(p[0, 3]), "y": float(p[1, 3]),
            "z": float(p[2, 3]), "heading": math.atan2(float(p[1, 0]), float(p[0, 0]))}


def _nested_pcd_folders(path: Path) -> list[Path]:
    """Sub-folders of a PCD folder that hold .pcd files themselves (the reader reads only the top level)."""
    if not path.is_dir():
        return []
    try:
        return sorted(d for d in path.iterdir() if d.is_dir() and any(c.suffix.lower() == ".pcd" and c.is_file()
                                                                    for c in d.iterdir()))
    except OSError:
        return []


def _print(s) -> None:
    from rich.table import Table

    from lidarmt.io.errors import NO_POSE

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    head.add_row("path", s.path)
    head.add_row("format", s.format)
    if s.topic:
        head.add_row("point-cloud topic", s.topic)
    head.add_row("frames", str(s.frame_count) + (f" ({s.frames_scanned} read)" if s.frames_scanned < s.frame_count
                                                 else ""))
    if s.start is not None:
        head.add_row("time", f"{s.start:.6f} … {s.end:.6f}  (duration {s.duration:.3f} s)")
    if s.points_min is not None:
        head.add_row("points / frame", f"min {s.points_min:,}  median {s.points_median:,.0f}  max {s.points_max:,}")
    if s.dropped_points:
        head.add_row("dropped", f"{s.dropped_points:,} non-finite points")
    posed = ""
    if s.frames_scanned:
        posed = (f"  ({s.frames_with_pose}/{s.frames_scanned} frames posed)" if s.frames_with_pose
                 else f"  ({NO_POSE} in the {s.frames_scanned} frame(s) read)")
    head.add_row("pose", s.pose_source + posed)
    head.add_row("sensor range (m)", _range(s.sensor_range))
    if s.position_range:
        head.add_row("sensor position (world)", _range(s.position_range))
    for k, v in s.extra.items():
        if k in ("localization", "poses"):
            continue
        if k == "localization_range":
            head.add_row("localization (world)", _range(v, "{:.3f}"))
        elif k == "record_time":
            head.add_row("record time", f"{v[0]:.6f} … {v[1]:.6f}")
        else:
            head.add_row(k.replace("_", " "), str(v))
    console.print(head)
    if s.topics:
        t = Table(title="topics", title_justify="left")
        t.add_column("topic / channel", overflow="fold")
        t.add_column("type", overflow="fold")
        t.add_column("messages", justify="right")
        for ti in s.topics:
            t.add_row(ti.name, ti.msgtype, f"{ti.count:,}")
        console.print(t)
    loc = s.extra.get("localization")
    if loc:
        t = Table(title=f"localization poses ({loc['channel']}: {loc['count']} decoded)", title_justify="left")
        for col in ("time (s)", "x", "y", "z", "heading (rad)"):
            t.add_column(col, justify="right")
        for p in loc["poses"]:
            t.add_row(f"{p['time']:.6f}", f"{p['x']:.3f}", f"{p['y']:.3f}", f"{p['z']:.3f}",
                      _num(p.get("heading"), "{:.4f}"))
        console.print(t)
    rows = s.extra.get("poses")
    if rows:
        t = Table(title=f"poses world ← sensor ({s.frames_with_pose} of {s.frames_scanned} frames read; "
                        f"{len(rows)} shown)", title_justify="left")
        for col in ("frame", "time (s)", "x", "y", "z", "heading (rad)"):
            t.add_column(col, justify="right")
        for p in rows:
            t.add_row(str(p["frame"]), f"{p['stamp']:.3f}", f"{p['x']:.3f}", f"{p['y']:.3f}", f"{p['z']:.3f}",
                      f"{p['heading']:.4f}")
        console.print(t)
    for note in s.notes:
        console.print(f"[yellow]note:[/] {show(note)}")
