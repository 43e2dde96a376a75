"""ONNX models from strangers, opened with onnxruntime under the house rules (both halves use this one gate).

:func:`open_session` refuses, in one line of the caller's :class:`~lidarmt.errors.UserError` subclass and before
onnxruntime sees the file: a missing file, one bigger than :data:`MAX_ONNX_BYTES` or than the memory available,
bytes that are not an ONNX ``ModelProto``, and a model whose tensors live in *external data* files (an ONNX file
may name any path on the machine for those: lidarmt reads only the file it was given). Then onnxruntime builds the
session (CPU; its CUDA provider when ``device`` asks for a GPU and the installed onnxruntime has one); what it
refuses (an unknown operator, a graph that does not check) is one line too. onnxruntime runs only the standard
operators: no Python or custom-operator library in the file is loaded.

``onnxruntime`` and ``onnx`` are optional (``pip install "lidarmt[onnx]"``) and imported here, lazily.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lidarmt.errors import UserError

#: the largest ONNX file opened (a steering model is a few MB, Apollo's CNN 12 MB)
MAX_ONNX_BYTES = 1 << 30
INSTALL_HINT = 'pip install "lidarmt[onnx]"'


def _require(module: str, error: type[UserError]) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise error(f"ONNX models need the {module} package, which is not installed; install it with: "
                    f"{INSTALL_HINT}") from err


def check_onnx_file(path: str | os.PathLike[str], *, what: str, error: type[UserError]) -> bytes:
    """The bytes of an ONNX file, checked as the module docstring says (not yet given to onnxruntime)."""
    from lidarmt._limits import check_memory

    p = Path(path)
    if not p.is_file():
        raise error(f"{what} {p} does not exist")
    size = p.stat().st_size
    if size > MAX_ONNX_BYTES:
        raise error(f"{p}: {size:,} bytes is more than lidarmt opens as an ONNX model ({MAX_ONNX_BYTES:,})")
    check_memory(3 * size, what=f"{what} {p.name}", error=error)
    data = p.read_bytes()
    onnx = _require("onnx", error)
    try:
        model = onnx.load_from_string(data)
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise error(f"{p} is not an ONNX model (damaged or truncated, or another kind of file): "
                    f"{type(err).__name__}") from err
    if not model.graph.node and not model.graph.output:
        raise error(f"{p} is not an ONNX model (no graph); damaged, truncated or another kind of file")
    ext = onnx.TensorProto.EXTERNAL

    def tensors(graph: Any):
        yield from graph.initializer
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("g"):
                    yield from tensors(attr.g)
                for g in attr.graphs:
                    yield from tensors(g)

    for t in tensors(model.graph):
        if t.data_location == ext or len(t.external_data):
            raise error(f"{p}: tensor {t.name!r} lives in an external data file; lidarmt opens self-contained "
                        "ONNX files only (save the model with its weights inside)")
    return data


def providers(device: str = "cpu") -> list[str]:
    """onnxruntime's execution providers for ``device`` (cpu, cuda, cuda:N, auto)."""
    ort = _require("onnxruntime", UserError)
    have = set(ort.get_available_providers())
    if str(device).startswith(("cuda", "auto")) and "CUDAExecutionProvider" in have:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def open_session(path: str | os.PathLike[str], *, what: str, error: type[UserError], device: str = "cpu",
                 threads: int = 1) -> Any:
    """An ``onnxruntime.InferenceSession`` of ``path`` (checked first, see the module docstring)."""
    data = check_onnx_file(path, what=what, error=error)
    ort = _require("onnxruntime", error)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, int(threads))
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors only: warnings would be printed to the terminal by onnxruntime itself
    try:
        return ort.InferenceSession(data, sess_options=opts, providers=providers(device))
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph/... classes
        first = " ".join(str(err).split())[:300]
        raise error(f"onnxruntime cannot run {path}: {first}") from err
