"""``--sut exec:COMMAND``: the exec protocol's framing, campaigns through the Python reference server and the
minimal C++ server, crashes and hangs of the program (findings with its stderr, restart), and the trust gate.

The reference server (examples/exec_sut/reference_server.py) runs in a child process and wraps the tests' grid
SUT (test_fuzz_support) or one of the misbehaving SUTs below, so this module must be importable there too:
the child finds tests/ through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_support import GridSut, StripRoi, make_scene, source_size, write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.engine.manifest import MANIFEST_NAME, write_manifest
from lidarmt.errors import ArgumentError
from lidarmt.lidar.mr1.campaign import CampaignConfig, load_tally, run_campaign
from lidarmt.lidar.mr1.inject import Region
from lidarmt.lidar.perception.exec_sut import (
    HEADER,
    ExecPerception,
    ExecProtocolError,
    ExecReportedError,
    ExecStartError,
    ExecTimeout,
    decode_request,
    encode_request,
    parse_command,
)
from lidarmt.lidar.perception.guard import MalformedOutput, guarded_detect
from lidarmt.lidar.perception.registry import get_perception
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec, UntrustedCodeError, build_sut, code_in_sut
from lidarmt.types import Frame, make_points

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SERVER = ROOT / "examples" / "exec_sut" / "reference_server.py"
CPP = ROOT / "examples" / "exec_sut" / "minimal_server.cpp"


def served(sut: str, *extra: str) -> str:
    """The ``exec:`` spec of the reference server wrapping ``sut`` (absolute paths: replay runs it anywhere)."""
    return f"exec:{sys.executable} {SERVER} --sut {sut} {' '.join(extra)}".strip()


# ----------------------------------------------------------------------------------------------- misbehaving SUTs
# (built inside the reference server's process: that process is what crashes or hangs)


class LoudDieSut(GridSut):
    """On every follow-up of ``bad_frame``: says why on stderr, then dies as a segfaulting node would."""

    name = "loud-die"

    def __init__(self, bad_frame: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.bad_frame = bad_frame

    def detect(self, frame: Frame, roi):
        if frame.index == self.bad_frame and len(frame) != source_size(frame.index):
            print(f"loud-die: giving up on frame {frame.index} (pid {os.getpid()})", file=sys.stderr, flush=True)
            os._exit(3)
        return super().detect(frame, roi)


def loud_die_sut(**kw) -> LoudDieSut:
    return LoudDieSut(**kw)


class PidHangSut(GridSut):
    """Writes its pid into ``pids`` (a folder), then hangs on every follow-up of ``bad_frame``."""

    name = "pid-hang"

    def __init__(self, bad_frame: int = 2, pids: str = "", **kw) -> None:
        super().__init__(**kw)
        self.bad_frame, self.pids = bad_frame, pids

    def detect(self, frame: Frame, roi):
        if frame.index == self.bad_frame and len(frame) != source_size(frame.index):
            if self.pids:
                Path(self.pids, str(os.getpid())).touch()
            print(f"pid-hang: stuck on frame {frame.index}", file=sys.stderr, flush=True)
            time.sleep(600)  # far longer than any bound below: returning early proves the kill
        return super().detect(frame, roi)


def pid_hang_sut(**kw) -> PidHangSut:
    return PidHangSut(**kw)


class RaiseSut(GridSut):
    name = "raise"

    def detect(self, frame: Frame, roi):
        raise ZeroDivisionError("boom in the served SUT")


class TruckSut(GridSut):
    name = "truck"

    def detect(self, frame: Frame, roi):
        out = super().detect(frame, roi)
        for o in out:
            o.cls = "truck"  # type: ignore[assignment]
        return out


def raise_sut(**kw) -> RaiseSut:
    return RaiseSut(**kw)


def truck_sut(**kw) -> TruckSut:
    return TruckSut(**kw)


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def tests_on_pythonpath(monkeypatch):
    """The reference server imports test_fuzz_support / test_exec_sut by name."""
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(TESTS) + (os.pathsep + old if old else ""))


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("exec") / "frames", 4)


def config(rec: Path, sut: str, **kw) -> CampaignConfig:
    opts = kw.pop("sut_options", {})
    base = dict(ns=(10, 1000), frames=(0, 1, 2, 3), seed=0, trials=1, region=Region.disk(30.0))
    base.update(kw)
    return CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"), SutSpec(sut, opts), **base)


def records(out: Path) -> list[dict]:
    return list(iter_records(out / JOURNAL_NAME))


# ----------------------------------------------------------------------------------------------- framing


def test_request_round_trip_with_and_without_pose():
    frame = make_scene(3)
    roi = StripRoi().indices(frame)
    data = encode_request(frame, roi, seq=7)
    assert len(data) == HEADER.size + 16 * len(frame) + 128 + 4 * len(roi)
    req = decode_request(data)
    assert req["seq"] == 7 and req["frame_index"] == 3 and req["stamp"] == frame.stamp and not req["roi_empty"]
    for f in ("x", "y", "z", "intensity"):
        assert np.array_equal(req["points"][f], frame.points[f])
    assert np.array_equal(req["pose"], frame.pose) and np.array_equal(req["roi_indices"], roi)
    # no pose, an empty ROI
    bare = Frame(make_points(np.zeros((2, 3), np.float32)))
    req = decode_request(encode_request(bare, np.zeros(0, np.int64), seq=1, roi_empty=True))
    assert req["pose"] is None and req["roi_empty"] and len(req["points"]) == 2 and not len(req["roi_indices"])
    with pytest.raises(ValueError, match="not a version-1 request"):
        decode_request(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="header says"):
        decode_request(data[:-4])
    with pytest.raises(ValueError, match="ROI index outside"):
        encode_request(bare, np.array([5]), seq=1)


def test_command_is_split_like_a_shell_without_one():
    assert parse_command("exec:./det --name 'a b' x=$HOME") == ["./det", "--name", "a b", "x=$HOME"]
    with pytest.raises(ArgumentError, match="no command after exec:"):
        parse_command("exec:  ")


def test_obstacles_through_the_server_are_the_in_process_ones():
    frame, roi = make_scene(1), StripRoi()
    want = GridSut().detect(frame, roi)
    with get_perception(served("test_fuzz_support:grid_sut")) as sut:
        got = guarded_detect(sut, frame, roi)
        assert sut.name == "grid-test"
        for a, b in zip(got, want, strict=True):
            assert a.cls == b.cls and a.score == b.score and np.array_equal(a.point_indices, b.point_indices)
            assert np.array_equal(a.center, b.center) and np.array_equal(a.polygon, b.polygon)
    # --no-box: classes and points only, lidarmt builds Apollo's MinBox of the points
    with get_perception(served("test_fuzz_support:grid_sut", "--no-box")) as sut:
        got = guarded_detect(sut, frame, roi)
    assert [o.cls for o in got] == [o.cls for o in want]
    assert all(o.length > 0 and len(o.polygon) >= 3 for o in got)


@pytest.mark.slow
def test_error_replies_and_bad_output_are_findings(tmp_path):
    frame, roi = make_scene(0), StripRoi()
    with get_perception(served("test_exec_sut:raise_sut")) as sut:
        pid = sut.pid
        with pytest.raises(ExecReportedError, match="ZeroDivisionError: boom in the served SUT"):
            sut.detect(frame, roi)
        assert sut.pid == pid  # an error reply leaves the program running
    with get_perception(served("test_exec_sut:truck_sut")) as sut, \
            pytest.raises(MalformedOutput, match="class 'truck' is not one of"):
        guarded_detect(sut, frame, roi)
    # a program that writes something else than replies on stdout: a protocol error, restarted
    chatty = tmp_path / "chatty.py"
    chatty.write_text("import sys\ninput()\nprint('{\"lidarmt_exec\": 1, \"name\": \"chatty\"}', flush=True)\n"
                      "while sys.stdin.buffer.read(48):\n    print('hello there', flush=True)\n")
    with ExecPerception([sys.executable, str(chatty)]) as sut:
        pid = sut.pid
        with pytest.raises(ExecProtocolError, match="'hello there' to request 1 is not a reply line"):
            sut.detect(Frame(make_points(np.zeros((0, 3), np.float32))), roi)
        assert sut.pid != pid and sut.restarts == 1


def test_a_command_that_cannot_start_is_one_user_error(rec, tmp_path, capsys):
    with pytest.raises(ExecStartError, match="no such program"):
        get_perception(f"exec:{tmp_path}/no-such-detector")
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\nprint('cannot open the model file', file=sys.stderr)\nsys.exit(4)\n")
    with pytest.raises(ExecStartError, match=r"died during the handshake \(exit status 4\).*cannot open the model"):
        get_perception(f"exec:{sys.executable} {quits}")
    talks = tmp_path / "talks.py"
    talks.write_text("print('loading model...')\ninput()\n")
    with pytest.raises(ExecStartError, match="its first line 'loading model...' is not the handshake"):
        get_perception(f"exec:{sys.executable} {talks}")
    capsys.readouterr()
    assert main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                 f"exec:{sys.executable} {quits}", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "\n" not in err and "Traceback" not in err, err
    assert "exit status 4" in err and "cannot open the model file" in err


@pytest.mark.slow
def test_own_timeout_kills_and_restarts(tmp_path):
    frame, roi = make_scene(2), StripRoi()
    follow = frame.with_extra_points(make_points(np.full((5, 3), 30.0, np.float32)))
    with get_perception(served("test_exec_sut:pid_hang_sut"), timeout=3.0, pids=str(tmp_path)) as sut:
        assert len(sut.detect(frame, roi)) > 0
        t0 = time.monotonic()
        with pytest.raises(ExecTimeout, match=r"no answer to frame 2 \(request 2\) within 3 s") as err:
            sut.detect(follow, roi)
        assert time.monotonic() - t0 < 300  # stopped, not slept out (the load may slow the restart)
        assert "pid-hang: stuck on frame 2" in err.value.stderr and sut.restarts == 1
        (hung,) = [int(p.name) for p in tmp_path.iterdir()]
        assert not _alive(hung) and sut.pid != hung
        assert len(sut.detect(frame, roi)) > 0  # the restarted program serves the next call


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


# ----------------------------------------------------------------------------------------------- campaigns


@pytest.mark.slow
def test_campaign_through_the_reference_server_equals_in_process(rec, tmp_path):
    world = write_road_geojson(tmp_path / "world.geojson")
    common = ["fuzz", "--bag", str(rec), "--map", str(world), "--radius", "30", "--n", "10,1000", "--trials", "2",
              "--quiet"]
    assert main([*common, "--sut", "test_fuzz_support:grid_sut", "--bundles", "0", "--out", str(tmp_path / "a")]) == 0
    assert main([*common, "--sut", served("test_fuzz_support:grid_sut"), "--bundles", "1", "--ddmin-budget", "6",
                 "--out", str(tmp_path / "b")]) == 0
    ta, tb = load_tally(tmp_path / "a")[1], load_tally(tmp_path / "b")[1]
    assert tb.done == 16 and tb.to_dict() == ta.to_dict()
    assert sum(t.count_violations + t.subset_violations for t in tb.by_n.values()) > 0
    sa, sb = (json.loads((tmp_path / x / "summary.json").read_text()) for x in "ab")
    assert {k: v for k, v in sa.items() if k in ("pairs_done", "by_n")} == {k: v for k, v in sb.items()
                                                                       if k in ("pairs_done", "by_n")}
    # its bundle names the program: replay runs it only with --trust-code ...
    (bundle,) = (tmp_path / "b" / "violations").iterdir()
    assert main(["replay", str(bundle)]) == 2
    assert main(["replay", str(bundle), "--trust-code"]) == 0
    # ... and a bundle edited to run something else does not run it
    marker = tmp_path / "pwned"
    info = json.loads((bundle / "bundle.json").read_text())
    info["config"]["sut"] = {"name": f"exec:touch {marker}", "options": {}}
    (bundle / "bundle.json").write_text(json.dumps(info))
    write_manifest(bundle, sorted(p.name for p in bundle.iterdir() if p.is_file() and p.name != MANIFEST_NAME))
    assert main(["replay", str(bundle)]) == 2
    assert main(["replay", str(bundle), "--from-recording"]) == 2
    assert not marker.exists()


@pytest.mark.slow
def test_server_crash_mid_campaign_is_a_finding_with_its_stderr(rec, tmp_path):
    r = run_campaign(config(rec, served("test_exec_sut:loud_die_sut"), sut_options={"bad_frame": 1}),
                     tmp_path / "run")
    assert r.tally.done == 8
    got = {(x["frame"], x["n"]): x for x in records(tmp_path / "run")}
    crashes = [x for x in got.values() if x["status"] != "ok"]
    assert {(x["frame"], x["n"]) for x in crashes} == {(1, 10), (1, 1000)}
    for c in crashes:
        assert c["status"] == "crash" and c["error"].startswith("ExecCrashed: exec SUT 'loud-die'")
        assert "exit status 3" in c["error"] and "restarted it" in c["error"]
        assert "loud-die: giving up on frame 1" in c["error"]  # the program's stderr, in the finding
    assert all(got[(f, n)]["status"] == "ok" for f in (0, 2, 3) for n in (10, 1000))  # later frames: restarted


@pytest.mark.slow
def test_server_hang_is_a_timeout_finding_killed_and_restarted(rec, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    cfg = config(rec, served("test_exec_sut:pid_hang_sut"), sut_options={"bad_frame": 2, "pids": str(pids)},
                 timeout=4.0, ns=(10,))
    t0 = time.perf_counter()
    r = run_campaign(cfg, tmp_path / "run")
    assert time.perf_counter() - t0 < 300  # stopped, not slept out (a margin for a loaded machine)
    assert r.tally.by_n[10].timeouts == 1 and r.tally.by_n[10].pairs == 3
    (t,) = [x for x in records(tmp_path / "run") if x["status"] == "timeout"]
    assert t["frame"] == 2 and "was killed because its call was interrupted" in t["traceback"]
    assert "pid-hang: stuck on frame 2" in t["traceback"]  # the stderr tail, as a note on the timeout
    (hung,) = [int(p.name) for p in pids.iterdir()]
    assert not _alive(hung)


@pytest.mark.slow
def test_worker_processes_take_their_program_with_them(rec, tmp_path):
    """workers=2: a hung call kills the worker; the kernel kills its program (PR_SET_PDEATHSIG)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    cfg = config(rec, served("test_exec_sut:pid_hang_sut"), sut_options={"bad_frame": 2, "pids": str(pids)},
                 timeout=4.0, ns=(10,))
    r = run_campaign(cfg, tmp_path / "run", workers=2)
    assert r.tally.by_n[10].timeouts == 1 and r.tally.by_n[10].pairs == 3
    (hung,) = [int(p.name) for p in pids.iterdir()]
    deadline = time.monotonic() + 5
    while _alive(hung) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(hung)


