"""Apollo's own CNN files: the Caffe prototxt/caffemodel reader and writer, ONNX as the CNN stage, export-weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_support import make_scene, strip_roi, write_scenes

from lidarmt.lidar.perception.apollo import caffe
from lidarmt.lidar.perception.apollo.config import ApolloConfig
from lidarmt.lidar.perception.apollo.errors import WeightsError
from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network, load_network, parameter_count
from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CNNSEG = ROOT.parent / "shared" / "data" / "apollo" / "cnnseg"
GRID = 64
HYP = settings(derandomize=True, database=None, deadline=None, max_examples=40,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _needs_onnx() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")


def _features(seed: int = 0, c: int = 8) -> np.ndarray:
    f = np.random.default_rng(seed).random((c, GRID, GRID), dtype=np.float32)
    f[c - 1] = f[c - 1] > 0.4
    return f


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A seeded 8-channel network at grid 64: its .pt, its caffemodel + prototxt and its ONNX file."""
    d = tmp_path_factory.mktemp("apollo")
    net = build_network(GRID, seed=3)
    with torch.no_grad():  # objects wherever the mask is set (category, confidence high), small centre offsets
        net.deconv0.weight.mul_(0.05)
        net.deconv0.bias.copy_(torch.tensor([4.0, 0, 0, 4.0, 0, 1, 0, 0, 0, 0, 0, 1.0]))
    torch.save(net.state_dict(), d / "own.pt")
    (d / "deploy.caffemodel").write_bytes(caffe.caffemodel_bytes(net.state_dict()))
    (d / "deploy.prototxt").write_text(caffe.prototxt_text(8, GRID))
    import importlib.util

    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):  # the onnx extra
        from lidarmt.lidar.perception.apollo.onnxnet import export_onnx

        export_onnx(net.state_dict(), d / "own.onnx", grid=GRID)
    return {"dir": d, "pt": d / "own.pt", "caffemodel": d / "deploy.caffemodel", "prototxt": d / "deploy.prototxt",
            "onnx": d / "own.onnx"}


# ------------------------------------------------------------------------------------------ Apollo's definitions


@pytest.mark.parametrize("folder,size", [("apollo-2.5-640", 11_901_621), ("apollo-3.5/velodyne16", 11_901_429),
                                         ("apollo-3.5/velodyne64", 11_901_429),
                                         ("apollo-3.5/velodyne128", 11_901_237)])
def test_apollo_prototxts_are_our_network_and_their_sizes_fit(folder, size):
    path = CNNSEG / folder / "deploy.prototxt"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data)")
    net = caffe.read_prototxt(path)
    caffe.check_netdef(net, str(path))  # 61 layers, by name, type, blobs and parameters
    assert len(net.layers) == 61
    # each official weights file is 4 bytes per parameter of this network + 5,445 bytes
    assert 4 * parameter_count(net.in_channels) + caffe.OFFICIAL_OVERHEAD == size
    assert sum(p.numel() for p in build_network(GRID, in_channels=net.in_channels).parameters()) == \
        parameter_count(net.in_channels)


def test_our_prototxt_equals_apollos_definition():
    path = CNNSEG / "apollo-2.5-640" / "deploy.prototxt"
    if not path.is_file():
        pytest.skip("../shared/data is absent")
    theirs = caffe.read_prototxt(path)
    ours = caffe.netdef_from_text(caffe.prototxt_text(8, 640))
    assert [(x.name, x.type, x.bottom, x.top, x.params) for x in ours.layers] == \
        [(x.name, x.type, x.bottom, x.top, x.params) for x in theirs.layers]


def test_a_changed_layer_is_named(tmp_path):
    text = caffe.prototxt_text(8, GRID).replace("num_output: 96", "num_output: 95", 1)
    with pytest.raises(WeightsError, match=r"layer 'conv3_1' has params .*num_output: 95"):
        caffe.check_netdef(caffe.netdef_from_text(text))
    text = caffe.prototxt_text(8, GRID).replace('operation: PROD', 'operation: SUM')
    with pytest.raises(WeightsError, match="instance_ignore_layer"):
        caffe.check_netdef(caffe.netdef_from_text(text))


def test_official_digests_are_named():
    assert caffe.label_for("95ef519b41728a97175d3d31c3f9ed47eb8ed1d5ad6793af59435b848355adda") == \
        "Apollo 3.0 cnnseg, official weights"
    assert caffe.label_for("ab" * 32) == "caffemodel " + "ab" * 6


