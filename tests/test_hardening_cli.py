"""The careless user's bad days (issue 9): each mistake gets one clear line and exit status 2, nothing is lost,
and valid inputs are not treated as mistakes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lidarmt.cli import main


def _one_line(capsys, rc: int, *needles: str) -> str:
    """The captured stderr, checked to be a single ``lidarmt: error:`` line holding every needle, exit 2."""
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lidarmt: error: "), err
    for n in needles:
        assert n in lines[0], (n, err)
    return lines[0]


# ------------------------------------------------------------------------------------------------ usage errors


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["info", "--sample", "0", "x.bag"], ["--sample", "lidarmt info --help"]),
        (["simulate", "--frames", "0"], ["--frames", "lidarmt simulate --help"]),
        (["simulate", "--density", "9"], ["--density"]),
        (["simulate", "--bogus"], ["--bogus"]),
        (["info"], ["path"]),  # missing argument
        (["train"], ["--data"]),  # missing option
        (["perceive", "x.bag", "--frame", "abc"], ["--frame"]),  # not an integer
        (["fuzz", "--n"], ["--n"]),  # option without its value
        (["no-such-command"], ["no-such-command"]),
    ],
)
def test_usage_errors_are_one_line(argv, needles, capsys):
    _one_line(capsys, main(argv), *needles)
    # no rich panel anywhere
    assert "╭" not in capsys.readouterr().out


def test_help_is_unchanged(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "simulate" in out and "fuzz" in out
    assert main(["info", "--help"]) == 0
    assert "--sample" in capsys.readouterr().out
    assert main([]) == 2  # a bare `lidarmt` prints the help, with click's status 2
    assert "simulate" in capsys.readouterr().out


def test_usage_error_from_the_console_script():
    """The installed entry point (``python -m lidarmt``) prints the same single line."""
    p = subprocess.run([sys.executable, "-m", "lidarmt", "simulate", "--density", "9"], capture_output=True,
                       text=True, timeout=300)  # a usage error is at once; 300 s: starting torch on a loaded machine
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and p.stderr.startswith("lidarmt: error: ")
    assert "--density" in p.stderr and p.stdout == ""


# ------------------------------------------------------------------------------------------------ train


def _train_data(tmp_path):
    from test_training_targets import _frame

    from lidarmt.io.npz import save_frame_npz

    data = tmp_path / "data"
    save_frame_npz(data / "0000.npz", _frame(0))
    return data


def _train(data, out, *extra: str) -> int:
    return main(["train", "--data", str(data), "--out", str(out), "--steps", "1", "--grid", "64", "--crop", "32",
                 "--batch", "1", "--warmup", "1", "--threads", "1", "--fp32", *extra])


@pytest.mark.slow
def test_train_refuses_an_existing_run_unless_resume_or_force(tmp_path, capsys):
    pytest.importorskip("torch")
    data, out = _train_data(tmp_path), tmp_path / "run"
    assert _train(data, out) == 0
    capsys.readouterr()
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(files) == {"cnnseg64.pt", "last.pt", "log.jsonl"}
    _one_line(capsys, _train(data, out), str(out), "--resume", "--force")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # nothing touched
    _one_line(capsys, _train(data, out, "--resume", "--force"), "contradict")
    # a folder holding anything else is refused too, as `fuzz` refuses it
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _one_line(capsys, _train(data, other), "--force")
    # --force starts over (the log holds only the new run) and leaves files it does not own alone
    assert _train(data, other, "--force") == 0
    assert (other / "notes.txt").read_text() == "mine"
    assert _train(data, out, "--force", "--steps", "2") == 0
    assert len((out / "log.jsonl").read_text().splitlines()) == 2
    # --resume continues from last.pt
    assert _train(data, out, "--resume", "--steps", "3") == 0
    assert len((out / "log.jsonl").read_text().splitlines()) == 3


def test_train_resume_without_checkpoint_but_with_a_run_is_refused(tmp_path, capsys):
    pytest.importorskip("torch")
    data, out = _train_data(tmp_path), tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1}\n')
    _one_line(capsys, _train(data, out, "--resume"), "last.pt", "--force")
    assert (out / "log.jsonl").read_text() == '{"step": 1}\n'


def test_train_on_a_recording_is_refused_before_writing(tmp_path, capsys):
    pytest.importorskip("torch")
    bag = tmp_path / "demo.bag"
    bag.write_bytes(b"#ROSBAG V2.0\n" + bytes(4000))
    out = tmp_path / "run"
    _one_line(capsys, _train(bag, out), "demo.bag", "--data expects", "simulate --dataset")
    assert not out.exists()
    # a folder whose .npz files are not training frames (a simulated bag's labels) fails before writing, too
    folder = tmp_path / "bags"
    folder.mkdir()
    np = pytest.importorskip("numpy")
    np.savez(folder / "demo.labels.npz", stamps=np.zeros(2))
    _one_line(capsys, _train(folder, out), "demo.labels.npz", "--data expects")
    assert not out.exists()


def test_train_resume_from_a_corrupt_checkpoint_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    data, out = _train_data(tmp_path), tmp_path / "run"
    out.mkdir()
    (out / "last.pt").write_bytes(bytes(range(256)) * 16)
    line = _one_line(capsys, _train(data, out, "--resume"), "last.pt", "not a lidarmt training checkpoint")
    assert "Weights only load failed" not in line and "file an issue" not in line


# ------------------------------------------------------------------------------------------------ weights


@pytest.fixture
def small_scene(tmp_path):
    """A one-frame .npz recording, a road drawn in the sensor frame, and a weights file of random bytes."""
    import json

    import numpy as np

    from lidarmt.io.npzdir import write_npz_folder
    from lidarmt.types import Frame, make_points

    g = np.arange(-1.0, 1.0, 0.25)
    xx, yy = np.meshgrid(g + 5.0, g)
    write_npz_folder(tmp_path / "rec", [Frame(make_points(np.c_[xx.ravel(), yy.ravel(), np.zeros(xx.size)], 50.0))])
    road = [[-10, -4], [10, -4], [10, 4], [-10, 4], [-10, -4]]
    doc = {"type": "FeatureCollection", "frame": "sensor",
           "features": [{"type": "Feature", "properties": {"kind": "road", "id": "r"},
                         "geometry": {"type": "Polygon", "coordinates": [road]}}]}
    (tmp_path / "map.geojson").write_text(json.dumps(doc))
    (tmp_path / "random.pt").write_bytes(np.random.default_rng(0).bytes(8192))
    return tmp_path


def _no_torch_advice(line: str) -> None:
    assert "not a CNN weights file" in line and "random.pt" in line
    assert "file an issue" not in line and "Weights only load failed" not in line


def test_random_bytes_as_weights_are_one_line_everywhere(small_scene, capsys):
    pytest.importorskip("torch")
    d = small_scene
    w = str(d / "random.pt")
    _no_torch_advice(_one_line(capsys, main(["perceive", str(d / "rec"), "--map", str(d / "map.geojson"),
                                             "--weights", w])))
    from test_training_targets import _frame

    from lidarmt.io.npz import save_frame_npz

    save_frame_npz(d / "val" / "000000.npz", _frame(0))  # evaluate wants labelled frames
    _no_torch_advice(_one_line(capsys, main(["evaluate", "--data", str(d / "val"), "--weights", w])))
    _no_torch_advice(_one_line(capsys, main(["fuzz", "--bag", str(d / "rec"), "--map", str(d / "map.geojson"),
                                             "--sut-option", f"weights={w}", "--n", "10", "--quiet",
                                             "--out", str(d / "run")])))
    assert not (d / "run").exists()


# ------------------------------------------------------------------------------------------------ info


@pytest.mark.realdata
def test_info_on_a_record_without_point_clouds_is_no_error(shared_data, tmp_path, capsys):
    """Apollo's example Cyber record holds planning, localization and chassis messages but no point cloud: info
    summarises it (exit 0, with a note); the commands that need point clouds still refuse it in one line."""
    import json

    record = shared_data / "apollo" / "records" / "example.record.00000"
    if not record.is_file():
        pytest.skip(f"{record} is absent")
    assert main(["info", str(record)]) == 0
    out, err = capsys.readouterr()
    assert "no point clouds" in out and "/apollo/localization/pose" in out and err == ""
    assert main(["info", str(record), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["frame_count"] == 0
    assert err.startswith("lidarmt: note:") and err.count("\n") == 1
    road = [[-10, -4], [10, -4], [10, 4], [-10, 4], [-10, -4]]
    m = tmp_path / "map.geojson"
    m.write_text(json.dumps({"type": "FeatureCollection", "frame": "sensor", "features": [
        {"type": "Feature", "properties": {"kind": "road"}, "geometry": {"type": "Polygon", "coordinates": [road]}}]}))
    _one_line(capsys, main(["perceive", str(record), "--map", str(m)]), "PointCloud")
    _one_line(capsys, main(["fuzz", "--bag", str(record), "--map", str(m), "--out", str(tmp_path / "run")]),
              "PointCloud")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ maps


BOWTIE = [[-30, -30], [30, 30], [30, -30], [-30, 30], [-30, -30]]  # two 900 m² triangles crossing at (0, 0)


def _geojson(path, *features) -> None:
    import json

    path.write_text(json.dumps({"type": "FeatureCollection", "frame": "sensor", "features": [
        {"type": "Feature", "properties": props, "geometry": geom} for props, geom in features]}))


def _roi_area(hd) -> float:
    import numpy as np

    from lidarmt.lidar.roi import HDMapRoi

    mask = HDMapRoi(hd).mask(np.eye(4))
    g = np.arange(-69.875, 70.0, 0.25)  # cell centres of the 0.25 m grid
    xx, yy = np.meshgrid(g, g)
    return float(mask.contains(np.c_[xx.ravel(), yy.ravel()]).sum()) * 0.0625


def test_self_intersecting_polygon_is_repaired_with_a_warning(tmp_path):
    from lidarmt.lidar.roi import load_map

    p = tmp_path / "bowtie.geojson"
    _geojson(p, ({"kind": "road", "id": "r"}, {"type": "Polygon", "coordinates": [BOWTIE]}))
    with pytest.warns(UserWarning, match="self-intersecting.*make_valid"):
        hd = load_map(p)
    # both fill rules give 1,800 m² for this ring; Apollo's scan conversion of the crossed ring gave 2,685 m²
    assert _roi_area(hd) == pytest.approx(1800.0, abs=10.0)
    (road,) = hd.roads
    assert [s.id for s in road.sections] == ["1", "1_1"]


def test_self_intersecting_road_with_lanes_is_refused(tmp_path, small_scene, capsys):
    """With lanes, Apollo's query takes one polygon per lane: a road that falls apart cannot be kept whole."""
    p = tmp_path / "bowtie.geojson"
    _geojson(p, ({"kind": "road", "id": "r"}, {"type": "Polygon", "coordinates": [BOWTIE]}),
             ({"kind": "lane", "id": "l", "road": "r"}, {"type": "LineString", "coordinates": [[-20, 0], [20, 0]]}))
    _one_line(capsys, main(["roi", str(small_scene / "rec"), "--map", str(p), "--out", str(tmp_path / "roi.png")]),
              "bowtie.geojson", "road 'r'", "simple ring")
    # a ring that only doubles back over itself stays one polygon: repaired, lanes or not
    spike = [[-30, -30], [30, -30], [30, 30], [-30, 30], [-30, 0], [-50, 0], [-30, 0], [-30, -30]]
    q = tmp_path / "spike.geojson"
    _geojson(q, ({"kind": "road", "id": "r"}, {"type": "Polygon", "coordinates": [spike]}),
             ({"kind": "lane", "id": "l", "road": "r"}, {"type": "LineString", "coordinates": [[-20, 0], [20, 0]]}))
    from lidarmt.lidar.roi import load_map

    with pytest.warns(UserWarning, match="1 part"):
        hd = load_map(q)
    assert _roi_area(hd) == pytest.approx(3600.0, abs=40.0)


