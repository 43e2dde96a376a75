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
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


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
