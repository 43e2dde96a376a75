"""``lidarmt replay BUNDLE``: re-run a bug bundle and check that it reproduces bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command(name="replay", help=REPLAY_HELP)(replay)


REPLAY_HELP = """Re-run a bug bundle (a folder `runs/NAME/violations/ID`) and compare with what it recorded.

Perceives the bundle's stored source and follow-up frames again (the recording is not needed), regenerates
the follow-up from its seed tuple, and compares both obstacle lists and the MR1 verdict with bundle.json.
Exit status 0 when everything is identical, 1 when anything differs, 2 on bad input.

Example: `lidarmt replay runs/demo/violations/n1000-f000019-t0`
"""



def replay(
    bundle: Annotated[Path, typer.Argument(help="A bundle folder (or its bundle.json).")],
    map: Annotated[str | None, typer.Option("--map", help="Use this map instead of the path stored in the bundle.")] = None,
    sut: Annotated[str | None, typer.Option("--sut", help="Use this SUT name/spec instead of the stored one.")] = None,
    from_recording: Annotated[bool, typer.Option("--from-recording", help="Read the source frame from the original recording (it must equal the stored one).")] = False,
) -> None:
    from lidarmt.cli._common import console
    from lidarmt.fuzz.replay import replay_bundle

    res = replay_bundle(bundle, map_path=map, sut=sut, from_recording=from_recording)
    for name, ok in res.checks.items():
        console.print(f"{'[green]same[/]' if ok else '[red]DIFFERENT[/]'}  {name}")
    v = res.verdict or {}
    console.print(f"verdict: |O| > |O′|: {v.get('count_violation')}, O ⊄ O′: {v.get('subset_violation')}, "
                  f"{len(v.get('missing', []))} source obstacle(s) unmatched")
    if not res.same:
        for d in res.details:
            console.print(f"[red]{d}[/]")
        console.print("replay did NOT reproduce the bundle")
        raise typer.Exit(1)
    console.print("replay reproduced the bundle bit for bit")
