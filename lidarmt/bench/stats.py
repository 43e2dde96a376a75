"""Paired comparisons of two modules judged on the same pairs: exact McNemar, sign test, Holm's correction.

Both modules see exactly the same inputs (same frames, same injected points), so each pair gives two binary
outcomes (violated or not) and the comparison is *paired*. Of the four kinds of pairs only the *discordant*
ones say anything about the difference:

* ``b``: the baseline violates and the candidate does not;
* ``c``: the candidate violates and the baseline does not.

Under the null hypothesis (both modules violate equally often) each discordant pair falls on either side with
probability 1/2, so ``c ~ Binomial(b + c, 1/2)``: the **exact McNemar test** is a binomial test on the
discordant pairs (:func:`scipy.stats.binomtest`), two-sided here. Its effect sizes:

* the **difference in proportions** ``(c − b) / N`` over the N pairs judged by both (the candidate's violation
  rate minus the baseline's);
* the **conditional odds ratio** ``c / b`` (infinite when b = 0 < c, undefined when b = c = 0), with the exact
  (Clopper-Pearson) interval of ``c / (b + c)`` mapped through p ↦ p / (1 − p).

The **sign test** (:func:`sign_test`) is the same test for paired counts (per frame: true positives of the
baseline and of the candidate): frames where the candidate does worse against frames where it does better,
ties dropped.

A bench makes many such tests (relations × classes × n, recall per class); :func:`holm` adjusts their p-values
for multiple testing (Holm-Bonferroni: controls the chance of *any* false alarm at α), so that a CI gate does
not fire on noise. Worked example (the tests check it): b = 1, c = 9 gives
p = 2 · (C(10, 9) + C(10, 10)) / 2¹⁰ = 22 / 1024 = 0.0215, a difference of 8/N and an odds ratio of 9.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PairedTest:
    """The outcome of a paired comparison of a baseline (A) and a candidate (B) over ``n`` pairs.

    ``k_a``/``k_b``: pairs that violate for A / for B; ``b``: A only; ``c``: B only; ``p``: exact two-sided
    p-value (1.0 when there are no discordant pairs).
    """

    n: int
    k_a: int
    k_b: int
    b: int
    c: int
    p: float
    odds_ratio: float | None
    or_ci: tuple[float, float] | None

    @property
    def diff(self) -> float | None:
        """Candidate's rate minus the baseline's, (c − b) / n (None without pairs)."""
        return (self.c - self.b) / self.n if self.n else None

    @property
    def worse(self) -> bool:
        """The candidate violates more often than the baseline (c > b)."""
        return self.c > self.b

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.n, "k_baseline": self.k_a, "k_candidate": self.k_b, "b": self.b, "c": self.c,
                "diff": self.diff, "odds_ratio": _finite_or_str(self.odds_ratio),
                "odds_ratio_ci": None if self.or_ci is None else [_finite_or_str(v) for v in self.or_ci],
                "p": self.p}


def _finite_or_str(v: float | None) -> float | str | None:
    """JSON has no infinity: ``inf`` becomes the string "inf"."""
    if v is None:
        return None
    return v if math.isfinite(v) else "inf"


def _odds(p: float) -> float:
    return math.inf if p >= 1.0 else p / (1.0 - p)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> PairedTest:
    """Exact McNemar test of two paired binary outcomes (``a[i]``: the baseline violates on pair i, ``b[i]``:
    the candidate does); see the module docstring."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return mcnemar_counts(len(a), sum(map(bool, a)), sum(map(bool, b)), only_a, only_b)


def mcnemar_counts(n: int, k_a: int, k_b: int, b: int, c: int) -> PairedTest:
    """:func:`mcnemar_exact` from the counts: ``n`` pairs, ``k_a``/``k_b`` violations of each module, ``b``
    pairs violated by the baseline only and ``c`` by the candidate only."""
    if min(n, k_a, k_b, b, c) < 0 or b > k_a or c > k_b or k_a > n or k_b > n or k_a - b != k_b - c:
        raise ValueError(f"inconsistent paired counts n={n}, k_a={k_a}, k_b={k_b}, b={b}, c={c}")
    if b + c == 0:
        return PairedTest(n, k_a, k_b, b, c, 1.0, None, None)
    from scipy.stats import binomtest

    res = binomtest(c, b + c, 0.5, alternative="two-sided")
    ci = res.proportion_ci(confidence_level=0.95, method="exact")
    odds = math.inf if b == 0 else c / b
    return PairedTest(n, k_a, k_b, b, c, float(min(1.0, res.pvalue)), odds, (_odds(ci.low), _odds(ci.high)))


@dataclass(frozen=True, slots=True)
class SignTest:
    """Paired counts compared unit by unit: ``worse`` units where the candidate's count is lower than the
    baseline's (for a "higher is better" count such as true positives), ``better`` where it is higher."""

    units: int
    worse: int
    better: int
    p: float

    def to_dict(self) -> dict[str, Any]:
        return {"units": self.units, "worse": self.worse, "better": self.better, "p": self.p}


def sign_test(baseline: Sequence[float], candidate: Sequence[float]) -> SignTest:
    """Exact two-sided sign test of paired values where higher is better (ties dropped); p = 1 without
    differences."""
    if len(baseline) != len(candidate):
        raise ValueError(f"paired values differ in length: {len(baseline)} and {len(candidate)}")
    worse = sum(1 for x, y in zip(baseline, candidate, strict=True) if y < x)
    better = sum(1 for x, y in zip(baseline, candidate, strict=True) if y > x)
    if worse + better == 0:
        return SignTest(len(baseline), 0, 0, 1.0)
    from scipy.stats import binomtest

    p = float(min(1.0, binomtest(worse, worse + better, 0.5).pvalue))
    return SignTest(len(baseline), worse, better, p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given): reject where adjusted p < α controls the
    family-wise error rate at α."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


CORRECTIONS = ("holm", "none")


def adjust(pvalues: Sequence[float], correction: str) -> list[float]:
    """``pvalues`` adjusted by ``correction`` ("holm" or "none")."""
    if correction == "holm":
        return holm(pvalues)
    if correction == "none":
        return [float(p) for p in pvalues]
    raise ValueError(f"unknown correction {correction!r}")
