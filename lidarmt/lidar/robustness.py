"""Detection quality under corruption, as the robustness literature reads it: AP per corruption × severity, then
CE/mCE against a baseline module and RR/mRR against the module's own clean score (Robo3D, Kong et al., ICCV 2023).

A campaign kind of the engine (``lidar-robustness``; ``lidarmt robustness``). The unit of work is one labelled
source frame; a key is ``(frame, module, corruption, level)``, where corruption 0 is the clean frame (one level)
and corruption ``c >= 1`` is ``corruptions[c-1]`` at one of its levels. Each corrupted sweep is made once per
frame and shared by every module; its seed is the LiDAR campaigns' (:func:`lidarmt.lidar.campaign.transform_seed`
with trial 0), so ``fog`` at ``heavy`` on frame 3 is the same sweep here and in ``lidarmt fuzz --transforms``.

**Ground truth is the clean frame's** (:func:`lidarmt.lidar.perception.apollo.evaluate.frame_ground_truth`: its
boxes, the ignore rules — too few points in the ROI, centre outside the ROI, the labelled region, the range or the
CNN grid — all decided on the clean sweep and its ROI), so every corruption is scored against the same objects
and the same denominators, as KITTI-C and Robo3D score their corrupted copies against the original annotations.
The module sees the corrupted sweep with the clean frame's ROI (moved with the sweep when a transformation moves
it). Transformations that move or change the objects themselves (families ``object`` and ``alignment``) are
refused: the clean labels do not describe their follow-ups; two kinds are scored when named. The LiDAR-camera
misalignments (``spatial-misalignment``, ``temporal-misalignment``: the truth stays, the sweep arrives misaligned
with it; the frames need a camera) against the clean truth. Dong et al.'s object-level corruptions
(``object-shear``, ``object-scale``, ``object-rotate``: each labelled object deformed in place) against the
follow-up's boxes, the same objects as changed, with the clean frame's classes and ignore rules (Dong et al. score
them against the unchanged annotations; a box that no longer fits its points would count against the module).

**Journal records** hold raw facts: the detections (class, score, whether counted: centre inside the evaluated
area, as ``lidarmt evaluate`` decides it), the ground truths (class, ignored) and their BEV IoU matrix (nonzero
entries, rounded to 1e-6). Everything else is computed when the journal is folded (:class:`RobustnessTally`):

* **AP**: BEV AP|R40 (40 recall points, Simonelli et al. 2019; :func:`lidarmt.lidar.ap.interpolated_ap`, which
  also gives AP|R11) per class (car, pedestrian, cyclist) at three sets of IoU thresholds (:data:`IOU_SETS`): the
  project's (0.5 car, 0.3 pedestrian and cyclist: MinBox boxes are hull-fitted, ``evaluate``'s rule), KITTI's
  (0.7 / 0.5 / 0.5) and the "found" overlap (0.1 for every class). A class's AP is computed over the frames of
  the cell sorted by index (so a resumed journal gives the same ties, hence the same AP); the columns of a class's
  IoU matrix are its own ground truths plus the ignored ground truths of the other classes (a detection whose
  best overlap is an ignored box is neither a true nor a false positive, as in ``evaluate``).
* **Operating point**: precision, recall and class-agnostic "found" recall of the module's own output, counted by
  :func:`lidarmt.lidar.perception.apollo.evaluate.match_frame` (the one matching rule of ``lidarmt evaluate``).
* A failed call (crash, timeout, or the transformation's own failure) counts as a frame without detections and
  is reported.

**The scores** (:func:`corruption_error`, :func:`resilience_rate`), exactly as Robo3D defines them, with AP as a
fraction: CE_i = Σ_l (1 − AP_{i,l}) / Σ_l (1 − AP^{base}_{i,l}), mCE = mean_i CE_i; RR_i = Σ_l AP_{i,l} /
(L · AP_clean), mRR = mean_i RR_i (L = 3 levels: light, moderate, heavy); both printed in percent. The headline
AP is the mean over the classes that have ground truth on the clean frames (car, pedestrian, cyclist) at the
project's thresholds; the JSON holds CE and RR per class and threshold set as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, failure, pair_record
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.engine.journal import JOURNAL_NAME
from lidarmt.engine.tally import KeyedTally
from lidarmt.lidar.campaign import LEVEL_NAMES, LidarTransformRef, transform_seed
from lidarmt.lidar.sensors import sensor_record
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec, build_roi_provider, build_sut, open_source
from lidarmt.types import ObstacleClass

KIND = "lidar-robustness"
OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "report.html", "table.txt",
         "robustness.png")
CLEAN = "clean"
#: the classes scored (the literature's three)
CLASSES = ("car", "pedestrian", "cyclist")
#: IoU thresholds per class of each set AP is computed at (BEV IoU of rotated rectangles)
IOU_SETS: dict[str, dict[str, float]] = {
    "project": {"car": 0.5, "pedestrian": 0.3, "cyclist": 0.3},
    "kitti": {"car": 0.7, "pedestrian": 0.5, "cyclist": 0.5},
    "found": {"car": 0.1, "pedestrian": 0.1, "cyclist": 0.1},
}
HEADLINE_SET = "project"
MEAN = "mean"
#: transformation families whose follow-ups the clean labels still describe
SCORED_FAMILIES = ("weather", "sensor", "motion")
ROBO3D_REF = "Kong et al., Robo3D: Towards Robust and Reliable 3D Perception against Corruptions, ICCV 2023"


# ----------------------------------------------------------------------------------------------- the scores


def corruption_error(ap: Sequence[float], ap_base: Sequence[float]) -> float | None:
    """Robo3D's CE_i in percent from APs in percent (one per level): Σ(1 − AP) / Σ(1 − AP_base) × 100; None
    when the baseline is perfect at every level (nothing to compare with)."""
    if len(ap) != len(ap_base):
        raise ValueError(f"{len(ap)} levels against the baseline's {len(ap_base)}")
    den = sum(100.0 - float(b) for b in ap_base)
    if den <= 0:
        return None
    return 100.0 * sum(100.0 - float(a) for a in ap) / den


def resilience_rate(ap: Sequence[float], ap_clean: float) -> float | None:
    """Robo3D's RR_i in percent from APs in percent: Σ AP / (L · AP_clean) × 100; None when the clean AP is 0."""
    if not ap or not float(ap_clean) > 0:
        return None
    return 100.0 * sum(float(a) for a in ap) / (len(ap) * float(ap_clean))


