"""``lidarmt camera bench``: the same transformed images through several steering models, compared."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._options import AddressOption, BackendOption, ForceBenchOption, MixedIsaOption, QuietOption


def register(app: typer.Typer) -> None:
    app.command(name="bench", help=BENCH_HELP)(bench)


BENCH_HELP = """Regression benchmark of steering models: the same images and transformations through each
model.

Each --model gets an ordinary camera campaign in its own folder under --out (journal, --resume), all with the
same images, transformations, seed and trials, so every model sees exactly the same transformed images. The
first --model is the baseline (or --baseline FOLDER: the baseline of an earlier camera bench, or a `lidarmt
camera fuzz` run of one model on the same images and transformations). The journals are paired per (image,
transformation, parameter, trial): with labels, DeepTest's Eq. 2 at --lambda (Eq. 3's filter at --epsilon),
and always DeepRoad's |Δθ| > --tolerance; per transformation and over all, both violation rates with Wilson
intervals and the exact McNemar test on the discordant pairs. With labels, RMSE on the seed images per model
and a sign test on the per-seed errors. Speed: median model time per image. A regression is a worse row whose
p-value, Holm-adjusted over the candidate's rows, is below --alpha.

Exit status: 0 when the bench ran; 1 with --fail-on-regression when a candidate regressed; 2 on bad input.

Examples:

`lidarmt camera bench --images ../shared/data/udacity --model dave-orig --model epoch --transforms simple --frames 50`

