"""``apollo.transform``: Transform, TransformStamped, TransformStampeds (Cyber ``/tf``, ``/tf_static``; facts §3.2).

``TransformStamped.header.frame_id`` is the parent frame, ``child_frame_id`` the child; the transform maps child
coordinates into the parent (T(parent <- child)).
"""

from __future__ import annotations

import lidarmt.proto.common  # noqa: F401
from lidarmt.proto._schema import Field, Message, define_file
from lidarmt.proto.common import FILE as COMMON_FILE

FILE = "lidarmt/apollo/transform/transform.proto"

_classes = define_file(
    FILE,
    "apollo.transform",
    [
        Message("Transform", [Field("translation", 1, ".apollo.common.Point3D"),
                               Field("rotation", 2, ".apollo.common.Quaternion")]),
        Message("TransformStamped", [Field("header", 1, ".apollo.common.Header"), Field("child_frame_id", 2, "string"),
                                     Field("transform", 3, "Transform")]),
        Message("TransformStampeds", [Field("header", 1, ".apollo.common.Header"),
                                      Field("transforms", 2, "TransformStamped", repeated=True)]),
    ],
    dependencies=[COMMON_FILE],
)

Transform = _classes["Transform"]
TransformStamped = _classes["TransformStamped"]
TransformStampeds = _classes["TransformStampeds"]
MESSAGE_TYPE = "apollo.transform.TransformStampeds"

__all__ = ["FILE", "MESSAGE_TYPE", "Transform", "TransformStamped", "TransformStampeds"]