# ------------------------------------------------------------------------------------------ caffemodel round trip


def test_caffemodel_round_trip_gives_identical_outputs(files):
    own = load_network(files["pt"], grid=GRID)
    back = caffe.load_any_network(files["caffemodel"], grid=GRID)
    for k, v in own.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k
    f = _features()
    a, b = CnnRunner(own)(f), CnnRunner(back)(f)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # the label names the file by digest; the size is 4 B x parameters + framing, close to Apollo's
    lop = ApolloLOP(ApolloConfig(grid=GRID, weights=str(files["caffemodel"])))
    assert lop.weights_label == "caffemodel " + caffe.sha256_file(files["caffemodel"])[:12]
    size = files["caffemodel"].stat().st_size
    assert size - 4 * parameter_count(8) == 3920  # Apollo's: 5,445 B (more layer parameters: fillers, phase)


def test_caffemodel_of_another_width_names_the_first_mismatch(tmp_path):
    net6 = build_network(GRID, seed=1, in_channels=6)
    (tmp_path / "deploy.caffemodel").write_bytes(caffe.caffemodel_bytes(net6.state_dict(), 6))
    (tmp_path / "deploy.prototxt").write_text(caffe.prototxt_text(8, GRID))
    with pytest.raises(WeightsError, match=r"truncated or another network|conv0_1"):
        caffe.read_caffemodel(tmp_path / "deploy.caffemodel")
    # with its own prototxt it loads, and the 8-channel presets refuse it in one line
    (tmp_path / "deploy.prototxt").write_text(caffe.prototxt_text(6, GRID))
    assert caffe.read_caffemodel(tmp_path / "deploy.caffemodel").netdef.in_channels == 6
    with pytest.raises(WeightsError, match="6-channel network.*apollo-3.5"):
        ApolloLOP(ApolloConfig(grid=GRID, weights=str(tmp_path / "deploy.caffemodel")))
    # the apollo-3.5 preset's 6 channels are the 2.x generator's without direction and distance
    lop = ApolloLOP(ApolloConfig(grid=GRID, range=70.0, in_channels=6,
                                 weights=str(tmp_path / "deploy.caffemodel")))
    frame = make_scene(0)
    full = ApolloLOP(ApolloConfig(grid=GRID, range=70.0), weights=None, allow_random=True).features(frame).copy()
    assert np.array_equal(lop.features(frame), full[[0, 1, 2, 4, 5, 7]])
    assert lop.runner(lop.features(frame))["category_score"].shape == (GRID, GRID)  # the 6-channel CNN runs
    lop.detect(frame, strip_roi().roi_for(frame))


def test_apollo_3_5_preset_takes_the_sensor_and_needs_weights():
    from lidarmt.lidar.perception.apollo.errors import ConfigError
    from lidarmt.lidar.perception.registry import get_perception

    with pytest.raises(ConfigError, match="no shipped weights"):
        get_perception("apollo-3.5", sensor="velodyne128")
    shipped = get_perception("apollo-3.5", mode="exact")  # velodyne64: the shipped 6-channel weights
    assert shipped.network.in_channels == 6 and shipped.weights_path.name == "cnnseg672_6ch.pt"
    sut = get_perception("apollo-3.5", sensor="velodyne128", weights=None, allow_random=True)
    assert (sut.config.grid, sut.config.range, sut.config.in_channels) == (576, 60.0, 4)
    with pytest.raises(ConfigError, match="sensor must be"):
        get_perception("apollo-3.5", sensor="hdl32")


def test_blob_shape_mismatch_is_named(tmp_path, files):
    state = dict(build_network(GRID, seed=1).state_dict())
    bad = caffe.caffemodel_bytes(state)
    # swap deconv4's weights for a (128, 192, 4, 4) blob: same count, Caffe's conv order instead of deconv's
    good_dims = b"".join(caffe._enc_varint(d) for d in (192, 128, 4, 4))
    swapped = b"".join(caffe._enc_varint(d) for d in (128, 192, 4, 4))
    assert bad.count(good_dims) == 1
    (tmp_path / "deploy.caffemodel").write_bytes(bad.replace(good_dims, swapped))
    (tmp_path / "deploy.prototxt").write_text(caffe.prototxt_text(8, GRID))
    with pytest.raises(WeightsError, match=r"layer 'deconv4' weight blob has shape \(128, 192, 4, 4\)"):
        caffe.read_caffemodel(tmp_path / "deploy.caffemodel")


