"""Object-level corruptions on labelled boxes after Dong et al. (CVPR 2023, "Benchmarking Robustness of 3D Object
Detection to Common Corruptions in Autonomous Driving": shear, scale and rotation of each object; severities and
draws from their released ``bbox_util.py``): the points of every labelled object are transformed in its box's
frame, the rest of the sweep is left as it was.

An object's points are those its box holds, grown 10 cm in x/y, the ground below bottom + 0.2 m excluded (the
rule of :func:`lidarmt.lidar.transforms.objects.box_mask`; assigned by
:func:`lidarmt.lidar.transforms._corruption_kernels.box_index`, numba, beside a NumPy reference). In the box's
frame (origin at its centre, x along its heading) coordinates are divided by half the box's largest dimension, as
Dong et al. normalise them ("max-2"). Each box draws its own numbers from the seed, in label order, whether or not
it holds points. The follow-up's labels are the boxes as changed (scaled, turned); a frame without labels is left
as it is. ``lidarmt fuzz`` judges them by the ``robustness`` relation (every source obstacle persists): the objects
stay where they were.

The named levels take Dong et al.'s severities 1, 3 and 5 (light, moderate, heavy).
"""

from __future__ import annotations

import math

import numpy as np

import lidarmt.lidar.transforms._corruption_kernels as KC
from lidarmt.lidar.transforms._common import Builtin
from lidarmt.lidar.transforms.base import Param, same_change
from lidarmt.lidar.transforms.objects import BOX_MARGIN, GROUND_CLEARANCE


def assign_points(points: np.ndarray, boxes: np.ndarray, *, kernel=KC.box_index) -> np.ndarray:
    """int64 per point: the index of the first box holding it (see the module), -1 for none."""
    f = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
    return kernel(f(points["x"]), f(points["y"]), f(points["z"]), f(boxes["cx"]), f(boxes["cy"]), f(boxes["cz"]),
                  f(boxes["length"]), f(boxes["width"]), f(boxes["height"]), f(boxes["yaw"]), BOX_MARGIN,
                  GROUND_CLEARANCE)


class _Local(Builtin):
    """Base: ``_draw(rng, box)`` -> the box's random numbers; ``_move(u, box, draw)`` -> normalised coordinates
    moved (N x 3); ``_box(box, draw)`` -> the changed box."""

    family = "object"
    #: the objects stay where they were, deformed a little: every source obstacle should persist
    #: (lidarmt.lidar.campaign.default_relation reads this; the object family's default is insertion/removal)
    relation = "robustness"
    #: the follow-up's labels are the same objects, one box each in the same order, as changed (scaled, turned,
    #: sheared): ``lidarmt robustness`` scores these against them (the clean frame's ignore rules kept)
    followup_labels_hold = True
    param: str

    def _apply(self, frame, p, rng, context):
        pts = frame.points
        info = {self.param: p[self.param]}
        if frame.labels is None or len(frame.labels.boxes) == 0:
            return same_change(frame, pts.copy(), info={**info, "n_objects": 0, "reason": "no labelled boxes"})
        boxes = frame.labels.boxes
        draws = [self._draw(rng, p[self.param]) for _ in range(len(boxes))]
        owner = assign_points(pts, boxes)
        out = pts.copy()
        new_boxes = boxes.copy()
        n_obj = 0
        for k, box in enumerate(boxes):
            new_boxes[k] = self._box(box, draws[k])
            idx = np.flatnonzero(owner == k)
            if len(idx) == 0:
                continue
            n_obj += 1
            half = max(box["length"], box["width"], box["height"]) / 2.0
            c, s = math.cos(box["yaw"]), math.sin(box["yaw"])
            dx = pts["x"][idx].astype(np.float64) - box["cx"]
            dy = pts["y"][idx].astype(np.float64) - box["cy"]
            dz = pts["z"][idx].astype(np.float64) - box["cz"]
            u = np.column_stack([c * dx + s * dy, -s * dx + c * dy, dz]) / half
            v = self._move(u, box, draws[k]) * half
            out["x"][idx] = (box["cx"] + c * v[:, 0] - s * v[:, 1]).astype(np.float32)
            out["y"][idx] = (box["cy"] + s * v[:, 0] + c * v[:, 1]).astype(np.float32)
            out["z"][idx] = (box["cz"] + v[:, 2]).astype(np.float32)
        return same_change(frame, out, boxes=new_boxes,
                           info={**info, "n_objects": n_obj, "n_points": int(np.count_nonzero(owner >= 0))})

    def _box(self, box, draw):
        return box


