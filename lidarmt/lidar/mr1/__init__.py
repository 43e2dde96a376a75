"""Metamorphic fuzzing of LiDAR perception: MR1 campaigns (points added outside the ROI must not make
obstacles inside it vanish), after Zhou & Sun, CACM 62(3) 2019.

* :mod:`lidarmt.lidar.mr1.inject`: the input transform (numba kernel in :mod:`lidarmt.lidar.mr1._kernels`):
  :func:`make_follow_up`, :class:`Region`, reproducible from (seed, frame, n, trial).
* :mod:`lidarmt.lidar.mr1.oracle`: the output checks: :func:`judge` -> :class:`Verdict` (|O| <= |O′| overall and
  per class; O ⊆ O′ by one-to-one matching, naming vanished / merged / reclassified / degraded obstacles).
* :mod:`lidarmt.lidar.mr1.campaign`: :class:`CampaignConfig`, :func:`run_campaign` (in-process or worker
  processes, per-call timeouts, crash findings), :func:`make_bundles`; :mod:`lidarmt.engine.journal`: the
  append-only JSONL journal that makes campaigns resumable; :mod:`lidarmt.engine.tally`: totals.
* :mod:`lidarmt.engine.ddmin`: delta debugging of the added points; :mod:`lidarmt.lidar.mr1.replay`: bundle replay.
* :mod:`lidarmt.lidar.specs`: SUT / ROI / recording specs that every worker can rebuild.

Reports and bug bundles are written by :mod:`lidarmt.lidar.mr1.report` and :mod:`lidarmt.lidar.mr1.bundle`.
Names are imported lazily (``from lidarmt.lidar.mr1 import run_campaign``), so importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Region": "lidarmt.lidar.mr1.inject",
    "make_follow_up": "lidarmt.lidar.mr1.inject",
    "judge": "lidarmt.lidar.mr1.oracle",
    "Verdict": "lidarmt.lidar.mr1.oracle",
    "CampaignConfig": "lidarmt.lidar.mr1.campaign",
    "run_campaign": "lidarmt.lidar.mr1.campaign",
    "make_bundles": "lidarmt.lidar.mr1.campaign",
    "parse_ns": "lidarmt.lidar.mr1.campaign",
    "select_frames": "lidarmt.lidar.mr1.campaign",
    "ddmin": "lidarmt.engine.ddmin",
    "replay_bundle": "lidarmt.lidar.mr1.replay",
    "SutSpec": "lidarmt.lidar.specs",
    "RoiSpec": "lidarmt.lidar.specs",
    "SourceSpec": "lidarmt.lidar.specs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'lidarmt.lidar.mr1' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
