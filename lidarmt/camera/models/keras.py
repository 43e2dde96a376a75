"""Import a Keras HDF5 steering model (Keras 1.x or 2.x ``model.save`` file) into torch, without TensorFlow.

The file is read as **data**: the architecture comes from the ``model_config`` JSON attribute, the weights
from the ``model_weights`` group (h5py), and a torch module is built layer by layer. Nothing stored in the
file is ever executed: a ``Lambda`` layer holds marshalled Python bytecode, which is neither unmarshalled nor
run.
Instead the float constants visible in its raw bytes are matched against common input normalisations
(``x/127.5 - 1`` holds 127.5 and 1.0; ``x/255 - 0.5`` holds 255 and 0.5; ``x/255``); any other lambda is
refused, and the user says what it computes with the option ``lambda="x/a-b"`` (:func:`parse_affine`:
``x/a±b``, ``x*a±b``, ``x/a``, ``x*a``, ``x±b``, ``x``).

Supported: ``Sequential`` models and functional models whose graph is a single chain; layers Conv2D /
Convolution2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, ZeroPadding2D,
Cropping2D, Dense, Dropout (and other train-only noise layers), Flatten, Activation, ELU, ReLU, LeakyReLU,
ThresholdedReLU, Softmax, BatchNormalization, Lambda, InputLayer.
Both weight layouts: Keras 1 (``<layer>_W:0``/``<layer>_b:0``; ``nb_filter``, ``nb_row``/``nb_col``,
``subsample``, ``border_mode``, ``dim_ordering``) and Keras 2 (``kernel:0``/``bias:0``; ``filters``,
``kernel_size``, ``strides``, ``padding``, ``data_format``).

Faithfulness, and how each point is handled:

* Keras convolutions are cross-correlations with kernels stored ``(kh, kw, in, out)``; torch wants
  ``(out, in, kh, kw)``: transposed. (Keras 1 ``dim_ordering="th"`` files store ``(out, in, kh, kw)``
  already. A Keras 1 file trained on the *Theano* backend used true convolution; the file does not record the
  backend, so pass ``flip_kernels=true`` for those.)
* ``padding="same"`` is TensorFlow's: output ``ceil(in / stride)``, total padding
  ``max((out - 1)·stride + k - in, 0)`` split with the extra row/column at the bottom/right (asymmetric when
  odd). Max pooling pads with −inf; average pooling divides by the number of real (unpadded) inputs.
* The module computes in torch's NCHW layout; for a channels-last model the ``Flatten`` permutes back to
  NHWC before flattening, so the first Dense layer receives its inputs in the order Keras trained it with.
* BatchNormalization uses the moving statistics (inference); Keras 1's ``running_std`` holds the variance
  (Keras 1 passed it to ``batch_normalization`` as such), Keras 1 ``mode=2`` (batch statistics) is refused.

The file does not say how camera frames were prepared for the network. :data:`PRESETS` names the
preparations we know (``preprocess=`` option); the default is ``dave2-udacity-sim`` when the network's input
is 66×200×3 (the NVIDIA DAVE-2 shape) and plain ``resize`` (RGB) otherwise. Likewise :data:`OUTPUTS` says how
the network's output becomes radians, positive = left (``output=`` option; ``dave2-udacity-sim`` defaults to
``udacity-sim``: the simulator's steering value, ±1 = ±25°, positive = right).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import InputSpec

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# ------------------------------------------------------------------------------------------------------------
# Input preparation presets and output conversions
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preset:
    """How raw RGB camera frames become the network's input (before any Lambda layer of the file)."""

    name: str
    colour: str  # colour space handed to the network: rgb, yuv, bgr, grey
    note: str
    sim_frame: tuple[int, int] | None = None  # (H, W) the frame is first resized to, then cropped
    crop_rows: tuple[int, int] = (0, 0)  # rows cut from the top and the bottom of that frame
    output: str = "radians"  # default output conversion


PRESETS: dict[str, Preset] = {
    "dave2-udacity-sim": Preset(
        "dave2-udacity-sim", "yuv",
        "frame resized to 160x320 when it is another size, rows 60:-25 cropped, resized (bilinear) to the "
        "input size, RGB->YUV (naokishibuya/car-behavioral-cloning's utils.preprocess)",
        sim_frame=(160, 320), crop_rows=(60, 25), output="udacity-sim",
    ),
    "resize": Preset("resize", "rgb", "resized to the input size, RGB"),
    "resize-yuv": Preset("resize-yuv", "yuv", "resized to the input size, RGB->YUV"),
    "resize-bgr": Preset("resize-bgr", "bgr", "resized to the input size, BGR channel order"),
    "resize-grey": Preset("resize-grey", "grey", "resized to the input size, grey (one channel)"),
}  # fmt: skip

DAVE2_SHAPE = (66, 200, 3)

UDACITY_SIM_MAX_STEER_DEG = 25.0  # the Udacity simulator's steering value ±1 is ±25°, positive = right

OUTPUTS: dict[str, float] = {
    "radians": 1.0,
    "degrees": math.pi / 180.0,
    "udacity-sim": -math.radians(UDACITY_SIM_MAX_STEER_DEG),
}

