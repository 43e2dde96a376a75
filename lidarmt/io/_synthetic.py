"""Synthetic frames for the io tests and benchmarks: a scan-like cloud with poses along a straight drive."""

from __future__ import annotations

import numpy as np

from lidarmt.types import Frame, make_points, make_pose


def synthetic_frames(
    n_frames: int = 3,
    n_points: int = 1000,
    *,
    seed: int = 0,
    start: float = 1_500_000_000.0,
    period: float = 0.1,
    ring: bool = False,
    time: bool = True,
    nan_points: int = 0,
    origin: tuple[float, float, float] = (315323.45, 5068388.18, 12.0),
) -> list[Frame]:
    """Frames of ``n_points`` random points (64 rings, 0.9..70 m, integral intensities 0..255) with poses.

    Per-point times span the sweep before the stamp (the stamp is the last point's time, as Apollo's
    compensator sets it). ``nan_points`` points of each frame get a NaN x (readers must drop them).
    """
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_frames):
        az = rng.uniform(-np.pi, np.pi, n_points)
        rings = rng.integers(0, 64, n_points)
        elev = np.deg2rad(-24.9 + rings * (26.9 / 63))
        rng_m = rng.uniform(0.9, 70.0, n_points)
        xyz = np.stack([rng_m * np.cos(elev) * np.cos(az), rng_m * np.cos(elev) * np.sin(az),
                        rng_m * np.sin(elev) + 0.2], axis=1).astype(np.float32)
        stamp = start + k * period
        t = stamp - period + (az + np.pi) / (2 * np.pi) * period
        pts = make_points(xyz, rng.integers(0, 256, n_points).astype(np.float32),
                          ring=rings.astype(np.uint16) if ring else None, time=t if time else None)
        if time:
            pts["time"][np.argmax(pts["time"])] = stamp
        if nan_points:
            pts["x"][rng.choice(n_points, nan_points, replace=False)] = np.nan
        yaw = 0.3 + 0.01 * k
        pose = make_pose([origin[0] + 1.5 * k, origin[1] + 0.5 * k, origin[2]], [0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)])
        out.append(Frame(pts, pose, stamp, "velodyne64"))
    return out
