"""Data augmentation for training CNN-seg on simulated frames so that it transfers to real sweeps.

Every transform acts on a labelled :class:`~lidarmt.types.Frame` (points, boxes and per-point labels together)
and returns a new frame; the input is never modified. Randomness comes only from the ``numpy.random.Generator``
passed in, so a training sample is reproducible from (seed, step).

The simulator's sweeps are cleaner than a real HDL-64E's: every ray returns, intensities follow a simple model,
and the sensor sits at exactly one height. The default :class:`AugmentConfig` therefore rotates the scene about
z, mirrors it left/right, scales and jitters intensities, drops points at random and more of them far away
(real returns thin out with range and on dark surfaces), jitters the points slightly and moves the whole scene
up or down a little (sensor mounting height differs between vehicles: KITTI's HDL-64E is at 1.73 m), and warps
the terrain (grades and vertical curves, see :func:`warp_z`). For real sweeps too (KITTI raw drives with
tracklets) it scales the whole scene a little and drops whole beams (lasers) at random, as real-data LiDAR
detectors are trained.

**The labelled region moves with the scene.** A frame whose labels cover only a sector of the sweep
(``labels.region``, KITTI: camera 2's view) has that sector rotated with the points and boxes, and mirrored by a
flip (y -> -y maps azimuths [a, b] to [-b, -a]). A :class:`~lidarmt.types.LabelledRegion` is one sector within
[-pi, pi], so :func:`augment_frame` draws rotations of such a frame only from the angles that keep the sector
from wrapping past +-pi (for KITTI's 80 degree view: -139.5 .. +140.2 degrees); :func:`rotate_z` refuses a
rotation that would wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lidarmt.types import Frame, LabelledRegion, Labels


@dataclass(frozen=True, slots=True)
class AugmentConfig:
    """Probabilities and ranges of the random transforms (set a probability to 0 to turn one off)."""

    rotate_max: float = np.pi  # rotation about z, uniform in [-rotate_max, rotate_max] radians
    flip_y_prob: float = 0.5  # mirror y -> -y
    intensity_scale: tuple[float, float] = (0.7, 1.4)  # global multiplicative factor (sim and KITTI medians ~65-70)
    intensity_jitter: float = 6.0  # per-point additive Gaussian sigma, in 0..255 units
    intensity_replace_prob: float = 0.1  # chance to redraw all intensities from a skewed distribution
    dropout: tuple[float, float] = (0.0, 0.3)  # fraction of points dropped uniformly at random
    range_dropout_prob: float = 0.5  # chance to apply range-dependent dropout
    range_dropout_max: float = 0.6  # drop probability reached at 60 m (grows with (r/60)^2)
    xyz_jitter: float = 0.01  # per-point Gaussian sigma, metres
    z_shift: float = 0.2  # whole-scene z offset, uniform in [-z_shift, z_shift] metres
    # terrain warp (vertical shear, objects stay upright): z += gx x + gy y + (kx x^2 + ky y^2) / 2 with the
    # grades uniform in +-warp_grade and the curvatures in +-warp_curvature (1/m); applied with warp_prob.
    # Real roads rise and dip ahead of the car (KITTI's road at 20-40 m lies anywhere from -2.2 to -1.6 m in the
    # sensor frame): without this the network learns "ground is at z = -1.7" and calls rising asphalt a car
    warp_prob: float = 0.7
    warp_grade: float = 0.035
    warp_curvature: float = 1.0 / 1500.0
    # global scaling of the scene (points and boxes) about the sensor, uniform in the range
    scale: tuple[float, float] = (0.95, 1.05)
    # dropped beams: with beam_drop_prob, a fraction uniform in [0, beam_drop_max] of the lasers returns nothing
    beam_drop_prob: float = 0.3
    beam_drop_max: float = 0.3

    @classmethod
    def v2(cls) -> AugmentConfig:
        """The augmentation the simulated-only v2 weights were trained with (no scaling, no dropped beams)."""
        return cls(scale=(1.0, 1.0), beam_drop_prob=0.0)


def _subset(frame: Frame, keep: np.ndarray) -> Frame:
    labels = frame.labels.select(keep) if frame.labels is not None else None
    return replace(frame, points=frame.points[keep], labels=labels)


def _labels(labels: Labels, boxes: np.ndarray, region: LabelledRegion | None) -> Labels:
    return Labels(boxes, labels.point_instance, labels.point_meta, labels.point_semantic, region)


def rotated_region(region: LabelledRegion, angle: float) -> LabelledRegion:
    """The sector rotated by ``angle`` (brought back into [-pi, pi]); ValueError if it would wrap past +-pi."""
    lo, hi = region.azimuth_min + angle, region.azimuth_max + angle
    shift = 2 * np.pi * np.round((lo + hi) / 2 / (2 * np.pi))  # the sector's middle back into [-pi, pi]
    lo, hi = lo - shift, hi - shift
    if lo < -np.pi - 1e-9 or hi > np.pi + 1e-9:
        raise ValueError(f"rotating the labelled sector {region.describe()} by {np.degrees(angle):.1f} deg wraps it "
                         "past +-180 deg; see rotation_range()")
    return replace(region, azimuth_min=float(max(lo, -np.pi)), azimuth_max=float(min(hi, np.pi)))


def rotation_range(region: LabelledRegion | None, rotate_max: float) -> tuple[float, float]:
    """The rotation angles, within +-rotate_max, that keep a labelled sector inside [-pi, pi]."""
    if region is None:
        return -rotate_max, rotate_max
    return max(-rotate_max, -np.pi - region.azimuth_min), min(rotate_max, np.pi - region.azimuth_max)


def rotate_z(frame: Frame, angle: float) -> Frame:
    """The frame rotated by ``angle`` radians about the sensor's z axis (points, boxes and labelled region)."""
    c, s = np.cos(angle), np.sin(angle)
    pts = frame.points.copy()
    x, y = frame.points["x"].astype(np.float64), frame.points["y"].astype(np.float64)
    pts["x"] = c * x - s * y
    pts["y"] = s * x + c * y
    labels = frame.labels
    if labels is not None:
        b = labels.boxes.copy()
        bx, by = b["cx"].copy(), b["cy"].copy()
        b["cx"] = c * bx - s * by
        b["cy"] = s * bx + c * by
        b["yaw"] = np.arctan2(np.sin(b["yaw"] + angle), np.cos(b["yaw"] + angle))
        region = None if labels.region is None else rotated_region(labels.region, angle)
        labels = _labels(labels, b, region)
    return replace(frame, points=pts, labels=labels)


