"""Reading the project's torch files (weights, translators) as data: ``torch.load(weights_only=True)`` — tensors
and plain containers, never code — with one-line errors that say what the file should have been."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def torch_load_data(path: str | os.PathLike[str], *, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU: tensors and plain containers, never code. Torch's
    warnings about the file (e.g. "Detected pickle protocol 4 ... please file an issue") are not shown: a file
    torch refuses is one line of the caller's, and that line is all the user needs."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def load_blob(path: str | os.PathLike[str], *, fmt: str, version: int, what: str, short: str, hint: str,
              error: type[Exception], on_old_version: str = "", mmap: bool = False) -> dict[str, Any]:
    """The dict a file of ``{"format": fmt, "version": version, ...}`` holds, read as data.

    ``what`` names the kind of file ("lidarmt translator file"), ``short`` its short name ("translator file"),
    ``hint`` what to do instead; every problem (missing, not a torch file, a pickle that would run code, another
    format or version) raises ``error`` with one line naming ``path``. ``mmap`` maps the tensors instead of
    reading them.
    """

    p = Path(path)
    if not p.is_file():
        raise error(f"{p}: no such {short}")
    try:
        blob = torch_load_data(p, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - a stranger's file can make the unpickler raise anything
        raise error(f"{p}: not a {what} ({type(err).__name__}); {hint}") from err
    if not isinstance(blob, dict) or blob.get("format") != fmt:
        raise error(f"{p}: not a {what}; {hint}")
    if blob.get("version") != version:
        raise error(f"{p}: {short.removesuffix(' file')} format version {blob.get('version')} is not supported "
                    f"(this lidarmt reads {version}){on_old_version}")
    return blob


def read_tensor_blob(path: str | os.PathLike[str], *, fmt: str, version: int, what: str, short: str, hint: str,
                     error: type[Exception], on_old_version: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(blob, fp32 state dict)`` of a file written as ``{"format": fmt, "version": version, "state_dict": ...}``
    (see :func:`load_blob`); a file without a state dict of tensors raises ``error`` too."""
    import torch

    blob = load_blob(path, fmt=fmt, version=version, what=what, short=short, hint=hint, error=error,
                     on_old_version=on_old_version)
    state = blob.get("state_dict")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise error(f"{Path(path)}: corrupt {short} (no state dict of tensors)")
    return blob, {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
