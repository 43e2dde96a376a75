"""May this path be read? May this path be written? One answer for every command.

**Reading** a file someone sent (a bundle's ``bundle.mcap``, a ``--recipe``, a steering CSV, a baseline's
journal, every file of a recording: scans, labels, calibration, poses, bags) goes through :func:`open_readable` /
:func:`open_file` / :func:`read_bytes` / :func:`read_text`, or is checked first with :func:`check_readable`. A path is read only when

* it is a **regular file** (never a FIFO, which blocks the reader forever; never ``/dev/zero``, which never
  ends; never a socket, a device or a folder). The file is opened with ``O_NONBLOCK`` and checked with ``fstat``
  on the open descriptor, so neither a FIFO nor a swap between check and open can hang or fool the reader;
* it has at most ``max_bytes`` bytes (what the reader would hold in memory), and no more are read even when the
  file grows;
* with ``inside=FOLDER``, a name read from a file (a CSV's ``filename`` column, a bench's module folder) stays
  inside ``FOLDER``: not absolute, no ``..`` that leaves it, no symbolic link that resolves outside it
  (:func:`inside`).

**Writing** an output (``--out``, ``--sheet``, a layout beside an MCAP) is checked with :func:`check_writable`
before any work is done: the output is never one of the command's inputs, never inside an input folder (a ROS 2
bag's own data file) and never a folder that holds an input; an existing output is replaced only with
``--force``, and never when it is not a regular file (a device, a FIFO, a folder where a file is expected).

The errors are the caller's :class:`lidarmt.errors.UserError` subclass, in one line naming the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from lidarmt.errors import InputError, OutputError, UserError

#: the size a small text file (JSON, a recipe, a CSV) may have unless a reader states its own bound
MAX_SMALL_FILE = 64 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def inside(name: str | os.PathLike[str], folder: str | os.PathLike[str], *, what: str = "path",
           error: type[UserError] = InputError) -> Path:
    """``folder / name`` when the name (read from a file: relative to ``folder``) stays inside ``folder`` on the
    filesystem; else ``error`` in one line: an absolute name, a ``..`` that leaves the folder, or a symbolic link on
    the way that resolves outside it. The rule for *opening* a name a file gives; what a page may *link to* is a
    rule on the text alone, :func:`lidarmt._show.stays_inside`."""
    text = os.fspath(name)
    if not text or "\x00" in text:
        raise error(f"{what} {text!r}: not a file name")
    if os.path.isabs(text) or text.startswith("~"):
        raise error(f"{what} {text!r}: an absolute path; it must name a file inside {folder}, so it is refused")
    base = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(base, text))
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        why = "leaves the folder through '..'" if ".." in Path(text).parts else "is a link that resolves outside it"
        raise error(f"{what} {text!r}: {why} ({folder}); only paths inside it are used, so it is refused")
    return Path(folder) / text


def _open_fd(path: Path, *, max_bytes: int | None, what: str, error: type[UserError]) -> tuple[int, int]:
    """An open read-only descriptor of ``path`` and its size, after the checks of :func:`check_readable`."""
    shown = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)  # before opening: opening a device can have effects of its own
    except FileNotFoundError as err:
        raise error(f"{shown}: no such file") from err
    except OSError as err:
        raise error(f"{shown}: cannot be read ({err.strerror or err})") from err
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{shown}: {_kind(st.st_mode)}, not a regular file, so it is not read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise error(f"{shown}: cannot be read ({err.strerror or err})") from err
    try:
        st = os.fstat(fd)  # the file opened, whatever the name points at now
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{shown}: {_kind(st.st_mode)}, not a regular file, so it is not read")
        if max_bytes is not None and st.st_size > max_bytes:
            raise error(f"{shown}: {st.st_size:,} bytes, more than the {max_bytes:,} such a file may have, so it "
                        "is not read")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _target(path: str | os.PathLike[str], inside_: str | os.PathLike[str] | None, what: str,
            error: type[UserError]) -> Path:
    return Path(path) if inside_ is None else inside(path, inside_, what=what or "path", error=error)


def check_readable(path: str | os.PathLike[str], *, max_bytes: int | None, inside: str | os.PathLike[str] | None
                   = None, what: str = "", error: type[UserError] = InputError) -> Path:
    """The path to read when ``path`` may be read: a regular file of at most ``max_bytes`` bytes (None: any
    size, for readers that stream and bound what they hold themselves), inside the folder ``inside`` when
    given (``path`` is then relative to it, as a file names it); else ``error`` in one line. Opening it never
    blocks (a FIFO is refused, not waited on)."""
    p = _target(path, inside, what, error)
    fd, _size = _open_fd(p, max_bytes=max_bytes, what=what, error=error)
    os.close(fd)
    return p


def open_file(path: str | os.PathLike[str], *, max_bytes: int | None, inside: str | os.PathLike[str] | None = None,
              what: str = "", error: type[UserError] = InputError, buffering: int = -1) -> IO[bytes]:
    """The file opened for reading in binary, after the checks of :func:`check_readable`, for a reader that keeps
    it open and closes it itself (a bag, a record); ``buffering=0`` gives the raw ``FileIO``."""
    p = _target(path, inside, what, error)
    fd, _size = _open_fd(p, max_bytes=max_bytes, what=what, error=error)
    return os.fdopen(fd, "rb", buffering=buffering)


@contextlib.contextmanager
def open_readable(path: str | os.PathLike[str], *, max_bytes: int | None, inside: str | os.PathLike[str] | None
                  = None, what: str = "", error: type[UserError] = InputError) -> Iterator[IO[bytes]]:
    """The file opened for reading in binary, after the checks of :func:`check_readable`."""
    p = _target(path, inside, what, error)
    fd, _size = _open_fd(p, max_bytes=max_bytes, what=what, error=error)
    with os.fdopen(fd, "rb") as fh:
        yield fh


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = MAX_SMALL_FILE,
               inside: str | os.PathLike[str] | None = None, what: str = "",
               error: type[UserError] = InputError) -> bytes:
    """The bytes of a file that may be read (:func:`check_readable`); never more than ``max_bytes``, even when
    the file grows while it is read."""
    p = _target(path, inside, what, error)
    fd, size = _open_fd(p, max_bytes=max_bytes, what=what, error=error)
    with os.fdopen(fd, "rb") as fh:
        try:  # never a buffer of max_bytes up front (read(n) allocates n): the size, then chunks if it grew
            parts = [fh.read(min(size, max_bytes) + 1)]
            got = len(parts[0])
            while got > size and got <= max_bytes:
                more = fh.read(min(1 << 20, max_bytes + 1 - got))
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        except OSError as err:
            raise error(f"{what + ' ' if what else ''}{p}: cannot be read ({err.strerror or err})") from err
    if len(data) > max_bytes:
        raise error(f"{what + ' ' if what else ''}{p}: more than the {max_bytes:,} bytes such a file may have, "
                    "so it is not read")
    return data


def read_text(path: str | os.PathLike[str], *, max_bytes: int = MAX_SMALL_FILE,
              inside: str | os.PathLike[str] | None = None, what: str = "", error: type[UserError] = InputError,
              encoding: str = "utf-8") -> str:
    """The text of a file that may be read (:func:`read_bytes`), decoded; undecodable text is ``error``."""
    data = read_bytes(path, max_bytes=max_bytes, inside=inside, what=what, error=error)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        shown = f"{what} {path}" if what else str(path)
        raise error(f"{shown}: not {encoding} text ({err.reason} at byte {err.start})") from err


# ----------------------------------------------------------------------------------------------- writing


def _real(p: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(p)))


def _under(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def check_writable(path: str | os.PathLike[str] | None, *, inputs: Iterable[str | os.PathLike[str] | None] = (),
                   force: bool = False, what: str = "--out", error: type[UserError] = OutputError,
                   folder: bool = False, may_exist: bool = False) -> Path | None:
    """``path`` when a command may write it (None when it is None); else ``error`` in one line. Call it first
    thing, before any input is opened. Refused:

    * an output that is one of ``inputs`` (the same file, through any link), lies inside an input folder, or is
      a folder that holds an input (None and paths that do not exist are skipped, so a registry name or
      ``module:callable`` may be passed as it is);
    * an output that exists, unless ``force`` (or ``may_exist``: a run folder whose own rule, ``--resume`` /
      ``--force``, decides what happens to it);
    * even with ``force``, an existing output of the wrong kind: a folder where a file is written, a file where
      a folder is (``folder=True``), or anything that is neither (a FIFO, a device).
    """
    if path is None:  # an output not asked for
        return None
    p = Path(path)
    shown = f"{what} {p}" if what else str(p)
    real = _real(p)
    for inp in inputs:
        if inp is None or not os.path.lexists(os.fspath(inp)):
            continue
        ireal = _real(inp)
        if real == ireal or (os.path.exists(real) and os.path.samefile(real, ireal)):
            raise error(f"{shown}: is the input {inp}; writing it would destroy it: choose another name")
        if os.path.isdir(ireal) and _under(real, ireal):
            raise error(f"{shown}: lies inside the input folder {inp}; writing there would change the input: "
                        "choose a path outside it")
        if _under(ireal, real):
            raise error(f"{shown}: holds the input {inp}; writing there could destroy it: choose a path outside it")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return p
    except OSError as err:
        raise error(f"{shown}: cannot be used ({err.strerror or err})") from err
    if folder:
        if not stat.S_ISDIR(st.st_mode):
            raise error(f"{shown}: exists and is {'a file' if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)}, "
                        "not a folder: choose another path")
    elif not stat.S_ISREG(st.st_mode):
        raise error(f"{shown}: exists and is {_kind(st.st_mode)}, not a file: choose another path")
    if not (force or may_exist):
        raise error(f"{shown}: already exists; pass --force to overwrite it, or choose another path")
    return p


def check_outputs(outputs: Iterable[str | os.PathLike[str] | None], *, inputs: Iterable[str | os.PathLike[str]
                                                                                         | None] = (),
                  force: bool = False, what: str = "--out", error: type[UserError] = OutputError) -> None:
    """:func:`check_writable` for several file outputs of one command (an MCAP and its layout); None skipped."""
    ins = list(inputs)
    for out in outputs:
        if out is not None:
            check_writable(out, inputs=ins, force=force, what=what, error=error)


# ----------------------------------------------------------------------------------------------- formats


def read_json(path: str | os.PathLike[str], *, max_bytes: int = MAX_SMALL_FILE,
              inside: str | os.PathLike[str] | None = None, what: str = "",
              error: type[UserError] = InputError) -> Any:
    """The JSON value of a file that may be read (:func:`read_text`), parsed at any nesting depth or refused in
    one line (:func:`lidarmt._limits.loads_json`)."""
    from lidarmt._limits import loads_json

    text = read_text(path, max_bytes=max_bytes, inside=inside, what=what, error=error)
    return loads_json(text, what=f"{what} {path}" if what else str(path), error=error)


def load_npz(path: str | os.PathLike[str], *, max_bytes: int | None = None, what: str = "",
             error: type[UserError] = InputError) -> dict[str, Any]:
    """Every array of an ``.npz`` file that may be read (:func:`check_readable`; ``max_bytes`` None: the memory
    available now, :func:`lidarmt._limits.available_memory`), loaded at once and never unpickled; a file that is
    no ``.npz`` is ``error`` in one line."""
    import zipfile
    import zlib

    import numpy as np

    from lidarmt._limits import available_memory

    cap = available_memory() if max_bytes is None else max_bytes
    with open_readable(path, max_bytes=cap, what=what, error=error) as fh:
        try:
            with np.load(fh, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, KeyError, AttributeError, zipfile.BadZipFile, zlib.error) as err:
            shown = f"{what} {path}" if what else str(path)
            raise error(f"{shown}: not a readable .npz file ({err})") from err


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a local file's bytes, hex, read in 1 MiB pieces (weights and model files the user or the
    package names; OSError propagates)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
