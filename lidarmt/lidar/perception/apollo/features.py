"""The cnnseg feature generator: 8 channels on a bird's-eye grid, in Apollo's order and formulas.

Grid: H = W = ``grid`` cells over [-range, range) metres. A point (x, y, z) of the sensor frame falls in
``row = floor((range - x) * grid / (2 range))``, ``col = floor((range - y) * grid / (2 range))`` (x to rows and
y to columns, both flipped: row 0 is x = +range, col 0 is y = +range), computed in float32. Points with
z <= min_height or z >= max_height (strict bounds) or outside the grid are skipped.

Channels (``(8, H, W)`` float32):

====  ==============  ==================================================================================
 0    max height      max z of the cell (empty: 0)
 1    mean height     mean z (empty: 0)
 2    log count       ln(1 + count)
 3    direction       atan2(cy, cx) / (2 pi) of the cell centre (constant)
 4    top intensity   intensity / 255 of the point holding the max height (the first one on ties)
 5    mean intensity  mean of intensity / 255
 6    distance        hypot(cx, cy) / 60 - 0.5 (the 60 is hard-coded in Apollo, whatever the range)
 7    non-empty       1 if the cell holds a point
====  ==============  ==================================================================================

With ``use_full_cloud`` (Apollo's default) the features come from the **whole** cloud; otherwise from the ROI
points only (pass ``indices``).
"""

from __future__ import annotations

import functools

import numpy as np

FEATURE_NAMES: tuple[str, ...] = (
    "max_height",
    "mean_height",
    "log_count",
    "direction",
    "top_intensity",
    "mean_intensity",
    "distance",
    "nonempty",
)
NUM_CHANNELS = 8

# DEVIATION (<= 1 ulp): Apollo fills its table with float log1p; we round the double log1p to float32, so both
# the kernel and the reference are correctly rounded and agree bit for bit.
_LOG_TABLE = np.log1p(np.arange(256, dtype=np.float64)).astype(np.float32)


