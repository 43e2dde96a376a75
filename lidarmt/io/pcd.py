"""PCD files (PCL's Point Cloud Data v0.7: ascii, binary, binary_compressed) and folders of them with Apollo poses.

Apollo's offline perception works on ``<idx>.pcd`` (exported from the PointCloud2, binary_compressed: fields x y z
intensity timestamp) plus ``<idx>.pose`` (see :mod:`lidarmt.io.posefile`). A folder of PCDs is one recording,
frames in natural order of the file names; poses come from ``<stem>.pose`` beside each PCD, from a sibling
``pose/`` folder (Apollo's ``/apollo/data/{pcd,pose}``), or from ``pose.txt`` lines matched by index.

Layouts: ``binary`` is packed records (no padding), ``binary_compressed`` is two uint32 (compressed size,
uncompressed size) and LZF data holding the fields one after another (all x, then all y, ...), ``ascii`` is one
point a line. Fields named ``_`` are padding.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_write_bytes
from lidarmt._limits import available_memory
from lidarmt._paths import read_bytes
from lidarmt.io.base import Recording
from lidarmt.io.cloud import Field, FieldLayout, to_points
from lidarmt.io.errors import FormatError, NoPointCloudError, RecordingError, WriterError
from lidarmt.io.posefile import PoseRecord, read_pose_file, read_pose_txt
from lidarmt.types import Frame, Provenance

_PCD_TYPES = {("F", 4): "f4", ("F", 8): "f8", ("U", 1): "u1", ("U", 2): "u2", ("U", 4): "u4", ("U", 8): "u8",
              ("I", 1): "i1", ("I", 2): "i2", ("I", 4): "i4", ("I", 8): "i8"}
_NP_TO_PCD = {v: k for k, v in _PCD_TYPES.items()}
ENCODINGS = ("ascii", "binary", "binary_compressed")


@dataclass(slots=True)
class PcdHeader:
    fields: list[str]
    sizes: list[int]
    types: list[str]
    counts: list[int]
    width: int
    height: int
    points: int
    viewpoint: list[float]
    data: str
    data_offset: int

    @property
    def layout(self) -> FieldLayout:
        """Packed record layout (as ``binary`` stores it)."""
        out, off = [], 0
        for name, size, typ, count in zip(self.fields, self.sizes, self.types, self.counts, strict=True):
            dt = _PCD_TYPES.get((typ, size))
            if dt is None:
                raise FormatError(f"unsupported PCD field type {typ}{size} for '{name}'")
            out.append(Field("" if name == "_" else name, off, dt, count))
            off += size * count
        return FieldLayout(tuple(out), off)


def parse_header(buf: bytes, *, where: str) -> PcdHeader:
    vals: dict[str, list[str]] = {}
    pos = 0
    for _ in range(64):
        nl = buf.find(b"\n", pos)
        if nl < 0:
            raise FormatError(f"{where}: PCD header ends before its DATA line (truncated or not a PCD)")
        line = buf[pos:nl].decode("ascii", "replace").strip()
        pos = nl + 1
        if not line or line.startswith("#"):
            continue
        key, *rest = line.split()
        vals[key.upper()] = rest
        if key.upper() == "DATA":
            break
    else:
        raise FormatError(f"{where}: no DATA line in the first 64 header lines; not a PCD file")
    try:
        fields = vals["FIELDS"]
        n = len(fields)
        sizes = [int(v) for v in vals.get("SIZE", ["4"] * n)]
        types = [v.upper() for v in vals.get("TYPE", ["F"] * n)]
        counts = [int(v) for v in vals.get("COUNT", ["1"] * n)]
        width = int(vals.get("WIDTH", ["0"])[0])
        height = int(vals.get("HEIGHT", ["1"])[0])
        points = int(vals.get("POINTS", [str(width * height)])[0])
        viewpoint = [float(v) for v in vals.get("VIEWPOINT", ["0", "0", "0", "1", "0", "0", "0"])]
        data = vals["DATA"][0].lower()
    except (KeyError, ValueError, IndexError) as err:
        raise FormatError(f"{where}: malformed PCD header ({err!r})") from err
    if not (len(sizes) == len(types) == len(counts) == n):
        raise FormatError(f"{where}: PCD header FIELDS/SIZE/TYPE/COUNT have different lengths")
    if min(counts, default=1) < 1 or min(sizes, default=1) < 1:
        raise FormatError(f"{where}: PCD header SIZE and COUNT must be positive (SIZE {' '.join(map(str, sizes))}, "
                          f"COUNT {' '.join(map(str, counts))})")
    if sum(c * s for c, s in zip(counts, sizes, strict=True)) > 1 << 16:
        raise FormatError(f"{where}: PCD header describes points of more than 65536 bytes (corrupt SIZE/COUNT)")
    if width < 0 or height < 0 or points < 0:
        raise FormatError(f"{where}: PCD header WIDTH {width}, HEIGHT {height}, POINTS {points}: none may be "
                          f"negative")
    if data not in ENCODINGS:
        raise FormatError(f"{where}: PCD DATA '{data}' is not one of {', '.join(ENCODINGS)}")
    return PcdHeader(fields, sizes, types, counts, width, height, points, viewpoint, data, pos)


class _Columns(dict):
    """Columns by field name with the length of one of them: what to_points needs of a record array."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __len__(self) -> int:
        return self.n


