"""Statistics that compare simulated sweeps with real HDL-64E sweeps (the KITTI frames), the same way for both.

Used by ``benchmarks/bench_sim_realism.py``. Every statistic is computed from a :class:`lidarmt.types.Frame`
whose labels carry ``point_semantic`` (SemanticKITTI ids: KITTI's ``road_label``, the simulator's truth) and
sensor-frame ``boxes``:

* points per frame;
* per-ring elevation (median ``atan2(z, hypot(x, y))`` of the ring's points beyond 3 m). KITTI .bin files have
  no ring field, but their points are stored ring after ring, each ring one turn in azimuth, so rings are
  recovered at the azimuth wrap-arounds;
* range histogram, fraction of ground points (SemanticKITTI road, parking, sidewalk, other-ground,
  lane-marking, terrain), intensity histogram and the median intensity per surface kind;
* points inside car boxes (SMALLMOT) whose centre lies near 10, 20 and 40 m, counted geometrically in the box
  (not by instance labels) so that both sources are measured alike;
* *roadside structure*: the share of a sweep's points that are building, wall, fence or vegetation points
  within 40 m of the sensor, 0.3 m or more above the ground, and within 3 m (horizontally) of a road or
  sidewalk point. These are the points the CNN must learn to call background next to where cars are; KITTI's
  narrow city streets have far more of them than a town with set-back houses (measured per frame, then
  averaged).
"""

from __future__ import annotations

import numpy as np

from lidarmt.types import Frame, MetaType

GROUND_IDS = (40, 44, 48, 49, 60, 72)
RANGE_BINS = (0, 2.5, 5, 7.5, 10, 15, 20, 30, 40, 50, 60, 80, 120)
INTENSITY_BINS = tuple(range(0, 257, 16))
CAR_BANDS = {"10m": (5.0, 15.0), "20m": (15.0, 30.0), "40m": (30.0, 50.0)}
CLASS_MIX = {"road": (40, 44, 60), "sidewalk": (48, 49), "terrain": (72,), "building/fence": (50, 51, 52),
             "vegetation": (70, 71), "vehicles": (10, 13, 18, 20), "people/cyclists": (11, 30, 31, 32),
             "poles/signs": (80, 81)}
#: SemanticKITTI ids of large static structure (building, fence, other-structure, vegetation, trunk, terrain)
STRUCTURE_IDS = (50, 51, 52, 70, 71)
#: ...and of the drivable/walkable surface it must be near (road, parking, sidewalk, lane marking)
WALKABLE_IDS = (40, 44, 48, 60)

SURFACES = {"road": (40, 44), "sidewalk": (48,), "terrain": (72,), "building": (50, 51), "vegetation": (70, 71),
            "car": (10,), "pole": (80, 81)}


def rings_from_order(points: np.ndarray) -> np.ndarray:
    """Ring index (0 = first ring stored) of each point of a ring-major sweep, from azimuth wrap-arounds."""
    az = np.arctan2(points["y"], points["x"])
    d = np.diff(az)
    step = np.sign(np.median(d)) or 1.0
    brk = np.flatnonzero(d * step < -np.pi)  # the azimuth jumps back by a full turn
    ring = np.zeros(len(points), np.int64)
    ring[brk + 1] = 1
    return np.cumsum(ring)


def ring_elevations(points: np.ndarray, ring: np.ndarray | None = None, *, min_range: float = 3.0) -> np.ndarray:
    """Median elevation (degrees) of each ring, ascending, from the ``ring`` field or recovered from order.

    Rings that are split at the start of a sweep (a partial turn) are merged with their neighbour when their
    elevations agree within 0.12 deg.
    """
    if ring is None:
        ring = points["ring"].astype(np.int64) if "ring" in (points.dtype.names or ()) else rings_from_order(points)
    r = np.hypot(points["x"], points["y"])
    el = np.degrees(np.arctan2(points["z"], r))
    ok = r > min_range
    meds = []
    for k in np.unique(ring):
        m = ok & (ring == k)
        if m.sum() >= 20:
            meds.append(float(np.median(el[m])))
    meds = sorted(meds)
    merged: list[float] = []
    for e in meds:
        if merged and abs(e - merged[-1]) < 0.12:
            continue
        merged.append(e)
    return np.array(merged)


