"""Findings as MCAP files with Foxglove's schemas, to open where perception engineers look (Foxglove, any MCAP tool).

Written with the maintained libraries (``mcap``, ``mcap-protobuf-support``, ``foxglove-schemas-protobuf``; all
MIT): no hand-written container format. Every message is a ``foxglove.*`` protobuf message, so Foxglove draws
it without a converter; each file comes with a layout (``foxglove-layout.json`` beside it, shipped in
``lidarmt/engine/foxglove/``) that opens the panels below.

* :func:`write_lidar_bundle_mcap` — one MR1 violation (``bundle.mcap`` in a LiDAR bug bundle): the source and
  the follow-up clouds (:data:`TOPIC_SOURCE_POINTS`, :data:`TOPIC_FOLLOW_POINTS`, ``foxglove.PointCloud``), the
  added points and the minimal subset of them on their own topics, the obstacles of both frames as
  ``foxglove.SceneUpdate`` boxes coloured by class (Apollo's viewer colours) with the source obstacles lost in
  t′ drawn red and labelled with what happened to them, the ROI as polygons (``LinePrimitive`` loops) and the
  sensor pose (world ← sensor) as a ``foxglove.FrameTransform`` on ``/tf``. Everything is in the sensor frame
  (``frame.frame_id``) at the source frame's stamp, so both 3-D panels of the layout show one instant.
  A LiDAR-transformation bundle (:mod:`lidarmt.lidar.bundle`) is written by the same function: the points its
  transformation added, those its minimal edits touch, and the boxes of the objects it inserted or removed
  (:data:`TOPIC_CHANGE_BOXES`).
* :func:`write_camera_bundle_mcap` — one camera violation: the seed and the transformed image
  (``foxglove.CompressedImage``, PNG) with ``foxglove.ImageAnnotations`` (label, θ(i), θ(τ(i)) as steering
  arrows and text).
* :class:`RecordingMcapWriter` — any recording with perception output (``lidarmt export``): per frame the
  cloud, the obstacles, the ROI and the pose; each frame's SceneUpdate deletes the previous frame's entities it
  does not redraw, so playback shows no ghost boxes.

The files are deterministic (log times come from the data, not the clock), so a bundle written twice has the
same checksums. Reading back: :func:`summarize` (topics, schemas, message counts), :func:`describe_mcap` (what
``lidarmt info`` prints), :func:`visible_entities` (what a player shows after each SceneUpdate),
:func:`read_messages`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._atomic import atomic_path, atomic_write_text
from lidarmt._paths import open_readable
from lidarmt.errors import require
from lidarmt.types import Frame, Obstacle, ObstacleClass

#: Topics of a LiDAR bundle's MCAP.
TOPIC_SOURCE_POINTS = "/lidarmt/source/points"
TOPIC_FOLLOW_POINTS = "/lidarmt/followup/points"
TOPIC_ADDED_POINTS = "/lidarmt/added/points"
TOPIC_MINIMAL_POINTS = "/lidarmt/minimal/points"
TOPIC_SOURCE_OBSTACLES = "/lidarmt/source/obstacles"
TOPIC_FOLLOW_OBSTACLES = "/lidarmt/followup/obstacles"
TOPIC_ROI = "/lidarmt/lidar/roi"
#: Boxes of the objects a LiDAR transformation put in or took out (``LidarChange.inserted``/``removed``).
TOPIC_CHANGE_BOXES = "/lidarmt/change/boxes"
TOPIC_TF = "/tf"
#: Topics of a camera bundle's MCAP.
TOPIC_SEED_IMAGE = "/lidarmt/camera/seed"
TOPIC_TRANSFORMED_IMAGE = "/lidarmt/camera/transformed"
TOPIC_SEED_ANNOTATIONS = "/lidarmt/camera/seed/annotations"
TOPIC_TRANSFORMED_ANNOTATIONS = "/lidarmt/camera/transformed/annotations"
#: Topics of ``lidarmt export``.
TOPIC_POINTS = "/lidarmt/points"
TOPIC_OBSTACLES = "/lidarmt/obstacles"

WORLD_FRAME = "world"
BUNDLE_MCAP = "bundle.mcap"
LAYOUT_NAME = "foxglove-layout.json"
#: the largest MCAP file read back (a bundle's holds a few frames; a recording's export, a few thousand)
MAX_MCAP_BYTES = 16 << 30
#: The layouts shipped in the package (lidarmt/engine/foxglove/).
LAYOUTS = {"lidar-bundle": "lidar-bundle.json", "camera-bundle": "camera-bundle.json",
           "recording": "recording.json"}

#: Apollo's offline-viewer colours per class (as lidarmt.lidar.bev), RGBA 0..1; lost obstacles are red.
CLASS_RGBA: dict[ObstacleClass, tuple[float, float, float, float]] = {
    ObstacleClass.CAR: (0.0, 0.69, 0.0, 0.35),
    ObstacleClass.PEDESTRIAN: (1.0, 0.37, 0.64, 0.45),
    ObstacleClass.CYCLIST: (0.12, 0.31, 1.0, 0.45),
    ObstacleClass.UNKNOWN: (0.6, 0.2, 0.8, 0.35),
}
LOST_RGBA = (1.0, 0.1, 0.1, 0.75)
INSERTED_RGBA = (1.0, 0.5, 0.05, 0.35)
REMOVED_RGBA = (0.55, 0.55, 0.55, 0.35)
ROI_RGBA = (0.16, 0.5, 0.83, 1.0)


def _fox():
    """The protobuf message classes (imported lazily: ``lidarmt --help`` stays fast)."""
    require("foxglove_schemas_protobuf", purpose="MCAP files with Foxglove's schemas")
    from foxglove_schemas_protobuf import (
        Color_pb2,
        CompressedImage_pb2,
        CubePrimitive_pb2,
        FrameTransform_pb2,
        ImageAnnotations_pb2,
        KeyValuePair_pb2,
        LinePrimitive_pb2,
        PackedElementField_pb2,
        Point2_pb2,
        Point3_pb2,
        PointCloud_pb2,
        PointsAnnotation_pb2,
        Pose_pb2,
        Quaternion_pb2,
        SceneEntity_pb2,
        SceneEntityDeletion_pb2,
        SceneUpdate_pb2,
        TextAnnotation_pb2,
        TextPrimitive_pb2,
        Vector3_pb2,
    )

    class F:
        Color = Color_pb2.Color
        CompressedImage = CompressedImage_pb2.CompressedImage
        CubePrimitive = CubePrimitive_pb2.CubePrimitive
        FrameTransform = FrameTransform_pb2.FrameTransform
        ImageAnnotations = ImageAnnotations_pb2.ImageAnnotations
        KeyValuePair = KeyValuePair_pb2.KeyValuePair
        LinePrimitive = LinePrimitive_pb2.LinePrimitive
        PackedElementField = PackedElementField_pb2.PackedElementField
        Point2 = Point2_pb2.Point2
        Point3 = Point3_pb2.Point3
        PointCloud = PointCloud_pb2.PointCloud
        PointsAnnotation = PointsAnnotation_pb2.PointsAnnotation
        Pose = Pose_pb2.Pose
        Quaternion = Quaternion_pb2.Quaternion
        SceneEntity = SceneEntity_pb2.SceneEntity
        SceneEntityDeletion = SceneEntityDeletion_pb2.SceneEntityDeletion
        SceneUpdate = SceneUpdate_pb2.SceneUpdate
        TextAnnotation = TextAnnotation_pb2.TextAnnotation
        TextPrimitive = TextPrimitive_pb2.TextPrimitive
        Vector3 = Vector3_pb2.Vector3

    return F


class _Writer:
    """An MCAP file of protobuf messages, written atomically (the protobuf writer of ``mcap-protobuf-support``,
    zstd chunks, CRCs); the library string is fixed so that the same messages give the same bytes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        require("mcap_protobuf", purpose="MCAP files")
        self.path = Path(path)
        self._ctx = atomic_path(self.path)
        self._fh = None
        self._w = None

    def __enter__(self) -> _Writer:
        from mcap_protobuf.writer import Writer

        tmp = self._ctx.__enter__()
        try:
            self._fh = open(tmp, "wb")
            self._w = Writer(self._fh)
        except BaseException:
            self._ctx.__exit__(None, None, None)
            raise
        return self

    def write(self, topic: str, msg: Any, t_ns: int) -> None:
        self._w.write_message(topic, msg, log_time=int(t_ns), publish_time=int(t_ns))

    def metadata(self, name: str, data: Mapping[str, str]) -> None:
        self._w.add_metadata(name, {str(k): str(v) for k, v in data.items()})

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._w.finish()
            self._fh.close()
        finally:
            self._ctx.__exit__(exc_type, exc, tb)


