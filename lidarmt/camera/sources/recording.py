"""Camera topics of recordings: ROS1 bags, ROS2 bags (sqlite3, mcap) and Apollo Cyber records.

Messages read:

* ROS: ``sensor_msgs/Image`` (raw rows; encodings in :mod:`lidarmt.camera.sources.decode`) and
  ``sensor_msgs/CompressedImage`` (JPEG, PNG);
* Cyber: ``apollo.drivers.Image`` and ``apollo.drivers.CompressedImage`` (:mod:`lidarmt.proto.drivers`).

The image topic is the one asked for, else the only image topic, else the camera ``lidarmt simulate`` writes
(:data:`SIM_CAMERA_TOPIC`); several image topics and none chosen is an error that lists them. Frames are the
topic's messages in recording order; ``frame_id`` is the image's own stamp in nanoseconds (the header stamp, or
Cyber's ``measurement_time``; the record time when those are zero), ``stamp`` the same in seconds.

Steering labels (ROS bags): a ``std_msgs/Float64`` (or ``Float32``) topic in radians, positive = left —
``--steering-topic``, else :data:`SIM_STEERING_TOPIC` when the bag has it (``lidarmt simulate`` writes one per
camera frame, at the same record time). Each image is paired with the steering message nearest in record time,
if it lies within half a frame period (the median interval between images); otherwise the frame has no label.
The pairing needs only the record times (a ROS1 bag's index has them; a ROS2 bag reads the image topic once), and
each label is read when its frame is. Cyber records carry no steering labels yet (Apollo's chassis
``steering_percentage`` is a possible later addition).

Opening reads only the container's index, so a worker re-opening a source from its path is cheap; nothing but
the path and the two topic names decides what the source holds.
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.sources._containers import open_container
from lidarmt.camera.sources._source import BaseImageSource
from lidarmt.camera.sources.decode import decode_compressed, decode_raw
from lidarmt.camera.types import MAX_ANGLE_RAD, CameraFrame
from lidarmt.io.base import TopicInfo
from lidarmt.io.errors import RecordingError

SIM_CAMERA_TOPIC = "/apollo/sensor/camera/front_6mm/image"
"""The camera topic ``lidarmt simulate`` writes (lidarmt/lidar/sim/record.py), the default among several."""
SIM_STEERING_TOPIC = "/lidarmt/steering_angle"
"""The steering topic ``lidarmt simulate`` writes (``std_msgs/Float64``, radians, positive = left)."""

ROS_IMAGE_TYPES = {"sensor_msgs/msg/Image": "raw", "sensor_msgs/msg/CompressedImage": "compressed"}
CYBER_IMAGE_TYPES = {"apollo.drivers.Image": "raw", "apollo.drivers.CompressedImage": "compressed"}
STEERING_TYPES = ("std_msgs/msg/Float64", "std_msgs/msg/Float32")


@contextlib.contextmanager
def _as_source_errors() -> Iterator[None]:
    """Turn lidarmt.io's recording errors into ImageSourceError (same one-line message)."""
    try:
        yield
    except RecordingError as err:
        raise ImageSourceError(str(err)) from err


def _listing(topics: list[TopicInfo]) -> str:
    return ", ".join(f"{t.name} ({t.msgtype}, {t.count})" for t in topics) or "none"


def _find(topics: list[TopicInfo], name: str) -> TopicInfo | None:
    want = "/" + name.lstrip("/")
    return next((t for t in topics if t.name == name or t.name == want), None)