def _signed_uniform(rng: np.random.Generator, c: float, half_width: float) -> float:
    """U(c - w, c + w) (at least 0) times a random sign: Dong et al.'s draw of a severity's coefficient."""
    return max(float(rng.uniform(c - half_width, c + half_width)), 0.0) * float(rng.choice([-1.0, 1.0]))


class ObjectShear(_Local):
    name = "object-shear"
    summary = "every labelled object's points sheared in its box (Dong et al. 2023)"
    param = "shear"
    params = (Param("shear", "fraction", 0.0, 0.5, "shear coefficient (drawn within +-0.05, random sign)"),)
    doc = ("Shear of each labelled object (Dong et al., CVPR 2023, their released shear_bbox): in the box's "
           "normalised frame, u' = u M with M = [[1, 0, b], [d, 1, e], [f, 0, 1]] (row vectors), b, d, e, f each "
           "U(shear - 0.05, shear + 0.05) with a random sign; then each axis is shrunk, when needed, so the points "
           "stay within the box's extent (Dong et al.'s normalize_gt). The box is unchanged. Levels: severities "
           "1 / 3 / 5 (0.05 / 0.15 / 0.25).")
    levels = {"light": {"shear": 0.05}, "moderate": {"shear": 0.15}, "heavy": {"shear": 0.25}}

    def _draw(self, rng, c):
        return [_signed_uniform(rng, c, 0.05) for _ in range(4)]

    def _move(self, u, box, draw):
        b, d, e, f = draw
        m = np.array([[1.0, 0.0, b], [d, 1.0, e], [f, 0.0, 1.0]])
        v = u @ m
        dims = np.array([box["length"], box["width"], box["height"]], dtype=np.float64)
        bound = dims / dims.max()
        ext = np.abs(v).max(axis=0) / bound
        return v / np.maximum(ext, 1.0)


class ObjectScale(_Local):
    name = "object-scale"
    summary = "every labelled object stretched or shrunk along one axis (Dong et al. 2023)"
    param = "scale"
    params = (Param("scale", "fraction", 0.0, 0.5, "relative change of one axis (axis and sign drawn)"),)
    doc = ("Scale of each labelled object (Dong et al., CVPR 2023, their released scale_bbox): one axis of the "
           "box's frame (length, width or height, drawn) is multiplied by 1 +- scale (sign drawn) about the box's "
           "centre, its bottom kept on the ground when the height changes; the box is scaled alike. Levels: "
           "severities 1 / 3 / 5 (0.04 / 0.12 / 0.20).")
    levels = {"light": {"scale": 0.04}, "moderate": {"scale": 0.12}, "heavy": {"scale": 0.20}}

    def _draw(self, rng, c):
        axis = int(rng.integers(0, 3))
        return axis, 1.0 + c * float(rng.choice([-1.0, 1.0]))

    def _move(self, u, box, draw):
        axis, sc = draw
        v = u.copy()
        v[:, axis] *= sc
        if axis == 2:  # bottom kept: z' = s z + (s - 1) h / 2 (in units of half the largest dimension)
            v[:, 2] += (sc - 1.0) * box["height"] / max(box["length"], box["width"], box["height"])
        return v

    def _box(self, box, draw):
        axis, sc = draw
        out = box.copy()
        name = ("length", "width", "height")[axis]
        out[name] = box[name] * sc
        if axis == 2:
            out["cz"] = box["cz"] - box["height"] / 2.0 + box["height"] * sc / 2.0
        return out


class ObjectRotate(_Local):
    name = "object-rotate"
    summary = "every labelled object turned about its box's vertical axis (Dong et al. 2023)"
    param = "angle_deg"
    params = (Param("angle_deg", "deg", 0.0, 45.0, "rotation (drawn within +-1 deg, random sign)"),)
    doc = ("Rotation of each labelled object (Dong et al., CVPR 2023, their released rotation_bbox): its points "
           "turn about the vertical axis through the box's centre by U(angle - 1, angle + 1) degrees with a random "
           "sign; the box's yaw turns alike. Levels: severities 1 / 3 / 5 (1 / 5 / 9 deg).")
    levels = {"light": {"angle_deg": 1.0}, "moderate": {"angle_deg": 5.0}, "heavy": {"angle_deg": 9.0}}

    def _draw(self, rng, c):
        return math.radians(_signed_uniform(rng, c, 1.0))

    def _move(self, u, box, beta):
        c, s = math.cos(beta), math.sin(beta)
        return np.column_stack([c * u[:, 0] - s * u[:, 1], s * u[:, 0] + c * u[:, 1], u[:, 2]])

    def _box(self, box, beta):
        out = box.copy()
        out["yaw"] = box["yaw"] + beta
        return out
