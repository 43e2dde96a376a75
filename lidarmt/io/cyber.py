"""Apollo Cyber RT ``.record`` files: the container parsed by lidarmt itself, and a writer.

Container (apollo-proto-facts.md §4): sections of a 16-byte header (int32 type, 4 padding bytes, int64 size) and a
serialized protobuf. The file starts with the Header section, padded to 2048 bytes; CHANNEL sections (name, type,
descriptor) and CHUNK_HEADER + CHUNK_BODY pairs follow; a complete file ends with an INDEX section at
``Header.index_position`` whose entries point at every section and cache its summary (per-channel message counts).
An incomplete record (recorder killed: ``is_complete`` false, no index) is read by scanning the sections from
offset 2064 up to the first truncated one.

Messages are decoded with lidarmt's own definitions (:mod:`lidarmt.proto`): ``apollo.drivers.PointCloud``
(points through a numba wire decoder), ``apollo.transform.TransformStampeds`` on ``/tf`` and ``/tf_static``, and
``apollo.localization.LocalizationEstimate`` on ``/apollo/localization/pose``.

Pose world <- sensor of a cloud at its stamp (``measurement_time``, else ``header.lidar_timestamp`` ns, else
``header.timestamp_sec``):

1. from the /tf tree when it links the cloud's frame to a root through a dynamic edge (world → localization or
   novatel, then the static extrinsics to velodyne64), interpolated like tf2;
2. otherwise from ``/apollo/localization/pose``: T(world <- vehicle) from ``position`` and ``orientation``,
   interpolated at the stamp, times T(vehicle <- sensor). The quaternion's body frame is Apollo's vehicle frame
   **RFU** (x right, y forward, z up), the same axes as the ``novatel`` frame, so T(vehicle <- sensor) is the
   novatel→<sensor> extrinsic from /tf_static when present. Without one, lidarmt assumes the sensor sits at the
   localization origin with Velodyne axes (x forward, y left): a +90° rotation about z from RFU, no lever arm; a
   :class:`lidarmt.io.base.PoseWarning` says so. (A plain identity would point the sensor's x axis to the right of
   the car.) Pass ``vehicle_from_sensor=`` to use a known extrinsic instead.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from lidarmt._paths import open_file, open_readable
from lidarmt.errors import UserError
from lidarmt.io._output import StagedWriter, finite_extrinsic, write_frames
from lidarmt.io.bag import APOLLO_POINTCLOUD_TOPIC, choose_cloud_topic, stamp_ns
from lidarmt.io.base import Recording, RecordingInfo, TopicInfo, warn_pose
from lidarmt.io.cloud import Field, FieldLayout, to_points
from lidarmt.io.errors import FormatError, NoPointCloudError, RecordingError, WriterError
from lidarmt.io.tf import LoadedWindows, TfBuffer, slerp
from lidarmt.types import Frame, Provenance, make_pose, matrix_to_quat

_SECTION = struct.Struct("<i4xq")
SECTION_HEADER, SECTION_CHUNK_HEADER, SECTION_CHUNK_BODY, SECTION_INDEX, SECTION_CHANNEL = range(5)
HEADER_LENGTH = 2048
FIRST_SECTION = _SECTION.size + HEADER_LENGTH  # 2064

POINTCLOUD_TYPE = "apollo.drivers.PointCloud"
TF_TYPE = "apollo.transform.TransformStampeds"
LOCALIZATION_TYPE = "apollo.localization.LocalizationEstimate"
LOCALIZATION_CHANNEL = "/apollo/localization/pose"

# Velodyne axes (x forward, y left) in Apollo's RFU vehicle frame: +90 degrees about z
RFU_FROM_FLU = make_pose([0.0, 0.0, 0.0], [0.0, 0.0, np.sqrt(0.5), np.sqrt(0.5)])

_PB_LAYOUT = FieldLayout((Field("x", 0, "f4"), Field("y", 4, "f4"), Field("z", 8, "f4"), Field("intensity", 12, "u4"),
                          Field("timestamp", 16, "u8")), 28)
_PB_LAYOUT_RING = FieldLayout((*_PB_LAYOUT.fields, Field("ring", 24, "u4")), 28)


def _s(v: str | bytes) -> str:
    """A protobuf string field; protobuf hands back bytes when the field is not valid UTF-8 (corrupt data)."""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def is_cyber_record(path: Path) -> bool:
    """True when the file starts with a Cyber Header section (type 0, a plausible size)."""
    try:
        with open_readable(path, max_bytes=None) as fh:
            head = fh.read(16)
    except (OSError, UserError):
        return False
    if len(head) < 16:
        return False
    typ, size = _SECTION.unpack(head)
    return typ == SECTION_HEADER and 0 < size <= HEADER_LENGTH


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint too long")


def _walk_chunk_body(buf: memoryview) -> Iterator[tuple[str, int, int, int]]:
    """(channel, time ns, content offset, content length) for each SingleMessage of a ChunkBody (no copies)."""
    pos, n = 0, len(buf)
    while pos < n:
        tag, pos = _read_varint(buf, pos)
        if tag != (1 << 3 | 2):  # ChunkBody.messages
            raise FormatError(f"unexpected field {tag >> 3} (wire type {tag & 7}) in a chunk body")
        ln, pos = _read_varint(buf, pos)
        end = pos + ln
        if end > n:
            raise FormatError("a message runs past the end of its chunk body (truncated)")
        name, t, c_off, c_len = "", 0, 0, 0
        while pos < end:
            tag, pos = _read_varint(buf, pos)
            fn, wt = tag >> 3, tag & 7
            if wt == 2:
                ln2, pos = _read_varint(buf, pos)
                if fn == 1:
                    name = bytes(buf[pos : pos + ln2]).decode("utf-8", "replace")
                elif fn == 3:
                    c_off, c_len = pos, ln2
                pos += ln2
            elif wt == 0:
                v, pos = _read_varint(buf, pos)
                if fn == 2:
                    t = v
            elif wt == 1:
                pos += 8
            elif wt == 5:
                pos += 4
            else:
                raise FormatError(f"bad wire type {wt} in a record message")
        if pos != end:
            raise FormatError("corrupt message in a chunk body")
        yield name, t, c_off, c_len


@dataclass(slots=True)
class _ChannelInfo:
    name: str
    message_type: str
    count: int = 0
    proto_desc: bytes = b""


@dataclass(slots=True)
class _Chunk:
    header_pos: int
    body_pos: int  # offset of the CHUNK_BODY section header
    body_size: int
    begin: int = 0
    end: int = 0
    count: int = 0


@dataclass(slots=True)
class _Container:
    header: Any
    channels: dict[str, _ChannelInfo] = field(default_factory=dict)
    chunks: list[_Chunk] = field(default_factory=list)
    indexed: bool = False
    notes: list[str] = field(default_factory=list)


class CyberRecording(Recording):
    """An Apollo Cyber ``.record`` file (see the module docstring for poses)."""

    format = "cyber"

    def __init__(self, path, *, topic: str | None = None, require_pose: bool = False, allow_empty: bool = False,
                 vehicle_from_sensor: np.ndarray | None = None, max_extrapolation: float = 0.1) -> None:
        super().__init__(path, topic=topic, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file")
        if p.is_dir():
            raise RecordingError(f"{p} is a folder; a Cyber record is a single .record file")
        self.vehicle_from_sensor = vehicle_from_sensor
        self.max_extrapolation = max_extrapolation
        self._fh = open_file(p, max_bytes=None, error=RecordingError)  # closed in close(); never a FIFO
        self._chunk_msgs: dict[int, list[tuple[str, int, int, int]]] = {}
        try:
            self._size = os.fstat(self._fh.fileno()).st_size
            self._c = self._parse_container()
            try:
                self.topic = choose_cloud_topic(p, self.topics(), topic, cloud_types={POINTCLOUD_TYPE},
                                                kind="apollo.drivers.PointCloud")
            except NoPointCloudError:
                if not allow_empty:
                    raise
                self.topic = None
        except BaseException:
            self._fh.close()
            raise
        self._cloud_index: list[tuple[int, int]] | None = None  # (absolute content offset, length)
        self._tf: TfBuffer | None = None
        self._loc: tuple[list[float], list[np.ndarray], list[np.ndarray]] | None = None
        self._warned = False
        self._pose_all = False

    # ------------------------------------------------------------------ container

    def _section(self, pos: int) -> tuple[int, int]:
        self._fh.seek(pos)
        head = self._fh.read(16)
        if len(head) < 16:
            raise FormatError(f"{self.path}: section header at byte {pos} is truncated")
        typ, size = _SECTION.unpack(head)
        if size < 0 or pos + 16 + size > self._size:
            raise FormatError(f"{self.path}: section at byte {pos} (type {typ}) claims {size} bytes, past the end "
                              f"of the file (truncated)")
        return typ, size

    def _proto(self, cls, pos: int, size: int):
        self._fh.seek(pos + 16)
        data = self._fh.read(size)
        try:
            return cls.FromString(data)
        except DecodeError as err:
            raise FormatError(f"{self.path}: corrupt {cls.DESCRIPTOR.name} at byte {pos} ({err})") from err

    def _parse_container(self) -> _Container:
        from lidarmt.proto import record as R

        if self._size < 16:
            raise FormatError(f"{self.path}: {self._size} bytes; too short for a Cyber record")
        self._fh.seek(0)
        typ, size = _SECTION.unpack(self._fh.read(16))
        if typ != SECTION_HEADER or not 0 < size <= HEADER_LENGTH or size + 16 > self._size:
            raise FormatError(f"{self.path}: not an Apollo Cyber record (first section type {typ}, expected a "
                              f"header)")
        c = _Container(self._proto(R.Header, 0, size))
        h = c.header
        self._compress = h.compress
        if h.is_complete and 0 < h.index_position < self._size:
            try:
                typ, size = self._section(h.index_position)
                if typ != SECTION_INDEX:
                    raise FormatError(f"index_position {h.index_position} holds a section of type {typ}")
                index = self._proto(R.Index, h.index_position, size)
                self._from_index(c, index)
                c.indexed = True
                return c
            except FormatError as err:
                c.notes.append(f"index unusable ({err}); scanned the sections instead")
                c.channels.clear()
                c.chunks.clear()
        elif not h.is_complete:
            c.notes.append("record is incomplete (no index): scanned the sections")
        self._scan(c)
        return c

    def _from_index(self, c: _Container, index) -> None:
        pending_header: _Chunk | None = None
        for e in index.indexes:
            if e.type == SECTION_CHANNEL:
                cc = e.channel_cache
                c.channels[_s(cc.name)] = _ChannelInfo(_s(cc.name), _s(cc.message_type), cc.message_number,
                                                       cc.proto_desc)
            elif e.type == SECTION_CHUNK_HEADER:
                hc = e.chunk_header_cache
                pending_header = _Chunk(e.position, 0, 0, hc.begin_time, hc.end_time, hc.message_number)
            elif e.type == SECTION_CHUNK_BODY:
                typ, size = self._section(e.position)
                if typ != SECTION_CHUNK_BODY:
                    raise FormatError(f"index entry at byte {e.position} is not a chunk body")
                ch = pending_header or _Chunk(-1, 0, 0)
                ch.body_pos, ch.body_size = e.position, size
                c.chunks.append(ch)
                pending_header = None

    def _scan(self, c: _Container) -> None:
        from lidarmt.proto import record as R

        pos = FIRST_SECTION
        pending: _Chunk | None = None
        counted: dict[str, int] = {}
        while pos + 16 <= self._size:
            try:
                typ, size = self._section(pos)
            except FormatError:
                c.notes.append(f"truncated section at byte {pos}: the rest of the file is ignored")
                break
            if typ == SECTION_CHANNEL:
                ch = self._proto(R.Channel, pos, size)
                c.channels.setdefault(_s(ch.name), _ChannelInfo(_s(ch.name), _s(ch.message_type), 0, ch.proto_desc))
            elif typ == SECTION_CHUNK_HEADER:
                hd = self._proto(R.ChunkHeader, pos, size)
                pending = _Chunk(pos, 0, 0, hd.begin_time, hd.end_time, hd.message_number)
            elif typ == SECTION_CHUNK_BODY:
                chunk = pending or _Chunk(-1, 0, 0)
                chunk.body_pos, chunk.body_size = pos, size
                c.chunks.append(chunk)
                pending = None
                base = chunk.body_pos + 16
                msgs = [(name, t, base + o, ln) for name, t, o, ln in self._walk(chunk)]
                self._chunk_msgs[len(c.chunks) - 1] = msgs
                for name, _t, _o, _l in msgs:
                    counted[name] = counted.get(name, 0) + 1
            elif typ == SECTION_INDEX:
                break
            elif typ != SECTION_HEADER:
                c.notes.append(f"unknown section type {typ} at byte {pos}: stopped scanning")
                break
            pos += 16 + size
        for name, n in counted.items():
            c.channels.setdefault(name, _ChannelInfo(name, "?")).count = n

    def _body(self, chunk: _Chunk) -> memoryview:
        self._fh.seek(chunk.body_pos + 16)
        data = self._fh.read(chunk.body_size)
        if len(data) != chunk.body_size:
            raise FormatError(f"{self.path}: chunk body at byte {chunk.body_pos} is truncated")
        if self._compress != 0:
            raise FormatError(f"{self.path}: compressed chunks (type {self._compress}) are not supported; "
                              f"Apollo's recorder writes them uncompressed")
        return memoryview(data)

    def _walk(self, chunk: _Chunk, body: memoryview | None = None) -> Iterator[tuple[str, int, int, int]]:
        body = self._body(chunk) if body is None else body
        try:
            yield from _walk_chunk_body(body)
        except (FormatError, IndexError) as err:
            raise FormatError(f"{self.path}: chunk body at byte {chunk.body_pos}: {err}") from err

    def _chunk_index(self, k: int) -> list[tuple[str, int, int, int]]:
        """(channel, time ns, absolute content offset, length) of the messages of chunk ``k``.

        The chunk body is read once to list its messages (a chunk can hold 200 MB); afterwards single messages are
        read by seeking, so small /tf and localization messages never pull a whole chunk again.
        """
        cached = self._chunk_msgs.get(k)
        if cached is None:
            chunk = self._c.chunks[k]
            base = chunk.body_pos + 16
            cached = [(name, t, base + off, ln) for name, t, off, ln in self._walk(chunk)]
            self._chunk_msgs[k] = cached
        return cached

    def _content(self, off: int, ln: int) -> bytes:
        self._fh.seek(off)
        data = self._fh.read(ln)
        if len(data) != ln:
            raise FormatError(f"{self.path}: message at byte {off} is truncated")
        return data

    def messages(self, channels: set[str] | None = None, start_ns: int | None = None, stop_ns: int | None = None,
                 limit: int | None = None) -> Iterator[tuple[str, int, bytes]]:
        """(channel, time ns, content) of the messages in file order, optionally only of some channels, recorded
        in [start_ns, stop_ns), at most ``limit``. Chunks whose time range misses the window are not read."""
        n = 0
        for k, chunk in enumerate(self._c.chunks):
            if start_ns is not None and chunk.end and chunk.end < start_ns:
                continue
            if stop_ns is not None and chunk.begin and chunk.begin >= stop_ns:
                continue
            for name, t, off, ln in self._chunk_index(k):
                if channels is not None and name not in channels:
                    continue
                if (start_ns is not None and t < start_ns) or (stop_ns is not None and t >= stop_ns):
                    continue
                yield name, t, self._content(off, ln)
                n += 1
                if limit is not None and n >= limit:
                    return

    # ------------------------------------------------------------------ recording

    def topics(self) -> list[TopicInfo]:
        return [TopicInfo(c.name, c.message_type, c.count) for c in self._c.channels.values()]

    def _count(self) -> int:
        if self.topic is None:
            return 0
        if self._c.indexed and self._cloud_index is None:
            return self._c.channels[self.topic].count
        return len(self._index())

    def _index(self) -> list[tuple[int, int]]:
        if self._cloud_index is None:
            self._cloud_index = [(off, ln) for k in range(len(self._c.chunks))
                                 for name, _t, off, ln in self._chunk_index(k) if name == self.topic]
        return self._cloud_index

    def _read(self, i: int) -> Frame:
        index = self._index()
        if i >= len(index):
            raise FormatError(f"{self.path}: the record's index announces {self._c.channels[self.topic].count} "
                              f"messages on {self.topic}, but its chunks hold {len(index)} (corrupt index)")
        off, ln = index[i]
        self._fh.seek(off)
        data = self._fh.read(ln)
        if len(data) != ln:
            raise FormatError(f"{self.path}: message {i} of {self.topic} is truncated")
        return self._frame(data, i)

    def _iter(self) -> Iterator[Frame]:
        if self.topic is None:
            return
        for i, (_name, _t, content) in enumerate(self.messages({self.topic})):
            yield self._frame(content, i)

    def _frame(self, content: bytes | memoryview, i: int) -> Frame:
        import lidarmt.io._pbpoints as _pbpoints
        from lidarmt.proto.drivers import PointCloud

        where = f"{self.path}: {self.topic} message {i}"
        try:
            recs, ring, rest = _pbpoints.decode(content)
            msg = PointCloud.FromString(rest)
        except (FormatError, DecodeError) as err:
            raise FormatError(f"{where}: {err}") from err
        if msg.HasField("measurement_time"):
            stamp = msg.measurement_time
        elif msg.header.lidar_timestamp:
            stamp = msg.header.lidar_timestamp * 1e-9
        else:
            stamp = msg.header.timestamp_sec
        frame_id = (_s(msg.frame_id) or _s(msg.header.frame_id) or "velodyne64").lstrip("/")
        layout = _PB_LAYOUT_RING if ring else _PB_LAYOUT
        view = recs if ring else recs[["x", "y", "z", "intensity", "timestamp"]]
        points, dropped = to_points(view, layout, stamp=stamp)
        return Frame(points, self._pose(frame_id, stamp), stamp, frame_id,
                     Provenance(str(self.path), "cyber", i, self.topic), dropped=dropped)

    # ------------------------------------------------------------------ poses

    POSE_WINDOW = 0.5
    """/tf and localization messages recorded within this many seconds of a cloud's stamp are loaded for its pose."""

    def _channels_of(self, message_type: str, *, static: bool | None = None) -> set[str]:
        out = {c.name for c in self._c.channels.values() if c.message_type == message_type}
        if static is not None:
            out = {n for n in out if n.rstrip("/").endswith("tf_static") == static}
        return out

    def _add_tf(self, msgs) -> None:
        from lidarmt.proto.transform import TransformStampeds

        assert self._tf is not None
        for name, _t, content in msgs:
            try:
                msg = TransformStampeds.FromString(content)
            except DecodeError as err:
                raise FormatError(f"{self.path}: corrupt {name} message ({err})") from err
            static = name.rstrip("/").endswith("tf_static")
            for ts in msg.transforms:
                tr, q = ts.transform.translation, ts.transform.rotation
                try:
                    self._tf.add(ts.header.frame_id, ts.child_frame_id, ts.header.timestamp_sec,
                                 (tr.x, tr.y, tr.z), (q.qx, q.qy, q.qz, q.qw), static=static)
                except ValueError:
                    continue

    @property
    def tf(self) -> TfBuffer:
        """The transform buffer: all of /tf_static, and /tf around the stamps read so far."""
        if self._tf is None:
            self._tf = TfBuffer(max_extrapolation=self.max_extrapolation)
            self._windows = LoadedWindows()
            self._loc_rows: list[tuple[float, np.ndarray, np.ndarray]] = []
            names = self._channels_of(TF_TYPE, static=True)
            if names:
                total = sum(self._c.channels[n].count for n in names) or None  # stop once all are read
                self._add_tf(self.messages(names, limit=total))
        return self._tf

    def _decode_localization(self, msgs) -> list[tuple[float, np.ndarray, np.ndarray]]:
        from lidarmt.proto.localization import LocalizationEstimate

        rows = []
        for _name, t_rec, content in msgs:
            try:
                m = LocalizationEstimate.FromString(content)
            except DecodeError as err:
                raise FormatError(f"{self.path}: corrupt localization message ({err})") from err
            p, q = m.pose.position, m.pose.orientation
            t = (m.measurement_time if m.HasField("measurement_time")
                 else m.header.timestamp_sec if m.header.HasField("timestamp_sec") else t_rec * 1e-9)
            vals = [p.x, p.y, p.z, q.qx, q.qy, q.qz, q.qw]
            if not np.all(np.isfinite(vals)) or not np.any(vals[3:]):
                continue
            rows.append((t, np.array(vals[:3]), np.array(vals[3:]) / np.linalg.norm(vals[3:])))
        return rows

    def _load_pose_window(self, stamp: float | None) -> None:
        """Load /tf and localization recorded within POSE_WINDOW of ``stamp`` (None: everything)."""
        _ = self.tf
        w = int(self.POSE_WINDOW * 1e9)
        t = 0 if stamp is None else int(round(stamp * 1e9))
        if stamp is None:
            w = 2**62
        dyn = self._channels_of(TF_TYPE, static=False)
        loc = {LOCALIZATION_CHANNEL} if LOCALIZATION_CHANNEL in self._c.channels else set()
        for lo, hi in self._windows.missing(t - w, t + w):
            tf_msgs, loc_msgs = [], []
            for m in self.messages(dyn | loc, lo, hi):
                (loc_msgs if m[0] in loc else tf_msgs).append(m)
            self._add_tf(tf_msgs)
            self._loc_rows.extend(self._decode_localization(loc_msgs))
        self._loc_rows.sort(key=lambda r: r[0])

    def localization(self) -> tuple[list[float], list[np.ndarray], list[np.ndarray]]:
        """(times, positions, quaternions xyzw) of every ``/apollo/localization/pose`` message, in time order."""
        if self._loc is None:
            rows = []
            if LOCALIZATION_CHANNEL in self._c.channels:
                rows = self._decode_localization(self.messages({LOCALIZATION_CHANNEL}))
            rows.sort(key=lambda r: r[0])
            self._loc = ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        return self._loc

    def _vehicle_from_sensor(self, frame_id: str) -> np.ndarray:
        if self.vehicle_from_sensor is not None:
            return np.asarray(self.vehicle_from_sensor, dtype=np.float64)
        chain = self.tf.chain(frame_id)
        for parent in ("novatel", "localization"):
            if parent in chain:
                m = self.tf.lookup(parent, frame_id, 0.0)
                if m is not None:
                    return m
        if not self._warned:
            warn_pose(f"{self.path}: no novatel→{frame_id} extrinsic in /tf_static; assuming the sensor sits at the "
                      f"localization origin with x forward (RFU→FLU rotation only)")
            self._warned = True
        return RFU_FROM_FLU

    def _pose(self, frame_id: str, stamp: float) -> np.ndarray | None:
        self._load_pose_window(stamp)
        pose = self._pose_loaded(frame_id, stamp)
        if pose is None and not self._pose_all:
            # record times may not follow the message stamps: load all pose messages once and try again
            self._pose_all = True
            self._load_pose_window(None)
            pose = self._pose_loaded(frame_id, stamp)
        return pose

    def _pose_loaded(self, frame_id: str, stamp: float) -> np.ndarray | None:
        if self.tf.has_dynamic(frame_id):
            return self.tf.lookup(None, frame_id, stamp)
        rows = self._loc_rows
        ts = [r[0] for r in rows]
        ps = [r[1] for r in rows]
        qs = [r[2] for r in rows]
        if not ts:
            return None
        if stamp <= ts[0] or stamp >= ts[-1]:
            k = 0 if stamp <= ts[0] else len(ts) - 1
            if abs(stamp - ts[k]) > self.max_extrapolation:
                return None
            world_vehicle = make_pose(ps[k], qs[k])
        else:
            j = bisect.bisect_right(ts, stamp)
            u = (stamp - ts[j - 1]) / (ts[j] - ts[j - 1]) if ts[j] > ts[j - 1] else 0.0
            world_vehicle = make_pose(ps[j - 1] + u * (ps[j] - ps[j - 1]), slerp(qs[j - 1], qs[j], u))
        return world_vehicle @ self._vehicle_from_sensor(frame_id)

    @property
    def pose_source(self) -> str:
        frame_id = "velodyne64"
        if self.topic is not None and len(self):
            frame_id = self._read(0).frame_id
        if self.tf.has_dynamic(frame_id):
            return f"/tf + /tf_static: {self.tf.describe_chain(frame_id)}"
        if self._c.channels.get(LOCALIZATION_CHANNEL) and (self._c.channels[LOCALIZATION_CHANNEL].count
                                                           or self.localization()[0]):
            ext = ("novatel extrinsic from /tf_static" if any(p in self.tf.chain(frame_id)
                                                             for p in ("novatel", "localization"))
                   else "no extrinsic: RFU→FLU rotation assumed")
            return f"{LOCALIZATION_CHANNEL} ({ext})"
        return "none"

    def _describe_extra(self, info: RecordingInfo) -> None:
        h = self._c.header
        info.extra["record_version"] = f"{h.major_version}.{h.minor_version}"
        info.extra["complete"] = bool(h.is_complete)
        info.extra["messages"] = sum(c.count for c in self._c.channels.values())
        if h.begin_time and h.end_time:
            info.extra["record_time"] = [h.begin_time * 1e-9, h.end_time * 1e-9]
            if info.start is None:
                info.start, info.end = h.begin_time * 1e-9, h.end_time * 1e-9
        info.notes.extend(self._c.notes)
        ts, ps, qs = self.localization()
        if ts:
            poses = []
            for t, p, q in zip(ts, ps, qs, strict=True):
                r = make_pose(p, q)[:3, :3]
                yaw = float(np.arctan2(r[1, 0], r[0, 0]))
                heading = float((yaw + np.pi / 2 + np.pi) % (2 * np.pi) - np.pi)
                poses.append({"time": t, "x": float(p[0]), "y": float(p[1]), "z": float(p[2]),
                              "qx": float(q[0]), "qy": float(q[1]), "qz": float(q[2]), "qw": float(q[3]),
                              "heading": heading})
            info.extra["localization"] = {"channel": LOCALIZATION_CHANNEL, "count": len(poses), "poses": poses}
            if info.position_range is None:
                arr = np.array([[p["x"], p["y"], p["z"]] for p in poses])
                info.extra["localization_range"] = {a: [float(arr[:, k].min()), float(arr[:, k].max())]
                                                    for k, a in enumerate("xyz")}

    def close(self) -> None:
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()
        super().close()


