"""The campaign engine shared by every metamorphic relation (LiDAR MR1, the camera relations, later ones).

A *campaign* judges many *pairs* (a source input and a follow-up made from it). Its unit of work is one source
*item* (a LiDAR frame, a camera image): the system under test sees the source once and every follow-up of it
after, so the item's work is shared. The engine owns everything that is not about one relation:

* the run folder: refusing to clobber it (``--resume`` / ``--force``), an exclusive lock for the whole run
  (:class:`RunLock`), clearing what a campaign owns on ``--force``;
* the append-only, fsync'd journal (:mod:`lidarmt.engine.journal`), its header (the configuration, checked on
  ``--resume``), and folding the totals from it, so a killed campaign resumes to exactly the same totals;
* running items in this process, in worker processes or in Ray actors (:class:`_Pool` over a
  :class:`Transport`; ``backend="ray"``: :mod:`lidarmt.engine.ray_backend`), with per-call timeouts (an explicit
  ``--timeout``, or an automatic one that scales with the system's measured first call), crash isolation
  (a crash, exception, timeout or dying worker is a *finding*, never a stop), and a worker count clamped to
  what the machine holds (:func:`clamp_workers`);
* building bug bundles for chosen keys, in this process or in the workers.

A relation plugs in through a *configuration* object (see :class:`CampaignSpec`): it says which items and keys
there are, how a journal record names its key, how to build the per-process :class:`Evaluator` that judges an
item's keys and writes a bundle, and how to fold records into totals. :func:`config_from_dict` rebuilds a
configuration from a journal header or bundle by its ``kind``, from a fixed table of the project's own
relations (never by importing a name read from the file).
"""

from __future__ import annotations

import contextlib
import json
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
from typing import Any, Protocol

import numpy as np

from lidarmt._machine import record as machine_record
from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError, FuzzOutputError
from lidarmt.engine.journal import (
    JOURNAL_NAME,
    Journal,
    create_journal,
    iter_records,
    read_header,
    segment_record,
)
from lidarmt.engine.kinds import DEFAULT_KIND, KINDS, config_from_dict  # noqa: F401  (engine API)
from lidarmt.engine.timeouts import (  # noqa: F401  (engine API)
    AUTO_TIMEOUT_FACTOR,
    AUTO_TIMEOUT_FIRST,
    AUTO_TIMEOUT_MIN,
    auto_timeout,
    describe_timeout,
)
from lidarmt.errors import UserError

Key = tuple[int, ...]
Emit = Callable[[str, Any], None]
LOCK_NAME = ".lidarmt.lock"



class CampaignSpec(Protocol):
    """What a relation's campaign configuration provides to the engine (frozen, picklable through to_dict)."""

    kind: str
    items: tuple[int, ...]  # source items (frame indices) in the order they are run
    timeout: float | None  # seconds per SUT call; None = automatic (:func:`auto_timeout`)
    owned: tuple[str, ...]  # names in the run folder the campaign writes (removed by --force)

    @property
    def total(self) -> int: ...

    def keys_of(self, item: int) -> list[Key]: ...

    def key_fields(self, key: Key) -> dict[str, Any]: ...

    def record_key(self, rec: Mapping[str, Any]) -> Key: ...

    def bundle_id(self, key: Key) -> str: ...

    def new_tally(self) -> Any: ...

    def evaluator(self, *, enforce_timeout: bool = True) -> Evaluator: ...

    def worker_memory(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...


class Evaluator(Protocol):
    """Judges the keys of one item (emitting ``("pair", record)`` per key) and writes bundles; one per process."""

    on_call: Callable[[Any, str], None]

    def run_item(self, index: int, keys: list[Key], emit: Emit) -> None: ...

    def make_bundle(self, key: Key, out_dir: Path, **opts: Any) -> dict[str, Any]: ...


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON type (``"11"`` is not ``11``, ``true`` is not ``1``, ``1.0`` is not ``1``)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, np.generic):  # what the campaign holds as a NumPy scalar, its journal holds as JSON
        b = b.item()
    return type(a) is type(b) and a == b


