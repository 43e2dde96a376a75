"""Comparing numbers made on another machine: the tolerance every such test states.

torch's kernels (oneDNN's convolutions and matmuls, ATen's vectorised ops) differ between CPU kinds (AMX, AVX-512,
AVX2), so a network's outputs, and every total folded from them, differ in the last digits from the machine a
fixture or golden number was made on (``benchmarks/isa_drift.py`` measures it; docs/replay-tolerances.md has the
numbers: steering angles move by up to 4.1e-7 rad (2.3e-5 degrees), the LiDAR CNN's outputs by up to 3.8e-6). A
test comparing such numbers uses :func:`json_close`: the structure, every string, integer and boolean must be
equal, and each float within ``rel`` of the stored one or ``abs`` of it (near zero a relative difference is
large: a 4e-7 rad change of a 3e-3 rad angle is 1.4e-4 of it). The defaults, 1e-4 relative and 1e-4 absolute, are
above the measured drift in radians and degrees and far below what any relation reads (a steering threshold is
degrees; a count is an integer, compared exactly).
"""

from __future__ import annotations

import math
from typing import Any

#: relative and absolute tolerance for floats made on another machine (see the module docstring)
REL = 1e-4
ABS = 1e-4


def json_differences(got: Any, want: Any, *, rel: float = REL, abs_: float = ABS, path: str = "") -> list[str]:
    """Each place where ``got`` differs from ``want`` beyond the tolerance (empty: close enough)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{path}: keys {sorted(set(got) ^ set(want))} differ"]
        return [d for k in sorted(want) for d in json_differences(got[k], want[k], rel=rel, abs_=abs_,
                                                                  path=f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items, {len(want)} expected"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True))
                for d in json_differences(g, w, rel=rel, abs_=abs_, path=f"{path}[{i}]")]
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(want, bool) or not isinstance(got, (int, float)) \
                or not isinstance(want, (int, float)):
            return [f"{path}: {got!r}, {want!r} expected"]
        if math.isnan(want) and math.isnan(got):
            return []
        if math.isclose(got, want, rel_tol=rel, abs_tol=abs_):
            return []
        return [f"{path}: {got!r}, {want!r} expected (beyond rel {rel:g} / abs {abs_:g})"]
    if got != want or type(got) is not type(want):
        return [f"{path}: {got!r}, {want!r} expected"]
    return []


def json_close(got: Any, want: Any, *, rel: float = REL, abs_: float = ABS) -> bool:
    """Whether ``got`` equals ``want`` but for floats within the tolerance; an assertion message lists the rest."""
    diffs = json_differences(got, want, rel=rel, abs_=abs_)
    assert not diffs, "\n".join(diffs[:20])
    return True