def _small_netparameter() -> bytes:
    """A small NetParameter: the first layers of cnnseg with tiny blobs (the wire format, not the network)."""
    parts = [caffe._str(1, "tiny")]
    for name in ("conv0_1", "relu_conv0_1", "conv0"):
        body = caffe._str(1, name) + caffe._str(2, "Convolution") + caffe._str(3, "data") + caffe._str(4, name)
        if not name.startswith("relu"):
            arr = np.arange(6, dtype="<f4")
            body += caffe._ld(7, caffe._ld(7, caffe._ld(1, bytes([2, 3]))) + caffe._ld(5, arr.tobytes()))
        parts.append(caffe._ld(100, body))
    return b"".join(parts)


def test_small_netparameter_parses():
    _, layers = caffe.parse_caffemodel(_small_netparameter())
    assert [x.name for x in layers] == ["conv0_1", "relu_conv0_1", "conv0"]
    assert layers[0].blobs[0].shape == (2, 3) and layers[0].blobs[0].count == 6


@HYP
@given(cut=st.integers(min_value=0, max_value=10_000), flips=st.lists(st.tuples(st.integers(0, 10_000),
                                                                                 st.integers(0, 7)), max_size=4))
def test_damaged_netparameter_is_one_line_or_parses(cut, flips):
    data = bytearray(_small_netparameter())
    for pos, bit in flips:
        data[pos % len(data)] ^= 1 << bit
    data = bytes(data[: cut % (len(data) + 1)])
    import tracemalloc

    tracemalloc.start()
    try:
        caffe.parse_caffemodel(data)
    except WeightsError as err:
        assert "\n" not in str(err)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 256 * 1024  # nothing a damaged length claims is allocated


def test_a_huge_declared_length_is_refused_unallocated():
    # a layer that claims 2**40 bytes, a blob that claims 2**33 floats in a 20-byte message
    for data in (caffe._key(100, 2) + caffe._enc_varint(1 << 40) + b"x" * 10,
                 caffe._ld(100, caffe._str(1, "conv0") + caffe._key(7, 2) + caffe._enc_varint(1 << 35))):
        with pytest.raises(WeightsError, match="truncated or damaged"):
            caffe.parse_caffemodel(data)


@HYP
@given(where=st.integers(min_value=0, max_value=11_900_095), bit=st.integers(0, 7), cut=st.booleans())
def test_damaged_caffemodel_file_is_one_line(tmp_path_factory, files, where, bit, cut):
    d = tmp_path_factory.mktemp("bad")
    data = bytearray(files["caffemodel"].read_bytes())
    if cut:
        data = data[: where % len(data)]
    else:
        data[where % len(data)] ^= 1 << bit
    (d / "deploy.caffemodel").write_bytes(bytes(data))
    (d / "deploy.prototxt").write_bytes(files["prototxt"].read_bytes())
    try:
        cw = caffe.read_caffemodel(d / "deploy.caffemodel")
    except WeightsError as err:
        assert "\n" not in str(err)
    else:  # a flip inside a float: the shapes still fit
        assert set(cw.state) == set(build_network(GRID).state_dict())


def test_oversized_and_foreign_files_are_refused_before_reading(tmp_path, files):
    big = tmp_path / "deploy.caffemodel"
    with open(big, "wb") as fh:  # sparse: nothing is allocated to make it
        fh.truncate(caffe.MAX_WEIGHTS_BYTES + 1)
    (tmp_path / "deploy.prototxt").write_bytes(files["prototxt"].read_bytes())
    with pytest.raises(WeightsError, match="far more than"):
        caffe.read_caffemodel(big)
    big.write_bytes(b"not a caffemodel")
    with pytest.raises(WeightsError, match="cannot hold"):
        caffe.read_caffemodel(big)
    (tmp_path / "deploy.prototxt").write_text("layer { name: 'x' " + "a { " * 40)
    with pytest.raises(WeightsError, match="nested deeper|not closed"):
        caffe.read_caffemodel(big)