def point_columns(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Contiguous float32 x, y, z, intensity of a structured point array or an (N, >=4) array."""
    if points.dtype.names:
        cols = [points[name] for name in ("x", "y", "z", "intensity")]
    else:
        arr = np.asarray(points)
        if arr.ndim != 2 or arr.shape[1] < 4:
            raise ValueError(
                f"points must be structured (x, y, z, intensity) or (N, 4); got shape {arr.shape}"
            )
        cols = [arr[:, k] for k in range(4)]
    return tuple(np.ascontiguousarray(c, dtype=np.float32) for c in cols)  # type: ignore[return-value]


def cell_centres(grid: int, range_: float) -> np.ndarray:
    """Metric coordinate of each row's (x) or column's (y) cell centre: range - (i + 0.5) * 2 range / grid."""
    res = 2.0 * range_ / grid
    return (range_ - (np.arange(grid, dtype=np.float64) + 0.5) * res).astype(np.float32)


@functools.lru_cache(maxsize=8)
def constant_channels(grid: int, range_: float) -> tuple[np.ndarray, np.ndarray]:
    """The two point-independent channels (direction, distance), (H, W) float32 each, read-only."""
    c = cell_centres(grid, range_).astype(np.float64)
    cx = c[:, None]  # rows carry x
    cy = c[None, :]  # columns carry y
    direction = (np.arctan2(cy, cx) / (2.0 * np.pi)).astype(np.float32)
    distance = (np.hypot(cx, cy) / 60.0 - 0.5).astype(np.float32)
    direction.flags.writeable = False
    distance.flags.writeable = False
    return direction, distance


def compute_features(
    points: np.ndarray,
    *,
    grid: int = 640,
    range: float = 60.0,  # noqa: A002 - Apollo's name
    min_height: float = -5.0,
    max_height: float = 5.0,
    indices: np.ndarray | None = None,
    out: np.ndarray | None = None,
    constants_filled: bool = False,
) -> np.ndarray:
    """Apollo's 8 feature channels of ``points`` (sensor frame) as an ``(8, grid, grid)`` float32 array.

    ``indices`` restricts the features to those points (Apollo with ``use_full_cloud: false`` feeds the ROI
    cloud); ``out`` reuses a buffer of the right shape, and ``constants_filled=True`` says it already holds the
    two constant channels (direction, distance) of this grid and range, which are then not rewritten.
    """
    from lidarmt.lidar.perception.apollo._feature_kernels import feature_kernel

    x, y, z, it = point_columns(points)
    if out is None:
        out = np.empty((NUM_CHANNELS, grid, grid), dtype=np.float32)
    elif out.shape != (NUM_CHANNELS, grid, grid) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape (8, {grid}, {grid})")
    use_sel = indices is not None
    sel = np.ascontiguousarray(indices, dtype=np.int64) if use_sel else np.zeros(0, dtype=np.int64)
    for k in (0, 1, 2, 4, 5, 7):  # the kernel accumulates into zeroed channels
        out[k].fill(0.0)
    feature_kernel(
        x, y, z, it, sel, use_sel,
        np.float32(range), np.float32(0.5 * grid / range),
        np.float32(min_height), np.float32(max_height), _LOG_TABLE, out,
    )  # fmt: skip
    direction, distance = constant_channels(grid, float(range))
    if not constants_filled:
        out[3] = direction
        out[6] = distance
    return out


def point_cells(points: np.ndarray, *, grid: int = 640, range: float = 60.0) -> np.ndarray:  # noqa: A002
    """Grid index (row * grid + col) of each point, -1 outside the grid; no height test (as Cluster2D maps points)."""
    x, y, _, _ = point_columns(points)
    r32, s32 = np.float32(range), np.float32(0.5 * grid / range)
    with np.errstate(invalid="ignore"):
        fr = (r32 - x) * s32
        fc = (r32 - y) * s32
        ok = (fr >= 0) & (fr < grid) & (fc >= 0) & (fc < grid)
    out = np.full(len(x), -1, dtype=np.int64)
    out[ok] = np.floor(fr[ok]).astype(np.int64) * grid + np.floor(fc[ok]).astype(np.int64)
    return out


def compute_features_reference(
    points: np.ndarray,
    *,
    grid: int = 640,
    range: float = 60.0,  # noqa: A002
    min_height: float = -5.0,
    max_height: float = 5.0,
    indices: np.ndarray | None = None,
) -> np.ndarray:
    """Plain NumPy version of :func:`compute_features` (slow, obvious; the tests' cross-check)."""
    x, y, z, it = point_columns(points)
    if indices is not None:
        idx = np.asarray(indices, dtype=np.int64)
        x, y, z, it = x[idx], y[idx], z[idx], it[idx]
    finite = np.isfinite(x) & np.isfinite(y) & np.isfinite(z) & np.isfinite(it)
    r32, s32 = np.float32(range), np.float32(0.5 * grid / range)
    with np.errstate(invalid="ignore"):
        fr = (r32 - x) * s32
        fc = (r32 - y) * s32
        keep = finite & (fr >= 0) & (fr < grid) & (fc >= 0) & (fc < grid)
        keep &= (z > np.float32(min_height)) & (z < np.float32(max_height))
    row = np.floor(fr[keep]).astype(np.int64)
    col = np.floor(fc[keep]).astype(np.int64)
    cell = row * grid + col
    zk, pin = z[keep], (it[keep] / np.float32(255.0)).astype(np.float32)
    n = grid * grid
    count = np.zeros(n, dtype=np.float32)
    np.add.at(count, cell, np.float32(1.0))
    sum_z = np.zeros(n, dtype=np.float32)
    np.add.at(sum_z, cell, zk)
    sum_i = np.zeros(n, dtype=np.float32)
    np.add.at(sum_i, cell, pin)
    # max height and the intensity of the first point reaching it (strict '>' update: first wins on ties)
    order = np.lexsort((np.arange(len(cell)), -zk, cell))
    first = order[np.r_[True, cell[order][1:] != cell[order][:-1]]] if len(cell) else order
    maxh = np.full(n, np.float32(min_height), dtype=np.float32)
    top = np.zeros(n, dtype=np.float32)
    maxh[cell[first]] = zk[first]
    top[cell[first]] = pin[first]
    nonempty = count >= 1e-6
    feats = np.zeros((NUM_CHANNELS, n), dtype=np.float32)
    feats[0] = np.where(nonempty, maxh, np.float32(0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        feats[1] = np.where(nonempty, sum_z / count, np.float32(0.0))
        feats[5] = np.where(nonempty, sum_i / count, np.float32(0.0))
    ic = count.astype(np.int64)
    small = ic < len(_LOG_TABLE)
    feats[2] = np.where(
        small, _LOG_TABLE[np.minimum(ic, len(_LOG_TABLE) - 1)], np.log(1.0 + ic).astype(np.float32)
    )
    feats[4] = top
    feats[7] = nonempty.astype(np.float32)
    direction, distance = constant_channels(grid, float(range))
    feats[3] = direction.ravel()
    feats[6] = distance.ravel()
    return feats.reshape(NUM_CHANNELS, grid, grid)
