"""Plain-Python/NumPy reference of the ROI bitmap (slow; for the tests, which compare it with the numba kernels).

Same rules as :mod:`lidarmt.lidar.roi._kernels` (apollo-lop-facts.md §2.4), written independently with Python lists and
a dense boolean grid ``grid[row, col]`` (row along the major axis) instead of packed bits.
"""

from __future__ import annotations

import math

import numpy as np

FLT_EPS = float(np.finfo(np.float32).eps)
DBL_MIN = float(np.finfo(np.float64).tiny)


def _c_round(v: float) -> int:
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def scan_intervals(
    poly: np.ndarray, major: int, rng: float, cell: float, *, resort_every_scan: bool = False
) -> tuple[float, list[list[tuple[float, float]]]]:
    """Apollo's scan conversion of one polygon: (x of scan 0, intervals per scan line).

    Apollo re-sorts the active edges only on scan lines where an edge starts or ends; between those, edges that
    cross (only in self-intersecting polygons) keep their old order, and the pairs then differ from the exact
    even-odd fill. ``resort_every_scan=True`` gives the exact (always sorted) variant, for comparison.
    """
    op = 1 - major
    pts = [(float(p[major]), float(p[op])) for p in poly]
    if not pts:
        return 0.0, []
    lo = max(min([DBL_MAX_PY] + [p[0] for p in pts]), -rng)
    hi = min(max([DBL_MIN] + [p[0] for p in pts]), rng)
    first = (int((lo + rng) / cell) + 0.5) * cell - rng
    span = (hi - first) / cell
    if not span >= 1.0:
        return first, []
    scans = int(span)
    moved = []
    for x, y in pts:
        d = (x - first) / cell
        r = _c_round(d)
        delta = d - r
        if abs(delta) < FLT_EPS:
            x = (r + (FLT_EPS if delta > 0 else -FLT_EPS)) * cell + first
        moved.append((x, y))
    table: list[list[dict]] = [[] for _ in range(scans)]
    active: list[dict] = []
    n = len(moved)
    for i in range(n):
        p, q = moved[i], moved[(i + 1) % n]
        lo_p, hi_p = (p, q) if p[0] < q[0] else (q, p)
        k = math.inf if abs(p[0] - q[0]) < FLT_EPS else (q[1] - p[1]) / (q[0] - p[0])
        x0 = lo_p[0] - first
        xid = math.ceil(x0 / cell)
        e = {"x": xid * cell, "mx": hi_p[0] - first, "my": hi_p[1], "k": k}
        if math.isfinite(k):
            e["y"] = lo_p[1] + (e["x"] - x0) * k
            if e["mx"] < e["x"]:
                continue
        else:
            e["y"] = lo_p[1]
            if e["y"] > e["my"]:
                e["y"], e["my"] = e["my"], e["y"]
        if xid >= scans:
            continue
        if xid >= 0:
            table[xid].append(e)
        elif math.isfinite(k):
            d = -e["x"]
            e["x"] += d
            if e["x"] <= e["mx"]:
                e["y"] += d * k
                active.append(e)
    out: list[list[tuple[float, float]]] = []
    for s in range(scans):
        ivs: list[tuple[float, float]] = []
        changed = s == 0
        if s > 0:
            alive = []
            for e in active:
                e["x"] += cell
                if e["x"] > e["mx"]:
                    changed = True
                else:
                    e["y"] += cell * e["k"]
                    alive.append(e)
            active = alive if changed else active
        for e in table[s]:
            if math.isfinite(e["k"]):
                active.append(e)
                changed = True
            else:
                ivs.append((e["y"], e["my"]))
        if changed or resort_every_scan:
            active.sort(key=lambda e: e["y"])
        for j in range(0, len(active) - 1, 2):
            ivs.append((active[j]["y"], active[j + 1]["y"]))
        out.append(ivs)
    return first, out


DBL_MAX_PY = float(np.finfo(np.float64).max)


def reference_grid(
    polygons: list[np.ndarray], major: int, rng: float, cell: float, extend: float, *, resort_every_scan: bool = False
) -> np.ndarray:
    """Dense boolean grid [row (major axis), col (other axis)] of the union of the polygons' fills."""
    dims = int(2 * rng / cell)
    grid = np.zeros((dims, dims + 64), dtype=bool)
    for poly in polygons:
        first, scans = scan_intervals(np.asarray(poly, dtype=np.float64), major, rng, cell,
                                      resort_every_scan=resort_every_scan)
        x = first
        for ivs in scans:
            for y1, y2 in ivs:
                a = max(-rng, y1 - extend)
                b = min(rng, y2 + extend)
                if a > b:
                    continue
                row = int((x + rng) / cell)
                grid[row, int((a + rng) / cell) : int((b + rng) / cell)] = True
            x += cell
    return grid[:, :dims]


