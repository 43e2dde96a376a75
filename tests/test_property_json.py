"""Property tests of the JSON a stranger may send (issue 20, item 6): ``bundle.json``, ``MANIFEST.json``, journal
lines and a Keras file's ``model_config``, nested to any depth or holding values of any type, either read or
end in one :class:`lidarmt.errors.UserError` line: never ``RecursionError``, ``TypeError``, ``KeyError``...

Hypothesis settings as in the other property tests: derandomised, no database, no deadline.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lidarmt.errors import UserError

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

PROPS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])

#: JSON nested ``depth`` deep, from a few levels to far past Python's recursion limit
DEPTH = st.integers(min_value=1, max_value=60_000)
OPENER = st.sampled_from(["[", '{"a":', '{"config":', '[{"x":'])

#: any JSON value
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                      | st.text(max_size=8),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                      max_leaves=12)


def nested(opener: str, depth: int) -> str:
    closer = "".join({"[": "]", "{": "}"}[c] for c in reversed(opener) if c in "[{")
    return opener * depth + "1" + closer * depth


def _user_error_or_value(fn):
    try:
        return fn()
    except UserError as err:
        assert "\n" not in str(err), str(err)
        return None


# ----------------------------------------------------------------------------------------------- bundle.json


@PROPS
@given(opener=OPENER, depth=DEPTH)
def test_bundle_json_of_any_depth(opener, depth):
    from lidarmt.lidar.mr1.replay import load_bundle

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "bundle.json").write_text(nested(opener, depth))
        _user_error_or_value(lambda: load_bundle(d))


@pytest.mark.slow
@PROPS
@given(value=VALUES)
def test_bundle_json_of_any_value_through_replay(value, capsys):
    from lidarmt.cli import main

    with tempfile.TemporaryDirectory() as d:
        doc = {"version": 2, "kind": "camera", "config": value} if not isinstance(value, dict) else value
        (Path(d) / "bundle.json").write_text(json.dumps(doc))
        capsys.readouterr()
        rc = main(["replay", d])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("lidarmt: error:"), err


# ----------------------------------------------------------------------------------------------- MANIFEST.json


@PROPS
@given(opener=OPENER, depth=DEPTH)
def test_manifest_of_any_depth(opener, depth):
    from lidarmt.engine.manifest import MANIFEST_NAME, verify_manifest

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / MANIFEST_NAME).write_text(nested(opener, depth))
        problems = verify_manifest(d)
        assert problems and all("\n" not in str(p) for p in problems)


# ----------------------------------------------------------------------------------------------- journal


@pytest.fixture(scope="module")
def journal_run(tmp_path_factory):
    """A finished tiny camera campaign: its folder and configuration."""
    from test_camera_campaign import config, write_udacity

    from lidarmt.engine.campaign import run_campaign

    root = tmp_path_factory.mktemp("journal")
    cfg = config(write_udacity(root / "drive", 2), transforms="brightness", frames=(0, 1))
    run_campaign(cfg, root / "run")
    return root / "run", cfg


def _with_line(run: Path, index: int, line: str) -> Path:
    from lidarmt.engine.journal import JOURNAL_NAME

    lines = (run / JOURNAL_NAME).read_text().splitlines(keepends=True)
    lines[index] = line + "\n"
    d = Path(tempfile.mkdtemp())
    (d / JOURNAL_NAME).write_text("".join(lines))
    return d


@PROPS
@given(opener=OPENER, depth=DEPTH, header=st.booleans())
def test_journal_lines_of_any_depth(journal_run, opener, depth, header):
    from lidarmt.engine.campaign import load_tally

    run, _ = journal_run
    folder = _with_line(run, 0 if header else 3, nested(opener, depth))
    _user_error_or_value(lambda: load_tally(folder))


@PROPS
@given(field=st.sampled_from(["frame", "key", "status", "pred", "pred_t", "label", "type", "model", "param",
                              "trial", "transform", None]),
       value=VALUES)
def test_journal_records_of_wrong_types_on_resume(journal_run, field, value):
    """A record whose field holds any JSON value (or a whole line that is any JSON value): resuming and folding
    the totals either work or end in one line."""
    import shutil

    from lidarmt.camera.relations import Criteria
    from lidarmt.engine.campaign import load_tally, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME

    run, cfg = journal_run
    lines = (run / JOURNAL_NAME).read_text().splitlines()
    rec = json.loads(lines[3])
    if field is None:
        rec = value
    else:
        rec[field] = value
    folder = _with_line(run, 3, json.dumps(rec))

    def fold():
        c, t = load_tally(folder)
        return t.summary(c.to_dict(), Criteria(), c.param_labels())

    _user_error_or_value(fold)
    try:
        _user_error_or_value(lambda: run_campaign(cfg, folder, resume=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- Keras


@PROPS
@given(opener=OPENER, depth=DEPTH)
def test_keras_model_config_of_any_depth(opener, depth):
    import h5py

    from lidarmt.camera.models.keras import read_keras_file

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.h5"
        with h5py.File(path, "w") as f:
            f.attrs["model_config"] = nested(opener, depth).encode()
        _user_error_or_value(lambda: read_keras_file(path))


@PROPS
@given(value=VALUES)
def test_keras_model_config_of_any_value(value):
    import h5py

    from lidarmt.camera.models.keras import read_keras_file

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.h5"
        with h5py.File(path, "w") as f:
            f.attrs["model_config"] = json.dumps(value).encode()
        _user_error_or_value(lambda: read_keras_file(path))


@PROPS
@given(cls=st.sampled_from(["Sequential", "Model", "Functional"]), inner=VALUES,
       layer=st.dictionaries(st.sampled_from(["class_name", "config", "name", "inbound_nodes"]), VALUES, max_size=4))
def test_keras_model_config_of_keras_shape_with_any_values(cls, inner, layer):
    import h5py

    from lidarmt.camera.models.keras import read_keras_file

    with tempfile.TemporaryDirectory() as d:
        for config in (inner, {"name": "m", "layers": [layer, layer], "input_layers": inner, "output_layers": inner},
                       [layer]):
            path = Path(d) / "m.h5"
            with h5py.File(path, "w") as f:
                f.attrs["model_config"] = json.dumps({"class_name": cls, "config": config}).encode()
            _user_error_or_value(lambda p=path: read_keras_file(p))


@PROPS
@given(opener=OPENER, depth=DEPTH)
def test_bench_json_of_any_depth(opener, depth):
    from lidarmt.bench.folder import read_bench

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "bench.json").write_text(nested(opener, depth))
        _user_error_or_value(lambda: read_bench(d))
