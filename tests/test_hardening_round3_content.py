"""Hardening, round 3 (issue 29), the content of files a stranger sends: image bombs in every format opencv
decodes (item 1), crafted ``.pt`` model files (3), valid but huge label files (4), tracebacks (5), journal lines
outside the plan and non-finite predictions (9), checkpoints and options trusted too far (12). Every test here
failed before its fix; where the old code exhausted memory or hung, it runs in a child under a memory cap or a
timeout far below the hang."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.errors import UserError

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lidarmt: error:"), err
    for w in words:
        assert w in err, err
    return err


def run_capped(code: str, *, memory: int = 3 << 30, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``code`` in a child Python whose address space is capped (``RLIMIT_AS``), bounded in time far below
    what the old code took; a MemoryError or a kill there shows the old behaviour without hurting the machine."""
    cap = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n"
    return subprocess.run([sys.executable, "-c", cap + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                                         "PATH": "/usr/bin:/bin"})


# ----------------------------------------------------------------------------------------------- 1: image bombs


def bomb(fmt: str, width: int, height: int) -> bytes:
    """A file of a few hundred bytes whose header claims ``width``×``height`` pixels, in format ``fmt``."""
    if fmt == "bmp":
        return (b"BM" + struct.pack("<IHHI", 1080, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24,
                                                                           0, 0, 2835, 2835, 0, 0) + b"\0" * 1026)
    if fmt == "gif":
        return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b",\0\0\0\0" + struct.pack(
            "<HHB", width, height, 0) + b"\x02\x02\x4c\x01\0;"
    if fmt == "tiff":
        entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
                   (273, 4, 1, 8), (277, 3, 1, 1), (278, 4, 1, height), (279, 4, 1, width * height)]
        ifd = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries) + b"\0" * 4
        return b"II*\0" + struct.pack("<I", 8) + ifd
    if fmt == "webp":
        body = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", (width - 1) | ((height - 1) << 14))
        return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body
    if fmt == "ppm":
        return f"P6\n{width} {height}\n255\n".encode() + b"\0" * 64
    if fmt == "pgm":
        return f"P5\n# a comment\n{width} {height}\n255\n".encode() + b"\0" * 64
    if fmt == "pfm":
        return f"PF\n{width} {height}\n-1\n".encode() + b"\0" * 64
    if fmt == "pam":
        return f"P7\nWIDTH {width}\nHEIGHT {height}\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n".encode() + b"\0" * 64
    if fmt == "ras":
        return struct.pack(">8I", 0x59A66A95, width, height, 24, width * height * 3, 1, 0, 0) + b"\0" * 64
    if fmt == "hdr":
        return f"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y {height} +X {width}\n".encode() + b"\0" * 64
    if fmt == "png":
        import zlib

        def chunk(kind: bytes, body: bytes) -> bytes:
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\0" * 4096)) + chunk(b"IEND", b""))
    raise AssertionError(fmt)


BOMB_FORMATS = ("bmp", "gif", "tiff", "webp", "ppm", "pgm", "pfm", "pam", "ras", "hdr", "png")


@pytest.mark.parametrize("fmt", BOMB_FORMATS)
def test_a_bomb_in_any_format_is_refused_by_its_header(fmt):
    """Item 1: a 1,080-byte .bmp declaring 30000×30000 decoded to 5.6 GB; only PNG/JPEG headers were checked."""
    from lidarmt._limits import check_image, image_header

    w, h = (16000, 16000) if fmt == "webp" else (30000, 30000)  # a WebP is at most 16384 wide
    data = bomb(fmt, w, h)
    assert image_header(data)[:2] == (w, h)
    with pytest.raises(UserError, match=f"{w}×{h}"):
        check_image(data, what="x")


def test_a_bmp_bomb_named_png_is_refused_before_decoding(tmp_path):
    """Item 1, end to end under a memory cap: a folder source's frame is refused by its header, not decoded."""
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.bmp").write_bytes(bomb("bmp", 30000, 30000))
    (tmp_path / "imgs" / "b.png").write_bytes(bomb("bmp", 30000, 30000))  # opencv goes by the bytes, not the name
    res = run_capped(f"""
        from lidarmt.camera.sources.decode import decode_file
        from lidarmt.errors import UserError
        for name in ("a.bmp", "b.png"):
            try:
                decode_file({str(tmp_path / "imgs")!r} + "/" + name)
            except UserError as err:
                print("REFUSED", err)
        """, memory=2 << 30)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("REFUSED") == 2 and "30000×30000" in res.stdout, res.stdout