def fold_records(tally: Any, path: str | os.PathLike[str], *, repair: bool = False,
                 config: CampaignSpec | None = None) -> None:
    """Add every record of the journal ``path`` to ``tally``; a record of the wrong shape or types (a journal is
    a file like any other) is one line, not a traceback. With ``config`` (the campaign the journal belongs to),
    a record must also name a key of the campaign's plan, in the very fields and types the campaign writes
    (an ``n = 7`` in a ``--n 10,100,1000`` run, frame 29 in a 2-frame sample, a frame written as ``"11"``):
    folded into the totals, such a line would report pairs the campaign never planned, so it is refused."""
    plan = {tuple(k) for item in config.items for k in config.keys_of(item)} if config is not None else None
    for i, rec in enumerate(iter_records(path, repair=repair)):
        try:
            if config is not None and plan is not None:
                key = config.record_key(rec)
                if key not in plan:
                    raise FuzzInputError(
                        f"{path}: record {i + 1} is for {_key_text(rec)}, which is not in this campaign's plan "
                        "(the journal was edited or comes from another campaign); use --force to start over")
                want = config.key_fields(key)
                bad = next((k for k, v in want.items() if not _same(rec.get(k), v)), None)
                if bad is not None:
                    raise FuzzInputError(
                        f"{path}: record {i + 1} has {bad} {rec.get(bad)!r} where this campaign writes "
                        f"{want[bad]!r} (the journal was edited); use --force to start over")
            tally.add(rec)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as err:
            if isinstance(err, UserError):
                raise
            raise FuzzInputError(f"{path}: record {i + 1} is not a record of this campaign ({type(err).__name__}: "
                                 f"{err}); the journal was edited or damaged: use --force to start over") from err


def _key_text(rec: Mapping[str, Any]) -> str:
    fields = {k: rec[k] for k in ("key", "frame", "n", "trial", "transform", "level") if k in rec}
    return ", ".join(f"{k} {json.dumps(v)[:40]}" for k, v in fields.items()) or "no key"


# ----------------------------------------------------------------------------------------------- results


def pair_record(config: CampaignSpec, key: Key, status: str, stage: str, **extra: Any) -> dict[str, Any]:
    """A journal record for ``key`` (``status`` ok | crash | timeout; ``stage`` source | follow)."""
    return {"type": "pair", **config.key_fields(key), "status": status, "stage": stage, **extra}


class SutTimeout(Exception):
    """The system under test ran past the campaign's time limit."""


def failure(err: BaseException) -> dict[str, Any]:
    """A finding's fields for an exception of the system under test (status, error, traceback)."""
    tb = "".join(traceback.format_exception(err))
    if isinstance(err, SutTimeout) or getattr(err, "is_timeout", False):  # the engine's limit, or the SUT's own
        return {"status": "timeout", "error": str(err), "traceback": tb}
    return {"status": "crash", "error": f"{type(err).__name__}: {err}", "traceback": tb}


# ----------------------------------------------------------------------------------------------- time limits

