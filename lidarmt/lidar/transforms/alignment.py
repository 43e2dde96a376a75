"""Alignment: the whole sweep moved rigidly. ``rotate`` turns it about the sensor's z axis, ``mirror`` reflects
y -> -y. Both set ``geometry`` so relations map the source's obstacles and ROI alike (equivariance)."""

from __future__ import annotations

import math

import numpy as np

from lidarmt.lidar.transforms._common import Builtin
from lidarmt.lidar.transforms.base import LidarChange, Param, make_change, map_boxes, rotation_2d
from lidarmt.types import Frame


def _moved(frame: Frame, g: np.ndarray) -> np.ndarray:
    pts = frame.points.copy()
    x = frame.points["x"].astype(np.float64)
    y = frame.points["y"].astype(np.float64)
    pts["x"] = (g[0, 0] * x + g[0, 1] * y).astype(np.float32)
    pts["y"] = (g[1, 0] * x + g[1, 1] * y).astype(np.float32)
    return pts


def _change(frame: Frame, g: np.ndarray, info: dict) -> LidarChange:
    boxes = None if frame.labels is None else map_boxes(g, frame.labels.boxes)
    return make_change(frame, np.arange(len(frame.points)), _moved(frame, g), geometry=g, info=info, boxes=boxes)


class Rotate(Builtin):
    name = "rotate"
    family = "alignment"
    summary = "whole sweep rotated about the sensor's z axis"
    params = (Param("angle_deg", "deg", -180.0, 180.0, "rotation about the sensor's z axis, counter-clockwise"),)
    doc = ("Whole-sweep rigid rotation about the sensor's z axis by angle_deg (counter-clockwise seen from above): "
           "every point's x, y rotated in float64 and stored as float32; z, intensity, ring, time kept. geometry is "
           "the rotation, so the ROI and the source's obstacles rotate alike. No randomness.")
    levels = {"light": {"angle_deg": 10.0}, "moderate": {"angle_deg": 45.0}, "heavy": {"angle_deg": 180.0}}

    def _apply(self, frame, p, rng, context):
        return _change(frame, rotation_2d(math.radians(p["angle_deg"])), {"angle_deg": p["angle_deg"]})


class Mirror(Builtin):
    name = "mirror"
    family = "alignment"
    summary = "mirror image y -> -y"
    params = ()
    doc = ("The mirror image of the sweep in the sensor's x-z plane: y -> -y for every point (left and right "
           "swapped, as a sensor on a car driving on the other side of the road would see it). geometry is "
           "diag(1, -1, 1). No parameters, no randomness.")
    levels = {"light": {}, "moderate": {}, "heavy": {}}

    def _apply(self, frame, p, rng, context):
        return _change(frame, np.diag([1.0, -1.0, 1.0]), {})
