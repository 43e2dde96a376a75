"""``lidarmt transforms``: the LiDAR transformations (name, family, parameters with units, levels), or a picture
sheet of them on a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._options import ForceOutputOption, SensorOption


def register(app: typer.Typer) -> None:
    app.command(name="transforms", help=TRANSFORMS_HELP)(transforms)


TRANSFORMS_HELP = """List the LiDAR transformations (name, family, parameters with their units and ranges, the three
levels light, moderate, heavy), or draw them.

Families (after Dong et al., CVPR 2023): weather (fog after Hahner et al. 2021, rain, snow: physical units,
visibility in m, rates in mm/h), sensor (beam-loss, beam-skip, range-noise, intensity, fov-loss, crosstalk),
motion (rolling-shutter, deskew), object (insert a real object cut from labelled sweeps, remove an obstacle),
alignment (rotate, mirror). Each is a deterministic function of (sweep, parameters, seed); plug-ins come from the
entry points `lidarmt.lidar_transform`. docs/lidar-transforms.md states each physical model.

With --sheet, the source sweep and every selected transformation at --levels are drawn in bird's-eye view
(changed points orange, added red, dropped pink) on one frame of --bag, or on a synthetic street sweep (cast
with --sensor's beams, the KITTI HDL-64E's by default) when no --bag is given. --sensor names the sensor profile
the transformations model (docs/sensors.md); --sensors lists the profiles. `insert` needs an object library: --library (a labelled recording: KITTI folder,
KITTI raw drive with tracklets, a simulator bag), else the labelled --bag itself, else synthetic objects.

Examples:

`lidarmt transforms`

`lidarmt transforms --sheet sheet.png`

`lidarmt transforms --sheet fog.png --transforms fog --levels light,moderate,heavy --bag ../shared/data/kitti`

`lidarmt transforms --sensors`

