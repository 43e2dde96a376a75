"""Hardening, round 2 (issue 20): files from strangers, sizes and counts a file or option claims, one-line
errors where there were tracebacks, full disks. Every test here failed before its fix."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from lidarmt.cli import main

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lidarmt: error:"), err
    for w in words:
        assert w in err, err
    return err


# ----------------------------------------------------------------------------------------------- 1, 2: bench


@pytest.fixture(scope="module")
def bench_v1(tmp_path_factory):
    """A labelled recording and an earlier bench of it (grid SUT as the baseline): what a stranger shares."""
    root = tmp_path_factory.mktemp("bench-attack")
    frames = _labelled_frames(root / "frames")
    first = root / "v1"
    assert main(_bench_args(frames, first, "test_bench:grid_sut", "test_bench:nocar_sut")) == 0
    return frames, first


def _labelled_frames(folder: Path) -> Path:
    import numpy as np
    from test_bench import _CLS_META
    from test_fuzz_support import GridSut, StripRoi, make_scene

    from lidarmt.io.npz import save_frame_npz
    from lidarmt.types import BOX_DTYPE, Labels

    folder.mkdir()
    sut, roi = GridSut(), StripRoi()
    for i in range(3):
        f = make_scene(i)
        obs = list(sut.detect(f, roi))
        boxes = np.zeros(len(obs), dtype=BOX_DTYPE)
        inst = np.full(len(f), -1, np.int32)
        meta = np.full(len(f), -1, np.int8)
        for k, o in enumerate(obs):
            boxes[k] = (o.center[0], o.center[1], o.center[2] + o.height / 2, o.length, o.width,
                        max(o.height, 0.1), 0.0, int(_CLS_META[o.cls]), k)
            inst[o.point_indices], meta[o.point_indices] = k, int(_CLS_META[o.cls])
        f.labels = Labels(boxes, inst, meta)
        save_frame_npz(folder / f"{i:06d}.npz", f, compress=False)
    return folder


def _bench_args(frames: Path, out: Path, *suts: str, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["bench", "--bag", str(frames), "--map", "test_fuzz_support:strip_roi", "--n", "10", "--radius", "30",
            "--out", str(out), "--quiet"]
    for s in suts:
        args += ["--sut", s]
    return [*args, *extra]


def _set_header(journal: Path, **config) -> None:
    lines = journal.read_text().splitlines(keepends=True)
    head = json.loads(lines[0])
    head["config"].update(config)
    lines[0] = json.dumps(head) + "\n"
    journal.write_text("".join(lines))


def test_bench_baseline_naming_code_does_not_run_it(bench_v1, tmp_path, capsys):
    """Item 1: a baseline folder is a file from a stranger: a module:callable SUT in its journal is refused
    unless --trust-code (the command it names never runs)."""
    frames, first = bench_v1
    evil = tmp_path / "evil"
    shutil.copytree(first, evil)
    marker = tmp_path / "MARKER"
    _set_header(evil / "test_bench-grid_sut" / "journal.jsonl",
                sut={"name": "subprocess:getoutput", "options": {"cmd": f"touch {marker}"}})
    (evil / "test_bench-grid_sut" / "detection.json").unlink(missing_ok=True)
    capsys.readouterr()
    rc = main(_bench_args(frames, tmp_path / "v2", "test_bench:nocar_sut", extra=("--baseline", str(evil))))
    assert rc == 2 and not marker.exists()
    _one_line(capsys, "--trust-code", "subprocess:getoutput")
    assert not (tmp_path / "v2").exists()
    # the user's own earlier bench of a plug-in SUT: allowed with --trust-code
    rc = main(_bench_args(frames, tmp_path / "v3", "test_bench:nocar_sut",
                          extra=("--baseline", str(first), "--trust-code")))
    assert rc == 0


def test_bench_json_paths_never_leave_their_folder(bench_v1, tmp_path, capsys):
    """Item 2: a bench.json naming its baseline '../elsewhere' is refused; nothing outside --out is written."""
    frames, first = bench_v1
    shared = tmp_path / "a" / "shared"
    shutil.copytree(first, shared)
    shutil.copytree(first / "test_bench-grid_sut", tmp_path / "a" / "elsewhere")
    bench = json.loads((shared / "bench.json").read_text())
    bench["modules"][0]["name"] = "../elsewhere"
    (shared / "bench.json").write_text(json.dumps(bench))
    victim = tmp_path / "b" / "elsewhere" / "journal.jsonl"
    victim.parent.mkdir(parents=True)
    victim.write_text("precious\n")
    capsys.readouterr()
    rc = main(_bench_args(frames, tmp_path / "b" / "out", "test_bench:nocar_sut",
                          extra=("--baseline", str(shared), "--trust-code")))
    assert rc == 2
    _one_line(capsys, "../elsewhere")
    assert victim.read_text() == "precious\n"


# ----------------------------------------------------------------------------------------------- 3: camera inputs


class VandalModel:
    """A steering model that writes into the images it is given (switching ``writeable`` back on first)."""

    name = "vandal"
    module = None

    def __init__(self) -> None:
        from lidarmt.camera.models.base import InputSpec

        self.input_spec = InputSpec(48, 64)

    def predict(self, images):
        import numpy as np

        if not images.flags.writeable:
            images.flags.writeable = True
        images[:, :, : images.shape[2] // 2] = 255  # brighten the left half: the tilt model would steer left
        return np.zeros(len(images))


def vandal(**kw) -> VandalModel:
    return VandalModel()


def test_camera_model_writing_into_its_input_changes_no_other_model(tmp_path):
    """Item 3: each model gets its own read-only images, verified after the call: a model that writes into them
    is a finding, and the other models' predictions are those of a campaign without it."""
    from test_camera_campaign import config, write_udacity

    from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef
    from lidarmt.fuzz.engine import run_campaign
    from lidarmt.fuzz.journal import JOURNAL_NAME, iter_records

    drive = write_udacity(tmp_path / "drive", 4)
    alone = config(drive, transforms="brightness,mirror", frames=(0, 1, 2, 3))
    both = CameraCampaignConfig(alone.images, (ModelRef("test_hardening_round2:vandal", {}), *alone.models),
                                alone.transforms, alone.frames)
    run_campaign(alone, tmp_path / "alone")
    run_campaign(both, tmp_path / "both")

    def preds(folder, model):
        return {tuple(x["key"][:1] + x["key"][2:]): (x.get("pred"), x.get("pred_t"), x["status"])
                for x in iter_records(folder / JOURNAL_NAME) if x["key"][1] == model}

    assert preds(tmp_path / "both", 1) == preds(tmp_path / "alone", 0)
    vandal_recs = [x for x in iter_records(tmp_path / "both" / JOURNAL_NAME) if x["key"][1] == 0]
    assert vandal_recs and all(x["status"] == "crash" and "wrote into" in x["error"] for x in vandal_recs)