@contextlib.contextmanager
def _alarm(seconds: float | None, what: str):
    """Raise SutTimeout in this (main) thread after ``seconds``; a no-op elsewhere or without a limit."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise SutTimeout(f"{what} did not return within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class EvaluatorBase:
    """What every relation's evaluator shares: announcing each SUT call (so a worker's parent can time it) and
    enforcing the time limit in-process (SIGALRM: stops Python code, waits for a native call to return)."""

    what = "the system under test"

    def __init__(self, timeout: float | None, *, enforce_timeout: bool = True) -> None:
        self.timeout = timeout
        self._enforce = enforce_timeout
        self.first_call_s: float | None = None  # the first call's seconds per unit of work
        self.on_call: Callable[..., None] = lambda keys, stage, work=1: None

    def limit(self, work: int = 1) -> float:
        return self.timeout if self.timeout is not None else auto_timeout(self.first_call_s, work)

    def call(self, fn: Callable[..., Any], *args: Any, keys: Any = None, stage: str = "bundle", work: int = 1) -> Any:
        """``fn(*args)`` as one timed SUT call; ``keys`` (a key, a list of keys or None) are the pairs it serves,
        ``work`` its units of work (images in a batch) for the automatic time limit."""
        work = max(1, int(work))
        self.on_call(keys, stage, work)
        t0 = time.perf_counter()
        ok = False
        try:
            with _alarm(self.limit(work) if self._enforce else None, self.what):
                out = fn(*args)
            ok = True
            return out
        finally:
            if ok and self.first_call_s is None:
                self.first_call_s = (time.perf_counter() - t0) / work
            self.on_call(keys, "", work)  # the call is over (the parent stops timing it)


# ----------------------------------------------------------------------------------------------- workers


def _keys_of(keys: Any) -> list[Key] | None:
    """Normalise what ``on_call`` announced: one key, a list of keys, or None (the whole item)."""
    if keys is None:
        return None
    if len(keys) and isinstance(keys[0], (list, tuple)):
        return [tuple(int(v) for v in k) for k in keys]
    return [tuple(int(v) for v in keys)]


def _worker_main(cfg: dict[str, Any], wid: int, gen: int, tasks, results, threads: int = 0,
                 stack_file: str | None = None) -> None:  # pragma: no cover - child
    """Entry point of a worker process: build an evaluator, then run tasks until told to stop.

    ``threads``: the CPU threads this worker's numeric libraries may use (the cores shared among workers), so
    W workers do not oversubscribe the machine. ``stack_file``: where :mod:`faulthandler` writes the Python
    stacks of a call that runs past its limit (just before the parent kills the worker), so a timeout finding
    comes with the traceback of where the SUT hung.
    """

    def put(kind: str, payload: Any) -> None:
        # synchronous: the message is in the pipe before the SUT call it announces starts, so a worker that
        # dies inside that call (os._exit, a segfault) cannot take the announcement with it
        results.send((wid, gen, kind, payload))

    _die_with_parent()
    from lidarmt._heap import keep_freed_memory

    keep_freed_memory()  # as the lidarmt command does on start (a spawned worker starts with glibc's defaults)
    if threads > 0:
        for var in _THREAD_VARS:
            os.environ.setdefault(var, str(threads))
    try:
        config = config_from_dict(cfg)
        ev = config.evaluator(enforce_timeout=False)
        if threads > 0 and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
    except BaseException as err:
        put("fatal", (isinstance(err, UserError), str(err), "".join(traceback.format_exception(err))))
        return
    stack_fh = open(stack_file, "w", encoding="utf-8") if stack_file else None  # noqa: SIM115
    first: list[float] = []

    def on_call(keys, stage, work: int = 1) -> None:
        if stack_fh is not None:
            import faulthandler

            if stage:
                limit = (config.timeout if config.timeout is not None
                         else auto_timeout(first[0] if first else None, work))
                stack_fh.seek(0)
                stack_fh.truncate()
                faulthandler.dump_traceback_later(max(0.5 * limit, limit - 0.25), file=stack_fh)
            else:
                faulthandler.cancel_dump_traceback_later()
        if not first and not stage and ev.first_call_s is not None:
            first.append(ev.first_call_s)
        put("start", (keys, stage, work))

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
            if kind == "item":
                index, keys = payload
                ev.run_item(index, [tuple(k) for k in keys], put)
            elif kind == "bundle":
                key, out_dir, opts = payload
                put("bundle", ev.make_bundle(tuple(key), Path(out_dir), **opts))
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
    handle: Any = None  # what the transport runs the worker as: a process, a Ray actor
    ready: bool = False
    task: tuple[str, Any] | None = None
    done: set = field(default_factory=set)
    current: tuple[list[Key] | None, str] | None = None
    since: float = 0.0
    first_call_s: float | None = None  # this process's first SUT call per unit of work (the automatic limit)
    work: int = 1  # units of work of the call in progress
    stacks: str = ""  # Python stacks the worker sent when its call neared the limit (transports that send them)
    dead: str | None = None  # why the worker is gone ("exit code 77"), set by transports that learn it by message


class WorkerFailure(FuzzInputError):
    """A worker could not build its system under test or inputs, or hit a user error (the message says which)."""


BACKENDS = ("local", "ray")


def check_backend(backend: str, address: str | None) -> None:
    """Refuse an unknown backend, or an ``--address`` given to the local one (one line, what to do)."""
    if backend not in BACKENDS:
        raise FuzzArgumentError(f"--backend {backend!r}: use local (worker processes on this machine) or ray")
    if address is not None and backend != "ray":
        raise FuzzArgumentError(f"--address {address}: a Ray cluster's address needs --backend ray")


class Transport(Protocol):
    """How a :class:`_Pool` starts, feeds, hears from and kills its workers; everything else (time limits,
    findings for lost calls, re-queueing) is the pool's, the same for every transport.

    A worker announces itself with ``("ready", None)`` (or ``("fatal", (user, message, traceback))``), then, per
    task, sends ``("start", (keys, stage))`` around each SUT call, ``("pair", record)`` per verdict,
    ``("bundle", info)``, optionally ``("stacks", text)`` just before its call's limit, and ``("done", None)``.
    """

    what: str  # "worker process", "Ray actor": for messages

    def spawn(self, s: _Slot) -> None: ...  # start worker s (s.gen is already the new generation)

    def send(self, s: _Slot, task: tuple[str, Any]) -> None: ...

    def receive(self, timeout: float) -> list[tuple[int, int, str, Any]]: ...  # (wid, gen, kind, payload)

    def drain(self) -> list[tuple[int, int, str, Any]]: ...  # what is already waiting, without blocking long

    def death(self, s: _Slot) -> str | None: ...  # None while the worker lives, else why it is gone

    def kill(self, s: _Slot) -> None: ...  # kill worker s and wait until it is gone

    def stacks(self, s: _Slot) -> str: ...  # the Python stacks of s's overrunning call, "" when unknown

    def close(self, slots: list[_Slot]) -> None: ...


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


@contextlib.contextmanager
def _environment(values: Mapping[str, str]):
    """Set environment variables for the processes started inside the block, then restore them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _LocalTransport:
    """Worker processes on this machine (``multiprocessing`` spawn context): tasks go down a queue per worker,
    messages come back up a pipe per worker, written synchronously by the worker (no feeder thread)."""

    what = "worker process"

    def __init__(self, config: CampaignSpec, workers: int) -> None:
        import multiprocessing as mp
        import tempfile

        self.ctx = mp.get_context("spawn")
        self._cfg = config.to_dict()
        self._threads = max(1, (os.cpu_count() or 1) // workers)
        self._tmp = tempfile.TemporaryDirectory(prefix="lidarmt-fuzz-")
        self._readers: dict[Any, int] = {}  # open message pipes -> worker id

    def spawn(self, s: _Slot) -> None:
        tasks = self.ctx.Queue()
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_worker_main,
                                args=(self._cfg, s.wid, s.gen, tasks, writer, self._threads,
                                      self._stack_file(s)),
                                daemon=True, name=f"lidarmt-fuzz-{s.wid}")
        # the thread limits must be in the child's environment from its start: it imports numpy (whose BLAS
        # sizes its thread pool once, at import) before _worker_main runs
        with _environment({v: str(self._threads) for v in _THREAD_VARS if v not in os.environ}):
            proc.start()
        writer.close()  # the child holds the only writer: its death is the pipe's end
        self._readers[reader] = s.wid
        s.handle = (proc, tasks, reader)

    def send(self, s: _Slot, task: tuple[str, Any]) -> None:
        s.handle[1].put(task)

    def receive(self, timeout: float) -> list[tuple[int, int, str, Any]]:
        from multiprocessing.connection import wait

        if not self._readers:
            time.sleep(timeout)
            return []
        out: list[tuple[int, int, str, Any]] = []
        for conn in wait(list(self._readers), timeout):
            try:
                while len(out) < 256 and conn.poll(0):  # a batch, so the pool's checks run once per batch
                    out.append(conn.recv())
            except (EOFError, OSError):  # the worker is gone and everything it wrote has been read
                self._forget(conn)
        return out

    def drain(self) -> list[tuple[int, int, str, Any]]:
        out: list[tuple[int, int, str, Any]] = []
        deadline = time.monotonic() + 0.5  # busy workers keep writing: take what is there, not what comes
        while time.monotonic() < deadline:
            got = self.receive(0)
            if not got:
                break
            out.extend(got)
        return out

    def _forget(self, conn) -> None:
        self._readers.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.close()

    def death(self, s: _Slot) -> str | None:
        code = s.handle[0].exitcode
        return None if code is None else f"exit code {code}"

    def kill(self, s: _Slot) -> None:
        s.handle[0].kill()
        s.handle[0].join()
        self._forget(s.handle[2])

    def _stack_file(self, s: _Slot) -> str:
        return os.path.join(self._tmp.name, f"stack-{s.wid}.txt")

    def stacks(self, s: _Slot) -> str:
        """What faulthandler wrote for the worker's overrunning call (empty if it wrote nothing)."""
        try:
            with open(self._stack_file(s), encoding="utf-8", errors="replace") as fh:
                return fh.read().strip()
        except OSError:
            return ""

    def close(self, slots: list[_Slot]) -> None:
        for s in slots:
            with contextlib.suppress(Exception):
                s.handle[1].put(None)
        deadline = time.monotonic() + 5
        for s in slots:
            proc = s.handle[0]
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in list(self._readers):
            self._forget(conn)
        self._tmp.cleanup()


