"""``lidarmt bench``: the same MR1 follow-ups through two or more perception modules, compared pairwise."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._common import command_line
from lidarmt.cli._options import (
    AddressOption,
    BackendOption,
    ForceBenchOption,
    MixedIsaOption,
    QuietOption,
    RadiusOption,
    SensorOption,
    TrialsOption,
)


def register(app: typer.Typer) -> None:
    app.command(name="bench", help=BENCH_HELP)(bench)


BENCH_HELP = """Regression benchmark: the same frames and injected points through several perception modules.

Each --sut gets an ordinary MR1 campaign in its own folder under --out (journal, --resume), all with the same
frames, seed, n, trials and region, so every module judges exactly the same follow-ups. The first --sut is the
baseline (or --baseline FOLDER: the baseline module of an earlier bench, or a `lidarmt fuzz` run folder, run
on the same frames, seed and injection). The journals are then paired key by key: per relation (|O| > |O′|, O
⊄ O′, per class, crash/timeout) and n, both violation rates with Wilson intervals and the exact McNemar test
on the discordant pairs (effect: difference in proportions, odds ratio c/b). Where the frames carry ground
truth (a simulated bag's .labels.npz, KITTI), precision/recall per class on the source frames and a sign test
on recall. Speed: median perception call from the journals. A regression is a worse row whose p-value,
Holm-adjusted over the candidate's rows, is below --alpha.

--out gets bench.json, summary.json, report.md, table.txt, junit.xml (a regression is a failure),
relations.png and class-CLASS.png (per class: car, pedestrian, cyclist, unknown).

Exit status: 0 when the bench ran; 1 with --fail-on-regression when a candidate regressed; 2 on bad input.

Examples:

`lidarmt bench --bag bags/demo.bag --map hdmaps/demo --sut apollo --sut apollo --sut-option 1:mode=exact --sut-option 2:mode=fast`

`lidarmt bench --bag drive.bag --map maps/town --sut apollo --sut apollo-512 --sut-option 2:weights=new.pt --n 10,100,1000 --frames 200 --out runs/bench-v2`

`lidarmt bench --bag drive.bag --map maps/town --baseline runs/bench-v1 --sut mypkg.perception:make --frames 200 --out runs/bench-v3 --fail-on-regression`
"""


_INDEXED = re.compile(r"^(\d+):(.*)$", re.S)


def parse_module_options(items: list[str], count: int, *, flag: str,
                         error: type[Exception]) -> list[dict[str, Any]]:
    """``[I:]KEY=VALUE`` items -> options per module (I is 1-based; without I, for every module). VALUE is
    JSON when it parses as JSON."""
    out: list[dict[str, Any]] = [{} for _ in range(count)]
    for item in items:
        m = _INDEXED.match(item)
        targets = range(count)
        body = item
        if m:
            i = int(m.group(1))
            if not 1 <= i <= count:
                raise error(f"{flag} {item!r}: module {i} does not exist; number the modules 1..{count} in "
                            "the order given")
            targets, body = range(i - 1, i), m.group(2)
        key, sep, value = body.partition("=")
        if not sep or not key:
            raise error(f"{flag} {item!r}: use [I:]KEY=VALUE (I: the module's number, 1-based; VALUE is JSON "
                        "when it parses as JSON)")
        from lidarmt.cli._common import json_value

        val = json_value(value)
        for t in targets:
            out[t][key] = val
    return out


def check_stats_options(alpha: float, correction: str, error: type[Exception]) -> None:
    from lidarmt.bench.stats import CORRECTIONS

    if not 0 < alpha < 1:
        raise error(f"--alpha {alpha}: give a significance level between 0 and 1 (e.g. 0.05)")
    if correction not in CORRECTIONS:
        raise error(f"--correction {correction!r}: use {' or '.join(CORRECTIONS)}")


def bench(
    bag: Annotated[str, typer.Option("--bag", help="Recording: ROS1/ROS2 bag, Cyber record, PCD/KITTI/.npz folder.")],
    map: Annotated[str, typer.Option("--map", help="HD map (Apollo .bin/.txt/.xml, GeoJSON) or its folder.")],
    sut: Annotated[list[str], typer.Option("--sut", help="A perception module (repeat: the first is the baseline): a registered name, package.module:callable, or exec:COMMAND (an external program, docs/exec-sut.md).")] = [],  # noqa: B006
    sut_option: Annotated[list[str], typer.Option("--sut-option", help="[I:]KEY=VALUE for module I (1-based, in --sut order; without I: every module), repeatable.")] = [],  # noqa: B006
    baseline: Annotated[Path | None, typer.Option("--baseline", help="Reuse the baseline of an earlier bench folder (or a `lidarmt fuzz` run folder) instead of running one; every --sut is then a candidate.")] = None,
    trust_code: Annotated[bool, typer.Option("--trust-code", help="Allow a --baseline folder to name code to import and run (a module:callable or exec: SUT in its journal); only for folders you trust.")] = False,
    n: Annotated[str, typer.Option("--n", help="Points to add, comma-separated.")] = "10,100,1000",
    frames: Annotated[int | None, typer.Option("--frames", help="Source frames sampled at random without replacement (default: all).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed (the same follow-ups for every module).")] = 0,
    trials: TrialsOption = 1,
    region: Annotated[str, typer.Option("--region", help="disk (sensor range) or grid (the CNN's ±60 m square).")] = "disk",
    radius: RadiusOption = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Point-cloud topic.")] = None,
    roi_range: Annotated[float, typer.Option("--roi-range", help="ROI bitmap half-size in metres.")] = 70.0,
    map_frame: Annotated[str, typer.Option("--map-frame", help="auto, world or sensor (as for lidarmt fuzz).")] = "auto",
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one perception call may take (default automatic).")] = None,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Worker processes per module's campaign (modules run one after the other).")] = 1,
    device: Annotated[str | None, typer.Option("--device", help="Where every module's network runs: auto (cuda when available), cpu, cuda or cuda:N; resolved once and passed to each module as device=... (a module's own --sut-option device=... wins; docs/gpu.md).")] = None,
    backend: BackendOption = "local",
    address: AddressOption = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the regression tests.")] = 0.05,
    correction: Annotated[str, typer.Option("--correction", help="Multiple-testing correction over a candidate's rows: holm or none.")] = "holm",
    min_points: Annotated[int, typer.Option("--min-points", help="Ground truth with fewer ROI points than this is ignored (precision/recall).")] = 5,
    out: Annotated[Path | None, typer.Option("--out", help="Bench folder (default runs/bench-<recording name>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the bench in --out (every module's journal).")] = False,
    force: ForceBenchOption = False,
    mixed_isa: MixedIsaOption = False,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a candidate regressed (for CI gates).")] = False,
    quiet: QuietOption = False,
    transforms: Annotated[str | None, typer.Option("--transforms", help="Compare the modules on LiDAR transformations instead of MR1 (as lidarmt fuzz --transforms): McNemar per transformation on each one's relation; --map labels for the label ROI.")] = None,
    levels: Annotated[str | None, typer.Option("--levels", help="--transforms: intensities (default light,moderate,heavy).")] = None,
    relation: Annotated[str | None, typer.Option("--relation", help="--transforms: auto (each transformation's own) or robustness, insertion, removal, equivariance.")] = None,
    library: Annotated[str | None, typer.Option("--library", help="--transforms insert: a labelled recording to cut objects from (default: --bag).")] = None,
    safety_distance: Annotated[float, typer.Option("--safety-distance", help="--transforms: D in metres (as lidarmt fuzz).")] = 30.0,
    min_kept: Annotated[int, typer.Option("--min-kept", help="--transforms: k points kept (as lidarmt fuzz).")] = 10,
    tolerance: Annotated[float, typer.Option("--tolerance", help="--transforms: match tolerance τ (as lidarmt fuzz).")] = 0.5,
    sensor: SensorOption = None,
) -> None:
    check_writable(out, inputs=(bag, map, baseline, library), folder=True, may_exist=True)
    from lidarmt.bench.errors import BenchArgumentError
    from lidarmt.bench.folder import (
        BenchPlan,
        Module,
        check_baseline,
        folder_names,
        module_label,
        reuse_baseline,
    )
    from lidarmt.engine.campaign import RunLock
    from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError
    from lidarmt.lidar.mr1.campaign import CampaignConfig, parse_ns, select_frames
    from lidarmt.lidar.mr1.inject import CNN_HALF_RANGE_M, HDL64E_RANGE_M, Region
    from lidarmt.lidar.specs import (
        RoiSpec,
        SourceSpec,
        SutSpec,
        build_roi_provider,
        is_callable_spec,
        open_source,
    )

    check_stats_options(alpha, correction, BenchArgumentError)
    from lidarmt.engine.campaign import check_backend

    check_backend(backend, address)
    if not sut:
        raise BenchArgumentError("--sut: give the perception modules to compare (the first is the baseline), "
                                 "e.g. --sut apollo --sut apollo-512")
    if len(sut) < 2 and baseline is None:
        raise BenchArgumentError(f"--sut {sut[0]}: a bench compares modules; give a second --sut, or "
                                 "--baseline FOLDER with the baseline of an earlier bench")
    if min_points < 0:
        raise BenchArgumentError(f"--min-points {min_points}: give 0 or more")
    if sensor is not None:
        from lidarmt.lidar.sensors import get_sensor

        sensor = get_sensor(sensor).name  # an unknown profile: one line listing the known ones
        if transforms is None:
            raise BenchArgumentError(f"--sensor {sensor}: the sensor profile is what --transforms model; MR1 adds "
                                     "points outside the ROI whatever the sensor (leave out --sensor)")
    if transforms is not None:  # the LiDAR relations beyond MR1 (lidarmt.bench.lidar_transforms)
        from lidarmt.lidar.relations import Thresholds

        bench_transforms(transforms, levels=levels, relation=relation, library=library, bag=bag, topic=topic,
                         roi=RoiSpec(map, roi_range, map_frame), suts=sut,
                         options=with_device(parse_module_options(sut_option, len(sut), flag="--sut-option",
                                                                  error=BenchArgumentError), device),
                         backend=backend, address=address, baseline=baseline, trust_code=trust_code, frames=frames, seed=seed, trials=trials,
                         timeout=timeout, workers=workers, alpha=alpha, correction=correction,
                         thresholds=Thresholds(safety_distance, min_kept, tolerance), out=out, resume=resume,
                         force=force, quiet=quiet, fail_on_regression=fail_on_regression, mixed_isa=mixed_isa,
                         sensor=sensor or "hdl64")
        return
    ns = parse_ns(n)
    if region not in ("disk", "grid"):
        raise FuzzArgumentError(f"--region {region!r}: use disk or grid")
    size = radius if radius is not None else (HDL64E_RANGE_M if region == "disk" else CNN_HALF_RANGE_M)
    reg = Region(region, float(size))  # type: ignore[arg-type]
    if workers < 1:
        raise FuzzArgumentError(f"--workers {workers}: use at least 1")
    if roi_range <= 0:
        raise FuzzArgumentError(f"--roi-range {roi_range}: give a positive number of metres")
    if not is_callable_spec(map) and not Path(map).exists():
        raise FuzzInputError(f"--map {map}: no such file or folder")
    options = with_device(parse_module_options(sut_option, len(sut), flag="--sut-option", error=BenchArgumentError),
                          device)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder("bench-" + Path(bag.rstrip("/")).name.split(".")[0], bag, map, baseline, library)

    source = SourceSpec(bag, topic)
    rec = open_source(source)
    chosen = select_frames(len(rec), frames, seed)
    roi_spec = RoiSpec(map, roi_range, map_frame)
    build_roi_provider(roi_spec).roi_for(rec[chosen[0]])  # fails early: unreadable map, no pose, ...
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    configs = [CampaignConfig(source, roi_spec, SutSpec(s, o), ns, chosen, seed=seed, trials=trials,
                              region=reg, timeout=timeout) for s, o in zip(sut, options, strict=True)]
    reused_from = None
    modules: list[Module] = []
    if baseline is not None:
        base, reused_from = reuse_baseline(baseline, "lidar-mr1", trust_code=trust_code)
        modules.append(base)
    labels = [m.name for m in modules] + [module_label(c.sut.name, c.sut.options) for c in configs]
    names = folder_names(labels)
    modules += [Module(nm, c) for nm, c in zip(names[len(modules):], configs, strict=True)]
    if baseline is not None:
        check_baseline(modules, "lidar-mr1", baseline)
    plan = BenchPlan(out, "lidar-mr1", modules)
    _check_suts(plan)
    with RunLock(out) as lock:  # held at once when the folder exists; else taken once prepare() made it
        _run(plan, lock=lock, reused_from=reused_from, workers=workers, resume=resume, force=force,
             alpha=alpha, correction=correction, min_points=min_points, quiet=quiet,
             fail_on_regression=fail_on_regression, backend=backend, address=address, mixed_isa=mixed_isa)


def with_device(options: list[dict[str, Any]], device: str | None,
                keys: list[Any] | None = None) -> list[dict[str, Any]]:
    """``--device``: resolved once (a one-line error where it is not there) and given to every module as
    ``device=...``, except where the module's own options name one, or where ``keys`` (per module: the option
    names it takes, None: unknown) show it takes none."""
    if device is None:
        return options
    from lidarmt.bench.errors import BenchArgumentError
    from lidarmt.lidar.perception.apollo.network import resolve_device

    resolved = resolve_device(device, flag="--device", error=BenchArgumentError)
    for i, o in enumerate(options):
        took = None if keys is None else keys[i]
        if "device" not in o and (took is None or "device" in took):
            o["device"] = resolved
    return options


def _check_suts(plan) -> None:
    """Build every module that still has pairs to judge once, before any campaign starts: a typo in the last
    --sut is reported at once, not after the first modules ran."""
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.specs import build_sut

    for m in plan.modules:
        if m.origin is None and not (plan.out / m.name / JOURNAL_NAME).is_file():  # a link: prepare refuses it
            build_sut(m.config.sut)


def run_plan(plan, *, lock, reused_from, workers: int, resume: bool, force: bool, quiet: bool,
             is_violation=None, count=None, engine_options: dict | None = None, backend: str = "local",
             address: str | None = None, mixed_isa: bool = False) -> dict:
    """Prepare the bench folder, run every module's campaign with a progress bar; returns run.json's facts.
    ``backend``/``address``: where the workers run (as ``lidarmt fuzz``); modules on a local CUDA device get at
    most the workers the GPU's memory holds. Modules whose verdicts would come from CPUs of different ISAs are
    refused unless ``mixed_isa`` (:func:`lidarmt.bench.folder.check_isas`)."""
    from lidarmt.bench.folder import check_isas, prepare, run_modules
    from lidarmt.cli._common import CampaignProgress, err_console
    from lidarmt.engine.campaign import clamp_workers, environment
    from lidarmt.engine.journal import JOURNAL_NAME

    command = command_line()
    isas = check_isas(plan, reused_from, allow=mixed_isa, existing=not force)  # --force discards the modules' runs
    if len(isas) > 1:
        err_console.print(f"--mixed-isa: comparing verdicts made on {'; '.join(isas)}", highlight=False,
                          soft_wrap=True, markup=False)
    prepare(plan, resume=resume, force=force, reused_from=reused_from)
    lock.acquire()
    used, note = clamp_workers(workers, items=len(plan.baseline.config.items),
                               per_worker=plan.baseline.config.worker_memory(), backend=backend, address=address)
    devices = sorted({str(_device_of(m.config)) for m in plan.modules if m.origin is None} - {"None"})
    cuda = [d for d in devices if d.startswith("cuda")]
    if backend == "local" and cuda and used > 1:  # W workers share one GPU
        from lidarmt.lidar.perception.apollo.network import clamp_gpu_workers

        for d in cuda:
            used, gpu_note = clamp_gpu_workers(used, d)
            note = gpu_note or note
    engine_options = {**dict(engine_options or {}), "backend": backend, "address": address}
    if note:
        err_console.print(note)
    bars: list[Any] = []

    def on_module(m, resuming: bool):
        if count is not None:  # counted on a live tally, by the rule of the bench's table
            bar = CampaignProgress(quiet=quiet, description=m.name, tally=m.config.new_tally(), count=count,
                                   journal=plan.folder(m) / JOURNAL_NAME)
        else:
            bar = CampaignProgress(quiet=quiet, is_violation=is_violation, description=m.name)
        bars.append(bar)
        return bar.on_start, bar.on_pair

    try:
        results = run_modules(plan, workers=used, on_module=on_module, engine_options=engine_options,
                              header_extra={"command": command, "environment": environment()})
    except KeyboardInterrupt:
        for b in bars:
            b.stop()
        err_console.print(f"interrupted: every verdict so far is in the modules' {JOURNAL_NAME}; continue "
                          "with the same command plus --resume")
        raise
    finally:
        for b in bars:
            b.stop()
    per = {}
    for name, r in results.items():
        if r is None:
            per[name] = {"reused": True}
        else:
            per[name] = {"ran": r.ran, "resumed_from": r.resumed, "elapsed_s": round(r.elapsed, 3),
                         "throughput": (r.ran / r.elapsed) if r.elapsed > 0 and r.ran else None}
    return {"command": command, "workers": used, "backend": backend, "environment": environment(), "modules": per,
            "isas": isas}


def _device_of(config) -> str | None:
    """The device a module's campaign asked for (its SUT's or its models' ``device`` option), or None."""
    sut = getattr(config, "sut", None)
    if sut is not None:
        return (sut.options or {}).get("device")
    for m in getattr(config, "models", ()):
        if (m.options or {}).get("device"):
            return m.options["device"]
    return None


