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


@pytest.mark.slow
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


@pytest.mark.slow
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
    from lidarmt.engine.campaign import run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records

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


def _cli(*args: str, timeout: float = 300) -> tuple[int, str]:
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
    from lidarmt.lidar.perception.apollo.config import ApolloConfig
    from lidarmt.lidar.perception.apollo.errors import ConfigError
    from lidarmt.lidar.perception.registry import get_perception

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
                 str(tmp_path), "--out", str(tmp_path.parent / f"{tmp_path.name}-u"), "--threads", many, "--device", "cpu"]) == 2
    _one_line(capsys, "--threads", "CPU core")


# ----------------------------------------------------------------------------------------------- 5: memory


def test_an_apollo_grid_too_big_for_the_machine_is_one_line():
    """Item 5: a bundle's grid=40000 (+ allow_random) made replay allocate 47.7 GiB."""
    from lidarmt.lidar.perception.apollo.errors import ConfigError
    from lidarmt.lidar.perception.registry import get_perception

    with pytest.raises(ConfigError, match="grid 40000 would need .* memory"):
        get_perception("apollo", grid=40000, allow_random=True, weights=None)


def test_a_keras_file_declaring_a_huge_dataset_is_refused_before_reading(tmp_path):
    """Item 5: a small .h5 declaring a 4 TiB kernel is one line, before h5py allocates anything."""
    import h5py
    import numpy as np
    from test_camera_keras import write_keras

    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.models.keras import read_keras_file

    path = write_keras(tmp_path / "bomb.h5", [{"class_name": "Dense", "config": {
        "name": "dense_1", "units": 1, "activation": "linear", "batch_input_shape": [None, 4]},
        "weights": [("kernel", np.zeros((4, 1))), ("bias", np.zeros(1))]}], version=2)
    with h5py.File(path, "r+") as f:
        g = f["model_weights"]["dense_1"]
        del g["dense_1/kernel:0"]
        g.create_dataset("dense_1/kernel:0", shape=(1 << 20, 1 << 20), dtype="f4", chunks=(64, 64))
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ModelError, match="memory"):
        read_keras_file(path)


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width x height RGB pixels, with a few bytes of image data: a bomb's header."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 4096))
                     + chunk(b"IEND", b""))
    return path


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path):
    """Item 5: a 30000x30000 PNG (2.5 GiB decoded) is refused from its header, before opencv decodes it."""
    import cv2
    import numpy as np

    from lidarmt._limits import image_header
    from lidarmt.camera.sources.decode import decode_file
    from lidarmt.camera.sources.factory import open_images

    folder = tmp_path / "imgs"
    folder.mkdir()
    bomb = _png_header_only(folder / "a.png", 30000, 30000)
    with pytest.raises(Exception, match="30000×30000"):
        decode_file(bomb)
    with open_images(str(folder)) as src, pytest.raises(Exception, match="30000×30000"):
        src[0]
    # the header reader agrees with opencv on real files
    img = np.zeros((37, 53, 3), np.uint8)
    for ext in (".png", ".jpg"):
        ok, enc = cv2.imencode(ext, img)
        assert ok and image_header(enc.tobytes())[:2] == (53, 37)


