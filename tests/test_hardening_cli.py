"""The careless user's bad days (issue 9): each mistake gets one clear line and exit status 2, nothing is lost,
and valid inputs are not treated as mistakes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lidarmt.cli import main


def _one_line(capsys, rc: int, *needles: str) -> str:
    """The captured stderr, checked to be a single ``lidarmt: error:`` line holding every needle, exit 2."""
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lidarmt: error: "), err
    for n in needles:
        assert n in lines[0], (n, err)
    return lines[0]


# ------------------------------------------------------------------------------------------------ usage errors


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["info", "--sample", "0", "x.bag"], ["--sample", "lidarmt info --help"]),
        (["simulate", "--frames", "0"], ["--frames", "lidarmt simulate --help"]),
        (["simulate", "--density", "9"], ["--density"]),
        (["simulate", "--bogus"], ["--bogus"]),
        (["info"], ["path"]),  # missing argument
        (["train"], ["--data"]),  # missing option
        (["perceive", "x.bag", "--frame", "abc"], ["--frame"]),  # not an integer
        (["fuzz", "--n"], ["--n"]),  # option without its value
        (["no-such-command"], ["no-such-command"]),
    ],
)
def test_usage_errors_are_one_line(argv, needles, capsys):
    _one_line(capsys, main(argv), *needles)
    # no rich panel anywhere
    assert "╭" not in capsys.readouterr().out


def test_help_is_unchanged(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "simulate" in out and "fuzz" in out
    assert main(["info", "--help"]) == 0
    assert "--sample" in capsys.readouterr().out
    assert main([]) == 2  # a bare `lidarmt` prints the help, with click's status 2
    assert "simulate" in capsys.readouterr().out


def test_usage_error_from_the_console_script():
    """The installed entry point (``python -m lidarmt``) prints the same single line."""
    p = subprocess.run([sys.executable, "-m", "lidarmt", "simulate", "--density", "9"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and p.stderr.startswith("lidarmt: error: ")
    assert "--density" in p.stderr and p.stdout == ""