def _records(buf: bytes, h: PcdHeader, where: str) -> np.ndarray:
    """The points as a packed structured array (a view for binary, a new array otherwise)."""
    layout = h.layout
    n = h.points
    body = memoryview(buf)[h.data_offset :]
    if h.data == "binary":
        if len(body) < n * layout.point_step:
            raise FormatError(f"{where}: binary PCD holds {len(body)} bytes, {n} points need "
                              f"{n * layout.point_step} (truncated)")
        return layout.view(body[: n * layout.point_step], n)
    if h.data == "binary_compressed":
        if len(body) < 8:
            raise FormatError(f"{where}: binary_compressed PCD has no size words (truncated)")
        csize, usize = struct.unpack_from("<II", body, 0)
        if len(body) < 8 + csize:
            raise FormatError(f"{where}: compressed block is {csize} bytes, only {len(body) - 8} present (truncated)")
        if usize != n * layout.point_step:
            raise FormatError(f"{where}: uncompressed size {usize} != {n} points x {layout.point_step} bytes")
        import lidarmt.io._lzf as _lzf

        try:
            raw = _lzf.decompress(body[8 : 8 + csize], usize)
        except FormatError as err:
            raise FormatError(f"{where}: {err}") from err
        cols = _Columns(n)  # the fields lie one after another: view each block in place, no record array
        pos = 0
        for f in layout.fields:
            nbytes = np.dtype(f.dtype).itemsize * f.count * n
            if f.name and f.name not in cols:
                block = raw[pos : pos + nbytes].view("<" + f.dtype if f.dtype[0] not in "iu" or f.dtype[1] != "1"
                                                     else f.dtype)
                cols[f.name] = block if f.count == 1 else block.reshape(n, f.count)
            pos += nbytes
        return cols  # type: ignore[return-value]
    # ascii
    text = bytes(body).decode("ascii", "replace")
    cols = sum(h.counts)
    try:
        vals = np.array(text.split(), dtype=np.float64)
    except ValueError as err:
        raise FormatError(f"{where}: ascii PCD has a non-number ({err})") from err
    if len(vals) < n * cols:
        raise FormatError(f"{where}: ascii PCD has {len(vals) // max(cols, 1)} points, header says {n} (truncated)")
    vals = vals[: n * cols].reshape(n, cols)
    out = np.zeros(n, dtype=layout.numpy_dtype())
    c = 0
    for f in layout.fields:
        if f.name:
            out[f.name] = vals[:, c] if f.count == 1 else vals[:, c : c + f.count]
        c += f.count
    return out


def read_pcd(path: str | os.PathLike[str], *, stamp: float | None = None) -> tuple[Frame, PcdHeader]:
    """Read one PCD file into a Frame (pose None, non-finite points dropped) and its header.

    The stamp is ``stamp`` if given, else the largest per-point time if the file has one, else 0.
    """
    path = Path(path)
    # a regular file no bigger than the memory available now (never a FIFO or /dev/zero: lidarmt._paths)
    buf = read_bytes(path, max_bytes=available_memory(), error=RecordingError)
    h = parse_header(buf, where=str(path))
    layout = h.layout
    layout.check_xyz(str(path))
    rec = _records(buf, h, str(path))
    points, dropped = to_points(rec, layout, stamp=stamp or 0.0)
    if stamp is None:
        stamp = float(points["time"].max()) if "time" in (points.dtype.names or ()) and len(points) else 0.0
    frame = Frame(points, None, float(stamp), "velodyne64", Provenance(str(path), "pcd", 0, None, path.name),
                  dropped=dropped)
    return frame, h


