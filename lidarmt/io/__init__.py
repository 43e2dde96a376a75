"""Recordings in and out: ROS1/ROS2 bags, Apollo Cyber records, PCD (+ .pose) folders, KITTI folders, .npz frames.

``open_recording(path, topic=...)`` sniffs the path and returns a :class:`Recording`: a context manager and a
sequence of :class:`lidarmt.types.Frame` (``len``, ``rec[i]``, iteration that streams) with ``describe()`` for
``lidarmt info``. Writers (``Ros1BagWriter``, ``Ros2BagWriter``, ``CyberRecordWriter``, ``write_pcd``,
``write_pose_file``...) write atomically and refuse to overwrite unless ``overwrite=True``; every format they write
reads back the same frames.

Names are imported lazily so that ``import lidarmt.io`` stays cheap (no numba, no rosbags until used).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "open_recording": "lidarmt.io.factory",
    "sniff": "lidarmt.io.factory",
    "Recording": "lidarmt.io.base",
    "RecordingInfo": "lidarmt.io.base",
    "TopicInfo": "lidarmt.io.base",
    "APOLLO_POINTCLOUD_TOPIC": "lidarmt.io.bag",
    "Ros1Recording": "lidarmt.io.ros1",
    "Ros1BagWriter": "lidarmt.io.ros1",
    "write_ros1_bag": "lidarmt.io.ros1",
    "register_type": "lidarmt.io.ros1",
    "Ros2Recording": "lidarmt.io.ros2",
    "Ros2BagWriter": "lidarmt.io.ros2",
    "write_ros2_bag": "lidarmt.io.ros2",
    "CyberRecording": "lidarmt.io.cyber",
    "CyberRecordWriter": "lidarmt.io.cyber",
    "write_cyber_record": "lidarmt.io.cyber",
    "PcdRecording": "lidarmt.io.pcd",
    "read_pcd": "lidarmt.io.pcd",
    "write_pcd": "lidarmt.io.pcd",
    "write_pcd_folder": "lidarmt.io.pcd",
    "read_pose_file": "lidarmt.io.posefile",
    "write_pose_file": "lidarmt.io.posefile",
    "read_pose_txt": "lidarmt.io.posefile",
    "write_pose_txt": "lidarmt.io.posefile",
    "KittiRecording": "lidarmt.io.kitti",
    "KittiRawRecording": "lidarmt.io.kitti_raw",
    "write_kitti_raw_drive": "lidarmt.io.kitti_raw",
    "SemanticKittiRecording": "lidarmt.io.semantickitti",
    "write_semantickitti_sequence": "lidarmt.io.semantickitti",
    "NpzRecording": "lidarmt.io.npzdir",
    "write_npz_folder": "lidarmt.io.npzdir",
    "save_frame_npz": "lidarmt.io.npz",
    "load_frame_npz": "lidarmt.io.npz",
    "RecordingError": "lidarmt.io.errors",
    "FormatError": "lidarmt.io.errors",
    "TopicError": "lidarmt.io.errors",
    "NoPointCloudError": "lidarmt.io.errors",
    "PoseError": "lidarmt.io.errors",
    "WriterError": "lidarmt.io.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'lidarmt.io' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
