"""The Keras HDF5 importer against an independent NumPy forward pass of the same weights.

The tests write small random Keras 1 and Keras 2 files with h5py (the layouts Keras itself writes), import
them, and compare the torch module with a plain NumPy implementation of Keras' semantics (NHWC,
cross-correlation, TensorFlow 'same' padding, NHWC Flatten) written here independently. The shared DAVE-2
file is checked the same way when ../shared/data is present.
"""

from __future__ import annotations

import base64
import json
import marshal
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models import keras as K
from lidarmt.errors import UserError

# ------------------------------------------------------------------------------------------------------------
# Writing Keras files (as Keras 1.2 / 2.x model.save lays them out)
# ------------------------------------------------------------------------------------------------------------


def _lambda_code(fn, *, version: int) -> list:
    raw = marshal.dumps(fn.__code__)  # data made here, from our own lambda
    if version == 1:
        return [raw.decode("raw_unicode_escape"), None, None]
    return [base64.b64encode(raw).decode("ascii"), None, None]


def write_keras(path: Path, layers: list[dict], *, version: int, functional: bool = False) -> Path:
    """``layers``: dicts with class_name, config (must hold name) and weights [(short name, array)]."""
    if functional:
        cfg_layers, prev = [], None
        for ly in layers:
            entry = {
                "class_name": ly["class_name"],
                "name": ly["config"]["name"],
                "config": ly["config"],
                "inbound_nodes": [] if prev is None else [[[prev, 0, 0, {}]]],
            }
            cfg_layers.append(entry)
            prev = ly["config"]["name"]
        model_config = {
            "class_name": "Model",
            "config": {
                "name": "model_1",
                "layers": cfg_layers,
                "input_layers": [[layers[0]["config"]["name"], 0, 0]],
                "output_layers": [[layers[-1]["config"]["name"], 0, 0]],
            },
        }
    elif version == 1:
        model_config = {
            "class_name": "Sequential",
            "config": [{"class_name": ly["class_name"], "config": ly["config"]} for ly in layers],
        }
    else:
        model_config = {
            "class_name": "Sequential",
            "config": {
                "name": "sequential_1",
                "layers": [{"class_name": ly["class_name"], "config": ly["config"]} for ly in layers],
            },
        }
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "1.2.1" if version == 1 else "2.2.4"
        f.attrs["model_config"] = json.dumps(model_config).encode("utf-8")
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = np.array([ly["config"]["name"].encode() for ly in layers])
        for ly in layers:
            name = ly["config"]["name"]
            lg = g.create_group(name)
            names = []
            for short, arr in ly.get("weights", []):
                wn = f"{name}_{short}:0" if version == 1 else f"{name}/{short}:0"
                lg.create_dataset(wn, data=np.asarray(arr, dtype=np.float32))
                names.append(wn.encode())
            lg.attrs["weight_names"] = np.array(names, dtype="S") if names else np.array([], dtype=np.float64)
    return path


def _conv1(name, rng, cin, nf, kh, kw, *, stride, mode, act, first_shape=None) -> dict:
    cfg = {
        "name": name,
        "nb_filter": nf,
        "nb_row": kh,
        "nb_col": kw,
        "subsample": [stride, stride],
        "border_mode": mode,
        "dim_ordering": "tf",
        "activation": act,
        "bias": True,
    }
    if first_shape:
        cfg["batch_input_shape"] = [None, *first_shape]
    return {
        "class_name": "Convolution2D",
        "config": cfg,
        "weights": [("W", rng.normal(0, 0.3, (kh, kw, cin, nf))), ("b", rng.normal(0, 0.1, nf))],
    }


def _conv2(name, rng, cin, nf, kh, kw, *, stride, mode, act) -> dict:
    cfg = {
        "name": name,
        "filters": nf,
        "kernel_size": [kh, kw],
        "strides": [stride, stride],
        "padding": mode,
        "data_format": "channels_last",
        "activation": act,
        "use_bias": True,
        "dilation_rate": [1, 1],
    }
    return {
        "class_name": "Conv2D",
        "config": cfg,
        "weights": [("kernel", rng.normal(0, 0.3, (kh, kw, cin, nf))), ("bias", rng.normal(0, 0.1, nf))],
    }


