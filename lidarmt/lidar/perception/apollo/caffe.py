"""Apollo's Caffe files without Caffe: ``deploy.prototxt`` (text) and ``deploy.caffemodel`` (binary), read and written.

A ``.caffemodel`` is a protobuf ``NetParameter``. Its message and field numbers are public facts of Caffe's
``caffe.proto``; only the few this module needs are used, decoded by a small wire-format reader of its own:

* ``NetParameter``: ``name`` 1, ``layers`` 2 (the legacy ``V1LayerParameter``), ``layer`` 100 (``LayerParameter``);
* ``LayerParameter``: ``name`` 1, ``type`` 2, ``bottom`` 3, ``top`` 4, ``blobs`` 7, ``convolution_param`` 106;
  ``V1LayerParameter``: ``bottom`` 2, ``top`` 3, ``name`` 4, ``type`` 5 (an enum: CONVOLUTION 4, DECONVOLUTION 39),
  ``blobs`` 6;
* ``BlobProto``: ``num``/``channels``/``height``/``width`` 1-4 (legacy 4-D shape), ``data`` 5 (packed float),
  ``shape`` 7 (``BlobShape``: ``dim`` 1, packed int64); ``double_data`` 8 is refused (cnnseg is fp32).

What the network is comes from the prototxt (the one beside the weights, one named with ``prototxt=``, or, without
either, lidarmt's own copy of Apollo's definition): its 61 layers must be Apollo's cnnseg layers by name, type,
bottoms, tops and parameters (:func:`cnnseg_layers`), with 8 (Apollo 2.5/3.0), 6 or 4 (Apollo 3.5+) input
channels. Each Convolution/Deconvolution layer's two blobs are then mapped by name onto the module of
:class:`~lidarmt.lidar.perception.apollo.network.CnnSegNet` of that name: Caffe's convolution weights are
``(out, in, kh, kw)`` and its deconvolution weights ``(in, out, kh, kw)``, as PyTorch's ``Conv2d`` and
``ConvTranspose2d`` hold them; Caffe's Deconvolution (output ``stride·(in−1) + kernel − 2·pad``), Slice (at the
given channel points), Eltwise PROD and Sigmoid are what the network's ``forward`` computes.

A weights file is data a stranger may have sent: its size is checked against a limit and against the parameter
count the prototxt implies before anything is read, every length inside is checked against the bytes left, each
blob's shape against the prototxt before its data is touched, and any damage is one :class:`WeightsError` line.
Nothing in the file is executed.

:data:`OFFICIAL` holds the SHA-256 and size of Apollo's own weight files (Git LFS pointers in ApolloAuto/apollo):
a file with one of those digests is named as such (:func:`weights_label`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.lidar.perception.apollo.config import sha256_file  # noqa: F401 - re-exported
from lidarmt.lidar.perception.apollo.errors import WeightsError

#: SHA-256 -> (label, bytes) of Apollo's official cnnseg weight files (apollo-lop-facts, shared/data/apollo/cnnseg)
OFFICIAL: dict[str, tuple[str, int]] = {
    "95ef519b41728a97175d3d31c3f9ed47eb8ed1d5ad6793af59435b848355adda":
        ("Apollo 3.0 cnnseg, official weights", 11_901_621),
    "3636ae852cd54e18384e7609a7482b694278c03eace51691bfc5037fd79df058":
        ("Apollo 2.x cnnseg (7,203,408 B), official weights", 7_203_408),
    "0fbcf449ff0e4571b23245eba0e787055b38f77de5c7e0a90d619775e54c740b":
        ("Apollo 3.5+ cnnseg velodyne16, official weights", 11_901_429),
    "b3efd450f867e66bb316aa2cba72ab69c93f6f7d2550d502b8fdea623e953166":
        ("Apollo 3.5+ cnnseg velodyne128, official weights", 11_901_237),
}
#: Apollo's official files are 4 bytes per parameter plus this many bytes of names, shapes and framing
OFFICIAL_OVERHEAD = 5_445
#: the largest weights file read: cnnseg's are 12 MB; anything far bigger is not this network
MAX_WEIGHTS_BYTES = 256 << 20
#: the largest prototxt read (Apollo's is 11.5 kB) and its deepest nesting
MAX_PROTOTXT_BYTES = 1 << 20
MAX_PROTOTXT_DEPTH = 16
#: feature channels of the known cnnseg networks
CHANNELS = (8, 6, 4)
HEAD_TOPS = ("category_pt", "instance_pt", "confidence_pt", "classify_pt", "heading_pt", "height_pt")
HEAD_SLICE = (1, 3, 4, 9, 11)

_V1_TYPES = {4: "Convolution", 39: "Deconvolution", 3: "Concat", 18: "ReLU", 19: "Sigmoid", 33: "Slice",
             25: "Eltwise", 36: "Silence"}


def label_for(digest: str, kind: str = "caffemodel") -> str:
    """"Apollo 3.0 cnnseg, official weights" for an official digest, else ``"<kind> <sha256[:12]>"``."""
    official = OFFICIAL.get(digest)
    return official[0] if official else f"{kind} {digest[:12]}"


def weights_label(path: str | os.PathLike[str]) -> str:
    """How reports name a weights file: Apollo's official ones by their release, any other by kind and digest."""
    p = Path(path)
    kind = {".caffemodel": "caffemodel", ".onnx": "onnx"}.get(p.suffix.lower(), "weights")
    try:
        return label_for(sha256_file(p), kind)
    except OSError:
        return f"{kind} {p.name} (unreadable)"