def make_transport(config: CampaignSpec, workers: int, *, backend: str = "local",
                   address: str | None = None) -> Transport:
    """The transport of a backend: worker processes here, or Ray actors (:mod:`lidarmt.engine.ray_backend`)."""
    check_backend(backend, address)
    if backend == "ray":
        from lidarmt.engine.ray_backend import RayTransport

        return RayTransport(config, workers, address=address)
    return _LocalTransport(config, workers)


class _Pool:
    """W workers fed with tasks; the parent enforces per-call limits and survives worker deaths.

    The workers are processes on this machine or Ray actors (``backend``); which one only changes the
    :class:`Transport`: timing calls from their "start" messages, turning an overdue or dead worker's call into
    findings and re-queueing the rest of its item (:meth:`_lost`) is this class's, for both.
    """

    def __init__(self, config: CampaignSpec, workers: int, *, startup_timeout: float = 600.0,
                 backend: str = "local", address: str | None = None) -> None:
        self.config = config
        self.slots = [_Slot(i) for i in range(workers)]
        self.startup_timeout = startup_timeout
        self.transport = make_transport(config, workers, backend=backend, address=address)
        try:
            for s in self.slots:
                self._spawn(s)
        except BaseException:
            self.close()
            raise

    def _spawn(self, s: _Slot) -> None:
        s.gen += 1
        s.ready, s.task, s.current, s.done, s.first_call_s, s.stacks, s.dead = False, None, None, set(), None, "", None
        s.since = time.monotonic()
        self.transport.spawn(s)

    def _stacks(self, s: _Slot) -> str:
        text = (self.transport.stacks(s) or s.stacks).strip()
        return f"Python stacks of the worker when the call ran past its limit:\n{text}" if text else ""

    def close(self) -> None:
        self.transport.close([s for s in self.slots if s.handle is not None])

    def _limit(self, s: _Slot) -> float:
        t = self.config.timeout
        return t if t is not None else auto_timeout(s.first_call_s, s.work)

    def _death(self, s: _Slot) -> str | None:
        return s.dead or (self.transport.death(s) if s.handle is not None else None)

    def _check_starting(self, s: _Slot, now: float) -> None:
        if s.ready:
            return
        why = self._death(s)
        if why is not None:
            raise WorkerFailure(f"a {self.transport.what} died while starting ({why})")
        if now - s.since > self.startup_timeout:
            hint = " (does the cluster have a free CPU for each worker?)" if "Ray" in self.transport.what else ""
            raise WorkerFailure(f"a {self.transport.what} did not start within {self.startup_timeout:g} s{hint}")

    def _dispatch(self, messages, on_pair, on_bundle) -> None:
        for wid, gen, kind, payload in messages:
            s = self.slots[wid]
            if gen == s.gen:
                self._handle(s, kind, payload, on_pair, on_bundle)

    def wait_ready(self) -> None:
        """Block until every worker has built its evaluator (or raise what went wrong)."""
        while not all(s.ready for s in self.slots):
            got = self.transport.receive(0.1)
            self._dispatch(got, lambda rec: None, None)
            now = time.monotonic()
            for s in self.slots:
                self._check_starting(s, now)

    def run(self, tasks: Iterable[tuple[str, Any]], on_pair: Callable[[dict], None],
            on_bundle: Callable[[dict], None] | None = None) -> None:
        pending = deque(tasks)
        while pending or any(s.task is not None for s in self.slots):
            for s in self.slots:
                if s.ready and s.task is None and pending:
                    s.task = pending.popleft()
                    s.done, s.current, s.stacks = set(), None, ""
                    self.transport.send(s, s.task)
            self._dispatch(self.transport.receive(0.05), on_pair, on_bundle)
            now = time.monotonic()
            if any(self._overdue(s, now) or (s.task is not None and self._death(s) is not None)
                   for s in self.slots):
                self._dispatch(self.transport.drain(), on_pair, on_bundle)  # a dying or late worker's last words
            for s in self.slots:
                if self._overdue(s, now):
                    limit = self._limit(s)
                    how = "--timeout" if self.config.timeout is not None else "the automatic limit"
                    self._lost(s, pending, on_pair, on_bundle, "timeout",
                               f"timed out after {limit:g} s ({how}; the worker process was killed)")
                    continue
                why = self._death(s) if (s.task is not None or not s.ready) else None
                if why is not None:
                    self._check_starting(s, now)
                    self._lost(s, pending, on_pair, on_bundle, "crash",
                               f"the worker process died ({why}) during a call of the system under test")
                else:
                    self._check_starting(s, now)

    def _overdue(self, s: _Slot, now: float) -> bool:
        return bool(s.task is not None and s.current is not None and now - s.since > self._limit(s))

    def _handle(self, s: _Slot, kind: str, payload: Any, on_pair, on_bundle) -> None:
        if kind == "ready":
            s.ready = True
        elif kind == "start":
            keys, stage, *more = payload
            work = max(1, int(more[0])) if more else 1
            if stage:
                s.current, s.since, s.stacks, s.work = (_keys_of(keys), stage), time.monotonic(), "", work
            else:
                if s.current is not None and s.first_call_s is None:
                    s.first_call_s = (time.monotonic() - s.since) / work
                s.current = None
        elif kind == "pair":
            s.done.add(self.config.record_key(payload))
            on_pair(payload)
        elif kind == "bundle":
            s.current = None
            if on_bundle:
                on_bundle(payload)
        elif kind == "stacks":
            s.stacks = str(payload)
        elif kind == "done":
            s.task, s.current = None, None
        elif kind == "dead":  # a transport that learns of a death by message (Ray)
            s.dead = str(payload)
        elif kind == "fatal":
            user, msg, tb = payload
            if user:
                raise WorkerFailure(msg)
            raise RuntimeError(f"a campaign worker failed: {msg}\n{tb}")

    def _lost(self, s: _Slot, pending: deque, on_pair, on_bundle, status: str, message: str) -> None:
        """Worker ``s`` ran past its limit (``status`` "timeout") or died ("crash"): kill it, record a finding
        for each key its current call served (the whole rest of the item when the call served the source), put
        the item's other keys back in front of the queue, and start a fresh worker in its slot."""
        self.transport.kill(s)
        tb = self._stacks(s) if status == "timeout" else ""
        kind, payload = s.task  # type: ignore[misc]
        cur = s.current
        if kind == "item":
            index, keys = payload
            remaining = [tuple(k) for k in keys if tuple(k) not in s.done]
            # the call announced the keys it served (None: the whole item, e.g. the source input)
            stage = cur[1] if cur is not None else "source"
            if cur is None or cur[0] is None:
                lost = remaining
            else:
                announced = set(cur[0])
                lost = [k for k in remaining if k in announced]
            for key in lost:
                on_pair(pair_record(self.config, key, status, stage, error=message, traceback=tb))
            gone = set(lost)
            rest = [k for k in remaining if k not in gone]
            if rest:
                pending.appendleft(("item", (index, rest)))
        elif kind == "bundle" and on_bundle:
            key, out_dir, _ = payload
            on_bundle({"id": Path(out_dir).name, "key": list(key), "error": message})
        self._spawn(s)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def clamp_workers(requested: int, *, items: int, per_worker: int, backend: str = "local",
                  address: str | None = None) -> tuple[int, str]:
    """The worker count a machine can hold: at most one per CPU core, per item, and per ``per_worker`` bytes
    of available memory. Returns (count, a one-line note when it is lower than asked, else "").

    With ``backend="ray"`` the machine is the Ray cluster (connected to at ``address``, or started on this
    machine): its CPUs and its memory resource, as Ray reports them now."""
    if requested < 1:
        raise FuzzArgumentError(f"--workers {requested}: use at least 1")
    check_backend(backend, address)
    if backend == "ray":
        from lidarmt.engine.ray_backend import cluster_resources

        res = cluster_resources(address)
        cores, mem, where = int(res.cpus), res.memory, f"the Ray cluster has {int(res.cpus)} CPU(s)"
    else:
        cores, mem, where = _cores(), _available_memory(), f"this machine gives the process {_cores()} CPU core(s)"
    limits = {"items": max(1, items), "CPU cores": max(1, cores)}
    if mem is not None and per_worker > 0:
        limits["memory"] = max(1, int(mem // per_worker))
    n = min(requested, *limits.values())
    if n >= requested:
        return requested, ""
    why = min(limits, key=lambda k: limits[k])
    detail = {"items": f"the campaign has {items} source item(s)",
              "CPU cores": where,
              "memory": (f"{(mem or 0) / 2**30:.1f} GiB of memory is available at about "
                         f"{per_worker / 2**30:.1f} GiB per worker")}[why]
    return n, f"--workers {requested}: using {n} ({detail})"


def select_items(available: int, count: int | None, seed: int, *, what: str = "frames",
                 source: str = "the source") -> tuple[int, ...]:
    """``count`` indices drawn at random without replacement (all when None), sorted for sequential reads;
    the draw depends only on (seed, available, count)."""
    if seed < 0:
        raise FuzzArgumentError(f"--seed {seed}: give a non-negative integer")
    if available <= 0:
        raise FuzzInputError(f"{source} holds no {what}")
    if count is None:
        return tuple(range(available))
    if count <= 0:
        raise FuzzArgumentError(f"--frames {count}: ask for at least one frame")
    if count > available:
        raise FuzzArgumentError(
            f"--frames {count}: {source} holds only {available} {what}; ask for at most {available} "
            "(or leave --frames out to use them all)"
        )
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0x6672616D])))  # "fram"
    return tuple(int(i) for i in np.sort(rng.choice(available, size=count, replace=False)))


