"""LiDAR–camera misalignment, spatial and temporal, after Dong et al. (CVPR 2023, "Benchmarking Robustness of 3D
Object Detection to Common Corruptions in Autonomous Driving", family "alignment"; severities from their released
``LiDAR_corruptions.py``: ``spatial_alignment_noise`` and ``temporal_alignment_noise``).

Both need the camera the sweep is paired with (:class:`lidarmt.types.CameraLink`, ``Frame.camera``: KITTI object
frames with ``calib/`` and KITTI raw drives with their date folder's ``calib_*_to_cam.txt``). A frame without one
is refused with one line (:class:`lidarmt.lidar.errors.LidarTransformError`), never passed through unchanged: a
misalignment that changes nothing would count as robustness. Campaigns that select these by family or ``all``
leave them out, and say so, when the recording has no camera (:func:`needs_camera`, :func:`camera_problem`).

What changes is the sweep **as the rest of the car reads it**: the camera, the labels (KITTI draws its boxes in
camera 2's frame) and every module downstream keep their frame, and the LiDAR's data arrive misaligned with it.

* ``spatial-misalignment``: the LiDAR is mounted a little off the pose its calibration states (a knock, a loose
  bracket, a drifted calibration). With E the calibrated extrinsic (camera <- LiDAR) and N a small rigid motion
  drawn in the camera's frame, the LiDAR truly sits at N·E; a point X it measures is reported at E^-1 N^-1 E X in
  the frame the calibration defines. The follow-up's camera link is still E (what the car believes); ``info``
  holds the drawn rotation and translation and the true extrinsic. A fusion module then paints points with the
  wrong pixels, as in Dong et al.'s benchmark; a LiDAR-only module reports its boxes where the miscalibration
  puts them.
* ``temporal-misalignment``: the sweep the car pairs with the camera image is ``periods`` frames off (a stalled
  driver, a time-stamping fault): the follow-up's points are those of the sweep ``periods`` frames earlier in the
  same stream (later when the stream has no earlier one), presented with the image, stamp, pose and labels of the
  source frame. Every source point is dropped and every paired point added (``origin`` -1), so delta debugging
  finds which of the stale sweep's points matter. It needs the stream: the camera's period (KITTI raw: 10 Hz)
  and the recording's other frames (``TransformContext.frame_at``, which campaigns pass); KITTI's object
  benchmark has single images and is refused.

The named levels take Dong et al.'s severities 1, 3 and 5 (light, moderate, heavy).
"""

from __future__ import annotations

import math

import numpy as np

from lidarmt.lidar.errors import LidarTransformError
from lidarmt.lidar.transforms._common import Builtin
from lidarmt.lidar.transforms.base import Param, make_change, same_change
from lidarmt.types import Frame


def needs_camera(transform: object) -> bool:
    """Whether a transformation needs the frame's camera link (``Frame.camera``)."""
    return bool(getattr(transform, "needs_camera", False))


def camera_problem(transform: object, frame: Frame) -> str | None:
    """Why ``transform`` cannot apply to ``frame`` for want of a camera (None when it can, or needs none)."""
    if not needs_camera(transform):
        return None
    where = _where(frame)
    if frame.camera is None:
        return (f"{getattr(transform, 'name', transform)}: {where} has no camera paired with it (KITTI object "
                "frames with calib/, KITTI raw drives with calib_velo_to_cam.txt and calib_cam_to_cam.txt have one)")
    if getattr(transform, "needs_stream", False) and not frame.camera.period_s:
        return (f"{getattr(transform, 'name', transform)}: {where}'s camera takes single images, not a stream "
                f"({frame.camera.describe()}); a temporal misalignment needs consecutive frames (a KITTI raw drive)")
    return None


def _where(frame: Frame) -> str:
    p = frame.provenance
    return f"frame {p.index} of {p.source}" if p is not None else "the frame"


def rodrigues(w: np.ndarray) -> np.ndarray:
    """3x3 rotation of the rotation vector ``w`` (axis times angle, radians)."""
    w = np.asarray(w, dtype=np.float64)
    th = float(np.linalg.norm(w))
    if th < 1e-15:
        return np.eye(3)
    k = w / th
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(th) * kx + (1.0 - math.cos(th)) * (kx @ kx)


