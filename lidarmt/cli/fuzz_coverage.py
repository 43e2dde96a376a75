"""``lidarmt fuzz-coverage``: neuron coverage of Apollo's CNN over source frames and their MR1 follow-ups, per n.

Does adding n points outside the ROI drive the network into states the source frames never reach? The sibling
of ``lidarmt camera coverage`` for the LiDAR half; see :mod:`lidarmt.coverage.lidar` for the method.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._options import TrialsOption


def register(app: typer.Typer) -> None:
    app.command("fuzz-coverage")(fuzz_coverage)


def fuzz_coverage(
    bag: Annotated[str, typer.Option("--bag", help="Recording: ROS1/ROS2 bag, Cyber record, PCD/KITTI/.npz folder.")],
    map: Annotated[str, typer.Option("--map", "--roi", help="The ROI: an HD map (Apollo .bin/.txt/.xml, GeoJSON) "
                                     "or its folder.")],
    out: Annotated[Path | None, typer.Option("--out", help="Run folder for the reports (refused if it holds "
                                             "files, unless --force; default runs/coverage-<recording name>).")]
    = None,
    n: Annotated[str, typer.Option("--n", help="Points to add, comma-separated.")] = "10,100,1000",
    frames: Annotated[int | None, typer.Option("--frames", help="Source frames, drawn as 'lidarmt fuzz' draws "
                                               "them with the same --seed (default: all).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed: the same follow-ups as 'lidarmt fuzz "
                                      "--seed'.")] = 0,
    trials: TrialsOption = 1,
    region: Annotated[str, typer.Option("--region", help="Where added points are drawn: disk (the HDL-64E's "
                                        "range) or grid (the CNN's square).")] = "disk",
    radius: Annotated[float | None, typer.Option("--radius", help="Disk radius (default 120) or grid half-side "
                                                 "(default 60), metres.")] = None,
    sut: Annotated[str, typer.Option("--sut", help="Perception with a torch CNN (runner.net): apollo or "
                                     "apollo-512.")] = "apollo",
    mode: Annotated[str | None, typer.Option("--mode", help="CNN numeric mode: exact (fp32, the default) or fast "
                                             "(bf16 where the CPU has it).")] = None,
    roi_range: Annotated[float, typer.Option("--roi-range", help="ROI bitmap half-size in metres.")] = 70.0,
    topic: Annotated[str | None, typer.Option("--topic", help="Point-cloud topic.")] = None,
    profile_bag: Annotated[str | None, typer.Option("--profile-bag", help="Recording whose frames give the "
                                                    "KMNC/NBC/SNAC bounds (ROI from --map; default: the source "
                                                    "frames themselves).")] = None,
    profile_frames: Annotated[int | None, typer.Option("--profile-frames", min=1, help="Frames of --profile-bag "
                                                       "to profile, evenly spaced (default: all).")] = None,
    widen: Annotated[float, typer.Option("--widen", help="Widen the bounds by this many standard deviations "
                                         "(DeepGauge: 0, 0.5, 1).")] = 0.0,
    nc_threshold: Annotated[float, typer.Option("--nc-threshold", help="NC activation threshold.")] = 0.2,
    kmnc_k: Annotated[int, typer.Option("--kmnc-k", help="KMNC sections per neuron.")] = 1000,
    tknc_k: Annotated[int, typer.Option("--tknc-k", help="TKNC: top neurons per layer.")] = 2,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the reports in an existing run folder.")] = False,
) -> None:
    """Coverage of Apollo's CNN (NC, KMNC, NBC, SNAC, TKNC) over source frames and MR1 follow-ups, per n.

    Every source frame and every follow-up (n points outside the ROI, made exactly as 'lidarmt fuzz' makes them
    with the same --seed, --trials and --region) goes through the perception once with coverage hooks on the CNN
    (channel means of every conv/deconv layer, after ReLU). Per n: the units (neurons, KMNC sections, NBC/SNAC
    corners) the follow-ups cover that no source frame covers, how many follow-ups reach such units, whether
    those are the pairs that violate MR1, and how far each follow-up moves the network from its source (largest
    neuron change in profile standard deviations). Writes report.md, summary.json, table.txt, beyond.png and
    junit.xml into --out.

    Examples:

    `lidarmt fuzz-coverage --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000 --out runs/coverage-lidar`

    `lidarmt fuzz-coverage --bag bags/demo.bag --map hdmaps/demo --frames 10 --widen 1 --out runs/cov-w1`
    """
    check_writable(out, inputs=(bag, map, profile_bag), folder=True, may_exist=True)
    import sys

    import numpy as np

    from lidarmt import __version__
    from lidarmt.cli._common import default_run_folder, progress, wide_console
    from lidarmt.coverage import CoverageConfig
    from lidarmt.coverage.lidar import build_profile, run_study
    from lidarmt.coverage.report import lidar_rich_tables, write_lidar_reports
    from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError
    from lidarmt.errors import OutputError
    from lidarmt.lidar.mr1.campaign import CampaignConfig, Evaluator, parse_ns, select_frames
    from lidarmt.lidar.mr1.inject import CNN_HALF_RANGE_M, HDL64E_RANGE_M, Region
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec, is_callable_spec, open_source

    out = out or default_run_folder(f"coverage-{Path(bag.rstrip('/')).name.split('.')[0]}", bag, map, profile_bag)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutputError(f"{out}: exists and is not empty; pass --force to overwrite its reports or choose "
                          f"another --out")
    if region not in ("disk", "grid"):
        raise FuzzArgumentError(f"--region {region!r}: use disk or grid")
    if mode is not None and mode not in ("fast", "exact"):
        raise FuzzArgumentError(f"--mode {mode!r}: use fast or exact")
    if not is_callable_spec(map) and not Path(map).exists():
        raise FuzzInputError(f"--map {map}: no such file or folder")
    config = CoverageConfig(nc_threshold=nc_threshold, kmnc_k=kmnc_k, tknc_k=tknc_k, widen=widen)
    size = radius if radius is not None else (HDL64E_RANGE_M if region == "disk" else CNN_HALF_RANGE_M)
    rec = open_source(SourceSpec(bag, topic))
    chosen = select_frames(len(rec), frames, seed)
    getattr(rec, "close", lambda: None)()
    options = {} if mode is None else {"mode": mode}
    cfg = CampaignConfig(SourceSpec(bag, topic), RoiSpec(map, roi_range), SutSpec(sut, options), parse_ns(n),
                         chosen, seed=seed, trials=trials, region=Region(region, float(size)))  # type: ignore[arg-type]
    t0 = time.perf_counter()
    ev = Evaluator(cfg, enforce_timeout=False)
    prof = None
    with progress() as bar:
        if profile_bag is not None:
            prec = open_source(SourceSpec(profile_bag, topic))
            idx = np.arange(len(prec))
            if profile_frames is not None and profile_frames < len(idx):
                idx = idx[np.linspace(0, len(idx) - 1, profile_frames).round().astype(int)]
            task = bar.add_task("profile", total=len(idx), rate="")
            prof = build_profile(ev, [int(i) for i in idx], source=prec,
                                 progress=lambda k: bar.update(task, advance=k))
            prof.meta["recording"] = profile_bag
        task = bar.add_task("coverage", total=len(chosen) * (1 + len(cfg.ns) * trials), rate="")
        summary = run_study(ev, profile=prof, config=config, progress=lambda k: bar.update(task, advance=k))
    if prof is not None:
        summary["profile"] = f"{profile_bag} ({prof.count} frames)"
    run = {"command": "lidarmt " + " ".join(sys.argv[1:]) if sys.argv[1:] else "", "bag": bag, "map": map,
           "seconds": round(time.perf_counter() - t0, 2), "lidarmt": __version__}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{out}: cannot create the run folder ({err.strerror or err})") from err
    paths = write_lidar_reports(out, summary, run=run)
    wide = wide_console()
    for t in lidar_rich_tables(summary):
        wide.print(t)
    wide.print(f"{len(summary['frames'])} frames × (1 + {len(cfg.ns)}·{trials}) perception calls in "
               f"{run['seconds']:.1f} s")
    from lidarmt.engine.report import reports_line

    wide.print(reports_line(paths), soft_wrap=True)