# ----------------------------------------------------------------------------------------------- run folder


class RunLock:
    """An exclusive lock on a run folder for a whole run (campaign, bundles, reports), re-entrant in a process.

    ``with RunLock(out):`` takes the lock at once when the folder exists (so a second campaign on it is refused
    before anything is built); otherwise :meth:`acquire` takes it when the folder is created. A second process
    gets a one-line :class:`FuzzOutputError` naming the holder's process id.
    """

    _held: dict[str, int] = {}  # real path of a lock file -> nesting depth (this process)

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        self._fd: int | None = None
        self._key: str | None = None

    def __enter__(self) -> RunLock:
        if self.out.is_dir():
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        if self._key is not None:
            return
        import fcntl

        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise FuzzOutputError(f"--out {self.out}: cannot create the folder ({err.strerror or err})") from err
        path = self.out / LOCK_NAME
        key = os.path.realpath(path)
        if key in RunLock._held:
            RunLock._held[key] += 1
            self._key = key
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise FuzzOutputError(f"--out {self.out}: cannot lock the run folder ({err.strerror or err})") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise FuzzOutputError(
                f"--out {self.out}: another lidarmt campaign (process {holder}) is using this run folder; wait "
                "for it to finish or choose another --out"
            ) from err
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        RunLock._held[key] = 1
        self._fd, self._key = fd, key

    def release(self) -> None:
        if self._key is None:
            return
        RunLock._held[self._key] -= 1
        if RunLock._held[self._key] == 0:
            del RunLock._held[self._key]
            if self._fd is not None:
                os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = self._key = None


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
    if out.exists() and any(p.name != LOCK_NAME for p in out.iterdir()) and not force:
        raise FuzzOutputError(
            f"--out {out}: the folder exists; pass --resume to continue its campaign or --force to start over"
        )
    return False


