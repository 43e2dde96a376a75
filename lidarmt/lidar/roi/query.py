"""Apollo's HD-map ROI query: which road and junction polygons surround the sensor (apollo-lop-facts.md §2.1).

:class:`HDMapRoi` reproduces ``HDMap::GetRoadBoundaries`` + ``HDMapInput::MergeBoundaryJunction`` +
``HdmapROIFilter``:

1. lanes whose central curve passes within ``map_radius`` (60 m) of the sensor's x/y: a KD-tree over the
   midpoints of all central-curve segments, queried with the radius padded by the longest half-segment, then the
   exact point-to-segment distance (<= radius);
2. for each such lane, its road section (through ``RoadSection.lane_id``), de-duplicated: a road inside a
   junction contributes the junction's polygon (de-duplicated by junction id), any other road the section's
   boundary: its LEFT_BOUNDARY edges, then its RIGHT_BOUNDARY edges reversed, every line segment downsampled at
   a 5° cumulative turn (NORMAL/UNKNOWN edges and holes are ignored);
3. road polygons first, then junction polygons; translated to the sensor position and rounded to float32 (the
   local frame), then drawn into the bitmap (:class:`~lidarmt.lidar.roi.bitmap.RoiMask`).

A lane that belongs to no road section, or a road naming a junction the map lacks, is skipped (Apollo's query
fails for the whole frame then; the real maps have neither). Maps without lanes (hand-drawn GeoJSON) are queried
by their polygons instead: a road section or junction is
taken when its outline comes within ``map_radius`` of the sensor or contains it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from lidarmt.lidar.roi.bitmap import RoiMask, _check_grid
from lidarmt.lidar.roi.errors import MapError, MapProjectionError, MapProjectionWarning, RoiArgumentError
from lidarmt.lidar.roi.model import EdgeType, HDMap, RoadSection
from lidarmt.types import Frame

KCUMULATE_THETA_DEG = 5.0
_DBL_EPS = float(np.finfo(np.float64).eps)
_RAD2DEG = 180.0 / math.pi


def downsample_boundary(points: np.ndarray, *, step: int = 1) -> np.ndarray:
    """Apollo's DownSampleBoundary of one line segment: keep every ``step``-th point; with more than 3 points
    keep the first, every point where the turning angle accumulated since the last kept point exceeds 5°, and
    the last. Returns (M, 2)."""
    pts = np.asarray(points, dtype=np.float64)[::step, :2]
    n = len(pts)
    if n <= 3:
        return pts.copy()
    keep = [0]
    anchor = 0
    acc = 0.0
    for i in range(2, n):
        p0, p1, p2 = pts[anchor], pts[i - 1], pts[i]
        v1x, v1y = p1[0] - p0[0], p1[1] - p0[1]
        v2x, v2y = p2[0] - p1[0], p2[1] - p1[1]
        dist = math.sqrt(v1x * v1x + v1y * v1y) * math.sqrt(v2x * v2x + v2y * v2y)
        if dist < _DBL_EPS:
            continue
        c = (v1x * v2x + v1y * v2y) / dist
        c = min(1.0, max(-1.0, c))
        acc += math.acos(c) * _RAD2DEG
        if acc - KCUMULATE_THETA_DEG > _DBL_EPS:
            keep.append(i - 1)
            anchor = i - 1
            acc = 0.0
    keep.append(n - 1)
    return pts[keep]


def section_polygon(section: RoadSection) -> np.ndarray:
    """The ROI polygon of a road section as Apollo builds it: downsampled LEFT_BOUNDARY points, then the
    downsampled RIGHT_BOUNDARY points in reverse order. (M, 2) world coordinates."""
    left: list[np.ndarray] = []
    right: list[np.ndarray] = []
    for e in section.edges:
        if e.type == EdgeType.LEFT_BOUNDARY:
            side = left
        elif e.type == EdgeType.RIGHT_BOUNDARY:
            side = right
        else:
            continue
        side.extend(downsample_boundary(piece) for piece in e.pieces() if len(piece))
    lp = np.concatenate(left) if left else np.zeros((0, 2))
    rp = np.concatenate(right) if right else np.zeros((0, 2))
    return np.concatenate([lp, rp[::-1]])


def junction_polygon(points: np.ndarray) -> np.ndarray:
    """A junction outline as Apollo's Polygon2d holds it: x/y, consecutive duplicates and a closing copy of the
    first point removed (neither changes the fill)."""
    p = np.asarray(points, dtype=np.float64)[:, :2]
    if len(p) == 0:
        return p
    keep = np.ones(len(p), dtype=bool)
    keep[1:] = np.hypot(*np.diff(p, axis=0).T) > 1e-7
    p = p[keep]
    while len(p) >= 2 and np.hypot(*(p[0] - p[-1])) <= 1e-10:
        p = p[:-1]
    return p


def _segments_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from point p to each segment a[i]-b[i]."""
    d = b - a
    L2 = np.einsum("ij,ij->i", d, d)
    t = np.where(L2 > 0, np.einsum("ij,ij->i", p - a, d) / np.where(L2 > 0, L2, 1.0), 0.0)
    t = np.clip(t, 0.0, 1.0)
    q = a + t[:, None] * d
    return np.hypot(q[:, 0] - p[0], q[:, 1] - p[1])