OUTPUT_NOTES: dict[str, str] = {
    "radians": "the output is the angle in radians, positive = left",
    "degrees": "the output is the angle in degrees, positive = left",
    "udacity-sim": "the output is the Udacity simulator's steering value (±1 = ±25°, positive = right): "
    "radians = -output · 25° (lidarmt's convention: positive = left)",
}


def default_preset(input_shape: tuple[int, int, int]) -> str:
    """The preparation assumed for a network input ``(H, W, C)``: DAVE-2's for 66×200×3, else a resize."""
    if tuple(input_shape) == DAVE2_SHAPE:
        return "dave2-udacity-sim"
    return "resize-grey" if input_shape[2] == 1 else "resize"


def _prepare_batch(images: np.ndarray, preset: Preset, size: tuple[int, int]) -> np.ndarray:
    """``(N, H, W, 3)`` uint8 RGB → ``(N, C, h, w)`` float32 with 0..255 values, as the network was fed."""
    import cv2

    h, w = size
    out = []
    for img in images:
        if preset.sim_frame is not None:
            fh, fw = preset.sim_frame
            if img.shape[:2] != (fh, fw):
                img = cv2.resize(img, (fw, fh), interpolation=cv2.INTER_AREA)
            top, bottom = preset.crop_rows
            img = img[top : fh - bottom]
            # The reference passes cv2.INTER_AREA as resize's third *positional* argument, which is `dst`:
            # the interpolation actually used is the default, bilinear.
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR)
        elif img.shape[:2] != (h, w):
            shrink = img.shape[0] >= h and img.shape[1] >= w
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        if preset.colour == "yuv":
            img = cv2.cvtColor(img, cv2.COLOR_RGB2YUV)
        elif preset.colour == "bgr":
            img = img[..., ::-1]
        elif preset.colour == "grey":
            img = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None]
        out.append(np.ascontiguousarray(img))
    return np.stack(out).astype(np.float32).transpose(0, 3, 1, 2)


# ------------------------------------------------------------------------------------------------------------
# Lambda layers: recognise the normalisation from the constants in the bytes, never run them
# ------------------------------------------------------------------------------------------------------------

_NUM = r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_AFFINE = re.compile(rf"^\(?x(?:(?P<op>[*/])(?P<a>{_NUM}))?\)?(?:(?P<sign>[+-])(?P<b>{_NUM}))?$")

# Constants (in order of appearance in the code object) of the lambdas we recognise, and what they compute.
KNOWN_LAMBDAS: dict[tuple[float, ...], str] = {
    (127.5, 1.0): "x/127.5-1",
    (255.0, 0.5): "x/255-0.5",
    (255.0,): "x/255",
    (128.0, 1.0): "x/128-1",
    (127.5,): "x/127.5",
}


def parse_affine(text: str) -> tuple[float, float]:
    """``(scale, offset)`` of a normalisation written ``x/a-b``, ``x*a+b``, ``x/a``, ``x*a``, ``x-b``, ``x``.

    A tiny parser on purpose (no ``eval``): the text may come from a file somebody sent.
    """
    s = re.sub(r"\s+", "", str(text)).lower()
    if s in ("", "x", "identity", "none"):
        return 1.0, 0.0
    m = _AFFINE.match(s)
    if m is None:
        raise ModelError(
            f"lambda={text!r} is not a normalisation this importer understands; write it as x/a-b, x/a+b, "
            "x*a+b, x*a-b, x/a, x*a, x-b or x (numbers only), e.g. lambda=x/127.5-1"
        )
    scale = 1.0
    if m["op"]:
        a = float(m["a"])
        if m["op"] == "/":
            if a == 0.0:
                raise ModelError(f"lambda={text!r} divides by zero")
            scale = 1.0 / a
        else:
            scale = a
    offset = 0.0
    if m["sign"]:
        offset = float(m["b"]) * (-1.0 if m["sign"] == "-" else 1.0)
    return scale, offset


def _code_bytes(function: Any) -> bytes | None:
    """Raw marshal bytes of a Lambda's ``function`` (Keras 1: raw_unicode_escape text, Keras 2: base64)."""
    code = function[0] if isinstance(function, (list, tuple)) and function else function
    if not isinstance(code, str):
        return None
    if re.fullmatch(r"[A-Za-z0-9+/=\s]+", code):
        try:
            return base64.b64decode(code.encode("ascii"), validate=False)
        except (binascii.Error, ValueError):
            pass
    try:
        return code.encode("raw_unicode_escape")
    except UnicodeEncodeError:
        return code.encode("utf-8", "surrogateescape")


def _nice(v: float) -> bool:
    return math.isfinite(v) and 1e-4 <= abs(v) <= 1e5 and abs(v * 1e4 - round(v * 1e4)) < 1e-6