def _pcd_fields(points: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """(pcd field name, numpy type, column) in Apollo's order: x y z intensity [ring] [timestamp]."""
    names = points.dtype.names or ()
    inten = points["intensity"]
    integral = len(inten) == 0 or (np.all(inten == np.rint(inten)) and inten.min() >= 0 and inten.max() <= 255)
    out = [("x", "f4", points["x"]), ("y", "f4", points["y"]), ("z", "f4", points["z"]),
           ("intensity", "u1" if integral else "f4", inten)]
    if "ring" in names:
        out.append(("ring", "u2", points["ring"]))
    if "time" in names:
        out.append(("timestamp", "f8", points["time"]))
    return out


def encode_pcd(frame: Frame, *, encoding: str = "binary") -> bytes:
    """The bytes of a PCD file for a frame (fields x y z intensity [ring] [timestamp], as Apollo exports)."""
    if encoding not in ENCODINGS:
        raise WriterError(f"PCD encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
    cols = _pcd_fields(frame.points)
    n = len(frame.points)
    head = (
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\n"
        f"FIELDS {' '.join(c[0] for c in cols)}\n"
        f"SIZE {' '.join(str(_NP_TO_PCD[c[1]][1]) for c in cols)}\n"
        f"TYPE {' '.join(_NP_TO_PCD[c[1]][0] for c in cols)}\n"
        f"COUNT {' '.join('1' for _ in cols)}\n"
        f"WIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {encoding}\n"
    ).encode()
    if encoding == "ascii":
        arrs = []
        for _name, t, col in cols:
            arrs.append(col.astype(t))
        lines = []
        fmts = ["%.9g" if t == "f4" else "%.17g" if t == "f8" else "%d" for _n, t, _c in cols]
        for row in zip(*arrs, strict=True):
            lines.append(" ".join(f % v for f, v in zip(fmts, row, strict=True)))
        return head + ("\n".join(lines) + ("\n" if lines else "")).encode()
    if encoding == "binary":
        dt = np.dtype([(name, "<" + t) for name, t, _c in cols])
        rec = np.empty(n, dtype=dt)
        for name, _t, col in cols:
            rec[name] = col
        return head + rec.tobytes()
    import lidarmt.io._lzf as _lzf

    soa = b"".join(np.ascontiguousarray(col.astype("<" + t)).tobytes() for _name, t, col in cols)
    comp = _lzf.compress(soa)
    return head + struct.pack("<II", len(comp), len(soa)) + comp


def write_pcd(path: str | os.PathLike[str], frame: Frame, *, encoding: str = "binary",
              overwrite: bool = False) -> None:
    """Write a frame as a PCD file atomically. Intensities that are whole numbers 0..255 are stored as uint8
    (Apollo's type), others as float32; per-point times as ``timestamp`` float64 seconds."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise WriterError(f"{path} exists; pass overwrite=True to replace it")
    atomic_write_bytes(path, encode_pcd(frame, encoding=encoding))


def write_pcd_folder(folder: str | os.PathLike[str], frames, *, encoding: str = "binary_compressed",
                     overwrite: bool = False) -> int:
    """Write frames as ``<i>.pcd`` + ``<i>.pose`` (when posed), i = 1, 2, ..., Apollo's offline layout.

    The folder is built beside the target and renamed into place when complete; an existing folder is replaced
    (not merged) only with ``overwrite=True``.
    """
    from lidarmt.io._output import staged
    from lidarmt.io.posefile import write_pose_file

    k = 0
    with staged(folder, overwrite=overwrite) as tmp:
        tmp.mkdir()
        for k, f in enumerate(frames, 1):
            write_pcd(tmp / f"{k}.pcd", f, encoding=encoding)
            if f.pose is not None:
                write_pose_file(tmp / f"{k}.pose", k, f.stamp, f.pose)
    return k


def _natural_key(p: Path) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem))


class PcdRecording(Recording):
    """One PCD file, or a folder of them, with Apollo ``.pose`` files when present."""

    format = "pcd"

    def __init__(self, path, *, require_pose: bool = False, allow_empty: bool = False) -> None:
        super().__init__(path, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file or folder")
        self.files = [p] if p.is_file() else sorted((c for c in p.iterdir() if c.suffix.lower() == ".pcd"),
                                                    key=_natural_key)
        if not self.files and not allow_empty:
            raise NoPointCloudError(f"{p}: no .pcd files in this folder")
        base = p.parent if p.is_file() else p
        self._pose_txt: dict[int, PoseRecord] | None = None
        for cand in (base / "pose.txt", base.parent / "pose" / "pose.txt"):
            if cand.is_file():
                self._pose_txt = read_pose_txt(cand)
                self._pose_txt_path = cand
                break
        self._pose_dirs = [base, base.parent / "pose"]

    def _count(self) -> int:
        return len(self.files)

    def _pose_for(self, f: Path) -> PoseRecord | None:
        for d in self._pose_dirs:
            cand = d / (f.stem + ".pose")
            if cand.is_file():
                return read_pose_file(cand)
        if self._pose_txt is not None:
            try:
                return self._pose_txt.get(int(f.stem))
            except ValueError:
                return None
        return None

    def _read(self, i: int) -> Frame:
        f = self.files[i]
        pr = self._pose_for(f)
        frame, _h = read_pcd(f, stamp=None if pr is None else pr.stamp)
        frame.pose = None if pr is None else pr.pose
        frame.provenance = Provenance(str(self.path), "pcd", i, None, f.name)
        return frame

    @property
    def pose_source(self) -> str:
        if not self.files:
            return "none"
        if self._pose_for(self.files[0]) is None:
            return "none (no .pose files or pose.txt)"
        for d in self._pose_dirs:
            if (d / (self.files[0].stem + ".pose")).is_file():
                return f"Apollo .pose files in {d}"
        return f"Apollo pose.txt ({self._pose_txt_path})"
