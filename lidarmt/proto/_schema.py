"""Protobuf message classes built from field tables, without generated ``*_pb2`` code.

lidarmt decodes Apollo's messages (HD maps, Cyber point clouds, transforms, record containers) with its own
definitions, written from the field numbers in Apollo's public .proto files. This module turns compact field tables
into ``FileDescriptorProto``s, adds them to a project-private descriptor pool, and returns the message classes.

Example::

    classes = define_file(
        "lidarmt/apollo/common.proto", "apollo.common",
        [Message("PointENU", [Field("x", 1, "double"), Field("y", 2, "double"), Field("z", 3, "double")])],
    )
    PointENU = classes["PointENU"]

Type names: scalar names (``double``, ``float``, ``int32``, ``int64``, ``uint32``, ``uint64``, ``sint32``,
``sint64``, ``fixed32``, ``fixed64``, ``sfixed32``, ``sfixed64``, ``bool``, ``string``, ``bytes``), a message
name (relative to the file's package, or fully qualified with a leading dot), or ``enum:Name`` for an enum.
All files are proto2, like Apollo's; repeated scalars are written unpacked unless ``packed=True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

POOL = descriptor_pool.DescriptorPool()
"""The descriptor pool holding every message lidarmt defines (separate from protobuf's default pool)."""

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _FDP.TYPE_DOUBLE,
    "float": _FDP.TYPE_FLOAT,
    "int32": _FDP.TYPE_INT32,
    "int64": _FDP.TYPE_INT64,
    "uint32": _FDP.TYPE_UINT32,
    "uint64": _FDP.TYPE_UINT64,
    "sint32": _FDP.TYPE_SINT32,
    "sint64": _FDP.TYPE_SINT64,
    "fixed32": _FDP.TYPE_FIXED32,
    "fixed64": _FDP.TYPE_FIXED64,
    "sfixed32": _FDP.TYPE_SFIXED32,
    "sfixed64": _FDP.TYPE_SFIXED64,
    "bool": _FDP.TYPE_BOOL,
    "string": _FDP.TYPE_STRING,
    "bytes": _FDP.TYPE_BYTES,
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field: name, number, type (see module doc), ``repeated`` flag, optional default and oneof."""

    name: str
    number: int
    type: str
    repeated: bool = False
    default: str | None = None  # proto2 default, as text (e.g. "nan", "1", "CITY_DRIVING")
    oneof: str | None = None
    packed: bool = False


@dataclass(frozen=True, slots=True)
class Enum:
    name: str
    values: Sequence[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    fields: Sequence[Field]
    enums: Sequence[Enum] = ()
    nested: Sequence[Message] = field(default_factory=tuple)


def _resolve(type_name: str, package: str) -> str:
    return type_name if type_name.startswith(".") else f".{package}.{type_name}"


def _message_proto(msg: Message, package: str, scope: str) -> descriptor_pb2.DescriptorProto:
    dp = descriptor_pb2.DescriptorProto(name=msg.name)
    for en in msg.enums:
        ep = dp.enum_type.add(name=en.name)
        for vname, vnum in en.values:
            ep.value.add(name=vname, number=vnum)
    for sub in msg.nested:
        dp.nested_type.append(_message_proto(sub, package, f"{scope}.{msg.name}"))
    oneofs: dict[str, int] = {}
    for f in msg.fields:
        fp = dp.field.add(name=f.name, number=f.number)
        fp.label = _FDP.LABEL_REPEATED if f.repeated else _FDP.LABEL_OPTIONAL
        if f.type in _SCALARS:
            fp.type = _SCALARS[f.type]
        elif f.type.startswith("enum:"):
            fp.type = _FDP.TYPE_ENUM
            fp.type_name = _resolve(f.type[5:], package)
        else:
            fp.type = _FDP.TYPE_MESSAGE
            fp.type_name = _resolve(f.type, package)
        if f.default is not None:
            fp.default_value = f.default
        if f.packed:
            fp.options.packed = True
        if f.oneof is not None:
            if f.oneof not in oneofs:
                oneofs[f.oneof] = len(dp.oneof_decl)
                dp.oneof_decl.add(name=f.oneof)
            fp.oneof_index = oneofs[f.oneof]
    return dp


def define_file(
    name: str,
    package: str,
    messages: Iterable[Message],
    *,
    enums: Iterable[Enum] = (),
    dependencies: Iterable[str] = (),
) -> dict[str, type]:
    """Add a proto2 file to :data:`POOL` and return its message classes by (dotted, package-relative) name.

    Nested messages are returned as ``"Outer.Inner"``. Defining the same file name twice returns the classes
    of the first definition (so modules can be re-imported safely).
    """
    messages = list(messages)
    try:
        POOL.FindFileByName(name)
    except KeyError:
        fdp = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto2")
        fdp.dependency.extend(dependencies)
        for en in enums:
            ep = fdp.enum_type.add(name=en.name)
            for vname, vnum in en.values:
                ep.value.add(name=vname, number=vnum)
        for msg in messages:
            fdp.message_type.append(_message_proto(msg, package, package))
        POOL.Add(fdp)

    out: dict[str, type] = {}

    def collect(msg: Message, prefix: str) -> None:
        full = f"{prefix}.{msg.name}" if prefix else msg.name
        desc = POOL.FindMessageTypeByName(f"{package}.{full}")
        out[full] = message_factory.GetMessageClass(desc)
        for sub in msg.nested:
            collect(sub, full)

    for msg in messages:
        collect(msg, "")
    return out


def message_class(full_name: str) -> type:
    """The class of a message already defined in :data:`POOL`, by its full name (e.g. ``apollo.common.Header``)."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def file_descriptor_bytes(file_name: str) -> bytes:
    """Serialized ``FileDescriptorProto`` of a file in :data:`POOL` (Cyber records embed these)."""
    fdp = descriptor_pb2.FileDescriptorProto()
    POOL.FindFileByName(file_name).CopyToProto(fdp)
    return fdp.SerializeToString()
