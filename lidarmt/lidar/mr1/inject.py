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

from lidarmt.engine.errors import InjectionError
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
    :func:`lidarmt.lidar.perception.apollo.features.point_cells`) and ``min_height < z < max_height``. With
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
        from lidarmt.lidar.perception.apollo.features import point_cells

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
    import lidarmt.lidar.mr1._kernels as _kernels

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


# ----------------------------------------------------------------------------------------------- conditions

_CONDITION_GIVE_UP = 2_000  # candidate points drawn per wanted point before a condition is declared impossible


@dataclass(frozen=True, slots=True)
class NoiseCondition:
    """A parameterised version of MR1's noise, for searching critical conditions (beyond the study).

    The points lie in a horizontal *ring sector* about the sensor (radii ``r_in`` .. ``r_out`` metres, polar
    angle ``sector_start`` .. ``sector_start + sector_width`` degrees, counter-clockwise from +x), outside the
    ROI; their z is uniform in a *band* of the source frame's z range (``z_low``, ``z_high``: fractions of
    [zmin, zmax]) and their intensity uniform in a band of its intensity range (``i_low``, ``i_high``).
    ``clumps = 0`` spreads them uniformly (area-uniform) over the sector; ``clumps = k > 0`` first draws k
    centres that way, then each point uniformly in a disk of ``clump_radius`` metres about a centre chosen at
    random (points falling inside the ROI or outside ``r_out`` are drawn again).

    :meth:`uniform` is the study's noise (the 120 m disk, the full z and intensity ranges, no clumps). The
    study's own injector (:func:`make_follow_up` with a :class:`Region`) stays the reference for MR1 campaigns;
    a condition is sampled by :func:`sample_condition`, with its own random stream.
    """

    n: int
    r_in: float = 0.0
    r_out: float = HDL64E_RANGE_M
    sector_start: float = -180.0
    sector_width: float = 360.0
    z_low: float = 0.0
    z_high: float = 1.0
    i_low: float = 0.0
    i_high: float = 1.0
    clumps: int = 0
    clump_radius: float = 1.0

    def __post_init__(self) -> None:
        bad = None
        if not 0 <= self.n <= MAX_POINTS:
            bad = f"n = {self.n} (use 0 .. {MAX_POINTS:,})"
        elif not (0.0 <= self.r_in < self.r_out and math.isfinite(self.r_out)):
            bad = f"ring {self.r_in:g}..{self.r_out:g} m (need 0 <= inner < outer)"
        elif not (0.0 < self.sector_width <= 360.0 and math.isfinite(self.sector_start)):
            bad = f"sector width {self.sector_width:g}° (use 0 < width <= 360)"
        elif not (0.0 <= self.z_low <= self.z_high <= 1.0):
            bad = f"z band {self.z_low:g}..{self.z_high:g} (fractions 0 <= low <= high <= 1)"
        elif not (0.0 <= self.i_low <= self.i_high <= 1.0):
            bad = f"intensity band {self.i_low:g}..{self.i_high:g} (fractions 0 <= low <= high <= 1)"
        elif self.clumps < 0 or not (self.clump_radius > 0 and math.isfinite(self.clump_radius)):
            bad = f"{self.clumps} clumps of radius {self.clump_radius:g} m (need clumps >= 0, radius > 0)"
        if bad:
            raise InjectionError(f"bad noise condition: {bad}")

    @classmethod
    def uniform(cls, n: int, radius: float = HDL64E_RANGE_M) -> NoiseCondition:
        """The study's noise: n points uniform in the disk of ``radius``, full z and intensity ranges."""
        return cls(int(n), 0.0, float(radius))

    def to_dict(self) -> dict[str, float | int]:
        return {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, d: dict) -> NoiseCondition:
        return cls(int(d["n"]), *(float(d[f]) for f in ("r_in", "r_out", "sector_start", "sector_width", "z_low",
                                                          "z_high", "i_low", "i_high")),
                   int(d["clumps"]), float(d["clump_radius"]))

    def describe(self) -> str:
        sector = "" if self.sector_width >= 360 else f", sector {self.sector_start:.0f}°+{self.sector_width:.0f}°"
        clump = f", {self.clumps} clumps r={self.clump_radius:.1f} m" if self.clumps else ", uniform"
        return (f"n={self.n}, ring {self.r_in:.1f}-{self.r_out:.1f} m{sector}, z {self.z_low:.2f}-{self.z_high:.2f}, "
                f"intensity {self.i_low:.2f}-{self.i_high:.2f}{clump}")


def ring_sector_points(u: np.ndarray, r_in: float, r_out: float, start_deg: float, width_deg: float) -> np.ndarray:
    """(N, 2) x, y area-uniform in a ring sector from (N, 2) uniforms in [0, 1)."""
    u = np.asarray(u, dtype=np.float64)
    r = np.sqrt(r_in**2 + u[:, 0] * (r_out**2 - r_in**2))
    t = np.radians(start_deg + width_deg * u[:, 1])
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _in_sector(xy: np.ndarray, c: NoiseCondition) -> np.ndarray:
    r = np.hypot(xy[:, 0], xy[:, 1])
    ok = (r >= c.r_in - 1e-6) & (r <= c.r_out + 1e-6)
    if c.sector_width < 360.0:
        ang = np.mod(np.degrees(np.arctan2(xy[:, 1], xy[:, 0])) - c.sector_start, 360.0)
        ok &= ang <= c.sector_width + 1e-9
    return ok


