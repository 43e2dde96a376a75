"""``lidarmt info``: what is in a recording (topics, frames, points, poses, ranges)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import console, err_console


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
                                         "KITTI folder, or folder of lidarmt .npz frames.")],
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
    """Topics and message counts, frame count, duration, points per frame, pose source and coordinate ranges.

    Exits with status 2 and one line on stderr when the path is not a readable recording or the topic does not
    exist. A valid recording without point clouds (e.g. a Cyber record of planning and localization only) is
    summarised with a note and exit status 0; `fuzz`, `perceive` and `roi` refuse it.

    Examples:

    `lidarmt info bags/demo.bag`

    `lidarmt info ../shared/data/kitti/training --json`

    `lidarmt info huge.bag --sample 50 --topic /apollo/sensor/velodyne64/PointCloud2`
    """
    import json
    import sys

    from lidarmt.io import open_recording

    with open_recording(path, topic=topic, allow_empty=True, recover=recover) as rec:
        n = len(rec)
        progress = None
        if not json_out and err_console.is_terminal and n > 50 and (sample is None or sample > 50):
            from lidarmt.cli._common import track

            def progress(frames, total):
                return track(frames, total=total, description="reading frames")

        summary = rec.describe(sample=sample, progress=progress)

    note = None
    if summary.frame_count == 0:  # a valid recording, just not one to perceive: say so, it is no error
        what = f"topic {summary.topic}" if summary.topic else "recording"
        note = (f"no point clouds in this {what}; fuzz, perceive and roi need a recording with point clouds"
                + (" (see the topics listed above)" if summary.topics and not json_out else ""))
    if json_out:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
        if note:
            print(f"lidarmt: note: {path}: {note}", file=sys.stderr)
    else:
        if note:  # in place of the reader's shorter note
            summary.notes = [note] + [n for n in summary.notes if n != "no point clouds in this recording"]
        _print(summary)
    if require_pose and summary.frames_with_pose < summary.frames_scanned:
        from lidarmt.io.errors import PoseError

        missing = summary.frames_scanned - summary.frames_with_pose
        raise PoseError(f"{path}: {missing} of {summary.frames_scanned} frame(s) have no pose world <- sensor "
                        f"(pose source: {summary.pose_source}); record /tf and /tf_static (or .pose files) "
                        f"with the clouds")


def _print(s) -> None:
    from rich.table import Table

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
    head.add_row("pose", s.pose_source + (f"  ({s.frames_with_pose}/{s.frames_scanned} frames posed)"
                                          if s.frames_scanned and s.frames_with_pose else ""))
    head.add_row("sensor range (m)", _range(s.sensor_range))
    if s.position_range:
        head.add_row("sensor position (world)", _range(s.position_range))
    for k, v in s.extra.items():
        if k == "localization":
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
    for note in s.notes:
        console.print(f"[yellow]note:[/] {note}")
