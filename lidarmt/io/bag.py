"""What ROS1 and ROS2 bag readers share: choosing the cloud topic, the TF buffer, turning a cloud into a Frame."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from lidarmt.io.base import Recording, RecordingInfo, TopicInfo
from lidarmt.io.cloud import to_points
from lidarmt.io.errors import FormatError, NoPointCloudError, TopicError
from lidarmt.io.pointcloud2 import POINTCLOUD2_TYPES, Cloud
from lidarmt.io.tf import LoadedWindows, TfBuffer
from lidarmt.types import Frame, Provenance

APOLLO_POINTCLOUD_TOPIC = "/apollo/sensor/velodyne64/compensator/PointCloud2"
APOLLO_RAW_POINTCLOUD_TOPIC = "/apollo/sensor/velodyne64/PointCloud2"
TF_TOPICS = ("/tf", "/tf_static")
TF_TYPES = frozenset({"tf2_msgs/msg/TFMessage", "tf/msg/tfMessage", "tf2_msgs/TFMessage", "tf/tfMessage"})


def choose_cloud_topic(path: Path, topics: list[TopicInfo], topic: str | None, *, cloud_types=POINTCLOUD2_TYPES,
                       kind: str = "PointCloud2") -> str:
    """The point-cloud topic to read: ``topic`` if given (it must exist and hold clouds), else Apollo's."""
    clouds = [t for t in topics if t.msgtype in cloud_types]
    listing = ", ".join(f"{t.name} ({t.msgtype}, {t.count})" for t in topics) or "none"
    if topic is not None:
        match = [t for t in topics if t.name == topic or t.name == "/" + topic.lstrip("/")]
        if not match:
            have = ", ".join(t.name for t in clouds) or "none"
            raise TopicError(f"{path}: no topic {topic!r}; {kind} topics in it: {have} (all topics: {listing})")
        if match[0].msgtype not in cloud_types:
            have = ", ".join(t.name for t in clouds) or "none"
            raise TopicError(f"{path}: topic {topic!r} is {match[0].msgtype}, not {kind}; {kind} topics: {have}")
        return match[0].name
    if not clouds:
        raise NoPointCloudError(f"{path}: no {kind} topic in this recording (topics: {listing})")
    names = [t.name for t in clouds]
    for preferred in (APOLLO_POINTCLOUD_TOPIC, APOLLO_RAW_POINTCLOUD_TOPIC):
        if preferred in names:
            return preferred
    if len(clouds) == 1:
        return clouds[0].name
    raise TopicError(f"{path}: several {kind} topics ({', '.join(names)}); choose one with --topic / topic=")