class _SegmentIndex:
    """KD-tree over segment midpoints; exact radius query by point-to-segment distance."""

    def __init__(self, polylines: Sequence[np.ndarray], owners: Sequence[int]) -> None:
        from scipy.spatial import cKDTree

        a_list, b_list, own = [], [], []
        for line, o in zip(polylines, owners, strict=True):
            line = np.asarray(line, dtype=np.float64)[:, :2]
            if len(line) == 1:
                line = np.vstack([line, line])
            if len(line) < 2:
                continue
            a_list.append(line[:-1])
            b_list.append(line[1:])
            own.append(np.full(len(line) - 1, o, dtype=np.int64))
        if a_list:
            self.a = np.concatenate(a_list)
            self.b = np.concatenate(b_list)
            self.owner = np.concatenate(own)
        else:
            self.a = self.b = np.zeros((0, 2))
            self.owner = np.zeros(0, dtype=np.int64)
        mid = (self.a + self.b) / 2
        self.pad = float(np.max(np.hypot(*(self.b - self.a).T)) / 2) if len(self.a) else 0.0
        self.tree = cKDTree(mid) if len(mid) else None

    def owners_within(self, p: np.ndarray, radius: float) -> np.ndarray:
        """Sorted unique owners with a segment within ``radius`` of p."""
        if self.tree is None:
            return np.zeros(0, dtype=np.int64)
        cand = self.tree.query_ball_point(p, radius + self.pad + 1e-9)
        if not cand:
            return np.zeros(0, dtype=np.int64)
        cand = np.asarray(cand, dtype=np.int64)
        d = _segments_distance(p, self.a[cand], self.b[cand])
        return np.unique(self.owner[cand[d <= radius]])