# ----------------------------------------------------------------------------------------------- 4: counts


def _cli(*args: str, timeout: float = 120) -> tuple[int, str]:
    """``lidarmt ARGS`` in a child process (a segfault must not take the test run with it): (exit status, stderr)."""
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    p = subprocess.run([sys.executable, "-m", "lidarmt", *args], capture_output=True, text=True, timeout=timeout,
                       env=env, check=False)
    return p.returncode, p.stderr.strip()


def test_thread_counts_are_checked_against_the_machine(tmp_path, capsys):
    """Item 4: threads=100000 segfaulted torch (exit 139); every way of giving it is one line, exit 2."""
    from lidarmt._limits import cpu_cores
    from lidarmt.perception.apollo.config import ApolloConfig
    from lidarmt.perception.apollo.errors import ConfigError
    from lidarmt.perception.registry import get_perception

    many = str(cpu_cores() + 1)
    for make in (lambda: ApolloConfig().with_overrides([f"threads={many}"]),  # --set
                 lambda: get_perception("apollo", threads=int(many)),  # --sut-option, a bundle's SUT options
                 lambda: ApolloConfig(threads="lots")):
        with pytest.raises(ConfigError, match="CPU core"):
            make()
    assert main(["train", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "t"), "--threads", "100000"]) == 2
    _one_line(capsys, "--threads", "CPU core")
    assert main(["camera", "train", "--arch", "dave2", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "c"),
                 "--threads", "100000"]) == 2
    _one_line(capsys, "--threads", "CPU core")
    assert main(["camera", "train-translator", "--arch", "unit", "--domain-a", str(tmp_path), "--domain-b",
                 str(tmp_path), "--out", str(tmp_path / "u"), "--threads", many, "--device", "cpu"]) == 2
    _one_line(capsys, "--threads", "CPU core")