@pytest.mark.slow  # a subprocess: seconds of start-up
def test_cli_damaged_caffemodel_is_one_line_exit_2(tmp_path, files):
    (tmp_path / "deploy.caffemodel").write_bytes(files["caffemodel"].read_bytes()[:-5000])
    (tmp_path / "deploy.prototxt").write_bytes(files["prototxt"].read_bytes())
    r = subprocess.run([sys.executable, "-m", "lidarmt", "export-weights", "--weights",
                        str(tmp_path / "deploy.caffemodel"), "--grid", str(GRID), "--format", "onnx", "--out",
                        str(tmp_path / "x.onnx")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.slow  # two subprocesses writing 12 MB files
def test_cli_export_weights_writes_both_and_refuses_overwrite(tmp_path, files):
    out = tmp_path / "w" / "deploy.caffemodel"
    out.parent.mkdir()
    cmd = [sys.executable, "-m", "lidarmt", "export-weights", "--weights", str(files["pt"]), "--grid", str(GRID),
           "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "11,901,621" in " ".join(r.stderr.split()) and out.with_suffix(".prototxt").is_file()
    assert out.read_bytes() == files["caffemodel"].read_bytes()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "--force" in r.stderr


# ------------------------------------------------------------------------------------------ ONNX as the CNN stage


def test_onnx_runner_matches_torch_within_tolerance(files):
    _needs_onnx()
    from lidarmt.lidar.perception.apollo.onnxnet import OnnxCnnRunner

    torch_run = CnnRunner(load_network(files["pt"], grid=GRID))
    onnx_run = OnnxCnnRunner(files["onnx"], grid=GRID)
    for seed in range(3):
        f = _features(seed)
        a, b = torch_run(f), onnx_run(f)
        for k in a:
            assert a[k].shape == b[k].shape, k
            np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-4, err_msg=k)


def test_onnx_sut_gives_the_torch_suts_obstacles(files):
    _needs_onnx()
    roi = strip_roi()
    t = ApolloLOP(ApolloConfig(grid=GRID, weights=str(files["pt"])))
    o = ApolloLOP(ApolloConfig(grid=GRID, weights=str(files["onnx"])))
    assert o.network is None and o.weights_label.startswith("onnx ")
    total = 0
    for i in range(4):
        frame = make_scene(i)
        a, b = t.detect(frame, roi.roi_for(frame)), o.detect(frame, roi.roi_for(frame))
        assert [(x.cls, x.num_points) for x in a] == [(x.cls, x.num_points) for x in b]
        assert all(np.array_equal(x.point_indices, y.point_indices) for x, y in zip(a, b, strict=True))
        total += len(a)
    assert total > 0


def test_autoware_single_output_layout(tmp_path, files):
    """One 12-channel output (Autoware's 'deconv0'): Apollo's heads are applied by lidarmt."""
    _needs_onnx()
    import io
    import warnings

    from lidarmt.lidar.perception.apollo.onnxnet import OnnxCnnRunner

    net = load_network(files["pt"], grid=GRID).eval()

    class Raw(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, data):
            return self.net.forward_raw(data)

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Raw(), (torch.zeros(1, 8, GRID, GRID),), buf, dynamo=False, input_names=["data"],
                          output_names=["deconv0"], opset_version=17)
    (tmp_path / "aw.onnx").write_bytes(buf.getvalue())
    r = OnnxCnnRunner(tmp_path / "aw.onnx", grid=GRID)
    assert r.layout == "deconv0"
    f = _features(1)
    a, b = CnnRunner(net)(f), r(f)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-4, err_msg=k)