def ring_counts(points: np.ndarray) -> np.ndarray:
    """Points per ring, rings ordered by ascending elevation (partial rings at the sweep start merged)."""
    ring = points["ring"].astype(np.int64) if "ring" in (points.dtype.names or ()) else rings_from_order(points)
    r = np.hypot(points["x"], points["y"])
    el = np.degrees(np.arctan2(points["z"], r))
    groups: list[list[float]] = []  # [elevation, count]
    for k in np.unique(ring):
        m = ring == k
        e = float(np.median(el[m & (r > 3.0)])) if (m & (r > 3.0)).sum() >= 20 else float(np.median(el[m]))
        groups.append([e, float(m.sum())])
    groups.sort()
    merged: list[list[float]] = []
    for e, c in groups:
        if merged and abs(e - merged[-1][0]) < 0.12:
            merged[-1][1] += c
        else:
            merged.append([e, c])
    return np.array([c for _, c in merged])


def frame_stats(frame: Frame) -> dict:
    """All per-frame statistics of one sweep (see the module docstring)."""
    p = frame.points
    lb = frame.labels
    r = np.hypot(p["x"], p["y"])
    rng3 = np.sqrt(r * r + p["z"].astype(np.float64) ** 2)
    out: dict = {"points": int(len(p))}
    out["range_hist"] = (np.histogram(rng3, bins=RANGE_BINS)[0] / max(len(p), 1)).tolist()
    out["intensity_hist"] = (np.histogram(p["intensity"], bins=INTENSITY_BINS)[0] / max(len(p), 1)).tolist()
    out["intensity_mean"] = float(np.mean(p["intensity"]))
    out["ring_elevations"] = ring_elevations(p).tolist()
    out["ring_counts"] = ring_counts(p).tolist()
    sem = None if lb is None else lb.point_semantic
    if sem is not None:
        out["ground_fraction"] = float(np.isin(sem, GROUND_IDS).mean())
        out["class_mix"] = {k: float(np.isin(sem, ids).mean()) for k, ids in CLASS_MIX.items()}
        out["surface_intensity"] = {}
        for name, ids in SURFACES.items():
            m = np.isin(sem, ids)
            out["surface_intensity"][name] = float(np.median(p["intensity"][m])) if m.sum() >= 50 else None
        road = np.isin(sem, (40, 44))
        out["road_z_by_range"] = []  # (median z, 90th - 10th percentile) of road points, per range band
        for a, b in ((3, 10), (10, 20), (20, 40)):
            z = p["z"][road & (r >= a) & (r < b)]
            out["road_z_by_range"].append([float(np.median(z)), float(np.percentile(z, 90) - np.percentile(z, 10))]
                                          if len(z) >= 30 else None)
        out["road_intensity_by_range"] = [
            float(np.median(p["intensity"][road & (r >= a) & (r < b)])) if (road & (r >= a) & (r < b)).sum() >= 30
            else None for a, b in ((0, 10), (10, 20), (20, 30), (30, 50))]
        out["roadside_structure"] = roadside_structure(p, sem)
    out["car_points"] = {k: [] for k in CAR_BANDS}
    if lb is not None and len(lb.boxes):
        xyz = np.stack([p["x"], p["y"], p["z"]], axis=1).astype(np.float64)
        for b in lb.boxes:
            if int(b["meta"]) != int(MetaType.SMALLMOT):
                continue
            d = float(np.hypot(b["cx"], b["cy"]))
            band = next((k for k, (lo, hi) in CAR_BANDS.items() if lo <= d < hi), None)
            if band is None:
                continue
            out["car_points"][band].append(int(points_in_box(xyz, b)))
    return out