def test_a_campaign_larger_than_memory_is_one_line(tmp_path):
    """Item 5: --trials 10**12 grew a list of keys until memory ran out."""
    from test_camera_campaign import config, write_udacity

    from lidarmt.engine.campaign import run_campaign
    from lidarmt.errors import UserError

    drive = write_udacity(tmp_path / "drive", 2)
    with pytest.raises(UserError, match="memory"):
        run_campaign(config(drive, transforms="brightness", frames=(0, 1), trials=10**12), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_translator_too_big_for_the_machine_is_one_line(tmp_path, capsys):
    """Item 5: camera train-translator --dim 100000 tried to allocate 1.28 TB."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    assert main(["camera", "train-translator", "--arch", "unit", "--domain-a", str(tmp_path / "a"), "--domain-b",
                 str(tmp_path / "b"), "--out", str(tmp_path / "u"), "--dim", "100000", "--device", "cpu"]) == 2
    _one_line(capsys, "--dim", "memory")


# ----------------------------------------------------------------------------------------------- 6: MinBox


_IDENTICAL = [np_pts for np_pts in (
    [[5.0, 1.0, 0.2]] * 4,  # four identical points
    [[-3.5, 7.25, -1.0]] * 9,  # more of them
    [[12.0, -4.0, z] for z in (-1.0, -0.5, 0.0, 0.4, 1.2)],  # one x, y at several heights
    [[2.0, 2.0, 0.0]] * 4 + [[2.0, 2.0 + 1e-9, 0.0]] * 2,  # equal once stored as float32
)]


@pytest.mark.parametrize("points", _IDENTICAL)
def test_minbox_of_identical_points_is_finite(points):
    """Item 6: MinBox divided by zero on 4+ identical points (perceive crashed, fuzz blamed the SUT). Apollo's
    C++ divides in IEEE arithmetic there: the zero-length edge's NaNs compare false, and the box is the point with
    zero length and width. The kernel now does the same without raising."""
    import numpy as np

    from lidarmt.lidar.perception.apollo.minbox import build_box, build_boxes

    xyz = np.array(points, np.float32)
    b = build_box(xyz)
    assert np.isfinite(b.center).all() and np.isfinite(b.direction).all() and np.isfinite(b.polygon).all()
    np.testing.assert_allclose(b.center[:2], xyz[0, :2], atol=1e-6)
    assert b.center[2] == pytest.approx(xyz[:, 2].min())
    assert b.length == 0.0 and b.width == 0.0
    assert b.height == pytest.approx(float(xyz[:, 2].max() - xyz[:, 2].min()))
    # next to an ordinary cluster, which keeps its own box
    other = np.array([[10, 0, 0], [12, 0, 0], [12, 1, 0], [10, 1, 0], [11, 0.5, 1]], np.float32)
    both = build_boxes(np.concatenate([other, xyz]), np.array([0, 5, 5 + len(xyz)]))
    assert both[0].length == pytest.approx(2.0) and both[0].width == pytest.approx(1.0)
    assert both[1].length == 0.0


@pytest.mark.slow
def test_minbox_kernel_agrees_with_its_interpreted_python():
    """The numba kernels against the same code run as plain Python (NUMBA_DISABLE_JIT=1), degenerate clusters
    included: both give the same boxes, bit for bit."""
    import os
    import subprocess

    import numpy as np

    rng = np.random.default_rng(7)
    clusters = [np.array(p, np.float32) for p in _IDENTICAL]
    clusters += [rng.normal(0, 2, (n, 3)).astype(np.float32) + [20, 5, 0] for n in (1, 3, 4, 7, 40)]
    clusters += [np.c_[np.linspace(0, 4, 10), np.full(10, 3.0), np.zeros(10)].astype(np.float32)]
    xyz = np.concatenate(clusters)
    offsets = np.cumsum([0] + [len(c) for c in clusters])
    code = ("import sys, numpy as np; from lidarmt.lidar.perception.apollo.minbox import build_boxes_arrays;"
            "d = np.load(sys.argv[1]); out = build_boxes_arrays(d['xyz'], d['off']);"
            "np.savez(sys.argv[2], *out)")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/in.npz", xyz=xyz, off=offsets)
        results = []
        for jit in ("0", "1"):
            env = {**os.environ, "NUMBA_DISABLE_JIT": jit, "OMP_NUM_THREADS": "1"}
            subprocess.run([sys.executable, "-c", code, f"{tmp}/in.npz", f"{tmp}/out{jit}.npz"], env=env,
                           check=True, capture_output=True)
            with np.load(f"{tmp}/out{jit}.npz") as z:
                results.append([z[f"arr_{i}"] for i in range(4)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------------------------- 6: 1e308


class HugeModel:
    """Steers 1e308 radians on every image: finite, and its square overflows."""

    name = "huge"
    module = None

    def __init__(self) -> None:
        from lidarmt.camera.models.base import InputSpec

        self.input_spec = InputSpec(48, 64)

    def predict(self, images):
        import numpy as np

        return np.full(len(images), 1e308)


def huge(**kw) -> HugeModel:
    return HugeModel()


def test_steering_angles_of_1e308_are_one_line_or_a_finding(tmp_path, capsys):
    """Item 6: a label or a prediction of 1e308 overflowed (OverflowError) when the totals were folded."""
    import csv

    from test_camera_campaign import write_udacity

    from lidarmt.engine.campaign import load_tally
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.errors import UserError

    drive = write_udacity(tmp_path / "drive", 3)
    args = ["camera", "fuzz", "--images", str(drive), "--transforms", "brightness", "--quiet", "--bundles", "0"]
    # a model's prediction: a finding, the campaign and its reports complete
    assert main([*args, "--model", "test_hardening_round2:huge", "--out", str(tmp_path / "m")]) in (0, 1)
    recs = [json.loads(x) for x in (tmp_path / "m" / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert recs and all(r["status"] == "crash" and "out of range" in r["error"] for r in recs)
    # a label: the source is refused in one line
    rows = list(csv.reader((drive / "steering.csv").read_text().splitlines()))
    rows[1][1] = "1e308"
    with open(drive / "steering.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    capsys.readouterr()
    assert main([*args, "--model", "test_camera_campaign:tilt", "--out", str(tmp_path / "l")]) == 2
    _one_line(capsys, "1e308")
    # a journal that claims one: one line when the totals are folded
    ok = tmp_path / "m" / JOURNAL_NAME
    lines = ok.read_text().splitlines(keepends=True)
    rec = json.loads(lines[1])
    rec.update(status="ok", pred=1e308, pred_t=0.0, label=0.1)
    lines[1] = json.dumps(rec) + "\n"
    ok.write_text("".join(lines))
    with pytest.raises(UserError, match="record 1"):
        load_tally(tmp_path / "m")


# ----------------------------------------------------------------------------------------------- 6: checkpoint


@pytest.mark.parametrize("bad", ["bytes", "list", "no-model", "wrong-tensors", "deep-history", "bad-stage"])
def test_a_bad_camera_training_checkpoint_is_one_line_on_resume(tmp_path, capsys, bad):
    """Item 6: a bad checkpoint.pt on `camera train --resume` ended in a traceback."""
    import torch
    from test_camera_campaign import write_udacity

    drive = write_udacity(tmp_path / "drive", 6)
    out = tmp_path / "run"
    out.mkdir()
    good = {"config": {"arch": "dave2"}, "model": {}, "optimizer": {"state": {}, "param_groups": []},
            "stage": "cnn", "epoch": 1, "best_mse": 0.5, "best_state": None, "history": "[]"}
    ck = out / "checkpoint.pt"
    if bad == "bytes":
        ck.write_bytes(b"\x80\x04not a checkpoint at all" * 10)
    elif bad == "list":
        torch.save([1, 2, 3], ck)
    elif bad == "no-model":
        torch.save({"config": {"arch": "dave2"}}, ck)
    elif bad == "wrong-tensors":
        torch.save({**good, "model": {"conv.weight": torch.zeros(2)}}, ck)
    elif bad == "deep-history":
        torch.save({**good, "history": "[" * 100000 + "]" * 100000}, ck)
    else:
        torch.save({**good, "stage": "lstm-of-doom"}, ck)
    capsys.readouterr()
    rc = main(["camera", "train", "--arch", "dave2", "--data", str(drive), "--out", str(out), "--resume",
               "--epochs", "1"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("lidarmt: error:") and "checkpoint.pt" in err[-1], err
    assert not any("Traceback" in x for x in err)


# ----------------------------------------------------------------------------------------------- 7: full disk


class _FillingFile:
    """A raw file that takes ``budget`` more bytes (the last write short), then fails with ENOSPC."""

    def __init__(self, fh, budget: int) -> None:
        self._fh, self.left = fh, budget

    def write(self, data) -> int:
        import errno

        if self.left <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        chunk = bytes(data[: self.left])
        self._fh.write(chunk)
        self._fh.flush()
        self.left -= len(chunk)
        return len(chunk)

    def __getattr__(self, name):
        return getattr(self._fh, name)


def test_a_journal_on_a_full_disk_is_one_line_and_loses_no_verdict(tmp_path, monkeypatch):
    """Item 7: a journal write on a full disk ended in a traceback, and close() wrote a torn line after it."""
    import builtins

    from test_camera_campaign import config, write_udacity

    import lidarmt.engine.journal as journal_mod
    from lidarmt.engine.campaign import run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records
    from lidarmt.errors import UserError

    cfg = config(write_udacity(tmp_path / "drive", 3), transforms="brightness", frames=(0, 1, 2))
    whole = run_campaign(cfg, tmp_path / "whole")
    size = (tmp_path / "whole" / JOURNAL_NAME).stat().st_size

    def filling_open(path, mode="r", *args, **kw):
        fh = builtins.open(path, mode, *args, **kw)  # noqa: SIM115 - the journal closes it
        return _FillingFile(fh, size // 2) if "a" in mode else fh

    monkeypatch.setattr(journal_mod, "open", filling_open, raising=False)
    run = tmp_path / "run"
    with pytest.raises(UserError, match="disk is full"):
        run_campaign(cfg, run)
    monkeypatch.undo()
    text = (run / JOURNAL_NAME).read_text()
    assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines())  # no torn line
    done = len(text.splitlines()) - 1
    assert 0 < done < whole.ran
    again = run_campaign(cfg, run, resume=True)
    assert again.resumed == done and again.ran == whole.ran - done

    def preds(folder):
        return sorted((tuple(r["key"]), r["pred"], r["pred_t"]) for r in
                      iter_records(folder / JOURNAL_NAME))  # pairs (a resume adds a segment line)

    assert preds(run) == preds(tmp_path / "whole")


@pytest.fixture
def small_disk(tmp_path):
    """A real small file system (a 320 KiB tmpfs) to fill up; skipped where it cannot be mounted (not root)."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(mnt)], capture_output=True,
                       check=False)
    if r.returncode:
        pytest.skip("needs to mount a small tmpfs (root) to fill a real disk")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


