"""The exception hierarchy of lidarmt.

Every error a user can cause (a missing or corrupt file, an unknown topic, a bad argument) derives from
:class:`UserError`; the CLI prints its message as one line and exits non-zero, without a traceback. Messages
name the file or value at fault and say what to do about it. Packages add their own subclasses in their own
``errors.py`` and chain the underlying exception (``raise ReaderError(...) from err``).
"""

from __future__ import annotations


class LidarmtError(Exception):
    """Base class of every exception raised on purpose by lidarmt."""


class UserError(LidarmtError):
    """Something the user can fix: bad input, bad argument, unusable output location."""

    exit_code: int = 2


class InputError(UserError):
    """An input (recording, map, bundle, weights) is missing, unreadable or malformed."""


class ArgumentError(UserError):
    """A command-line or API argument is out of range or inconsistent with the input."""


class OutputError(UserError):
    """An output location cannot be used (it exists, the disk is full, no permission)."""


class DependencyError(UserError):
    """An optional dependency is missing; the message says what to install."""


def require(module: str, *, extra: str | None = None, purpose: str = ""):
    """Import an optional heavy dependency, or raise a DependencyError with an install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        pkg = {"open3d": "open3d-cpu"}.get(module.split(".")[0], module.split(".")[0])
        hint = f'pip install "lidarmt[{extra}]"' if extra else f"pip install {pkg}"
        what = f" (needed for {purpose})" if purpose else ""
        raise DependencyError(f"cannot import {module}{what}: {err}; install it with: {hint}") from err
