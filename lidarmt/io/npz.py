"""Frames as .npz files: lossless, with labels, for datasets (the simulator's training data) and bundles.

One file per frame holds ``points`` (structured), ``pose`` (4x4 or absent), ``meta`` (JSON: stamp, frame id,
provenance, dropped) and the label arrays ``boxes``, ``point_instance``, ``point_meta``, ``point_semantic``.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_path
from lidarmt.errors import InputError
from lidarmt.types import Frame, Labels, Provenance


def save_frame_npz(path: str | os.PathLike[str], frame: Frame, *, compress: bool = True) -> None:
    """Write a frame atomically to ``path`` (.npz)."""
    arrays: dict[str, np.ndarray] = {"points": frame.points}
    if frame.pose is not None:
        arrays["pose"] = frame.pose
    meta = {"stamp": frame.stamp, "frame_id": frame.frame_id, "dropped": frame.dropped}
    if frame.provenance is not None:
        p = frame.provenance
        meta["provenance"] = {"source": p.source, "format": p.format, "index": p.index, "topic": p.topic,
                              "detail": p.detail}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    if frame.labels is not None:
        lb = frame.labels
        arrays["boxes"] = lb.boxes
        for name in ("point_instance", "point_meta", "point_semantic"):
            a = getattr(lb, name)
            if a is not None:
                arrays[name] = a
    # Written member by member with a fixed timestamp, so the same frame always gives the same bytes.
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=method, allowZip64=True) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)


def load_frame_npz(path: str | os.PathLike[str]) -> Frame:
    """Read a frame written by :func:`save_frame_npz`."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file") from err
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise InputError(f"{path}: not a readable lidarmt .npz frame ({err})") from err
    if "points" not in arrays or "meta" not in arrays:
        raise InputError(f"{path}: not a lidarmt .npz frame (no 'points'/'meta' arrays)")
    meta = json.loads(arrays["meta"].tobytes().decode())
    prov = meta.get("provenance")
    labels = None
    if "boxes" in arrays:
        labels = Labels(
            arrays["boxes"],
            arrays.get("point_instance"),
            arrays.get("point_meta"),
            arrays.get("point_semantic"),
        )
    return Frame(
        points=arrays["points"],
        pose=arrays.get("pose"),
        stamp=float(meta.get("stamp", 0.0)),
        frame_id=meta.get("frame_id", "velodyne64"),
        provenance=Provenance(**prov) if prov else Provenance(str(path), "npz", 0),
        labels=labels,
        dropped=int(meta.get("dropped", 0)),
    )