def mean_of(values: Sequence[float | None]) -> float | None:
    """mCE / mRR: the mean over the corruptions (None when any is undefined, so a mean never hides one)."""
    if not values or any(v is None for v in values):
        return None
    return float(sum(values)) / len(values)  # type: ignore[arg-type]


def followup_truth(gts: list, follow: Any) -> list:
    """The clean frame's ground truths with each box replaced by the follow-up's box of the same object (an
    object-level corruption changes every labelled box in place, one for one, in label order): classes, ignore
    flags and point counts stay the clean frame's, so every corruption keeps the same denominators."""
    import dataclasses

    from lidarmt.lidar.perception.apollo.evaluate import box_polygon

    boxes = follow.labels.boxes if follow.labels is not None else []
    if len(boxes) != len(gts):
        raise RuntimeError(f"the follow-up has {len(boxes)} labelled boxes for the clean frame's {len(gts)}: an "
                           "object-level corruption must change each box in place")
    return [dataclasses.replace(g, polygon=box_polygon(b)) for g, b in zip(gts, boxes, strict=True)]


# ----------------------------------------------------------------------------------------------- configuration


def corruption_refs(names: Sequence[str], levels: Sequence[str] = LEVEL_NAMES) -> tuple[LidarTransformRef, ...]:
    """The corruptions (weather, sensor and motion transformations, and the LiDAR-camera misalignments, which
    leave the objects where they were) at the named ``levels``; the other object and alignment transformations
    are refused with one line."""
    from lidarmt.lidar.transforms.base import resolve_params
    from lidarmt.lidar.transforms.registry import get_transform

    if not names:
        raise FuzzArgumentError("--transforms: give at least one corruption (lidarmt transforms lists them)")
    refs = []
    for name in names:
        t = get_transform(name)
        if t.family not in SCORED_FAMILIES and not (getattr(t, "clean_labels_hold", False)
                                                    or getattr(t, "followup_labels_hold", False)):
            raise FuzzArgumentError(
                f"--transforms {name}: {t.family} transformations move or change the objects, so the clean "
                f"frame's labels do not describe their follow-ups; robustness scores {', '.join(SCORED_FAMILIES)} "
                "transformations (lidarmt fuzz --transforms judges the others by their relations)")
        params = tuple(resolve_params(t, lv) for lv in levels)
        if not all(params):
            raise FuzzArgumentError(f"--transforms {name}: it has no levels to score")
        refs.append(LidarTransformRef(t.name, tuple(levels), params, "robustness"))
    if len({r.name for r in refs}) != len(refs):
        raise FuzzArgumentError("--transforms: a transformation is named twice")
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class RobustnessConfig:
    """Everything that determines a robustness campaign's records (the baseline module does not: it is applied
    when the journal is folded)."""

    source: SourceSpec
    roi: RoiSpec
    modules: tuple[str, ...]  # names the tables print
    suts: tuple[SutSpec, ...]
    corruptions: tuple[LidarTransformRef, ...]
    frames: tuple[int, ...]
    seed: int = 0
    min_points: int = 5
    fov_deg: float = 82.0
    max_range: float | None = None
    timeout: float | None = None
    sensor: str = "hdl64"  # the sensor profile the corruptions model (lidarmt.lidar.sensors)

    kind: ClassVar[str] = KIND
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        from lidarmt.lidar.sensors import get_sensor

        object.__setattr__(self, "sensor", get_sensor(self.sensor).name)  # an unknown name: one line
        if not self.suts or len(self.suts) != len(self.modules):
            raise FuzzArgumentError("--sut: give at least one perception module")
        if len(set(self.modules)) != len(self.modules):
            raise FuzzArgumentError(f"--sut {','.join(self.modules)}: a module is named twice")
        if not self.corruptions:
            raise FuzzArgumentError("--transforms: give at least one corruption")
        if self.seed < 0:
            raise FuzzArgumentError(f"--seed {self.seed}: give a non-negative integer")
        if self.min_points < 0:
            raise FuzzArgumentError(f"--min-points {self.min_points}: give 0 or more")
        if not (math.isfinite(self.fov_deg) and 0 < self.fov_deg <= 360):
            raise FuzzArgumentError(f"--fov {self.fov_deg}: give degrees in (0, 360]")
        if self.max_range is not None and not (math.isfinite(self.max_range) and self.max_range > 0):
            raise FuzzArgumentError(f"--max-range {self.max_range}: give a positive number of metres")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise FuzzArgumentError(f"--timeout {self.timeout}: give a positive number of seconds")

    @property
    def items(self) -> tuple[int, ...]:
        return self.frames

    def settings(self) -> list[tuple[int, int]]:
        """(corruption, level) of every setting a frame is perceived under, the clean frame (0, 0) first."""
        return [(0, 0)] + [(c + 1, lv) for c, t in enumerate(self.corruptions) for lv in range(len(t.levels))]

    def corruption_name(self, c: int) -> str:
        return CLEAN if c == 0 else self.corruptions[c - 1].name

    def level_name(self, c: int, lv: int) -> str:
        return CLEAN if c == 0 else self.corruptions[c - 1].levels[lv]

    @property
    def per_frame(self) -> int:
        return len(self.settings()) * len(self.modules)

    @property
    def total(self) -> int:
        return len(self.frames) * self.per_frame

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, m, c, lv) for c, lv in self.settings() for m in range(len(self.modules))]

    def key_fields(self, key: Key) -> dict[str, Any]:
        f, m, c, lv = key
        return {"key": list(key), "frame": f, "module": self.modules[m], "corruption": self.corruption_name(c),
                "level": self.level_name(c, lv)}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        f, m, c, lv = key
        return f"{self.modules[m]}-{self.corruption_name(c)}-{self.level_name(c, lv)}-f{f:06d}"

    def seed_of(self, key: Key) -> int:
        f, _m, c, lv = key
        return transform_seed(self.seed, f, self.corruption_name(c), lv, 0)

    def new_tally(self) -> RobustnessTally:
        return RobustnessTally(self)

    def evaluator(self, *, enforce_timeout: bool = True) -> RobustnessEvaluator:
        return RobustnessEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        """Bytes one worker holds: the first Apollo module (about 850 MB measured, mostly torch) and about
        300 MB for each further one, plus a frame's corrupted sweeps."""
        return (1000 + 300 * (len(self.modules) - 1)) * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_dict(), "roi": self.roi.to_dict(),
                "modules": list(self.modules), "suts": [s.to_dict() for s in self.suts],
                "corruptions": [t.to_dict() for t in self.corruptions], "frames": list(self.frames),
                "seed": self.seed, "min_points": self.min_points, "fov_deg": self.fov_deg,
                "max_range": self.max_range, "timeout": self.timeout, **sensor_record(self.sensor)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RobustnessConfig:
        return cls(SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]),
                   tuple(str(m) for m in d["modules"]), tuple(SutSpec.from_dict(s) for s in d["suts"]),
                   tuple(LidarTransformRef.from_dict(t) for t in d["corruptions"]),
                   tuple(int(f) for f in d["frames"]), int(d["seed"]), int(d["min_points"]), float(d["fov_deg"]),
                   None if d.get("max_range") is None else float(d["max_range"]), d.get("timeout"),
                   sensor=str(d.get("sensor", "hdl64")))


