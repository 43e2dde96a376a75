"""LiDAR-transformation campaigns: the relations of :mod:`lidarmt.lidar.relations` as a plug-in of the engine.

Source sweep ─► transformation τ (:mod:`lidarmt.lidar.transforms`, at a level: light, moderate, heavy) ─►
perception on t and τ(t) ─► raw facts ─► journal ─► fold at thresholds ─► reports and bundles.

A key is ``(frame, transformation, level, trial)`` (indices into the campaign's lists); the unit of work is one
source frame, perceived once and shared by all its follow-ups. The seed of each application is a hash of
(campaign seed, frame, transformation *name*, level, trial), so any pair replays alone, on any worker, and adding
transformations to a campaign changes none of the others.

The ROI of a follow-up is the source's (it depends on the pose and, for ``--roi labels``, on the source's
labels), moved with the sweep when the transformation moves it (rotation, mirror: :class:`MovedRoi`), so the
rotated sweep's road is where the rotated points are. An object inserted by ``insert`` is placed on the source's
ROI and cut from the object library the campaign names (``library``: a KITTI folder, a drive, or None for
the transformation's default).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lidarmt.engine.campaign import Emit, EvaluatorBase, Key, failure, pair_record
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.changes import MovedRoi, edits_origin, follow_roi, jsonable  # noqa: F401  (campaign API)
from lidarmt.lidar.relations import RELATIONS, LidarTally, Thresholds, judge_facts, pair_facts
from lidarmt.lidar.sensors import sensor_record
from lidarmt.lidar.specs import (
    RoiSpec,
    SourceSpec,
    SutSpec,
    build_roi_provider,
    build_sut,
    ego_path_for,
    open_source,
)
from lidarmt.types import Frame, Obstacles, Roi

KIND = "lidar-transform"
OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "violations.png",
         "violations")
LEVEL_NAMES = ("light", "moderate", "heavy")


def transform_seed(seed: int, frame: int, transform: str, level: int, trial: int) -> int:
    """The seed of one application: a 63-bit hash of the campaign seed and the pair's identity (by the
    transformation's name)."""
    name = int.from_bytes(transform.encode("utf-8")[:16].ljust(16, b"\0"), "little")
    ss = np.random.SeedSequence([int(seed), int(frame), name & 0xFFFFFFFFFFFFFFFF, name >> 64, int(level),
                                 int(trial), 0x6C6964])  # "lid"
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def default_relation(transform: Any) -> str:
    """The relation a transformation is judged by unless the campaign names another (by what it changes)."""
    rel = getattr(transform, "relation", None)
    if rel in RELATIONS:
        return str(rel)
    if transform.family == "alignment":
        return "equivariance"
    if transform.family == "object":
        return "insertion" if "insert" in transform.name else "removal"
    return "robustness"


def check_relation(transform: Any, relation: str) -> None:
    """Refuse a relation that cannot judge what this transformation does (one line)."""
    natural = default_relation(transform)
    if relation == natural or (relation == "robustness" and natural != "equivariance"):
        return
    raise FuzzArgumentError(
        f"--relation {relation}: cannot judge {transform.name} ({transform.family}); its relation is {natural}"
        + ("" if natural == "equivariance" else " (or robustness)"))


@dataclass(frozen=True, slots=True)
class LidarTransformRef:
    """A transformation by name, the parameter settings the campaign walks (resolved from its levels, so the
    journal says exactly what was applied) with their names, and the relation that judges it."""

    name: str
    levels: tuple[str, ...]
    params: tuple[Mapping[str, float], ...]
    relation: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "levels": list(self.levels), "params": [dict(p) for p in self.params],
                "relation": self.relation}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LidarTransformRef:
        """A reference read back from a journal or bundle; a parameter the transformation gained since is
        filled with what it computed then (:func:`~lidarmt.lidar.transforms.base.complete_recorded`)."""
        from lidarmt.lidar.transforms.registry import complete_recorded

        name = str(d["name"])
        return cls(name, tuple(str(v) for v in d["levels"]),
                   tuple(complete_recorded(name, p) for p in d["params"]), str(d["relation"]))


