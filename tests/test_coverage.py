"""Coverage criteria (lidarmt.coverage): hooks, NC/KMNC/NBC/SNAC/TKNC, tracker state, profiles."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from lidarmt.coverage import (  # noqa: E402
    CoverageArgumentError,
    CoverageConfig,
    CoverageTracker,
    NeuronProbe,
    Profile,
    ProfileAccumulator,
    ProfileError,
    activated_set,
    jaccard_distance,
)
from lidarmt.coverage.criteria import kmnc_sections, layer_scaled, nc_mask, tknc_mask  # noqa: E402


def tiny_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 5, 3),
        nn.Flatten(), nn.Linear(5 * 2 * 2, 6), nn.ELU(), nn.Linear(6, 1),
    )


def run_of(net: nn.Module):
    def run(x):
        with torch.inference_mode():
            return net(torch.as_tensor(x, dtype=torch.float32)).numpy()
    return run


def test_default_layers_count_activations_after_their_layer() -> None:
    layers = NeuronProbe(tiny_net()).layers
    assert [(li.name, li.kind) for li in layers] == [("1", "conv"), ("3", "conv"), ("6", "dense"), ("7", "dense")]
    probe = NeuronProbe(tiny_net(), layers=lambda li: li.kind == "conv")
    assert probe.names == ["1", "3"]
    with pytest.raises(CoverageArgumentError, match="not a module"):
        NeuronProbe(tiny_net(), layers=["nope"])


def test_conv_neuron_is_channel_mean_after_activation() -> None:
    net = tiny_net()
    x = np.random.default_rng(0).normal(size=(5, 3, 10, 10)).astype(np.float32)
    probe = NeuronProbe(net)
    out, acts = probe.capture(lambda: run_of(net)(x), len(x))
    assert acts.shape == (5, 4 + 5 + 6 + 1) and out.shape == (5, 1)
    with torch.inference_mode():
        t = torch.as_tensor(x)
        relu1 = net[1](net[0](t))
        conv2 = net[3](net[2](relu1))
        dense = net[6](net[5](net[4](conv2)))
    np.testing.assert_allclose(acts[:, :4], relu1.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acts[:, 4:9], conv2.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acts[:, 9:15], dense.numpy(), rtol=1e-5, atol=1e-6)
    assert list(probe.offsets) == [0, 4, 9, 15, 16]


def test_windows_of_frames_read_the_last_frame_and_relu_after() -> None:
    conv = nn.Conv2d(1, 2, 1)

    class Windowed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = conv

        def forward(self, x):  # (N, T, 1, H, W): one encoder over every frame, a functional ReLU
            n, t = x.shape[:2]
            return torch.relu_(self.conv(x.reshape(n * t, *x.shape[2:]))).reshape(n, t, -1).mean(2)

    net = Windowed()
    x = torch.randn(3, 4, 1, 5, 5)
    probe = NeuronProbe(net, relu_after={"conv"})
    _, acts = probe.capture(lambda: net(x), 3)
    with torch.no_grad():
        want = torch.relu(conv(x[:, -1])).mean((2, 3)).numpy()
    np.testing.assert_allclose(acts, want, rtol=1e-5, atol=1e-6)


def test_nc_scales_within_each_layer() -> None:
    acts = np.array([[0.0, 1.0, 10.0, 5.0, 5.0], [2.0, 0.0, 0.0, 1.0, 3.0]], dtype=np.float32)
    offsets = np.array([0, 3, 5])
    scaled = layer_scaled(acts, offsets)
    np.testing.assert_allclose(scaled, [[0.0, 0.1, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 1.0]], atol=1e-6)
    # strictly above the threshold, as DeepTest; a constant layer activates nothing
    np.testing.assert_array_equal(nc_mask(acts, offsets, 0.05), [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
    np.testing.assert_array_equal(nc_mask(acts, offsets, 0.5), [[0, 0, 1, 0, 0], [1, 0, 0, 0, 1]])
    flat = np.array([[4.0, 4.0, 4.0]], dtype=np.float32)
    assert not nc_mask(flat, np.array([0, 3]), 0.0).any()


def test_kmnc_value_below_lower_bound_does_not_cover_the_top_section() -> None:
    low = np.array([0.0, 0.0], dtype=np.float32)
    high = np.array([1.0, 1.0], dtype=np.float32)
    acts = np.array([[-0.5, 0.0], [1.0, 0.55], [1.5, 0.999]], dtype=np.float32)
    sec = kmnc_sections(acts, low, high, 10)
    np.testing.assert_array_equal(sec, [[-1, 0], [9, 5], [-1, 9]])
    # TACTIC's released code: int((v - low) / (high - low) * k) -> -1 for v below low, which NumPy indexing turns
    # into the last section; here the tracker's KMNC bitset must not get that section from a low value.
    probe = NeuronProbe(nn.Sequential(nn.Linear(1, 1)))
    probe._sizes = [1]
    prof = Profile(("0",), (1,), np.zeros(1, np.float32), np.ones(1, np.float32), np.zeros(1, np.float32),
                   np.ones(1, np.float32), 10)
    tr = CoverageTracker(probe, profile=prof, config=CoverageConfig(criteria=("kmnc", "nbc", "snac"), kmnc_k=10))
    step = tr.update_activations(np.array([[-0.5]], dtype=np.float32))
    assert step.new["kmnc"].tolist() == [0]
    assert not tr.covered("kmnc")[-1] and tr.covered("kmnc").sum() == 0
    assert tr.covered("nbc").tolist() == [True, False]  # below the lower bound: NBC's lower corner
    assert tr.covered("snac").tolist() == [False]
    tr.update_activations(np.array([[1.0], [2.0]], dtype=np.float32))
    assert tr.covered("kmnc")[-1] and tr.covered("kmnc").sum() == 1
    assert tr.coverage() == {"kmnc": 0.1, "nbc": 1.0, "snac": 1.0}


def test_tknc_picks_top_k_per_layer() -> None:
    acts = np.array([[3.0, 1.0, 2.0, 7.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(tknc_mask(acts, np.array([0, 3, 5]), 2), [[1, 0, 1, 1, 1]])
    np.testing.assert_array_equal(tknc_mask(acts, np.array([0, 3, 5]), 1), [[1, 0, 0, 1, 0]])


def tracker(net: nn.Module, profile: Profile | None = None, **cfg) -> CoverageTracker:
    return CoverageTracker(NeuronProbe(net), run=run_of(net), profile=profile, config=CoverageConfig(**cfg))


def test_new_counts_are_in_input_order_and_commit_false_changes_nothing() -> None:
    net = tiny_net()
    x = np.random.default_rng(1).normal(size=(6, 3, 10, 10)).astype(np.float32)
    tr = tracker(net)
    assert tr.criteria == ("nc", "tknc")
    peek = tr.update(x, commit=False)
    assert peek.outputs.shape == (6, 1)
    assert tr.coverage() == {"nc": 0.0, "tknc": 0.0}
    twice = np.concatenate([x[:3], x[:3]])
    step = tr.update(twice)
    assert step.new["nc"][3:].sum() == 0  # the repeats add nothing
    masks = nc_mask(step.acts, tr.probe.offsets, 0.2)
    assert step.new["nc"].sum() == masks.any(0).sum() == tr.covered_counts()["nc"]
    assert step.new["nc"][0] == masks[0].sum()
    assert step.gain["nc"] == pytest.approx(masks.any(0).sum() / 16)
    snap = tr.state
    other = tr.copy()
    other.update(x)
    after = other.coverage()
    assert tr.coverage()["nc"] <= after["nc"]
    tr.update(x)
    assert tr.coverage() == after
    tr.restore(snap)
    assert tr.covered_counts()["nc"] == int(snap.covered["nc"].sum())
    assert tr.fresh().coverage() == {"nc": 0.0, "tknc": 0.0}


def test_profile_roundtrip_and_criteria_with_profile(tmp_path) -> None:
    net = tiny_net()
    rng = np.random.default_rng(2)
    train = rng.normal(size=(20, 3, 10, 10)).astype(np.float32)
    probe = NeuronProbe(net)
    acc = ProfileAccumulator()
    for chunk in (train[:7], train[7:]):
        _, acts = probe.capture(lambda c=chunk: run_of(net)(c), len(chunk))
        acc.add(acts)
    prof = acc.result(probe.names, probe.sizes, {"model": "tiny"})
    _, all_acts = probe.capture(lambda: run_of(net)(train), len(train))
    np.testing.assert_allclose(prof.low, all_acts.min(0))
    np.testing.assert_allclose(prof.high, all_acts.max(0))
    np.testing.assert_allclose(prof.std, all_acts.astype(np.float64).std(0), rtol=1e-4, atol=1e-6)
    path = prof.save(tmp_path / "tiny.profile.npz")
    back = Profile.load(path)
    assert back.layers == prof.layers and back.sizes == prof.sizes and back.count == 20
    assert back.meta["model"] == "tiny"
    np.testing.assert_array_equal(back.high, prof.high)
    tr = tracker(net, back)
    assert tr.criteria == ("nc", "kmnc", "nbc", "snac", "tknc")
    tr.update(train)
    cov = tr.coverage()
    assert cov["nbc"] == 0.0 and cov["snac"] == 0.0  # training data never leaves its own bounds
    assert 0 < cov["kmnc"] < 1
    tr.update(train * 50)  # far outside: boundary units covered
    assert tr.coverage()["nbc"] > 0 and tr.coverage()["snac"] > 0
    lc = tr.layer_coverage("kmnc")
    assert list(lc) == probe.names


def test_profile_errors_are_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.profile.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ProfileError, match="unreadable coverage profile"):
        Profile.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ProfileError, match="not a lidarmt coverage profile"):
        Profile.load(other)
    with pytest.raises(ProfileError, match="no such profile"):
        Profile.load(tmp_path / "missing.npz")
    wrong = Profile(("a",), (3,), np.zeros(3, np.float32), np.ones(3, np.float32), np.zeros(3, np.float32),
                    np.ones(3, np.float32), 1)
    tr = tracker(tiny_net(), wrong)
    with pytest.raises(ProfileError, match="do not match"):
        tr.update(np.zeros((1, 3, 10, 10), np.float32))
    with pytest.raises(CoverageArgumentError, match="need"):
        tracker(tiny_net(), None, criteria=("kmnc",))
    with pytest.raises(CoverageArgumentError, match="unknown coverage criterion"):
        CoverageConfig(criteria=("bogus",))


def test_activated_set_and_jaccard() -> None:
    net = tiny_net()
    tr = tracker(net)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 3, 10, 10)).astype(np.float32)
    sa = activated_set(tr, [a])
    assert sa.sum() > 0 and tr.coverage()["nc"] == 0.0  # the tracker itself is untouched
    assert jaccard_distance(sa, sa) == 0.0
    assert jaccard_distance(np.array([1, 1, 0], bool), np.array([0, 1, 1], bool)) == pytest.approx(2 / 3)
    assert jaccard_distance(np.zeros(3, bool), np.zeros(3, bool)) == 0.0


def test_bounds_are_compared_with_a_tolerance() -> None:
    """fp32 noise at a bound (the same frame in another batch size) is not coverage; a real excursion is."""
    probe = NeuronProbe(nn.Sequential(nn.Linear(1, 1)))
    probe._sizes = [2]
    prof = Profile(("0",), (2,), np.array([0.0, -200.0], np.float32), np.array([1.0, 100.0], np.float32),
                   np.zeros(2, np.float32), np.ones(2, np.float32), 10)
    cfg = CoverageConfig(criteria=("kmnc", "nbc", "snac"), kmnc_k=10)
    tr = CoverageTracker(probe, profile=prof, config=cfg)
    # within 1e-4 x max(1, |bound|) of a bound: on the bound (KMNC's end sections), no NBC/SNAC
    tr.update_activations(np.array([[1.0 + 5e-5, 100.0 + 5e-3], [-5e-5, -200.0 - 1e-2]], np.float32))
    assert tr.covered_counts() == {"kmnc": 4, "nbc": 0, "snac": 0}
    assert tr.covered("kmnc")[[0, 9, 10, 19]].all()
    tr.update_activations(np.array([[1.0 + 3e-4, 100.0 + 0.05]], np.float32))
    assert tr.covered("snac").tolist() == [True, True] and tr.covered("nbc").tolist() == [False] * 2 + [True] * 2
    strict = CoverageTracker(probe, profile=prof, config=CoverageConfig(criteria=("snac",), bound_tolerance=0.0))
    strict.update_activations(np.array([[1.0 + 5e-5, 100.0]], np.float32))
    assert strict.covered("snac").tolist() == [True, False]
    with pytest.raises(CoverageArgumentError, match="bound tolerance"):
        CoverageConfig(bound_tolerance=-1.0)


def test_a_profiles_own_frames_cover_no_boundary(tmp_path) -> None:
    """The frames a profile was built from (64 a batch) measured again one at a time: NBC = SNAC = 0."""
    from types import SimpleNamespace

    from lidarmt.camera.models.archs import get_arch
    from lidarmt.camera.models.train import export_weights
    from lidarmt.camera.models.zoo import model_from_file
    from lidarmt.coverage.camera import build_profile, tracker_for

    torch.manual_seed(3)
    export_weights(get_arch("dave2").build(), tmp_path / "dave2.pt", arch="dave2", meta={})
    model = model_from_file(tmp_path / "dave2.pt")
    rng = np.random.default_rng(4)
    source = [SimpleNamespace(image=rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)) for _ in range(24)]
    prof = build_profile(model, source, range(24), batch=64)
    tr = tracker_for(model, profile=prof)
    for f in source:
        tr.update(f.image[None])
    cov = tr.coverage()
    assert cov["nbc"] == 0.0 and cov["snac"] == 0.0 and cov["kmnc"] > 0.0
