"""``lidarmt camera transforms``: the image transformations, their grids and relations, and a picture sheet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lidarmt.cli._options import ForceOutputOption


def register(app: typer.Typer) -> None:
    app.command(name="transforms", help=TRANSFORMS_HELP)(transforms)


TRANSFORMS_HELP = """List the image transformations (name, family, relation, settings a campaign walks), or draw them.

Families: simple (DeepTest's seven with the grids of its Table 4), weather (fog, rain, snow, night, glare,
droplets, dirt: physically motivated, intensity 0..1 plus style parameters drawn from the seed), mirror (the
steering angle must change sign), translator (learned weather: the installed UNIT/MUNIT translators, see
lidarmt camera translators; one setting, a MUNIT's style drawn from the seed; not part of `all`, which campaigns
use by default, because each costs a network pass per image). With --sheet, every selected transformation is
drawn at three strengths (a translator once) on one frame of an image source.

Examples:

`lidarmt camera transforms`

`lidarmt camera transforms --transforms translator`

`lidarmt camera transforms --sheet sheet.png --images ../shared/data/udacity --frame 0 --transforms weather`
"""


def transforms(
    select_spec: Annotated[str, typer.Option("--transforms", help="all (simple, weather, mirror), simple, weather, mirror, translator, or names (translator names and translator.pt paths too); default: all plus the installed translators.")] = "all,translator",
    sheet: Annotated[Path | None, typer.Option("--sheet", help="Write a PNG picture sheet here.")] = None,
    images: Annotated[str | None, typer.Option("--images", help="Image source for --sheet (any lidarmt camera source).")] = None,
    frame: Annotated[int, typer.Option("--frame", help="Frame of the source to draw on.")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random styles.")] = 0,
    force: ForceOutputOption = False,
) -> None:
    from lidarmt._paths import check_writable
    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.transforms.registry import select
    from lidarmt.cli._common import console, wide_console

    if sheet is not None:
        check_writable(sheet, inputs=(images,), force=force, what="--sheet")
    chosen = select(select_spec)
    if sheet is None:
        from rich.table import Table

        t = Table(title="image transformations")
        for col in ("name", "family", "relation", "settings", "description"):
            t.add_column(col)
        for tr in chosen:
            grid = tr.grid
            span = f"{tr.label(grid[0])} .. {tr.label(grid[-1])}" if len(grid) > 1 else tr.label(grid[0])
            t.add_row(tr.name, tr.family, tr.relation, f"{len(grid)}: {span}", tr.description)
        wide_console().print(t)
        return
    if images is None:
        raise CameraArgumentError("--sheet needs --images (the source of the frame to draw on)")
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.transforms.sheet import transform_sheet

    with open_images(images) as src:
        if not 0 <= frame < len(src):
            raise CameraArgumentError(f"--frame {frame}: {images} holds frames 0..{len(src) - 1}")
        img = src[frame]
    path = transform_sheet(img.image, chosen, sheet, seed=seed,
                           title=f"lidarmt transformations on frame {img.frame_id} of {images}, seed {seed}")
    console.print(f"wrote {path}", soft_wrap=True)
