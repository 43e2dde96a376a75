"""``apollo.cyber.proto``: the Cyber RT record container (Header, Channel, chunks, Index; facts §4.2).

lidarmt parses the section framing itself (:mod:`lidarmt.io.cyber`) and these messages with the classes below.
"""

from __future__ import annotations

from lidarmt.proto._schema import Enum, Field, Message, define_file

FILE = "lidarmt/apollo/cyber/record.proto"

SECTION_HEADER, SECTION_CHUNK_HEADER, SECTION_CHUNK_BODY, SECTION_INDEX, SECTION_CHANNEL = range(5)
COMPRESS_NONE, COMPRESS_BZ2, COMPRESS_LZ4 = range(3)
HEADER_LENGTH = 2048  # the Header section is padded to this many bytes after its 16-byte section header

_u64 = "uint64"

_classes = define_file(
    FILE,
    "apollo.cyber.proto",
    [
        Message("MapInfo", [Field("name", 1, "string"), Field("version", 2, "string")]),
        Message("VehicleInfo", [Field("name", 1, "string")]),
        Message(
            "Header",
            [
                Field("major_version", 1, "uint32"),
                Field("minor_version", 2, "uint32"),
                Field("compress", 3, "enum:CompressType"),
                Field("chunk_interval", 4, _u64),
                Field("segment_interval", 5, _u64),
                Field("index_position", 6, _u64, default="0"),
                Field("chunk_number", 7, _u64),
                Field("channel_number", 8, _u64),
                Field("begin_time", 9, _u64),
                Field("end_time", 10, _u64),
                Field("message_number", 11, _u64),
                Field("size", 12, _u64),
                Field("is_complete", 13, "bool", default="false"),
                Field("chunk_raw_size", 14, _u64),
                Field("segment_raw_size", 15, _u64),
                Field("map_info", 16, "MapInfo"),
                Field("vehicle_info", 17, "VehicleInfo"),
            ],
        ),
        Message("ProtoDesc", [Field("desc", 1, "bytes"), Field("dependencies", 2, "ProtoDesc", repeated=True)]),
        Message("Channel", [Field("name", 1, "string"), Field("message_type", 2, "string"),
                            Field("proto_desc", 3, "bytes")]),
        Message("ChunkHeader", [Field("begin_time", 1, _u64), Field("end_time", 2, _u64),
                                Field("message_number", 3, _u64), Field("raw_size", 4, _u64)]),
        Message("SingleMessage", [Field("channel_name", 1, "string"), Field("time", 2, _u64),
                                  Field("content", 3, "bytes")]),
        Message("ChunkBody", [Field("messages", 1, "SingleMessage", repeated=True)]),
        Message("ChannelCache", [Field("message_number", 1, _u64), Field("name", 2, "string"),
                                 Field("message_type", 3, "string"), Field("proto_desc", 4, "bytes")]),
        Message("ChunkHeaderCache", [Field("message_number", 1, _u64), Field("begin_time", 2, _u64),
                                     Field("end_time", 3, _u64), Field("raw_size", 4, _u64)]),
        Message("ChunkBodyCache", [Field("message_number", 1, _u64)]),
        Message(
            "SingleIndex",
            [
                Field("type", 1, "enum:SectionType"),
                Field("position", 2, _u64),
                Field("channel_cache", 101, "ChannelCache", oneof="cache"),
                Field("chunk_header_cache", 102, "ChunkHeaderCache", oneof="cache"),
                Field("chunk_body_cache", 103, "ChunkBodyCache", oneof="cache"),
            ],
        ),
        Message("Index", [Field("indexes", 1, "SingleIndex", repeated=True)]),
    ],
    enums=[
        Enum("SectionType", [("SECTION_HEADER", 0), ("SECTION_CHUNK_HEADER", 1), ("SECTION_CHUNK_BODY", 2),
                             ("SECTION_INDEX", 3), ("SECTION_CHANNEL", 4)]),
        Enum("CompressType", [("COMPRESS_NONE", 0), ("COMPRESS_BZ2", 1), ("COMPRESS_LZ4", 2)]),
    ],
)

MapInfo = _classes["MapInfo"]
VehicleInfo = _classes["VehicleInfo"]
Header = _classes["Header"]
ProtoDesc = _classes["ProtoDesc"]
Channel = _classes["Channel"]
ChunkHeader = _classes["ChunkHeader"]
SingleMessage = _classes["SingleMessage"]
ChunkBody = _classes["ChunkBody"]
ChannelCache = _classes["ChannelCache"]
ChunkHeaderCache = _classes["ChunkHeaderCache"]
ChunkBodyCache = _classes["ChunkBodyCache"]
SingleIndex = _classes["SingleIndex"]
Index = _classes["Index"]
