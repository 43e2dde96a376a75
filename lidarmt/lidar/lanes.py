"""The ego lane, in the sensor frame: where a lost obstacle lies for the planner (in the ego lane, next to it, off it).

A finding's severity (:mod:`lidarmt.engine.findings`) depends on whether the obstacle lies in the ego vehicle's
lane. :class:`EgoPath` is that lane as a centre line in the sensor frame and a half width:

* **from the HD map** (:meth:`EgoPath.from_map`), where the campaign has one: the lane whose central curve passes
  nearest the sensor (among those heading the sensor's way, within :data:`MAX_LANE_OFFSET_M`), extended by its
  successors :data:`AHEAD_M` ahead and its predecessors :data:`BEHIND_M` behind (the first of each, as the lane
  graph lists them); its half width is half the distance between its boundaries (:data:`HALF_WIDTH_M` when the
  map has none);
* **the corridor** (:meth:`EgoPath.corridor`) otherwise: the sensor's x axis from −:data:`BEHIND_M` to
  +:data:`AHEAD_M`, half width :data:`HALF_WIDTH_M` (a 3.5 m lane).

:meth:`EgoPath.where` places an obstacle by the lateral gap between its footprint and the centre line: ``"in"``
the ego lane when the footprint reaches within the half width, ``"next"`` to it within one more lane width (the
neighbouring lanes, the kerb), ``"off"`` beyond, or beyond the path's ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

HALF_WIDTH_M = 1.75
AHEAD_M = 80.0
BEHIND_M = 20.0
MAX_LANE_OFFSET_M = 5.0
LANE_PLACES = ("in", "next", "off")


def _seg_distance(p: np.ndarray, line: np.ndarray) -> tuple[float, float]:
    """(distance from point p to the polyline, arc length of the nearest point along it)."""
    a, b = line[:-1], line[1:]
    ab = b - a
    ll = np.einsum("ij,ij->i", ab, ab)
    t = np.clip(np.divide(np.einsum("ij,ij->i", p - a, ab), ll, out=np.zeros(len(ab)), where=ll > 0), 0.0, 1.0)
    q = a + ab * t[:, None]
    d = np.hypot(*(q - p).T)
    k = int(np.argmin(d))
    seg = np.hypot(*ab.T)
    return float(d[k]), float(seg[:k].sum() + t[k] * seg[k])


@dataclass(frozen=True, slots=True)
class EgoPath:
    """The ego lane's centre line (N, 2) in the sensor frame, its half width (m) and where it came from."""

    centre: np.ndarray
    half_width: float = HALF_WIDTH_M
    source: str = "corridor"  # "map" | "corridor"

    @classmethod
    def corridor(cls) -> EgoPath:
        return cls(np.array([[-BEHIND_M, 0.0], [AHEAD_M, 0.0]]), HALF_WIDTH_M, "corridor")

    @classmethod
    def from_map(cls, hdmap: Any, pose: np.ndarray) -> EgoPath | None:
        """The ego lane of ``hdmap`` (:class:`lidarmt.lidar.roi.model.HDMap`, world coordinates) for a sensor at
        ``pose`` (world ← sensor), or None when no lane heading the sensor's way passes within
        :data:`MAX_LANE_OFFSET_M` of it."""
        lanes = [ln for ln in getattr(hdmap, "lanes", []) if len(ln.central_curve) >= 2]
        if not lanes:
            return None
        pose = np.asarray(pose, dtype=np.float64)
        pos = pose[:2, 3]
        heading = pose[:2, 0]
        best: tuple[float, int, float] | None = None
        for i, ln in enumerate(lanes):
            c = np.asarray(ln.central_curve, dtype=np.float64)[:, :2]
            lo, hi = c.min(axis=0) - MAX_LANE_OFFSET_M, c.max(axis=0) + MAX_LANE_OFFSET_M
            if np.any(pos < lo) or np.any(pos > hi):
                continue
            d, s = _seg_distance(pos, c)
            if d > MAX_LANE_OFFSET_M:
                continue
            k = min(int(np.searchsorted(np.r_[0.0, np.cumsum(np.hypot(*np.diff(c, axis=0).T))], s)), len(c) - 1)
            tang = c[min(k, len(c) - 1)] - c[max(k - 1, 0)] if k > 0 else c[1] - c[0]
            if float(tang @ heading) <= 0:  # the opposite carriageway
                continue
            if best is None or d < best[0]:
                best = (d, i, s)
        if best is None:
            return None
        by_id = {ln.id: ln for ln in lanes}
        lane = lanes[best[1]]
        path = [np.asarray(lane.central_curve, dtype=np.float64)[:, :2]]
        length = float(np.hypot(*np.diff(path[0], axis=0).T).sum())
        ahead, cur, seen = length - best[2], lane, {lane.id}
        while ahead < AHEAD_M:
            nxt = next((by_id[s] for s in cur.successor_ids if s in by_id and s not in seen), None)
            if nxt is None:
                break
            seen.add(nxt.id)
            c = np.asarray(nxt.central_curve, dtype=np.float64)[:, :2]
            path.append(c)
            ahead += float(np.hypot(*np.diff(c, axis=0).T).sum())
            cur = nxt
        behind, cur = best[2], lane
        while behind < BEHIND_M:
            prv = next((by_id[s] for s in cur.predecessor_ids if s in by_id and s not in seen), None)
            if prv is None:
                break
            seen.add(prv.id)
            c = np.asarray(prv.central_curve, dtype=np.float64)[:, :2]
            path.insert(0, c)
            behind += float(np.hypot(*np.diff(c, axis=0).T).sum())
            cur = prv
        world = np.concatenate(path)
        inv = np.linalg.inv(pose)
        xy = world @ inv[:2, :2].T + inv[:2, 3]
        half = HALF_WIDTH_M
        if lane.left_boundary is not None and lane.right_boundary is not None \
                and len(lane.left_boundary) >= 2 and len(lane.right_boundary) >= 2:
            lb = np.asarray(lane.left_boundary, dtype=np.float64)[:, :2]
            rb = np.asarray(lane.right_boundary, dtype=np.float64)[:, :2]
            w = _seg_distance(lb[len(lb) // 2], rb)[0]
            if 2.0 <= w <= 6.0:
                half = 0.5 * w
        return cls(xy, half, "map")

    def where(self, x: float, y: float, half_extent: float = 0.0) -> str:
        """``"in"``, ``"next"`` or ``"off"`` the ego lane for an obstacle centred at (x, y) (sensor frame) whose
        footprint reaches ``half_extent`` m from its centre (module docstring)."""
        p = np.array([float(x), float(y)])
        d, s = _seg_distance(p, self.centre)
        total = float(np.hypot(*np.diff(self.centre, axis=0).T).sum())
        if (s <= 0.0 or s >= total) and d > half_extent + 2 * self.half_width:
            return "off"  # beyond the path's ends
        gap = max(0.0, d - max(0.0, half_extent))
        if gap <= self.half_width:
            return "in"
        if gap <= 3.0 * self.half_width:
            return "next"
        return "off"

    def place(self, obstacle: Any) -> str:
        """:meth:`where` for an :class:`lidarmt.types.Obstacle` (its centre and half its box's width)."""
        c = np.asarray(obstacle.center, dtype=np.float64)
        return self.where(float(c[0]), float(c[1]), 0.5 * min(float(obstacle.width), float(obstacle.length)))

    def describe(self) -> str:
        what = "the HD map's ego lane" if self.source == "map" else "the corridor along the sensor's x axis"
        return f"{what}, {2 * self.half_width:.1f} m wide"


def lane_of_obstacles(path: EgoPath | None, obstacles: Any, indices: Any) -> dict[int, str]:
    """``{index: "in" | "next" | "off"}`` for the obstacles ``indices`` (the corridor when ``path`` is None)."""
    p = path or EgoPath.corridor()
    return {int(i): p.place(obstacles[int(i)]) for i in indices}

