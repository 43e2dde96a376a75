"""UNIT and MUNIT: network shapes, the training loop's outputs, bit-exact resume, refusals, the translator file
(read as data, never code) and :class:`LearnedTranslator`."""

from __future__ import annotations

import json
import math
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _translators import TINY_NET, image_folder, interrupt_training_at, tiny_config  # noqa: E402

from lidarmt.camera.errors import CameraArgumentError, CameraOutputError, ImageSourceError, ModelError  # noqa: E402
from lidarmt.camera.translate import nets  # noqa: E402
from lidarmt.camera.translate.model import LearnedTranslator, read_translator, write_translator  # noqa: E402
from lidarmt.camera.translate.train import (  # noqa: E402
    TUNABLE,
    Trainer,
    TrainingInterrupted,
    apply_settings,
    check_out,
    read_domain,
    read_run_config,
    train_translator,
)
from lidarmt.errors import UserError  # noqa: E402


def _one_line(err: BaseException) -> str:
    msg = str(err)
    assert isinstance(err, UserError) and "\n" not in msg and msg
    return msg


def _config(tmp: Path, arch: str, **over):
    """tiny_config with any setting changed."""
    return replace(tiny_config(tmp, arch), **over)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    blob = torch.load(out / "checkpoint.pt", weights_only=True)
    st = blob["state"]
    return {f"{part}.{k}": v for part in ("gen", "dis") for k, v in st[part].items()}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory) -> dict[str, Path]:
    """A 2-iteration run of each architecture (trained once for the module)."""
    runs = {}
    for arch in ("munit", "unit"):
        cfg = tiny_config(tmp_path_factory.mktemp(arch), arch)
        train_translator(cfg)
        runs[arch] = Path(cfg.out)
    return runs


# ---------------------------------------------------------------------------------------------- networks


