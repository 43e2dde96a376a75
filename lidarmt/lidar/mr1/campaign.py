"""MR1 campaigns: sample source frames, perceive each once, inject n points outside the ROI, judge the pairs.

This module is the LiDAR relation's plug-in to the shared campaign engine (:mod:`lidarmt.engine.campaign`, which owns
the run folder, the journal and resume, worker processes, time limits and bundle scheduling): the unit of work
is one source frame, whose obstacles O are computed once and reused for every n and trial; a key is
``(frame, n, trial)``. The engine's public functions are re-exported here for the callers that know this module.

Each ok record says whether the source frame carries object labels (``labelled``), and each lost obstacle what
the labels say of it (:func:`source_labels`: a labelled object, unlabelled junk, or outside the labelled region).
Each ok record also says how many of the added points reached the network (``added_reached``: inside the
CNN's grid and height band, :class:`~lidarmt.lidar.mr1.inject.NetworkReach` of the SUT's configuration), so that a
campaign shows how much of its region the perception module could see at all.

ROI shortcut (documented, and honest): the ROI mask of a frame depends only on its pose, which t and t′
share, so the campaign builds the :class:`~lidarmt.types.Roi` once per source frame and hands the same object
to the SUT for t and every t′; the SUT still computes ``roi.indices(t′)`` itself, over all points of t′.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lidarmt.engine.campaign import (  # noqa: F401 - re-exported: the engine's API, as this module offered it
    CampaignResult,
    Emit,
    EvaluatorBase,
    RunLock,
    SutTimeout,
    WorkerFailure,
    check_out,
    environment,
    failure,
    load_tally,
    make_bundles,
    pair_record,
    prepare_out,
    run_campaign,
    select_items,
)
from lidarmt.engine.errors import FuzzArgumentError
from lidarmt.engine.journal import JOURNAL_NAME, Key, iter_records, record_key
from lidarmt.engine.tally import LostFilter, Tally
from lidarmt.lidar.mr1.inject import MAX_POINTS, Bounds, NetworkReach, Region, make_follow_up
from lidarmt.lidar.mr1.oracle import Verdict, attach_labels, attach_lanes, judge
from lidarmt.lidar.perception.guard import guarded_detect
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

# files a campaign owns inside its run folder (removed by --force)
OWNED = (JOURNAL_NAME, "summary.json", "run.json", "junit.xml", "report.md", "table.txt", "classes.png",
         "rates.png", "violations")


# ----------------------------------------------------------------------------------------------- arguments


def parse_ns(text: str | Iterable[int]) -> tuple[int, ...]:
    """``"10,100,1000"`` -> (10, 100, 1000); positive integers up to 10,000,000, no duplicates, in order."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else [str(v) for v in text]
    out: list[int] = []
    for s in items:
        if not s:
            raise FuzzArgumentError(f"--n {text!r}: empty entry; give comma-separated point counts like 10,100,1000")
        try:
            v = int(s.replace("_", ""))
        except ValueError as err:
            raise FuzzArgumentError(f"--n: {s!r} is not an integer number of points (e.g. --n 10,100,1000)") from err
        if v <= 0:
            raise FuzzArgumentError(f"--n: {v} points cannot be injected; each n must be at least 1")
        if v > MAX_POINTS:
            raise FuzzArgumentError(f"--n: {v:,} points is absurd for one LiDAR frame; the limit is {MAX_POINTS:,}")
        if v not in out:
            out.append(v)
    if not out:
        raise FuzzArgumentError("--n: give at least one point count, e.g. --n 10,100,1000")
    return tuple(out)


def select_frames(available: int, frames: int | None, seed: int) -> tuple[int, ...]:
    """``frames`` indices drawn at random without replacement (all when None), sorted for sequential reads."""
    return select_items(available, frames, seed, what="frames", source="the recording")


