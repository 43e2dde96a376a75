"""Import a Keras HDF5 steering model (Keras 1.x or 2.x ``model.save`` file) into torch, without TensorFlow.

The file is read as **data**: the architecture comes from the ``model_config`` JSON attribute, the weights
from the ``model_weights`` group (h5py), and a torch module is built layer by layer. Nothing stored in the
file is ever executed: a ``Lambda`` layer holds marshalled Python bytecode, which is neither unmarshalled nor
run.
Instead its bytes are read by a small parser written here (:func:`decode_lambda`: the code object's header,
instructions and constants, for CPython 2.7 to 3.12) and evaluated symbolically: a lambda that computes an
affine map of x (``x/127.5-1``, ``-(x/127.5-1)``, ``x/255``) becomes exactly that map; any other lambda is
refused with one line naming the layer, and the user says what it computes with the option ``lambda="x/a-b"``
(:func:`parse_affine`: ``x/a±b``, ``x*a±b``, ``x/a``, ``x*a``, ``x±b``, ``x``).

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
preparations we know (``preprocess=`` option), and an :class:`InputRecipe` refines one step by step
(``frame``, ``crop``, ``resize``, ``colour``, ``scale``, ``output``, ``sign``: options, or a small JSON file
``model.h5.recipe.json`` read by :func:`recipe_options`); the default is ``dave2-udacity-sim`` when the network's input
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

from lidarmt._paths import read_text
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


def _prepare_batch(images: np.ndarray, recipe: InputRecipe, size: tuple[int, int]) -> np.ndarray:
    """``(N, H, W, 3)`` uint8 RGB → ``(N, C, h, w)`` float32 as the network was fed: frame size, crop, resize,
    colour space, then the recipe's scaling (0..255 values when it has none)."""
    import cv2

    h, w = size
    out = []
    for img in images:
        if recipe.frame is not None and img.shape[:2] != recipe.frame:
            fh, fw = recipe.frame
            img = cv2.resize(img, (fw, fh), interpolation=cv2.INTER_AREA)
        if recipe.rows != (None, None) or recipe.cols != (None, None):
            full = img.shape[:2]
            img = img[slice(*recipe.rows), slice(*recipe.cols)]
            if img.shape[0] < 1 or img.shape[1] < 1:
                raise ModelError(f"crop {recipe.crop_text()} leaves nothing of a {full[0]}x{full[1]} frame; "
                                 "give a crop that fits the source's frames")
        if recipe.resize == "auto":
            if img.shape[:2] != (h, w):
                shrink = img.shape[0] >= h and img.shape[1] >= w
                img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        else:
            # dave2-udacity-sim: the reference passes cv2.INTER_AREA as resize's third *positional* argument,
            # which is `dst`: the interpolation it actually uses is the default, bilinear.
            img = cv2.resize(img, (w, h), interpolation=getattr(cv2, INTERPOLATIONS[recipe.resize]))
        if recipe.colour == "yuv":
            img = cv2.cvtColor(img, cv2.COLOR_RGB2YUV)
        elif recipe.colour == "bgr":
            img = img[..., ::-1]
        elif recipe.colour == "grey":
            img = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None]
        out.append(np.ascontiguousarray(img))
    x = np.stack(out).astype(np.float32).transpose(0, 3, 1, 2)
    if (recipe.scale, recipe.offset) != (1.0, 0.0):
        x = x * np.float32(recipe.scale) + np.float32(recipe.offset)
    return x


# ------------------------------------------------------------------------------------------------------------
# A model's input recipe: options, or a JSON sidecar file
# ------------------------------------------------------------------------------------------------------------

#: cv2 interpolation flags by the names a recipe uses ("auto": area when shrinking, else bilinear).
INTERPOLATIONS = {"area": "INTER_AREA", "linear": "INTER_LINEAR", "nearest": "INTER_NEAREST",
                  "cubic": "INTER_CUBIC"}
