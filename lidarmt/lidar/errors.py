"""Errors of the LiDAR transformations (user-fixable ones derive from :mod:`lidarmt.errors`)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError, LidarmtError


class LidarError(LidarmtError):
    """Base class of errors raised by lidarmt.lidar on purpose."""


class LidarTransformError(ArgumentError, LidarError):
    """An unknown LiDAR transformation, an unknown parameter name or a parameter out of its range."""


class ObjectLibraryError(InputError, LidarError):
    """An object library cannot be built or read (missing labels, no object with enough points)."""
