"""Frames as .npz files: lossless, with labels, for datasets (the simulator's training data) and bundles.

One file per frame holds ``points`` (structured), ``pose`` (4x4 or absent), ``meta`` (JSON: stamp, frame id,
provenance, dropped, the labels' ``region`` when they cover part of the sweep, and the frame's ``camera`` link when it
has one: calibration as exact decimal floats, the paired image's index, stamp, file) and the label arrays ``boxes``,
``point_instance``, ``point_meta``, ``point_semantic``.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_path
from lidarmt._paths import open_readable
from lidarmt.errors import InputError
from lidarmt.types import BOX_DTYPE, CameraLink, Frame, LabelledRegion, Labels, Provenance


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
    reg = frame.labels.region if frame.labels is not None else None
    if reg is not None:  # the part of the sweep the labels cover (KITTI: camera 2's view)
        meta["region"] = {"azimuth_min": reg.azimuth_min, "azimuth_max": reg.azimuth_max,
                          "max_range": reg.max_range, "source": reg.source}
    cam = frame.camera
    if cam is not None:  # the camera paired with the sweep (the misalignments need it); floats round-trip exactly
        meta["camera"] = {"extrinsic": [float(v) for v in cam.extrinsic.ravel()],
                          "intrinsic": [float(v) for v in cam.intrinsic.ravel()], "width": int(cam.width),
                          "height": int(cam.height), "index": int(cam.index), "stamp": float(cam.stamp),
                          "period_s": None if cam.period_s is None else float(cam.period_s), "image": cam.image,
                          "source": cam.source}
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


_MEMBERS = ("points", "pose", "meta", "boxes", "point_instance", "point_meta", "point_semantic")
_MAX_DEFLATE_RATIO = 1032  # deflate cannot expand data more than this
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError, struct.error,
                NotImplementedError, RuntimeError, TypeError)


def _read_members(path: Path) -> dict[str, np.ndarray]:
    """The known ``.npy`` members of a frame file, each checked before anything is allocated for it.

    A damaged or hostile file may claim any shape in a member's header; the claim is compared with the member's
    size (itself bounded by the archive's size times deflate's largest ratio) before the array is read, so a
    small file can never make the reader allocate gigabytes. Object arrays (pickles) are refused.
    """
    out: dict[str, np.ndarray] = {}
    with open_readable(path, max_bytes=None, what="frame file") as raw, zipfile.ZipFile(raw) as zf:
        size = os.fstat(raw.fileno()).st_size
        for info in zf.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else None
            if key not in _MEMBERS or key in out:
                continue
            ratio = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: _MAX_DEFLATE_RATIO}.get(info.compress_type)
            if ratio is None:
                raise InputError(f"{path}: member {info.filename} uses zip compression {info.compress_type}; "
                                 f"lidarmt frames are stored or deflated")
            if info.compress_size > size or info.file_size > ratio * info.compress_size:
                raise InputError(f"{path}: member {info.filename} announces impossible sizes (corrupt zip)")
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                else:
                    raise InputError(f"{path}: member {info.filename} is .npy version {version}; expected 1.0/2.0")
            if dtype.hasobject:
                raise InputError(f"{path}: member {info.filename} holds Python objects; refused (a frame holds "
                                 f"numbers only)")
            nbytes = dtype.itemsize * math.prod(shape)
            if nbytes > info.file_size:
                raise InputError(f"{path}: member {info.filename} claims shape {shape} ({nbytes} bytes) but holds "
                                 f"{info.file_size} bytes (corrupt)")
            with zf.open(info) as fh:
                out[key] = np.lib.format.read_array(fh, allow_pickle=False)
    return out


def _check_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    pts = arrays["points"]
    names = pts.dtype.names or ()
    if pts.ndim != 1 or not {"x", "y", "z", "intensity"} <= set(names) or any(
            pts.dtype[k].kind != "f" for k in ("x", "y", "z", "intensity")):
        raise InputError(f"{path}: 'points' is not a lidarmt point array (float fields x, y, z, intensity); "
                         f"got {pts.dtype} with shape {pts.shape}")
    pose = arrays.get("pose")
    if pose is not None and (pose.shape != (4, 4) or pose.dtype.kind not in "fiu"
                             or not np.all(np.isfinite(pose))):
        raise InputError(f"{path}: 'pose' must be a finite 4x4 matrix, got {pose.dtype} {pose.shape}")
    boxes = arrays.get("boxes")
    if boxes is not None and (boxes.ndim != 1 or not set(BOX_DTYPE.names or ()) <= set(boxes.dtype.names or ())):
        raise InputError(f"{path}: 'boxes' is not an array of lidarmt boxes ({boxes.dtype}, shape {boxes.shape})")
    for name in ("point_instance", "point_meta", "point_semantic"):
        a = arrays.get(name)
        if a is not None and (a.shape != (len(pts),) or a.dtype.kind not in "iu"):
            raise InputError(f"{path}: '{name}' must hold one integer per point ({len(pts)}), got {a.dtype} "
                             f"{a.shape}")


def _region(path: Path, raw: np.ndarray) -> LabelledRegion | None:
    """The labels' region stored in ``meta`` (None when absent), checked: finite azimuths in [-pi, pi], min < max."""
    try:
        r = json.loads(raw.tobytes().decode("utf-8")).get("region")
        if r is None:
            return None
        lo, hi = float(r["azimuth_min"]), float(r["azimuth_max"])
        rng = None if r.get("max_range") is None else float(r["max_range"])
        src = r.get("source", "")
        if not (math.isfinite(lo) and math.isfinite(hi) and -math.pi - 1e-9 <= lo < hi <= math.pi + 1e-9
                and (rng is None or (math.isfinite(rng) and rng > 0)) and isinstance(src, str)):
            raise ValueError("azimuths must be finite, within ±pi, min < max; max_range positive")
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise InputError(f"{path}: corrupt 'region' in the 'meta' of a lidarmt .npz frame ({err})") from err
    return LabelledRegion(lo, hi, rng, src)


