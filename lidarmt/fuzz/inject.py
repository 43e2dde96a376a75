"""MR1's input transform: scatter n random points in the 3-D space outside a frame's ROI.

Following Zhou & Sun (CACM 62(3), 2019): for a source frame t, the follow-up t′ is t plus n points whose
horizontal position is uniform in a sampling region and **outside the ROI**, whose z is uniform between the
minimum and maximum z of t's points, and whose intensity is uniform between t's minimum and maximum intensity.

* The region is a disk about the sensor (default radius 120 m, the HDL-64E's range) or the CNN's square grid
  (±60 m). Points are drawn in batches and those inside the ROI are rejected (``roi.contains``), until n
  remain; the acceptance rate seen so far sizes the next batch.
* Everything is reproducible from the seed tuple (campaign seed, frame index, n, trial):
  ``numpy.random.Generator(PCG64(SeedSequence([seed, frame, n, trial])))``.
* The added points are appended after the source points (:meth:`Frame.with_extra_points`), so the source
  points keep their indices in t′ and ``range(len(t), len(t′))`` are the injected ones.

**Which added points can matter.** Apollo's CNN sees only points inside its grid (±60 m square, x and y) and
strictly between its height bounds (−5 m < z < 5 m in the sensor frame); every other point is skipped by the
feature generator and Cluster2D, so it cannot change any obstacle. In the 120 m disk most added points fall
outside that box (about 1 in 4 reach the network on the demo), whereas ``grid`` sends them all into the grid
(the z band still applies). :class:`NetworkReach` counts, per follow-up, the added points that reach the
network; the campaign journals it and the reports give its mean per n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lidarmt.fuzz.errors import InjectionError
from lidarmt.types import POINT_DTYPE, Frame, Roi, finite_mask

HDL64E_RANGE_M = 120.0
CNN_HALF_RANGE_M = 60.0
MAX_POINTS = 10_000_000
_MAX_DRAWN_PER_POINT = 10_000  # give up when the ROI leaves (almost) nothing of the region


@dataclass(frozen=True, slots=True)
class Region:
    """Where injected points are drawn (before rejection against the ROI), in the sensor frame.

    ``shape`` is ``"disk"`` (radius ``size`` about the sensor) or ``"grid"`` (the square |x|, |y| <= ``size``).
    """

    shape: Literal["disk", "grid"] = "disk"
    size: float = HDL64E_RANGE_M

    def __post_init__(self) -> None:
        if self.shape not in ("disk", "grid"):
            raise InjectionError(f"unknown region {self.shape!r}: use 'disk' or 'grid'")
        if not (math.isfinite(self.size) and self.size > 0):
            raise InjectionError(f"region size must be a positive number of metres, got {self.size}")

    @classmethod
    def disk(cls, radius: float = HDL64E_RANGE_M) -> Region:
        return cls("disk", float(radius))

    @classmethod
    def grid(cls, half_side: float = CNN_HALF_RANGE_M) -> Region:
        return cls("grid", float(half_side))

    @property
    def area(self) -> float:
        return math.pi * self.size**2 if self.shape == "disk" else (2 * self.size) ** 2

    def contains(self, xy: np.ndarray, *, tol: float = 1e-3) -> np.ndarray:
        xy = np.asarray(xy, dtype=np.float64)
        if self.shape == "disk":
            return np.hypot(xy[:, 0], xy[:, 1]) <= self.size + tol
        return (np.abs(xy[:, 0]) <= self.size + tol) & (np.abs(xy[:, 1]) <= self.size + tol)

    def describe(self) -> str:
        return f"disk r={self.size:g} m" if self.shape == "disk" else f"square ±{self.size:g} m"


@dataclass(frozen=True, slots=True)
class NetworkReach:
    """The box of sensor-frame space a grid-based perception module (Apollo's cnnseg) reads points from:
    the ``grid`` x ``grid`` cells over ``[-range, range)`` in x and y (Apollo's cell mapping,
    :func:`lidarmt.perception.apollo.features.point_cells`) and ``min_height < z < max_height``. With
    ``full_cloud=False`` (Apollo's ``use_full_cloud`` off) the CNN reads ROI points only, and no added point
    (all outside the ROI) reaches it."""

    grid: int = 640
    range: float = CNN_HALF_RANGE_M
    min_height: float = -5.0
    max_height: float = 5.0
    full_cloud: bool = True

    @classmethod
    def of(cls, sut: object) -> NetworkReach:
        """The reach of a SUT with an Apollo-like ``config`` (grid, range, min/max_height, use_full_cloud);
        Apollo 2.5/3.0's defaults for any other SUT."""
        cfg = getattr(sut, "config", None)
        d = cls()
        try:
            return cls(int(getattr(cfg, "grid", d.grid)), float(getattr(cfg, "range", d.range)),
                       float(getattr(cfg, "min_height", d.min_height)), float(getattr(cfg, "max_height", d.max_height)),
                       bool(getattr(cfg, "use_full_cloud", d.full_cloud)))
        except (TypeError, ValueError):
            return d

    def count(self, points: np.ndarray) -> int:
        """How many of ``points`` (structured x/y/z) the network reads."""
        if not self.full_cloud or not len(points):
            return 0
        from lidarmt.perception.apollo.features import point_cells

        z = np.asarray(points["z"], dtype=np.float32)
        inside = (point_cells(points, grid=self.grid, range=self.range) >= 0)
        inside &= (z > np.float32(self.min_height)) & (z < np.float32(self.max_height))
        return int(inside.sum())


def seed_sequence(seed: int, frame: int, n: int, trial: int) -> np.random.SeedSequence:
    """The seed sequence of one follow-up: (campaign seed, frame index, n, trial)."""
    return np.random.SeedSequence([int(seed), int(frame), int(n), int(trial)])


def rng_for(seed: int, frame: int, n: int, trial: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, frame, n, trial)))


