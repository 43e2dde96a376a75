"""From raw point records (any field layout) to lidarmt's point arrays, and back.

A recording stores points as fixed-size records described by named fields (``sensor_msgs/PointCloud2``'s
``fields``, a PCD header, a Cyber ``PointXYZIT``). :class:`FieldLayout` describes such a record;
:meth:`FieldLayout.view` turns a byte buffer into a NumPy structured view of it **without copying**, and
:func:`to_points` copies the fields lidarmt uses into a :data:`lidarmt.types.POINT_DTYPE`-like array, drops the
points with a non-finite coordinate or intensity (as Apollo does on input) and counts them.

Field names understood (first match wins):

* coordinates: ``x``, ``y``, ``z`` (float32 or float64; required);
* intensity: ``intensity``, ``i``, ``reflectivity``, ``reflectance`` (any numeric type, cast to float32 without
  rescaling; absent means 0);
* ring: ``ring`` (any integer type, to uint16);
* per-point time: ``timestamp`` / ``time`` / ``t`` / ``time_stamp``. Values larger than 1e8 are absolute times (seconds, or
  nanoseconds for integers above 1e15, as Apollo's Cyber ``PointXYZIT.timestamp``); smaller values are offsets
  from the cloud's stamp (seconds for floats, as the ROS velodyne driver's ``time``; nanoseconds for integers, as
  Ouster's ``t``). The result is always absolute seconds since the Unix epoch (float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lidarmt.io.errors import FormatError
from lidarmt.types import point_dtype

# sensor_msgs/PointField datatype codes
INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)
ROS_TYPES: dict[int, str] = {INT8: "i1", UINT8: "u1", INT16: "i2", UINT16: "u2", INT32: "i4", UINT32: "u4",
                             FLOAT32: "f4", FLOAT64: "f8"}
ROS_CODES: dict[str, int] = {v: k for k, v in ROS_TYPES.items()}

INTENSITY_NAMES = ("intensity", "i", "reflectivity", "reflectance")
TIME_NAMES = ("timestamp", "time", "t", "time_stamp")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a point record: name, byte offset, NumPy scalar type code (``"f4"``, ``"u1"``...), count."""

    name: str
    offset: int
    dtype: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class FieldLayout:
    """The layout of one point record: its fields, its size in bytes and its byte order."""

    fields: tuple[Field, ...]
    point_step: int
    big_endian: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def find(self, names: tuple[str, ...]) -> Field | None:
        by_name = {f.name: f for f in self.fields}
        for n in names:
            if n in by_name:
                return by_name[n]
        return None

    def numpy_dtype(self) -> np.dtype:
        """A structured dtype with the fields at their offsets and ``itemsize = point_step``."""
        order = ">" if self.big_endian else "<"
        names, formats, offsets = [], [], []
        for f in self.fields:
            if not f.name or f.name in names:
                continue  # unnamed padding fields, or a duplicate name: keep the first
            names.append(f.name)
            fmt = order + f.dtype if f.dtype not in ("u1", "i1") else f.dtype
            formats.append(fmt if f.count == 1 else (fmt, (f.count,)))
            offsets.append(f.offset)
        try:
            return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": self.point_step})
        except (ValueError, TypeError) as err:
            raise FormatError(f"point fields {self.describe()} do not fit a {self.point_step}-byte point") from err

    def view(self, data: bytes | bytearray | memoryview | np.ndarray, n: int | None = None) -> np.ndarray:
        """A zero-copy structured view of ``n`` records in ``data`` (all whole records when ``n`` is None)."""
        buf = np.frombuffer(data, dtype=np.uint8)
        step = self.point_step
        if step <= 0:
            raise FormatError(f"point_step is {step}; it must be positive")
        have = len(buf) // step
        if n is None:
            n = have
        elif n > have:
            raise FormatError(f"the point data holds {have} points of {step} bytes, but {n} are announced (truncated?)")
        return np.frombuffer(buf, dtype=self.numpy_dtype(), count=n)

    def describe(self) -> str:
        return ", ".join(f"{f.name}:{f.dtype}@{f.offset}" + (f"x{f.count}" if f.count != 1 else "")
                         for f in self.fields)

    def check_xyz(self, where: str) -> None:
        for axis in "xyz":
            f = self.find((axis,))
            if f is None:
                raise FormatError(f"{where}: the points have no '{axis}' field (fields: {self.describe()})")
            if f.dtype not in ("f4", "f8"):
                raise FormatError(f"{where}: field '{axis}' is {f.dtype}; coordinates must be float32 or float64")