def _draw_outside(roi: Roi, n: int, draw, keep_extra, what: str) -> np.ndarray:
    """``n`` (x, y) rows from ``draw(batch)`` that lie outside ``roi`` (and pass ``keep_extra``), in draw order."""
    out = np.empty((n, 2), dtype=np.float64)
    have = drawn = accepted = 0
    while have < n:
        need = n - have
        rate = (accepted + 1) / (drawn + 2)
        batch = int(min(max(need / rate * 1.1 + 16, 64), 4 * MAX_POINTS))
        cand = draw(batch)
        keep = ~np.asarray(roi.contains(cand.astype(np.float32)), dtype=bool) & keep_extra(cand)
        kept = cand[keep]
        drawn += batch
        accepted += len(kept)
        take = min(len(kept), need)
        out[have:have + take] = kept[:take]
        have += take
        if have < n and drawn > _CONDITION_GIVE_UP * max(n, 16) and accepted < drawn * 1e-4:
            raise InjectionError(f"the ROI covers (almost) all of the {what}: {accepted} of {drawn:,} candidate "
                                 "points fell outside it")
    return out


def sample_condition(roi: Roi, cond: NoiseCondition, *, rng: np.random.Generator, bounds: Bounds) -> np.ndarray:
    """``cond.n`` points (structured x/y/z/intensity float32) of a :class:`NoiseCondition`, outside ``roi``."""
    n = cond.n

    def sector(batch: int) -> np.ndarray:
        return ring_sector_points(rng.random((batch, 2)), cond.r_in, cond.r_out, cond.sector_start,
                                  cond.sector_width)

    def anywhere(xy: np.ndarray) -> np.ndarray:
        return np.ones(len(xy), dtype=bool)

    if cond.clumps == 0:
        xy = _draw_outside(roi, n, sector, anywhere, f"sampling region ({cond.describe()})")
    else:
        centres = _draw_outside(roi, cond.clumps, sector, anywhere, f"sampling region ({cond.describe()})")

        def around(batch: int) -> np.ndarray:
            which = rng.integers(0, cond.clumps, size=batch)
            u = rng.random((batch, 2))
            r = cond.clump_radius * np.sqrt(u[:, 0])
            t = 2.0 * np.pi * u[:, 1]
            return centres[which] + np.stack([r * np.cos(t), r * np.sin(t)], axis=1)

        def in_range(xy: np.ndarray) -> np.ndarray:
            return np.hypot(xy[:, 0], xy[:, 1]) <= cond.r_out

        xy = _draw_outside(roi, n, around, in_range, f"clumps about {cond.clumps} centres")
    zi = rng.random((n, 2))
    zlo = bounds.zmin + cond.z_low * (bounds.zmax - bounds.zmin)
    zhi = bounds.zmin + cond.z_high * (bounds.zmax - bounds.zmin)
    ilo = bounds.imin + cond.i_low * (bounds.imax - bounds.imin)
    ihi = bounds.imin + cond.i_high * (bounds.imax - bounds.imin)
    pts = np.empty(n, dtype=POINT_DTYPE)
    pts["x"], pts["y"] = xy[:, 0].astype(np.float32), xy[:, 1].astype(np.float32)
    pts["z"] = np.clip((zlo + zi[:, 0] * (zhi - zlo)).astype(np.float32), np.float32(zlo), np.float32(zhi))
    pts["intensity"] = np.clip((ilo + zi[:, 1] * (ihi - ilo)).astype(np.float32), np.float32(ilo), np.float32(ihi))
    return pts


def condition_seed_sequence(seed: int, frame: int, step: int, arm: int) -> np.random.SeedSequence:
    """The random stream of one conditioned follow-up: (search seed, frame, search step, arm), tagged so it
    never coincides with an MR1 campaign's (seed, frame, n, trial) stream."""
    return np.random.SeedSequence([int(seed), int(frame), int(step), int(arm), 0x636F6E64])  # "cond"


def make_conditioned_follow_up(source: Frame, roi: Roi, cond: NoiseCondition, *, seed: tuple[int, int, int, int],
                               bounds: Bounds | None = None) -> FollowUp:
    """The follow-up of ``source`` with the points of ``cond`` appended (reproducible from ``seed`` =
    (search seed, frame index, step, arm)); ``FollowUp.seed`` is that tuple."""
    rng = np.random.Generator(np.random.PCG64(condition_seed_sequence(*seed)))
    extra = sample_condition(roi, cond, rng=rng, bounds=bounds or Bounds.of(source))
    names = source.points.dtype.names or ()
    if len(names) > 4:
        full = np.zeros(len(extra), dtype=source.points.dtype)
        for name in ("x", "y", "z", "intensity"):
            full[name] = extra[name]
        if "time" in names:
            full["time"] = source.stamp
        extra = full
    return FollowUp(source.with_extra_points(extra), extra, len(source), tuple(int(v) for v in seed))  # type: ignore[arg-type]