# ----------------------------------------------------------------------------------------------- helpers


def stamp_ns(stamp: float) -> int:
    """A frame's stamp (seconds) as MCAP nanoseconds; 0 for a missing or negative one."""
    return int(round(stamp * 1e9)) if stamp and math.isfinite(stamp) and stamp > 0 else 0


def _ts(msg_field: Any, t_ns: int) -> None:
    msg_field.seconds, msg_field.nanos = divmod(int(t_ns), 1_000_000_000)


def _color(F, rgba: Sequence[float]):
    return F.Color(r=float(rgba[0]), g=float(rgba[1]), b=float(rgba[2]), a=float(rgba[3]))


def _yaw_quat(F, yaw: float):
    return F.Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2.0), w=math.cos(yaw / 2.0))


def point_cloud(F, xyz: np.ndarray, intensity: np.ndarray | None, *, frame_id: str, t_ns: int):
    """A ``foxglove.PointCloud`` of float32 x, y, z, intensity (16 bytes a point)."""
    xyz = np.asarray(xyz, dtype=np.float32).reshape(-1, 3)
    packed = np.empty((len(xyz), 4), dtype="<f4")
    packed[:, :3] = xyz
    packed[:, 3] = 0.0 if intensity is None else np.asarray(intensity, dtype=np.float32)
    msg = F.PointCloud(frame_id=frame_id, point_stride=16, data=packed.tobytes())
    _ts(msg.timestamp, t_ns)
    msg.pose.orientation.w = 1.0
    f32 = F.PackedElementField.FLOAT32
    msg.fields.extend(F.PackedElementField(name=n, offset=4 * i, type=f32)
                      for i, n in enumerate(("x", "y", "z", "intensity")))
    return msg


