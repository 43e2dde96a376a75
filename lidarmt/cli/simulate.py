"""``lidarmt simulate``: synthetic HDL-64E recordings with an HD map, or labelled training frames."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import console, progress
from lidarmt.cli._options import SensorOption


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    seed: Annotated[int, typer.Option("--seed", "-s", min=0, help="Seed of the town and the drive (same seed, same "
                                      "output, byte for byte).")] = 7,
    frames: Annotated[int, typer.Option("--frames", "-n", min=1, max=100_000, help="Number of 10 Hz sweeps.")] = 30,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="ROS1 bag to write (Apollo topics: "
                                             "velodyne64 PointCloud2, /tf, /tf_static, front camera, steering); "
                                             "ground truth goes beside it as <name>.labels.npz.")] = None,
    map_out: Annotated[Path | None, typer.Option("--map-out", "-m", help="Folder for the town's HD map "
                                                 "(base_map.bin, base_map.txt, base_map.geojson).")] = None,
    dataset: Annotated[Path | None, typer.Option("--dataset", "-d", help="Write labelled frames for training "
                                                 "instead of a bag: one lidarmt .npz per frame plus dataset.json, "
                                                 "from many short drives through several towns.")] = None,
    camera: Annotated[bool, typer.Option("--camera/--no-camera", help="Record the front camera and the steering "
                                         "angle in the bag.")] = True,
    density: Annotated[float, typer.Option("--density", min=0.1, max=3.0, help="Amount of traffic, parked cars "
                                           "and pedestrians (1.0: a busy street).")] = 1.0,
    frames_per_drive: Annotated[int, typer.Option("--frames-per-drive", min=1, help="Dataset mode: frames kept "
                                                  "from each drive before a new drive starts.")] = 20,
    drives_per_town: Annotated[int, typer.Option("--drives-per-town", min=1, help="Dataset mode: drives through "
                                                 "each town before a new town is built.")] = 3,
    stride: Annotated[int, typer.Option("--stride", min=1, help="Dataset mode: keep every n-th 10 Hz sweep of a "
                                        "drive.")] = 2,
    overwrite: Annotated[bool, typer.Option("--overwrite", "--force", help="Replace existing outputs.")] = False,
    sensor: SensorOption = None,
) -> None:
    """Simulate a Velodyne HDL-64E (or another sensor profile: --sensor) driving through a procedural town.

    Bag mode (--out, optionally --map-out) writes an Apollo-style recording and its HD map.
    Dataset mode (--dataset) writes labelled frames for training the CNN.

    Examples:

      lidarmt simulate --seed 7 --frames 30 --out bags/demo.bag --map-out hdmaps/demo

      lidarmt simulate --dataset data/train --frames 500 --seed 1

      lidarmt simulate --seed 7 --frames 5 --out bags/vlp16.bag --sensor vlp16
    """
    from lidarmt.lidar.sensors import get_sensor
    from lidarmt.lidar.sim.errors import SimArgumentError

    sensor = get_sensor(sensor).name  # an unknown profile: one line listing the known ones

    if (out is None) == (dataset is None):
        raise SimArgumentError("give either --out BAG (a recording) or --dataset FOLDER (training frames)")
    if dataset is not None and map_out is not None:
        raise SimArgumentError(
            "--map-out goes with --out; a dataset spans several towns and writes their maps under FOLDER/maps/"
        )
    if out is not None:  # before minutes of simulation: the recording's own rule (--overwrite) after
        check_writable(out, inputs=(map_out,), force=overwrite)
    for folder, flag in ((map_out, "--map-out"), (dataset, "--dataset")):
        if folder is not None:
            check_writable(folder, inputs=(out,), folder=True, may_exist=True, what=flag)
    with progress() as bar:
        task = bar.add_task("simulating", total=frames, rate="")

        def on_frame(done: int, total: int) -> None:
            bar.update(task, completed=done)

        if dataset is not None:
            from lidarmt.lidar.sim.dataset import generate_dataset

            s = generate_dataset(dataset, frames=frames, seed=seed, overwrite=overwrite, density=density,
                                 frames_per_drive=frames_per_drive, drives_per_town=drives_per_town, stride=stride,
                                 on_frame=on_frame, sensor=sensor)
            msg = (f"wrote {s.frames} frames from {s.drives} drives in {s.towns} towns to {s.out_dir} "
                   f"in {s.seconds:.1f} s")
            removed = s.removed
        else:
            from lidarmt.lidar.sim.record import simulate_recording

            assert out is not None
            r = simulate_recording(out, map_out, seed=seed, frames=frames, overwrite=overwrite, camera=camera,
                                   density=density, on_frame=on_frame, sensor=sensor)
            msg = (f"wrote {r.bag} ({r.frames} sweeps, {r.points / r.frames:.0f} points each), labels {r.labels}"
                   + (f", map {r.map_dir}" if r.map_dir else "") + f" in {r.seconds:.1f} s")
            removed = r.removed
    if removed:
        from lidarmt.cli._common import err_console

        err_console.print(f"note: removed {len(removed)} stale temporary file(s) an interrupted run had left: "
                          + ", ".join(str(p) for p in removed), highlight=False, soft_wrap=True)
    console.print(msg)
