"""``lidarmt camera train-translator``, ``lidarmt camera translators`` and ``lidarmt camera translate``: learned
weather translation (DeepRoad's UNIT, TACTIC's MUNIT): train one on your own footage, list the installed ones,
turn a camera source into another weather."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import console, err_console

#: Numbers of a shipped translator's metrics file that the list shows when present (the card has them all).
KEY_METRICS = ("ssim_to_source", "procedural_ssim_to_source", "fid_like", "procedural_gap", "steering_gap_deg")


def register(app: typer.Typer) -> None:
    app.command("train-translator")(train_translator)
    app.command("translators")(translators)
    app.command("translate")(translate)


# -------------------------------------------------------------------------------------------- training

#: Command-line names of the network settings, as NetConfig calls them.
_NET_OPTIONS = {"dim": "--dim", "n_res": "--n-res", "n_downsample": "--n-downsample", "style_dim": "--style-dim",
                "mlp_dim": "--mlp-dim", "dis_dim": "--dis-dim", "dis_layers": "--dis-layers",
                "dis_scales": "--dis-scales"}


def _same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def train_translator(
    out: Annotated[Path, typer.Option("--out", help="Run folder: checkpoint.pt, translator.pt (the A→B "
                                      "translator, fp16), samples/iter_N.png, log.jsonl, config.json.")],
    arch: Annotated[str | None, typer.Option("--arch", help="unit (DeepRoad: unimodal, shared latent space) or "
                                             "munit (TACTIC: content + style, multimodal).")] = None,
    domain_a: Annotated[Path | None, typer.Option("--domain-a", help="Folder of source-domain images (e.g. clear "
                                                  "daytime frames); png, jpg or bmp, directly in the folder.")] = None,
    domain_b: Annotated[Path | None, typer.Option("--domain-b", help="Folder of target-domain images (e.g. night "
                                                  "or snow frames); unpaired with domain A.")] = None,
    size: Annotated[int | None, typer.Option(help="Square training crop side, a multiple of 2^n-downsample "
                                             "[default: 256, TACTIC's; lidarmt's shipped ones: 128].")] = None,
    load_size: Annotated[int | None, typer.Option(help="Short side images are resized to before cropping "
                                                  "[default: --size].")] = None,
    iterations: Annotated[int | None, typer.Option(help="Iterations (one image pair each) [default: 1,000,000, "
                                                   "TACTIC's].")] = None,
    dim: Annotated[int | None, typer.Option(help="Channels of the first conv [default: 64; shipped: 16].")] = None,
    n_res: Annotated[int | None, typer.Option(help="Residual blocks per encoder/decoder [default: 4; "
                                              "shipped: 2].")] = None,
    n_downsample: Annotated[int | None, typer.Option(help="Stride-2 down-samplings [default: 2].")] = None,
    style_dim: Annotated[int | None, typer.Option(help="MUNIT style vector length [default: 8].")] = None,
    mlp_dim: Annotated[int | None, typer.Option(help="MUNIT AdaIN MLP width [default: 256].")] = None,
    dis_dim: Annotated[int | None, typer.Option(help="Discriminator width [default: 64; shipped: 32].")] = None,
    dis_layers: Annotated[int | None, typer.Option(help="Discriminator stride-2 layers [default: 4].")] = None,
    dis_scales: Annotated[int | None, typer.Option(help="Discriminator scales [default: 3].")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE for a loss weight, the optimiser or "
                                                   "the data (lr, beta1, beta2, weight_decay, step_size, gan_w, "
                                                   "recon_x_w, recon_s_w, recon_c_w, recon_x_cyc_w, recon_kl_w, "
                                                   "recon_kl_cyc_w, log_every, max_images, holdout); "
                                                   "repeatable.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seeds the initial weights and the data order [default: 0].")
                    ] = None,
    threads: Annotated[int, typer.Option(help="torch threads (1 makes CPU runs repeatable).")] = 1,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N (auto: a CUDA GPU when there is one).")
                      ] = "auto",
    precision: Annotated[str | None, typer.Option(help="fp32, bf16 (CPU with AVX-512 bf16, or GPU) or fp16 "
                                                  "(CUDA only, with loss scaling) [default: fp32].")] = None,
    sample_every: Annotated[int | None, typer.Option(help="Write a sample sheet every N iterations "
                                                     "[default: 1000].")] = None,
    checkpoint_every: Annotated[int | None, typer.Option(help="Write checkpoint.pt and translator.pt every N "
                                                         "iterations [default: 1000].")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on with the run in --out from its checkpoint, "
                                         "with its own settings (only --iterations, the cadences, --threads, "
                                         "--device and moved domain folders may change).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Start again in an --out that holds a run (removes the "
                                        "run's own files only).")] = False,
) -> None:
    """Train a UNIT or MUNIT translator from two unpaired image folders (domain A → domain B).

    Published sizes (the defaults): TACTIC's MUNIT at 256x256, dim 64, style length 8, 2 down-samplings, 4
    residual blocks, a 3-scale LSGAN discriminator, 1,000,000 iterations (about 2.6 TFLOP an iteration:
    months on a 2-core CPU, days on a GPU: pass --device cuda). DeepRoad's UNIT used 240x320 frames
    (--size 240 --load-size 240 keeps the whole height). What a CPU affords: lidarmt's shipped translators
    use --size 128 --dim 16 --n-res 2 --dis-dim 32 --precision bf16 (see docs/translators.md for timings).

    Progress (iteration, it/s, ETA, losses) goes to stderr; a sample sheet (held-out images and their
    translations) every --sample-every iterations. Ctrl-C leaves the last checkpoint valid: go on with
    --resume. Use the result with `lidarmt camera translate --translator OUT/translator.pt`.

    Example: lidarmt camera train-translator --arch munit --domain-a clear/ --domain-b snow/ --size 128
    --dim 16 --n-res 2 --precision bf16 --iterations 40000 --out runs/munit-snow
    """
    check_writable(out, inputs=(domain_a, domain_b), folder=True, may_exist=True)
    import dataclasses

    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.translate.nets import NetConfig
    from lidarmt.camera.translate.train import (
        TrainConfig,
        TrainingInterrupted,
        apply_settings,
        check_out,
        read_run_config,
    )
    from lidarmt.camera.translate.train import train_translator as run_training
    from lidarmt.cli._common import parse_key_values, progress
    from lidarmt.lidar.perception.apollo.network import resolve_device

    settings = parse_key_values(set_, flag="--set", error=CameraArgumentError)
    dev = resolve_device(device, flag="--device", error=CameraArgumentError)
    check_out(out, force=force, resume=resume)
    net_given = {k: v for k, v in {"dim": dim, "n_res": n_res, "n_downsample": n_downsample, "style_dim": style_dim,
                                   "mlp_dim": mlp_dim, "dis_dim": dis_dim, "dis_layers": dis_layers,
                                   "dis_scales": dis_scales}.items() if v is not None}
    old = read_run_config(out) if resume else None
    if old is not None:
        # a resumed run keeps its settings: refuse an explicit option that disagrees rather than ignore it
        given: dict[str, tuple[str, Any, Any]] = {"arch": ("--arch", arch, old.net.arch),
                                                  "size": ("--size", size, old.size),
                                                  "load_size": ("--load-size", load_size, old.load_size or old.size),
                                                  "seed": ("--seed", seed, old.seed),
                                                  "precision": ("--precision", precision, old.precision)}
        for k, v in net_given.items():
            given[k] = (_NET_OPTIONS[k], v, getattr(old.net, k))
        for k, v in settings.items():
            if k != "log_every":
                given[k] = (f"--set {k}", v, getattr(old, k, None))
        for flag, new, was in given.values():
            if new is not None and new != was:
                raise CameraArgumentError(f"{flag} {new}: the run in {out} was started with {was}, and --resume "
                                          f"keeps a run's settings; drop {flag.split()[0]} or start again with "
                                          "--force")
        for flag, new, was in (("--domain-a", domain_a, old.domain_a), ("--domain-b", domain_b, old.domain_b)):
            if new is not None and not _same_path(new, was):
                err_console.print(f"lidarmt: note: {flag} {new} replaces the run's {was} (resume expects the "
                                  "same images)", highlight=False)
        cfg = dataclasses.replace(
            old, domain_a=str(domain_a or old.domain_a), domain_b=str(domain_b or old.domain_b), out=str(out),
            iterations=iterations or old.iterations, sample_every=sample_every or old.sample_every,
            checkpoint_every=checkpoint_every or old.checkpoint_every,
            log_every=int(settings.get("log_every", old.log_every)), threads=threads, device=dev)
    else:
        missing = [f for f, v in (("--arch", arch), ("--domain-a", domain_a), ("--domain-b", domain_b)) if v is None]
        if missing:
            what = "(the run in --out has no checkpoint to resume) " if resume else ""
            raise CameraArgumentError(f"{', '.join(missing)} missing {what}; a new run needs --arch unit|munit, "
                                      "--domain-a DIR and --domain-b DIR")
        try:
            net = NetConfig(arch=str(arch).strip().lower(), **net_given)
        except ValueError as err:
            raise CameraArgumentError(f"network settings: {err}") from err
        base = TrainConfig(domain_a=str(domain_a), domain_b=str(domain_b), out=str(out), net=net, seed=seed or 0,
                           threads=threads, device=dev, precision=precision or "fp32")
        over = {k: v for k, v in {"size": size, "load_size": load_size, "iterations": iterations,
                                  "sample_every": sample_every, "checkpoint_every": checkpoint_every}.items()
                if v is not None}
        cfg = apply_settings(dataclasses.replace(base, **over), settings)
    cfg.check()  # every user error before the progress bar starts
    losses = {"text": ""}
    with progress() as bar:
        task = bar.add_task("reading images", total=None, rate="")
        clock: dict[str, float] = {}

        def on_progress(done: int, total: int, text: str) -> None:
            if text.startswith("reading"):
                bar.update(task, completed=done, total=total, description=text)
            else:
                losses["text"] = text

        def on_tick(it: int, total: int) -> None:
            import time

            now = time.perf_counter()
            if not clock:  # the rate counts from the end of the first iteration (which includes set-up)
                clock.update(t0=now, it0=it)
            dt = now - clock["t0"]
            rate = f"{(it - clock['it0']) / dt:.2f} it/s" if dt > 0 else ""
            bar.update(task, completed=it, total=total, description=f"{cfg.net.arch} iteration",
                       rate=f"{rate} {losses['text']}".strip())

        try:
            summary = run_training(cfg, resume=resume, force=force, progress=on_progress, tick=on_tick)
        except TrainingInterrupted as stop:
            bar.stop()
            where = (f"{out / 'checkpoint.pt'} (iteration {stop.checkpoint_iteration}) is intact; go on with: "
                     f"lidarmt camera train-translator --out {out} --resume" if stop.checkpoint_iteration else
                     f"no checkpoint was written yet (every {cfg.checkpoint_every} iterations); start again with "
                     "--force")
            err_console.print(f"lidarmt: interrupted at iteration {stop.iteration}; {where}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(130) from None
    done = summary["iterations"] - summary["started_at"]
    per = summary["seconds_per_iteration"]
    last = " ".join(f"{k} {v:.3f}" for k, v in summary["losses"].items())
    console.print(f"[bold]{cfg.net.arch}[/bold] {out}: {done} iteration(s) (now {summary['iterations']}) in "
                  f"{summary['seconds'] / 60:.1f} min" + (f" ({per:.2f} s/iteration)" if per else "")
                  + (f"; losses {last}" if last else "") + f"; translator {summary['translator']}; samples "
                  f"{summary['samples']}", highlight=False, soft_wrap=True)


# -------------------------------------------------------------------------------------------- listing


def _key_numbers(d: dict[str, Any]) -> dict[str, float]:
    """The :data:`KEY_METRICS` present in a description (top level or under ``metrics``)."""
    found: dict[str, float] = {}
    nested = d.get("metrics") if isinstance(d.get("metrics"), dict) else {}
    for k in KEY_METRICS:
        v = d.get(k, nested.get(k))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            found[k] = float(v)
    return found


def translators(
    name: Annotated[str | None, typer.Argument(help="Show one translator: a shipped or plug-in name, or the "
                                               "path of a translator.pt (a shipped one prints its model card).")
                    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print as JSON (for scripts).")] = False,
) -> None:
    """List the weather translators: shipped ones (lidarmt/camera/translate/weights/) with their architecture,
    target weather, style length, parameters, training iterations and measured numbers; installed plug-ins
    (entry-point group lidarmt.translator).

    Use one in `lidarmt camera translate --translator NAME`, as a transformation in `lidarmt camera fuzz
    --transforms NAME` or as a search space in `lidarmt camera search --space NAME`.

    Examples: `lidarmt camera translators`, `lidarmt camera translators munit-night`,
    `lidarmt camera translators runs/munit-snow/translator.pt --json`
    """
    import json
    import sys

    from lidarmt.camera.translate import registry

    if name is not None:
        doc = registry.describe(name)
        card = doc.get("card")
        text = Path(card).read_text(encoding="utf-8") if card and Path(card).is_file() else ""
        if json_out:
            sys.stdout.write(json.dumps({**doc, "card_text": text}, indent=2, default=str) + "\n")
            return
        _print_detail(doc)
        if text:
            console.print()
            console.print(text, highlight=False, markup=False, soft_wrap=True)
        return
    entries = [registry.describe(n) for n in registry.available()]
    if json_out:
        sys.stdout.write(json.dumps({"translators": entries}, indent=2, default=str) + "\n")
        return
    if not entries:
        console.print("no shipped or plug-in translators installed; train one with 'lidarmt camera "
                      "train-translator' and use its translator.pt by path", highlight=False, soft_wrap=True)
        return
    _print_list(entries)


def _shown_number(key: str, value: float) -> str:
    """Three decimals; the Fréchet distances three significant digits (their scale is the feature trunk's)."""
    return f"{value:.3g}" if key in ("fid_like", "procedural_gap") else f"{value:.3f}"


def _print_list(entries: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from lidarmt.cli._common import wide_console

    shown = [k for k in KEY_METRICS if any(k in _key_numbers(e) for e in entries)]
    t = Table(title="weather translators", title_justify="left")
    for col in ("name", "kind", "arch", "weather", "style", "parameters", "iterations", *shown):
        t.add_column(col, no_wrap=col == "name", justify="left" if col in ("name", "kind", "arch", "weather")
                     else "right")
    for e in entries:
        nums = _key_numbers(e)
        params, its = e.get("parameters"), e.get("iterations")
        t.add_row(e["name"], str(e.get("kind", "")), str(e.get("arch") or ""), str(e.get("weather") or ""),
                  str(e.get("style_dim", "")), f"{params:,}" if isinstance(params, int) else "",
                  f"{its:,}" if isinstance(its, int) else "", *(_shown_number(k, nums[k]) if k in nums else "" for k in shown))
    out = wide_console()
    out.print(t)
    for e in entries:
        parts = [e.get("title", ""), f"card {e['card']}" if e.get("card") else "",
                 f"plug-in {e['entry_point']}" if e.get("entry_point") else ""]
        text = "; ".join(p for p in parts if p)
        if text:
            out.print(f"  [bold]{e['name']}[/bold]: {text}", highlight=False, soft_wrap=True)


def _print_detail(doc: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for key, value in doc.items():
        if isinstance(value, dict):
            if key != "net":  # training facts, costs, evaluations: the card and --json have them
                continue
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            continue
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        elif isinstance(value, float):
            value = f"{value:.4g}"
        t.add_row(key, str(value))
    console.print(t)


# ----------------------------------------------------------------------------------------- translating


def _parse_style(text: str, style_dim: int, name: str) -> Any:
    import numpy as np

    from lidarmt.camera.errors import CameraArgumentError

    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError as err:
        raise CameraArgumentError(f"--style {text!r}: expected {style_dim} comma-separated numbers") from err
    if len(values) != style_dim or not all(math.isfinite(v) for v in values):
        raise CameraArgumentError(f"--style {text!r}: {name} takes {style_dim} finite numbers (its style "
                                  f"length), got {len(values)}")
    return np.asarray(values, np.float32)


def _style_from(path: Path, tr: Any) -> Any:
    """The mean style code of the images at ``path`` (one image, or up to 64 of a source)."""
    import numpy as np

    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.sources.factory import open_images

    if not hasattr(tr, "style_of"):
        raise CameraArgumentError(f"--style-from: translator {tr.name} cannot read the style of an image (it has "
                                  "no style encoder); give --style instead")
    with open_images(path) as src:
        n = min(len(src), 64)
        imgs = [src[int(i)].image for i in np.linspace(0, len(src) - 1, n).round()]
    codes = np.concatenate([tr.style_of(im[None]) for im in imgs])
    return codes.mean(axis=0).astype(np.float32)


def _safe_name(frame_id: str, index: int) -> str:
    import re

    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(frame_id)).strip("._")
    return stem or f"{index:06d}"


def translate(
    translator: Annotated[str, typer.Option("--translator", help="A shipped or plug-in name (see 'lidarmt camera "
                                            "translators'), a translator.pt path, or package.module:callable.")],
    images: Annotated[Path, typer.Option("--images", help="Camera source: a folder of images, a Udacity folder, "
                                         "a ROS1/ROS2 bag or a Cyber record.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the translated frames (PNG, named after the "
                                      "frames) and translate.json (what was done, per frame).")],
    style: Annotated[str | None, typer.Option("--style", help="MUNIT: one style vector for every frame, "
                                              "comma-separated (e.g. 0,0,1.5,...; the prior is N(0, I)).")] = None,
    style_from: Annotated[Path | None, typer.Option("--style-from", help="MUNIT: use the style of this target-"
                                                    "weather image (or the mean style of a folder's images).")
                          ] = None,
    seed: Annotated[int, typer.Option(help="MUNIT without --style: the seed of the per-frame styles drawn from "
                                      "the prior.")] = 0,
    limit: Annotated[int | None, typer.Option(help="Translate only the first N frames.")] = None,
    topic: Annotated[str | None, typer.Option(help="Image topic of a bag or record.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Frames per network pass.")] = 8,
    force: Annotated[bool, typer.Option("--force", help="Write into an --out that already holds files "
                                        "(replacing same-named frames).")] = False,
) -> None:
    """Translate the frames of a camera source into another weather with a learned translator, as PNGs.

    The output has each frame's size; inside, frames are translated at the translator's resolution (its short
    side, e.g. 128 for the shipped ones), so fine detail is lost as in DeepRoad's and TACTIC's outputs.
    A MUNIT translator draws one style per frame from its prior (reproducible with --seed) unless --style or
    --style-from pins one; a UNIT translator has no style.

    Example: lidarmt camera translate --translator munit-snow --images ../shared/data/udacity --limit 20
    --out /tmp/snow
    """
    check_writable(out, inputs=(images, style_from, translator), folder=True, may_exist=True)  # even with --force
    import json
    import time

    import cv2
    import numpy as np

    from lidarmt._atomic import atomic_open, atomic_write_bytes
    from lidarmt.camera.errors import CameraArgumentError, CameraOutputError
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.translate.registry import get_translator
    from lidarmt.cli._common import progress
    from lidarmt.lidar.perception.apollo.network import resolve_device

    if style is not None and style_from is not None:
        raise CameraArgumentError("--style and --style-from: give one of them")
    if not 0 <= seed < 2**63:
        raise CameraArgumentError(f"--seed {seed}: expected an integer from 0 to 2^63-1")
    if limit is not None and limit < 1:
        raise CameraArgumentError(f"--limit {limit}: expected a positive number of frames")
    if batch_size < 1:
        raise CameraArgumentError(f"--batch-size {batch_size}: expected a positive integer")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise CameraOutputError(f"--out {out}: is not empty; pick a new folder or pass --force to write into it")
    dev = resolve_device(device, flag="--device", error=CameraArgumentError)
    tr = get_translator(translator, device=dev)
    if hasattr(tr, "batch_size"):
        tr.batch_size = batch_size
    sd = int(getattr(tr, "style_dim", 0) or 0)
    pinned = None
    if (style is not None or style_from is not None) and sd == 0:
        raise CameraArgumentError(f"{'--style' if style is not None else '--style-from'}: translator {tr.name} "
                                  f"({tr.arch}) is unimodal and has no style; drop the option")
    if style is not None:
        pinned = _parse_style(style, sd, tr.name)
    elif style_from is not None:
        pinned = _style_from(style_from, tr)
    src = open_images(images, topic=topic)
    with src:
        n = len(src) if limit is None else min(limit, len(src))
        prior = tr.random_styles(n, seed) if sd and pinned is None and hasattr(tr, "random_styles") else None
        records: list[dict[str, Any]] = []
        names: set[str] = set()
        t0 = time.perf_counter()
        batch: list[Any] = []

        def flush() -> None:
            if not batch:
                return
            frames = np.stack([f.image for f in batch])
            first = len(records)
            if pinned is not None:
                style_rows = np.broadcast_to(pinned, (len(batch), sd))
            elif prior is not None:
                style_rows = prior[first:first + len(batch)]
            else:
                style_rows = None
            result = tr.translate(frames, style=style_rows, seed=seed + first)
            result = np.asarray(result)
            if result.shape != frames.shape or result.dtype != np.uint8:
                raise CameraOutputError(f"translator {tr.name} returned {result.dtype} {result.shape} for "
                                        f"{frames.shape} frames; a translator must return the same shape, uint8")
            for k, (fr, img) in enumerate(zip(batch, result, strict=True)):
                name = _safe_name(fr.frame_id, fr.index)
                if name in names:
                    name = f"{fr.index:06d}_{name}"
                names.add(name)
                ok, buf = cv2.imencode(".png", np.ascontiguousarray(img[:, :, ::-1]))
                if not ok:
                    raise CameraOutputError(f"cannot encode frame {fr.index} as PNG")
                atomic_write_bytes(out / f"{name}.png", buf.tobytes())
                rec: dict[str, Any] = {"index": fr.index, "frame_id": fr.frame_id, "file": f"{name}.png"}
                if style_rows is not None:
                    rec["style"] = [round(float(v), 6) for v in style_rows[k]]
                records.append(rec)
            batch.clear()

        out.mkdir(parents=True, exist_ok=True)
        with progress() as bar:
            task = bar.add_task(f"translating ({tr.name})", total=n, rate="")
            for i in range(n):
                fr = src[i]
                if batch and fr.image.shape != batch[0].image.shape:
                    flush()
                batch.append(fr)
                if len(batch) >= batch_size:
                    flush()
                dt = time.perf_counter() - t0
                bar.update(task, completed=len(records), rate=f"{len(records) / dt:.1f} frames/s" if dt > 0 else "")
            flush()
            dt = time.perf_counter() - t0
            bar.update(task, completed=len(records), rate=f"{len(records) / dt:.1f} frames/s" if dt > 0 else "")
        seconds = time.perf_counter() - t0
    how = ("style " + ",".join(f"{v:g}" for v in pinned)) if pinned is not None else (
        f"styles from the prior, seed {seed}" if sd else "unimodal")
    doc = {"translator": tr.describe(), "spec": translator, "images": str(images), "frames": len(records),
           "seed": seed, "style": None if pinned is None else [float(v) for v in pinned],
           "style_from": str(style_from) if style_from is not None else None, "device": dev,
           "seconds": round(seconds, 2), "outputs": records}
    with atomic_open(out / "translate.json") as fh:
        json.dump(doc, fh, indent=2, default=str)
    console.print(f"translated {len(records)} frame(s) of {images} with {tr.name} ({tr.arch}, {how}) into {out} "
                  f"in {seconds:.1f} s ({len(records) / seconds if seconds > 0 else 0:.1f} frames/s)",
                  highlight=False, soft_wrap=True)