class HDMapRoi:
    """Apollo's HDMap ROI for an HD map: ``query`` gives the world polygons around a position, ``mask`` the
    bitmap for a pose.

    ``range`` is the half-size of the square bitmap (70 m as in Apollo 3.0; 120 m as the 2.x config had),
    ``cell`` its cell size, ``extend_dist`` how far intervals are widened, ``map_radius`` the lane search
    radius. ``max_offset`` (metres) is how far outside the map's bounds a sensor may be before the map is
    declared not to match the recording (a :class:`MapProjectionError`); nearer than that, a sensor with no lane
    within ``map_radius`` simply gets an empty ROI (Apollo then reports no obstacle for the frame).
    """

    def __init__(
        self,
        hdmap: HDMap,
        *,
        range: float = 70.0,  # noqa: A002
        cell: float = 0.25,
        extend_dist: float = 0.0,
        map_radius: float = 60.0,
        max_offset: float = 100_000.0,
    ) -> None:
        _check_grid(range, cell, extend_dist)
        if not (np.isfinite(map_radius) and map_radius > 0):
            raise RoiArgumentError(f"map_radius must be positive, not {map_radius!r}")
        self.hdmap = hdmap
        self.range = float(range)
        self.cell = float(cell)
        self.extend_dist = float(extend_dist)
        self.map_radius = float(map_radius)
        self.max_offset = float(max_offset)
        try:
            self.bounds = hdmap.bounds()
        except ValueError as err:
            raise MapError(f"{hdmap.source or 'the map'}: holds no geometry (no lane, boundary or junction)") from err
        self._section_poly: dict[tuple[int, int], np.ndarray] = {}
        self._cache: dict[bytes, RoiMask] = {}  # the last masks by pose (treat a returned mask as read-only)
        junction_index = {j.id: i for i, j in enumerate(hdmap.junctions)}
        self._junction_poly = [junction_polygon(j.polygon) for j in hdmap.junctions]
        # lane -> (road, section)
        where: dict[str, tuple[int, int]] = {}
        for ri, rd in enumerate(hdmap.roads):
            for si, sec in enumerate(rd.sections):
                for lid in sec.lane_ids:
                    where.setdefault(lid, (ri, si))
        self._road_junction = [junction_index.get(rd.junction_id) if rd.junction_id is not None else None
                               for rd in hdmap.roads]
        self.by_polygon = not hdmap.lanes
        if not self.by_polygon:
            self._lane_where = [where.get(ln.id) for ln in hdmap.lanes]
            self._index = _SegmentIndex([ln.central_curve for ln in hdmap.lanes], _arange(len(hdmap.lanes)))
        else:
            # hand-drawn maps: index the outlines themselves; owners >= 0 are sections, < 0 junctions
            self._owner_keys: list[tuple[str, int, int]] = []
            lines = []
            for ri, rd in enumerate(hdmap.roads):
                for si, _sec in enumerate(rd.sections):
                    poly = self._section(ri, si)
                    if len(poly) >= 3:
                        self._owner_keys.append(("section", ri, si))
                        lines.append(np.vstack([poly, poly[:1]]))
            for ji, poly in enumerate(self._junction_poly):
                if len(poly) >= 3:
                    self._owner_keys.append(("junction", ji, -1))
                    lines.append(np.vstack([poly, poly[:1]]))
            self._outlines = lines
            self._index = _SegmentIndex(lines, _arange(len(lines)))

    # ------------------------------------------------------------------------------------------ query

    def _section(self, ri: int, si: int) -> np.ndarray:
        key = (ri, si)
        poly = self._section_poly.get(key)
        if poly is None:
            poly = section_polygon(self.hdmap.roads[ri].sections[si])
            self._section_poly[key] = poly
        return poly

    def _check_position(self, p: np.ndarray) -> None:
        if not np.all(np.isfinite(p)):
            raise RoiArgumentError(f"sensor position {p.tolist()} is not finite")
        x0, y0, x1, y1 = self.bounds
        dx = max(x0 - p[0], 0.0, p[0] - x1)
        dy = max(y0 - p[1], 0.0, p[1] - y1)
        off = math.hypot(dx, dy)
        if off > self.max_offset:
            src = self.hdmap.source or "the map"
            raise MapProjectionError(
                f"sensor position ({p[0]:.1f}, {p[1]:.1f}) is {off / 1000:,.0f} km outside the bounds of {src} "
                f"(x {x0:.0f}..{x1:.0f}, y {y0:.0f}..{y1:.0f}): the recording's poses and the map use different "
                "coordinates (projection/UTM zone, or a map of another place); use the map of the recorded area"
            )
        if off > self.map_radius:
            warnings.warn(
                f"sensor position ({p[0]:.1f}, {p[1]:.1f}) is {off:.0f} m outside the map's bounds: empty ROI",
                MapProjectionWarning,
                stacklevel=3,
            )

    def query_with_ids(self, position_xy: Sequence[float]) -> tuple[list[np.ndarray], list[str]]:
        """World polygons around a position and their ids (``road_id/section_id`` or ``junction:id``)."""
        p = np.asarray(position_xy, dtype=np.float64).reshape(-1)[:2]
        self._check_position(p)
        polys: list[np.ndarray] = []
        ids: list[str] = []
        jpolys: list[np.ndarray] = []
        jids: list[str] = []
        seen_sections: set[tuple[int, int]] = set()
        seen_junctions: set[int] = set()
        roads = self.hdmap.roads

        def add_section(ri: int, si: int) -> None:
            if (ri, si) in seen_sections:
                return
            seen_sections.add((ri, si))
            poly = self._section(ri, si)
            if len(poly):
                polys.append(poly)
                ids.append(f"{roads[ri].id}/{roads[ri].sections[si].id}")

        def add_junction(ji: int) -> None:
            if ji in seen_junctions:
                return
            seen_junctions.add(ji)
            poly = self._junction_poly[ji]
            if len(poly):
                jpolys.append(poly)
                jids.append(f"junction:{self.hdmap.junctions[ji].id}")

        if not self.by_polygon:
            for li in self._index.owners_within(p, self.map_radius):
                w = self._lane_where[li]
                if w is None:
                    continue
                ri, si = w
                jid = roads[ri].junction_id
                if jid is not None:
                    ji = self._road_junction[ri]
                    if ji is not None:
                        add_junction(ji)
                else:
                    add_section(ri, si)
        else:
            import shapely

            hit = set(self._index.owners_within(p, self.map_radius).tolist())
            pt = shapely.points(p[0], p[1])
            for o, line in enumerate(self._outlines):
                if o not in hit and shapely.contains(shapely.polygons(line), pt):
                    hit.add(o)
            for o in sorted(hit):
                kind, a, b = self._owner_keys[o]
                if kind == "section":
                    add_section(a, b)
                else:
                    add_junction(a)
        return polys + jpolys, ids + jids

    def query(self, position_xy: Sequence[float]) -> list[np.ndarray]:
        """The ROI polygons (world x/y, (M, 2) each) Apollo takes around a sensor position: roads, then
        junctions. Empty when no lane is within ``map_radius``."""
        return self.query_with_ids(position_xy)[0]

    # ------------------------------------------------------------------------------------------ mask

    def mask(self, pose: np.ndarray) -> RoiMask:
        """The ROI bitmap for a pose (4x4, world <- sensor). For a map drawn in sensor coordinates
        (GeoJSON ``"frame": "sensor"``) the pose is ignored (it may be None)."""
        if self.hdmap.frame == "sensor":
            return self._sensor_mask()
        if pose is None:
            raise RoiArgumentError("an HD-map ROI needs the frame's pose (world <- sensor); the frame has none")
        pose = np.asarray(pose, dtype=np.float64)
        if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
            raise RoiArgumentError(f"pose must be a finite 4x4 matrix, got shape {pose.shape}")
        key = pose.tobytes()
        hit = self._cache.get(key)
        if hit is not None:  # e.g. a source frame and its mutated follow-ups share the pose
            return hit
        mask = self._mask(pose)
        if len(self._cache) >= 16:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = mask
        return mask

    def _mask(self, pose: np.ndarray) -> RoiMask:
        position = pose[:3, 3]
        polys, ids = self.query_with_ids(position[:2])
        # TransformFrame: translate to the sensor; Apollo's local polygons are float32
        local = [(poly - position[:2]).astype(np.float32).astype(np.float64) for poly in polys]
        note = "" if polys else f"no lane within {self.map_radius:g} m of the sensor: no ROI (Apollo reports no obstacle)"
        return RoiMask.from_polygons(local, pose[:3, :3], range=self.range, cell=self.cell,
                                     extend_dist=self.extend_dist, note=note, polygon_ids=ids)

    def frame_mask(self, frame: Frame) -> RoiMask:
        """The ROI bitmap of a frame (its pose)."""
        return self.mask(frame.pose)

    def _sensor_mask(self) -> RoiMask:
        cached = self._cache.get(b"sensor")
        if cached is None:
            cached = self._cache[b"sensor"] = self._build_sensor_mask()
        return cached

    def _build_sensor_mask(self) -> RoiMask:
        polys, ids = self._sensor_polys()
        local = [p.astype(np.float32).astype(np.float64) for p in polys]
        return RoiMask.from_polygons(local, np.eye(3), range=self.range, cell=self.cell,
                                     extend_dist=self.extend_dist, polygon_ids=ids)

    def _sensor_polys(self) -> tuple[list[np.ndarray], list[str]]:
        p = np.zeros(2)
        saved = self.max_offset
        try:
            self.max_offset = math.inf
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MapProjectionWarning)
                return self.query_with_ids(p)
        finally:
            self.max_offset = saved