COLOURS = ("rgb", "bgr", "yuv", "grey")
#: The recipe's keys: how frames become the network's input and how its output becomes radians.
RECIPE_KEYS = ("preprocess", "frame", "crop", "resize", "colour", "scale", "output", "sign")
#: Every option :func:`load_keras` takes.
OPTION_KEYS = RECIPE_KEYS + ("lambda", "size", "flip_kernels", "device", "batch_size", "name")
#: What a recipe file (``model.h5.recipe.json``, ``--recipe FILE``) may hold ("note": free text).
RECIPE_FILE_KEYS = RECIPE_KEYS + ("lambda", "size", "flip_kernels", "note")
RECIPE_SUFFIX = ".recipe.json"
_RECIPE_FILE_LIMIT = 64 * 1024
_ALIASES = {"color": "colour", "lambda_": "lambda"}


@dataclass(frozen=True, slots=True)
class InputRecipe:
    """How a model was fed: optional whole-frame size, a crop (Python slice bounds in pixels: ``60:-25`` drops
    60 rows at the top and 25 at the bottom), the resize to the input size, the colour space, an affine scaling
    of the 0..255 values, and the output's conversion to radians (positive = left) with a sign."""

    preset: str
    colour: str
    frame: tuple[int, int] | None = None
    rows: tuple[int | None, int | None] = (None, None)
    cols: tuple[int | None, int | None] = (None, None)
    resize: str = "auto"
    scale: float = 1.0
    offset: float = 0.0
    scale_text: str = "x"
    output: float = 1.0
    output_name: str = "radians"
    sign: int = 1

    def crop_text(self) -> str:
        def part(a: int | None, b: int | None) -> str:
            return f"{'' if a is None else a}:{'' if b is None else b}"

        text = part(*self.rows)
        return text if self.cols == (None, None) else f"{text},{part(*self.cols)}"

    def describe(self) -> str:
        parts = [f"preset {self.preset}"]
        if self.frame is not None:
            parts.append(f"frame resized to {self.frame[0]}x{self.frame[1]} first")
        if self.rows != (None, None) or self.cols != (None, None):
            parts.append(f"crop {self.crop_text()}")
        parts += [f"resize {self.resize}", self.colour.upper() if self.colour != "grey" else "grey"]
        if self.scale_text != "x":
            parts.append(f"scaled {self.scale_text}")
        parts.append(f"output {self.output_name}" + (", sign flipped" if self.sign < 0 else ""))
        return ", ".join(parts)


def _slice_bounds(text: str, key: str) -> tuple[int | None, int | None]:
    a, sep, b = text.partition(":")
    if not sep:
        raise ModelError(f"model option {key}: {text!r} is not START:STOP (e.g. crop=60:-25)")
    try:
        return (int(a) if a.strip() else None, int(b) if b.strip() else None)
    except ValueError as err:
        raise ModelError(f"model option {key}: {text!r} is not START:STOP with whole numbers (e.g. crop=60:-25)") \
            from err


