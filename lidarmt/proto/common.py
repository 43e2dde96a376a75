"""``apollo.common``: Header, StatusPb, PointENU, Point3D, Quaternion (field numbers: apollo-proto-facts.md §2, §3)."""

from __future__ import annotations

from lidarmt.proto._schema import Enum, Field, Message, define_file

FILE = "lidarmt/apollo/common.proto"

_classes = define_file(
    FILE,
    "apollo.common",
    [
        Message(
            "StatusPb",
            [Field("error_code", 1, "enum:ErrorCode", default="OK"), Field("msg", 2, "string")],
        ),
        Message(
            "Header",
            [
                Field("timestamp_sec", 1, "double"),
                Field("module_name", 2, "string"),
                Field("sequence_num", 3, "uint32"),
                Field("lidar_timestamp", 4, "uint64"),
                Field("camera_timestamp", 5, "uint64"),
                Field("radar_timestamp", 6, "uint64"),
                Field("version", 7, "uint32", default="1"),
                Field("status", 8, "StatusPb"),
                Field("frame_id", 9, "string"),
            ],
        ),
        Message(
            "PointENU",
            [
                Field("x", 1, "double", default="nan"),
                Field("y", 2, "double", default="nan"),
                Field("z", 3, "double", default="0"),
            ],
        ),
        Message(
            "Point3D",
            [Field("x", 1, "double", default="nan"), Field("y", 2, "double", default="nan"),
             Field("z", 3, "double", default="nan")],
        ),
        Message(
            "Quaternion",
            [
                Field("qx", 1, "double", default="nan"),
                Field("qy", 2, "double", default="nan"),
                Field("qz", 3, "double", default="nan"),
                Field("qw", 4, "double", default="nan"),
            ],
        ),
    ],
    # Only OK is needed to decode; other codes arrive as unknown enum values and are kept as integers.
    enums=[Enum("ErrorCode", [("OK", 0)])],
)

StatusPb = _classes["StatusPb"]
Header = _classes["Header"]
PointENU = _classes["PointENU"]
Point3D = _classes["Point3D"]
Quaternion = _classes["Quaternion"]

__all__ = ["FILE", "Header", "Point3D", "PointENU", "Quaternion", "StatusPb"]
