"""Errors of the Apollo perception pipeline (all :class:`lidarmt.errors.UserError` subclasses where a user can fix them)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError


class WeightsError(InputError):
    """The CNN weights file is missing, unreadable, or does not fit the network."""


class ConfigError(ArgumentError):
    """An ``ApolloConfig`` value is unknown or out of range (e.g. a bad ``--set key=value``)."""
