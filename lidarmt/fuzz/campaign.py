"""MR1 campaigns: sample source frames, perceive each once, inject n points outside the ROI, judge the pairs.

The unit of work is one source frame: its obstacles O are computed once and reused for every n and trial.
Each verdict is appended to the journal (:mod:`lidarmt.fuzz.journal`) as soon as it exists, so a campaign can
be killed at any moment and resumed; the totals (:mod:`lidarmt.fuzz.tally`) are folded from the journal.

Workers: with ``workers == 1`` everything runs in this process (a timeout then interrupts the SUT with
SIGALRM, which stops Python code but waits for a native call to return). With ``workers >= 2``, worker
processes (``spawn``) each build their own perception module, ROI provider and recording reader; the parent
assigns source frames, writes the journal, and enforces timeouts by killing a worker whose perception call
overruns (then starts a fresh one). A crash, exception or timeout of the perception module is recorded as a
finding with its traceback and never stops the campaign.

ROI shortcut (documented, and honest): the ROI mask of a frame depends only on its pose, which t and t′
share, so the campaign builds the :class:`~lidarmt.types.Roi` once per source frame and hands the same object
to the SUT for t and every t′; the SUT still computes ``roi.indices(t′)`` itself, over all points of t′.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.errors import UserError
from lidarmt.fuzz.errors import FuzzArgumentError, FuzzInputError, FuzzOutputError
from lidarmt.fuzz.inject import MAX_POINTS, Bounds, Region, make_follow_up
from lidarmt.fuzz.journal import (
    JOURNAL_NAME,
    Journal,
    Key,
    create_journal,
    iter_records,
    read_header,
    record_key,
)
from lidarmt.fuzz.oracle import Verdict, judge
from lidarmt.fuzz.plugins import (
    RoiSpec,
    SourceSpec,
    SutSpec,
    build_roi_provider,
    build_sut,
    open_source,
)
from lidarmt.fuzz.tally import Tally
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
    if available <= 0:
        raise FuzzInputError("the recording holds no point-cloud frames")
    if frames is None:
        return tuple(range(available))
    if frames <= 0:
        raise FuzzArgumentError(f"--frames {frames}: ask for at least one frame")
    if frames > available:
        raise FuzzArgumentError(
            f"--frames {frames}: the recording holds only {available} frames; ask for at most {available} "
            "(or leave --frames out to use them all)"
        )
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0x6672616D])))  # "fram"
    return tuple(int(i) for i in np.sort(rng.choice(available, size=frames, replace=False)))


@dataclass(frozen=True, slots=True)
class CampaignConfig:
    """Everything that determines a campaign's verdicts (worker count and progress display do not)."""

    source: SourceSpec
    roi: RoiSpec
    sut: SutSpec
    ns: tuple[int, ...]
    frames: tuple[int, ...]
    seed: int = 0
    trials: int = 1
    region: Region = field(default_factory=Region)
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise FuzzArgumentError(f"--trials {self.trials}: use at least 1")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise FuzzArgumentError(f"--timeout {self.timeout}: give a positive number of seconds")

    @property
    def total(self) -> int:
        return len(self.frames) * len(self.ns) * self.trials

    def keys_of(self, frame: int) -> list[Key]:
        return [(frame, n, t) for n in self.ns for t in range(self.trials)]

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


class SutTimeout(Exception):
    """The perception call ran past the campaign's --timeout."""


