"""``lidarmt perceive``: run Apollo's obstacle perception on one frame; table, JSON and bird's-eye picture."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import err_console
from lidarmt.cli._options import ForceOutputOption


def register(app: typer.Typer) -> None:
    app.command("perceive")(perceive)


def _roi_for(map_path: Path, frame, *, roi_range: float, map_frame: str):
    """The frame's ROI: an HD map placed by the frame's pose, or a map drawn in the sensor frame."""
    from lidarmt.errors import ArgumentError, InputError

    if map_frame not in ("auto", "world", "sensor"):
        raise ArgumentError(f"--map-frame must be auto, world or sensor, got {map_frame!r}")
    import numpy as np

    from lidarmt.lidar.roi import HDMapRoi, load_map

    hdmap = load_map(map_path)
    sensor = map_frame == "sensor" or (map_frame == "auto" and getattr(hdmap, "frame", "world") == "sensor")
    roi = HDMapRoi(hdmap, range=roi_range)
    if sensor:
        return roi.mask(np.eye(4))
    if frame.pose is None:
        src = frame.provenance.source if frame.provenance else "the recording"
        raise InputError(
            f"{src}: frame {frame.index} has no pose (world <- sensor), so the map {map_path} cannot be placed; "
            "record /tf or a localization topic with the cloud, or use a map drawn in the sensor frame "
            "(--map-frame sensor)"
        )
    return roi.mask(frame.pose)


@contextlib.contextmanager
def _stdout_guard() -> Iterator[None]:
    """Standard output that cannot be written (a full disk behind ``> file``, a closed pipe) ends the command
    with one line and exit status 2 (a closed pipe: silently, status 1), not a traceback. Flush inside."""
    from lidarmt.errors import OutputError

    try:
        yield
    except OSError as err:
        _drop_stdout()
        if isinstance(err, BrokenPipeError):  # e.g. `| head`: the reader has what it wanted
            raise typer.Exit(1) from err
        raise OutputError(
            f"cannot write to standard output: {err.strerror or err}; free some space or write elsewhere"
        ) from err


def _drop_stdout() -> None:
    """Point the stdout descriptor at /dev/null, so that the exit-time flush of what is left cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.stdout.fileno())
        finally:
            os.close(fd)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no real descriptor (e.g. captured)
        pass


def _label_roi(frame, recording: Path, *, roi_range: float):
    """The label ROI (:class:`lidarmt.lidar.roi.query.LabelRoi`): the area the frame's ground labels cover, and every
    point above it, as ``roi``, ``evaluate`` and ``fuzz --roi labels`` build it."""
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.roi.query import LabelRoi

    if not LabelRoi.has_labels(frame):
        region = frame.labels.region if frame.labels is not None else None
        if region is not None:  # box labels of a part of the sweep (KITTI raw tracklets): that part, as fuzz does
            from lidarmt.lidar.roi.query import region_roi

            return region_roi(region, range=roi_range)
        raise ArgumentError(
            f"{recording}: frame {frame.index} has no per-point ground labels (SemanticKITTI labels/, KITTI "
            "road_label/) and no labelled region; give the ROI with --map (an HD map or a GeoJSON map)"
        )
    return LabelRoi(range=roi_range).mask(frame)


