"""Campaigns on Ray (``--backend ray``): the same records, summaries and findings as the local pool.

One local Ray with 2 CPUs for the module (started once, shut down after). The LiDAR campaign's SUT hangs on
the follow-ups of one frame (a timeout finding per pair, the actor killed and restarted, the rest completed) and
kills its own process on another's (a crash finding); the camera campaign uses the fake steering model of
test_camera_campaign and is resumed on Ray from a journal the local backend wrote. Tests that need Ray skip
when it is not installed; the argument checks and the install hint do not need it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest
from test_fuzz_support import GridSut, source_size, write_scenes

from lidarmt.engine.campaign import clamp_workers, run_campaign
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.mr1.campaign import CampaignConfig
from lidarmt.lidar.mr1.inject import Region
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason='ray is not installed (pip install "lidarmt[ray]")')


# ----------------------------------------------------------------------------------------------- fixtures


class HangOrDieSut(GridSut):
    """Hangs on every follow-up of frame ``hang`` and kills its own process on every follow-up of ``die``."""

    name = "hang-or-die"

    def __init__(self, hang: int = 2, die: int = 3, sleep: float = 120.0, **kw) -> None:
        super().__init__(**kw)
        self.hang, self.die, self.sleep = hang, die, sleep

    def detect(self, frame, roi):
        follow = len(frame) != source_size(frame.index)
        if follow and frame.index == self.hang:
            import time

            time.sleep(self.sleep)
        if follow and frame.index == self.die:
            os._exit(77)
        return super().detect(frame, roi)


def hang_or_die(**kw) -> HangOrDieSut:
    return HangOrDieSut(**kw)


@pytest.fixture(scope="module")
def ray_session():
    if not HAS_RAY:
        pytest.skip('ray is not installed (pip install "lidarmt[ray]")')
    import ray

    if ray.is_initialized():
        ray.shutdown()
    from lidarmt.engine.ray_backend import connect

    connect(None, num_cpus=2)  # a Ray of its own, even where a cluster is registered on the machine (RAY_ADDRESS)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("rec") / "frames", 4)


def lidar_config(rec: Path, sut: str = "test_fuzz_ray:hang_or_die", **kw) -> CampaignConfig:
    opts = kw.pop("sut_options", {})
    base = dict(ns=(10, 1000), frames=(0, 1, 2, 3), seed=0, trials=1, region=Region.disk(30.0), timeout=5.0)
    base.update(kw)
    return CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"), SutSpec(sut, opts), **base)


_TIMING = ("sut_s", "source_s", "cnn_s", "source_cnn_s", "model_s", "transform_s")


def normalised(out: Path) -> dict[tuple, dict]:
    """The journal's records by key, without timings and tracebacks, and with the backend's own words for a
    dead worker (local: its exit code; Ray: the actor's exit type) replaced."""
    got: dict[tuple, dict] = {}
    for r in iter_records(out / JOURNAL_NAME):
        r = {k: v for k, v in r.items() if k not in _TIMING and k != "traceback"}
        err = r.get("error", "")
        if err.startswith("the worker process died ("):
            r["error"] = "the worker process died (…)" + err.split(")", 1)[1]
        key = tuple(r["key"]) if "key" in r else (r["frame"], r["n"], r["trial"])
        assert key not in got, f"{key} twice in the journal"
        got[key] = r
    return got


def assert_same(a, b, path: str = "summary") -> None:
    """Equal structures, floats equal to 1e-12 relative (sums taken in another order), everything else exactly."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) or (math.isnan(a) and math.isnan(b)), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (path, a, b)
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


# ----------------------------------------------------------------------------------------------- LiDAR


@needs_ray
@pytest.mark.slow
def test_lidar_campaign_on_ray_matches_the_local_pool(ray_session, rec, tmp_path):
    from lidarmt.lidar.mr1.report import summary_dict

    cfg = lidar_config(rec)
    local = run_campaign(cfg, tmp_path / "local", workers=2)
    remote = run_campaign(cfg, tmp_path / "ray", workers=2, backend="ray")
    assert remote.workers == 2 and remote.ran == local.ran == 8
    assert summary_dict(cfg.to_dict(), remote.tally) == summary_dict(cfg.to_dict(), local.tally)
    a, b = normalised(tmp_path / "local"), normalised(tmp_path / "ray")
    assert a == b
    # the hang: one timeout per follow-up of frame 2, the actor killed, with the stack of where it hung
    raw = {(r["frame"], r["n"]): r for r in iter_records(tmp_path / "ray" / JOURNAL_NAME)}
    for n in (10, 1000):
        t = raw[(2, n)]
        assert t["status"] == "timeout" and t["stage"] == "follow"
        assert t["error"] == "timed out after 5 s (--timeout; the worker process was killed)"
        assert "test_fuzz_ray.py" in t["traceback"] and "in detect" in t["traceback"], t["traceback"]
        d = raw[(3, n)]  # the death: a crash finding naming the actor's process
        assert d["status"] == "crash" and d["stage"] == "follow" and "Ray actor process" in d["error"]
    # the rest completed
    assert all(raw[(f, n)]["status"] == "ok" for f in (0, 1) for n in (10, 1000))
    assert sum(t.timeouts for t in remote.tally.by_n.values()) == 2
    assert sum(t.crashes for t in remote.tally.by_n.values()) == 2


@needs_ray
@pytest.mark.slow
def test_cli_fuzz_on_ray_with_bundles_matches_local(ray_session, rec, tmp_path, capsys):
    from lidarmt.cli import main

    def cli(out: Path, *extra: str) -> list[str]:
        return ["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                "test_fuzz_support:grid_sut", "--n", "1000", "--radius", "30", "--out", str(out), "--quiet",
                "--bundles", "1", "--ddmin-budget", "8", "--timeout", "600", *extra]  # no load-dependent limit

    assert main(cli(tmp_path / "local")) == 0  # in this process
    assert main(cli(tmp_path / "ray", "--backend", "ray", "--workers", "2")) == 0
    a = json.loads((tmp_path / "local" / "summary.json").read_text())
    b = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert a == b and b["complete"]
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert run["backend"] == "ray" and run["workers"] == 2
    # the bundle was written by an actor, and is the one the local backend wrote
    (bl,), (br,) = sorted((tmp_path / "local" / "violations").iterdir()), sorted((tmp_path / "ray" / "violations").iterdir())
    assert bl.name == br.name
    for name in ("added.npy", "minimal.npy", "obstacles_followup.json"):
        assert (bl / name).read_bytes() == (br / name).read_bytes(), name
    # resume across backends: a journal cut short by the Ray run continues on the local backend
    journal = tmp_path / "ray" / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:3]))
    assert main(cli(tmp_path / "ray", "--resume", "--bundles", "0")) == 0
    assert json.loads((tmp_path / "ray" / "summary.json").read_text()) == a
    assert json.loads((tmp_path / "ray" / "run.json").read_text())["resumed_from"] == 2


@needs_ray
def test_ray_clamps_workers_to_the_cluster(ray_session):
    n, note = clamp_workers(8, items=10, per_worker=1, backend="ray")
    assert n == 2 and "the Ray cluster has 2 CPU(s)" in note


# ----------------------------------------------------------------------------------------------- camera


@needs_ray
@pytest.mark.slow
def test_camera_campaign_resumes_on_ray_with_the_local_records(ray_session, tmp_path):
    from test_camera_campaign import config, write_udacity

    from lidarmt.camera.relations import Criteria
    from lidarmt.engine.campaign import load_tally

    src = write_udacity(tmp_path / "drive")
    cfg = config(src, timeout=600.0)  # an explicit, generous limit: no load-dependent automatic one
    local = run_campaign(cfg, tmp_path / "local")
    # the same campaign cut after 30 pairs by the local backend, finished by 2 Ray actors
    (tmp_path / "mixed").mkdir()
    lines = (tmp_path / "local" / JOURNAL_NAME).read_text().splitlines(keepends=True)
    (tmp_path / "mixed" / JOURNAL_NAME).write_text("".join(lines[:31]))
    mixed = run_campaign(cfg, tmp_path / "mixed", resume=True, workers=2, backend="ray")
    assert mixed.resumed == 30 and mixed.ran == local.ran - 30 and mixed.workers == 2
    assert normalised(tmp_path / "mixed") == normalised(tmp_path / "local")
    crit = Criteria()
    c2, t2 = load_tally(tmp_path / "mixed")
    # the same up to the last bits of its means: CameraTally sums in journal order, which differs (as it does
    # between 1 and 2 local workers)
    assert_same(t2.summary(c2.to_dict(), crit, c2.param_labels()),
                local.tally.summary(cfg.to_dict(), crit, cfg.param_labels()))


# ----------------------------------------------------------------------------------------------- without Ray


def test_backend_arguments_are_checked():
    with pytest.raises(FuzzArgumentError, match="--backend 'spark'"):
        clamp_workers(2, items=3, per_worker=1, backend="spark")
    with pytest.raises(FuzzArgumentError, match="--address .* needs --backend ray"):
        clamp_workers(2, items=3, per_worker=1, address="auto")


def test_missing_ray_gives_the_install_hint(rec, tmp_path, capsys, monkeypatch):
    from lidarmt.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" fails as if it were not installed
    out = tmp_path / "o"
    code = main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                 "test_fuzz_support:grid_sut", "--n", "10", "--out", str(out), "--quiet", "--backend", "ray"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "lidarmt[ray]"' in err[0] and "--backend ray" in err[0]
    assert not out.exists()


def test_ray_death_message_is_one_line():
    from lidarmt.engine.ray_backend import _death_of

    text = ("The actor died unexpectedly before finishing this task.\n\tclass_name: _RayWorker\n\tpid: 4242\n"
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
            "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes")
    assert _death_of(RuntimeError(text)) == ("Ray actor process 4242: SYSTEM_ERROR, Worker unexpectedly exits "
                                             "with a connection error code 2")
    assert _death_of(RuntimeError("gone")) == "Ray actor process: gone"


def test_actors_import_what_this_process_imports():
    from lidarmt.engine.ray_backend import _python_path

    path = _python_path().split(os.pathsep)
    assert str(TESTS) in path  # so --sut test_fuzz_support:... imports in the actors
    assert not any("site-packages" in p for p in path if p not in os.environ.get("PYTHONPATH", ""))
    assert all(os.path.isabs(p) for p in path)


@pytest.mark.skipif(not HAS_RAY, reason='ray is not installed (pip install "lidarmt[ray]")')
def test_an_address_where_nothing_answers_fails_at_once(monkeypatch):
    import socket

    import ray

    from lidarmt.engine.errors import FuzzInputError
    from lidarmt.engine.ray_backend import connect

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FuzzInputError, match=f"--address 127.0.0.1:{port}: nothing answers there"):
        connect(f"127.0.0.1:{port}")
    with pytest.raises(FuzzInputError, match="give HOST:PORT"):
        connect("headnode")


def test_camera_cli_refuses_an_unknown_backend_in_one_line(tmp_path, capsys):
    from test_camera_campaign import write_udacity

    from lidarmt.cli import main

    src = write_udacity(tmp_path / "drive", n=2)
    out = tmp_path / "o"
    code = main(["camera", "fuzz", "--images", str(src), "--model", "test_camera_campaign:tilt", "--transforms",
                 "mirror", "--out", str(out), "--quiet", "--backend", "spark"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backend 'spark'" in err[0]
    assert not out.exists()
    with pytest.raises(FuzzArgumentError, match="needs --backend ray"):
        run_campaign(lidar_config(Path(src)), tmp_path / "o2", address="auto")
    assert not (tmp_path / "o2").exists()