def flip_y(frame: Frame) -> Frame:
    """The frame mirrored left/right (y -> -y; yaw -> -yaw; the labelled sector [a, b] -> [-b, -a])."""
    pts = frame.points.copy()
    pts["y"] = -pts["y"]
    labels = frame.labels
    if labels is not None:
        b = labels.boxes.copy()
        b["cy"] = -b["cy"]
        b["yaw"] = -b["yaw"]
        r = labels.region
        region = None if r is None else replace(r, azimuth_min=-r.azimuth_max, azimuth_max=-r.azimuth_min)
        labels = _labels(labels, b, region)
    return replace(frame, points=pts, labels=labels)


def scale_xyz(frame: Frame, factor: float) -> Frame:
    """The frame scaled by ``factor`` about the sensor (points, box centres and sizes, the region's range)."""
    pts = frame.points.copy()
    for k in ("x", "y", "z"):
        pts[k] = pts[k] * np.float32(factor)
    labels = frame.labels
    if labels is not None:
        b = labels.boxes.copy()
        for k in ("cx", "cy", "cz", "length", "width", "height"):
            b[k] = b[k] * factor
        r = labels.region
        if r is not None and r.max_range is not None:
            r = replace(r, max_range=r.max_range * factor)
        labels = _labels(labels, b, r)
    return replace(frame, points=pts, labels=labels)


def beam_of(points: np.ndarray) -> np.ndarray:
    """The laser (ring) of each point: the ``ring`` field when the points have one, else recovered from a
    ring-major point order (KITTI's .bin files: each ring one turn in azimuth, rings stored one after another)."""
    if "ring" in (points.dtype.names or ()):
        return points["ring"].astype(np.int64)
    from lidarmt.lidar.sim.realism import rings_from_order

    return rings_from_order(points) if len(points) > 1 else np.zeros(len(points), np.int64)


def drop_beams(frame: Frame, fraction: float, rng: np.random.Generator) -> Frame:
    """The frame without the points of a random ``fraction`` of its beams (lasers)."""
    ring = beam_of(frame.points)
    rings = np.unique(ring)
    k = int(round(fraction * len(rings)))
    if k <= 0:
        return frame
    gone = rng.choice(rings, size=k, replace=False)
    return _subset(frame, ~np.isin(ring, gone))


