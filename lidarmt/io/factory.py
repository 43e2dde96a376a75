"""open_recording: one call for every recording format, chosen by looking at the path."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lidarmt.io.base import Recording
from lidarmt.io.errors import RecordingError

_CYBER_NAME = re.compile(r"\.record(\.\d+)?$")


def sniff(path: str | os.PathLike[str]) -> str:
    """The format name of a recording path: ros1, ros2, cyber, pcd, kitti, kitti-raw, semantickitti or npz.

    Files: ``#ROSBAG V2.0`` magic (any name) → ros1; ``*.record`` / ``*.record.NNNNN`` → cyber; ``.pcd`` → pcd;
    ``.npz`` → npz; ``.db3`` / ``.mcap`` → ros2 (its folder); ``.bin`` → kitti-raw inside
    ``velodyne_points/data/``, semantickitti inside a sequence's ``velodyne/``, kitti anywhere else. Folders:
    ``metadata.yaml`` or ``*.db3`` / ``*.mcap`` → ros2; a KITTI raw drive (``velodyne_points/``), its
    ``velodyne_points`` or ``velodyne_points/data`` folder → kitti-raw; ``velodyne/`` beside ``labels/``,
    ``poses.txt``, ``calib.txt`` or ``times.txt`` (or that ``velodyne`` folder) → semantickitti; ``velodyne/``,
    ``training/velodyne/`` or a ``velodyne`` folder of ``.bin`` scans → kitti; ``*.pcd`` → pcd; ``*.npz`` → npz.
    """
    from lidarmt.io.kitti_raw import drive_folder
    from lidarmt.io.semantickitti import sequence_folder

    p = Path(path)
    if not p.exists():
        raise RecordingError(f"{p}: no such file or folder")
    if p.is_file():
        from lidarmt.io.ros1 import is_ros1_bag

        name = p.name.lower()
        if is_ros1_bag(p):
            return "ros1"
        if name.endswith(".bag"):
            raise RecordingError(f"{p}: not a ROS1 bag (the file does not start with '#ROSBAG V2.0'); "
                                 f"is it empty or truncated?")
        if _CYBER_NAME.search(name):
            return "cyber"
        if name.endswith(".pcd"):
            return "pcd"
        if name.endswith(".npz"):
            return "npz"
        if is_plain_mcap(p):
            raise RecordingError(
                f"{p}: an MCAP file of Foxglove messages (lidarmt export and the bug bundles write these), not a "
                f"recording; `lidarmt info {p}` lists its topics, and a ROS2 bag is a folder with metadata.yaml")
        if name.endswith((".db3", ".mcap")):
            return "ros2"
        if name.endswith(".bin"):
            if drive_folder(p) is not None:
                return "kitti-raw"
            return "semantickitti" if sequence_folder(p) is not None else "kitti"
        from lidarmt.io.cyber import is_cyber_record

        if is_cyber_record(p):
            return "cyber"
        raise RecordingError(
            f"{p}: unknown recording format; expected a ROS1 .bag, a ROS2 bag folder, an Apollo .record, "
            f"a .pcd file or folder, a KITTI folder or .bin scan, or a lidarmt .npz frame folder"
        )
    if not p.is_dir():
        raise RecordingError(f"{p}: neither a file nor a folder")
    names = {c.name for c in p.iterdir()}
    if "metadata.yaml" in names or any(n.endswith((".db3", ".mcap")) for n in names):
        return "ros2"
    if drive_folder(p) is not None:
        return "kitti-raw"
    if sequence_folder(p) is not None:
        return "semantickitti"
    if (p / "velodyne").is_dir() or (p / "training" / "velodyne").is_dir():
        return "kitti"
    if p.name == "velodyne" and any(n.endswith(".bin") for n in names):
        return "kitti"
    drives = sorted(n for n in names if (p / n / "velodyne_points").is_dir())
    if drives:
        raise RecordingError(f"{p} is a folder of {len(drives)} KITTI raw drive(s); open one drive folder, "
                             f"e.g. {p / drives[0]}")
    seqs = sorted(n for n in names if sequence_folder(p / n) is not None)
    if seqs:
        raise RecordingError(f"{p} is a folder of {len(seqs)} SemanticKITTI sequence(s); open one, "
                             f"e.g. {p / seqs[0]}")
    if any(n.lower().endswith(".pcd") for n in names):
        return "pcd"
    if any(n.endswith(".npz") for n in names):
        return "npz"
    if any(_CYBER_NAME.search(n) for n in names):
        raise RecordingError(f"{p} is a folder of Cyber records; open one .record file (each is a recording)")
    if any(n.endswith(".bag") for n in names):
        raise RecordingError(f"{p} is a folder of ROS1 bags; open one .bag file")
    pcd_dirs = sorted(n for n in names if (p / n).is_dir() and any(c.suffix.lower() == ".pcd"
                                                                  for c in (p / n).iterdir()))
    if pcd_dirs:
        raise RecordingError(f"{p} holds no .pcd file itself but {len(pcd_dirs)} sub-folder(s) of them; open one "
                             f"folder, e.g. {p / pcd_dirs[0]}")
    raise RecordingError(f"{p}: folder holds no recording (no bag, metadata.yaml, .pcd, .npz, KITTI velodyne/, "
                         f"KITTI raw velodyne_points/ or SemanticKITTI sequence)")


def mcap_profile(path: str | os.PathLike[str]) -> str | None:
    """The profile in an MCAP file's header ("ros2" for a ROS2 bag's storage, "" for Foxglove's protobuf files
    that lidarmt writes), or None when the file is not MCAP (no magic, no header record)."""
    import struct

    from lidarmt._paths import open_readable
    from lidarmt.errors import UserError

    try:
        with open_readable(path, max_bytes=None) as fh:  # never blocks on a FIFO
            head = fh.read(8 + 1 + 8 + 4 + 256)
    except (OSError, UserError):
        return None
    if head[:8] != b"\x89MCAP0\r\n" or len(head) < 21 or head[8] != 0x01:  # magic, then the Header record
        return None
    (n,) = struct.unpack_from("<I", head, 17)
    return head[21:21 + n].decode("utf-8", "replace") if n <= 256 else None


def is_plain_mcap(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an MCAP file that is no ROS2 bag's storage (not profile "ros2", no metadata.yaml
    beside it): Foxglove messages as ``lidarmt export`` and the bug bundles write them, which ``lidarmt info``
    summarises and the campaigns refuse."""
    p = Path(path)
    return (p.is_file() and p.name.lower().endswith(".mcap") and not (p.parent / "metadata.yaml").is_file()
            and mcap_profile(p) not in (None, "ros2"))