def marshal_constants(code: bytes) -> list[float]:
    """Numeric constants visible in marshalled code bytes, in order, found by their type tags only.

    Marshal writes a float as ``'g'`` (0x67, or 0xE7 with the reference flag) plus 8 little-endian bytes and
    an int as ``'i'`` (0x69/0xE9) plus 4 bytes. Scanning for those tags and keeping only plausible round
    values (a constant written in source code) is enough to recognise normalisation lambdas; nothing is
    decoded as code.
    """
    found: list[tuple[int, int, float]] = []
    for m in re.finditer(rb"[\x67\xe7]", code):
        chunk = code[m.start() + 1 : m.start() + 9]
        if len(chunk) == 8:
            v = struct.unpack("<d", chunk)[0]
            if _nice(v):
                found.append((m.start(), m.start() + 9, float(v)))
    for m in re.finditer(rb"[\x69\xe9]", code):
        chunk = code[m.start() + 1 : m.start() + 5]
        if len(chunk) == 4:
            v = struct.unpack("<i", chunk)[0]
            if 0 < abs(v) <= 65535:
                found.append((m.start(), m.start() + 5, float(v)))
    found.sort()
    out: list[float] = []
    end = -1
    for start, stop, v in found:
        if start >= end:  # a tag inside the bytes of a constant already taken is not a tag
            out.append(v)
            end = stop
    return out


def recognise_lambda(function: Any) -> str | None:
    """The normalisation a Lambda's stored code computes (e.g. ``"x/127.5-1"``), or None if not recognised."""
    code = _code_bytes(function)
    if not code:
        return None
    return KNOWN_LAMBDAS.get(tuple(marshal_constants(code)))


# ------------------------------------------------------------------------------------------------------------
# Reading the file
# ------------------------------------------------------------------------------------------------------------


@dataclass
class KerasLayer:
    """One layer of the chain: Keras class name, its config, and its weight arrays by name, in file order."""

    name: str
    kind: str
    config: dict[str, Any]
    weights: list[tuple[str, np.ndarray]] = field(default_factory=list)

    def weight(self, *suffixes: str) -> np.ndarray | None:
        for wname, arr in self.weights:
            base = wname.rsplit("/", 1)[-1].split(":")[0]
            for s in suffixes:
                if base == s or base.endswith("_" + s):
                    return arr
        return None


@dataclass
class KerasFile:
    """A parsed Keras HDF5 model: version, input shape (H, W, C), data format and the layer chain."""

    path: str
    keras_version: str
    input_shape: tuple[int | None, int | None, int]
    data_format: str  # "channels_last" | "channels_first"
    layers: list[KerasLayer]


def _attr_text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, np.ndarray) and v.shape == ():
        return _attr_text(v.item())
    return str(v)


def _chain(path: str, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The layer configs of a Sequential or single-chain functional model, input to output."""
    cls = cfg.get("class_name")
    inner = cfg.get("config")
    if cls == "Sequential":
        layers = inner if isinstance(inner, list) else (inner or {}).get("layers", [])
        for layer in layers:
            layer.setdefault("name", layer.get("config", {}).get("name", "?"))
        return list(layers)
    if cls in ("Model", "Functional"):
        layers = {ly["name"]: ly for ly in inner.get("layers", [])}
        ins = [x[0] for x in inner.get("input_layers", [])]
        outs = [x[0] for x in inner.get("output_layers", [])]
        if len(ins) != 1 or len(outs) != 1:
            raise ModelError(
                f"{path}: the model has {len(ins)} inputs and {len(outs)} outputs; only "
                "single-input, single-output chains are supported"
            )
        consumers: dict[str, list[str]] = {n: [] for n in layers}
        for ly in layers.values():
            nodes = ly.get("inbound_nodes") or []
            if not nodes:
                continue
            inbound = nodes[0] if len(nodes) == 1 else None
            if isinstance(inbound, dict):  # Keras 3 style
                raise ModelError(
                    f"{path}: layer {ly['name']} uses a Keras 3 graph encoding; save as Keras 2 .h5"
                )
            if inbound is None or len(inbound) != 1:
                raise ModelError(
                    f"{path}: layer {ly['name']} ({ly.get('class_name')}) has several inputs; "
                    "only single-chain models are supported"
                )
            consumers.setdefault(inbound[0][0], []).append(ly["name"])
        order, cur = [], ins[0]
        while True:
            if cur not in layers:
                raise ModelError(f"{path}: the model graph names a layer {cur!r} it does not define")
            order.append(layers[cur])
            if cur == outs[0]:
                break
            nxt = consumers.get(cur, [])
            if len(nxt) != 1:
                raise ModelError(
                    f"{path}: layer {cur} feeds {len(nxt)} layers; only single-chain models are supported"
                )
            cur = nxt[0]
        if len(order) != len(layers):
            raise ModelError(
                f"{path}: the model has branches off its main chain; only single-chain models are supported"
            )
        return order
    raise ModelError(
        f"{path}: unsupported model class {cls!r} in model_config (Sequential or a functional Model expected)"
    )


def read_keras_file(path: str | Path) -> KerasFile:
    """Parse a Keras HDF5 model file (architecture and weights) into a :class:`KerasFile`. Runs nothing."""
    import h5py

    p = Path(path)
    if not p.is_file():
        raise ModelError(f"Keras model file {p} does not exist; give the path of a Keras .h5 model")
    with open(p, "rb") as fh:
        if fh.read(8) != HDF5_SIGNATURE:
            raise ModelError(
                f"{p} is not an HDF5 file; a Keras model saved with model.save('x.h5') is expected"
            )
    try:
        f = h5py.File(p, "r")
    except OSError as err:
        raise ModelError(f"cannot read HDF5 file {p}: {err}") from err
    with f:
        if "model_config" not in f.attrs:
            raise ModelError(
                f"{p} holds no model_config (weights only, saved with save_weights?); save the "
                "whole model with model.save('x.h5')"
            )
        try:
            cfg = json.loads(_attr_text(f.attrs["model_config"]))
        except (ValueError, UnicodeDecodeError) as err:
            raise ModelError(f"{p}: model_config is not valid JSON: {err}") from err
        version = _attr_text(f.attrs.get("keras_version", "?"))
        wroot = f.get("model_weights", f)
        layers = []
        for lc in _chain(str(p), cfg):
            conf = lc.get("config") or {}
            name = str(lc.get("name") or conf.get("name") or "?")
            kind = str(lc.get("class_name"))
            arrays: list[tuple[str, np.ndarray]] = []
            if name in wroot:
                g = wroot[name]
                names = [_attr_text(n) for n in g.attrs.get("weight_names", [])]
                for wn in names:
                    if wn not in g:
                        raise ModelError(f"{p}: weight {wn} of layer {name} is missing from the file")
                    arrays.append((wn, np.asarray(g[wn][()], dtype=np.float32)))
            layers.append(KerasLayer(name, kind, conf, arrays))
    if not layers:
        raise ModelError(f"{p}: the model has no layers")
    return KerasFile(str(p), version, *_input_shape(str(p), layers), layers)


def _data_format(conf: dict[str, Any]) -> str | None:
    if "data_format" in conf and conf["data_format"]:
        return str(conf["data_format"])
    if "dim_ordering" in conf and conf["dim_ordering"]:
        return {"tf": "channels_last", "th": "channels_first"}.get(conf["dim_ordering"], "channels_last")
    return None


def _input_shape(path: str, layers: list[KerasLayer]) -> tuple[tuple[int | None, int | None, int], str]:
    shape = None
    for ly in layers:
        shape = ly.config.get("batch_input_shape") or ly.config.get("batch_shape")
        if shape is not None:
            break
    if shape is None:
        raise ModelError(f"{path}: no layer states the input shape (batch_input_shape)")
    fmt = next((f for ly in layers if (f := _data_format(ly.config))), "channels_last")
    dims = list(shape)[1:]
    if len(dims) != 3:
        raise ModelError(
            f"{path}: input shape {tuple(shape)} is not an image (batch, H, W, C); only image "
            "models are supported"
        )
    h, w, c = (dims[1], dims[2], dims[0]) if fmt == "channels_first" else dims
    if c not in (1, 3):
        raise ModelError(
            f"{path}: the input has {c} channels; only RGB/YUV (3) or grey (1) images are supported"
        )
    return (h, w, int(c)), fmt


# ------------------------------------------------------------------------------------------------------------
# Building the torch module
# ------------------------------------------------------------------------------------------------------------


def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None:
        return default, default
    if isinstance(v, (list, tuple)):
        return int(v[0]), int(v[-1])
    return int(v), int(v)


def _same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow's 'same' padding (before, after) along one axis."""
    keff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + keff - size, 0)
    return total // 2, total - total // 2


