"""Message-level access to ROS1 bags, ROS2 bags and Cyber records, on top of the readers in :mod:`lidarmt.io`.

lidarmt.io's recordings are point-cloud readers: their constructors choose a point-cloud topic and fail on
recordings with several of them. Image sources need the container underneath (topics, per-topic message times,
message ``i``, streaming), so each adapter below subclasses the io reader, skips its point-cloud choice and
reuses its container code: ROS1 index and chunk cache, rosbags' ROS2 reader, the Cyber section parser.
(An adapter, not a change to lidarmt.io: if lidarmt.io grows a public message API, these shrink to calls.)

Every adapter offers ``topics()``, ``notes()`` (what the reader had to work around), ``count(topic)``, ``times(topic)`` (record times in ns, in message order),
``message(topic, i)``, ``stream(topic)`` yielding ``(time ns, bytes)`` and ``close()``; errors are
:class:`lidarmt.io.errors.RecordingError` subclasses (the image sources turn them into ImageSourceError).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lidarmt.io.base import Recording, TopicInfo
from lidarmt.io.cyber import CyberRecording
from lidarmt.io.errors import FormatError, RecordingError
from lidarmt.io.ros1 import Ros1Recording
from lidarmt.io.ros2 import Ros2Recording


class _Ros1Bag(Ros1Recording):
    """A ROS1 bag opened at the container level only (no point-cloud topic chosen)."""

    def __init__(self, path: Path) -> None:
        Recording.__init__(self, path)
        self.recover = False
        self._open_bag()


class _Ros2Bag(Ros2Recording):
    """A ROS2 bag folder opened at the container level only."""

    def __init__(self, path: Path) -> None:
        Recording.__init__(self, path)
        self._open_bag()


class _CyberRecord(CyberRecording):
    """A Cyber record opened at the container level only (CyberRecording.__init__ without the cloud channel)."""

    def __init__(self, path: Path) -> None:
        Recording.__init__(self, path)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file")
        if p.is_dir():
            raise RecordingError(f"{p} is a folder; a Cyber record is a single .record file")
        try:
            self._fh = open(p, "rb")  # noqa: SIM115 (closed in close())
        except OSError as err:
            raise RecordingError(f"{p}: unreadable ({err.strerror or err})") from err
        self._chunk_msgs: dict[int, list[tuple[str, int, int, int]]] = {}
        try:
            self._size = os.fstat(self._fh.fileno()).st_size
            self._c = self._parse_container()
        except BaseException:
            self._fh.close()
            raise
        self.topic = None
        self._cloud_index = None
        self._tf = None
        self._loc = None


class Ros1Container:
    """Messages of a ROS1 bag by topic, through the bag's index (times and positions are known without reading)."""

    format = "ros1"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._bag = _Ros1Bag(path)
        self._entries: dict[str, list[Any]] = {}

    def topics(self) -> list[TopicInfo]:
        return self._bag.topics()

    def notes(self) -> list[str]:
        return list(getattr(self._bag, "_notes", []))

    def _topic(self, topic: str) -> list[Any]:
        e = self._entries.get(topic)
        if e is None:
            conns = [c for c in self._bag._connections if c.topic == topic]
            e = self._entries[topic] = sorted(x for c in conns for x in self._bag._indexes.get(c.id, ()))
        return e

    def count(self, topic: str) -> int:
        return len(self._topic(topic))

    def times(self, topic: str) -> list[int]:
        return [e.time for e in self._topic(topic)]

    def message(self, topic: str, i: int) -> memoryview:
        return self._bag._raw_entry(self._topic(topic)[i], f"message {i} of {topic}")

    def stream(self, topic: str) -> Iterator[tuple[int, memoryview]]:
        for i, e in enumerate(self._topic(topic)):
            yield e.time, self._bag._raw_entry(e, f"message {i} of {topic}")

    def close(self) -> None:
        self._bag.close()


class Ros2Container:
    """Messages of a ROS2 bag by topic (rosbags' reader; message ``i`` is fetched by its timestamp)."""

    format = "ros2"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._bag = _Ros2Bag(path)
        self._times: dict[str, list[int]] = {}

    def _conns(self, topic: str) -> list[Any]:
        return [c for c in self._bag._reader.connections if c.topic == topic]

    def topics(self) -> list[TopicInfo]:
        return self._bag.topics()

    def notes(self) -> list[str]:
        return []

    def count(self, topic: str) -> int:
        if topic in self._times:
            return len(self._times[topic])
        return sum(c.msgcount for c in self._conns(topic))

    def times(self, topic: str) -> list[int]:
        t = self._times.get(topic)
        if t is None:
            t = self._times[topic] = [t for _c, t, _r in self._bag._messages(self._conns(topic))]
        return t

    def message(self, topic: str, i: int) -> bytes:
        times = self.times(topic)
        if i >= len(times):
            raise FormatError(f"{self.path}: metadata.yaml announces {self.count(topic)} messages on {topic}, but "
                              f"the storage holds {len(times)} (damaged bag)")
        t = times[i]
        k = i - bisect.bisect_left(times, t)  # several messages may share a timestamp
        for j, (_c, _t, raw) in enumerate(self._bag._messages(self._conns(topic), start=t, stop=t + 1)):
            if j == k:
                return raw
        raise FormatError(f"{self.path}: message {i} of {topic} vanished (timestamp {t})")

    def stream(self, topic: str) -> Iterator[tuple[int, bytes]]:
        for _c, t, raw in self._bag._messages(self._conns(topic)):
            yield t, raw

    def close(self) -> None:
        self._bag.close()


class CyberContainer:
    """Messages of a Cyber record by channel (file order; random access through a per-channel offset list)."""

    format = "cyber"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rec = _CyberRecord(path)
        self._index: dict[str, list[tuple[int, int, int]]] = {}

    def topics(self) -> list[TopicInfo]:
        return self._rec.topics()

    def notes(self) -> list[str]:
        return list(self._rec._c.notes)

    def _topic(self, topic: str) -> list[tuple[int, int, int]]:
        """(time ns, absolute content offset, length) of each message of ``topic``: walks every chunk once."""
        idx = self._index.get(topic)
        if idx is None:
            rec = self._rec
            idx = self._index[topic] = [(t, off, ln) for k in range(len(rec._c.chunks))
                                        for name, t, off, ln in rec._chunk_index(k) if name == topic]
        return idx

    def count(self, topic: str) -> int:
        ch = self._rec._c.channels.get(topic)
        if self._rec._c.indexed and topic not in self._index and ch is not None:
            return ch.count
        return len(self._topic(topic))

    def times(self, topic: str) -> list[int]:
        return [t for t, _o, _n in self._topic(topic)]

    def message(self, topic: str, i: int) -> bytes:
        idx = self._topic(topic)
        if i >= len(idx):
            raise FormatError(f"{self.path}: the record's index announces {self.count(topic)} messages on {topic}, "
                              f"but its chunks hold {len(idx)} (corrupt index)")
        _t, off, ln = idx[i]
        return self._rec._content(off, ln)

    def stream(self, topic: str) -> Iterator[tuple[int, bytes]]:
        for _name, t, content in self._rec.messages({topic}):
            yield t, content

    def close(self) -> None:
        self._rec.close()


def open_container(path: Path, fmt: str) -> Ros1Container | Ros2Container | CyberContainer:
    """The adapter for ``fmt`` ("ros1", "ros2" or "cyber")."""
    cls = {"ros1": Ros1Container, "ros2": Ros2Container, "cyber": CyberContainer}[fmt]
    return cls(path)