def shift_z(frame: Frame, dz: float) -> Frame:
    """The frame with every point and box moved by ``dz`` metres along z."""
    pts = frame.points.copy()
    pts["z"] = pts["z"] + np.float32(dz)
    labels = frame.labels
    if labels is not None:
        b = labels.boxes.copy()
        b["cz"] = b["cz"] + dz
        labels = Labels(b, labels.point_instance, labels.point_meta, labels.point_semantic, labels.region)
    return replace(frame, points=pts, labels=labels)


def warp_z(frame: Frame, gx: float, gy: float, kx: float, ky: float) -> Frame:
    """The frame on warped terrain: every point (and box centre) moved up by
    ``gx x + gy y + (kx x² + ky y²) / 2`` at its own (x, y); objects stay upright and keep their shape."""

    def dz(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        return gx * x + gy * y + 0.5 * (kx * x * x + ky * y * y)

    pts = frame.points.copy()
    pts["z"] = (pts["z"] + dz(pts["x"], pts["y"])).astype(np.float32)
    labels = frame.labels
    if labels is not None:
        b = labels.boxes.copy()
        b["cz"] = b["cz"] + dz(b["cx"], b["cy"])
        labels = Labels(b, labels.point_instance, labels.point_meta, labels.point_semantic, labels.region)
    return replace(frame, points=pts, labels=labels)


def augment_frame(frame: Frame, rng: np.random.Generator, config: AugmentConfig | None = None) -> Frame:
    """A randomly transformed copy of a labelled frame (see :class:`AugmentConfig`)."""
    cfg = config or AugmentConfig()
    out = frame
    if cfg.beam_drop_prob > 0 and rng.random() < cfg.beam_drop_prob:  # first: the point order gives the beams
        out = drop_beams(out, float(rng.uniform(0.0, cfg.beam_drop_max)), rng)
    if cfg.rotate_max > 0:
        region = out.labels.region if out.labels is not None else None
        out = rotate_z(out, float(rng.uniform(*rotation_range(region, cfg.rotate_max))))
    if rng.random() < cfg.flip_y_prob:
        out = flip_y(out)
    lo, hi = cfg.scale
    if hi > lo or lo != 1.0:
        out = scale_xyz(out, float(rng.uniform(lo, hi)))
    if cfg.z_shift > 0:
        out = shift_z(out, float(rng.uniform(-cfg.z_shift, cfg.z_shift)))
    if cfg.warp_prob > 0 and rng.random() < cfg.warp_prob:
        g, k = cfg.warp_grade, cfg.warp_curvature
        out = warp_z(out, *(float(v) for v in rng.uniform(-g, g, 2)), *(float(v) for v in rng.uniform(-k, k, 2)))

    n = len(out.points)
    keep = np.ones(n, dtype=bool)
    lo, hi = cfg.dropout
    if hi > 0:
        keep &= rng.random(n) >= rng.uniform(lo, hi)
    if cfg.range_dropout_prob > 0 and rng.random() < cfg.range_dropout_prob:
        r = np.hypot(out.points["x"], out.points["y"]).astype(np.float64)
        p = rng.uniform(0.0, cfg.range_dropout_max) * np.clip(r / 60.0, 0.0, 1.0) ** 2
        keep &= rng.random(n) >= p
    if not keep.all():
        out = _subset(out, keep)
    if out is frame:
        out = replace(out, points=out.points.copy())
    pts = out.points
    m = len(pts)
    if cfg.xyz_jitter > 0 and m:
        for k in ("x", "y", "z"):
            pts[k] = pts[k] + rng.normal(0.0, cfg.xyz_jitter, m).astype(np.float32)

    inten = pts["intensity"].astype(np.float64)
    if cfg.intensity_replace_prob > 0 and rng.random() < cfg.intensity_replace_prob:
        # Real sensors return mostly dark values with a long bright tail (retro-reflectors, plates, signs).
        inten = rng.gamma(1.5, rng.uniform(5.0, 25.0), m)
    lo, hi = cfg.intensity_scale
    inten = inten * rng.uniform(lo, hi)
    if cfg.intensity_jitter > 0:
        inten = inten + rng.normal(0.0, cfg.intensity_jitter, m)
    pts["intensity"] = np.clip(inten, 0.0, 255.0).astype(np.float32)
    return out
