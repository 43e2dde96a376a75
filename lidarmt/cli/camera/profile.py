"""``lidarmt camera profile``: a steering model's neuron profile (per-neuron training min, max, mean, std), the
bounds KMNC, NBC and SNAC measure against, written once as an ``.npz`` beside the model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import console


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def profile(
    model: Annotated[str, typer.Option("--model", "-m", help="Steering model: a zoo name (see 'lidarmt camera "
                                       "models'), a Keras .h5 file, or an installed plug-in.")],
    images: Annotated[Path, typer.Option("--images", "-i", help="Training image source (Udacity folder, image "
                                         "folder, camera topic of a bag or record).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Profile file to write (default: beside the "
                                             "model: lidarmt/camera/models/weights/<name>.profile.npz for zoo "
                                             "models, <file>.profile.npz for a Keras file).")] = None,
    split: Annotated[str, typer.Option("--split", help="'train': the first 80 % of the frames (the training "
                                       "split of 'lidarmt camera train'); 'all': every frame.")] = "train",
    frames: Annotated[int | None, typer.Option("--frames", min=1, help="Use at most this many frames of the "
                                               "split, evenly spaced.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Image topic of a recording.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Frames per forward pass.")] = 64,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing profile file.")] = False,
) -> None:
    """Compute a model's neuron profile over training frames and store it as plain arrays (.npz, no pickle).

    Every counted neuron (conv channels as spatial means, dense features; the layers lidarmt.coverage counts by
    default) gets its minimum, maximum, mean and standard deviation over the frames, in one forward pass per
    batch. 'lidarmt camera coverage' and the searches read it to compute KMNC, NBC and SNAC; NC and TKNC need
    none. The shipped models have theirs, computed on the Udacity training split.

    Examples:

    `lidarmt camera profile --model dave-orig --images ../shared/data/udacity`

    `lidarmt camera profile --model model.h5 --images drive/ --split all --out model.profile.npz`
    """
    import numpy as np

    from lidarmt import __version__
    from lidarmt.camera.errors import CameraArgumentError, CameraOutputError
    from lidarmt.camera.models.registry import get_model
    from lidarmt.camera.sources import open_images
    from lidarmt.cli._common import progress
    from lidarmt.coverage.camera import build_profile, profile_path_for, training_indices

    if split not in ("train", "all"):
        raise CameraArgumentError(f"--split {split!r}: use 'train' or 'all'")
    target = out if out is not None else profile_path_for(model)
    if target is None:
        raise CameraArgumentError(f"--model {model}: no default profile location for a plug-in model; give --out")
    check_writable(target, inputs=(images, model), force=force, error=CameraOutputError)
    m = get_model(model)
    with open_images(images, topic=topic) as src:
        idx = training_indices(len(src)) if split == "train" else np.arange(len(src))
        if frames is not None and frames < len(idx):
            idx = idx[np.linspace(0, len(idx) - 1, frames).round().astype(int)]
        t0 = time.perf_counter()
        with progress() as bar:
            task = bar.add_task("profile", total=len(idx), rate="")
            prof = build_profile(m, src, idx, batch=batch_size, progress=lambda k: bar.update(task, advance=k),
                                 meta={"images": str(images), "split": split, "frame_first": int(idx[0]),
                                       "frame_last": int(idx[-1]), "source_frames": len(src),
                                       "lidarmt": __version__})
        seconds = time.perf_counter() - t0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        prof.save(target)
    except OSError as err:
        raise CameraOutputError(f"{target}: cannot write the profile ({err.strerror or err})") from err
    dead = int(np.count_nonzero(prof.high <= prof.low))
    console.print(f"{m.name}: {prof.size} neurons in {len(prof.layers)} layers profiled over {prof.count} frames "
                  f"({split} split) in {seconds:.1f} s; {dead} constant neuron(s)")
    console.print(f"wrote {target}")