# Apollo's ROS velodyne driver PointXYZIT (PCL, 16-byte aligned): x y z float32 at 0/4/8, intensity uint8 at 16,
# timestamp float64 (seconds) at 24, 32 bytes a point. lidarmt adds ``ring`` (uint16) in the padding at 18 when a
# frame has rings: Apollo finds fields by name, so the Apollo offsets stay valid.
APOLLO_LAYOUT = FieldLayout(
    (Field("x", 0, "f4"), Field("y", 4, "f4"), Field("z", 8, "f4"), Field("intensity", 16, "u1"),
     Field("timestamp", 24, "f8")),
    32,
)
APOLLO_LAYOUT_RING = FieldLayout((*APOLLO_LAYOUT.fields[:4], Field("ring", 18, "u2"), APOLLO_LAYOUT.fields[4]), 32)


def _time_rule(col: np.ndarray, stamp: float, kind: str) -> tuple[float, float]:
    """(scale, offset) turning a per-point time column into absolute seconds: t * scale + offset."""
    if len(col) == 0:
        return 1.0, 0.0
    sample = np.abs(col[:: max(1, len(col) // 64)].astype(np.float64))
    sample = sample[np.isfinite(sample)]  # NaN/inf times say nothing about the unit (and nanmax warns on all-NaN)
    probe = float(sample.max()) if len(sample) else 0.0
    if kind in "iu":
        if probe > 1e15:  # absolute nanoseconds
            return 1e-9, 0.0
        if probe > 1e8:  # absolute seconds as an integer (unusual)
            return 1.0, 0.0
        return 1e-9, stamp  # nanoseconds after the stamp
    if probe > 1e8:
        return 1.0, 0.0  # absolute seconds
    return 1.0, stamp  # seconds after the stamp


def _column(view: np.ndarray, name: str) -> np.ndarray:
    col = view[name]
    return col if col.ndim == 1 else col[:, 0]


def _prepare(view: np.ndarray, layout: FieldLayout, keep_time: bool, keep_ring: bool):
    f_int = layout.find(INTENSITY_NAMES)
    f_ring = layout.find(("ring",)) if keep_ring else None
    f_time = layout.find(TIME_NAMES) if keep_time else None
    out = np.empty(len(view), dtype=point_dtype(ring=f_ring is not None, time=f_time is not None))
    return f_int, f_ring, f_time, out


def to_points_reference(
    view: np.ndarray, layout: FieldLayout, *, stamp: float = 0.0, keep_time: bool = True, keep_ring: bool = True,
) -> tuple[np.ndarray, int]:
    """:func:`to_points` in plain NumPy, field by field (the reference the numba path is tested against).

    Values beyond float32's range (float64 coordinates of a corrupt file) become ±inf and are dropped like NaN;
    NumPy's overflow warnings for them are silenced (a reader reports such points by counting them).
    """
    f_int, f_ring, f_time, out = _prepare(view, layout, keep_time, keep_ring)
    with np.errstate(over="ignore", invalid="ignore"):
        for axis in "xyz":
            out[axis] = _column(view, axis)
        out["intensity"] = 0.0 if f_int is None else _column(view, f_int.name)
        if f_ring is not None:
            out["ring"] = _column(view, "ring")
        if f_time is not None:
            col = _column(view, f_time.name)
            scale, offset = _time_rule(col, stamp, np.dtype(f_time.dtype).kind)
            out["time"] = col.astype(np.float64) * scale + offset
    return drop_non_finite(out)


def to_points(
    view: np.ndarray,
    layout: FieldLayout,
    *,
    stamp: float = 0.0,
    keep_time: bool = True,
    keep_ring: bool = True,
) -> tuple[np.ndarray, int]:
    """Copy a structured view into a lidarmt point array; returns ``(points, dropped)``.

    ``dropped`` counts points whose x, y, z or intensity is NaN or infinite; they are left out. Per-point times
    become absolute seconds (see the module docstring). Native-endian records go through one-pass numba kernels
    (:mod:`lidarmt.io._convert`); others through :func:`to_points_reference`.
    """
    f_int, f_ring, f_time, out = _prepare(view, layout, keep_time, keep_ring)
    cols = [_column(view, n) for n in ("x", "y", "z")]
    if f_int is not None:
        cols.append(_column(view, f_int.name))
    if f_time is not None:
        cols.append(_column(view, f_time.name))
    if len(view) < 1024 or not all(c.dtype.isnative and c.dtype.kind in "fiu" for c in cols):
        return to_points_reference(view, layout, stamp=stamp, keep_time=keep_time, keep_ring=keep_ring)
    import lidarmt.io._convert as _convert

    x, y, z = cols[:3]
    if f_int is None:
        bad = _convert.copy_xyz_zero_i(x, y, z, out["x"], out["y"], out["z"], out["intensity"])
    else:
        bad = _convert.copy_xyzi(x, y, z, cols[3], out["x"], out["y"], out["z"], out["intensity"])
    if f_ring is not None:
        out["ring"] = _column(view, "ring")
    if f_time is not None:
        col = cols[-1]
        scale, offset = _time_rule(col, stamp, np.dtype(f_time.dtype).kind)
        _convert.copy_time(col, out["time"], scale, offset)
    if bad == 0:
        return out, 0
    return drop_non_finite(out)


def drop_non_finite(points: np.ndarray) -> tuple[np.ndarray, int]:
    """Remove points with a non-finite x, y, z or intensity; returns ``(kept, dropped count)``."""
    if len(points) == 0:
        return points, 0
    # sum of the four values is finite iff all four are (the sum of finite float32s can overflow to inf only
    # beyond 3e38, far outside any LiDAR range); one pass instead of four. inf + -inf is NaN, and NumPy warns
    # about it (and about an overflowing sum): silenced, the points are dropped and counted either way
    with np.errstate(over="ignore", invalid="ignore"):
        s = points["x"] + points["y"] + points["z"] + points["intensity"]
    finite = np.isfinite(s)
    if finite.all():
        return points, 0
    m = np.isfinite(points["x"]) & np.isfinite(points["y"]) & np.isfinite(points["z"])
    m &= np.isfinite(points["intensity"])
    return points[m], int(len(points) - int(m.sum()))


def from_points(points: np.ndarray, layout: FieldLayout, *, stamp: float = 0.0) -> np.ndarray:
    """Records in ``layout`` (a structured array, padding zeroed) from a lidarmt point array.

    Integer intensity fields receive the intensity rounded and clipped to the type's range; the ``timestamp``
    field (float64, absolute seconds) receives the per-point time, or the stamp when the points have none.
    """
    dt = layout.numpy_dtype()
    out = np.zeros(len(points), dtype=dt)
    names = points.dtype.names or ()
    for f in layout.fields:
        if f.name in ("x", "y", "z"):
            out[f.name] = points[f.name]
        elif f.name in INTENSITY_NAMES:
            v = points["intensity"]
            kind = np.dtype(f.dtype).kind
            if kind in "iu":
                info = np.iinfo(np.dtype(f.dtype))
                v = np.clip(np.rint(v), info.min, info.max)
            out[f.name] = v
        elif f.name == "ring":
            out["ring"] = points["ring"] if "ring" in names else 0
        elif f.name in TIME_NAMES:
            t = points["time"] if "time" in names else np.full(len(points), stamp)
            kind = np.dtype(f.dtype).kind
            out[f.name] = np.rint(t * 1e9).astype(np.int64) if kind in "iu" else t
    return out