`lidarmt transforms --sheet vlp16.png --transforms beam-loss,fog,insert --sensor vlp16`
"""


def transforms(
    select_spec: Annotated[str, typer.Option("--transforms", help="all, a family (weather, sensor, motion, object, alignment) or comma-separated names.")] = "all",
    sheet: Annotated[Path | None, typer.Option("--sheet", help="Write a PNG picture sheet here.")] = None,
    bag: Annotated[str | None, typer.Option("--bag", help="Recording to draw a frame of (any lidarmt recording); default: a synthetic street sweep.")] = None,
    frame: Annotated[int, typer.Option("--frame", help="Frame of --bag to draw.")] = 0,
    levels: Annotated[str, typer.Option("--levels", help="Comma-separated levels to draw: light, moderate, heavy.")] = "moderate",
    library: Annotated[str | None, typer.Option("--library", help="Labelled recording to cut insert's objects from (default: --bag when it has boxes).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the transformations.", min=0)] = 0,
    extent: Annotated[float, typer.Option("--extent", help="Half-size of each bird's-eye panel, metres.", min=5.0, max=200.0)] = 40.0,
    columns: Annotated[int, typer.Option("--columns", help="Panels per row of the sheet.", min=1, max=12)] = 4,
    force: ForceOutputOption = False,
    sensor: SensorOption = None,
    sensors: Annotated[bool, typer.Option("--sensors", help="List the sensor profiles (beams, rate, ranges, intensity calibration, detection threshold) instead of the transformations.")] = False,
) -> None:
    from lidarmt._paths import check_writable
    from lidarmt.cli._common import console, wide_console
    from lidarmt.lidar.errors import LidarTransformError
    from lidarmt.lidar.sensors import get_sensor
    from lidarmt.lidar.transforms.base import LEVELS
    from lidarmt.lidar.transforms.registry import select

    if sheet is not None:
        check_writable(sheet, inputs=(bag, library), force=force, what="--sheet")
    profile = get_sensor(sensor)  # an unknown profile: one line listing the known ones
    if sensors:
        _print_sensors()
        return
    chosen = select(select_spec)
    if sheet is None:
        from rich.table import Table

        t = Table(title=f"LiDAR transformations ({len(chosen)})")
        for col in ("name", "family", "parameters", "light", "moderate", "heavy", "model"):
            t.add_column(col)
        for tr in chosen:
            params = "\n".join(p.describe() for p in tr.params) or "-"
            lv = [", ".join(f"{k}={v:g}" for k, v in tr.levels[name].items()) or "-" for name in LEVELS]
            t.add_row(tr.name, tr.family, params, *lv, getattr(tr, "summary", "") or tr.doc.split(". ")[0])
        wide_console().print(t)
        return
    wanted = [x.strip() for x in levels.split(",") if x.strip()]
    bad = [x for x in wanted if x not in LEVELS]
    if bad or not wanted:
        raise LidarTransformError(f"--levels {levels!r}: give one or more of {', '.join(LEVELS)}")
    src, context, where = _frame_and_context(bag, frame, library, seed, chosen, profile)
    from lidarmt.lidar.transforms.registry import select_for_frame

    chosen, left_out = select_for_frame(select_spec, src, streams=False)  # a misalignment needs a camera
    for line in left_out:
        console.print(line, soft_wrap=True, highlight=False)
    from lidarmt.lidar.transforms.sheet import transform_sheet

    path = transform_sheet(src, chosen, sheet, levels=wanted, seed=seed, context=context, extent=extent,
                           columns=columns, title=f"lidarmt LiDAR transformations on {where}, seed {seed}"
                           + ("" if profile.name == "hdl64" else f", sensor {profile.name}"))
    console.print(f"wrote {path}", soft_wrap=True)


def _print_sensors() -> None:
    from rich.table import Table

    from lidarmt.cli._common import wide_console
    from lidarmt.lidar.sensors import get_sensor, sensor_names

    t = Table(title="sensor profiles (--sensor; docs/sensors.md)")
    for col in ("name", "model", "beams", "elevations (deg)", "azimuth", "range (m)", "accuracy", "nm",
                "intensity of rho 1", "detection threshold"):
        t.add_column(col)
    for name in sensor_names():
        p = get_sensor(name)
        lo, hi = p.vertical_fov_deg
        t.add_row(p.name, p.model, str(p.rings), f"{lo:+.2f} .. {hi:+.2f}",
                  f"{p.azimuth_resolution_deg:.3f} deg at {p.rate_hz:g} Hz", f"{p.min_range_m:g}-{p.max_range_m:g}",
                  f"{p.range_accuracy_m * 100:g} cm", f"{p.wavelength_nm:g}", f"{p.intensity_scale:g}",
                  f"rho {p.floor_reflectance:g} at {p.floor_range_m:g} m ({p.noise_floor:.3g})")
    wide_console().print(t)


def _frame_and_context(bag, index, library, seed, chosen, profile):
    from lidarmt.lidar.transforms.base import TransformContext
    from lidarmt.lidar.transforms.objects import ObjectLibrary

    needs_library = any(t.name == "insert" for t in chosen)
    sensor = profile.name
    if bag is None:
        from lidarmt.lidar.synthetic import synthetic_sweep

        cast = None if sensor == "hdl64" else profile  # the default: exactly the sweep of before
        frame = synthetic_sweep(seed=seed, n_azimuth=profile.azimuth_steps, sensor=cast)
        where = f"a synthetic {profile.model} street sweep"
        lib = None
        if needs_library:  # objects as an HDL-64E scans them (a library of real sweeps is too)
            lib = (ObjectLibrary.from_recording(library) if library
                   else ObjectLibrary.from_frames([synthetic_sweep(seed=seed + 1, n_azimuth=2083)], min_points=20))
        return frame, TransformContext(library=lib, sensor=sensor), where
    from lidarmt.errors import ArgumentError
    from lidarmt.io import open_recording
    from lidarmt.lidar.specs import with_simulator_labels

    with open_recording(bag) as raw:
        rec = with_simulator_labels(raw, bag)  # a simulated bag: the simulator's truth beside it labels its frames
        if not 0 <= index < len(rec):
            raise ArgumentError(f"--frame {index}: {bag} holds frames 0..{len(rec) - 1}")
        at = rec.__getitem__
        frame = at(index)
        lib = None
        if needs_library and library is None:
            others = [i for i in range(0, len(rec), max(1, len(rec) // 12)) if i != index] or [index]
            lib = ObjectLibrary.from_frames((at(i) for i in others), description=str(bag))
            if not len(lib):
                raise ArgumentError(f"insert needs an object library and {bag} has no labelled object with enough "
                                    "points; pass --library LABELLED_RECORDING or leave insert out")
    if needs_library and library is not None:
        lib = ObjectLibrary.from_recording(library)
    roi = None
    if frame.labels is not None and frame.labels.point_semantic is not None:
        from lidarmt.lidar.roi.query import LabelRoi

        roi = LabelRoi().mask(frame)
    return frame, TransformContext(roi=roi, library=lib, sensor=sensor), f"frame {index} of {bag}"