def transform_refs(names: Sequence[str], *, levels: Sequence[str] = LEVEL_NAMES,
                   relation: str | None = None) -> tuple[LidarTransformRef, ...]:
    """References for ``names`` at ``levels`` (each a level name, or ``name=value,...`` settings), judged by
    ``relation`` (None or "auto": each transformation's own)."""
    from lidarmt.lidar.transforms.base import parse_params, resolve_params
    from lidarmt.lidar.transforms.registry import get_transform

    if not names:
        raise FuzzArgumentError("--transforms: give at least one transformation (lidarmt fuzz --list-transforms)")
    refs = []
    for name in names:
        t = get_transform(name)
        rel = default_relation(t) if relation in (None, "auto") else str(relation)
        if rel not in RELATIONS:
            raise FuzzArgumentError(f"--relation {relation}: use auto, mr1 or one of {', '.join(RELATIONS)}")
        check_relation(t, rel)
        params: list[dict[str, float]] = []
        names_kept: list[str] = []
        for lv in levels:
            p = resolve_params(t, lv if lv in t.levels else parse_params(lv))
            if p not in params:  # a transformation without parameters (mirror) is one setting, not three
                params.append(p)
                names_kept.append(lv if p else "-")
        refs.append(LidarTransformRef(t.name, tuple(names_kept), tuple(params), rel))
    if len({r.name for r in refs}) != len(refs):
        raise FuzzArgumentError("--transforms: a transformation is named twice")
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class LidarCampaignConfig:
    """Everything that determines a LiDAR-transformation campaign's records (workers, progress and the
    relations' thresholds do not: those are applied when the journal is folded)."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    transforms: tuple[LidarTransformRef, ...]
    frames: tuple[int, ...]
    seed: int = 0
    trials: int = 1
    library: str | None = None  # where insert cuts its objects from (None: the transformation's default)
    timeout: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds, compare=False)
    sensor: str = "hdl64"  # the sensor profile the transformations model (lidarmt.lidar.sensors)

    kind: ClassVar[str] = KIND
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        from lidarmt.lidar.sensors import get_sensor

        object.__setattr__(self, "sensor", get_sensor(self.sensor).name)  # an unknown name: one line
        if self.trials < 1:
            raise FuzzArgumentError(f"--trials {self.trials}: use at least 1")
        if self.seed < 0:
            raise FuzzArgumentError(f"--seed {self.seed}: give a non-negative integer")
        if not self.transforms:
            raise FuzzArgumentError("--transforms: give at least one transformation")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise FuzzArgumentError(f"--timeout {self.timeout}: give a positive number of seconds")

    @property
    def items(self) -> tuple[int, ...]:
        return self.frames

    @property
    def per_frame(self) -> int:
        return sum(len(t.levels) for t in self.transforms) * self.trials

    @property
    def total(self) -> int:
        return len(self.frames) * self.per_frame

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, t, lv, r) for t, tr in enumerate(self.transforms) for lv in range(len(tr.levels))
                for r in range(self.trials)]

    def key_fields(self, key: Key) -> dict[str, Any]:
        f, t, lv, r = key
        tr = self.transforms[t]
        return {"key": list(key), "frame": f, "transform": tr.name, "level": tr.levels[lv], "trial": r}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return tuple(int(v) for v in rec["key"])

    def bundle_id(self, key: Key) -> str:
        f, t, lv, r = key
        tr = self.transforms[t]
        level = "".join(c if c.isalnum() or c in "-_" else "_" for c in tr.levels[lv])[:24]
        return f"{tr.name}-{level}-f{f:06d}-t{r}"

    def seed_of(self, key: Key) -> int:
        f, t, lv, r = key
        return transform_seed(self.seed, f, self.transforms[t].name, lv, r)

    def new_tally(self) -> LidarTally:
        from lidarmt.lidar.transforms.registry import get_transform

        info = [(t.name, get_transform(t.name).family, t.relation) for t in self.transforms]
        return LidarTally(info, [t.levels for t in self.transforms], self.thresholds)

    def evaluator(self, *, enforce_timeout: bool = True) -> LidarEvaluator:
        return LidarEvaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        """Bytes one worker holds: the SUT (Apollo's CNN: about 850 MB measured) and a frame's follow-ups."""
        return 1000 * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_dict(), "roi": self.roi.to_dict(),
                "sut": self.sut.to_dict(), "transforms": [t.to_dict() for t in self.transforms],
                "frames": list(self.frames), "seed": self.seed, "trials": self.trials, "library": self.library,
                "timeout": self.timeout, **sensor_record(self.sensor)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, thresholds: Thresholds | None = None) -> LidarCampaignConfig:
        return cls(SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]), SutSpec.from_dict(d["sut"]),
                   tuple(LidarTransformRef.from_dict(t) for t in d["transforms"]),
                   tuple(int(f) for f in d["frames"]), int(d["seed"]), int(d["trials"]), d.get("library"),
                   d.get("timeout"), thresholds or Thresholds(), sensor=str(d.get("sensor", "hdl64")))


# ----------------------------------------------------------------------------------------------- one process


@dataclass(slots=True)
class Judged:
    """One pair recomputed from scratch (bundles, replay)."""

    frame: Frame
    roi: Roi
    change: Any
    source: Obstacles
    follow: Obstacles
    facts: dict[str, Any]
    lost: list[dict[str, Any]]


class LidarEvaluator(EvaluatorBase):
    """Builds a campaign's recording reader, ROI provider, SUT and transformations; judges a frame's keys."""

    what = "perception"

    def __init__(self, config: LidarCampaignConfig, *, enforce_timeout: bool = True, trust_code: bool = True,
                 origin: Any = None) -> None:
        from lidarmt.lidar.transforms.registry import get_transform

        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.sut = build_sut(config.sut, origin=origin, trust_code=trust_code)
        self.rois = build_roi_provider(config.roi, origin=origin, trust_code=trust_code)
        self._source = None
        self.transforms = [get_transform(t.name) for t in config.transforms]
        self._library: Any = None
        if any(self._inserts(t) for t in range(len(self.transforms))):
            self.library()  # now, before the engine creates the run folder: a bad --library is one line

    @property
    def source(self) -> Any:
        if self._source is None:
            self._source = open_source(self.config.source)
        return self._source

    def library(self) -> Any:
        """The object library of insert (built once per process, only when an insertion needs it)."""
        if self._library is None:
            self._library = open_library(self.config.library or self.config.source.path)
        return self._library

    def _inserts(self, t: int) -> bool:
        return self.config.transforms[t].relation == "insertion" or "insert" in self.transforms[t].name

    def context(self, t: int, roi: Roi) -> Any:
        from lidarmt.lidar.transforms.base import TransformContext

        return TransformContext(roi=roi, library=self.library() if self._inserts(t) else None,
                                sensor=self.config.sensor, frame_at=lambda i: self.source[i])

    def load(self, index: int) -> tuple[Frame, Roi]:
        frame = self.source[index]
        return frame, self.rois.roi_for(frame)

    def detect(self, frame: Frame, roi: Roi, *, key: Any = None, stage: str = "bundle") -> Obstacles:
        from lidarmt.lidar.perception.guard import guarded_detect

        return self.call(guarded_detect, self.sut, frame, roi, keys=key, stage=stage)

    def change(self, frame: Frame, roi: Roi, key: Key) -> Any:
        _f, t, lv, _r = key
        ref = self.config.transforms[t]
        return self.transforms[t].apply(frame, dict(ref.params[lv]), seed=self.config.seed_of(key),
                                        context=self.context(t, roi))

    def facts(self, frame: Frame, source: Obstacles, change: Any, follow: Obstacles,
              follow_frame: Frame | None = None, origin: np.ndarray | None = None) -> dict[str, Any]:
        facts = pair_facts(frame, source, change.frame if follow_frame is None else follow_frame, follow,
                           change.origin if origin is None else origin, change.geometry,
                           inserted=change.inserted, removed=change.removed)
        return add_lanes(facts, ego_path_for(self.rois, frame), source, follow, change.geometry, change.inserted)

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        from lidarmt.lidar.transforms.base import n_edits

        cfg = self.config
        frame, roi = self.load(index)
        t0 = time.perf_counter()
        try:
            source = self.detect(frame, roi, stage="source")
        except Exception as err:  # the SUT failed on the source frame: every pair of it is a finding
            fail = failure(err)
            status = fail.pop("status")
            for key in keys:
                emit("pair", pair_record(cfg, key, status, "source", **fail))
            return
        t_source = time.perf_counter() - t0
        for key in keys:
            t1 = time.perf_counter()
            try:
                change = self.change(frame, roi, key)
            except Exception as err:  # the transformation's own failure is recorded, not the SUT's
                if getattr(err, "is_user_error", False) or err.__class__.__name__ == "ObjectLibraryError":
                    raise
                emit("pair", pair_record(cfg, key, "crash", "transform",
                                         error=f"transformation failed: {type(err).__name__}: {err}",
                                         traceback=failure(err)["traceback"]))
                continue
            t_transform = time.perf_counter() - t1
            t2 = time.perf_counter()
            try:
                follow = self.detect(change.frame, follow_roi(roi, change), key=key, stage="follow")
            except Exception as err:
                fail = failure(err)
                emit("pair", pair_record(cfg, key, fail.pop("status"), "follow", **fail))
                continue
            dt = time.perf_counter() - t2
            facts = self.facts(frame, source, change, follow)
            emit("pair", pair_record(cfg, key, "ok", "follow", facts=facts, points=len(frame),
                                     follow_points=len(change.frame), edits=int(n_edits(change)),
                                     info=jsonable(change.info), sut_s=round(dt, 6), source_s=round(t_source, 6),
                                     transform_s=round(t_transform, 6)))

    def judge_key(self, key: Key) -> Judged:
        frame, roi = self.load(key[0])
        source = self.detect(frame, roi)
        change = self.change(frame, roi, key)
        follow = self.detect(change.frame, follow_roi(roi, change))
        facts = self.facts(frame, source, change, follow)
        rel = self.config.transforms[key[1]].relation
        return Judged(frame, roi, change, source, follow, facts, judge_facts(facts, rel, self.config.thresholds))

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]:
        from lidarmt.lidar.bundle import make_transform_bundle

        return make_transform_bundle(self, tuple(key), Path(out_dir), **opts)


def add_lanes(facts: dict[str, Any], path: Any, source: Obstacles, follow: Obstacles, geometry: Any,
              inserted: Any) -> dict[str, Any]:
    """Say of every source obstacle, follow-up obstacle (brought back by the inverse geometry) and inserted box
    whether it lies in, next to or off the ego lane (``lane``; :mod:`lidarmt.lidar.lanes`). Returns ``facts``."""
    from lidarmt.lidar.relations import inverse_geometry, map_xy

    for row, o in zip(facts.get("source", []), source, strict=False):
        row["lane"] = path.place(o)
    inv = inverse_geometry(geometry)
    for row, o in zip(facts.get("follow", []), follow, strict=False):
        c = map_xy(np.asarray(o.center[:2], dtype=np.float64)[None], inv)[0]
        row["lane"] = path.where(float(c[0]), float(c[1]), 0.5 * min(float(o.width), float(o.length)))
    if inserted is not None:
        for row, b in zip(facts.get("inserted", []), inserted, strict=False):
            row["lane"] = path.where(float(b["cx"]), float(b["cy"]), 0.5 * min(float(b["width"]), float(b["length"])))
    return facts


LIBRARY_FRAMES = 20  # frames of a recording an object library is cut from (spread evenly)


def open_library(path: str) -> Any:
    """The object library of ``insert``: every labelled object with enough points in up to
    :data:`LIBRARY_FRAMES` frames of the recording ``path`` (spread evenly; the campaign's own recording when
    ``--library`` is not given)."""
    from lidarmt.lidar.transforms.objects import ObjectLibrary

    rec = open_source(SourceSpec(path))
    n = len(rec)
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    frames = sorted({int(i) for i in np.linspace(0, n - 1, min(n, LIBRARY_FRAMES)).round()}) if n else []
    return ObjectLibrary.from_recording(path, frames=frames)


# ----------------------------------------------------------------------------------------------- violations


def violating_keys(out: str | Path, config: LidarCampaignConfig) -> list[tuple[Key, list[dict[str, Any]]]]:
    """(key, findings) of every violating pair at the configuration's thresholds, most severe first
    (:mod:`lidarmt.engine.findings`: real objects before junk), then nearest loss."""
    from lidarmt.engine.findings import severity_rank, worst

    found: dict[Key, list[dict[str, Any]]] = {}
    for rec in iter_records(Path(out) / JOURNAL_NAME):
        if rec.get("status") != "ok":
            continue
        key = config.record_key(rec)
        if key in found:
            continue
        lost = judge_facts(rec["facts"], config.transforms[key[1]].relation, config.thresholds)
        if lost:
            found[key] = lost
    return sorted(found.items(), key=lambda kv: (severity_rank(worst(kv[1]) or "low"),
                                                 min(float(x["distance"]) for x in kv[1]), kv[0]))


def select_bundles(violations: list[tuple[Key, list[dict]]], per_transform: int | None, *,
                   min_severity: str | None = None) -> list[tuple[Key, list]]:
    """The ``per_transform`` most severe, then nearest, violations of each transformation (all when None);
    ``min_severity`` (``--min-severity``) keeps only pairs with a finding at least that severe."""
    from lidarmt.engine.findings import at_least

    out = []
    count: dict[int, int] = {}
    for kv in violations:
        if not any(at_least(x, min_severity) for x in kv[1]):
            continue
        t = kv[0][1]
        if per_transform is None or count.get(t, 0) < per_transform:
            out.append(kv)
            count[t] = count.get(t, 0) + 1
    return out