class RecordingImageSource(BaseImageSource):
    """The frames of one camera topic of a recording (see the module doc). Use a format subclass."""

    image_types: dict[str, str] = ROS_IMAGE_TYPES

    def __init__(self, path: str | Path, *, topic: str | None = None, steering_topic: str | None = None) -> None:
        p = Path(path)
        super().__init__(str(p))
        with _as_source_errors():
            self._c = open_container(p, self.format)
        try:
            with _as_source_errors():
                self.topics = self._c.topics()
                self.topic, self.message_type = self._choose_image_topic(topic)
                self.steering_topic, self.steering_type = self._choose_steering_topic(steering_topic)
                self._n = self._c.count(self.topic)
                self.notes.extend(self._c.notes())
            if self._n == 0:
                why = f" ({'; '.join(self.notes)})" if self.notes else ""
                raise ImageSourceError(f"{p}: image topic {self.topic} holds no messages{why}; image topics: "
                                       f"{_listing(self._image_topics())}")
        except BaseException:
            self._c.close()
            raise
        self.kind = self.image_types[self.message_type]
        self.has_labels = self.steering_topic is not None
        self._pairs: list[int | None] | None = None
        self._values: dict[int, float | None] = {}

    # ------------------------------------------------------------------ topics

    def _image_topics(self) -> list[TopicInfo]:
        return [t for t in self.topics if t.msgtype in self.image_types]

    def _choose_image_topic(self, topic: str | None) -> tuple[str, str]:
        images = self._image_topics()
        if topic is not None:
            t = _find(self.topics, topic)
            if t is None:
                raise ImageSourceError(f"{self.path}: no topic {topic!r}; image topics in it: {_listing(images)}")
            if t.msgtype not in self.image_types:
                raise ImageSourceError(f"{self.path}: topic {t.name} is {t.msgtype}, not an image "
                                       f"({' or '.join(self.image_types)}); image topics: {_listing(images)}")
            return t.name, t.msgtype
        if not images:
            raise ImageSourceError(f"{self.path}: no image topic in this recording (no "
                                   f"{' or '.join(self.image_types)}; topics: {_listing(self.topics)})")
        if len(images) == 1:
            return images[0].name, images[0].msgtype
        sim = _find(images, SIM_CAMERA_TOPIC)
        if sim is not None:
            return sim.name, sim.msgtype
        raise ImageSourceError(f"{self.path}: several image topics ({_listing(images)}); choose one with "
                               f"--topic / topic=")

    def _choose_steering_topic(self, steering_topic: str | None) -> tuple[str | None, str | None]:
        floats = [t for t in self.topics if t.msgtype in STEERING_TYPES]
        if steering_topic is None:
            t = _find(floats, SIM_STEERING_TOPIC)
            return (t.name, t.msgtype) if t is not None else (None, None)
        t = _find(self.topics, steering_topic)
        if t is None:
            raise ImageSourceError(f"{self.path}: no steering topic {steering_topic!r}; std_msgs/Float64 or "
                                   f"Float32 topics in it: {_listing(floats)}")
        if t.msgtype not in STEERING_TYPES:
            raise ImageSourceError(f"{self.path}: steering topic {t.name} is {t.msgtype}; lidarmt reads steering "
                                   f"angles from std_msgs/Float64 or std_msgs/Float32 (radians)")
        return t.name, t.msgtype

    # ------------------------------------------------------------------ decoding (format subclasses)

    def _decode(self, raw: bytes | memoryview, where: str) -> tuple[np.ndarray, int | None, dict[str, Any]]:
        """(RGB image, the image's own stamp in nanoseconds or None, detail) of one message."""
        raise NotImplementedError

    def _steering_value(self, raw: bytes | memoryview, where: str) -> float:
        raise NotImplementedError

    # ------------------------------------------------------------------ labels

    def _pairing(self) -> list[int | None]:
        """For each frame, the index of the steering message paired with it (None: none within half a period)."""
        if self._pairs is not None:
            return self._pairs
        if self.steering_topic is None:
            self._pairs = [None] * len(self)
            return self._pairs
        with _as_source_errors():
            img = self._c.times(self.topic)
            steer = self._c.times(self.steering_topic)
        tol = math.inf
        if len(img) > 1:
            tol = float(np.median(np.diff(np.asarray(img, dtype=np.int64)))) / 2
        order = sorted(range(len(steer)), key=lambda j: steer[j])
        st = [steer[j] for j in order]
        pairs: list[int | None] = []
        for t in img:
            k = bisect.bisect_left(st, t)
            best = None
            for c in (k - 1, k):
                if 0 <= c < len(st) and (best is None or abs(st[c] - t) < abs(st[best] - t)):
                    best = c
            pairs.append(order[best] if best is not None and abs(st[best] - t) <= tol else None)
        self._pairs = pairs
        return pairs

    def _label(self, i: int) -> float | None:
        j = self._pairing()[i]
        if j is None:
            return None
        if j not in self._values:
            assert self.steering_topic is not None
            where = f"{self.path}: topic {self.steering_topic} message {j}"
            with _as_source_errors():
                raw = self._c.message(self.steering_topic, j)
            v = self._steering_value(raw, where)
            self._values[j] = v if math.isfinite(v) and abs(v) <= MAX_ANGLE_RAD else None
        return self._values[j]

    def labels(self) -> list[float | None]:
        if self.steering_topic is None:
            return [None] * len(self)
        return [self._label(i) for i in range(len(self))]

    def stamps(self) -> list[float | None]:
        """Record times (seconds) of the image messages: known from the index, without decoding."""
        with _as_source_errors():
            return [t * 1e-9 for t in self._c.times(self.topic)]

    # ------------------------------------------------------------------ frames

    def _count(self) -> int:
        return self._n

    def _frame(self, raw: bytes | memoryview, i: int, t_rec: int | None) -> CameraFrame:
        where = f"{self.path}: topic {self.topic} message {i}"
        img, t_ns, detail = self._decode(raw, where)
        if t_ns is None:
            t_ns = t_rec
        stamp = None if t_ns is None else t_ns * 1e-9
        frame_id = str(i) if t_ns is None else str(t_ns)
        detail = {"topic": self.topic, "message": i, **detail}
        return CameraFrame(img, i, frame_id, stamp, self._label(i), self.path, detail)

    def _read(self, i: int) -> CameraFrame:
        with _as_source_errors():
            raw = self._c.message(self.topic, i)
            t_rec = self._c.times(self.topic)[i]
        return self._frame(raw, i, t_rec)

    def _iter(self) -> Iterator[CameraFrame]:
        stream = self._c.stream(self.topic)
        i = 0
        while True:
            with _as_source_errors():
                item = next(stream, None)
            if item is None:
                return
            t_rec, raw = item
            yield self._frame(raw, i, t_rec)
            i += 1

    def close(self) -> None:
        self._c.close()
        super().close()

    def _describe_extra(self, d: dict[str, Any]) -> None:
        d["topic"] = self.topic
        d["message_type"] = self.message_type
        d["steering_topic"] = self.steering_topic
        d["topics"] = [{"name": t.name, "type": t.msgtype, "count": t.count} for t in self.topics]
        d["time_source"] = "record times of the image messages"
        lab = d.get("labels")
        if lab and lab.get("unlabelled"):
            d["notes"].append(f"{lab['unlabelled']} frame(s) have no steering message within half a frame period "
                              f"on {self.steering_topic}")


