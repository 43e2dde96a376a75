"""``lidarmt fuzz`` / ``lidarmt replay`` from the command line: bad input, folders, full disk, exit codes."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from test_fuzz_support import write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine.journal import JOURNAL_NAME


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("cli") / "frames", 3)


def fuzz(rec: Path, out: Path, *extra: str) -> list[str]:
    return ["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
            "test_fuzz_support:grid_sut", "--radius", "30", "--out", str(out), "--quiet", *extra]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("bad, what", [("10,abc", "not an integer"), ("0", "at least 1"), ("-5", "at least 1"),
                                       ("1.5", "not an integer"), ("20000000", "absurd"), ("10,,100", "empty")])
def test_bad_n(rec, tmp_path, capsys, bad, what):
    assert main(fuzz(rec, tmp_path / "o", "--n", bad)) == 2
    assert what in one_line_error(capsys)
    assert not (tmp_path / "o").exists()


def test_more_frames_than_exist(rec, tmp_path, capsys):
    assert main(fuzz(rec, tmp_path / "o", "--frames", "7")) == 2
    assert "holds only 3 frames" in one_line_error(capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_recording_without_poses(tmp_path, capsys):
    nopose = write_scenes(tmp_path / "nopose", 2, with_pose=False)
    world = write_road_geojson(tmp_path / "world.geojson")
    args = fuzz(nopose, tmp_path / "o", "--n", "10")
    args[args.index("--map") + 1] = str(world)
    assert main(args) == 2
    err = one_line_error(capsys)
    assert "has no pose" in err and "--map-frame sensor" in err
    assert not (tmp_path / "o").exists()
    # a map drawn in the sensor frame needs no pose: declared in the GeoJSON, or forced with --map-frame sensor
    args[args.index("--map") + 1] = str(write_road_geojson(tmp_path / "sensor.geojson", frame="sensor"))
    assert main(args) == 0
    args[args.index("--map") + 1] = str(world)
    assert main([*args, "--force", "--map-frame", "sensor"]) == 0


@pytest.mark.slow
def test_real_hdmap_roi_gives_the_same_verdicts_as_the_strip(rec, tmp_path):
    args = fuzz(rec, tmp_path / "map", "--n", "10,1000", "--bundles", "0")
    args[args.index("--map") + 1] = str(write_road_geojson(tmp_path / "world.geojson"))
    assert main(args) == 0
    assert main(fuzz(rec, tmp_path / "strip", "--n", "10,1000", "--bundles", "0")) == 0
    a = json.loads((tmp_path / "map" / "summary.json").read_text())["by_n"]
    b = json.loads((tmp_path / "strip" / "summary.json").read_text())["by_n"]
    assert [r["pairs"] for r in a] == [3, 3]
    assert a[1]["count_relation"]["k"] > 0 and b[1]["count_relation"]["k"] > 0


def test_missing_inputs(rec, tmp_path, capsys):
    assert main(fuzz(tmp_path / "nothing.bag", tmp_path / "o")) == 2
    assert "nothing.bag" in one_line_error(capsys)
    args = fuzz(rec, tmp_path / "o")
    args[args.index("--map") + 1] = str(tmp_path / "nomap")
    assert main(args) == 2
    assert "nomap" in one_line_error(capsys)
    assert main(fuzz(rec, tmp_path / "o", "--sut", "no_such_module_xyz:make")) == 2
    assert "no_such_module_xyz" in one_line_error(capsys)


@pytest.mark.slow
def test_existing_out_refused_then_force_and_resume(rec, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(fuzz(rec, out, "--n", "10,1000", "--bundles", "1", "--ddmin-budget", "10")) == 0
    summary = (out / "summary.json").read_text()
    for name in ("journal.jsonl", "summary.json", "run.json", "junit.xml", "report.md", "classes.png", "rates.png"):
        assert (out / name).is_file(), name
    capsys.readouterr()
    assert main(fuzz(rec, out, "--n", "10,1000")) == 2
    assert "--resume" in one_line_error(capsys)
    # resume of a complete campaign changes nothing; other settings are refused
    assert main(fuzz(rec, out, "--n", "10,1000", "--resume", "--bundles", "1", "--ddmin-budget", "10")) == 0
    assert (out / "summary.json").read_text() == summary
    capsys.readouterr()
    assert main(fuzz(rec, out, "--n", "10,100", "--resume")) == 2
    assert "ns" in one_line_error(capsys)
    assert main(fuzz(rec, out, "--n", "10", "--force", "--bundles", "0")) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["ns"] == [10]
    assert not (out / "violations").exists()


@pytest.mark.slow
def test_fail_on_violation_exit_code(rec, tmp_path):
    assert main(fuzz(rec, tmp_path / "a", "--n", "1000", "--bundles", "0", "--fail-on-violation")) == 1
    # the grid SUT is blind to points beyond its 8 m grid: no violation, exit 0
    assert main(fuzz(rec, tmp_path / "b", "--n", "10", "--bundles", "0", "--fail-on-violation", "--sut-option",
                     "half=8")) == 0


@pytest.mark.slow
def test_full_disk_is_one_clear_line_and_resumable(rec, tmp_path, capsys, monkeypatch):
    import lidarmt.engine.journal as jmod

    out = tmp_path / "o"
    real = jmod.os.fsync
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:  # header and two verdicts fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(jmod.os, "fsync", fsync)
    assert main(fuzz(rec, out, "--n", "10,1000", "--bundles", "0")) == 2
    err = one_line_error(capsys)
    assert "disk is full" in err and "--resume" in err
    lines = (out / JOURNAL_NAME).read_bytes().splitlines(keepends=True)
    assert len(lines) == 3 and all(x.endswith(b"\n") for x in lines)  # no torn line left behind
    assert not (out / "summary.json").exists()
    monkeypatch.setattr(jmod.os, "fsync", real)
    assert main(fuzz(rec, out, "--n", "10,1000", "--bundles", "0", "--resume")) == 0
    assert json.loads((out / "summary.json").read_text())["pairs_done"] == 6


def test_full_disk_while_writing_reports(rec, tmp_path, capsys, monkeypatch):
    import lidarmt._atomic as amod

    out = tmp_path / "o"

    def replace(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(amod.os, "replace", replace)
    assert main(fuzz(rec, out, "--n", "10", "--bundles", "0")) == 2
    assert "No space left" in one_line_error(capsys)
    assert not (out / "summary.json").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_replay_cli(rec, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(fuzz(rec, out, "--n", "1000", "--bundles", "1", "--ddmin-budget", "5")) == 0
    (bundle,) = (out / "violations").iterdir()
    capsys.readouterr()
    # the bundle names its SUT and ROI as test_fuzz_support:...: code, which replay runs only when trusted
    assert main(["replay", str(bundle)]) == 2
    assert "pass --trust-code to allow it" in one_line_error(capsys)
    assert main(["replay", str(bundle), "--trust-code"]) == 0
    out_text = capsys.readouterr().out
    assert "bit for bit" in out_text and "importing and running SUT 'test_fuzz_support:grid_sut'" in out_text
    assert main(["replay", str(tmp_path)]) == 2
    assert "not a bug bundle" in one_line_error(capsys)
    j = json.loads((bundle / "bundle.json").read_text())
    j["verdict"]["count_violation"] = not j["verdict"]["count_violation"]
    (bundle / "bundle.json").write_text(json.dumps(j))
    assert main(["replay", str(bundle), "--trust-code"]) == 1


def test_sut_that_cannot_be_built_leaves_no_run_folder(rec, tmp_path, capsys):
    for workers in ("1", "2"):
        assert main(fuzz(rec, tmp_path / "o", "--sut-option", "no_such_option=1", "--workers", workers)) == 2
        assert not (tmp_path / "o").exists()
        capsys.readouterr()


@pytest.mark.parametrize("args, what", [
    (["--frames", "0"], "at least one frame"), (["--trials", "0"], "--trials"), (["--workers", "0"], "--workers"),
    (["--radius", "-5"], "positive"), (["--region", "ring"], "--region"), (["--timeout", "0"], "--timeout"),
    (["--bundles", "some"], "--bundles"), (["--mode", "turbo"], "--mode"), (["--sut-option", "novalue"], "KEY=VALUE"),
    (["--resume", "--force"], "contradict"), (["--resume"], "no campaign journal"),
])
def test_bad_options_are_one_line_errors(rec, tmp_path, capsys, args, what):
    assert main(fuzz(rec, tmp_path / "o", "--n", "10", *args)) == 2
    assert what in one_line_error(capsys)
    assert not (tmp_path / "o").exists()