@dataclass(frozen=True, slots=True)
class CampaignConfig:
    """Everything that determines an MR1 campaign's verdicts (worker count and progress display do not)."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    ns: tuple[int, ...]
    frames: tuple[int, ...]
    seed: int = 0
    trials: int = 1
    region: Region = field(default_factory=Region)
    timeout: float | None = None
    #: which lost obstacles the totals and reports count (--min-points, --min-size): not part of the verdicts,
    #: so not in :meth:`to_dict` (the journal header), and a campaign may be resumed or reported with another
    lost_filter: LostFilter = field(default_factory=LostFilter, compare=False)

    kind: ClassVar[str] = "lidar-mr1"
    owned: ClassVar[tuple[str, ...]] = OWNED

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise FuzzArgumentError(f"--trials {self.trials}: use at least 1")
        if self.seed < 0:
            raise FuzzArgumentError(f"--seed {self.seed}: give a non-negative integer")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise FuzzArgumentError(f"--timeout {self.timeout}: give a positive number of seconds")

    @property
    def items(self) -> tuple[int, ...]:
        return self.frames

    @property
    def total(self) -> int:
        return len(self.frames) * len(self.ns) * self.trials

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, n, t) for n in self.ns for t in range(self.trials)]

    def key_fields(self, key: Key) -> dict[str, Any]:
        return {"frame": key[0], "n": key[1], "trial": key[2]}

    def record_key(self, rec: Mapping[str, Any]) -> Key:
        return record_key(dict(rec))

    def bundle_id(self, key: Key) -> str:
        return bundle_id(key)

    def new_tally(self) -> Tally:
        return Tally(self.ns, lost_filter=self.lost_filter)

    def evaluator(self, *, enforce_timeout: bool = True) -> Evaluator:
        return Evaluator(self, enforce_timeout=enforce_timeout)

    def worker_memory(self) -> int:
        """Bytes one worker holds: Apollo's CNN, its activations on a 640² grid and the numba kernels measured
        about 850 MB; other SUTs are assumed to be no larger."""
        return 900 * 2**20

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.to_dict(), "roi": self.roi.to_dict(), "sut": self.sut.to_dict(),
            "ns": list(self.ns), "frames": list(self.frames), "seed": self.seed, "trials": self.trials,
            "region": {"shape": self.region.shape, "size": self.region.size}, "timeout": self.timeout,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CampaignConfig:
        return cls(
            SourceSpec.from_dict(d["source"]), RoiSpec.from_dict(d["roi"]), SutSpec.from_dict(d["sut"]),
            tuple(int(n) for n in d["ns"]), tuple(int(f) for f in d["frames"]), int(d["seed"]), int(d["trials"]),
            Region(d["region"]["shape"], float(d["region"]["size"])), d.get("timeout"),
        )


# ----------------------------------------------------------------------------------------------- one process


class Evaluator(EvaluatorBase):
    """Builds the SUT, ROI provider and recording reader of a campaign, and judges pairs (one per process)."""

    what = "perception"

    def __init__(self, config: CampaignConfig, *, enforce_timeout: bool = True) -> None:
        super().__init__(config.timeout, enforce_timeout=enforce_timeout)
        self.config = config
        self.sut = build_sut(config.sut)
        self.rois = build_roi_provider(config.roi)
        self.source = open_source(config.source)
        self.reach = NetworkReach.of(self.sut)

    def load(self, index: int) -> tuple[Frame, Roi]:
        frame = self.source[index]
        return frame, self.rois.roi_for(frame)

    def _detect(self, frame: Frame, roi: Roi) -> Obstacles:
        # read-only input verified after the call, output validated: a SUT that returns junk or writes into the
        # frame is a crash finding (SutFault) that names what was wrong, never a stop or a poisoned follow-up
        return guarded_detect(self.sut, frame, roi)

    def detect(self, frame: Frame, roi: Roi, *, key: Key | None = None, stage: str = "bundle") -> Obstacles:
        """One perception call (announced through ``on_call``, so a worker's parent can time it)."""
        return self.call(self._detect, frame, roi, keys=key, stage=stage)

    def _cnn_seconds(self) -> float | None:
        """The CNN's part of the last perception call, when the SUT reports it (``last_timings["cnn"]``)."""
        t = getattr(self.sut, "last_timings", None)
        try:
            return float(t["cnn"]) if t and "cnn" in t else None
        except (TypeError, ValueError):
            return None

    def follow_up(self, frame: Frame, roi: Roi, key: Key, bounds: Bounds | None = None):
        return make_follow_up(frame, roi, key[1], seed=self.config.seed, frame_index=key[0], trial=key[2],
                              region=self.config.region, bounds=bounds)

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None:
        self.run_frame(index, keys, emit)

    def run_frame(self, index: int, keys: list[Key], emit: Emit) -> None:
        """Judge every pair of source frame ``index`` in ``keys``; emits ("pair", record) per key."""
        frame, roi = self.load(index)
        bounds = Bounds.of(frame)
        t0 = time.perf_counter()
        try:
            source = self.detect(frame, roi, stage="source")
        except Exception as err:  # the SUT failed on the source frame: every pair of it is a finding
            fail = failure(err)
            status = fail.pop("status")
            for key in keys:
                emit("pair", pair_record(self.config, key, status, "source", **fail))
            return
        t_source = time.perf_counter() - t0
        cnn_source = self._cnn_seconds()
        labels = source_labels(frame, source)
        lanes = self.lanes(frame, source)
        for key in keys:
            fu = self.follow_up(frame, roi, key, bounds)
            t0 = time.perf_counter()
            try:
                follow = self.detect(fu.frame, roi, key=key, stage="follow")
            except Exception as err:
                fail = failure(err)
                emit("pair", pair_record(self.config, key, fail.pop("status"), "follow", **fail))
                continue
            dt = time.perf_counter() - t0
            timing = {"sut_s": round(dt, 6), "source_s": round(t_source, 6)}
            cnn = self._cnn_seconds()
            if cnn is not None and cnn_source is not None:  # the SUT reports its CNN's share (ApolloLOP)
                timing |= {"cnn_s": round(cnn, 6), "source_cnn_s": round(cnn_source, 6)}
            verdict = attach_lanes(attach_labels(judge(source, follow), labels), lanes)
            extra = {} if labels is None else {"labelled_source": labelled_counts(labels)}
            emit("pair", pair_record(self.config, key, "ok", "follow", verdict=verdict.to_dict(matches=False),
                                     points=len(frame), added_reached=self.reach.count(fu.extra),
                                     labelled=labels is not None, **extra, **timing))

    def judge_key(self, key: Key) -> tuple[Frame, Roi, Any, Obstacles, Obstacles, Verdict]:
        """Recompute one pair from scratch (for bundles): source, ROI, follow-up, O, O′ and the verdict."""
        frame, roi = self.load(key[0])
        source = self.detect(frame, roi)
        fu = self.follow_up(frame, roi, key)
        follow = self.detect(fu.frame, roi)
        verdict = attach_lanes(attach_labels(judge(source, follow), source_labels(frame, source)),
                               self.lanes(frame, source))
        return frame, roi, fu, source, follow, verdict

    def lanes(self, frame: Frame, source: Obstacles) -> dict[int, str]:
        """Where each source obstacle lies for the planner: in, next to or off the ego lane (the HD map's, or
        the corridor; :mod:`lidarmt.lidar.lanes`)."""
        from lidarmt.lidar.lanes import lane_of_obstacles

        return lane_of_obstacles(ego_path_for(self.rois, frame), source, range(len(source)))

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]:
        from lidarmt.lidar.mr1.bundle import make_bundle

        return make_bundle(self, tuple(key), Path(out_dir), **opts)


