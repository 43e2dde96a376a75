"""``lidarmt export-weights``: Apollo's cnnseg weights as Apollo's Caffe files or as ONNX."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

FORMATS = ("caffemodel", "onnx")


def register(app: typer.Typer) -> None:
    app.command("export-weights")(export_weights)


def export_weights(
    out: Annotated[Path, typer.Option("--out", "-o", help="The file to write (.caffemodel or .onnx).")],
    fmt: Annotated[str, typer.Option("--format", help="caffemodel (Apollo's layout: its prototxt's layer names, "
                                     "Caffe's blob order; deploy.prototxt written beside it as <out>.prototxt) or "
                                     "onnx (input 'data', Apollo's output blob names).")] = "caffemodel",
    weights: Annotated[Path | None, typer.Option("--weights", "-w", help="The weights to write: a .pt from "
                                                 "`lidarmt train` or a .caffemodel; default: the shipped ones "
                                                 "of --grid.")] = None,
    grid: Annotated[int, typer.Option(help="Feature grid (the ONNX file's and the prototxt's input size).")] = 640,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out (and the prototxt beside it).")] = False,
) -> None:
    """Write the CNN's weights in Apollo's layout, for Apollo or Autoware, or to run as an ONNX system under test.

    Examples:

    `lidarmt export-weights --format caffemodel --out apollo/deploy.caffemodel`

    `lidarmt export-weights --format onnx --out cnnseg640.onnx`  (then `--sut-option weights=cnnseg640.onnx`)
    """
    from lidarmt._atomic import atomic_write_bytes, atomic_write_text
    from lidarmt._paths import check_outputs
    from lidarmt.cli._common import err_console
    from lidarmt.errors import ArgumentError
    from lidarmt.lidar.perception.apollo import caffe
    from lidarmt.lidar.perception.apollo.config import ApolloConfig
    from lidarmt.lidar.perception.apollo.network import parameter_count

    if fmt not in FORMATS:
        raise ArgumentError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    cfg = ApolloConfig(grid=grid)  # checks the grid
    src = weights if weights is not None else cfg.weights_path()
    targets = [out] + ([out.with_suffix(".prototxt")] if fmt == "caffemodel" else [])
    check_outputs(targets, inputs=(src,), force=force)  # never the input weights, never existing without --force
    net = caffe.load_any_network(src, grid=grid)
    state = net.state_dict()
    if fmt == "caffemodel":
        data = caffe.caffemodel_bytes(state, net.in_channels)
        atomic_write_bytes(out, data)
        atomic_write_text(targets[1], caffe.prototxt_text(net.in_channels, grid))
        params = parameter_count(net.in_channels)
        official = 4 * params + caffe.OFFICIAL_OVERHEAD
        err_console.print(
            f"wrote {out} ({len(data):,} B = 4 x {params:,} parameters + {len(data) - 4 * params:,} B of names, "
            f"shapes and framing) and {targets[1]}; Apollo's official file of this network is {official:,} B "
            f"({official - len(data):+,} B, framing only: the parameter count is Apollo's)", highlight=False)
    else:
        from lidarmt.lidar.perception.apollo.onnxnet import export_onnx

        n = export_onnx(state, out, grid=grid, in_channels=net.in_channels)
        err_console.print(f"wrote {out} ({n:,} B, input 'data' 1x{net.in_channels}x{grid}x{grid}, outputs "
                          "category_score instance_pt confidence_score class_score heading_pt height_pt)",
                          highlight=False)