class Affine(nn.Module):
    """A Lambda layer's normalisation x*scale + offset."""

    def __init__(self, scale: float, offset: float, text: str) -> None:
        super().__init__()
        self.scale, self.offset, self.text = float(scale), float(offset), text

    def forward(self, x):
        return x * self.scale + self.offset

    def extra_repr(self) -> str:
        return self.text


class SamePad(nn.Module):
    """TensorFlow 'same' padding for a kernel k, stride s (asymmetric when the total is odd)."""

    def __init__(self, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int], value: float) -> None:
        super().__init__()
        self.k, self.s, self.d, self.value = k, s, d, value

    def forward(self, x):
        top, bottom = _same_pads(x.shape[2], self.k[0], self.s[0], self.d[0])
        left, right = _same_pads(x.shape[3], self.k[1], self.s[1], self.d[1])
        if top == bottom == left == right == 0:
            return x
        return F.pad(x, (left, right, top, bottom), value=self.value)


class AvgPoolSame(nn.Module):
    """TensorFlow 'same' average pooling: the mean over the real (unpadded) inputs of each window."""

    def __init__(self, k: tuple[int, int], s: tuple[int, int]) -> None:
        super().__init__()
        self.k, self.s = k, s

    def forward(self, x):
        top, bottom = _same_pads(x.shape[2], self.k[0], self.s[0])
        left, right = _same_pads(x.shape[3], self.k[1], self.s[1])
        xp = F.pad(x, (left, right, top, bottom))
        ones = F.pad(torch.ones_like(x[:1, :1]), (left, right, top, bottom))
        return F.avg_pool2d(xp, self.k, self.s) / F.avg_pool2d(ones, self.k, self.s)


class KerasFlatten(nn.Module):
    """Keras Flatten: NHWC order for channels-last models (what the next Dense was trained on)."""

    def __init__(self, channels_last: bool) -> None:
        super().__init__()
        self.channels_last = channels_last

    def forward(self, x):
        if self.channels_last and x.dim() == 4:
            x = x.permute(0, 2, 3, 1)
        return x.reshape(x.shape[0], -1)

    def extra_repr(self) -> str:
        return "NHWC" if self.channels_last else "NCHW"


class Crop(nn.Module):
    def __init__(self, top: int, bottom: int, left: int, right: int) -> None:
        super().__init__()
        self.c = (top, bottom, left, right)

    def forward(self, x):
        t, b, lft, r = self.c
        return x[:, :, t : x.shape[2] - b, lft : x.shape[3] - r]

    def extra_repr(self) -> str:
        return "top={}, bottom={}, left={}, right={}".format(*self.c)


