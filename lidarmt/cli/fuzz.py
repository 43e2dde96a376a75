"""``lidarmt fuzz``: run an MR1 campaign on a recording and write its reports and bug bundles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._options import (
    AddressOption,
    BackendOption,
    ForceCampaignOption,
    QuietOption,
    RadiusOption,
    ResumeOption,
    SensorOption,
    TrialsOption,
)


def register(app: typer.Typer) -> None:
    app.command(name="fuzz", help=FUZZ_HELP)(fuzz)


FUZZ_HELP = """Check MR1 on a recording: adding n random points outside the ROI must not make obstacles vanish.

For each sampled source frame t (perceived once), each n and each trial, the follow-up t' adds n points
uniform in the region and outside the ROI, with z and intensity uniform between t's minimum and maximum.
Verdicts go to an append-only journal (resumable with --resume); the run folder gets summary.json, junit.xml,
report.md, charts, and a bug bundle per violation (up to --bundles per n), each with a 1-minimal subset of the
added points (delta debugging).

The ROI is an HD map placed by each frame's pose (--map), a GeoJSON drawn in the sensor frame (a corridor along
the road ahead works on any recording), or --roi labels (--map labels is the same), built once per source frame
from its labels: for frames with per-point ground labels (SemanticKITTI labels/, KITTI road_label/) the area the
labelled road, parking, sidewalk and other-ground cover, and every point above it; for frames whose labels are
boxes of a part of the sweep and no ground labels (a KITTI raw drive with its tracklet_labels.xml) that labelled
region, camera 2's view (about 80 degrees ahead) within --roi-range, road or not. A KITTI raw drive without
tracklets has no labels: give it a GeoJSON.

Where the source frames carry object labels (KITTI boxes, tracklets, SemanticKITTI instances, labelled .npz
frames), each lost obstacle is matched to them: the reports split the lost obstacles into LABELLED objects (a
real car, pedestrian or cyclist lost) and unlabelled junk, per class and by size and distance; a simulated bag's
own truth (<name>.labels.npz beside it) counts as labels. Without labels an obstacle with too few points, no
height or a tiny footprint is "low evidence". Every finding gets a severity for a planner (critical, high,
medium, low: ego lane, distance, class, size, how it was lost); the reports count both, the headline shows all
violations and those excluding junk/low-evidence, bundles are made for real and severe findings first, and
--min-severity bundles only findings at least that severe.

Region: --region disk (default) draws the points in the 120 m disk of the HDL-64E's range: most of them fall
outside the CNN's ±60 m grid or its -5..5 m height band and never reach the network (about 1 in 4 do). --region
grid draws them in the CNN's ±60 m square, so all reach it but those outside the height band; violation rates
are then higher. The tables give the mean number of added points per pair that reached the network
("reached"). --preset study is the study's setting as best reconstructed (Apollo 2.0's 512 network, the 2.x
120 m ROI, the grid region, n = 10,100,1000, 1,000 frames or all there are); its table's "study" column holds
the published rates.

--min-points / --min-size count only violations whose lost obstacles have at least that many points / that
box volume (m³); the journal keeps every verdict, so a run can be resumed or reported with other filters. The
reports break the lost obstacles down by size (<1, 1-10, >10 m³) and distance (0-20, 20-40, 40+ m).

