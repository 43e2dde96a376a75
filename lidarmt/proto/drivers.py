"""``apollo.drivers``: PointCloud and PointXYZIT, the Cyber point cloud (apollo-proto-facts.md §2); Image and
CompressedImage, the Cyber camera messages.

Decoding 100k+ repeated ``PointXYZIT`` sub-messages through protobuf objects is slow, so
:mod:`lidarmt.io.cyber` walks the ``point`` field with a numba kernel using the field numbers below and decodes
only the rest of the message with :data:`PointCloud`; the tests cross-check both decoders.
"""

from __future__ import annotations

import lidarmt.proto.common  # noqa: F401  (defines apollo.common.Header)
from lidarmt.proto._schema import Field, Message, define_file
from lidarmt.proto.common import FILE as COMMON_FILE

FILE = "lidarmt/apollo/drivers/pointcloud.proto"

# field numbers, used by the fast wire decoder/encoder too
POINT_FIELD = 4
PT_X, PT_Y, PT_Z, PT_INTENSITY, PT_TIMESTAMP, PT_RING = 1, 2, 3, 4, 5, 6

_classes = define_file(
    FILE,
    "apollo.drivers",
    [
        Message(
            "PointXYZIT",
            [
                Field("x", PT_X, "float", default="nan"),
                Field("y", PT_Y, "float", default="nan"),
                Field("z", PT_Z, "float", default="nan"),
                Field("intensity", PT_INTENSITY, "uint32", default="0"),
                Field("timestamp", PT_TIMESTAMP, "uint64", default="0"),
                Field("ring", PT_RING, "uint32"),  # newer Apollo only
            ],
        ),
        Message(
            "PointCloud",
            [
                Field("header", 1, ".apollo.common.Header"),
                Field("frame_id", 2, "string"),
                Field("is_dense", 3, "bool"),
                Field("point", POINT_FIELD, "PointXYZIT", repeated=True),
                Field("measurement_time", 5, "double"),
                Field("width", 6, "uint32"),
                Field("height", 7, "uint32"),
            ],
        ),
    ],
    dependencies=[COMMON_FILE],
)

PointXYZIT = _classes["PointXYZIT"]
PointCloud = _classes["PointCloud"]
MESSAGE_TYPE = "apollo.drivers.PointCloud"

# The camera messages live in their own file, as in Apollo (so records of point clouds embed the same descriptor
# as before). Field numbers from ApolloAuto/apollo modules/common_msgs/sensor_msgs/sensor_image.proto
# @10046742f9c256bee29ab4bd1829f58a2a6fd016 (Apollo 8+; the Apollo 2.x-6.x modules/drivers/proto/sensor_image.proto
# has the same Image and a CompressedImage without fields 5 and 6). ``encoding`` is a string such as "rgb8",
# "bgr8", "mono8" or "yuyv"; ``data`` holds ``height`` rows of ``step`` bytes. CompressedImage ``format`` is
# "jpeg" or "png".
IMAGE_FILE = "lidarmt/apollo/drivers/sensor_image.proto"

_image_classes = define_file(
    IMAGE_FILE,
    "apollo.drivers",
    [
        Message(
            "Image",
            [
                Field("header", 1, ".apollo.common.Header"),
                Field("frame_id", 2, "string"),
                Field("measurement_time", 3, "double"),
                Field("height", 4, "uint32"),
                Field("width", 5, "uint32"),
                Field("encoding", 6, "string"),
                Field("step", 7, "uint32"),
                Field("data", 8, "bytes"),
            ],
        ),
        Message(
            "CompressedImage",
            [
                Field("header", 1, ".apollo.common.Header"),
                Field("frame_id", 2, "string"),
                Field("format", 3, "string"),
                Field("data", 4, "bytes"),
                Field("measurement_time", 5, "double"),
                Field("frame_type", 6, "uint32"),
            ],
        ),
    ],
    dependencies=[COMMON_FILE],
)

Image = _image_classes["Image"]
CompressedImage = _image_classes["CompressedImage"]
IMAGE_TYPE = "apollo.drivers.Image"
COMPRESSED_IMAGE_TYPE = "apollo.drivers.CompressedImage"

__all__ = ["COMPRESSED_IMAGE_TYPE", "FILE", "IMAGE_FILE", "IMAGE_TYPE", "MESSAGE_TYPE", "CompressedImage", "Image",
           "PointCloud", "PointXYZIT"]