def source_labels(frame: Frame, source: Obstacles) -> dict[int, dict[str, Any]] | None:
    """What the source frame's labels say of each of its obstacles (labelled object, unlabelled, outside the
    labelled region; :func:`lidarmt.lidar.perception.apollo.evaluate.label_lost`), None for a frame without object
    labels. Computed once per source frame; the verdicts attach it to their lost obstacles."""
    from lidarmt.lidar.perception.apollo.evaluate import label_lost

    return label_lost(frame, source, range(len(source)))


def labelled_counts(labels: dict[int, dict[str, Any]]) -> dict[str, int]:
    """Per class of the labelled object: how many source obstacles are labelled objects (the denominator of
    "lost labelled objects")."""
    out: dict[str, int] = {}
    for info in labels.values():
        if info["label"] == "labelled":
            out[info["label_class"]] = out.get(info["label_class"], 0) + 1
    return out


def violating_keys(out: str | os.PathLike[str], *,
                   lost_filter: LostFilter | None = None) -> list[tuple[Key, dict[str, Any]]]:
    """(key, record) of every pair that violates the count or the subset relation, sorted by (n, frame, trial).
    With an active ``lost_filter`` (--min-points, --min-size), only pairs that lost an obstacle passing it."""
    found: dict[Key, dict] = {}
    for rec in iter_records(Path(out) / JOURNAL_NAME):
        if is_violating(rec, lost_filter=lost_filter):
            found.setdefault(record_key(rec), rec)
    return sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))


