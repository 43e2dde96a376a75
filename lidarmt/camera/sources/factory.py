"""open_images: one call for every image source, chosen by looking at the path (as lidarmt.io.open_recording)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.sources.base import ImageSource
from lidarmt.camera.sources.decode import IMAGE_SUFFIXES
from lidarmt.camera.sources.folder import is_image_name

_CYBER_NAME = re.compile(r"\.record(\.\d+)?$")

FORMATS = ("udacity", "images", "ros1", "ros2", "cyber")


def sniff_images(path: str | os.PathLike[str]) -> str:
    """The image-source format of a path: udacity, images, ros1, ros2 or cyber.

    Files: ``#ROSBAG V2.0`` magic (any name) → ros1; ``*.record`` / ``*.record.NNNNN`` or a Cyber header → cyber;
    ``.db3`` / ``.mcap`` → ros2 (its folder); ``.csv`` → udacity (the CSV's folder); an image file → images (one
    frame). Folders: ``metadata.yaml`` or ``*.db3`` / ``*.mcap`` → ros2; a ``center/`` sub-folder, or
    ``steering.csv`` / ``interpolated.csv`` beside images → udacity; image files → images.
    """
    p = Path(path)
    if not p.exists():
        raise ImageSourceError(f"{p}: no such file or folder")
    if p.is_file():
        from lidarmt.io.cyber import is_cyber_record
        from lidarmt.io.ros1 import is_ros1_bag

        name = p.name.lower()
        if is_ros1_bag(p):
            return "ros1"
        if name.endswith(".bag"):
            raise ImageSourceError(f"{p}: not a ROS1 bag (the file does not start with '#ROSBAG V2.0'); is it "
                                   f"empty or truncated?")
        if _CYBER_NAME.search(name) or is_cyber_record(p):
            return "cyber"
        if name.endswith((".db3", ".mcap")):
            return "ros2"
        if name.endswith(".csv"):
            return "udacity"
        if is_image_name(p.name):
            return "images"
        raise ImageSourceError(f"{p}: unknown image source; expected a folder of images, a Udacity folder "
                               f"(center/ + steering.csv), a ROS1 .bag, a ROS2 bag folder or an Apollo .record")
    if not p.is_dir():
        raise ImageSourceError(f"{p}: neither a file nor a folder")
    try:
        names = [c.name for c in p.iterdir()]
    except OSError as err:
        raise ImageSourceError(f"{p}: unreadable folder ({err.strerror or err})") from err
    if "metadata.yaml" in names or any(n.endswith((".db3", ".mcap")) for n in names):
        return "ros2"
    if (p / "center").is_dir():
        return "udacity"
    has_images = any(is_image_name(n) for n in names)
    if has_images and any(n in ("steering.csv", "interpolated.csv") for n in names):
        return "udacity"
    if has_images:
        return "images"
    if any(_CYBER_NAME.search(n) for n in names):
        raise ImageSourceError(f"{p} is a folder of Cyber records; open one .record file")
    if any(n.endswith(".bag") for n in names):
        raise ImageSourceError(f"{p} is a folder of ROS1 bags; open one .bag file")
    raise ImageSourceError(f"{p}: no images in this folder (expected {', '.join(IMAGE_SUFFIXES)} files, a "
                           f"center/ sub-folder with a steering CSV, or a ROS2 bag)")


def open_images(
    path: str | os.PathLike[str],
    *,
    topic: str | None = None,
    steering_topic: str | None = None,
) -> ImageSource:
    """Open an image source of any supported kind (see :func:`sniff_images`); use it as a context manager.

    * a **Udacity-style folder** (``center/*.jpg`` + ``steering.csv``), or its CSV: labelled frames in time
      order (:mod:`lidarmt.camera.sources.udacity` says which CSV columns are read);
    * a **folder of images** (jpg, png, bmp): unlabelled frames in natural name order;
    * a **camera topic of a recording**: ROS1 bag, ROS2 bag folder, Cyber record. ``topic`` picks the image
      topic (default: the only one, else ``lidarmt simulate``'s camera); ``steering_topic`` the
      ``std_msgs/Float64`` steering angles paired with the images (default: ``lidarmt simulate``'s
      ``/lidarmt/steering_angle`` when present).

    Frames stream in order (``for f in src``), are randomly accessible (``src[i]``, decoded on demand) and are
    RGB ``uint8``; ``len(src)`` is known at once. Opening reads only what indexes the frames (a CSV, a folder
    listing, a bag index), so re-opening a source in each worker process is cheap and gives the same frames.
    Bad input raises :class:`lidarmt.camera.errors.ImageSourceError` with a one-line message.
    """
    fmt = sniff_images(path)
    p = Path(path)
    if fmt in ("ros1", "ros2", "cyber"):
        from lidarmt.camera.sources.recording import CyberImageSource, Ros1ImageSource, Ros2ImageSource

        if fmt == "ros2" and p.is_file():
            p = p.parent
        cls = {"ros1": Ros1ImageSource, "ros2": Ros2ImageSource, "cyber": CyberImageSource}[fmt]
        return cls(p, topic=topic, steering_topic=steering_topic)
    if topic is not None or steering_topic is not None:
        opt = "--topic" if topic is not None else "--steering-topic"
        raise ImageSourceError(f"{p}: a {fmt} source has no topics; drop {opt}")
    if fmt == "udacity":
        from lidarmt.camera.sources.udacity import UdacitySource

        return UdacitySource(p)
    from lidarmt.camera.sources.folder import ImageFolderSource

    return ImageFolderSource(p)