def prepare_out(out: Path, owned: Iterable[str], *, resume: bool, force: bool) -> bool:
    """Check the run folder (:func:`check_out`) and, with ``force``, clear what a campaign owns in it (``owned``
    names); True when resuming."""
    if check_out(out, resume=resume, force=force):
        return True
    if out.exists():  # only with force: check_out refused a non-empty folder otherwise
        for name in owned:
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    return False


# ----------------------------------------------------------------------------------------------- campaign


@dataclass(slots=True)
class CampaignResult:
    out: Path
    config: Any
    tally: Any
    ran: int  # pairs judged in this invocation
    elapsed: float  # seconds spent judging pairs in this invocation (after the SUT was built)
    bundles: list[dict] = field(default_factory=list)
    resumed: int = 0  # pairs already in the journal when this invocation began
    workers: int = 1  # worker processes actually used (after clamping)
    workers_note: str = ""  # why fewer workers than asked were used ("" when as asked)


#: bytes a pair costs a campaign before it is judged: its key in the item's list and in the tally's set
PAIR_BYTES = 200


def run_campaign(
    config: CampaignSpec,
    out: str | os.PathLike[str],
    *,
    workers: int = 1,
    resume: bool = False,
    force: bool = False,
    on_pair: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    header_extra: Mapping[str, Any] | None = None,
    lock: RunLock | None = None,
    backend: str = "local",
    address: str | None = None,
) -> CampaignResult:
    """Run (or resume) a campaign into the run folder ``out``; returns the totals folded from the journal.

    ``on_start(total, already_done)`` is called once the journal is ready; ``on_pair(record)`` after each
    verdict is journaled (for progress bars). ``lock``: a :class:`RunLock` the caller holds for longer (e.g.
    through bundles and reports); by default the campaign locks the folder for its own duration.

    ``backend``: ``"local"`` runs one item at a time in this process (``workers=1``) or in worker processes;
    ``"ray"`` runs ``workers`` Ray actors (even one) on the cluster at ``address`` (``"auto"``: the one this
    machine belongs to; None: a Ray started here). Verdicts, totals and the journal do not depend on the
    backend, so a campaign started on one resumes on the other.
    """
    out = Path(out)
    from lidarmt._limits import check_memory

    # every pair's key is listed per item and remembered by the tally: a count an option claims must fit memory
    check_memory(config.total * PAIR_BYTES, what=f"a campaign of {config.total:,} pairs", error=FuzzArgumentError,
                 hint="ask for fewer trials, frames or settings")
    workers, note = clamp_workers(workers, items=len(config.items), per_worker=config.worker_memory(),
                                  backend=backend, address=address)
    check_out(out, resume=resume, force=force)
    own_lock = lock is None
    lock = lock or RunLock(out)
    if own_lock:
        lock.__enter__()
    try:
        if out.is_dir():
            lock.acquire()  # before building anything: a second campaign on this folder stops here
        # build the SUT and inputs before anything is written: a missing model leaves no half-made run folder
        ev: Any = None
        pool: _Pool | None = None
        if workers == 1 and backend == "local":
            ev = config.evaluator()
        else:
            pool = _Pool(config, workers, backend=backend, address=address)
            try:
                pool.wait_ready()
            except BaseException:
                pool.close()
                raise
        try:
            lock.acquire()
            resuming = prepare_out(out, config.owned, resume=resume, force=force)
            tally, journal, already = _open_journal(config, out, resuming, header_extra)
        except BaseException:
            if pool is not None:
                pool.close()
            raise
        if on_start:
            on_start(config.total, already)

        def record(rec: dict[str, Any]) -> None:
            journal.write(rec)
            tally.add(rec)
            if on_pair:
                on_pair(rec)

        todo: list[tuple[str, Any]] = []
        for item in config.items:
            keys = [k for k in config.keys_of(item) if not tally.seen(k)]
            if keys:
                todo.append(("item", (item, keys)))
        t0 = time.perf_counter()  # throughput counts judging, not building the SUT
        try:
            if todo:
                if ev is not None:
                    for _, (item, keys) in todo:
                        ev.run_item(item, keys, lambda kind, rec: record(rec) if kind == "pair" else None)
                elif pool is not None:
                    pool.run(todo, record)
        finally:
            journal.close()
            if pool is not None:
                pool.close()
        elapsed = time.perf_counter() - t0
    finally:
        if own_lock:
            lock.release()
    return CampaignResult(out, config, tally, tally.done - already, elapsed, resumed=already, workers=workers,
                          workers_note=note)