def _dense(name, rng, nin, nout, act, *, version) -> dict:
    if version == 1:
        cfg = {"name": name, "output_dim": nout, "activation": act, "bias": True, "input_dim": nin}
        w = [("W", rng.normal(0, 0.2, (nin, nout))), ("b", rng.normal(0, 0.1, nout))]
    else:
        cfg = {"name": name, "units": nout, "activation": act, "use_bias": True}
        w = [("kernel", rng.normal(0, 0.2, (nin, nout))), ("bias", rng.normal(0, 0.1, nout))]
    return {"class_name": "Dense", "config": cfg, "weights": w}


def keras1_file(path: Path, seed: int = 0) -> Path:
    """Keras 1.2, Sequential: lambda, conv 5x5/2 same (asymmetric padding), conv 3x3 valid, max-pool,
    BN, flatten of a 2x3x6 map into dense, activation, dense 1."""
    rng = np.random.default_rng(seed)
    layers = [
        {"class_name": "Lambda", "config": {"name": "lambda_1", "function": _lambda_code(
            lambda x: x / 127.5 - 1.0, version=1), "function_type": "lambda", "arguments": {},
            "batch_input_shape": [None, 22, 27, 3]}},
        _conv1("convolution2d_1", rng, 3, 4, 5, 5, stride=2, mode="same", act="elu"),
        _conv1("convolution2d_2", rng, 4, 6, 3, 3, stride=1, mode="valid", act="relu"),
        {"class_name": "MaxPooling2D", "config": {"name": "maxpooling2d_1", "pool_size": [2, 2],
         "strides": None, "border_mode": "valid", "dim_ordering": "tf"}},
        {"class_name": "BatchNormalization", "config": {"name": "batchnormalization_1", "epsilon": 0.001,
         "mode": 0, "axis": -1}, "weights": [
            ("gamma", rng.uniform(0.5, 1.5, 6)), ("beta", rng.normal(0, .2, 6)),
            ("running_mean", rng.normal(0, .2, 6)), ("running_std", rng.uniform(0.5, 2.0, 6))]},
        {"class_name": "Dropout", "config": {"name": "dropout_1", "p": 0.5}},
        {"class_name": "Flatten", "config": {"name": "flatten_1"}},
        _dense("dense_1", rng, 4 * 6 * 6, 8, "linear", version=1),
        {"class_name": "Activation", "config": {"name": "activation_1", "activation": "tanh"}},
        _dense("dense_2", rng, 8, 1, "linear", version=1),
    ]  # fmt: skip
    return write_keras(path, layers, version=1)