# ----------------------------------------------------------------------------------------------- one process


class RobustnessEvaluator(EvaluatorBase):
    """Builds the recording (with its labels), the ROI provider, every module and the corruptions; perceives a
    frame clean and under each corruption and records the raw facts."""

    what = "perception"

    def __init__(self, config: RobustnessConfig, *, enforce_timeout: bool = True, trust_code: bool = True,
                 origin: Any = None) -> None:
        from lidarmt.lidar.perception.apollo.evaluate import labelled_frames
        from lidarmt.lidar.transforms.registry import get_transform

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.suts = [build_sut(s, origin=origin, trust_code=trust_code) for s in config.suts]
        self.rois = build_roi_provider(config.roi, origin=origin, trust_code=trust_code)
        self.transforms = [get_transform(t.name) for t in config.corruptions]
        self.source = open_source(config.source)
        self.frame_at = labelled_frames(config.source.path, self.source)  # no labels: one line, now

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        from lidarmt.lidar.changes import follow_roi
        from lidarmt.lidar.perception.apollo.evaluate import evaluated_fov, frame_ground_truth
        from lidarmt.lidar.transforms.base import TransformContext

        cfg = self.config
        frame = self.frame_at(index)
        roi = self.rois.roi_for(frame)
        fov = evaluated_fov(frame, cfg.fov_deg)
        gts = frame_ground_truth(frame, roi, min_points=cfg.min_points, fov_deg=fov, max_range=cfg.max_range)
        gt_rows = [[g.cls.value, bool(g.ignored)] for g in gts]
        groups: dict[tuple[int, int], list[Key]] = {}
        for key in keys:
            groups.setdefault((key[2], key[3]), []).append(key)
        for (c, lv), group in sorted(groups.items()):
            follow, froi, t_transform = frame, roi, 0.0
            if c > 0:
                t0 = time.perf_counter()
                try:
                    change = self.transforms[c - 1].apply(frame, dict(cfg.corruptions[c - 1].params[lv]),
                                                          seed=cfg.seed_of(group[0]),
                                                          context=TransformContext(roi=roi, sensor=cfg.sensor,
                                                                                   frame_at=self.frame_at))
                except Exception as err:  # the transformation's own failure: no sweep for any module
                    if getattr(err, "is_user_error", False):
                        raise
                    for key in group:
                        emit("pair", pair_record(cfg, key, "crash", "transform", gts=gt_rows,
                                                 error=f"transformation failed: {type(err).__name__}: {err}",
                                                 traceback=failure(err)["traceback"]))
                    continue
                follow, froi = change.frame, follow_roi(roi, change)
                t_transform = time.perf_counter() - t0
            truth = gts
            if c > 0 and getattr(self.transforms[c - 1], "followup_labels_hold", False):
                truth = followup_truth(gts, follow)
            for key in group:
                emit("pair", self._perceive(key, frame, follow, froi, truth, gt_rows, fov, t_transform))

    def _perceive(self, key: Key, frame: Any, follow: Any, roi: Any, gts: list, gt_rows: list, fov: float | None,
                  t_transform: float) -> dict[str, Any]:
        from lidarmt.lidar.perception.apollo.evaluate import frame_detections, iou_matrix
        from lidarmt.lidar.perception.guard import guarded_detect

        cfg = self.config
        stage = "source" if key[2] == 0 else "follow"
        t0 = time.perf_counter()
        try:
            obs = self.call(guarded_detect, self.suts[key[1]], follow, roi, keys=key, stage=stage)
        except Exception as err:
            fail = failure(err)
            return pair_record(cfg, key, fail.pop("status"), stage, gts=gt_rows, **fail)
        dt = time.perf_counter() - t0
        # the evaluated area and UNKNOWN rule are the clean frame's (its labels and format)
        dets = frame_detections(frame, obs, fov_deg=fov, max_range=cfg.max_range)
        iou = iou_matrix(dets, gts)
        nz = np.argwhere(iou > 0)
        return pair_record(cfg, key, "ok", stage, gts=gt_rows,
                           dets=[[cls.value, round(float(score), 6), bool(counted)] for _p, cls, score, counted in dets],
                           iou=[[int(i), int(j), round(float(iou[i, j]), 6)] for i, j in nz],
                           points=len(follow), sut_s=round(dt, 6), transform_s=round(t_transform, 6))

    def make_bundle(self, key: Key, out_dir: Any, **opts: Any) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError("robustness campaigns write no bug bundles")


