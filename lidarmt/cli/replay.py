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
re-runs source + minimal.npy to check that the minimal subset still violates the relation.
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
    from rich.markup import escape

    from lidarmt.cli._common import console
    from lidarmt.fuzz.replay import replay_bundle

    def on_code(line: str) -> None:
        console.print(f"--trust-code: importing and running {escape(line)}", highlight=False, soft_wrap=True)

    res = replay_bundle(bundle, map_path=map, sut=sut, from_recording=from_recording, trust_code=trust_code,
                        on_code=on_code)
    for name, ok in res.checks.items():
        console.print(f"{'[green]same[/]' if ok else '[red]DIFFERENT[/]'}  {escape(name)}", highlight=False, soft_wrap=True)
    v = res.verdict or {}
    console.print(f"verdict: |O| > |O′|: {v.get('count_violation')}, O ⊄ O′: {v.get('subset_violation')}, "
                  f"{len(v.get('missing', []))} source obstacle(s) unmatched")
    if not res.same:
        for d in res.details:
            console.print(f"[red]{escape(d)}[/]", highlight=False, soft_wrap=True)
        console.print("replay did NOT reproduce the bundle")
        raise typer.Exit(1)
    console.print("replay reproduced the bundle bit for bit: every check passed")
