"""Campaign workers as Ray actors (``--backend ray``): the same pool, time limits and findings as the local one.

The campaign engine's :class:`~lidarmt.engine.campaign._Pool` does all the bookkeeping (which call is running and
since when, killing an overdue worker, turning a lost call into findings, re-queueing the rest of its item);
this module is only its *transport* to Ray:

* each worker is an actor (:class:`_RayWorker`) that builds its relation's evaluator once, from the
  configuration's ``to_dict()`` through :func:`~lidarmt.engine.campaign.config_from_dict`, as a local worker does;
* a task is a call of the actor's generator method :meth:`_RayWorker.run`; the SUT runs in a thread of the actor
  while the generator streams the worker protocol's messages ("start" around each SUT call, "pair", "bundle",
  "done") back as they happen (a Ray *streaming generator*), so the parent times each call from its "start"
  message exactly as it does for a local process;
* an overdue call: the parent kills the actor (``ray.kill``) and starts a fresh one in its slot; just before
  the limit, the actor sends the Python stack of the SUT's thread (``"stacks"``) so the timeout finding says
  where it hung;
* a dying actor process (a segfault, ``os._exit``, the OOM killer, a lost node): the stream raises
  :class:`ray.exceptions.RayActorError`, which becomes a ``("dead", why)`` message and a crash finding.

Ray is optional (``pip install "lidarmt[ray]"``) and imported only here, only when a campaign asks for it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lidarmt.engine.errors import FuzzInputError
from lidarmt.errors import UserError, require

_POLL_S = 0.1  # how often an actor's generator looks at its SUT thread while a call runs
_END = object()


def _ray():
    return require("ray", extra="ray", purpose="--backend ray")


_connected: dict[str, Any] = {}


def connect(address: str | None = None, *, num_cpus: int | None = None):
    """The ``ray`` module, connected: to the cluster at ``address`` (``"auto"``: the one this machine is part
    of, as ``ray start`` left it), or to a new Ray started on this machine when ``address`` is None (with
    ``num_cpus``, whatever cluster ``RAY_ADDRESS`` or ``ray start`` registered; stopped with this process, also
    on SIGTERM/SIGHUP). A process connects once; a connection made before (by a test, a notebook) is used as it
    is. Ray 2.60 listens on every network interface whatever it is asked (docs/ray.md, "Network")."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    import logging

    _probe(address)
    kw: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING,
                          "configure_logging": True}
    kept = _Kept()
    try:
        if address is None:  # "local": a new Ray for this process, even where RAY_ADDRESS or 'ray start' says
            ray.init(address="local", include_dashboard=False, num_cpus=num_cpus, **kw)
            _stop_with_this_process(ray)
        else:
            # Ray's C++ client logs each refused attempt on stderr (20 lines for a wrong token): kept aside, read
            # for the reason, and shown only when the connection is made after all
            with _stderr_kept() as kept:
                ray.init(address=address, **kw)
            sys.stderr.write(kept.text)
            _stop_with_this_process(ray, started_here=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as err:
        raise FuzzInputError(connect_error(err, address, log=kept.text)) from err
    _connected["address"] = address
    return ray


_AUTH = re.compile(r"InvalidAuthToken|AuthenticationError|auth(?:entication)?[ _-]?token|UNAUTHENTICATED|"
                   r"Unauthenticated", re.IGNORECASE)


class _Kept:
    text = ""


@contextlib.contextmanager
def _stderr_kept(limit: int = 1 << 16):
    """Everything written to file descriptor 2 (Python's and C++'s) inside the block goes to a temporary file;
    ``.text`` is its last ``limit`` bytes once the block ends, however it ends."""
    import tempfile

    kept = _Kept()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield kept
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            size = tmp.seek(0, os.SEEK_END)
            tmp.seek(max(0, size - limit))
            kept.text = tmp.read().decode("utf-8", errors="replace")


def connect_error(err: BaseException, address: str | None, *, log: str = "") -> str:
    """The one line for a failed ``ray.init``; a refused token (said by the error or by what Ray logged while it
    tried, ``log``) says why and how to fix it."""
    where = f"--address {address}" if address else "--backend ray"
    text = f"{type(err).__name__}: {err}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    said = _AUTH.search(log or "")
    if said:
        line = next((ln for ln in log.splitlines() if _AUTH.search(ln)), "")
        i = line.find("InvalidAuthToken")
        first = (line[i:] if i >= 0 else line.split("] ", 1)[-1]).strip() or first
    if said or _AUTH.search(text):
        return (f"{where}: the Ray cluster refused this process's token ({first[:120]}): the cluster uses Ray's "
                "token authentication (RAY_AUTH_MODE=token, on by default in recent Ray), and this machine does not "
                "have the head's token: copy the head node's ~/.ray/auth_token to ~/.ray/auth_token here, or set "
                "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to it, with RAY_AUTH_MODE=token, before running lidarmt; `ray get-auth-token` on the "
                "head prints it (see docs/ray.md)")
    return (f"{where}: cannot connect to a Ray cluster ({first}); start one with 'ray start --head' or check the "
            "address (see docs/ray.md)")


def _stop_with_this_process(ray: Any, *, started_here: bool = True) -> None:
    """SIGTERM/SIGHUP become a Ctrl-C (KeyboardInterrupt), so that the campaign's own clean-up (its lock, its
    workers: the actors are killed) runs; a Ray this process started (``started_here``) is also shut down at exit.
    (SIGKILL cannot be caught: Ray's processes then notice on their own that their driver is gone.)"""
    import atexit
    import signal

    if started_here:
        atexit.register(ray.shutdown)
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
        raise KeyboardInterrupt  # as Ctrl-C: the commands say where the verdicts are and how to --resume

    # SIGTERM: replaces ray.init's own handler (and the C++ failure handler of Ray's core worker, which aborts
    # the process with a crash report when SIGTERM arrives while it waits on Ray)
    signal.signal(signal.SIGTERM, on_signal)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGHUP, on_signal)