# ----------------------------------------------------------------------------------------------- fold


@dataclass(slots=True)
class _FrameFacts:
    frame: int
    dets: list[tuple[str, float, bool]]
    gts: list[tuple[str, bool]]
    iou: np.ndarray  # dets × gts


def _facts(rec: Mapping[str, Any]) -> _FrameFacts:
    gts = [(str(c), bool(ign)) for c, ign in rec.get("gts") or []]
    dets = [(str(c), float(s), bool(k)) for c, s, k in (rec.get("dets") or [])] if rec["status"] == "ok" else []
    iou = np.zeros((len(dets), len(gts)))
    for i, j, v in (rec.get("iou") or []) if dets else []:
        iou[int(i), int(j)] = float(v)
    return _FrameFacts(int(rec["key"][0]), dets, gts, iou)


def class_scores(facts: _FrameFacts, cls: str) -> Any:
    """One frame's :class:`lidarmt.lidar.ap.FrameScores` of class ``cls``: its detections of that class against
    its ground truths of that class and the ignored ground truths of the others (see the module docstring)."""
    from lidarmt.lidar.ap import FrameScores

    rows = [i for i, d in enumerate(facts.dets) if d[0] == cls]
    cols = [j for j, g in enumerate(facts.gts) if g[0] == cls or g[1]]
    return FrameScores(facts.iou[np.ix_(rows, cols)] if rows and cols else np.zeros((len(rows), len(cols))),
                       np.array([facts.dets[i][1] for i in rows], dtype=np.float64),
                       gt_ignored=np.array([facts.gts[j][1] for j in cols], dtype=bool),
                       det_ignored=np.array([not facts.dets[i][2] for i in rows], dtype=bool))


