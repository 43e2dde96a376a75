"""Errors of the bench layer (user-fixable ones derive from :mod:`lidarmt.errors`)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError, LidarmtError, OutputError


class BenchError(LidarmtError):
    """Base class of errors raised by lidarmt.bench on purpose."""


class BenchArgumentError(ArgumentError, BenchError):
    """A bench option is out of range or inconsistent (one module, a baseline run with other frames, ...)."""


class BenchInputError(InputError, BenchError):
    """A bench folder, a baseline folder or a module's journal cannot be used."""


class BenchOutputError(OutputError, BenchError):
    """The bench folder cannot be used (it exists without --resume/--force, ...)."""
