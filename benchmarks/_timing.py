"""Timing shared by the benchmark scripts: wall and process-CPU times of repeated calls, measured together."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping


def timed(fn: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """(wall times, process CPU times over all threads) of ``repeat`` calls of ``fn``."""
    wall, cpu = [], []
    for _ in range(repeat):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def interleaved(fns: Mapping[str, Callable[[], object]], repeat: int
                ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU times of each function, run in rounds (A, B, C, A, B, C, ...) so load drift hits all alike."""
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            w, c = timed(fn, 1)
            wall[k] += w
            cpu[k] += c
    return wall, cpu


def add_heap_option(ap) -> None:
    """``--heap kept|system``: how the process keeps freed memory (:mod:`lidarmt._heap`). ``kept`` (the default)
    is what the ``lidarmt`` command and its workers do; ``system`` leaves glibc's defaults (the numbers before
    the ``lidarmt._heap`` change). A benchmark's child processes are given the same option."""
    ap.add_argument("--heap", choices=("kept", "system"), default="kept",
                    help="kept: freed memory is kept for the next allocation, as the lidarmt command does; "
                         "system: glibc's defaults (see lidarmt._heap)")


def apply_heap(args) -> str:
    """Apply ``--heap`` in this process, and set ``LIDARMT_HEAP`` for child processes that take no ``--heap``
    (a benchmark's own children are given the option); returns the state."""
    import os

    from lidarmt import _heap

    if args.heap == "system":  # glibc's own behaviour: nothing is set (a mallopt call would end its adaptivity)
        os.environ[_heap.ENV] = "system"
    else:
        os.environ.pop(_heap.ENV, None)
        _heap.keep_freed_memory()
    return _heap.state()
