"""Errors of the HD-map and ROI layer (lidarmt.lidar.roi).

All are :class:`lidarmt.errors.UserError` subclasses: the CLI prints the message as one line and exits non-zero.
"""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError


class MapError(InputError):
    """A map is missing, of an unknown format, corrupt, empty, or does not match the recording's coordinates."""


class MapFormatError(MapError):
    """The bytes or text of a map file do not follow the format its name (or content) announces."""


class MapProjectionError(MapError):
    """The sensor positions lie far (thousands of km) outside the map: the map and the recording disagree."""


class RoiArgumentError(ArgumentError):
    """An ROI option (range, cell size, radius, pose shape) is out of range."""


class MapProjectionWarning(UserWarning):
    """The sensor is outside the map's bounds by more than the query radius (but not absurdly far)."""
