"""``sensor_msgs/PointCloud2`` in its two wire forms, parsed and built without the generic (de)serialiser.

A LiDAR cloud is a few megabytes of point records behind a small header. Going through rosbags' typestore would
allocate message objects for every cloud; these functions read the header fields with :mod:`struct` and hand back
the point bytes as a ``memoryview`` into the message buffer (zero copy), which :class:`lidarmt.io.cloud.FieldLayout`
views as a structured array. Serialisation is the mirror image. Tests cross-check both against rosbags' typestore.

ROS1 serialisation: little-endian, no alignment, strings and arrays prefixed by a uint32 length.
ROS2 (CDR): a 4-byte encapsulation header (``00 01`` = little endian), then each primitive aligned to its size
relative to the end of that header; strings carry a trailing NUL counted in their length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lidarmt.io.cloud import ROS_CODES, ROS_TYPES, Field, FieldLayout
from lidarmt.io.errors import FormatError

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
POINTCLOUD2_TYPES = frozenset({POINTCLOUD2, "sensor_msgs/PointCloud2"})

_U32 = struct.Struct("<I")
_U32_BE = struct.Struct(">I")


@dataclass(slots=True)
class Cloud:
    """A parsed PointCloud2: header, geometry, point layout and the point bytes (a view into the message)."""

    stamp_ns: int
    frame_id: str
    height: int
    width: int
    layout: FieldLayout
    data: memoryview
    is_dense: bool = False

    @property
    def stamp(self) -> float:
        return self.stamp_ns * 1e-9

    @property
    def num_points(self) -> int:
        return self.height * self.width


def _field(name: str, offset: int, datatype: int, count: int) -> Field:
    try:
        dt = ROS_TYPES[datatype]
    except KeyError as err:
        raise FormatError(f"PointField '{name}' has unknown datatype {datatype} (expected 1..8)") from err
    return Field(name, offset, dt, max(1, count))


# ----------------------------------------------------------------------------------------------- ROS1


def parse_ros1(raw: bytes | bytearray | memoryview) -> Cloud:
    """Parse a ROS1-serialised sensor_msgs/PointCloud2."""
    mv = memoryview(raw)
    try:
        _seq, sec, nsec, n = struct.unpack_from("<IIII", mv, 0)
        pos = 16
        frame_id = bytes(mv[pos : pos + n]).decode("utf-8", "replace")
        pos += n
        height, width, nfields = struct.unpack_from("<III", mv, pos)
        pos += 12
        if nfields > 1000:
            raise FormatError(f"PointCloud2 announces {nfields} fields")
        fields = []
        for _ in range(nfields):
            (ln,) = _U32.unpack_from(mv, pos)
            pos += 4
            name = bytes(mv[pos : pos + ln]).decode("utf-8", "replace")
            pos += ln
            offset, datatype, count = struct.unpack_from("<IBI", mv, pos)
            pos += 9
            fields.append(_field(name, offset, datatype, count))
        big, point_step, _row_step, ndata = struct.unpack_from("<BIII", mv, pos)
        pos += 13
        if pos + ndata > len(mv):
            raise FormatError(f"PointCloud2 data is truncated ({len(mv) - pos} of {ndata} bytes)")
        data = mv[pos : pos + ndata]
        pos += ndata
        dense = bool(mv[pos]) if pos < len(mv) else False
    except struct.error as err:
        raise FormatError(f"PointCloud2 message is truncated or not a PointCloud2 ({err})") from err
    return Cloud(sec * 1_000_000_000 + nsec, frame_id, height, width, FieldLayout(tuple(fields), point_step, bool(big)),
                 data, dense)


def serialize_ros1(
    *, stamp_ns: int, frame_id: str, layout: FieldLayout, data: bytes | memoryview, width: int, height: int = 1,
    seq: int = 0, is_dense: bool = True,
) -> bytes:
    """ROS1 bytes of a PointCloud2 with the given header, layout and point records.

    ROS1 times are unsigned 32-bit seconds: ``stamp_ns`` must lie in [0, 2**32 s); WriterError otherwise.
    """
    if not 0 <= stamp_ns < (1 << 32) * 1_000_000_000:
        from lidarmt.io.errors import WriterError

        raise WriterError(f"stamp {stamp_ns} ns is outside what a ROS1 time holds (0 to 2**32 s)")
    fid = frame_id.encode()
    parts = [struct.pack("<IIII", seq, stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000, len(fid)), fid,
             struct.pack("<III", height, width, len(layout.fields))]
    for f in layout.fields:
        nb = f.name.encode()
        parts += [_U32.pack(len(nb)), nb, struct.pack("<IBI", f.offset, ROS_CODES[f.dtype], f.count)]
    mv = memoryview(data).cast("B")
    parts += [struct.pack("<BIII", int(layout.big_endian), layout.point_step, layout.point_step * width, len(mv)),
              mv, bytes([int(is_dense)])]
    return b"".join(parts)


# ----------------------------------------------------------------------------------------------- ROS2 / CDR


class _Cdr:
    __slots__ = ("big", "mv", "pos", "u32")

    def __init__(self, raw: bytes | bytearray | memoryview) -> None:
        mv = memoryview(raw)
        if len(mv) < 4:
            raise FormatError("CDR message shorter than its 4-byte header")
        self.big = mv[1] == 0
        self.u32 = _U32_BE if self.big else _U32
        self.mv = mv[4:]
        self.pos = 0

    def align(self, n: int) -> None:
        self.pos += -self.pos % n

    def uint32(self) -> int:
        self.align(4)
        (v,) = self.u32.unpack_from(self.mv, self.pos)
        self.pos += 4
        return v

    def int32(self) -> int:
        v = self.uint32()
        return v - (1 << 32) if v >= 1 << 31 else v

    def uint8(self) -> int:
        v = self.mv[self.pos]
        self.pos += 1
        return v

    def string(self) -> str:
        n = self.uint32()
        s = bytes(self.mv[self.pos : self.pos + n])
        self.pos += n
        return s.rstrip(b"\0").decode("utf-8", "replace")


def parse_cdr(raw: bytes | bytearray | memoryview) -> Cloud:
    """Parse a CDR-serialised (ROS2) sensor_msgs/msg/PointCloud2."""
    try:
        r = _Cdr(raw)
        sec = r.int32()
        nsec = r.uint32()
        frame_id = r.string()
        height, width = r.uint32(), r.uint32()
        nfields = r.uint32()
        if nfields > 1000:
            raise FormatError(f"PointCloud2 announces {nfields} fields")
        fields = []
        for _ in range(nfields):
            name = r.string()
            offset = r.uint32()
            datatype = r.uint8()
            count = r.uint32()
            fields.append(_field(name, offset, datatype, count))
        big = r.uint8()
        point_step, _row_step = r.uint32(), r.uint32()
        ndata = r.uint32()
        if r.pos + ndata > len(r.mv):
            raise FormatError(f"PointCloud2 data is truncated ({len(r.mv) - r.pos} of {ndata} bytes)")
        data = r.mv[r.pos : r.pos + ndata]
        r.pos += ndata
        dense = bool(r.mv[r.pos]) if r.pos < len(r.mv) else False
    except (struct.error, IndexError) as err:
        raise FormatError(f"PointCloud2 message is truncated or not a PointCloud2 ({err})") from err
    return Cloud(sec * 1_000_000_000 + nsec, frame_id, height, width, FieldLayout(tuple(fields), point_step, bool(big)),
                 data, dense)


def serialize_cdr(
    *, stamp_ns: int, frame_id: str, layout: FieldLayout, data: bytes | memoryview, width: int, height: int = 1,
    is_dense: bool = True,
) -> bytes:
    """CDR (little-endian) bytes of a PointCloud2.

    ROS2 times are signed 32-bit seconds: ``stamp_ns`` must lie in [-2**31 s, 2**31 s); WriterError otherwise.
    """
    if not -(1 << 31) * 1_000_000_000 <= stamp_ns < (1 << 31) * 1_000_000_000:
        from lidarmt.io.errors import WriterError

        raise WriterError(f"stamp {stamp_ns} ns is outside what a ROS2 time holds (-2**31 to 2**31 s)")
    out = bytearray(b"\x00\x01\x00\x00")

    def align(n: int) -> None:
        out.extend(b"\0" * (-(len(out) - 4) % n))

    def u32(v: int) -> None:
        align(4)
        out.extend(_U32.pack(v))

    def string(s: str) -> None:
        b = s.encode() + b"\0"
        u32(len(b))
        out.extend(b)

    sec, nsec = divmod(stamp_ns, 1_000_000_000)
    u32(sec & 0xFFFFFFFF)
    u32(nsec)
    string(frame_id)
    u32(height)
    u32(width)
    u32(len(layout.fields))
    for f in layout.fields:
        string(f.name)
        u32(f.offset)
        out.append(ROS_CODES[f.dtype])
        u32(f.count)
    out.append(int(layout.big_endian))
    u32(layout.point_step)
    u32(layout.point_step * width)
    mv = memoryview(data).cast("B")
    u32(len(mv))
    head = bytes(out)
    return b"".join([head, mv, bytes([int(is_dense)])])
