"""Errors of the simulator (all user-fixable ones derive from lidarmt.errors)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, OutputError


class SimArgumentError(ArgumentError):
    """A simulator argument is out of range (frame count, seed, size)."""


class SimOutputError(OutputError):
    """The simulator cannot write where it was asked to (the target exists, no permission)."""
