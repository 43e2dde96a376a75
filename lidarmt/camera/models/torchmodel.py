"""A torch module plus its preprocessing, as a :class:`~lidarmt.camera.models.base.SteeringModel`.

Both the project's own models (:mod:`lidarmt.camera.models.zoo`) and imported Keras files
(:mod:`lidarmt.camera.models.keras`) are served by this adapter: ``preprocess`` turns raw RGB frames
(``(N, H, W, 3)`` uint8, or ``(N, T, H, W, 3)`` for models with history) into the module's input tensor,
``postprocess`` turns the module's output into radians (default: the first output column as is).
Prediction runs in batches under ``torch.inference_mode()``, deterministic in fp32 on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import InputSpec


class TorchSteeringModel:
    """A steering model backed by a ``torch.nn.Module`` (put in eval mode)."""

    def __init__(
        self,
        name: str,
        module: Any,
        input_spec: InputSpec,
        preprocess: Callable[[np.ndarray], Any],
        postprocess: Callable[[Any], np.ndarray] | None = None,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        card: str = "",
    ) -> None:
        import torch

        if batch_size < 1:
            raise ModelError(f"model {name}: batch_size must be at least 1, got {batch_size}")
        self.name = name
        self.input_spec = input_spec
        self.card = card
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        if self.device.type == "cuda":  # true fp32 and reproducible on a GPU: bundles replay bit for bit there too
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        self._module = module.to(self.device).eval()
        self._pre = preprocess
        self._post = postprocess

    @property
    def module(self) -> Any:
        return self._module

    def predict(self, images: np.ndarray) -> np.ndarray:
        import torch

        images = np.asarray(images)
        want = 5 if self.input_spec.history > 0 else 4
        if images.ndim != want or images.shape[-1] != 3 or images.dtype != np.uint8:
            shape = "(N, T, H, W, 3)" if want == 5 else "(N, H, W, 3)"
            raise ModelError(f"model {self.name}: expects uint8 RGB images shaped {shape}, got "
                             f"{images.dtype} {images.shape}")
        out = np.empty(len(images), dtype=np.float64)
        with torch.inference_mode():
            for i in range(0, len(images), self.batch_size):
                x = self._pre(images[i:i + self.batch_size])
                if self.device.type == "cuda":
                    x = x.pin_memory().to(self.device, non_blocking=True)
                else:
                    x = x.to(self.device)
                y = self._module(x)
                if self._post is not None:
                    ang = np.asarray(self._post(y), dtype=np.float64).reshape(-1)
                else:
                    ang = y.detach().float().cpu().numpy().reshape(len(x), -1)[:, 0].astype(np.float64)
                if len(ang) != len(x):
                    raise ModelError(f"model {self.name}: returned {len(ang)} angles for {len(x)} images")
                out[i:i + len(x)] = ang
        return out

    def __repr__(self) -> str:
        s = self.input_spec
        return f"TorchSteeringModel({self.name!r}, input {s.height}x{s.width} {s.colour}, history {s.history})"
