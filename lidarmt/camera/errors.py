"""Errors of the camera half (user-fixable ones derive from :mod:`lidarmt.errors`)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError, LidarmtError, OutputError


class CameraError(LidarmtError):
    """Base class of errors raised by lidarmt.camera on purpose."""


class ImageSourceError(InputError, CameraError):
    """An image source cannot be read: missing or unreadable images, a bad CSV, an unknown image encoding."""


class ModelError(InputError, CameraError):
    """A steering model cannot be built or loaded (unknown name, unsupported Keras layer, bad weights file)."""


class TransformError(ArgumentError, CameraError):
    """An unknown transformation name or a parameter out of its range."""


class CameraArgumentError(ArgumentError, CameraError):
    """A camera command's option is out of range or inconsistent with the input."""


class CameraOutputError(OutputError, CameraError):
    """A camera command's output location cannot be used."""
