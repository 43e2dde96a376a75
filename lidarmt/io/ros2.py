"""ROS2 bags (a folder with ``metadata.yaml`` and sqlite3 ``.db3`` or ``.mcap`` storage): read and write.

rosbags reads both storages; lidarmt parses each CDR-serialised PointCloud2 itself
(:func:`lidarmt.io.pointcloud2.parse_cdr`, zero copy) and takes poses from ``/tf`` + ``/tf_static`` exactly as for
ROS1 bags. Streaming reads the cloud topic in order; ``rec[i]`` first lists the clouds' timestamps (one pass over
the topic), then fetches message ``i`` by its timestamp, which both storages look up through their indexes.

The writer mirrors :class:`lidarmt.io.ros1.Ros1BagWriter` (same topics, same Apollo point layout).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import Reader, Writer
from rosbags.rosbag2.enums import StoragePlugin
from rosbags.rosbag2.errors import ReaderError, WriterError
from rosbags.rosbag2.reader import DirectoryReader
from rosbags.rosbag2.storage_mcap import McapReader
from rosbags.typesys import Stores, get_typestore

from lidarmt._paths import MAX_SMALL_FILE, check_readable
from lidarmt.io._output import write_frames
from lidarmt.io.bag import APOLLO_POINTCLOUD_TOPIC, TF_TYPES, BagRecording
from lidarmt.io.base import TopicInfo
from lidarmt.io.cloud import FieldLayout
from lidarmt.io.errors import FormatError, RecordingError
from lidarmt.io.errors import WriterError as LidarmtWriterError
from lidarmt.io.pointcloud2 import parse_cdr, serialize_cdr
from lidarmt.io.ros1 import TFMESSAGE, _BoundedPath, _RosBagWriter
from lidarmt.types import Frame

TYPESTORE = get_typestore(Stores.ROS2_HUMBLE)
"""rosbags' ROS2 (Humble) typestore, for :meth:`Ros2BagWriter.write_message`."""

_READ_ERRORS = (ReaderError, KeyError, ValueError, IndexError, AssertionError, OSError)


