"""ROS1 bags (format 2.0) as Apollo 1.5-3.0 recorded them: read and write.

Reading uses rosbags' ROS1 reader for the bag index (connections, chunk positions, per-message offsets) and then
reads the messages itself: a chunk is decompressed once and kept while its messages are read, each PointCloud2 is
parsed with :func:`lidarmt.io.pointcloud2.parse_ros1` and its point bytes are viewed in place, so a frame costs one
decompression and one copy of the coordinates. ``rec[i]`` seeks to message ``i`` through the index.

Writing produces Apollo's layout: the cloud on ``/apollo/sensor/velodyne64/compensator/PointCloud2`` with the 32-byte
point (x, y, z float32 at 0/4/8, intensity uint8 at 16, timestamp float64 seconds at 24), ``/tf`` world→novatel
at each cloud's stamp and one latched ``/tf_static`` novatel→velodyne64, LZ4-compressed chunks.
"""

from __future__ import annotations

import bisect
import bz2
import contextlib
import io
import os
import struct
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lz4.frame
import numpy as np
from rosbags.rosbag1 import Reader, ReaderError, Writer, WriterError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from lidarmt._paths import check_readable, open_file, open_readable
from lidarmt.errors import UserError
from lidarmt.io._output import StagedWriter, finite_extrinsic, write_frames
from lidarmt.io.bag import APOLLO_POINTCLOUD_TOPIC, TF_TYPES, BagRecording, check_frame, stamp_ns
from lidarmt.io.base import TopicInfo
from lidarmt.io.cloud import APOLLO_LAYOUT, APOLLO_LAYOUT_RING, FieldLayout, from_points
from lidarmt.io.errors import FormatError, RecordingError
from lidarmt.io.errors import WriterError as LidarmtWriterError
from lidarmt.io.pointcloud2 import POINTCLOUD2, parse_ros1, serialize_ros1
from lidarmt.types import Frame, matrix_to_quat

ROSBAG_MAGIC = b"#ROSBAG V2.0\n"

TYPESTORE = get_typestore(Stores.ROS1_NOETIC)
"""rosbags' ROS1 (Noetic) typestore plus ``tf2_msgs/msg/TFMessage``; build messages for :meth:`Ros1BagWriter.write_message`
with ``TYPESTORE.types['sensor_msgs/msg/Image'](...)``."""
_TF_MSGDEF = "geometry_msgs/TransformStamped[] transforms"
TYPESTORE.register(get_types_from_msg(_TF_MSGDEF, "tf2_msgs/msg/TFMessage"))
TYPESTORE.register(get_types_from_msg(_TF_MSGDEF, "tf/msg/tfMessage"))
TFMESSAGE = "tf2_msgs/msg/TFMessage"


def register_type(typename: str, msgdef: str) -> None:
    """Add a message type to :data:`TYPESTORE` from its ``.msg`` text (e.g. a custom steering message), so that
    :meth:`Ros1BagWriter.write_message` can write it. ``typename`` like ``"my_msgs/msg/Steering"``."""
    TYPESTORE.register(get_types_from_msg(msgdef, ros_msgtype(typename)))


def is_ros1_bag(path: Path) -> bool:
    try:
        with open_readable(path, max_bytes=None) as fh:  # never blocks on a FIFO
            return fh.read(len(ROSBAG_MAGIC)) == ROSBAG_MAGIC
    except (OSError, UserError):
        return False


def ros_msgtype(name: str) -> str:
    """``pkg/Name`` -> ``pkg/msg/Name`` (rosbags' spelling); other names unchanged."""
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name


# ----------------------------------------------------------------------------------------------- reading

_HDR_LEN = struct.Struct("<I")


