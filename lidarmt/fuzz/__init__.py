"""Metamorphic fuzzing of LiDAR perception: MR1 campaigns (points added outside the ROI must not make
obstacles inside it vanish), after Zhou & Sun, CACM 62(3) 2019.

* :mod:`lidarmt.fuzz.inject`: the input transform (numba kernel in :mod:`lidarmt.fuzz._kernels`):
  :func:`make_follow_up`, :class:`Region`, reproducible from (seed, frame, n, trial).
* :mod:`lidarmt.fuzz.oracle`: the output checks: :func:`judge` -> :class:`Verdict` (|O| <= |O′| overall and
  per class; O ⊆ O′ by one-to-one matching, naming vanished / merged / reclassified / degraded obstacles).
* :mod:`lidarmt.fuzz.campaign`: :class:`CampaignConfig`, :func:`run_campaign` (in-process or worker
  processes, per-call timeouts, crash findings), :func:`make_bundles`; :mod:`lidarmt.fuzz.journal`: the
  append-only JSONL journal that makes campaigns resumable; :mod:`lidarmt.fuzz.tally`: totals.
* :mod:`lidarmt.fuzz.ddmin`: delta debugging of the added points; :mod:`lidarmt.fuzz.replay`: bundle replay.
* :mod:`lidarmt.fuzz.plugins`: SUT / ROI / recording specs that every worker can rebuild.

Reports and bug bundles are written by :mod:`lidarmt.report.campaign` and :mod:`lidarmt.report.bundle`.
Names are imported lazily (``from lidarmt.fuzz import run_campaign``), so importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Region": "lidarmt.fuzz.inject",
    "make_follow_up": "lidarmt.fuzz.inject",
    "judge": "lidarmt.fuzz.oracle",
    "Verdict": "lidarmt.fuzz.oracle",
    "CampaignConfig": "lidarmt.fuzz.campaign",
    "run_campaign": "lidarmt.fuzz.campaign",
    "make_bundles": "lidarmt.fuzz.campaign",
    "parse_ns": "lidarmt.fuzz.campaign",
    "select_frames": "lidarmt.fuzz.campaign",
    "ddmin": "lidarmt.fuzz.ddmin",
    "replay_bundle": "lidarmt.fuzz.replay",
    "SutSpec": "lidarmt.fuzz.plugins",
    "RoiSpec": "lidarmt.fuzz.plugins",
    "SourceSpec": "lidarmt.fuzz.plugins",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'lidarmt.fuzz' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