def _parse_crop(v: Any) -> tuple[tuple[int | None, int | None], tuple[int | None, int | None]]:
    """``"60:-25"`` (rows) or ``"60:-25,0:320"`` (rows, columns); a JSON list ``[60, -25]`` means rows."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(x is None or isinstance(x, int) for x in v) \
            and not any(isinstance(x, bool) for x in v):
        return (v[0], v[1]), (None, None)
    if not isinstance(v, str) or not v.strip() or len(v) > 64:
        raise ModelError(f"model option crop={v!r}: expected ROWS or ROWS,COLS as START:STOP (e.g. crop=60:-25)")
    if v.strip().lower() == "none":
        return (None, None), (None, None)
    parts = v.split(",")
    if len(parts) > 2:
        raise ModelError(f"model option crop={v!r}: expected ROWS or ROWS,COLS as START:STOP (e.g. crop=60:-25)")
    rows = _slice_bounds(parts[0], "crop")
    cols = _slice_bounds(parts[1], "crop") if len(parts) == 2 else (None, None)
    return rows, cols


def _parse_sign(v: Any) -> int:
    s = str(v).strip().lower()
    if s in ("1", "+1", "1.0", "left", "+"):
        return 1
    if s in ("-1", "-1.0", "right", "-"):
        return -1
    raise ModelError(f"model option sign={v!r}: expected 1 (positive output = left) or -1 (positive = right)")


def _option(key: str, v: Any, recipe: dict[str, Any]) -> None:
    """Check one recipe key's value and put what it means into ``recipe`` (InputRecipe's fields)."""
    if key == "frame":
        recipe["frame"] = None if str(v).strip().lower() == "none" else _parse_size(v, key="frame")
    elif key == "crop":
        recipe["rows"], recipe["cols"] = _parse_crop(v)
    elif key == "resize":
        s = str(v).strip().lower()
        if s != "auto" and s not in INTERPOLATIONS:
            raise ModelError(f"model option resize={v!r}: expected auto, {', '.join(INTERPOLATIONS)}")
        recipe["resize"] = s
    elif key == "colour":
        s = {"gray": "grey", "greyscale": "grey", "grayscale": "grey"}.get(str(v).strip().lower(),
                                                                           str(v).strip().lower())
        if s not in COLOURS:
            raise ModelError(f"model option colour={v!r}: expected {', '.join(COLOURS)}")
        recipe["colour"] = s
    elif key == "scale":
        recipe["scale"], recipe["offset"] = parse_affine(str(v))
        recipe["scale_text"] = re.sub(r"\s+", "", str(v)) or "x"
    elif key == "output":
        recipe["output"], recipe["output_name"] = _output_scale(v)
    elif key == "sign":
        recipe["sign"] = _parse_sign(v)


def make_recipe(input_shape: tuple[int, int, int], options: dict[str, Any]) -> InputRecipe:
    """The recipe for a network input ``(H, W, C)``: the preset (``preprocess``, default
    :func:`default_preset`), with every other recipe key of ``options`` overriding it."""
    pname = options.get("preprocess") or default_preset(input_shape)
    if pname not in PRESETS:
        raise ModelError(f"model option preprocess={pname!r}: unknown; known presets: {', '.join(PRESETS)}")
    p = PRESETS[pname]
    scale, out_name = _output_scale(p.output)
    fields: dict[str, Any] = {"preset": pname, "colour": p.colour, "frame": p.sim_frame,
                              "output": scale, "output_name": out_name}
    if p.crop_rows != (0, 0):
        top, bottom = p.crop_rows
        fields["rows"] = (top or None, -bottom if bottom else None)
    if p.sim_frame is not None:
        fields["resize"] = "linear"
    for key in RECIPE_KEYS[1:]:
        if options.get(key) is not None:
            _option(key, options[key], fields)
    return InputRecipe(**fields)


def recipe_file_for(model_path: str | Path) -> Path:
    """The sidecar recipe of a model file: ``model.h5`` → ``model.h5.recipe.json``."""
    return Path(str(model_path) + RECIPE_SUFFIX)


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """The options a recipe file holds, checked (a JSON object of :data:`RECIPE_FILE_KEYS` with plain values);
    every problem is one line naming the file. The ``note`` is dropped."""
    p = Path(path)
    text = read_text(p, max_bytes=_RECIPE_FILE_LIMIT, what="recipe file (a small JSON object)",
                     error=ModelError)  # never a FIFO or /dev/zero
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ModelError(f"{p}: not a JSON recipe ({str(err).splitlines()[0] if str(err) else 'too deep'})") \
            from err
    if not isinstance(doc, dict):
        raise ModelError(f"{p}: a recipe file holds one JSON object, e.g. {{\"crop\": \"60:-25\", \"colour\": \"yuv\"}}")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        key = _ALIASES.get(key, key)
        if key not in RECIPE_FILE_KEYS:
            raise ModelError(f"{p}: unknown recipe key {str(key)[:40]!r}; known keys: {', '.join(RECIPE_FILE_KEYS)}")
        plain = value is None or isinstance(value, (str, int, float, bool)) or (
            key == "crop" and isinstance(value, list) and len(value) == 2
            and all(v is None or isinstance(v, int) for v in value))
        if not plain or (isinstance(value, str) and len(value) > 200):
            raise ModelError(f"{p}: recipe key {key!r} must hold a short string or a number")
        if key == "note" or value is None:
            continue
        try:
            if key in RECIPE_KEYS[1:]:
                _option(key, value, {})
            elif key == "preprocess" and value not in PRESETS:
                raise ModelError(f"preprocess={value!r}: unknown; known presets: {', '.join(PRESETS)}")
            elif key == "lambda":
                parse_affine(str(value))
            elif key == "size":
                _parse_size(value)
            elif key == "flip_kernels":
                _as_bool(key, value)
        except ModelError as err:
            raise ModelError(f"{p}: {err}") from err
        out[key] = value
    return out


def recipe_options(model_path: str | Path, recipe: str | Path | None = None) -> dict[str, Any]:
    """The options of ``recipe`` (a file), else of the model's sidecar ``model.h5.recipe.json`` when there is
    one, else none. Callers merge them under the options given on the command line and record the result (a
    bundle carries the options themselves, so replay does not depend on the sidecar)."""
    if recipe is not None:
        return read_recipe_file(recipe)
    side = recipe_file_for(model_path)
    return read_recipe_file(side) if side.is_file() else {}


# ------------------------------------------------------------------------------------------------------------
# Lambda layers: read the stored bytecode as data (never unmarshalled, never run) and accept only affine maps
# ------------------------------------------------------------------------------------------------------------

_NUM = r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_AFFINE = re.compile(rf"^\(?x(?:(?P<op>[*/])(?P<a>{_NUM}))?\)?(?:(?P<sign>[+-])(?P<b>{_NUM}))?$")


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
    if not (math.isfinite(scale) and 0.0 < abs(scale) <= MAX_INPUT_SCALE and math.isfinite(offset)
            and abs(offset) <= MAX_INPUT_SCALE):
        raise ModelError(f"lambda={text!r}: a scale or offset beyond ±{MAX_INPUT_SCALE:g} (or zero) is no pixel "
                         "normalisation; it would feed the network infinities")
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


_FLAG = 0x80  # marshal's "remember this object" bit on a type tag


def _marshal_consts(code: bytes, pos: int) -> list[Any] | None:
    """The constants tuple of a marshalled code object at ``pos``: None, booleans, ints and floats only (anything
    else, such as a nested function or a reference to an earlier object, gives None: not a plain lambda)."""
    if pos >= len(code):
        return None
    tag = code[pos] & ~_FLAG
    if tag == ord(")"):  # small tuple (Python 3.4+)
        if pos + 2 > len(code):
            return None
        n, pos = code[pos + 1], pos + 2
    elif tag == ord("("):
        if pos + 5 > len(code):
            return None
        n, pos = struct.unpack_from("<i", code, pos + 1)[0], pos + 5
    else:
        return None
    if not 0 <= n <= 64:
        return None
    out: list[Any] = []
    for _ in range(n):
        if pos >= len(code):
            return None
        t = code[pos] & ~_FLAG
        if t == ord("N"):
            out.append(None)
            pos += 1
        elif t in (ord("T"), ord("F")):
            out.append(t == ord("T"))
            pos += 1
        elif t == ord("g") and pos + 9 <= len(code):  # binary float
            out.append(struct.unpack_from("<d", code, pos + 1)[0])
            pos += 9
        elif t == ord("i") and pos + 5 <= len(code):
            out.append(struct.unpack_from("<i", code, pos + 1)[0])
            pos += 5
        elif t == ord("f") and pos + 2 <= len(code):  # float as text (marshal versions 0 and 1)
            size = code[pos + 1]
            try:
                out.append(float(code[pos + 2 : pos + 2 + size].decode("ascii")))
            except (UnicodeDecodeError, ValueError):
                return None
            pos += 2 + size
        else:
            return None
    return out


# Opcodes of the instructions an affine lambda compiles to: CPython 2.7 and 3.0-3.10, then 3.11/3.12.
_OLD_OPS = {9: "nop", 10: "pos", 11: "neg", 20: "mul", 21: "div", 23: "add", 24: "sub", 27: "div", 83: "ret",
            100: "const", 124: "load"}
_NEW_OPS = {0: "cache", 9: "nop", 11: "neg", 83: "ret", 100: "const", 122: "binop", 124: "load", 151: "resume"}
_BINOP_311 = {0: "add", 5: "mul", 10: "sub", 11: "div"}


def _instructions(co_code: bytes, family: str) -> list[tuple[str, int]] | None:
    """``co_code`` decoded as ``family`` ("var": CPython <= 3.5, "word": 3.6-3.10, "word311": 3.11/3.12),
    as (operation, argument) pairs; None if any instruction is not one an affine lambda uses."""
    out: list[tuple[str, int]] = []
    i = 0
    if family == "var":
        while i < len(co_code):
            op = co_code[i]
            if op >= 90:
                if i + 3 > len(co_code):
                    return None
                arg, i = co_code[i + 1] | (co_code[i + 2] << 8), i + 3
            else:
                arg, i = 0, i + 1
            if op not in _OLD_OPS:
                return None
            out.append((_OLD_OPS[op], arg))
        return out
    if len(co_code) % 2:
        return None
    table = _OLD_OPS if family == "word" else _NEW_OPS
    for i in range(0, len(co_code), 2):
        op, arg = co_code[i], co_code[i + 1]
        if op not in table or (family == "word" and op == 21):
            return None
        name = table[op]
        if name in ("cache", "resume", "nop"):
            continue
        if name == "binop":
            if arg not in _BINOP_311:
                return None
            name, arg = _BINOP_311[arg], 0
        out.append((name, arg))
    return out


def _number_text(v: float) -> str:
    s = repr(float(v))
    return s[:-2] if s.endswith(".0") else s


def _evaluate_affine(ops: list[tuple[str, int]], consts: list[Any]) -> tuple[float, float, str] | None:
    """Run the instructions symbolically on x: ``(scale, offset, text)`` when the result is scale·x + offset, else
    None (a product of x with itself, a division by x, a constant result, anything else)."""
    # stack items: ("x", scale, offset, text, precedence) or ("c", value, 0.0, text, precedence)
    stack: list[tuple[str, float, float, str, int]] = []
    for name, arg in ops:
        if name == "load":
            if arg != 0:
                return None
            stack.append(("x", 1.0, 0.0, "x", 3))
        elif name == "const":
            if not 0 <= arg < len(consts):
                return None
            v = consts[arg]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                return None
            stack.append(("c", float(v), 0.0, _number_text(v) if v >= 0 else f"({_number_text(v)})", 3))
        elif name in ("neg", "pos"):
            if not stack:
                return None
            k, a, b, t, p = stack.pop()
            t = t if p >= 2 else f"({t})"
            if name == "pos":
                stack.append((k, a, b, f"+{t}", 2))
            else:
                stack.append((k, -a, -b if k == "x" else 0.0, f"-{t}", 2))
        elif name in ("add", "sub", "mul", "div"):
            if len(stack) < 2:
                return None
            rk, ra, rb, rt, rp = stack.pop()
            lk, la, lb, lt, lp = stack.pop()
            prec = 1 if name in ("add", "sub") else 2
            left = lt if lp >= prec else f"({lt})"
            right = rt if rp > prec or (rp == prec and name in ("add", "mul")) else f"({rt})"
            symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[name]
            text = f"{left}{symbol}{right}"
            if lk == rk == "c":
                lv, rv = la, ra
                if name == "div" and rv == 0.0:
                    return None
                v = {"add": lv + rv, "sub": lv - rv, "mul": lv * rv, "div": lv / rv if rv else 0.0}[name]
                stack.append(("c", v, 0.0, text, prec))
                continue
            if name == "add":
                a, b = (la + ra, lb + rb) if lk == rk == "x" else ((la, lb + ra) if lk == "x" else (ra, rb + la))
            elif name == "sub":
                a, b = (la - ra, lb - rb) if lk == rk == "x" else ((la, lb - ra) if lk == "x" else (-ra, la - rb))
            elif name == "mul":
                if lk == rk == "x":
                    return None
                a, b = (la * ra, lb * ra) if lk == "x" else (ra * la, rb * la)
            else:
                if rk == "x" or ra == 0.0:
                    return None
                a, b = la / ra, lb / ra
            stack.append(("x", a, b, text, prec))
        elif name == "ret":
            if len(stack) != 1 or stack[0][0] != "x":
                return None
            _, a, b, t, _ = stack[0]
            if not (math.isfinite(a) and math.isfinite(b)) or a == 0.0:
                return None
            return a, b, t
        else:
            return None
    return None


def decode_lambda(function: Any) -> tuple[float, float, str] | None:
    """``(scale, offset, text)`` of the affine map ``x·scale + offset`` that a Lambda's stored code computes, or
    None when it is anything else.

    The marshalled code object is read as bytes, by a parser written here (never ``marshal.loads``, never run):
    its header (CPython 2.7, 3.0-3.7, 3.8-3.10 or 3.11+ layout), its instructions and its constants. Only a
    lambda of one argument whose instructions load ``x`` and numeric constants, negate, add, subtract, multiply
    and divide is accepted, and it is evaluated symbolically, so ``-(x/127.5-1)`` is read as exactly that.
    Several readings of the bytes that disagree are refused too.
    """
    code = _code_bytes(function)
    if not code or len(code) > 1 << 16 or code[0] & ~_FLAG != ord("c"):
        return None
    results = set()
    for nhdr, families in ((4, ("var",)), (5, ("var", "word", "word311")), (6, ("word",))):
        pos = 1 + 4 * nhdr
        if len(code) < pos + 5 or code[pos] & ~_FLAG != ord("s"):
            continue
        if struct.unpack_from("<i", code, 1)[0] != 1:  # argcount: one argument, x
            continue
        n = struct.unpack_from("<i", code, pos + 1)[0]
        co_code = code[pos + 5 : pos + 5 + n]
        if n < 1 or len(co_code) != n:
            continue
        consts = _marshal_consts(code, pos + 5 + n)
        if consts is None:
            continue
        for family in families:
            ops = _instructions(co_code, family)
            got = _evaluate_affine(ops, consts) if ops else None
            if got is not None:
                results.add(got)
    if len(results) != 1:
        return None
    return results.pop()


def recognise_lambda(function: Any) -> str | None:
    """The affine normalisation a Lambda's stored code computes, as text (e.g. ``"x/127.5-1"``), or None."""
    got = decode_lambda(function)
    return None if got is None else got[2]


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

    from lidarmt._limits import check_memory, loads_json

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
            text = _attr_text(f.attrs["model_config"])
        except (ValueError, UnicodeDecodeError) as err:
            raise ModelError(f"{p}: model_config is not valid JSON: {err}") from err
        cfg = loads_json(text, what=f"{p}: model_config", error=ModelError)  # any depth: one line
        if not isinstance(cfg, dict):
            raise ModelError(f"{p}: model_config is not a Keras model description (a JSON object)")
        version = _attr_text(f.attrs.get("keras_version", "?"))
        wroot = f.get("model_weights", f)
        layers = []
        claimed = 0  # bytes of the float32 weights read so far
        try:
            chain = _chain(str(p), cfg)
            if not all(isinstance(lc, dict) and isinstance(lc.get("config") or {}, dict) for lc in chain):
                raise TypeError("a layer is not a JSON object with a config object")
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            if isinstance(err, ModelError):
                raise
            raise ModelError(f"{p}: model_config is not a Keras model description ({type(err).__name__}: "
                             f"{err})") from err
        for lc in chain:
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
                    ds = g[wn]
                    if not isinstance(ds, h5py.Dataset):
                        raise ModelError(f"{p}: weight {wn} of layer {name} is not an array")
                    # the shape is what the file claims: fits memory? (a 3 MB file may declare terabytes)
                    claimed += 4 * math.prod(ds.shape or ())
                    check_memory(claimed, what=f"{p}: its weights (up to {wn} of layer {name})", error=ModelError)
                    arrays.append((wn, np.asarray(ds[()], dtype=np.float32)))
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
                scale, offset = parse_affine(text)
            else:
                got = (
                    decode_lambda(c.get("function"))
                    if c.get("function_type", "lambda") == "lambda" and not c.get("arguments")
                    else None
                )
                how = "read from its stored bytecode, never run"
                if got is None:
                    raise ModelError(
                        f"{where}: layer {ly.name} is a Lambda whose stored code is not an affine normalisation "
                        "this importer can read exactly (the code is never run); say what it computes with "
                        '--model-option lambda="x/127.5-1" (forms x/a-b, x*a+b, x/a)'
                    )
                scale, offset, text = got
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


