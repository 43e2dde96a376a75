"""Delta debugging: 1-minimal results, the call budget, and non-failing inputs."""

from __future__ import annotations

import numpy as np

from lidarmt.engine.ddmin import ddmin


def test_finds_the_two_culprits_and_is_one_minimal():
    calls = []

    def fails(s):
        calls.append(len(s))
        return {3, 77}.issubset(set(s.tolist()))

    r = ddmin(np.arange(100), fails, budget=500)
    assert r.items.tolist() == [3, 77]
    assert r.one_minimal and r.stopped == "1-minimal"
    assert r.calls == len(calls) <= 500


def test_needs_a_quantity_not_specific_items():
    r = ddmin(np.arange(64), lambda s: len(s) >= 5, budget=1000)
    assert len(r.items) == 5 and r.one_minimal


def test_budget_caps_calls_and_reports_it():
    r = ddmin(np.arange(1000), lambda s: len(s) >= 300, budget=20)
    assert r.calls == 20 and not r.one_minimal and r.stopped == "budget"
    assert len(r.items) >= 300


def test_not_failing_and_flaky():
    r = ddmin(np.arange(10), lambda s: False)
    assert r.stopped == "not-failing" and not r.one_minimal
    r = ddmin(np.arange(10), lambda s: True)
    assert r.stopped == "empty-fails" and len(r.items) == 0
    r = ddmin([4], lambda s: len(s) == 1)
    assert r.items.tolist() == [4] and r.one_minimal
