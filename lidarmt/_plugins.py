"""Resolving ``package.module:attribute`` specs: the one loader every registry uses (SUTs, ROI providers,
steering models). Only for specs the *user* gave; specs read from files go through the trust gate first
(:mod:`lidarmt.lidar.specs`)."""

from __future__ import annotations

import importlib
from typing import Any


def load_object(spec: str, *, what: str, error: type[Exception]) -> Any:
    """The object ``package.module:attr.sub`` names; ``error`` (one line naming ``what`` and the spec) when the
    spec is malformed, the module cannot be imported or the attribute is missing."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise error(f"{what} spec {spec!r} is not of the form package.module:callable")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as err:
        raise error(f"cannot import module {mod_name!r} of {what} {spec!r}: {err}") from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            raise error(f"module {mod_name!r} has no attribute {attr!r} ({what} {spec!r})") from err
    return obj
