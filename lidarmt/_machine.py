"""What kind of CPU this is, detected once: the instruction sets that decide how fast (and in which precision)
the networks run, for the benchmarks' JSON and for choosing a precision.

Machines differ from one run to the next: some have AVX-512 with bf16 (``avx512_bf16``: native bf16 dot
products, a bf16 matmul 2-3× an fp32 one), some AMX tiles as well, others only AVX2, where PyTorch *emulates*
bf16 (under 1 GFLOP/s: a bf16 product of two 4096² matrices takes minutes). :func:`isa` names the best of
these; :func:`native_bf16` says whether bf16 is worth computing in; :func:`matmul_precisions` which precisions a
benchmark may time (never bf16 where it is emulated).

The flags come from ``/proc/cpuinfo`` (Linux); elsewhere torch's CPU capability string is the fallback.
``ONEDNN_MAX_CPU_ISA`` (read by oneDNN when torch loads) caps the instruction set torch's convolutions and matmuls
use, which is how an older CPU is emulated on this one: :func:`isa` honours it (:func:`cpu_isa` is the hardware's),
and :func:`describe` records it, since the kernels, not the chip, decide the last digits of a network's outputs.
Tests monkeypatch :func:`cpu_flags` (and clear the caches with :func:`clear_cache`).
"""

from __future__ import annotations

import functools
import os

#: the ISA names, best first
ISAS = ("amx", "avx512_bf16", "avx512", "avx2", "baseline")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _torch_capability() -> str:
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability()).upper()
    except Exception:  # pragma: no cover - torch missing or too old
        return ""


#: ``ONEDNN_MAX_CPU_ISA`` values -> the best of :data:`ISAS` oneDNN may then use (``ALL``/``DEFAULT``: no cap)
ONEDNN_CAPS = {
    "SSE41": "baseline", "AVX": "baseline", "AVX2": "avx2", "AVX2_VNNI": "avx2", "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512", "AVX512_CORE_VNNI": "avx512", "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16", "AVX10_1_512": "avx512_bf16", "AVX512_CORE_AMX": "amx",
    "AVX512_CORE_AMX_FP16": "amx", "AVX10_1_512_AMX": "amx", "AVX10_1_512_AMX_FP16": "amx",
}
#: the environment variables that cap the kernels torch picks (oneDNN's, and ATen's own vectorised ones)
ISA_CAP_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def isa_caps() -> dict[str, str]:
    """The ISA caps set in this process's environment (:data:`ISA_CAP_VARS`), e.g. ``{"ONEDNN_MAX_CPU_ISA":
    "AVX2"}``; empty where none is set."""
    return {k: os.environ[k] for k in ISA_CAP_VARS if os.environ.get(k, "").strip()}


def isa() -> str:
    """The best of :data:`ISAS` torch's kernels use here: the CPU's (:func:`cpu_isa`), capped by
    ``ONEDNN_MAX_CPU_ISA`` (or its old name ``DNNL_MAX_CPU_ISA``) when that is set."""
    got = cpu_isa()
    raw = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    cap = ONEDNN_CAPS.get(raw)
    if cap is not None and ISAS.index(cap) > ISAS.index(got):
        return cap
    return got


def cpu_isa() -> str:
    """The best of :data:`ISAS` this CPU has: ``amx`` (AMX bf16 tiles), ``avx512_bf16``, ``avx512`` (F),
    ``avx2``, else ``baseline``."""
    flags = cpu_flags()
    if flags:
        if "amx_bf16" in flags:
            return "amx"
        if "avx512_bf16" in flags:
            return "avx512_bf16"
        if "avx512f" in flags:
            return "avx512"
        if "avx2" in flags:
            return "avx2"
        return "baseline"
    cap = _torch_capability()
    if "AMX" in cap:
        return "amx"
    if "AVX512" in cap:
        return "avx512"
    if "AVX2" in cap:
        return "avx2"
    return "baseline"


def native_bf16() -> str:
    """``"amx"`` or ``"avx512_bf16"`` where the CPU computes bf16 natively, else ``""`` (emulated: keep fp32)."""
    got = isa()
    return got if got in ("amx", "avx512_bf16") else ""


def matmul_precisions() -> tuple[str, ...]:
    """The precisions a CPU benchmark may time: fp32 always, bf16 only where it is native."""
    return ("bf16", "fp32") if native_bf16() else ("fp32",)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def describe() -> dict:
    """The machine as every benchmark JSON and bug bundle records it: CPU model, ISA (the kernels', :func:`isa`),
    whether bf16 is native, the cores this process may use, the load average when the benchmark started (the
    machines are shared) and whether freed memory is kept (``heap``, :mod:`lidarmt._heap`); where an ISA cap is
    set, also the CPU's own ISA (``cpu_isa``) and the caps (``isa_caps``)."""
    from lidarmt._heap import state as heap_state
    from lidarmt._limits import cpu_cores

    doc = {"cpu": cpu_name(), "isa": isa(), "bf16": "native" if native_bf16() else "emulated",
           "cores": cpu_cores(), "loadavg": load_average(), "heap": heap_state()}
    caps = isa_caps()
    if caps:
        doc["cpu_isa"] = cpu_isa()
        doc["isa_caps"] = caps
    return doc


def record() -> dict:
    """The machine as a bug bundle and a campaign journal record it: :func:`describe` without the load average
    and the heap (neither changes a result; replay and the summary name its ISA; :func:`kernels` tells whether
    two records ran the same kernels)."""
    return {k: v for k, v in describe().items() if k not in ("loadavg", "heap")}


def isa_label(machine: dict | None) -> str:
    """One phrase for a recorded machine (:func:`describe`): its ISA, with the cap that emulated it, e.g.
    ``avx2 (ONEDNN_MAX_CPU_ISA=AVX2 on amx)``; ``unknown`` for a record without one (older files)."""
    if not isinstance(machine, dict) or not isinstance(machine.get("isa"), str):
        return "unknown"
    caps = machine.get("isa_caps")
    if isinstance(caps, dict) and caps:
        set_ = ", ".join(f"{k}={v}" for k, v in sorted(caps.items()))
        return f"{machine['isa']} ({set_} on {machine.get('cpu_isa', '?')})"
    return str(machine["isa"])


def kernels(machine: dict | None) -> tuple | None:
    """What decides the last digits of a network's outputs on a recorded machine: its ISA and the caps (None for
    a record without one). Two runs with the same kernels give the same floats."""
    if not isinstance(machine, dict) or not isinstance(machine.get("isa"), str):
        return None
    caps = machine.get("isa_caps") if isinstance(machine.get("isa_caps"), dict) else {}
    return (machine["isa"], machine.get("cpu_isa", machine["isa"]), tuple(sorted(caps.items())))


def clear_cache() -> None:
    """Forget the detected flags (tests); the CNN's precision choice reads them afresh."""
    clear = getattr(cpu_flags, "cache_clear", None)  # a test may have replaced cpu_flags
    if clear is not None:
        clear()


def with_machine(doc: dict) -> dict:
    """A benchmark's JSON document with the machine it ran on (:func:`describe`) under ``machine`` (keys the
    document already has there win; a plain string there is kept as ``arch``)."""
    had = doc.get("machine")
    extra = had if isinstance(had, dict) else ({"arch": had} if had else {})
    return {**doc, "machine": {**describe(), **extra}}