@pytest.mark.slow
def test_camera_bundles_on_a_full_disk_claim_nothing_they_did_not_write(small_disk, tmp_path):
    """Item 7: camera bundles on a full disk exited 0 claiming "3 bundles" with 1 written, and opencv's and
    libpng's own lines leaked. Now: one line, exit 2, the journal whole, no half bundle left."""
    from test_camera_campaign import write_udacity

    from lidarmt.engine.journal import JOURNAL_NAME

    drive = write_udacity(tmp_path / "drive", 6)
    out = small_disk / "run"
    rc, err = _cli("camera", "fuzz", "--images", str(drive), "--model", "test_camera_campaign:tilt",
                   "--transforms", "all", "--out", str(out), "--quiet")
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("lidarmt: error:"), err
    assert "disk is full" in err or "no space" in err.lower(), err
    lines = (out / JOURNAL_NAME).read_text().splitlines()
    assert all(json.loads(x) for x in lines) and len(lines) > 1
    for b in (out / "violations").iterdir() if (out / "violations").is_dir() else []:
        assert not b.name.startswith("."), b  # no half-built bundle
        assert (b / "bundle.json").is_file() and (b / "MANIFEST.json").is_file()


def test_weights_on_a_full_disk_are_one_line(small_disk):
    """Item 7: torch.save on a full disk raised RuntimeError ("unexpected pos"), a traceback."""
    import torch

    from lidarmt._atomic import atomic_path
    from lidarmt.errors import OutputError

    with pytest.raises(OutputError, match="no space left"), atomic_path(small_disk / "w.pt") as tmp:
        torch.save({"w": torch.zeros(1 << 18)}, tmp)
    assert list(small_disk.iterdir()) == []


