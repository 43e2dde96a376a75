"""What a transformation's change means for the rest of a LiDAR campaign: the ROI carried along by a rigid map
(:class:`MovedRoi`), the provenance of a frame rebuilt from part of the edits (:func:`edits_origin`), and a change's
facts as plain JSON (:func:`jsonable`). Used by the campaign, its bundles and their replay."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lidarmt.lidar.relations import map_xy
from lidarmt.types import Frame, Roi


class MovedRoi:
    """The source's ROI carried along by a sweep's rigid 2-D map (rotation, mirror): a follow-up point is in
    it when the map's inverse brings it into the source's ROI."""

    def __init__(self, roi: Roi, geometry: np.ndarray) -> None:
        self.base = roi
        self.geometry = np.asarray(geometry, dtype=np.float64)
        self._inv = np.linalg.inv(self.geometry)

    @property
    def empty(self) -> bool:
        return bool(getattr(self.base, "empty", False))

    def contains(self, xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy, dtype=np.float64)
        return np.asarray(self.base.contains(map_xy(xy[:, :2], self._inv)), dtype=bool)

    def indices(self, frame: Frame) -> np.ndarray:
        xy = np.c_[frame.points["x"], frame.points["y"]].astype(np.float64)
        return np.flatnonzero(self.contains(xy)).astype(np.int64)


def follow_roi(roi: Roi, change: Any) -> Roi:
    return roi if change.geometry is None else MovedRoi(roi, change.geometry)


def edits_origin(change: Any, keep_edit: np.ndarray) -> np.ndarray:
    """The ``origin`` of :func:`lidarmt.lidar.transforms.base.apply_edits`' frame for ``keep_edit``."""
    keep_edit = np.asarray(keep_edit, dtype=bool)
    dropped = change.dropped
    add_j = np.flatnonzero(change.origin < 0)
    n_mod = change.n_modified
    present = np.ones(change.n_source, dtype=bool)
    present[dropped[keep_edit[: len(dropped)]]] = False
    n_add = int(np.count_nonzero(keep_edit[len(dropped) + n_mod:]))
    assert n_add <= len(add_j)
    return np.concatenate([np.flatnonzero(present).astype(np.int64), np.full(n_add, -1, dtype=np.int64)])


def jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    """A change's info as plain JSON values (numbers rounded; arrays to lists)."""
    import json

    def conv(v: Any) -> Any:
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float):
            return round(v, 6) if math.isfinite(v) else None
        if isinstance(v, np.ndarray):
            return [conv(x) for x in v.tolist()] if v.size <= 64 else f"array{list(v.shape)}"
        if isinstance(v, Mapping):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v

    out = conv(dict(info))
    json.dumps(out)
    return out
