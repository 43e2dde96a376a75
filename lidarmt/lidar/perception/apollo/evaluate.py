"""Detection quality of the Apollo pipeline: per-class precision and recall in bird's-eye view.

One path for every labelled layout: box labels (KITTI object ``label_2``, KITTI raw tracklets, the simulator's
boxes) and point labels (SemanticKITTI: :mod:`lidarmt.io.semantickitti` turns each instance, the upper 16 bits
of a point's label, into a box fitted to its points, with ``point_instance`` naming the points).

Matching rule (stated once, used everywhere; :data:`MATCHING_RULE` is the sentence the reports print):

* A ground-truth box and a detection are compared by the **rotated-rectangle BEV IoU** (shapely polygons). A
  detection's rectangle is MinBox's box (centre, length, width, direction); a ground-truth box is its label
  (for point labels: the minimum-area rectangle of the instance's points).
* A pair *matches* when IoU >= 0.5 for cars and >= 0.3 for pedestrians, cyclists and unknown objects (the
  threshold of the ground truth's class; KITTI's usual 0.7/0.5 are for camera-fitted 3-D boxes, MinBox boxes are
  hull-fitted and looser).
* **Class-aware** (the precision/recall of a class): per frame, detections of class c are taken by decreasing
  score; each is matched to the unmatched ground truth of class c with the highest IoU above the threshold.
  Unmatched detections of class c are false positives, unmatched ground truths false negatives.
* **Class-agnostic recall** ("found"): a ground truth counts as found when any detection, of any class,
  overlaps it with IoU >= ``FOUND_IOU`` = 0.1 (one detection per ground truth, greedy by score). It separates
  "not detected at all" from "detected but classified differently or boxed loosely": MinBox fits the box to
  the visible points (often an L-shape), so a whole, correctly segmented car seen from one side can fall
  below IoU 0.5 with its full label box. For the fuzzer, what counts is that the obstacle exists.
* Ground truth that cannot be detected is *ignored*, not counted as missed: boxes with fewer than
  ``min_points`` points (point labels: points of the instance; boxes: points inside the box) in the ROI, or
  whose centre is outside the ROI or the evaluated area. A detection that overlaps an ignored ground truth is
  neither a true nor a false positive.
* **The labelled region.** Frames whose labels cover only part of the sweep carry it (``Labels.region``: KITTI's
  camera-2 view, from the calibration). Ground truth whose centre is outside it is ignored, and a detection
  whose centre is outside it is neither a true nor a false positive. Frames without a region are labelled all
  around; for KITTI frames read without a calibration, ``fov_deg`` gives a forward sector instead
  (|bearing| <= ``fov_deg``/2, x > 0). ``max_range`` (metres, horizontal distance of the centre) cuts the
  evaluated area to a disk in the same way (the "40 m" evaluation).
* Real datasets label no poles, signs or walls: there, UNKNOWN detections are never false positives
  (:func:`unknown_is_labelled`: only the simulator's labels name every unknown object).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lidarmt.types import (
    CLASS_ORDER,
    Frame,
    LabelledRegion,
    Labels,
    MetaType,
    Obstacle,
    ObstacleClass,
    Obstacles,
    Roi,
)

IOU_THRESHOLD: dict[ObstacleClass, float] = {
    ObstacleClass.CAR: 0.5,
    ObstacleClass.PEDESTRIAN: 0.3,
    ObstacleClass.CYCLIST: 0.3,
    ObstacleClass.UNKNOWN: 0.3,
}
#: overlap that makes a ground truth "found" by a detection of any class
FOUND_IOU = 0.1
#: half-side of the CNN grid: ground truth beyond it (in x or y) cannot be detected and is ignored
GRID_HALF_M = 60.0
#: recordings whose labels name cars, pedestrians and cyclists but no "unknown" objects (no poles, signs, walls)
UNKNOWN_UNLABELLED_FORMATS = ("kitti", "kitti-raw", "semantickitti")
#: recordings whose box labels cover only the front camera's view: without a region, ``fov_deg`` stands for it
CAMERA_VIEW_FORMATS = ("kitti", "kitti-raw")

#: the matching rule, as every report states it
MATCHING_RULE = (
    "a detection matches a ground-truth box of its class when their rotated bird's-eye-view IoU is >= 0.5 "
    "(cars) or >= 0.3 (pedestrians, cyclists, unknown), greedily by score; 'found' is class-agnostic at "
    "IoU >= 0.1. Boxes: the labels' boxes, or for point labels (SemanticKITTI instances) the minimum-area "
    "rectangle of the instance's points. Ground truth with < min_points points in the ROI, or whose centre is "
    "outside the ROI, the labelled region (Labels.region, e.g. KITTI's camera view) or the evaluated range, is "
    "ignored; a detection whose centre is outside the labelled region or range is neither a true nor a false "
    "positive")


# ------------------------------------------------------------------------------------------ geometry


def rect_corners(cx: float, cy: float, length: float, width: float, yaw: float) -> np.ndarray:
    """(4, 2) corners of a rotated rectangle, counter-clockwise."""
    c, s = math.cos(yaw), math.sin(yaw)
    hl, hw = length / 2.0, width / 2.0
    local = np.array([[hl, hw], [-hl, hw], [-hl, -hw], [hl, -hw]])
    rot = np.array([[c, -s], [s, c]])
    return local @ rot.T + np.array([cx, cy])


def box_polygon(box: Any) -> Any:
    """Shapely polygon of a ground-truth box (a BOX_DTYPE record)."""
    from shapely.geometry import Polygon

    return Polygon(rect_corners(float(box["cx"]), float(box["cy"]), float(box["length"]), float(box["width"]),
                                float(box["yaw"])))


def obstacle_polygon(ob: Obstacle) -> Any:
    """Shapely polygon of a detection's MinBox rectangle (falls back to its hull if the box is degenerate)."""
    from shapely.geometry import Polygon

    length, width = max(float(ob.length), 1e-3), max(float(ob.width), 1e-3)
    poly = Polygon(rect_corners(float(ob.center[0]), float(ob.center[1]), length, width, ob.heading))
    if not poly.is_valid or poly.area <= 0:
        poly = Polygon(np.asarray(ob.polygon)[:, :2]).convex_hull
    return poly


