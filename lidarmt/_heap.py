"""Keep the memory a lidarmt process frees for its next allocation, instead of handing it back to the kernel.

glibc's ``malloc`` serves a block above its mmap threshold (128 kB at start, adapting up to 32 MB as mapped blocks
are freed) with a fresh ``mmap`` and unmaps it on ``free``; it also trims the heap's free top above a threshold.
A network's activations are such blocks. So a call page-faulted them in again, and the kernel zeroed each page
first: measured with glibc untouched against freed memory kept (``benchmarks/bench_heap.py``, each arm a fresh
process, 2-core AMX Xeon), 31,000 page faults per exact cnnseg call at 640x640 (1.18x faster kept), 213,000 per
Epoch batch of 64 (1.8x), 2 million per Chauffeur batch (1.5x), none for the Dave models, whose blocks glibc's
adaptive threshold already reuses (1.0x). The arithmetic is the same either way; only where the buffers lie
changes, and torch aligns them to 64 bytes whatever the allocator gives it (the outputs are the same bytes,
``tests/test_heap.py`` and the benchmark's ``same_bytes``).

:func:`keep_freed_memory` tells glibc to take every block from its heap (``M_MMAP_MAX`` 0) and to keep up to
:data:`KEEP_BYTES` of freed memory at the heap's top (``M_TRIM_THRESHOLD``): the process holds on to its peak
heap (what it used, not more) while it runs. It is what the ``lidarmt`` command and its campaign worker processes
do on start (:func:`lidarmt.cli.main`, the engine's workers); a program that uses lidarmt as a library calls it
itself, or leaves glibc as it is. ``LIDARMT_HEAP=system`` leaves glibc's defaults everywhere (e.g. on a machine
short of memory). Elsewhere than Linux with glibc (musl, macOS, Windows) it changes nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: the environment variable that turns it off: ``system`` leaves glibc's defaults (``kept`` or unset: keep)
ENV = "LIDARMT_HEAP"
#: freed memory kept at the top of the heap before glibc trims it (beyond it, it goes back to the kernel)
KEEP_BYTES = 1 << 30

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4

_state = "system"


def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018 - present in every glibc; absent means this is not the libc we think
    except (OSError, AttributeError):  # pragma: no cover - a Linux without glibc's soname
        return None
    return libc


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for the next allocation (see the module docstring). Returns whether it is
    in effect now; False where ``LIDARMT_HEAP=system`` or the C library is not glibc. Calling it again does
    nothing more; it cannot be undone in the process."""
    global _state
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted == "system":
        return False
    if wanted not in ("", "kept"):
        import warnings

        warnings.warn(f"{ENV}={wanted!r} is neither 'system' nor 'kept'; freed memory is kept (the default)",
                      stacklevel=2)
    if _state == "kept":
        return True
    libc = _libc()
    if libc is None:
        return False
    # the trim threshold first: from then on a freed block stays, and blocks allocated next come from the heap.
    # There is no way back within the process: setting either parameter ends glibc's adaptive mmap threshold,
    # so glibc's own behaviour is measured in a fresh process with LIDARMT_HEAP=system (benchmarks/bench_heap.py)
    if libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES) != 1 or libc.mallopt(_M_MMAP_MAX, 0) != 1:
        return False  # pragma: no cover - glibc refused a documented parameter
    _state = "kept"
    return True


def state() -> str:
    """``kept`` while :func:`keep_freed_memory` is in effect in this process, else ``system`` (what benchmark
    files record beside the machine, ``machine.heap``)."""
    return _state