@dataclass(frozen=True, slots=True)
class Bounds:
    """z and intensity ranges of a source frame's (finite) points."""

    zmin: float
    zmax: float
    imin: float
    imax: float

    @classmethod
    def of(cls, frame: Frame) -> Bounds:
        pts = frame.points
        if len(pts):
            pts = pts[finite_mask(pts)]
        if not len(pts):
            raise InjectionError(
                f"frame {frame.index} has no finite points: the z and intensity ranges of the injected points "
                "are taken from the source frame, so an empty frame cannot be fuzzed"
            )
        return cls(float(pts["z"].min()), float(pts["z"].max()), float(pts["intensity"].min()),
                   float(pts["intensity"].max()))


def sample_outside(
    roi: Roi,
    n: int,
    *,
    rng: np.random.Generator,
    bounds: Bounds,
    region: Region = Region(),
    use_numba: bool = True,
) -> np.ndarray:
    """``n`` points (structured, x/y/z/intensity float32) uniform in ``region`` and outside ``roi``."""
    from lidarmt.fuzz import _kernels

    if n < 0 or n > MAX_POINTS:
        raise InjectionError(f"cannot inject {n} points: n must be between 0 and {MAX_POINTS:,}")
    kernel = _kernels.uniform_to_points if use_numba else _kernels.uniform_to_points_numpy
    shape = _kernels.DISK if region.shape == "disk" else _kernels.SQUARE
    out = np.empty((n, 4), dtype=np.float32)
    have = drawn = accepted = 0
    while have < n:
        need = n - have
        rate = (accepted + 1) / (drawn + 2)  # Laplace estimate of the acceptance rate
        batch = int(min(max(need / rate * 1.1 + 16, 64), 4 * MAX_POINTS))
        cand = kernel(rng.random((batch, 4)), shape, region.size, bounds.zmin, bounds.zmax, bounds.imin,
                      bounds.imax)
        keep = ~np.asarray(roi.contains(cand[:, :2]), dtype=bool)
        # float rounding could leave a point a hair outside the disk; never inject one outside the region
        if region.shape == "disk":
            keep &= np.hypot(cand[:, 0].astype(np.float64), cand[:, 1].astype(np.float64)) <= region.size
        kept = cand[keep]
        drawn += batch
        accepted += len(kept)
        take = min(len(kept), need)
        out[have : have + take] = kept[:take]
        have += take
        if have < n and drawn > _MAX_DRAWN_PER_POINT * max(n, 1) and accepted < drawn * 1e-4:
            raise InjectionError(
                f"the ROI covers (almost) all of the sampling region ({region.describe()}): {accepted} of "
                f"{drawn:,} candidate points fell outside it; use a larger region (--radius) or check the map"
            )
    np.clip(out[:, 2], bounds.zmin, bounds.zmax, out=out[:, 2])
    np.clip(out[:, 3], bounds.imin, bounds.imax, out=out[:, 3])
    pts = np.empty(n, dtype=POINT_DTYPE)
    pts["x"], pts["y"], pts["z"], pts["intensity"] = out[:, 0], out[:, 1], out[:, 2], out[:, 3]
    return pts


@dataclass(slots=True)
class FollowUp:
    """A follow-up frame t′ and what was added to make it."""

    frame: Frame
    extra: np.ndarray  # the injected points (structured), appended at index ``base`` onwards
    base: int  # number of source points (the first injected point's index in ``frame``)
    seed: tuple[int, int, int, int]  # (campaign seed, frame index, n, trial)

    @property
    def added_indices(self) -> np.ndarray:
        return np.arange(self.base, self.base + len(self.extra), dtype=np.int64)


def make_follow_up(
    source: Frame,
    roi: Roi,
    n: int,
    *,
    seed: int,
    frame_index: int,
    trial: int = 0,
    region: Region = Region(),
    bounds: Bounds | None = None,
    use_numba: bool = True,
) -> FollowUp:
    """The follow-up of ``source`` with ``n`` points outside ``roi`` (reproducible from the seed tuple)."""
    rng = rng_for(seed, frame_index, n, trial)
    extra = sample_outside(roi, n, rng=rng, bounds=bounds or Bounds.of(source), region=region,
                           use_numba=use_numba)
    names = source.points.dtype.names or ()
    if len(names) > 4:  # give the added points the source's other fields: time = the frame's stamp, ring 0
        full = np.zeros(n, dtype=source.points.dtype)
        for name in ("x", "y", "z", "intensity"):
            full[name] = extra[name]
        if "time" in names:
            full["time"] = source.stamp
        extra = full
    return FollowUp(source.with_extra_points(extra), extra, len(source), (int(seed), int(frame_index), int(n),
                                                                         int(trial)))
