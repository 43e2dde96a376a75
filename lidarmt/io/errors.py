"""Errors of the recordings layer (lidarmt.io).

Every one of them is a :class:`lidarmt.errors.UserError`: the CLI prints the message as one line and exits
non-zero. Messages name the file (and topic, frame or offset) at fault and say what to do about it.
"""

from __future__ import annotations

from lidarmt.errors import InputError, OutputError

#: The one wording for a frame without a pose, used by ``describe()`` (``lidarmt info``) and by the commands that
#: refuse such a frame (``lidarmt roi``): nothing is assumed in its place.
NO_POSE = "no pose (world <- sensor)"


class _OneLine:
    """Messages are kept on one line: a message quoting a library's error (YAML, SQLite...) may hold newlines,
    and the CLI prints a user error as exactly one line."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(" ".join(str(message).split()), *args)


class RecordingError(_OneLine, InputError):
    """A recording is missing, of an unknown kind, truncated, corrupt or holds nothing usable."""


class FormatError(RecordingError):
    """The bytes of a recording do not follow its format (bad magic, truncated section, bad field layout)."""


class TopicError(RecordingError):
    """The asked-for topic is absent, or is not a point-cloud topic; the message lists the ones that exist."""


class NoPointCloudError(RecordingError):
    """The recording is readable but holds no point cloud at all."""


class PoseError(RecordingError):
    """A frame has no pose (world <- sensor) although one is needed, or the pose data is unusable."""


class WriterError(_OneLine, OutputError):
    """A recording cannot be written (target exists without ``overwrite=True``, bad frame, disk error)."""
