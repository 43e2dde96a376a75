"""A steering model from an ONNX file (DAVE-2-style models circulate as ONNX), run with onnxruntime.

The file is opened through :func:`lidarmt._onnx.open_session` (size, self-contained, onnxruntime's own checks:
one line on any damage). It must have one image input, ``(N, C, H, W)`` (as torch exports) or ``(N, H, W, C)``
(as tf2onnx exports Keras models; ``layout=nhwc|nchw`` overrides the guess from the channel axis), with C 1 or 3,
and give one value per image. The input recipe is the Keras importer's (:func:`lidarmt.camera.models.keras.
make_recipe`: ``preprocess``, ``frame``, ``crop``, ``resize``, ``colour``, ``scale``, ``output``, ``sign``, or a
``<model>.recipe.json`` beside the file), so the same options mean the same for both kinds of file.

An ONNX model has no torch module (``module`` is None): the coverage criteria, which read a torch module's
activations, refuse it; every campaign, bench and replay runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import InputSpec

#: options an ONNX steering model takes (the recipe keys of Keras files, and these)
OPTION_KEYS = ("preprocess", "frame", "crop", "resize", "colour", "scale", "output", "sign", "size", "layout",
               "device", "batch_size", "name")


@dataclass(frozen=True, slots=True)
class OnnxImport:
    """What ``lidarmt camera models x.onnx`` shows."""

    path: str
    input_name: str
    layout: str
    input_shape: tuple[int, int, int]  # (H, W, C)
    output_name: str
    recipe: str
    opset: str


class OnnxSteeringModel:
    """:class:`~lidarmt.camera.models.base.SteeringModel` over an onnxruntime session."""

    module = None  # no torch module: coverage criteria need one

    def __init__(self, name: str, session: Any, info: OnnxImport, spec: InputSpec, recipe: Any, out_scale: float,
                 batch_size: int) -> None:
        self.name = name
        self.session = session
        self.onnx = info
        self.input_spec = spec
        self.recipe = recipe
        self.out_scale = out_scale
        self.batch_size = batch_size
        self.card = info.path

    def predict(self, images: np.ndarray) -> np.ndarray:
        from lidarmt.camera.models.keras import _prepare_batch

        images = np.asarray(images)
        h, w, _c = self.onnx.input_shape
        out = []
        for i in range(0, len(images), self.batch_size):
            x = _prepare_batch(images[i : i + self.batch_size], self.recipe, (h, w))
            if self.onnx.layout == "nhwc":
                x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            try:
                (y, *_rest) = self.session.run(None, {self.onnx.input_name: x.astype(np.float32, copy=False)})
            except Exception as err:  # noqa: BLE001 - onnxruntime's own error classes
                raise ModelError(f"onnxruntime cannot run {self.onnx.path} on {x.shape[0]} image(s): "
                                 f"{' '.join(str(err).split())[:300]}") from err
            y = np.asarray(y, dtype=np.float64).reshape(-1)
            if len(y) != len(x):
                raise ModelError(f"{self.onnx.path}: the model gave {len(y)} values for {len(x)} images; a steering "
                                 "model gives one value per image")
            out.append(y * self.out_scale)
        return np.concatenate(out) if out else np.zeros(0, np.float64)

    def __repr__(self) -> str:
        return f"OnnxSteeringModel({self.name!r}, {self.onnx.path})"


def load_onnx(path: str | Path, *, preprocess: str | None = None, output: str | float | None = None,
              size: str | None = None, layout: str | None = None, device: str = "cpu", batch_size: int | str = 64,
              name: str | None = None, **recipe_given: Any) -> OnnxSteeringModel:
    """An ONNX steering model with its input recipe (options as :func:`lidarmt.camera.models.keras.load_keras`)."""
    from lidarmt._onnx import open_session
    from lidarmt.camera.models.keras import (
        MAX_SIDE,
        PRESETS,
        RECIPE_KEYS,
        _parse_size,
        make_recipe,
        parse_batch_size,
    )

    unknown = sorted(k for k in recipe_given if k not in RECIPE_KEYS)
    if unknown:
        raise ModelError(f"ONNX model {path}: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTION_KEYS)}")
    bs = parse_batch_size(batch_size)
    session = open_session(path, what="ONNX steering model", error=ModelError, device=device)
    ins = session.get_inputs()
    if len(ins) != 1 or len(ins[0].shape) != 4:
        raise ModelError(f"{path}: a steering model takes one image input (N, C, H, W) or (N, H, W, C); this one "
                         f"takes {[(i.name, i.shape) for i in ins]}")
    shape = list(ins[0].shape)
    lay = (layout or "").strip().lower() or ("nhwc" if shape[3] in (1, 3) and shape[1] not in (1, 3) else "nchw")
    if lay not in ("nchw", "nhwc"):
        raise ModelError(f"model option layout={layout!r}: expected nchw or nhwc")
    c, h, w = (shape[1], shape[2], shape[3]) if lay == "nchw" else (shape[3], shape[1], shape[2])
    if size is not None:
        h, w = _parse_size(size)
    if c not in (1, 3):
        raise ModelError(f"{path}: input {ins[0].name!r} {shape} has {c} channels ({lay}); a camera model takes 1 or "
                         "3 (give --model-option layout=nchw|nhwc if the guess is wrong)")
    if not (isinstance(h, int) and isinstance(w, int)):
        raise ModelError(f"{path}: the input size is not fixed in the file; give it with --model-option size=HxW")
    if not (1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise ModelError(f"{path}: an input of {h}x{w} pixels; lidarmt takes 1 to {MAX_SIDE} pixels a side")
    recipe = make_recipe((h, w, c), {"preprocess": preprocess, "output": output, **recipe_given})
    if (recipe.colour == "grey") != (c == 1):
        raise ModelError(f"{path}: the recipe gives {recipe.colour} input but the network takes {c} channel(s); give "
                         f"--model-option colour={'grey' if c == 1 else 'rgb'} or another preset ({', '.join(PRESETS)})")
    outs = session.get_outputs()
    opset = ""
    info = OnnxImport(str(path), ins[0].name, lay, (h, w, c), outs[0].name, recipe.describe(), opset)
    spec = InputSpec(height=h, width=w, colour=recipe.colour, history=0, note=recipe.describe())
    model = OnnxSteeringModel(str(name) if name else Path(path).stem, session, info, spec, recipe,
                              recipe.output * recipe.sign, bs)
    try:  # one image through it: a graph that gives more than one value per image is refused now, in one line
        model.predict(np.zeros((1, h, w, 3), np.uint8))
    except ModelError:
        raise
    except Exception as err:  # noqa: BLE001 - onnxruntime's own errors on a graph that does not run
        raise ModelError(f"{path}: onnxruntime cannot run it on a {h}x{w} input: "
                         f"{' '.join(str(err).split())[:300]}") from err
    return model