def operating_point(facts: _FrameFacts) -> dict[ObstacleClass, Any]:
    """The module's own output counted by ``evaluate``'s :func:`match_frame` (precision, recall, found)."""
    from lidarmt.lidar.perception.apollo.evaluate import GroundTruth, match_frame

    gts = [GroundTruth(None, ObstacleClass(c), ign) for c, ign in facts.gts]
    dets = [(None, ObstacleClass(c), s, k) for c, s, k in facts.dets]
    return match_frame(gts, dets, iou=facts.iou)


class RobustnessTally(KeyedTally):
    """Per (module, corruption, level): the frames' raw facts, crashes and timeouts; AP and counts on demand."""

    def __init__(self, config: RobustnessConfig) -> None:
        super().__init__()
        self.config = config
        self.cells: dict[tuple[int, int, int], list[_FrameFacts]] = {}
        self.failures: dict[tuple[int, int, int], dict[str, int]] = {}

    def _add(self, key: tuple[int, ...], rec: Any) -> None:
        _f, m, c, lv = key
        cell = (m, c, lv)
        self.cells.setdefault(cell, []).append(_facts(rec))
        if rec["status"] != "ok":
            fails = self.failures.setdefault(cell, {"crashes": 0, "timeouts": 0})
            fails["timeouts" if rec["status"] == "timeout" else "crashes"] += 1

    def cell_dict(self, m: int, c: int, lv: int) -> dict[str, Any]:
        """AP (AP|R40 and AP|R11 per threshold set), counts at the operating point, per class, of one cell."""
        from lidarmt.lidar.ap import interpolated_ap
        from lidarmt.lidar.perception.apollo.evaluate import ClassCounts

        frames = sorted(self.cells.get((m, c, lv), []), key=lambda f: f.frame)
        counts = {cls: ClassCounts() for cls in CLASSES}
        for fr in frames:
            for oc, k in operating_point(fr).items():
                if oc.value in counts:
                    counts[oc.value].add(k)
        classes: dict[str, Any] = {}
        for cls in CLASSES:
            per = [class_scores(fr, cls) for fr in frames]
            aps = {}
            for name, thr in IOU_SETS.items():
                r = interpolated_ap(per, thr[cls])
                aps[name] = {"ap_r40": round(r.ap_r40, 4), "ap_r11": round(r.ap_r11, 4)}
            classes[cls] = {"ap": aps, **counts[cls].to_dict()}
        fails = self.failures.get((m, c, lv), {"crashes": 0, "timeouts": 0})
        return {"module": self.config.modules[m], "corruption": self.config.corruption_name(c),
                "level": self.config.level_name(c, lv), "frames": len(frames), **fails, "classes": classes}

    def to_dict(self) -> dict[str, Any]:
        cfg = self.config
        return {"cells": [self.cell_dict(m, c, lv) for m in range(len(cfg.modules)) for c, lv in cfg.settings()]}


