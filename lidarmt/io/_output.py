"""Atomic output for writers whose library wants to create the file (or folder) itself.

``rosbags`` refuses a path that exists, so :func:`lidarmt._atomic.atomic_path` (which pre-creates its temporary
file) does not fit. :func:`staged` yields a fresh, non-existing sibling path; on success it is renamed onto the
target (a folder target that exists is moved aside first and removed after), on failure it is deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from lidarmt.io.errors import WriterError


def check_target(target: str | os.PathLike[str], *, overwrite: bool) -> Path:
    """The target as a Path; raises WriterError when it exists and ``overwrite`` is false."""
    target = Path(target)
    if target.exists() and not overwrite:
        raise WriterError(f"{target} exists; pass overwrite=True (--overwrite) to replace it, or choose another name")
    if target.is_dir() and not target.is_symlink() and overwrite and not _looks_like_output(target):
        raise WriterError(f"{target} is a folder that does not look like a recording; refusing to replace it")
    return target


def _looks_like_output(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    return not names or "metadata.yaml" in names or any(
        n.endswith((".db3", ".mcap", ".pcd", ".pose", ".npz")) for n in names)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@contextlib.contextmanager
def staged(target: str | os.PathLike[str], *, overwrite: bool) -> Iterator[Path]:
    """Yield a non-existing temporary sibling of ``target``; rename it onto ``target`` when the block succeeds."""
    target = check_target(target, overwrite=overwrite)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WriterError(f"cannot create the folder {target.parent}: {err.strerror or err}") from err
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        yield tmp
        if not tmp.exists():
            raise WriterError(f"{target}: the writer produced nothing")
        if target.exists():
            if not overwrite:
                raise WriterError(f"{target} appeared while writing; nothing replaced")
            if target.is_dir() and not target.is_symlink():
                old = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.old"
                os.replace(target, old)
                os.replace(tmp, target)
                _remove(old)
                return
        os.replace(tmp, target)
    except OSError as err:
        _remove(tmp)
        raise WriterError(f"cannot write {target}: {err.strerror or err}") from err
    except BaseException:
        _remove(tmp)
        raise
