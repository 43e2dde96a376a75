"""A procedural town from a seed: roads, lanes, junctions, sidewalks, crosswalks and a ground raster.

Layout: a jittered grid of 3x3 to 4x4 nodes (80-135 m apart) joined by roads; some grid edges are dropped
(keeping every node on at least two roads and the network connected), so nodes become X junctions (four
roads), T junctions (three) or corners (two). A road is straight or bends sideways in an S-free arc
(``sin^2`` profile: it leaves and enters its junctions straight). Each road has 1-3 lanes per direction
(right-hand traffic), an optional parking strip along either curb, curbs, sidewalks and, at junction
approaches, zebra crosswalks. Junction lanes join every incoming lane to the other roads' outgoing lanes.

Coordinates: the town is built in a local frame (metres, origin near the town's south-west corner) so that
the ray caster's float32 arithmetic stays exact to millimetres; :attr:`Town.origin` is added to give the
UTM-like world coordinates used by the HD map and the poses (zone 10 around x = 587000, y = 4141000).

The ground raster (:attr:`Town.raster`, 0.2 m cells) holds one surface code per cell: asphalt, lane marking,
crosswalk paint (all at road level z = 0), sidewalk and terrain (raised by the curb height).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

import lidarmt.lidar.sim._kernels as _kernels
import lidarmt.lidar.sim.geom as geom
from lidarmt.lidar.roi.model import (
    BoundaryEdge,
    Crosswalk,
    EdgeType,
    HDMap,
    Junction,
    Lane,
    MapHeader,
    Road,
    RoadSection,
)
from lidarmt.lidar.sim.objects import Mat

UTM_PROJ = "+proj=utm +zone=10 +ellps=WGS84 +datum=WGS84 +units=m +no_defs"
RASTER_RES = 0.2
TERRAIN_RES = 2.0
LANE_TURN = {"none": 1, "left": 2, "right": 3}
# Apollo LaneBoundaryType.Type
DOTTED_WHITE, SOLID_WHITE, DOUBLE_YELLOW, CURB = 2, 4, 6, 7


@dataclass(slots=True)
class RoadGeom:
    """One road between two junctions (its ends trimmed at the junction outlines)."""

    id: str
    a: int
    b: int
    center: np.ndarray  # (N, 2) from junction a to junction b, 1 m spacing
    n_fwd: int
    n_bwd: int
    lane_width: float
    park_left: float
    park_right: float
    lanes_fwd: list[str] = field(default_factory=list)  # a -> b, right of the centre line, inner first
    lanes_bwd: list[str] = field(default_factory=list)  # b -> a, left of the centre line, inner first

    @property
    def half_left(self) -> float:
        return self.n_bwd * self.lane_width + self.park_left

    @property
    def half_right(self) -> float:
        return self.n_fwd * self.lane_width + self.park_right

    @property
    def left_edge(self) -> np.ndarray:
        return geom.offset(self.center, self.half_left)

    @property
    def right_edge(self) -> np.ndarray:
        return geom.offset(self.center, -self.half_right)

    @property
    def length(self) -> float:
        return float(geom.arc_length(self.center)[-1])


@dataclass(slots=True)
class LaneGeom:
    id: str
    center: np.ndarray  # (N, 2)
    width: float
    road: str
    junction: int | None = None
    turn: str = "none"
    successors: list[str] = field(default_factory=list)
    predecessors: list[str] = field(default_factory=list)
    s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        self.s = geom.arc_length(self.center)

    @property
    def length(self) -> float:
        return float(self.s[-1])


@dataclass(slots=True)
class Town:
    """Everything the scene builder, the LiDAR and the map writer need to know about the streets."""

    seed: int
    origin: np.ndarray  # (2,) world = local + origin
    nodes: np.ndarray  # (M, 2) junction centres
    junction_polys: dict[int, np.ndarray]  # node -> (K, 2) convex outline, counter-clockwise
    roads: list[RoadGeom]
    lanes: dict[str, LaneGeom]
    crosswalks: list[np.ndarray]  # (4, 2) polygons
    curb_height: float
    sidewalk_width: float
    raster: np.ndarray  # (H, W) uint8 surface codes
    raster_origin: np.ndarray  # (2,) local coordinates of the raster's corner (row 0, col 0)
    road_distance: np.ndarray  # (H, W) float32 metres to the nearest road cell
    res: float = RASTER_RES
    terrain: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))  # (K, 4): amplitude, kx, ky, phase
    hgrid: np.ndarray = field(default_factory=lambda: np.zeros((2, 2)))  # terrain heights every hres metres
    hres: float = TERRAIN_RES
    gmax: float = 0.0  # bound of the terrain's slope

    # -------------------------------------------------------------------------------------------- queries

    def surface(self, xy: np.ndarray) -> np.ndarray:
        """Surface code (objects.Mat ground ids) under local points (N, 2); terrain outside the raster."""
        return self._lookup(self.raster, xy, Mat.TERRAIN)

    def distance_to_road(self, xy: np.ndarray) -> np.ndarray:
        """Metres from local points (N, 2) to the nearest road or junction surface (large outside)."""
        return self._lookup(self.road_distance, xy, 1e3)

    def _lookup(self, grid: np.ndarray, xy: np.ndarray, outside):
        xy = np.atleast_2d(np.asarray(xy, dtype=np.float64))
        c = np.floor((xy[:, 0] - self.raster_origin[0]) / self.res).astype(np.int64)
        r = np.floor((xy[:, 1] - self.raster_origin[1]) / self.res).astype(np.int64)
        ok = (r >= 0) & (c >= 0) & (r < grid.shape[0]) & (c < grid.shape[1])
        out = np.full(len(xy), outside, dtype=grid.dtype)
        out[ok] = grid[r[ok], c[ok]]
        return out

    def height(self, xy: np.ndarray) -> np.ndarray:
        """Height of the rolling terrain (the road surface) under local points (N, 2): bilinear on
        :attr:`hgrid`, exactly what the ray caster intersects."""
        xy = np.atleast_2d(np.asarray(xy, dtype=np.float64))
        return _kernels.height_ref(self.hgrid, *self.raster_origin, self.hres, xy[:, 0], xy[:, 1])

    def slope(self, xy: np.ndarray) -> np.ndarray:
        """Gradient (dz/dx, dz/dy) of the terrain under local points, (N, 2)."""
        xy = np.atleast_2d(np.asarray(xy, dtype=np.float64))
        return _kernels.slope_ref(self.hgrid, *self.raster_origin, self.hres, xy[:, 0], xy[:, 1])

    def ground_z(self, xy: np.ndarray) -> np.ndarray:
        """Height of the ground under local points: the terrain on roads, the curb height above it elsewhere."""
        raised = self.surface(xy) >= _kernels.FIRST_RAISED
        return self.height(xy) + np.where(raised, self.curb_height, 0.0)

    def driving_lanes(self) -> list[LaneGeom]:
        return [ln for ln in self.lanes.values() if ln.junction is None]

    def route(self, rng: np.random.Generator, lane_id: str, length: float) -> tuple[np.ndarray, list[str]]:
        """A polyline at least ``length`` metres long following random successors from the start of a lane."""
        pts = [self.lanes[lane_id].center]
        ids = [lane_id]
        total = self.lanes[lane_id].length
        cur = lane_id
        while total < length:
            succ = self.lanes[cur].successors
            if not succ:
                break
            cur = succ[int(rng.integers(len(succ)))]
            ids.append(cur)
            pts.append(self.lanes[cur].center[1:])
            total += self.lanes[cur].length
        return np.concatenate(pts), ids

    # -------------------------------------------------------------------------------------------- HD map

    def hdmap(self, *, name: str = "lidarmt_town") -> HDMap:
        """The town as the project's HD-map model, in world (UTM-like) coordinates."""

        def w(p: np.ndarray) -> np.ndarray:
            out = np.zeros((len(p), 3))
            out[:, :2] = p[:, :2] + self.origin
            return out

        lanes: list[Lane] = []
        for ln in self.lanes.values():
            lanes.append(Lane(
                id=ln.id, central_curve=w(ln.center), left_boundary=w(geom.offset(ln.center, ln.width / 2)),
                right_boundary=w(geom.offset(ln.center, -ln.width / 2)), length=ln.length,
                speed_limit=13.89 if ln.junction is None else 8.33, turn=LANE_TURN[ln.turn],
                left_boundary_types=[], right_boundary_types=[],
                predecessor_ids=list(ln.predecessors), successor_ids=list(ln.successors),
            ))
            self._boundary_types(ln, lanes[-1])
        roads: list[Road] = []
        for r in self.roads:
            edges = [BoundaryEdge(EdgeType.LEFT_BOUNDARY, w(r.left_edge)),
                     BoundaryEdge(EdgeType.RIGHT_BOUNDARY, w(r.right_edge))]
            roads.append(Road(id=r.id, sections=[RoadSection(id=f"{r.id}_s0", lane_ids=r.lanes_fwd + r.lanes_bwd,
                                                             edges=edges)]))
        junctions: list[Junction] = []
        for j, poly in sorted(self.junction_polys.items()):
            jid = f"junction_{j}"
            junctions.append(Junction(id=jid, polygon=w(poly)))
            k = len(poly) // 2
            left = poly[: k + 1]
            right = np.concatenate([poly[k:], poly[:1]])[::-1]
            ids = [ln.id for ln in self.lanes.values() if ln.junction == j]
            roads.append(Road(id=f"road_j{j}", junction_id=jid, sections=[RoadSection(
                id=f"road_j{j}_s0", lane_ids=ids,
                edges=[BoundaryEdge(EdgeType.LEFT_BOUNDARY, w(left)), BoundaryEdge(EdgeType.RIGHT_BOUNDARY, w(right))],
            )]))
        crosswalks = [Crosswalk(id=f"crosswalk_{i}", polygon=w(c)) for i, c in enumerate(self.crosswalks)]
        header = MapHeader(version="1.500000", date="20260101", proj=UTM_PROJ, district=name, vendor="lidarmt")
        return HDMap(header=header, lanes=lanes, roads=roads, junctions=junctions, crosswalks=crosswalks,
                     source=f"lidarmt.lidar.sim town seed {self.seed}")

    def _boundary_types(self, ln: LaneGeom, lane: Lane) -> None:
        if ln.junction is not None:
            return
        road = next(r for r in self.roads if r.id == ln.road)
        same = road.lanes_fwd if ln.id in road.lanes_fwd else road.lanes_bwd
        i = same.index(ln.id)
        lane.left_boundary_types = [DOUBLE_YELLOW if i == 0 else DOTTED_WHITE]
        lane.right_boundary_types = [SOLID_WHITE if i == len(same) - 1 else DOTTED_WHITE]


