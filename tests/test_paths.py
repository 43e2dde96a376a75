"""May this path be read, may it be written (``lidarmt._paths``), and the commands that once got it wrong (issue 29
items 2, 6, 8 and 12): a FIFO ``bundle.mcap`` hung ``replay``; a FIFO ``--recipe`` hung and ``/dev/zero`` read until
memory ran out; a steering CSV's ``filename`` column read images outside its folder; ``export --out`` overwrote a ROS 2
bag's own data file; ``camera translate --images D --out D --force`` replaced its sources.

Commands that would hang on the old code run in a subprocess with a timeout far above their normal run time and
far below a hang (a hang never ends), and with a memory cap where the old code read without end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lidarmt._paths import check_readable, check_writable, inside, open_readable, read_bytes, read_text
from lidarmt.errors import InputError, OutputError, UserError

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
#: a refusal takes seconds (importing torch on a loaded machine included); a hang takes forever
HANG_LIMIT_S = 240
#: the address space a refusing command needs is far below this; the old /dev/zero reader exceeded it
MEMORY_CAP = 6 << 30


@contextlib.contextmanager
def alarm(seconds: int = 20):
    """Fail instead of hanging when a call blocks (an in-process check of a FIFO)."""
    def on_alarm(_sig, _frame):
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_lidarmt(args: list[str], *, cwd: Path, prelude: str = "") -> subprocess.CompletedProcess:
    """``python -m lidarmt ARGS`` (after ``prelude``) in a subprocess, bounded in time and memory."""
    def cap() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    code = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n{prelude}\nfrom lidarmt.cli import main\n" \
           "sys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=HANG_LIMIT_S, preexec_fn=cap)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"lidarmt {' '.join(args)} still ran after {HANG_LIMIT_S} s: it hangs ({err})")


# ----------------------------------------------------------------------------------------------- reading


@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "pipe.json"
    os.mkfifo(p)
    return p


def test_a_fifo_is_refused_without_blocking(fifo):
    with alarm():
        for call in (lambda: check_readable(fifo, max_bytes=10), lambda: read_bytes(fifo),
                     lambda: read_text(fifo)):
            with pytest.raises(InputError, match="FIFO"):
                call()
        with pytest.raises(InputError, match="FIFO"), open_readable(fifo, max_bytes=None):
            pass


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_devices_folders_and_sockets_are_refused(tmp_path):
    with pytest.raises(InputError, match="character device"):
        read_bytes("/dev/zero")
    with pytest.raises(InputError, match="folder"):
        read_bytes(tmp_path)
    sock = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        with pytest.raises(InputError, match="socket"):
            read_bytes(sock)
    with pytest.raises(InputError, match="no such file"):
        read_bytes(tmp_path / "absent")


def test_size_is_bounded_and_errors_are_the_callers(tmp_path):
    class MyError(UserError):
        pass

    p = tmp_path / "a.json"
    p.write_bytes(b"x" * 100)
    assert read_bytes(p, max_bytes=100) == b"x" * 100
    with pytest.raises(MyError, match="100 bytes, more than the 99"):
        read_bytes(p, max_bytes=99, error=MyError)
    assert read_text(p) == "x" * 100
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not utf-8 text"):
        read_text(p)


def test_names_read_from_a_file_stay_inside_their_folder(tmp_path):
    root = tmp_path / "drive"
    (root / "center").mkdir(parents=True)
    (root / "center" / "a.jpg").write_bytes(b"img")
    (tmp_path / "secret.jpg").write_bytes(b"outside")
    os.symlink("../../secret.jpg", root / "center" / "link.jpg")
    os.symlink("a.jpg", root / "center" / "ok.jpg")
    assert inside("center/a.jpg", root) == root / "center" / "a.jpg"
    assert inside("center/ok.jpg", root) == root / "center" / "ok.jpg"  # a link that stays inside
    assert inside("center/../center/a.jpg", root)
    for name, why in ((str(tmp_path / "secret.jpg"), "absolute"), ("../secret.jpg", "'..'"),
                      ("center/../../secret.jpg", "'..'"), ("center/link.jpg", "resolves outside"),
                      ("~/x.jpg", "absolute"), ("", "not a file name")):
        with pytest.raises(InputError, match=why):
            inside(name, root)
    with pytest.raises(InputError, match="resolves outside"):
        check_readable("center/link.jpg", inside=root, max_bytes=None)
    assert read_bytes("center/a.jpg", inside=root) == b"img"


# ----------------------------------------------------------------------------------------------- writing


def test_an_output_is_never_an_input_nor_an_existing_file_without_force(tmp_path):
    bag = tmp_path / "r2"
    bag.mkdir()
    (bag / "r2.mcap").write_bytes(b"data")
    rec = tmp_path / "a.bag"
    rec.write_bytes(b"rec")
    assert check_writable(tmp_path / "new.png", inputs=[rec, bag, None, "apollo"]) == tmp_path / "new.png"
    assert check_writable(None) is None
    cases = [(rec, [rec], True, "is the input"), (bag / "r2.mcap", [bag], True, "inside the input folder"),
             (bag / "new.mcap", [bag], True, "inside the input folder"), (tmp_path, [rec], True, "holds the input"),
             (rec, [], False, "already exists; pass --force")]
    for out, ins, force, why in cases:
        with pytest.raises(OutputError, match=why):
            check_writable(out, inputs=ins, force=force)
    link = tmp_path / "link.bag"
    os.symlink(rec, link)
    with pytest.raises(OutputError, match="is the input"):  # through a link, too
        check_writable(link, inputs=[rec], force=True)
    assert check_writable(rec, force=True) == rec
    with pytest.raises(OutputError, match="a folder, not a file"):
        check_writable(bag, force=True)
    with pytest.raises(OutputError, match="not a folder"):
        check_writable(rec, folder=True, may_exist=True)
    assert check_writable(bag, folder=True, may_exist=True) == bag
    if Path("/dev/null").exists():
        with pytest.raises(OutputError, match="character device"):
            check_writable("/dev/null", force=True)


# ----------------------------------------------------------------------------------------------- commands


@pytest.mark.slow
def test_replay_refuses_a_fifo_bundle_mcap_without_hanging(tmp_path):
    """Issue 29 item 2: the manifest flagged "not-a-file" and the MCAP check opened the FIFO anyway: forever."""
    root = Path(shutil.copytree(TESTS / "data" / "pre_layout" / "lidar", tmp_path / "lidar"))
    (bundle,) = (root / "run" / "violations").iterdir()
    (bundle / "bundle.mcap").unlink()
    os.mkfifo(bundle / "bundle.mcap")
    prelude = ("from importlib.metadata import EntryPoint\nimport lidarmt.lidar.perception.registry as r\n"
               "P = EntryPoint(name='grid-test', value='test_fuzz_support:grid_sut', group='lidarmt.perception')\n"
               "r._plugins = lambda: {P.name: P}\n")
    res = run_lidarmt(["replay", str(bundle), "--map", "world.geojson"], cwd=root, prelude=prelude)
    assert res.returncode == 1, res.stdout[-800:] + res.stderr[-800:]
    assert "FIFO" in res.stdout and "not reproduced" in res.stdout, res.stdout[-800:]
    assert "Traceback" not in res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_recipe_that_is_a_fifo_or_dev_zero_is_one_line(tmp_path, kind):
    """Issue 29 item 2: ``--recipe`` naming a FIFO hung; naming /dev/zero read until MemoryError."""
    if kind == "fifo":
        recipe = tmp_path / "recipe.json"
        os.mkfifo(recipe)
    else:
        recipe = Path("/dev/zero")
        if not recipe.exists():
            pytest.skip("no /dev/zero")
    (tmp_path / "model.h5").write_bytes(b"")
    (tmp_path / "frames").mkdir()
    res = run_lidarmt(["camera", "predict", "frames", "--model", "model.h5", "--recipe", str(recipe)], cwd=tmp_path)
    err = res.stderr.strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1, (res.returncode, err[-800:])
    assert "recipe" in err and ("FIFO" in err or "device" in err), err


def test_a_steering_csv_names_only_images_inside_its_folder(tmp_path):
    """Issue 29 item 6: the ``filename`` column accepted absolute and ``../`` paths (an outside image was read)."""
    import cv2
    import numpy as np

    from lidarmt.camera.errors import ImageSourceError
    from lidarmt.camera.sources import open_images
    from lidarmt.camera.sources.udacity import UdacitySource

    outside = tmp_path / "outside.jpg"
    cv2.imwrite(str(outside), np.full((8, 8, 3), 200, np.uint8))
    drive = tmp_path / "drive"
    (drive / "center").mkdir(parents=True)
    cv2.imwrite(str(drive / "center" / "1.jpg"), np.zeros((8, 8, 3), np.uint8))
    os.symlink(outside, drive / "center" / "2.jpg")
    for name, why in ((str(outside), "absolute"), ("../outside.jpg", "'..'"), ("center/../../outside.jpg", "'..'"),
                      ("center/2.jpg", "resolves outside")):
        (drive / "steering.csv").write_text(f"filename,angle\n{name},0.2\n")
        with pytest.raises(ImageSourceError, match=why):
            open_images(drive)
    (drive / "steering.csv").write_text("filename,angle\ncenter/1.jpg,0.1\n")
    with open_images(drive) as src:
        assert len(src) == 1
    os.mkfifo(tmp_path / "labels.csv")
    with alarm(), pytest.raises(ImageSourceError, match="FIFO"):
        UdacitySource(drive, csv_path=tmp_path / "labels.csv")


def test_export_into_a_ros2_bag_folder_is_refused(tmp_path, capsys):
    """Issue 29 item 8: ``export r2 --out r2/r2.mcap`` overwrote the ROS 2 recording's own data file."""
    import numpy as np

    from lidarmt.cli import main
    from lidarmt.io import write_ros2_bag
    from lidarmt.types import Frame, make_points, make_pose

    rng = np.random.default_rng(1)
    frames = [Frame(make_points(rng.uniform(-20, 20, (50, 3)).astype(np.float32), 5.0),
                    make_pose([0.0, 0.0, 0.0], [0, 0, 0, 1]), 1.5e9)]
    write_ros2_bag(tmp_path / "r2", frames, storage="mcap")
    before = {p.name: p.read_bytes() for p in (tmp_path / "r2").iterdir()}
    data = next(n for n in before if n.endswith(".mcap"))
    for out, extra, why in ((f"r2/{data}", ["--force"], "inside the input folder"),
                            ("r2/new.mcap", [], "inside the input folder")):
        assert main(["export", str(tmp_path / "r2"), "--out", str(tmp_path / out), "--quiet", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and why in err, err
    assert {p.name: p.read_bytes() for p in (tmp_path / "r2").iterdir()} == before
    # an existing x.mcap or its layout beside it: refused without --force
    (tmp_path / "x.layout.json").write_text("{}")
    assert main(["export", str(tmp_path / "r2"), "--out", str(tmp_path / "x.mcap"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "x.layout.json" in err and "--force" in err, err
    assert (tmp_path / "x.layout.json").read_text() == "{}" and not (tmp_path / "x.mcap").exists()


def test_translate_never_writes_into_its_sources(tmp_path, capsys):
    """Issue 29 item 8: ``camera translate --images D --out D --force`` replaced the source frames."""
    sys.path.insert(0, str(TESTS))
    from test_camera_campaign import write_udacity

    from lidarmt.cli import main

    drive = write_udacity(tmp_path / "drive", 2)
    before = {str(p.relative_to(drive)): p.read_bytes() for p in drive.rglob("*") if p.is_file()}
    for out in (drive, drive / "center", drive / "center" / "sub"):
        assert main(["camera", "translate", "--translator", "munit-snow", "--images", str(drive), "--out", str(out),
                     "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "input" in err, err
    assert {str(p.relative_to(drive)): p.read_bytes() for p in drive.rglob("*") if p.is_file()} == before


#: raw reads the command modules may keep: each reads a file the same command has just written itself (a bundle's
#: bundle.json, its table), or a shipped file of lidarmt's own; anything a user names goes through lidarmt._paths
#: or a reader that does
OWN_READS = {"fuzz.py": 1, "fuzz_transforms.py": 2, "camera/fuzz.py": 1, "camera/search.py": 1,
             "camera/translators.py": 1}


RAW_READ = __import__("re").compile(r"(?<![\w.])open\(|\.read_text\(|\.read_bytes\(|json\.load\(|np\.load\(|"
                                   r"numpy\.load\(|np\.fromfile\(")


def test_command_modules_read_no_user_path_directly():
    """The CLI modules open no file themselves (FIFOs, devices, sizes and folders are checked in one place): a raw
    ``open(`` / ``read_text(`` / ``read_bytes(`` / ``json.load(`` / ``np.load(`` in a command module fails here
    unless it reads the command's own output (:data:`OWN_READS`)."""
    raw = RAW_READ
    cli = ROOT / "lidarmt" / "cli"
    found = {}
    for path in sorted(cli.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        n = sum(1 for line in text.splitlines() if raw.search(line) and not line.lstrip().startswith("#"))
        if n:
            found[str(path.relative_to(cli))] = n
    assert found == OWN_READS, ("a command module reads a path itself; read a user's file through "
                                "lidarmt._paths (read_bytes, read_text, open_readable) or a reader that does")


@pytest.mark.parametrize("reader", ["sniff", "geojson", "bin", "txt", "xml", "pose", "pose.txt"])
def test_map_and_pose_readers_refuse_a_fifo_without_blocking(tmp_path, reader):
    """The readers of map and pose files go through lidarmt._paths: a FIFO is one line, never a wait."""
    from lidarmt.errors import UserError
    from lidarmt.io.posefile import read_pose_file, read_pose_txt
    from lidarmt.lidar.roi import mapio, xmlmap

    p = tmp_path / "named"
    os.mkfifo(p)
    call = {"sniff": lambda: mapio.sniff_format(p), "geojson": lambda: mapio.load_geojson(p),
            "bin": lambda: mapio._load_proto(p, binary=True), "txt": lambda: mapio._load_proto(p, binary=False),
            "xml": lambda: xmlmap.load_xml(p), "pose": lambda: read_pose_file(p),
            "pose.txt": lambda: read_pose_txt(p)}[reader]
    with alarm(), pytest.raises(UserError, match="FIFO"):
        call()


def test_reading_a_small_file_allocates_about_its_size(tmp_path):
    """``read(max_bytes)`` would allocate the whole bound up front: 256 MB for a 100-byte pose file."""
    import tracemalloc

    p = tmp_path / "small.txt"
    p.write_bytes(b"x" * 100)
    tracemalloc.start()
    try:
        assert read_bytes(p, max_bytes=1 << 30) == b"x" * 100
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    with open(p, "ab") as fh:  # a file that grows past the bound while read is refused, not read on
        fh.write(b"y" * 50)
    with pytest.raises(InputError, match="more than"):
        read_bytes(p, max_bytes=120)


#: every reader of a recording's files, and of a bundle's data files, each given the path of a FIFO or /dev/zero
def _recording_readers() -> dict:
    import numpy as np

    from lidarmt._paths import load_npz, read_json
    from lidarmt.io.cyber import CyberRecording
    from lidarmt.io.kitti import read_label_boxes, read_point_labels, read_velodyne_bin
    from lidarmt.io.kitti_region import read_calib
    from lidarmt.io.npz import load_frame_npz
    from lidarmt.io.oxts import read_oxts_file, read_timestamps
    from lidarmt.io.pcd import read_pcd
    from lidarmt.io.ros1 import Ros1Recording
    from lidarmt.io.semantickitti import read_poses_txt
    from lidarmt.io.tracklets import read_tracklets

    return {"calib": read_calib, "oxts": read_oxts_file, "timestamps": read_timestamps, "poses.txt": read_poses_txt,
            "tracklets": read_tracklets, "label_2": lambda p: read_label_boxes(p, np.eye(4)),
            "velodyne.bin": read_velodyne_bin, "label": lambda p: read_point_labels(p, 10, "scan"),
            "pcd": read_pcd, "npz": load_frame_npz, "cyber": CyberRecording, "ros1": Ros1Recording,
            "window.npz": load_npz, "obstacles.json": read_json}


@pytest.mark.parametrize("reader", sorted(_recording_readers()))
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_recording_and_bundle_readers_refuse_a_fifo_or_a_device(tmp_path, reader, kind):
    """Issue 29's read rule in every reader of a recording (KITTI scans, labels, calibration, OXTS, tracklets,
    SemanticKITTI poses, PCD, npz, Cyber, ROS 1) and of a bundle's data files: a FIFO is one line at once (the old
    readers waited on it forever), /dev/zero one line (the old ones read until memory ran out)."""
    if kind == "fifo":
        p = tmp_path / "named"
        os.mkfifo(p)
    else:
        p = Path("/dev/zero")
        if not p.exists():
            pytest.skip("no /dev/zero")
    call = _recording_readers()[reader]
    with alarm(), pytest.raises(UserError, match="FIFO" if kind == "fifo" else "character device") as err:
        call(p)
    assert "\n" not in str(err.value)


def test_a_ros2_bag_with_a_fifo_storage_file_is_one_line(tmp_path):
    """rosbags opens the storage files a ROS 2 bag folder holds: a FIFO among them is refused before."""
    import numpy as np

    from lidarmt.io import write_ros2_bag
    from lidarmt.io.ros2 import Ros2Recording
    from lidarmt.types import Frame, make_points, make_pose

    frames = [Frame(make_points(np.ones((5, 3), np.float32), 5.0), make_pose([0.0, 0.0, 0.0], [0, 0, 0, 1]), 1.5e9)]
    write_ros2_bag(tmp_path / "r2", frames, storage="mcap")
    (data,) = (tmp_path / "r2").glob("*.mcap")
    data.unlink()
    os.mkfifo(data)
    with alarm(), pytest.raises(UserError, match="FIFO"):
        Ros2Recording(tmp_path / "r2")


#: what is no raw read of a path: a file already opened through lidarmt._paths (``fh``), a zip member, a file
#: written (``"wb"``), the ``open`` method a reader hands rosbags
OPENED = __import__("re").compile(r"\((fh|info)\b|zf\.open\(|\"wb\"|def open\(")
#: raw reads the recording readers and the bundle replays may keep: each reads a file lidarmt has just written
#: itself (a ROS 2 bag's metadata.yaml in its own staging folder)
OWN_IO_READS = {"io/ros2.py": 1}


def test_recording_readers_and_replays_read_no_path_directly():
    """lidarmt/io and the replay of LiDAR-transform, MR1 and camera bundles read every file through lidarmt._paths:
    a raw ``open(`` / ``read_text(`` / ``np.load(`` / ``np.fromfile(`` there fails here."""
    lidarmt = ROOT / "lidarmt"
    paths = [*sorted((lidarmt / "io").glob("*.py")), lidarmt / "lidar" / "replay.py", lidarmt / "lidar" / "bundle.py",
             lidarmt / "lidar" / "mr1" / "replay.py", lidarmt / "lidar" / "mr1" / "bundle.py",
             lidarmt / "camera" / "replay.py", lidarmt / "camera" / "bundle.py"]
    found = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        n = sum(1 for line in text.splitlines() if RAW_READ.search(line) and not line.lstrip().startswith("#")
                and not OPENED.search(line))
        if n:
            found[str(path.relative_to(lidarmt))] = n
    assert found == OWN_IO_READS, ("a reader opens a path itself; read through lidarmt._paths (open_readable, "
                                   "open_file, read_bytes, read_text, read_json, load_npz)")


def test_the_default_run_folder_is_checked_against_the_inputs(tmp_path, monkeypatch, capsys):
    """Issue 29 item 8 for ``--out`` left at its default: ``lidarmt fuzz --bag runs/drive`` would write its run
    (journal, lock, reports) into the recording's own folder, ``runs/drive``; the default is checked as a given
    ``--out`` is (lidarmt.cli._common.default_run_folder)."""
    import numpy as np

    from lidarmt.cli import main
    from lidarmt.cli._common import default_run_folder
    from lidarmt.io.npzdir import write_npz_folder
    from lidarmt.types import Frame, make_points, make_pose

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1)
    write_npz_folder("runs/drive", [Frame(make_points(rng.uniform(-20, 20, (50, 3)).astype(np.float32), 5.0),
                                          make_pose([0.0, 0.0, 0.0], [0, 0, 0, 1]), 1.5e9)])
    before = sorted(p.name for p in (tmp_path / "runs" / "drive").iterdir())
    assert main(["fuzz", "--bag", "runs/drive", "--map", "labels", "--n", "10", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs/drive: is the input" in err, err
    assert sorted(p.name for p in (tmp_path / "runs" / "drive").iterdir()) == before
    assert default_run_folder("search-x", "runs/drive", None, "apollo") == Path("runs") / "search-x"
    (tmp_path / "runs" / "camera-x").write_text("a file where the run folder goes")
    with pytest.raises(OutputError, match="not a folder"):
        default_run_folder("camera-x", "images")


@pytest.mark.parametrize("name", ["velodyne/000000.bin", "calib/000000.txt", "label_2/000000.txt"])
def test_info_on_a_kitti_folder_with_a_fifo_is_one_line(tmp_path, name):
    """``lidarmt info`` on a KITTI folder whose scan, calibration or label file is a FIFO: one line, exit 2 (the
    old reader of the scan waited on the FIFO forever; the calibration and labels were skipped as if absent)."""
    import numpy as np

    root = tmp_path / "kitti"
    for sub in ("velodyne", "calib", "label_2"):
        (root / sub).mkdir(parents=True)
    np.zeros((10, 4), np.float32).tofile(root / "velodyne" / "000000.bin")
    (root / "calib" / "000000.txt").write_text("R0_rect: 1 0 0 0 1 0 0 0 1\nTr_velo_to_cam: 0 -1 0 0 0 0 -1 0 1 0 0 0\n")
    (root / "label_2" / "000000.txt").write_text("")
    (root / name).unlink()
    os.mkfifo(root / name)
    res = run_lidarmt(["info", str(root)], cwd=tmp_path)
    err = res.stderr.strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1 and "FIFO" in err and name in err, (res.returncode, err)