def frame_cloud(F, frame: Frame, *, t_ns: int, start: int = 0, stop: int | None = None,
                select: np.ndarray | None = None):
    """``frame``'s points (``[start:stop]``, or the indices ``select``) as a PointCloud in its own frame."""
    pts = frame.points[start:stop] if select is None else frame.points[np.asarray(select, dtype=np.int64)]
    xyz = np.c_[pts["x"], pts["y"], pts["z"]]
    inten = pts["intensity"] if "intensity" in (pts.dtype.names or ()) else None
    return point_cloud(F, xyz, inten, frame_id=frame.frame_id, t_ns=t_ns)


def frame_transform(F, frame: Frame, *, t_ns: int):
    """The sensor pose (world ← sensor) as a FrameTransform ``world`` → ``frame.frame_id`` (identity when the
    frame has no pose)."""
    from lidarmt.types import matrix_to_quat

    pose = frame.pose if frame.pose is not None else np.eye(4)
    pose = np.asarray(pose, dtype=np.float64)
    qx, qy, qz, qw = matrix_to_quat(pose[:3, :3])
    msg = F.FrameTransform(parent_frame_id=WORLD_FRAME, child_frame_id=frame.frame_id)
    _ts(msg.timestamp, t_ns)
    msg.translation.x, msg.translation.y, msg.translation.z = (float(v) for v in pose[:3, 3])
    msg.rotation.x, msg.rotation.y, msg.rotation.z, msg.rotation.w = float(qx), float(qy), float(qz), float(qw)
    return msg


def obstacle_entity(F, o: Obstacle, *, ident: str, frame_id: str, t_ns: int, label: str,
                    lost: str | None = None):
    """One obstacle as a SceneEntity: its box (MinBox: bottom-face centre, length along ``direction``) in its
    class colour, its hull as a loop, a text label; a lost one in red with what happened to it."""
    rgba = LOST_RGBA if lost else CLASS_RGBA.get(o.cls, CLASS_RGBA[ObstacleClass.UNKNOWN])
    e = F.SceneEntity(frame_id=frame_id, id=ident, frame_locked=True)
    _ts(e.timestamp, t_ns)
    cx, cy, cz = (float(v) for v in o.center[:3])
    h = max(float(o.height), 0.05)
    cube = F.CubePrimitive()
    cube.pose.position.x, cube.pose.position.y, cube.pose.position.z = cx, cy, cz + h / 2.0
    cube.pose.orientation.CopyFrom(_yaw_quat(F, o.heading))
    cube.size.x, cube.size.y, cube.size.z = max(float(o.length), 0.05), max(float(o.width), 0.05), h
    cube.color.CopyFrom(_color(F, rgba))
    e.cubes.append(cube)
    poly = np.asarray(o.polygon, dtype=np.float64)
    if len(poly) >= 3:
        line = F.LinePrimitive(type=F.LinePrimitive.LINE_LOOP, thickness=4.0 if lost else 2.0, scale_invariant=True)
        line.pose.orientation.w = 1.0
        line.points.extend(F.Point3(x=float(p[0]), y=float(p[1]), z=float(p[2]) if len(p) > 2 else cz)
                           for p in poly)
        line.color.CopyFrom(_color(F, (*rgba[:3], 1.0)))
        e.lines.append(line)
    text = F.TextPrimitive(billboard=True, font_size=14.0 if lost else 11.0, scale_invariant=True, text=label)
    text.pose.position.x, text.pose.position.y, text.pose.position.z = cx, cy, cz + h + 0.4
    text.pose.orientation.w = 1.0
    text.color.CopyFrom(_color(F, (1.0, 0.25, 0.25, 1.0) if lost else (1.0, 1.0, 1.0, 0.9)))
    e.texts.append(text)
    meta = {"class": o.cls.value, "score": f"{float(o.score):.3f}", "points": str(o.num_points),
            "size_m": f"{o.length:.2f} x {o.width:.2f} x {o.height:.2f}"}
    if lost:
        meta["lost"] = lost
    e.metadata.extend(F.KeyValuePair(key=k, value=v) for k, v in meta.items())
    return e