def open_recording(
    path: str | os.PathLike[str],
    *,
    topic: str | None = None,
    require_pose: bool = False,
    allow_empty: bool = False,
    recover: bool = False,
) -> Recording:
    """Open a recording of any supported format (see :func:`sniff`).

    ``topic`` selects the point-cloud topic or channel of a bag or record (default: Apollo's
    ``/apollo/sensor/velodyne64/compensator/PointCloud2``, or the only cloud topic). ``require_pose=True`` makes
    reading a frame without a pose world <- sensor raise :class:`lidarmt.io.errors.PoseError`. A recording with no
    point clouds raises :class:`lidarmt.io.errors.NoPointCloudError` unless ``allow_empty=True`` (then it has 0
    frames, and ``describe()`` still lists its topics). A ROS1 bag without a usable index (truncated, or still
    being recorded) is an error unless ``recover=True``, which lists its messages by scanning the complete chunks
    (Cyber records without an index are always scanned, as Apollo's tools do).
    """
    fmt = sniff(path)
    p = Path(path)
    if fmt == "ros1":
        from lidarmt.io.ros1 import Ros1Recording

        return Ros1Recording(p, topic=topic, require_pose=require_pose, allow_empty=allow_empty, recover=recover)
    if fmt == "ros2":
        from lidarmt.io.ros2 import Ros2Recording

        return Ros2Recording(p if p.is_dir() else p.parent, topic=topic, require_pose=require_pose,
                             allow_empty=allow_empty)
    if fmt == "cyber":
        from lidarmt.io.cyber import CyberRecording

        return CyberRecording(p, topic=topic, require_pose=require_pose, allow_empty=allow_empty)
    if topic is not None:
        from lidarmt.io.errors import TopicError

        raise TopicError(f"{p}: a {fmt} recording has no topics; drop --topic")
    if fmt == "pcd":
        from lidarmt.io.pcd import PcdRecording

        return PcdRecording(p, require_pose=require_pose, allow_empty=allow_empty)
    if fmt == "kitti":
        from lidarmt.io.kitti import KittiRecording

        return KittiRecording(p, require_pose=require_pose, allow_empty=allow_empty)
    if fmt == "kitti-raw":
        from lidarmt.io.kitti_raw import KittiRawRecording

        return KittiRawRecording(p, require_pose=require_pose, allow_empty=allow_empty)
    if fmt == "semantickitti":
        from lidarmt.io.semantickitti import SemanticKittiRecording

        return SemanticKittiRecording(p, require_pose=require_pose, allow_empty=allow_empty)
    from lidarmt.io.npzdir import NpzRecording

    return NpzRecording(p, require_pose=require_pose, allow_empty=allow_empty)
