"""Pairing two modules' journals key by key and testing the difference, for any relation.

A *relation* here is a named binary outcome of a journal record (violated or not). The pairs of a group (an n,
a transformation) are the keys that both modules judged ("ok" in both); each (relation, group) gets a
:class:`~lidarmt.bench.stats.PairedTest`. Crashes and timeouts are compared as their own relation over every
key both journals hold (a candidate that crashes where the baseline did not regressed too).

A *regression* is a row whose candidate is worse (more violations: c > b; for recall, more frames with fewer
true positives) with an adjusted p-value below α; an *improvement* is the mirror image. The p-values of one
candidate's rows form one family for the correction (:func:`lidarmt.bench.stats.adjust`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lidarmt.bench.stats import adjust, mcnemar_counts
from lidarmt.engine.stats import rate

FINDINGS = "crash/timeout"


@dataclass(frozen=True, slots=True)
class Relation:
    """A binary outcome of an ok-record: ``name`` (an id), ``label`` (for tables), ``violated(record)``."""

    name: str
    label: str
    violated: Callable[[Mapping[str, Any]], bool]


def paired_rows(
    base: Mapping[tuple[int, ...], Mapping[str, Any]],
    cand: Mapping[tuple[int, ...], Mapping[str, Any]],
    relations: Sequence[Relation],
    groups_of: Callable[[tuple[int, ...]], Iterable[Any]],
    groups: Sequence[Any],
) -> list[dict[str, Any]]:
    """One row per (relation, group) plus the crash/timeout row per group: pairs, both rates with Wilson
    intervals, b, c, difference, odds ratio and the exact McNemar p-value (not yet adjusted).

    ``groups_of(key)`` names the groups a key counts in (its n; its transformation and "all"); ``groups``
    lists the groups in table order."""
    common = sorted(set(base) & set(cand))
    acc: dict[tuple[str, Any], list[int]] = {}  # (relation, group) -> [n, k_a, k_b, b, c]

    def add(rel: str, g: Any, x: bool, y: bool) -> None:
        a = acc.setdefault((rel, g), [0, 0, 0, 0, 0])
        a[0] += 1
        a[1] += x
        a[2] += y
        a[3] += x and not y
        a[4] += y and not x

    for key in common:
        ra, rb = base[key], cand[key]
        gs = list(groups_of(key))
        for g in gs:
            add(FINDINGS, g, ra["status"] != "ok", rb["status"] != "ok")
        if ra["status"] != "ok" or rb["status"] != "ok":
            continue
        for rel in relations:
            x, y = bool(rel.violated(ra)), bool(rel.violated(rb))
            for g in gs:
                add(rel.name, g, x, y)
    rows = []
    labels = {r.name: r.label for r in relations} | {FINDINGS: "crash or timeout"}
    for rel in [*(r.name for r in relations), FINDINGS]:
        for g in groups:
            n, k_a, k_b, b, c = acc.get((rel, g), [0, 0, 0, 0, 0])
            t = mcnemar_counts(n, k_a, k_b, b, c)
            rows.append({"relation": rel, "label": labels[rel], "group": g, "baseline": rate(k_a, n),
                         "candidate": rate(k_b, n), **t.to_dict()})
    return rows


#: Fewer seed frames than this make a bench's verdict rest on too little: it says so.
MIN_SEEDS = 30


def independence(base: Mapping[tuple[int, ...], Mapping[str, Any]],
                 cand: Mapping[tuple[int, ...], Mapping[str, Any]], *,
                 seed_of: Callable[[tuple[int, ...]], int] = lambda k: int(k[0])) -> dict[str, Any]:
    """How many independent seeds a comparison rests on: the pairs both modules judged, the distinct seed
    frames among them (``seed_of(key)``: a key's first entry, the source frame, in every kind), and warnings
    (fewer than :data:`MIN_SEEDS` seeds; more than one pair per seed, whose outcomes are correlated while the
    exact McNemar test counts every pair as independent, so its p-value overstates the evidence)."""
    common = set(base) & set(cand)
    pairs = len(common)
    seeds = len({seed_of(k) for k in common})
    warnings = []
    if seeds < MIN_SEEDS:
        warnings.append(f"only {seeds} seed frame(s) (fewer than {MIN_SEEDS}): the verdict says little about "
                        f"other frames; run the bench on more frames")
    if pairs > seeds > 0:
        warnings.append(f"{pairs:,} pairs come from {seeds} seed frame(s) ({pairs / seeds:.0f} per seed); pairs "
                        f"of one seed are correlated, and the McNemar p-values count them as independent: the "
                        f"test rests on {seeds} independent seed(s)")
    return {"pairs": pairs, "seeds": seeds, "warnings": warnings}


def decide(rows: list[dict[str, Any]], *, alpha: float, correction: str) -> None:
    """Add ``p_adj``, ``regression`` and ``improvement`` to every row (one family), in place. A row is worse
    when ``c > b`` (McNemar rows) or ``worse > better`` (sign-test rows)."""
    adj = adjust([float(r["p"]) for r in rows], correction)
    for r, p in zip(rows, adj, strict=True):
        worse = (r["c"] > r["b"]) if "c" in r else (r["worse"] > r["better"])
        better = (r["c"] < r["b"]) if "c" in r else (r["worse"] < r["better"])
        r["p_adj"] = p
        r["regression"] = bool(worse and p < alpha)
        r["improvement"] = bool(better and p < alpha)


def median_ms(values: Sequence[float]) -> float | None:
    """Median of seconds, in milliseconds (None when empty)."""
    vals = [float(v) for v in values if v is not None]
    return 1000.0 * statistics.median(vals) if vals else None

