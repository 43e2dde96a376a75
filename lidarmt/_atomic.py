"""Atomic file output: write to a temporary file beside the target, fsync, then rename over it.

A reader never sees a half-written file, and a failure (including a full disk) leaves the target untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from lidarmt.errors import OutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success it is renamed onto ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp makes 0600 files; give the usual 0666 & ~umask instead
            os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except OSError as err:
        tmp_path.unlink(missing_ok=True)
        raise OutputError(f"cannot write {target}: {err.strerror or err}") from err
    except Exception as err:
        # some writers report a full disk as their own error (torch.save: RuntimeError "unexpected pos")
        full = disk_full(target.parent)
        tmp_path.unlink(missing_ok=True)
        if full:
            raise OutputError(f"cannot write {target}: no space left on the device ({type(err).__name__}); free "
                              "some space and run the command again") from err
        raise
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def disk_full(folder: str | os.PathLike[str], *, slack: int = 1 << 20) -> bool:
    """Whether the file system of ``folder`` has (almost) no space left for this process: less than ``slack``
    bytes, what is left once a write has failed for want of space."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return False
    return st.f_bavail * st.f_frsize < slack


def is_disk_full_error(err: BaseException) -> bool:
    """An OSError for a full disk or quota (ENOSPC, EDQUOT), or an error whose text says so (a worker's)."""
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return True
    text = str(err)
    return "No space left on device" in text or "[Errno 28]" in text or "no space left on the device" in text


def staging_folder(target: str | os.PathLike[str]) -> Path:
    """A fresh hidden folder beside ``target`` in which a folder output (a bug bundle) is built before it is
    renamed onto ``target``; it gets the usual mode (0777 & ~umask), not ``tempfile.mkdtemp``'s 0700, since it
    becomes the output (a bundle is made to be shared)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))  # see _TEMP_FORMS
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike[str], mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file for writing; it replaces ``target`` only if the block completes."""
    if not any(c in mode for c in "wx"):
        raise ValueError("atomic_open is for writing")
    with atomic_path(target) as tmp, open(tmp, mode.replace("x", "w"), **kwargs) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(target, "wb") as fh:
        fh.write(data)


def atomic_write_text(target: str | os.PathLike[str], text: str) -> None:
    with atomic_open(target, "w", encoding="utf-8") as fh:
        fh.write(text)


# ------------------------------------------------------------------------------------------ stale temporaries

#: How lidarmt names the temporary sibling of an output ``name``: ``.<name>.<8 characters>.tmp``
#: (:func:`atomic_path` through ``tempfile.mkstemp``, and ``lidarmt.io._output.staged`` with 8 hex digits), and
#: ``.<name>.<8 hex>.old`` for a replaced output folder that ``staged`` moves aside before deleting it.
_TEMP_FORMS = (r"\.(?P<name>{names})\.[a-z0-9_]{{8}}\.tmp", r"\.(?P<name>{names})\.[0-9a-f]{{8}}\.old")

#: Without /proc (to see whether a process still writes a temporary), one this old is taken as abandoned.
STALE_AGE_S = 600.0


def _open_by_a_process() -> set[str] | None:
    """Real paths of the files some process has open (Linux /proc; None where that cannot be known)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    held: set[str] = set()
    for pid in proc.iterdir():
        if not pid.name.isdigit():
            continue
        try:
            fds = list((pid / "fd").iterdir())
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                held.add(os.readlink(fd))
            except OSError:
                continue
    return held


def stale_temporaries(folder: str | os.PathLike[str], names: str) -> list[Path]:
    """lidarmt's abandoned temporaries of the outputs named by ``names`` in ``folder``.

    ``names`` is a regular expression that the output's whole file name matches (``re.escape("demo.bag")`` for
    one output, ``r"\\d{6}\\.npz"`` for a dataset's frames). A temporary counts when its name has exactly the form
    lidarmt gives it (see ``_TEMP_FORMS``) and no process has it open (on Linux, through /proc; elsewhere,
    when it is older than :data:`STALE_AGE_S`), so the temporary of a run still writing is never listed.
    """
    import re
    import time

    folder = Path(folder)
    if not folder.is_dir():
        return []
    forms = [re.compile(f.format(names=names)) for f in _TEMP_FORMS]
    found = [p for p in folder.iterdir() if any(f.fullmatch(p.name) for f in forms)]
    if not found:
        return []
    held = _open_by_a_process()
    out = []
    for p in sorted(found):
        try:
            st = p.lstat()
        except OSError:
            continue
        if p.is_symlink():
            continue
        if held is None:
            if time.time() - st.st_mtime < STALE_AGE_S:
                continue
        else:
            real = os.path.realpath(p)
            inside = real + os.sep
            if real in held or any(h.startswith(inside) for h in held):  # a folder output: a file in it is open
                continue
        out.append(p)
    return out


def remove_stale_temporaries(folder: str | os.PathLike[str], names: str) -> list[Path]:
    """Delete what :func:`stale_temporaries` lists (files, or the folders of folder outputs); returns them.

    Writers call it when they start on an output, so a run killed by SIGKILL (which no ``finally`` survives)
    leaves its hidden temporary only until the next run that writes the same output.
    """
    import shutil

    removed = []
    for p in stale_temporaries(folder, names):
        try:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise OutputError(f"cannot remove the stale temporary {p}: {err.strerror or err}; delete it by hand") from err
        removed.append(p)
    return removed
