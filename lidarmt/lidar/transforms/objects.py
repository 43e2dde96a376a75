"""Objects: insertion of a real object cut from labelled sweeps, and removal of an obstacle's points.

The object library is built at run time from the user's labelled recordings (KITTI object folders, KITTI raw
drives with tracklets, simulator bags: anything :func:`lidarmt.io.open_recording` reads with boxes); lidarmt ships
no object points. Each object keeps its points in its box's frame (origin at the centre of the box's bottom face,
+x along its heading), the box's size and class, and where it was seen (range, azimuth, yaw relative to the line
of sight): inserted at the same range with the same face turned to the sensor, its points keep the density and
self-occlusion of a real scan.

Insertion (``insert``): the object is turned about the sensor's z axis to a new azimuth and moved along the line
of sight to ``distance_m``, its bottom set on the ground found there; the place must be free (inside the ROI when
one is given, else on ground that is flat; clear of every labelled box and of source points above the ground).
Occlusion is cast on the sensor's beam grid (:mod:`lidarmt.lidar.transforms._occlusion_kernels`; the beams of the
context's sensor profile, :mod:`lidarmt.lidar.sensors`, default the KITTI HDL-64E): the object's points are thinned
to the nearest per beam, and the source points whose beam the object stops first are dropped (the object's
shadow). On another profile than ``hdl64`` the object is re-cast on that sensor's beams: a point of the object
(scanned by an HDL-64E, about 0.42 deg between rings) is kept only within :data:`ON_BEAM_DEG` of one of the
profile's elevations, so a VLP-16 sees the object in its 16 rings 2 deg apart.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

import lidarmt.lidar.transforms._occlusion_kernels as OK
from lidarmt.lidar.errors import LidarTransformError, ObjectLibraryError
from lidarmt.lidar.sensors import HDL64, SensorProfile, sensor_of
from lidarmt.lidar.transforms._common import Builtin
from lidarmt.lidar.transforms.base import Param, make_change
from lidarmt.types import BOX_DTYPE, Frame, MetaType, make_points

N_BINS = HDL64.azimuth_steps  # HDL-64E firings per turn
ON_BEAM_DEG = 0.21  # half the KITTI HDL-64E's mean ring spacing (26.2 deg / 63): re-casting on another sensor
GROUND_CLEARANCE = 0.2  # m: points this close above a box's bottom are ground, not object
BOX_MARGIN = 0.1  # m: a box grown by this much in x/y when cutting its points
FREE_MARGIN = 0.5  # m: a place is free when the box grown by this much holds no obstacle point


@dataclass(frozen=True)
class LibraryObject:
    """One real object: points (N, 4) float32 x, y, z, intensity in its box frame, the box's size, its class and
    where it was seen."""

    points: np.ndarray
    length: float
    width: float
    height: float
    meta: int
    range_m: float  # horizontal distance of the box centre from the sensor it was scanned by
    yaw_rel: float  # box yaw minus the azimuth of its centre (the face the sensor saw)
    source: str

    @property
    def cls(self) -> str:
        return MetaType(self.meta).obstacle_class.value


def box_mask(points: np.ndarray, box: np.void | np.ndarray, *, margin: float = BOX_MARGIN,
             clearance: float = GROUND_CLEARANCE) -> np.ndarray:
    """Points inside a box (:data:`BOX_DTYPE`, centre at mid-height) grown by ``margin`` in x/y, above its bottom
    + ``clearance`` (ground excluded) and below its top + ``margin``."""
    dx = points["x"].astype(np.float64) - box["cx"]
    dy = points["y"].astype(np.float64) - box["cy"]
    c, s = math.cos(box["yaw"]), math.sin(box["yaw"])
    lx, ly = c * dx + s * dy, -s * dx + c * dy
    bottom = box["cz"] - box["height"] / 2
    z = points["z"].astype(np.float64)
    return ((np.abs(lx) <= box["length"] / 2 + margin) & (np.abs(ly) <= box["width"] / 2 + margin)
            & (z >= bottom + clearance) & (z <= bottom + box["height"] + margin))


class ObjectLibrary:
    """Objects cut from labelled sweeps by their boxes (build with :meth:`from_frames` or :meth:`from_recording`)."""

    def __init__(self, objects: Iterable[LibraryObject], *, description: str = "") -> None:
        self.objects = list(objects)
        self.description = description

    def __len__(self) -> int:
        return len(self.objects)

    @classmethod
    def from_frames(cls, frames: Iterable[Frame], *, min_points: int = 60, max_range: float = 60.0,
                    classes: Iterable[int] | None = None, description: str = "") -> ObjectLibrary:
        """Cut every labelled box with at least ``min_points`` points (ground excluded) within ``max_range``."""
        allowed = None if classes is None else {int(c) for c in classes}
        out: list[LibraryObject] = []
        for f in frames:
            if f.labels is None or len(f.labels.boxes) == 0:
                continue
            from lidarmt.io.tracklets import box_candidates

            near = box_candidates(f.points, f.labels.boxes, margin=BOX_MARGIN)
            for k, b in enumerate(f.labels.boxes):
                if allowed is not None and int(b["meta"]) not in allowed:
                    continue
                rng = math.hypot(b["cx"], b["cy"])
                if rng > max_range or int(b["meta"]) == MetaType.UNKNOWN:
                    continue
                sub = f.points[near[k]]  # the points near the box, in frame order: not boxes × points
                m = box_mask(sub, b)
                if np.count_nonzero(m) < min_points:
                    continue
                p = sub[m]
                dx = p["x"].astype(np.float64) - b["cx"]
                dy = p["y"].astype(np.float64) - b["cy"]
                c, s = math.cos(b["yaw"]), math.sin(b["yaw"])
                local = np.stack([c * dx + s * dy, -s * dx + c * dy,
                                  p["z"].astype(np.float64) - (b["cz"] - b["height"] / 2),
                                  p["intensity"].astype(np.float64)], axis=1).astype(np.float32)
                where = f.provenance
                src = f"{where.source}#{where.index}" if where else "frame"
                out.append(LibraryObject(local, float(b["length"]), float(b["width"]), float(b["height"]),
                                         int(b["meta"]), rng, float(b["yaw"] - math.atan2(b["cy"], b["cx"])),
                                         f"{src} box {int(b['instance'])}"))
        return cls(out, description=description)

    @classmethod
    def from_recording(cls, path: str, *, frames: Iterable[int] | None = None, every: int = 1, **kwargs
                       ) -> ObjectLibrary:
        """Objects of the labelled frames of a recording (``frames``: indices; default every ``every``-th); a
        simulated bag's frames get their labels from the simulator's truth beside it (``x.labels.npz``)."""
        from lidarmt.io import open_recording
        from lidarmt.lidar.specs import with_simulator_labels

        with open_recording(path) as raw:
            rec = with_simulator_labels(raw, path)  # a simulated bag: the truth written beside it
            idx = list(frames) if frames is not None else list(range(0, len(rec), max(1, every)))
            lib = cls.from_frames((rec[i] for i in idx), description=str(path), **kwargs)
        if not lib.objects:
            raise ObjectLibraryError(f"{path}: no labelled object with enough points to build an object library "
                                     "(it needs frames with boxes: KITTI labels, tracklets or simulator truth)")
        return lib

    def fingerprint(self) -> str:
        """SHA-256 over every object's points, box and class (for bundles: the same library or not)."""
        h = hashlib.sha256()
        for o in self.objects:
            h.update(np.ascontiguousarray(o.points).tobytes())
            h.update(np.array([o.length, o.width, o.height, o.meta, o.range_m, o.yaw_rel]).tobytes())
        return h.hexdigest()

    def pick(self, distance: float, rng: np.random.Generator) -> LibraryObject:
        """An object seen near ``distance`` (within 0.7x..1.5x, else the nearest ones), drawn with ``rng``."""
        ranges = np.array([o.range_m for o in self.objects])
        near = np.flatnonzero((ranges >= 0.7 * distance) & (ranges <= 1.5 * distance))
        if len(near) == 0:
            near = np.argsort(np.abs(ranges - distance), kind="stable")[:3]
        return self.objects[int(near[rng.integers(len(near))])]


