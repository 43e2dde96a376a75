"""The ``lidarmt`` command. Thin: it parses arguments and calls the layers; each command is its own module.

A :class:`lidarmt.errors.UserError` becomes one line on stderr and exit status 2; no traceback.
Set ``LIDARMT_DEBUG=1`` to see the traceback of any error.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from lidarmt.errors import LidarmtError, UserError

app = typer.Typer(
    name="lidarmt",
    help=(
        "Metamorphic fuzzing of LiDAR obstacle perception.\n\n"
        "Reads Velodyne HDL-64E recordings (ROS1/ROS2 bags, Apollo Cyber records, PCD and KITTI folders), "
        "filters them by an Apollo HD-map ROI, runs a faithful reimplementation of Apollo's CNN-seg obstacle "
        "perception, and checks metamorphic relations such as MR1: adding points outside the ROI must not "
        "make obstacles inside it vanish.\n\n"
        "Typical session:\n\n"
        "  lidarmt simulate --seed 7 --frames 30 --out bags/demo.bag --map-out hdmaps/demo\n\n"
        "  lidarmt info bags/demo.bag\n\n"
        "  lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --n 10,100,1000"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# One module per command, each with ``register(app)``; imported at start-up, so heavy dependencies (torch,
# open3d, numba kernels) must be imported inside the command functions, not at module level.
COMMANDS = ("info", "roi", "simulate", "perceive", "train", "evaluate", "fuzz", "replay", "camera")

for _name in COMMANDS:
    importlib.import_module(f"lidarmt.cli.{_name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the CLI, turning lidarmt errors into one line and a non-zero status."""
    debug = os.environ.get("LIDARMT_DEBUG") not in (None, "", "0")
    try:
        app(args=argv, prog_name="lidarmt", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except UserError as err:
        if debug:
            raise
        print(f"lidarmt: error: {err}", file=sys.stderr)
        return err.exit_code
    except LidarmtError as err:
        if debug:
            raise
        print(f"lidarmt: internal error: {err} (set LIDARMT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("lidarmt: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
