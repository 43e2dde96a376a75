"""A small analytic HDL-64E sweep: a street cast without open3d, for tests, examples and picture sheets.

The KITTI HDL-64E's 64 rings (:data:`lidarmt.lidar.sim.lidar.KITTI_ELEVATIONS_DEG`) x ``n_azimuth`` firings, 1.73 m
above a flat road; two building fronts along the street (y = +-14 m, 8 m tall, x in [-70, 70]); parked and
driving cars (4.2 x 1.8 x 1.5 m) and pedestrians (0.6 x 0.6 x 1.75 m) as boxes, labelled with their boxes and
per-point instance and meta type. Ranges beyond 100 m give no return. Deterministic in ``seed`` (the intensities'
and ranges' noise).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lidarmt.lidar.sensor import kitti_elevations_deg
from lidarmt.types import BOX_DTYPE, CameraLink, Frame, Labels, MetaType, Provenance, make_points

SENSOR_HEIGHT = 1.73
CAR = (4.2, 1.8, 1.5)
PEDESTRIAN = (0.6, 0.6, 1.75)
#: (cx, cy, yaw, size, meta) of the street's objects, sensor frame
DEFAULT_OBJECTS = (
    (12.0, -3.5, 0.0, CAR, MetaType.SMALLMOT),
    (-9.0, 3.5, np.pi, CAR, MetaType.SMALLMOT),
    (25.0, 3.0, 0.05, CAR, MetaType.SMALLMOT),
    (40.0, -9.5, 0.0, CAR, MetaType.SMALLMOT),
    (18.0, 8.0, 0.0, PEDESTRIAN, MetaType.PEDESTRIAN),
    (7.0, -10.5, 0.0, PEDESTRIAN, MetaType.PEDESTRIAN),
)
WALL_Y = 14.0
MAX_RANGE = 100.0


def _ray_box(d: np.ndarray, box) -> np.ndarray:
    """Distance along unit rays ``d`` (from the origin) to an oriented box (inf: missed)."""
    cx, cy, cz, lx, ly, lz, yaw = box
    c, s = np.cos(yaw), np.sin(yaw)
    o = np.array([-cx, -cy, -cz])
    ol = np.array([c * o[0] + s * o[1], -s * o[0] + c * o[1], o[2]])
    dl = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]], axis=1)
    half = np.array([lx, ly, lz]) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = (-half - ol) / dl
        t2 = (half - ol) / dl
    tmin = np.nanmax(np.minimum(t1, t2), axis=1)
    tmax = np.nanmin(np.maximum(t1, t2), axis=1)
    hit = (tmax >= tmin) & (tmax > 0)
    return np.where(hit, np.where(tmin > 0, tmin, np.inf), np.inf)


def synthetic_sweep(*, seed: int = 0, n_azimuth: int = 1024, objects=DEFAULT_OBJECTS, ring: bool = True,
                    walls: bool = True, sensor=None) -> Frame:
    """The street sweep (see the module's docstring), points ordered by firing (azimuth), then ring; ``sensor``
    (a profile or its name, :mod:`lidarmt.lidar.sensors`) casts that sensor's rings instead of the KITTI
    HDL-64E's."""
    rng = np.random.default_rng(seed)
    if sensor is None:
        el = np.radians(kitti_elevations_deg())
    else:
        from lidarmt.lidar.sensors import get_sensor

        el = np.radians(get_sensor(sensor).elevations())
    az = np.pi - 2 * np.pi * (np.arange(n_azimuth) + 0.5) / n_azimuth
    azg, elg = np.meshgrid(az, el, indexing="ij")
    d = np.stack([np.cos(elg) * np.cos(azg), np.cos(elg) * np.sin(azg), np.sin(elg)], axis=-1).reshape(-1, 3)
    rings = np.tile(np.arange(len(el), dtype=np.uint16), n_azimuth)
    t = np.full(len(d), np.inf)
    inst = np.full(len(d), -1, dtype=np.int32)
    meta = np.full(len(d), -1, dtype=np.int8)
    inten = np.zeros(len(d))
    with np.errstate(divide="ignore", invalid="ignore"):
        tg = np.where(d[:, 2] < 0, -SENSOR_HEIGHT / d[:, 2], np.inf)
    t, inten = np.where(tg < t, tg, t), np.where(tg < t, 40.0, inten)
    if walls:
        for wy in (WALL_Y, -WALL_Y):
            with np.errstate(divide="ignore", invalid="ignore"):
                tw = np.where(d[:, 1] * wy > 0, wy / d[:, 1], np.inf)
                hx, hz = tw * d[:, 0], tw * d[:, 2] + SENSOR_HEIGHT
            tw = np.where((np.abs(hx) <= 70) & (hz >= 0) & (hz <= 8), tw, np.inf)
            better = tw < t
            t, inten = np.where(better, tw, t), np.where(better, 90.0, inten)
            inst, meta = np.where(better, -1, inst), np.where(better, -1, meta)
    boxes = np.zeros(len(objects), dtype=BOX_DTYPE)
    for k, (cx, cy, yaw, (lx, ly, lz), m) in enumerate(objects):
        cz = -SENSOR_HEIGHT + lz / 2
        boxes[k] = (cx, cy, cz, lx, ly, lz, yaw, int(m), k)
        tb = _ray_box(d, (cx, cy, cz, lx, ly, lz, yaw))
        better = tb < t
        t = np.where(better, tb, t)
        inten = np.where(better, 25.0 if m != MetaType.PEDESTRIAN else 60.0, inten)
        inst = np.where(better, k, inst)
        meta = np.where(better, int(m), meta)
    ok = np.isfinite(t) & (t <= MAX_RANGE) & (t > 0.9)
    t = t + rng.normal(0, 0.01, len(t))
    xyz = d[ok] * t[ok, None]
    i = np.clip(inten[ok] + rng.normal(0, 4, np.count_nonzero(ok)), 0, 255).astype(np.float32)
    pts = make_points(xyz, i, ring=rings[ok] if ring else None)
    labels = Labels(boxes=boxes, point_instance=inst[ok].copy(), point_meta=meta[ok].copy())
    return Frame(points=pts, pose=np.eye(4), stamp=1.0e9, provenance=Provenance("synthetic", "synthetic", seed),
                 labels=labels)


#: camera <- LiDAR axes: camera x right, y down, z forward (KITTI's, OpenCV's) from LiDAR x forward, y left, z up
_CAM_FROM_LIDAR_AXES = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])


def front_camera(*, index: int = 0, stamp: float = 0.0, period_s: float | None = 0.1) -> CameraLink:
    """A KITTI-like front camera for a synthetic sweep: 0.27 m ahead of the LiDAR and 0.08 m below it, looking
    along +x, 1242 x 375 px with KITTI's focal length (721.5 px) and principal point; a 10 Hz stream unless
    ``period_s`` is None."""
    ext = np.eye(4)
    ext[:3, :3] = _CAM_FROM_LIDAR_AXES
    ext[:3, 3] = -_CAM_FROM_LIDAR_AXES @ np.array([0.27, 0.0, -0.08])
    k = np.array([[721.5, 0.0, 609.6, 0.0], [0.0, 721.5, 172.9, 0.0], [0.0, 0.0, 1.0, 0.0]])
    return CameraLink(ext, k, 1242, 375, index=index, stamp=stamp, period_s=period_s, source="synthetic front camera")


def with_front_camera(frame: Frame, *, period_s: float | None = 0.1) -> Frame:
    """``frame`` paired with :func:`front_camera` (the image of the frame's own index and stamp)."""
    return dataclasses.replace(frame, camera=front_camera(index=frame.index, stamp=frame.stamp, period_s=period_s))
