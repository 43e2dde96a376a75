"""The README runs (issue 30): every ``lidarmt`` command line of README.md is checked against the real command
tree, so that a command that fails as written fails CI.

* Every line of a code block (what a reader copies) is parsed by the real argument parser (click, through
  ``make_context``: unknown or missing options and arguments, bad values). A ``[...]`` part is tried with and
  without its contents; a fragment (``...``) and the inline mentions in the prose must name a real command and
  real options of it.
* The quick ones run for real on a freshly simulated recording (``lidarmt simulate``, as ``make demo`` makes it;
  slow): ``info``, ``transforms`` and its sheet (the ``insert`` row takes its objects from the simulator's truth
  beside the bag), ``camera models``, ``camera transforms``, ``camera translators``.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import pytest
import typer

from lidarmt.cli import app, main

README = Path(__file__).resolve().parents[1] / "README.md"
ENV = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*")


def readme_commands() -> tuple[list[str], list[str]]:
    """(lines of code blocks, inline spans of the prose) that start with ``lidarmt``, comments removed."""
    block, inline = [], []
    fenced = False
    prose: list[str] = []
    for ln in README.read_text(encoding="utf-8").splitlines():
        if ln.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or ln.startswith("    "):
            s = ENV.sub("", ln.strip())
            if s.startswith("lidarmt "):
                block.append(re.sub(r"\s+#\s.*$", "", s).strip())
        else:
            prose.append(ln)
    for m in re.finditer(r"`([^`]+)`", "\n".join(prose)):
        s = ENV.sub("", " ".join(m.group(1).split()))
        if s.startswith("lidarmt ") or s == "lidarmt":
            inline.append(s)
    return block, inline


def _variants(line: str) -> list[str]:
    """A line with ``[...]`` parts tried without and with their contents."""
    if "[" not in line:
        return [line]
    return [re.sub(r"\s*\[[^\]]*\]", "", line), re.sub(r"\[([^\]]*)\]", r"\1", line)]


@functools.cache
def _root():
    return typer.main.get_command(app)


def _resolve(tokens: list[str]):
    """(the click command a token list names, the tokens after its name, its space-separated name)."""
    cmd = _root()
    names = []
    while tokens and hasattr(cmd, "commands") and tokens[0] in cmd.commands:
        names.append(tokens[0])
        cmd = cmd.commands[tokens.pop(0)]
    return cmd, tokens, " ".join(names)


def _option_names(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
            if o.startswith("-")} | {"--help"}


def _check_names(line: str) -> None:
    """A fragment: its command exists and every option it names is one of that command's."""
    if " / " in line:  # "lidarmt camera profile / coverage / search": each a command of the group
        first, *others = line.split(" / ")
        head = shlex.split(first)[1:-1]
        for sub in [shlex.split(first)[-1], *(o.strip() for o in others)]:
            assert _resolve([*head, sub])[2] == " ".join([*head, sub]), f"{line!r}: no command {sub}"
        return
    tokens = shlex.split(line.replace("...", " "))[1:]
    cmd, rest, name = _resolve(tokens)
    assert name or not tokens or tokens[0].startswith("-"), f"{line!r}: no such command"
    for t in rest:
        if t.startswith("--"):
            opt = t.split("=", 1)[0]
            assert opt in _option_names(cmd), f"{line!r}: lidarmt {name} has no option {opt}"


def _parse(line: str) -> None:
    cmd, rest, name = _resolve(shlex.split(line)[1:])
    if "--help" in rest or (not name and not rest):
        return
    assert name, f"{line!r}: no such command"
    try:
        cmd.make_context(f"lidarmt {name}", list(rest))
    except Exception as err:  # click's (or typer's vendored click's) usage errors
        if type(err).__name__ in ("Exit",):
            return
        pytest.fail(f"README: `{line}` fails as written: {type(err).__name__}: {err}")


BLOCK, INLINE = readme_commands()


def test_the_readme_has_commands():
    assert len(BLOCK) > 40 and len(INLINE) > 20  # the extraction itself works


@pytest.mark.parametrize("line", BLOCK)
def test_block_command_parses(line):
    if "..." in line or " / " in line:
        _check_names(line)
        return
    for v in _variants(line):
        _parse(v)


@pytest.mark.parametrize("line", sorted(set(INLINE)))
def test_inline_command_names_real_options(line):
    _check_names(re.sub(r"\|\S+", "", line))  # "--search es|random": one of the values


def test_a_broken_line_is_caught():
    """The checks can fail: a missing required option, an unknown option, a missing command."""
    with pytest.raises(pytest.fail.Exception):
        _parse("lidarmt export RECORDING --map MAP")  # no --out
    with pytest.raises(AssertionError):
        _check_names("lidarmt fuzz --no-such-option")
    with pytest.raises(pytest.fail.Exception):
        _parse("lidarmt fuzz --bag b --map m --no-such-option 3")


# ----------------------------------------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, str]:
    pytest.importorskip("open3d")
    root = tmp_path_factory.mktemp("readme")
    bag, hdmap = root / "demo.bag", root / "demo-map"
    assert main(["simulate", "--seed", "7", "--frames", "3", "--out", str(bag), "--map-out", str(hdmap)]) == 0
    return {"RECORDING": str(bag), "MAP": str(hdmap), "bags/demo.bag": str(bag), "hdmaps/demo": str(hdmap),
            "sheet.png": str(root / "sheet.png"), "x.png": str(root / "x.png")}


QUICK = ("lidarmt info RECORDING", "lidarmt transforms", "lidarmt camera models", "lidarmt camera transforms",
         "lidarmt camera translators")


@pytest.mark.slow
def test_quick_readme_commands_run(demo, capsys):
    ran = []
    for line in BLOCK:
        for v in _variants(line):
            if not any(v == q or v.startswith(q + " ") for q in QUICK) or "SRC" in v:
                continue
            argv = [demo.get(t, t) for t in shlex.split(v)[1:]]
            assert main(argv) == 0, f"README: `{v}` fails: {capsys.readouterr().err}"
            ran.append(v)
    assert "lidarmt transforms --sheet sheet.png --bag RECORDING" in ran  # insert's objects: the sim's truth
    assert Path(demo["sheet.png"]).is_file() and len(ran) >= 5


@pytest.mark.slow
def test_a_fresh_simulated_bag_is_its_own_object_library(demo):
    """`fuzz --bag s.bag --transforms insert` cuts its objects from the simulator's truth beside the bag."""
    from lidarmt.lidar.campaign import open_library

    lib = open_library(demo["RECORDING"])
    assert len(lib) > 0 and {o.cls for o in lib.objects} & {"car", "pedestrian", "cyclist"}