@pytest.mark.slow
def test_campaign_through_the_cpp_server(rec, tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++ or g++) on this machine")
    exe = tmp_path / "minimal_server"
    subprocess.run([cxx, "-O2", "-std=c++17", "-o", str(exe), str(CPP)], check=True, timeout=120)
    r = run_campaign(config(rec, f"exec:{exe}", sut_options={"cell": 1.0, "ground": -1.4}), tmp_path / "run")
    assert r.tally.done == 8 and all(x["status"] == "ok" for x in records(tmp_path / "run"))
    first = records(tmp_path / "run")[0]["verdict"]["counts_source"]
    assert sum(first.values()) >= 3 and first["car"] >= 1  # it really detects the scene's cars
    # the same obstacles as the grid test SUT restricted to the ROI's points above ground
    frame, roi = make_scene(0), StripRoi()
    with get_perception(f"exec:{exe}") as sut:
        got = guarded_detect(sut, frame, roi)
    assert sut.name == "grid-cpp" and all(o.cls.value in ("car", "pedestrian", "cyclist", "unknown") for o in got)
    inroi = set(roi.indices(frame).tolist())
    assert all(set(o.point_indices.tolist()) <= inroi for o in got)


# ----------------------------------------------------------------------------------------------- trust


def test_exec_spec_from_a_file_is_refused_without_trust_code(tmp_path):
    marker = tmp_path / "x"
    spec = SutSpec(f"exec:touch {marker}")
    assert code_in_sut(spec) == [f"SUT 'exec:touch {marker}' (runs the program 'touch {marker}')"]
    with pytest.raises(UntrustedCodeError, match="runs the program.*--trust-code"):
        build_sut(spec, origin=tmp_path / "bundle.json")
    assert not marker.exists()
    # the gate was all that stood in the way: trusted, the program runs (and fails the handshake)
    with pytest.raises(ExecStartError, match="died during the handshake"):
        build_sut(spec, origin=tmp_path / "bundle.json", trust_code=True)
    assert marker.exists()