@pytest.mark.parametrize("n_down", [1, 2, 3])
def test_network_shapes_for_odd_sizes(n_down):
    m = 2 ** n_down
    h, w = 24, 40  # 3 and 5 times the largest stride: not square, not powers of two
    cfg = nets.NetConfig(arch="munit", n_downsample=n_down, **TINY_NET)
    x = torch.rand(2, 3, h, w) * 2 - 1
    gens = nets.build_generators(cfg)
    with torch.no_grad():
        c, s = gens["a"].encode(x)
        assert c.shape == (2, cfg.dim * m, h // m, w // m)
        assert s.shape == (2, cfg.style_dim, 1, 1)
        y = gens["b"].decode(c, torch.randn(2, cfg.style_dim, 1, 1))
        assert y.shape == x.shape and float(y.abs().max()) <= 1.0
        pair = nets.build_generators(replace(cfg, arch="unit"))["pair"]
        z = pair.encode(x, "a")
        assert z.shape == (2, cfg.dim * m, h // m, w // m)
        assert pair.decode(z, "b").shape == x.shape
        dis = nets.build_discriminators(replace(cfg, dis_scales=3))["a"]
        outs = dis(x)
        assert len(outs) == 3 and all(o.shape[:2] == (2, 1) for o in outs)
        # stride-2 4x4 convs with padding 1 halve a side, rounding down; the pooling between scales rounds up
        assert outs[0].shape[2:] == (h // 2 ** cfg.dis_layers, w // 2 ** cfg.dis_layers)


def test_net_config_refuses_bad_settings():
    with pytest.raises(ValueError, match="arch 'gan'"):
        nets.NetConfig(arch="gan")
    with pytest.raises(ValueError, match="dim=0"):
        nets.NetConfig(dim=0)
    with pytest.raises(ValueError, match="n_res >= 2"):
        nets.NetConfig(arch="unit", n_res=1)
    with pytest.raises(ValueError, match="unknown network settings width"):
        nets.NetConfig.from_dict({"width": 3})


def test_adain_decoder_needs_a_style():
    dec = nets.AdaINDecoder(nets.NetConfig(**TINY_NET), 16)
    with pytest.raises(RuntimeError, match="AdaIN parameters not set"):
        dec.res(torch.zeros(1, 16, 4, 4))


# ---------------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("arch,rows", [("munit", 5), ("unit", 4)])
def test_two_iterations_write_every_output(tiny_runs, arch, rows):
    out = tiny_runs[arch]
    assert {p.name for p in out.iterdir()} == {"checkpoint.pt", "translator.pt", "config.json", "log.jsonl",
                                               "samples"}
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["iter_0000001.png", "iter_0000002.png"]
    sheet = cv2.imread(str(out / "samples" / "iter_0000002.png"))
    # rows: held-out A, its translation(s) (MUNIT: two styles), held-out B, B→A; 2 held-out images of 16 px
    assert sheet.shape == (rows * 16, 2 * 16, 3)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log] == [1, 2]
    assert all(np.isfinite(r["g"]) and np.isfinite(r["d"]) for r in log)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["net"]["arch"] == arch and cfg["iterations"] == 2
    assert read_run_config(out).net.arch == arch
    state, meta = read_translator(out / "translator.pt")
    assert meta["iterations"] == 2 and meta["net"]["arch"] == arch and meta["load_size"] == 16
    assert all(v.dtype == torch.float32 for v in state.values())  # stored fp16, returned fp32


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["munit", "unit"])
def test_resume_is_bit_exact(tmp_path, arch):
    straight = _config(tmp_path / "s", arch, iterations=4, checkpoint_every=2)
    train_translator(straight)
    half = _config(tmp_path / "h", arch, iterations=2, checkpoint_every=2)
    train_translator(half)
    out = Path(half.out)
    with open(out / "log.jsonl", "a") as fh:  # a record written after the checkpoint, before a crash
        fh.write(json.dumps({"iteration": 3, "seconds": 9.0, "g": 1.0}) + "\n")
    summary = train_translator(replace(half, iterations=4), resume=True)
    assert summary["started_at"] == 2 and summary["iterations"] == 4
    a, b = _weights(Path(straight.out)), _weights(out)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = [json.loads(line)["iteration"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert log == [1, 2, 3, 4]  # the stale record of iteration 3 was dropped, not duplicated
    sa, _ = read_translator(Path(straight.out) / "translator.pt")
    sb, _ = read_translator(out / "translator.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_resume_keeps_the_runs_settings(tmp_path):
    cfg = _config(tmp_path, "munit", iterations=2)
    train_translator(cfg)
    other = replace(cfg, net=replace(cfg.net, dim=8), iterations=3)
    summary = train_translator(other, resume=True)
    assert summary["iterations"] == 3
    assert read_run_config(cfg.out).net.dim == cfg.net.dim


def test_existing_runs_are_refused_and_force_removes_only_the_runs_files(tmp_path):
    cfg = tiny_config(tmp_path, "unit")
    train_translator(cfg)
    out = Path(cfg.out)
    (out / "notes.txt").write_text("mine")
    (out / "samples" / "mine.png").write_bytes(b"x")
    with pytest.raises(CameraOutputError, match="holds a translator run.*--resume.*--force") as exc:
        train_translator(cfg)
    _one_line(exc.value)
    check_out(out, force=True, resume=False)
    assert sorted(p.name for p in out.rglob("*")) == ["mine.png", "notes.txt", "samples"]
    (tmp_path / "file").write_text("")
    with pytest.raises(CameraOutputError, match="not a folder"):
        check_out(tmp_path / "file", force=False, resume=False)


def test_a_corrupt_checkpoint_is_one_line(tmp_path):
    cfg = tiny_config(tmp_path, "munit")
    train_translator(cfg)
    ckpt = Path(cfg.out) / "checkpoint.pt"
    good = ckpt.read_bytes()
    for bad in (np.random.default_rng(0).bytes(3000), good[: len(good) // 2], b""):
        ckpt.write_bytes(bad)
        with pytest.raises(CameraOutputError, match="not a translator checkpoint.*--force") as exc:
            train_translator(replace(cfg, iterations=3), resume=True)
        _one_line(exc.value)
    torch.save({"format": "lidarmt-translator-checkpoint", "version": 1, "iteration": 2}, ckpt)
    with pytest.raises(CameraOutputError, match="corrupt translator checkpoint") as exc:
        train_translator(replace(cfg, iterations=3), resume=True)
    _one_line(exc.value)


def test_a_checkpoint_of_other_shapes_is_one_line(tmp_path):
    cfg = tiny_config(tmp_path, "munit")
    train_translator(cfg)
    ckpt = Path(cfg.out) / "checkpoint.pt"
    blob = torch.load(ckpt, weights_only=True)
    blob["state"]["gen"] = {k: v[..., :1] if v.ndim > 1 else v for k, v in blob["state"]["gen"].items()}
    torch.save(blob, ckpt)
    with pytest.raises(CameraOutputError, match="corrupt translator checkpoint") as exc:
        train_translator(replace(cfg, iterations=3), resume=True)
    _one_line(exc.value)


def test_a_crafted_checkpoint_is_one_line_before_anything_is_loaded(tmp_path):
    """Issue 29 item 12 for ``camera train-translator --resume``: the checkpoint's contents are checked like
    ``camera train``'s (:func:`lidarmt._torchfile.check_tensors` and the rest) before training goes on from them.
    The old code trained on with an optimiser moment of another shape (RuntimeError traceback at the first step),
    a scheduler of strings (TypeError), deeply nested JSON (RecursionError), an expanded tensor claiming 2**40
    elements, and took a NaN ``seconds`` as the run's time."""
    cfg = tiny_config(tmp_path, "munit")
    train_translator(cfg)
    ckpt = Path(cfg.out) / "checkpoint.pt"
    good = torch.load(ckpt, weights_only=True)
    first = next(iter(good["state"]["gen"]))

    def moment(b, value):
        b["state"]["opt_g"]["state"][0]["exp_avg"] = value

    deep = "[" * 100_000 + "]" * 100_000
    cases = {
        "expanded gen tensor": lambda b: b["state"]["gen"].__setitem__(first, torch.zeros(1).expand(1 << 40)),
        "moment of another shape": lambda b: moment(b, torch.zeros(3, 1, 2)),
        "NaN moment": lambda b: moment(b, torch.full_like(b["state"]["opt_g"]["state"][0]["exp_avg"], math.nan)),
        "moment of 2**40 elements": lambda b: moment(b, torch.zeros(1).expand(1 << 40)),
        "scheduler of strings": lambda b: b["state"]["sched_g"].__setitem__("step_size", "x"),
        "numpy_rng nested deep": lambda b: b.__setitem__("numpy_rng", deep),
        "config nested deep": lambda b: b.__setitem__("config", deep),
        "torch_rng of another size": lambda b: b.__setitem__("torch_rng", torch.zeros(7, dtype=torch.uint8)),
        "NaN seconds": lambda b: b.__setitem__("seconds", math.nan),
        "optimiser state of a list": lambda b: b["state"].__setitem__("opt_d", []),
    }
    for name, spoil in cases.items():
        blob = torch.load(ckpt, weights_only=True) if name == "expanded gen tensor" else _copy(good)
        spoil(blob)
        torch.save(blob, tmp_path / "spoilt.pt")
        (tmp_path / "spoilt.pt").replace(ckpt)
        with pytest.raises(CameraOutputError, match="corrupt translator checkpoint") as exc:
            train_translator(replace(cfg, iterations=3), resume=True)
        assert _one_line(exc.value), name
    torch.save(good, ckpt)  # the checks pass a checkpoint lidarmt wrote, and a log line of odd seconds is skipped
    with open(Path(cfg.out) / "log.jsonl", "a") as fh:
        fh.write(json.dumps({"iteration": 1, "seconds": "x"}) + "\n" + "[" * 100_000 + "\n")
    assert train_translator(replace(cfg, iterations=3), resume=True)["iterations"] == 3


def _copy(blob):
    import copy

    return copy.deepcopy(blob)


@pytest.mark.slow
def test_ctrl_c_leaves_the_last_checkpoint_valid(tmp_path, monkeypatch):
    cfg = _config(tmp_path / "i", "munit", iterations=4, checkpoint_every=2)
    interrupt_training_at(monkeypatch, 3)
    with pytest.raises(TrainingInterrupted) as exc:
        train_translator(cfg)
    assert isinstance(exc.value, KeyboardInterrupt)
    assert exc.value.iteration == 3 and exc.value.checkpoint_iteration == 2
    monkeypatch.undo()  # the real step again
    train_translator(cfg, resume=True)
    straight = _config(tmp_path / "s", "munit", iterations=4, checkpoint_every=2)
    train_translator(straight)
    a, b = _weights(Path(straight.out)), _weights(Path(cfg.out))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_non_finite_loss_stops_with_the_checkpoint_to_resume_from(tmp_path, monkeypatch):
    cfg = _config(tmp_path, "unit", iterations=3)
    step = Trainer.step
    calls = {"n": 0}

    def diverging(self, xa, xb):
        calls["n"] += 1
        out = step(self, xa, xb)
        return {**out, "g": float("nan")} if calls["n"] == 2 else out

    monkeypatch.setattr(Trainer, "step", diverging)
    with pytest.raises(CameraOutputError, match=r"iteration 2: a loss is not finite.*iteration 1\)") as exc:
        train_translator(cfg)
    _one_line(exc.value)


def test_bf16_runs_on_the_cpu_and_fp16_needs_cuda(tmp_path):
    cfg = _config(tmp_path, "munit", precision="bf16", iterations=1)
    summary = train_translator(cfg)
    assert summary["iterations"] == 1 and all(np.isfinite(v) for v in summary["losses"].values())
    trainer = Trainer(cfg)
    assert not trainer.scaler_g.is_enabled() and "scaler_g" not in trainer.state()
    with pytest.raises(CameraArgumentError, match="fp16 needs a CUDA device") as exc:
        replace(cfg, precision="fp16").check()
    _one_line(exc.value)


def test_settings(tmp_path):
    cfg = tiny_config(tmp_path, "munit")
    new = apply_settings(cfg, {"lr": 2e-4, "step_size": 10.0, "recon_x_cyc_w": 1})
    assert new.lr == 2e-4 and new.step_size == 10 and isinstance(new.step_size, int) and new.recon_x_cyc_w == 1.0
    assert new.cyc_w == 1.0 and cfg.cyc_w == 0.0 and replace(cfg, net=replace(cfg.net, arch="unit")).cyc_w == 10.0
    with pytest.raises(CameraArgumentError, match="--set learning_rate=...: unknown setting; known: beta1") as exc:
        apply_settings(cfg, {"learning_rate": 1})
    _one_line(exc.value)
    with pytest.raises(CameraArgumentError, match="step_size=0.5: expected an integer"):
        apply_settings(cfg, {"step_size": 0.5})
    with pytest.raises(CameraArgumentError, match="lr='fast': expected a number"):
        apply_settings(cfg, {"lr": "fast"})
    assert "vgg_w" not in TUNABLE  # no VGG weights here: the perceptual loss is not offered
    for bad, match in (({"lr": -1.0}, "lr=-1.0"), ({"beta1": 1.0}, r"beta1=1.0: expected a number in \[0, 1\)"),
                       ({"holdout": 0}, "holdout=0")):
        with pytest.raises(CameraArgumentError, match=match):
            replace(cfg, **bad).check()
    with pytest.raises(CameraArgumentError, match="--size 18: expected a multiple of 4"):
        replace(cfg, size=18).check()
    with pytest.raises(CameraArgumentError, match="--size 8: expected a multiple of 2 of at least 16"):
        replace(cfg, size=8, load_size=8, net=replace(cfg.net, n_downsample=1)).check()  # MUNIT's style encoder
    with pytest.raises(CameraArgumentError, match="--load-size 8 is smaller than --size 16"):
        replace(cfg, load_size=8).check()


# -------------------------------------------------------------------------------------------------- data


def test_read_domain(tmp_path):
    folder = image_folder(tmp_path / "d", n=3, size=(30, 40))
    cv2.imwrite(str(folder / "wide.png"), np.zeros((20, 60, 3), np.uint8))  # another aspect ratio
    (folder / "notes.txt").write_text("not an image, not read")
    arr = read_domain(folder, short_side=16, max_images=100)
    assert arr.shape == (4, 16, 21, 3) and arr.dtype == np.uint8
    assert read_domain(folder, short_side=16, max_images=2).shape[0] == 2
    (folder / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ImageSourceError, match=r"broken.png: not a readable image.*remove it") as exc:
        read_domain(folder, short_side=16, max_images=100)
    _one_line(exc.value)
    one = image_folder(tmp_path / "one", n=1)
    for path, match in ((one, "found 1 image"), (tmp_path / "nope", "no such folder"),
                        (one / "000.png", "not a folder")):
        with pytest.raises(ImageSourceError, match=match) as exc:
            read_domain(path, short_side=16, max_images=100)
        _one_line(exc.value)


def test_too_few_images_for_the_holdout(tmp_path):
    cfg = tiny_config(tmp_path, "unit")
    with pytest.raises(ImageSourceError, match="--domain-a: 6 images; need more than the 6 held out") as exc:
        train_translator(replace(cfg, holdout=6))
    _one_line(exc.value)


# -------------------------------------------------------------------------------------- translator files


def test_translator_file_is_read_as_data_never_code(tmp_path):
    marker = tmp_path / "marker"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as fh:
        pickle.dump({"format": "lidarmt-translator", "version": 1, "meta": "{}", "state_dict": Payload()}, fh, protocol=2)
    with pytest.raises(ModelError, match="not a lidarmt translator file") as exc:
        read_translator(evil)
    _one_line(exc.value)
    assert not marker.exists()
    with open(evil, "rb") as fh:  # the payload is live: unpickling without the guard would create the marker
        pickle.load(fh)
    assert marker.exists()
    marker.unlink()
    torch.save({"format": "lidarmt-translator", "version": 1, "meta": "{}", "state_dict": Payload()}, evil)
    with pytest.raises(ModelError):
        read_translator(evil)
    assert not marker.exists()


def test_corrupt_translator_files_are_one_line(tiny_runs, tmp_path):
    good = (tiny_runs["munit"] / "translator.pt").read_bytes()
    path = tmp_path / "t.pt"
    cases = [(np.random.default_rng(1).bytes(2000), "not a lidarmt translator file"),
             (good[: len(good) // 3], "not a lidarmt translator file"), (b"", "not a lidarmt translator file")]
    for data, match in cases:
        path.write_bytes(data)
        with pytest.raises(ModelError, match=match) as exc:
            LearnedTranslator("t", path)
        _one_line(exc.value)
    state, meta = read_translator(tiny_runs["munit"] / "translator.pt")
    for st, mt, match in (
        (state, {**meta, "net": {**meta["net"], "dim": 8}}, "weights do not fit its own munit settings"),
        (state, {**meta, "net": {**meta["net"], "arch": "gan"}}, "network settings"),
        (state, {k: v for k, v in meta.items() if k != "net"}, "no network settings"),
        (state, {**meta, "load_size": "big"}, "load_size 'big'"),
    ):
        write_translator(path, st, mt)
        with pytest.raises(ModelError, match=match) as exc:
            LearnedTranslator("t", path)
        _one_line(exc.value)
    torch.save({"format": "lidarmt-translator", "version": 2, "meta": "{}", "state_dict": {}}, path)
    with pytest.raises(ModelError, match="version 2 is not supported"):
        read_translator(path)
    with pytest.raises(ModelError, match="no such translator file"):
        read_translator(tmp_path / "missing.pt")


def test_learned_translator(tiny_runs):
    mu = LearnedTranslator("m", tiny_runs["munit"] / "translator.pt", batch_size=2)
    un = LearnedTranslator("u", tiny_runs["unit"] / "translator.pt")
    assert (mu.arch, mu.style_dim, un.arch, un.style_dim) == ("munit", 3, "unit", 0)
    frames = np.random.default_rng(0).integers(0, 256, (3, 23, 37, 3), dtype=np.uint8)  # odd sizes
    a = mu.translate(frames, seed=1)
    assert a.shape == frames.shape and a.dtype == np.uint8
    assert np.array_equal(a, mu.translate(frames, seed=1))
    assert not np.array_equal(a, mu.translate(frames, seed=2))
    # a per-frame style of the prior equals what translate draws; the cached content path equals translate
    styles = mu.random_styles(3, 1)
    assert np.array_equal(a, mu.translate(frames, style=styles))
    assert np.array_equal(a, mu.decode(mu.encode(frames), styles, (23, 37)))
    one = mu.translate(frames, style=np.zeros(3))
    assert np.array_equal(one[1], mu.translate(frames[1], style=np.zeros(3))[0])  # batching changes nothing
    assert mu.style_of(frames).shape == (3, 3)
    for bad, match in ((np.zeros(4), r"style must have shape \(3,\)"), (np.full(3, np.nan), "non-finite")):
        with pytest.raises(ModelError, match=match):
            mu.translate(frames, style=bad)
    with pytest.raises(ModelError, match="needs a style vector"):
        mu.decode(mu.encode(frames), None, (23, 37))
    u = un.translate(frames)
    assert u.shape == frames.shape and np.array_equal(u, un.translate(frames, style=np.ones(5), seed=9))
    with pytest.raises(ModelError, match="no style space"):
        un.style_of(frames)
    with pytest.raises(ModelError, match=r"expected \(N, H, W, 3\) uint8"):
        un.translate(frames.astype(np.float32))
    assert un.translate(frames[:0]).shape == (0, 23, 37, 3)
    assert mu.work_size(240, 320) == (16, 20) and mu.describe()["parameters"] == mu.parameters > 0


def test_loss_scaling_plumbing(tmp_path):
    """fp16 runs on CUDA only; the GradScaler path is the same code on the CPU: the losses are scaled before
    backward, a step whose gradients overflow is skipped and the scale backs off, and the scalers' states go
    into the checkpoint and come back."""
    cfg = tiny_config(tmp_path, "unit")
    trainer = Trainer(cfg)
    huge = 2.0**127  # loss x scale overflows fp32: every gradient is inf, so the scaler must skip the step
    trainer.scaler_g = torch.amp.GradScaler("cpu", init_scale=huge)
    trainer.scaler_d = torch.amp.GradScaler("cpu", init_scale=huge)
    before = [p.detach().clone() for p in trainer.gen.parameters()]
    x = torch.rand(1, 3, 16, 16) * 2 - 1
    trainer.step(x, x.flip(3))
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.gen.parameters(), strict=True))
    assert trainer.scaler_g.get_scale() == huge / 2 and trainer.scaler_d.get_scale() == huge / 2
    trainer.step(x, x.flip(3))  # 2^126: still overflowing
    trainer.scaler_g.update(2.0**10)
    trainer.scaler_d.update(2.0**10)
    trainer.step(x, x.flip(3))
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.gen.parameters(), strict=True))
    state = trainer.state()
    assert state["scaler_g"]["scale"] == 2.0**10 and "scaler_d" in state
    other = Trainer(cfg)
    other.scaler_g = torch.amp.GradScaler("cpu", init_scale=1.0)
    other.scaler_d = torch.amp.GradScaler("cpu", init_scale=1.0)
    other.load_state(state)
    assert other.scaler_g.get_scale() == 2.0**10