def weights_note(options: Any) -> str:
    """`` (weights: Apollo 3.0 cnnseg, official weights)`` for SUT options naming a weights file, else ``""``:
    the words reports add after the SUT's name."""
    w = options.get("weights") if isinstance(options, dict) else None
    if not isinstance(w, str) or not w.lower().endswith((".caffemodel", ".onnx", ".pt")) or not Path(w).is_file():
        return ""
    from lidarmt._show import md_text

    return f" (weights: {md_text(weights_label(w))})"  # Markdown: the file name is shown, never read as markup


# ------------------------------------------------------------------------------------------ the network's layers


@dataclass(frozen=True, slots=True)
class LayerDef:
    """One layer of a Caffe net: what the prototxt says about it (parameters as plain values)."""

    name: str
    type: str
    bottom: tuple[str, ...] = ()
    top: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)


def cnnseg_layers(in_channels: int = 8, grid: int = 640) -> list[LayerDef]:
    """The 61 layers of Apollo's cnnseg ``deploy.prototxt`` (names, types, blobs, parameters), for ``in_channels``
    feature channels: the definition every prototxt is checked against and the one lidarmt writes."""
    from lidarmt.lidar.perception.apollo.network import _DECODER, _ENCODER

    c = int(in_channels)
    layers = [
        LayerDef("input", "Input", (), ("data",), {"shape": (1, c, grid, grid)}),
        LayerDef("slice_[dump, mask]", "Slice", ("data",), ("dump_blob", "mask"),
                 {"slice_point": (c - 1,), "axis": 1}),
        LayerDef("Silence_[dump_blob]", "Silence", ("dump_blob",), ()),
    ]

    def conv(name: str, bottom: str, cout: int, k: int, s: int, kind: str = "Convolution") -> None:
        layers.append(LayerDef(name, kind, (bottom,), (name,),
                               {"num_output": cout, "kernel_size": k, "stride": s, "pad": 1 if k > 1 else 0}))
        layers.append(LayerDef(f"relu_{name}", "ReLU", (name,), (name,)))

    prev = "data"
    for name, _cin, cout, k, s in _ENCODER:
        conv(name, prev, cout, k, s)
        prev = name
    conv("deconv5_1", prev, 192, 3, 1)
    prev = "deconv5_1"
    for dname, _cin, cout, skip, _cskip, fname in _DECODER:
        conv(dname, prev, cout, 4, 2, "Deconvolution")
        cat = "concat" + dname.removeprefix("deconv")
        layers.append(LayerDef(f"Concat_{cat}", "Concat", (skip, dname), (cat,), {"axis": 1}))
        conv(fname, cat, cout, 3, 1)
        prev = fname
    layers.append(LayerDef("deconv0", "Deconvolution", (prev,), ("deconv0",),
                           {"num_output": 12, "kernel_size": 4, "stride": 2, "pad": 1}))
    layers.append(LayerDef("Slice_" + str(list(HEAD_TOPS)), "Slice", ("deconv0",), HEAD_TOPS,
                           {"slice_point": HEAD_SLICE, "axis": 1}))
    layers.append(LayerDef("all_category_score", "Sigmoid", ("category_pt",), ("all_category_score",)))
    layers.append(LayerDef("instance_ignore_layer", "Eltwise", ("all_category_score", "mask"), ("category_score",),
                           {"operation": "PROD"}))
    layers.append(LayerDef("confidence_score", "Sigmoid", ("confidence_pt",), ("confidence_score",)))
    layers.append(LayerDef("class_score", "Sigmoid", ("classify_pt",), ("class_score",)))
    return layers