def test_damaged_onnx_is_one_line(tmp_path, files):
    _needs_onnx()
    data = files["onnx"].read_bytes()
    for i, bad in enumerate((data[: len(data) // 2], b"\x00garbage" * 10, data[:100])):
        p = tmp_path / f"bad{i}.onnx"
        p.write_bytes(bad)
        with pytest.raises(WeightsError) as exc:
            ApolloLOP(ApolloConfig(grid=GRID, weights=str(p)))
        assert "\n" not in str(exc.value)
    with pytest.raises(WeightsError, match="grid is 32x32"):
        ApolloLOP(ApolloConfig(grid=32, weights=str(files["onnx"])))


def test_onnx_with_external_data_is_refused(tmp_path, files):
    _needs_onnx()
    import onnx

    model = onnx.load(str(files["onnx"]))
    onnx.save_model(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.data", size_threshold=0)
    with pytest.raises(WeightsError, match="external data"):
        ApolloLOP(ApolloConfig(grid=GRID, weights=str(tmp_path / "ext.onnx")))


@pytest.mark.slow
def test_campaign_with_onnx_sut_gives_the_torch_verdicts(files, tmp_path):
    _needs_onnx()
    from lidarmt.lidar.mr1.campaign import CampaignConfig, run_campaign
    from lidarmt.lidar.mr1.inject import Region
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    rec = write_scenes(tmp_path / "frames", 3)
    runs = {}
    for kind in ("pt", "onnx"):
        cfg = CampaignConfig(SourceSpec(str(rec)), RoiSpec("test_fuzz_support:strip_roi"),
                             SutSpec("apollo", {"weights": str(files[kind]), "grid": GRID}), ns=(10, 300),
                             frames=(0, 1, 2), seed=0, trials=2, region=Region.disk(30.0))
        r = run_campaign(cfg, tmp_path / kind)
        assert r.tally.done == 3 * 2 * 2 and r.tally.crashes == 0 if hasattr(r.tally, "crashes") else True
        runs[kind] = r.tally.to_dict()
    assert runs["pt"] == runs["onnx"]
    # the report names the weights by kind and digest
    from lidarmt.lidar.perception.apollo.caffe import sha256_file, weights_note

    assert weights_note({"weights": str(files["onnx"])}) == f" (weights: onnx {sha256_file(files['onnx'])[:12]})"


def _tiny_onnx() -> bytes:
    import io
    import warnings

    net = torch.nn.Sequential(torch.nn.Conv2d(8, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 12, 1))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.zeros(1, 8, GRID, GRID),), buf, dynamo=False, input_names=["data"],
                          output_names=["deconv0"], opset_version=17)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tiny_onnx() -> bytes:
    _needs_onnx()
    return _tiny_onnx()


def test_tiny_onnx_runs_as_autoware_layout(tmp_path, tiny_onnx):
    from lidarmt.lidar.perception.apollo.onnxnet import OnnxCnnRunner

    (tmp_path / "t.onnx").write_bytes(tiny_onnx)
    heads = OnnxCnnRunner(tmp_path / "t.onnx", grid=GRID)(_features())
    assert heads["class_score"].shape == (5, GRID, GRID)


@HYP
@given(cut=st.integers(min_value=0, max_value=1 << 20), flips=st.lists(
    st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), max_size=3))
def test_damaged_onnx_is_one_line_or_runs(tmp_path_factory, tiny_onnx, cut, flips):
    from lidarmt.lidar.perception.apollo.onnxnet import OnnxCnnRunner

    data = bytearray(tiny_onnx)
    for pos, bit in flips:
        data[pos % len(data)] ^= 1 << bit
    data = bytes(data[: cut % (len(data) + 1)]) if cut % 3 == 0 else bytes(data)
    p = tmp_path_factory.mktemp("onnx") / "x.onnx"
    p.write_bytes(data)
    try:
        OnnxCnnRunner(p, grid=GRID)(_features())
    except WeightsError as err:
        assert "\n" not in str(err)


def test_oversized_onnx_is_refused_before_reading(tmp_path):
    _needs_onnx()
    from lidarmt._onnx import MAX_ONNX_BYTES

    p = tmp_path / "big.onnx"
    with open(p, "wb") as fh:  # sparse
        fh.truncate(MAX_ONNX_BYTES + 1)
    with pytest.raises(WeightsError, match="more than lidarmt opens"):
        ApolloLOP(ApolloConfig(grid=GRID, weights=str(p)))


def test_a_3_5_network_starts_from_the_8_channel_weights(tmp_path, files):
    from lidarmt.lidar.perception.apollo.train import TrainConfig, write_start_checkpoint

    path = write_start_checkpoint(files["pt"], tmp_path / "run", grid=GRID, in_channels=6)
    state = torch.load(path, weights_only=True)["model"]
    own = torch.load(files["pt"], weights_only=True)
    assert torch.equal(state["conv0_1.weight"], own["conv0_1.weight"][:, [0, 1, 2, 4, 5, 7]])
    assert torch.equal(state["deconv0.weight"], own["deconv0.weight"])
    with pytest.raises(Exception, match="in_channels"):
        TrainConfig(data=("x",), out=str(tmp_path / "o"), in_channels=5)
