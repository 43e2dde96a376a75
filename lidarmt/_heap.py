"""Keep the memory a lidarmt process frees for its next allocation, instead of handing it back to the kernel.

glibc's ``malloc`` serves a block of more than 32 MB (and, until its adaptive threshold has grown, of more than
128 kB) with a fresh ``mmap`` and unmaps it on ``free``. A network's activations are such blocks: Apollo's cnnseg
at 640x640 allocates about 320 MB per call (each layer's output, the skip concatenations), a camera model's
batch of 64 tens of MB. So every call page-faulted all of them in again, and the kernel zeroed each page first:
on the 2-core virtual machines this project is measured on, 82,000 page faults per cnnseg call (about a third
of its time) and 29,000 per dave-orig batch (about 45 %). The arithmetic is the same either way; only where the
output buffers lie changes, and torch aligns them to 64 bytes whatever the allocator gives it (the outputs were
compared byte for byte, ``tests/test_heap.py``).

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

#: the environment variable that turns it off: ``system`` leaves glibc's defaults
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
    if os.environ.get(ENV, "").strip().lower() == "system":
        return False
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
    """``kept`` while :func:`keep_freed_memory` is in effect in this process, else ``system`` (what benchmarks
    and journals record beside the machine)."""
    return _state
