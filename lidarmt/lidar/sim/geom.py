"""Small geometry helpers of the simulator: polylines in the plane and triangle-mesh primitives.

Meshes are pairs ``(vertices (N, 3) float64, triangles (M, 3) int64)`` built in an object's own frame
(x forward, y left, z up, origin on the ground under the object's centre) and placed with :func:`place`.
Triangles are wound counter-clockwise seen from outside, though the ray caster does not depend on it.
"""

from __future__ import annotations

import numpy as np

Mesh = tuple[np.ndarray, np.ndarray]

# ----------------------------------------------------------------------------------------------- polylines


def arc_length(poly: np.ndarray) -> np.ndarray:
    """Cumulative length along a polyline (N, 2|3), starting at 0."""
    seg = np.linalg.norm(np.diff(poly[:, :2], axis=0), axis=1)
    return np.concatenate([[0.0], np.cumsum(seg)])


def resample(poly: np.ndarray, step: float) -> np.ndarray:
    """The polyline resampled at (about) equal spacing ``step``, keeping both ends."""
    s = arc_length(poly)
    n = max(int(np.ceil(s[-1] / step)), 1)
    t = np.linspace(0.0, s[-1], n + 1)
    return np.stack([np.interp(t, s, poly[:, k]) for k in range(poly.shape[1])], axis=1)


def tangents(poly: np.ndarray) -> np.ndarray:
    """Unit tangent (N, 2) at each vertex (central differences)."""
    p = poly[:, :2]
    d = np.gradient(p, axis=0) if len(p) > 2 else np.repeat(p[-1:] - p[:1], len(p), axis=0)
    n = np.linalg.norm(d, axis=1, keepdims=True)
    return d / np.maximum(n, 1e-12)


def left_normals(poly: np.ndarray) -> np.ndarray:
    """Unit normal (N, 2) pointing to the left of the direction of travel."""
    t = tangents(poly)
    return np.stack([-t[:, 1], t[:, 0]], axis=1)


def offset(poly: np.ndarray, dist: float | np.ndarray) -> np.ndarray:
    """The polyline shifted ``dist`` metres to its left (negative: right)."""
    d = np.asarray(dist, dtype=np.float64)
    return poly[:, :2] + left_normals(poly) * (d[:, None] if d.ndim else d)


def interp_pose(poly: np.ndarray, s_cum: np.ndarray, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Position (…, 2) and heading (…) at arc length ``s`` (clamped to the ends) along a polyline."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, s_cum[-1])
    i = np.clip(np.searchsorted(s_cum, s, side="right") - 1, 0, len(s_cum) - 2)
    ds = np.maximum(s_cum[i + 1] - s_cum[i], 1e-12)
    f = (s - s_cum[i]) / ds
    a, b = poly[i, :2], poly[i + 1, :2]
    pos = a + (b - a) * f[..., None]
    d = b - a
    return pos, np.arctan2(d[..., 1], d[..., 0])


def bezier(p0: np.ndarray, p1: np.ndarray, p2: np.ndarray, p3: np.ndarray, n: int) -> np.ndarray:
    """A cubic Bézier curve sampled at ``n`` points."""
    t = np.linspace(0.0, 1.0, n)[:, None]
    u = 1.0 - t
    return u**3 * p0 + 3 * u * u * t * p1 + 3 * u * t * t * p2 + t**3 * p3


def rot2(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s], [s, c]])


# ----------------------------------------------------------------------------------------------- meshes


def merge(meshes: list[Mesh]) -> Mesh:
    """One mesh from several (triangle indices are shifted)."""
    vs, fs, n = [], [], 0
    for v, f in meshes:
        vs.append(v)
        fs.append(f + n)
        n += len(v)
    if not vs:
        return np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64)
    return np.concatenate(vs), np.concatenate(fs)


def transform(mesh: Mesh, rot: np.ndarray | None = None, trans: np.ndarray | None = None) -> Mesh:
    v, f = mesh
    if rot is not None:
        v = v @ np.asarray(rot).T
    if trans is not None:
        v = v + np.asarray(trans)
    return v, f


