"""``lidarmt robustness``: detection quality of one or more perception modules under each corruption and
severity, scored as the robustness literature prints it (AP, CE/mCE, RR/mRR; :mod:`lidarmt.lidar.robustness`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._options import (
    AddressOption,
    BackendOption,
    ForceCampaignOption,
    QuietOption,
    ResumeOption,
    SensorOption,
)


def register(app: typer.Typer) -> None:
    app.command(name="robustness", help=HELP)(robustness)


HELP = """Detection quality under corruption: BEV AP per corruption × severity, CE/mCE and RR/mRR (Robo3D).

On labelled frames (a KITTI object folder, a KITTI raw drive with its tracklets, a SemanticKITTI sequence,
labelled .npz frames, a simulator dataset or bag with its .labels.npz: what `lidarmt evaluate` reads), every
module in --sut perceives each frame clean and under each corruption (--transforms: weather, sensor and motion
transformations, and the LiDAR-camera misalignments when named: they need the frames' camera, KITTI's
calibration) at its three named levels (light, moderate, heavy). Detections are scored against the clean
frame's labels with evaluate's matching rule: BEV AP|R40 for cars, pedestrians and cyclists at the project's IoU
thresholds (0.5 / 0.3 / 0.3), KITTI's (0.7 / 0.5 / 0.5, in the JSON) and the "found" overlap (0.1), plus
precision, recall and found recall at the module's operating point. Then, as Robo3D (Kong et al., ICCV 2023)
defines them: CE_i = Σ_l (1 − AP_i,l) / Σ_l (1 − AP_i,l of --baseline), mCE = mean CE_i; RR_i = Σ_l AP_i,l /
(3 · clean AP), mRR = mean RR_i; the headline AP is the mean over the classes with ground truth.

The run folder gets table.txt (the papers' table: rows modules, columns corruptions), summary.json (AP per
module × corruption × severity × class), robustness.png, report.md, report.html and junit.xml. The journal makes
it resumable (--resume); --workers runs frames in parallel.

Examples:

`lidarmt robustness --data ../shared/data/kitti/training --sut apollo,apollo-512 --baseline apollo-512`

`lidarmt robustness --data kitti_raw/2011_09_26/2011_09_26_drive_0001_sync --sut apollo,apollo-sim --frames 20`

