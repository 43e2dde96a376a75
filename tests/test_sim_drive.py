"""Simulated HDL-64E sweeps: sensor model, ground truth, determinism."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("open3d")

from lidarmt.lidar.sim.drive import Drive  # noqa: E402
from lidarmt.lidar.sim.lidar import KITTI_ELEVATIONS_DEG, Hdl64e, hdl64e_elevations  # noqa: E402
from lidarmt.lidar.sim.scene import build_scene  # noqa: E402
from lidarmt.lidar.sim.town import build_town  # noqa: E402
from lidarmt.types import BOX_DTYPE, MetaType  # noqa: E402


@pytest.fixture(scope="module")
def drive() -> Drive:
    town = build_town(21, size=(3, 3))
    scene = build_scene(town, 5, duration=0.6)
    return Drive(town, scene, seed=5)


@pytest.fixture(scope="module")
def frame(drive):
    return drive.frame(2)


def test_ray_table() -> None:
    nominal = hdl64e_elevations()
    assert len(nominal) == 64 and nominal.max() == pytest.approx(2.0) and nominal.min() == pytest.approx(-24.33)
    assert np.allclose(np.diff(nominal[32:]), 1 / 3, atol=1e-9) and np.allclose(np.diff(nominal[:32]), 0.5)
    assert np.all(np.diff(KITTI_ELEVATIONS_DEG) > 0) and len(KITTI_ELEVATIONS_DEG) == 64
    s = Hdl64e()
    d, ring, frac = s.ray_table()
    assert d.shape == (64 * 2083, 3) and s.rays_per_frame == len(d)
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-12)
    el = np.degrees(np.arcsin(d[:, 2]))
    np.testing.assert_allclose(el, s.elevations_deg[ring], atol=1e-9)
    assert frac.min() == 0 and frac.max() < 1
    az = np.arctan2(d[::64, 1], d[::64, 0])
    assert az[0] == pytest.approx(np.pi, abs=0.01)  # starts behind and turns clockwise
    assert np.all(np.diff(az[: len(az) // 2]) < 0)


def test_frame_fields(drive, frame) -> None:
    p = frame.points
    assert set(p.dtype.names) == {"x", "y", "z", "intensity", "ring", "time"}
    assert 80_000 < len(p) < 133_312
    r = np.sqrt(p["x"] ** 2 + p["y"] ** 2 + p["z"] ** 2)
    assert r.min() >= 0.9 and r.max() <= 120.0
    assert p["intensity"].min() >= 0 and p["intensity"].max() <= 255
    assert p["ring"].max() == 63
    assert frame.stamp - 0.1 <= p["time"].min() and p["time"].max() <= frame.stamp
    assert np.all(np.diff(p["time"]) >= 0)  # points in firing order
    # ground sits about the sensor height below the sensor
    ground = np.isin(frame.labels.point_semantic, (40, 60))
    assert np.median(p["z"][ground]) == pytest.approx(-drive.scene.ego.sensor_height, abs=0.1)
    # the pose carries world (UTM-like) coordinates and a rotation
    assert frame.pose.shape == (4, 4) and frame.pose[0, 3] > 500_000
    np.testing.assert_allclose(frame.pose[:3, :3] @ frame.pose[:3, :3].T, np.eye(3), atol=1e-12)


def test_labels_match_geometry(frame) -> None:
    lb = frame.labels
    p = frame.points
    assert lb.boxes.dtype == BOX_DTYPE
    assert len(lb.point_instance) == len(p) == len(lb.point_meta) == len(lb.point_semantic)
    ids = set(np.unique(lb.point_instance[lb.point_instance >= 0]).tolist())
    assert ids == set(lb.boxes["instance"].tolist())  # one box per object with >= 1 point
    assert set(np.unique(lb.point_meta).tolist()) <= {-1, 0, 1, 2, 3, 4}
    assert (lb.point_meta[lb.point_instance < 0] == -1).all()
    xyz = np.stack([p["x"], p["y"], p["z"]], axis=1).astype(np.float64)
    for b in lb.boxes:
        m = lb.point_instance == b["instance"]
        assert (lb.point_meta[m] == b["meta"]).all()
        c, s = np.cos(b["yaw"]), np.sin(b["yaw"])
        d = xyz[m] - [b["cx"], b["cy"], b["cz"]]
        u, v = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
        inside = (np.abs(u) <= b["length"] / 2 + 0.15) & (np.abs(v) <= b["width"] / 2 + 0.15) & (
            np.abs(d[:, 2]) <= b["height"] / 2 + 0.15)
        assert inside.mean() > 0.97, (b, inside.mean())
    near = np.hypot(lb.boxes["cx"], lb.boxes["cy"]) < 60
    metas = lb.boxes["meta"][near]
    assert (metas == MetaType.SMALLMOT).sum() >= 5
    assert (metas == MetaType.PEDESTRIAN).sum() >= 1


def test_deterministic_and_order_free(drive, frame) -> None:
    town = build_town(21, size=(3, 3))
    again = Drive(town, build_scene(town, 5, duration=0.6), seed=5)
    f = again.frame(2)  # straight to sweep 2, not after 0 and 1
    assert f.points.tobytes() == frame.points.tobytes()
    for name in ("point_instance", "point_meta", "point_semantic"):
        np.testing.assert_array_equal(getattr(f.labels, name), getattr(frame.labels, name))
    assert f.labels.boxes.tobytes() == frame.labels.boxes.tobytes()
    np.testing.assert_array_equal(f.pose, frame.pose)
    other = drive.frame(3)
    assert other.points.tobytes() != frame.points.tobytes()


def test_things_move(drive) -> None:
    a, b = drive.frame(0), drive.frame(4)
    assert np.linalg.norm(b.pose[:2, 3] - a.pose[:2, 3]) > 0.5 * 0.4 * drive.scene.ego.speed
    moving = [ag for ag in drive.scene.agents if ag.speed > 0]
    assert moving
    ag = moving[0]
    assert ag.pose(0.1) != ag.pose(0.5)


def test_camera_sees_sky_and_road(drive) -> None:
    from lidarmt.lidar.sim.camera import Camera
    from lidarmt.lidar.sim.objects import GROUND_RGB, Mat

    img = Camera(width=160, height=120, focal=130.0).render(drive, 1)
    assert img.shape == (120, 160, 3) and img.dtype == np.uint8
    top = img[0].astype(int)
    assert (top[:, 2] > top[:, 0]).mean() > 0.5  # mostly sky (blue over red) at the top, or trees
    bottom = img[-1, 60:100].astype(int)
    road = GROUND_RGB[Mat.ASPHALT].astype(int)
    # the road just ahead, lit by the sun: the asphalt colour scaled by the shading
    ratio = bottom.mean(axis=0) / road
    assert np.all((ratio > 0.4) & (ratio < 1.3)) or (bottom > 200).all(axis=1).any()  # or a lane marking


def test_moving_objects_sit_where_the_laser_passed_them(drive, frame) -> None:
    lb = frame.labels
    agents = {a.instance: a for a in drive.scene.agents if a.speed > 3.0}
    checked, shift = 0, 0.0
    for b in lb.boxes:
        a = agents.get(int(b["instance"]))
        m = lb.point_instance == b["instance"]
        if a is None or m.sum() < 20:
            continue
        t_scan = float(np.median(frame.points["time"][m])) - drive.stamp0
        centre = frame.pose @ np.array([b["cx"], b["cy"], b["cz"], 1.0])
        x, y, _ = a.pose(t_scan)
        xe, ye, _ = a.pose((2 + 1) / 10.0)  # where it is at the end of the sweep
        assert np.hypot(centre[0] - drive.town.origin[0] - x, centre[1] - drive.town.origin[1] - y) < 0.15
        shift = max(shift, float(np.hypot(xe - x, ye - y)))
        checked += 1
    assert checked >= 1
    assert shift > 0.2  # some were passed early in the sweep: not at their end-of-sweep place
