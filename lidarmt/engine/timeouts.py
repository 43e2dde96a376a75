"""The engine's time limit per call of the system under test when the user set none (``--timeout``)."""

from __future__ import annotations

AUTO_TIMEOUT_FIRST = 900.0  # seconds the first call may take when no --timeout was given (JIT, warm-up)
AUTO_TIMEOUT_FACTOR = 30.0  # later calls: this many times the first call...
AUTO_TIMEOUT_MIN = 60.0  # ...but never less than this


def auto_timeout(first_call_s: float | None, work: int = 1) -> float:
    """The time limit per call when the user set none: generous, and scaled by the measured first call (which
    includes warm-up, so later calls are usually much faster than it). ``first_call_s`` is the first call's time
    per unit of work (one frame; one image of a batch) and ``work`` the units the current call does, so a batch of
    64 images gets 64 times the limit of one."""
    if first_call_s is None:
        return AUTO_TIMEOUT_FIRST
    return max(AUTO_TIMEOUT_MIN, AUTO_TIMEOUT_FACTOR * first_call_s * max(1, int(work)))


def describe_timeout(timeout: float | None) -> str:
    if timeout is not None:
        return f"{timeout:g} s (--timeout)"
    return (f"automatic: {AUTO_TIMEOUT_FIRST:g} s for the first call, then {AUTO_TIMEOUT_FACTOR:g}x the first "
            f"call's time per unit of work (frame, image) times the call's units (at least {AUTO_TIMEOUT_MIN:g} s)")
