"""``lidarmt camera fuzz``: DeepTest / DeepRoad relations on steering models, on the shared campaign engine."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from lidarmt._paths import check_writable
from lidarmt.cli._options import AddressOption, BackendOption, ForceCampaignOption, QuietOption, ResumeOption


def register(app: typer.Typer) -> None:
    app.command(name="fuzz", help=FUZZ_HELP)(fuzz)


FUZZ_HELP = """Check metamorphic relations of steering models under image transformations (DeepTest, DeepRoad).

For each sampled seed frame, each model predicts the seed once and every transformed image (each
transformation at every setting of its grid: DeepTest's Table 4 for the simple ones, intensities 0.25..1 for
the weather, the mirror, one style per trial for a learned translator), in batches. Raw predictions go to an append-only journal (resumable with
--resume); the relations are evaluated on it afterwards:

* with labels (a Udacity folder, the demo bag's steering topic): DeepTest Eq. 2, (θ(τ(i)) − θᵗ)² ≤ λ·MSE_orig,
  MSE_orig measured on the seed frames in the same run, with Eq. 3's filter |MSE(t,p) − MSE_orig| ≤ ε for the
  simple transformations (Tables 7 and 8);
* always: DeepRoad's |θ(i) − θ(τ(i))| ≤ ε at 10/20/30/40°; the mirror must negate the angle.

The run folder gets summary.json, junit.xml, report.md, table.txt, mse.png, worst.png (the worst cases with
steering arrows) and a bug bundle per violation kept (--bundles per model and transformation), which
`lidarmt replay` reproduces bit for bit.

Exit status: 0 when the campaign ran (whatever it found); 1 with --fail-on-violation when a pair violated a
relation or a model crashed or timed out; 2 on bad input.

Examples:

`lidarmt camera fuzz --images ../shared/data/udacity --model dave-orig,epoch,dave2 --transforms all --frames 100`

`lidarmt camera fuzz --images drive/ --model path/to/model.h5 --transforms fog,rain,mirror --tolerance 20`

`lidarmt camera fuzz --images bags/demo.bag --model dave-orig --transforms simple --out runs/cam --resume`

Learned weather (DeepRoad's UNIT, TACTIC's MUNIT; lidarmt camera translators lists them) is named like any
transformation, or all installed with `translator`; `all` does not include them (each costs a network pass per
image, like the steering model). A MUNIT translator draws its style from the prior with the pair's seed, so
--trials N gives N styles per frame; translators run on --device with the models:

`lidarmt camera fuzz --images ../shared/data/udacity --model dave2 --transforms munit-night,unit-night --trials 3`

`lidarmt camera fuzz --images drive/ --model dave2 --transforms fog,runs/tr/translator.pt --device cuda`

Follow-ups made elsewhere (DeepRoad's GAN, TACTIC's released scenes): --pairs SOURCES FOLLOW_UPS matches two image
folders by file name (unmatched names are reported) and judges each pair with DeepRoad's label-free relation;
bundles carry both images. Models by path: a weights file from `lidarmt camera train`, a Keras file with its input
recipe (options apply to the model they name: [MODEL:]KEY=VALUE):

`lidarmt camera fuzz --pairs sunny/ night/ --model dave2,runs/x/dave2.pt --tolerance 20`

`lidarmt camera fuzz --images drive/ --model dave2,model.h5 --model-option model.h5:crop=60:-25 --model-option model.h5:frame=none`
"""


def _positive(name: str, value: float) -> None:
    from lidarmt.camera.errors import CameraArgumentError

    if not (value > 0 and math.isfinite(value)):
        raise CameraArgumentError(f"{name} {value}: give a positive number")


def fuzz(
    images: Annotated[str | None, typer.Option("--images", help="Image source: Udacity folder (center/ + CSV), image folder, or a ROS1/ROS2 bag / Cyber record with a camera topic.")] = None,
    pairs: Annotated[tuple[str, str] | None, typer.Option("--pairs", metavar="SOURCES FOLLOW_UPS", help="Instead of --images and --transforms: follow-ups made elsewhere (a GAN, a diffusion editor). Two image sources matched by file name (without the extension); unmatched names are reported. FOLLOW_UPS may list several folders, comma-separated (night/,rain/,snow/), each reported as its own transformation. Judged by DeepRoad's label-free relation at --tolerance.")] = None,
    model: Annotated[str, typer.Option("--model", help="Steering models, comma-separated: zoo names (lidarmt camera models), Keras .h5 and .onnx paths, package.module:callable.")] = "dave-orig",
    transforms: Annotated[str, typer.Option("--transforms", help="all (simple, weather, mirror; no translator), simple, weather, mirror, translator (every installed learned translator), or comma-separated names, translator names and translator.pt paths.")] = "all",
    frames: Annotated[int | None, typer.Option("--frames", help="Seed frames sampled at random without replacement (default: all).")] = None,
    lam: Annotated[float, typer.Option("--lambda", help="DeepTest Eq. 2's λ: a pair errs when (θ(τ(i)) − θᵗ)² > λ·MSE_orig.")] = 5.0,
    epsilon: Annotated[float, typer.Option("--epsilon", help="DeepTest Eq. 3's ε: a simple transformation's setting counts when |MSE(t,p) − MSE_orig| ≤ ε.")] = 0.03,
    tolerance: Annotated[float, typer.Option("--tolerance", help="DeepRoad's ε in degrees, deciding violations when the source has no labels.")] = 10.0,
    min_change: Annotated[float, typer.Option("--min-change", help="Δθ in degrees: a DeepTest error whose angle moved less than this is reported apart as 'no real change' (as is one whose seed prediction already broke Eq. 2: 'seed already in error'), not in the headline.")] = 2.0,
    seed: Annotated[int, typer.Option("--seed", help="Campaign seed; every transformed image is reproducible from (seed, frame, transformation, parameter, trial).")] = 0,
    trials: Annotated[int, typer.Option("--trials", help="Transformed images per frame and setting (random weather styles differ per trial).")] = 1,
    model_option: Annotated[list[str], typer.Option("--model-option", help="[MODEL:]KEY=VALUE for the model named (its number in --model, 1-based, or its name); without MODEL, for every model that takes KEY (e.g. crop=60:-25 goes to the Keras models, weights= to the zoo's). Repeatable.")] = [],  # noqa: B006
    recipe: Annotated[Path | None, typer.Option("--recipe", help="Input recipe (JSON, keys as --model-option: crop, frame, resize, colour, scale, output, sign) for the Keras models; default: MODEL.h5.recipe.json beside each when present. Recorded in the journal and bundles.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="Where every model and translator runs: auto (cuda when available), cpu, cuda or cuda:N; resolved once and passed as device=... (docs/gpu.md).")] = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Camera topic of a recording (default: the only one, or lidarmt simulate's).")] = None,
    workers: Annotated[int, typer.Option("--workers", "-j", help="Worker processes (1 = in this process); clamped to CPU cores, frames and memory.")] = 1,
    backend: BackendOption = "local",
    address: AddressOption = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")] = 64,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds one model call (a batch) may take; default automatic (900 s for the first call, then 30x it, at least 60 s).")] = None,
    bundles: Annotated[int, typer.Option("--bundles", help="Bug bundles kept per model and transformation (the worst violations).")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder (default runs/camera-<source name>).")] = None,
    resume: ResumeOption = False,
    force: ForceCampaignOption = False,
    fail_on_violation: Annotated[bool, typer.Option("--fail-on-violation", help="Exit 1 when a pair violates a relation or a model crashed/timed out (for CI).")] = False,
    quiet: QuietOption = False,
) -> None:
    check_writable(out, inputs=(images, *(pairs or ()), recipe), folder=True, may_exist=True)
    from lidarmt.camera.campaign import CameraCampaignConfig, transform_refs
    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.relations import Criteria
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.registry import select
    from lidarmt.cli._common import err_console, show
    from lidarmt.engine.campaign import RunLock, clamp_workers, select_items

    for name, value in (("--lambda", lam), ("--epsilon", epsilon), ("--tolerance", tolerance)):
        _positive(name, value)
    if not (math.isfinite(min_change) and min_change >= 0):
        raise CameraArgumentError(f"--min-change {min_change}: give 0 or more degrees")
    if (images is None) == (pairs is None):
        raise CameraArgumentError("give either --images SOURCE (lidarmt transforms the images) or --pairs SOURCES "
                                  "FOLLOW_UPS (follow-ups made elsewhere)")
    if bundles < 0:
        raise CameraArgumentError(f"--bundles {bundles}: give 0 or more")
    names = [m.strip() for m in model.split(",") if m.strip()]
    if not names:
        raise CameraArgumentError("--model: give at least one steering model (see lidarmt camera models)")
    if len(set(names)) != len(names):
        raise CameraArgumentError(f"--model {model!r}: a model is named twice")
    from lidarmt.camera.campaign import model_ref
    from lidarmt.camera.models.registry import option_keys
    from lidarmt.cli.camera.predict import model_options

    per_model = model_options(names, model_option, recipe=None if recipe is None else str(recipe))
    resolved = None
    if device is not None:
        from lidarmt.lidar.perception.apollo.network import resolve_device

        resolved = resolve_device(device, flag="--device", error=CameraArgumentError)
        for n, o in zip(names, per_model, strict=True):
            keys = option_keys(n)
            if keys is None or "device" in keys:
                o["device"] = resolved
    follow_ups: tuple[str, ...] = ()
    pairings: list = []
    if pairs is not None:
        from lidarmt.camera.campaign import TransformRef
        from lidarmt.camera.pairs import match, transform_name

        images, fu_arg = pairs
        follow_ups = tuple(f.strip() for f in fu_arg.split(",") if f.strip())
        if not follow_ups:
            raise CameraArgumentError("--pairs SOURCES FOLLOW_UPS: give the folder of follow-ups (several: "
                                      "comma-separated, e.g. night/,rain/,snow/)")
        tnames = [transform_name(f) for f in follow_ups]
        if len(set(tnames)) != len(tnames):
            raise CameraArgumentError(f"--pairs: the follow-up folders {', '.join(follow_ups)} share a name; "
                                      "each set is reported by its folder's name, so name them apart")
        if trials != 1:
            raise CameraArgumentError(f"--trials {trials}: a pairs campaign has one follow-up per image and set")
        for f in follow_ups:
            pairings.append(match(images, f, topic=topic))
            err_console.print(f"--pairs {show(f)}: {show(pairings[-1].describe())}", highlight=False, soft_wrap=True)
        matched = sorted({s for p in pairings for s, _ in p.pairs})
        chosen = tuple(sorted(matched[i] for i in select_items(len(matched), frames, seed, what="pairs",
                                                               source=images)))
        refs = tuple(TransformRef(n, ({},)) for n in tnames)
        scene = _scene_check(images, follow_ups, pairings, set(chosen), topic=topic)
    else:
        refs = transform_refs(select(transforms), device=resolved)
        with open_images(images, topic=topic) as src:
            chosen = select_items(len(src), frames, seed, what="images", source=images)
            from lidarmt.camera.models.zoo import history_note, spec_history

            if note := history_note(src, [spec_history(n) for n in names]):
                err_console.print(note, highlight=False, soft_wrap=True)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(
        "camera-" + Path(images.rstrip("/")).name.split(".")[0], images, *(pairs or ()), recipe)
    from lidarmt.camera.campaign import implementation_for

    config = CameraCampaignConfig(images, tuple(model_ref(n, o) for n, o in zip(names, per_model, strict=True)),
                                  refs, chosen, seed=seed, trials=trials, topic=topic, timeout=timeout,
                                  batch_size=batch_size, follow_ups=follow_ups,
                                  paired=tuple(tuple(s for s, _ in p.pairs) for p in pairings),
                                  transform_impl=implementation_for(out, resume=resume) if pairs is None
                                  else "reference")  # follow-ups made elsewhere: nothing to implement
    criteria = Criteria(lam, epsilon, tolerance, min_change)
    from lidarmt.cli._common import command_line

    command = command_line()
    used, note = clamp_workers(workers, items=len(chosen), per_worker=config.worker_memory(), backend=backend,
                               address=address)
    if note:
        err_console.print(note)
    with RunLock(out) as lock:
        _run(config, criteria, out, lock=lock, workers=used, backend=backend, address=address, resume=resume, force=force, bundles=bundles,
             command=command, quiet=quiet, fail_on_violation=fail_on_violation,
             extra_run=None if not pairings else {"pairs": [
                 {"follow_ups": f, "matched": len(p.pairs), "unmatched_sources": list(p.unmatched_sources),
                  "unmatched_follow_ups": list(p.unmatched_follow_ups), **scene[f]}
                 for f, p in zip(follow_ups, pairings, strict=True)]})


def _scene_check(images: str, follow_ups: tuple[str, ...], pairings: list, chosen: set[int], *,
                 topic: str | None) -> dict[str, dict]:
    """How alike each judged pair's two images are (:func:`lidarmt.camera.pairs.scene_similarity`): a warning per
    pair whose follow-up seems to show another scene (DeepRoad's relation does not apply), and one per set;
    ``{follow_ups: {"similarity_min", "similarity_mean", "different_scene": [frame ids]}}`` for run.json."""
    from lidarmt.camera.pairs import SAME_SCENE_MIN, SIMILARITY_RULE, check_pairs
    from lidarmt.cli._common import err_console

    out: dict[str, dict] = {}
    for f, p in zip(follow_ups, pairings, strict=True):
        sims = check_pairs(images, f, [(i, j) for i, j in p.pairs if i in chosen], topic=topic)
        bad = [(fid, v) for fid, v in sims if v < SAME_SCENE_MIN]
        for fid, v in bad[:10]:
            err_console.print(f"warning: --pairs {f}: {fid}: source and follow-up do not look like the same scene "
                              f"(similarity {v:.3f} < {SAME_SCENE_MIN:g}); DeepRoad's relation assumes the same road",
                              highlight=False, soft_wrap=True, markup=False)
        if bad:
            err_console.print(f"warning: --pairs {f}: {len(bad)} of {len(sims)} pairs do not look like the same "
                              f"scene ({SIMILARITY_RULE}); their verdicts say little", highlight=False,
                              soft_wrap=True, markup=False)
        vals = [v for _, v in sims]
        out[f] = {"similarity_min": min(vals) if vals else None,
                  "similarity_mean": round(sum(vals) / len(vals), 4) if vals else None,
                  "different_scene": [fid for fid, _ in bad], "similarity_rule": SIMILARITY_RULE}
    return out

def _run(config, criteria, out: Path, *, lock, workers: int, resume: bool, force: bool, bundles: int, command: str,
         quiet: bool, fail_on_violation: bool, backend: str = "local", address: str | None = None,
         extra_run: dict | None = None) -> None:
    from lidarmt.camera.bundle import write_sheet
    from lidarmt.camera.report import rich_tables, write_reports
    from lidarmt.cli._common import CampaignProgress, console, err_console, progress, show, wide_console
    from lidarmt.engine.campaign import describe_timeout, environment, make_bundles, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records

    def interrupted() -> None:
        err_console.print(f"interrupted: every verdict so far is in {out / JOURNAL_NAME}; continue with the same "
                          "command plus --resume")

    bar = CampaignProgress(quiet=quiet, description="camera", unit="pairs", tally=config.new_tally(),
                           count=lambda t: len(t.violations(criteria)), journal=out / JOURNAL_NAME)
    try:
        result = run_campaign(config, out, workers=workers, backend=backend, address=address, resume=resume,
                              force=force, on_pair=bar.on_pair,
                              on_start=bar.on_start, lock=lock,
                              header_extra={"command": command, "environment": environment(),
                                            "criteria": criteria.to_dict()})
    except KeyboardInterrupt:
        bar.stop()
        interrupted()
        raise
    finally:
        bar.stop()
    tally = result.tally
    violations = tally.violations(criteria)
    # bundles: the worst violations of each (model, transformation)
    picked: list = []
    per: dict[tuple[int, int], int] = {}
    for key, dev in violations:
        mt = (key[1], key[2])
        if per.get(mt, 0) < bundles:
            per[mt] = per.get(mt, 0) + 1
            picked.append((key, dev))
    labelled = tally.has_labels()
    bundle_infos: list[dict] = []
    if picked:
        bbar = None if quiet else progress()
        btask = bbar.add_task("bundles", total=len(picked), rate="") if bbar is not None else None
        if bbar is not None:
            bbar.start()
        def relation(key) -> dict:  # MSE_orig differs per model
            if labelled:
                return {"relation": {"name": "deeptest", "lambda": criteria.lam, "epsilon": criteria.epsilon,
                                     "mse_orig": tally.mse_orig(key[1])}}
            return {"relation": {"name": "deeproad", "tolerance_deg": criteria.tolerance_deg}}

        try:
            bundle_infos = make_bundles(
                config, out, [k for k, _ in picked], workers=workers, backend=backend, address=address,
                opts_for=relation, command=command,
                on_bundle=lambda info: bbar.update(btask, advance=1) if bbar is not None else None)
        except KeyboardInterrupt:
            if bbar is not None:
                bbar.stop()
            interrupted()
            raise
        finally:
            if bbar is not None:
                bbar.stop()
        bundle_infos = [_complete(out, b) for b in bundle_infos]
    if bundle_infos:
        import cv2

        pics = []
        for b in [b for b in bundle_infos if not b.get("error")][:8]:  # a failed bundle has no picture
            img = cv2.imread(str(out / "violations" / b["id"] / "pair.png"), cv2.IMREAD_COLOR)
            if img is not None:
                pics.append(img[..., ::-1])
        write_sheet(out / "worst.png", pics)
    summary = tally.summary(config.to_dict(), criteria, config.param_labels())
    counts: dict[tuple[str, str, int], int] = {}
    for key, _ in violations:
        k = (tally.models[key[1]], config.transforms[key[2]].name, key[3])
        counts[k] = counts.get(k, 0) + 1
    findings = [r for r in iter_records(out / JOURNAL_NAME) if r["status"] != "ok"]
    findings.sort(key=lambda r: tuple(r["key"]))
    run_info = {"workers": workers, "backend": backend, "timeout": describe_timeout(config.timeout), "ran": result.ran,
                "resumed_from": result.resumed, "elapsed_s": round(result.elapsed, 3),
                "throughput": (result.ran / result.elapsed) if result.elapsed > 0 and result.ran else None,
                "environment": environment(), "command": command, "violations": len(violations),
                "bundles": bundle_infos, **(extra_run or {})}
    paths = write_reports(out, summary, run=run_info, bundles=bundle_infos, findings=findings, violations=counts)
    wide = wide_console()
    for t in rich_tables(summary):
        wide.print(t)
    if run_info["throughput"]:
        console.print(f"{result.ran} pairs in {result.elapsed:.1f} s ({run_info['throughput']:.1f} pairs/s, "
                      f"{workers} worker(s)); {len(violations)} violating pairs "
                      f"({'DeepTest Eq. 2/3' if labelled else f'DeepRoad at {criteria.tolerance_deg:g}°'}), "
                      f"{len(findings)} crash/timeout, {sum(not b.get('error') for b in bundle_infos)} bundles"
                      + (f" ({sum(bool(b.get('error')) for b in bundle_infos)} failed)"
                         if any(b.get("error") for b in bundle_infos) else ""), soft_wrap=True)
    apart = summary.get("deeptest_apart")
    if apart:
        console.print(f"DeepTest errors: {apart['errors']} in the headline; set apart: {apart['seed_error']} seed "
                      f"already in error, {apart['no_change']} no real change (|Δθ| < {apart['min_change_deg']:g}°)",
                      highlight=False, soft_wrap=True)
    for b in bundle_infos[:10]:
        if b.get("error"):
            console.print(f"  bundle {b['id']}: failed ({show(b['error'])})")
        else:
            console.print(f"  bundle {out / 'violations' / b['id']}: {b['model']} under "
                          f"{b.get('params', '')}: {math.degrees(b['pred']):+.1f}° → {math.degrees(b['pred_t']):+.1f}°",
                          highlight=False, soft_wrap=True)
    from lidarmt.engine.report import reports_line

    console.print(reports_line(paths), soft_wrap=True)
    if fail_on_violation and (violations or findings):
        raise typer.Exit(1)


def _complete(out: Path, b: dict) -> dict:
    """Fill in a bundle that already existed (resume) from its bundle.json."""
    if not b.get("existing"):
        return b
    try:
        j = json.loads((out / "violations" / b["id"] / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return b
    from lidarmt.camera.bundle import display_name

    return {"id": b["id"], "key": j.get("key"), "model": display_name(j["model"]["name"]), "transform": j.get("transform"),
            "params": j.get("params_label"), "frame_id": j.get("frame_id"), "label": j.get("label"),
            "pred": j.get("pred"), "pred_t": j.get("pred_t"), "reproduced": j.get("reproduced"),
            "relation": j.get("relation", {}).get("name")}
