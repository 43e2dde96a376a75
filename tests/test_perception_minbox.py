"""MinBox: Apollo's own expected boxes for five real HDL-64E clusters, and the hull against qhull."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lidarmt.lidar.perception.apollo.minbox import build_box, build_boxes


def _clusters(folder: Path) -> tuple[list[np.ndarray], dict]:
    clusters = []
    for line in (folder / "clusters.txt").read_text().splitlines():
        if not line.strip():
            continue
        vals = line.split()
        n = int(vals[0])
        clusters.append(np.asarray(vals[1 : 1 + 4 * n], dtype=np.float32).reshape(n, 4))
    return clusters, json.loads((folder / "expected.json").read_text())


def test_apollo_min_box_conformance(shared_data: Path) -> None:
    folder = shared_data / "apollo" / "min_box"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    clusters, expected = _clusters(folder)
    tol = float(expected.get("tolerance", 1e-6))
    objects = expected["objects"]
    assert len(clusters) == len(objects) == 5
    # all clusters in one call, as the pipeline does
    offsets = np.r_[0, np.cumsum([len(c) for c in clusters])]
    boxes = build_boxes(np.concatenate(clusters)[:, :3], offsets)
    for cluster, exp, box in zip(clusters, objects, boxes, strict=True):
        assert len(cluster) == exp["points"]
        assert box.length == pytest.approx(exp["length"], abs=tol)
        assert box.width == pytest.approx(exp["width"], abs=tol)
        assert box.height == pytest.approx(exp["height"], abs=tol)
        np.testing.assert_allclose(box.direction, exp["direction"], atol=tol)
        assert box.length >= box.width
        assert np.linalg.norm(box.direction) == pytest.approx(1.0)
        # the polygon lies at min z; for >= 4 points the centre is at the box bottom
        assert np.all(box.polygon[:, 2] == cluster[:, 2].min())
        if len(cluster) >= 4:
            assert box.center[2] == pytest.approx(cluster[:, 2].min())


def _hull_set(poly: np.ndarray) -> set[tuple[float, float]]:
    return {(float(x), float(y)) for x, y in poly[:, :2]}


@pytest.mark.parametrize("seed", range(8))
def test_hull_is_qhulls_and_clockwise(seed: int) -> None:
    scipy_spatial = pytest.importorskip("scipy.spatial")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 200))
    xyz = np.c_[rng.normal(10, 2, (n, 2)), rng.uniform(-1, 1, n)].astype(np.float32)
    if seed % 2:
        xyz[:, :2] = np.round(xyz[:, :2], 1)  # duplicates and collinear boundary points
    box = build_box(xyz)
    q = scipy_spatial.ConvexHull(xyz[:, :2].astype(np.float64))
    assert _hull_set(box.polygon) == _hull_set(xyz[q.vertices].astype(np.float64))
    # clockwise: decreasing angle about the centroid, so negative signed area
    p = box.polygon
    area2 = np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1])
    assert area2 < 0
    # the box covers every point (up to rounding) and has the polygon's orientation
    d = box.direction[:2]
    nrm = np.array([-d[1], d[0]])
    rel = xyz[:, :2] - box.center[:2]
    assert np.all(np.abs(rel @ d) <= box.length / 2 + 1e-4)
    assert np.all(np.abs(rel @ nrm) <= box.width / 2 + 1e-4)


def test_fewer_than_four_points_and_degenerate_clusters() -> None:
    one = build_box(np.array([[5.0, 1.0, 0.2]], np.float32))
    assert one.length == pytest.approx(1e-3, rel=1e-3) and one.width == pytest.approx(1e-3, rel=1e-3)
    assert one.height == pytest.approx(1e-3, rel=1e-3)
    assert len(one.polygon) == 4
    line = np.c_[np.linspace(0, 4, 10), np.full(10, 3.0), np.zeros(10)].astype(np.float32)
    b = build_box(line)  # collinear: qhull fails in Apollo, the (unwidened) box corners stand in
    assert len(b.polygon) == 4
    assert b.length == pytest.approx(4.0, abs=1e-5) and b.width == pytest.approx(0.0, abs=1e-9)
    assert np.isfinite(b.center).all()
    np.testing.assert_allclose(np.abs(b.direction), [1, 0, 0], atol=1e-6)


def test_a_car_shaped_cluster_gets_its_own_heading() -> None:
    rng = np.random.default_rng(0)
    # an L-shaped scan of a 4.5 x 1.8 m car yawed by 30 degrees, 15 m ahead: the sensor sees two sides
    t = np.deg2rad(30)
    u = np.array([np.cos(t), np.sin(t)])
    v = np.array([-np.sin(t), np.cos(t)])
    side = np.outer(rng.uniform(-2.25, 2.25, 150), u) - 0.9 * v
    rear = -2.25 * u + np.outer(rng.uniform(-0.9, 0.9, 60), v)
    xy = np.concatenate([side, rear]) + [15.0, 3.0]
    xyz = np.c_[xy, rng.uniform(-1.5, 0.0, len(xy))].astype(np.float32)
    b = build_box(xyz)
    heading = np.arctan2(b.direction[1], b.direction[0])
    assert min(abs(heading - t), abs(abs(heading - t) - np.pi)) < np.deg2rad(3)
    assert b.length == pytest.approx(4.5, abs=0.15) and b.width == pytest.approx(1.8, abs=0.15)


def test_rejects_empty_clusters() -> None:
    with pytest.raises(ValueError):
        build_boxes(np.zeros((3, 3), np.float32), np.array([0, 0, 3]))
    assert build_boxes(np.zeros((0, 3), np.float32), np.array([0])) == []