def _arange(n: int) -> list[int]:
    return list(range(n))


class SensorPolygonRoi(HDMapRoi):
    """ROI drawn in sensor coordinates (GeoJSON ``"frame": "sensor"``): the same Apollo bitmap, no pose needed.

    ``SensorPolygonRoi(hdmap).mask()`` returns the :class:`RoiMask` (identity rotation); polygons within
    ``map_radius`` of the sensor origin are used.
    """

    def __init__(self, hdmap: HDMap, **kwargs) -> None:
        if hdmap.frame != "sensor":
            raise RoiArgumentError(
                f"{hdmap.source or 'this map'} is in world coordinates; use HDMapRoi(map).mask(pose) instead"
            )
        super().__init__(hdmap, **kwargs)

    def mask(self, pose: np.ndarray | None = None) -> RoiMask:  # type: ignore[override]
        return self._sensor_mask()


# ----------------------------------------------------------------------------------------------- label ROI

#: SemanticKITTI ids of the labelled ground a label ROI covers: road, parking, sidewalk, other-ground.
GROUND_LABELS: tuple[int, ...] = (40, 44, 48, 49)


class LabelRoi:
    """Apollo's ROI for frames that carry per-point ground labels instead of an HD map (SemanticKITTI
    ``labels/``, KITTI ``road_label/``): an *area*, as Apollo's HD-map ROI is, not a set of points.

    ``LabelRoi().mask(frame)`` returns a :class:`~lidarmt.lidar.roi.bitmap.RoiMask` in the sensor frame (identity
    rotation), built like this:

    1. the frame's points labelled as ground (``ids``: road 40, parking 44, sidewalk 48, other-ground 49 in
       SemanticKITTI ids; the upper 16 bits, the instance id, are ignored) are rasterised into the ROI's
       ``cell`` grid over ``[-range, range)²``;
    2. the labels mark surface points only, so the ground hidden under and behind a car or a pedestrian is
       missing: the cells are closed morphologically with a disk of ``close_radius`` metres and enclosed holes
       smaller than ``hole_area`` m² are filled. What remains is the drivable area an HD map would give;
    3. like Apollo's bitmap, membership is by x/y only: **every point above that area is in the ROI, whatever
       its own label** (the points of a car standing on the road are inside it, and so are points injected
       there), and a point outside ``[-range, range)²`` never is.

    The mask is a function of the labelled frame alone, so a fuzz campaign builds it once from the source frame
    and uses it for every follow-up: the added points are classified by their position only. A frame without
    labels is refused (:class:`~lidarmt.lidar.roi.errors.RoiArgumentError`, naming the frame and what to pass instead).
    """

    def __init__(
        self,
        *,
        range: float = 70.0,  # noqa: A002
        cell: float = 0.25,
        ids: Sequence[int] = GROUND_LABELS,
        close_radius: float = 3.0,
        hole_area: float = 200.0,
    ) -> None:
        _check_grid(range, cell, 0.0)
        if not (np.isfinite(close_radius) and close_radius >= 0):
            raise RoiArgumentError(f"close_radius must be >= 0 metres, not {close_radius!r}")
        if not (np.isfinite(hole_area) and hole_area >= 0):
            raise RoiArgumentError(f"hole_area must be >= 0 m², not {hole_area!r}")
        self.range = float(range)
        self.cell = float(cell)
        self.ids = tuple(int(i) for i in ids)
        self.close_radius = float(close_radius)
        self.hole_area = float(hole_area)

    @staticmethod
    def has_labels(frame: Frame) -> bool:
        """Whether the frame carries per-point semantic labels (one per point)."""
        lb = frame.labels
        sem = None if lb is None else lb.point_semantic
        return sem is not None and len(sem) == len(frame)

    def ground(self, frame: Frame) -> np.ndarray:
        """Per point: is it labelled as ground (one of ``ids``)?"""
        if not self.has_labels(frame):
            src = frame.provenance.source if frame.provenance else "the recording"
            raise RoiArgumentError(
                f"{src}: frame {frame.index} has no per-point ground labels (SemanticKITTI labels/ or KITTI "
                "road_label/), so a label ROI cannot be built; give the ROI as a map instead (--map MAP, an Apollo "
                "map or a GeoJSON drawn in the sensor frame)"
            )
        sem = np.asarray(frame.labels.point_semantic).astype(np.int64) & 0xFFFF  # type: ignore[union-attr]
        return np.isin(sem, self.ids)

    def area(self, frame: Frame) -> np.ndarray:
        """The dense boolean grid ``[ix, iy]`` of the area (the layout of :meth:`RoiMask.grid`)."""
        from scipy import ndimage

        dims = int(2 * self.range / self.cell)
        lab = self.ground(frame)
        # the cell of a point as the bitmap looks it up: float32 coordinates, truncated index from -range
        x = frame.points["x"][lab].astype(np.float32).astype(np.float64)
        y = frame.points["y"][lab].astype(np.float32).astype(np.float64)
        ok = (np.isfinite(x) & np.isfinite(y) & (x >= -self.range) & (x < self.range) & (y >= -self.range)
              & (y < self.range))
        r = int(math.ceil(self.close_radius / self.cell))
        pad = r + 1  # closing must not erode the area at the grid's edge
        occ = np.zeros((dims + 2 * pad, dims + 2 * pad), dtype=bool)
        ix = np.minimum(((x[ok] + self.range) / self.cell).astype(np.int64), dims - 1)
        iy = np.minimum(((y[ok] + self.range) / self.cell).astype(np.int64), dims - 1)
        occ[ix + pad, iy + pad] = True
        if not occ.any():
            return np.zeros((dims, dims), dtype=bool)
        if r > 0:
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            occ = ndimage.binary_closing(occ, structure=xx * xx + yy * yy <= r * r)
        if self.hole_area > 0:
            holes, nh = ndimage.label(~occ)
            if nh:
                sizes = np.bincount(holes.ravel(), minlength=nh + 1) * self.cell * self.cell
                small = sizes < self.hole_area
                small[np.unique(np.r_[holes[0], holes[-1], holes[:, 0], holes[:, -1]])] = False
                small[0] = False
                occ |= small[holes]
        return occ[pad : pad + dims, pad : pad + dims]

    def mask(self, frame: Frame) -> RoiMask:
        """The label ROI of ``frame`` as Apollo's bitmap (sensor frame)."""
        grid = self.area(frame)
        note = "" if grid.any() else (f"no point labelled as ground ({', '.join(map(str, self.ids))}) within "
                                      f"±{self.range:g} m: no ROI")
        return RoiMask.from_grid(grid, range=self.range, cell=self.cell, note=note)

    def frame_mask(self, frame: Frame) -> RoiMask:
        """Alias of :meth:`mask` (the name :class:`HDMapRoi` uses for a frame)."""
        return self.mask(frame)

    def __repr__(self) -> str:
        return (f"LabelRoi(range={self.range:g}, cell={self.cell:g}, ids={self.ids}, "
                f"close_radius={self.close_radius:g}, hole_area={self.hole_area:g})")