class ZeroPad(nn.Module):
    """Keras ZeroPadding2D: zeros above, below, left and right."""

    def __init__(self, top: int, bottom: int, left: int, right: int) -> None:
        super().__init__()
        self.p = (left, right, top, bottom)

    def forward(self, x):
        return F.pad(x, self.p)

    def extra_repr(self) -> str:
        return "left={}, right={}, top={}, bottom={}".format(*self.p)


class GlobalPool(nn.Module):
    """Keras GlobalAveragePooling2D / GlobalMaxPooling2D: (N, C, H, W) -> (N, C)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, x):
        return x.mean(dim=(2, 3)) if self.how == "avg" else x.amax(dim=(2, 3))

    def extra_repr(self) -> str:
        return self.how


class BatchNorm(nn.Module):
    """Inference batch normalisation along dim 1 (channels of NCHW, or features of (N, F))."""

    def __init__(self, gamma, beta, mean, var, eps: float) -> None:
        super().__init__()
        scale = gamma / np.sqrt(var + eps)
        self.register_buffer("scale", torch.from_numpy(scale.astype(np.float32)))
        self.register_buffer("shift", torch.from_numpy((beta - mean * scale).astype(np.float32)))

    def forward(self, x):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return x * self.scale.view(shape) + self.shift.view(shape)


class Fn(nn.Module):
    """A parameter-free activation torch has no module for (picklable: chosen by name)."""

    def __init__(self, name: str, **params: float | None) -> None:
        super().__init__()
        self.name, self.params = name, params

    def forward(self, x):
        p = self.params
        if self.name == "hard_sigmoid":  # Keras 1/2: clip(0.2 x + 0.5, 0, 1)
            return torch.clamp(0.2 * x + 0.5, 0.0, 1.0)
        if self.name == "exponential":
            return torch.exp(x)
        if self.name == "thresholded_relu":
            return x * (x > p["theta"]).to(x.dtype)
        if self.name == "relu":  # Keras 2 ReLU layer: threshold, negative slope, max value
            y = torch.where(x >= p["threshold"], x, p["negative_slope"] * (x - p["threshold"]))
            return torch.clamp(y, max=p["max_value"]) if p["max_value"] is not None else y
        raise AssertionError(self.name)

    def extra_repr(self) -> str:
        return ", ".join([self.name] + [f"{k}={v}" for k, v in self.params.items()])


ACTIVATIONS = (
    "linear",
    "relu",
    "elu",
    "tanh",
    "sigmoid",
    "hard_sigmoid",
    "softmax",
    "softplus",
    "softsign",
    "selu",
    "swish",
    "silu",
    "relu6",
    "exponential",
)


def _activation(name: str | None, layer: str) -> Any:
    name = (name or "linear").lower()
    if name == "linear":
        return None
    simple = {
        "relu": nn.ReLU,
        "elu": nn.ELU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "softplus": nn.Softplus,
        "softsign": nn.Softsign,
        "selu": nn.SELU,
        "swish": nn.SiLU,
        "silu": nn.SiLU,
        "relu6": nn.ReLU6,
    }
    if name in simple:
        return simple[name]()
    if name == "softmax":
        return nn.Softmax(dim=1)
    if name in ("hard_sigmoid", "exponential"):
        return Fn(name)
    raise ModelError(
        f"layer {layer}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})"
    )


@dataclass(frozen=True, slots=True)
class BuildOptions:
    lambda_text: str | None = None  # the user's normalisation for every Lambda layer
    flip_kernels: bool = False


def build_module(kf: KerasFile, *, options: BuildOptions = BuildOptions()) -> tuple[Any, list[str]]:
    """A ``torch.nn.Sequential`` computing the file's network on NCHW float input, and a note per Lambda."""
    channels_last = kf.data_format == "channels_last"
    seq: list[tuple[str, Any]] = []
    notes: list[str] = []
    where = kf.path
    spatial = True  # 4-D (N, C, H, W) until a Flatten

    def need(arr, what: str, ly: KerasLayer) -> np.ndarray:
        if arr is None:
            raise ModelError(f"{where}: layer {ly.name} ({ly.kind}) has no {what} weights in the file")
        return arr

    def add(name: str, mod: Any) -> None:
        if mod is not None:
            seq.append((name.replace(".", "_"), mod))

    for ly in kf.layers:
        c, kind = ly.config, ly.kind
        fmt = _data_format(c)
        if fmt is not None and fmt != kf.data_format and kind not in ("Dense", "Flatten"):
            raise ModelError(
                f"{where}: layer {ly.name} uses {fmt} but the model's input is {kf.data_format}; "
                "mixed data formats are not supported"
            )
        if kind in (
            "InputLayer",
            "Dropout",
            "SpatialDropout2D",
            "GaussianNoise",
            "GaussianDropout",
            "AlphaDropout",
            "ActivityRegularization",
        ):
            continue
        if kind in ("Conv2D", "Convolution2D"):
            filters = int(c.get("filters", c.get("nb_filter", 0)))
            k = _pair(c["kernel_size"], 1) if "kernel_size" in c else (int(c["nb_row"]), int(c["nb_col"]))
            s = _pair(c.get("strides", c.get("subsample")), 1)
            d = _pair(c.get("dilation_rate"), 1)
            pad = str(c.get("padding", c.get("border_mode", "valid"))).lower()
            if pad not in ("valid", "same"):
                raise ModelError(
                    f"{where}: layer {ly.name} (Conv2D) uses padding {pad!r}; only valid and same "
                    "are supported"
                )
            if int(c.get("groups", 1) or 1) != 1:
                raise ModelError(
                    f"{where}: layer {ly.name} (Conv2D) uses groups={c['groups']}; only groups=1 is supported"
                )
            use_bias = bool(c.get("use_bias", c.get("bias", True)))
            arrs = [a for _, a in ly.weights]
            kern = need(
                ly.weight("kernel", "W")
                if ly.weight("kernel", "W") is not None
                else (arrs[0] if arrs else None),
                "kernel",
                ly,
            )
            if kern.ndim != 4:
                raise ModelError(
                    f"{where}: layer {ly.name}: kernel has shape {kern.shape}, 4 dimensions expected"
                )
            th = c.get("dim_ordering") == "th"  # Keras 1 Theano ordering stores (out, in, kh, kw)
            want = (filters, None, *k) if th else (*k, None, filters)
            layout = "(out, in, kh, kw)" if th else "(kh, kw, in, out)"
            if any(wd is not None and wd != got for wd, got in zip(want, kern.shape, strict=True)):
                raise ModelError(
                    f"{where}: layer {ly.name}: kernel shape {kern.shape} does not match "
                    f"{filters} filters of {k[0]}x{k[1]} ({layout})"
                )
            w = kern if th else kern.transpose(3, 2, 0, 1)  # (kh, kw, in, out) -> (out, in, kh, kw)
            if options.flip_kernels:
                w = w[:, :, ::-1, ::-1]
            conv = nn.Conv2d(w.shape[1], w.shape[0], k, stride=s, dilation=d, bias=use_bias)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(np.ascontiguousarray(w)))
                if use_bias:
                    b = need(
                        ly.weight("bias", "b")
                        if ly.weight("bias", "b") is not None
                        else (arrs[1] if len(arrs) > 1 else None),
                        "bias",
                        ly,
                    )
                    conv.bias.copy_(torch.from_numpy(b.reshape(-1)))
            if pad == "same":
                add(ly.name + "_pad", SamePad(k, s, d, 0.0))
            add(ly.name, conv)
            add(ly.name + "_act", _activation(c.get("activation"), ly.name))
        elif kind in ("MaxPooling2D", "AveragePooling2D"):
            k = _pair(c.get("pool_size"), 2)
            s = _pair(c.get("strides") or k, 1)
            pad = str(c.get("padding", c.get("border_mode", "valid"))).lower()
            if pad not in ("valid", "same"):
                raise ModelError(
                    f"{where}: layer {ly.name} ({kind}) uses padding {pad!r}; only valid and same "
                    "are supported"
                )
            if kind == "MaxPooling2D":
                if pad == "same":
                    add(ly.name + "_pad", SamePad(k, s, (1, 1), float("-inf")))
                add(ly.name, nn.MaxPool2d(k, s))
            elif pad == "same":
                add(ly.name, AvgPoolSame(k, s))
            else:
                add(ly.name, nn.AvgPool2d(k, s))
        elif kind == "Dense":
            if spatial:
                raise ModelError(
                    f"{where}: layer {ly.name} (Dense) is applied to a 4-D feature map; only Dense "
                    "layers after Flatten or global pooling are supported"
                )
            units = int(c.get("units", c.get("output_dim", 0)))
            use_bias = bool(c.get("use_bias", c.get("bias", True)))
            arrs = [a for _, a in ly.weights]
            kern = ly.weight("kernel", "W")
            kern = need(kern if kern is not None else (arrs[0] if arrs else None), "kernel", ly)
            if kern.ndim != 2 or kern.shape[1] != units:
                raise ModelError(
                    f"{where}: layer {ly.name}: kernel shape {kern.shape} does not match {units} units"
                )
            lin = nn.Linear(kern.shape[0], units, bias=use_bias)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(kern.T)))
                if use_bias:
                    b = ly.weight("bias", "b")
                    b = need(b if b is not None else (arrs[1] if len(arrs) > 1 else None), "bias", ly)
                    lin.bias.copy_(torch.from_numpy(b.reshape(-1)))
            add(ly.name, lin)
            add(ly.name + "_act", _activation(c.get("activation"), ly.name))
        elif kind == "Flatten":
            add(ly.name, KerasFlatten(channels_last))
            spatial = False
        elif kind in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
            if c.get("keepdims"):
                raise ModelError(f"{where}: layer {ly.name} ({kind}) with keepdims=True is not supported")
            add(ly.name, GlobalPool("max" if "Max" in kind else "avg"))
            spatial = False
        elif kind == "ZeroPadding2D":
            pd = c.get("padding", 1)
            if isinstance(pd, int):
                pd = ((pd, pd), (pd, pd))
            elif isinstance(pd, list) and len(pd) == 2 and all(isinstance(v, int) for v in pd):
                pd = ((pd[0], pd[0]), (pd[1], pd[1]))  # Keras 1 and 2: (symmetric rows, symmetric columns)
            (t, b), (lft, r) = (_pair(pd[0], 0), _pair(pd[1], 0))
            add(ly.name, ZeroPad(t, b, lft, r))
        elif kind == "Activation":
            act = _activation(c.get("activation"), ly.name)
            add(ly.name, act if act is not None else nn.Identity())
        elif kind == "ELU":
            add(ly.name, nn.ELU(alpha=float(c.get("alpha", 1.0))))
        elif kind == "LeakyReLU":
            add(ly.name, nn.LeakyReLU(float(c.get("alpha", c.get("negative_slope", 0.3)))))
        elif kind == "ReLU":
            mx = c.get("max_value")
            slope = float(c.get("negative_slope", 0.0) or 0.0)
            thr = float(c.get("threshold", 0.0) or 0.0)
            if mx is None and slope == 0.0 and thr == 0.0:
                add(ly.name, nn.ReLU())
            else:
                add(
                    ly.name,
                    Fn(
                        "relu",
                        max_value=None if mx is None else float(mx),
                        negative_slope=slope,
                        threshold=thr,
                    ),
                )
        elif kind == "ThresholdedReLU":
            add(ly.name, Fn("thresholded_relu", theta=float(c.get("theta", 1.0))))
        elif kind == "Softmax":
            axis = int(c.get("axis", -1))
            if axis not in ((-1, 1, 3) if channels_last or not spatial else (1,)):
                raise ModelError(f"{where}: layer {ly.name} (Softmax) over axis {axis} is not supported")
            add(ly.name, nn.Softmax(dim=1))
        elif kind == "BatchNormalization":
            if int(c.get("mode", 0) or 0) != 0:
                raise ModelError(
                    f"{where}: layer {ly.name} (BatchNormalization) uses Keras 1 mode {c.get('mode')}"
                    " (statistics of each batch); only mode 0 is supported"
                )
            axis = c.get("axis", -1)
            axis = axis[0] if isinstance(axis, list) and len(axis) == 1 else axis
            ok = {-1, 1} if not spatial else ({-1, 3} if channels_last else {1})
            if axis not in ok:
                raise ModelError(
                    f"{where}: layer {ly.name} (BatchNormalization) over axis {axis} is not "
                    "supported (channels only)"
                )
            mean = need(ly.weight("moving_mean", "running_mean"), "moving_mean", ly)
            var = need(ly.weight("moving_variance", "running_std"), "moving_variance", ly)
            gamma = ly.weight("gamma")
            beta = ly.weight("beta")
            gamma = np.ones_like(mean) if gamma is None else gamma
            beta = np.zeros_like(mean) if beta is None else beta
            add(ly.name, BatchNorm(gamma, beta, mean, var, float(c.get("epsilon", 1e-3))))
        elif kind == "Cropping2D":
            cr = c.get("cropping", ((0, 0), (0, 0)))
            if isinstance(cr, int):
                cr = ((cr, cr), (cr, cr))
            (t, b), (lft, r) = (_pair(cr[0], 0), _pair(cr[1], 0))
            add(ly.name, Crop(t, b, lft, r))
        elif kind == "Lambda":
            if options.lambda_text is not None:
                text, how = options.lambda_text, "given with lambda="
            else:
                text = (
                    recognise_lambda(c.get("function"))
                    if c.get("function_type", "lambda") == "lambda"
                    else None
                )
                how = "recognised from the constants in its stored code"
                if text is None:
                    raise ModelError(
                        f"{where}: layer {ly.name} is a Lambda whose stored code is not a normalisation this "
                        "importer recognises (the code is never run); say what it computes with "
                        '--model-option lambda="x/127.5-1" (forms x/a-b, x*a+b, x/a)'
                    )
            scale, offset = parse_affine(text)
            add(ly.name, Affine(scale, offset, text))
            notes.append(f"{ly.name}: {text} ({how})")
        else:
            raise ModelError(
                f"{where}: layer {ly.name} has type {kind}, which the Keras importer does not support"
            )
    return nn.Sequential(OrderedDict(seq)), notes