def test_repaired_junction_and_valid_maps_are_untouched(tmp_path):
    import warnings

    from lidarmt.lidar.roi import load_map

    p = tmp_path / "j.geojson"
    _geojson(p, ({"kind": "junction", "id": "j"}, {"type": "Polygon", "coordinates": [BOWTIE]}))
    with pytest.warns(UserWarning, match="junction 'j'"):
        hd = load_map(p)
    assert [j.id for j in hd.junctions] == ["j", "j_1"]
    square = [[-30, -30], [30, -30], [30, 30], [-30, 30], [-30, -30]]
    q = tmp_path / "square.geojson"
    _geojson(q, ({"kind": "road", "id": "r", "left_points": 2}, {"type": "Polygon", "coordinates": [square]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hd = load_map(q)
    assert len(hd.roads[0].sections) == 1 and len(hd.roads[0].sections[0].edges) == 2
    assert _roi_area(hd) == pytest.approx(3600.0, abs=40.0)


def test_polygon_without_area_is_refused(tmp_path, small_scene, capsys):
    line = [[0, 0], [10, 0], [20, 0], [0, 0]]
    p = tmp_path / "flat.geojson"
    _geojson(p, ({"kind": "road", "id": "r"}, {"type": "Polygon", "coordinates": [line]}))
    _one_line(capsys, main(["roi", str(small_scene / "rec"), "--map", str(p), "--out", str(tmp_path / "roi.png")]),
              "flat.geojson", "no area")


def test_cli_prints_the_repair_warning_as_one_line(small_scene, capsys):
    p = small_scene / "bowtie.geojson"
    _geojson(p, ({"kind": "road", "id": "r"}, {"type": "Polygon", "coordinates": [BOWTIE]}))
    assert main(["roi", str(small_scene / "rec"), "--map", str(p), "--out", str(small_scene / "roi.png")]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("lidarmt: warning: ") and err.count("\n") == 1 and "self-intersecting" in err
    assert "1,800 m²" in out


# ------------------------------------------------------------------------------------------------ temporaries


def test_stale_temporaries_are_exactly_lidarmts_own(tmp_path):
    import re

    from lidarmt._atomic import atomic_path, remove_stale_temporaries, stale_temporaries

    ours = [tmp_path / ".demo.bag.1a2b3c4d.tmp", tmp_path / ".demo.bag.k_x9qz01.tmp"]
    theirs = [tmp_path / "demo.bag", tmp_path / ".demo.bag.notes.tmp", tmp_path / ".demo.bag.1a2b3c4d.tmp.bak",
              tmp_path / ".other.bag.1a2b3c4d.tmp", tmp_path / ".xdemo.bag.1a2b3c4d.tmp", tmp_path / "demo.bag.tmp",
              tmp_path / ".demo.bag.x.1a2b3c4d.tmp"]
    for p in ours + theirs:
        p.write_bytes(b"x")
    with open(ours[0], "ab"):  # a temporary some process still writes is not stale
        assert stale_temporaries(tmp_path, re.escape("demo.bag")) == [ours[1]]
    assert remove_stale_temporaries(tmp_path, re.escape("demo.bag")) == sorted(ours)
    assert all(p.exists() for p in theirs) and not any(p.exists() for p in ours)
    # the names atomic_path gives are the ones recognised
    with atomic_path(tmp_path / "demo.bag") as tmp:
        assert stale_temporaries(tmp_path, re.escape("demo.bag")) == [tmp]
    assert remove_stale_temporaries(tmp_path / "absent", ".*") == []


@pytest.mark.slow
def test_simulate_removes_the_temporary_a_sigkilled_run_left(tmp_path, capsys):
    """`lidarmt simulate` killed by SIGKILL leaves a hidden .demo.bag.*.tmp; the next run writing it removes it."""
    pytest.importorskip("open3d")
    import os
    import re
    import signal
    import time

    bag = tmp_path / "demo.bag"
    keep = tmp_path / ".other.bag.1a2b3c4d.tmp"
    keep.write_bytes(b"someone else's")
    proc = subprocess.Popen([sys.executable, "-m", "lidarmt", "simulate", "--frames", "50", "--no-camera",
                             "--out", str(bag)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    form = re.compile(r"\.demo\.bag\.[0-9a-f]{8}\.tmp")
    try:
        deadline = time.monotonic() + 120
        while not [p for p in tmp_path.iterdir() if form.fullmatch(p.name)] and time.monotonic() < deadline:
            assert proc.poll() is None, "simulate ended before it was killed"
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    (left,) = [p for p in tmp_path.iterdir() if form.fullmatch(p.name)]
    assert not bag.exists()
    assert main(["simulate", "--frames", "1", "--no-camera", "--out", str(bag)]) == 0
    err = capsys.readouterr().err
    assert "stale temporary" in err and left.name in err
    assert not left.exists() and bag.is_file() and keep.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".other.bag.1a2b3c4d.tmp", "demo.bag",
                                                                  "demo.labels.npz"])


# ------------------------------------------------------------------------------------------------ evaluate


@pytest.fixture(scope="module")
def sim_bag(tmp_path_factory):
    """A one-sweep simulated bag with its ground truth beside it (demo.labels.npz), and small CNN weights."""
    pytest.importorskip("open3d")
    torch = pytest.importorskip("torch")
    from lidarmt.lidar.perception.apollo.network import build_network
    from lidarmt.lidar.sim.record import simulate_recording

    d = tmp_path_factory.mktemp("simbag")
    simulate_recording(d / "demo.bag", None, seed=7, frames=1, camera=False)
    torch.save(build_network(64, seed=0).state_dict(), d / "w64.pt")
    return d


def _evaluate(d, data, *extra: str) -> list[str]:
    return ["evaluate", "--data", str(data), "--weights", str(d / "w64.pt"), "--grid", "64", *extra]


@pytest.mark.slow
def test_evaluate_reads_the_labels_the_simulator_writes_beside_its_bag(sim_bag, capsys):
    import json

    import numpy as np

    from lidarmt.lidar.sim.record import load_labels

    out = sim_bag / "eval.json"
    assert main(_evaluate(sim_bag, sim_bag / "demo.bag", "--out", str(out))) == 0
    (res,) = json.loads(out.read_text())["results"]
    gt = sum(c["gt"] for c in res["classes"].values())
    (labels,) = load_labels(sim_bag / "demo.bag")
    visible = [b for b in labels.boxes if np.count_nonzero(labels.point_instance == b["instance"]) >= 5]
    assert 0 < gt <= len(visible)  # it was 0 in every class: the bag's frames carry no labels themselves
    assert res["frames"] == 1
    capsys.readouterr()


def test_evaluate_refuses_a_recording_without_ground_truth(sim_bag, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare.bag"
    shutil.copyfile(sim_bag / "demo.bag", bare)
    _one_line(capsys, main(_evaluate(sim_bag, bare)), "bare.bag", "no ground truth", "bare.labels.npz")
    # labels of another recording (a different number of sweeps) are refused, not mismatched
    import numpy as np

    from lidarmt.lidar.sim.record import write_npz_deterministic

    write_npz_deterministic(tmp_path / "bare.labels.npz", {"stamps": np.zeros(0)})
    _one_line(capsys, main(_evaluate(sim_bag, bare)), "bare.labels.npz", "0 sweep(s)")


def test_evaluate_refuses_unlabelled_frames(small_scene, capsys):
    _one_line(capsys, main(["evaluate", "--data", str(small_scene / "rec")]), "no ground truth")