def bev_iou(a: Any, b: Any) -> float:
    """Intersection over union of two shapely polygons (0 when either is empty)."""
    if a.is_empty or b.is_empty:
        return 0.0
    inter = a.intersection(b).area
    union = a.area + b.area - inter
    return float(inter / union) if union > 0 else 0.0


def gt_class(meta: int) -> ObstacleClass:
    return MetaType(int(meta)).obstacle_class


# ------------------------------------------------------------------------------------------ matching


@dataclass(slots=True)
class ClassCounts:
    """True/false positives and negatives of one class, plus class-agnostic recall."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    found: int = 0  # ground truths overlapped by a detection of any class

    @property
    def gt(self) -> int:
        return self.tp + self.fn

    @property
    def det(self) -> int:
        return self.tp + self.fp

    @property
    def precision(self) -> float | None:
        return self.tp / self.det if self.det else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.gt if self.gt else None

    @property
    def found_recall(self) -> float | None:
        return self.found / self.gt if self.gt else None

    def add(self, other: ClassCounts) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        self.found += other.found

    def to_dict(self) -> dict[str, Any]:
        r = lambda v: None if v is None else round(v, 4)  # noqa: E731
        return {"gt": self.gt, "det": self.det, "tp": self.tp, "fp": self.fp, "fn": self.fn,
                "precision": r(self.precision), "recall": r(self.recall), "found": self.found,
                "found_recall": r(self.found_recall)}


@dataclass(slots=True)
class GroundTruth:
    """One ground-truth box to evaluate against: polygon, class, and whether it is ignored."""

    polygon: Any
    cls: ObstacleClass
    ignored: bool = False
    num_points: int = 0


def iou_matrix(dets: list[tuple[Any, ObstacleClass, float, bool]], gts: list[GroundTruth]) -> np.ndarray:
    """BEV IoU of every detection (rows; (polygon, class, score, counted) tuples) with every ground truth."""
    iou = np.zeros((len(dets), len(gts)))
    for i, (dp, *_rest) in enumerate(dets):
        for j, g in enumerate(gts):
            iou[i, j] = bev_iou(dp, g.polygon)
    return iou


def match_frame(
    gts: list[GroundTruth],
    dets: list[tuple[Any, ObstacleClass, float, bool]],
    *,
    thresholds: dict[ObstacleClass, float] | None = None,
    found_iou: float = FOUND_IOU,
    iou: np.ndarray | None = None,
) -> dict[ObstacleClass, ClassCounts]:
    """Counts of one frame. ``dets`` are (polygon, class, score, counted) tuples; a detection that is not
    ``counted`` (e.g. outside KITTI's camera view) can match but never becomes a false positive. ``iou``: the
    detections × ground truths IoU matrix when already known (:func:`iou_matrix`; the polygons are then unused)."""
    thr = thresholds or IOU_THRESHOLD
    counts = {c: ClassCounts() for c in CLASS_ORDER}
    iou = iou_matrix(dets, gts) if iou is None else np.asarray(iou, dtype=np.float64).reshape(len(dets), len(gts))
    order = sorted(range(len(dets)), key=lambda i: -dets[i][2])
    gthr = np.array([thr[g.cls] for g in gts]) if gts else np.zeros(0)

    # class-aware
    taken = np.zeros(len(gts), dtype=bool)
    for i in order:
        _p, cls, _s, counted = dets[i]
        cand = [(iou[i, j], j) for j in range(len(gts))
                if not taken[j] and gts[j].cls == cls and iou[i, j] >= gthr[j]]
        if cand:
            _, j = max(cand)
            taken[j] = True
            if not gts[j].ignored:
                counts[cls].tp += 1
            continue
        # overlapping an ignored box of any class, or not counted: neither TP nor FP
        overl_ignored = any(gts[j].ignored and iou[i, j] >= gthr[j] for j in range(len(gts)))
        if counted and not overl_ignored:
            counts[cls].fp += 1
    for j, g in enumerate(gts):
        if not taken[j] and not g.ignored:
            counts[g.cls].fn += 1

    # class-agnostic
    used = np.zeros(len(dets), dtype=bool)
    for j, g in enumerate(gts):
        if g.ignored:
            continue
        cand = [(iou[i, j], i) for i in order if not used[i] and iou[i, j] >= found_iou]
        if cand:
            _, i = max(cand)
            used[i] = True
            counts[g.cls].found += 1
    return counts


# ------------------------------------------------------------------------------------------ datasets


@dataclass(slots=True)
class EvalResult:
    """Per-class counts over a set of frames, with what was evaluated and how."""

    name: str
    frames: int = 0
    counts: dict[ObstacleClass, ClassCounts] = field(default_factory=lambda: {c: ClassCounts() for c in CLASS_ORDER})
    detections: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: the evaluated area: labelled regions seen (description -> frames), frames without one, the range cut
    regions: dict[str, int] = field(default_factory=dict)
    unregioned: int = 0
    region_sources: dict[str, str] = field(default_factory=dict)
    fov_deg: float | None = None
    max_range: float | None = None
    unknown_fp: set[bool] = field(default_factory=set)

    def note_area(self, region: LabelledRegion | None, fov_deg: float | None) -> None:
        """Count the labelled region (or its absence) of one evaluated frame."""
        if region is None:
            self.unregioned += 1
            self.fov_deg = fov_deg if fov_deg is not None else self.fov_deg
        else:  # the sector, not the file it came from (each KITTI object frame has its own calibration)
            key = LabelledRegion(region.azimuth_min, region.azimuth_max, region.max_range).describe()
            if region.source and key not in self.regions:
                self.region_sources[key] = region.source
            self.regions[key] = self.regions.get(key, 0) + 1

    def area(self) -> dict[str, Any]:
        """Where ground truth and detections were counted (the JSON's ``evaluated_area``)."""
        if self.regions:
            desc = "; ".join(f"{k} ({v} frame(s))" for k, v in sorted(self.regions.items())[:5])
            if len(self.regions) > 5:
                desc += f"; … {len(self.regions) - 5} more"
        else:
            desc = ""
        if self.unregioned:
            rest = (f"forward {self.fov_deg:g} deg sector (no labelled region in the frames)" if self.fov_deg
                    else "the whole sweep (labels cover all of it)")
            desc = (desc + "; " if desc else "") + f"{rest} ({self.unregioned} frame(s))"
        if self.max_range is not None:
            desc += f"; within {self.max_range:g} m of the sensor"
        desc += f"; inside the CNN grid (±{GRID_HALF_M:g} m)"
        return {"description": desc, "labelled_regions": dict(sorted(self.regions.items())),
                "region_sources": dict(sorted(self.region_sources.items())),
                "frames_without_region": self.unregioned, "fov_deg_fallback": self.fov_deg if self.unregioned else None,
                "max_range_m": self.max_range, "grid_half_m": GRID_HALF_M,
                "unknown_detections_counted": sorted(self.unknown_fp) == [True]}

    def add(self, frame_counts: dict[ObstacleClass, ClassCounts]) -> None:
        for c, v in frame_counts.items():
            self.counts[c].add(v)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "frames": self.frames, "detections": self.detections,
                "seconds": round(self.seconds, 2), "iou_thresholds": {c.value: t for c, t in IOU_THRESHOLD.items()},
                "found_iou": FOUND_IOU, "matching": MATCHING_RULE, "evaluated_area": self.area(),
                "classes": {c.value: self.counts[c].to_dict() for c in CLASS_ORDER}, "notes": self.notes}


def points_in_box(frame: Frame, box: Any) -> np.ndarray:
    """Boolean mask of the frame's points inside a box (rotated, z within the box)."""
    return _in_box(frame.points, box)


def _in_box(points: np.ndarray, box: Any) -> np.ndarray:
    x = points["x"].astype(np.float64) - float(box["cx"])
    y = points["y"].astype(np.float64) - float(box["cy"])
    z = points["z"].astype(np.float64) - float(box["cz"])
    c, s = math.cos(float(box["yaw"])), math.sin(float(box["yaw"]))
    u, v = x * c + y * s, -x * s + y * c
    return (np.abs(u) <= box["length"] / 2) & (np.abs(v) <= box["width"] / 2) & (np.abs(z) <= box["height"] / 2)


def unknown_is_labelled(frame: Frame) -> bool:
    """Whether the frame's labels name every "unknown" object (the simulator's do; KITTI and SemanticKITTI
    label no poles, signs or walls, so an UNKNOWN detection there is never a false positive)."""
    fmt = frame.provenance.format if frame.provenance is not None else ""
    return fmt not in UNKNOWN_UNLABELLED_FORMATS


def has_object_labels(labels: Labels | None) -> bool:
    """Whether ``labels`` say which objects the frame holds (boxes, per-point instances, or a labelled region:
    KITTI frames whose label file lists no object carry the region with no box). Road labels alone do not."""
    if labels is None:
        return False
    return len(labels.boxes) > 0 or labels.point_instance is not None or labels.region is not None


def in_area(x: float, y: float, *, region: LabelledRegion | None = None, fov_deg: float | None = None,
            max_range: float | None = None) -> bool:
    """Whether a sensor-frame position lies in the evaluated area: the labelled region (else the ``fov_deg``
    forward sector, when given) within ``max_range`` metres (when given)."""
    if max_range is not None and math.hypot(x, y) > max_range:
        return False
    if region is not None:
        return region.contains_point(x, y)
    if fov_deg is not None:
        return in_fov(x, y, fov_deg)
    return True


def frame_ground_truth(
    frame: Frame,
    roi: Roi,
    *,
    min_points: int = 5,
    max_range: float | None = None,
    fov_deg: float | None = None,
) -> list[GroundTruth]:
    """The frame's boxes as :class:`GroundTruth`, with ``ignored`` set for boxes that cannot be detected.

    Points per box come from ``labels.point_instance`` when present (simulator, SemanticKITTI), else from the
    points inside the box (KITTI). Only points in the ROI count. A box is ignored when it has fewer than
    ``min_points`` such points, or when its centre is outside the ROI, the CNN grid, the labelled region
    (``labels.region``; without one, the ``fov_deg`` sector when given) or ``max_range`` (when given).
    """
    lb = frame.labels
    if lb is None or len(lb.boxes) == 0:
        return []
    in_roi = np.zeros(len(frame), dtype=bool)
    in_roi[roi.indices(frame)] = True
    centres = np.c_[lb.boxes["cx"], lb.boxes["cy"]]
    centre_in = roi.contains(centres) if len(centres) else np.zeros(0, dtype=bool)
    out = []
    near = None
    for k, b in enumerate(lb.boxes):
        if lb.point_instance is not None and int(b["instance"]) >= 0:
            members = lb.point_instance == b["instance"]
        else:
            if near is None:  # the points near each box, once per frame: not boxes × points
                from lidarmt.io.tracklets import box_candidates

                near = box_candidates(frame.points, lb.boxes)
            members = np.zeros(len(frame), dtype=bool)
            members[near[k]] = _in_box(frame.points[near[k]], b)
        n = int(np.count_nonzero(members & in_roi))
        cx, cy = float(b["cx"]), float(b["cy"])
        ignored = (n < min_points or not bool(centre_in[k]) or max(abs(cx), abs(cy)) >= GRID_HALF_M
                   or not in_area(cx, cy, region=lb.region, fov_deg=fov_deg, max_range=max_range))
        out.append(GroundTruth(box_polygon(b), gt_class(int(b["meta"])), ignored, n))
    return out


def in_fov(x: float, y: float, fov_deg: float) -> bool:
    """Whether a sensor-frame position lies in a forward field of view of ``fov_deg`` degrees."""
    return x > 0 and abs(math.degrees(math.atan2(y, x))) <= fov_deg / 2


def evaluated_fov(frame: Frame, fov_deg: float | None) -> float | None:
    """The forward sector that stands for a labelled region: only for KITTI frames without one (SemanticKITTI
    and the simulator label all around)."""
    fmt = frame.provenance.format if frame.provenance is not None else ""
    return fov_deg if fmt in CAMERA_VIEW_FORMATS else None


def frame_detections(frame: Frame, obstacles: Obstacles, *, fov_deg: float | None = None,
                     max_range: float | None = None,
                     count_unknown_fp: bool | None = None) -> list[tuple[Any, ObstacleClass, float, bool]]:
    """A frame's detections as :func:`match_frame` takes them: (polygon, class, score, counted), where a
    detection whose centre is outside the evaluated area (``fov_deg`` as :func:`evaluated_fov` returns it), or
    an UNKNOWN one where the labels name no unknown objects, is not counted."""
    region = frame.labels.region if frame.labels is not None else None
    unknown_fp = unknown_is_labelled(frame) if count_unknown_fp is None else count_unknown_fp
    dets = []
    for ob in obstacles:
        counted = in_area(float(ob.center[0]), float(ob.center[1]), region=region, fov_deg=fov_deg,
                          max_range=max_range)
        if ob.cls == ObstacleClass.UNKNOWN and not unknown_fp:
            counted = False
        dets.append((obstacle_polygon(ob), ob.cls, float(ob.score), counted))
    return dets


def evaluate_frames(
    name: str,
    frames: Iterable[Frame],
    perception: Any,
    roi_of: Callable[[Frame], Roi],
    *,
    min_points: int = 5,
    fov_deg: float | None = None,
    max_range: float | None = None,
    count_unknown_fp: bool | None = None,
    on_frame: Callable[[Frame, Obstacles, dict[ObstacleClass, ClassCounts]], None] | None = None,
) -> EvalResult:
    """Run ``perception.detect(frame, roi_of(frame))`` on every frame and accumulate the counts.

    The evaluated area of a frame is its labelled region (``labels.region``; ``fov_deg``, when given, for KITTI
    frames without one) within ``max_range`` metres (when given). ``count_unknown_fp`` None: UNKNOWN detections
    are false positives only where the labels name unknown objects (:func:`unknown_is_labelled`)."""
    import time

    res = EvalResult(name)
    res.max_range = max_range
    t0 = time.perf_counter()
    for frame in frames:
        roi = roi_of(frame)
        obstacles = perception.detect(frame, roi)
        fov = evaluated_fov(frame, fov_deg)
        gts = frame_ground_truth(frame, roi, min_points=min_points, fov_deg=fov, max_range=max_range)
        region = frame.labels.region if frame.labels is not None else None
        res.note_area(region, fov)
        unknown_fp = unknown_is_labelled(frame) if count_unknown_fp is None else count_unknown_fp
        res.unknown_fp.add(bool(unknown_fp))
        dets = frame_detections(frame, obstacles, fov_deg=fov, max_range=max_range, count_unknown_fp=unknown_fp)
        fc = match_frame(gts, dets)
        res.add(fc)
        res.frames += 1
        res.detections += len(obstacles)
        if on_frame is not None:
            on_frame(frame, obstacles, fc)
    res.seconds = time.perf_counter() - t0
    return res


def labelled_frames(data: Any, rec: Any) -> Callable[[int], Frame]:
    """``frame(i)``: the recording's frame ``i`` with its ground truth, or an InputError (one line) when ``data``
    holds none.

    A simulated bag (``lidarmt simulate --out x.bag``) keeps its ground truth beside it in ``x.labels.npz``
    (:func:`lidarmt.lidar.sim.record.load_labels`), aligned point for point with its clouds; labelled .npz frames and
    KITTI folders carry theirs in the frames.
    """
    import dataclasses
    from pathlib import Path

    from lidarmt.errors import InputError

    data = Path(data)
    if data.is_file():
        from lidarmt.lidar.sim.record import labels_path, load_labels

        lab = labels_path(data)
        if lab.is_file():
            labels = load_labels(lab)
            if len(labels) != len(rec):
                raise InputError(f"{lab}: ground truth of {len(labels)} sweep(s) for the {len(rec)} point clouds of "
                                 f"{data}; simulate the bag and its labels again together")

            def frame(i: int):
                f = rec[i]
                lb = labels[i]
                if f.dropped or lb.point_meta is None or len(lb.point_meta) != len(f.points):
                    raise InputError(f"{lab}: sweep {i} labels {0 if lb.point_meta is None else len(lb.point_meta)} "
                                     f"points but {data} holds {len(f.points)} (+{f.dropped} dropped); the labels "
                                     "do not belong to this bag")
                return dataclasses.replace(f, labels=lb)

            return frame
    if len(rec) and rec[0].labels is None:
        beside = (f" and no {labels_path(data).name} beside it" if data.is_file() else "")
        raise InputError(f"--data {data}: its frames carry no ground truth{beside}; the evaluation needs labelled "
                         "frames (`lidarmt simulate --dataset DIR`, a bag from `lidarmt simulate --out` with its "
                         ".labels.npz, a KITTI object folder with label_2/ and calib/, a KITTI raw drive with its "
                         "tracklet_labels.xml, or a SemanticKITTI sequence with labels/)")
    return rec.__getitem__


# ------------------------------------------------------------------------------------------ lost obstacles


#: classes of labelled objects a lost obstacle can be: a real object (unknown labels, Tram/Misc, are not)
OBJECT_CLASSES = (ObstacleClass.CAR, ObstacleClass.PEDESTRIAN, ObstacleClass.CYCLIST)

#: how a campaign tells a lost labelled object from junk, as its reports state it
LABEL_MATCH_RULE = (
    "a lost obstacle is a LABELLED object when its MinBox rectangle overlaps a labelled car, pedestrian or "
    f"cyclist box whose centre lies in the labelled region with bird's-eye IoU >= {FOUND_IOU:g} (evaluate's "
    "class-agnostic 'found' rule; the box's class is the object's class; the best-overlapping box wins); "
    "otherwise it is UNLABELLED (junk, or an object the labels do not name: poles, walls) when its centre lies "
    "in the labelled region, and OUTSIDE the labels when it does not (KITTI labels only the front camera's view)")


def label_lost(frame: Frame, obstacles: Obstacles, indices: Iterable[int]) -> dict[int, dict[str, Any]] | None:
    """What the labels say of the source obstacles ``indices`` (:data:`LABEL_MATCH_RULE`), per index:
    ``{"label": "labelled", "label_class": "car", "label_iou": 0.42, "label_box": 3}`` (``label_box``: the index
    of the labelled box in ``frame.labels.boxes``), ``{"label": "unlabelled"}`` or ``{"label": "outside"}``. None when the frame's labels do not say which objects it holds
    (:func:`has_object_labels`)."""
    lb = frame.labels
    if not has_object_labels(lb):
        return None
    assert lb is not None
    region = lb.region
    gts = []
    for bi, b in enumerate(lb.boxes):
        cls = gt_class(int(b["meta"]))
        if cls not in OBJECT_CLASSES:
            continue
        if region is not None and not region.contains_point(float(b["cx"]), float(b["cy"])):
            continue
        gts.append((box_polygon(b), cls, float(b["cx"]), float(b["cy"]), 0.5 * math.hypot(b["length"], b["width"]),
                    bi))
    out: dict[int, dict[str, Any]] = {}
    for i in indices:
        ob = obstacles[i]
        x, y = float(ob.center[0]), float(ob.center[1])
        best: tuple[float, ObstacleClass, int] | None = None
        reach = 0.5 * math.hypot(float(ob.length), float(ob.width))
        poly = None
        for gp, cls, gx, gy, gr, bi in gts:
            if math.hypot(gx - x, gy - y) > gr + reach + 0.5:
                continue
            poly = poly if poly is not None else obstacle_polygon(ob)
            iou = bev_iou(poly, gp)
            if iou >= FOUND_IOU and (best is None or iou > best[0]):
                best = (iou, cls, bi)
        if best is not None:
            out[int(i)] = {"label": "labelled", "label_class": best[1].value, "label_iou": round(best[0], 4),
                           "label_box": int(best[2])}
        elif region is None or region.contains_point(x, y):
            out[int(i)] = {"label": "unlabelled"}
        else:
            out[int(i)] = {"label": "outside"}
    return out


# ------------------------------------------------------------------------------------------ ROIs


#: SemanticKITTI ids of the labelled ground that makes the ROI of a KITTI frame: road, parking, sidewalk,
#: other-ground (:data:`lidarmt.lidar.roi.query.GROUND_LABELS`, the one label ROI every command uses).
KITTI_ROI_IDS = (40, 44, 48, 49)


def labelled_area(
    frame: Frame,
    ids: Iterable[int] = KITTI_ROI_IDS,
    *,
    cell: float = 0.25,
    close_radius: float = 3.0,
    hole_area: float = 200.0,
    range: float = 70.0,  # noqa: A002
) -> np.ndarray:
    """Per point: does it lie (in x/y, any z) over the area covered by points labelled with ``ids``?

    The labels mark surface points only; the road *under* a car or a pedestrian is hidden by them and behind
    them. So the labelled points are rasterised (``cell`` metres), closed morphologically with a disk of
    ``close_radius`` metres, and enclosed holes smaller than ``hole_area`` m² are filled: what remains is the
    drivable area an HD map would give, and the points of objects standing on it are inside it. This is
    :class:`lidarmt.lidar.roi.query.LabelRoi`'s mask, asked about the frame's own points (all False without labels).
    """
    from lidarmt.lidar.roi.query import LabelRoi

    if not LabelRoi.has_labels(frame):
        return np.zeros(len(frame), dtype=bool)
    roi = LabelRoi(range=range, cell=cell, ids=tuple(ids), close_radius=close_radius, hole_area=hole_area)
    return roi.mask(frame).contains(frame.points)


def kitti_roi(frame: Frame) -> Roi:
    """ROI of a KITTI frame: the area covered by its road/parking/sidewalk/other-ground labels, as every
    command builds it (:class:`lidarmt.lidar.roi.query.LabelRoi`: an Apollo bitmap in the sensor frame)."""
    from lidarmt.lidar.roi.query import LabelRoi

    if not LabelRoi.has_labels(frame):
        from lidarmt.errors import InputError

        raise InputError(f"KITTI frame {frame.index} has no road_label file; the ROI needs its road labels")
    return LabelRoi().mask(frame)


def save_dataset_maps(dataset_dir: str, *, overwrite: bool = False) -> list[str]:
    """Fallback for datasets made before ``generate_dataset`` wrote maps (``dataset.json`` format
    ``lidarmt-sim-dataset/1``): write the HD map of every town the dataset's drives use to
    ``<dataset>/maps/town_<seed>/`` (the layout that newer datasets have and :class:`SimRoi` reads).

    The maps are rebuilt from the town seeds with the *current* simulator, so they match the frames only if
    the town generator has not changed since the dataset was made: run it right after generating such a
    dataset, not later. A town whose folder already holds ``base_map.bin`` (for instance one written by
    ``generate_dataset`` itself) is left alone unless ``overwrite``. Returns the folders written.
    """
    import json
    from pathlib import Path

    from lidarmt.lidar.sim.dataset import MAP_DIR
    from lidarmt.lidar.sim.record import write_town_map
    from lidarmt.lidar.sim.town import build_town

    d = json.loads((Path(dataset_dir) / "dataset.json").read_text())
    out = []
    for town in sorted({int(drv["town_seed"]) for drv in d.get("drives", [])}):
        folder = Path(dataset_dir) / MAP_DIR.format(seed=town)
        if (folder / "base_map.bin").is_file() and not overwrite:
            continue
        write_town_map(build_town(town), folder, name=f"lidarmt_town_{town}", overwrite=True)
        out.append(str(folder))
    return out


def label_area_roi(frame: Frame) -> Roi:
    """ROI of the area covered by a frame's road/parking/sidewalk labels (:func:`labelled_area`); the whole
    grid for a frame without such labels."""
    from lidarmt.lidar.roi.query import LabelRoi

    if not LabelRoi.has_labels(frame):
        return GridRoi()
    return LabelRoi().mask(frame)


class GridRoi:
    """The whole ±``range`` metre square of the CNN grid as ROI (for frames that carry neither a map nor road
    labels: every point the CNN sees may be reported)."""

    empty = False

    def __init__(self, range_: float = 60.0) -> None:
        self.range = float(range_)

    def contains(self, xy: np.ndarray) -> np.ndarray:
        if getattr(xy, "dtype", None) is not None and xy.dtype.names:
            x, y = np.asarray(xy["x"], dtype=np.float64), np.asarray(xy["y"], dtype=np.float64)
        else:
            a = np.asarray(xy, dtype=np.float64)
            x, y = a[:, 0], a[:, 1]
        return (np.abs(x) < self.range) & (np.abs(y) < self.range)

    def indices(self, frame: Frame) -> np.ndarray:
        return np.flatnonzero(self.contains(frame.points)).astype(np.int64)

    def __repr__(self) -> str:
        return f"GridRoi(±{self.range:g} m)"


class SimRoi:
    """ROI of the simulator's dataset frames: Apollo's HDMap ROI on the map of the frame's town.

    A dataset folder's ``dataset.json`` says which town (seed) each frame was recorded in (its drives' ``frames``
    ranges). The town's HD map is read from the folder the drive names (``map``, written by
    :func:`lidarmt.lidar.sim.generate_dataset`), else from ``<dataset>/maps/town_<seed>/`` (older datasets after
    :func:`save_dataset_maps`), so the ROI stays the one the frames were simulated with even if the simulator
    changes later; only when neither exists is the town rebuilt from its seed (:func:`lidarmt.lidar.sim.town.build_town`,
    correct only while the town generator is unchanged). The map is queried with the frame's pose through
    :class:`lidarmt.lidar.roi.query.HDMapRoi`, as the fuzzer does for a recording. Frames without that information
    fall back to the area of their drivable-surface labels (:func:`labelled_area`), else the whole grid.
    """

    def __init__(self, dataset_dir: str | None = None) -> None:
        from pathlib import Path

        self.kind = "labels"
        self._town_of: dict[int, int] = {}
        self._map_of: dict[int, Path] = {}  # town seed -> map folder named by dataset.json
        self._rois: dict[int, Any] = {}
        self._maps_dir: Path | None = None
        if dataset_dir is not None:
            import json

            self._maps_dir = Path(dataset_dir) / "maps"
            meta = Path(dataset_dir) / "dataset.json"
            if meta.is_file():
                d = json.loads(meta.read_text())
                for drv in d.get("drives", []):
                    first, last = drv["frames"]
                    town = int(drv["town_seed"])
                    for i in range(int(first), int(last) + 1):
                        self._town_of[i] = town
                    if drv.get("map"):
                        self._map_of[town] = Path(dataset_dir) / drv["map"]
                self.kind = "hdmap"

    def town_of(self, index: int) -> int | None:
        """Town seed of the dataset's frame ``index`` (None when dataset.json does not list it)."""
        return self._town_of.get(int(index))

    def map_dir(self, town: int) -> Any:
        """The saved map folder (a Path holding ``base_map.bin``) of a town, or None when the dataset has none and
        the map would be rebuilt from the seed."""
        for cand in (self._map_of.get(town), None if self._maps_dir is None else self._maps_dir / f"town_{town}"):
            if cand is not None and (cand / "base_map.bin").is_file():
                return cand
        return None

    def describe(self) -> str:
        if self.kind == "hdmap":
            towns = sorted(set(self._town_of.values()))
            saved = sum(self.map_dir(t) is not None for t in towns)
            src = ("the maps saved with the dataset" if saved == len(towns) else
                   f"the maps saved with the dataset for {saved} of {len(towns)} towns, the others rebuilt from "
                   "their seeds in dataset.json with the current simulator")
            return ("ROI: Apollo's HDMap ROI (lidarmt.lidar.roi HDMapRoi, range 70 m, cell 0.25 m) on the HD map of each "
                    f"frame's simulated town ({src})")
        return ("ROI: the area covered by the frames' road/parking/sidewalk/other-ground ground-truth labels "
                "(morphologically closed, LabelRoi)")

    def hdmap(self, town: int) -> Any:
        """The HD map of a town: loaded from the dataset when saved there, else rebuilt from its seed."""
        saved = self.map_dir(town)
        if saved is not None:
            from lidarmt.lidar.roi import load_map

            return load_map(saved)
        from lidarmt.lidar.sim.town import build_town

        return build_town(town).hdmap()

    def __call__(self, frame: Frame) -> Roi:
        town = self._town_of.get(frame.index) if frame.pose is not None else None
        if town is not None:
            if town not in self._rois:
                from lidarmt.lidar.roi.query import HDMapRoi

                self._rois.clear()  # one town at a time
                self._rois[town] = HDMapRoi(self.hdmap(town))
            return self._rois[town].frame_mask(frame)
        return label_area_roi(frame)


# ------------------------------------------------------------------------------------------ the centre rule, intervals

#: metres a labelled box is grown by (each side, BEV) for the centre rule
CENTRE_GROW_M = 0.5


def centre_matrix(dets: list[tuple[Any, ObstacleClass, float, bool]], gts: list[GroundTruth], *,
                  grow: float = CENTRE_GROW_M) -> np.ndarray:
    """The *centre rule* as a detections × ground truths matrix of 1.0 / 0.0 (1: the detection's centre, the
    centre of MinBox's rectangle, lies inside the ground truth's BEV box grown by ``grow`` metres on every side).

    Given to :func:`match_frame` as ``iou`` (any threshold in (0, 1]), it counts a detection as a true positive
    when its centre lies in a labelled box of its class: the scorer of issue 32, which does not depend on how well
    MinBox's rectangle of the visible points overlaps a full-extent label box."""
    from shapely.geometry import Point

    out = np.zeros((len(dets), len(gts)))
    grown = [g.polygon.buffer(grow, join_style=2) for g in gts]
    for i, (dp, *_rest) in enumerate(dets):
        c = dp.centroid
        pt = Point(c.x, c.y)
        for j, gp in enumerate(grown):
            out[i, j] = 1.0 if gp.covers(pt) else 0.0
    return out


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """Wilson score interval (95 % by default) of a proportion k / n; None when n == 0. It treats the n trials
    as independent: detections and boxes of one sweep or sequence are not, so it is narrower than the truth when
    the errors cluster (:func:`cluster_bootstrap` resamples whole frames or sequences instead)."""
    if n <= 0:
        return None
    p = k / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def cluster_bootstrap(num: np.ndarray, den: np.ndarray, *, resamples: int = 2000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a pooled ratio sum(num) / sum(den) when the data come in clusters
    (``num[k]``, ``den[k]``: cluster k's counts, e.g. one SemanticKITTI sequence's true positives and ground
    truths): whole clusters are drawn with replacement, so errors that cluster (one street, one odd sweep) widen
    the interval as they should. Resamples whose denominator is 0 are dropped; None when every one is, or when
    there are fewer than 2 clusters."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    if len(num) < 2 or den.sum() <= 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(resamples, len(num)))
    d = den[idx].sum(axis=1)
    ok = d > 0
    if not ok.any():
        return None
    r = num[idx].sum(axis=1)[ok] / d[ok]
    a = (1.0 - level) / 2
    return float(np.quantile(r, a)), float(np.quantile(r, 1 - a))
