"""A folder of lidarmt ``.npz`` frames (what ``lidarmt simulate`` writes in dataset mode) as a Recording."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from lidarmt.errors import InputError
from lidarmt.io.base import Recording
from lidarmt.io.cloud import drop_non_finite
from lidarmt.io.errors import NoPointCloudError, RecordingError
from lidarmt.io.npz import load_frame_npz, save_frame_npz
from lidarmt.types import Frame, Provenance, finite_mask


def _natural_key(p: Path) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name))


class NpzRecording(Recording):
    """One ``.npz`` frame or a folder of them (natural order of names); labels and poses as saved."""

    format = "npz"

    def __init__(self, path, *, require_pose: bool = False, allow_empty: bool = False) -> None:
        super().__init__(path, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file or folder")
        self.files = [p] if p.is_file() else sorted(p.glob("*.npz"), key=_natural_key)
        if not self.files and not allow_empty:
            raise NoPointCloudError(f"{p}: no .npz frames in this folder")

    def _count(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> Frame:
        try:
            f = load_frame_npz(self.files[i])
        except RecordingError:
            raise
        except InputError as err:
            raise RecordingError(str(err)) from err
        points, dropped = drop_non_finite(f.points)
        if dropped:  # as every reader does (Apollo drops them on input); labels follow the points
            keep = finite_mask(f.points)
            f = replace(f, points=points, labels=None if f.labels is None else f.labels.select(keep),
                        dropped=f.dropped + dropped)
        src = f.provenance
        f.provenance = Provenance(str(self.path), "npz", i, src.topic if src else None, self.files[i].name)
        return f

    @property
    def pose_source(self) -> str:
        if not self.files:
            return "none"
        return "stored in each .npz" if self._read(0).pose is not None else "none (frames saved without pose)"


def write_npz_folder(folder: str | os.PathLike[str], frames, *, overwrite: bool = False,
                     compress: bool = True) -> int:
    """Write frames as ``000000.npz``, ``000001.npz``... into a new ``folder``; returns the count.

    The folder is built beside the target and renamed into place when complete; an existing folder is replaced
    (not merged) only with ``overwrite=True``.
    """
    from lidarmt.io._output import staged

    n = 0
    with staged(folder, overwrite=overwrite) as tmp:
        tmp.mkdir()
        for n, f in enumerate(frames, 1):
            save_frame_npz(tmp / f"{n - 1:06d}.npz", f, compress=compress)
    return n
