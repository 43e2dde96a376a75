"""Errors of the fuzzing layer (all user-fixable ones derive from :mod:`lidarmt.errors`)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError, LidarmtError, OutputError


class FuzzError(LidarmtError):
    """Base class of errors raised by lidarmt.lidar.mr1 on purpose."""


class FuzzArgumentError(ArgumentError, FuzzError):
    """A campaign option is out of range or inconsistent with the recording (bad --n, too many frames...)."""


class FuzzInputError(InputError, FuzzError):
    """A recording, map, journal or bundle cannot be used for fuzzing (no poses, corrupt journal, ...)."""


class FuzzOutputError(OutputError, FuzzError):
    """The run folder cannot be used (it exists without --resume/--force, the disk is full, ...)."""


class InjectionError(FuzzArgumentError):
    """Points cannot be injected (the region lies entirely inside the ROI, the frame has no points, ...)."""


class SutError(FuzzInputError):
    """The system under test cannot be built from its spec (unknown name, bad module:callable, bad options)."""


class ReplayMismatch(FuzzError):
    """A replayed bundle did not reproduce the recorded obstacles or verdict."""