class _BoundedMcapReader(McapReader):
    """rosbags' mcap storage reading through a file whose ``read(n)`` is capped at the bytes left, so that a
    corrupt record length cannot make a small file allocate gigabytes (see :class:`lidarmt.io.ros1._BoundedReader`)."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.path = _BoundedPath(Path(path))


class _DirectoryReader(DirectoryReader):
    STORAGE_PLUGINS = {**DirectoryReader.STORAGE_PLUGINS, "mcap": _BoundedMcapReader}


class _Reader(Reader):
    STORAGE_PLUGINS = {**Reader.STORAGE_PLUGINS, "dir": _DirectoryReader}


class Ros2Recording(BagRecording):
    """A ROS2 bag folder: frames from one PointCloud2 topic, poses from /tf and /tf_static."""

    format = "ros2"
    parse = staticmethod(parse_cdr)

    def _open_bag(self) -> None:
        path = self.path
        if not path.exists():
            raise RecordingError(f"{path}: no such folder")
        if not path.is_dir():
            raise RecordingError(f"{path}: a ROS2 bag is a folder (with metadata.yaml); pass the folder")
        if not (path / "metadata.yaml").is_file():
            raise FormatError(f"{path}: no metadata.yaml; a ROS2 bag folder needs it (recreate it with "
                              f"`ros2 bag reindex`)")
        for f in sorted(path.iterdir()):  # what rosbags opens: regular files only (a FIFO would block it)
            if f.name == "metadata.yaml" or f.name.endswith((".db3", ".mcap")):
                check_readable(f, max_bytes=MAX_SMALL_FILE if f.suffix == ".yaml" else None, error=RecordingError)
        self._reader = _Reader(path)
        try:
            self._reader.open()
        except Exception as err:  # rosbags raises several unrelated types for damaged bags
            raise FormatError(f"{path}: unreadable ROS2 bag ({err})") from err
        self._stamps: list[int] | None = None
        self._conns: list[Any] = []

    def topics(self) -> list[TopicInfo]:
        out: dict[str, TopicInfo] = {}
        for c in self._reader.connections:
            if c.topic in out:
                out[c.topic].count += c.msgcount
            else:
                out[c.topic] = TopicInfo(c.topic, c.msgtype, c.msgcount)
        return sorted(out.values(), key=lambda t: t.name)

    def _select(self, topic: str | None) -> None:
        self._conns = [c for c in self._reader.connections if c.topic == topic] if topic else []

    def _count_meta(self) -> int:
        return sum(c.msgcount for c in self._conns)

    def _count(self) -> int:
        if self._stamps is not None:
            return len(self._stamps)
        return self._count_meta()

    def _messages(self, conns, **kw) -> Iterator[tuple[Any, int, bytes]]:
        try:
            yield from self._reader.messages(connections=conns, **kw)
        except _READ_ERRORS as err:
            raise FormatError(f"{self.path}: unreadable message on {conns[0].topic if conns else '?'} ({err}); "
                              f"the bag may be truncated") from err
        except Exception as err:  # sqlite3/apsw and zstd errors
            raise FormatError(f"{self.path}: unreadable bag storage ({err})") from err

    def _iter(self) -> Iterator[Frame]:
        """One pass over the clouds and /tf together: each cloud is held back until the /tf recorded up to
        TF_WINDOW after it has been read, so no storage chunk is read twice (mcap chunks mix both)."""
        if not self._conns:
            return
        _ = self.tf  # /tf_static
        tf_conns = [c for c in self._reader.connections
                    if c.msgtype in TF_TYPES and not c.topic.rstrip("/").endswith("tf_static")]
        tf_ids = {c.id for c in tf_conns}
        margin = int(self.TF_WINDOW * 1e9)
        pending: deque[tuple[int, bytes]] = deque()
        i = 0
        for conn, t, raw in self._messages(self._conns + tf_conns):
            if conn.id in tf_ids:
                try:
                    msg = TYPESTORE.deserialize_cdr(raw, TFMESSAGE)
                except Exception as err:  # rosbags' generated deserialisers raise assorted errors
                    raise FormatError(f"{self.path}: unreadable {conn.topic} message ({err})") from err
                self._add_tf([msg], static=False)
            else:
                pending.append((t, raw))
            self._tf_loaded.missing(-(2**62), t + 1)  # all /tf recorded up to t is in the buffer
            while pending and pending[0][0] + margin < t:
                yield self._frame(pending.popleft()[1], i)
                i += 1
        self._tf_loaded.missing(-(2**62), 2**62)
        while pending:
            yield self._frame(pending.popleft()[1], i)
            i += 1

    def _iter_raw(self) -> Iterator[bytes]:
        if not self._conns:
            return
        for _c, _t, raw in self._messages(self._conns):
            yield raw

    def _raw(self, i: int) -> bytes:
        if i == 0 and self._stamps is None:  # the first cloud needs no timestamp list
            for raw in self._iter_raw():
                return raw
        if self._stamps is None:
            self._stamps = [t for _c, t, _r in self._messages(self._conns)]
        if i >= len(self._stamps):
            raise FormatError(f"{self.path}: metadata.yaml announces {self._count_meta()} messages on {self.topic}, "
                              f"but the storage holds {len(self._stamps)} (damaged bag)")
        t = self._stamps[i]
        k = i - self._stamps.index(t)  # several clouds may share a timestamp
        for j, (_c, _t, raw) in enumerate(self._messages(self._conns, start=t, stop=t + 1)):
            if j == k:
                return raw
        raise FormatError(f"{self.path}: message {i} of {self.topic} vanished (timestamp {t})")

    def _tf_messages(self, static: bool, start_ns: int | None = None, stop_ns: int | None = None
                     ) -> Iterator[object]:
        conns = [c for c in self._reader.connections if c.msgtype in TF_TYPES
                 and c.topic.rstrip("/").endswith("tf_static") == static]
        if not conns:
            return
        for _c, _t, raw in self._messages(conns, start=start_ns, stop=stop_ns):
            try:
                yield TYPESTORE.deserialize_cdr(raw, TFMESSAGE)
            except Exception as err:  # rosbags' generated deserialisers raise assorted errors
                raise FormatError(f"{self.path}: unreadable /tf message ({err})") from err

    def close(self) -> None:
        r = getattr(self, "_reader", None)
        if r is not None:
            with contextlib.suppress(Exception):  # closing a reader that failed half-way
                r.close()
        super().close()


class Ros2BagWriter(_RosBagWriter):
    """Write frames to a ROS2 bag folder (``storage="sqlite3"`` or ``"mcap"``) in Apollo's layout.

    Same contents and options as :class:`lidarmt.io.ros1.Ros1BagWriter`; the folder appears at ``path`` only when
    the writer is closed without error.
    """

    typestore = TYPESTORE
    _ros2 = True
    _add_errors = (WriterError, KeyError)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage: str = "sqlite3",
        topic: str = APOLLO_POINTCLOUD_TOPIC,
        novatel_from_sensor: np.ndarray | None = None,
        world_frame: str = "world",
        novatel_frame: str = "novatel",
        overwrite: bool = False,
    ) -> None:
        plugins = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}
        if storage not in plugins:
            raise LidarmtWriterError(f"storage must be 'sqlite3' or 'mcap', not {storage!r}")
        self._setup(path, topic=topic, novatel_from_sensor=novatel_from_sensor, world_frame=world_frame,
                    novatel_frame=novatel_frame)
        self._open_stage(overwrite=overwrite)
        try:
            self._writer = Writer(self._tmp, version=9, storage_plugin=plugins[storage])
            self._writer.open()
        except BaseException as err:
            self._drop_stage(err, err.__traceback__)
            raise LidarmtWriterError(f"cannot create the ROS2 bag {self.path}: {err}") from err

    def _serialize(self, msg: object, msgtype: str) -> bytes:
        return self.typestore.serialize_cdr(msg, msgtype)

    def _cloud_message(self, t_ns: int, frame_id: str, layout: FieldLayout, rec: np.ndarray) -> bytes:
        return serialize_cdr(stamp_ns=t_ns, frame_id=frame_id, layout=layout, data=rec, width=len(rec))

    def _rename_storage(self) -> None:
        """rosbags names the storage files after the (temporary) folder; give them the final name."""
        tmp_name, final = self._tmp.name, self.path.name
        meta = self._tmp / "metadata.yaml"
        text = meta.read_text()
        for f in self._tmp.iterdir():
            if f.name.startswith(tmp_name):
                new = final + f.name[len(tmp_name) :]
                f.rename(self._tmp / new)
                text = text.replace(f.name, new)
        meta.write_text(text)

    def _finish(self) -> None:
        self._writer.close()
        self._rename_storage()

    def _discard(self) -> None:
        with contextlib.suppress(Exception):  # the folder is deleted anyway
            self._writer.close()


def write_ros2_bag(path: str | os.PathLike[str], frames, *, storage: str = "sqlite3", **kw) -> int:
    """Write frames to a ROS2 bag folder (see :class:`Ros2BagWriter`); returns the number written."""
    return write_frames(Ros2BagWriter(path, storage=storage, **kw), frames)
