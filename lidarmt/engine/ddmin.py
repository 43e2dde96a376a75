"""Delta debugging (Zeller & Hildebrandt, "Simplifying and Isolating Failure-Inducing Input", TSE 2002).

:func:`ddmin` shrinks a failure-inducing set of items (here: the injected points of a violating follow-up)
to a subset that still fails and is **1-minimal**: removing any single item makes the failure disappear. The
number of test calls (each one a perception run) is capped; the result says whether 1-minimality was reached
before the budget ran out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class DdminResult:
    items: np.ndarray  # the reduced failing subset (sorted)
    one_minimal: bool  # True when every single removal was tested and none still failed
    calls: int  # tests run (cache hits not counted)
    budget: int
    stopped: str  # "1-minimal" | "budget" | "not-failing" (the full input did not fail) | "empty-fails"

    def to_dict(self) -> dict:
        return {"size": int(len(self.items)), "one_minimal": self.one_minimal, "calls": self.calls,
                "budget": self.budget, "stopped": self.stopped}


class _Budget(Exception):
    pass


def _split(c: np.ndarray, n: int) -> list[np.ndarray]:
    return [part for part in np.array_split(c, n) if len(part)]


def ddmin(items: Sequence[int] | np.ndarray, fails: Callable[[np.ndarray], bool], *, budget: int = 200,
          check_full: bool = True) -> DdminResult:
    """Reduce ``items`` to a 1-minimal subset for which ``fails(subset)`` is still True.

    ``fails`` is called with a sorted int64 array. Results are cached by subset. With ``check_full`` the
    whole input is tested first (one call) so a non-reproducible failure is reported instead of "reduced".
    """
    c = np.sort(np.asarray(items, dtype=np.int64))
    cache: dict[bytes, bool] = {}
    calls = 0

    def test(s: np.ndarray) -> bool:
        nonlocal calls
        key = s.tobytes()
        if key in cache:
            return cache[key]
        if calls >= budget:
            raise _Budget
        calls += 1
        r = bool(fails(s))
        cache[key] = r
        return r

    try:
        if check_full and not test(c):
            return DdminResult(c, False, calls, budget, "not-failing")
        if len(c) == 1 and not test(c[:0]):  # a single item is 1-minimal when the empty set passes
            return DdminResult(c, True, calls, budget, "1-minimal")
        n = 2
        while len(c) >= 2:
            parts = _split(c, n)
            reduced = False
            for part in parts:
                if test(part):
                    c, n, reduced = part, 2, True
                    break
            if not reduced and len(parts) > 2:
                for k in range(len(parts)):
                    comp = np.concatenate([p for i, p in enumerate(parts) if i != k])
                    if test(comp):
                        c, n, reduced = comp, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(c):
                    return DdminResult(c, True, calls, budget, "1-minimal")
                n = min(len(c), 2 * n)
        if test(c[:0]):  # the failure does not need any item: the test is flaky or independent of them
            return DdminResult(c[:0], False, calls, budget, "empty-fails")
        return DdminResult(c, True, calls, budget, "1-minimal")
    except _Budget:
        return DdminResult(c, False, calls, budget, "budget")
