"""lidarmt's own steering models: the architectures of :mod:`~lidarmt.camera.models.archs` with weights trained by
``lidarmt camera train`` and shipped in ``lidarmt/camera/models/weights/`` (``<name>.pt`` fp16 weights,
``<name>.md`` model card, ``<name>.json`` metrics).

The public API, used by the model registry:

* :func:`available` - the names that have shipped weights;
* :func:`describe` - what the model card says, in numbers (input, parameters, validation RMSE and baselines);
* :func:`load` - a ready :class:`~lidarmt.camera.models.torchmodel.TorchSteeringModel`.

Example::

    import lidarmt.camera.models.zoo as zoo
    model = zoo.load("dave2")
    angles = model.predict(frames)          # (N, 240, 320, 3) uint8 RGB -> (N,) radians
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

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
        augs = m.get("augmentations")
        if augs is None:  # metrics written before the augmentations were listed
            augs = ["flip"] if m.get("config", {}).get("flip") else []
        info["augmentation"] = ", ".join(augs) or "none"
        if {"val_mse", "zero_mse", "mean_mse"} <= m.keys():
            info["mse_ratio"] = float(m["val_mse"] / min(m["zero_mse"], m["mean_mse"]))
        info["labels_sha256"] = m.get("labels_sha256")
        info["seed"] = m.get("config", {}).get("seed")
    return info


def history_note(source: Any, models: Any) -> str | None:
    """One line for a source that is not a sequence (a folder of images) given to models with history
    (Chauffeur, Rambo): they take the images before each one, in name order, as its previous frames. ``models``:
    steering models, or ``(name, history)`` pairs. None when nothing needs saying."""
    pairs = [(m if isinstance(m, tuple) else (getattr(m, "name", str(m)), int(m.input_spec.history))) for m in models]
    needy = [(n, h) for n, h in pairs if h > 0]
    if not needy or getattr(source, "format", None) != "images":
        return None
    names = ", ".join(f"{n} (history {h})" for n, h in needy)
    verb, its = ("takes", "its") if len(needy) == 1 else ("take", "their")
    return (f"note: {getattr(source, 'path', 'the source')} is a folder of separate images, not a recorded "
            f"sequence; {names} {verb} the images before each one (in name order) as {its} previous frames, "
            "which is meaningful only if the images are consecutive frames of one drive")


def spec_history(spec: str) -> tuple[str, int]:
    """``(name, history)`` of a model spec without building the model: a zoo name, or a weights file from
    ``lidarmt camera train`` (its architecture read as data); anything else (Keras files, plug-ins): history 0."""
    if spec in ARCHS:
        return spec, int(ARCHS[spec].input_spec.history)
    if str(spec).endswith(".pt") and Path(spec).is_file():
        try:
            from lidarmt.camera.models.weightsfile import read_weights

            arch = read_weights(spec)[0]
        except ModelError:
            return str(spec), 0
        if arch in ARCHS:
            return str(spec), int(ARCHS[arch].input_spec.history)
    return str(spec), 0


def _frame_key(image: np.ndarray) -> bytes:
    """A frame's identity for the feature cache: BLAKE2b of its shape and bytes (collisions: 2^-128)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(image.shape).encode())
    h.update(np.ascontiguousarray(image).tobytes())
    return h.digest()


