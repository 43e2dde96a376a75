"""Reading the project's torch files (weights, translators) as data: ``torch.load(weights_only=True)`` — tensors
and plain containers, never code — with one-line errors that say what the file should have been.

``weights_only`` keeps code out, not size: a 1.7 KB file can hold a tensor whose strides are 0 ("expanded") and
whose shape claims 2**40 elements, which ``.float()`` or ``load_state_dict`` would then try to allocate.
:func:`check_tensors` is the one rule every reader of a stranger's tensors applies before touching them: dense
tensors only, none claiming more elements than the file stores for it, the names and shapes the architecture
expects (when the caller knows them), and the total within the memory available."""

from __future__ import annotations

import os
from collections.abc import Callable
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


def check_tensors(state: dict[str, Any], *, path: str | os.PathLike[str], short: str, error: type[Exception],
                  expect: dict[str, tuple[int, ...]] | None = None,
                  misfit: str = "does not fit its architecture") -> None:
    """Refuse (``error``, one line naming ``path``) a state dict a stranger's file holds unless every value is a
    dense tensor that claims no more elements than its storage in the file holds (a stride-0 "expanded" tensor
    claiming 2**40 elements from a few bytes is refused), with exactly the names and shapes of ``expect`` when
    given (else ``misfit``: "weights do not fit architecture dave2"), and fp32 copies of all of them fit in the
    memory available. Call it before ``.float()``, ``.clone()``
    or ``load_state_dict``: nothing is allocated here."""
    import torch

    from lidarmt._limits import check_memory

    p = Path(path)
    total = 0
    for name, t in state.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise error(f"{p}: corrupt {short} (its state dict holds {type(t).__name__} {str(name)[:60]!r}, "
                        "not a named tensor)")
        if t.layout != torch.strided or t.is_quantized or t.is_nested or t.device.type != "cpu":
            raise error(f"{p}: corrupt {short} (tensor {name[:60]!r} is {t.layout}, not a dense tensor)")
        need = t.numel() * t.element_size()
        held = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        if need > held or any(st < 0 for st in t.stride()):
            raise error(f"{p}: corrupt {short} (tensor {name[:60]!r} claims {t.numel():,} elements of shape "
                        f"{tuple(t.shape)} from {max(0, held):,} bytes stored: an expanded or overlapping tensor, "
                        "which lidarmt never writes)")
        total += t.numel() * max(4, t.element_size())
    if expect is not None:
        got = {k: tuple(v.shape) for k, v in state.items()}
        missing = sorted(set(expect) - set(got))
        extra = sorted(set(got) - set(expect))
        if missing or extra:
            which = f"missing {missing[0]!r}" if missing else f"unexpected {extra[0][:60]!r}"
            raise error(f"{p}: {misfit} ({which}; {len(missing)} missing, {len(extra)} "
                        "unexpected tensors)")
        for k, shape in expect.items():
            if got[k] != tuple(shape):
                raise error(f"{p}: {misfit} (tensor {k!r} has shape {got[k]}, the "
                            f"architecture's is {tuple(shape)})")
    check_memory(total, what=f"{p}: its tensors", error=error)  # type: ignore[arg-type]


def read_tensor_blob(path: str | os.PathLike[str], *, fmt: str, version: int, what: str, short: str, hint: str,
                     error: type[Exception], on_old_version: str = "",
                     expect: Callable[[dict[str, Any]], tuple[str, dict[str, tuple[int, ...]]] | None] | None = None,
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(blob, fp32 state dict)`` of a file written as ``{"format": fmt, "version": version, "state_dict": ...}``
    (see :func:`load_blob`); a file without a state dict of tensors raises ``error`` too, and so does one whose
    tensors :func:`check_tensors` refuses (``expect(blob)``: what a misfit is called and the names and
    shapes of its tensors, or None when the caller cannot know them yet) — all before any tensor is converted."""
    blob = load_blob(path, fmt=fmt, version=version, what=what, short=short, hint=hint, error=error,
                     on_old_version=on_old_version)
    state = blob.get("state_dict")
    if not isinstance(state, dict):
        raise error(f"{Path(path)}: corrupt {short} (no state dict of tensors)")
    fits = expect(blob) if expect else None
    check_tensors(state, path=path, short=short, error=error, expect=fits[1] if fits else None,
                  misfit=fits[0] if fits else "does not fit its architecture")
    return blob, {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def read_meta(blob: dict[str, Any], *, path: str | os.PathLike[str], short: str, error: type[Exception]) -> Any:
    """The ``meta`` JSON string of a torch file's blob, parsed with the project's bounded loader (a string nested
    100,000 deep is one line, never a ``RecursionError``); a missing meta is ``{}``."""
    from lidarmt._limits import loads_json

    meta = blob.get("meta") or "{}"
    if not isinstance(meta, (str, bytes)):
        raise error(f"{Path(path)}: corrupt {short} (meta is {type(meta).__name__}, not JSON text)")
    return loads_json(meta, what=f"{Path(path)}: corrupt {short}: its meta", error=error)  # type: ignore[arg-type]
