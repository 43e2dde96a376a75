"""``lidarmt camera search``: DeepTest's coverage-guided search, TACTIC's (1+1)-ES and random search."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._options import QuietBarOption


def register(app: typer.Typer) -> None:
    app.command(name="search", help=SEARCH_HELP)(search)


SEARCH_HELP = """Search for transformed images that matter: coverage-guided (DeepTest) or evolutionary (TACTIC).

--strategy deeptest: DeepTest's Algorithm 1. Per seed image, two random simple transformations (the
guided-search parameter ranges of DeepTest's code) are composed; a mutant is kept when it raises the
cumulative neuron coverage (NC), and its transformations are queued and reused for the seed; a seed stops after
--tries failed attempts. An unguided twin (two random transformations, no queue) runs on the same seeds with
the same number of attempts, so the report compares their cumulative NC honestly. Every mutant is judged by
the camera relations (DeepTest Eq. 2 with labels, DeepRoad's |Δθ| otherwise). --budget is the number of
attempts in all (split evenly over the seeds).

--strategy es: TACTIC's (1+1)-ES over the continuous space of one transformation (--space: its intensity and
style parameters), with the 1/5 success rule (σ₀ = 5 in TACTIC's style units, scaled to each parameter's
range) and TACTIC's stop (60 steps without improvement, 150 in all); fitness Fc + Fd/(Fd+1) on the seed batch,
Fc the coverage gain (--criterion kmnc or nbc, needs the model's profile), Fd the mean steering change. A
random-search arm runs beside it on the same budget (--strategy random runs it alone). --budget is the number
of candidate conditions per arm.

--space with a MUNIT translator (munit-night, a translator.pt; lidarmt camera translators): TACTIC's search
over the style vector s0..s7 in [-3, 3]. The seeds are encoded once, so a candidate costs one decoder pass.
A third arm, deeproad, is DeepRoad's single-style translation (--baseline: by default unit-X for munit-X when
installed, else the MUNIT at style 0, the prior's mode) of the same seeds, judged by the same fitness and
errors; it has one candidate, so the rest of its budget is unusable. The report has one row per arm
(candidates, images translated, KMNC and NBC reached, errors, errors per image, best fitness). A UNIT
translator has no style space: use it in lidarmt camera fuzz --transforms.

The run folder gets the journal (every candidate; --resume continues a killed search exactly), summary.json,
report.md, table.txt, junit.xml, search.png (coverage or best fitness per evaluation), conditions.png (es/random:
the best conditions on a seed) and bug bundles for the worst erroneous behaviours (--bundles), which `lidarmt
replay` reproduces.

Examples:

`lidarmt camera search --strategy deeptest --model dave-orig --images ../shared/data/udacity --budget 300`

`lidarmt camera search --strategy es --space fog --criterion kmnc --model dave-orig --images ../shared/data/udacity --budget 60`

`lidarmt camera search --strategy es --space munit-night --model dave2 --images ../shared/data/udacity --budget 60`
"""


def _seeds(available: int, count: int) -> tuple[int, ...]:
    """``count`` seed frames spread evenly over the source (DeepTest: every 50th frame)."""
    count = max(1, min(count, available))
    step = max(1, available // count)
    return tuple(range(0, step * count, step))


def search(
    images: Annotated[str, typer.Option("--images", help="Image source: Udacity folder, image folder, or a recording's camera topic.")],
    strategy: Annotated[str, typer.Option("--strategy", help="deeptest (coverage-guided greedy search), es (TACTIC's (1+1)-ES with a random arm) or random.")] = "deeptest",
    model: Annotated[str, typer.Option("--model", help="The steering model: a zoo name, a Keras .h5 path or package.module:callable.")] = "dave-orig",
    budget: Annotated[int, typer.Option("--budget", help="deeptest: attempts in all; es/random: candidate conditions per arm.")] = 100,
    space: Annotated[str | None, typer.Option("--space", help="es/random: the transformation whose continuous parameters are searched (fog, rain, snow, night, glare, droplets, dirt, a simple one, or a MUNIT translator's style: munit-night, a translator.pt).")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="es/random: DeepRoad's single-style translation as a third arm: a translator (UNIT, or MUNIT at style 0), or none. Default for a translator space munit-X: unit-X when installed, else munit-X at style 0; none for other spaces.")] = None,
    criterion: Annotated[str, typer.Option("--criterion", help="es/random: the coverage of Fc, kmnc or nbc.")] = "kmnc",
    frames: Annotated[int | None, typer.Option("--frames", help="Seed images, spread evenly over the source (default: deeptest 100 or every 50th frame, es/random 20).")] = None,
    tries: Annotated[int, typer.Option("--tries", help="deeptest: failed attempts after which a seed stops (DeepTest: 10).")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Search seed; every candidate is reproducible from (seed, step or seed image, attempt, arm).")] = 0,
    profile: Annotated[str, typer.Option("--profile", help="The model's profile (KMNC/NBC bounds): auto (beside the model's weights) or a file.")] = "auto",
    lam: Annotated[float, typer.Option("--lambda", help="DeepTest Eq. 2's λ for the bundles (labelled sources).")] = 5.0,
    tolerance: Annotated[float, typer.Option("--tolerance", help="DeepRoad's ε in degrees for the bundles (sources without labels, and ES conditions).")] = 10.0,
    bundles: Annotated[int, typer.Option("--bundles", help="Bug bundles for the worst erroneous behaviours found.")] = 5,
    topic: Annotated[str | None, typer.Option("--topic", help="Camera topic of a recording.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Where the model and the translators run: auto (cuda when available), cpu, cuda or cuda:N.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one model call may take; default automatic.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder (default runs/search-<strategy>-<model>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the search in --out from its journal.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Discard an existing search in --out and start over.")] = False,
    quiet: QuietBarOption = False,
) -> None:
    check_writable(out, inputs=(images, model), folder=True, may_exist=True)
    from lidarmt.camera.campaign import model_ref
    from lidarmt.camera.models.registry import resolve_options
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.engine.campaign import RunLock
    from lidarmt.search.camera import CameraSearchConfig, camera_space
    from lidarmt.search.errors import SearchArgumentError

    if bundles < 0:
        raise SearchArgumentError(f"--bundles {bundles}: give 0 or more")
    if seed < 0:
        raise SearchArgumentError(f"--seed {seed}: give 0 or a positive integer")
    for name, v in (("--lambda", lam), ("--tolerance", tolerance)):
        if not (v > 0 and math.isfinite(v)):
            raise SearchArgumentError(f"{name} {v}: give a positive number")
    if strategy != "deeptest" and space is not None:
        camera_space(space)  # one line if unknown or without parameters
    baseline = _baseline(strategy, space, baseline)
    options = {}
    if device is not None:
        from lidarmt.lidar.perception.apollo.network import resolve_device

        options["device"] = resolve_device(device, flag="--device", error=SearchArgumentError)
    with open_images(images, topic=topic) as src:
        n = len(src)
    count = frames if frames is not None else (min(100, max(1, n // 50)) if strategy == "deeptest" else 20)
    if count < 1:
        raise SearchArgumentError(f"--frames {count}: give at least one seed image")
    chosen = _seeds(n, count)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(f"search-{strategy}-{Path(model).stem}", images, model)
    config = CameraSearchConfig(images, model_ref(model, resolve_options(model, options)), strategy, chosen, budget, seed=seed, space=space,
                                criterion=criterion, tries=tries, topic=topic, timeout=timeout,
                                profile=None if profile == "none" else profile, baseline=baseline,
                                run_dir=str(out))
    from lidarmt.cli._common import command_line

    command = command_line()
    with RunLock(out) as lock:
        _run(config, out, lock=lock, resume=resume, force=force, bundles=bundles, lam=lam, tolerance=tolerance,
             command=command, quiet=quiet)


def _baseline(strategy: str, space: str | None, given: str | None) -> str | None:
    """The DeepRoad-style arm's translator: as given (none: no arm), else for a translator space munit-X unit-X
    when installed, else the space itself (its style 0)."""
    from lidarmt.camera.transforms.registry import get_transform, is_translator
    from lidarmt.search.errors import SearchArgumentError

    if given is not None and given.strip().lower() == "none":
        return None
    if strategy == "deeptest":
        if given is not None:
            raise SearchArgumentError("--baseline: DeepRoad's single-style arm is for --strategy es or random")
        return None
    if given is not None:
        if not is_translator(given):
            from lidarmt.camera.translate.registry import available

            raise SearchArgumentError(f"--baseline {given!r}: not a translator; give one of "
                                      f"{', '.join(available()) or '(none installed)'}, a translator.pt or none")
        get_transform(given)
        return given.strip()
    if space is None or not is_translator(space):
        return None
    from lidarmt.camera.translate.registry import available

    name = space.strip()
    if name.startswith("munit-") and name[1:] in available():
        return name[1:]
    return name


def _run(config, out: Path, *, lock, resume: bool, force: bool, bundles: int, lam: float, tolerance: float,
         command: str, quiet: bool) -> None:
    from lidarmt.cli._common import CampaignProgress, console, err_console
    from lidarmt.engine.campaign import environment, make_bundles, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.search.camera import arm_comparison, comparison_table
    from lidarmt.search.report import camera_summary, camera_table, write_camera_reports

    bar = CampaignProgress(quiet=quiet, description="search", unit="candidates", tally=config.new_tally(),
                           count=lambda t: len(_worst(config, t, lam=lam, tolerance=tolerance)),
                           journal=out / JOURNAL_NAME)
    try:
        result = run_campaign(config, out, resume=resume, force=force, on_pair=bar.on_pair, on_start=bar.on_start,
                              lock=lock, header_extra={"command": command, "environment": environment()})
    except KeyboardInterrupt:
        bar.stop()
        err_console.print(f"interrupted: every candidate so far is in {out / JOURNAL_NAME}; continue with the "
                          "same command plus --resume")
        raise
    finally:
        bar.stop()
    tally = result.tally
    summary = camera_summary(config, tally)
    comparison = arm_comparison(config, tally)
    if comparison is not None:
        summary["comparison"] = comparison
    picked = _worst(config, tally, lam=lam, tolerance=tolerance)[:bundles]
    infos: list[dict] = []
    if picked:
        infos = make_bundles(config, out, [k for k, _ in picked], opts_for=dict(picked).__getitem__,
                             command=command)
        infos = [_complete(out, b) for b in infos]
    if config.strategy != "deeptest":
        _conditions_picture(config, summary, out / "conditions.png")
    run_info = {"ran": result.ran, "resumed_from": result.resumed, "elapsed_s": round(result.elapsed, 3),
                "environment": environment(), "command": command, "bundles": infos}
    paths = write_camera_reports(out, summary, run=run_info, bundles=infos)
    table = camera_table(summary)
    console.print(table, highlight=False, markup=False, soft_wrap=True)
    if comparison is not None and comparison["note"] not in table:  # unless the report's table shows it
        console.print(comparison_table(comparison), highlight=False, markup=False, soft_wrap=True)
    for b in infos:
        if not b.get("error"):
            console.print(f"  bundle {out / 'violations' / b['id']}: {b.get('params', '')}: "
                          f"{math.degrees(b['pred']):+.1f}° → {math.degrees(b['pred_t']):+.1f}°", highlight=False,
                          soft_wrap=True)
    from lidarmt.engine.report import reports_line

    console.print(reports_line(paths), soft_wrap=True)


def _worst(config, tally, *, lam: float, tolerance: float) -> list[tuple[tuple, dict]]:
    """Bundle keys and options of the erroneous behaviours found: DeepTest's kept mutants breaking Eq. 2
    (labelled sources) or DeepRoad's ε; an ES/random condition's seeds whose angle changed by more than ε. The
    worst of each seed image come first (worst first), then the others."""
    found: list[tuple[float, tuple, dict]] = []
    if config.strategy == "deeptest":
        for r in tally.arm(0):
            if r["status"] != "ok" or not r["kept"]:
                continue
            if r.get("label") is not None and r.get("mse_orig") is not None:
                dev = (r["pred_t"] - r["label"]) ** 2
                bad = dev > lam * r["mse_orig"]
                rel = {"name": "deeptest", "lambda": lam, "epsilon": 0.0, "mse_orig": r["mse_orig"]}
            else:
                dev = abs(r["pred_t"] - r["pred"])
                bad = dev > math.radians(tolerance)
                rel = {"name": "deeproad", "tolerance_deg": tolerance}
            if bad:
                found.append((dev, (*r["key"], 0), {"steps": r["steps"], "frame": r["frame"], "relation": rel}))
    else:
        from lidarmt.camera.campaign import transform_seed

        for arm in config.arms:
            for r in tally.arm(arm):
                if r["status"] != "ok":
                    continue
                for j, (p, pt) in enumerate(zip(r["pred"], r["pred_t"], strict=True)):
                    dev = abs(pt - p)
                    if dev > math.radians(tolerance):
                        name = str(r.get("transform") or config.space)
                        steps = [{"transform": name, "params": r["params"],
                                  "seed": transform_seed(config.seed, r["frames"][j], name, 0, 0)}]
                        found.append((dev, (r["key"][0], 0, arm, j), {
                            "steps": steps, "frame": r["frames"][j],
                            "relation": {"name": "deeproad", "tolerance_deg": tolerance}}))
    found.sort(key=lambda t: (-t[0], t[1]))
    # the worst per seed image first (so a few bundles show different images), then the rest, worst first
    firsts, rest, seen = [], [], set()
    for item in found:
        (rest if item[2]["frame"] in seen else firsts).append(item)
        seen.add(item[2]["frame"])
    return [(k, o) for _, k, o in firsts + rest]


def _complete(out: Path, b: dict) -> dict:
    if not b.get("existing"):
        return b
    import json

    try:
        j = json.loads((out / "violations" / b["id"] / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return b
    return {"id": b["id"], "key": j.get("key"), "params": j.get("params_label"), "frame_id": j.get("frame_id"),
            "pred": j.get("pred"), "pred_t": j.get("pred_t"), "reproduced": j.get("reproduced")}


def _conditions_picture(config, summary: dict, path: Path) -> None:
    """The best conditions of each arm applied to the first seed, side by side, with their parameters."""
    import cv2
    import numpy as np

    from lidarmt._atomic import atomic_path
    from lidarmt.camera.campaign import transform_seed
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.base import apply_window
    from lidarmt.camera.transforms.registry import get_transform
    from lidarmt.search.camera import BASELINE_ARM

    device = config.model.options.get("device")
    with open_images(config.images, topic=config.topic) as src:
        img = src[config.frames[0]].image
    rows = []
    for name, arm in summary["arms"].items():
        spec = str(config.baseline if name == config.arm_names[BASELINE_ARM] else config.space)
        tr = get_transform(spec)
        if device and tr.family == "translator":
            tr = tr.with_options(device=str(device))
        seed = transform_seed(config.seed, config.frames[0], tr.name, 0, 0)
        tiles = []
        for i, row in enumerate(arm["best"][:4], 1):
            tile = apply_window(tr, img[None], row["params"], seed)[0].copy()
            cap = np.full((34, tile.shape[1], 3), 255, np.uint8)
            cv2.putText(cap, f"{name} #{i} fitness {row['fitness']:.3f}", (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                        (0, 0, 0), 1, cv2.LINE_AA)
            err = "/".join(str(v) for v in row["errors"].values())
            cv2.putText(cap, f"err 10/20/30/40: {err}", (4, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1,
                        cv2.LINE_AA)
            tiles.append(np.concatenate([tile, cap], axis=0))
        if tiles:
            rows.append(np.concatenate([np.concatenate([t, np.full((t.shape[0], 4, 3), 255, np.uint8)], axis=1)
                                        for t in tiles], axis=1))
    if not rows:
        return
    w = max(r.shape[1] for r in rows)
    sheet = np.concatenate([np.pad(r, ((0, 4), (0, w - r.shape[1]), (0, 0)), constant_values=255) for r in rows])
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(sheet[..., ::-1]))
    if ok:
        with atomic_path(path) as tmp:
            tmp.write_bytes(buf.tobytes())