def _run(plan, *, lock, reused_from, workers: int, resume: bool, force: bool, alpha: float, correction: str,
         min_points: int, quiet: bool, fail_on_regression: bool, backend: str = "local",
         address: str | None = None, mixed_isa: bool = False) -> None:
    from lidarmt.bench.lidar import evaluate_module, labelled_frames, summarize
    from lidarmt.cli._common import err_console

    run = run_plan(plan, lock=lock, reused_from=reused_from, workers=workers, resume=resume, force=force,
                   quiet=quiet, backend=backend, address=address, mixed_isa=mixed_isa,
                   is_violation=lambda r: r["verdict"]["count_violation"] or r["verdict"]["subset_violation"])
    frame_at, gt_note = labelled_frames(plan.baseline.config.source)
    detection: dict[str, Any] = {}
    if frame_at is not None:
        for m in plan.modules:
            if not quiet:
                err_console.print(f"detection quality of {m.name} on {len(m.config.frames)} source "
                                  "frames ...")
            detection[m.name] = evaluate_module(m.config, plan.folder(m), frame_at, min_points=min_points,
                                                name=m.name)
    summary = summarize(plan, alpha=alpha, correction=correction, detection=detection, ground_truth=gt_note)
    report(plan.out, summary, run)
    if fail_on_regression and summary["verdict"] == "regression":
        raise typer.Exit(1)