def _record_at(buf: memoryview, pos: int) -> tuple[dict[bytes, bytes], memoryview, int]:
    """(header fields, data, next position) of the bag record at ``pos`` of a decompressed chunk."""
    (hlen,) = _HDR_LEN.unpack_from(buf, pos)
    pos += 4
    end = pos + hlen
    fields: dict[bytes, bytes] = {}
    while pos < end:
        (flen,) = _HDR_LEN.unpack_from(buf, pos)
        item = bytes(buf[pos + 4 : pos + 4 + flen])
        k, _, v = item.partition(b"=")
        fields[k] = v
        pos += 4 + flen
    (dlen,) = _HDR_LEN.unpack_from(buf, end)
    start = end + 4
    if start + dlen > len(buf):
        raise FormatError(f"a message record runs past its chunk ({start + dlen} > {len(buf)} bytes)")
    return fields, buf[start : start + dlen], start + dlen


def _fields(buf: memoryview) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    pos = 0
    while pos + 4 <= len(buf):
        (flen,) = _HDR_LEN.unpack_from(buf, pos)
        k, _, v = bytes(buf[pos + 4 : pos + 4 + flen]).partition(b"=")
        out[k] = v
        pos += 4 + flen
    return out


@dataclass(slots=True)
class _Conn:
    id: int
    topic: str
    msgtype: str


@dataclass(slots=True)
class _ChunkRef:
    datasize: int
    datapos: int
    decompressor: Any


def _lz4_decompress(data: bytes) -> bytes:
    """One LZ4 frame; a content size announced in the frame header is checked first: ``lz4.frame.decompress``
    allocates it before decoding, so a corrupt header could claim gigabytes. (Checking here keeps lz4's fast
    path; a streaming decompressor with an output limit measured 5x slower on 4 MB chunks.)"""
    if len(data) >= 14 and data[:4] == _LZ4_MAGIC and data[4] & 0x08:  # FLG bit 3: content size present
        size = int.from_bytes(data[6:14], "little")
        if size > _LZ4_MAX_RATIO * len(data) + 64:
            raise FormatError(f"LZ4 frame of {len(data)} bytes announces {size} bytes of content (corrupt)")
    return lz4.frame.decompress(data)


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_MAX_RATIO = 256  # an LZ4 block cannot expand more than 255-fold
_DECOMPRESSORS = {"none": lambda b: b, "lz4": _lz4_decompress, "bz2": bz2.decompress}


def _bounded(decompressor: Any) -> Any:
    """The bounded LZ4 decoder in place of the one rosbags hands out."""
    return _lz4_decompress if decompressor is lz4.frame.decompress else decompressor


class _BoundedReader(io.BufferedReader):
    """A binary file whose ``read(n)`` never asks for more than the bytes left.

    ``BufferedReader.read(n)`` allocates n bytes before reading: a corrupt length field in a bag (up to 4 GB)
    would make a small file allocate gigabytes. Capping n at the bytes left changes nothing else.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(open_file(path, max_bytes=None, error=RecordingError, buffering=0))  # lidarmt._paths
        self._size = os.fstat(self.fileno()).st_size

    def read(self, n: int | None = -1) -> bytes:
        if n is not None and n > 1 << 16:  # small reads cannot hurt: no tell() for them
            n = min(n, max(self._size - self.tell(), 0))
        return super().read(n)


class _BoundedPath:
    """What rosbags' Reader needs of its ``path``, opening a :class:`_BoundedReader`."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def open(self, mode: str = "rb") -> _BoundedReader:
        return _BoundedReader(self._path)

    def exists(self) -> bool:
        return self._path.exists()

    def __fspath__(self) -> str:
        return str(self._path)

    def __str__(self) -> str:
        return str(self._path)


def _connection(header: dict[bytes, bytes], data: memoryview) -> _Conn:
    d = _fields(data)
    topic = (d.get(b"topic") or header.get(b"topic") or b"").decode("utf-8", "replace")
    return _Conn(struct.unpack("<I", header[b"conn"])[0], topic, ros_msgtype(d.get(b"type", b"?").decode()))