def test_bytes_of_no_known_format_are_refused():
    """Item 1: what lidarmt has no header reader for never reaches opencv, which would learn the size last."""
    from lidarmt._limits import check_image

    with pytest.raises(UserError, match="not a readable image"):
        check_image(b"\0\0\0\0 some other format" + b"\0" * 64, what="x")


# ----------------------------------------------------------------------------------------------- 3: .pt files


def _weights_blob(arch: str = "dave-orig", **changes):
    """A steering weights blob as ``lidarmt camera train`` writes it (real shapes, zeros), with ``changes``."""
    import torch

    from lidarmt.camera.models.archs import ARCHS
    from lidarmt.camera.models.weightsfile import WEIGHTS_FORMAT, WEIGHTS_VERSION

    state = {k: torch.zeros_like(v, dtype=torch.float16 if v.is_floating_point() else v.dtype)
             for k, v in ARCHS[arch].build().state_dict().items()}
    blob = {"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION, "arch": arch, "dtype": "float16",
            "state_dict": state, "meta": "{}"}
    for k, v in changes.items():
        if k == "tensors":
            state.update(v)
        else:
            blob[k] = v
    return blob


def _save(blob, path: Path) -> Path:
    import torch

    torch.save(blob, path)
    return path


def test_an_expanded_tensor_claiming_2_40_elements_is_refused_before_conversion(tmp_path, capsys):
    """Item 3: a 1.7 KB .pt whose stride-0 tensor claims 2**40 elements made ``.float()`` ask the allocator for
    4 TB (a traceback), from ``camera predict`` and through a bundle's replay."""
    import torch

    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.models.zoo import model_from_file

    huge = torch.zeros(1, dtype=torch.float16).expand(1 << 20, 1 << 20)
    path = _save(_weights_blob(tensors={"features.0.weight": huge}), tmp_path / "bomb.pt")
    with pytest.raises(ModelError, match="expanded"):
        model_from_file(path)
    # an honest tensor of the wrong shape is refused from the architecture, before it is converted
    wrong = _save(_weights_blob(tensors={"features.0.weight": torch.zeros(3, 3, dtype=torch.float16)}),
                  tmp_path / "wrong.pt")
    with pytest.raises(ModelError, match="features.0.weight"):
        model_from_file(wrong)
    (tmp_path / "imgs").mkdir()
    assert main(["camera", "predict", str(tmp_path / "imgs"), "--model", str(path)]) == 2
    _one_line(capsys, "expanded")


def test_lidar_weights_with_an_expanded_tensor_are_one_line(tmp_path):
    """Item 3, the LiDAR CNN's weights: the same rule (one place: lidarmt._torchfile.check_tensors)."""
    import torch

    from lidarmt.lidar.perception.apollo.network import WeightsError, load_state_dict

    path = _save({"state_dict": {"w": torch.zeros(1).expand(1 << 20, 1 << 20)}}, tmp_path / "cnn.pt")
    with pytest.raises(WeightsError, match="expanded"):
        load_state_dict(path)


def test_a_meta_string_nested_100000_deep_is_one_line(tmp_path):
    """Item 3: a weights or translator file's ``meta`` nested 100,000 deep raised RecursionError (json.loads)."""
    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.models.weightsfile import read_weights
    from lidarmt.camera.translate.model import TRANSLATOR_FORMAT, TRANSLATOR_VERSION, read_translator

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ModelError, match="nested"):
        read_weights(_save(_weights_blob(meta=deep), tmp_path / "w.pt"))
    with pytest.raises(ModelError, match="nested"):
        read_translator(_save({"format": TRANSLATOR_FORMAT, "version": TRANSLATOR_VERSION, "meta": deep,
                               "state_dict": {}}, tmp_path / "t.pt"))


# ----------------------------------------------------------------------------------------------- 4, 5: labels

KITTI_LINE = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59\n"


def test_a_kitti_label_file_of_100000_lines_is_refused(tmp_path):
    """Item 4: a label_2 of 100,000 valid lines was read whole (no line cap), then labelled box by box."""
    from lidarmt.io.errors import FormatError
    from lidarmt.io.kitti import read_label_boxes

    path = tmp_path / "000000.txt"
    path.write_text(KITTI_LINE * 100_000)
    with pytest.raises(FormatError, match="more than"):
        read_label_boxes(path, np.eye(4))
    path.write_text(KITTI_LINE * 3)
    assert len(read_label_boxes(path, np.eye(4))) == 3