def blob_shapes(in_channels: int = 8) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Layer name -> (weight shape, bias shape) in Caffe's blob order, for every layer that has weights."""
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    chans = {"data": in_channels}
    for layer in cnnseg_layers(in_channels):
        if layer.type == "Concat":
            chans[layer.top[0]] = sum(chans[b] for b in layer.bottom)
        elif layer.type in ("Convolution", "Deconvolution"):
            cin, cout, k = chans[layer.bottom[0]], layer.params["num_output"], layer.params["kernel_size"]
            w = (cout, cin, k, k) if layer.type == "Convolution" else (cin, cout, k, k)
            shapes[layer.name] = (w, (cout,))
            chans[layer.name] = cout
    return shapes


# ------------------------------------------------------------------------------------------ prototxt (text format)


def _tokens(text: str, where: str):
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n,;":
            i += 1
        elif ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif ch in "{}:[]<>":
            yield ch
            i += 1
        elif ch in "\"'":
            out, j = [], i + 1
            while j < n and text[j] != ch:
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                    out.append({"n": "\n", "t": "\t"}.get(text[j], text[j]))
                else:
                    out.append(text[j])
                j += 1
            if j >= n:
                raise WeightsError(f"{where}: an unterminated string; is it a Caffe prototxt?")
            yield ("str", "".join(out))
            i = j + 1
        else:
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_.+-"):
                j += 1
            if j == i:
                raise WeightsError(f"{where}: unexpected character {ch!r}; is it a Caffe prototxt?")
            yield ("word", text[i:j])
            i = j


def _value(tok: Any) -> Any:
    if tok[0] == "str":
        return tok[1]
    word = tok[1]
    for conv in (int, float):
        try:
            return conv(word)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(word, word)


def parse_text_proto(text: str, where: str = "prototxt") -> list[tuple[str, Any]]:
    """Protobuf text format as nested ``[(key, value), ...]`` lists (messages are lists): enough for Caffe's
    prototxt. Nesting is limited to :data:`MAX_PROTOTXT_DEPTH`; a syntax error is one WeightsError line."""
    toks = list(_tokens(text, where))
    pos = 0

    def message(depth: int, closing: str | None) -> list[tuple[str, Any]]:
        nonlocal pos
        if depth > MAX_PROTOTXT_DEPTH:
            raise WeightsError(f"{where}: nested deeper than {MAX_PROTOTXT_DEPTH} levels; not a Caffe prototxt")
        out: list[tuple[str, Any]] = []
        while pos < len(toks):
            tok = toks[pos]
            if tok == closing:
                pos += 1
                return out
            if not (isinstance(tok, tuple) and tok[0] == "word"):
                raise WeightsError(f"{where}: expected a field name, found {tok if isinstance(tok, str) else tok[1]!r}")
            key = tok[1]
            pos += 1
            if pos < len(toks) and toks[pos] == ":":
                pos += 1
            if pos >= len(toks):
                raise WeightsError(f"{where}: field {key!r} has no value (truncated?)")
            nxt = toks[pos]
            if nxt in ("{", "<"):
                pos += 1
                out.append((key, message(depth + 1, "}" if nxt == "{" else ">")))
            elif isinstance(nxt, tuple):
                out.append((key, _value(nxt)))
                pos += 1
            else:
                raise WeightsError(f"{where}: field {key!r} has no value, found {nxt!r}")
        if closing is not None:
            raise WeightsError(f"{where}: a block is not closed (truncated?)")
        return out

    return message(0, None)


def _get(msg: list[tuple[str, Any]], key: str, default: Any = None) -> Any:
    for k, v in msg:
        if k == key:
            return v
    return default


def _all(msg: list[tuple[str, Any]], key: str) -> list[Any]:
    return [v for k, v in msg if k == key]


@dataclass(frozen=True, slots=True)
class NetDef:
    """A prototxt's network: input shape (N, C, H, W) and layers."""

    name: str
    input_shape: tuple[int, ...]
    layers: list[LayerDef]

    @property
    def in_channels(self) -> int:
        return int(self.input_shape[1])

    @property
    def grid(self) -> int:
        return int(self.input_shape[2])


