"""The ROI bitmap (Apollo's ``Bitmap2D`` filled by ``DrawPolygonMask``) and point-label ROIs.

:class:`RoiMask` is what perception and the fuzzer use: which sensor-frame points lie in the region of interest.
It is built from polygons in Apollo's *local* frame (world axes translated to the sensor position) and tests a
sensor-frame point by rotating it with the pose rotation (no translation) and looking its cell up, exactly as
Apollo's ``HdmapROIFilter`` does (apollo-lop-facts.md §2.2-2.4). Points outside ``[-range, range)²`` are never
in the ROI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lidarmt.lidar.roi.errors import RoiArgumentError
from lidarmt.types import Frame

XMAJOR = 0
YMAJOR = 1


def _check_grid(rng: float, cell: float, extend_dist: float) -> None:
    if not (np.isfinite(rng) and rng > 0):
        raise RoiArgumentError(f"ROI range must be a positive number of metres, not {rng!r}")
    if not (np.isfinite(cell) and 0 < cell <= rng):
        raise RoiArgumentError(f"ROI cell size must be positive and at most the range, not {cell!r}")
    if not (np.isfinite(extend_dist) and extend_dist >= 0):
        raise RoiArgumentError(f"ROI extend_dist must be >= 0, not {extend_dist!r}")
    if 2 * rng / cell > 20000:
        raise RoiArgumentError(f"ROI grid of {2 * rng / cell:.0f}² cells is too large; raise the cell size")


def major_direction(polygons: Sequence[np.ndarray], rng: float) -> int:
    """Apollo's GetMajorDirection: XMAJOR (0) when the clipped vertex bounding box is narrower in x, else YMAJOR."""
    x0 = y0 = rng
    x1 = y1 = -rng
    for p in polygons:
        if len(p):
            x0 = min(x0, float(p[:, 0].min()))
            y0 = min(y0, float(p[:, 1].min()))
            x1 = max(x1, float(p[:, 0].max()))
            y1 = max(y1, float(p[:, 1].max()))
    x0, y0, x1, y1 = max(x0, -rng), max(y0, -rng), min(x1, rng), min(y1, rng)
    return XMAJOR if (x1 - x0) < (y1 - y0) else YMAJOR