def test_a_tracklet_frame_with_100000_boxes_is_refused():
    """Item 4: 100,000 one-pose tracklets in one frame (inside the count and size limits) made ``info`` label
    points box by box for ever; one frame holds at most MAX_BOXES_PER_FRAME boxes."""
    from test_io_tracklets import poses

    from lidarmt.io.errors import FormatError
    from lidarmt.io.tracklets import MAX_BOXES_PER_FRAME, Tracklet, TrackletLabels

    one = poses((10.0, 0.0, -1.7, 0.0, 2))
    with pytest.raises(FormatError, match="boxes"):
        TrackletLabels([Tracklet("Car", 1.5, 1.8, 4.0, 0, one)] * (MAX_BOXES_PER_FRAME + 1))


@pytest.mark.slow  # a million points, 100,000 boxes in a child
def test_box_membership_scales_with_the_points_near_the_boxes():
    """Item 4: 100,000 small boxes over 1,000,000 points: the old boxes × points loop takes over half an hour on
    a quiet machine; the grid takes seconds. Bounded in a child far below the old time."""
    res = run_capped("""
        import numpy as np
        from lidarmt.io.tracklets import points_in_boxes
        from lidarmt.types import BOX_DTYPE, make_points
        rng = np.random.default_rng(0)
        pts = make_points(rng.uniform(-100, 100, (1_000_000, 3)).astype(np.float32))
        b = np.zeros(100_000, BOX_DTYPE)
        b["cx"], b["cy"] = rng.uniform(-100, 100, (2, 100_000))
        b["length"] = b["width"] = b["height"] = 0.5
        b["instance"] = np.arange(100_000)
        inst, _ = points_in_boxes(pts, b)
        print("labelled", int((inst >= 0).sum()))
        """, timeout=300)
    assert res.returncode == 0 and "labelled" in res.stdout, res.stderr[-2000:]


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e999"])
def test_a_kitti_label_with_nan_is_one_line(tmp_path, bad):
    """Item 5: a label_2 with ``nan`` crashed ``evaluate`` in shapely (GEOSException) and went into ``insert``'s
    library silently; the tracklet reader checked finiteness, the KITTI one did not."""
    from lidarmt.io.errors import FormatError
    from lidarmt.io.kitti import read_label_boxes

    path = tmp_path / "000000.txt"
    path.write_text(KITTI_LINE + KITTI_LINE.replace("1.65", bad))
    with pytest.raises(FormatError, match=r"000000.txt:2: .*not finite"):
        read_label_boxes(path, np.eye(4))