`lidarmt robustness --data data/val --transforms fog,snow,beam-loss --sut apollo --out runs/rob --resume`
"""

#: what --transforms all (and the default) selects: the families the clean labels still describe
DEFAULT_TRANSFORMS = "weather,sensor,motion"


def robustness(
    data: Annotated[str, typer.Option("--data", help="Labelled frames: KITTI object folder, KITTI raw drive with tracklet_labels.xml, SemanticKITTI sequence, labelled .npz folder, simulator dataset, or a simulated bag with its .labels.npz.")],
    sut: Annotated[str, typer.Option("--sut", help="Perception modules, comma-separated: registered names (apollo, apollo-512, apollo-3.0, apollo-sim, apollo-512-sim, apollo-streets, apollo-v3: lidarmt info), package.module:callable or exec:COMMAND.")] = "apollo",
    baseline: Annotated[str | None, typer.Option("--baseline", help="The module CE is measured against (Robo3D's reference detector; default: the first of --sut; run too when not in --sut).")] = None,
    transforms: Annotated[str, typer.Option("--transforms", help="Corruptions: all (the weather, sensor and motion families), a family, or names (lidarmt transforms lists them); object and alignment transformations change the objects and are refused, except, when named, the LiDAR-camera misalignments (spatial-misalignment; temporal-misalignment on a KITTI raw drive), scored against the clean labels, and Dong et al.'s object-level corruptions (object-shear, object-scale, object-rotate), scored against the boxes as they changed.")] = DEFAULT_TRANSFORMS,
    roi: Annotated[str, typer.Option("--roi", "--map", help="The ROI: labels (each frame's road labels, or its labelled region), an HD map or a GeoJSON.")] = "labels",
    roi_range: Annotated[float, typer.Option("--roi-range", help="ROI half-size in metres.")] = 70.0,
    map_frame: Annotated[str, typer.Option("--map-frame", help="With a map: auto, world or sensor.")] = "auto",
    frames: Annotated[int | None, typer.Option("--frames", help="Frames sampled at random without replacement (default: all).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the frame sample and the corruptions (the same sweeps as lidarmt fuzz --transforms with this seed).")] = 0,
    sut_option: Annotated[list[str], typer.Option("--sut-option", help="KEY=VALUE passed to every module's constructor (repeatable).")] = [],  # noqa: B006
    mode: Annotated[str | None, typer.Option("--mode", help="Numeric mode passed to every module: fast or exact.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Where the modules' networks run: auto, cpu, cuda or cuda:N.")] = None,
    min_points: Annotated[int, typer.Option("--min-points", help="Ground truth with fewer points in the clean frame's ROI is ignored.")] = 5,
    fov: Annotated[float, typer.Option("--fov", help="KITTI frames without a labelled region (no P2 calibration): the forward field of view counted, degrees.")] = 82.0,
    max_range: Annotated[float | None, typer.Option("--max-range", help="Count only ground truth and detections within this many metres.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one perception call may take (default: automatic); longer counts as a frame without detections and is reported.")] = None,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Worker processes (1 = in this process); clamped to the cores, the frames and the memory.")] = 1,
    backend: BackendOption = "local",
    address: AddressOption = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Point-cloud topic of a bag.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder (default runs/robustness-<recording name>).")] = None,
    resume: ResumeOption = False,
    force: ForceCampaignOption = False,
    quiet: QuietOption = False,
    sensor: SensorOption = None,
) -> None:
    from lidarmt._paths import check_writable

    # the run folder's own rule (--resume / --force) after this: never an input, never a file
    check_writable(out, inputs=(data, roi), folder=True, may_exist=True)
    from lidarmt.lidar.sensors import get_sensor

    sensor = get_sensor(sensor).name  # an unknown profile: one line listing the known ones
    from lidarmt.cli._common import (
        CampaignProgress,
        err_console,
        parse_key_values,
        run_with_bar,
        wide_console,
    )
    from lidarmt.engine.campaign import RunLock, clamp_workers, describe_timeout, environment
    from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError
    from lidarmt.lidar.mr1.campaign import select_frames
    from lidarmt.lidar.robustness import RobustnessConfig, corruption_refs
    from lidarmt.lidar.robustness_report import rich_tables, summary_dict, write_reports
    from lidarmt.lidar.specs import LABELS, RoiSpec, SourceSpec, SutSpec, is_callable_spec, open_source
    from lidarmt.lidar.transforms.registry import select, select_for_frame

    modules = [s.strip() for s in sut.split(",") if s.strip()] if "exec:" not in sut else [sut.strip()]
    if not modules:
        raise FuzzArgumentError("--sut: give at least one perception module (e.g. apollo,apollo-512)")
    baseline = (baseline or modules[0]).strip()
    if baseline not in modules:
        modules.append(baseline)
    if mode is not None and mode not in ("fast", "exact"):
        raise FuzzArgumentError(f"--mode {mode!r}: use fast or exact")
    if workers < 1:
        raise FuzzArgumentError(f"--workers {workers}: use at least 1")
    if roi_range <= 0:
        raise FuzzArgumentError(f"--roi-range {roi_range}: give a positive number of metres")
    if roi != LABELS and not is_callable_spec(roi) and not Path(roi).exists():
        raise FuzzInputError(f"--roi {roi}: no such file or folder (give labels, an HD map or a GeoJSON)")
    options = parse_key_values(sut_option, flag="--sut-option", error=FuzzArgumentError)
    if mode is not None:
        options["mode"] = mode
    if device is not None:
        from lidarmt.lidar.perception.apollo.network import resolve_device

        options["device"] = resolve_device(device, flag="--device", error=FuzzArgumentError)
    spec = ",".join(DEFAULT_TRANSFORMS if x.strip() == "all" else x for x in transforms.split(","))
    corruption_refs([t.name for t in select(spec)])  # unknown names and unscored families first, in one line
    source = SourceSpec(data, topic)
    rec = open_source(source)
    n = len(rec)
    if n == 0:
        raise FuzzInputError(f"--data {data}: no frames")
    chosen = select_frames(n, frames, seed)
    # a misalignment needs the frames' camera: one line when named and the recording has none
    picked, left_out = select_for_frame(spec, rec[chosen[0]])
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    for line in left_out:
        err_console.print(line)
    refs = corruption_refs([t.name for t in picked])
    config = RobustnessConfig(source, RoiSpec(roi, roi_range, map_frame), tuple(modules),
                              tuple(SutSpec(m, dict(options)) for m in modules), refs, chosen, seed=seed,
                              min_points=min_points, fov_deg=fov, max_range=max_range, timeout=timeout,
                              sensor=sensor)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(f"robustness-{Path(data.rstrip('/')).name.split('.')[0]}", data, roi)
    from lidarmt.cli._common import command_line

    command = command_line()
    bar = CampaignProgress(quiet=quiet, is_violation=lambda r: False, description="robustness", unit="calls")
    used, note = clamp_workers(workers, items=len(chosen), per_worker=config.worker_memory(), backend=backend,
                               address=address)
    if note:
        err_console.print(note)
    with RunLock(out) as lock:
        result = run_with_bar(config, out, bar, lock=lock, what="result", workers=used, backend=backend,
                              address=address, resume=resume, force=force)
        summary = summary_dict(config.to_dict(), result.tally, baseline=baseline)
        run_info = {"workers": used, "backend": backend, "timeout": describe_timeout(config.timeout),
                    "ran": result.ran, "resumed_from": result.resumed, "elapsed_s": round(result.elapsed, 3),
                    "throughput": (result.ran / result.elapsed) if result.elapsed > 0 and result.ran else None,
                    "environment": environment(), "command": command}
        paths = write_reports(out, summary, run=run_info)
    console = wide_console()
    for table in rich_tables(summary):
        console.print(table)
    tot = summary["total"]
    console.print(f"{result.ran} perception calls in {result.elapsed:.1f} s ({used} worker(s)); {tot['crashes']} "
                  f"crashes, {tot['timeouts']} timeouts", soft_wrap=True, highlight=False)
    console.print(f"reports: {paths['table.txt']}  {paths['summary.json']}  {paths['report.html']}", soft_wrap=True,
                  highlight=False)