def _camera(path: Path, raw: np.ndarray) -> CameraLink | None:
    """The camera link stored in ``meta`` (None when absent), checked: finite 4x4 and 3x4 matrices, a positive
    image size, a finite stamp and period."""
    try:
        c = json.loads(raw.tobytes().decode("utf-8")).get("camera")
        if c is None:
            return None
        ext = np.array(c["extrinsic"], dtype=np.float64)
        k = np.array(c["intrinsic"], dtype=np.float64)
        w, h, index = int(c["width"]), int(c["height"]), int(c["index"])
        stamp = float(c["stamp"])
        period = None if c.get("period_s") is None else float(c["period_s"])
        image, source = c.get("image"), c.get("source", "")
        if (ext.shape != (16,) or k.shape != (12,) or not np.isfinite(ext).all() or not np.isfinite(k).all()
                or w <= 0 or h <= 0 or index < 0 or not math.isfinite(stamp)
                or (period is not None and not (math.isfinite(period) and period > 0))
                or not (image is None or isinstance(image, str)) or not isinstance(source, str)):
            raise ValueError("matrices must be finite 4x4 and 3x4; size, index, stamp and period sane")
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as err:
        raise InputError(f"{path}: corrupt 'camera' in the 'meta' of a lidarmt .npz frame ({err})") from err
    return CameraLink(ext.reshape(4, 4), k.reshape(3, 4), w, h, index, stamp, period, image, source)


def _meta(path: Path, raw: np.ndarray) -> tuple[float, str, int, Provenance | None]:
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(meta, dict):
            raise TypeError("not a JSON object")
        stamp = float(meta.get("stamp", 0.0))
        frame_id = meta.get("frame_id", "velodyne64")
        dropped = int(meta.get("dropped", 0))
        prov = meta.get("provenance")
        if not isinstance(frame_id, str) or dropped < 0 or not math.isfinite(stamp):
            raise ValueError("bad stamp, frame_id or dropped")
        provenance = None
        if prov:
            provenance = Provenance(**prov)
            if not (isinstance(provenance.source, str) and isinstance(provenance.format, str)
                    and isinstance(provenance.index, int)):
                raise TypeError("bad provenance")
    except (ValueError, TypeError, AttributeError, OverflowError) as err:
        raise InputError(f"{path}: corrupt 'meta' of a lidarmt .npz frame ({err})") from err
    return stamp, frame_id, dropped, provenance


def load_frame_npz(path: str | os.PathLike[str]) -> Frame:
    """Read a frame written by :func:`save_frame_npz`.

    Anything wrong with the file (not a zip, damaged data, members of the wrong shape or type, object arrays)
    is an :class:`lidarmt.errors.InputError`; the file is only read, and its contents are data (no pickles).
    """
    path = Path(path)
    try:
        arrays = _read_members(path)
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file") from err
    except InputError:
        raise
    except _READ_ERRORS as err:
        raise InputError(f"{path}: not a readable lidarmt .npz frame ({err})") from err
    if "points" not in arrays or "meta" not in arrays:
        raise InputError(f"{path}: not a lidarmt .npz frame (no 'points'/'meta' arrays)")
    _check_arrays(path, arrays)
    stamp, frame_id, dropped, prov = _meta(path, arrays["meta"])
    labels = None
    if "boxes" in arrays:
        labels = Labels(
            arrays["boxes"],
            arrays.get("point_instance"),
            arrays.get("point_meta"),
            arrays.get("point_semantic"),
            _region(path, arrays["meta"]),
        )
    return Frame(
        points=arrays["points"],
        pose=arrays.get("pose"),
        stamp=stamp,
        frame_id=frame_id,
        provenance=prov if prov else Provenance(str(path), "npz", 0),
        labels=labels,
        dropped=dropped,
        camera=_camera(path, arrays["meta"]),
    )
