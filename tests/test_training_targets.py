"""Training targets: a hand-made frame, decoded through Cluster2D's centre rule."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.perception.apollo.augment import AugmentConfig, augment_frame, flip_y, rotate_z, warp_z
from lidarmt.lidar.perception.apollo.targets import build_targets, decode_centers, point_cells
from lidarmt.types import BOX_DTYPE, Frame, Labels, MetaType, make_points

GRID, R = 64, 6.0  # 0.1875 m cells, like Apollo's 640 grid over +-60 m


def _box_points(cx, cy, cz, length, width, height, yaw, n, rng):
    u = rng.uniform(-length / 2, length / 2, n)
    v = rng.uniform(-width / 2, width / 2, n)
    z = rng.uniform(cz - height / 2, cz + height / 2, n)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.c_[cx + c * u - s * v, cy + s * u + c * v, z]


def _frame(seed: int = 0) -> Frame:
    """A car ahead-left, a pedestrian behind-right, a pole (static unknown), ground everywhere."""
    rng = np.random.default_rng(seed)
    objs = [  # cx, cy, cz, l, w, h, yaw, meta, instance
        (3.0, 2.0, -0.9, 4.0, 1.8, 1.5, 0.3, MetaType.SMALLMOT, 7),
        (-2.5, -3.0, -0.8, 0.6, 0.6, 1.7, 0.0, MetaType.PEDESTRIAN, 3),
        (1.0, -4.0, 0.0, 0.3, 0.3, 3.4, 0.0, MetaType.UNKNOWN, 11),
    ]
    boxes = np.zeros(len(objs), dtype=BOX_DTYPE)
    xyz, inst, meta = [], [], []
    for i, (cx, cy, cz, length, w, h, yaw, m, k) in enumerate(objs):
        boxes[i] = (cx, cy, cz, length, w, h, yaw, int(m), k)
        p = _box_points(cx, cy, cz, length * 0.9, w * 0.9, h, yaw, 400, rng)
        xyz.append(p)
        inst.append(np.full(len(p), k))
        meta.append(np.full(len(p), int(m)))
    ground = np.c_[rng.uniform(-5.9, 5.9, 3000), rng.uniform(-5.9, 5.9, 3000), np.full(3000, -1.7)]
    xyz.append(ground)
    inst.append(np.full(len(ground), -1))
    meta.append(np.full(len(ground), -1))
    pts = make_points(np.concatenate(xyz), rng.uniform(0, 255, sum(len(a) for a in xyz)))
    labels = Labels(boxes, np.concatenate(inst).astype(np.int32), np.concatenate(meta).astype(np.int8))
    return Frame(points=pts, labels=labels)


def _cell_of(x: float, y: float) -> tuple[int, int]:
    scale = GRID / (2 * R)
    return int(np.floor((R - x) * scale)), int(np.floor((R - y) * scale))


def test_offsets_decode_to_the_object_centre_cell():
    frame = _frame()
    t = build_targets(frame, grid=GRID, range_=R)
    cr, cc = decode_centers(t.instance, range_=R)
    for i, b in enumerate(frame.labels.boxes):
        cells = np.argwhere(t.obj_id == i)
        assert len(cells) > 3, f"object {i} has no cells"
        want = _cell_of(b["cx"], b["cy"])
        for r, c in cells:
            assert (cr[r, c], cc[r, c]) == want


def test_offset_signs_follow_apollo_axes():
    frame = _frame()
    t = build_targets(frame, grid=GRID, range_=R)
    car = np.argwhere(t.obj_id == 0)
    # a cell of the car with larger x (smaller row) than the centre must point to a larger row: positive offset
    b = frame.labels.boxes[0]
    rc, ccol = _cell_of(b["cx"], b["cy"])
    front = [(r, c) for r, c in car if r < rc - 2]
    left = [(r, c) for r, c in car if c < ccol - 2]
    assert front and left
    assert all(t.instance[0, r, c] > 0 for r, c in front)
    assert all(t.instance[1, r, c] > 0 for r, c in left)


def test_class_height_and_background():
    frame = _frame()
    t = build_targets(frame, grid=GRID, range_=R)
    boxes = frame.labels.boxes
    for i, b in enumerate(boxes):
        m = t.obj_id == i
        assert np.all(t.cls[m] == b["meta"])
        np.testing.assert_allclose(t.height[m], b["cz"] + b["height"] / 2, atol=1e-5)
        np.testing.assert_allclose(t.heading[0][m], np.cos(2 * b["yaw"]), atol=1e-5)
    # the pole is an object of class UNKNOWN (0), not background
    assert np.any(t.cls == MetaType.UNKNOWN)
    # ground-only cells away from every object are background, and objectness implies non-empty
    assert not t.objectness[~t.nonempty].any()
    far = _cell_of(-5.0, 5.0)
    assert t.nonempty[far] and not t.objectness[far] and t.cls[far] == -1
    # object cells: exactly the non-empty cells that own an object
    assert np.array_equal(t.objectness, t.obj_id >= 0)


def test_nonempty_matches_feature_generator():
    from lidarmt.lidar.perception.apollo.features import compute_features

    frame = _frame()
    t = build_targets(frame, grid=GRID, range_=R)
    feats = compute_features(frame.points, grid=GRID, range=R)
    assert np.array_equal(t.nonempty, feats[7] > 0.5)


def test_instance_without_box_is_ignored_and_z_limits_apply():
    frame = _frame()
    lb = frame.labels
    boxes = lb.boxes[lb.boxes["instance"] != 3]  # the pedestrian loses its box
    t = build_targets(Frame(points=frame.points, labels=Labels(boxes, lb.point_instance, lb.point_meta)),
                      grid=GRID, range_=R)
    r, c = _cell_of(-2.5, -3.0)
    assert t.ignore[r, c] and not t.objectness[r, c]
    cells = point_cells(np.array([0.0, 0.0]), np.array([0.0, 0.0]), np.array([5.0, 4.9]), grid=GRID, range_=R)
    assert cells[0] == -1 and cells[1] >= 0


@pytest.mark.parametrize("angle", [0.7, -2.0])
def test_rotation_and_flip_keep_targets_consistent(angle):
    frame = _frame()
    for f in (rotate_z(frame, angle), flip_y(frame), augment_frame(frame, np.random.default_rng(1), AugmentConfig())):
        t = build_targets(f, grid=GRID, range_=R)
        cr, cc = decode_centers(t.instance, range_=R)
        for i, b in enumerate(f.labels.boxes):
            cells = np.argwhere(t.obj_id == i)
            assert len(cells) > 0
            want = _cell_of(b["cx"], b["cy"])
            hits = np.mean([(cr[r, c], cc[r, c]) == want for r, c in cells])
            assert hits == 1.0
    # the input frame is untouched
    again = _frame()
    assert np.array_equal(frame.points, again.points)
    assert np.array_equal(frame.labels.boxes, again.labels.boxes)


def test_rotation_moves_points_with_their_boxes():
    frame = _frame()
    rot = rotate_z(frame, 1.1)
    lb = rot.labels
    for b in lb.boxes:
        m = lb.point_instance == b["instance"]
        dx = rot.points["x"][m] - b["cx"]
        dy = rot.points["y"][m] - b["cy"]
        u = dx * np.cos(b["yaw"]) + dy * np.sin(b["yaw"])
        v = -dx * np.sin(b["yaw"]) + dy * np.cos(b["yaw"])
        assert np.all(np.abs(u) <= b["length"] / 2 + 1e-4) and np.all(np.abs(v) <= b["width"] / 2 + 1e-4)


def test_terrain_warp_moves_points_with_their_boxes_and_bends_the_ground():
    frame = _frame()
    w = warp_z(frame, 0.03, -0.02, 1 / 500, -1 / 800)
    lb = w.labels
    for b in lb.boxes:  # each object keeps its points inside its (raised) box: the shear is local
        m = lb.point_instance == b["instance"]
        assert np.all(np.abs(w.points["z"][m] - b["cz"]) <= b["height"] / 2 + 0.1)
    g = lb.point_instance < 0
    x, y = frame.points["x"][g].astype(float), frame.points["y"][g].astype(float)
    want = -1.7 + 0.03 * x - 0.02 * y + 0.5 * (x * x / 500 - y * y / 800)
    assert np.allclose(w.points["z"][g], want, atol=1e-5)
    assert np.array_equal(w.points["x"], frame.points["x"]) and np.array_equal(frame.points["z"][g], np.full(g.sum(), -1.7, np.float32))
    # a warped sample still decodes every object to its centre cell
    t = build_targets(w, grid=GRID, range_=R)
    assert all(len(np.argwhere(t.obj_id == i)) > 0 for i in range(len(lb.boxes)))


def test_perfect_heads_cluster_into_one_obstacle_per_object():
    """Feeding the targets as CNN outputs through the project's Cluster2D recovers every object's points."""
    cluster = pytest.importorskip("lidarmt.lidar.perception.apollo.cluster2d")
    frame = _frame()
    t = build_targets(frame, grid=GRID, range_=R)
    onehot = np.zeros((5, GRID, GRID), dtype=np.float32)
    r, c = np.nonzero(t.objectness)
    onehot[t.cls[r, c], r, c] = 1.0
    heads = {
        "category_score": t.objectness.astype(np.float32),
        "instance_pt": t.instance,
        "confidence_score": t.objectness.astype(np.float32),
        "class_score": onehot,
        "height_pt": t.height,
        "heading_pt": t.heading,
    }
    p = frame.points
    out = cluster.cluster2d(heads, p["x"], p["y"], p["z"], range=R)
    lb = frame.labels
    assert len(out.clusters) == len(lb.boxes)
    for cl in out.clusters:
        inst = lb.point_instance[cl.points]
        objs = inst[inst >= 0]
        assert len(np.unique(objs)) == 1  # one object per cluster
        k = int(objs[0])
        assert np.all(np.isin(np.flatnonzero(lb.point_instance == k), cl.points))  # all of its points
        box = lb.boxes[lb.boxes["instance"] == k][0]
        assert cl.meta_type == box["meta"]