#: the most a normalisation (``lambda``/``scale``) may multiply or shift 0..255 pixel values by
MAX_INPUT_SCALE = 1e6
#: radians per output unit: from a millionth (a network that outputs micro-radians) to a thousand (already far
#: beyond any steering wheel); beyond, the angles overflow the error sums (``output=1e308``: MSE inf)
OUTPUT_SCALE_RANGE = (1e-6, 1e3)


def _output_scale(v: Any) -> tuple[float, str]:
    lo, hi = OUTPUT_SCALE_RANGE
    bad = ModelError(f"model option output={v!r}: expected {', '.join(OUTPUTS)} or a number of radians per "
                     f"output unit from ±{lo:g} to ±{hi:g}")
    if isinstance(v, bool):
        raise bad
    if isinstance(v, (int, float)):
        value, name = float(v), f"x{float(v):g}"
    else:
        s = str(v).strip().lower()
        if s in OUTPUTS:
            return OUTPUTS[s], s
        try:
            value, name = float(s), f"x{float(s):g}"
        except ValueError as err:
            raise bad from err
    if not math.isfinite(value) or not lo <= abs(value) <= hi:
        raise bad
    return value, name


MAX_SIDE = 8192  # pixels: a size an option or a file claims is checked before anything is allocated
_BATCH_BYTES = 2 * 2**30  # the float32 input of one batch at most