def roadside_structure(points: np.ndarray, sem: np.ndarray, *, near: float = 3.0, max_range: float = 40.0,
                       min_height: float = 0.3) -> float:
    """Share of all points that are static structure (:data:`STRUCTURE_IDS`) within ``max_range`` of the
    sensor, ``min_height`` or more above the lowest walkable point within ``near`` metres, and within ``near``
    metres (in x, y) of a walkable point (:data:`WALKABLE_IDS`)."""
    from scipy.spatial import cKDTree

    xy = np.stack([points["x"], points["y"]], axis=1).astype(np.float64)
    z = points["z"].astype(np.float64)
    r = np.hypot(xy[:, 0], xy[:, 1])
    walk = np.isin(sem, WALKABLE_IDS) & (r < max_range + near)
    cand = np.flatnonzero(np.isin(sem, STRUCTURE_IDS) & (r < max_range))
    if not walk.any() or not len(cand):
        return 0.0
    tree = cKDTree(xy[walk])
    dist, j = tree.query(xy[cand], distance_upper_bound=near)
    hit = np.isfinite(dist)
    zw = z[walk]
    above = np.zeros(len(cand), bool)
    above[hit] = z[cand[hit]] - zw[j[hit]] >= min_height
    return float(above.sum() / max(len(points), 1))


def points_in_box(xyz: np.ndarray, box) -> int:
    """Number of points inside a BOX_DTYPE box (10 cm margin)."""
    c, s = np.cos(box["yaw"]), np.sin(box["yaw"])
    dx, dy = xyz[:, 0] - box["cx"], xyz[:, 1] - box["cy"]
    u = c * dx + s * dy
    v = -s * dx + c * dy
    w = xyz[:, 2] - box["cz"]
    m = (np.abs(u) <= box["length"] / 2 + 0.1) & (np.abs(v) <= box["width"] / 2 + 0.1) & (np.abs(w) <= box["height"] / 2 + 0.1)
    return int(m.sum())


def summarize(stats: list[dict]) -> dict:
    """Mean (or pooled median) of the per-frame statistics of several frames."""
    out: dict = {"frames": len(stats)}
    out["points_mean"] = float(np.mean([s["points"] for s in stats]))
    out["points_min"] = int(min(s["points"] for s in stats))
    out["points_max"] = int(max(s["points"] for s in stats))
    out["range_hist"] = np.mean([s["range_hist"] for s in stats], axis=0).tolist()
    out["intensity_hist"] = np.mean([s["intensity_hist"] for s in stats], axis=0).tolist()
    out["intensity_mean"] = float(np.mean([s["intensity_mean"] for s in stats]))
    els = [s["ring_elevations"] for s in stats if len(s["ring_elevations"]) == 64]
    out["ring_elevations"] = np.median(els, axis=0).tolist() if els else None
    out["rings_found"] = [len(s["ring_elevations"]) for s in stats]
    rc = [s["ring_counts"] for s in stats if len(s["ring_counts"]) == 64]
    out["ring_counts"] = np.mean(rc, axis=0).tolist() if rc else None
    g = [s["ground_fraction"] for s in stats if "ground_fraction" in s]
    out["ground_fraction"] = float(np.mean(g)) if g else None
    mixes = [s["class_mix"] for s in stats if "class_mix" in s]
    out["class_mix"] = {k: float(np.mean([m[k] for m in mixes])) for k in CLASS_MIX} if mixes else None
    out["surface_intensity"] = {}
    for name in SURFACES:
        vals = [s["surface_intensity"][name] for s in stats if s.get("surface_intensity", {}).get(name) is not None]
        out["surface_intensity"][name] = float(np.median(vals)) if vals else None
    rr = [s["road_intensity_by_range"] for s in stats if "road_intensity_by_range" in s]
    out["road_intensity_by_range"] = [
        float(np.median([x[i] for x in rr if x[i] is not None])) if any(x[i] is not None for x in rr) else None
        for i in range(4)] if rr else None
    rz = [s["road_z_by_range"] for s in stats if "road_z_by_range" in s]
    out["road_z_by_range"] = [
        {"median_z_range": [float(min(x[i][0] for x in rz if x[i])), float(max(x[i][0] for x in rz if x[i]))],
         "spread_p90_p10": float(np.median([x[i][1] for x in rz if x[i]]))} if any(x[i] for x in rz) else None
        for i in range(3)] if rz else None
    rs = [s["roadside_structure"] for s in stats if "roadside_structure" in s]
    out["roadside_structure"] = float(np.mean(rs)) if rs else None
    out["car_points"] = {}
    for band in CAR_BANDS:
        vals = [v for s in stats for v in s["car_points"][band]]
        out["car_points"][band] = {"cars": len(vals), "median": float(np.median(vals)) if vals else None,
                                   "max": int(max(vals)) if vals else None}
    return out