def obstacles_update(F, obstacles: Sequence[Obstacle], *, prefix: str, frame_id: str, t_ns: int,
                     lost: Mapping[int, str] | None = None, names: Sequence[str] | None = None):
    """A SceneUpdate holding every obstacle (ids ``<prefix>/<index>``); ``lost`` maps an index to what
    happened to it (drawn red); ``names`` the obstacles' names in the labels (default ``#index``; a follow-up's
    are its identities across source and follow-up, :func:`lidarmt.lidar.mr1.oracle.follow_names`)."""
    lost = lost or {}
    upd = F.SceneUpdate()
    for i, o in enumerate(obstacles):
        what = lost.get(i)
        name = names[i] if names is not None and i < len(names) else f"#{i}"
        label = f"LOST {name} {o.cls.value}: {what}" if what else f"{name} {o.cls.value} {float(o.score):.2f}"
        upd.entities.append(obstacle_entity(F, o, ident=f"{prefix}/{i}", frame_id=frame_id, t_ns=t_ns,
                                            label=label, lost=what))
    return upd


def boxes_update(F, boxes: np.ndarray, *, prefix: str, label: str, rgba: Sequence[float], frame_id: str,
                 t_ns: int, upd: Any = None):
    """Boxes (:data:`lidarmt.types.BOX_DTYPE`: centre, size, yaw) as SceneEntities ``<prefix>/<index>`` of one
    colour, labelled ``label`` (added to ``upd`` when given)."""
    upd = F.SceneUpdate() if upd is None else upd
    for i, b in enumerate(np.asarray(boxes).reshape(-1)):
        e = F.SceneEntity(frame_id=frame_id, id=f"{prefix}/{i}", frame_locked=True)
        _ts(e.timestamp, t_ns)
        cube = F.CubePrimitive()
        cube.pose.position.x, cube.pose.position.y, cube.pose.position.z = (float(b["cx"]), float(b["cy"]),
                                                                            float(b["cz"]))
        cube.pose.orientation.CopyFrom(_yaw_quat(F, float(b["yaw"])))
        cube.size.x, cube.size.y, cube.size.z = (max(float(b[k]), 0.05) for k in ("length", "width", "height"))
        cube.color.CopyFrom(_color(F, rgba))
        e.cubes.append(cube)
        text = F.TextPrimitive(billboard=True, font_size=12.0, scale_invariant=True, text=f"{label} #{i}")
        text.pose.position.x, text.pose.position.y = float(b["cx"]), float(b["cy"])
        text.pose.position.z = float(b["cz"]) + float(b["height"]) / 2.0 + 0.4
        text.pose.orientation.w = 1.0
        text.color.CopyFrom(_color(F, (*rgba[:3], 1.0)))
        e.texts.append(text)
        e.metadata.append(F.KeyValuePair(key="change", value=label))
        upd.entities.append(e)
    return upd