def _columns(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """x, y (and z) columns of an (N, 2|3) array or a structured point array, without copying."""
    if xy.dtype.names:
        return xy["x"], xy["y"], xy["z"] if "z" in xy.dtype.names else None
    a = np.asarray(xy)
    if a.ndim != 2 or a.shape[1] not in (2, 3, 4):
        raise RoiArgumentError(f"points must have shape (N, 2) or (N, 3), got {a.shape}")
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    return a[:, 0], a[:, 1], a[:, 2] if a.shape[1] >= 3 else None


@dataclass(eq=False)
class RoiMask:
    """Apollo's ROI bitmap for one frame; implements :class:`lidarmt.types.Roi`.

    ``polygons`` are the ROI polygons in the local frame (world axes, origin at the sensor), ``rotation`` the
    pose rotation (3x3, world <- sensor) that takes sensor-frame points into that frame (identity for ROIs drawn
    in sensor coordinates). ``bitmap`` is ``(rows, blocks)`` uint64 in Apollo's layout (see
    :mod:`lidarmt.lidar.roi._kernels`), ``major`` the scan axis (0 = x, 1 = y). ``note`` says why an ROI is empty.
    """

    bitmap: np.ndarray
    major: int
    range: float
    cell: float
    rotation: np.ndarray
    polygons: list[np.ndarray] = field(default_factory=list)
    extend_dist: float = 0.0
    note: str = ""
    polygon_ids: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def from_polygons(
        cls,
        local_polygons: Sequence[np.ndarray],
        rotation: np.ndarray | None = None,
        *,
        range: float = 70.0,  # noqa: A002  (Apollo's name)
        cell: float = 0.25,
        extend_dist: float = 0.0,
        note: str = "",
        polygon_ids: Sequence[str] = (),
    ) -> RoiMask:
        """Scan-convert local-frame polygons (each (n, 2+) array, in order) into Apollo's bitmap.

        Each polygon is filled by the even-odd rule on its own (so two rings joined into one vertex list make a
        hole); polygons are OR-ed together. Coordinates are used as given (Apollo rounds them to float32 first,
        which :class:`~lidarmt.lidar.roi.query.HDMapRoi` does).
        """
        import lidarmt.lidar.roi._kernels as _kernels

        _check_grid(range, cell, extend_dist)
        polys = [np.ascontiguousarray(np.asarray(p, dtype=np.float64)[:, :2]) for p in local_polygons]
        polys = [p for p in polys if len(p)]
        dims = int(2 * range / cell)
        bitmap = np.zeros((dims, (dims >> 6) + 1), dtype=np.uint64)
        major = major_direction(polys, range)
        if polys:
            verts = np.concatenate(polys)
            starts = np.zeros(len(polys) + 1, dtype=np.int64)
            starts[1:] = np.cumsum([len(p) for p in polys])
            _kernels.draw_polygons(verts, starts, major, float(range), float(cell), float(extend_dist), bitmap)
        rot = np.eye(3) if rotation is None else np.asarray(rotation, dtype=np.float64)
        if rot.shape == (4, 4):
            rot = rot[:3, :3]
        if rot.shape != (3, 3):
            raise RoiArgumentError(f"rotation must be 3x3 (or a 4x4 pose), got {rot.shape}")
        if not polys and not note:
            note = "no ROI polygon"
        return cls(bitmap, major, float(range), float(cell), np.ascontiguousarray(rot), polys, float(extend_dist),
                   note, list(polygon_ids))

    @classmethod
    def from_grid(
        cls,
        grid: np.ndarray,
        rotation: np.ndarray | None = None,
        *,
        range: float = 70.0,  # noqa: A002  (Apollo's name)
        cell: float = 0.25,
        note: str = "",
    ) -> RoiMask:
        """A mask from a dense boolean grid ``[ix, iy]`` of ``2 * range / cell`` cells a side (the layout
        :meth:`grid` returns: cell ``ix`` covers local x in ``[-range + ix * cell, -range + (ix + 1) * cell)``).

        This is how an ROI that is an *area* rather than polygons (the ground a frame's labels cover,
        :class:`~lidarmt.lidar.roi.query.LabelRoi`) becomes the same Apollo bitmap the HD-map ROI uses, so that
        perception, the injector, the pictures and the bundles treat both alike. ``polygons`` stays empty.
        """
        _check_grid(range, cell, 0.0)
        dims = int(2 * range / cell)
        g = np.asarray(grid, dtype=bool)
        if g.shape != (dims, dims):
            raise RoiArgumentError(f"ROI grid must be {dims}x{dims} cells for range {range:g} m and cell {cell:g} m, "
                                   f"got shape {g.shape}")
        blocks = (dims >> 6) + 1
        padded = np.zeros((dims, blocks * 64), dtype=bool)
        padded[:, :dims] = g
        # MSB-first bits in uint64 blocks, as Bitmap2D stores them (and _kernels._test reads them)
        bitmap = np.packbits(padded, axis=1, bitorder="big").view(">u8").astype(np.uint64)
        rot = np.eye(3) if rotation is None else np.asarray(rotation, dtype=np.float64)
        if rot.shape == (4, 4):
            rot = rot[:3, :3]
        if rot.shape != (3, 3):
            raise RoiArgumentError(f"rotation must be 3x3 (or a 4x4 pose), got {rot.shape}")
        if not g.any() and not note:
            note = "no ROI cell"
        return cls(np.ascontiguousarray(bitmap), XMAJOR, float(range), float(cell), np.ascontiguousarray(rot), [],
                   0.0, note, [])

    # ------------------------------------------------------------------------------------------ Roi protocol

    @property
    def empty(self) -> bool:
        """True when no cell is in the ROI (no polygon near the sensor, or all of them outside the range)."""
        return not bool(self.bitmap.any())

    def contains(self, xy: np.ndarray) -> np.ndarray:
        """ROI membership of sensor-frame points ((N, 2), (N, 3) or a structured point array); z is used only
        by the rotation (as in Apollo) and taken as 0 when absent."""
        import lidarmt.lidar.roi._kernels as _kernels

        x, y, z = _columns(np.asarray(xy) if not hasattr(xy, "dtype") else xy)
        out = np.empty(len(x), dtype=np.bool_)
        if len(x) == 0:
            return out
        rot = self.rotation[:2]
        if z is None:
            _kernels.lookup_sensor_xy(x, y, np.ascontiguousarray(rot), self.bitmap, self.major, self.range,
                                      self.cell, out)
        else:
            _kernels.lookup_sensor(x, y, z, np.ascontiguousarray(rot), self.bitmap, self.major, self.range,
                                   self.cell, out)
        return out

    def indices(self, frame: Frame) -> np.ndarray:
        """int64 indices of the frame's points in the ROI, ascending (Apollo's ``roi_indices``)."""
        return np.flatnonzero(self.contains(frame.points)).astype(np.int64)

    # ------------------------------------------------------------------------------------------ extras

    def contains_local(self, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
        """Membership of points given in the local frame (world axes at the sensor), as float32 like Apollo."""
        import lidarmt.lidar.roi._kernels as _kernels

        lx = np.asarray(lx, dtype=np.float32)
        ly = np.asarray(ly, dtype=np.float32)
        out = np.empty(len(lx), dtype=np.bool_)
        _kernels.lookup_local(lx, ly, self.bitmap, self.major, self.range, self.cell, out)
        return out

    def to_local(self, xy: np.ndarray) -> np.ndarray:
        """(N, 2) local-frame coordinates of sensor-frame points (rotation only), float32 as in Apollo."""
        x, y, z = _columns(np.asarray(xy) if not hasattr(xy, "dtype") else xy)
        p = np.stack([x, y, np.zeros_like(x) if z is None else z], axis=1).astype(np.float64)
        return (p @ self.rotation[:2].T).astype(np.float32)

    def grid(self) -> np.ndarray:
        """Dense boolean grid ``[ix, iy]`` (x cells, then y cells) of the ROI, for drawing and statistics."""
        dims = self.bitmap.shape[0]
        bits = np.unpackbits(self.bitmap.byteswap().view(np.uint8), axis=1, bitorder="big")[:, :dims].astype(bool)
        return bits if self.major == XMAJOR else bits.T

    @property
    def n_cells(self) -> int:
        """Number of ROI cells."""
        return int(self.grid().sum())

    @property
    def area(self) -> float:
        """ROI area in square metres (cells set times the cell area)."""
        return self.n_cells * self.cell * self.cell

    def __repr__(self) -> str:
        state = f"empty: {self.note}" if self.empty else f"{len(self.polygons)} polygons, {self.area:.0f} m²"
        return f"RoiMask(range={self.range:g}, cell={self.cell:g}, {'XY'[self.major]}-major, {state})"


class PointLabelRoi:
    """ROI for real frames that carry per-point road labels instead of an HD map (e.g. KITTI + SemanticKITTI).

    ``indices(frame)`` is exactly the labelled points (for the frame it was built from; for another frame, the
    points that fall in the occupancy grid). ``contains(xy)`` answers for arbitrary sensor-frame points: a
    0.25 m occupancy bitmap (cell = ``cell``) of the labelled points' x/y, dilated by one cell in all eight
    directions, so a point is "in the ROI" when it lies in or next to a cell holding a labelled point. This is
    what the fuzzer uses to sample points *outside* the ROI.
    """

    def __init__(self, frame: Frame, in_roi: np.ndarray, *, cell: float = 0.25) -> None:
        import lidarmt.lidar.roi._kernels as _kernels

        in_roi = np.asarray(in_roi, dtype=bool)
        if in_roi.shape != (len(frame),):
            raise RoiArgumentError(f"in_roi must have one flag per point ({len(frame)}), got shape {in_roi.shape}")
        if not (np.isfinite(cell) and cell > 0):
            raise RoiArgumentError(f"cell must be positive, not {cell!r}")
        self.cell = float(cell)
        self._frame = frame
        self._idx = np.flatnonzero(in_roi).astype(np.int64)
        x = frame.points["x"][self._idx].astype(np.float64)
        y = frame.points["y"][self._idx].astype(np.float64)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        if len(x) == 0:
            self._origin = np.zeros(2)
            self._occ = np.zeros((1, 1), dtype=bool)
            return
        self._origin = np.array([np.floor(x.min() / cell) - 1, np.floor(y.min() / cell) - 1]) * cell
        ix = ((x - self._origin[0]) / cell).astype(np.int64)
        iy = ((y - self._origin[1]) / cell).astype(np.int64)
        occ = np.zeros((int(ix.max()) + 2, int(iy.max()) + 2), dtype=np.bool_)
        occ[ix, iy] = True
        self._occ = _kernels.dilate_cells(occ)

    @property
    def empty(self) -> bool:
        return len(self._idx) == 0

    @property
    def polygons(self) -> list[np.ndarray]:
        return []

    def contains(self, xy: np.ndarray) -> np.ndarray:
        x, y, _ = _columns(np.asarray(xy) if not hasattr(xy, "dtype") else xy)
        ix = np.floor((np.asarray(x, dtype=np.float64) - self._origin[0]) / self.cell)
        iy = np.floor((np.asarray(y, dtype=np.float64) - self._origin[1]) / self.cell)
        h, w = self._occ.shape
        ok = (ix >= 0) & (ix < h) & (iy >= 0) & (iy < w)
        out = np.zeros(len(ix), dtype=bool)
        out[ok] = self._occ[ix[ok].astype(np.int64), iy[ok].astype(np.int64)]
        return out

    def indices(self, frame: Frame) -> np.ndarray:
        """The labelled points for the labelled frame. For a frame that starts with the labelled frame's points
        (e.g. one with points appended by a mutation), those labels plus the appended points that
        :meth:`contains` accepts; for any other frame, the points :meth:`contains` accepts."""
        own = self._frame.points
        n = len(own)
        if frame.points is own:
            return self._idx.copy()
        pts = frame.points
        if len(pts) >= n and all(np.array_equal(pts[c][:n], own[c], equal_nan=True) for c in ("x", "y", "z")):
            extra = np.flatnonzero(self.contains(pts[n:])).astype(np.int64) + n
            return np.concatenate([self._idx, extra])
        return np.flatnonzero(self.contains(pts)).astype(np.int64)

    def __repr__(self) -> str:
        return f"PointLabelRoi({len(self._idx)} labelled points, cell={self.cell:g})"
