"""Apollo's offline pose files: ``idx t x y z qx qy qz qw`` (world <- velodyne64 at time t).

Apollo's PCD exporter writes one line per exported cloud to ``pose.txt``; ``gen_pose_file.py`` splits it into
``<idx>.pose`` files, one beside each ``<idx>.pcd``; the offline perception tool reads them with
``ReadPoseFile`` (quaternion in x, y, z, w order). Both forms are read here; the writers write the same text with
17 significant digits so that a pose reads back exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_write_text
from lidarmt._paths import read_text
from lidarmt.io.errors import FormatError, RecordingError, WriterError
from lidarmt.types import make_pose, matrix_to_quat

#: a pose.txt of a long drive has a line per frame: a few MB
MAX_POSE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class PoseRecord:
    idx: int
    stamp: float
    pose: np.ndarray  # 4x4 world <- sensor


def parse_pose_line(line: str, *, where: str) -> PoseRecord:
    parts = line.split()
    if len(parts) != 9:
        raise FormatError(f"{where}: expected 9 numbers 'idx t x y z qx qy qz qw', got {len(parts)}: {line.strip()!r}")
    try:
        idx = int(float(parts[0]))
        vals = [float(v) for v in parts[1:]]
    except ValueError as err:
        raise FormatError(f"{where}: not a number in {line.strip()!r}") from err
    if not all(np.isfinite(vals)):
        raise FormatError(f"{where}: non-finite value in {line.strip()!r}")
    try:
        pose = make_pose(vals[1:4], vals[4:8])
    except ValueError as err:
        raise FormatError(f"{where}: {err}") from err
    return PoseRecord(idx, vals[0], pose)


def read_pose_file(path: str | os.PathLike[str]) -> PoseRecord:
    """Read one ``<idx>.pose`` file (its first non-empty line)."""
    path = Path(path)
    text = read_text(path, max_bytes=MAX_POSE_BYTES, what="pose file", error=RecordingError)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise FormatError(f"{path}: empty pose file")
    return parse_pose_line(lines[0], where=str(path))


def read_pose_txt(path: str | os.PathLike[str]) -> dict[int, PoseRecord]:
    """Read a ``pose.txt`` with many lines; returns the records by index."""
    path = Path(path)
    text = read_text(path, max_bytes=MAX_POSE_BYTES, what="pose file", error=RecordingError)
    out: dict[int, PoseRecord] = {}
    for k, ln in enumerate(text.splitlines(), 1):
        if ln.strip() and not ln.lstrip().startswith("#"):
            rec = parse_pose_line(ln, where=f"{path}:{k}")
            out[rec.idx] = rec
    return out


def format_pose_line(idx: int, stamp: float, pose: np.ndarray) -> str:
    pose = np.asarray(pose, dtype=np.float64)
    if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
        raise WriterError(f"pose {idx}: expected a finite 4x4 matrix")
    qx, qy, qz, qw = matrix_to_quat(pose[:3, :3])
    vals = [float(stamp), *pose[:3, 3].tolist(), qx, qy, qz, qw]
    return f"{int(idx)} " + " ".join(repr(v) for v in vals)


def write_pose_file(path: str | os.PathLike[str], idx: int, stamp: float, pose: np.ndarray, *,
                    overwrite: bool = False) -> None:
    """Write ``<idx>.pose`` atomically (``idx t x y z qx qy qz qw``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise WriterError(f"{path} exists; pass overwrite=True to replace it")
    atomic_write_text(path, format_pose_line(idx, stamp, pose) + "\n")


def write_pose_txt(path: str | os.PathLike[str], records: list[tuple[int, float, np.ndarray]], *,
                   overwrite: bool = False) -> None:
    """Write a multi-line ``pose.txt`` atomically from (idx, stamp, pose) tuples."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise WriterError(f"{path} exists; pass overwrite=True to replace it")
    atomic_write_text(path, "".join(format_pose_line(i, t, p) + "\n" for i, t, p in records))
