"""``lidarmt camera train``: train one of lidarmt's own steering models on a labelled image source."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import console, err_console


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    arch: Annotated[str, typer.Option("--arch", help="Architecture: dave-orig, dave-norminit, dave-dropout, epoch, "
                                      "chauffeur, dave2, rambo.")],
    data: Annotated[Path, typer.Option("--data", help="Labelled image source (e.g. a Udacity folder: center/*.jpg "
                                       "+ steering.csv frame_id,steering_angle in radians, time order).")],
    out: Annotated[Path | None, typer.Option("--out", help="Run folder: checkpoint.pt, ARCH.pt (best weights, "
                                             "fp16), ARCH.json, ARCH.md (model card), log.jsonl.")] = None,
    epochs: Annotated[int | None, typer.Option(help="Epochs (default: the architecture's shipped recipe).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Mini-batch size (default: the recipe's).")] = None,
    lr: Annotated[float | None, typer.Option(help="Adam learning rate (default: the recipe's).")] = None,
    lstm_epochs: Annotated[int | None, typer.Option(help="Chauffeur only: epochs of the LSTM stage.")] = None,
    seed: Annotated[int, typer.Option(help="Seeds initialisation, batch order, flips and dropout.")] = 0,
    val_fraction: Annotated[float, typer.Option(help="The last this fraction of the drive validates.")] = 0.2,
    no_flip: Annotated[bool, typer.Option("--no-flip", help="No horizontal-flip augmentation.")] = False,
    augment: Annotated[str | None, typer.Option("--augment", help="Augmentations, comma-separated: flip, shift, "
                                                "brightness, shadow, or 'none' (default: the recipe's).")] = None,
    shift_max: Annotated[float | None, typer.Option("--shift-max", help="Largest horizontal shift, a fraction "
                                                    "of the width (default: the recipe's).")] = None,
    shift_gain: Annotated[float | None, typer.Option("--shift-gain", help="Angle correction in radians per image "
                                                     "width of shift (default: the recipe's).")] = None,
    lr_schedule: Annotated[str | None, typer.Option("--lr-schedule", help="constant, or cosine (down to a tenth "
                                                    "of --lr over the epochs; default: the recipe's).")] = None,
    weight_decay: Annotated[float | None, typer.Option("--weight-decay", help="L2 penalty: this x w added to "
                                                       "every weight's gradient (default: the recipe's; 0: none)."
                                                       )] = None,
    validate: Annotated[Path | None, typer.Option("--validate", help="Train nothing: measure this weights file "
                                                  "(e.g. a shipped one) on the --data's validation split "
                                                  "against both baselines.")] = None,
    threads: Annotated[int, typer.Option(help="torch threads (1 is bit-deterministic).")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --out.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from <out>/checkpoint.pt.")] = False,
    ship: Annotated[bool, typer.Option("--ship", help="Copy the weights, card and metrics into the package "
                                       "(lidarmt/camera/models/weights/).")] = False,
) -> None:
    """Train a steering model: time-ordered split (the last --val-fraction validates), Adam on MSE in radians,
    the recipe's augmentations (flip, shift, brightness, shadow; see --augment), the epoch with the lowest
    validation MSE kept. With --validate WEIGHTS, only measure a weights file on the validation split.

    Deterministic with a fixed --seed and one thread. The model card states the data, split, recipe, the exact
    command and the validation RMSE against the always-zero and always-mean baselines.

    Example: lidarmt camera train --arch dave2 --data ../shared/data/udacity --out runs/dave2 --ship
    """
    check_writable(out, inputs=(data,), folder=True, may_exist=True)
    import shutil

    from lidarmt._atomic import atomic_path
    from lidarmt.camera.errors import CameraArgumentError, CameraOutputError
    from lidarmt.camera.models.archs import get_arch
    from lidarmt.camera.models.train import TrainConfig, check_out, load_labelled
    from lidarmt.camera.models.train import train as run_training
    from lidarmt.camera.models.zoo import WEIGHTS_DIR
    from lidarmt.cli._common import progress
    from lidarmt.errors import OutputError

    if validate is not None:
        _validate(arch, data, validate, val_fraction=val_fraction, threads=threads)
        return
    if out is None:
        raise CameraArgumentError("--out is required (the run folder), unless --validate is given")
    cfg = TrainConfig(arch=arch, data=str(data), out=str(out), epochs=epochs, batch_size=batch_size, lr=lr,
                      lstm_epochs=lstm_epochs, seed=seed, val_fraction=val_fraction, flip=not no_flip,
                      threads=threads, augment=augment, shift_max=shift_max, shift_gain=shift_gain,
                      lr_schedule=lr_schedule, weight_decay=weight_decay)
    cfg.check()  # every user error is reported before the progress bar starts
    get_arch(arch)
    check_out(out, force=force, resume=resume)
    frames = load_labelled(data)
    with progress() as bar:
        task = bar.add_task("training", total=None, rate="")

        def on_step(done: int, total: int, text: str) -> None:
            bar.update(task, completed=done, total=total, description=text)

        def log(msg: str) -> None:
            bar.console.print(msg, highlight=False)

        try:
            metrics = run_training(cfg, force=force, resume=resume, frames=frames, log=log, progress=on_step)
        except OutputError as err:  # a full disk: the run folder now exists, so name the command that continues
            if "no space left" not in str(err).lower():
                raise
            raise CameraOutputError(f"{str(err).split('; free some space')[0]}; free some space and run the same "
                                    f"command with --resume (it continues from {out / 'checkpoint.pt'}, or "
                                    "starts again when there is none)") from err
    console.print(f"[bold]{metrics['arch']}[/bold]: validation RMSE {metrics['val_rmse_deg']:.2f}° "
                  f"(always zero {metrics['zero_rmse_deg']:.2f}°, always the mean {metrics['mean_rmse_deg']:.2f}°) "
                  f"in {metrics['train_seconds'] / 60:.1f} min; weights {out / (metrics['arch'] + '.pt')}")
    if ship:
        for ext in (".pt", ".md", ".json"):
            src = out / f"{metrics['arch']}{ext}"
            with atomic_path(WEIGHTS_DIR / src.name) as tmp:
                shutil.copyfile(src, tmp)
        err_console.print(f"shipped: {WEIGHTS_DIR}/{metrics['arch']}.{{pt,md,json}}")


def _validate(arch: str, data: Path, weights: Path, *, val_fraction: float, threads: int) -> None:
    """``--validate``: the weights' validation MSE against both baselines (what the model cards report)."""
    import torch

    from lidarmt.camera.models.train import load_labelled, validation_metrics
    from lidarmt.camera.models.zoo import model_from_file

    torch.set_num_threads(threads)
    model = model_from_file(weights, name=arch)
    frames = load_labelled(data)
    m = validation_metrics(model, frames, val_fraction=val_fraction)
    better = min(m["zero_mse"], m["mean_mse"])
    console.print(f"{arch} ({weights}): {m['val_frames']} validation frames (the last {val_fraction:.0%} of {data})",
                  highlight=False)
    console.print(f"  this model           MSE {m['val_mse']:.5f} rad^2  RMSE {m['val_rmse_deg']:.2f} deg", highlight=False)
    console.print(f"  always zero          MSE {m['zero_mse']:.5f} rad^2  RMSE {m['zero_rmse_deg']:.2f} deg",
                  highlight=False)
    console.print(f"  always training mean MSE {m['mean_mse']:.5f} rad^2  RMSE {m['mean_rmse_deg']:.2f} deg",
                  highlight=False)
    console.print(f"  MSE / better baseline's {m['val_mse'] / better:.3f}; correlation with the labels "
                  f"{m['pred_label_correlation']:+.3f}", highlight=False)