# ----------------------------------------------------------------------------------------------- building


def build_town(seed: int, *, size: tuple[int, int] | None = None) -> Town:
    """Generate the town of a seed (deterministic). ``size`` = (nodes along x, nodes along y) overrides 3-4."""
    rng = np.random.default_rng([seed, 0x70E1])
    nx, ny = size if size is not None else (int(rng.integers(3, 5)), int(rng.integers(3, 5)))
    sx, sy = rng.uniform(85, 135), rng.uniform(85, 135)
    margin = 80.0
    nodes = np.array([[margin + i * sx, margin + j * sy] for j in range(ny) for i in range(nx)], dtype=np.float64)
    nodes += rng.uniform(-9, 9, nodes.shape)
    idx = lambda i, j: j * nx + i  # noqa: E731
    edges = [(idx(i, j), idx(i + 1, j)) for j in range(ny) for i in range(nx - 1)]
    edges += [(idx(i, j), idx(i, j + 1)) for j in range(ny - 1) for i in range(nx)]
    edges = _drop_edges(edges, len(nodes), rng)

    curb = float(rng.uniform(0.12, 0.17))
    sidewalk = float(rng.uniform(2.5, 4.5))
    roads: list[RoadGeom] = []
    raw: list[np.ndarray] = []
    for k, (a, b) in enumerate(edges):
        n = int(rng.choice([1, 2, 3], p=[0.55, 0.33, 0.12]))
        w = float(rng.uniform(3.2, 3.7))
        pl = 2.4 if rng.random() < 0.55 else 0.0
        pr = 2.4 if rng.random() < 0.55 else 0.0
        roads.append(RoadGeom(id=f"road_{k}", a=a, b=b, center=np.zeros((0, 2)), n_fwd=n, n_bwd=n,
                              lane_width=w, park_left=pl, park_right=pr))
        pa, pb = nodes[a], nodes[b]
        length = float(np.linalg.norm(pb - pa))
        t = np.linspace(0, 1, max(int(length), 2) + 1)[:, None]
        d = (pb - pa) / length
        nrm = np.array([-d[1], d[0]])
        amp = rng.uniform(0.06, 0.12) * length * rng.choice([-1, 1]) if rng.random() < 0.45 else 0.0
        raw.append(pa + (pb - pa) * t + nrm * amp * np.sin(np.pi * t) ** 2)

    # junction radius: clear of the widest road at the node
    radius = np.zeros(len(nodes))
    for r in roads:
        hw = max(r.half_left, r.half_right)
        radius[r.a] = max(radius[r.a], hw)
        radius[r.b] = max(radius[r.b], hw)
    radius += rng.uniform(2.5, 4.5, len(nodes))
    for r, c in zip(roads, raw, strict=True):
        r.center = _trim(c, nodes[r.a], radius[r.a], nodes[r.b], radius[r.b])

    lanes: dict[str, LaneGeom] = {}
    for r in roads:
        for i in range(r.n_fwd):
            lid = f"{r.id}_f{i}"
            lanes[lid] = LaneGeom(lid, geom.offset(r.center, -(i + 0.5) * r.lane_width), r.lane_width, r.id)
            r.lanes_fwd.append(lid)
        for i in range(r.n_bwd):
            lid = f"{r.id}_b{i}"
            lanes[lid] = LaneGeom(lid, geom.offset(r.center, (i + 0.5) * r.lane_width)[::-1].copy(), r.lane_width, r.id)
            r.lanes_bwd.append(lid)

    polys: dict[int, np.ndarray] = {}
    for j in range(len(nodes)):
        inc = [r for r in roads if j in (r.a, r.b)]
        if inc:
            polys[j] = _junction_polygon(nodes[j], inc, j)
            _connect(j, inc, lanes)

    crosswalks: list[np.ndarray] = []
    for r in roads:
        for end in (0, 1):
            deg = sum(1 for q in roads if (r.a if end == 0 else r.b) in (q.a, q.b))
            if deg >= 3 or rng.random() < 0.3:
                cw = _crosswalk(r, end, rng)
                if cw is not None:
                    crosswalks.append(cw)

    lo = np.concatenate([r.center for r in roads] + [nodes]).min(axis=0) - margin
    hi = np.concatenate([r.center for r in roads] + [nodes]).max(axis=0) + margin
    town = Town(seed=seed, origin=np.zeros(2), nodes=nodes, junction_polys=polys, roads=roads, lanes=lanes,
                crosswalks=crosswalks, curb_height=curb, sidewalk_width=sidewalk,
                raster=np.zeros((1, 1), np.uint8), raster_origin=lo, road_distance=np.zeros((1, 1), np.float32))
    _rasterize(town, hi, rng)
    town.terrain = _terrain(rng)
    gx = town.raster_origin[0] + np.arange(int(np.ceil((hi[0] - lo[0]) / TERRAIN_RES)) + 2) * TERRAIN_RES
    gy = town.raster_origin[1] + np.arange(int(np.ceil((hi[1] - lo[1]) / TERRAIN_RES)) + 2) * TERRAIN_RES
    xx, yy = np.meshgrid(gx, gy)
    town.hgrid = np.zeros(xx.shape)
    for a, kx, ky, ph in town.terrain:
        town.hgrid += a * np.sin(kx * xx + ky * yy + ph)
    town.hgrid += _crown(town, xx, yy, float(rng.uniform(0.01, 0.025)))
    town.gmax = _kernels.slope_bound(town.hgrid, TERRAIN_RES)
    off = rng.uniform(-2000, 2000, 2).round(0)
    town.origin = np.array([587000.0, 4141000.0]) + off - lo
    return town