def _cells(x: np.ndarray, y: np.ndarray, z: np.ndarray, profile: SensorProfile = HDL64
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ring, azimuth bin, range) of positions on a profile's beam grid, rings from elevation (nearest of the
    profile's elevations; the KITTI HDL-64E's 64 by default)."""
    h = np.hypot(x, y)
    el = np.degrees(np.arctan2(z, h))
    ring = profile.ring_of_elevation(el)
    bins = profile.azimuth_steps
    az = np.arctan2(y, x)
    abin = (np.floor((np.pi - az) / (2 * np.pi) * bins).astype(np.int64)) % bins
    return ring, abin, np.sqrt(h * h + z * z)


def _beam_offset(x: np.ndarray, y: np.ndarray, z: np.ndarray, ring: np.ndarray, profile: SensorProfile
                 ) -> np.ndarray:
    """|elevation - the ring's elevation|, degrees, of positions given their rings."""
    el = np.degrees(np.arctan2(z, np.hypot(x, y)))
    return np.abs(el - profile.elevations()[ring])


def _xyz(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (points["x"].astype(np.float64), points["y"].astype(np.float64), points["z"].astype(np.float64))


class Insert(Builtin):
    name = "insert"
    family = "object"
    summary = "a real object inserted on the road, occlusion by ray casting"
    params = (Param("distance_m", "m", 4.0, 60.0, "horizontal distance of the inserted object's centre"),)
    doc = ("Insertion of a real object (cut by its box from labelled real sweeps: the object library, "
           "TransformContext.library) at a free place on the road (inside TransformContext.roi when given) "
           "distance_m from the sensor, the face the sensor saw turned to it, bottom on the ground; occlusion by "
           "casting the sensor's beams (the profile's: the HDL-64E's 64 rings x 2083 azimuth bins by default): "
           "the object's points thinned to the nearest per beam (on another sensor, only points within 0.21 deg "
           "of one of its beams: re-cast on its rings), source points behind it (same ring, within one azimuth "
           "bin) dropped. The place and the object are drawn from the seed.")
    levels = {"light": {"distance_m": 35.0}, "moderate": {"distance_m": 20.0}, "heavy": {"distance_m": 10.0}}
    attempts = 300

    def _apply(self, frame, p, rng, context):
        lib = None if context is None else context.library
        if lib is None or len(lib) == 0:
            raise LidarTransformError("insert needs an object library (TransformContext.library, e.g. built with "
                                      "ObjectLibrary.from_recording on a labelled recording)")
        obj = lib.pick(p["distance_m"], rng)
        roi = None if context is None else context.roi
        place = self._find_place(frame, obj, p["distance_m"], rng, roi)
        info = {"distance_m": p["distance_m"], "object": obj.source, "class": obj.cls,
                "object_points": len(obj.points)}
        if place is None:
            return make_change(frame, np.arange(len(frame.points)), frame.points.copy(),
                               info={**info, "placed": False})
        cx, cy, ground, yaw = place
        c, s = math.cos(yaw), math.sin(yaw)
        lp = obj.points.astype(np.float64)
        ox = cx + c * lp[:, 0] - s * lp[:, 1]
        oy = cy + s * lp[:, 0] + c * lp[:, 1]
        oz = ground + lp[:, 2]
        prof = sensor_of(context)
        n_rings, n_bins = prof.rings, prof.azimuth_steps
        oring, obin, orng = _cells(ox, oy, oz, prof)
        on_grid = (orng > 0.9)
        if prof.name != HDL64.name:  # re-cast on another sensor's beams: only points near one of them
            on_grid &= (orng > prof.min_range_m) & (_beam_offset(ox, oy, oz, oring, prof) <= ON_BEAM_DEG)
        keep_obj = np.zeros(len(ox), dtype=bool)
        keep_obj[on_grid] = OK.thin_to_beams(oring[on_grid], obin[on_grid], orng[on_grid], n_rings, n_bins)
        names = frame.points.dtype.names or ()
        added = make_points(np.stack([ox, oy, oz], axis=1)[keep_obj], lp[keep_obj, 3].astype(np.float32),
                            ring=oring[keep_obj].astype(np.uint16) if "ring" in names else None)
        sring, sbin, srng = _cells(*_xyz(frame.points), prof)
        hidden = OK.occluded(sring, sbin, srng, oring[keep_obj], obin[keep_obj], orng[keep_obj], n_rings,
                             n_bins, 1, 0.3)
        box = np.zeros(1, dtype=BOX_DTYPE)
        box[0] = (cx, cy, ground + obj.height / 2, obj.length, obj.width, obj.height, yaw, obj.meta, -1)
        keep = ~hidden
        labels_boxes = None
        if frame.labels is not None:
            labels_boxes = np.concatenate([frame.labels.boxes, box])
        return make_change(frame, keep, frame.points[keep], added, inserted=box, boxes=labels_boxes,
                           info={**info, "placed": True, "x": cx, "y": cy, "yaw": yaw, "ground_z": ground,
                                 "n_object": int(len(added)), "n_occluded": int(np.count_nonzero(hidden))})

    def _find_place(self, frame, obj, distance, rng, roi):
        x, y, z = _xyz(frame.points)
        boxes = frame.labels.boxes if frame.labels is not None else np.zeros(0, dtype=BOX_DTYPE)
        grown = math.hypot(obj.length, obj.width) / 2 + FREE_MARGIN
        for _ in range(self.attempts):
            az = rng.uniform(-math.pi, math.pi)
            d = distance * rng.uniform(0.95, 1.05)
            cx, cy = d * math.cos(az), d * math.sin(az)
            yaw = az + obj.yaw_rel
            c, s = math.cos(yaw), math.sin(yaw)
            hl, hw = obj.length / 2 + FREE_MARGIN, obj.width / 2 + FREE_MARGIN
            corners = np.array([[cx + c * a - s * b, cy + s * a + c * b] for a in (-hl, hl) for b in (-hw, hw)])
            if roi is not None and not bool(np.all(roi.contains(np.vstack([corners, [[cx, cy]]])))):
                continue
            if len(boxes) and np.any(np.hypot(boxes["cx"] - cx, boxes["cy"] - cy)
                                     < grown + np.hypot(boxes["length"], boxes["width"]) / 2):
                continue
            near = np.hypot(x - cx, y - cy) < grown + 1.5
            if np.count_nonzero(near) < 5:
                continue  # nothing seen there: no ground to stand on (or hidden from the sensor)
            ground = float(np.percentile(z[near], 10))
            dx, dy = x - cx, y - cy
            lx, ly = c * dx + s * dy, -s * dx + c * dy
            inside = (np.abs(lx) <= hl) & (np.abs(ly) <= hw)
            if np.count_nonzero(inside & (z > ground + 0.3) & (z < ground + obj.height + 1.0)) > 3:
                continue  # something stands there
            if roi is None and np.count_nonzero(inside) and np.ptp(z[inside]) > 0.3:
                continue  # without a road area: flat ground only
            return cx, cy, ground, yaw
        return None


class Remove(Builtin):
    name = "remove"
    family = "object"
    summary = "labelled obstacles lose their points"
    params = (Param("count", "objects", 1.0, 10.0, "how many labelled obstacles lose their points",
                    integer=True),
              Param("max_distance_m", "m", 5.0, 120.0, "only obstacles whose centre lies this close"))
    doc = ("Removal of obstacles: count labelled boxes (the frame's ground truth) within max_distance_m, drawn "
           "from the seed among those holding points, lose every point inside the box (grown 10 cm, the ground "
           "below +0.2 m kept); the shadow they cast stays empty. A frame without labels is left unchanged.")
    levels = {"light": {"count": 1.0, "max_distance_m": 60.0}, "moderate": {"count": 2.0, "max_distance_m": 40.0},
              "heavy": {"count": 4.0, "max_distance_m": 30.0}}

    def _apply(self, frame, p, rng, context):
        n = len(frame.points)
        if frame.labels is None or len(frame.labels.boxes) == 0:
            return make_change(frame, np.arange(n), frame.points.copy(), info={"n_removed": 0,
                                                                                 "reason": "no labelled boxes"})
        boxes = frame.labels.boxes
        masks = []
        for i, b in enumerate(boxes):
            if math.hypot(b["cx"], b["cy"]) > p["max_distance_m"]:
                continue
            m = box_mask(frame.points, b)
            if np.any(m):
                masks.append((i, m))
        k = min(int(p["count"]), len(masks))
        chosen = sorted(rng.choice(len(masks), size=k, replace=False).tolist()) if k else []
        drop = np.zeros(n, dtype=bool)
        for j in chosen:
            drop |= masks[j][1]
        removed = boxes[[masks[j][0] for j in chosen]] if chosen else np.zeros(0, dtype=BOX_DTYPE)
        keep = ~drop
        return make_change(frame, keep, frame.points[keep], removed=removed,
                           info={"n_removed": len(chosen), "n_points_removed": int(np.count_nonzero(drop)),
                                 "classes": [MetaType(int(b["meta"])).obstacle_class.value for b in removed]})
