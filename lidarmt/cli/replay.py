"""``lidarmt replay BUNDLE``: re-run a bug bundle and check that it reproduces bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command(name="replay", help=REPLAY_HELP)(replay)


REPLAY_HELP = """Re-run a bug bundle (a folder `runs/NAME/violations/ID`) and check everything it claims.

Checks the SHA-256 of every file MANIFEST.json lists, regenerates the added points from the seed tuple (they
must equal added.npy and followup.npz bit for bit), perceives the stored source and follow-up frames again
(the recording is not needed) and compares both obstacle lists and the MR1 verdict with bundle.json, and
re-runs source + minimal.npy to check that the minimal subset still violates the relation. Every file a person
looks at (bundle.mcap, foxglove-layout.json, PCDs, replay.bag, pictures, report.md) is drawn again from the
bundle's stored data and compared; a file that differs, is missing or is not one lidarmt writes is named.
Exit status 0 when every check passed, 1 when anything differs (one line per difference), 2 on bad input.

A bundle is data from whoever sent it: replay builds only registered SUTs (apollo, ..., installed
`lidarmt.perception` plug-ins) and map files from it. A bundle whose SUT or ROI is `module:callable` (or
whose options name code) is refused unless you pass --trust-code, which prints what it imports.

Examples: `lidarmt replay runs/demo/violations/n1000-f000019-t0`;
`lidarmt replay bundle/ --trust-code` (a bundle of your own plug-in SUT, `mypkg.det:make`)
"""


def replay(
    bundle: Annotated[Path, typer.Argument(help="A bundle folder (or its bundle.json).")],
    map: Annotated[str | None, typer.Option("--map", help="Use this map instead of the path stored in the bundle.")] = None,
    sut: Annotated[str | None, typer.Option("--sut", help="Use this SUT name/spec instead of the stored one.")] = None,
    from_recording: Annotated[bool, typer.Option("--from-recording", help="Read the source frame from the original recording (it must equal the stored one).")] = False,
    trust_code: Annotated[bool, typer.Option("--trust-code", help="Allow the bundle to name code to import and run (a module:callable SUT or ROI); only for bundles you trust.")] = False,
) -> None:

    from lidarmt.cli._common import console, show
    from lidarmt.errors import InputError
    from lidarmt.lidar.mr1.replay import load_bundle, replay_bundle
    from lidarmt.lidar.perception.guard import SutFault

    def on_code(line: str) -> None:
        console.print(f"--trust-code: importing and running {show(line)}", highlight=False, soft_wrap=True)

    info = load_bundle(bundle)
    if info.get("kind") == "camera":
        _replay_camera(bundle if bundle.is_dir() else bundle.parent, info, model=sut, trust_code=trust_code,
                       map_path=map, from_recording=from_recording)
        return
    try:
        res = replay_bundle(bundle, map_path=map, sut=sut, from_recording=from_recording, trust_code=trust_code,
                            on_code=on_code)
    except SutFault as err:
        raise InputError(f"{bundle}: {err}") from err
    _print_checks(console, res.checks)
    v = res.verdict or {}
    if info.get("kind") == "lidar-transform":
        from lidarmt.lidar.bundle import findings_text

        console.print(f"{show(info.get('relation'))} under {show(info.get('transform'))} ({show(info.get('level'))}): "
                      f"{show(findings_text(v.get('findings', [])) or 'no finding')}", highlight=False, soft_wrap=True)
    else:
        console.print(f"verdict: |O| > |O′|: {v.get('count_violation')}, O ⊄ O′: {v.get('subset_violation')}, "
                      f"{len(v.get('missing', []))} source obstacle(s) unmatched")
    if not res.same:
        for d in res.details:
            console.print(f"[red]{show(d)}[/]", highlight=False, soft_wrap=True)
        console.print("replay did NOT reproduce the bundle")
        raise typer.Exit(1)
    console.print(_last_line(res.checks), soft_wrap=True)


def _print_checks(console, checks: dict[str, bool]) -> None:
    """One line per check: same, DIFFERENT, or NOT VERIFIED (a file replay could not regenerate)."""
    from lidarmt.cli._common import show
    from lidarmt.engine.verify import UNVERIFIED

    for name, ok in checks.items():
        tag = ("[yellow]NOT VERIFIED[/]" if name.startswith(UNVERIFIED) else "[green]same[/]") if ok \
            else "[red]DIFFERENT[/]"
        text = name[len(UNVERIFIED) + 2:] if name.startswith(UNVERIFIED) else name
        console.print(f"{tag}  {show(text)}", highlight=False, soft_wrap=True)


def _last_line(checks: dict[str, bool]) -> str:
    """What a replay whose checks all passed says: bit for bit, or which shown files it did not verify."""
    from lidarmt.engine.verify import UNVERIFIED

    n = sum(name.startswith(UNVERIFIED) for name in checks)
    if n:
        return (f"replay reproduced the bundle's data bit for bit, but {n} file(s) it shows were NOT verified "
                "(listed above): look at them with care")
    return "replay reproduced the bundle bit for bit: every check passed"


def _camera_info_problem(info: dict) -> str:
    """What in a camera bundle's bundle.json has the wrong type for replay ("" when nothing): it is a file from
    someone else, read before anything is built."""
    import math

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    m = info.get("model")
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not isinstance(m.get("options", {}), dict):
        return "model: expected {\"name\": ..., \"options\": {...}}"
    for k in ("pred", "pred_t"):
        if not number(info.get(k)):
            return f"{k}: expected a finite number"
    if info.get("label") is not None and not number(info.get("label")):
        return "label: expected a finite number or null"
    if "steps" in info:
        steps = info["steps"]
        if not isinstance(steps, list) or not all(
                isinstance(s, dict) and isinstance(s.get("transform"), str) and isinstance(s.get("params"), dict)
                and isinstance(s.get("seed"), int) for s in steps):
            return "steps: expected a list of {transform, params, seed}"
    elif info.get("family") != "external":
        if not isinstance(info.get("transform"), str) or not isinstance(info.get("params"), dict):
            return "transform/params: expected a name and a mapping"
        seed = info.get("seed_tuple")
        if not isinstance(seed, list) or not isinstance(info.get("transform_seed"), int):
            return "seed_tuple/transform_seed: expected a list and an integer"
    if not isinstance(info.get("translators") or [], list):
        return "translators: expected a list"
    return ""


def _replay_camera(folder: Path, info: dict, *, model: str | None, trust_code: bool, map_path: str | None,
                   from_recording: bool) -> None:
    import math

    from lidarmt.camera.bundle import transform_text
    from lidarmt.camera.replay import replay_camera_bundle
    from lidarmt.cli._common import console, show
    from lidarmt.errors import ArgumentError

    if map_path or from_recording:
        raise ArgumentError(f"{folder}: --map and --from-recording are for LiDAR bundles; this is a camera bundle")
    bad = _camera_info_problem(info)
    if bad:
        from lidarmt.errors import InputError

        raise InputError(f"{folder / 'bundle.json'}: not a camera bundle this lidarmt reads ({bad})")
    res = replay_camera_bundle(folder, info, trust_code=trust_code, model=model)
    _print_checks(console, res.checks)
    lab = info.get("label")
    console.print(f"{show(info['model']['name'])} under {show(transform_text(info))} "
                  f"({show(info.get('params_label', ''))}): label "
                  f"{'–' if lab is None else f'{math.degrees(lab):+.2f}°'}, seed {math.degrees(info['pred']):+.2f}°, "
                  f"transformed {math.degrees(info['pred_t']):+.2f}°", highlight=False, soft_wrap=True)
    if not res.same:
        for d in res.details:
            console.print(f"[red]{show(d)}[/]", highlight=False, soft_wrap=True)
        console.print("replay did NOT reproduce the bundle")
        raise typer.Exit(1)
    console.print(_last_line(res.checks), soft_wrap=True)