def report(out: Path, summary: dict, run: dict) -> None:
    """Write the bench's reports and print its tables and verdict."""
    from lidarmt.bench.report import independence_lines, rich_tables, verdict_line, write_reports
    from lidarmt.cli._common import console, wide_console

    paths = write_reports(out, summary, run=run)
    wide = wide_console()
    for t in rich_tables(summary):
        wide.print(t)
    for w in independence_lines(summary):
        console.print(w, style="yellow", highlight=False, markup=False, soft_wrap=True)
    console.print(verdict_line(summary), highlight=False, soft_wrap=True)
    from lidarmt.engine.report import reports_line

    console.print(reports_line(paths),
                  soft_wrap=True)


def bench_transforms(names: str, *, levels: str | None, relation: str | None, library: str | None, bag: str,
                     topic: str | None, roi: Any, suts: list[str], options: list[dict], baseline: Path | None,
                     trust_code: bool, frames: int | None, seed: int, trials: int, timeout: float | None,
                     workers: int, alpha: float, correction: str, thresholds: Any, out: Path | None, resume: bool,
                     force: bool, quiet: bool, fail_on_regression: bool, backend: str = "local",
                     address: str | None = None, mixed_isa: bool = False, sensor: str = "hdl64") -> None:
    """``lidarmt bench --transforms``: one LiDAR-transformation campaign per module on the same follow-ups, the
    journals paired key by key (McNemar per transformation, :mod:`lidarmt.bench.lidar_transforms`)."""
    import typer

    from lidarmt.bench.folder import (
        BenchPlan,
        Module,
        check_baseline,
        folder_names,
        module_label,
        reuse_baseline,
    )
    from lidarmt.bench.lidar_transforms import summarize
    from lidarmt.cli._common import err_console
    from lidarmt.cli.fuzz_transforms import parse_levels
    from lidarmt.engine.campaign import RunLock
    from lidarmt.lidar.campaign import KIND, LidarCampaignConfig, transform_refs
    from lidarmt.lidar.mr1.campaign import select_frames
    from lidarmt.lidar.relations import judge_facts
    from lidarmt.lidar.specs import SourceSpec, SutSpec, build_roi_provider, open_source
    from lidarmt.lidar.transforms.registry import select, select_for_frame

    transform_refs([t.name for t in select(names)], levels=parse_levels(levels), relation=relation)  # one line, now
    source = SourceSpec(bag, topic)
    rec = open_source(source)
    chosen = select_frames(len(rec), frames, seed)
    first = rec[chosen[0]]
    picked, left_out = select_for_frame(names, first)  # a misalignment needs the recording's camera
    for line in left_out:
        err_console.print(line)
    refs = transform_refs([t.name for t in picked], levels=parse_levels(levels), relation=relation)
    build_roi_provider(roi).roi_for(first)
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    configs = [LidarCampaignConfig(source, roi, SutSpec(s, o), refs, chosen, seed=seed, trials=trials,
                                   library=library, timeout=timeout, thresholds=thresholds, sensor=sensor)
               for s, o in zip(suts, options, strict=True)]
    modules: list[Module] = []
    reused_from = None
    if baseline is not None:
        base, reused_from = reuse_baseline(baseline, KIND, trust_code=trust_code)
        modules.append(base)
    labels = [m.name for m in modules] + [module_label(c.sut.name, c.sut.options) for c in configs]
    names_ = folder_names(labels)
    modules += [Module(nm, c) for nm, c in zip(names_[len(modules):], configs, strict=True)]
    if baseline is not None:
        check_baseline(modules, KIND, baseline)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(
        "bench-transforms-" + Path(bag.rstrip("/")).name.split(".")[0], bag, roi.map, baseline, library)
    plan = BenchPlan(out, KIND, modules)
    _check_suts(plan)
    with RunLock(out) as lock:
        run = run_plan(plan, lock=lock, reused_from=reused_from, workers=workers, resume=resume, force=force,
                       quiet=quiet, backend=backend, address=address, mixed_isa=mixed_isa,
                       is_violation=lambda r: bool(judge_facts(
                           r["facts"], refs[int(r["key"][1])].relation, thresholds)))
        summary = summarize(plan, thresholds=thresholds, alpha=alpha, correction=correction)
        report(plan.out, summary, run)
    if fail_on_regression and summary["verdict"] == "regression":
        raise typer.Exit(1)
