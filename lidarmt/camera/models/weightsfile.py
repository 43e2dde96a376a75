"""The steering models' weights file: fp16 tensors and plain metadata, written by ``lidarmt camera train`` and read
with ``torch.load(weights_only=True)``, so a weights file from anyone is data, never code."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.archs import Arch

WEIGHTS_FORMAT = "lidarmt-steering-weights"
WEIGHTS_VERSION = 1


def export_weights(module: Any, path: str | os.PathLike[str], *, arch: str, meta: dict[str, Any]) -> None:
    """Write the module's weights as fp16 (floating tensors) in the shipped format, atomically."""
    import torch

    from lidarmt._atomic import atomic_path

    state = {k: (v.detach().to(torch.float16) if v.is_floating_point() else v.detach()).clone()
             for k, v in module.state_dict().items()}
    blob = {"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION, "arch": arch, "dtype": "float16",
            "state_dict": state, "meta": json.dumps(meta, sort_keys=True)}
    with atomic_path(path) as tmp:
        torch.save(blob, tmp)


def read_weights(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(arch, fp32 state dict, meta)`` of a weights file written by :func:`export_weights`.

    The file is read with ``torch.load(weights_only=True)``: tensors and plain containers only, never code.
    """
    from lidarmt._torchfile import read_meta, read_tensor_blob

    p = Path(path)
    blob, state = read_tensor_blob(p, fmt=WEIGHTS_FORMAT, version=WEIGHTS_VERSION, what="lidarmt steering weights file",
                                   short="weights file", hint="pass a .pt written by 'lidarmt camera train'",
                                   error=ModelError, on_old_version="; retrain with this version",
                                   expect=expected_shapes)
    meta = read_meta(blob, path=p, short="weights file", error=ModelError)
    if not isinstance(meta, dict):
        raise ModelError(f"{p}: corrupt weights file (meta is not a JSON object)")
    return str(blob.get("arch")), state, meta


def expected_shapes(blob: dict[str, Any]) -> tuple[str, dict[str, tuple[int, ...]]] | None:
    """``("weights do not fit architecture NAME", names and shapes of its tensors)`` for the architecture a weights file's blob names
    (None when it names none lidarmt knows: the caller says so in its own words), from a freshly built module."""
    from lidarmt.camera.models.archs import ARCHS

    arch = ARCHS.get(blob.get("arch")) if isinstance(blob.get("arch"), str) else None
    if arch is None:
        return None
    return f"weights do not fit architecture {arch.name}", {k: tuple(v.shape) for k, v in arch.build().state_dict().items()}


def load_module(arch: Arch, state: dict[str, Any], *, path: str = "") -> Any:
    """Build ``arch`` and load ``state`` into it (eval mode)."""
    module = arch.build()
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "mismatch"
        raise ModelError(f"{path or 'weights'}: do not fit architecture {arch.name} ({first})") from err
    return module.eval()