def _windowed_class() -> type:
    """:class:`TorchSteeringModel` for Chauffeur with a per-frame encoder-feature cache (defined on first use so
    that importing this module does not import torch)."""
    global _WINDOWED
    if _WINDOWED is not None:
        return _WINDOWED
    from lidarmt.camera.models.torchmodel import TorchSteeringModel

    class CachedEncoderModel(TorchSteeringModel):
        """Chauffeur with each frame's CNN features computed once and reused by every window that holds the frame
        (a window of ``history + 1`` frames shares all but one frame with its neighbour). The cache is keyed by
        the frame's bytes, bounded (``cache_frames``, least recently used out first) and in fp32 like the
        uncached path; ``cache_frames=0`` turns it off (then every window is encoded whole)."""

        def __init__(self, *args: Any, arch: Any, cache_frames: int = 2048, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._arch = arch
            self.cache_frames = int(cache_frames)
            self._cache: OrderedDict[bytes, Any] = OrderedDict()
            self.cache_hits = 0
            self.cache_misses = 0

        def clear_cache(self) -> None:
            self._cache.clear()

        def predict_uncached(self, images: np.ndarray) -> np.ndarray:
            """Every window encoded whole (what coverage's forward hooks need: one encoder row per frame)."""
            return TorchSteeringModel.predict(self, images)

        def predict(self, images: np.ndarray) -> np.ndarray:
            import torch

            if self.cache_frames <= 0:
                return super().predict(images)
            images = np.asarray(images)
            if images.ndim != 5 or images.shape[-1] != 3 or images.dtype != np.uint8:
                return super().predict(images)  # its one-line error
            n, t = images.shape[:2]
            keys = [[_frame_key(images[i, j]) for j in range(t)] for i in range(n)]
            missing: dict[bytes, tuple[int, int]] = {}
            for i in range(n):
                for j in range(t):
                    if keys[i][j] not in self._cache and keys[i][j] not in missing:
                        missing[keys[i][j]] = (i, j)
            self.cache_misses += len(missing)
            self.cache_hits += n * t - len(missing)
            fresh: dict[bytes, Any] = {}
            module = self._module
            step = max(1, self.batch_size * t)
            todo = list(missing.items())
            with torch.inference_mode():
                for k in range(0, len(todo), step):
                    part = todo[k:k + step]
                    frames = np.stack([images[i, j] for _, (i, j) in part])
                    x = self._arch.normalise(torch.from_numpy(self._arch.prepare(frames))).to(self.device)
                    feats = module.encoder(x).float().cpu()
                    for (key, _), f in zip(part, feats, strict=True):
                        fresh[key] = f
                out = np.empty(n, dtype=np.float64)
                for i0 in range(0, n, self.batch_size):
                    rows = range(i0, min(n, i0 + self.batch_size))
                    win = torch.stack([torch.stack([fresh[k] if k in fresh else self._cache[k] for k in keys[i]])
                                       for i in rows]).to(self.device)
                    out[i0:i0 + len(rows)] = module.forward_features(win).float().cpu().numpy()[:, 0]
            for key in [k for row in keys for k in row]:
                if key in fresh:
                    self._cache[key] = fresh[key]
                if key in self._cache:
                    self._cache.move_to_end(key)
            while len(self._cache) > self.cache_frames:
                self._cache.popitem(last=False)
            return out

    _WINDOWED = CachedEncoderModel
    return _WINDOWED


_WINDOWED: type | None = None


def model_from_file(path: str | os.PathLike[str], *, name: str | None = None, device: str = "cpu",
                    batch_size: int | None = None) -> Any:
    """A :class:`TorchSteeringModel` from a weights file written by ``lidarmt camera train``; ``name`` (if given)
    must be the file's architecture. ``batch_size`` (frames per forward pass) defaults to 64 frames' worth:
    64 single frames, or 64 // (history + 1) windows."""
    from lidarmt.camera.models.torchmodel import TorchSteeringModel
    from lidarmt.camera.models.weightsfile import load_module, read_weights

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
    card = str(card_path) if card_path.is_file() else ""
    if hasattr(module, "forward_features"):  # an encoder per frame, then a sequence model: cache the features
        return _windowed_class()(arch.name, module, arch.input_spec, arch.preprocess, batch_size=batch_size,
                                 device=device, card=card, arch=arch)
    return TorchSteeringModel(arch.name, module, arch.input_spec, arch.preprocess, batch_size=batch_size,
                              device=device, card=card)


def load(name: str, *, weights: str | os.PathLike[str] | None = None, device: str = "cpu") -> Any:
    """The model ``name`` with its shipped weights, or with ``weights`` (a file from ``lidarmt camera train``)."""
    arch = get_arch(name)
    path = Path(weights) if weights is not None else WEIGHTS_DIR / f"{arch.name}.pt"
    if weights is None and not path.is_file():
        raise ModelError(f"model {arch.name}: no shipped weights ({path}); train them with 'lidarmt camera train "
                         f"--arch {arch.name} --data DIR --out DIR --ship' or pass weights=")
    return model_from_file(path, name=arch.name, device=device)