def _parse_size(v: Any, *, key: str = "size") -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d{1,6})\s*[xX,]\s*(\d{1,6})\s*", str(v))
    if m is None:
        raise ModelError(f"model option {key}={v!r}: expected HxW, e.g. {key}=66x200")
    h, w = int(m[1]), int(m[2])
    if not (1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise ModelError(f"model option {key}={v!r}: each side must lie between 1 and {MAX_SIDE} pixels")
    return h, w


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
    recipe: str = ""  # the whole input recipe, as InputRecipe.describe() says it


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
    ``preprocess`` a :data:`PRESETS` name (default: :func:`default_preset` of the input shape), refined by the
    recipe keys ``frame`` (``HxW`` the whole frame is resized to first), ``crop`` (``60:-25`` rows, or
    ``60:-25,0:320`` rows and columns, in pixels of that frame), ``resize`` (auto, area, linear, nearest,
    cubic), ``colour`` (rgb, bgr, yuv, grey), ``scale`` (``x/127.5-1``: applied to the 0..255 values before
    the network), ``output`` (a :data:`OUTPUTS` name or radians per output unit) and ``sign`` (1, or -1 when
    a positive output means right); ``lambda`` the normalisation of the file's Lambda layers when their code is
    not an affine map (``"x/127.5-1"``); ``size`` ``HxW`` for files whose input size is not fixed;
    ``flip_kernels`` for Keras 1 files trained on Theano; ``device``, ``batch_size``, ``name``. A recipe file
    (:func:`recipe_options`) is read by the caller, not here: what the model is built with is exactly these
    options.
    """
    from lidarmt.camera.models.torchmodel import TorchSteeringModel

    lambda_text = extra.pop("lambda", None)
    if lambda_text is None:
        lambda_text = extra.pop("lambda_", None)
    recipe_given = {_ALIASES.get(k, k): extra.pop(k) for k in list(extra) if _ALIASES.get(k, k) in RECIPE_KEYS}
    if extra:
        raise ModelError(
            f"Keras model {path}: unknown option(s) {', '.join(sorted(map(str, extra)))}; known: "
            f"{', '.join(OPTION_KEYS)}"
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
    if not (isinstance(h, int) and isinstance(w, int) and 1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise ModelError(f"{path}: an input of {h}x{w} pixels; this importer takes 1 to {MAX_SIDE} pixels a side")
    bs = parse_batch_size(batch_size)
    if bs * ch * h * w * 4 > _BATCH_BYTES:  # checked before anything of that size is allocated
        raise ModelError(f"{path}: batches of {bs} inputs of {h}x{w}x{ch} would take "
                         f"{bs * ch * h * w * 4 / 2**30:.1f} GiB; give a smaller --model-option batch_size")
    recipe = make_recipe((h, w, ch), {"preprocess": preprocess, "output": output, **recipe_given})
    if (recipe.colour == "grey") != (ch == 1):
        raise ModelError(
            f"{path}: the recipe gives {'1' if recipe.colour == 'grey' else '3'} channel(s) "
            f"({recipe.colour}) but the network takes {ch}; give --model-option colour="
            f"{'grey' if ch == 1 else 'rgb'} or another preset ({', '.join(PRESETS)})"
        )
    out_scale = recipe.output * recipe.sign
    module, notes = build_module(
        kf, options=BuildOptions(lambda_text=lambda_text, flip_kernels=_as_bool("flip_kernels", flip_kernels))
    )
    _check_output(module, kf, (h, w, ch))

    def pre(images: np.ndarray) -> Any:
        return torch.from_numpy(_prepare_batch(images, recipe, (h, w)))

    def post(y: Any) -> np.ndarray:
        return y.detach().float().cpu().numpy().reshape(-1).astype(np.float64) * out_scale

    n_params = int(sum(p.numel() for p in module.parameters()))
    info = KerasImport(
        str(path),
        kf.keras_version,
        (h, w, ch),
        kf.data_format,
        recipe.preset,
        PRESETS[recipe.preset].note,
        recipe.output_name + (" (sign flipped)" if recipe.sign < 0 else ""),
        tuple(notes),
        n_params,
        tuple(f"{ly.name}:{ly.kind}" for ly in kf.layers),
        recipe.describe(),
    )
    spec = InputSpec(height=h, width=w, colour=recipe.colour, history=0, note=recipe.describe())
    try:
        model = TorchSteeringModel(
            str(name) if name else Path(path).stem, module, spec, pre, post, batch_size=bs, device=device,
            card=str(path)
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
    "dave2-udacity-sim) and sign=1|-1. The preset's steps can be given one by one: frame=HxW (resize the frame "
    "first), crop=60:-25 (rows; 60:-25,0:320 rows and columns), resize=auto|area|linear|nearest|cubic, "
    "colour=rgb|bgr|yuv|grey, scale=x/127.5-1; or in a JSON file beside the model (model.h5.recipe.json) or "
    "given with --recipe FILE. A Lambda layer is read from its bytecode (never run) and accepted only when it "
    'is an affine map; for any other: --model-option lambda="x/127.5-1".'
)


def parse_batch_size(value: Any) -> int:
    """The ``batch_size`` model option of an imported model (Keras, ONNX): a whole number from 1 to 4096, or one
    ModelError line."""
    try:
        bs = int(value)
    except (TypeError, ValueError) as err:
        raise ModelError(f"model option batch_size={value!r}: expected a whole number") from err
    if not 1 <= bs <= 4096:
        raise ModelError(f"model option batch_size={value!r}: give 1 to 4096")
    return bs