def _probe(address: str | None, timeout: float = 5.0) -> None:
    """Fail at once when a HOST:PORT address does not answer (Ray itself retries for minutes)."""
    if not address or address == "auto" or "://" in address:
        return
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise FuzzInputError(f"--address {address}: give HOST:PORT (e.g. 10.0.0.5:6379, what 'ray start --head' "
                             "printed) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise FuzzInputError(f"--address {address}: nothing answers there ({err.strerror or err}); start the "
                             "cluster with 'ray start --head' or check the address (see docs/ray.md)") from err


@dataclass(frozen=True, slots=True)
class ClusterResources:
    cpus: float  # CPUs in the whole cluster
    node_cpus: float  # CPUs of its largest node (an actor's CPUs must fit on one node)
    memory: float | None  # bytes of Ray's memory resource in the whole cluster


def cluster_resources(address: str | None = None) -> ClusterResources:
    """What the cluster holds now (alive nodes), connecting first."""
    ray = connect(address)
    total = ray.cluster_resources()
    node_cpus = max((float(n.get("Resources", {}).get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")),
                    default=float(total.get("CPU", 1.0)))
    mem = total.get("memory")
    return ClusterResources(float(total.get("CPU", 1.0)), node_cpus, float(mem) if mem else None)


def _death_of(err: BaseException) -> str:
    """A one-line 'why the actor is gone' from Ray's error (its text is long and guesses at causes)."""
    text = str(err)
    pid = re.search(r"\bpid: (\d+)", text)
    exit_type = re.search(r"Worker exit type: (\w+)", text)
    detail = re.search(r"Worker exit detail: ([^.]*)", text)
    who = f"Ray actor process {pid.group(1)}" if pid else "Ray actor process"
    if exit_type or detail:
        why = ", ".join(x for x in ((exit_type.group(1) if exit_type else ""),
                                    (detail.group(1).strip() if detail else "")) if x)
    else:
        why = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return f"{who}: {why}"


def _python_path() -> str:
    """Import folders for the actors: this process's own ones (not the interpreter's or its
    site-packages), then the inherited PYTHONPATH, so a ``--sut mypkg:make`` that imports here imports there
    (as :mod:`multiprocessing` hands ``sys.path`` to the local workers). On a cluster these folders must exist
    on every node (a shared path), or the package must be installed there."""
    import sysconfig

    system = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    system |= {os.path.realpath(p) for p in sysconfig.get_paths().values()}
    mine = []
    for p in sys.path:
        real = os.path.realpath(p or os.getcwd())
        if not os.path.isdir(real) or any(real == q or real.startswith(q + os.sep) for q in system):
            continue
        if real not in mine:
            mine.append(real)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(mine + [p for p in inherited if p not in mine])


# ----------------------------------------------------------------------------------------------- the actor


class _RayWorker:  # pragma: no cover - runs in a Ray worker process (tested through campaigns)
    """One campaign worker: builds the evaluator once, then runs tasks as streaming generators."""

    def __init__(self, cfg: dict[str, Any], threads: int = 0, paths: list[str] | None = None) -> None:
        sys.path[:0] = [p for p in paths or () if p and p not in sys.path]
        from lidarmt._heap import keep_freed_memory
        from lidarmt.engine.kinds import config_from_dict

        keep_freed_memory()  # as the lidarmt command does on start (lidarmt._heap)

        if threads > 0:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
                os.environ.setdefault(var, str(threads))
        self._fatal: tuple[bool, str, str] | None = None
        try:
            self.config = config_from_dict(cfg)
            self.ev = self.config.evaluator(enforce_timeout=False)
            if threads > 0 and "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(threads)
        except BaseException as err:
            self._fatal = (isinstance(err, UserError), str(err), "".join(traceback.format_exception(err)))
        self._first: float | None = None  # this actor's first SUT call, for the automatic limit

    def ready(self) -> tuple[str, Any]:
        return ("fatal", self._fatal) if self._fatal is not None else ("ready", None)

    def _dump_after(self, since: float, work: int = 1) -> float:
        from lidarmt.engine.timeouts import auto_timeout

        limit = self.config.timeout if self.config.timeout is not None else auto_timeout(self._first, work)
        # a second before the limit (the local workers' faulthandler takes 0.25 s): the stack travels through the
        # actor's generator and Ray's object store before the campaign's process kills the actor at the limit, which
        # takes longer than 0.25 s on a loaded machine (the timeout finding then had no stack)
        return since + max(0.5 * limit, limit - 1.0)

    def run(self, task: tuple[str, Any]):
        """Run one task in a thread; yield lists of the worker protocol's messages as they come."""
        msgs: queue.SimpleQueue = queue.SimpleQueue()
        state: dict[str, Any] = {"since": None, "t0": None, "dumped": False}
        ev = self.ev

        def on_call(keys, stage, work: int = 1) -> None:
            if stage:
                state.update(since=time.monotonic(), dumped=False, work=work)
            else:
                state["since"] = None
                if self._first is None and ev.first_call_s is not None:
                    self._first = ev.first_call_s
            msgs.put(("start", (keys, stage, work)))
            if stage:  # the campaign's process has the announcement before the call starts: an actor that dies
                delivered = threading.Event()  # inside it cannot take it along
                msgs.put(delivered)
                delivered.wait()

        ev.on_call = on_call

        def work() -> None:
            kind, payload = task
            try:
                if kind == "item":
                    index, keys = payload
                    ev.run_item(index, [tuple(k) for k in keys], lambda k, p: msgs.put((k, p)))
                elif kind == "bundle":
                    key, out_dir, opts = payload
                    msgs.put(("bundle", ev.make_bundle(tuple(key), Path(out_dir), **opts)))
                msgs.put(("done", None))
            except BaseException as err:
                msgs.put(("fatal", (isinstance(err, UserError), str(err), "".join(traceback.format_exception(err)))))
            finally:
                msgs.put(_END)

        th = threading.Thread(target=work, name="lidarmt-sut", daemon=True)
        th.start()
        while True:
            batch: list[tuple[str, Any]] = []
            end = False
            with contextlib.suppress(queue.Empty):
                batch.append(msgs.get(timeout=_POLL_S))
                while True:
                    batch.append(msgs.get_nowait())
            if batch and batch[-1] is _END:
                batch.pop()
                end = True
            acks = [m for m in batch if isinstance(m, threading.Event)]
            batch = [m for m in batch if not isinstance(m, threading.Event)]
            if batch:
                yield batch  # returns once the caller took it (backpressure of 1 object, see RayTransport.send)
            for a in acks:
                a.set()
            if end:
                return
            since = state["since"]
            if since is not None and not state["dumped"] and time.monotonic() >= self._dump_after(since, state.get("work", 1)):
                state["dumped"] = True
                frame = sys._current_frames().get(th.ident or -1)
                if frame is not None:
                    yield [("stacks", f"Thread {th.name} (most recent call last):\n"
                                      + "".join(traceback.format_stack(frame)))]


# ----------------------------------------------------------------------------------------------- the parent


class RayTransport:
    """The pool's transport to Ray actors (see the module's docstring)."""

    what = "Ray actor"

    def __init__(self, config: Any, workers: int, *, address: str | None = None) -> None:
        self.ray = connect(address)
        res = cluster_resources(address)
        # each actor holds the CPUs its numeric libraries use: the cluster's share per worker, on one node
        self.cpus = max(1, min(int(res.node_cpus), int(res.cpus // max(1, workers))))
        self._cls = self.ray.remote(_RayWorker)
        self._cfg = config.to_dict()
        # not a runtime_env: that would start a fresh worker process per actor instead of Ray's waiting ones
        self._paths = _python_path().split(os.pathsep)
        self._ready: dict[int, tuple[int, Any]] = {}  # wid -> (gen, ObjectRef of ready())
        self._streams: dict[int, tuple[int, Any]] = {}  # wid -> (gen, ObjectRefGenerator of run())

    def spawn(self, s) -> None:
        actor = self._cls.options(num_cpus=self.cpus, max_restarts=0, max_concurrency=1).remote(
            self._cfg, self.cpus, self._paths)
        s.handle = actor
        self._ready[s.wid] = (s.gen, actor.ready.remote())
        self._streams.pop(s.wid, None)

    def send(self, s, task) -> None:
        self._streams[s.wid] = (s.gen, s.handle.run.options(_generator_backpressure_num_objects=1).remote(task))

    def _take(self, waitables: dict[Any, tuple[str, int, int]], ready: list[Any]) -> list[tuple[int, int, str, Any]]:
        ray = self.ray
        out: list[tuple[int, int, str, Any]] = []
        for w in ready:
            what, wid, gen = waitables[w]
            if what == "ready":
                del self._ready[wid]
                try:
                    kind, payload = ray.get(w)
                except ray.exceptions.RayActorError as err:
                    out.append((wid, gen, "dead", _death_of(err)))
                    continue
                out.append((wid, gen, kind, payload))
                continue
            try:
                ref = next(w)
            except StopIteration:
                self._streams.pop(wid, None)
                continue
            except ray.exceptions.RayActorError as err:
                self._streams.pop(wid, None)
                out.append((wid, gen, "dead", _death_of(err)))
                continue
            try:
                batch = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                self._streams.pop(wid, None)
                out.append((wid, gen, "dead", _death_of(err)))
                continue
            out.extend((wid, gen, kind, payload) for kind, payload in batch)
        return out

    def receive(self, timeout: float) -> list[tuple[int, int, str, Any]]:
        waitables: dict[Any, tuple[str, int, int]] = {}
        for wid, (gen, ref) in self._ready.items():
            waitables[ref] = ("ready", wid, gen)
        for wid, (gen, stream) in self._streams.items():
            waitables[stream] = ("stream", wid, gen)
        if not waitables:
            time.sleep(timeout)
            return []
        items = list(waitables)
        ready, rest = self.ray.wait(items, num_returns=1, timeout=timeout, fetch_local=True)
        if ready and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
            ready = ready + more
        return self._take(waitables, ready)

    def drain(self) -> list[tuple[int, int, str, Any]]:
        out: list[tuple[int, int, str, Any]] = []
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            got = self.receive(0.02)
            if not got:
                break
            out.extend(got)
        return out

    def death(self, s) -> str | None:
        return None  # deaths arrive as ("dead", why) messages from receive()

    def kill(self, s) -> None:
        self._streams.pop(s.wid, None)
        self._ready.pop(s.wid, None)
        with contextlib.suppress(Exception):
            self.ray.kill(s.handle, no_restart=True)

    def stacks(self, s) -> str:
        return ""  # the actor sends them ("stacks" messages): the pool keeps them on the slot

    def close(self, slots) -> None:
        for s in slots:
            self.kill(s)
        self._streams.clear()
        self._ready.clear()