def reference_major(polygons: list[np.ndarray], rng: float) -> int:
    """0 (XMAJOR) when the clipped bounding box is narrower in x than in y, else 1 (YMAJOR)."""
    x0, y0, x1, y1 = rng, rng, -rng, -rng
    for poly in polygons:
        for p in poly:
            x0, y0 = min(x0, float(p[0])), min(y0, float(p[1]))
            x1, y1 = max(x1, float(p[0])), max(y1, float(p[1]))
    x0, y0, x1, y1 = max(x0, -rng), max(y0, -rng), min(x1, rng), min(y1, rng)
    return 0 if (x1 - x0) < (y1 - y0) else 1


def reference_contains(grid: np.ndarray, major: int, rng: float, cell: float, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """Membership of local-frame points in a reference grid (IsExist + Check)."""
    lx = np.asarray(lx, dtype=np.float64)
    ly = np.asarray(ly, dtype=np.float64)
    inside = (lx >= -rng) & (lx < rng) & (ly >= -rng) & (ly < rng)
    out = np.zeros(len(lx), dtype=bool)
    gx = ((lx[inside] + rng) / cell).astype(np.int64)
    gy = ((ly[inside] + rng) / cell).astype(np.int64)
    row, col = (gx, gy) if major == 0 else (gy, gx)
    out[inside] = grid[row, col]
    return out


def even_odd(polygons: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact even-odd fill of each polygon (crossing number, vectorised over points), OR over polygons."""
    out = np.zeros(len(x), dtype=bool)
    for poly in polygons:
        inside = np.zeros(len(x), dtype=bool)
        px, py = poly[:, 0], poly[:, 1]
        qx, qy = np.roll(px, -1), np.roll(py, -1)
        for ax, ay, bx, by in zip(px, py, qx, qy, strict=True):
            crosses = (ay > y) != (by > y)
            with np.errstate(divide="ignore", invalid="ignore"):
                xi = ax + (y - ay) * (bx - ax) / (by - ay)
            inside ^= crosses & (x < xi)
        out |= inside
    return out


def boundary_distance(polygons: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distance (shapely) from each point to the nearest polygon edge."""
    import shapely

    lines = shapely.MultiLineString([np.vstack([p, p[:1]]) for p in polygons])
    return shapely.distance(lines, shapely.points(x, y))


PARALLEL_EDGE_BOUND = float(np.hypot(1.5, 1.0))
"""How far (in cells) the bitmap may reach past an edge parallel to the scan lines."""


def perpendicular_edge_distance(polygons: list[np.ndarray], major: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distance from each point to the nearest polygon edge parallel to the scan lines (|d major| < float eps),
    inf when there is none. Apollo draws such an edge's interval on the *next* scan line, i.e. in the cell row
    after it, so the bitmap may be off by up to 1.5 cells across such an edge and one cell along it, i.e. up to
    sqrt(1.5² + 1²) = 1.80 cells from it (instead of one cell diagonal)."""
    import shapely

    segs = []
    for p in polygons:
        q = np.roll(p, -1, axis=0)
        for a, b in zip(p, q, strict=True):
            if abs(a[major] - b[major]) < 2 * FLT_EPS:
                segs.append(np.array([a[:2], b[:2]]))
    if not segs:
        return np.full(len(x), np.inf)
    return shapely.distance(shapely.MultiLineString(segs), shapely.points(x, y))


def scan_range(poly: np.ndarray, major: int, rng: float, cell: float) -> tuple[float, int]:
    """(x of the first scan line, number of scan lines) Apollo gives a polygon."""
    xs = [float(p[major]) for p in poly]
    lo = max(min([DBL_MAX_PY, *xs]), -rng)
    hi = min(max([DBL_MIN, *xs]), rng)
    first = (int((lo + rng) / cell) + 0.5) * cell - rng
    span = (hi - first) / cell
    return first, int(span) if span >= 1.0 else 0


def after_last_scan_line(polygons: list[np.ndarray], major: int, rng: float, cell: float, x: np.ndarray,
                         y: np.ndarray) -> np.ndarray:
    """Points inside a polygon (exact even-odd) but past the last cell row Apollo draws for it.

    Apollo draws floor((end - start) / cell) scan lines from the cell centre ``start`` at or before the polygon's
    minimum along the scan axis, where ``end`` is its maximum clipped to the range: the rows up to two cells before
    the polygon's far end (and the bitmap's last row) are never drawn."""
    major_coord = np.asarray(x if major == 0 else y, dtype=np.float64)
    out = np.zeros(len(major_coord), dtype=bool)
    for p in polygons:
        first, scans = scan_range(p, major, rng, cell)
        end = first + (scans - 0.5) * cell if scans else -np.inf
        cand = major_coord >= end
        if cand.any():
            idx = np.flatnonzero(cand)
            out[idx] |= even_odd([p], np.asarray(x, dtype=np.float64)[idx], np.asarray(y, dtype=np.float64)[idx])
    return out
