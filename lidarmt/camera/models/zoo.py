"""lidarmt's own steering models: the architectures of :mod:`~lidarmt.camera.models.archs` with weights trained by
``lidarmt camera train`` and shipped in ``lidarmt/camera/models/weights/`` (``<name>.pt`` fp16 weights,
``<name>.md`` model card, ``<name>.json`` metrics).

The public API, used by the model registry:

* :func:`available` - the names that have shipped weights;
* :func:`describe` - what the model card says, in numbers (input, parameters, validation RMSE and baselines);
* :func:`load` - a ready :class:`~lidarmt.camera.models.torchmodel.TorchSteeringModel`.

Example::

    from lidarmt.camera.models import zoo
    model = zoo.load("dave2")
    angles = model.predict(frames)          # (N, 240, 320, 3) uint8 RGB -> (N,) radians
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.archs import ARCHS, get_arch

#: Where the shipped weights, cards and metrics live.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def architectures() -> list[str]:
    """Every architecture lidarmt can build (trained or not)."""
    return list(ARCHS)


def shipped_weights(name: str) -> Path:
    """Path of the shipped weights file of ``name`` (it may not exist)."""
    return WEIGHTS_DIR / f"{get_arch(name).name}.pt"


def available() -> list[str]:
    """Names of the models with shipped weights, in catalogue order."""
    return [n for n in ARCHS if (WEIGHTS_DIR / f"{n}.pt").is_file()]


def describe(name: str) -> dict[str, Any]:
    """What the model card says, in numbers: input spec, parameters, validation RMSE° and the baselines'.

    Keys: ``name``, ``title``, ``kind`` ("zoo"), ``input`` (height, width, colour, history, note), ``parameters``,
    ``shipped`` (weights present), ``weights``, ``card``, and, when the metrics file is shipped: ``val_rmse_deg``,
    ``zero_rmse_deg``, ``mean_rmse_deg``, ``val_mse``, ``train_frames``, ``val_frames``, ``augmentation``,
    ``beats_baselines`` (validation MSE below both baselines'), ``label_lag1_autocorrelation`` (see the card).
    """
    arch = get_arch(name)
    spec = arch.input_spec
    info: dict[str, Any] = {
        "name": arch.name, "title": arch.title, "kind": "zoo", "summary": arch.summary, "origin": arch.origin,
        "input": {"height": spec.height, "width": spec.width, "colour": spec.colour, "history": spec.history,
                  "note": spec.note},
        "deviations": list(arch.deviations),
        "weights": str(WEIGHTS_DIR / f"{arch.name}.pt"), "card": str(WEIGHTS_DIR / f"{arch.name}.md"),
        "shipped": (WEIGHTS_DIR / f"{arch.name}.pt").is_file(),
    }
    metrics_path = WEIGHTS_DIR / f"{arch.name}.json"
    if metrics_path.is_file():
        try:
            m = json.loads(metrics_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ModelError(f"{metrics_path}: unreadable metrics ({err}); reinstall lidarmt") from err
        for key in ("parameters", "val_mse", "val_rmse_deg", "zero_mse", "zero_rmse_deg", "mean_mse",
                    "mean_rmse_deg", "train_frames", "val_frames", "best_epoch", "weights_bytes", "pred_std_deg"):
            if key in m:
                info[key] = m[key]
        if {"val_mse", "zero_mse", "mean_mse"} <= m.keys():
            info["beats_baselines"] = bool(m["val_mse"] < min(m["zero_mse"], m["mean_mse"]))
        if "labels" in m:
            info["label_lag1_autocorrelation"] = m["labels"].get("lag1_autocorrelation")
        info["augmentation"] = "horizontal flip" if m.get("config", {}).get("flip") else "none"
        info["seed"] = m.get("config", {}).get("seed")
    return info


def model_from_file(path: str | os.PathLike[str], *, name: str | None = None, device: str = "cpu",
                    batch_size: int | None = None) -> Any:
    """A :class:`TorchSteeringModel` from a weights file written by ``lidarmt camera train``; ``name`` (if given)
    must be the file's architecture. ``batch_size`` (frames per forward pass) defaults to 64 frames' worth:
    64 single frames, or 64 // (history + 1) windows."""
    from lidarmt.camera.models.torchmodel import TorchSteeringModel
    from lidarmt.camera.models.train import load_module, read_weights

    arch_name, state, _meta = read_weights(path)
    if arch_name not in ARCHS:
        raise ModelError(f"{path}: weights of an unknown architecture {arch_name!r}; "
                         f"this lidarmt knows: {', '.join(ARCHS)}")
    if name is not None and get_arch(name).name != arch_name:
        raise ModelError(f"{path}: holds {arch_name} weights, not {name}; pass a {name} weights file")
    arch = ARCHS[arch_name]
    module = load_module(arch, state, path=str(path))
    if batch_size is None:
        batch_size = max(1, 64 // (arch.input_spec.history + 1))
    card_path = Path(path).with_suffix(".md")
    return TorchSteeringModel(arch.name, module, arch.input_spec, arch.preprocess, batch_size=batch_size,
                              device=device, card=str(card_path) if card_path.is_file() else "")


def load(name: str, *, weights: str | os.PathLike[str] | None = None, device: str = "cpu") -> Any:
    """The model ``name`` with its shipped weights, or with ``weights`` (a file from ``lidarmt camera train``)."""
    arch = get_arch(name)
    path = Path(weights) if weights is not None else WEIGHTS_DIR / f"{arch.name}.pt"
    if weights is None and not path.is_file():
        raise ModelError(f"model {arch.name}: no shipped weights ({path}); train them with 'lidarmt camera train "
                         f"--arch {arch.name} --data DIR --out DIR --ship' or pass weights=")
    return model_from_file(path, name=arch.name, device=device)