def keras2_layers(seed: int = 1, *, last_units: int = 1) -> list[dict]:
    """Keras 2: conv 3x3/2 same, avg-pool same, cropping, conv 3x2 same (even kernel), ELU layer, max-pool
    same, BN, flatten of a 5x6x5 map, dense, LeakyReLU, dense."""
    rng = np.random.default_rng(seed)
    return [
        {"class_name": "InputLayer", "config": {"name": "input_1", "batch_input_shape": [None, 23, 30, 3]}},
        {"class_name": "Lambda", "config": {"name": "lambda_1", "function": _lambda_code(
            lambda x: x / 255.0 - 0.5, version=2), "function_type": "lambda", "arguments": {}}},
        _conv2("conv2d_1", rng, 3, 4, 3, 3, stride=2, mode="same", act="relu"),
        {"class_name": "AveragePooling2D", "config": {"name": "average_pooling2d_1", "pool_size": [3, 3],
         "strides": [1, 1], "padding": "same", "data_format": "channels_last"}},
        {"class_name": "Cropping2D", "config": {"name": "cropping2d_1", "cropping": [[1, 2], [0, 3]],
         "data_format": "channels_last"}},
        _conv2("conv2d_2", rng, 4, 5, 3, 2, stride=1, mode="same", act="linear"),
        {"class_name": "ELU", "config": {"name": "elu_1", "alpha": 0.7}},
        {"class_name": "MaxPooling2D", "config": {"name": "max_pooling2d_1", "pool_size": [2, 2],
         "strides": [2, 2], "padding": "same", "data_format": "channels_last"}},
        {"class_name": "BatchNormalization", "config": {"name": "batch_normalization_1", "axis": -1,
         "epsilon": 0.001, "center": True, "scale": True}, "weights": [
            ("gamma", rng.uniform(0.5, 1.5, 5)), ("beta", rng.normal(0, .2, 5)),
            ("moving_mean", rng.normal(0, .2, 5)), ("moving_variance", rng.uniform(0.5, 2.0, 5))]},
        {"class_name": "Flatten", "config": {"name": "flatten_1", "data_format": "channels_last"}},
        _dense("dense_1", rng, 5 * 6 * 5, 9, "linear", version=2),
        {"class_name": "LeakyReLU", "config": {"name": "leaky_re_lu_1", "alpha": 0.1}},
        {"class_name": "Dropout", "config": {"name": "dropout_1", "rate": 0.5}},
        _dense("dense_2", rng, 9, last_units, "linear", version=2),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# An independent NumPy forward pass with Keras' semantics (NHWC)
# ------------------------------------------------------------------------------------------------------------


def _tf_same(n: int, k: int, s: int) -> tuple[int, int]:
    out = math.ceil(n / s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def np_conv(x, w, b, stride, mode):
    """x (N, H, W, C), w (kh, kw, C, F): Keras/TF cross-correlation."""
    kh, kw = w.shape[:2]
    if mode == "same":
        (t, bo), (lf, r) = _tf_same(x.shape[1], kh, stride), _tf_same(x.shape[2], kw, stride)
        x = np.pad(x, ((0, 0), (t, bo), (lf, r), (0, 0)))
    oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride, :]
            out += patch @ w[i, j]
    return out + b


def np_pool(x, k, s, mode, kind):
    if mode == "same":
        (t, bo), (lf, r) = _tf_same(x.shape[1], k[0], s[0]), _tf_same(x.shape[2], k[1], s[1])
    else:
        t = bo = lf = r = 0
    xp = np.pad(x, ((0, 0), (t, bo), (lf, r), (0, 0)), constant_values=np.nan)
    oh, ow = (xp.shape[1] - k[0]) // s[0] + 1, (xp.shape[2] - k[1]) // s[1] + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1], :]
            out[:, i, j] = np.nanmax(win, axis=(1, 2)) if kind == "max" else np.nanmean(win, axis=(1, 2))
    return out


ACT = {"linear": lambda x: x, "relu": lambda x: np.maximum(x, 0), "tanh": np.tanh,
       "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))}  # fmt: skip


def np_forward(layers: list[dict], x: np.ndarray, lambda_fn, *, channels_first: bool = False) -> np.ndarray:
    """The network of ``layers`` (as written above) on NHWC float64 ``x`` (computed NHWC whatever the file's
    ordering; ``channels_first`` only changes the Flatten order)."""
    x = x.astype(np.float64)
    for ly in layers:
        c, kind = ly["config"], ly["class_name"]
        w = {n: np.asarray(a, np.float32).astype(np.float64) for n, a in ly.get("weights", [])}
        if kind == "Lambda":
            x = lambda_fn(x)
        elif kind in ("Convolution2D", "Conv2D"):
            stride = (c.get("subsample") or c.get("strides"))[0]
            mode = c.get("border_mode") or c.get("padding")
            if c.get("dim_ordering") == "th":  # stored (out, in, kh, kw)
                w["W"] = w["W"].transpose(2, 3, 1, 0)
            x = ACT[c["activation"]](
                np_conv(x, w.get("W", w.get("kernel")), w.get("b", w.get("bias")), stride, mode)
            )
        elif kind in ("MaxPooling2D", "AveragePooling2D"):
            k = tuple(c["pool_size"])
            s = tuple(c["strides"]) if c.get("strides") else k
            x = np_pool(x, k, s, c.get("border_mode") or c.get("padding"), "max" if kind[0] == "M" else "avg")
        elif kind == "BatchNormalization":
            var = w.get("running_std", w.get("moving_variance"))
            mean = w.get("running_mean", w.get("moving_mean"))
            x = w["gamma"] * (x - mean) / np.sqrt(var + c["epsilon"]) + w["beta"]
        elif kind == "Cropping2D":
            (t, b), (lf, r) = c["cropping"]
            x = x[:, t : x.shape[1] - b, lf : x.shape[2] - r]
        elif kind == "Flatten" and channels_first:
            x = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # Theano ordering flattens (C, H, W)
        elif kind == "Flatten":
            x = x.reshape(len(x), -1)  # NHWC order, as Keras/TF flatten it
        elif kind == "ZeroPadding2D":
            (t, b), (lf, r) = c["padding"]
            x = np.pad(x, ((0, 0), (t, b), (lf, r), (0, 0)))
        elif kind == "GlobalAveragePooling2D":
            x = x.mean(axis=(1, 2))
        elif kind == "Dense":
            x = ACT[c["activation"]](x @ w.get("W", w.get("kernel")) + w.get("b", w.get("bias")))
        elif kind == "Activation":
            x = ACT[c["activation"]](x)
        elif kind == "ELU":
            x = np.where(x > 0, x, c["alpha"] * np.expm1(np.minimum(x, 0)))
        elif kind == "LeakyReLU":
            x = np.where(x > 0, x, c["alpha"] * x)
    return x


def torch_forward(model, x_nhwc: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        y = model.module(torch.from_numpy(x_nhwc.transpose(0, 3, 1, 2).astype(np.float32).copy()))
    return y.numpy().astype(np.float64)


# ------------------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------------------


def test_keras1_matches_numpy(tmp_path) -> None:
    path = keras1_file(tmp_path / "k1.h5")
    with h5py.File(path) as f:
        layers = [{"class_name": ly["class_name"], "config": ly["config"]}
                  for ly in json.loads(f.attrs["model_config"])["config"]]  # fmt: skip
    rng = np.random.default_rng(0)
    ref_layers = _layers_with_weights(path, layers, version=1)
    model = K.load_keras(path)
    assert model.keras.lambdas == ("lambda_1: x/127.5-1 (read from its stored bytecode, never run)",)
    assert model.input_spec.height == 22 and model.input_spec.width == 27 and model.input_spec.colour == "rgb"
    x = rng.uniform(0, 255, (5, 22, 27, 3))
    want = np_forward(ref_layers, x, lambda v: v / 127.5 - 1.0)
    np.testing.assert_allclose(torch_forward(model, x), want, atol=1e-5, rtol=1e-5)
    # through predict: uint8 frames at the input size are not resized (preset resize, RGB)
    frames = rng.integers(0, 256, (3, 22, 27, 3), dtype=np.uint8)
    want = np_forward(ref_layers, frames, lambda v: v / 127.5 - 1)[:, 0]
    np.testing.assert_allclose(model.predict(frames), want, atol=1e-5)


def _layers_with_weights(path: Path, layers: list[dict], *, version: int) -> list[dict]:
    """The layer list with its weights read back from the file (short names), for the NumPy reference."""
    out = []
    with h5py.File(path) as f:
        for ly in layers:
            name = ly["config"]["name"]
            g = f["model_weights"][name]
            ws = []
            for wn in g.attrs["weight_names"]:
                wn = wn.decode()
                short = wn.split(":")[0].rsplit("/", 1)[-1]
                if version == 1:
                    short = short[len(name) + 1 :]
                ws.append((short, g[wn][()]))
            out.append({**ly, "weights": ws})
    return out


@pytest.mark.parametrize("functional", [False, True])
def test_keras2_matches_numpy(tmp_path, functional: bool) -> None:
    layers = keras2_layers()
    path = write_keras(tmp_path / "k2.h5", layers, version=2, functional=functional)
    model = K.load_keras(path, preprocess="resize")
    assert model.keras.lambdas[0].startswith("lambda_1: x/255-0.5")
    x = np.random.default_rng(3).uniform(0, 255, (4, 23, 30, 3))
    want = np_forward(layers, x, lambda v: v / 255.0 - 0.5)
    got = torch_forward(model, x)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    # the NHWC reorder matters: flattening NCHW instead gives another answer
    flat = next(m for m in model.module.modules() if isinstance(m, K.KerasFlatten))
    flat.channels_last = False
    assert np.abs(torch_forward(model, x) - want).max() > 1e-3


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=st.integers(5, 14), w=st.integers(5, 14), kh=st.integers(1, 5), kw=st.integers(1, 5),
       stride=st.integers(1, 3), pool=st.integers(1, 3), same=st.booleans(), seed=st.integers(0, 2**16))  # fmt: skip
def test_conv_and_pool_shapes_match_tensorflow(tmp_path, h, w, kh, kw, stride, pool, same, seed) -> None:
    """Any input size, kernel, stride: 'same'/'valid' convolution and pooling as TensorFlow computes them."""
    rng = np.random.default_rng(seed)
    mode = "same" if same else "valid"
    if not same and (kh > h or kw > w):
        return
    layers = [
        {"class_name": "InputLayer", "config": {"name": "input_1", "batch_input_shape": [None, h, w, 1]}},
        _conv2("conv2d_1", rng, 1, 3, kh, kw, stride=stride, mode=mode, act="linear"),
        {"class_name": "MaxPooling2D", "config": {"name": "max_pooling2d_1", "pool_size": [pool, pool],
         "strides": [pool, pool], "padding": "same", "data_format": "channels_last"}},
        {"class_name": "Flatten", "config": {"name": "flatten_1"}},
    ]  # fmt: skip
    x = rng.uniform(-1, 1, (2, h, w, 1))
    want = np_forward(layers, x, None)
    layers.append(_dense("dense_1", rng, want.shape[1], 1, "linear", version=2))
    model = K.load_keras(write_keras(tmp_path / f"p{seed}.h5", layers, version=2), preprocess="resize-grey")
    np.testing.assert_allclose(torch_forward(model, x), np_forward(layers, x, None), atol=1e-5, rtol=1e-5)


def test_padding_global_pooling_and_groups(tmp_path) -> None:
    rng = np.random.default_rng(7)
    layers = [
        {"class_name": "InputLayer", "config": {"name": "input_1", "batch_input_shape": [None, 17, 19, 3]}},
        {"class_name": "ZeroPadding2D", "config": {"name": "zero_padding2d_1", "padding": [[1, 2], [0, 1]],
         "data_format": "channels_last"}},
        _conv2("conv2d_1", rng, 3, 6, 3, 3, stride=2, mode="valid", act="relu"),
        {"class_name": "GlobalAveragePooling2D", "config": {"name": "global_average_pooling2d_1",
         "data_format": "channels_last"}},
        _dense("dense_1", rng, 6, 1, "linear", version=2),
    ]  # fmt: skip
    model = K.load_keras(write_keras(tmp_path / "gap.h5", layers, version=2))
    x = rng.uniform(0, 255, (3, 17, 19, 3))
    np.testing.assert_allclose(torch_forward(model, x), np_forward(layers, x, None), atol=1e-5, rtol=1e-5)
    layers[2]["config"]["groups"] = 3
    with pytest.raises(ModelError, match="groups=3; only groups=1"):
        K.load_keras(write_keras(tmp_path / "groups.h5", layers, version=2))


def test_keras1_theano_ordering(tmp_path) -> None:
    rng = np.random.default_rng(8)
    conv = _conv1("convolution2d_1", rng, 3, 4, 3, 3, stride=2, mode="same", act="relu",
                  first_shape=(3, 12, 14))  # fmt: skip
    conv["config"]["dim_ordering"] = "th"
    conv["weights"][0] = ("W", conv["weights"][0][1].transpose(3, 2, 0, 1))  # stored (out, in, kh, kw)
    layers = [conv, {"class_name": "Flatten", "config": {"name": "flatten_1"}},
              _dense("dense_1", rng, 4 * 6 * 7, 1, "linear", version=1)]  # fmt: skip
    model = K.load_keras(write_keras(tmp_path / "th.h5", layers, version=1))
    assert model.keras.data_format == "channels_first" and model.input_spec.height == 12
    x = rng.uniform(0, 255, (2, 12, 14, 3))
    want = np_forward(layers, x, None, channels_first=True)
    np.testing.assert_allclose(torch_forward(model, x), want, atol=1e-5, rtol=1e-5)


def test_dense_on_a_feature_map_is_refused(tmp_path) -> None:
    layers = keras2_layers()
    del layers[9]  # the Flatten
    with pytest.raises(ModelError, match=r"dense_1 \(Dense\) is applied to a 4-D feature map"):
        K.load_keras(write_keras(tmp_path / "noflat.h5", layers, version=2))


def test_lambda_code_is_never_unmarshalled(tmp_path, monkeypatch) -> None:
    path = write_keras(tmp_path / "k2.h5", keras2_layers(), version=2)

    def refuse(*args, **kwargs):
        raise AssertionError("marshal.loads called on a file's lambda")

    monkeypatch.setattr(marshal, "loads", refuse)
    monkeypatch.setattr(marshal, "load", refuse)
    assert K.load_keras(path).keras.lambdas


def test_unrecognised_lambda_needs_an_explicit_normalisation(tmp_path) -> None:
    layers = keras2_layers()
    layers[1]["config"]["function"] = _lambda_code(lambda x: x * x * 0.0123 + 7.25, version=2)
    path = write_keras(tmp_path / "odd.h5", layers, version=2)
    with pytest.raises(ModelError, match=r"lambda_1 is a Lambda .*--model-option lambda=") as exc:
        K.load_keras(path)
    assert "\n" not in str(exc.value)
    model = K.load_keras(path, **{"lambda": "x*0.0123+7.25"})
    x = np.random.default_rng(4).uniform(0, 255, (2, 23, 30, 3))
    np.testing.assert_allclose(torch_forward(model, x), np_forward(layers, x, lambda v: v * 0.0123 + 7.25),
                               atol=1e-5, rtol=1e-5)  # fmt: skip


def test_negated_lambda_is_read_as_negated(tmp_path) -> None:
    """-(x/127.5-1) holds the same constants as x/127.5-1: it must be read as what it computes, not as that."""
    layers = keras2_layers()
    layers[1]["config"]["function"] = _lambda_code(lambda x: -(x / 127.5 - 1), version=2)
    model = K.load_keras(write_keras(tmp_path / "neg.h5", layers, version=2))
    assert model.keras.lambdas[0].startswith("lambda_1: -(x/127.5-1)")
    x = np.random.default_rng(6).uniform(0, 255, (2, 23, 30, 3))
    np.testing.assert_allclose(torch_forward(model, x), np_forward(layers, x, lambda v: -(v / 127.5 - 1)),
                               atol=1e-5, rtol=1e-5)  # fmt: skip
    assert not np.allclose(np_forward(layers, x, lambda v: v / 127.5 - 1), np_forward(layers, x,
                                                                                     lambda v: -(v / 127.5 - 1)))


@pytest.mark.parametrize("fn", [lambda x: x * x, lambda x: 2 / x, lambda x: x ** 2, lambda x: abs(x) / 255,
                                lambda x: x[:, 10:] / 255, lambda x: 3.0])  # fmt: skip
def test_lambdas_that_are_not_affine_are_refused(tmp_path, fn) -> None:
    layers = keras2_layers()
    layers[1]["config"]["function"] = _lambda_code(fn, version=2)
    with pytest.raises(ModelError, match=r"lambda_1 is a Lambda whose stored code is not an affine") as exc:
        K.load_keras(write_keras(tmp_path / "odd.h5", layers, version=2))
    assert "\n" not in str(exc.value)


def test_lambda_bytes_of_keras_1_2_on_python_3_5() -> None:
    """The bytes the shared DAVE-2 file holds (Keras 1.2.1, CPython 3.5's variable-length bytecode), and the same
    code with UNARY_NEGATIVE inserted before RETURN_VALUE."""
    raw = bytes.fromhex("e30100000000000000010000000200000053000000730c0000007c00006401001b640200185329034ee7000000"
                        "0000e05f40e7000000000000f03fa9002901da017872030000007203000000fa086d6f64656c2e7079da083c6c"
                        "616d6264613e220000007300000000")
    assert K.decode_lambda([raw.decode("raw_unicode_escape"), None, None]) == (1 / 127.5, -1.0, "x/127.5-1")
    neg = raw.replace(bytes.fromhex("730c000000"), bytes.fromhex("730d000000")).replace(
        bytes.fromhex("18532903"), bytes.fromhex("180b532903"))
    scale, offset, text = K.decode_lambda([neg.decode("raw_unicode_escape"), None, None])
    assert (scale, offset, text) == (-1 / 127.5, 1.0, "-(x/127.5-1)")
    assert K.decode_lambda([raw[:40].decode("raw_unicode_escape")]) is None  # truncated: refused


@pytest.mark.parametrize(("text", "scale", "offset"), [
    ("x/127.5-1", 1 / 127.5, -1.0), ("x / 255.0 - 0.5", 1 / 255, -0.5), ("x*2+3", 2.0, 3.0),
    ("x/255", 1 / 255, 0.0), ("(x/128)-1.", 1 / 128, -1.0), ("x", 1.0, 0.0), ("x-1e2", 1.0, -100.0),
])  # fmt: skip
def test_parse_affine(text: str, scale: float, offset: float) -> None:
    assert K.parse_affine(text) == pytest.approx((scale, offset))


@pytest.mark.parametrize("text", ["__import__('os')", "x/0", "x**2", "y/2", "x/2-1-1", "lambda x: x"])
def test_parse_affine_refuses(text: str) -> None:
    with pytest.raises(ModelError):
        K.parse_affine(text)


@pytest.mark.parametrize(("fn", "want"), [
    (lambda x: x / 127.5 - 1.0, "x/127.5-1"), (lambda x: x / 127.5 - 1, "x/127.5-1"),
    (lambda x: (x / 255.0) - 0.5, "x/255-0.5"), (lambda x: x / 255, "x/255"), (lambda x: x * 3.3 - 1.7, "x*3.3-1.7"),
    (lambda x: -(x / 127.5 - 1), "-(x/127.5-1)"), (lambda x: x * x, None), (lambda x: 1 - x / 128, "1-x/128"),
])  # fmt: skip
def test_recognise_lambda(fn, want) -> None:
    for version in (1, 2):
        assert K.recognise_lambda(_lambda_code(fn, version=version)) == want


def _code_object(header: list[int], co_code: bytes, consts: bytes) -> str:
    """A marshalled code object built by hand (as CPython 2.7 / 3.8 write one), as Keras 1 stores it."""
    import struct

    raw = b"c" + b"".join(struct.pack("<i", v) for v in header) + b"s" + struct.pack("<i", len(co_code)) + co_code
    return (raw + consts + b"(\x00\x00\x00\x00").decode("raw_unicode_escape")


def _floats(*values: float) -> bytes:
    import struct

    return b"".join(b"g" + struct.pack("<d", v) for v in values)


@pytest.mark.parametrize(("header", "co_code", "consts", "want"), [
    # CPython 2.7: argcount, nlocals, stacksize, flags; LOAD_FAST 0, LOAD_CONST 1, BINARY_DIVIDE, LOAD_CONST 2,
    # BINARY_SUBTRACT, RETURN_VALUE; consts (None, 127.5, 1.0) as a long tuple
    ([1, 1, 2, 0x43], bytes.fromhex("7c0000640100156402001853"), b"(\x03\x00\x00\x00N" + _floats(127.5, 1.0),
     (1 / 127.5, -1.0, "x/127.5-1")),
    # CPython 3.8-3.10: six header fields and wordcode; UNARY_NEGATIVE before RETURN_VALUE
    ([1, 0, 0, 1, 2, 0x43], bytes.fromhex("7c0064011b0064021800 0b005300".replace(" ", "")),
     b")\x03N" + _floats(127.5, 1.0), (-1 / 127.5, 1.0, "-(x/127.5-1)")),
    # 3.8 wordcode multiplying x by x: refused
    ([1, 0, 0, 1, 2, 0x43], bytes.fromhex("7c007c0014005300"), b")\x01N", None),
    # a constant that is not a number (a string): refused
    ([1, 0, 0, 1, 2, 0x43], bytes.fromhex("7c0064011b005300"), b")\x02N\xfa\x01a", None),
])  # fmt: skip
def test_decode_lambda_of_other_pythons(header, co_code, consts, want) -> None:
    assert K.decode_lambda([_code_object(header, co_code, consts), None, None]) == want


def test_unsupported_layer_names_layer_and_type(tmp_path) -> None:
    layers = keras2_layers()
    layers.insert(3, {"class_name": "SeparableConv2D", "config": {"name": "separable_conv2d_1"}})
    path = write_keras(tmp_path / "sep.h5", layers, version=2)
    with pytest.raises(ModelError, match=r"layer separable_conv2d_1 has type SeparableConv2D") as exc:
        K.load_keras(path)
    assert "\n" not in str(exc.value) and isinstance(exc.value, UserError)


def test_wrong_output_shape_and_bad_files(tmp_path) -> None:
    path = write_keras(tmp_path / "three.h5", keras2_layers(last_units=3), version=2)
    with pytest.raises(ModelError, match=r"outputs shape \(3,\) per image; a steering model must output one"):
        K.load_keras(path)
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ModelError, match="is not an HDF5 file"):
        K.load_keras(tmp_path / "text.h5")
    with h5py.File(tmp_path / "weights.h5", "w") as f:
        f.create_group("dense_1")
    with pytest.raises(ModelError, match="holds no model_config"):
        K.load_keras(tmp_path / "weights.h5")
    with pytest.raises(ModelError, match="does not exist"):
        K.load_keras(tmp_path / "missing.h5")
    layers = keras2_layers()
    layers[10]["weights"][0] = ("kernel", np.zeros((151, 9)))  # 151 inputs where the map flattens to 150
    with pytest.raises(ModelError, match="do not fit together"):
        K.load_keras(write_keras(tmp_path / "misfit.h5", layers, version=2))


def test_presets_and_options(tmp_path) -> None:
    path = write_keras(tmp_path / "k2.h5", keras2_layers(), version=2)
    assert K.load_keras(path).keras.preset == "resize"
    assert K.default_preset((66, 200, 3)) == "dave2-udacity-sim"
    with pytest.raises(ModelError, match="unknown; known presets"):
        K.load_keras(path, preprocess="nope")
    with pytest.raises(ModelError, match="unknown option.*known: preprocess, frame, crop"):
        K.load_keras(path, colour_space="yuv")
    with pytest.raises(ModelError, match="cannot use device 'warp-drive'"):
        K.load_keras(path, device="warp-drive")
    with pytest.raises(ModelError, match="batch_size='many'"):
        K.load_keras(path, batch_size="many")
    with pytest.raises(ModelError, match="would take 3.0 GiB; give a smaller"):  # checked before allocating
        K.load_keras(path, size="8192x8192", batch_size=4)
    with pytest.raises(ModelError, match="between 1 and 8192"):
        K.load_keras(path, size="100000x2")
    huge = keras2_layers()
    huge[0]["config"]["batch_input_shape"] = [None, 10**9, 30, 3]  # a file claiming a size: one line, no allocation
    with pytest.raises(ModelError, match="an input of 1000000000x30 pixels"):
        K.load_keras(write_keras(tmp_path / "huge.h5", huge, version=2))
    m = K.load_keras(path, output="degrees", preprocess="resize-yuv")
    base = K.load_keras(path, preprocess="resize-yuv")
    frames = np.random.default_rng(5).integers(0, 256, (2, 40, 50, 3), dtype=np.uint8)
    np.testing.assert_allclose(m.predict(frames), base.predict(frames) * math.pi / 180, rtol=1e-12)


# ------------------------------------------------------------------------------------------------------------
# The shared DAVE-2 (Keras 1.2) file
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dave2(shared_data: Path) -> Path:
    p = shared_data / "models" / "dave2_udacity_simulator.h5"
    if not p.is_file():
        pytest.skip(f"shared DAVE-2 model not available at {p}")
    return p


def _dave2_prepare(frames: np.ndarray) -> np.ndarray:
    """naokishibuya/car-behavioral-cloning's preprocessing on 160x320 frames: crop, resize, RGB->YUV."""
    import cv2

    out = []
    for img in frames:
        if img.shape[:2] != (160, 320):
            img = cv2.resize(img, (320, 160), interpolation=cv2.INTER_AREA)
        out.append(cv2.cvtColor(cv2.resize(img[60:-25], (200, 66)), cv2.COLOR_RGB2YUV))
    return np.stack(out).astype(np.float64)


@pytest.mark.realdata
def test_dave2_matches_numpy(dave2: Path) -> None:
    model = K.load_keras(dave2)
    info = model.keras
    assert (
        info.input_shape == (66, 200, 3)
        and info.preset == "dave2-udacity-sim"
        and info.output == "udacity-sim"
    )
    assert info.lambdas[0].startswith("lambda_1: x/127.5-1") and info.parameters == 252_219
    with h5py.File(dave2) as f:
        cfg = json.loads(f.attrs["model_config"])["config"]
    layers = _layers_with_weights(dave2, cfg, version=1)
    x = np.random.default_rng(0).uniform(0, 255, (3, 66, 200, 3))
    np.testing.assert_allclose(torch_forward(model, x), np_forward(layers, x, lambda v: v / 127.5 - 1),
                               atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.realdata
def test_dave2_on_udacity_frames(dave2: Path, shared_data: Path) -> None:
    import csv

    import cv2

    folder = shared_data / "udacity"
    if not (folder / "steering.csv").is_file():
        pytest.skip(f"Udacity frames not available at {folder}")
    with open(folder / "steering.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[::75]
    files = [str(folder / "center" / f"{r['frame_id']}.jpg") for r in rows]
    frames = np.stack([cv2.cvtColor(cv2.imread(f), cv2.COLOR_BGR2RGB) for f in files])
    model = K.load_keras(dave2)
    got = model.predict(frames)
    with h5py.File(dave2) as f:
        cfg = json.loads(f.attrs["model_config"])["config"]
    layers = _layers_with_weights(dave2, cfg, version=1)
    raw = np_forward(layers, _dave2_prepare(frames), lambda v: v / 127.5 - 1)[:, 0]
    np.testing.assert_allclose(got, raw * -math.radians(25.0), atol=1e-5)
    # sensible angles: finite, mostly within the simulator's ±25° lock (its output layer is linear, so a real
    # frame unlike the simulator's may go beyond it), not constant
    assert np.all(np.isfinite(got)) and np.mean(np.abs(got) <= math.radians(25.0) * 1.5) >= 0.9
    assert np.std(got) > math.radians(1.0)
