"""``apollo.drivers``: PointCloud and PointXYZIT, the Cyber point cloud (apollo-proto-facts.md §2).

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

__all__ = ["FILE", "MESSAGE_TYPE", "PointCloud", "PointXYZIT"]
