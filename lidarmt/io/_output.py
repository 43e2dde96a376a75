"""Atomic output for writers whose library wants to create the file (or folder) itself.

``rosbags`` refuses a path that exists, so :func:`lidarmt._atomic.atomic_path` (which pre-creates its temporary
file) does not fit. :func:`staged` yields a fresh, non-existing sibling path; on success it is renamed onto the
target (a folder target that exists is moved aside first and removed after), on failure it is deleted.

:class:`StagedWriter` is the lifecycle the recording writers (ROS1, ROS2, Cyber) share on top of it: ``close``
finishes the staged output and moves it into place, ``abort`` (or leaving a ``with`` block by an exception)
discards it, and :func:`write_frames` drives a writer over an iterable of frames.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np

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


def finite_extrinsic(matrix: Any, default: np.ndarray) -> np.ndarray:
    """``novatel_from_sensor`` as a float64 4x4 (``default`` when None); raises WriterError unless finite 4x4."""
    ext = default if matrix is None else np.asarray(matrix, dtype=np.float64)
    if ext.shape != (4, 4) or not np.all(np.isfinite(ext)):
        raise WriterError(f"novatel_from_sensor must be a finite 4x4 matrix, got shape {ext.shape}")
    return ext


class StagedWriter:
    """Base of the writers whose output is built at a temporary sibling of ``path`` (see :func:`staged`).

    A subclass calls :meth:`_open_stage` in its ``__init__`` (the temporary path is then ``self._tmp``), creates its
    output there, and implements :meth:`_finish` (complete the output; called once by :meth:`close`) and
    :meth:`_discard` (release what it holds before the output is deleted; called once by :meth:`abort`).
    """

    path: Path
    frames_written: int

    def _open_stage(self, *, overwrite: bool) -> Path:
        self._stage = staged(self.path, overwrite=overwrite)
        self._tmp: Path = self._stage.__enter__()
        self._closed = False
        return self._tmp

    def _drop_stage(self, err: BaseException, tb: Any = None) -> None:
        """Delete the staged output (after an error or an abort); the target is left as it was."""
        self._stage.__exit__(type(err), err, tb)

    def _finish(self) -> None:
        raise NotImplementedError

    def _discard(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish the output and move it into place (a no-op once closed or aborted)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
        except BaseException as err:
            self._drop_stage(err, err.__traceback__)
            raise
        self._stage.__exit__(None, None, None)

    def abort(self) -> None:
        """Discard everything written; the target is left as it was."""
        if self._closed:
            return
        self._closed = True
        try:
            self._discard()
        finally:
            self._drop_stage(WriterError("aborted"))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_frames(writer: StagedWriter, frames: Iterable[Any]) -> int:
    """Write every frame with ``writer`` (its ``write``), close it and return the number written.

    The writer is aborted (nothing appears at its path) when a frame cannot be written or ``frames`` raises.
    """
    with writer as w:
        for f in frames:
            w.write(f)  # type: ignore[attr-defined]
        return w.frames_written
