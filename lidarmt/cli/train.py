"""``lidarmt train``: train Apollo's CNN-seg network on labelled frames (simulated, real KITTI raw sweeps with
their tracklets, or SemanticKITTI sequences)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._common import console, err_console


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    data: Annotated[list[str], typer.Option("--data", help="A folder of labelled .npz frames "
                                            "(`lidarmt simulate --dataset DIR`), a KITTI raw drive with its "
                                            "tracklet_labels.xml, or a SemanticKITTI sequence folder (velodyne/ "
                                            "and labels/: the whole sweep is labelled); PATH@A:B keeps frames "
                                            "A..B-1 (a drive's sweeps in time order). Repeat for several.")],
    out: Annotated[Path, typer.Option("--out", help="Run folder: last.pt (checkpoint), cnnseg<grid>.pt, log.jsonl.")] = Path("runs/train"),
    seed: Annotated[int, typer.Option(help="Seeds the initialisation and every sample drawn.")] = 0,
    steps: Annotated[int, typer.Option(help="Optimizer steps (the learning-rate schedule spans them).")] = 1500,
    grid: Annotated[int, typer.Option(help="Feature grid (640: Apollo 2.5/3.0; 512: 2.0).")] = 640,
    range_: Annotated[float, typer.Option("--range", help="Half-size of the grid, metres (60: Apollo 2.x/3.0; 70: 3.5+ velodyne16/64).")] = 60.0,
    in_channels: Annotated[int, typer.Option("--in-channels", help="Feature channels: 8 (Apollo 2.x/3.0), 6 (3.5+ velodyne16/64: no direction/distance), 4 (3.5+ velodyne128: no intensities either).")] = 8,
    crop: Annotated[int, typer.Option(help="Side of the random square crops of the grid, cells (multiple of 32).")] = 256,
    batch: Annotated[int, typer.Option(help="Crops per step.")] = 4,
    lr: Annotated[float, typer.Option(help="Peak AdamW learning rate.")] = 2e-3,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 1e-4,
    warmup: Annotated[int, typer.Option(help="Linear warm-up steps.")] = 100,
    threads: Annotated[int, typer.Option(help="torch intra-op threads (0: torch's default).")] = 2,
    pos_weight: Annotated[float, typer.Option(help="Objectness loss weight of an object cell vs a background cell.")] = 2.0,
    class_weights: Annotated[str, typer.Option(help="Per-class cell weights: unknown,smallmot,bigmot,nonmot,pedestrian.")] = "1.5,1,0.7,1.5,1.5",
    data_weights: Annotated[str | None, typer.Option(help="How often each --data source is sampled, e.g. 1,1 "
                                                     "(default: in proportion to its frames).")] = None,
    no_augment: Annotated[bool, typer.Option("--no-augment", help="Train without augmentation.")] = False,
    fp32: Annotated[bool, typer.Option("--fp32", help="No bf16 autocast, even where the CPU has AMX.")] = False,
    checkpoint_minutes: Annotated[float, typer.Option(help="Write last.pt and the weights this often.")] = 3.0,
    max_minutes: Annotated[float | None, typer.Option(help="Stop (with a checkpoint) after this much wall time.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from <out>/last.pt if it exists.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Discard the training run in --out (last.pt, "
                                        "cnnseg<grid>.pt, log.jsonl) and start over.")] = False,
    ship: Annotated[bool, typer.Option("--ship", help="Copy the final weights into the package "
                                       "(lidarmt/lidar/perception/apollo/weights/cnnseg<grid>.pt).")] = False,
) -> None:
    """Train Apollo's CNN-seg network (random crops, bf16 autocast on AMX CPUs, AdamW, cosine schedule).

    Deterministic given --seed up to the floating-point non-determinism of threaded CPU kernels. An --out folder
    that is not empty is refused unless --resume (continue its run) or --force (start over).

    Example: lidarmt train --data data/train --out runs/cnnseg640 --seed 0 --steps 1500 --ship

    Real sweeps: lidarmt train --data data/train --data ../kitti_raw/2011_09_26/2011_09_26_drive_0001_sync@0:86
    --data-weights 1,1 ... (points outside the tracklets' camera view carry no loss)

    SemanticKITTI: lidarmt train --data ../shared/data/semantickitti/sequences/03 --data sequences/04@0:2 ...
    (every point labelled: the whole sweep is in the losses)
    """
    import shutil

    from lidarmt._paths import check_writable

    check_writable(out, inputs=[d.partition("@")[0] for d in data], folder=True, may_exist=True)
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.perception.apollo.config import DEFAULT_WEIGHTS
    from lidarmt.lidar.perception.apollo.train import LossWeights, TrainConfig

    try:
        cw = tuple(float(v) for v in class_weights.split(","))
    except ValueError as err:
        raise ArgumentError(f"--class-weights must be 5 comma-separated numbers, got {class_weights!r}") from err
    if len(cw) != 5 or min(cw) < 0:
        raise ArgumentError(f"--class-weights must be 5 non-negative numbers, got {class_weights!r}")
    from lidarmt.lidar.perception.apollo.train import train as run_training

    dw = None
    if data_weights is not None:
        try:
            dw = tuple(float(v) for v in data_weights.split(","))
        except ValueError as err:
            raise ArgumentError(f"--data-weights must be comma-separated numbers, got {data_weights!r}") from err

    cfg = TrainConfig(
        data=tuple(str(p) for p in data), data_weights=dw, out=str(out), seed=seed, steps=steps, grid=grid, range=range_, in_channels=in_channels, crop=crop, batch=batch,
        lr=lr, weight_decay=weight_decay, warmup=warmup, augment=not no_augment, bf16=not fp32, threads=threads,
        checkpoint_minutes=checkpoint_minutes, max_minutes=max_minutes,
        loss=LossWeights(positive=pos_weight, class_cells=cw),  # type: ignore[arg-type]
    )
    summary = run_training(cfg, resume=resume, force=force, log=lambda m: err_console.print(m, highlight=False))
    weights = out / f"cnnseg{grid}.pt"
    losses = summary.get("final_losses_mean_last_100", {})
    console.print(f"[bold]trained[/bold] {summary['steps_done']} steps in {summary['wall_seconds']:.0f} s"
                  + (" (stopped early by --max-minutes)" if summary.get("stopped_early") else ""))
    if losses:
        console.print("mean losses of the last 100 steps: " + ", ".join(f"{k} {v:.4f}" for k, v in losses.items()))
    console.print(f"weights: {weights}")
    if ship:
        from lidarmt.lidar.perception.apollo.config import shipped_name

        dest = DEFAULT_WEIGHTS.get(grid) if in_channels == 8 else None
        if dest is None:
            dest = DEFAULT_WEIGHTS[640].with_name(shipped_name(grid, in_channels))
        from lidarmt._atomic import atomic_path

        with atomic_path(dest) as tmp:
            shutil.copyfile(weights, tmp)
        console.print(f"shipped: {dest}")