def _open_journal(config: CampaignSpec, out: Path, resuming: bool,
                  header_extra: Mapping[str, Any] | None) -> tuple[Any, Journal, int]:
    path = out / JOURNAL_NAME
    tally = config.new_tally()
    if resuming and path.is_file() and path.stat().st_size == 0:
        # a journal whose header never reached the disk (it was full): nothing was judged, so --resume, as
        # the full-disk message says, starts the campaign afresh rather than refusing the empty file
        resuming = False
    if resuming:
        header = read_header(path)
        stored = header.get("config", {})
        if not isinstance(stored, dict):
            raise FuzzInputError(f"{path}: the journal's header holds no campaign configuration; use --force to "
                                 "start over")
        if stored != config.to_dict():
            want = config.to_dict()
            diff = sorted(k for k in set(want) | set(stored) if stored.get(k) != want.get(k))
            raise FuzzArgumentError(
                f"--resume: the campaign in {out} was started with other settings ({', '.join(diff)} differ); "
                "repeat its original options, or use --force to start over"
            )
        fold_records(tally, path, repair=True, config=config)
        journal = Journal(path, sync_interval=_sync_interval(config))
        if tally.done < config.total:  # verdicts follow, perhaps from another CPU: say which
            journal.write(segment_record((header_extra or {}).get("implementations")))
    else:
        journal = create_journal(path, {"config": config.to_dict(), "machine": machine_record(),
                                        **dict(header_extra or {})}, sync_interval=_sync_interval(config))
    return tally, journal, tally.done


