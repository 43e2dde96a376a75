"""``lidarmt roi``: the HD-map ROI of one frame, as a picture and as counts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import console, show


def register(app: typer.Typer) -> None:
    app.command("roi")(roi)


def roi(
    recording: Annotated[Path, typer.Argument(help="A recording (ROS1/ROS2 bag, Apollo .record, PCD/KITTI/npz "
                                              "folder) whose frames have poses.")],
    map_path: Annotated[str | None, typer.Option("--map", "--roi", "-m", help="HD map: an Apollo map folder "
                                                 "(base_map.bin / base_map.txt / sim_map.txt / base_map.xml) or one map "
                                                 "file, or a .geojson drawn in world or sensor coordinates; or 'labels': "
                                                 "the area the frame's ground labels cover (SemanticKITTI). Default: "
                                                 "labels when the frame has them.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Picture to write (.png; .pdf/.svg also work).")] = Path(
        "roi.png"),
    frame_index: Annotated[int, typer.Option("--frame", "-f", min=0, help="Frame index (0-based).")] = 0,
    range_: Annotated[float, typer.Option("--range", help="Half-size of Apollo's ROI bitmap in metres: 70 "
                                          "(Apollo 3.0) or 120 (the 2.x config).")] = 70.0,
    cell: Annotated[float, typer.Option("--cell", help="Bitmap cell size in metres.")] = 0.25,
    map_radius: Annotated[float, typer.Option("--radius", help="Lane search radius around the sensor (m).")] = 60.0,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Point-cloud topic or channel.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
) -> None:
    """Draw one frame from above with Apollo's HD-map ROI: the road and junction polygons around the sensor,
    the points in the ROI and outside it, the sensor and a scale bar; print the counts.

    The ROI is Apollo's HDMap ROI filter: lanes within --radius of the sensor, their road sections' boundaries
    (or junction polygons), drawn into a bitmap of --cell cells covering ±--range metres. A frame far from every
    road gets an empty ROI (Apollo reports no obstacle for it); that is shown, not an error.

    Examples:

    `lidarmt roi bags/demo.bag --map hdmaps/demo --frame 5 --out roi.png`

    `lidarmt roi bags/demo.bag --map hdmaps/demo/base_map.txt --range 120 --out roi120.png`

    `lidarmt roi sequences/08 --roi labels --out roi.png`  (the label ROI: the area the road, parking, sidewalk
    and other-ground labels cover, and every point above it)
    """
    import warnings

    from lidarmt._paths import check_writable
    from lidarmt.errors import ArgumentError
    from lidarmt.io import open_recording
    from lidarmt.lidar.roi import HDMapRoi, load_map
    from lidarmt.lidar.roi.errors import MapProjectionWarning
    from lidarmt.lidar.roi.plot import draw_roi_png

    check_writable(out, inputs=(recording, map_path), force=force)
    if out.suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
        raise ArgumentError(f"--out {out}: use a .png (or .pdf/.svg/.jpg) file name")
    with open_recording(recording, topic=topic) as rec:
        n = len(rec)
        if frame_index >= n:
            raise ArgumentError(f"--frame {frame_index}: {recording} has {n} frame(s) (0..{n - 1})")
        frame = rec[frame_index]
        pose_source = rec.pose_source
    if map_path is None or map_path == "labels":
        _label_roi_png(recording, frame, frame_index, out, range_=range_, cell=cell, explicit=map_path is not None)
        return
    hd = load_map(Path(map_path))
    hroi = HDMapRoi(hd, range=range_, cell=cell, map_radius=map_radius)
    if hd.frame != "sensor" and frame.pose is None:
        from lidarmt.io.errors import NO_POSE

        raise ArgumentError(
            f"{recording}: frame {frame_index} has {NO_POSE}, so the map cannot be placed (pose source: "
            f"{pose_source}); record /tf or localization with the cloud, or draw the map in sensor coordinates "
            '(GeoJSON "frame": "sensor")'
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MapProjectionWarning)
        mask = hroi.mask(frame.pose)
    title = f"{recording.name} frame {frame_index}  ·  map {Path(hd.source).name}"
    counts = draw_roi_png(frame, mask, out, title=title)
    for w in caught:
        console.print(f"[yellow]warning:[/] {show(w.message)}")
    console.print(
        f"points in ROI: {counts.in_roi:,} / {counts.points:,} ({100 * counts.fraction:.1f} %)   "
        f"polygons: {counts.polygons} (roads {counts.roads}, junctions {counts.junctions})   "
        f"ROI area: {counts.area_m2:,.0f} m²",
        soft_wrap=True,
    )
    if mask.empty:
        console.print(f"[yellow]empty ROI:[/] {show(mask.note)}")
    console.print(f"wrote {out}")


def _label_roi_png(recording: Path, frame, frame_index: int, out: Path, *, range_: float, cell: float,
                   explicit: bool) -> None:
    """``lidarmt roi --roi labels``: the label ROI (:class:`lidarmt.lidar.roi.query.LabelRoi`) of one frame."""
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.roi.plot import draw_roi_png
    from lidarmt.lidar.roi.query import LabelRoi

    if not LabelRoi.has_labels(frame):
        raise ArgumentError(
            f"{recording}: frame {frame_index} has no per-point ground labels (SemanticKITTI labels/, KITTI "
            "road_label/)" + ("" if explicit else " and no --map was given")
            + "; give the ROI with --map (an Apollo map, or a GeoJSON drawn in the sensor frame)"
        )
    mask = LabelRoi(range=range_, cell=cell).mask(frame)
    counts = draw_roi_png(frame, mask, out, title=f"{recording.name} frame {frame_index}  ·  ROI from ground labels")
    console.print(
        f"points in ROI: {counts.in_roi:,} / {counts.points:,} ({100 * counts.fraction:.1f} %)   "
        f"ROI: the area the ground labels cover (road, parking, sidewalk, other-ground)   "
        f"ROI area: {counts.area_m2:,.0f} m²",
        soft_wrap=True,
    )
    if mask.empty:
        console.print(f"[yellow]empty ROI:[/] {show(mask.note)}")
    console.print(f"wrote {out}")