# ------------------------------------------------------------------------------------------------------------
# The public entry point
# ------------------------------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _as_bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE | _FALSE:
        return s in _TRUE
    raise ModelError(f"model option {key}={v!r}: expected true or false")


def _output_scale(v: Any) -> tuple[float, str]:
    if isinstance(v, (int, float)):
        return float(v), f"x{float(v):g}"
    s = str(v).strip().lower()
    if s in OUTPUTS:
        return OUTPUTS[s], s
    try:
        return float(s), f"x{float(s):g}"
    except ValueError as err:
        raise ModelError(
            f"model option output={v!r}: expected {', '.join(OUTPUTS)} or a number (radians per output unit)"
        ) from err


def _parse_size(v: Any) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", str(v))
    if m is None:
        raise ModelError(f"model option size={v!r}: expected HxW, e.g. size=66x200")
    return int(m[1]), int(m[2])


@dataclass(frozen=True, slots=True)
class KerasImport:
    """What the importer decided for a file, for ``lidarmt camera models`` and the model card."""

    path: str
    keras_version: str
    input_shape: tuple[int, int, int]
    data_format: str
    preset: str
    preset_note: str
    output: str
    lambdas: tuple[str, ...]
    parameters: int
    layers: tuple[str, ...]


def load_keras(
    path: str | Path,
    *,
    preprocess: str | None = None,
    output: str | float | None = None,
    size: str | None = None,
    device: str = "cpu",
    batch_size: int | str = 64,
    name: str | None = None,
    flip_kernels: bool | str = False,
    **extra: Any,
) -> Any:
    """Import a Keras HDF5 model as a :class:`~lidarmt.camera.models.torchmodel.TorchSteeringModel`.

    Options (all also accepted as strings, as ``--model-option key=value`` gives them):
    ``preprocess`` a :data:`PRESETS` name (default: :func:`default_preset` of the input shape);
    ``output`` a :data:`OUTPUTS` name or radians per output unit; ``lambda`` the normalisation of the file's
    Lambda layers when it is not recognised (``"x/127.5-1"``); ``size`` ``HxW`` for files whose input size is
    not fixed; ``flip_kernels`` for Keras 1 files trained on Theano; ``device``, ``batch_size``, ``name``.
    """
    from lidarmt.camera.models.torchmodel import TorchSteeringModel

    lambda_text = extra.pop("lambda", None)
    if lambda_text is None:
        lambda_text = extra.pop("lambda_", None)
    if extra:
        raise ModelError(
            f"Keras model {path}: unknown option(s) {', '.join(sorted(extra))}; known: preprocess, "
            "output, lambda, size, flip_kernels, device, batch_size, name"
        )
    if lambda_text is not None:
        parse_affine(lambda_text)  # fail early with the parser's message
    kf = read_keras_file(path)
    h, w, ch = kf.input_shape
    if size is not None:
        h, w = _parse_size(size)
    if h is None or w is None:
        raise ModelError(
            f"{path}: the input size is not fixed in the file; give it with --model-option size=HxW"
        )
    pname = preprocess or default_preset((h, w, ch))
    if pname not in PRESETS:
        raise ModelError(f"model option preprocess={pname!r}: unknown; known presets: {', '.join(PRESETS)}")
    preset = PRESETS[pname]
    if (preset.colour == "grey") != (ch == 1):
        raise ModelError(
            f"{path}: preprocess={pname} gives {'1' if preset.colour == 'grey' else '3'} channel(s) "
            f"but the network takes {ch}; choose another preset ({', '.join(PRESETS)})"
        )
    scale, out_name = _output_scale(output if output is not None else preset.output)
    module, notes = build_module(
        kf, options=BuildOptions(lambda_text=lambda_text, flip_kernels=_as_bool("flip_kernels", flip_kernels))
    )
    _check_output(module, kf, (h, w, ch))

    def pre(images: np.ndarray) -> Any:
        return torch.from_numpy(_prepare_batch(images, preset, (h, w)))

    def post(y: Any) -> np.ndarray:
        return y.detach().float().cpu().numpy().reshape(-1).astype(np.float64) * scale

    n_params = int(sum(p.numel() for p in module.parameters()))
    info = KerasImport(
        str(path),
        kf.keras_version,
        (h, w, ch),
        kf.data_format,
        pname,
        preset.note,
        out_name,
        tuple(notes),
        n_params,
        tuple(f"{ly.name}:{ly.kind}" for ly in kf.layers),
    )
    note = f"{preset.note}; output {out_name}"
    spec = InputSpec(height=h, width=w, colour=preset.colour, history=0, note=note)
    try:
        bs = int(batch_size)
    except (TypeError, ValueError) as err:
        raise ModelError(f"model option batch_size={batch_size!r}: expected a whole number") from err
    try:
        model = TorchSteeringModel(
            name or Path(path).stem, module, spec, pre, post, batch_size=bs, device=device, card=str(path)
        )
    except (RuntimeError, AssertionError) as err:  # unknown device string, or CUDA not available
        raise ModelError(f"model {path}: cannot use device {device!r} ({str(err).splitlines()[0]})") from err
    model.keras = info  # type: ignore[attr-defined]
    return model