@contextlib.contextmanager
def _alarm(seconds: float | None):
    """Raise SutTimeout in this (main) thread after ``seconds``; a no-op elsewhere or without a limit."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise SutTimeout(f"perception did not return within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _as_obstacles(result: Any) -> Obstacles:
    if isinstance(result, Obstacles):
        return result
    return Obstacles(result)


def _pair_record(key: Key, status: str, stage: str, **extra: Any) -> dict[str, Any]:
    return {"type": "pair", "frame": key[0], "n": key[1], "trial": key[2], "status": status, "stage": stage,
            **extra}


def _failure(err: BaseException, timeout: float | None) -> dict[str, Any]:
    if isinstance(err, SutTimeout):
        return {"status": "timeout", "error": f"timed out after {timeout:g} s",
                "traceback": "".join(traceback.format_exception(err))}
    return {"status": "crash", "error": f"{type(err).__name__}: {err}",
            "traceback": "".join(traceback.format_exception(err))}


Emit = Callable[[str, Any], None]


class Evaluator:
    """Builds the SUT, ROI provider and recording reader of a campaign, and judges pairs (one per process)."""

    def __init__(self, config: CampaignConfig, *, enforce_timeout: bool = True) -> None:
        self.config = config
        self.sut = build_sut(config.sut)
        self.rois = build_roi_provider(config.roi)
        self.source = open_source(config.source)
        self._timeout = config.timeout if enforce_timeout else None
        self.on_call: Callable[[Key | None, str], None] = lambda key, stage: None

    def load(self, index: int) -> tuple[Frame, Roi]:
        frame = self.source[index]
        return frame, self.rois.roi_for(frame)

    def detect(self, frame: Frame, roi: Roi, *, key: Key | None = None, stage: str = "bundle") -> Obstacles:
        """One perception call (announced through ``on_call``, so a worker's parent can time it)."""
        self.on_call(key, stage)
        try:
            with _alarm(self._timeout):
                return _as_obstacles(self.sut.detect(frame, roi))
        finally:
            self.on_call(key, "")  # the call is over (the parent stops timing it)

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

    def run_frame(self, index: int, keys: list[Key], emit: Emit) -> None:
        """Judge every pair of source frame ``index`` in ``keys``; emits ("pair", record) per key."""
        frame, roi = self.load(index)
        bounds = Bounds.of(frame)
        t0 = time.perf_counter()
        try:
            source = self.detect(frame, roi, stage="source")
        except Exception as err:  # the SUT failed on the source frame: every pair of it is a finding
            fail = _failure(err, self._timeout)
            status = fail.pop("status")
            for key in keys:
                emit("pair", _pair_record(key, status, "source", **fail))
            return
        t_source = time.perf_counter() - t0
        cnn_source = self._cnn_seconds()
        for key in keys:
            fu = self.follow_up(frame, roi, key, bounds)
            t0 = time.perf_counter()
            try:
                follow = self.detect(fu.frame, roi, key=key, stage="follow")
            except Exception as err:
                fail = _failure(err, self._timeout)
                emit("pair", _pair_record(key, fail.pop("status"), "follow", **fail))
                continue
            dt = time.perf_counter() - t0
            timing = {"sut_s": round(dt, 6), "source_s": round(t_source, 6)}
            cnn = self._cnn_seconds()
            if cnn is not None and cnn_source is not None:  # the SUT reports its CNN's share (ApolloLOP)
                timing |= {"cnn_s": round(cnn, 6), "source_cnn_s": round(cnn_source, 6)}
            verdict = judge(source, follow)
            emit("pair", _pair_record(key, "ok", "follow", verdict=verdict.to_dict(matches=False),
                                      points=len(frame), **timing))

    def judge_key(self, key: Key) -> tuple[Frame, Roi, Any, Obstacles, Obstacles, Verdict]:
        """Recompute one pair from scratch (for bundles): source, ROI, follow-up, O, O′ and the verdict."""
        frame, roi = self.load(key[0])
        source = self.detect(frame, roi)
        fu = self.follow_up(frame, roi, key)
        follow = self.detect(fu.frame, roi)
        return frame, roi, fu, source, follow, judge(source, follow)


# ----------------------------------------------------------------------------------------------- worker pool


def _worker_main(cfg: dict[str, Any], wid: int, gen: int, tasks, results, threads: int = 0,
                 stack_file: str | None = None) -> None:  # pragma: no cover - child
    """Entry point of a worker process: build an Evaluator, then run tasks until told to stop.

    ``threads``: the CPU threads this worker's numeric libraries may use (the cores shared among workers), so
    W workers do not oversubscribe the machine. ``stack_file``: where :mod:`faulthandler` writes the Python
    stacks of a perception call that runs past the timeout (just before the parent kills the worker), so a
    timeout finding comes with the traceback of where the SUT hung.
    """

    def put(kind: str, payload: Any) -> None:
        results.put((wid, gen, kind, payload))

    _die_with_parent()
    if threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
            os.environ.setdefault(var, str(threads))
    try:
        ev = Evaluator(CampaignConfig.from_dict(cfg), enforce_timeout=False)
        if threads > 0 and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
    except BaseException as err:
        put("fatal", (isinstance(err, UserError), str(err), "".join(traceback.format_exception(err))))
        return
    timeout = ev.config.timeout
    stack_fh = open(stack_file, "w", encoding="utf-8") if (stack_file and timeout) else None  # noqa: SIM115

    def on_call(key, stage) -> None:
        if stack_fh is not None:
            import faulthandler

            if stage:
                stack_fh.seek(0)
                stack_fh.truncate()
                faulthandler.dump_traceback_later(max(0.5 * timeout, timeout - 0.25), file=stack_fh)
            else:
                faulthandler.cancel_dump_traceback_later()
        put("start", (key, stage))

    ev.on_call = on_call
    put("ready", None)
    import multiprocessing as mp

    parent = mp.parent_process()
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if parent is not None and not parent.is_alive():  # the campaign was killed: do not linger
                return
            continue
        if task is None:
            return
        kind, payload = task
        try:
            if kind == "frame":
                index, keys = payload
                ev.run_frame(index, [tuple(k) for k in keys], put)
            elif kind == "bundle":
                from lidarmt.report.bundle import make_bundle

                key, out_dir, opts = payload
                put("bundle", make_bundle(ev, tuple(key), Path(out_dir), **opts))
        except BaseException as err:
            put("fatal", (isinstance(err, UserError), str(err), "".join(traceback.format_exception(err))))
            return
        put("done", None)


def _die_with_parent() -> None:  # pragma: no cover - child
    """On Linux, have the kernel kill this worker when the campaign's process dies (even mid-call)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass(slots=True)
class _Slot:
    wid: int
    gen: int = 0
    proc: Any = None
    tasks: Any = None
    ready: bool = False
    task: tuple[str, Any] | None = None
    done: set = field(default_factory=set)
    current: tuple[Any, str] | None = None
    since: float = 0.0


class WorkerFailure(FuzzInputError):
    """A worker could not build its perception/ROI/reader or hit a user error (the message says which)."""


class _Pool:
    """W worker processes fed with tasks; the parent enforces per-call timeouts and survives worker deaths."""

    def __init__(self, config: CampaignConfig, workers: int, *, startup_timeout: float = 600.0) -> None:
        import multiprocessing as mp

        self.config = config
        self.ctx = mp.get_context("spawn")
        self.results = self.ctx.Queue()
        self.slots = [_Slot(i) for i in range(workers)]
        self.startup_timeout = startup_timeout
        self._cfg = config.to_dict()
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="lidarmt-fuzz-")
        for s in self.slots:
            self._spawn(s)

    def _spawn(self, s: _Slot) -> None:
        s.gen += 1
        s.tasks = self.ctx.Queue()
        threads = max(1, (os.cpu_count() or 1) // len(self.slots))
        s.proc = self.ctx.Process(target=_worker_main,
                                  args=(self._cfg, s.wid, s.gen, s.tasks, self.results, threads,
                                        self._stack_file(s)),
                                  daemon=True, name=f"lidarmt-fuzz-{s.wid}")
        s.proc.start()
        s.ready, s.task, s.current, s.done = False, None, None, set()
        s.since = time.monotonic()

    def _stack_file(self, s: _Slot) -> str:
        return os.path.join(self._tmp.name, f"stack-{s.wid}.txt")

    def _stacks(self, s: _Slot) -> str:
        """What faulthandler wrote for the worker's overrunning call (empty if it wrote nothing)."""
        try:
            with open(self._stack_file(s), encoding="utf-8", errors="replace") as fh:
                text = fh.read().strip()
        except OSError:
            return ""
        return f"Python stacks of the worker when the call ran past the timeout:\n{text}" if text else ""

    def close(self) -> None:
        for s in self.slots:
            with contextlib.suppress(Exception):
                s.tasks.put(None)
        deadline = time.monotonic() + 5
        for s in self.slots:
            s.proc.join(max(0.0, deadline - time.monotonic()))
            if s.proc.is_alive():
                s.proc.kill()
                s.proc.join()
        self._tmp.cleanup()

    def wait_ready(self) -> None:
        """Block until every worker has built its SUT, ROI and reader (or raise what went wrong)."""
        while not all(s.ready for s in self.slots):
            try:
                wid, gen, kind, payload = self.results.get(timeout=0.1)
            except queue.Empty:
                wid = None
            if wid is None:
                for s in self.slots:
                    if not s.ready and s.proc.exitcode is not None:
                        raise WorkerFailure(f"a worker process died while starting (exit code {s.proc.exitcode})")
                    if not s.ready and time.monotonic() - s.since > self.startup_timeout:
                        raise WorkerFailure(f"a worker process did not start within {self.startup_timeout:g} s")
                continue
            s = self.slots[wid]
            if gen == s.gen:
                self._handle(s, kind, payload, lambda rec: None, None)

    def run(self, tasks: Iterable[tuple[str, Any]], on_pair: Callable[[dict], None],
            on_bundle: Callable[[dict], None] | None = None) -> None:
        pending = deque(tasks)
        timeout = self.config.timeout
        while pending or any(s.task is not None for s in self.slots):
            for s in self.slots:
                if s.ready and s.task is None and pending:
                    s.task = pending.popleft()
                    s.done, s.current = set(), None
                    s.tasks.put(s.task)
            try:
                wid, gen, kind, payload = self.results.get(timeout=0.05)
            except queue.Empty:
                wid = None
            if wid is not None:
                s = self.slots[wid]
                if gen == s.gen:
                    self._handle(s, kind, payload, on_pair, on_bundle)
            now = time.monotonic()
            if any(self._overdue(s, now, timeout) or (s.proc.exitcode is not None and s.task is not None)
                   for s in self.slots):
                self._drain(on_pair, on_bundle)  # what a dying or late worker sent still counts
            for s in self.slots:
                if self._overdue(s, now, timeout):
                    self._lost(s, pending, on_pair, on_bundle, "timeout", f"timed out after {timeout:g} s "
                               "(the worker process was killed)")
                elif s.proc.exitcode is not None and (s.task is not None or not s.ready):
                    if not s.ready:
                        raise WorkerFailure(f"a worker process died while starting (exit code {s.proc.exitcode})")
                    self._lost(s, pending, on_pair, on_bundle, "crash",
                               f"the worker process died (exit code {s.proc.exitcode}) during a perception call")
                elif not s.ready and now - s.since > self.startup_timeout:
                    raise WorkerFailure(f"a worker process did not start within {self.startup_timeout:g} s")

    @staticmethod
    def _overdue(s: _Slot, now: float, timeout: float | None) -> bool:
        return bool(s.task is not None and s.current is not None and timeout and now - s.since > timeout)

    def _drain(self, on_pair, on_bundle) -> None:
        """Handle every message already waiting (a worker's last verdicts before it died or was stopped)."""
        time.sleep(0.05)  # let the queue's feeder threads flush
        while True:
            try:
                wid, gen, kind, payload = self.results.get_nowait()
            except queue.Empty:
                return
            s = self.slots[wid]
            if gen == s.gen:
                self._handle(s, kind, payload, on_pair, on_bundle)

    def _handle(self, s: _Slot, kind: str, payload: Any, on_pair, on_bundle) -> None:
        if kind == "ready":
            s.ready = True
        elif kind == "start":
            key, stage = payload
            if stage:
                s.current, s.since = (tuple(key) if key is not None else None, stage), time.monotonic()
            else:
                s.current = None
        elif kind == "pair":
            s.done.add(record_key(payload))
            s.current = None
            on_pair(payload)
        elif kind == "bundle":
            s.current = None
            if on_bundle:
                on_bundle(payload)
        elif kind == "done":
            s.task, s.current = None, None
        elif kind == "fatal":
            user, msg, tb = payload
            if user:
                raise WorkerFailure(msg)
            raise RuntimeError(f"a fuzzing worker failed: {msg}\n{tb}")

    def _lost(self, s: _Slot, pending: deque, on_pair, on_bundle, status: str, message: str) -> None:
        s.proc.kill()
        s.proc.join()
        tb = self._stacks(s) if status == "timeout" else ""
        kind, payload = s.task  # type: ignore[misc]
        cur = s.current
        if kind == "frame":
            index, keys = payload
            remaining = [tuple(k) for k in keys if tuple(k) not in s.done]
            if cur is None or cur[0] is None or cur[1] == "source":  # lost on the source: all its pairs
                for key in remaining:
                    on_pair(_pair_record(key, status, "source", error=message, traceback=tb))
            else:
                on_pair(_pair_record(cur[0], status, "follow", error=message, traceback=tb))
                rest = [k for k in remaining if k != cur[0]]
                if rest:
                    pending.appendleft(("frame", (index, rest)))
        elif kind == "bundle" and on_bundle:
            key, out_dir, _ = payload
            on_bundle({"id": Path(out_dir).name, "key": list(key), "error": message})
        self._spawn(s)


# ----------------------------------------------------------------------------------------------- campaign


@dataclass(slots=True)
class CampaignResult:
    out: Path
    config: CampaignConfig
    tally: Tally
    ran: int  # pairs judged in this invocation
    elapsed: float  # seconds spent judging pairs in this invocation (in-process: after the SUT was built)
    bundles: list[dict] = field(default_factory=list)
    resumed: int = 0  # pairs already in the journal when this invocation began


def check_out(out: Path, *, resume: bool, force: bool) -> bool:
    """Check the run folder without touching it; returns True when an existing journal is to be resumed."""
    journal = out / JOURNAL_NAME
    if out.exists() and not out.is_dir():
        raise FuzzOutputError(f"--out {out}: exists and is not a folder")
    if resume and force:
        raise FuzzArgumentError("--resume and --force contradict each other: resume keeps the journal, force discards it")
    if resume:
        if not journal.is_file():
            raise FuzzInputError(f"--resume: {out} holds no campaign journal ({JOURNAL_NAME}); run without --resume")
        return True
    if out.exists() and any(out.iterdir()) and not force:
        raise FuzzOutputError(
            f"--out {out}: the folder exists; pass --resume to continue its campaign or --force to start over"
        )
    return False


def prepare_out(out: Path, *, resume: bool, force: bool) -> bool:
    """Check the run folder (:func:`check_out`) and, with ``force``, clear what a campaign owns in it; True when
    resuming."""
    if check_out(out, resume=resume, force=force):
        return True
    if out.exists() and any(out.iterdir()):  # only with force: check_out refused a non-empty folder otherwise
        for name in OWNED:
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    return False


def run_campaign(
    config: CampaignConfig,
    out: str | os.PathLike[str],
    *,
    workers: int = 1,
    resume: bool = False,
    force: bool = False,
    on_pair: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    header_extra: Mapping[str, Any] | None = None,
) -> CampaignResult:
    """Run (or resume) a campaign into the run folder ``out``; returns the totals folded from the journal.

    ``on_start(total, already_done)`` is called once the journal is ready; ``on_pair(record)`` after each
    verdict is journaled (for progress bars).
    """
    out = Path(out)
    if workers < 1:
        raise FuzzArgumentError(f"--workers {workers}: use at least 1")
    check_out(out, resume=resume, force=force)
    # build the SUT, ROI and reader before anything is written: a missing model leaves no half-made run folder
    ev: Evaluator | None = None
    pool: _Pool | None = None
    if workers == 1:
        ev = Evaluator(config)
    else:
        pool = _Pool(config, min(workers, len(config.frames)))
        try:
            pool.wait_ready()
        except BaseException:
            pool.close()
            raise
    try:
        resuming = prepare_out(out, resume=resume, force=force)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    journal_path = out / JOURNAL_NAME
    tally = Tally(config.ns)
    if resuming:
        header = read_header(journal_path)
        if header.get("config") != config.to_dict():
            diff = sorted(k for k, v in config.to_dict().items() if header.get("config", {}).get(k) != v)
            raise FuzzArgumentError(
                f"--resume: the campaign in {out} was started with other settings ({', '.join(diff)} differ); "
                "repeat its original options, or use --force to start over"
            )
        for rec in iter_records(journal_path, repair=True):
            tally.add(rec)
        journal = Journal(journal_path)
    else:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise FuzzOutputError(f"--out {out}: cannot create the folder ({err.strerror or err})") from err
        journal = create_journal(journal_path, {"config": config.to_dict(), **dict(header_extra or {})})
    already = tally.done
    if on_start:
        on_start(config.total, already)

    def record(rec: dict[str, Any]) -> None:
        journal.write(rec)
        tally.add(rec)
        if on_pair:
            on_pair(rec)

    todo: list[tuple[str, Any]] = []
    seen = tally._seen
    for f in config.frames:
        keys = [k for k in config.keys_of(f) if k not in seen]
        if keys:
            todo.append(("frame", (f, keys)))
    t0 = time.perf_counter()  # throughput counts judging, not building the SUT
    try:
        if todo:
            if ev is not None:
                for _, (f, keys) in todo:
                    ev.run_frame(f, keys, lambda kind, rec: record(rec) if kind == "pair" else None)
            elif pool is not None:
                pool.run(todo, record)
    finally:
        journal.close()
        if pool is not None:
            pool.close()
    elapsed = time.perf_counter() - t0
    return CampaignResult(out, config, tally, tally.done - already, elapsed, resumed=already)


def load_tally(out: str | os.PathLike[str]) -> tuple[CampaignConfig, Tally]:
    """Re-fold the totals of a run folder from its journal."""
    path = Path(out) / JOURNAL_NAME
    header = read_header(path)
    config = CampaignConfig.from_dict(header["config"])
    tally = Tally(config.ns)
    for rec in iter_records(path):
        tally.add(rec)
    return config, tally


def violating_keys(out: str | os.PathLike[str]) -> list[tuple[Key, dict[str, Any]]]:
    """(key, record) of every pair that violates the count or the subset relation, sorted by (n, frame, trial)."""
    found: dict[Key, dict] = {}
    for rec in iter_records(Path(out) / JOURNAL_NAME):
        if rec["status"] == "ok" and (rec["verdict"]["count_violation"] or rec["verdict"]["subset_violation"]):
            found.setdefault(record_key(rec), rec)
    return sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))


