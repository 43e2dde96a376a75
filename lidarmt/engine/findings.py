"""What a lost obstacle is worth: its evidence (a real object or junk) and its severity for a planner.

Both are computed from a finding's record when a journal is folded (never written into it), so every report of
a campaign, old or new, applies the same rule, and changing a threshold re-reports without perceiving again.
A finding record (an MR1 lost obstacle, a LiDAR-transformation finding) has ``class``, ``kind`` (vanished,
merged, reclassified, degraded: split or shrunk, missed, spurious), ``points``, ``size`` (l, w, h m),
``distance`` (m), and where known ``label`` (labelled / unlabelled / outside, from the source's labels) and
``lane`` (in / next / off the ego lane, :mod:`lidarmt.lidar.lanes`).

**Evidence** (:func:`evidence`), one of :data:`EVIDENCE_KINDS`:

* where the source frame's labels say: ``labelled object`` (the lost obstacle overlaps a labelled car,
  pedestrian or cyclist), ``junk`` (inside the labelled region, matching no label), or, beyond the labelled
  region, as without labels;
* without labels: ``low evidence`` when the obstacle has fewer than :data:`LOW_EVIDENCE_MIN_POINTS` points, a
  box lower than :data:`LOW_EVIDENCE_MIN_HEIGHT_M` or a footprint (l × w) under
  :data:`LOW_EVIDENCE_MIN_FOOTPRINT_M2`; else ``outside labels`` (beyond the labelled region) or ``no labels``.

The thresholds were measured on real frames against their labels (``scripts/measure_low_evidence.py --raw 10``:
the built-in Apollo pipeline on the seven KITTI object frames of ``../shared/data`` and ten sweeps of KITTI raw
drive 0001, 196 obstacles). The 37 obstacles that are labelled objects have at least 11 points, a box at least
0.62 m high and a footprint of at least 0.19 m²; the thresholds, about half of those, flag none of them and 73 of
the 106 unlabelled obstacles (69 %: 3–10-point specks, flat boxes 0.0 m high). Reports show each headline count
twice: **all** findings, and **excluding junk and low-evidence** ones.

**Severity** (:func:`severity`), one of :data:`SEVERITIES`, from what a planner cares about. A score adds:

* where: in the ego lane +3, next to it +2 (the neighbouring lane, the kerb), off it 0, not known +1;
* how near: under 20 m +2, under 40 m +1;
* what: a pedestrian or cyclist +1 (vulnerable road users), an unknown-class obstacle −1 (the labelled class
  counts for a labelled object);
* how it was lost: merged into a neighbour or split/shrunk (``degraded``) −1 (the planner still sees an
  obstacle there); vanished, reclassified, a missed insertion or a spurious obstacle 0;
* how big: a footprint under 0.5 m² −1 unless it is a pedestrian.

Score ≥ 5 is ``critical`` (a car lost in the ego lane within 20 m; a pedestrian beside the lane within 20 m),
4 ``high``, 2–3 ``medium``, ≤ 1 ``low``. Junk and low-evidence findings are ``low`` whatever their score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lidarmt.engine.errors import FuzzArgumentError

#: Low evidence: fewer points than this (measured: scripts/measure_low_evidence.py)
LOW_EVIDENCE_MIN_POINTS = 10
#: Low evidence: a box lower than this (m)
LOW_EVIDENCE_MIN_HEIGHT_M = 0.3
#: Low evidence: a footprint (l × w) smaller than this (m²)
LOW_EVIDENCE_MIN_FOOTPRINT_M2 = 0.1

EVIDENCE_KINDS = ("labelled object", "junk", "outside labels", "low evidence", "no labels")
#: the evidence kinds a headline "excluding junk/low-evidence" leaves out
EXCLUDED = ("junk", "low evidence")
SEVERITIES = ("critical", "high", "medium", "low")
LOW_EVIDENCE_RULE = (f"low evidence: fewer than {LOW_EVIDENCE_MIN_POINTS} points, a box lower than "
                     f"{LOW_EVIDENCE_MIN_HEIGHT_M:g} m or a footprint under {LOW_EVIDENCE_MIN_FOOTPRINT_M2:g} m² "
                     "(measured on the real KITTI frames against their labels: scripts/measure_low_evidence.py)")
SEVERITY_RULE = ("severity: score = where (in the ego lane 3, next to it 2, off 0) + near (< 20 m 2, < 40 m 1) "
                 "+ pedestrian/cyclist 1, unknown class −1 + merged/split −1 + footprint < 0.5 m² −1 (not "
                 "pedestrians); ≥ 5 critical, 4 high, 2–3 medium, else low; junk and low evidence are low")


def _size(m: Mapping[str, Any]) -> tuple[float, float, float] | None:
    s = m.get("size")
    if s is None or len(s) != 3:
        return None
    return float(s[0]), float(s[1]), float(s[2])


def low_evidence(m: Mapping[str, Any]) -> bool:
    """Too few points, no height or a tiny footprint (the thresholds above); False when the record does not say."""
    pts = m.get("points")
    if pts is not None and int(pts) < LOW_EVIDENCE_MIN_POINTS:
        return True
    s = _size(m)
    return s is not None and (s[2] < LOW_EVIDENCE_MIN_HEIGHT_M or s[0] * s[1] < LOW_EVIDENCE_MIN_FOOTPRINT_M2)


def evidence(m: Mapping[str, Any]) -> str:
    """One of :data:`EVIDENCE_KINDS` for a finding record (module docstring)."""
    label = m.get("label")
    if label == "labelled":
        return "labelled object"
    if label == "unlabelled":
        return "junk"
    if m.get("kind") in ("missed", "spurious") and label is None:
        return "no labels"  # an inserted object (known real) or a phantom: judged by where it is
    if low_evidence(m):
        return "low evidence"
    return "outside labels" if label == "outside" else "no labels"


def is_real(m: Mapping[str, Any]) -> bool:
    """Whether a finding counts in the headline "excluding junk/low-evidence"."""
    return evidence(m) not in EXCLUDED


def severity_score(m: Mapping[str, Any]) -> int:
    """The planner's score of a finding (module docstring)."""
    score = {"in": 3, "next": 2, "off": 0}.get(str(m.get("lane")), 1)
    d = m.get("distance")
    if d is not None:
        score += 2 if float(d) < 20.0 else 1 if float(d) < 40.0 else 0
    cls = m.get("label_class") if m.get("label") == "labelled" and m.get("label_class") else m.get("class")
    if cls in ("pedestrian", "cyclist"):
        score += 1
    elif cls == "unknown":
        score -= 1
    if m.get("kind") in ("merged", "degraded"):
        score -= 1
    s = _size(m)
    if s is not None and s[0] * s[1] < 0.5 and cls != "pedestrian":
        score -= 1
    return score