class _RosImageSource(RecordingImageSource):
    image_types = ROS_IMAGE_TYPES

    def _deserialize(self, raw: bytes | memoryview, msgtype: str) -> Any:
        raise NotImplementedError

    def _msg(self, raw: bytes | memoryview, msgtype: str, where: str) -> Any:
        try:
            return self._deserialize(raw, msgtype)
        except Exception as err:  # rosbags' generated deserialisers raise assorted errors
            raise ImageSourceError(f"{where}: unreadable {msgtype} message ({err})") from err

    def _decode(self, raw, where):
        msg = self._msg(raw, self.message_type, where)
        st = msg.header.stamp
        stamp = int(st.sec) * 1_000_000_000 + int(st.nanosec) if (st.sec or st.nanosec) else None
        if self.kind == "raw":
            img = decode_raw(msg.data, height=msg.height, width=msg.width, encoding=msg.encoding, step=msg.step,
                             bigendian=bool(msg.is_bigendian), where=where)
            return img, stamp, {"encoding": msg.encoding}
        img = decode_compressed(msg.data, msg.format, where)
        return img, stamp, {"format": msg.format}

    def _steering_value(self, raw, where):
        assert self.steering_type is not None
        return float(self._msg(raw, self.steering_type, where).data)


class Ros1ImageSource(_RosImageSource):
    """A camera topic of a ROS1 bag."""

    format = "ros1"

    def _deserialize(self, raw, msgtype):
        from lidarmt.io.ros1 import TYPESTORE

        return TYPESTORE.deserialize_ros1(raw, msgtype)


class Ros2ImageSource(_RosImageSource):
    """A camera topic of a ROS2 bag folder (sqlite3 or mcap storage)."""

    format = "ros2"

    def _deserialize(self, raw, msgtype):
        from lidarmt.io.ros2 import TYPESTORE

        return TYPESTORE.deserialize_cdr(raw, msgtype)


class CyberImageSource(RecordingImageSource):
    """A camera channel of an Apollo Cyber record (``apollo.drivers.Image`` / ``CompressedImage``)."""

    format = "cyber"
    image_types = CYBER_IMAGE_TYPES

    def _choose_steering_topic(self, steering_topic):
        if steering_topic is not None:
            raise ImageSourceError(f"{self.path}: steering labels are read from ROS bags only (std_msgs/Float64); "
                                   f"drop --steering-topic for a Cyber record")
        return None, None

    def _decode(self, raw, where):
        from google.protobuf.message import DecodeError

        from lidarmt.proto.drivers import CompressedImage, Image

        cls = Image if self.kind == "raw" else CompressedImage
        try:
            msg = cls.FromString(bytes(raw))
        except DecodeError as err:
            raise ImageSourceError(f"{where}: corrupt {self.message_type} message ({err})") from err
        if msg.measurement_time:
            stamp = round(msg.measurement_time * 1e9)
        elif msg.header.camera_timestamp:
            stamp = int(msg.header.camera_timestamp)
        elif msg.header.timestamp_sec:
            stamp = round(msg.header.timestamp_sec * 1e9)
        else:
            stamp = None
        if self.kind == "raw":
            img = decode_raw(msg.data, height=msg.height, width=msg.width, encoding=msg.encoding, step=msg.step,
                             where=where)
            return img, stamp, {"encoding": msg.encoding}
        return decode_compressed(msg.data, msg.format, where), stamp, {"format": msg.format}
