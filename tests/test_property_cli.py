"""Property-based tests of the command line: any argument vector ends with status 0, 1 or 2, never a traceback.

hypothesis builds argument vectors for every command of ``lidarmt`` (found by walking the click command tree, so
new commands and options are covered as they appear) with hostile option values: negative, zero, huge, NaN and
infinite numbers, empty strings, odd unicode, unknown options, paths that do not exist. Each vector runs in
process through :func:`lidarmt.cli.main` with stdout and stderr captured, in an empty scratch folder:

* the exit status is 0, 1 or 2;
* on status 2 stderr holds exactly one ``lidarmt: error: ...`` line (its last line; the only other lines
  allowed are ``lidarmt: warning: ...``), and nothing was written to the scratch folder;
* no traceback is printed, whatever the status.

Commands that would run for long (fuzz, simulate, train, evaluate, camera fuzzing...) only ever receive vectors
that fail while parsing or at their first check: every path given does not exist (or is the empty scratch
folder), ``simulate`` never gets exactly one of ``--out``/``--dataset``, and an alarm fails the test if a
vector starts real work. The pure parsers (``parse_ns``, ``--sut-option``, ``--set``) get the same treatment.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lidarmt.errors import UserError

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TIME_LIMIT = 300  # seconds one argument vector may take: more means it started real work (far above a loaded
# machine's slowest refusal: the verdict must not depend on the load)


def _command_tree() -> dict[tuple[str, ...], list]:
    """Every leaf command of ``lidarmt`` (as its name path) with its click parameters."""
    import typer.main

    from lidarmt.cli import app

    out: dict[tuple[str, ...], list] = {}

    def walk(cmd, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            out[path] = []  # the group itself (a bare group prints its help)
            for name, sub in sorted(subs.items()):
                walk(sub, (*path, name))
        else:
            out[path] = list(cmd.params)

    walk(typer.main.get_command(app), ())
    return out


TREE = _command_tree()
COMMANDS = sorted(TREE)

NUMBERS = st.sampled_from(["-1", "0", "1", "-0", "1e309", "-1e309", "nan", "NaN", "inf", "-inf", "Infinity",
                           str(10**30), "1e-320", "0x10", "1_000", "2147483648", "-9223372036854775809",
                           "1.5", ".", "1,2", "١٢"])
ODD_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00") | st.sampled_from(
    ["\udcff", "\u202e", "\u0301", "\ufeff", "\n", "\t", " "]), max_size=12)
PATHS = st.sampled_from(["no/such/file.bag", "missing.record", "nothing.pcd", "absent", "x.npz", "none.bin",
                         "sub/dir/", "~nobody/x", "-", "map.geojson", "bundle", "no_such_pkg.mod:make",
                         "a,b", "k=v", "=", "k=[1,2", "mode=fast", "apollo", "fast", "exact", "all", "disk",
                         "grid", "sensor", "world", "auto", ".", "./"])  # "." is the (empty) scratch folder
VALUES = st.one_of(NUMBERS, PATHS, st.just(""), ODD_TEXT, st.integers(-10**20, 10**20).map(str),
                   st.floats().map(repr))


@st.composite
def argvs(draw) -> list[str]:
    """A command and a random selection of its options and arguments, with hostile values."""
    path = draw(st.sampled_from(COMMANDS))
    params = TREE[path]
    argv = list(path)
    options = [p for p in params if p.param_type_name == "option"]
    chosen = [p for p in options if p.required and draw(st.integers(0, 5))]  # usually all required ones
    chosen += draw(st.lists(st.sampled_from(options), max_size=5)) if options else []
    chosen = draw(st.permutations(chosen))
    for p in chosen:
        name = draw(st.sampled_from(list(p.opts) + list(p.secondary_opts)))
        if p.is_flag:
            argv.append(name)
        elif name.startswith("--") and draw(st.booleans()):
            argv.append(f"{name}={draw(VALUES)}")
        else:
            argv += [name, draw(VALUES)]
    for p in params:
        if p.param_type_name == "argument" and draw(st.integers(0, 5)):
            argv.append(draw(PATHS | VALUES))
    if draw(st.integers(0, 5)) == 0:
        argv.insert(draw(st.integers(len(path), len(argv))),
                    draw(st.sampled_from(["--no-such-option", "-Z", "--", "extra", "--help", "-h", "--=x"])))
    if path == ("simulate",):  # never exactly one of --out / --dataset: that would start a simulation
        has = {n for n in ("--out", "-o", "--dataset", "-d") if any(a == n or a.startswith(n + "=") for a in argv)}
        if bool(has & {"--out", "-o"}) != bool(has & {"--dataset", "-d"}):
            argv += ["--dataset" if has & {"--out", "-o"} else "--out", "clash"]
    return argv


class Hang(Exception):
    """Raised by the alarm: an argument vector started real work instead of failing at its first check."""


@contextlib.contextmanager
def scratch_cwd() -> Iterator[Path]:
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="lidarmt-cli-") as d:
        os.chdir(d)
        try:
            yield Path(d)
        finally:
            os.chdir(old)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``lidarmt.cli.main(argv)`` in process, with stdout/stderr captured and an alarm against real work."""
    from lidarmt.cli import main

    def on_alarm(_sig, _frame):
        raise Hang(f"lidarmt {' '.join(argv)}: still running after {TIME_LIMIT} s")

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TIME_LIMIT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def check_outcome(argv: list[str], rc: int, out: str, err: str, before: set[str], cwd: Path) -> None:
    shown = f"lidarmt {argv!r} -> {rc}\nstdout: {out[-600:]!r}\nstderr: {err[-600:]!r}"
    assert rc in (0, 1, 2), shown
    assert "Traceback (most recent call last)" not in out + err, shown
    if rc == 2 and not (len(argv) == len(_group_prefix(argv)) and "Usage" in out + err):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("lidarmt: error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], shown
        assert all(ln.startswith("lidarmt: warning:") for ln in lines[:-1]), shown
        after = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
        assert after == before, f"{shown}\na failed command left files behind: {sorted(after - before)}"


def _group_prefix(argv: list[str]) -> tuple[str, ...]:
    """The longest prefix of argv naming a group (a bare group prints its help with status 2, as click does)."""
    best: tuple[str, ...] = ()
    for k in range(len(argv) + 1):
        if tuple(argv[:k]) in TREE and not TREE[tuple(argv[:k])]:
            best = tuple(argv[:k])
    return best


@pytest.mark.slow  # a few seconds: some vectors reach commands that import torch before failing
@SETTINGS
@given(argv=argvs())
def test_any_argument_vector_ends_with_status_0_1_or_2_and_one_line(argv):
    with scratch_cwd() as cwd:
        before = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
        rc, out, err = run_cli(argv)
        check_outcome(argv, rc, out, err, before, cwd)


@pytest.mark.parametrize("argv", [
    ["info", "missing.bag"],
    ["info", ""],
    ["info", "--sample", "0", "x.bag"],
    ["fuzz", "--bag", "x.bag", "--map", "m", "--n", "nan"],
    ["fuzz", "--bag", "x.bag", "--map", "m", "--n", "10", "--radius", "nan"],
    ["fuzz", "--bag", "x.bag", "--map", ".", "--sut-option", "k=" + "[" * 3000],
    ["fuzz", "--bag", ".", "--map", ".", "--n", "1", "--bundles", "-1"],
    ["fuzz", "--bag", "x.bag", "--map", "m", "--workers", "99999999999999999999"],
    ["roi", "x.bag", "--map", "m", "--cell", "-inf"],
    ["roi", "x.bag", "--map", "m", "--frame", "-1"],
    ["perceive", "x.bag", "--perception", "no_such_pkg.mod:make"],
    ["perceive", "x.bag", "--set", "=1"],
    ["simulate", "--frames", "0"],
    ["simulate", "--out", "a.bag", "--dataset", "d"],
    ["simulate"],
    ["train", "--data", "no/such/folder", "--class-weights", "nan,1,1,1"],
    ["evaluate"],
    ["replay", "no/such/bundle"],
    ["camera"],
    ["no-such-command"],
])
def test_known_hostile_vectors(argv):
    """Vectors that once failed or are easy to get wrong, run on every test run (not only when drawn)."""
    with scratch_cwd() as cwd:
        before = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
        rc, out, err = run_cli(argv)
        check_outcome(argv, rc, out, err, before, cwd)
        assert rc != 0 or not argv or argv == ["camera"], f"{argv}: a bad vector must not succeed"


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-frame ROS1 bag with poses and a one-road HD map around them (absolute paths)."""
    import numpy as np

    from lidarmt.io import write_ros1_bag
    from lidarmt.lidar.roi import BoundaryEdge, EdgeType, HDMap, Lane, Road, RoadSection, write_map
    from lidarmt.types import Frame, make_points, make_pose

    root = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(3)
    frames = [Frame(make_points(rng.uniform(-30, 30, (200, 3)).astype(np.float32), 7.0),
                    make_pose([300000.0 + k, 4e6, 10.0], [0, 0, 0, 1]), 1.5e9 + 0.1 * k) for k in range(2)]
    write_ros1_bag(root / "tiny.bag", frames)
    sq = np.array([[299900.0, 3999990.0], [300100.0, 3999990.0], [300100.0, 4000010.0], [299900.0, 4000010.0]])
    lane = Lane("l", np.array([[299950.0, 4e6], [300050.0, 4e6]]))
    write_map(HDMap(lanes=[lane], roads=[Road("r", [RoadSection("1", ["l"], [BoundaryEdge(EdgeType.LEFT_BOUNDARY,
                                                                                          sq)])])]),
              root / "map", formats=("bin",))
    return root / "tiny.bag", root / "map"


@pytest.mark.parametrize("bad", [
    ["--seed", "-1"], ["--frames", "0"], ["--trials", "0"], ["--radius", "nan"], ["--roi-range", "inf"],
    ["--timeout", "nan"], ["--map-frame", "bogus"], ["--mode", "slow"], ["--sut-option", "=1"],
    ["--bundles", "x"], ["--ddmin-budget", "-1"], ["--workers", "0"], ["--region", "cube"], ["--n", "0"],
    ["--sut", "no_such_sut"], ["--topic", "/no/such/topic"],
], ids=lambda v: " ".join(v))
def test_fuzz_on_a_real_recording_refuses_one_bad_option_before_starting(tiny_inputs, bad):
    """With a readable recording and map, one bad option still ends in one line and exit 2, before any run
    folder is created (a campaign that starts and then fails would leave a journal and a lock behind)."""
    bag, hdmap = tiny_inputs
    argv = ["fuzz", "--bag", str(bag), "--map", str(hdmap), "--n", "1", "--out", "run", "--quiet", *bad]
    with scratch_cwd() as cwd:
        rc, out, err = run_cli(argv)
        check_outcome(argv, rc, out, err, set(), cwd)
        assert rc == 2, f"{argv}: accepted ({rc}); stderr {err[-300:]!r}"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, bytes]:
    """The bytes of small valid recordings (name -> bytes), written with the project's writers."""
    import numpy as np

    from lidarmt.io import write_cyber_record, write_pcd, write_ros1_bag
    from lidarmt.types import Frame, make_points, make_pose

    root = tmp_path_factory.mktemp("recs")
    rng = np.random.default_rng(4)
    xyz = rng.uniform(-30, 30, (60, 3)).astype(np.float32)
    xyz[:3, 0] = [np.inf, -np.inf, np.nan]
    frames = [Frame(make_points(xyz, 9.0, time=1.5e9 + 0.1 * k - rng.uniform(0, 0.1, 60)),
                    make_pose([1.0 * k, 0.0, 0.0], [0, 0, 0, 1]), 1.5e9 + 0.1 * k) for k in range(2)]
    write_ros1_bag(root / "a.bag", frames, chunk_threshold=1500)
    write_cyber_record(root / "a.record", frames, chunk_raw_size=1500)
    write_pcd(root / "a.pcd", frames[0], encoding="binary_compressed")
    return {p.name: p.read_bytes() for p in root.iterdir()}


@pytest.mark.slow
@settings(SETTINGS, max_examples=25)
@given(name=st.sampled_from(["a.bag", "a.record", "a.pcd"]), data=st.data(), as_json=st.booleans(),
       recover=st.booleans())
def test_info_on_a_damaged_recording_is_a_summary_or_one_line(recordings, name, data, as_json, recover):
    """``lidarmt info`` on a truncated/overwritten recording: a summary (strict JSON with --json) or exit 2 and
    one line; never a traceback, never a NumPy warning on stderr."""
    raw = bytearray(recordings[name])
    cut = data.draw(st.integers(0, len(raw)), label="truncate at")
    edits = data.draw(st.lists(st.tuples(st.integers(0, max(cut - 1, 0)), st.integers(0, 255)), max_size=6),
                      label="byte edits")
    raw = raw[:cut]
    for pos, value in edits:
        if pos < len(raw):
            raw[pos] = value
    argv = ["info", name] + (["--json"] if as_json else []) + (["--recover"] if recover and name == "a.bag" else [])
    with scratch_cwd() as cwd:
        (cwd / name).write_bytes(bytes(raw))
        before = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
        rc, out, err = run_cli(argv)
        check_outcome(argv, rc, out, err, before, cwd)
        assert rc in (0, 2) and "encountered" not in err, f"{argv}: {rc} {err[-400:]!r}"
        assert (cwd / name).read_bytes() == bytes(raw), "info modified its input"
        if rc == 0 and as_json:
            json.loads(out, parse_constant=lambda c: pytest.fail(f"--json printed {c}, not strict JSON"))


# ----------------------------------------------------------------------------------------------- pure parsers


def _one_line(err: UserError) -> None:
    msg = str(err)
    assert msg.strip() and "\n" not in msg, repr(msg)


N_ITEM = st.one_of(st.integers(-5, 10**8).map(str), NUMBERS, st.just(""), st.just(" 7 "), ODD_TEXT)


@SETTINGS
@given(items=st.lists(N_ITEM, min_size=1, max_size=5))
def test_parse_ns_gives_positive_counts_or_one_line_error(items):
    from lidarmt.lidar.mr1.campaign import MAX_POINTS, parse_ns

    text = ",".join(items)
    try:
        ns = parse_ns(text)
    except UserError as err:
        _one_line(err)
        return
    assert ns and all(isinstance(v, int) and 1 <= v <= MAX_POINTS for v in ns)
    assert len(set(ns)) == len(ns)
    assert parse_ns(",".join(map(str, ns))) == ns  # what it returns, it accepts again


JSONISH = st.one_of(st.integers().map(str), st.floats().map(repr), st.sampled_from(
    ["true", "null", "[1, 2]", '{"a": 1}', '"s"', "1e999", "9" * 5000, "'x'", ""]),
    st.sampled_from(["[" * 3000, "{\"a\":" * 3000, "[" * 2000 + "]" * 2000]), ODD_TEXT)


@SETTINGS
@given(pairs=st.lists(st.tuples(ODD_TEXT, st.sampled_from(["=", "", "=="]), JSONISH), max_size=4))
def test_sut_options_parse_to_a_dict_or_one_line_error(pairs):
    import json

    from lidarmt.cli.fuzz import _parse_options

    items = [k + sep + v for k, sep, v in pairs]
    try:
        opts = _parse_options(items)
    except UserError as err:
        _one_line(err)
        return
    assert isinstance(opts, dict)
    for item in items:
        key, _, value = item.partition("=")
        assert key in opts
    last = {item.partition("=")[0]: item.partition("=")[2] for item in items}
    for key, value in last.items():
        try:
            want = json.loads(value)
        except (ValueError, RecursionError):
            want = value
        assert opts[key] == want or (opts[key] != opts[key] and want != want)  # NaN compares unequal


def _apollo_keys() -> list[str]:
    from lidarmt.lidar.perception.apollo.config import ApolloConfig

    return sorted(ApolloConfig().to_dict()) + ["min_pts", "height", "point_cloud_range", "no_such_key", "", " "]


@settings(SETTINGS, max_examples=150)
@given(items=st.lists(st.tuples(st.sampled_from(_apollo_keys()), st.sampled_from(["=", "=", "=", ""]),
                                NUMBERS | NUMBERS | VALUES), max_size=3))
def test_apollo_set_overrides_parse_or_one_line_error(items):
    from lidarmt.lidar.perception.apollo.config import ApolloConfig

    try:
        cfg = ApolloConfig().with_overrides([k + sep + v for k, sep, v in items])
    except UserError as err:
        _one_line(err)
        return
    assert isinstance(cfg, ApolloConfig)
    for name, value in cfg.to_dict().items():  # what --set accepts is usable: no NaN/inf threshold or size
        if isinstance(value, float):
            assert math.isfinite(value), f"--set accepted {name}={value}"


def _apollo_float_keys() -> list[str]:
    from lidarmt.lidar.perception.apollo.config import ApolloConfig

    return sorted(k for k, v in ApolloConfig().to_dict().items() if isinstance(v, float))


@settings(SETTINGS, max_examples=30)
@given(key=st.sampled_from(_apollo_float_keys()),
       value=st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309"]))
def test_apollo_set_refuses_non_finite_numbers(key, value):
    """``--set objectness_thresh=nan`` must be a one-line error, not a run where every comparison is false."""
    from lidarmt.lidar.perception.apollo.config import ApolloConfig

    with pytest.raises(UserError) as info:
        ApolloConfig().with_overrides([f"{key}={value}"])
    _one_line(info.value)


@SETTINGS
@given(available=st.integers(-3, 50), count=st.none() | st.integers(-3, 60),
       seed=st.integers(-(2**70), 2**70))
def test_frame_selection_is_sorted_distinct_indices_or_one_line_error(available, count, seed):
    """``--frames`` / ``--seed`` of a campaign: any integers give valid frame indices or a one-line UserError
    (``--seed -1`` used to reach NumPy's SeedSequence and end in a ValueError traceback)."""
    from lidarmt.lidar.mr1.campaign import select_frames

    try:
        chosen = select_frames(available, count, seed)
    except UserError as err:
        _one_line(err)
        return
    assert list(chosen) == sorted(set(chosen)) and all(0 <= i < available for i in chosen)
    assert len(chosen) == (available if count is None else count)


# ----------------------------------------------------------------------------------------------- output paths

#: every option through which a command writes (found on every command by walking the tree)
OUTPUT_OPTIONS = ("--out", "--sheet", "--map-out", "--dataset")
#: every option or argument that names something a command reads; a path option must be in one of the two sets,
#: so a new command's output option cannot be added without this test covering it
INPUT_PARAMS = ("recording", "src_path", "path", "bundle", "--bag", "--map", "--images", "--data", "--model",
                "--recipe", "--library", "--weights", "--kitti", "--baseline", "--pairs", "--profile",
                "--profile-bag", "--style-from", "--domain-a", "--domain-b", "--translator", "--validate",
                "--from-recording", "--sut", "--ship")


def _outputs() -> list[tuple[tuple[str, ...], str]]:
    return [(path, p.opts[0]) for path, params in sorted(TREE.items()) for p in params
            if p.param_type_name == "option" and p.opts[0] in OUTPUT_OPTIONS]


def _vector(path: tuple[str, ...], option: str, value: str, *, inputs: str | None = None) -> list[str]:
    """The command with its required parameters (a missing path each, or ``inputs``) and ``option value``."""
    argv = list(path)
    for p in TREE[path]:
        name = p.opts[0] if p.param_type_name == "option" else p.name
        if name == option or getattr(p, "is_flag", False):
            continue
        given = inputs if (inputs is not None and name in INPUT_PARAMS) else None
        if not (p.required or given):
            continue
        value_ = given or "no/such/input"
        count = max(1, p.nargs if isinstance(p.nargs, int) else 1)
        if p.param_type_name == "argument":
            argv += [value_] * count
        else:
            argv += [p.opts[0], *([value_] * count)]
    if path == ("simulate",) and option == "--map-out":
        argv += ["--out", "fresh.bag"]
    return [*argv, option, value]


def test_every_output_option_is_covered():
    """Each command's output options are found by the walk (a renamed option would drop out silently)."""
    found = {(" ".join(path), opt) for path, opt in _outputs()}
    for want in [("export", "--out"), ("perceive", "--out"), ("roi", "--out"), ("transforms", "--sheet"),
                 ("camera predict", "--out"), ("camera transforms", "--sheet"), ("camera translate", "--out"),
                 ("fuzz", "--out"), ("bench", "--out"), ("evaluate", "--out"), ("simulate", "--out")]:
        assert want in found, want


@pytest.mark.parametrize("path,option", _outputs(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_an_output_that_exists_is_refused_without_force(path, option):
    """Issue 29 item 8: one rule for every output path. A file that exists where a command would write is
    refused in one line naming it, before any work, and left as it was (``--out x.mcap``, ``--sheet``,
    ``perceive --out`` overwrote files silently); a folder output refuses a file."""
    for suffix in (".png", ".mcap", ".json", ".bag", ".pt", ""):
        with scratch_cwd() as cwd:
            target = cwd / f"taken{suffix}"
            target.write_bytes(b"precious")
            argv = _vector(path, option, target.name)
            rc, out, err = run_cli(argv)
            check_outcome(argv, rc, out, err, {str(p.relative_to(cwd)) for p in cwd.rglob("*")}, cwd)
            assert target.read_bytes() == b"precious", f"{argv} overwrote {target.name}"
            assert rc == 2, f"{argv}: {rc} {err[-300:]!r}"
            if "taken" in err and ("exists" in err or "not a folder" in err or "is a file" in err):
                return
    pytest.fail(f"{' '.join(path)} {option}: an existing file was never refused as existing; last error: {err!r}")


@pytest.mark.slow  # 15 vectors per command
@pytest.mark.parametrize("path,option", _outputs(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_an_output_that_is_an_input_is_refused_even_with_force(path, option):
    """Issue 29 item 8: an output is never one of the command's inputs, nor inside an input folder, --force or
    not (``camera translate --images D --out D --force`` replaced the sources)."""
    inputs = [p for p in TREE[path] if (p.opts[0] if p.param_type_name == "option" else p.name) in INPUT_PARAMS]
    if not inputs:
        pytest.skip(f"{' '.join(path)} reads no path")
    has_force = any("--force" in p.opts or "--overwrite" in p.opts for p in TREE[path])
    for shape in ("file", "folder"):
        refused_as_input = []
        for suffix in (".png", ".mcap", ".json", ".bag", ""):
            name = f"in{suffix}"
            for target in ([name] if shape == "file" else [name, f"{name}/x{suffix}"]):
                with scratch_cwd() as cwd:
                    src = cwd / name
                    if shape == "folder":
                        src.mkdir()
                        kept = src / "data.bin"
                    else:
                        kept = src
                    kept.write_bytes(b"precious")
                    argv = _vector(path, option, target, inputs=name) + (["--force"] if has_force else [])
                    before = {str(p.relative_to(cwd)) for p in cwd.rglob("*")}
                    rc, out, err = run_cli(argv)
                    check_outcome(argv, rc, out, err, before, cwd)
                    assert rc == 2, f"{argv}: {rc} {err[-300:]!r}"
                    assert kept.read_bytes() == b"precious", f"{argv} changed its input"
                    refused_as_input.append("input" in err)
        assert any(refused_as_input), f"{' '.join(path)} {option}: an input {shape} was never refused as an input"