# ----------------------------------------------------------------------------------------------- scores


def _ap(cell: Mapping[str, Any], iou_set: str, what: str, classes: Sequence[str]) -> float | None:
    """A cell's AP|R40 of one class, or the mean over ``classes`` (None when none has ground truth)."""
    if what != MEAN:
        return float(cell["classes"][what]["ap"][iou_set]["ap_r40"])
    vals = [float(cell["classes"][c]["ap"][iou_set]["ap_r40"]) for c in classes]
    return sum(vals) / len(vals) if vals else None


def scores(cells: Sequence[Mapping[str, Any]], *, modules: Sequence[str], corruptions: Sequence[Mapping[str, Any]],
           baseline: str | None) -> dict[str, Any]:
    """Per module, threshold set and class (and their mean, :data:`MEAN`): the clean AP, each corruption's APs
    per level, their mean, CE against ``baseline`` (None without one) and RR against the module's own clean AP,
    then mCE and mRR (Robo3D's definitions: :func:`corruption_error`, :func:`resilience_rate`). The mean is over
    the classes with ground truth on the clean frames (``scored_classes``)."""
    at = {(c["module"], c["corruption"], c["level"]): c for c in cells}
    first = at.get((modules[0], CLEAN, CLEAN)) if modules else None
    scored = [c for c in CLASSES if first is not None and first["classes"][c]["gt"] > 0]
    out: dict[str, Any] = {"scored_classes": scored, "baseline": baseline, "modules": {}}
    for mod in modules:
        per_set: dict[str, Any] = {}
        for iou_set in IOU_SETS:
            per_what: dict[str, Any] = {}
            for what in (*CLASSES, MEAN):
                clean_cell = at.get((mod, CLEAN, CLEAN))
                clean = None if clean_cell is None else _ap(clean_cell, iou_set, what, scored)
                rows: dict[str, Any] = {}
                for cor in corruptions:
                    aps = [_cell_ap(at.get((mod, cor["name"], lv)), iou_set, what, scored) for lv in cor["levels"]]
                    base = [_cell_ap(at.get((baseline, cor["name"], lv)), iou_set, what, scored)
                            for lv in cor["levels"]] if baseline is not None else None
                    ok = all(a is not None for a in aps)
                    rows[cor["name"]] = {
                        "ap": aps, "mean": (sum(aps) / len(aps)) if ok and aps else None,  # type: ignore[arg-type]
                        "ce": corruption_error(aps, base) if ok and base and all(b is not None for b in base)
                        else None,  # type: ignore[arg-type]
                        "rr": resilience_rate(aps, clean) if ok and clean is not None else None}  # type: ignore[arg-type]
                per_what[what] = {"clean": clean, "corruptions": rows,
                                  "mce": mean_of([r["ce"] for r in rows.values()]) if baseline is not None else None,
                                  "mrr": mean_of([r["rr"] for r in rows.values()])}
            per_set[iou_set] = per_what
        out["modules"][mod] = per_set
    return _rounded(out)


def _cell_ap(cell: Mapping[str, Any] | None, iou_set: str, what: str, classes: Sequence[str]) -> float | None:
    return None if cell is None else _ap(cell, iou_set, what, classes)


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x