def severity(m: Mapping[str, Any]) -> str:
    """One of :data:`SEVERITIES` (module docstring)."""
    if not is_real(m):
        return "low"
    s = severity_score(m)
    return "critical" if s >= 5 else "high" if s == 4 else "medium" if s >= 2 else "low"


def severity_rank(level: str) -> int:
    """0 for critical … 3 for low (sort key: most severe first)."""
    return SEVERITIES.index(level)


def worst(ms: Iterable[Mapping[str, Any]]) -> str | None:
    """The most severe level among findings (None for none)."""
    levels = [severity(m) for m in ms]
    return min(levels, key=severity_rank) if levels else None


def parse_min_severity(text: str | None) -> str | None:
    """``--min-severity``: a level of :data:`SEVERITIES` (None: every finding)."""
    if text is None or text == "low":
        return None if text is None else "low"
    if text not in SEVERITIES:
        raise FuzzArgumentError(f"--min-severity {text!r}: use one of {', '.join(SEVERITIES)}")
    return text


def at_least(m: Mapping[str, Any], level: str | None) -> bool:
    """Whether a finding is at least as severe as ``level`` (None: always)."""
    return level is None or severity_rank(severity(m)) <= severity_rank(level)


def annotate(m: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its ``evidence`` and ``severity`` (for reports and bundles)."""
    return {**m, "evidence": evidence(m), "severity": severity(m)}


def counts(ms: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{"severity": {level: n}, "evidence": {kind: n}}`` over findings, every level and kind present."""
    sev = dict.fromkeys(SEVERITIES, 0)
    ev = dict.fromkeys(EVIDENCE_KINDS, 0)
    for m in ms:
        sev[severity(m)] += 1
        ev[evidence(m)] += 1
    return {"severity": sev, "evidence": ev}