def _layer_params(layer_type: str, msg: list[tuple[str, Any]]) -> dict[str, Any]:
    if layer_type in ("Convolution", "Deconvolution"):
        p = _get(msg, "convolution_param", [])
        pads, ks, ss = _all(p, "pad"), _all(p, "kernel_size"), _all(p, "stride")
        if len(set(pads)) > 1 or len(set(ks)) > 1 or len(set(ss)) > 1 or "kernel_h" in dict(p) or "pad_h" in dict(p):
            return {"non-square": True}
        params = {"num_output": _get(p, "num_output"), "kernel_size": ks[0] if ks else None,
                  "stride": ss[0] if ss else 1, "pad": pads[0] if pads else 0}
        if _get(p, "bias_term", True) is not True:
            params["bias_term"] = _get(p, "bias_term")
        for key, default in (("group", 1), ("dilation", 1), ("axis", 1)):
            if _get(p, key, default) != default:
                params[key] = _get(p, key)
        return params
    if layer_type == "Slice":
        p = _get(msg, "slice_param", [])
        return {"slice_point": tuple(_all(p, "slice_point")), "axis": _get(p, "axis", _get(p, "slice_dim", 1))}
    if layer_type == "Concat":
        p = _get(msg, "concat_param", [])
        return {"axis": _get(p, "axis", _get(p, "concat_dim", 1))}
    if layer_type == "Eltwise":
        p = _get(msg, "eltwise_param", [])
        params = {"operation": _get(p, "operation", "SUM")}
        if _all(p, "coeff"):
            params["coeff"] = tuple(_all(p, "coeff"))
        return params
    if layer_type == "Input":
        p = _get(msg, "input_param", [])
        shape = _get(p, "shape", [])
        return {"shape": tuple(_all(shape, "dim"))}
    if layer_type == "ReLU":
        p = _get(msg, "relu_param", [])
        return {"negative_slope": _get(p, "negative_slope")} if _get(p, "negative_slope", 0) else {}
    return {}


def read_prototxt(path: str | os.PathLike[str]) -> NetDef:
    """A ``deploy.prototxt`` as a :class:`NetDef` (input from an ``Input`` layer or the legacy ``input``/
    ``input_shape``/``input_dim`` fields)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_PROTOTXT_BYTES:
            raise WeightsError(f"{p}: {size:,} bytes is too big for a Caffe prototxt (at most "
                               f"{MAX_PROTOTXT_BYTES:,}); is it the right file?")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise WeightsError(f"{p} is not a text prototxt (not UTF-8); pass Apollo's deploy.prototxt") from err
    except OSError as err:
        raise WeightsError(f"cannot read prototxt {p}: {err.strerror or err}") from err
    return netdef_from_text(text, str(p))


def netdef_from_text(text: str, where: str = "prototxt") -> NetDef:
    msg = parse_text_proto(text, where)
    layers = []
    for lm in _all(msg, "layer") + _all(msg, "layers"):
        if not isinstance(lm, list):
            raise WeightsError(f"{where}: a layer is not a block")
        ltype = str(_get(lm, "type", ""))
        layers.append(LayerDef(str(_get(lm, "name", "")), ltype, tuple(map(str, _all(lm, "bottom"))),
                               tuple(map(str, _all(lm, "top"))), _layer_params(ltype, lm)))
    shape: tuple[int, ...] = ()
    inputs = [lay for lay in layers if lay.type == "Input"]
    if inputs:
        shape = tuple(inputs[0].params.get("shape", ()))
    elif _all(msg, "input"):
        dims = _all(_get(msg, "input_shape", []) or [], "dim") or _all(msg, "input_dim")
        shape = tuple(dims)
        layers.insert(0, LayerDef("input", "Input", (), (str(_all(msg, "input")[0]),), {"shape": shape}))
    if len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise WeightsError(f"{where}: no 4-D input shape (1, C, H, W) found; is it Apollo's cnnseg deploy.prototxt?")
    return NetDef(str(_get(msg, "name", "")), shape, layers)


def check_netdef(net: NetDef, where: str = "prototxt") -> None:
    """Refuse, in one line naming the first difference, a network that is not Apollo's cnnseg topology."""
    n, c, h, w = net.input_shape
    if n != 1 or c not in CHANNELS or h != w or h % 32 or h > 4096:
        raise WeightsError(f"{where}: input shape {net.input_shape} is not a cnnseg input (1, C in {CHANNELS}, H = W "
                           "a multiple of 32)")
    want = {lay.name: lay for lay in cnnseg_layers(c, h)}
    seen: set[str] = set()
    for lay in net.layers:
        exp = want.get(lay.name)
        if exp is None:
            raise WeightsError(f"{where}: layer {lay.name!r} ({lay.type}) is not a layer of Apollo's cnnseg network")
        if lay.name in seen:
            raise WeightsError(f"{where}: layer {lay.name!r} appears twice")
        seen.add(lay.name)
        for attr in ("type", "bottom", "top", "params"):
            got, exp_v = getattr(lay, attr), getattr(exp, attr)
            if attr == "params" and lay.type == "Input":
                continue
            if got != exp_v:
                raise WeightsError(f"{where}: layer {lay.name!r} has {attr} {_show(got)}, Apollo's cnnseg has "
                                   f"{_show(exp_v)}")
    missing = [name for name in want if name not in seen]
    if missing:
        raise WeightsError(f"{where}: layer {missing[0]!r} of Apollo's cnnseg network is missing"
                           + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))


