"""``lidarmt camera info``: what is in an image source (format, frames, sizes, time span, labels, topics)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from lidarmt.cli._common import console, show


def register(app: typer.Typer) -> None:
    app.command("info")(info)


def info(
    path: Annotated[Path, typer.Argument(help="A Udacity-style folder (center/*.jpg + steering.csv) or its CSV, a "
                                         "folder of images, a ROS1 .bag, a ROS2 bag folder or an Apollo .record.")],
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Image topic or channel of a recording "
                                              "(default: the only one, or lidarmt simulate's "
                                              "/apollo/sensor/camera/front_6mm/image).")] = None,
    steering_topic: Annotated[str | None, typer.Option("--steering-topic", help="std_msgs/Float64 topic of "
                                                       "steering angles in radians (default: "
                                                       "/lidarmt/steering_angle when the bag has it).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")] = False,
    sample: Annotated[int | None, typer.Option("--sample", min=1, help="Decode only this many frames, evenly "
                                               "spaced, for the image sizes (faster on big sources); times and "
                                               "labels always cover every frame.")] = None,
) -> None:
    """Format, frame count, image size(s), time span and frame rate, steering-label statistics and topics.

    Labels are shown in degrees: count, min/max/mean/std, and the share of frames with |angle| < 1° (straight
    driving). Exits with status 2 and one line on stderr when the source cannot be read: missing path, bad CSV,
    missing or unreadable image, unknown topic or image encoding.

    Examples:

    `lidarmt camera info ../shared/data/udacity`

    `lidarmt camera info bags/demo.bag --json`

    `lidarmt camera info drive.bag --topic /camera/image_raw/compressed --steering-topic /steering`

    `lidarmt camera info big_folder --sample 100`
    """
    import json
    import sys

    from lidarmt.camera.sources import open_images

    with open_images(path, topic=topic, steering_topic=steering_topic) as src:
        summary = src.describe(sample=sample)
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        _print(summary)


def _fmt_time(s: dict[str, Any]) -> str | None:
    if s.get("start") is None:
        return None
    text = f"{s['start']:.6f} … {s['end']:.6f}  (duration {s['duration']:.3f} s"
    if s.get("rate_hz"):
        text += f", {s['rate_hz']:.2f} frames/s"
    return text + ")"


def _print(s: dict[str, Any]) -> None:
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    head.add_row("path", s["path"])
    head.add_row("format", s["format"])
    if s.get("csv"):
        head.add_row("CSV", s["csv"])
    if s.get("topic"):
        head.add_row("image topic", f"{s['topic']} ({s['message_type']})")
        head.add_row("steering topic", s.get("steering_topic") or "none")
    read = f" ({s['frames_read']} decoded)" if s["frames_read"] < s["frames"] else ""
    head.add_row("frames", f"{s['frames']:,}{read}")
    sizes = s.get("image_sizes") or []
    if sizes:
        head.add_row("image size", ", ".join(f"{z['width']}x{z['height']}" + (f" ({z['frames']:,} frames)"
                                                                              if len(sizes) > 1 else "")
                                              for z in sizes))
    span = _fmt_time(s)
    if span:
        head.add_row("time", span)
    lab = s.get("labels")
    if lab:
        text = (f"{lab['count']:,} labelled  min {lab['min_deg']:.2f}°  max {lab['max_deg']:.2f}°  "
                f"mean {lab['mean_deg']:.2f}°  std {lab['std_deg']:.2f}°  "
                f"|angle| < {lab['straight_below_deg']:g}°: {100 * lab['straight_share']:.1f} %")
        if lab.get("unlabelled"):
            text += f"  ({lab['unlabelled']:,} unlabelled)"
        head.add_row("steering labels", text)
    else:
        head.add_row("steering labels", "none")
    console.print(head)
    topics = s.get("topics")
    if topics:
        t = Table(title="topics", title_justify="left")
        t.add_column("topic / channel", overflow="fold")
        t.add_column("type", overflow="fold")
        t.add_column("messages", justify="right")
        for ti in topics:
            t.add_row(ti["name"], ti["type"], f"{ti['count']:,}")
        console.print(t)
    for note in s.get("notes", []):
        console.print(f"[yellow]note:[/] {show(note)}")