def rot_x(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def rot_y(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def place(mesh: Mesh, x: float, y: float, z: float, yaw: float) -> Mesh:
    """The mesh rotated by ``yaw`` about +z and moved to (x, y, z)."""
    return transform(mesh, rot_z(yaw), np.array([x, y, z]))


_BOX_F = np.array(
    [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
     [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]],
    dtype=np.int64,
)


def box(lx: float, ly: float, lz: float, *, center: tuple[float, float, float] = (0, 0, 0)) -> Mesh:
    """An axis-aligned box of size (lx, ly, lz) around ``center``."""
    hx, hy, hz = lx / 2, ly / 2, lz / 2
    v = np.array(
        [[-hx, -hy, -hz], [hx, -hy, -hz], [hx, hy, -hz], [-hx, hy, -hz],
         [-hx, -hy, hz], [hx, -hy, hz], [hx, hy, hz], [-hx, hy, hz]]
    ) + np.asarray(center, dtype=np.float64)
    return v, _BOX_F.copy()


def segment_box(a: np.ndarray, b: np.ndarray, thickness: float) -> Mesh:
    """A square-section beam from point a to point b (limbs, frame tubes)."""
    ax, ay, az = (float(v) for v in a)
    dx, dy, dz = float(b[0]) - ax, float(b[1]) - ay, float(b[2]) - az
    length = (dx * dx + dy * dy + dz * dz) ** 0.5
    if length < 1e-9:
        return box(thickness, thickness, thickness, center=(ax, ay, az))
    zx, zy, zz = dx / length, dy / length, dz / length
    hx, hy, hz = (1.0, 0.0, 0.0) if abs(zx) < 0.9 else (0.0, 1.0, 0.0)
    xx, xy, xz = hy * zz - hz * zy, hz * zx - hx * zz, hx * zy - hy * zx  # helper x z
    n = (xx * xx + xy * xy + xz * xz) ** 0.5
    xx, xy, xz = xx / n, xy / n, xz / n
    yx, yy, yz = zy * xz - zz * xy, zz * xx - zx * xz, zx * xy - zy * xx  # z x x
    r = np.array([[xx, yx, zx], [xy, yy, zy], [xz, yz, zz]])
    v, f = box(thickness, thickness, length, center=(0, 0, length / 2))
    return v @ r.T + (ax, ay, az), f


def cylinder(radius: float, height: float, *, segments: int = 12, radius_top: float | None = None,
             capped: bool = True) -> Mesh:
    """A vertical (tapered) cylinder standing on z = 0."""
    rt = radius if radius_top is None else radius_top
    ang = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    c, s = np.cos(ang), np.sin(ang)
    bottom = np.stack([radius * c, radius * s, np.zeros(segments)], axis=1)
    top = np.stack([rt * c, rt * s, np.full(segments, height)], axis=1)
    v = [bottom, top]
    i = np.arange(segments)
    j = (i + 1) % segments
    f = [np.stack([i, j, j + segments], 1), np.stack([i, j + segments, i + segments], 1)]
    if capped:
        v.append(np.array([[0, 0, 0], [0, 0, height]], dtype=float))
        cb, ct = 2 * segments, 2 * segments + 1
        f.append(np.stack([np.full(segments, cb), j, i], 1))
        f.append(np.stack([np.full(segments, ct), i + segments, j + segments], 1))
    return np.concatenate(v), np.concatenate(f).astype(np.int64)


def wheel(radius: float, width: float, *, segments: int = 12) -> Mesh:
    """A wheel (closed cylinder) with its axis along y, centred at the origin."""
    v, f = cylinder(radius, width, segments=segments)
    v = v - [0, 0, width / 2]
    return v @ rot_x(np.pi / 2).T, f


def ring(radius: float, tube: float, *, segments: int = 16, sides: int = 4) -> Mesh:
    """A torus with its axis along y (a bicycle tyre), centred at the origin."""
    u = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    w = np.linspace(0, 2 * np.pi, sides, endpoint=False)
    uu, ww = np.meshgrid(u, w, indexing="ij")
    r = radius + tube * np.cos(ww)
    v = np.stack([r * np.cos(uu), tube * np.sin(ww), r * np.sin(uu)], axis=-1).reshape(-1, 3)
    i, k = np.meshgrid(np.arange(segments), np.arange(sides), indexing="ij")
    a = i * sides + k
    b = ((i + 1) % segments) * sides + k
    c = ((i + 1) % segments) * sides + (k + 1) % sides
    d = i * sides + (k + 1) % sides
    f = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    return v, f.astype(np.int64)


def _icosahedron() -> Mesh:
    t = (1 + 5**0.5) / 2
    v = np.array(
        [[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
         [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]],
        dtype=float,
    )
    f = np.array(
        [[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4], [11, 10, 2],
         [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11],
         [6, 2, 10], [8, 6, 7], [9, 8, 1]],
        dtype=np.int64,
    )
    return v / np.linalg.norm(v, axis=1, keepdims=True), f


def _subdivide(mesh: Mesh) -> Mesh:
    v, f = mesh
    verts = list(v)
    cache: dict[tuple[int, int], int] = {}

    def mid(a: int, b: int) -> int:
        key = (min(a, b), max(a, b))
        if key not in cache:
            m = (verts[a] + verts[b]) / 2
            verts.append(m / np.linalg.norm(m))
            cache[key] = len(verts) - 1
        return cache[key]

    out = []
    for a, b, c in f:
        ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
        out += [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
    return np.array(verts), np.array(out, dtype=np.int64)


_SPHERES: dict[int, Mesh] = {}


def sphere(radii: tuple[float, float, float], *, center=(0.0, 0.0, 0.0), subdiv: int = 1,
           jitter: np.ndarray | None = None) -> Mesh:
    """An ellipsoid with the given semi-axes; ``jitter`` (one factor per vertex) makes it lumpy."""
    if subdiv not in _SPHERES:
        m = _icosahedron()
        for _ in range(subdiv):
            m = _subdivide(m)
        _SPHERES[subdiv] = m
    v, f = _SPHERES[subdiv]
    v = v.copy()
    if jitter is not None:
        v = v * jitter[: len(v), None]
    return v * np.asarray(radii) + np.asarray(center), f.copy()


def sphere_vertex_count(subdiv: int) -> int:
    return len(sphere((1, 1, 1), subdiv=subdiv)[0])


def extrude_xz(profile: np.ndarray, width_bottom: float, width_top: float | None = None) -> Mesh:
    """A prism from a convex profile in the x-z plane (counter-clockwise), extruded symmetrically along y.

    The half-width is interpolated linearly in z between ``width_bottom`` (at the profile's lowest z) and
    ``width_top`` (at its highest z), which tapers cabins and bus roofs.
    """
    p = np.asarray(profile, dtype=float)
    k = len(p)
    wt = width_bottom if width_top is None else width_top
    z0, z1 = p[:, 1].min(), p[:, 1].max()
    frac = (p[:, 1] - z0) / max(z1 - z0, 1e-9)
    hw = (width_bottom + (wt - width_bottom) * frac) / 2
    left = np.stack([p[:, 0], hw, p[:, 1]], axis=1)
    right = np.stack([p[:, 0], -hw, p[:, 1]], axis=1)
    v = np.concatenate([left, right])
    i = np.arange(k)
    j = (i + 1) % k
    f = [np.stack([i, j, j + k], 1), np.stack([i, j + k, i + k], 1)]
    fan = np.arange(1, k - 1)
    f.append(np.stack([np.zeros(k - 2, dtype=int), fan, fan + 1], 1))
    f.append(np.stack([np.full(k - 2, k), fan + 1 + k, fan + k], 1))
    return v, np.concatenate(f).astype(np.int64)