def select_bundles(violations: list[tuple[Key, dict]], per_n: int | None) -> list[tuple[Key, dict]]:
    """The first ``per_n`` violations of each n (count-relation violations first), or all when None."""
    if per_n is None:
        return violations
    by_n: dict[int, list] = {}
    for kv in violations:
        by_n.setdefault(kv[0][1], []).append(kv)
    out: list = []
    for n in sorted(by_n):
        items = sorted(by_n[n], key=lambda kv: (not kv[1]["verdict"]["count_violation"], kv[0][0], kv[0][2]))
        out.extend(items[:per_n])
    return out


def bundle_id(key: Key) -> str:
    return f"n{key[1]}-f{key[0]:06d}-t{key[2]}"


def make_bundles(
    config: CampaignConfig,
    out: str | os.PathLike[str],
    keys: list[Key],
    *,
    workers: int = 1,
    budget: int = 200,
    command: str = "",
    on_bundle: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Write a bug bundle per key into ``out/violations/<id>/`` (skipping complete ones, so resumable)."""
    from lidarmt.report.bundle import make_bundle

    root = Path(out) / "violations"
    if root.is_dir():  # half-built bundles of an interrupted run (they are built in hidden folders, then renamed)
        for stale in root.glob(".n*-f*-t*.*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
    infos: list[dict] = []
    todo = []
    for key in keys:
        d = root / bundle_id(key)
        if (d / "bundle.json").is_file():
            infos.append({"id": d.name, "key": list(key), "existing": True})
            if on_bundle:
                on_bundle(infos[-1])
            continue
        todo.append(("bundle", (key, str(d), {"budget": budget, "command": command})))

    def got(info: dict) -> None:
        infos.append(info)
        if on_bundle:
            on_bundle(info)

    if not todo:
        return infos
    if workers == 1:
        ev = Evaluator(config)
        for _, (key, d, opts) in todo:
            try:
                got(make_bundle(ev, key, Path(d), **opts))
            except (SutTimeout, Exception) as err:
                if isinstance(err, UserError):
                    raise
                got({"id": Path(d).name, "key": list(key), "error": f"{type(err).__name__}: {err}"})
    else:
        pool = _Pool(config, min(workers, len(todo)))
        try:
            pool.run(todo, lambda rec: None, got)
        finally:
            pool.close()
    return infos


def environment() -> dict[str, str]:
    """Versions and machine, for reports (torch only if it is importable)."""
    import platform

    import lidarmt

    env = {"lidarmt": lidarmt.__version__, "python": platform.python_version(), "numpy": np.__version__,
           "platform": platform.platform(), "cpu": _cpu_name(), "cpus": str(os.cpu_count())}
    try:
        import numba

        env["numba"] = numba.__version__
    except ImportError:  # pragma: no cover
        pass
    if "torch" in sys.modules or _has("torch"):
        try:
            import torch

            env["torch"] = torch.__version__
        except ImportError:  # pragma: no cover
            pass
    return env


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()
