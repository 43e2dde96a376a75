"""``apollo.localization``: LocalizationEstimate, Pose, Uncertainty (facts §3.1).

Only the fields lidarmt uses or writes are defined (1-4 of LocalizationEstimate); the others (trajectory points,
MSF status) stay as unknown fields, which protobuf keeps and re-serialises. ``Pose.orientation`` rotates the
vehicle frame **RFU** (x right, y forward, z up) into world ENU; ``heading = yaw(q) + π/2``.
"""

from __future__ import annotations

import lidarmt.proto.common  # noqa: F401
from lidarmt.proto._schema import Field, Message, define_file
from lidarmt.proto.common import FILE as COMMON_FILE

FILE = "lidarmt/apollo/localization/localization.proto"
_P3 = ".apollo.common.Point3D"

_classes = define_file(
    FILE,
    "apollo.localization",
    [
        Message(
            "Pose",
            [
                Field("position", 1, ".apollo.common.PointENU"),
                Field("orientation", 2, ".apollo.common.Quaternion"),
                Field("linear_velocity", 3, _P3),
                Field("linear_acceleration", 4, _P3),
                Field("angular_velocity", 5, _P3),
                Field("heading", 6, "double"),
                Field("linear_acceleration_vrf", 7, _P3),
                Field("angular_velocity_vrf", 8, _P3),
                Field("euler_angles", 9, _P3),
            ],
        ),
        Message(
            "Uncertainty",
            [
                Field("position_std_dev", 1, _P3),
                Field("orientation_std_dev", 2, _P3),
                Field("linear_velocity_std_dev", 3, _P3),
                Field("linear_acceleration_std_dev", 4, _P3),
                Field("angular_velocity_std_dev", 5, _P3),
            ],
        ),
        Message(
            "LocalizationEstimate",
            [
                Field("header", 1, ".apollo.common.Header"),
                Field("pose", 2, "Pose"),
                Field("uncertainty", 3, "Uncertainty"),
                Field("measurement_time", 4, "double"),
            ],
        ),
    ],
    dependencies=[COMMON_FILE],
)

Pose = _classes["Pose"]
Uncertainty = _classes["Uncertainty"]
LocalizationEstimate = _classes["LocalizationEstimate"]
MESSAGE_TYPE = "apollo.localization.LocalizationEstimate"

__all__ = ["FILE", "MESSAGE_TYPE", "LocalizationEstimate", "Pose", "Uncertainty"]