def _check_output(module: Any, kf: KerasFile, shape: tuple[int, int, int]) -> None:
    """Run zeros through the module: shape errors become one line naming the file; one output is required."""

    h, w, ch = shape
    try:
        with torch.inference_mode():
            y = module.eval()(torch.zeros(1, ch, h, w))
    except RuntimeError as err:
        msg = str(err).splitlines()[0]
        raise ModelError(
            f"{kf.path}: the layers do not fit together for a {h}x{w}x{ch} input ({msg})"
        ) from err
    if tuple(y.shape) not in ((1, 1), (1,)):
        raise ModelError(
            f"{kf.path}: the network outputs shape {tuple(y.shape[1:])} per image; a steering model "
            "must output one value"
        )


USAGE = (
    "A Keras HDF5 model (Keras 1.x or 2.x, saved with model.save) is used by its path, e.g. "
    "--model ../shared/data/models/dave2_udacity_simulator.h5. It is imported into torch without TensorFlow; "
    "its code is never run. Input preparation: --model-option preprocess="
    + "|".join(PRESETS)
    + " (default dave2-udacity-sim for a 66x200x3 input, else resize, RGB); output conversion: "
    "--model-option output=" + "|".join(OUTPUTS) + "|<radians per unit> (default radians; udacity-sim for "
    'dave2-udacity-sim); an unrecognised Lambda layer: --model-option lambda="x/127.5-1".'
)
