"""Resolving ``package.module:attribute`` specs: the one loader every registry uses (SUTs, ROI providers,
steering models). Only for specs the *user* gave; specs read from files go through the trust gate first
(:mod:`lidarmt.lidar.specs`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
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


def keyword_options(obj: Any) -> list[str] | None:
    """The keyword arguments a callable (a function, or a class's ``__init__``) accepts, in order; None when it
    takes ``**kwargs`` or its signature cannot be read (then any key may be valid)."""
    import inspect

    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    names = []
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.append(p.name)
    return names


def check_options(options: Mapping[str, Any], valid: Sequence[str] | None, *, what: str,
                  error: type[Exception]) -> None:
    """Raise ``error`` (one line listing the valid keys) when ``options`` holds a key not in ``valid`` (None:
    anything goes). ``what`` names the thing built (e.g. "SUT 'apollo'")."""
    if valid is None:
        return
    bad = [k for k in options if k not in valid]
    if bad:
        import difflib

        close = [m for k in bad for m in difflib.get_close_matches(k, valid, n=1)]
        raise error(f"{what} takes no option {', '.join(repr(k) for k in bad)}"
                    + (f" (did you mean {', '.join(close)}?)" if close else "")
                    + f"; valid keys: {', '.join(valid) if valid else 'none'}")


def instantiate(obj: Any, spec: str, options: dict[str, Any], *, protocol: type, what: str, lacks: str,
                unknown: type[Exception], options_error: type[Exception] | None,
                build_failed: Callable[[TypeError], Exception] | None = None) -> Any:
    """What a registry's ``spec`` resolved to (``obj``), built with ``options``: an instance of the runtime-checkable
    ``protocol`` is used as it is (``options_error`` when options were given to it; None: they are ignored), a
    callable is called with the options (``build_failed(err)`` is raised for a ``TypeError`` when given) and
    must return an instance of ``protocol``; anything else is ``unknown``, naming ``what`` and what it ``lacks``."""
    if isinstance(obj, protocol) and not isinstance(obj, type):
        if options and options_error is not None:
            raise options_error(f"{what} {spec!r} is an instance; it takes no options (got {sorted(options)})")
        return obj
    if not callable(obj):
        raise unknown(f"{what} {spec!r} is neither callable nor a {protocol.__name__}")
    check_options(options, keyword_options(obj), what=f"{what} {spec!r}", error=options_error or unknown)
    if build_failed is None:
        inst = obj(**options)
    else:
        try:
            inst = obj(**options)
        except TypeError as err:
            raise build_failed(err) from err
    if not isinstance(inst, protocol) or isinstance(inst, type):
        raise unknown(f"{what} {spec!r} returned {type(inst).__name__}, which lacks {lacks}")
    return inst