def _terrain(rng: np.random.Generator, waves: int = 3) -> np.ndarray:
    """Gently rolling ground: a few long sine waves (90-350 m) with grades of 0.4-1.6 % each (the road crown
    is added on top, see :func:`_crown`)."""
    rows = []
    for _ in range(waves):
        lam = rng.uniform(90.0, 350.0)
        grade = rng.uniform(0.004, 0.016)
        k = 2 * np.pi / lam
        th = rng.uniform(0, 2 * np.pi)
        rows.append([grade / k, k * np.cos(th), k * np.sin(th), rng.uniform(0, 2 * np.pi)])
    return np.array(rows)


def _crown(town: Town, xx: np.ndarray, yy: np.ndarray, grade: float) -> np.ndarray:
    """Road crown: the surface falls ``grade`` per metre from the centre line (and junction centres) to the
    curbs; beyond them the ground keeps the curb line's level."""
    from scipy.spatial import cKDTree

    pts, half = [], []
    for r in town.roads:
        c = geom.resample(r.center, 0.5)
        pts.append(c)
        half.append(np.full(len(c), 0.5 * (r.half_left + r.half_right)))
    for j, poly in town.junction_polys.items():
        pts.append(town.nodes[j][None, :])
        half.append(np.array([float(np.linalg.norm(poly - town.nodes[j], axis=1).min())]))
    tree = cKDTree(np.concatenate(pts))
    hw = np.concatenate(half)
    d, i = tree.query(np.stack([xx.ravel(), yy.ravel()], axis=1))
    return (-grade * np.minimum(d, hw[i])).reshape(xx.shape)