def reported_from_true(extrinsic: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """4x4 map of a point's position in the LiDAR's true frame to where a car calibrated with ``extrinsic``
    reports it, when the LiDAR truly sits at ``noise · extrinsic`` (camera <- LiDAR): E^-1 N^-1 E."""
    e = np.asarray(extrinsic, dtype=np.float64)
    return np.linalg.inv(e) @ np.linalg.inv(noise) @ e


class SpatialMisalignment(Builtin):
    name = "spatial-misalignment"
    family = "alignment"
    summary = "LiDAR mounted off its calibrated pose relative to the camera (Dong et al. 2023)"
    needs_camera = True
    #: the objects stay where they were; the clean labels still describe the truth (robustness scores it)
    relation = "robustness"
    clean_labels_hold = True
    params = (Param("translation_cm", "cm", 0.0, 100.0, "standard deviation of the mount's offset on each axis"),
              Param("rotation_mrad", "mrad", 0.0, 100.0, "standard deviation of the mount's rotation about each "
                    "axis"))
    doc = ("Spatial LiDAR-camera misalignment (Dong et al., CVPR 2023, their released spatial_alignment_noise): "
           "the LiDAR truly sits at N·E, with E the calibrated extrinsic camera <- LiDAR of the frame's camera and "
           "N a rigid motion in the camera's frame, rotation vector and translation each N(0, sigma) per axis "
           "(drawn from the seed); the car, trusting E, reports a point measured at X at E^-1 N^-1 E X. Points "
           "move in float64 and are stored as float32; intensity, ring and time kept; the labels (the truth) and "
           "the frame's camera link (what the car believes) are kept. Dong et al. add N(0, sigma) to each of the "
           "rotation matrix's nine entries, which also scales and shears; lidarmt draws a proper rotation. Needs "
           "the frame's camera (KITTI calibration); refused without one. Levels: Dong et al.'s severities 1 / 3 / "
           "5 (translation 4 / 12 / 20 cm, rotation 4 / 12 / 20 mrad).")
    levels = {"light": {"translation_cm": 4.0, "rotation_mrad": 4.0},
              "moderate": {"translation_cm": 12.0, "rotation_mrad": 12.0},
              "heavy": {"translation_cm": 20.0, "rotation_mrad": 20.0}}

    def _apply(self, frame, p, rng, context):
        problem = camera_problem(self, frame)
        if problem:
            raise LidarTransformError(problem)
        w = rng.normal(0.0, p["rotation_mrad"] / 1000.0, 3)
        t = rng.normal(0.0, p["translation_cm"] / 100.0, 3)
        noise = np.eye(4)
        noise[:3, :3] = rodrigues(w)
        noise[:3, 3] = t
        m = reported_from_true(frame.camera.extrinsic, noise)
        pts = frame.points
        xyz = np.column_stack([pts[c].astype(np.float64) for c in ("x", "y", "z")])
        moved = xyz @ m[:3, :3].T + m[:3, 3]
        out = pts.copy()
        for j, c in enumerate(("x", "y", "z")):
            out[c] = moved[:, j].astype(np.float32)
        with np.errstate(invalid="ignore"):
            shift = np.linalg.norm(moved - xyz, axis=1)
        finite = shift[np.isfinite(shift)]
        info = {**p, "rotation_deg": [round(math.degrees(float(v)), 6) for v in w],
                "translation_m": [round(float(v), 6) for v in t],
                "true_extrinsic": [[float(v) for v in row] for row in noise @ frame.camera.extrinsic],
                "max_shift_m": float(finite.max()) if len(finite) else 0.0}
        return same_change(frame, out, info=info)


class TemporalMisalignment(Builtin):
    name = "temporal-misalignment"
    family = "alignment"
    summary = "the sweep paired with a camera image some frames off (Dong et al. 2023)"
    needs_camera = True
    needs_stream = True
    relation = "robustness"
    clean_labels_hold = True
    params = (Param("periods", "frames", 0.0, 50.0, "how many frames the paired sweep is off", integer=True),)
    doc = ("Temporal LiDAR-camera misalignment (Dong et al., CVPR 2023, their released temporal_alignment_noise: "
           "2 to 10 frames): the car pairs the camera image (and the stamp, pose and labels) of frame i with the "
           "sweep of frame i - periods of the same stream (i + periods when there is no earlier one): the "
           "follow-up's points are that sweep's, every source point dropped, every paired point added. The static "
           "world is off by the ego motion over periods x the camera's period, moving objects by their own. Needs "
           "a camera stream (KITTI raw: 10 Hz) and the recording's frames (campaigns pass them); refused "
           "otherwise. Deterministic. Levels: Dong et al.'s severities 1 / 3 / 5 (2 / 6 / 10 frames).")
    levels = {"light": {"periods": 2.0}, "moderate": {"periods": 6.0}, "heavy": {"periods": 10.0}}

    def _apply(self, frame, p, rng, context):
        problem = camera_problem(self, frame)
        if problem:
            raise LidarTransformError(problem)
        k = int(p["periods"])
        if k == 0:
            return same_change(frame, frame.points.copy(), info={"periods": 0, "paired_frame": frame.index,
                                                                 "offset_s": 0.0})
        frame_at = getattr(context, "frame_at", None)
        if frame_at is None:
            raise LidarTransformError(f"{self.name}: the recording's other frames are not at hand (give the "
                                      "transformation a TransformContext with frame_at; campaigns do)")
        i = frame.index
        other = None
        for j in (i - k, i + k):
            if j < 0:
                continue
            try:
                other = frame_at(j)
            except IndexError:
                continue
            break
        if other is None:
            raise LidarTransformError(f"{self.name}: {_where(frame)} has no frame {k} earlier or later in its "
                                      "stream; give fewer periods or a longer drive")
        period = float(frame.camera.period_s)
        offset = (j - i) * period
        info = {"periods": k, "paired_frame": int(j), "offset_s": round(offset, 6),
                "paired_stamp": float(other.stamp), "camera_stamp": float(frame.camera.stamp)}
        return make_change(frame, np.zeros(0, dtype=np.int64), frame.points[:0].copy(), other.points, info=info)