def roi_polygons(roi: Any, frame: Frame | None = None, *, max_polygons: int = 400) -> list[np.ndarray]:
    """The ROI's outline in the sensor frame as (K, 2) polygons: an HD-map ROI's own polygons (kept in the
    local frame, world axes at the sensor, so rotated back), else the outline of its bitmap (``grid()``);
    [] when the ROI has neither (a point-label ROI)."""
    if roi is None or getattr(roi, "empty", False):
        return []
    rot = np.asarray(getattr(roi, "rotation", np.eye(3)), dtype=np.float64)[:2, :2]
    polys = getattr(roi, "polygons", None)
    out: list[np.ndarray] = []
    if isinstance(polys, list | tuple) and polys:
        for p in polys[:max_polygons]:
            p = np.asarray(p, dtype=np.float64)
            if p.ndim == 2 and len(p) >= 3 and np.isfinite(p[:, :2]).all():
                out.append(p[:, :2] @ rot)  # sensor = R^T local, row-wise: local @ R
        return out
    grid_of = getattr(roi, "grid", None)
    if grid_of is None:
        return []
    try:
        import cv2

        grid = np.asarray(grid_of(), dtype=np.uint8)
        rng, cell = float(roi.range), float(roi.cell)
    except (AttributeError, TypeError, ValueError, ImportError):
        return []
    contours, _ = cv2.findContours(grid, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    for c in sorted(contours, key=len, reverse=True)[:max_polygons]:
        c = cv2.approxPolyDP(c, 1.0, True).reshape(-1, 2).astype(np.float64)
        if len(c) < 3:
            continue
        local = np.c_[-rng + (c[:, 1] + 0.5) * cell, -rng + (c[:, 0] + 0.5) * cell]  # (row=ix, col=iy)
        out.append(local @ rot)
    return out


def roi_update(F, roi: Any, frame: Frame, *, t_ns: int, roi_indices: np.ndarray | None = None):
    """The ROI's polygons as one SceneEntity of LINE_LOOPs, drawn at the ground height (the 5th percentile of
    the ROI points' z), or None when the ROI has no outline to draw."""
    polys = roi_polygons(roi, frame)
    if not polys:
        return None
    z = 0.0
    if roi_indices is not None and len(roi_indices):
        zs = np.asarray(frame.points["z"][np.asarray(roi_indices, dtype=np.int64)], dtype=np.float64)
        zs = zs[np.isfinite(zs)]
        if len(zs):
            z = float(np.percentile(zs, 5))
    e = F.SceneEntity(frame_id=frame.frame_id, id="roi", frame_locked=True)
    _ts(e.timestamp, t_ns)
    for p in polys:
        line = F.LinePrimitive(type=F.LinePrimitive.LINE_LOOP, thickness=2.0, scale_invariant=True)
        line.pose.orientation.w = 1.0
        line.points.extend(F.Point3(x=float(x), y=float(y), z=z) for x, y in p)
        line.color.CopyFrom(_color(F, ROI_RGBA))
        e.lines.append(line)
    e.metadata.append(F.KeyValuePair(key="polygons", value=str(len(polys))))
    upd = F.SceneUpdate()
    upd.entities.append(e)
    return upd


def layout_text(kind: str) -> str:
    """The shipped Foxglove layout ``kind`` (:data:`LAYOUTS`) as JSON text."""
    return resources.files("lidarmt.engine").joinpath("foxglove", LAYOUTS[kind]).read_text(encoding="utf-8")


def write_layout(path: str | os.PathLike[str], kind: str, *, frame_id: str | None = None,
                 topics: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """Write the shipped layout ``kind`` to ``path`` (atomically); its 3-D panels follow ``frame_id`` (the
    sensor frame of the data) when given; ``topics`` (panel id -> topic -> settings) shows more topics."""
    doc = json.loads(layout_text(kind))
    if frame_id:
        for panel, cfg in doc["configById"].items():
            if panel.startswith("3D!"):
                cfg["followTf"] = frame_id
    for panel, more in (topics or {}).items():
        doc["configById"][panel].setdefault("topics", {}).update({k: dict(v) for k, v in more.items()})
    atomic_write_text(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return Path(path)


# ----------------------------------------------------------------------------------------------- writers


def write_lidar_bundle_mcap(path: str | os.PathLike[str], *, frame: Frame, follow_frame: Frame,
                            source: Sequence[Obstacle], follow: Sequence[Obstacle], verdict: Any,
                            minimal: np.ndarray | None, roi: Any = None, roi_indices: np.ndarray | None = None,
                            info: Mapping[str, Any] | None = None, lost: Mapping[int, str] | None = None,
                            added: np.ndarray | None = None, minimal_xyzi: np.ndarray | None = None,
                            inserted: np.ndarray | None = None, removed: np.ndarray | None = None,
                            follow_names: Sequence[str] | None = None) -> Path:
    """Write one MR1 violation as MCAP (see the module's docstring). ``follow_frame`` holds the source points
    then the added ones; ``minimal`` are indices among the added points (None: no minimal subset);
    ``verdict.missing`` names the lost source obstacles; ``info`` (bundle.json) goes in as metadata.

    A LiDAR-transformation bundle (:mod:`lidarmt.lidar.bundle`) passes instead ``lost`` (source index -> what
    happened to it; ``verdict`` None), ``added`` (the follow-up's indices of its added points), ``minimal_xyzi``
    ((N, 4) x, y, z, intensity of the points its minimal edits touch) and the ``inserted``/``removed`` boxes
    (:data:`lidarmt.types.BOX_DTYPE`), drawn on :data:`TOPIC_CHANGE_BOXES`. ``follow_names`` names the follow-up
    obstacles by their identity across source and follow-up (``#i`` when matched to source obstacle i)."""
    F = _fox()
    t = stamp_ns(frame.stamp)
    base = len(frame)
    if lost is None:
        lost = {int(m.source): f"{m.kind}" + (f" as {m.to_cls.value}" if getattr(m, "to_cls", None) else "")
                + (f" into #{m.partner}" if m.kind == "merged" and getattr(m, "partner", None) is not None else "")
                + (f" ({m.what()})" if m.what() else "") for m in getattr(verdict, "missing", [])}
    with _Writer(path) as w:
        w.write(TOPIC_TF, frame_transform(F, frame, t_ns=t), t)
        w.write(TOPIC_SOURCE_POINTS, frame_cloud(F, frame, t_ns=t), t)
        w.write(TOPIC_FOLLOW_POINTS, frame_cloud(F, follow_frame, t_ns=t), t)
        w.write(TOPIC_ADDED_POINTS, frame_cloud(F, follow_frame, t_ns=t, start=base) if added is None
                else frame_cloud(F, follow_frame, t_ns=t, select=added), t)
        if minimal_xyzi is not None:
            mx = np.asarray(minimal_xyzi, dtype=np.float64).reshape(-1, 4)
            w.write(TOPIC_MINIMAL_POINTS, point_cloud(F, mx[:, :3], mx[:, 3], frame_id=follow_frame.frame_id,
                                                      t_ns=t), t)
        else:
            sel = np.zeros(0, np.int64) if minimal is None else base + np.asarray(minimal, dtype=np.int64)
            w.write(TOPIC_MINIMAL_POINTS, frame_cloud(F, follow_frame, t_ns=t, select=sel), t)
        w.write(TOPIC_SOURCE_OBSTACLES, obstacles_update(F, source, prefix="source", frame_id=frame.frame_id,
                                                         t_ns=t, lost=lost), t)
        w.write(TOPIC_FOLLOW_OBSTACLES, obstacles_update(F, follow, prefix="followup",
                                                         frame_id=follow_frame.frame_id, t_ns=t,
                                                         names=follow_names), t)
        if inserted is not None or removed is not None:
            upd = F.SceneUpdate()
            for boxes, prefix, rgba in ((inserted, "inserted", INSERTED_RGBA), (removed, "removed", REMOVED_RGBA)):
                if boxes is not None:
                    boxes_update(F, boxes, prefix=prefix, label=prefix, rgba=rgba, frame_id=follow_frame.frame_id,
                                 t_ns=t, upd=upd)
            w.write(TOPIC_CHANGE_BOXES, upd, t)
        upd = roi_update(F, roi, frame, t_ns=t, roi_indices=roi_indices)
        if upd is not None:
            w.write(TOPIC_ROI, upd, t)
        if info:
            w.metadata("lidarmt", _flat_meta(info))
    return Path(path)


def write_camera_bundle_mcap(path: str | os.PathLike[str], *, seed: np.ndarray, transformed: np.ndarray,
                             label: float | None, pred: float, pred_t: float, expect: str = "keep",
                             title: str = "", info: Mapping[str, Any] | None = None, t_ns: int = 0) -> Path:
    """Write one camera violation as MCAP: both images (PNG, RGB input) and their annotations — the steering
    angles as arrows from the bottom centre (label green, θ(i) blue, θ(τ(i)) red; on the transformed image the
    label and θ(i) as the relation expects them, negated for the mirror) and as text. ``t_ns`` is the seed
    frame's own time (its stamp; 0 only for a source without times, an image folder), so the bundle lines up with
    the drive it came from."""
    import cv2

    F = _fox()
    sign = -1.0 if expect == "negate" else 1.0
    with _Writer(path) as w:
        for topic, ann_topic, img, arrows in (
                (TOPIC_SEED_IMAGE, TOPIC_SEED_ANNOTATIONS, seed,
                 [("label", label, (0.16, 0.78, 0.16)), ("θ(i)", pred, (0.16, 0.35, 1.0))]),
                (TOPIC_TRANSFORMED_IMAGE, TOPIC_TRANSFORMED_ANNOTATIONS, transformed,
                 [("label", None if label is None else sign * label, (0.16, 0.78, 0.16)),
                  ("θ(i)" if sign > 0 else "−θ(i)", sign * pred, (0.16, 0.35, 1.0)),
                  ("θ(τ(i))", pred_t, (0.9, 0.16, 0.16))])):
            ok, buf = cv2.imencode(".png", np.ascontiguousarray(np.asarray(img)[..., ::-1]))
            if not ok:  # pragma: no cover
                raise ValueError("cannot encode the image as PNG")
            msg = F.CompressedImage(frame_id="camera", data=buf.tobytes(), format="png")
            _ts(msg.timestamp, t_ns)
            w.write(topic, msg, t_ns)
            w.write(ann_topic, _image_annotations(F, img.shape[:2], arrows, title=title, t_ns=t_ns), t_ns)
        if info:
            w.metadata("lidarmt", _flat_meta(info))
    return Path(path)


def _image_annotations(F, hw: tuple[int, int], arrows: list[tuple[str, float | None, tuple]], *, title: str,
                       t_ns: int):
    h, w = int(hw[0]), int(hw[1])
    ann = F.ImageAnnotations()
    x0, y0 = w / 2.0, h - 4.0
    row = 0
    if title:
        ann.texts.append(_text_ann(F, title, 4.0, 14.0, (1, 1, 1, 1), t_ns))
        row = 1
    for name, angle, rgb in arrows:
        if angle is None or not math.isfinite(angle):
            continue
        r = 0.4 * h
        x1, y1 = x0 - r * math.sin(angle), y0 - r * math.cos(angle)
        pa = F.PointsAnnotation(type=F.PointsAnnotation.LINE_STRIP, thickness=2.0)
        _ts(pa.timestamp, t_ns)
        pa.points.extend([F.Point2(x=x0, y=y0), F.Point2(x=x1, y=y1)])
        pa.outline_color.CopyFrom(_color(F, (*rgb, 1.0)))
        ann.points.append(pa)
        ann.texts.append(_text_ann(F, f"{name} {math.degrees(angle):+.1f}°", 4.0, 14.0 + 16.0 * row, (*rgb, 1.0),
                                   t_ns))
        row += 1
    return ann


def _text_ann(F, text: str, x: float, y: float, rgba: Sequence[float], t_ns: int):
    ta = F.TextAnnotation(text=text, font_size=12.0)
    _ts(ta.timestamp, t_ns)
    ta.position.x, ta.position.y = x, y
    ta.text_color.CopyFrom(_color(F, rgba))
    ta.background_color.CopyFrom(_color(F, (0, 0, 0, 0.6)))
    return ta


def _flat_meta(info: Mapping[str, Any]) -> dict[str, str]:
    """bundle.json's scalars as MCAP metadata (strings); nested values as compact JSON."""
    out = {}
    for k, v in info.items():
        out[str(k)] = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return out


class RecordingMcapWriter:
    """Frames of a recording with their perception output, one after the other (``lidarmt export``)::

        with RecordingMcapWriter("x.mcap") as w:
            for frame, roi, obstacles in ...:
                w.add(frame, obstacles, roi=roi)

    Each frame's SceneUpdate deletes (``SceneEntityDeletion`` MATCHING_ID, stamped with the frame's time) every
    entity the previous frame showed on that topic and this frame does not redraw, so a player shows exactly
    this frame's obstacles and ROI: no box of an earlier frame with more obstacles stays on screen.
    """

    def __init__(self, path: str | os.PathLike[str], *, metadata: Mapping[str, Any] | None = None) -> None:
        self._F = _fox()
        self._w = _Writer(path)
        self._meta = metadata
        self.frames = 0
        self._last = -1
        self._shown: dict[str, set[str]] = {}  # topic -> entity ids the previous frame left on screen

    def __enter__(self) -> RecordingMcapWriter:
        self._w.__enter__()
        return self

    def _scene(self, topic: str, upd: Any, t: int) -> None:
        """Write ``upd`` (or nothing, when None) on ``topic``, first deleting what the previous frame showed
        there and this one does not redraw (a redrawn id replaces its entity)."""
        F = self._F
        ids = set() if upd is None else {e.id for e in upd.entities}
        gone = sorted(self._shown.get(topic, set()) - ids)
        if upd is None and not gone:
            return
        upd = F.SceneUpdate() if upd is None else upd
        for ident in gone:
            d = F.SceneEntityDeletion(type=F.SceneEntityDeletion.MATCHING_ID, id=ident)
            _ts(d.timestamp, t)
            upd.deletions.append(d)
        self._w.write(topic, upd, t)
        self._shown[topic] = ids

    def add(self, frame: Frame, obstacles: Sequence[Obstacle], *, roi: Any = None,
            roi_indices: np.ndarray | None = None) -> None:
        F = self._F
        t = stamp_ns(frame.stamp)
        if t <= self._last:  # frames without stamps (or out of order): 0.1 s apart, as a 10 Hz sensor
            t = self._last + 100_000_000
        self._last = t
        self._w.write(TOPIC_TF, frame_transform(F, frame, t_ns=t), t)
        self._w.write(TOPIC_POINTS, frame_cloud(F, frame, t_ns=t), t)
        self._scene(TOPIC_OBSTACLES, obstacles_update(F, obstacles, prefix="obstacle", frame_id=frame.frame_id,
                                                      t_ns=t), t)
        self._scene(TOPIC_ROI, roi_update(F, roi, frame, t_ns=t, roi_indices=roi_indices), t)
        self.frames += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._meta:
            self._w.metadata("lidarmt", _flat_meta(self._meta))
        self._w.__exit__(exc_type, exc, tb)


def visible_entities(path: str | os.PathLike[str], topic: str) -> list[tuple[int, set[str]]]:
    """(log time, ids on screen after it) for every SceneUpdate on ``topic``, as a player applies them: an
    update's deletions first (MATCHING_ID: that id, ALL: everything, either only entities stamped before the
    deletion), then its entities (an id replaces the entity of the same id). Entities with a lifetime are kept
    until replaced or deleted (lidarmt writes none)."""
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    shown: dict[str, int] = {}  # id -> timestamp (ns)
    out = []
    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        for _, _, message, upd in reader.iter_decoded_messages(topics=[topic]):
            for d in upd.deletions:
                t = d.timestamp.seconds * 1_000_000_000 + d.timestamp.nanos
                for ident in [k for k, ts in shown.items()
                              if (d.type == 1 or k == d.id) and ts < t]:
                    del shown[ident]
            for e in upd.entities:
                shown[e.id] = e.timestamp.seconds * 1_000_000_000 + e.timestamp.nanos
            out.append((int(message.log_time), set(shown)))
    return out


# ----------------------------------------------------------------------------------------------- reading


def summarize(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Topic -> {"schema", "encoding", "messages"} of an MCAP file, from its summary section."""
    from mcap.reader import make_reader

    with open_readable(path, max_bytes=MAX_MCAP_BYTES, what="MCAP file") as fh:  # a FIFO or /dev/zero: refused
        summary = make_reader(fh).get_summary()
    if summary is None:
        raise ValueError(f"{path}: no summary section")
    counts = summary.statistics.channel_message_counts if summary.statistics else {}
    out = {}
    for cid, ch in summary.channels.items():
        schema = summary.schemas.get(ch.schema_id)
        out[ch.topic] = {"schema": schema.name if schema else "", "encoding": ch.message_encoding,
                         "messages": int(counts.get(cid, 0))}
    return out


def describe_mcap(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``lidarmt info`` prints of an MCAP file (lidarmt's own, or any other): its profile and library, the
    time range of its messages (ns), the topics (schema, encoding, messages) and the metadata records (a
    lidarmt file holds ``lidarmt``: the bundle's or the export's facts). Raises ValueError for a file without a
    summary section (unfinished or damaged)."""
    from mcap.reader import make_reader

    with open(path, "rb") as fh:
        reader = make_reader(fh)
        header = reader.get_header()
        summary = reader.get_summary()
        if summary is None:
            raise ValueError("no summary section (an unfinished or damaged MCAP file)")
        stats = summary.statistics
        meta = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    topics = summarize(path)
    return {"path": str(path), "format": "mcap", "profile": header.profile, "library": header.library,
            "start_ns": int(stats.message_start_time) if stats and stats.message_count else None,
            "end_ns": int(stats.message_end_time) if stats and stats.message_count else None,
            "messages": int(stats.message_count) if stats else sum(t["messages"] for t in topics.values()),
            "topics": topics, "metadata": meta}


def read_messages(path: str | os.PathLike[str], topics: Iterable[str] | None = None) -> list[tuple[str, Any]]:
    """(topic, decoded protobuf message) of every message, in log-time order (for tests and tools)."""
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    with open_readable(path, max_bytes=MAX_MCAP_BYTES, what="MCAP file") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        return [(ch.topic, msg) for _, ch, _, msg in reader.iter_decoded_messages(
            topics=list(topics) if topics is not None else None)]


#: The topics each bundle's MCAP must hold (replay checks them); the ROI is absent when the ROI has no outline.
LIDAR_BUNDLE_TOPICS = {TOPIC_TF: "foxglove.FrameTransform", TOPIC_SOURCE_POINTS: "foxglove.PointCloud",
                       TOPIC_FOLLOW_POINTS: "foxglove.PointCloud", TOPIC_ADDED_POINTS: "foxglove.PointCloud",
                       TOPIC_MINIMAL_POINTS: "foxglove.PointCloud", TOPIC_SOURCE_OBSTACLES: "foxglove.SceneUpdate",
                       TOPIC_FOLLOW_OBSTACLES: "foxglove.SceneUpdate"}
#: A LiDAR-transformation bundle's MCAP: the MR1 topics and the inserted/removed boxes (an empty SceneUpdate
#: when the transformation put in and took out no object).
LIDAR_TRANSFORM_BUNDLE_TOPICS = LIDAR_BUNDLE_TOPICS | {TOPIC_CHANGE_BOXES: "foxglove.SceneUpdate"}
CAMERA_BUNDLE_TOPICS = {TOPIC_SEED_IMAGE: "foxglove.CompressedImage",
                        TOPIC_TRANSFORMED_IMAGE: "foxglove.CompressedImage",
                        TOPIC_SEED_ANNOTATIONS: "foxglove.ImageAnnotations",
                        TOPIC_TRANSFORMED_ANNOTATIONS: "foxglove.ImageAnnotations"}


def mcap_problems(path: str | os.PathLike[str], expected: Mapping[str, str]) -> list[str]:
    """What is wrong with a bundle's MCAP (one line each; [] when it opens and holds one message of the
    expected schema on each expected topic). Never raises for a bad file: it is data from a stranger."""
    try:
        got = summarize(path)
    except Exception as err:  # noqa: BLE001 - any failure to parse is a finding about the file
        return [f"{Path(path).name} is not a readable MCAP file ({type(err).__name__}: {err})"[:300]]
    out = []
    for topic, schema in expected.items():
        t = got.get(topic)
        if t is None:
            out.append(f"{Path(path).name} lacks the topic {topic}")
        elif t["schema"] != schema or t["messages"] < 1:
            out.append(f"{Path(path).name}: {topic} holds {t['messages']} {t['schema'] or '?'} message(s), "
                       f"expected {schema}")
    return out
