"""``--sut exec:COMMAND``: a perception module in another language, run as a long-lived child process.

A C++ detector, a ROS node wrapper or any program that speaks the *lidarmt exec protocol* (version 1, specified
in ``docs/exec-sut.md``) on its stdin/stdout becomes a system under test like any built-in one. The client side
lives here: :class:`ExecPerception` starts the program once (``shlex``-split ``COMMAND``, no shell), keeps it
running from frame to frame, and for each ``detect(frame, roi)`` call

1. sends one binary request: a 48-byte little-endian header (magic ``LMXF``, version, flags, sequence number,
   point count, ROI size, fields, body length, stamp, frame index), then the float32 x, y, z and intensity
   arrays, the 4x4 float64 pose (when known) and the uint32 indices of the frame's points inside the ROI;
2. reads one line of JSON: ``{"seq": S, "obstacles": [...]}`` or ``{"seq": S, "error": "..."}``;
3. turns the obstacles into :class:`~lidarmt.types.Obstacle` objects; an obstacle that comes without a
   ``box`` gets Apollo's MinBox of its points (:func:`lidarmt.lidar.perception.apollo.minbox.build_boxes`), so a
   server only needs to say which points make an obstacle and what class it is.

What can go wrong is a *finding*, never a stop, and the program is restarted so the campaign goes on:

* the program dies (exit, signal, segfault) during a call: :class:`ExecCrashed`, whose message ends with the
  last lines the program wrote on stderr (always captured, by a reader thread, into a bounded tail);
* it does not answer within ``timeout`` seconds (an option; by default the campaign's own limit applies: the
  engine's SIGALRM interrupts the pipe read in-process, a worker process is killed and takes the program with
  it): :class:`ExecTimeout` -- killed, restarted. Whatever interrupts a call (the campaign's time limit too)
  kills and restarts the program, because a half-read exchange cannot be resumed; the stderr tail is attached
  to the interrupting exception as a note;
* it answers with something that is not a protocol reply (not JSON, the wrong sequence number, a line longer
  than :data:`MAX_REPLY_BYTES`): :class:`ExecProtocolError`, a
  :class:`~lidarmt.lidar.perception.guard.MalformedOutput` -- killed, restarted; obstacles that parse but are wrong
  (a class ``"truck"``, a point index past the frame) are left to the guard
  (:func:`~lidarmt.lidar.perception.guard.guarded_detect`), which names the problem;
* it reports an error itself (``{"error": ...}``): :class:`ExecReportedError`; the program keeps running.

Failing to start the program when the SUT is built (no such program, a handshake that never comes) is a user
error (:class:`ExecStartError`, one line with the stderr tail); failing to restart it later is a finding of
the call that needed it.

Options (``--sut-option KEY=VALUE``): ``timeout`` (seconds per call, default none) and ``startup_timeout``
(seconds for the handshake, default 120) are lidarmt's; every other option is sent to the program in the
handshake line (``{"lidarmt_exec": 1, "options": {...}}``) for it to interpret.

One instance serves one caller at a time (not thread-safe; the engine builds one per process). POSIX only
(pipes under ``selectors``). The program runs in its own session; killing it kills its process
group, and on Linux the kernel kills it when the process that started it dies (``PR_SET_PDEATHSIG``), so a
campaign worker killed for a timeout does not leave it behind.

Usage::

    from lidarmt.lidar.perception.registry import get_perception
    sut = get_perception("exec:./build/my_detector --config det.yaml", timeout=5.0, cell=0.5)
    obstacles = sut.detect(frame, roi)
    sut.close()
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import shlex
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from lidarmt.errors import ArgumentError
from lidarmt.lidar.perception.guard import MalformedOutput, SutFault, validate_obstacles
from lidarmt.types import Frame, MetaType, Obstacle, ObstacleClass, Obstacles, Roi

__all__ = [
    "EXEC_PREFIX",
    "HEADER",
    "MAGIC",
    "MAX_REPLY_BYTES",
    "PROTOCOL_VERSION",
    "ExecCrashed",
    "ExecPerception",
    "ExecProtocolError",
    "ExecReportedError",
    "ExecStartError",
    "ExecSutError",
    "ExecTimeout",
    "decode_request",
    "encode_request",
    "parse_command",
]

EXEC_PREFIX = "exec:"
PROTOCOL_VERSION = 1
MAGIC = b"LMXF"
#: magic, version, flags, seq, n_points, n_roi, fields, body_bytes, stamp, frame_index (48 bytes, little-endian)
HEADER = struct.Struct("<4sHHIIIIQdq")
FLAG_POSE = 1  # a 4x4 float64 pose follows the point arrays
FLAG_ROI_EMPTY = 2  # the frame's ROI is empty (e.g. a pose far from every road)
FIELDS_XYZI = 0b1111  # x, y, z, intensity, each a float32 array of n_points
MAX_REPLY_BYTES = 64 * 2**20
STDERR_TAIL_BYTES = 16 * 1024
STDERR_TAIL_LINES = 20
_MAX_U32 = 2**32 - 1
_FIELD_NAMES = ("x", "y", "z", "intensity")
_DEFAULT_META = {
    ObstacleClass.CAR: MetaType.SMALLMOT,
    ObstacleClass.PEDESTRIAN: MetaType.PEDESTRIAN,
    ObstacleClass.CYCLIST: MetaType.NONMOT,
    ObstacleClass.UNKNOWN: MetaType.UNKNOWN,
}


# ----------------------------------------------------------------------------------------------- errors


class ExecStartError(ArgumentError):
    """The program of ``--sut exec:COMMAND`` could not be started, or did not complete the handshake."""


class ExecSutError(SutFault):
    """A call of an exec SUT failed (a finding about the SUT); ``stderr`` is the tail of its stderr."""

    def __init__(self, message: str, *, sut: str = "", detail: str = "", stderr: str = "") -> None:
        super().__init__(message, sut=sut, detail=detail)
        self.stderr = stderr


class ExecCrashed(ExecSutError):
    """The program died during a call (it was restarted)."""


class ExecTimeout(ExecSutError):
    """The program did not answer within the exec SUT's own ``timeout`` (it was killed and restarted).

    ``is_timeout`` marks it for a campaign engine that records such exceptions as ``timeout`` findings (the
    engine's own ``SutTimeout`` lives in :mod:`lidarmt.lidar.mr1`, which perception must not import)."""

    is_timeout = True


class ExecReportedError(ExecSutError):
    """The program answered a call with ``{"error": ...}``."""


class ExecProtocolError(MalformedOutput):
    """The program's answer is not a protocol reply (it was killed and restarted)."""

    def __init__(self, message: str, *, sut: str = "", detail: str = "", stderr: str = "") -> None:
        super().__init__(message, sut=sut, detail=detail)
        self.stderr = stderr


# ----------------------------------------------------------------------------------------------- framing


def parse_command(spec: str) -> list[str]:
    """``"exec:prog --flag 'a b'"`` (or the part after ``exec:``) as an argv list, split as a POSIX shell would
    split it (no shell runs: no pipes, globs or variables)."""
    text = spec.strip()
    if text.startswith(EXEC_PREFIX):
        text = text[len(EXEC_PREFIX):]
    try:
        argv = shlex.split(text)
    except ValueError as err:
        raise ArgumentError(f"--sut {spec!r}: cannot split the command ({err}); check its quotes") from err
    if not argv:
        raise ArgumentError(f"--sut {spec!r}: no command after exec:; give e.g. --sut 'exec:./my_detector --flag'")
    return argv


def encode_request(frame: Frame, roi_indices: np.ndarray, *, seq: int, roi_empty: bool = False) -> bytearray:
    """The binary request of protocol version 1 for ``frame`` with the in-ROI point indices ``roi_indices``."""
    pts = frame.points
    n = len(pts)
    if n > _MAX_U32:
        raise ValueError(f"a frame of {n:,} points does not fit protocol version 1 (at most {_MAX_U32:,})")
    roi = np.asarray(roi_indices)
    if roi.size and (roi.min() < 0 or roi.max() >= n):
        raise ValueError(f"ROI index outside the frame's {n:,} points")
    flags = (FLAG_POSE if frame.pose is not None else 0) | (FLAG_ROI_EMPTY if roi_empty else 0)
    body_bytes = 16 * n + (128 if frame.pose is not None else 0) + 4 * len(roi)
    buf = bytearray(HEADER.size + body_bytes)  # filled in place: no intermediate copies of the arrays
    HEADER.pack_into(buf, 0, MAGIC, PROTOCOL_VERSION, flags, seq & _MAX_U32, n, len(roi), FIELDS_XYZI, body_bytes,
                     float(frame.stamp), int(frame.index))
    off = HEADER.size
    for name in _FIELD_NAMES:
        np.frombuffer(buf, "<f4", n, off)[:] = pts[name]
        off += 4 * n
    if frame.pose is not None:
        np.frombuffer(buf, "<f8", 16, off)[:] = np.asarray(frame.pose, dtype=np.float64).reshape(16)
        off += 128
    np.frombuffer(buf, "<u4", len(roi), off)[:] = roi
    return buf


def decode_request(data: bytes | bytearray) -> dict[str, Any]:
    """The inverse of :func:`encode_request` (what a Python server does with a request): a dict with ``seq``,
    ``stamp``, ``frame_index``, ``points`` (structured x/y/z/intensity float32), ``pose`` (4x4 or None),
    ``roi_indices`` (int64) and ``roi_empty``. Raises ValueError on a malformed request."""
    if len(data) < HEADER.size:
        raise ValueError(f"request of {len(data)} bytes is shorter than the {HEADER.size}-byte header")
    magic, version, flags, seq, n, n_roi, fields, body_bytes, stamp, index = HEADER.unpack_from(data)
    if magic != MAGIC or version != PROTOCOL_VERSION or fields != FIELDS_XYZI:
        raise ValueError(f"not a version-{PROTOCOL_VERSION} request (magic {magic!r}, version {version}, "
                         f"fields {fields:#x})")
    want = 16 * n + (128 if flags & FLAG_POSE else 0) + 4 * n_roi
    if body_bytes != want or len(data) != HEADER.size + want:
        raise ValueError(f"body of {len(data) - HEADER.size} bytes, header says {body_bytes}, counts say {want}")
    off = HEADER.size
    points = np.empty(n, dtype=[(f, "<f4") for f in _FIELD_NAMES])
    for name in _FIELD_NAMES:
        points[name] = np.frombuffer(data, "<f4", n, off)
        off += 4 * n
    pose = None
    if flags & FLAG_POSE:
        pose = np.frombuffer(data, "<f8", 16, off).reshape(4, 4).copy()
        off += 128
    roi = np.frombuffer(data, "<u4", n_roi, off).astype(np.int64)
    return {"seq": seq, "stamp": stamp, "frame_index": index, "points": points, "pose": pose,
            "roi_indices": roi, "roi_empty": bool(flags & FLAG_ROI_EMPTY)}


def read_request(stream) -> bytes | None:
    """One whole request from a binary stream (header, then the body it announces); None at end of input."""
    head = _read_exactly(stream, HEADER.size)
    if head is None:
        return None
    body_bytes = HEADER.unpack_from(head)[7]
    body = _read_exactly(stream, body_bytes) if body_bytes else b""
    if body is None:
        raise ValueError("input ended inside a request")
    return head + body


def _read_exactly(stream, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            if not buf:
                return None
            raise ValueError(f"input ended after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def obstacles_to_reply(obstacles: Obstacles, *, seq: int, with_box: bool = True) -> bytes:
    """A reply line for ``obstacles`` (what a Python server sends): every field, so the client rebuilds the very
    same obstacles (floats in JSON round-trip exactly); without the box when ``with_box`` is False."""
    items = []
    for o in obstacles:
        meta = o.meta_type
        d: dict[str, Any] = {"class": getattr(o.cls, "value", o.cls), "score": float(o.score),  # as the module
                             "point_indices": [int(i) for i in o.point_indices],  # said: lidarmt validates
                             "meta_type": meta.name if isinstance(meta, MetaType) else meta}
        if with_box:
            d["box"] = {"center": [float(v) for v in o.center], "length": float(o.length), "width": float(o.width),
                        "height": float(o.height), "direction": [float(v) for v in o.direction],
                        "polygon": [[float(v) for v in p] for p in np.asarray(o.polygon).reshape(-1, 3)]}
        if o.type_probs is not None:
            d["type_probs"] = [float(v) for v in o.type_probs]
        items.append(d)
    return (json.dumps({"seq": seq, "obstacles": items}, allow_nan=False) + "\n").encode()


# ----------------------------------------------------------------------------------------------- the process


def _pdeathsig():
    """A preexec function that has the kernel SIGKILL the child when its parent dies (Linux), or None."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None  # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only safe from the main one
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # resolved before the fork
    except (OSError, AttributeError):
        return None

    def preexec() -> None:  # pragma: no cover - runs in the child
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


class _StderrTail:
    """Reads a child's stderr in a daemon thread, keeping its last :data:`STDERR_TAIL_BYTES` bytes."""

    def __init__(self, stream) -> None:
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True, name="exec-sut-stderr")
        self._thread.start()

    def _pump(self, stream) -> None:
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, 65536):
                with self._lock:
                    self._buf += chunk
                    if len(self._buf) > 2 * STDERR_TAIL_BYTES:
                        del self._buf[: len(self._buf) - STDERR_TAIL_BYTES]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                stream.close()

    def text(self, *, wait: float = 0.0) -> str:
        """The last lines (at most :data:`STDERR_TAIL_LINES`); ``wait``: seconds to let the pipe drain first."""
        if wait:
            self._thread.join(wait)
        with self._lock:
            raw = bytes(self._buf[-STDERR_TAIL_BYTES:])
        lines = raw.decode("utf-8", "replace").rstrip().splitlines()
        return "\n".join(lines[-STDERR_TAIL_LINES:])


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (it runs in its own session) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    for f in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError, ValueError):
            if f is not None:
                f.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class _Child:
    """One running instance of the program: its pipes, its stderr tail, a read buffer."""

    def __init__(self, argv: list[str]) -> None:
        env = dict(os.environ, LIDARMT_EXEC_PROTOCOL=str(PROTOCOL_VERSION))
        self.proc = subprocess.Popen(  # noqa: S603 - the user's own command (a file's needs --trust-code)
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True, preexec_fn=_pdeathsig(), bufsize=0)
        self.stderr = _StderrTail(self.proc.stderr)
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        for fd in (self._in, self._out):  # Linux: 1 MiB pipes, so a 2 MB frame takes a few syscalls, not ~40
            with contextlib.suppress(OSError, AttributeError):
                import fcntl

                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        self._rbuf = bytearray()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exchange(self, request: bytes | bytearray, deadline: float | None) -> bytes | None:
        """Send ``request`` and read one line back (without its newline); None when the program closed its
        stdout (it died); :class:`TimeoutError` past ``deadline`` (a ``time.monotonic()`` value)."""
        out = memoryview(request)
        with selectors.DefaultSelector() as sel:
            sel.register(self._out, selectors.EVENT_READ)
            if len(out):
                sel.register(self._in, selectors.EVENT_WRITE)
            while True:
                nl = self._rbuf.find(b"\n")
                if nl >= 0 and not len(out):
                    line = bytes(self._rbuf[:nl])
                    del self._rbuf[: nl + 1]
                    return line
                if len(self._rbuf) > MAX_REPLY_BYTES:
                    raise _TooLong(len(self._rbuf))
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    raise TimeoutError
                for key, _ in sel.select(wait):
                    if key.fd == self._in:
                        try:
                            sent = os.write(self._in, out[:1 << 20])
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, ConnectionResetError):
                            return None
                        out = out[sent:]
                        if not len(out):
                            sel.unregister(self._in)
                    else:
                        try:
                            chunk = os.read(self._out, 1 << 20)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            return None
                        self._rbuf += chunk

    def close(self, grace: float = 1.0) -> None:
        """Close stdin (a polite server exits at end of input), wait ``grace`` seconds, then kill."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        _kill(self.proc)


class _TooLong(Exception):
    pass


# ----------------------------------------------------------------------------------------------- the SUT


class ExecPerception:
    """A perception module that is an external program speaking the lidarmt exec protocol (module docstring).

    ``command``: the program and its arguments, a string split like a shell would (``"exec:"`` prefix allowed)
    or a list. ``timeout``: seconds a call may take before the program is killed and restarted (None: no limit
    of its own; the campaign's applies). ``startup_timeout``: seconds for the handshake. Every other keyword
    option is sent to the program in the handshake. The program is started here, so a command that cannot run
    fails when the SUT is built (:class:`ExecStartError`).
    """

    def __init__(self, command: str | list[str], *, timeout: float | None = None,
                 startup_timeout: float = 120.0, **options: Any) -> None:
        self.argv = parse_command(command) if isinstance(command, str) else [str(a) for a in command]
        if not self.argv:
            raise ArgumentError("exec SUT: empty command")
        for label, value in (("timeout", timeout), ("startup_timeout", startup_timeout)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ArgumentError(f"exec SUT option {label}={value!r}: give a positive number of seconds")
        try:
            self._hello = (json.dumps({"lidarmt_exec": PROTOCOL_VERSION, "versions": [PROTOCOL_VERSION],
                                       "options": dict(options)}, allow_nan=False) + "\n").encode()
        except (TypeError, ValueError) as err:
            raise ArgumentError(f"exec SUT options {options!r} are not JSON values: {err}") from err
        self.command = shlex.join(self.argv)
        self.timeout = None if timeout is None else float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.options = dict(options)
        self.name = f"exec:{os.path.basename(self.argv[0])}"
        self.restarts = 0
        self._seq = 0
        self._child: _Child | None = None
        self._starting = False
        self._finalizer: weakref.finalize | None = None
        try:
            self._start()
        except (ExecSutError, ExecProtocolError) as err:
            raise ExecStartError(f"--sut exec:{self.command}: {err.detail}".replace("\n", " | ")) from err

    # -- process management

    def _start(self) -> None:
        """Start the program and complete the handshake (raises ExecCrashed/ExecTimeout/ExecProtocolError)."""
        self._starting = True
        try:
            self._start_once()
        finally:
            self._starting = False

    def _start_once(self) -> None:
        self._stop()
        try:
            child = _Child(self.argv)
        except OSError as err:
            why = "no such program" if isinstance(err, FileNotFoundError) else str(err)
            raise ExecCrashed(f"cannot run {self.argv[0]!r}: {why}", sut=self.name,
                              detail=f"cannot run {self.argv[0]!r}: {why}; check the command and its path") from err
        self._child = child
        self._finalizer = weakref.finalize(self, _kill, child.proc)
        line = self._exchange(self._hello, self.startup_timeout, "the handshake")
        try:
            hello = json.loads(line)
        except (ValueError, RecursionError):
            hello = None
        if not isinstance(hello, dict) or "lidarmt_exec" not in hello:
            self._fail(ExecProtocolError, f"its first line {_clip(line)!r} is not the handshake "
                       f'{{"lidarmt_exec": {PROTOCOL_VERSION}, "name": ...}} (it must write nothing else on stdout)')
        if hello.get("error") is not None:
            self._fail(ExecReportedError, f"it refused the handshake: {_clip(str(hello['error']))}")
        if hello.get("lidarmt_exec") != PROTOCOL_VERSION:
            self._fail(ExecProtocolError, f"it speaks protocol version {_clip(str(hello.get('lidarmt_exec')))}; "
                       f"this lidarmt speaks {PROTOCOL_VERSION}")
        name = hello.get("name")
        if isinstance(name, str) and name.strip():
            self.name = name.strip()[:200]

    def _stop(self, *, grace: float = 0.0) -> str:
        """Stop the child (killed unless it exits within ``grace``); returns its stderr tail."""
        child, self._child = self._child, None
        if child is None:
            return ""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        child.close(grace) if grace else _kill(child.proc)
        return child.stderr.text(wait=1.0)

    def _restart(self) -> str:
        """Start a fresh program after a failed call; '' when it came up, else why not (for the message)."""
        self.restarts += 1
        try:
            self._start()
        except (ExecSutError, ExecProtocolError) as err:
            self._stop()
            return f"; restarting it failed: {err.detail.splitlines()[0]}"
        return f" (restarted it, pid {self._child.pid})" if self._child is not None else ""

    def _fail(self, kind: type, what: str) -> None:
        """Stop the program, restart it (unless it is being started), and raise ``kind``, whose message ends
        with the program's stderr."""
        child = self._child
        pid = child.pid if child is not None else 0
        tail = self._stop()
        if kind is ExecCrashed and child is not None:
            what += f" ({_describe_exit(child.proc.returncode)})"
        if not self._starting:
            what += self._restart()
        detail = what + (f"\nits stderr ended with:\n{tail}" if tail else "")
        raise kind(f"exec SUT {self.name!r} (pid {pid}): {detail}", sut=self.name, detail=detail, stderr=tail)

    def _exchange(self, request: bytes | bytearray, limit: float | None, what: str) -> bytes:
        child = self._child
        assert child is not None
        deadline = None if limit is None else time.monotonic() + limit
        try:
            line = child.exchange(request, deadline)
        except TimeoutError:
            self._fail(ExecTimeout, f"no answer to {what} within {limit:g} s; killed it")
        except _TooLong as err:
            self._fail(ExecProtocolError, f"its answer to {what} exceeds {MAX_REPLY_BYTES:,} bytes ({err} read)")
        except BaseException as err:  # the campaign's time limit (SIGALRM), Ctrl-C: the exchange is cut in two
            tail = self._stop()
            again = self._restart() if isinstance(err, Exception) and not self._starting else ""
            note = f"lidarmt: exec SUT {self.name!r} was killed because its call was interrupted{again}"
            err.add_note(note + (f"; its stderr ended with:\n{tail}" if tail else ""))
            raise
        if line is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=2.0)
            self._fail(ExecCrashed, f"it died during {what}")
        return line  # type: ignore[return-value]

    # -- the Perception protocol

    def detect(self, frame: Frame, roi: Roi) -> Obstacles:
        """Send ``frame`` and its ROI point indices to the program; its obstacles (boxes filled by MinBox)."""
        if self._child is None or self._child.proc.poll() is not None:  # died between calls, or never restarted
            self.restarts += 1
            self._start()
        empty = bool(getattr(roi, "empty", False))
        roi_idx = np.zeros(0, np.int64) if empty else np.asarray(roi.indices(frame), dtype=np.int64)
        self._seq = (self._seq + 1) & _MAX_U32
        seq = self._seq
        line = self._exchange(encode_request(frame, roi_idx, seq=seq, roi_empty=empty), self.timeout,
                              f"frame {frame.index} (request {seq})")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict) or reply.get("seq") != seq:
            got = "" if not isinstance(reply, dict) else f" (seq {_clip(str(reply.get('seq')))}, expected {seq})"
            self._fail(ExecProtocolError, f"its answer {_clip(line)!r} to request {seq} is not a reply line{got}")
        if reply.get("error") is not None:
            msg = str(reply["error"])
            first, _, rest = msg.partition("\n")
            detail = f"it reported an error for frame {frame.index}: {first[:500]}" + (f"\n{rest[-4000:]}" if rest else "")
            raise ExecReportedError(f"exec SUT {self.name!r}: {detail}", sut=self.name, detail=detail)
        items = reply.get("obstacles")
        if not isinstance(items, list):
            raise ExecProtocolError(f"exec SUT {self.name!r}: reply {seq} has no \"obstacles\" list", sut=self.name,
                                    detail=f'reply {seq} has no "obstacles" list')
        return self._obstacles(items, frame)

    def _obstacles(self, items: list[Any], frame: Frame) -> Obstacles:
        """Obstacles from the reply's dicts: fields as given (the guard validates them), MinBox where no box."""
        out: list[Obstacle] = []
        need_box: list[int] = []
        for i, d in enumerate(items):
            if not isinstance(d, dict):
                raise ExecProtocolError(f"exec SUT {self.name!r}: obstacle {i} is {type(d).__name__}, not an object",
                                        sut=self.name, detail=f"obstacle {i} is not a JSON object")
            cls = d.get("class")
            meta = d.get("meta_type")
            if meta is None:
                with contextlib.suppress(ValueError, TypeError):
                    meta = _DEFAULT_META[ObstacleClass(cls)]
            elif isinstance(meta, str) and meta in MetaType.__members__:
                meta = MetaType[meta]
            box = d.get("box")
            o = Obstacle(cls=cls, score=d.get("score", 1.0), point_indices=d.get("point_indices", []),  # type: ignore[arg-type]
                         center=np.zeros(3), length=0.0, width=0.0, height=0.0,
                         direction=np.array([1.0, 0.0, 0.0]), polygon=np.zeros((0, 3)),
                         meta_type=meta if meta is not None else MetaType.UNKNOWN, type_probs=d.get("type_probs"))
            if isinstance(box, dict):
                o = _with_box(o, box)
            else:
                need_box.append(i)
            out.append(o)
        # validated before the MinBox reads any point through the indices
        checked = list(validate_obstacles(out, n_points=len(frame.points), sut=self.name))
        todo = [i for i in need_box if len(checked[i].point_indices)]
        if todo:
            from lidarmt.lidar.perception.apollo.minbox import build_boxes

            idx = np.concatenate([checked[i].point_indices for i in todo])
            xyz = np.stack([frame.points[c][idx] for c in ("x", "y", "z")], axis=1).astype(np.float32)
            offsets = np.cumsum([0] + [len(checked[i].point_indices) for i in todo])
            for i, b in zip(todo, build_boxes(xyz, offsets), strict=True):
                o = checked[i]
                o.center, o.length, o.width, o.height = b.center, b.length, b.width, b.height
                o.direction, o.polygon = b.direction, b.polygon
        return Obstacles(checked)

    def close(self) -> None:
        """Stop the program (end of input first: a polite server exits; killed after a second)."""
        self._stop(grace=1.0)

    def __enter__(self) -> ExecPerception:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an ExecPerception holds a running process and cannot be pickled; build it from its spec")

    @property
    def pid(self) -> int | None:
        """The running program's process id (None when none runs)."""
        return self._child.pid if self._child is not None else None


def _with_box(o: Obstacle, box: Mapping[str, Any]) -> Obstacle:
    """``o`` with the box a server sent (values as given: the guard validates them)."""
    center = box.get("center", [0.0, 0.0, 0.0])
    if "direction" in box:
        direction = box["direction"]
    else:
        heading = box.get("heading", 0.0)
        try:
            direction = [math.cos(heading), math.sin(heading), 0.0]
        except TypeError:
            direction = heading
    poly = box.get("polygon")
    if isinstance(poly, list) and all(isinstance(p, list) and len(p) == 2 for p in poly):
        z = center[2] if isinstance(center, list) and len(center) == 3 else 0.0
        poly = [[p[0], p[1], z] for p in poly]
    if poly is None or poly == []:
        poly = np.zeros((0, 3))
    o.center, o.direction, o.polygon = center, direction, poly  # type: ignore[assignment]
    o.length, o.width, o.height = box.get("length", 0.0), box.get("width", 0.0), box.get("height", 0.0)
    return o


def _clip(text: str | bytes, limit: int = 120) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if len(text) <= limit else text[: limit - 3] + "..."