def is_violating(rec: Mapping[str, Any], *, lost_filter: LostFilter | None = None) -> bool:
    """Whether one journal record is a violation the campaign counts (:func:`violating_keys`, and the progress
    bar's count): an ok pair that violates the count or the subset relation, and with an active
    ``lost_filter`` lost an obstacle passing it."""
    if rec["status"] != "ok" or not (rec["verdict"]["count_violation"] or rec["verdict"]["subset_violation"]):
        return False
    flt = lost_filter if lost_filter is not None and lost_filter.active else None
    return flt is None or any(flt.keeps(m) for m in rec["verdict"]["missing"])


def lost_labelled(rec: Mapping[str, Any]) -> bool:
    """Whether a journal record's pair lost a labelled object (a real car, pedestrian or cyclist)."""
    return any(m.get("label") == "labelled" for m in rec["verdict"]["missing"])


def select_bundles(violations: list[tuple[Key, dict]], per_n: int | None, *,
                   min_severity: str | None = None) -> list[tuple[Key, dict]]:
    """The first ``per_n`` violations of each n (all when None), real objects first, within each n and across them
    (the order the bundles are made and listed in): pairs that lost a labelled object, then by their most severe
    finding (:mod:`lidarmt.engine.findings`), then pairs that lost an obstacle
    other than junk or a low-evidence one, then count-relation violations. ``min_severity`` (``--min-severity``)
    keeps only pairs with a finding at least that severe."""
    from lidarmt.engine.findings import at_least, is_real, severity_rank, worst

    def lost(rec: dict) -> list[dict]:
        return list(rec["verdict"]["missing"])

    def rank(kv: tuple[Key, dict]) -> tuple:
        return (not lost_labelled(kv[1]), severity_rank(worst(lost(kv[1])) or "low"),
                not any(is_real(m) for m in lost(kv[1])), not kv[1]["verdict"]["count_violation"])

    pool = [kv for kv in violations if any(at_least(m, min_severity) for m in lost(kv[1]))]
    by_n: dict[int, list] = {}
    for kv in pool:
        by_n.setdefault(kv[0][1], []).append(kv)
    out: list = []
    for n in sorted(by_n):
        items = sorted(by_n[n], key=lambda kv: (*rank(kv), kv[0][0], kv[0][2]))
        out.extend(items if per_n is None else items[:per_n])
    # across n too: the first bundle a user sees is the most real, most severe one
    return sorted(out, key=lambda kv: (*rank(kv), kv[0][1], kv[0][0], kv[0][2]))


def bundle_id(key: Key) -> str:
    return f"n{key[1]}-f{key[0]:06d}-t{key[2]}"


