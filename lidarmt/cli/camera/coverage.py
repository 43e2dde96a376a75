"""``lidarmt camera coverage``: DeepTest's coverage studies of one steering model (coverage per transformation and
parameter, baseline vs cumulative coverage, Jaccard distances between transformations, coverage vs steering)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import console


def register(app: typer.Typer) -> None:
    app.command("coverage")(coverage)


def coverage(
    model: Annotated[str, typer.Option("--model", "-m", help="Steering model: a zoo name, a Keras .h5 file or an "
                                       "installed plug-in.")],
    images: Annotated[Path, typer.Option("--images", "-i", help="Image source (Udacity folder, image folder, "
                                         "camera topic of a bag or record).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder for the reports (refused if it holds "
                                      "files, unless --force).")],
    transforms: Annotated[str, typer.Option("--transforms", help="all, simple, weather, mirror or names, "
                                            "comma-separated (see 'lidarmt camera transforms').")] = "simple",
    frames: Annotated[int | None, typer.Option("--frames", min=1, help="Seed frames, drawn as 'lidarmt camera "
                                               "fuzz' draws them with the same --seed (default 100, as DeepTest; "
                                               "all when the source has fewer).")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed: the same frames and transformed images as "
                                      "'lidarmt camera fuzz --seed'.")] = 0,
    profile: Annotated[str, typer.Option("--profile", help="Neuron profile for KMNC/NBC/SNAC: 'auto' (the "
                                         "model's own, when it has one), a .profile.npz path, or 'none'.")] = "auto",
    nc_threshold: Annotated[float, typer.Option("--nc-threshold", help="NC activation threshold on the "
                                                "layer-scaled values (DeepTest's paper: 0.2).")] = 0.2,
    kmnc_k: Annotated[int, typer.Option("--kmnc-k", help="KMNC sections per neuron.")] = 1000,
    tknc_k: Annotated[int, typer.Option("--tknc-k", help="TKNC: top neurons per layer.")] = 2,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Image topic of a recording.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Start over in an existing run folder (its journal and "
                                        "reports are replaced).")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the coverage run in --out from its journal "
                                         "(repeat its original options).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables: only the last "
                                        "line (the reports are written as usual).")] = False,
) -> None:
    """Measure how transformations move a model's neuron coverage (DeepTest §5, RQ1-RQ3).

    Each seed frame and each of its transformed images (every parameter of every transformation, made exactly as
    'lidarmt camera fuzz' makes them) goes through the model once with forward hooks on. Reports: coverage per
    transformation and parameter for NC, KMNC, NBC, SNAC and TKNC, with the per-image increase over the seed
    (Wilcoxon test); the seeds' own coverage vs cumulative coverage over the transformations (DeepTest's Table
    6); the median Jaccard distance between the neurons that pairs of transformations activate (Figure 4,
    jaccard.png); Spearman's correlation between an image's coverage and its steering angle (RQ1). Writes
    report.md, summary.json, table.txt, charts and junit.xml into --out.

    The images are judged as a campaign of the shared engine: each image's steering angle and covered units go
    to a journal in --out as they are measured, so a killed run continues with --resume (same options).

    Examples:

    `lidarmt camera coverage --model dave-orig --images ../shared/data/udacity --out runs/coverage-dave-orig`

    `lidarmt camera coverage --model dave2 --images ../shared/data/udacity --transforms simple,fog,rain --frames 50
    --out runs/cov-dave2`
    """
    check_writable(out, inputs=(images, model), folder=True, may_exist=True)
    import sys
    from contextlib import ExitStack

    from lidarmt import __version__
    from lidarmt.camera.campaign import ModelRef, transform_refs
    from lidarmt.camera.errors import CameraOutputError
    from lidarmt.camera.models.zoo import history_note, spec_history
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.registry import select
    from lidarmt.cli._common import err_console, progress, wide_console
    from lidarmt.coverage.camera import load_profile_for, profile_path_for
    from lidarmt.coverage.campaign import CoverageCampaignConfig
    from lidarmt.coverage.report import rich_tables, write_reports
    from lidarmt.coverage.study import analyse, seeds_for
    from lidarmt.engine.campaign import LOCK_NAME, RunLock, run_campaign

    if (out.exists() and (not out.is_dir() or any(p.name != LOCK_NAME for p in out.iterdir())) and not force
            and not resume):
        raise CameraOutputError(f"{out}: exists and is not empty; pass --resume to continue its run, --force to "
                                f"start over, or choose another --out")
    if profile == "none":
        prof_path = None
    elif profile == "auto":
        auto = profile_path_for(model)
        prof_path = str(auto) if auto is not None and auto.is_file() else None
    else:
        prof_path = str(profile)
    prof = load_profile_for(model, prof_path)  # a missing or bad profile fails here, before anything is built
    chosen_t = select(transforms)
    with open_images(images, topic=topic) as src:
        n = len(src)
        note = history_note(src, [spec_history(model)])
    if note:
        err_console.print(note, highlight=False, soft_wrap=True)
    chosen = seeds_for(n, None if frames is None or frames >= n else frames, seed)
    config = CoverageCampaignConfig(str(images), ModelRef(model), transform_refs(chosen_t), chosen, seed=seed,
                                    topic=topic, profile=prof_path, nc_threshold=nc_threshold, kmnc_k=kmnc_k,
                                    tknc_k=tknc_k)
    t0 = time.perf_counter()
    with RunLock(out) as lock, ExitStack() as stack:
        bars: list = []

        def start(total: int, done: int) -> None:  # the bar appears once the run folder and journal are ready
            if quiet:
                return
            bar = stack.enter_context(progress())
            bars[:] = [bar, bar.add_task("coverage", total=total, completed=done, rate="")]

        def advance(rec: object) -> None:
            if bars:
                bars[0].update(bars[1], advance=1)

        result = run_campaign(config, out, resume=resume, force=force, lock=lock, on_start=start, on_pair=advance,
                              header_extra={"command": "lidarmt " + " ".join(sys.argv[1:])})
        stack.close()
        forward_s = time.perf_counter() - t0
        tracker = config.evaluator(enforce_timeout=False).prime()
        summary = analyse(tracker, result.tally.study_data(tracker))
        prof_note = None if prof is None else f"{prof.meta.get('path')} ({prof.count} frames)"
        run = {"command": "lidarmt " + " ".join(sys.argv[1:]) if sys.argv[1:] else "", "images": str(images),
               "profile": prof_note, "seconds": round(time.perf_counter() - t0, 2),
               "forward_seconds": round(forward_s, 2), "resumed_from": result.resumed, "lidarmt": __version__}
        try:
            paths = write_reports(out, summary, run=run)
        except OSError as err:
            raise CameraOutputError(f"{out}: cannot write the reports ({err.strerror or err})") from err
    if not quiet:
        wide = wide_console()
        for t in rich_tables(summary):
            wide.print(t)
    from lidarmt.engine.report import reports_line

    console.print(f"{summary['images']} images in {run['seconds']:.1f} s", highlight=False)
    console.print(reports_line(paths), soft_wrap=True)