def _sync_interval(config: Any) -> float:
    """How often the journal fsyncs (0: after every record), as the relation asks (cheap pairs batch it)."""
    return float(getattr(config, "journal_sync_interval", 0.0))


def load_tally(out: str | os.PathLike[str]) -> tuple[Any, Any]:
    """Re-fold the totals of a run folder from its journal: (configuration, tally)."""
    path = Path(out) / JOURNAL_NAME
    header = read_header(path)
    if not isinstance(header.get("config"), dict):
        raise FuzzInputError(f"{path}: the journal's header holds no campaign configuration")
    config = config_from_dict(header["config"])
    tally = config.new_tally()
    fold_records(tally, path, config=config)
    return config, tally


def make_bundles(
    config: CampaignSpec,
    out: str | os.PathLike[str],
    keys: list[Key],
    *,
    workers: int = 1,
    on_bundle: Callable[[dict], None] | None = None,
    opts_for: Callable[[Key], Mapping[str, Any]] | None = None,
    backend: str = "local",
    address: str | None = None,
    **opts: Any,
) -> list[dict]:
    """Write a bug bundle per key into ``out/violations/<id>/`` (skipping complete ones, so resumable).

    ``opts`` go to the evaluator's ``make_bundle`` (e.g. ``budget``, ``command``), updated per key by
    ``opts_for(key)`` when given. ``backend``/``address`` as for :func:`run_campaign` (with Ray, the actors
    write the bundles: ``out`` must be on a path every node shares)."""
    root = Path(out) / "violations"
    if root.is_dir():  # half-built bundles of an interrupted run (they are built in hidden folders, then renamed)
        for stale in root.glob(".*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
    infos: list[dict] = []
    todo = []
    for key in keys:
        d = root / config.bundle_id(key)
        if (d / "bundle.json").is_file():
            infos.append({"id": d.name, "key": list(key), "existing": True})
            if on_bundle:
                on_bundle(infos[-1])
            continue
        todo.append(("bundle", (key, str(d), {**opts, **(dict(opts_for(key)) if opts_for else {})})))

    def got(info: dict) -> None:
        infos.append(info)
        if on_bundle:
            on_bundle(info)

    if not todo:
        return infos
    workers, _ = clamp_workers(workers, items=len(todo), per_worker=config.worker_memory(), backend=backend,
                               address=address)
    from lidarmt._atomic import is_disk_full_error

    def full(err: Any) -> FuzzOutputError:
        made = sum(1 for i in infos if not i.get("error"))
        return FuzzOutputError(f"{root}: the disk is full ({err}); {made} of {len(keys)} bundle(s) written, every "
                               "verdict is in the journal: free some space and run the same command with --resume")

    if workers == 1 and backend == "local":
        ev = config.evaluator()
        for _, (key, d, o) in todo:
            try:
                got(ev.make_bundle(key, Path(d), **o))
            except (SutTimeout, Exception) as err:
                if is_disk_full_error(err):  # no half bundle is left (they are built aside); stop: one line
                    raise full(getattr(err, "strerror", None) or err) from err
                if isinstance(err, UserError):
                    raise
                got({"id": Path(d).name, "key": list(key), "error": f"{type(err).__name__}: {err}"})
    else:
        pool = _Pool(config, workers, backend=backend, address=address)
        try:
            pool.wait_ready()
            pool.run(todo, lambda rec: None, got)
        finally:
            pool.close()
        bad = next((i for i in infos if i.get("error") and is_disk_full_error(Exception(i["error"]))), None)
        if bad is not None:
            raise full("No space left on device")
    return infos


# ----------------------------------------------------------------------------------------------- environment


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

