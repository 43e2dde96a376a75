"""Simulated recordings (ROS1 bag + map + labels), the dataset mode, ensure_demo and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("open3d")

from lidarmt.cli import main  # noqa: E402
from lidarmt.io import open_recording  # noqa: E402
from lidarmt.io.npz import load_frame_npz  # noqa: E402
from lidarmt.lidar.roi import HDMapRoi, load_map  # noqa: E402
from lidarmt.lidar.sim.dataset import drive_plan, generate_dataset  # noqa: E402
from lidarmt.lidar.sim.errors import SimOutputError  # noqa: E402
from lidarmt.lidar.sim.record import (  # noqa: E402
    CAMERA_TOPIC,
    STEERING_TOPIC,
    ensure_demo,
    labels_path,
    load_labels,
    simulate_recording,
)

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    out = tmp_path_factory.mktemp("rec")
    s = simulate_recording(out / "drive.bag", out / "map", seed=3, frames=2, camera=True)
    return out, s


def test_bag_reads_like_apollo(recording) -> None:
    out, summary = recording
    bag = out / "drive.bag"
    labels = load_labels(bag)
    assert summary.labels == labels_path(bag) == out / "drive.labels.npz"
    assert len(labels) == 2
    hd = load_map(out / "map")
    roi = HDMapRoi(hd)
    with open_recording(bag, require_pose=True) as rec:
        assert rec.topic == "/apollo/sensor/velodyne64/compensator/PointCloud2"
        frames = list(rec)
        info = rec.describe()
    assert len(frames) == 2
    topics = {t.name if hasattr(t, "name") else t for t in (info.topics or [])}
    text = json.dumps(info.to_dict())
    assert CAMERA_TOPIC in text and STEERING_TOPIC in text and "/tf_static" in text, topics
    for f, lb in zip(frames, labels, strict=True):
        assert f.frame_id == "velodyne64"
        assert len(f.points) == len(lb.point_meta) == len(lb.point_instance)
        assert "ring" in f.points.dtype.names
        mask = roi.mask(f.pose)
        inside = np.zeros(len(f.points), bool)
        inside[mask.indices(f)] = True
        cars = lb.point_meta == 1
        road = np.isin(lb.point_semantic, (40, 60))
        assert inside[road].mean() > 0.9  # the map's road polygons cover the simulated road
        assert inside[np.isin(lb.point_semantic, (50, 70))].mean() < 0.05  # buildings, trees are outside
        if cars.sum() > 100:
            assert inside[cars].mean() > 0.5


def test_refuses_to_overwrite(recording) -> None:
    out, _ = recording
    with pytest.raises(SimOutputError, match="already exist"):
        simulate_recording(out / "drive.bag", out / "map", seed=3, frames=1, camera=False)


def test_recording_is_byte_identical(tmp_path) -> None:
    for d in ("a", "b"):
        simulate_recording(tmp_path / d / "x.bag", tmp_path / d / "map", seed=6, frames=1, camera=False)
    for name in ("x.bag", "x.labels.npz", "map/base_map.bin", "map/base_map.txt", "map/base_map.geojson"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_ensure_demo_builds_once(tmp_path) -> None:
    bag, mdir = ensure_demo(tmp_path / "demo.bag", tmp_path / "demo_map", seed=2, frames=2, camera=False)
    assert bag.is_file() and (mdir / "base_map.bin").is_file() and labels_path(bag).is_file()
    before = bag.stat().st_mtime_ns
    ensure_demo(bag, mdir, seed=2, frames=2, camera=False)
    assert bag.stat().st_mtime_ns == before


def test_dataset_is_deterministic(tmp_path) -> None:
    a = generate_dataset(tmp_path / "a", frames=3, seed=4, frames_per_drive=2, drives_per_town=2)
    generate_dataset(tmp_path / "b", frames=3, seed=4, frames_per_drive=2, drives_per_town=2)
    assert a.frames == 3 and a.drives == 2
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["000000.npz", "000001.npz", "000002.npz", "dataset.json", "maps"]
    # no time stamps or output paths in dataset.json, and the maps are written deterministically
    assert (tmp_path / "a" / "dataset.json").read_bytes() == (tmp_path / "b" / "dataset.json").read_bytes()
    maps = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a" / "maps").rglob("*") if p.is_file())
    assert maps and all((tmp_path / "a" / m).read_bytes() == (tmp_path / "b" / m).read_bytes() for m in maps)
    for n in names[:3]:  # identical arrays (the zip members' time stamps and the source path differ)
        fa, fb = load_frame_npz(tmp_path / "a" / n), load_frame_npz(tmp_path / "b" / n)
        assert fa.points.tobytes() == fb.points.tobytes() and fa.stamp == fb.stamp
        np.testing.assert_array_equal(fa.pose, fb.pose)
        for k in ("boxes", "point_instance", "point_meta", "point_semantic"):
            assert getattr(fa.labels, k).tobytes() == getattr(fb.labels, k).tobytes()
    f = load_frame_npz(tmp_path / "a" / "000002.npz")
    assert f.labels is not None and len(f.labels.point_meta) == len(f.points)
    assert {"ring", "time"} <= set(f.points.dtype.names) and f.pose is not None
    meta = json.loads((tmp_path / "a" / "dataset.json").read_text())
    assert [d["frames"] for d in meta["drives"]] == [[0, 1], [2, 2]]
    with pytest.raises(SimOutputError, match="not empty"):
        generate_dataset(tmp_path / "a", frames=1, seed=4)


def test_drive_plan_spreads_towns() -> None:
    plan = drive_plan(100, 1, frames_per_drive=20, drives_per_town=3, stride=2)
    assert sum(n for _, _, n in plan) == 100
    assert len({t for t, _, _ in plan}) == 2 and len({d for _, d, _ in plan}) == 5


def test_cli(tmp_path, capsys) -> None:
    assert main(["simulate", "--dataset", str(tmp_path / "ds"), "--frames", "1", "--seed", "9"]) == 0
    assert (tmp_path / "ds" / "000000.npz").is_file()
    assert main(["simulate", "--dataset", str(tmp_path / "ds"), "--frames", "1"]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "--overwrite" in err
    assert main(["simulate", "--frames", "1"]) == 2  # neither --out nor --dataset
    assert "either --out" in capsys.readouterr().err
