"""Bundles replay on another CPU kind (issue 28): identical, reproduced within the tolerances, or not reproduced.

oneDNN honours ``ONEDNN_MAX_CPU_ISA`` when torch loads, so a bundle is written in a subprocess under one setting
and replayed in another under a second one: the cross-ISA path runs on whatever CPU CI lands on (SSE4.1 and AVX2
kernels differ on every x86 machine). The tolerance and outcome logic is also checked in this process on the
pre-layout fixtures (made on an AMX Xeon) with stored numbers moved by hand: within the tolerance the bundle is
*reproduced* and the report names the largest difference, past it *not reproduced* (exit 1).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from lidarmt.cli import main
from lidarmt.engine.manifest import read_manifest, write_manifest
from lidarmt.engine.replay import TOLERANCES

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "pre_layout"
X86 = platform.machine().lower() in ("x86_64", "amd64")
PLUGIN = EntryPoint(name="grid-test", value="test_fuzz_support:grid_sut", group="lidarmt.perception")


def lidarmt(args: list[str], cwd: Path, isa: str) -> subprocess.CompletedProcess:
    """``lidarmt ARGS`` in a fresh process whose torch is capped at ``isa`` (set before torch loads)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)])}
    return subprocess.run([sys.executable, "-m", "lidarmt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def replay_json(bundle: Path, cwd: Path, isa: str, *extra: str) -> tuple[int, dict]:
    got = lidarmt(["replay", str(bundle), "--json", *extra], cwd, isa)
    assert got.returncode in (0, 1), got.stderr
    return got.returncode, json.loads(got.stdout)


def assert_cross_isa(code: int, doc: dict, made: str, replayed: str) -> None:
    assert code == 0 and doc["exit_status"] == 0, doc
    assert doc["made_on"]["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": made}, doc["made_on"]
    assert doc["replayed_on"]["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": replayed}
    assert f"ONEDNN_MAX_CPU_ISA={made}" in doc["made_on_isa"] and f"ONEDNN_MAX_CPU_ISA={replayed}" in doc["summary"]
    if X86:  # the two settings run other kernels: the floats differ, within the tolerance
        assert doc["outcome"] == "reproduced", doc
        big = doc["largest_difference"]
        assert 0 < big["difference"] <= TOLERANCES[big["kind"]].abs and big["name"] in doc["summary"]
    else:  # pragma: no cover - oneDNN's cap means nothing off x86
        assert doc["outcome"] in ("identical", "reproduced")


@pytest.mark.slow
def test_a_camera_bundle_made_under_sse41_is_reproduced_under_avx2(tmp_path):
    shutil.copytree(DATA / "camera" / "drive", tmp_path / "drive")
    made = lidarmt(["camera", "fuzz", "--images", "drive", "--model", "dave-orig", "--transforms", "brightness",
                    "--out", "run", "--quiet", "--lambda", "0.05", "--bundles", "1"], tmp_path, "SSE41")
    assert made.returncode == 0, made.stderr
    (bundle,) = (tmp_path / "run" / "violations").iterdir()
    assert json.loads((bundle / "bundle.json").read_text())["machine"]["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": "SSE41"}
    code, doc = replay_json(bundle, tmp_path, "AVX2")
    assert_cross_isa(code, doc, "SSE41", "AVX2")
    assert doc["largest_difference"] is None or doc["largest_difference"]["kind"] == "angle"
    assert doc["checks"]["relation still violated"] and doc["checks"]["prediction on the seed image"]
    # the same machine and kernels: bit for bit
    code, again = replay_json(bundle, tmp_path, "SSE41")
    assert code == 0 and again["outcome"] == "identical", again


@pytest.mark.slow
def test_a_lidar_bundle_made_under_sse41_is_reproduced_under_avx2(tmp_path):
    from test_fuzz_support import write_road_geojson, write_scenes

    write_scenes(tmp_path / "frames", 3)
    write_road_geojson(tmp_path / "world.geojson")
    made = lidarmt(["fuzz", "--bag", "frames", "--map", "world.geojson", "--sut", "test_fuzz_support:torch_grid_sut",
                    "--radius", "30", "--n", "1000", "--bundles", "1", "--out", "run", "--quiet"], tmp_path, "SSE41")
    assert made.returncode == 0, made.stderr
    (bundle,) = (tmp_path / "run" / "violations").iterdir()
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["reproduced"] and info["ddmin"]["one_minimal"] and len(info["scores"]["source"]) == info["n_source"]
    code, doc = replay_json(bundle, tmp_path, "AVX2", "--trust-code")
    assert_cross_isa(code, doc, "SSE41", "AVX2")
    assert doc["largest_difference"]["kind"] == "probability" and "scores (full precision)" in \
        doc["largest_difference"]["name"]
    assert doc["checks"]["relation"] and doc["checks"]["minimal subset is 1-minimal"]  # the claim, re-checked
    code, again = replay_json(bundle, tmp_path, "SSE41", "--trust-code")
    assert code == 0 and again["outcome"] == "identical", again


# ------------------------------------------------------------------------- outcomes, in this process


def _edit(bundle: Path, name: str, change) -> None:
    """Change ``bundle/name`` (JSON) with ``change`` and write the manifest anew, as a sender could."""
    path = bundle / name
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(change(doc) or doc))
    listed, _ = read_manifest(bundle)
    write_manifest(bundle, sorted(listed))


@pytest.fixture
def camera_bundle(tmp_path, monkeypatch) -> Path:
    root = Path(shutil.copytree(DATA / "camera", tmp_path / "camera"))
    monkeypatch.chdir(root)
    (bundle,) = (root / "camrun" / "violations").iterdir()
    return bundle


def _replay(capsys, *args: str) -> tuple[int, dict]:
    code = main(["replay", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_camera_prediction_moved_within_the_tolerance_is_reproduced_past_it_not(camera_bundle, capsys):
    tol = TOLERANCES["angle"].abs
    code, before = _replay(capsys, str(camera_bundle))
    assert code == 0 and before["outcome"] in ("identical", "reproduced")
    now = before["verdict"]["pred"]

    _edit(camera_bundle, "bundle.json", lambda d: d.update(pred=now + tol / 2))
    code, doc = _replay(capsys, str(camera_bundle))
    assert code == 0 and doc["outcome"] == "reproduced", doc
    big = doc["largest_difference"]
    assert big["name"] == "prediction on the seed image" and big["kind"] == "angle"
    assert big["difference"] == pytest.approx(tol / 2, rel=1e-6) and big["tolerance"] == tol

    _edit(camera_bundle, "bundle.json", lambda d: d.update(pred=now + 3 * tol))
    code, doc = _replay(capsys, str(camera_bundle))
    assert code == 1 and doc["outcome"] == "not reproduced" and doc["exit_status"] == 1
    assert any("prediction on the seed image" in f and "beyond the angle tolerance" in f for f in doc["failures"])
    assert main(["replay", str(camera_bundle)]) == 1  # and the terminal's last line says so
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("not reproduced:")


@pytest.fixture
def lidar_bundle(tmp_path, monkeypatch) -> tuple[Path, Path]:
    import lidarmt.lidar.perception.registry as registry

    monkeypatch.setattr(registry, "_plugins", lambda: {PLUGIN.name: PLUGIN})
    root = Path(shutil.copytree(DATA / "lidar", tmp_path / "lidar"))
    monkeypatch.chdir(root)
    (bundle,) = (root / "run" / "violations").iterdir()
    return bundle, root / "world.geojson"


def test_a_lidar_score_moved_within_the_tolerance_is_reproduced_past_it_not(lidar_bundle, capsys):
    bundle, world = lidar_bundle
    tol = TOLERANCES["probability"].abs

    def move(by: float):
        def change(obstacles: list) -> None:
            obstacles[0]["score"] = round(obstacles[0]["score"] + by, 6)
        return change

    _edit(bundle, "obstacles_source.json", move(tol / 4))
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 0 and doc["outcome"] == "reproduced", doc
    assert doc["largest_difference"]["name"] == "source obstacles [0].score"
    assert doc["largest_difference"]["kind"] == "probability"

    _edit(bundle, "obstacles_source.json", move(2 * tol))
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 1 and doc["outcome"] == "not reproduced"
    assert any(f.startswith("source obstacles: [0].score") for f in doc["failures"]), doc["failures"]


def test_a_changed_obstacle_list_is_listed_and_needs_an_explanation(lidar_bundle, capsys):
    from lidarmt._machine import record

    bundle, world = lidar_bundle
    _edit(bundle, "obstacles_followup.json", lambda obs: obs.__delitem__(-1))  # as if a cluster vanished
    # the release's bundle names no machine: it may have run other kernels, so the change is listed, not fatal
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 0 and doc["outcome"] == "reproduced", doc
    n = len(json.loads((bundle / "obstacles_followup.json").read_text()))
    assert any(m.startswith(f"follow-up obstacles: {n + 1} now, {n} stored; #{n}: ") for m in doc["moved"]), \
        doc["moved"]
    assert doc["checks"]["relation"]
    # made here, with these kernels, and no number moved: nothing explains it
    _edit(bundle, "bundle.json", lambda d: d.update(machine=record()))
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 1 and doc["outcome"] == "not reproduced" and doc["moved"], doc
    assert "nothing to explain them" in doc["summary"]
    # made on another CPU kind: explained
    other = "avx2" if record()["isa"] != "avx2" else "avx512"
    _edit(bundle, "bundle.json", lambda d: d.update(machine={"cpu": "AMD EPYC", "isa": other, "bf16": "emulated",
                                                             "cores": 16}))
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 0 and doc["outcome"] == "reproduced" and doc["made_on_isa"] == other


def test_the_relation_no_longer_violated_is_not_reproduced_whatever_the_tolerance(lidar_bundle, capsys):
    bundle, world = lidar_bundle
    _edit(bundle, "bundle.json", lambda d: d.update(reproduced=False))
    code, doc = _replay(capsys, str(bundle), "--map", str(world))
    assert code == 1 and doc["outcome"] == "not reproduced" and not doc["checks"]["relation"]