# ----------------------------------------------------------------------------------------------- 5, 9: journals


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A finished 2-frame LiDAR campaign (--n 10,300, one trial): 4 pairs."""
    from test_fuzz_campaign import config
    from test_fuzz_support import write_scenes

    from lidarmt.lidar.mr1.campaign import run_campaign

    root = tmp_path_factory.mktemp("journal")
    rec = write_scenes(root / "frames", 2)
    cfg = config(rec, ns=(10, 300), frames=(0, 1), trials=1)
    run_campaign(cfg, root / "run")
    return cfg, root / "run"


@pytest.mark.parametrize("change, words", [
    ({"n": 7}, "not in this campaign's plan"),  # an n the run never asked for
    ({"frame": 29}, "not in this campaign's plan"),  # a frame outside the sample
    ({"frame": "1"}, "frame '1'"),  # item 5: a string frame, a ValueError in write_junit on --resume
    ({"trial": True}, "trial true"),
])
def test_journal_lines_outside_the_plan_are_refused(small_run, tmp_path, change, words):
    """Item 9: an ``n = 7`` line in a ``--n 10,100,1000`` run was folded in ("pairs_done 7 / expected 6,
    complete: true"); item 5: a ``frame`` written as a string raised ValueError in write_junit on --resume."""
    import shutil

    from lidarmt.engine.errors import FuzzInputError
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.mr1.campaign import load_tally, run_campaign

    cfg, run = small_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    lines = (out / JOURNAL_NAME).read_text().splitlines()
    rec = json.loads(lines[1])
    rec.update(change)
    (out / JOURNAL_NAME).write_text("\n".join(lines[:1] + [json.dumps(rec)] + lines[2:]) + "\n")
    with pytest.raises(FuzzInputError, match=words):
        load_tally(out)
    with pytest.raises(FuzzInputError, match=words):
        run_campaign(cfg, out, resume=True)
    load_tally(run)  # the untouched journal folds as before


def test_a_camera_bundle_without_transform_replays_without_a_traceback(tmp_path, capsys):
    """Item 5: a camera bundle (a pairs campaign's, or a search's with its steps) without ``transform`` in
    bundle.json (manifest rewritten) ended replay with a KeyError at its last print."""
    from test_camera_model_paths import _folder

    from lidarmt.engine.manifest import MANIFEST_NAME, write_manifest

    src = _folder(tmp_path / "sunny", ["a.png", "b.png"], flip=False)
    fu = _folder(tmp_path / "night", ["a.png", "b.png"], flip=True)
    out = tmp_path / "run"
    assert main(["camera", "fuzz", "--pairs", str(src), str(fu), "--model", "test_camera_campaign:tilt",
                 "--tolerance", "5", "--out", str(out), "--bundles", "1", "-q"]) == 0
    bundle = next((out / "violations").iterdir())
    info = json.loads((bundle / "bundle.json").read_text())
    info.pop("transform", None)
    (bundle / "bundle.json").write_text(json.dumps(info))
    names = list(json.loads((bundle / MANIFEST_NAME).read_text())["files"])
    write_manifest(bundle, names)
    capsys.readouterr()
    # no traceback: the replay runs to its last line; bundle.json no longer says what report.md shows (its
    # transformation), so the regenerated report differs and replay names it (issue 29 item 11)
    assert main(["replay", str(bundle), "--trust-code"]) == 1
    out = capsys.readouterr().out
    assert "external follow-up" in out and "report.md" in out and "Traceback" not in out


def test_search_top_beyond_the_budget_is_one_line():
    """Item 5: ``fuzz --search es --budget 2 --top 1000000`` planned 4,000,000 validation pairs and ended in a
    MemoryError after a minute; an arm tries at most --budget conditions, so --top is bounded by it."""
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
    from lidarmt.search.errors import SearchArgumentError
    from lidarmt.search.lidar import LidarSearchConfig

    def cfg(top: int) -> LidarSearchConfig:
        return LidarSearchConfig(SourceSpec("x"), RoiSpec("test_fuzz_support:strip_roi"),
                                 SutSpec("test_fuzz_support:grid_sut"), (0,), (1, 2), strategy="es", budget=2,
                                 top=top)

    with pytest.raises(SearchArgumentError, match="--top 1000000"):
        cfg(1_000_000)
    assert cfg(2).top == 2


# ----------------------------------------------------------------------------------------------- 9: recipes


@pytest.mark.parametrize("option", [{"output": "1e308"}, {"output": -1e308}, {"output": "1e-300"},
                                    {"scale": "x*1e308"}, {"lambda": "x/1e-308"}, {"scale": "x-1e308"}])
def test_recipe_values_that_overflow_the_angles_are_refused(tmp_path, option):
    """Item 9: ``--model-option output=1e308`` printed ±inf predictions, "MSE inf" and an undefined Pearson
    correlation as +0.000, rc 0: a recipe value must be a plausible unit or normalisation."""
    from test_camera_keras import keras2_layers, write_keras

    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.models import keras as K

    path = write_keras(tmp_path / "k2.h5", keras2_layers(), version=2)
    with pytest.raises(ModelError, match="output|lambda"):
        K.load_keras(path, **option)
    assert K.load_keras(path, output="0.5").keras.output == "x0.5"


def test_predict_refuses_angles_past_the_campaign_limit(tmp_path, capsys):
    """Item 9: a model whose angles are finite but beyond MAX_ANGLE_RAD (squares overflow: MSE inf) is one
    line from ``camera predict``, as campaigns already count it a finding."""
    import cv2

    (tmp_path / "imgs").mkdir()
    for i in range(2):
        cv2.imwrite(str(tmp_path / "imgs" / f"{i}.png"), np.full((24, 32, 3), 90 * i, np.uint8))
    assert main(["camera", "predict", str(tmp_path / "imgs"), "--model", "test_hardening_round3_content:huge_model",
                 ]) == 2
    _one_line(capsys, "out-of-range")


def huge_model(**_options):
    """A steering model whose angles are finite and absurd (1e300 rad)."""
    from lidarmt.camera.models.base import InputSpec

    class Huge:
        name = "huge"
        input_spec = InputSpec(24, 32)
        module = None
        card = ""

        def predict(self, images):
            return np.full(len(images), 1e300)

    return Huge()


# ----------------------------------------------------------------------------------------------- 12: options


def test_a_level_setting_a_parameter_twice_is_one_line(capsys):
    """Item 12: ``--levels 'visibility_m=50,visibility_m=60'`` ran only 60 m but labelled the run with both."""
    from lidarmt.lidar.campaign import transform_refs
    from lidarmt.lidar.errors import LidarTransformError

    with pytest.raises(LidarTransformError, match="'visibility_m' is given twice"):
        transform_refs(["fog"], levels=("visibility_m=50,visibility_m=60",))
    assert len(transform_refs(["fog"], levels=("visibility_m=50", "visibility_m=60"))[0].levels) == 2
    assert main(["fuzz", "--transforms", "fog", "--levels", "visibility_m=50,visibility_m=60", "--bag", "nowhere",
                 "--map", "test_fuzz_support:strip_roi",
                 "--out", "nowhere-run"]) == 2
    _one_line(capsys, "given twice")


def test_evaluate_frames_below_one_is_one_line(tmp_path, capsys):
    """Item 12: ``evaluate --frames -1`` exited 0 with "0/-1" and an all-zero table."""
    assert main(["evaluate", "--data", str(tmp_path), "--frames", "-1"]) == 2
    _one_line(capsys, "--frames -1")


@pytest.fixture(scope="module")
def trained_one_epoch(tmp_path_factory):
    """A dave2 run of one epoch on 6 frames: its checkpoint.pt is what a stranger's --resume would trust."""
    from test_camera_campaign import write_udacity

    root = tmp_path_factory.mktemp("train")
    drive = write_udacity(root / "drive", 6)
    out = root / "run"
    assert main(["camera", "train", "--arch", "dave2", "--data", str(drive), "--out", str(out), "--epochs", "1"]) == 0
    return drive, out


@pytest.mark.slow  # trains dave2 for an epoch (about 15 s on a quiet machine)
@pytest.mark.parametrize("change, words", [
    ({"best_mse": float("nan")}, "best_mse nan"),  # better epochs were never kept; the card reported the old one
    ({"history": "[1, 2]"}, "history: record 1"),  # a TypeError at the end of training
    ({"history": '[{"stage": "cnn"}]'}, "history: record 1"),  # a KeyError
    ({"history": "[]"}, "0 records for 1 epochs"),
    ({"best_state": None}, "best weights"),
])
def test_a_tampered_training_checkpoint_is_refused_on_resume(trained_one_epoch, tmp_path, capsys, change, words):
    """Item 12: ``camera train --resume`` trusted a checkpoint's contents: ``history`` of the wrong shape gave a
    TypeError or KeyError, ``best_mse = NaN`` kept every later epoch from being the best, rc 0."""
    import shutil

    import torch

    drive, run = trained_one_epoch
    out = tmp_path / "run"
    shutil.copytree(run, out)
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    ck.update(change)
    torch.save(ck, out / "checkpoint.pt")
    capsys.readouterr()
    assert main(["camera", "train", "--arch", "dave2", "--data", str(drive), "--out", str(out), "--resume",
                 "--epochs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # progress lines, then the error
    assert err[-1].startswith("lidarmt: error:") and "checkpoint.pt" in err[-1] and words in err[-1], err
    assert not any("Traceback" in x for x in err)


def test_a_disk_full_before_the_journal_header_resumes_as_it_says(small_run, tmp_path, monkeypatch):
    """Item 12: a full disk before the journal's header was written said "run the same command with --resume",
    which then refused the empty journal ("not a lidarmt campaign journal"): both now agree."""
    import errno

    from lidarmt.engine import journal as J
    from lidarmt.engine.errors import FuzzOutputError
    from lidarmt.lidar.mr1.campaign import run_campaign

    cfg, _ = small_run
    real = J.Journal.write

    def full(self, record):
        if record.get("type") == "header":
            raise J._disk_error(self.path, OSError(errno.ENOSPC, "No space left on device"))
        return real(self, record)

    monkeypatch.setattr(J.Journal, "write", full)
    out = tmp_path / "run"
    with pytest.raises(FuzzOutputError, match="--resume"):
        run_campaign(cfg, out)
    assert (out / J.JOURNAL_NAME).stat().st_size == 0
    monkeypatch.setattr(J.Journal, "write", real)
    res = run_campaign(cfg, out, resume=True)
    assert res.tally.done == cfg.total == 4