def _show(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {v[k]}" for k in sorted(v)) + "}"
    return repr(v)


def prototxt_text(in_channels: int = 8, grid: int = 640) -> str:
    """Apollo's cnnseg ``deploy.prototxt`` for ``in_channels`` and ``grid``, as lidarmt writes it."""
    out = ['name: "pcd_parsing"']
    for lay in cnnseg_layers(in_channels, grid):
        out.append("layer {")
        out.append(f'  name: "{_esc(lay.name)}"')
        out.append(f'  type: "{lay.type}"')
        out += [f'  bottom: "{b}"' for b in lay.bottom]
        out += [f'  top: "{t}"' for t in lay.top]
        p = lay.params
        if lay.type == "Input":
            out.append("  input_param {\n    shape {")
            out += [f"      dim: {d}" for d in p["shape"]]
            out.append("    }\n  }")
        elif lay.type in ("Convolution", "Deconvolution"):
            out.append("  convolution_param {")
            out += [f"    num_output: {p['num_output']}", "    bias_term: true", f"    pad: {p['pad']}",
                    f"    kernel_size: {p['kernel_size']}", f"    stride: {p['stride']}"]
            out.append("  }")
        elif lay.type == "Slice":
            out.append("  slice_param {")
            out += [f"    slice_point: {s}" for s in p["slice_point"]]
            out.append(f"    axis: {p['axis']}\n  }}")
        elif lay.type == "Eltwise":
            out.append("  eltwise_param {\n    operation: PROD\n  }")
        out.append("}")
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'")


# ------------------------------------------------------------------------------------------ caffemodel (binary)