class Ros1Recording(BagRecording):
    """A ROS1 bag: frames from one PointCloud2 topic, poses from /tf and /tf_static."""

    format = "ros1"
    parse = staticmethod(parse_ros1)

    def _open_bag(self) -> None:
        path = self.path
        if not path.exists():
            raise RecordingError(f"{path}: no such file")
        if path.is_dir():
            raise RecordingError(f"{path} is a folder; a ROS1 bag is a single .bag file")
        check_readable(path, max_bytes=None, error=RecordingError)  # a FIFO or a device: one line, no wait
        if not is_ros1_bag(path):
            raise FormatError(f"{path}: not a ROS1 bag (the file does not start with '#ROSBAG V2.0')")
        self._notes: list[str] = []
        self._reader: Reader | None = Reader(path)
        self._reader.path = _BoundedPath(path)  # type: ignore[assignment]
        try:
            self._reader.open()
            self._bio = self._reader.bio
            self._connections: list[Any] = list(self._reader.connections)
            self._indexes: dict[int, list[Any]] = self._reader.indexes
            self._chunkmap: dict[int, Any] = self._reader.chunks
        except (ReaderError, AssertionError, struct.error, KeyError, ValueError, OSError) as err:
            # no index (the recorder was killed) or a damaged/truncated one: list the messages by scanning the
            # chunks, as `rosbag reindex` would, up to the first incomplete record
            with contextlib.suppress(Exception):
                self._reader.close()
            self._reader = None
            if not self.recover:
                raise FormatError(
                    f"{path}: unreadable ROS1 bag ({err}); it may be truncated or still being recorded: open it "
                    f"with recover=True (lidarmt info --recover) to read the complete chunks, or run "
                    f"`rosbag reindex` on a copy") from err
            try:
                self._scan()
            except (FormatError, struct.error, ValueError, IndexError, KeyError, OSError) as err2:
                hint = "; it may be truncated or still being recorded: try `rosbag reindex` on a copy"
                raise FormatError(f"{path}: unreadable ROS1 bag ({err}; scanning: {err2}){hint}") from err
            self._notes.append(f"bag index unusable ({err}); messages listed by scanning the chunks")
        self._chunks: OrderedDict[int, memoryview] = OrderedDict()
        self._prefetched: dict[int, Any] = {}
        self._entries: list[Any] = []

    def _scan(self) -> None:
        """Build connections, per-connection message entries and chunk positions from the records themselves."""
        from rosbags.rosbag1.reader import IndexData

        fh = _BoundedReader(self.path)  # closed in close()
        self._bio = fh
        size = os.fstat(fh.fileno()).st_size
        conns: dict[int, _Conn] = {}
        indexes: dict[int, list[Any]] = {}
        chunks: dict[int, _ChunkRef] = {}
        indexed_chunks: set[int] = set()
        pos = len(ROSBAG_MAGIC)
        last_chunk = -1
        while pos + 8 <= size:
            fh.seek(pos)
            head = fh.read(4)
            (hlen,) = _HDR_LEN.unpack(head)
            if pos + 4 + hlen + 4 > size:
                self._notes.append(f"truncated record at byte {pos}: the rest of the bag is ignored")
                break
            fields = _fields(memoryview(fh.read(hlen)))
            (dlen,) = _HDR_LEN.unpack(fh.read(4))
            dpos = pos + 8 + hlen
            if dpos + dlen > size:
                self._notes.append(f"truncated record at byte {pos}: the rest of the bag is ignored")
                break
            op = fields.get(b"op", b"\0")[0]
            if op == 0x05:  # chunk
                comp = fields.get(b"compression", b"none").decode()
                if comp not in _DECOMPRESSORS:
                    raise FormatError(f"chunk at byte {pos} has unknown compression {comp!r}")
                chunks[pos] = _ChunkRef(dlen, dpos, _DECOMPRESSORS[comp])
                last_chunk = pos
            elif op == 0x04 and last_chunk >= 0:  # index data of the chunk before it
                conn = struct.unpack("<I", fields[b"conn"])[0]
                count = struct.unpack("<I", fields[b"count"])[0]
                fh.seek(dpos)
                data = fh.read(dlen)
                lst = indexes.setdefault(conn, [])
                for k in range(min(count, dlen // 12)):
                    sec, nsec, off = struct.unpack_from("<III", data, 12 * k)
                    lst.append(IndexData(sec * 10**9 + nsec, last_chunk, off))
                indexed_chunks.add(last_chunk)
            elif op == 0x07:  # connection (in the closing index section)
                fh.seek(dpos)
                c = _connection(fields, memoryview(fh.read(dlen)))
                conns.setdefault(c.id, c)
            pos = dpos + dlen
        # chunks without index data (the last one of a killed recording), and connections only defined inside
        # chunks: walk the decompressed records
        need = {cid for cid in indexes if cid not in conns}
        for cpos, ch in chunks.items():
            if cpos in indexed_chunks and not need:
                continue
            fh.seek(ch.datapos)
            try:
                buf = memoryview(ch.decompressor(fh.read(ch.datasize)))
            except Exception:  # noqa: BLE001 (a damaged chunk: skip it, as rosbag reindex does)
                self._notes.append(f"chunk at byte {cpos} does not decompress: skipped")
                continue
            p = 0
            while p + 8 <= len(buf):
                try:
                    f2, data, nxt = _record_at(buf, p)
                except (FormatError, struct.error, IndexError):
                    break
                op = f2.get(b"op", b"\0")[0]
                if op == 0x07:
                    c = _connection(f2, data)
                    conns.setdefault(c.id, c)
                    need.discard(c.id)
                elif op == 0x02 and cpos not in indexed_chunks:
                    conn = struct.unpack("<I", f2[b"conn"])[0]
                    sec, nsec = struct.unpack("<II", f2[b"time"])
                    indexes.setdefault(conn, []).append(IndexData(sec * 10**9 + nsec, cpos, p))
                p = nxt
        if not chunks:
            raise FormatError("no complete chunk in the file")
        self._connections = [conns[c] for c in sorted(conns)]
        self._indexes = {cid: sorted(v) for cid, v in indexes.items()}
        self._chunkmap = chunks

    def _describe_extra(self, info) -> None:
        super()._describe_extra(info)
        info.notes.extend(self._notes)

    def topics(self) -> list[TopicInfo]:
        counts: dict[str, TopicInfo] = {}
        for c in self._connections:
            n = len(self._indexes.get(c.id, ()))
            if c.topic in counts:
                counts[c.topic].count += n
            else:
                counts[c.topic] = TopicInfo(c.topic, c.msgtype, n)
        return sorted(counts.values(), key=lambda t: t.name)

    def _select(self, topic: str | None) -> None:
        if topic is None:
            self._entries = []
            return
        conns = [c for c in self._connections if c.topic == topic]
        entries = [e for c in conns for e in self._indexes.get(c.id, ())]
        self._entries = sorted(entries)

    def _count(self) -> int:
        return len(self._entries)

    def _read_compressed(self, chunk_pos: int) -> tuple[bytes, Any]:
        ch = self._chunkmap[chunk_pos]
        self._bio.seek(ch.datapos)
        raw = self._bio.read(ch.datasize)
        if len(raw) != ch.datasize:
            raise FormatError(f"{self.path}: chunk at byte {chunk_pos} is truncated")
        return raw, _bounded(ch.decompressor)

    def _decompress(self, chunk_pos: int, raw: bytes, decompressor) -> memoryview:
        try:
            return memoryview(decompressor(raw))
        except Exception as err:  # lz4/bz2 errors have no common base class
            raise FormatError(f"{self.path}: chunk at byte {chunk_pos} does not decompress ({err})") from err

    def _load_chunk(self, chunk_pos: int) -> memoryview:
        cached = self._chunks.get(chunk_pos)
        if cached is not None:
            self._chunks.move_to_end(chunk_pos)
            return cached
        fut = self._prefetched.pop(chunk_pos, None)
        if fut is not None:
            chunk = fut.result()
        else:
            chunk = self._decompress(chunk_pos, *self._read_compressed(chunk_pos))
        self._chunks[chunk_pos] = chunk
        if len(self._chunks) > 8:  # the /tf just ahead of a cloud sits in the next few chunks: keep them
            self._chunks.popitem(last=False)
        return chunk

    def _raw(self, i: int) -> memoryview:
        return self._raw_entry(self._entries[i], f"message {i} of {self.topic}")

    def _raw_entry(self, e, what: str) -> memoryview:
        buf = self._load_chunk(e.chunk_pos)
        pos = e.offset
        try:
            while True:
                fields, data, pos = _record_at(buf, pos)
                op = fields.get(b"op", b"\0")[0]
                if op == 0x02:
                    return data
                if op != 0x07:  # only connection records may precede a message in a chunk
                    raise FormatError(f"expected message data, found record op {op:#x}")
        except (struct.error, IndexError) as err:
            raise FormatError(f"{self.path}: {what} is truncated ({err})") from err
        except FormatError as err:
            if str(err).startswith(str(self.path)):
                raise
            raise FormatError(f"{self.path}: {what}: {err}") from err

    PREFETCH = 6 if (os.cpu_count() or 1) >= 4 else 0
    """Chunks decompressed ahead in a worker thread while streaming (LZ4 releases the GIL). Off on machines with
    fewer than 4 cores, where the extra thread measured slower (benchmarks/bench_io.py on 2 busy cores)."""

    def _iter_raw(self) -> Iterator[memoryview]:
        if self.PREFETCH <= 0:
            for i in range(len(self._entries)):
                yield self._raw(i)
            return
        from concurrent.futures import ThreadPoolExecutor

        order = list(dict.fromkeys(e.chunk_pos for e in self._entries))  # distinct chunks in reading order
        where = {pos: k for k, pos in enumerate(order)}
        with ThreadPoolExecutor(1, thread_name_prefix="lidarmt-lz4") as pool:
            try:
                for i, e in enumerate(self._entries):
                    k = where[e.chunk_pos]
                    for pos in order[k + 1 : k + 1 + self.PREFETCH]:
                        if pos not in self._chunks and pos not in self._prefetched:
                            raw, dec = self._read_compressed(pos)
                            self._prefetched[pos] = pool.submit(self._decompress, pos, raw, dec)
                    yield self._raw(i)
            finally:
                for f in self._prefetched.values():
                    f.cancel()
                self._prefetched.clear()

    def _tf_messages(self, static: bool, start_ns: int | None = None, stop_ns: int | None = None
                     ) -> Iterator[object]:
        cache = self.__dict__.setdefault("_tf_entries", {})
        if static not in cache:
            conns = [c for c in self._connections if c.msgtype in TF_TYPES
                     and c.topic.rstrip("/").endswith("tf_static") == static]
            entries = sorted(e for c in conns for e in self._indexes.get(c.id, ()))
            cache[static] = (entries, [e.time for e in entries])
        entries, times = cache[static]
        first = 0 if start_ns is None else bisect.bisect_left(times, start_ns)
        for e in entries[first:]:
            if stop_ns is not None and e.time >= stop_ns:
                break
            raw = self._raw_entry(e, "/tf")
            try:
                yield TYPESTORE.deserialize_ros1(raw, TFMESSAGE)
            except Exception as err:  # rosbags' generated deserialisers raise assorted errors
                raise FormatError(f"{self.path}: unreadable /tf message at {e.time} ns ({err})") from err

    def close(self) -> None:
        r = getattr(self, "_reader", None)
        if r is not None and r.bio is not None:
            r.close()
        elif getattr(self, "_bio", None) is not None:
            self._bio.close()
        self._chunks = OrderedDict()
        super().close()


# ----------------------------------------------------------------------------------------------- writing


def _tf_message(typestore, parent: str, child: str, stamp_ns_: int, m: np.ndarray, *, ros2: bool = False):
    T = typestore.types
    qx, qy, qz, qw = matrix_to_quat(m[:3, :3])
    sec, nsec = divmod(int(stamp_ns_), 1_000_000_000)
    time = T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
    hdr = (T["std_msgs/msg/Header"](stamp=time, frame_id=parent) if ros2
           else T["std_msgs/msg/Header"](seq=0, stamp=time, frame_id=parent))
    tr = T["geometry_msgs/msg/Transform"](
        translation=T["geometry_msgs/msg/Vector3"](x=float(m[0, 3]), y=float(m[1, 3]), z=float(m[2, 3])),
        rotation=T["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
    )
    ts = T["geometry_msgs/msg/TransformStamped"](header=hdr, child_frame_id=child, transform=tr)
    return T[TFMESSAGE](transforms=[ts])


def cloud_records(frame: Frame, layout: FieldLayout | None = None) -> tuple[FieldLayout, np.ndarray]:
    """The point records of a frame in Apollo's 32-byte layout (with ``ring`` in the padding when present)."""
    if layout is None:
        layout = APOLLO_LAYOUT_RING if "ring" in (frame.points.dtype.names or ()) else APOLLO_LAYOUT
    return layout, from_points(frame.points, layout, stamp=frame.stamp)


class _RosBagWriter(StagedWriter):
    """What the ROS1 and ROS2 bag writers share: extrinsic, connections, the frame → /tf_static, /tf and
    PointCloud2 sequence, and :meth:`write_message`. A subclass opens ``self._writer`` (a rosbags writer) on the
    staged path and supplies the serialisation (:meth:`_serialize`, :meth:`_cloud_message`)."""

    typestore = TYPESTORE
    _ros2 = False  # header layout of the /tf messages
    _static_kw: dict[str, Any] = {}  # extra add_connection options of the /tf_static connection
    _add_errors: tuple[type[Exception], ...] = (WriterError, KeyError)  # what the rosbags writer raises

    def _setup(self, path: str | os.PathLike[str], *, topic: str, novatel_from_sensor: np.ndarray | None,
               world_frame: str, novatel_frame: str) -> None:
        self.path = Path(path)
        self.topic = topic
        self.world_frame = world_frame
        self.novatel_frame = novatel_frame
        self.novatel_from_sensor = finite_extrinsic(novatel_from_sensor, np.eye(4))
        self._sensor_from_novatel = np.linalg.inv(self.novatel_from_sensor)
        self._conns: dict[str, Any] = {}
        self._static_children: set[str] = set()
        self._seq = 0
        self.frames_written = 0

    def _serialize(self, msg: object, msgtype: str) -> bytes:
        raise NotImplementedError

    def _cloud_message(self, t_ns: int, frame_id: str, layout: FieldLayout, rec: np.ndarray) -> bytes:
        raise NotImplementedError

    def _conn(self, topic: str, msgtype: str, **kw: Any):
        c = self._conns.get(topic)
        if c is None:
            try:
                c = self._writer.add_connection(topic, msgtype, typestore=self.typestore, **kw)
            except self._add_errors as err:
                raise LidarmtWriterError(f"{self.path}: cannot add topic {topic} of type {msgtype} ({err})") from err
            self._conns[topic] = c
        elif c.msgtype != msgtype:
            raise LidarmtWriterError(f"{self.path}: topic {topic} already has type {c.msgtype}, not {msgtype}")
        return c

    def write(self, frame: Frame) -> None:
        """Write one frame: its PointCloud2 and, when it has a pose, a /tf world→novatel at its stamp."""
        check_frame(frame)
        t_ns = stamp_ns(frame.stamp)
        frame_id = frame.frame_id or "velodyne64"
        if frame_id not in self._static_children:
            msg = _tf_message(self.typestore, self.novatel_frame, frame_id, t_ns, self.novatel_from_sensor,
                              ros2=self._ros2)
            self._write(self._conn("/tf_static", TFMESSAGE, **self._static_kw), t_ns,
                        self._serialize(msg, TFMESSAGE))
            self._static_children.add(frame_id)
        if frame.pose is not None:
            world_from_novatel = frame.pose @ self._sensor_from_novatel
            msg = _tf_message(self.typestore, self.world_frame, self.novatel_frame, t_ns, world_from_novatel,
                              ros2=self._ros2)
            self._write(self._conn("/tf", TFMESSAGE), t_ns, self._serialize(msg, TFMESSAGE))
        layout, rec = cloud_records(frame)
        self._write(self._conn(self.topic, POINTCLOUD2), t_ns, self._cloud_message(t_ns, frame_id, layout, rec))
        self._seq += 1
        self.frames_written += 1

    def write_message(self, topic: str, msgtype: str, msg: object, stamp_ns: int) -> None:
        """Write any message built with :data:`TYPESTORE` (e.g. ``sensor_msgs/msg/Image``) at ``stamp_ns``."""
        msgtype = ros_msgtype(msgtype)
        conn = self._conn(topic, msgtype)
        try:
            raw = self._serialize(msg, msgtype)
        except Exception as err:  # rosbags raises assorted errors for a message of the wrong shape
            raise LidarmtWriterError(f"{self.path}: cannot serialise a {msgtype} for {topic} ({err})") from err
        self._write(conn, int(stamp_ns), raw)

    def _write(self, conn, t_ns: int, raw: bytes) -> None:
        if self._closed:
            raise LidarmtWriterError(f"{self.path}: writer is closed")
        self._writer.write(conn, int(t_ns), raw)


class Ros1BagWriter(_RosBagWriter):
    """Write frames to a ROS1 bag in Apollo's layout (see the module docstring). Use as a context manager.

    ``novatel_from_sensor`` is the static extrinsic T(novatel <- sensor) written to /tf_static (identity by
    default); each frame's pose T(world <- sensor) becomes a /tf world→novatel = pose · inv(extrinsic) at the
    frame's stamp, so a reader recovers the pose exactly. Frames without a pose get no /tf. The bag appears at
    ``path`` only when the writer is closed without error; an existing file is replaced only with
    ``overwrite=True``.
    """

    _static_kw = {"latching": 1}

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        topic: str = APOLLO_POINTCLOUD_TOPIC,
        novatel_from_sensor: np.ndarray | None = None,
        world_frame: str = "world",
        novatel_frame: str = "novatel",
        overwrite: bool = False,
        chunk_threshold: int = 1 << 20,
    ) -> None:
        self._setup(path, topic=topic, novatel_from_sensor=novatel_from_sensor, world_frame=world_frame,
                    novatel_frame=novatel_frame)
        self._open_stage(overwrite=overwrite)
        self._writer = Writer(self._tmp)
        self._writer.set_compression(Writer.CompressionFormat.LZ4)
        self._writer.chunk_threshold = chunk_threshold
        self._writer.open()

    def _serialize(self, msg: object, msgtype: str) -> bytes:
        return self.typestore.serialize_ros1(msg, msgtype)

    def _cloud_message(self, t_ns: int, frame_id: str, layout: FieldLayout, rec: np.ndarray) -> bytes:
        return serialize_ros1(stamp_ns=t_ns, frame_id=frame_id, layout=layout, data=rec, width=len(rec),
                              seq=self._seq)

    def _finish(self) -> None:
        self._writer.close()

    def _discard(self) -> None:
        self._writer.close()


def write_ros1_bag(path: str | os.PathLike[str], frames, **kw) -> int:
    """Write an iterable of frames to a ROS1 bag (see :class:`Ros1BagWriter`); returns the number written."""
    return write_frames(Ros1BagWriter(path, **kw), frames)