`lidarmt camera bench --images drive/ --baseline runs/camera-bench-v1 --model new.h5 --transforms all --fail-on-regression`
"""


def bench(
    images: Annotated[str, typer.Option("--images", help="Image source: Udacity folder, image folder, or a bag / Cyber record with a camera topic.")],
    model: Annotated[list[str], typer.Option("--model", help="A steering model (repeat; the first is the baseline): zoo name, Keras .h5 or .onnx path, package.module:callable.")] = [],  # noqa: B006
    model_option: Annotated[list[str], typer.Option("--model-option", help="[I:]KEY=VALUE for model I (1-based, in --model order, or its name; without I: every model that takes KEY), repeatable.")] = [],  # noqa: B006
    baseline: Annotated[Path | None, typer.Option("--baseline", help="Reuse the baseline of an earlier camera bench (or a one-model `lidarmt camera fuzz` run folder); every --model is then a candidate.")] = None,
    trust_code: Annotated[bool, typer.Option("--trust-code", help="Allow a --baseline folder to name code to import and run (a module:callable model in its journal); only for folders you trust.")] = False,
    transforms: Annotated[str, typer.Option("--transforms", help="all, simple, weather, mirror, or comma-separated names.")] = "all",
    frames: Annotated[int | None, typer.Option("--frames", help="Seed frames sampled at random without replacement (default: all).")] = None,
    lam: Annotated[float, typer.Option("--lambda", help="DeepTest Eq. 2's λ.")] = 5.0,
    epsilon: Annotated[float, typer.Option("--epsilon", help="DeepTest Eq. 3's ε (simple transformations).")] = 0.03,
    tolerance: Annotated[float, typer.Option("--tolerance", help="DeepRoad's ε in degrees.")] = 10.0,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed (the same transformed images for every model).")] = 0,
    trials: Annotated[int, typer.Option("--trials", help="Transformed images per frame and setting.")] = 1,
    topic: Annotated[str | None, typer.Option("--topic", help="Camera topic of a recording.")] = None,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Worker processes per model's campaign (models run one after the other).")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")] = 64,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one model call (a batch) may take (default automatic).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Where every model runs: auto (cuda when available), cpu, cuda or cuda:N; resolved once and passed to each model that takes it as device=... (a model's own --model-option device=... wins; docs/gpu.md).")] = None,
    backend: BackendOption = "local",
    address: AddressOption = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the regression tests.")] = 0.05,
    correction: Annotated[str, typer.Option("--correction", help="Multiple-testing correction over a candidate's rows: holm or none.")] = "holm",
    out: Annotated[Path | None, typer.Option("--out", help="Bench folder (default runs/camera-bench-<source name>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the bench in --out.")] = False,
    force: ForceBenchOption = False,
    mixed_isa: MixedIsaOption = False,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a candidate regressed (for CI gates).")] = False,
    quiet: QuietOption = False,
) -> None:
    check_writable(out, inputs=(images, baseline), folder=True, may_exist=True)
    from lidarmt.bench.errors import BenchArgumentError
    from lidarmt.bench.folder import (
        BenchPlan,
        Module,
        baseline_label,
        check_baseline,
        folder_names,
        reuse_baseline,
    )
    from lidarmt.camera.campaign import CameraCampaignConfig, transform_refs
    from lidarmt.camera.relations import Criteria
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.registry import select
    from lidarmt.cli.bench import check_stats_options
    from lidarmt.engine.campaign import RunLock, select_items

    check_stats_options(alpha, correction, BenchArgumentError)
    from lidarmt.engine.campaign import check_backend

    check_backend(backend, address)
    for name, value in (("--lambda", lam), ("--epsilon", epsilon), ("--tolerance", tolerance)):
        if not (value > 0 and math.isfinite(value)):
            raise BenchArgumentError(f"{name} {value}: give a positive number")
    names = [m.strip() for item in model for m in item.split(",") if m.strip()]
    if not names:
        raise BenchArgumentError("--model: give the steering models to compare (the first is the baseline), "
                                 "e.g. --model dave-orig --model epoch (see lidarmt camera models)")
    if len(names) < 2 and baseline is None:
        raise BenchArgumentError(f"--model {names[0]}: a bench compares models; give a second --model, or "
                                 "--baseline FOLDER with the baseline of an earlier camera bench")
    from lidarmt.camera.campaign import model_ref
    from lidarmt.camera.models.registry import option_keys
    from lidarmt.cli.bench import with_device
    from lidarmt.cli.camera.predict import model_options

    options = with_device(model_options(names, model_option), device, [option_keys(n) for n in names])
    chosen_t = select(transforms)
    with open_images(images, topic=topic) as src:
        chosen = select_items(len(src), frames, seed, what="images", source=images)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder("camera-bench-" + Path(images.rstrip("/")).name.split(".")[0], images, baseline)
    # translators run where the models do (as camera fuzz --device)
    on = None if device is None else next((o["device"] for o in options if "device" in o), None)
    configs = [CameraCampaignConfig(images, (model_ref(nm, o),), transform_refs(chosen_t, device=on), chosen, seed=seed,
                                    trials=trials, topic=topic, timeout=timeout, batch_size=batch_size)
               for nm, o in zip(names, options, strict=True)]
    modules: list[Module] = []
    reused_from = None
    if baseline is not None:
        base, reused_from = reuse_baseline(baseline, "camera", trust_code=trust_code)
        if len(base.config.models) != 1:
            raise BenchArgumentError(f"--baseline {baseline}: its campaign judged {len(base.config.models)} "
                                     "models at once; a baseline is a one-model campaign (a camera bench's "
                                     "module folder)")
        modules.append(base)
    labels = [m.name for m in modules] + [baseline_label(c, "camera") for c in configs]
    names_f = folder_names(labels)
    modules += [Module(nm, c) for nm, c in zip(names_f[len(modules):], configs, strict=True)]
    if baseline is not None:
        check_baseline(modules, "camera", baseline)
    plan = BenchPlan(out, "camera", modules)
    _check_models(plan)
    criteria = Criteria(lam, epsilon, tolerance)
    with RunLock(out) as lock:  # held at once when the folder exists; else taken once prepare() made it
        _run(plan, criteria, lock=lock, reused_from=reused_from, workers=workers, resume=resume, force=force,
             alpha=alpha, correction=correction, quiet=quiet, fail_on_regression=fail_on_regression,
             backend=backend, address=address, mixed_isa=mixed_isa)


def _check_models(plan) -> None:
    """Build every model that still has pairs to judge once, before any campaign starts (a typo in the last
    --model is reported at once)."""
    from lidarmt.camera.campaign import build_model
    from lidarmt.engine.journal import JOURNAL_NAME

    for m in plan.modules:
        if m.origin is None and not (plan.out / m.name / JOURNAL_NAME).is_file():  # a link: prepare refuses it
            build_model(m.config.models[0], trust_code=True)


def _run(plan, criteria, *, lock, reused_from, workers: int, resume: bool, force: bool, alpha: float,
         correction: str, quiet: bool, fail_on_regression: bool, backend: str = "local",
         address: str | None = None, mixed_isa: bool = False) -> None:
    from lidarmt.bench.camera import summarize, violating_count
    from lidarmt.cli.bench import report, run_plan

    run = run_plan(plan, lock=lock, reused_from=reused_from, workers=workers, resume=resume, force=force,
                   quiet=quiet, backend=backend, address=address, mixed_isa=mixed_isa,
                   count=lambda t: violating_count(t, criteria))
    summary = summarize(plan, criteria=criteria, alpha=alpha, correction=correction)
    report(plan.out, summary, run)
    if fail_on_regression and summary["verdict"] == "regression":
        raise typer.Exit(1)