# ----------------------------------------------------------------------------------------------- 8: Ray

@pytest.mark.slow
def test_a_ray_campaign_killed_with_sigterm_stops_its_ray_and_says_how_to_resume(tmp_path):
    """Item 8: with a cluster registered on the machine (RAY_ADDRESS), the Ray lidarmt starts (as the test
    fixture and the benchmark now do) must still be its own; a SIGTERM'd campaign aborted inside Ray's C++
    handler (exit 134, a crash report), and Ray's helper processes outlived it. Now: the Ctrl-C line, exit 130,
    every Ray process of the campaign gone, the journal whole."""
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    import os
    import signal
    import subprocess
    import time

    from test_fuzz_support import write_scenes

    frames = write_scenes(tmp_path / "frames", 3)
    out = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1", "OMP_NUM_THREADS": "1",  # a "registered" cluster
           "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-m", "lidarmt", "fuzz", "--bag", str(frames), "--map", "test_fuzz_support:strip_roi",
         "--sut", "test_fuzz_support:hang_sut", "--sut-option", "sleep=300", "--n", "10", "--radius", "30",
         "--out", str(out), "--quiet", "--backend", "ray", "--workers", "1", "--bundles", "0", "--timeout", "200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        journal = out / "journal.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        assert child.poll() is None, child.stderr.read()[-2000:]
        ray_procs = psutil.Process(child.pid).children(recursive=True)
        assert ray_procs
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 130, err[-2000:]
        assert "interrupted" in err and "--resume" in err and "SIGTERM received" not in err, err[-2000:]
        deadline = time.monotonic() + 20
        alive = ray_procs
        while alive and time.monotonic() < deadline:
            time.sleep(0.5)
            alive = [p for p in ray_procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, [p.cmdline()[:2] for p in alive]
        assert all(json.loads(x) for x in journal.read_text().splitlines())
    finally:
        if child.poll() is None:
            child.kill()


def test_a_refused_ray_token_says_why_and_how_to_fix_it(monkeypatch):
    """Item 8: `--address` to a head with token authentication failed with InvalidAuthToken and no hint."""
    ray = pytest.importorskip("ray")
    import lidarmt.engine.ray_backend as rb
    from lidarmt.errors import UserError

    def refuse(*a, **kw):
        raise ray.exceptions.AuthenticationError("InvalidAuthToken: the token does not match")

    monkeypatch.setattr(rb, "_probe", lambda address: None)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(UserError) as err:
        rb.connect("10.0.0.5:6379")
    text = str(err.value)
    assert "\n" not in text and "InvalidAuthToken" in text and "RAY_AUTH_TOKEN" in text and "auth_token" in text


# ----------------------------------------------------------------------------------------------- 9: smaller


@pytest.mark.slow
def test_bundle_folders_have_the_users_usual_mode(tmp_path):
    """Item 9: bundles (made to be shared) were folders of mode 0700 (tempfile.mkdtemp's); now 0777 & ~umask."""
    import os
    import stat

    from test_camera_campaign import write_udacity
    from test_fuzz_support import write_scenes

    mask = os.umask(0o022)
    try:
        rec = write_scenes(tmp_path / "frames", 3)
        assert main(["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut",
                     "test_fuzz_support:grid_sut", "--radius", "30", "--n", "1000", "--bundles", "1",
                     "--ddmin-budget", "4", "--out", str(tmp_path / "lidar"), "--quiet"]) in (0, 1)
        drive = write_udacity(tmp_path / "drive", 4)
        assert main(["camera", "fuzz", "--images", str(drive), "--model", "test_camera_campaign:tilt",
                     "--transforms", "rotation", "--bundles", "1", "--out", str(tmp_path / "camera"),
                     "--quiet"]) in (0, 1)
    finally:
        os.umask(mask)
    bundles = [p for run in ("lidar", "camera") for p in (tmp_path / run / "violations").iterdir() if p.is_dir()]
    assert {p.parent.parent.name for p in bundles} == {"lidar", "camera"}
    for p in bundles:
        assert stat.S_IMODE(p.stat().st_mode) == 0o755, (p, oct(p.stat().st_mode))


_KILLED_WRITER = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from test_fuzz_support import write_road_geojson
import lidarmt.lidar.roi.mapio as mapio
from lidarmt.lidar.roi import load_map, write_map

hdmap = load_map(write_road_geojson(sys.argv[1] + "/world.geojson"))
def killed(*a, **kw):  # the moment kill -9 arrives: two of the three files written
    os.kill(os.getpid(), signal.SIGKILL)
mapio.map_to_geojson = killed
write_map(hdmap, sys.argv[2])
"""


def test_a_map_folder_killed_mid_write_is_not_left_half_made(tmp_path):
    """Item 9: kill -9 of `simulate` while it wrote the HD map left a partial map folder (base_map.bin and .txt,
    no .geojson); the next run refused it as existing. The folder is now built aside and renamed into place."""
    import subprocess

    from test_fuzz_support import write_road_geojson

    from lidarmt.lidar.roi import load_map, write_map

    folder = tmp_path / "maps" / "town"
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(tmp_path), str(folder), str(TESTS)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == -9, r.stderr[-2000:]
    assert not folder.exists(), sorted(p.name for p in folder.iterdir())
    # the next run is not refused, and cleans up what the killed one left
    write_map(load_map(write_road_geojson(tmp_path / "world2.geojson")), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["base_map.bin", "base_map.geojson", "base_map.txt"]
    assert [p.name for p in folder.parent.iterdir()] == ["town"]


class BatchModel:
    """A model whose angles depend on what else is in its batch (as batched kernels' sums can, in the last
    digits): angle = the image's mean brightness plus 1e-3 times the batch's mean."""

    name = "batchy"
    module = None

    def __init__(self) -> None:
        from lidarmt.camera.models.base import InputSpec

        self.input_spec = InputSpec(48, 64)

    def predict(self, images):
        x = images.astype("float64").mean(axis=(1, 2, 3)) / 255.0
        return x + 1e-3 * x.mean()


def batchy(**kw) -> BatchModel:
    return BatchModel()


def test_a_resumed_camera_campaign_batches_as_the_uninterrupted_one(tmp_path):
    """Item 9: after a Ctrl-C resume, 2 of 2,376 camera predictions differed in the 7th digit: the resumed frame's
    remaining pairs made a smaller batch. Batches are now cut from each frame's whole key list, so a resumed
    campaign's predictions are those of an uninterrupted one, bit for bit."""
    from test_camera_campaign import config, write_udacity

    from lidarmt.engine.campaign import run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records

    cfg = config(write_udacity(tmp_path / "drive", 3), transforms="brightness,contrast",
                 model="test_hardening_round2:batchy", frames=(0, 1, 2), batch_size=8)
    run_campaign(cfg, tmp_path / "whole")
    lines = (tmp_path / "whole" / JOURNAL_NAME).read_text().splitlines(keepends=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / JOURNAL_NAME).write_text("".join(lines[:1 + 13]))  # frame 0 judged in part (13 of its 20 pairs)
    r = run_campaign(cfg, cut, resume=True)
    assert r.resumed == 13

    def preds(folder):
        return {tuple(x["key"]): (x["pred"], x["pred_t"]) for x in
                iter_records(folder / JOURNAL_NAME)}  # pairs (a resume adds a segment line)

    assert preds(cut) == preds(tmp_path / "whole")


def test_what_a_baseline_folder_names_as_code_is_listed_for_both_halves(tmp_path):
    """Item 1, the camera half: a camera baseline's journal naming a module:callable model (or an option that
    names code) is refused like a LiDAR one; built-in models are not."""
    from lidarmt.bench.folder import code_in_config
    from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs
    from lidarmt.camera.transforms.registry import select
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    def camera(model: str, **options) -> CameraCampaignConfig:
        return CameraCampaignConfig("x", (ModelRef(model, options),), transform_refs(select("brightness")), (0,))

    assert code_in_config(camera("dave2")) == []
    assert any("subprocess" in x for x in code_in_config(camera("subprocess:getoutput", cmd="touch x")))
    assert any("os:system" in x for x in code_in_config(camera("dave2", loader="os:system")))

    from lidarmt.lidar.mr1.campaign import CampaignConfig

    lidar = CampaignConfig(SourceSpec("x"), RoiSpec("m"), SutSpec("exec:rm -rf /"), (10,), (0,))
    assert any("exec:" in x for x in code_in_config(lidar))
