"""The ``lidarmt`` command. Thin: it parses arguments and calls the layers; each command is its own module.

A :class:`lidarmt.errors.UserError` becomes one line on stderr and exit status 2; no traceback.
Set ``LIDARMT_DEBUG=1`` to see the traceback of any error.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from lidarmt._show import term
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
COMMANDS = ("info", "roi", "simulate", "perceive", "train", "evaluate", "fuzz", "replay", "bench", "camera",
            "fuzz_coverage", "export", "export_weights", "transforms", "robustness")

for _name in COMMANDS:
    importlib.import_module(f"lidarmt.cli.{_name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the CLI, turning lidarmt errors into one line and a non-zero status.

    Click runs with ``standalone_mode=False`` so that its usage errors (a bad option value, a missing or unknown
    option or argument) reach this function instead of typer's boxed panel; each becomes one line
    ``lidarmt: error: ...`` with exit status 2, like a :class:`~lidarmt.errors.UserError`. ``--help`` and a bare
    ``lidarmt`` still print the help (exit status 0 and 2, as click has them). Warnings (e.g. a map polygon that
    had to be repaired) are printed as one line ``lidarmt: warning: ...`` while the command runs.
    """
    import warnings

    from lidarmt._heap import keep_freed_memory

    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        keep_freed_memory()  # a network's activations are not page-faulted in again on every call (lidarmt._heap)
        return _main(argv)
    finally:
        warnings.showwarning = shown


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
    """``warnings.showwarning`` of the CLI: the message only, as one line (no source file, no code line)."""
    print(f"lidarmt: warning: {term(' '.join(str(message).split()))}", file=sys.stderr if file is None else file)


def _main(argv: list[str] | None) -> int:
    # click's exceptions: ``click.exceptions``, or the copy of click that typer >= 0.22 vendors
    click_exc = importlib.import_module(typer.BadParameter.__module__)
    debug = os.environ.get("LIDARMT_DEBUG") not in (None, "", "0")
    try:
        rv = app(args=argv, prog_name="lidarmt", standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except click_exc.NoArgsIsHelpError as err:  # a group called without a command: the help, status 2
        if err.format_message().strip():  # typer's rich help has printed itself already and left no message
            err.show()
        return 2
    except click_exc.ClickException as err:
        if debug:
            raise
        print(term(_usage_line(err), lines=True), file=sys.stderr)
        return 2 if isinstance(err, click_exc.UsageError) else err.exit_code
    except typer.Abort:  # end of input at a prompt
        print("lidarmt: aborted", file=sys.stderr)
        return 1
    except UserError as err:
        if debug:
            raise
        print(f"lidarmt: error: {term(err)}", file=sys.stderr)  # one line, whatever a file put in it
        return err.exit_code
    except LidarmtError as err:
        if debug:
            raise
        print(f"lidarmt: internal error: {term(err)} (set LIDARMT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("lidarmt: interrupted", file=sys.stderr)
        return 130
    # without standalone mode, click returns the exit code of ``typer.Exit(n)``/``ctx.exit(n)`` and otherwise the
    # command's return value (None for every lidarmt command)
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _usage_line(err) -> str:
    """One line for a click error: its message, and for a usage error the command's ``--help`` to read."""
    msg = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    if ctx is not None and getattr(ctx, "command_path", None):
        msg += f" (see '{ctx.command_path} --help')"
    return f"lidarmt: error: {msg}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