def perceive(
    recording: Annotated[
        Path, typer.Argument(help="A recording (bag, record, PCD or KITTI folder, .npz frames).")
    ],
    map_path: Annotated[
        str | None,
        typer.Option(
            "--map",
            "--roi",
            help="The ROI: an HD map (Apollo base_map.bin/.txt/.xml folder or file, GeoJSON), or 'labels': the "
            "area the frame's ground labels cover (SemanticKITTI road, parking, sidewalk, other-ground) and every "
            "point above it. Default: labels when the frame has them.",
        ),
    ] = None,
    frame_index: Annotated[int, typer.Option("--frame", "-f", min=0, help="Frame index (0-based).")] = 0,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Point-cloud topic or channel.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the bird's-eye PNG here.")] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="CNN execution: exact (fp32, deterministic) or fast "
            "(bf16/channels_last where the CPU supports it)."
        ),
    ] = "exact",
    device: Annotated[
        str, typer.Option(help="Where the CNN runs: auto (cuda when available), cpu, cuda or cuda:N.")
    ] = "cpu",
    weights: Annotated[
        Path | None,
        typer.Option(
            "--weights", "-w", help="CNN weights: a state_dict .pt, Apollo's .caffemodel (its deploy.prototxt beside it) "
            "or an .onnx file; default: the shipped cnnseg<grid>.pt."
        ),
    ] = None,
    grid: Annotated[
        int | None,
        typer.Option(help="Feature grid: 640 (Apollo 2.5/3.0) or 512 (Apollo 2.0); default: the preset's."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a cnnseg setting, key=value "
            "(e.g. use_all_grids=false, objectness_thresh=0.6); "
            "repeatable.",
        ),
    ] = None,
    perception: Annotated[
        str | None,
        typer.Option(
            "--perception",
            "-p",
            help="The perception module: a registered name (apollo, apollo-512, apollo-3.0: built exactly as "
            "`lidarmt fuzz --sut` builds them) or package.module:callable.",
        ),
    ] = None,
    map_frame: Annotated[
        str,
        typer.Option(
            help="auto | world (place the map by the pose) | sensor (the map is drawn in sensor coordinates)."
        ),
    ] = "auto",
    roi_range: Annotated[float, typer.Option(help="Half-size of the ROI bitmap, m (Apollo 3.0: 70).")] = 70.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print obstacles, counts and timings as JSON.")
    ] = False,
    points: Annotated[
        bool, typer.Option("--points", help="With --json: include each obstacle's point indices.")
    ] = False,
    force: ForceOutputOption = False,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--cold",
            help="Time a second, warm call (default; the first call's time, JIT warm-up included, is printed "
            "beside it) or only the cold first call.",
        ),
    ] = True,
) -> None:
    """Detect the obstacles of one frame: class, score, points, centre, size and heading per obstacle.

    Examples:

    `lidarmt perceive bags/demo.bag --map hdmaps/demo --frame 3 --out bev.png`

    `lidarmt perceive sequences/08 --roi labels --frame 0`  (the ROI from SemanticKITTI ground labels)
    """
    import json

    from lidarmt._paths import check_writable
    from lidarmt.errors import ArgumentError
    from lidarmt.io import open_recording
    from lidarmt.lidar.perception.registry import get_perception

    if out is not None:
        check_writable(out, inputs=(recording, map_path, weights), force=force)
    with open_recording(recording, topic=topic) as rec:
        n = len(rec)
        if frame_index >= n:
            raise ArgumentError(f"--frame {frame_index} is out of range: {recording} has {n} frame(s)")
        frame = rec[frame_index]
    if map_path is not None and map_path != "labels":
        roi = _roi_for(Path(map_path), frame, roi_range=roi_range, map_frame=map_frame)
    else:
        roi = _label_roi(frame, recording, roi_range=roi_range)
    from lidarmt.lidar.perception.registry import BUILTINS

    name = perception or ("apollo-512" if grid == 512 else "apollo")
    if name in BUILTINS:  # the registry's preset (apollo-3.0: noise filter and LowObjectFilter), as fuzz builds it
        options: dict[str, object] = {"mode": mode, "device": device}
        if grid is not None:
            options["grid"] = grid
        if weights is not None:
            options["weights"] = str(weights)
        if set_:
            options["set"] = list(set_)
        sut = get_perception(name, **options)
    else:
        if grid is not None or weights is not None or set_:
            raise ArgumentError(f"--grid, --weights and --set configure Apollo's presets, not {name}")
        sut = get_perception(name)
    timings: dict[str, float] = {}
    import time

    from lidarmt.lidar.perception.guard import SutFault, guarded_detect

    cold: dict[str, float] = {}
    try:
        # the first call pays for JIT compilation and allocation (seconds): time it, then time a warm call,
        # which is what a running perception module costs per frame
        t0 = time.perf_counter()
        obstacles = guarded_detect(sut, frame, roi, timings=cold)
        cold.setdefault("total", time.perf_counter() - t0)
        if warm:
            t0 = time.perf_counter()
            obstacles = guarded_detect(sut, frame, roi, timings=timings)
            timings.setdefault("total", time.perf_counter() - t0)
        else:
            timings = cold
    except SutFault as err:  # the module the user asked for broke its contract: say what, in one line
        spec = perception or getattr(sut, "name", "apollo")
        raise ArgumentError(f"{err}; fix the perception module {spec}") from err
    roi_idx = roi.indices(frame)
    counts = {c.value: k for c, k in obstacles.counts().items()}
    if out is not None:
        from lidarmt.lidar.bev import draw_bev

        title = (
            f"{recording.name} frame {frame_index}: {len(obstacles)} obstacles ({getattr(sut, 'name', '?')})"
        )
        draw_bev(frame, obstacles, roi_indices=roi_idx, out=out, title=title)
    if json_out:
        doc = {
            "recording": str(recording),
            "frame": frame_index,
            "perception": getattr(sut, "name", str(perception)),
            "config": sut.config.to_dict() if hasattr(sut, "config") else None,
            "weights": getattr(sut, "weights_label", None),
            "points": len(frame),
            "roi_points": len(roi_idx),
            "counts": counts,
            "timings_ms": {k: round(v * 1000, 3) for k, v in timings.items()},
            "timings": "warm (a second call, after the first one's JIT warm-up)" if warm else "cold (first call)",
            "cold_ms": round(cold["total"] * 1000, 3),
            "obstacles": obstacles.to_list(with_points=points),
        }
        if out is not None:
            doc["picture"] = str(out)
        with _stdout_guard():
            print(json.dumps(doc, indent=2), flush=True)
        return
    from rich.table import Table

    from lidarmt.cli._common import wide_console

    label = getattr(sut, "weights_label", None)
    table = Table(title=f"{recording.name} · frame {frame_index} · {len(frame):,} points · "
                        f"{len(roi_idx):,} in the ROI" + (f" · {label}" if label else ""),
                  title_justify="left")  # fmt: skip
    for col, just in [("#", "right"), ("class", "left"), ("score", "right"), ("points", "right"),
                      ("centre x,y,z m", "right"), ("l×w×h m", "right"), ("head°", "right")]:  # fmt: skip
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    import math

    for i, o in enumerate(obstacles):
        table.add_row(
            str(i),
            o.cls.value,
            f"{o.score:.3f}",
            str(o.num_points),
            "{:.2f},{:.2f},{:.2f}".format(*o.center),
            f"{o.length:.2f}×{o.width:.2f}×{o.height:.2f}",
            f"{math.degrees(o.heading):.1f}",
        )
    out_console = wide_console()  # piped or logged: do not squeeze the table
    with _stdout_guard():
        out_console.print(table)
        out_console.print(
            "counts: "
            + ", ".join(f"{k} {v}" for k, v in counts.items())
            + " · "
            + ("warm: " if warm else "cold: ")
            + " ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items())  # fmt: skip
            + (f" (first call, with JIT warm-up: {cold['total'] * 1000:.0f} ms)" if warm else "")
        )
        out_console.file.flush()
    if out is not None:
        err_console.print(f"picture: {out}")
