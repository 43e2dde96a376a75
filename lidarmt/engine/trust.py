"""The trust gate: a file from someone else (a bug bundle, a journal's header, a bench folder) must not make lidarmt
import and run code it names. Specs read from such a file are checked for ``module:callable`` references (the spec
itself, or an option value shaped like one) and refused unless the user passes ``--trust-code``; a spec the user
types is theirs to run. Both halves and the benches use it (:mod:`lidarmt.lidar.specs`, :mod:`lidarmt.camera.bundle`,
:mod:`lidarmt.bench.folder`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lidarmt.engine.errors import SutError


def is_callable_spec(spec: str) -> bool:
    """``module:callable`` (and not a Windows drive path or an existing file)."""
    head, sep, tail = spec.partition(":")
    return bool(sep and head and tail and "/" not in head and not Path(spec).exists() and len(head) > 1)


# ----------------------------------------------------------------------------------------------- trust gate


class UntrustedCodeError(SutError):
    """A spec read from a file names code to import, and the user did not pass ``--trust-code``."""


#: ``package.module:attr.attr`` -- the shape of a code reference in an option value.
_CODE_REF = re.compile(r"^\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\s*:\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\s*$")


def names_code(value: str) -> bool:
    """True when ``value`` has the shape of a code reference, ``package.module:callable``."""
    return bool(_CODE_REF.match(value))


def describe_ref(spec: str, options: Mapping[str, Any] | None = None) -> str:
    mod, _, attr = spec.strip().partition(":")
    call = f", calls {attr.strip()}({', '.join(f'{k}=…' for k in options)})" if options is not None else ""
    return f"{spec.strip()!r} (imports module {mod.strip()!r}{call})"


def code_in_options(options: Any, path: str = "") -> list[str]:
    """Option values shaped like ``module:callable`` (nested in lists and dicts too), one line each.

    Built-in SUTs never import an option value, but a plug-in may, so a file's options must not name code.
    """
    found: list[str] = []
    if isinstance(options, Mapping):
        for k, v in options.items():
            found += code_in_options(v, f"{path}.{k}" if path else str(k))
    elif isinstance(options, (list, tuple)):
        for i, v in enumerate(options):
            found += code_in_options(v, f"{path}[{i}]")
    elif isinstance(options, str) and names_code(options):
        found.append(f"option {path}={options.strip()!r} (names code: module {options.partition(':')[0].strip()!r})")
    return found



def check_trust(imports: list[str], *, origin: str | os.PathLike[str] | None, trust_code: bool = False) -> None:
    """The trust gate: refuse ``imports`` (from :func:`code_in_sut` / :func:`code_in_roi`) that a spec read from
    the file ``origin`` names, unless ``trust_code``. ``origin=None`` means the user gave the spec: allowed."""
    if origin is None or trust_code or not imports:
        return
    raise UntrustedCodeError(
        f"{origin}: building it would import and run code it names: {'; '.join(imports)}; a file from someone "
        "else may run anything this way, so it is refused: pass --trust-code to allow it (only for files you trust)"
    )
