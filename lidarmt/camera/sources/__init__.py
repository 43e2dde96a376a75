"""Image sources: one reader per layout behind :func:`open_images`, which sniffs the path.

============  =====================================================================  ============
format        what                                                                   labels
============  =====================================================================  ============
``udacity``   ``center/*.jpg`` + ``steering.csv`` (:mod:`.udacity`)                  the CSV's
``images``    a folder of jpg/png/bmp files, natural name order (:mod:`.folder`)     none
``ros1``      a camera topic of a ROS1 bag (:mod:`.recording`)                       Float64 topic
``ros2``      a camera topic of a ROS2 bag folder (sqlite3, mcap)                    Float64 topic
``cyber``     an ``apollo.drivers.Image`` / ``CompressedImage`` channel of a record  none
============  =====================================================================  ============

Every source follows :class:`lidarmt.camera.sources.base.ImageSource`: ``len``, ``src[i]``, iteration in time
order, ``describe()`` and ``close()``; frames are :class:`lidarmt.camera.types.CameraFrame` (RGB uint8, labels in
radians). Decoding (opencv) lives in :mod:`.decode`.
"""

from lidarmt.camera.sources.base import ImageSource
from lidarmt.camera.sources.factory import FORMATS, open_images, sniff_images

__all__ = ["FORMATS", "ImageSource", "open_images", "sniff_images"]
