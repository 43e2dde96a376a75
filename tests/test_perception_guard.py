"""The guard at the boundary with the SUT: malformed output, input written in place, well-behaved SUTs untouched.

Cheap fake SUTs on frames of a few dozen points; ``perceive --perception`` with a malformed plug-in module.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.errors import LidarmtError, UserError
from lidarmt.io.npzdir import write_npz_folder
from lidarmt.lidar.perception.guard import (
    InputModified,
    MalformedOutput,
    SutFault,
    guarded_detect,
    readonly_inputs,
    validate_obstacles,
)
from lidarmt.lidar.roi.bitmap import PointLabelRoi, RoiMask
from lidarmt.types import (
    BOX_DTYPE,
    Frame,
    Labels,
    MetaType,
    Obstacle,
    ObstacleClass,
    Obstacles,
    make_points,
    make_pose,
)

N = 50


def tiny_frame(n: int = N) -> Frame:
    rng = np.random.default_rng(3)
    xyz = rng.uniform(-8.0, 8.0, (n, 3))
    labels = Labels(np.zeros(2, dtype=BOX_DTYPE), np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int8))
    return Frame(make_points(xyz, 20.0), pose=make_pose([1.0, 2.0, 0.5], [0, 0, 0.38, 0.92]), labels=labels)


def tiny_roi() -> RoiMask:
    return RoiMask.from_polygons([np.array([[-5.0, -3.0], [5.0, -3.0], [5.0, 3.0], [-5.0, 3.0]])], range=10.0)


def obstacle(indices=(0, 1, 2), cls=ObstacleClass.CAR, **over) -> Obstacle:
    idx = np.asarray(indices, dtype=np.int64) if isinstance(indices, tuple) else indices  # lists: as given
    fields = dict(cls=cls, score=0.9, point_indices=idx,
                  center=np.array([1.0, 2.0, -1.5]), length=4.2, width=1.8, height=1.5,
                  direction=np.array([1.0, 0.0, 0.0]), polygon=np.zeros((4, 3)), meta_type=MetaType.SMALLMOT,
                  type_probs=np.array([0.0, 0, 0, 0.1, 0.1, 0.8]))  # fmt: skip
    fields.update(over)
    return Obstacle(**fields)


class Sut:
    """A fake perception module: ``detect`` returns ``result`` (or calls it) and may first do ``act(frame, roi)``."""

    def __init__(self, result=None, act=None, name: str = "fake") -> None:
        self.name, self.result, self.act, self.calls = name, result, act, 0

    def detect(self, frame: Frame, roi) -> object:
        self.calls += 1
        if self.act is not None:
            self.act(frame, roi)
        return self.result(frame) if callable(self.result) else self.result


def snapshot(frame: Frame, roi: RoiMask) -> list[bytes]:
    lb = frame.labels
    assert lb is not None
    return [a.tobytes() for a in (frame.points, frame.pose, lb.boxes, lb.point_instance, lb.point_meta,
                                  roi.bitmap, roi.rotation, *roi.polygons)]  # fmt: skip


# ----------------------------------------------------------------------------------------------- malformed output


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("boom", "detect returned a str ('boom'), not Obstacles"),
        (None, "detect returned None, not Obstacles"),
        (42, "detect returned an int (42), not Obstacles"),
        ({"car": 1}, "detect returned a dict"),
        ([obstacle(), None], "obstacle 1 is None, not a lidarmt.types.Obstacle"),
        ([{"class": "car"}], "obstacle 0 is a dict ({'class': 'car'}), not a lidarmt.types.Obstacle"),
        ([obstacle(), obstacle(cls="truck")],
         "obstacle 1: class 'truck' is not one of car, pedestrian, cyclist, unknown"),
        ([obstacle(), obstacle(indices=[3, 10**12])],
         f"obstacle 1: point index 1000000000000 is outside the frame's {N} points"),
        ([obstacle(indices=[4, -1])], f"obstacle 0: point index -1 is outside the frame's {N} points"),
        ([obstacle(indices=[4, 10**30])], f"obstacle 0: point index {10**30} is outside the frame's {N} points"),
        ([obstacle(indices=np.array([1.0, 2.5]))], "obstacle 0: point_indices have dtype float64 (e.g. 1.0), not integers"),
        ([obstacle(indices=np.ones(N, bool))], "obstacle 0: point_indices are booleans (a mask?)"),
        ([obstacle(indices=np.zeros((2, 2), np.int64))], "obstacle 0: point_indices has shape (2, 2), expected 1-D"),
        ([obstacle(indices=[1, "2"])], "obstacle 0: point_indices have dtype <U21 (e.g. '1'), not integers"),
        ([obstacle(center=np.array([np.nan, 0.0, 0.0]))], "obstacle 0: center [nan, 0.0, 0.0] is not finite"),
        ([obstacle(length=float("nan"))], "obstacle 0: length is nan, not a finite number"),
        ([obstacle(height=-1.0)], "obstacle 0: height -1 is negative"),
        ([obstacle(score="high")], "obstacle 0: score is a str ('high'), not a number"),
        ([obstacle(center=np.zeros(2))], "obstacle 0: center has shape (2,), expected (3,)"),
        ([obstacle(polygon=np.zeros((4, 2)))], "obstacle 0: polygon has shape (4, 2), expected (K, 3)"),
        ([obstacle(direction=[1.0, float("inf"), 0.0])], "obstacle 0: direction [1.0, inf, 0.0] is not finite"),
        ([obstacle(meta_type=9)], "obstacle 0: meta_type 9 is not one of UNKNOWN(0), SMALLMOT(1)"),
        ([obstacle(type_probs=np.array([[0.5]]))], "obstacle 0: type_probs has shape (1, 1), expected (K,)"),
    ],
)
def test_malformed_output_is_a_fault_naming_the_first_problem(result, expected) -> None:
    frame, roi = tiny_frame(), tiny_roi()
    with pytest.raises(MalformedOutput) as info:
        guarded_detect(Sut(result, name="mydet"), frame, roi)
    msg = str(info.value)
    assert msg.startswith("perception 'mydet' returned malformed output: ")
    assert expected in msg and "\n" not in msg
    assert info.value.sut == "mydet" and expected in info.value.detail


def test_a_fault_is_a_finding_not_a_user_error() -> None:
    assert issubclass(MalformedOutput, SutFault) and issubclass(InputModified, SutFault)
    assert issubclass(SutFault, LidarmtError) and not issubclass(SutFault, UserError)


def test_a_huge_index_is_refused_before_anything_is_sized_by_it() -> None:
    """The campaign once tried to allocate 7 TiB from such an index: the check must not build anything from it."""
    o = obstacle(indices=np.array([2**62], dtype=np.uint64))
    with pytest.raises(MalformedOutput, match=f"point index {2**62} is outside the frame's 50 points"):
        validate_obstacles([o], n_points=50)


def test_an_endless_generator_is_cut_off(monkeypatch) -> None:
    from lidarmt.lidar.perception import guard

    monkeypatch.setattr(guard, "MAX_OBSTACLES", 5)

    def forever():
        while True:
            yield obstacle()

    with pytest.raises(MalformedOutput, match="more than 5 obstacles"):
        validate_obstacles(forever(), n_points=N)


# ----------------------------------------------------------------------------------------------- good output


def test_a_well_behaved_sut_passes_unchanged() -> None:
    frame, roi = tiny_frame(), tiny_roi()
    expected = Obstacles([obstacle(), obstacle((5, 6), ObstacleClass.PEDESTRIAN, type_probs=None)])
    sut = Sut(expected)
    got = guarded_detect(sut, frame, roi)
    assert got is expected  # nothing to convert: the very object
    listed = guarded_detect(Sut(list(expected)), frame, roi)
    assert isinstance(listed, Obstacles) and all(a is b for a, b in zip(listed, expected, strict=True))
    empty = guarded_detect(Sut(()), frame, roi)
    assert isinstance(empty, Obstacles) and len(empty) == 0


def test_output_is_bit_identical_to_a_direct_call() -> None:
    """A deterministic SUT that derives its obstacles from the frame gives the same bytes with and without the
    guard (read-only views change nothing it computes)."""

    def from_frame(frame: Frame) -> Obstacles:
        idx = np.flatnonzero(frame.points["x"] > 0).astype(np.int64)
        xyz = frame.xyz[idx].astype(np.float64)
        return Obstacles([obstacle(idx, center=xyz.mean(axis=0), length=float(np.ptp(xyz[:, 0])),
                                   polygon=np.c_[xyz[:4, :2], np.full(4, xyz[:, 2].min())])])  # fmt: skip

    frame, roi = tiny_frame(), tiny_roi()
    direct = Sut(from_frame).detect(frame, roi)
    guarded = guarded_detect(Sut(from_frame), frame, roi)
    assert json.dumps(direct.to_list()) == json.dumps(guarded.to_list())
    for a, b in zip(direct, guarded, strict=True):
        for name in ("point_indices", "center", "direction", "polygon", "type_probs"):
            assert getattr(a, name).tobytes() == getattr(b, name).tobytes()


def test_loose_but_unambiguous_values_are_converted() -> None:
    o = obstacle(indices=[4, 2], cls="pedestrian", meta_type=4, center=[0.0, 1.0, 2.0], polygon=[[0, 0, 0]] * 3)
    got = validate_obstacles([o], n_points=N)[0]
    assert got is not o and got.cls is ObstacleClass.PEDESTRIAN and got.meta_type is MetaType.PEDESTRIAN
    assert got.point_indices.dtype == np.int64 and got.point_indices.tolist() == [4, 2]
    assert got.center.dtype == np.float64 and got.polygon.shape == (3, 3)
    assert o.cls == "pedestrian" and isinstance(o.point_indices, list)  # the SUT's own object is left alone
    small = validate_obstacles([obstacle(indices=np.array([7], np.int32))], n_points=N)[0]
    assert small.point_indices.dtype == np.int64
    assert validate_obstacles([obstacle(indices=np.array([]))], n_points=N)[0].point_indices.dtype == np.int64


def test_timings_are_passed_only_to_a_sut_that_takes_them() -> None:
    frame, roi = tiny_frame(), tiny_roi()

    class Timed:
        name = "timed"

        def detect(self, frame, roi, *, timings=None):
            timings["cnn"] = 0.5
            return []

    t: dict[str, float] = {}
    guarded_detect(Timed(), frame, roi, timings=t)
    assert t == {"cnn": 0.5}
    t2: dict[str, float] = {}
    guarded_detect(Sut([]), frame, roi, timings=t2)  # detect(frame, roi) only: not passed, no TypeError
    assert t2 == {}


# ----------------------------------------------------------------------------------------------- input modified


def test_writing_into_the_points_fails_and_the_frame_stays_intact() -> None:
    frame, roi = tiny_frame(), tiny_roi()
    before = snapshot(frame, roi)

    def write(f, r):
        f.points["x"][0] = 99.0

    with pytest.raises(ValueError, match="read-only"):
        guarded_detect(Sut([], write), frame, roi)
    assert snapshot(frame, roi) == before
    assert frame.points.flags.writeable  # the caller's own arrays keep their flags


@pytest.mark.parametrize(
    ("target", "label"),
    [
        (lambda f, r: f.points, "frame.points"),
        (lambda f, r: f.pose, "frame.pose"),
        (lambda f, r: f.labels.point_instance, "frame.labels.point_instance"),
        (lambda f, r: r.bitmap, "roi.bitmap"),
        (lambda f, r: r.polygons[0], "roi.polygons[0]"),
    ],
)
def test_flipping_writeable_and_writing_is_caught_and_undone(target, label) -> None:
    frame, roi = tiny_frame(), tiny_roi()
    before = snapshot(frame, roi)

    def sneaky(f, r):
        a = target(f, r)
        a.flags.writeable = True  # allowed: the memory's owner is writeable
        a.reshape(-1).view(np.uint8)[:8] ^= 0xFF

    with pytest.raises(InputModified) as info:
        guarded_detect(Sut([obstacle()], sneaky, name="sneaky"), frame, roi)
    assert info.value.arrays == (label,)
    assert str(info.value).startswith(f"perception 'sneaky' modified its input during detect: {label} changed")
    assert "it was restored" in str(info.value)
    assert snapshot(frame, roi) == before  # restored bit for bit: later follow-ups see the original frame


def test_a_sut_that_writes_and_then_raises_keeps_its_own_error() -> None:
    frame, roi = tiny_frame(), tiny_roi()
    before = snapshot(frame, roi)

    def write_then_fail(f, r):
        f.points.flags.writeable = True
        f.points["z"][:] = 0.0
        raise RuntimeError("segmentation fault in my CNN")

    with pytest.raises(RuntimeError, match="segmentation fault") as info:
        guarded_detect(Sut([], write_then_fail), frame, roi)
    assert any("frame.points changed" in note for note in info.value.__notes__)
    assert snapshot(frame, roi) == before


def test_a_strided_view_is_watched_and_restored() -> None:
    base = tiny_frame(2 * N)
    frame = Frame(base.points[::2], pose=None)
    assert not frame.points.flags.c_contiguous
    before = base.points.tobytes()

    def sneaky(f, r):
        f.points.flags.writeable = True
        f.points["intensity"][3] = -1.0

    with pytest.raises(InputModified, match="frame.points changed"):
        guarded_detect(Sut([], sneaky), frame, tiny_roi())
    assert base.points.tobytes() == before


def test_replacing_attributes_of_the_inputs_does_not_reach_the_caller() -> None:
    frame, roi = tiny_frame(), tiny_roi()
    points, bitmap = frame.points, roi.bitmap

    def rebind(f, r):
        f.points = f.points[:3]
        r.bitmap = np.zeros_like(r.bitmap)

    guarded_detect(Sut([], rebind), frame, roi)
    assert frame.points is points and roi.bitmap is bitmap


def test_readonly_inputs_keep_the_roi_working_and_identities_shared() -> None:
    frame = tiny_frame()
    labelled = PointLabelRoi(frame, frame.points["x"] > 0)
    ro_frame, ro_roi = readonly_inputs(frame, labelled)
    assert not ro_frame.points.flags.writeable and ro_roi is not labelled
    assert ro_roi._frame.points is ro_frame.points  # the ROI still recognises its own frame
    assert np.array_equal(ro_roi.indices(ro_frame), labelled.indices(frame))
    mask = tiny_roi()
    _, ro_mask = readonly_inputs(frame, mask)
    assert not ro_mask.bitmap.flags.writeable and np.array_equal(ro_mask.indices(frame), mask.indices(frame))


def test_frames_of_different_sizes_one_after_another() -> None:
    """The copies live in a reused buffer: growing it, and a nested guarded call, keep every check exact."""
    small, big, roi = tiny_frame(10), tiny_frame(5000), tiny_roi()

    class Nested:
        name = "nested"

        def detect(self, frame, roi):
            inner = guarded_detect(Sut([obstacle()]), small, roi)
            return list(inner)

    for frame in (small, big, small, big):
        assert len(guarded_detect(Nested(), frame, roi)) == 1
    before = big.points.tobytes()

    def sneaky(f, r):
        f.points.flags.writeable = True
        f.points["y"][-1] += 1.0

    with pytest.raises(InputModified):
        guarded_detect(Sut([], sneaky), big, roi)
    assert big.points.tobytes() == before


# ----------------------------------------------------------------------------------------------- perceive


@pytest.fixture
def scene(tmp_path, monkeypatch):
    """A one-frame .npz recording, a sensor-frame GeoJSON map and a plug-in module ``badsut`` on sys.path."""
    rng = np.random.default_rng(0)
    write_npz_folder(tmp_path / "rec", [Frame(make_points(rng.uniform(-8, 8, (200, 3)), 50.0))])
    road = [[-10, -4], [10, -4], [10, 4], [-10, 4], [-10, -4]]
    doc = {"type": "FeatureCollection", "frame": "sensor",
           "features": [{"type": "Feature", "properties": {"kind": "road", "id": "r"},
                         "geometry": {"type": "Polygon", "coordinates": [road]}}]}  # fmt: skip
    (tmp_path / "map.geojson").write_text(json.dumps(doc))
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "badsut.py").write_text(textwrap.dedent("""
        import numpy as np
        from lidarmt.types import Obstacle, ObstacleClass, Obstacles

        def box(cls, idx):
            return Obstacle(cls=cls, score=0.8, point_indices=np.asarray(idx, dtype=np.int64),
                            center=np.zeros(3), length=1.0, width=1.0, height=1.0,
                            direction=np.array([1.0, 0, 0]), polygon=np.zeros((4, 3)))

        class Truck:
            name = "trucks"
            def detect(self, frame, roi):
                return [box(ObstacleClass.CAR, [0, 1]), box("truck", [2])]

        class Good:
            name = "good"
            def detect(self, frame, roi):
                return Obstacles([box(ObstacleClass.PEDESTRIAN, roi.indices(frame)[:3])])
    """))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    return tmp_path


def _perceive(d: Path, *extra: str) -> list[str]:
    return ["perceive", str(d / "rec"), "--map", str(d / "map.geojson"), *extra]


def test_perceive_with_a_malformed_plugin_is_one_line_exit_2(scene, capsys) -> None:
    assert main(_perceive(scene, "--perception", "badsut:Truck", "--json")) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1 and cap.out == ""
    assert "perception 'trucks' returned malformed output: obstacle 1: class 'truck' is not one of" in err
    assert "badsut:Truck" in err


def test_perceive_with_a_good_plugin(scene, capsys) -> None:
    assert main(_perceive(scene, "--perception", "badsut:Good", "--json", "--points")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["perception"] == "good" and doc["counts"]["pedestrian"] == 1
    assert len(doc["obstacles"][0]["point_indices"]) == 3


def test_perceive_full_disk_for_the_picture_is_one_line(scene, capsys, monkeypatch) -> None:
    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    out = scene / "bev.png"
    assert main(_perceive(scene, "--perception", "badsut:Good", "--json", "--out", str(out))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err and str(out) in err
    assert not out.exists() and not list(scene.glob(".bev.png.*"))


def test_perceive_full_disk_for_the_json_is_one_line(scene, capsys, monkeypatch) -> None:
    class FullDisk:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main(_perceive(scene, "--perception", "badsut:Good", "--json")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "lidarmt: error: cannot write to standard output: No space left on device; free some space or " \
                  "write elsewhere"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("fmt", [["--json"], []])
def test_perceive_into_dev_full_exits_2_without_a_traceback(scene, fmt) -> None:
    """The real thing: stdout on a full device, including Python's own flush at exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scene / "plugins"), *sys.path])}
    env.pop("LIDARMT_DEBUG", None)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "lidarmt", *_perceive(scene, "--perception", "badsut:Good",
                                                                             *fmt)],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "lidarmt: error: cannot write to standard output: No space left on device; free some space or write elsewhere"
    ]
