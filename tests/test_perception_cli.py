"""``lidarmt perceive`` on a tiny .npz recording with a GeoJSON map drawn in the sensor frame."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lidarmt.cli import main
from lidarmt.io.npzdir import write_npz_folder
from lidarmt.lidar.perception.apollo.network import build_network
from lidarmt.types import Frame, make_points


def _square(cx: float, cy: float, side: float, step: float = 0.25) -> np.ndarray:
    g = np.arange(-side / 2, side / 2 + 1e-9, step)
    xx, yy = np.meshgrid(g + cx, g + cy)
    return np.c_[xx.ravel(), yy.ravel(), np.zeros(xx.size)]


@pytest.fixture
def scene(tmp_path):
    xyz = np.concatenate([_square(5.0, 1.0, 1.5), _square(-4.0, -2.0, 1.0), _square(12.0, 9.0, 1.0)])
    write_npz_folder(tmp_path / "rec", [Frame(make_points(xyz, 50.0))])
    road = [[-10, -4], [10, -4], [10, 4], [-10, 4], [-10, -4]]
    doc = {
        "type": "FeatureCollection",
        "frame": "sensor",
        "features": [{"type": "Feature", "properties": {"kind": "road", "id": "r"},
                      "geometry": {"type": "Polygon", "coordinates": [road]}}],
    }  # fmt: skip
    (tmp_path / "map.geojson").write_text(json.dumps(doc))
    net = build_network(64, seed=0)
    with torch.no_grad():
        net.deconv0.weight.zero_()
        b = torch.zeros(12)
        b[0], b[3], b[11] = 10.0, 8.0, 10.0
        b[4:9] = -5.0
        b[4 + 4] = 5.0  # pedestrian
        net.deconv0.bias.copy_(b)
    torch.save(net.state_dict(), tmp_path / "w.pt")
    return tmp_path


def _args(d, *extra: str) -> list[str]:
    return ["perceive", str(d / "rec"), "--map", str(d / "map.geojson"), "--grid", "64", "--set", "range=16",
            "--weights", str(d / "w.pt"), *extra]  # fmt: skip


@pytest.mark.slow
def test_perceive_json_and_picture(scene, capsys) -> None:
    out = scene / "bev.png"
    assert main(_args(scene, "--json", "--out", str(out))) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["pedestrian"] == 2 and len(doc["obstacles"]) == 2
    assert doc["roi_points"] < doc["points"]
    assert {"features", "cnn", "cluster", "minbox"} <= set(doc["timings_ms"])
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_perceive_table(scene, capsys) -> None:
    assert main(_args(scene, "--mode", "fast")) == 0
    text = capsys.readouterr().out
    assert "pedestrian" in text and "head°" in text


def test_perceive_user_errors(scene, capsys) -> None:
    rc = main(["perceive", str(scene / "rec"), "--map", str(scene / "map.geojson"), "--grid", "64",
               "--weights", str(scene / "missing.pt")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "missing.pt" in err and "lidarmt train" in err and len(err.strip().splitlines()) == 1
    assert main(_args(scene, "--frame", "5")) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(_args(scene, "--set", "nokey=3")) == 2
    assert "unknown setting" in capsys.readouterr().err


def test_perceive_places_a_world_map_by_the_pose(scene, tmp_path, capsys) -> None:
    xyz = np.concatenate([_square(5.0, 1.0, 1.5), _square(-4.0, -2.0, 1.0)])
    pose = np.eye(4)
    pose[:3, 3] = [500_000.0, 4_000_000.0, 10.0]
    write_npz_folder(tmp_path / "posed", [Frame(make_points(xyz, 50.0), pose=pose)])
    write_npz_folder(tmp_path / "unposed", [Frame(make_points(xyz, 50.0))])
    road = [[500_000 + x, 4_000_000 + y] for x, y in [[-10, -4], [10, -4], [10, 4], [-10, 4], [-10, -4]]]
    doc = {"type": "FeatureCollection", "frame": "world",
           "features": [{"type": "Feature", "properties": {"kind": "road", "id": "r"},
                         "geometry": {"type": "Polygon", "coordinates": [road]}}]}  # fmt: skip
    (tmp_path / "world.geojson").write_text(json.dumps(doc))
    args = ["--map", str(tmp_path / "world.geojson"), "--grid", "64", "--set", "range=16",
            "--weights", str(scene / "w.pt"), "--json"]  # fmt: skip
    assert main(["perceive", str(tmp_path / "posed"), *args]) == 0
    doc_out = json.loads(capsys.readouterr().out)
    assert len(doc_out["obstacles"]) == 2 and doc_out["roi_points"] == len(xyz)
    assert main(["perceive", str(tmp_path / "unposed"), *args]) == 2
    err = capsys.readouterr().err
    assert "no pose" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_perceive_without_a_map_uses_the_label_area(scene, tmp_path, capsys) -> None:
    """The label ROI is the area the ground labels cover: the car standing on the road is in it (issue 11: it
    used to be the labelled ground points only, so obstacles were built from ground and never from the car)."""
    from lidarmt.types import Labels

    road = _square(5.0, 0.0, 8.0)
    road = road[(np.abs(road[:, 0] - 5.0) > 1.0) | (np.abs(road[:, 1]) > 1.0)]  # the car hides the road under it
    car = _square(5.0, 0.0, 1.5) + [0.0, 0.0, 0.8]
    house = _square(-8.0, -10.0, 1.0) + [0.0, 0.0, 2.0]
    xyz = np.concatenate([road, car, house])
    sem = np.r_[np.full(len(road), 40), np.full(len(car), 10), np.full(len(house), 50)].astype(np.uint32)
    write_npz_folder(
        tmp_path / "labelled", [Frame(make_points(xyz, 50.0), labels=Labels(point_semantic=sem))]
    )
    args = ["perceive", str(tmp_path / "labelled"), "--grid", "64", "--set", "range=16", "--weights",
            str(scene / "w.pt"), "--json", "--points"]  # fmt: skip
    for extra in ([], ["--roi", "labels"], ["--map", "labels"]):
        assert main([*args, *extra]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["roi_points"] == len(road) + len(car)  # road and car; not the house
        in_obstacles = np.concatenate([np.asarray(o["point_indices"]) for o in doc["obstacles"]])
        car_idx = np.arange(len(road), len(road) + len(car))
        assert np.isin(car_idx, in_obstacles).all()
        assert not np.isin(np.arange(len(road) + len(car), len(xyz)), in_obstacles).any()


def test_perceive_reports_cold_and_warm_timings(scene, capsys) -> None:
    assert main(_args(scene, "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timings"].startswith("warm") and doc["cold_ms"] > 0 and doc["timings_ms"]["total"] > 0
    assert main(_args(scene, "--json", "--cold")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timings"].startswith("cold") and doc["cold_ms"] == doc["timings_ms"]["total"]
    assert main(_args(scene)) == 0
    assert "warm:" in capsys.readouterr().out


def test_perceive_refuses_labels_without_labels(scene, capsys) -> None:
    assert main(["perceive", str(scene / "rec"), "--roi", "labels", "--grid", "64", "--weights",
                 str(scene / "w.pt")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "no per-point ground labels" in err and len(err.strip().splitlines()) == 1
