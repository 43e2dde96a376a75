"""Errors of the coverage package: user errors (a bad profile file, a profile of another model, bad options)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError


class ProfileError(InputError):
    """A profile file that cannot be read, or that belongs to another model or layer selection."""


class CoverageArgumentError(ArgumentError):
    """A bad coverage option (criterion name, threshold, k, layer filter)."""