def _drop_edges(edges: list[tuple[int, int]], n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    edges = list(edges)
    order = rng.permutation(len(edges))
    keep = np.ones(len(edges), bool)
    target = int(round(len(edges) * rng.uniform(0.05, 0.2)))
    dropped = 0
    for e in order:
        if dropped >= target:
            break
        keep[e] = False
        deg = np.zeros(n, int)
        for k, (a, b) in enumerate(edges):
            if keep[k]:
                deg[a] += 1
                deg[b] += 1
        if deg.min() < 2 or not _connected([edges[k] for k in range(len(edges)) if keep[k]], n):
            keep[e] = True
        else:
            dropped += 1
    return [edges[k] for k in range(len(edges)) if keep[k]]


def _connected(edges: list[tuple[int, int]], n: int) -> bool:
    adj: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    seen, stack = {0}, [0]
    while stack:
        for m in adj[stack.pop()]:
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return len(seen) == n


def _trim(c: np.ndarray, pa: np.ndarray, ra: float, pb: np.ndarray, rb: float) -> np.ndarray:
    s = geom.arc_length(c)
    da = np.linalg.norm(c - pa, axis=1)
    db = np.linalg.norm(c - pb, axis=1)
    s0 = float(np.interp(ra, da[: len(da) // 2], s[: len(s) // 2]))
    s1 = float(np.interp(rb, db[::-1][: len(db) // 2], s[::-1][: len(s) // 2]))
    t = np.linspace(s0, s1, max(int(np.ceil(s1 - s0)), 2) + 1)
    return np.stack([np.interp(t, s, c[:, 0]), np.interp(t, s, c[:, 1])], axis=1)


def _end(r: RoadGeom, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """End point of the road at junction j, unit direction into the junction, and left normal of the road."""
    if r.a == j:
        p, q = r.center[0], r.center[1]
    else:
        p, q = r.center[-1], r.center[-2]
    u = (p - q) / np.linalg.norm(p - q)
    return p, u, geom.left_normals(r.center)[0 if r.a == j else -1]


def _junction_polygon(node: np.ndarray, inc: list[RoadGeom], j: int) -> np.ndarray:
    import shapely

    pts = []
    for r in inc:
        p, u, n = _end(r, j)
        reach = float(np.dot(node - p, u)) + 1.0
        for side in (r.half_left, -r.half_right):
            pts.append(p + n * side)
            pts.append(p + n * side + u * reach)
    hull = shapely.convex_hull(shapely.MultiPoint(np.array(pts)))
    coords = np.asarray(hull.exterior.coords)[:-1]
    if shapely.Polygon(coords).exterior.is_ccw is False:
        coords = coords[::-1]
    return coords


def _connect(j: int, inc: list[RoadGeom], lanes: dict[str, LaneGeom]) -> None:
    """Junction lanes from every incoming lane to the matching outgoing lane of each other road."""
    incoming: dict[str, list[str]] = {}
    outgoing: dict[str, list[str]] = {}
    for r in inc:
        incoming[r.id] = r.lanes_fwd if r.b == j else r.lanes_bwd
        outgoing[r.id] = r.lanes_bwd if r.b == j else r.lanes_fwd
        if r.a == r.b:  # pragma: no cover - grid roads never loop
            continue
    for rin in inc:
        for i, lin in enumerate(incoming[rin.id]):
            for rout in inc:
                if rout.id == rin.id:
                    continue
                outs = outgoing[rout.id]
                lout = outs[min(i, len(outs) - 1)]
                a, b = lanes[lin], lanes[lout]
                p0, p3 = a.center[-1], b.center[0]
                d0 = geom.tangents(a.center)[-1]
                d3 = geom.tangents(b.center)[0]
                dist = float(np.linalg.norm(p3 - p0))
                cross = d0[0] * d3[1] - d0[1] * d3[0]
                turn = "none" if abs(cross) < 0.5 else ("left" if cross > 0 else "right")
                curve = geom.bezier(p0, p0 + d0 * dist * 0.4, p3 - d3 * dist * 0.4, p3, max(int(dist), 4) + 1)
                cid = f"j{j}_{lin}_{lout}"
                lanes[cid] = LaneGeom(cid, curve, a.width, f"road_j{j}", junction=j, turn=turn,
                                      successors=[lout], predecessors=[lin])
                a.successors.append(cid)
                b.predecessors.append(cid)


def _crosswalk(r: RoadGeom, end: int, rng: np.random.Generator) -> np.ndarray | None:
    s = geom.arc_length(r.center)
    if s[-1] < 20:
        return None
    depth = float(rng.uniform(3.0, 4.5))
    gap = float(rng.uniform(0.3, 1.5))
    s0, s1 = (gap, gap + depth) if end == 0 else (s[-1] - gap - depth, s[-1] - gap)
    pos, head = geom.interp_pose(r.center, s, np.array([s0, s1]))
    n = np.stack([-np.sin(head), np.cos(head)], axis=1)
    return np.array([pos[0] - n[0] * r.half_right, pos[1] - n[1] * r.half_right,
                     pos[1] + n[1] * r.half_left, pos[0] + n[0] * r.half_left])


def _rasterize(town: Town, hi: np.ndarray, rng: np.random.Generator) -> None:
    res = town.res
    lo = town.raster_origin
    w = int(np.ceil((hi[0] - lo[0]) / res))
    h = int(np.ceil((hi[1] - lo[1]) / res))
    road = np.zeros((h, w), np.uint8)

    def pix(p: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray((p[:, :2] - lo) / res)

    for r in town.roads:
        _kernels.fill_polygon(road, pix(np.concatenate([r.left_edge, r.right_edge[::-1]])), 1)
    for poly in town.junction_polys.values():
        _kernels.fill_polygon(road, pix(poly), 1)
    dist = ndimage.distance_transform_edt(road == 0).astype(np.float32) * res
    raster = np.full((h, w), Mat.TERRAIN, np.uint8)
    raster[dist <= town.sidewalk_width] = Mat.SIDEWALK
    raster[road == 1] = Mat.ASPHALT

    def stamp(line: np.ndarray, code: int, width: float = 0.15, dash: tuple[float, float] | None = None) -> None:
        fine = geom.resample(line, 0.05)
        if dash is not None:
            s = geom.arc_length(fine)
            fine = fine[(s % (dash[0] + dash[1])) < dash[0]]
        if len(fine) == 0:
            return
        nrm = geom.left_normals(geom.resample(line, 0.05))[: len(fine)] if dash is None else None
        offs = np.linspace(-width / 2, width / 2, 3)
        pts = [fine] if nrm is None else [fine + nrm * o for o in offs]
        p = np.concatenate(pts)
        c = np.floor((p[:, 0] - lo[0]) / res).astype(np.int64)
        rr = np.floor((p[:, 1] - lo[1]) / res).astype(np.int64)
        ok = (rr >= 0) & (c >= 0) & (rr < h) & (c < w)
        sel = raster[rr[ok], c[ok]] == Mat.ASPHALT
        raster[rr[ok][sel], c[ok][sel]] = code

    for r in town.roads:
        c = r.center
        stamp(geom.offset(c, 0.12), Mat.MARKING)
        stamp(geom.offset(c, -0.12), Mat.MARKING)
        for i in range(1, r.n_fwd):
            stamp(geom.offset(c, -i * r.lane_width), Mat.MARKING, dash=(3.0, 6.0))
        for i in range(1, r.n_bwd):
            stamp(geom.offset(c, i * r.lane_width), Mat.MARKING, dash=(3.0, 6.0))
        stamp(geom.offset(c, -r.n_fwd * r.lane_width + 0.1), Mat.MARKING)
        stamp(geom.offset(c, r.n_bwd * r.lane_width - 0.1), Mat.MARKING)
        # stop lines across the incoming lanes, just inside the road ends
        for end, lanes_in, sign in ((1, r.n_fwd, -1), (0, r.n_bwd, 1)):
            s = geom.arc_length(c)
            s_stop = s[-1] - 0.3 if end == 1 else 0.3
            pos, head = geom.interp_pose(c, s, np.array([s_stop]))
            n = np.array([-np.sin(head[0]), np.cos(head[0])])
            seg = np.array([pos[0], pos[0] + sign * n * lanes_in * r.lane_width])
            for k in np.linspace(-0.2, 0.2, 5):
                stamp(seg + np.array([np.cos(head[0]), np.sin(head[0])]) * k, Mat.MARKING)
    for cw in town.crosswalks:
        a, b, c2, d = cw  # a->d across the road at one end, b->c2 at the other
        across = d - a
        wid = float(np.linalg.norm(across))
        along = b - a
        u = np.linspace(0, 1, max(int(np.linalg.norm(along) / 0.1), 2))
        v = np.arange(0.0, wid, 0.1)
        stripe = (np.floor(v / 0.55) % 2) == 0
        pts = a + u[:, None, None] * along + (v[stripe] / wid)[None, :, None] * across
        p = pts.reshape(-1, 2)
        cc = np.floor((p[:, 0] - lo[0]) / res).astype(np.int64)
        rr = np.floor((p[:, 1] - lo[1]) / res).astype(np.int64)
        ok = (rr >= 0) & (cc >= 0) & (rr < h) & (cc < w)
        sel = raster[rr[ok], cc[ok]] <= Mat.CROSSWALK
        raster[rr[ok][sel], cc[ok][sel]] = Mat.CROSSWALK
    town.raster = raster
    town.road_distance = dist
