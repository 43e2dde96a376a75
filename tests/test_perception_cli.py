"""``lidarmt perceive`` on a tiny .npz recording with a GeoJSON map drawn in the sensor frame."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lidarmt.cli import main
from lidarmt.io.npzdir import write_npz_folder
from lidarmt.perception.apollo.network import build_network
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


def test_perceive_without_a_map_uses_road_labels(scene, tmp_path, capsys) -> None:
    from lidarmt.types import Labels

    xyz = np.concatenate([_square(5.0, 1.0, 1.5), _square(-4.0, -2.0, 1.0)])
    sem = np.full(len(xyz), 40, dtype=np.uint32)  # road
    sem[len(xyz) - 5 :] = 50  # building points: outside the ROI
    write_npz_folder(
        tmp_path / "labelled", [Frame(make_points(xyz, 50.0), labels=Labels(point_semantic=sem))]
    )
    args = ["perceive", str(tmp_path / "labelled"), "--grid", "64", "--set", "range=16", "--weights",
            str(scene / "w.pt"), "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["roi_points"] == len(xyz) - 5 and len(doc["obstacles"]) == 2