class BagRecording(Recording):
    """A bag (ROS1 or ROS2): PointCloud2 frames, poses from /tf + /tf_static."""

    def __init__(self, path, *, topic: str | None = None, require_pose: bool = False, allow_empty: bool = False,
                 world_frame: str | None = None, max_extrapolation: float = 0.1, recover: bool = False) -> None:
        super().__init__(path, topic=topic, require_pose=require_pose)
        self.recover = recover
        self.world_frame = world_frame
        self.max_extrapolation = max_extrapolation
        self._tf: TfBuffer | None = None
        self._tf_all = False  # all of /tf loaded (after a window held nothing usable)
        self._cloud_frame: str | None = None
        self._open_bag()
        try:
            topics = self.topics()
            try:
                self.topic = choose_cloud_topic(self.path, topics, topic)
            except NoPointCloudError:
                if not allow_empty:
                    raise
                self.topic = None
            self._select(self.topic)
        except BaseException:
            self.close()
            raise

    # subclass hooks
    @abc.abstractmethod
    def _open_bag(self) -> None: ...

    @abc.abstractmethod
    def _select(self, topic: str | None) -> None:
        """Prepare random access to the messages of ``topic`` (None: no clouds)."""

    @abc.abstractmethod
    def _raw(self, i: int) -> bytes | memoryview: ...

    @abc.abstractmethod
    def _iter_raw(self) -> Iterator[bytes | memoryview]: ...

    @abc.abstractmethod
    def _tf_messages(self, static: bool, start_ns: int | None = None, stop_ns: int | None = None
                     ) -> Iterator[object]:
        """Deserialised TFMessages of /tf_static (``static``) or of /tf recorded in [start_ns, stop_ns)."""

    parse: Callable[[bytes | memoryview], Cloud]

    # frames
    def _frame(self, raw: bytes | memoryview, i: int) -> Frame:
        where = f"{self.path}: topic {self.topic} message {i}"
        try:
            cloud = type(self).parse(raw)
            cloud.layout.check_xyz(where)
            view = cloud.layout.view(cloud.data, cloud.num_points)
        except FormatError as err:
            if str(err).startswith(str(self.path)):
                raise
            raise FormatError(f"{where}: {err}") from err
        points, dropped = to_points(view, cloud.layout, stamp=cloud.stamp)
        frame_id = cloud.frame_id.lstrip("/") or "velodyne64"
        if self._cloud_frame is None:
            self._cloud_frame = frame_id
        pose = self.pose_at(frame_id, cloud.stamp)
        return Frame(points, pose, cloud.stamp, frame_id, Provenance(str(self.path), self.format, i, self.topic),
                     dropped=dropped)

    def _read(self, i: int) -> Frame:
        return self._frame(self._raw(i), i)

    def _iter(self) -> Iterator[Frame]:
        for i, raw in enumerate(self._iter_raw()):
            yield self._frame(raw, i)

    # poses
    TF_WINDOW = 0.25
    """/tf messages recorded within this many seconds of a cloud's stamp are loaded to find its pose (tf2 needs the
    samples bracketing the stamp: Apollo publishes /tf at 100 Hz, lidarmt's writers with every cloud). When the
    window holds no usable pair, all of /tf is read once (see :meth:`pose_at`)."""

    @property
    def tf(self) -> TfBuffer:
        """The transform buffer: all of /tf_static, and /tf around the stamps read so far."""
        if self._tf is None:
            self._tf = TfBuffer(max_extrapolation=self.max_extrapolation)
            self._tf_loaded = LoadedWindows()
            self._add_tf(self._tf_messages(True), static=True)
        return self._tf

    def _add_tf(self, msgs: Iterator[object], *, static: bool) -> None:
        buf = self._tf
        assert buf is not None
        for msg in msgs:
            for ts in msg.transforms:  # type: ignore[attr-defined]
                st = ts.header.stamp
                t = (st.sec * 1_000_000_000 + st.nanosec) * 1e-9  # as Cloud.stamp
                tr, q = ts.transform.translation, ts.transform.rotation
                try:
                    buf.add(ts.header.frame_id, ts.child_frame_id, t, (tr.x, tr.y, tr.z), (q.x, q.y, q.z, q.w),
                            static=static)
                except (ValueError, ZeroDivisionError, FloatingPointError):
                    continue  # a zero quaternion: skip the sample

    def pose_at(self, frame_id: str, stamp: float) -> np.ndarray | None:
        """T(world <- frame_id) at ``stamp`` from /tf + /tf_static, or None."""
        buf = self.tf
        w = int(self.TF_WINDOW * 1e9)
        t = int(round(stamp * 1e9))
        for lo, hi in self._tf_loaded.missing(t - w, t + w):
            self._add_tf(self._tf_messages(False, lo, hi), static=False)
        pose = buf.lookup(self.world_frame, frame_id, stamp) if buf.has_dynamic(frame_id) else None
        if pose is None and not self._tf_all:
            # the record times may not follow the header stamps (e.g. simulated time recorded with wall-clock
            # bag times): read all of /tf once and try again
            self._tf_all = True
            for lo, hi in self._tf_loaded.missing(-(2**62), 2**62):
                self._add_tf(self._tf_messages(False, lo, hi), static=False)
            pose = buf.lookup(self.world_frame, frame_id, stamp) if buf.has_dynamic(frame_id) else None
        return pose

    def _sensor_frame(self) -> str:
        if self._cloud_frame is None and self.topic is not None and len(self):
            self._read(0)
        return self._cloud_frame or "velodyne64"

    @property
    def pose_source(self) -> str:
        if self.topic is None or not len(self):
            return "none"
        first = self._read(0)  # loads the /tf around the first cloud
        if first.pose is None and not self.tf.has_dynamic(first.frame_id):
            return f"none (no /tf chain to {first.frame_id})"
        chain = self.tf.describe_chain(self._sensor_frame())
        if chain == "none":
            return f"none (no /tf chain to {self._sensor_frame()})"
        return f"/tf + /tf_static: {chain}"

    def _describe_extra(self, info: RecordingInfo) -> None:
        if self.topic is None:
            return
        if info.frames_scanned and info.frames_with_pose == 0 and "none" not in self.pose_source:
            info.notes.append("the /tf samples do not cover the cloud stamps: no frame has a pose")


def stamp_ns(stamp: float) -> int:
    """Nanoseconds of a stamp in seconds (rounded)."""
    return int(round(float(stamp) * 1e9))


def check_frame(frame: Frame) -> None:
    from lidarmt.io.errors import WriterError

    if not isinstance(frame, Frame):
        raise WriterError(f"expected a lidarmt Frame, got {type(frame).__name__}")
    if frame.pose is not None and not np.all(np.isfinite(frame.pose)):
        raise WriterError(f"frame {frame.index} has a non-finite pose")