--transforms fog,insert,rotate,... judges LiDAR transformations instead (lidarmt transforms lists them), each
at --levels (light, moderate, heavy) and by its relation (--relation auto): robustness (weather, sensor,
motion: obstacles within --safety-distance that keep --min-kept points persist), insertion (the inserted object
is detected; obstacles it does not occlude persist), removal, equivariance (rotate, mirror: the obstacles map
onto the moved source obstacles). The journal keeps raw facts; the thresholds apply to the reports (a table in
the shape of DeepTest's Table 8, and every finding ranked by distance). --bundles then counts per
transformation, and delta debugging minimises the change's point edits.

Exit status: 0 when the campaign ran (whatever it found); 1 with --fail-on-violation when a pair violated
MR1 or the perception module crashed or timed out; 2 on bad input.

Examples:

`lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000`

`lidarmt fuzz --bag drive.bag --map maps/sunnyvale --n 10,100,1000 --frames 1000 --workers 2 --out runs/study`

`lidarmt fuzz --bag drive.bag --map maps/sunnyvale --n 100 --sut mypkg.perception:make --fail-on-violation`

`lidarmt fuzz --bag drive.bag --map maps/sunnyvale --out runs/study --resume`  (continue an interrupted run)

`lidarmt fuzz --bag kitti/training --roi labels --n 10,100,1000`  (KITTI object frames: road labels as the ROI)

`lidarmt fuzz --bag kitti_raw/2011_09_26/2011_09_26_drive_0001_sync --roi labels --frames 20`  (a KITTI raw drive
with its tracklets: the labelled camera view as the ROI)

`lidarmt fuzz --bag drive.bag --map maps/sunnyvale --min-points 10 --min-size 1`  (count cars, not junk)

`lidarmt fuzz --bag kitti/training --roi labels --transforms fog,beam-loss,insert,rotate,mirror`  (relations beyond MR1)
"""

#: ``--preset study``: the study's setting as best reconstructed (docs/fuzz-region.md says why).
STUDY_PRESET = {"sut": "apollo-512", "roi_range": 120.0, "region": "grid", "n": "10,100,1000", "frames": 1000}



def _parse_options(items: list[str]) -> dict:
    from lidarmt.cli._common import parse_key_values
    from lidarmt.engine.errors import FuzzArgumentError

    return parse_key_values(items, flag="--sut-option", error=FuzzArgumentError)


def fuzz(
    bag: Annotated[str, typer.Option("--bag", help="Recording: ROS1/ROS2 bag, Cyber record, PCD/KITTI/.npz folder.")],
    map: Annotated[str | None, typer.Option("--map", "--roi", help="The ROI: an HD map (Apollo .bin/.txt/.xml, GeoJSON) or its folder, or 'labels' (the area each frame's ground labels cover, or for box labels without them the labelled region: KITTI raw drives with tracklets).")] = None,
    n: Annotated[str | None, typer.Option("--n", help="Points to add, comma-separated (default and the study: 10,100,1000).")] = None,
    frames: Annotated[int | None, typer.Option("--frames", help="Source frames sampled at random without replacement (default: all; --preset study: 1000 or all there are).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed; every follow-up is reproducible from (seed, frame, n, trial).")] = 0,
    sut: Annotated[str | None, typer.Option("--sut", help="Perception under test: a registered name, package.module:callable, or exec:COMMAND (an external program, docs/exec-sut.md) (default apollo; --preset study: apollo-512).")] = None,
    sut_option: Annotated[list[str], typer.Option("--sut-option", help="KEY=VALUE passed to the SUT's constructor (repeatable).")] = [],  # noqa: B006
    mode: Annotated[str | None, typer.Option("--mode", help="SUT numeric mode: fast or exact (passed to the SUT as mode=...).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Where the SUT's network runs: auto (cuda when available), cpu, cuda or cuda:N; resolved once and passed to the SUT as device=... (docs/gpu.md).")] = None,
    trials: TrialsOption = 1,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Worker processes (1 = in this process); clamped to the CPU cores, the frames and the memory available (about 0.9 GiB per Apollo worker), with a note.")] = 1,
    backend: BackendOption = "local",
    address: AddressOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder (default runs/<recording name>).")] = None,
    region: Annotated[str | None, typer.Option("--region", help="Where the points are drawn: disk (the HDL-64E's 120 m range; most points miss the CNN's grid and height band) or grid (the CNN's ±60 m square, all reach the grid). Default disk; --preset study: grid.")] = None,
    radius: RadiusOption = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Point-cloud topic (default: Apollo's velodyne64 compensator topic or the only one).")] = None,
    roi_range: Annotated[float | None, typer.Option("--roi-range", help="ROI bitmap half-size in metres (Apollo 3.0: 70, the default; 2.x and --preset study: 120).")] = None,
    map_frame: Annotated[str, typer.Option("--map-frame", help="auto (as the map declares: GeoJSON \"frame\": \"sensor\"), world (place the map by each frame's pose) or sensor (the map is drawn in the sensor frame; for recordings without poses).")] = "auto",
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one perception call may take; longer is a 'timeout' finding. Default: automatic, 900 s for a process's first call (JIT warm-up), then 30x that first call's time, at least 60 s.")] = None,
    bundles: Annotated[str, typer.Option("--bundles", help="Bug bundles per n (each costs up to --ddmin-budget perception calls): a number, or 'all'.")] = "3",
    ddmin_budget: Annotated[int, typer.Option("--ddmin-budget", help="Perception calls allowed per bundle to minimise the added points (0: no minimisation).")] = 200,
    resume: ResumeOption = False,
    force: ForceCampaignOption = False,
    fail_on_violation: Annotated[bool, typer.Option("--fail-on-violation", help="Exit 1 when any pair violates MR1 or the SUT crashed/timed out (for CI).")] = False,
    quiet: QuietOption = False,
    preset: Annotated[str | None, typer.Option("--preset", help="study: the study's setting (Apollo 2.0 --sut apollo-512, --roi-range 120, --region grid, --n 10,100,1000, --frames 1000 or all); options given explicitly win.")] = None,
    min_points: Annotated[int, typer.Option("--min-points", help="Count a violation only when a lost obstacle has at least this many points (reports only; the journal keeps all).")] = 0,
    min_size: Annotated[float, typer.Option("--min-size", help="Count a violation only when a lost obstacle's box is at least this many m³ (l×w×h; reports only).")] = 0.0,
    search: Annotated[str | None, typer.Option("--search", help="Search critical noise conditions instead: es (a (1+1)-ES over n, ring, sector, z and intensity bands and clumps, with a random arm on the same budget) or random; --frames is the search batch (default 6), the other frames validate the best conditions against uniform noise with the same n (max of --n). See lidarmt.search.lidar.")] = None,
    budget: Annotated[int, typer.Option("--budget", help="--search: candidate conditions per arm.")] = 30,
    top: Annotated[int, typer.Option("--top", help="--search: best conditions per arm validated on the held-back frames.")] = 3,
    transforms: Annotated[str | None, typer.Option("--transforms", help="Judge LiDAR transformations instead of MR1: all, a family (weather, sensor, motion, object, alignment) or names (fog,insert,rotate,...; lidarmt transforms lists them), each at --levels, by its relation (--relation).")] = None,
    relation: Annotated[str | None, typer.Option("--relation", help="auto (each transformation's own: robustness for weather/sensor/motion, insertion, removal, equivariance for rotate/mirror), robustness, insertion, removal, equivariance, or mr1 (the default without --transforms).")] = None,
    levels: Annotated[str | None, typer.Option("--levels", help="--transforms: intensities, comma-separated (default light,moderate,heavy), or parameter settings separated by / (e.g. 'visibility_m=50/visibility_m=200').")] = None,
    library: Annotated[str | None, typer.Option("--library", help="--transforms insert: where objects are cut from (a recording with labelled boxes: a KITTI training folder, a raw drive with tracklets; default: the campaign's own recording).")] = None,
    safety_distance: Annotated[float, typer.Option("--safety-distance", help="--transforms: D, obstacles within this many metres must persist (reports only; the journal keeps raw facts).")] = 30.0,
    min_kept: Annotated[int, typer.Option("--min-kept", help="--transforms: k, an obstacle must keep at least this many points in the follow-up to be required (reports only).")] = 10,
    tolerance: Annotated[float, typer.Option("--tolerance", help="--transforms: τ, the match score (Jaccard or BEV IoU) a persisting obstacle needs (reports only).")] = 0.5,
    occlusion: Annotated[float, typer.Option("--occlusion", help="--transforms insert/remove: ρ, the share of its points an obstacle may lose to the change and still be required (reports only).")] = 0.1,
    insert_overlap: Annotated[float, typer.Option("--insert-overlap", help="--transforms insert: the share of the inserted box a follow-up obstacle must cover (reports only).")] = 0.1,
    min_severity: Annotated[str | None, typer.Option("--min-severity", help="Bundle only violations with a finding at least this severe: critical, high, medium or low (lidarmt.engine.findings: class, distance, ego lane, size, how it was lost; junk and low-evidence obstacles are low). Reports count every severity.")] = None,
    labelled_only: Annotated[bool, typer.Option("--labelled-only", help="--transforms: require only obstacles that overlap a labelled object (KITTI boxes, tracklets); with --min-size, count real objects, not junk (reports only).")] = False,
    sensor: SensorOption = None,
) -> None:
    check_writable(out, inputs=(bag, map, library), folder=True, may_exist=True)  # the run folder's own rule after
    from lidarmt.cli._common import err_console
    from lidarmt.engine.campaign import RunLock, clamp_workers
    from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError
    from lidarmt.engine.tally import LostFilter
    from lidarmt.lidar.mr1.campaign import (
        CampaignConfig,
        parse_ns,
        select_frames,
    )
    from lidarmt.lidar.mr1.inject import CNN_HALF_RANGE_M, HDL64E_RANGE_M, Region
    from lidarmt.lidar.specs import (
        RoiSpec,
        SourceSpec,
        SutSpec,
        build_roi_provider,
        is_callable_spec,
        open_source,
    )

    if preset not in (None, "study"):
        raise FuzzArgumentError(f"--preset {preset!r}: the only preset is 'study'")
    defaults = STUDY_PRESET if preset == "study" else {"sut": "apollo", "roi_range": 70.0, "region": "disk",
                                                       "n": "10,100,1000", "frames": None}
    sut = sut if sut is not None else str(defaults["sut"])
    roi_range = roi_range if roi_range is not None else float(defaults["roi_range"])  # type: ignore[arg-type]
    region = region if region is not None else str(defaults["region"])
    n = n if n is not None else str(defaults["n"])
    if map is None:
        raise FuzzArgumentError("no ROI: give --map MAP (an Apollo map or a GeoJSON), or --roi labels for labelled "
                                "frames (SemanticKITTI or KITTI road labels, KITTI raw tracklets)")
    lost_filter = LostFilter(min_points, min_size)
    from lidarmt.engine.findings import parse_min_severity

    min_severity = parse_min_severity(min_severity)
    ns = parse_ns(n)
    if region not in ("disk", "grid"):
        raise FuzzArgumentError(f"--region {region!r}: use disk or grid")
    size = radius if radius is not None else (HDL64E_RANGE_M if region == "disk" else CNN_HALF_RANGE_M)
    reg = Region(region, float(size))  # type: ignore[arg-type]
    if mode is not None and mode not in ("fast", "exact"):
        raise FuzzArgumentError(f"--mode {mode!r}: use fast or exact")
    if bundles == "all":
        per_n: int | None = None
    else:
        try:
            per_n = int(bundles)
        except ValueError as err:
            raise FuzzArgumentError(f"--bundles {bundles!r}: give a number or 'all'") from err
        if per_n < 0:
            raise FuzzArgumentError(f"--bundles {per_n}: give 0 or more")
    if ddmin_budget < 0:
        raise FuzzArgumentError(f"--ddmin-budget {ddmin_budget}: give 0 or more")
    if workers < 1:
        raise FuzzArgumentError(f"--workers {workers}: use at least 1")
    if roi_range <= 0:
        raise FuzzArgumentError(f"--roi-range {roi_range}: give a positive number of metres")
    from lidarmt.lidar.specs import LABELS

    if map != LABELS and not is_callable_spec(map) and not Path(map).exists():
        raise FuzzInputError(f"--map {map}: no such file or folder")
    options = _parse_options(sut_option)
    if mode is not None:
        options["mode"] = mode
    if device is not None:
        from lidarmt.lidar.perception.apollo.network import resolve_device

        options["device"] = resolve_device(device, flag="--device", error=FuzzArgumentError)
    if sensor is not None:
        from lidarmt.lidar.sensors import get_sensor

        sensor = get_sensor(sensor).name  # an unknown profile: one line listing the known ones
        if transforms is None or relation == "mr1":
            raise FuzzArgumentError(f"--sensor {sensor}: the sensor profile is what --transforms model; MR1 adds "
                                    "points outside the ROI whatever the sensor (leave out --sensor)")
    if relation == "mr1" and transforms is not None:
        raise FuzzArgumentError(f"--relation mr1 --transforms {transforms}: MR1 adds points outside the ROI and takes "
                                "no transformation; leave out --transforms, or give --relation auto")
    if relation not in (None, "mr1") and transforms is None:
        raise FuzzArgumentError(f"--relation {relation}: give the transformations to judge with --transforms "
                                "(lidarmt transforms lists them), or --relation mr1")
    if transforms is not None and relation != "mr1" and search is not None:  # a transformation's settings
        from lidarmt.cli.fuzz_transforms import run_transform_search
        from lidarmt.lidar.relations import Thresholds

        run_transform_search(search, transforms, relation=relation, bag=bag, topic=topic,
                             roi=RoiSpec(map, roi_range, map_frame), sut=SutSpec(sut, options), frames=frames,
                             seed=seed, budget=budget, timeout=timeout, library=library, sensor=sensor or "hdl64",
                             thresholds=Thresholds(safety_distance, min_kept, tolerance, occlusion, insert_overlap,
                                                   min_size, labelled_only),
                             out=out, resume=resume, force=force, quiet=quiet)
        return
    if transforms is not None and relation != "mr1" and search is None:  # relations beyond MR1
        from lidarmt.cli.fuzz_transforms import run_transforms
        from lidarmt.lidar.relations import Thresholds

        run_transforms(transforms, relation=relation, levels=levels, bag=bag, topic=topic,
                       roi=RoiSpec(map, roi_range, map_frame), sut=SutSpec(sut, options), frames=frames, seed=seed,
                       trials=trials, timeout=timeout, library=library, sensor=sensor or "hdl64",
                       thresholds=Thresholds(safety_distance, min_kept, tolerance, occlusion, insert_overlap,
                                             min_size, labelled_only),
                       workers=workers, backend=backend, address=address, out=out, resume=resume, force=force,
                       bundles=per_n, ddmin_budget=ddmin_budget, quiet=quiet, fail_on_violation=fail_on_violation,
                       min_severity=min_severity)
        return
    if search is not None:  # a search campaign (lidarmt.search.lidar) on the same recording, map and SUT
        from lidarmt.cli.fuzz_search import run_search

        run_search(search, bag=bag, topic=topic, roi=RoiSpec(map, roi_range, map_frame), sut=SutSpec(sut, options),
                   n_max=max(ns), frames=frames, seed=seed, budget=budget, top=top, timeout=timeout, out=out,
                   resume=resume, force=force, bundles=per_n, ddmin_budget=ddmin_budget, quiet=quiet)
        return
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(Path(bag.rstrip("/")).name.split(".")[0], bag, map, library)

    source = SourceSpec(bag, topic)
    rec = open_source(source)
    if preset == "study" and frames is None:  # the study's 1,000 frames, or all there are
        frames = min(int(STUDY_PRESET["frames"]), len(rec))  # type: ignore[call-overload]
    chosen = select_frames(len(rec), frames, seed)
    roi_spec = RoiSpec(map, roi_range, map_frame)
    build_roi_provider(roi_spec).roi_for(rec[chosen[0]])  # fails early: unreadable map, no pose, ...
    with_close = getattr(rec, "close", None)
    if callable(with_close):
        with_close()
    config = CampaignConfig(source, roi_spec, SutSpec(sut, options), ns, chosen,
                            seed=seed, trials=trials, region=reg, timeout=timeout, lost_filter=lost_filter)
    from lidarmt.cli._common import command_line

    command = command_line()

    from lidarmt.cli._common import CampaignProgress
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.mr1.campaign import is_violating

    bar = CampaignProgress(quiet=quiet, is_violation=lambda r: is_violating(r, lost_filter=lost_filter),
                           journal=out / JOURNAL_NAME)

    used, note = clamp_workers(workers, items=len(chosen), per_worker=config.worker_memory(), backend=backend,
                               address=address)
    if backend == "local" and str(options.get("device", "")).startswith("cuda"):  # W workers share one GPU
        from lidarmt.lidar.perception.apollo.network import clamp_gpu_workers

        used, gpu_note = clamp_gpu_workers(used, str(options["device"]))
        note = gpu_note or note
    if note:
        err_console.print(note)
    with RunLock(out) as lock:
        _run(config, out, lock=lock, workers=used, backend=backend, address=address, resume=resume, force=force,
             per_n=per_n, min_severity=min_severity,
             ddmin_budget=ddmin_budget, command=command, quiet=quiet, fail_on_violation=fail_on_violation,
             bar=bar)


def _interrupted(out: Path) -> None:
    from lidarmt.cli._common import err_console
    from lidarmt.engine.journal import JOURNAL_NAME

    err_console.print(f"interrupted: every verdict so far is in {out / JOURNAL_NAME}; continue with the same "
                      "command plus --resume")


def _run(config, out: Path, *, lock, workers: int, resume: bool, force: bool, per_n: int | None,
         min_severity: str | None = None, backend: str = "local", address: str | None = None,
         ddmin_budget: int, command: str, quiet: bool, fail_on_violation: bool, bar) -> None:
    from lidarmt.cli._common import progress, wide_console
    from lidarmt.engine.campaign import environment, make_bundles, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records
    from lidarmt.lidar.mr1.campaign import bundle_id, select_bundles, violating_keys
    from lidarmt.lidar.mr1.report import rich_tables, summary_dict, write_reports
    from lidarmt.lidar.perception.apollo.config import implementations

    try:
        result = run_campaign(config, out, workers=workers, backend=backend, address=address, resume=resume,
                              force=force, on_pair=bar.on_pair,
                              on_start=bar.on_start, header_extra={"command": command, "environment": environment(),
                                                                   "implementations": implementations()},
                              lock=lock)
    except KeyboardInterrupt:
        bar.stop()
        _interrupted(out)
        raise
    finally:
        bar.stop()

    # bug bundles
    viol = violating_keys(out, lost_filter=config.lost_filter)  # bundles for the violations the filter counts
    chosen_b = select_bundles(viol, per_n, min_severity=min_severity)
    bundle_infos: list[dict] = []
    if chosen_b:
        bbar = None if quiet else progress()
        btask = None
        if bbar is not None:
            bbar.start()
            btask = bbar.add_task("bundles", total=len(chosen_b), rate="ddmin")
        try:
            bundle_infos = make_bundles(
                config, out, [k for k, _ in chosen_b], workers=workers, backend=backend, address=address,
                budget=ddmin_budget, command=command,
                on_bundle=lambda info: bbar.update(btask, advance=1) if bbar is not None else None)
        except KeyboardInterrupt:
            if bbar is not None:
                bbar.stop()
            _interrupted(out)
            raise
        finally:
            if bbar is not None:
                bbar.stop()
        bundle_infos = _complete_infos(out, bundle_infos)
        order = {bundle_id(k): i for i, (k, _) in enumerate(chosen_b)}
        bundle_infos.sort(key=lambda b: order.get(b["id"], 1 << 30))

    summary = summary_dict(config.to_dict(), result.tally)
    findings = [r for r in iter_records(out / JOURNAL_NAME) if r["status"] != "ok"]
    findings.sort(key=lambda r: (r["n"], r["frame"], r["trial"]))
    from lidarmt.engine.campaign import describe_timeout

    run_info = {"workers": workers, "backend": backend, "timeout": describe_timeout(config.timeout), "ran": result.ran,
                "resumed_from": result.resumed,
                "elapsed_s": round(result.elapsed, 3),
                "throughput": (result.ran / result.elapsed) if result.elapsed > 0 and result.ran else None,
                "environment": environment(), "command": command, "violations": len(viol),
                "bundles": bundle_infos}
    paths = write_reports(out, summary, records=iter_records(out / JOURNAL_NAME), run=run_info,
                          bundles=bundle_infos, findings=findings)
    out_console = wide_console()  # piped or logged: do not squeeze the tables
    for table in rich_tables(summary):
        out_console.print(table)
    def say(text: str) -> None:  # result lines: never wrapped (paths, obstacle details)
        out_console.print(text, soft_wrap=True, highlight=False, markup=False)

    if run_info["throughput"]:
        say(f"{result.ran} pairs in {result.elapsed:.1f} s ({run_info['throughput']:.2f} verdicts/s, "
                      f"{workers} worker(s)); {len(viol)} violating pairs, "
                      f"{sum(not b.get('error') for b in bundle_infos)} bundles"
                      + (f" ({sum(bool(b.get('error')) for b in bundle_infos)} failed)"
                         if any(b.get("error") for b in bundle_infos) else ""))
    for b in bundle_infos[:12]:
        if b.get("error"):
            say(f"  bundle {b['id']}: failed ({b['error']})")
            continue
        dd = b.get("ddmin") or {}
        mini = (f"; {dd.get('size')} added point(s) suffice"
                f"{' (1-minimal)' if dd.get('one_minimal') else ' (not minimised further: ' + str(dd.get('stopped')) + ')'}"
                ) if dd else ""
        what = f" ({b['lost_details']})" if b.get("lost_details") else ""
        sev = f"[{b['severity']}] " if b.get("severity") else ""
        say(f"  bundle {out / 'violations' / b['id']}: {sev}{b.get('n_source')} → {b.get('n_follow')} obstacles, "
                      f"{b.get('lost')}{what}{mini}")
    if len(bundle_infos) > 12:
        say(f"  … and {len(bundle_infos) - 12} more bundles in {out / 'violations'}")
    say(findings_line(summary, min_severity))
    from lidarmt.engine.report import reports_line

    say(reports_line(paths))
    bad = sum(r["count_relation"]["k"] + r["subset_relation"]["k"] + r["crashes"] + r["timeouts"]
              for r in summary["by_n"])
    if fail_on_violation and bad:
        raise typer.Exit(1)


def findings_line(summary: dict, min_severity: str | None = None) -> str:
    """``findings (lost obstacles, all n): 2 critical, ...; evidence: 3 labelled object, 40 junk, ...``."""
    from lidarmt.engine.findings import EVIDENCE_KINDS, SEVERITIES

    sev = {k: sum((r.get("by_severity") or {}).get(k, 0) for r in summary["by_n"]) for k in SEVERITIES}
    ev = {k: sum((r.get("by_evidence") or {}).get(k, 0) for r in summary["by_n"]) for k in EVIDENCE_KINDS}
    real = sum((r.get("real_relation") or {}).get("k", 0) for r in summary["by_n"])
    alls = sum(r["subset_relation"]["k"] for r in summary["by_n"])
    return ("findings (lost obstacles, all n): " + ", ".join(f"{v} {k}" for k, v in sev.items())
            + "; evidence: " + ", ".join(f"{v} {k}" for k, v in ev.items() if v or k in ("labelled object", "junk"))
            + f"; violating pairs {alls} in all, {real} excluding junk/low-evidence"
            + (f"; bundles only for findings ≥ {min_severity}" if min_severity else ""))


def _complete_infos(out: Path, infos: list[dict]) -> list[dict]:
    """Fill in bundles that already existed (resume) from their bundle.json."""
    full = []
    for b in infos:
        if b.get("existing"):
            try:
                j = json.loads((out / "violations" / b["id"] / "bundle.json").read_text(encoding="utf-8"))
                b = {k: j.get(k) for k in ("id", "key", "relation", "reproduced", "n_source", "n_follow", "lost", "lost_details",
                                           "ddmin", "severity", "findings")} | {"has_bev": True}
            except (OSError, ValueError):
                pass
        full.append(b)
    return full