# ----------------------------------------------------------------------------------------------- writer


def _section(typ: int, payload: bytes) -> bytes:
    return _SECTION.pack(typ, len(payload)) + payload


def _proto_desc(file_module) -> bytes:
    """Serialized ProtoDesc of one of lidarmt's proto files, with apollo.common as its dependency."""
    from lidarmt.proto import common
    from lidarmt.proto._schema import file_descriptor_bytes
    from lidarmt.proto.record import ProtoDesc

    dep = ProtoDesc(desc=file_descriptor_bytes(common.FILE))
    return ProtoDesc(desc=file_descriptor_bytes(file_module.FILE), dependencies=[dep]).SerializeToString()


class CyberRecordWriter(StagedWriter):
    """Write frames (and their poses) to an Apollo Cyber ``.record``. Use as a context manager.

    Each :meth:`write` stores the ``apollo.drivers.PointCloud`` on ``topic`` and, when the frame has a pose,
    ``/tf`` world→novatel, ``/apollo/localization/pose`` (position and RFU orientation of the novatel frame,
    heading = yaw + π/2); ``/tf_static`` novatel→<frame id> is written once per sensor frame. The file appears at
    ``path`` only when closed without error (``overwrite=True`` to replace a file).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        topic: str = APOLLO_POINTCLOUD_TOPIC,
        novatel_from_sensor: np.ndarray | None = None,
        world_frame: str = "world",
        tf: bool = True,
        tf_static: bool = True,
        localization: bool = True,
        chunk_raw_size: int = 64 << 20,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        self.topic = topic
        self.world_frame = world_frame
        self.write_tf = tf
        self.write_tf_static = tf_static
        self.write_localization = localization
        self.chunk_raw_size = chunk_raw_size
        self.novatel_from_sensor = finite_extrinsic(novatel_from_sensor, RFU_FROM_FLU)
        self._sensor_from_novatel = np.linalg.inv(self.novatel_from_sensor)
        self._open_stage(overwrite=overwrite)
        try:
            self._fh = open(self._tmp, "wb")  # noqa: SIM115 (closed in close())
            self._fh.write(bytes(FIRST_SECTION))  # the header is written at close
        except OSError as err:
            self._drop_stage(err)
            raise WriterError(f"cannot write {self.path}: {err.strerror or err}") from err
        self._channels: dict[str, tuple[str, bytes]] = {}
        self._counts: dict[str, int] = {}
        self._index: list[Any] = []
        self._pending: list[tuple[str, int, bytes]] = []
        self._pending_size = 0
        self._begin: int | None = None
        self._end = 0
        self._messages = 0
        self._chunks = 0
        self._static_children: set[str] = set()
        self._seq = 0
        self.frames_written = 0

    # low level
    def _add_channel(self, name: str, message_type: str, proto_desc: bytes) -> None:
        from lidarmt.proto import record as R

        if name in self._channels:
            if self._channels[name][0] != message_type:
                raise WriterError(f"{self.path}: channel {name} already has type {self._channels[name][0]}")
            return
        pos = self._fh.tell()
        self._fh.write(_section(SECTION_CHANNEL, R.Channel(name=name, message_type=message_type,
                                                           proto_desc=proto_desc).SerializeToString()))
        self._channels[name] = (message_type, proto_desc)
        self._counts[name] = 0
        self._index.append(("channel", pos, name))

    def write_message(self, channel: str, message_type: str, content: bytes, time_ns: int,
                      proto_desc: bytes = b"") -> None:
        """Append one serialized protobuf message (``proto_desc``: serialized ProtoDesc of its type)."""
        if self._closed:
            raise WriterError(f"{self.path}: writer is closed")
        self._add_channel(channel, message_type, proto_desc)
        self._pending.append((channel, int(time_ns), content))
        self._pending_size += len(content)
        self._counts[channel] += 1
        self._messages += 1
        self._begin = int(time_ns) if self._begin is None else min(self._begin, int(time_ns))
        self._end = max(self._end, int(time_ns))
        if self._pending_size >= self.chunk_raw_size:
            self._flush()

    def _flush(self) -> None:
        from lidarmt.proto import record as R

        if not self._pending:
            return
        times = [t for _c, t, _m in self._pending]
        body = R.ChunkBody(messages=[R.SingleMessage(channel_name=c, time=t, content=m) for c, t, m in self._pending])
        hdr = R.ChunkHeader(begin_time=min(times), end_time=max(times), message_number=len(self._pending),
                            raw_size=self._pending_size)
        pos_h = self._fh.tell()
        self._fh.write(_section(SECTION_CHUNK_HEADER, hdr.SerializeToString()))
        pos_b = self._fh.tell()
        self._fh.write(_section(SECTION_CHUNK_BODY, body.SerializeToString()))
        self._index.append(("chunk_header", pos_h, hdr))
        self._index.append(("chunk_body", pos_b, len(self._pending)))
        self._chunks += 1
        self._pending = []
        self._pending_size = 0

    # frames
    def _tf_content(self, parent: str, child: str, stamp: float, m: np.ndarray) -> bytes:
        from lidarmt.proto.transform import TransformStampeds

        msg = TransformStampeds()
        msg.header.timestamp_sec = stamp
        ts = msg.transforms.add()
        ts.header.timestamp_sec = stamp
        ts.header.frame_id = parent
        ts.child_frame_id = child
        qx, qy, qz, qw = matrix_to_quat(m[:3, :3])
        tr = ts.transform.translation
        tr.x, tr.y, tr.z = (float(v) for v in m[:3, 3])
        q = ts.transform.rotation
        q.qx, q.qy, q.qz, q.qw = qx, qy, qz, qw
        return msg.SerializeToString()

    def write(self, frame: Frame) -> None:
        """Write one frame: PointCloud, and /tf + localization when it has a pose."""
        import lidarmt.io._pbpoints as _pbpoints
        from lidarmt.proto import drivers, localization, transform
        from lidarmt.proto.drivers import PointCloud
        from lidarmt.proto.localization import LocalizationEstimate

        if not isinstance(frame, Frame):
            raise WriterError(f"expected a lidarmt Frame, got {type(frame).__name__}")
        t_ns = stamp_ns(frame.stamp)
        frame_id = frame.frame_id or "velodyne64"
        if self.write_tf_static and frame_id not in self._static_children:
            self.write_message("/tf_static", TF_TYPE, self._tf_content("novatel", frame_id, frame.stamp,
                                                                       self.novatel_from_sensor), t_ns,
                               _proto_desc(transform))
            self._static_children.add(frame_id)
        if frame.pose is not None:
            if not np.all(np.isfinite(frame.pose)):
                raise WriterError(f"frame {frame.index} has a non-finite pose")
            wn = frame.pose @ self._sensor_from_novatel
            if self.write_tf:
                self.write_message("/tf", TF_TYPE, self._tf_content(self.world_frame, "novatel", frame.stamp, wn),
                                   t_ns, _proto_desc(transform))
            if self.write_localization:
                loc = LocalizationEstimate()
                loc.header.timestamp_sec = frame.stamp
                loc.header.module_name = "lidarmt"
                loc.header.sequence_num = self._seq
                loc.measurement_time = frame.stamp
                p = loc.pose.position
                p.x, p.y, p.z = (float(v) for v in wn[:3, 3])
                qx, qy, qz, qw = matrix_to_quat(wn[:3, :3])
                q = loc.pose.orientation
                q.qx, q.qy, q.qz, q.qw = qx, qy, qz, qw
                yaw = float(np.arctan2(wn[1, 0], wn[0, 0]))
                loc.pose.heading = float((yaw + np.pi / 2 + np.pi) % (2 * np.pi) - np.pi)
                self.write_message(LOCALIZATION_CHANNEL, LOCALIZATION_TYPE, loc.SerializeToString(), t_ns,
                                   _proto_desc(localization))
        pts = frame.points
        names = pts.dtype.names or ()
        head = PointCloud(frame_id=frame_id, is_dense=bool(np.all(np.isfinite(pts["x"]))),
                          measurement_time=frame.stamp, width=len(pts), height=1)
        head.header.timestamp_sec = frame.stamp
        head.header.lidar_timestamp = t_ns
        head.header.frame_id = frame_id
        head.header.sequence_num = self._seq
        head.header.module_name = "lidarmt"
        times = pts["time"] if "time" in names else np.full(len(pts), frame.stamp)
        inten = np.clip(np.rint(np.nan_to_num(pts["intensity"])), 0, 2**32 - 1).astype(np.uint64)
        body = _pbpoints.encode_points(pts["x"], pts["y"], pts["z"], inten,
                                       np.rint(times * 1e9).astype(np.uint64),
                                       pts["ring"] if "ring" in names else None)
        self.write_message(self.topic, POINTCLOUD_TYPE, head.SerializeToString() + body, t_ns,
                           _proto_desc(drivers))
        self._seq += 1
        self.frames_written += 1

    def _finish(self) -> None:
        """Write the last chunk, the index and the final header (:meth:`close` then moves the file into place)."""
        from lidarmt.proto import record as R

        try:
            self._flush()
            index = R.Index()
            for kind, pos, extra in self._index:
                e = index.indexes.add(position=pos)
                if kind == "channel":
                    mt, desc = self._channels[extra]
                    e.type = SECTION_CHANNEL
                    e.channel_cache.CopyFrom(R.ChannelCache(message_number=self._counts[extra], name=extra,
                                                            message_type=mt, proto_desc=desc))
                elif kind == "chunk_header":
                    e.type = SECTION_CHUNK_HEADER
                    e.chunk_header_cache.CopyFrom(R.ChunkHeaderCache(
                        message_number=extra.message_number, begin_time=extra.begin_time, end_time=extra.end_time,
                        raw_size=extra.raw_size))
                else:
                    e.type = SECTION_CHUNK_BODY
                    e.chunk_body_cache.CopyFrom(R.ChunkBodyCache(message_number=extra))
            index_pos = self._fh.tell()
            self._fh.write(_section(SECTION_INDEX, index.SerializeToString()))
            size = self._fh.tell()
            hdr = R.Header(major_version=1, minor_version=0, compress=0, chunk_interval=20_000_000_000,
                           segment_interval=60_000_000_000, index_position=index_pos, chunk_number=self._chunks,
                           channel_number=len(self._channels), begin_time=self._begin or 0, end_time=self._end,
                           message_number=self._messages, size=size, is_complete=True,
                           chunk_raw_size=self.chunk_raw_size, segment_raw_size=2 << 30)
            raw = hdr.SerializeToString()
            if len(raw) >= HEADER_LENGTH:
                raise WriterError("record header too large")
            self._fh.seek(0)
            self._fh.write(_SECTION.pack(SECTION_HEADER, len(raw)) + raw + b"0" + bytes(HEADER_LENGTH - len(raw) - 1))
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
        except BaseException:
            self._fh.close()
            raise

    def _discard(self) -> None:
        self._fh.close()


def write_cyber_record(path: str | os.PathLike[str], frames, **kw) -> int:
    """Write frames to a Cyber record (see :class:`CyberRecordWriter`); returns the number written."""
    return write_frames(CyberRecordWriter(path, **kw), frames)
