"""ISA detection (lidarmt._machine): bf16 only where the CPU computes it natively; fast mode stays fp32 on AVX2."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lidarmt import _machine

AVX2 = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512bw", "avx512_bf16"}
AMX = AVX512_BF16 | {"amx_tile", "amx_bf16"}


@pytest.fixture
def cpu(monkeypatch):
    """Pretend to be a CPU with the given flags; the real detection is restored afterwards."""

    def use(flags: frozenset[str]) -> None:
        _machine.clear_cache()
        monkeypatch.setattr(_machine, "cpu_flags", lambda: flags)
        for var in _machine.ISA_CAP_VARS:  # a CI run that emulates an older CPU (ONEDNN_MAX_CPU_ISA) caps these
            monkeypatch.delenv(var, raising=False)

    yield use
    monkeypatch.undo()
    _machine.clear_cache()


@pytest.mark.parametrize("flags,isa,bf16,precisions", [
    (AVX2, "avx2", "", ("fp32",)),
    (AVX2 | {"avx512f"}, "avx512", "", ("fp32",)),
    (AVX512_BF16, "avx512_bf16", "avx512_bf16", ("bf16", "fp32")),
    (AMX, "amx", "amx", ("bf16", "fp32")),
    (frozenset({"fpu", "sse2"}), "baseline", "", ("fp32",)),
])
def test_isa_and_precisions(cpu, flags, isa, bf16, precisions):
    cpu(flags)
    assert _machine.isa() == isa
    assert _machine.native_bf16() == bf16
    assert _machine.matmul_precisions() == precisions
    d = _machine.describe()
    assert d["isa"] == isa and d["bf16"] == ("native" if bf16 else "emulated") and d["cores"] >= 1


def test_fast_mode_is_fp32_where_bf16_is_emulated(cpu):
    from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network, cpu_bf16_support

    f = np.random.default_rng(0).random((8, 64, 64), dtype=np.float32)
    cpu(AVX2)
    assert cpu_bf16_support() == ""
    fast = CnnRunner(build_network(64, seed=1), mode="fast")
    assert fast.precision == "fp32" and not fast.bf16
    out = fast(f)
    assert all(v.dtype == np.float32 for v in out.values())
    cpu(AVX512_BF16)
    assert cpu_bf16_support() == "avx512_bf16"
    assert CnnRunner(build_network(64, seed=1), mode="fast").precision == "bf16"
    # exact mode is fp32 whatever the CPU
    assert CnnRunner(build_network(64, seed=1), mode="exact").precision == "fp32"


def test_real_flags_are_read():
    _machine.clear_cache()
    flags = _machine.cpu_flags()
    assert _machine.isa() in _machine.ISAS
    if flags:  # Linux: the detection agrees with the flags it read
        assert (_machine.cpu_isa() in ("amx", "avx512_bf16")) == bool({"avx512_bf16", "amx_bf16"} & flags)
    capped = _machine.ONEDNN_CAPS.get(os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper())
    if capped is None:
        assert _machine.isa() == _machine.cpu_isa()
    else:  # an emulated older CPU: torch's kernels are capped, the chip is not
        assert _machine.ISAS.index(_machine.isa()) >= _machine.ISAS.index(capped)


@pytest.mark.parametrize("cap,flags,isa", [
    ("AVX2", AMX, "avx2"), ("SSE41", AMX, "baseline"), ("AVX512_CORE", AMX, "avx512"), ("avx2", AVX2, "avx2"),
    ("AVX512_CORE_AMX", AVX2, "avx2"),  # a cap above the chip changes nothing
    ("ALL", AMX, "amx"), ("nonsense", AMX, "amx"),
])
def test_onednn_cap_is_the_kernels_isa(cpu, monkeypatch, cap, flags, isa):
    cpu(flags)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert _machine.isa() == isa
    d = _machine.describe()
    assert d["isa"] == isa and d["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": cap} and d["cpu_isa"] == _machine.cpu_isa()
    assert _machine.isa_label(d) == f"{isa} (ONEDNN_MAX_CPU_ISA={cap} on {_machine.cpu_isa()})"
    assert _machine.native_bf16() == ("amx" if isa == "amx" else "")  # no bf16 where the kernels cannot


def test_a_machine_without_a_record_is_unknown():
    assert _machine.isa_label(None) == "unknown" and _machine.kernels({"cpu": "x"}) is None
    assert _machine.kernels({"isa": "amx"}) != _machine.kernels({"isa": "avx2"})


def _bench_perception():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_perception.py"
    spec = importlib.util.spec_from_file_location("bench_perception_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_perception_never_times_bf16_where_it_is_emulated(cpu):
    import torch

    bench = _bench_perception()
    timed: list = []

    def fake(dtype, *a, **k):
        timed.append(dtype)
        return 1.0

    cpu(AVX2)
    assert bench.cpu_peaks(fake) == {"fp32": 1.0} and timed == [torch.float32]

    class Runner:
        precision = "bf16"

    class Pipe:
        runner = Runner()

    with pytest.raises(RuntimeError, match="emulates"):
        bench.paired_cnn_rate(Pipe(), np.zeros((8, 4, 4), np.float32), 1, 1)
    timed.clear()
    cpu(AMX)
    assert set(bench.cpu_peaks(fake)) == {"bf16", "fp32"} and timed == [torch.bfloat16, torch.float32]