def _varint(buf: memoryview, pos: int, end: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WeightsError(f"{where}: truncated or damaged (a number runs past the end of its message)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WeightsError(f"{where}: damaged (a number longer than 10 bytes)")


def _fields(buf: memoryview, start: int, end: int, where: str):
    """(field number, wire type, value) of one message; length-delimited values are (start, end) offsets, checked
    against the message's end before they are used."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end, where)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise WeightsError(f"{where}: damaged (field number 0)")
        if wt == 0:
            val, pos = _varint(buf, pos, end, where)
            yield num, wt, val
        elif wt == 2:
            n, pos = _varint(buf, pos, end, where)
            if n > end - pos:
                raise WeightsError(f"{where}: truncated or damaged (a field of {n:,} bytes, {end - pos:,} left)")
            yield num, wt, (pos, pos + n)
            pos += n
        elif wt == 5:
            if pos + 4 > end:
                raise WeightsError(f"{where}: truncated (a 4-byte field past the end)")
            yield num, wt, (pos, pos + 4)
            pos += 4
        elif wt == 1:
            if pos + 8 > end:
                raise WeightsError(f"{where}: truncated (an 8-byte field past the end)")
            yield num, wt, (pos, pos + 8)
            pos += 8
        else:
            raise WeightsError(f"{where}: damaged (wire type {wt} of field {num}); not a Caffe NetParameter file")


@dataclass(slots=True)
class CaffeBlob:
    shape: tuple[int, ...]
    data: tuple[int, int] | None  # byte range of the packed float32 data in the file
    count: int  # floats in data


@dataclass(slots=True)
class CaffeLayer:
    name: str
    type: str
    bottom: tuple[str, ...]
    top: tuple[str, ...]
    blobs: list[CaffeBlob]


def _blob(buf: memoryview, s: int, e: int, where: str) -> CaffeBlob:
    dims: list[int] = []
    legacy = [0, 0, 0, 0]
    data: tuple[int, int] | None = None
    count = 0
    for num, wt, val in _fields(buf, s, e, where):
        if num == 7 and wt == 2:  # shape: BlobShape
            for dn, dwt, dval in _fields(buf, val[0], val[1], where):
                if dn != 1:
                    continue
                if dwt == 2:  # packed int64
                    p = dval[0]
                    while p < dval[1]:
                        d, p = _varint(buf, p, dval[1], where)
                        dims.append(d)
                elif dwt == 0:
                    dims.append(dval)
            if len(dims) > 8:
                raise WeightsError(f"{where}: damaged (a blob of {len(dims)} dimensions)")
        elif 1 <= num <= 4 and wt == 0:
            legacy[num - 1] = val
        elif num == 5 and wt == 2:
            if data is not None:
                raise WeightsError(f"{where}: a blob holds its data in pieces; lidarmt reads packed float data only")
            if (val[1] - val[0]) % 4:
                raise WeightsError(f"{where}: damaged (float data of {val[1] - val[0]} bytes, not a multiple of 4)")
            data, count = val, (val[1] - val[0]) // 4
        elif num == 5 and wt == 5:
            raise WeightsError(f"{where}: a blob holds unpacked floats; lidarmt reads packed float data only")
        elif num in (8, 9):
            raise WeightsError(f"{where}: a blob holds double-precision data; Apollo's cnnseg weights are float32")
    shape = tuple(dims) if dims else tuple(d for d in legacy)
    return CaffeBlob(shape, data, count)


def _layer(buf: memoryview, s: int, e: int, where: str, v1: bool) -> CaffeLayer:
    name, ltype, bottom, top, blobs = "", "", [], [], []
    f_name, f_type, f_bottom, f_top, f_blobs = (4, 5, 2, 3, 6) if v1 else (1, 2, 3, 4, 7)

    def text(val: tuple[int, int]) -> str:
        if val[1] - val[0] > 4096:
            raise WeightsError(f"{where}: damaged (a layer name of {val[1] - val[0]:,} bytes)")
        try:
            return bytes(buf[val[0]:val[1]]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise WeightsError(f"{where}: damaged (a layer name that is not text)") from err

    for num, wt, val in _fields(buf, s, e, where):
        if num == f_name and wt == 2:
            name = text(val)
        elif num == f_type:
            ltype = _V1_TYPES.get(val, f"V1 type {val}") if v1 and wt == 0 else (text(val) if wt == 2 else ltype)
        elif num == f_bottom and wt == 2:
            bottom.append(text(val))
        elif num == f_top and wt == 2:
            top.append(text(val))
        elif num == f_blobs and wt == 2:
            blobs.append(_blob(buf, val[0], val[1], f"{where}: layer {name or '?'!r}"))
    return CaffeLayer(name, ltype, tuple(bottom), tuple(top), blobs)


def parse_caffemodel(data: bytes | memoryview, where: str = "caffemodel") -> tuple[str, list[CaffeLayer]]:
    """The net name and layers (with their blobs' shapes and data offsets) of a binary ``NetParameter``."""
    buf = memoryview(data)
    name, layers = "", []
    for num, wt, val in _fields(buf, 0, len(buf), where):
        if num == 1 and wt == 2:
            name = bytes(buf[val[0]:min(val[1], val[0] + 4096)]).decode("utf-8", "replace")
        elif num in (100, 2) and wt == 2:
            layers.append(_layer(buf, val[0], val[1], where, v1=num == 2))
    if not layers:
        raise WeightsError(f"{where}: no layers; not a Caffe .caffemodel (NetParameter) file")
    return name, layers


@dataclass(slots=True)
class CaffeWeights:
    """What :func:`read_caffemodel` found: the network's tensors by state_dict key, its definition and the file."""

    state: dict[str, Any]
    netdef: NetDef
    prototxt: str  # the path of the prototxt used, or "lidarmt's copy of Apollo's definition"
    sha256: str
    size: int

    @property
    def label(self) -> str:
        return label_for(self.sha256)


def find_prototxt(weights: Path, prototxt: str | os.PathLike[str] | None) -> Path | None:
    """The prototxt that goes with ``weights``: the one named, else ``deploy.prototxt`` (or ``<stem>.prototxt``)
    beside it, else None."""
    if prototxt:
        p = Path(prototxt).expanduser()
        if not p.is_file():
            raise WeightsError(f"prototxt {p} does not exist")
        return p
    for cand in (weights.with_suffix(".prototxt"), weights.parent / "deploy.prototxt"):
        if cand.is_file():
            return cand
    return None


def read_caffemodel(path: str | os.PathLike[str], *, prototxt: str | os.PathLike[str] | None = None,
                    grid: int | None = None, in_channels: int = 8) -> CaffeWeights:
    """Apollo's cnnseg weights from a ``.caffemodel`` as a ``CnnSegNet`` state_dict (torch tensors), checked
    against the prototxt (see the module docstring). Every problem is one :class:`WeightsError` line."""
    import torch

    from lidarmt._limits import check_memory
    from lidarmt.lidar.perception.apollo.network import parameter_count

    p = Path(path).expanduser()
    if not p.is_file():
        raise WeightsError(f"caffemodel {p} does not exist")
    proto_path = find_prototxt(p, prototxt)
    if proto_path is not None:
        netdef = read_prototxt(proto_path)
        where_net = str(proto_path)
    else:
        g, c = grid or 640, in_channels
        netdef = NetDef("pcd_parsing", (1, c, g, g), cnnseg_layers(c, g))
        where_net = f"lidarmt's copy of Apollo's cnnseg deploy.prototxt ({c} channels; put the prototxt beside it)"
    check_netdef(netdef, str(proto_path or "prototxt"))
    size = p.stat().st_size
    need = 4 * parameter_count(netdef.in_channels)
    if size > MAX_WEIGHTS_BYTES:
        raise WeightsError(f"{p}: {size:,} bytes is far more than Apollo's cnnseg weights (about {need:,}); "
                           "is it the right file?")
    if size < need:
        known = [label for label, nbytes in OFFICIAL.values() if nbytes == size]
        which = f" ({known[0]}: {'its prototxt is not known' if size == 7_203_408 else 'another network'})" \
            if known and label_for(sha256_file(p)) == known[0] else ""
        raise WeightsError(f"{p}: {size:,} bytes cannot hold the {need // 4:,} parameters of a {netdef.in_channels}-"
                           f"channel cnnseg network ({need:,} bytes); truncated or another network{which}")
    check_memory(2 * size, what=f"{p.name}", error=WeightsError)
    raw = p.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    where = str(p)
    try:
        _name, layers = parse_caffemodel(raw, where)
        shapes = blob_shapes(netdef.in_channels)
        types = {lay.name: lay.type for lay in netdef.layers}
        state: dict[str, Any] = {}
        for lay in layers:
            if not lay.blobs:
                continue
            if lay.name not in shapes:
                raise WeightsError(f"{where}: layer {lay.name!r} has weights but is not a weighted layer of Apollo's "
                                   "cnnseg network")
            if lay.type and lay.type != types.get(lay.name):
                raise WeightsError(f"{where}: layer {lay.name!r} is a {lay.type} layer, the prototxt says "
                                   f"{types.get(lay.name)}")
            if lay.name + ".weight" in state:
                raise WeightsError(f"{where}: layer {lay.name!r} has weights twice")
            w_shape, b_shape = shapes[lay.name]
            if len(lay.blobs) != 2:
                raise WeightsError(f"{where}: layer {lay.name!r} has {len(lay.blobs)} blob(s), Apollo's has 2 (weights, "
                                   "bias)")
            for blob, want, key in ((lay.blobs[0], w_shape, "weight"), (lay.blobs[1], b_shape, "bias")):
                got = blob.shape
                if key == "bias" and len(got) == 4 and got[:3] == (1, 1, 1):  # legacy 4-D bias
                    got = got[3:]
                if tuple(got) != tuple(want):
                    raise WeightsError(f"{where}: layer {lay.name!r} {key} blob has shape {tuple(got)}, the prototxt's "
                                       f"network needs {tuple(want)}")
                n = int(np.prod(want))
                if blob.data is None or blob.count != n:
                    raise WeightsError(f"{where}: layer {lay.name!r} {key} blob holds {blob.count:,} floats for shape "
                                       f"{tuple(want)} ({n:,}); damaged or truncated")
                arr = np.frombuffer(raw, dtype="<f4", count=n, offset=blob.data[0]).reshape(want)
                state[f"{lay.name}.{key}"] = torch.from_numpy(arr.astype(np.float32))
        missing = [name for name in shapes if f"{name}.weight" not in state]
        if missing:
            raise WeightsError(f"{where}: no weights for layer {missing[0]!r}"
                               + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
                               + "; truncated, or weights of another network")
        for key, t in state.items():
            if not torch.isfinite(t).all():
                raise WeightsError(f"{where}: {key} holds NaN or infinite values; damaged")
    except WeightsError as err:
        if digest in OFFICIAL:  # say which of Apollo's files it is: the prototxt given does not fit it
            raise WeightsError(f"{err} ({OFFICIAL[digest][0]}; give its own deploy.prototxt)") from err
        raise
    return CaffeWeights(state, netdef, str(proto_path) if proto_path else where_net, digest, size)


def load_any_network(path: str | os.PathLike[str], *, grid: int = 640,
                     prototxt: str | os.PathLike[str] | None = None, in_channels: int = 8) -> Any:
    """A ``CnnSegNet`` with the weights of ``path``: Apollo's ``.caffemodel`` (with its prototxt: beside it, or
    ``prototxt``) or a ``torch.save`` state_dict (:func:`~lidarmt.lidar.perception.apollo.network.load_network`)."""
    from lidarmt.lidar.perception.apollo.network import build_network, load_network

    if not str(path).lower().endswith(".caffemodel"):
        return load_network(path, grid=grid)  # its own channel count: the caller checks it
    cw = read_caffemodel(path, prototxt=prototxt, grid=grid, in_channels=in_channels)
    if cw.netdef.grid != grid:
        raise WeightsError(f"{path}: its prototxt ({cw.prototxt}) is for a {cw.netdef.grid}x{cw.netdef.grid} grid, "
                           f"the pipeline's is {grid}x{grid}; pass --sut-option grid={cw.netdef.grid}")
    net = build_network(grid, in_channels=cw.netdef.in_channels)
    net.load_state_dict(cw.state, strict=True)
    return net


# ------------------------------------------------------------------------------------------ writing


def _key(num: int, wt: int) -> bytes:
    return _enc_varint(num << 3 | wt)


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(num: int, payload: bytes) -> bytes:
    return _key(num, 2) + _enc_varint(len(payload)) + payload


def _str(num: int, s: str) -> bytes:
    return _ld(num, s.encode("utf-8"))


def caffemodel_bytes(state: dict[str, Any], in_channels: int = 8, *, params: bool = True) -> bytes:
    """A binary ``NetParameter`` of Apollo's cnnseg layers (names, types, bottoms, tops in the prototxt's order)
    with ``state``'s tensors as each weighted layer's blobs (weights, then bias: Caffe's order), float32.
    ``params``: also write each convolution's ``convolution_param`` (num_output, bias_term, pad, kernel, stride)."""
    shapes = blob_shapes(in_channels)
    parts = [_str(1, "pcd_parsing")]
    for lay in cnnseg_layers(in_channels):
        body = [_str(1, lay.name), _str(2, lay.type)]
        body += [_str(3, b) for b in lay.bottom]
        body += [_str(4, t) for t in lay.top]
        if lay.name in shapes:
            for key, want in zip(("weight", "bias"), shapes[lay.name], strict=True):
                arr = np.ascontiguousarray(state[f"{lay.name}.{key}"].detach().cpu().numpy(), dtype="<f4")
                if arr.shape != want:
                    raise WeightsError(f"{lay.name}.{key} has shape {arr.shape}, Apollo's layer needs {want}")
                dims = b"".join(_enc_varint(d) for d in want)
                body.append(_ld(7, _ld(7, _ld(1, dims)) + _ld(5, arr.tobytes())))
            if params:
                p = lay.params
                conv = (_key(1, 0) + _enc_varint(p["num_output"]) + _key(2, 0) + _enc_varint(1)
                        + _key(3, 0) + _enc_varint(p["pad"]) + _key(4, 0) + _enc_varint(p["kernel_size"])
                        + _key(6, 0) + _enc_varint(p["stride"]))
                body.append(_ld(106, conv))
        parts.append(_ld(100, b"".join(body)))
    return b"".join(parts)


def blob_layout_size(in_channels: int = 8) -> tuple[int, int]:
    """(parameter bytes, framing bytes) of :func:`caffemodel_bytes` for ``in_channels`` (no tensors needed)."""
    from lidarmt.lidar.perception.apollo.network import build_network

    net = build_network(32, in_channels=in_channels)
    total = len(caffemodel_bytes(net.state_dict(), in_channels))
    params = 4 * sum(t.numel() for t in net.state_dict().values())
    return params, total - params
