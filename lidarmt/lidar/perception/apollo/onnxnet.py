"""Apollo's cnnseg CNN stage from an ONNX file (onnxruntime), and the project's network written as one.

Two layouts are run as they come:

* **Apollo's blobs**: input ``data`` (1, C, H, W); outputs named as Apollo's ``cnnseg.conf`` names them:
  ``category_score``, ``instance_pt``, ``confidence_score``, ``class_score``, ``height_pt`` (``heading_pt``
  optional): what ``lidarmt export-weights --format onnx`` writes.
* **Autoware's** (``lidar_apollo_instance_segmentation``: one input, one output, as its TensorRT wrapper reads
  tensors 0 and 1; Autoware's model zoo names them ``data`` (1, C, H, W) and ``deconv0`` (1, 12, H, W)): the
  single 12-channel output is taken as Apollo's ``deconv0`` blob, and Apollo's heads are applied as the
  prototxt does (Slice at 1, 3, 4, 9, 11; Sigmoid; category × mask).

Inputs are checked against the pipeline's grid and feature channels (8, or Apollo 3.5+'s 6 or 4 with the
``apollo-3.5`` preset) when the session is opened, outputs on every call. :class:`OnnxCnnRunner`
has :class:`~lidarmt.lidar.perception.apollo.network.CnnRunner`'s calling convention, and no torch module
(``net`` is None): coverage, which needs the activations of a torch module, refuses such a SUT.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.lidar.perception.apollo.errors import WeightsError

#: Apollo's output blob names, in the order lidarmt writes them
APOLLO_OUTPUTS = ("category_score", "instance_pt", "confidence_score", "class_score", "heading_pt", "height_pt")
_CHANNELS = {"category_score": 1, "instance_pt": 2, "confidence_score": 1, "class_score": 5, "heading_pt": 2,
             "height_pt": 1}
#: ONNX opset of the files lidarmt writes
OPSET = 17


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


class OnnxCnnRunner:
    """Runs an ONNX cnnseg network on (8, H, W) feature grids; returns the six heads like ``CnnRunner``."""

    net = None  # no torch module: coverage needs one
    mode = "exact"
    precision = "fp32"
    implementation = "onnxruntime"  # what bundles record (CnnRunner: exact-v2, fast-bf16, ...)

    def __init__(self, path: str | os.PathLike[str], *, grid: int, in_channels: int = 8, device: str = "cpu",
                 threads: int = 0) -> None:
        from lidarmt._onnx import open_session

        self.path = Path(path)
        self.grid = grid
        self.in_channels = in_channels
        self.session = open_session(self.path, what="ONNX CNN", error=WeightsError, device=device,
                                    threads=threads or 1)
        self.device = "cuda" if "CUDAExecutionProvider" in self.session.get_providers() else "cpu"
        ins = self.session.get_inputs()
        if len(ins) != 1:
            raise WeightsError(f"{self.path}: the model takes {len(ins)} inputs ({', '.join(i.name for i in ins)}); "
                               "Apollo's cnnseg takes one, the feature grid 'data' (1, C, H, W)")
        inp = ins[0]
        self.input_name = inp.name
        shape = list(inp.shape)
        if len(shape) != 4:
            raise WeightsError(f"{self.path}: input {inp.name!r} has shape {shape}; Apollo's cnnseg takes (1, C, H, W)")
        c = shape[1]
        if isinstance(c, int) and c != in_channels:
            kind = {6: " (Apollo 3.5+ velodyne16/64 or Autoware's vlp-16/hdl-64)",
                    4: " (Apollo 3.5+ velodyne128 or Autoware's vls-128)"}.get(c, "")
            hint = ("--sut apollo-3.5 with sensor=velodyne16|velodyne64 (6 channels) or velodyne128 (4)" if c in (4, 6)
                    else "--sut apollo (8 channels)" if c == 8 else "a cnnseg network of 8, 6 or 4 channels")
            raise WeightsError(f"{self.path}: input {inp.name!r} has {c} feature channels{kind}; this preset computes "
                               f"{in_channels}; use {hint}")
        for axis, d in zip(("height", "width"), shape[2:], strict=True):
            if isinstance(d, int) and d != grid:
                raise WeightsError(f"{self.path}: input {inp.name!r} is {shape[2]}x{shape[3]}, the pipeline's grid is "
                                   f"{grid}x{grid} ({axis}); pass --sut-option grid={d} (or --grid {d})")
        outs = [o.name for o in self.session.get_outputs()]
        if set(APOLLO_OUTPUTS) - {"heading_pt"} <= set(outs):
            self.layout = "apollo"
        elif len(outs) == 1:
            self.layout = "deconv0"
        else:
            raise WeightsError(f"{self.path}: outputs {outs} are neither Apollo's blobs ("
                               f"{', '.join(APOLLO_OUTPUTS[:4])}, height_pt) nor one 12-channel deconv0 blob")
        self.outputs = outs

    def _heads(self, out: dict[str, np.ndarray], features: np.ndarray) -> dict[str, np.ndarray]:
        h = w = self.grid
        if self.layout == "deconv0":
            (raw,) = out.values()
            if raw.shape != (1, 12, h, w):
                raise WeightsError(f"{self.path}: output {self.outputs[0]!r} has shape {raw.shape}, Apollo's deconv0 "
                                   f"is {(1, 12, h, w)}")
            raw = raw[0].astype(np.float32, copy=False)
            mask = (features[self.in_channels - 1] if features.ndim == 3 else features[0, -1]).astype(np.float32)
            return {"category_score": _sigmoid(raw[0]) * mask, "instance_pt": raw[1:3].copy(),
                    "confidence_score": _sigmoid(raw[3]), "class_score": _sigmoid(raw[4:9]),
                    "heading_pt": raw[9:11].copy(), "height_pt": raw[11].copy()}
        heads: dict[str, np.ndarray] = {}
        for name in APOLLO_OUTPUTS:
            if name not in out:
                heads[name] = np.zeros((2, h, w), np.float32)  # heading_pt: unused by 2.x/3.0 post-processing
                continue
            a = out[name]
            want = (1, _CHANNELS[name], h, w)
            if a.shape != want:
                raise WeightsError(f"{self.path}: output {name!r} has shape {a.shape}, Apollo's is {want}")
            a = a[0].astype(np.float32, copy=False)
            heads[name] = a[0] if a.shape[0] == 1 else a
        return heads

    def __call__(self, features: np.ndarray) -> dict[str, np.ndarray]:
        x = np.ascontiguousarray(features, dtype=np.float32)[None]
        try:
            res = self.session.run(None, {self.input_name: x})
        except Exception as err:  # noqa: BLE001 - onnxruntime's own error classes
            raise WeightsError(f"onnxruntime cannot run {self.path} on a {x.shape[1:]} feature grid: "
                               f"{' '.join(str(err).split())[:300]}") from err
        return self._heads(dict(zip(self.outputs, res, strict=True)), features)

    def run_many(self, features: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        return [self(f) for f in features]


def export_onnx(state: dict[str, Any], path: str | os.PathLike[str], *, grid: int, in_channels: int = 8) -> int:
    """Write the cnnseg network with ``state``'s weights as ONNX (input ``data`` (1, C, grid, grid), outputs
    :data:`APOLLO_OUTPUTS`), atomically; returns the bytes written."""
    import io
    import warnings

    import torch

    from lidarmt._atomic import atomic_write_bytes
    from lidarmt.lidar.perception.apollo.network import build_network

    net = build_network(grid, in_channels=in_channels)
    net.load_state_dict(state, strict=True)
    net.eval()

    class _Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, data: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.net(data)
            return tuple(out[k] for k in APOLLO_OUTPUTS)

    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Heads(), (torch.zeros(1, in_channels, grid, grid),), buf, dynamo=False,
                          input_names=["data"], output_names=list(APOLLO_OUTPUTS), opset_version=OPSET)
    data = buf.getvalue()
    atomic_write_bytes(path, data)
    return len(data)