def label_roi(frame: Frame, **options) -> RoiMask:
    """``LabelRoi(**options).mask(frame)``: the ROI of a frame from its ground labels (see :class:`LabelRoi`)."""
    return LabelRoi(**options).mask(frame)


def region_roi(region, *, range: float = 70.0, cell: float = 0.25) -> RoiMask:  # noqa: A002
    """The labelled region of a frame (:class:`lidarmt.types.LabelledRegion`, e.g. KITTI's camera-2 view) as
    Apollo's ROI bitmap in the sensor frame: every cell whose centre lies in the region, within ±``range`` m.

    ``--roi labels`` uses it for frames whose labels are boxes with such a region but no per-point ground labels
    (a KITTI raw drive with its tracklets): the ROI is then the area the labels cover, road or not, and the
    points MR1 adds fall beside and behind the car, where nothing is labelled."""
    _check_grid(range, cell, 0.0)
    dims = int(round(2 * range / cell))
    centres = -range + (np.arange(dims) + 0.5) * cell
    xx, yy = np.meshgrid(centres, centres, indexing="ij")
    grid = region.contains(np.c_[xx.ravel(), yy.ravel()]).reshape(dims, dims)
    note = "" if grid.any() else f"the labelled region ({region.describe()}) holds no cell within ±{range:g} m"
    return RoiMask.from_grid(grid, range=range, cell=cell, note=note)
