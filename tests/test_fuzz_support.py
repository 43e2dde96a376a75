"""Small deterministic systems under test, ROIs and frames for the fuzzing tests (no tests here).

Spawned worker processes import these by ``test_fuzz_support:...`` (pytest puts tests/ on sys.path, and
multiprocessing hands sys.path to the children).

* :class:`StripRoi`: a straight road |y| <= half_width for xmin <= x <= xmax (sensor frame).
* :class:`GridSut`: a real if simple perception: occupancy grid over the **full** cloud (like Apollo's
  use_full_cloud), 8-connected components, obstacles made of the ROI points of each component. A component
  whose occupied area is mostly outside the ROI is dropped (score dilution, like cnnseg's averaged objectness),
  and components bridged by outside points merge, so outside points really make obstacles vanish or merge.
* :class:`CrashSut` raises on follow-ups of one frame; :class:`HangSut` sleeps on follow-ups of one frame.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from lidarmt.io.npz import save_frame_npz
from lidarmt.types import Frame, Obstacle, ObstacleClass, Obstacles, Provenance, make_points, xyz_of


class StripRoi:
    def __init__(self, half_width: float = 6.0, xmin: float = -40.0, xmax: float = 60.0) -> None:
        self.half_width, self.xmin, self.xmax = half_width, xmin, xmax

    @property
    def empty(self) -> bool:
        return False

    def contains(self, xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy, dtype=np.float64)
        return (np.abs(xy[:, 1]) <= self.half_width) & (xy[:, 0] >= self.xmin) & (xy[:, 0] <= self.xmax)

    def indices(self, frame: Frame) -> np.ndarray:
        return np.flatnonzero(self.contains(xyz_of(frame.points))).astype(np.int64)


class StripRoiProvider:
    def __init__(self, **kw) -> None:
        self.roi = StripRoi(**kw)

    def roi_for(self, frame: Frame) -> StripRoi:
        return self.roi


def strip_roi() -> StripRoiProvider:
    return StripRoiProvider()


def whole_roi() -> StripRoiProvider:
    """An ROI that covers everything (no point can be injected)."""
    return StripRoiProvider(half_width=1e9, xmin=-1e9, xmax=1e9)


def box_obstacle(cls: ObstacleClass, idx: np.ndarray, xyz: np.ndarray, score: float = 0.9) -> Obstacle:
    p = xyz[idx]
    lo, hi = p.min(axis=0), p.max(axis=0)
    c = np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, lo[2]])
    poly = np.array([[hi[0], hi[1], lo[2]], [hi[0], lo[1], lo[2]], [lo[0], lo[1], lo[2]], [lo[0], hi[1], lo[2]]])
    return Obstacle(cls, score, np.asarray(idx, dtype=np.int64), c, float(max(hi[0] - lo[0], 1e-3)),
                    float(max(hi[1] - lo[1], 1e-3)), float(hi[2] - lo[2]), np.array([1.0, 0, 0]), poly)


class GridSut:
    name = "grid-test"

    def __init__(self, cell: float = 1.0, half: float = 60.0, ground: float = -1.4, min_roi_share: float = 0.5):
        from scipy import ndimage  # imported here, so that a detect call never pays for it (timeout tests)

        self._ndimage = ndimage
        self.cell, self.half, self.ground, self.min_roi_share = cell, half, ground, min_roi_share

    def detect(self, frame: Frame, roi) -> Obstacles:
        ndimage = self._ndimage

        xyz = xyz_of(frame.points)
        w = int(round(2 * self.half / self.cell))
        col = np.floor((xyz[:, 0] + self.half) / self.cell).astype(np.int64)
        row = np.floor((xyz[:, 1] + self.half) / self.cell).astype(np.int64)
        ok = (col >= 0) & (col < w) & (row >= 0) & (row < w) & (xyz[:, 2] > self.ground)
        occ = np.zeros((w, w), dtype=bool)
        occ[row[ok], col[ok]] = True
        lab, nlab = ndimage.label(occ, structure=np.ones((3, 3)))
        inroi = np.zeros(len(xyz), dtype=bool)
        inroi[roi.indices(frame)] = True
        cell_roi = np.zeros((w, w), dtype=bool)
        m = ok & inroi
        cell_roi[row[m], col[m]] = True
        comp_cells = np.bincount(lab.ravel(), minlength=nlab + 1)
        comp_roi = np.bincount(lab[cell_roi], minlength=nlab + 1)
        plab = np.zeros(len(xyz), dtype=np.int64)
        plab[ok] = lab[row[ok], col[ok]]
        out = []
        sel = np.flatnonzero(m)
        order = np.argsort(plab[sel], kind="stable")
        sel = sel[order]
        bounds = np.searchsorted(plab[sel], np.arange(1, nlab + 2))
        for k in range(1, nlab + 1):
            idx = sel[bounds[k - 1] : bounds[k]]
            if len(idx) < 3:
                continue
            share = comp_roi[k] / comp_cells[k]
            if share < self.min_roi_share:
                continue
            area = comp_cells[k] * self.cell**2
            cls = (ObstacleClass.PEDESTRIAN if area <= 1.5 else ObstacleClass.CYCLIST if area <= 3
                   else ObstacleClass.CAR if area <= 16 else ObstacleClass.UNKNOWN)
            out.append(box_obstacle(cls, np.sort(idx), xyz, score=float(share)))
        return Obstacles(out)


def grid_sut(**kw) -> GridSut:
    return GridSut(**kw)


class HangSut(GridSut):
    """Hangs (sleeps) on every follow-up of ``bad_frame`` (frames are told apart from follow-ups by size)."""

    name = "hang-test"

    def __init__(self, bad_frame: int = 1, sleep: float = 60.0, **kw) -> None:
        super().__init__(**kw)
        self.bad_frame, self.sleep = bad_frame, sleep

    def detect(self, frame: Frame, roi) -> Obstacles:
        if frame.index == self.bad_frame and len(frame) != source_size(frame.index):
            time.sleep(self.sleep)
        return super().detect(frame, roi)


def crash_sut(**kw):
    return CrashSut(**kw)


class CrashSut(GridSut):
    name = "crash-test"

    def __init__(self, bad_frame: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.bad_frame = bad_frame

    def detect(self, frame: Frame, roi) -> Obstacles:
        if frame.index == self.bad_frame and len(frame) != source_size(frame.index):
            raise ZeroDivisionError("boom in the SUT")
        return super().detect(frame, roi)


def hang_sut(**kw):
    return HangSut(**kw)


class DieSut(GridSut):
    """Kills its own process (as a segfault in native code would) on every follow-up of ``bad_frame``."""

    name = "die-test"

    def __init__(self, bad_frame: int = 1, **kw) -> None:
        super().__init__(**kw)
        self.bad_frame = bad_frame

    def detect(self, frame: Frame, roi) -> Obstacles:
        if frame.index == self.bad_frame and len(frame) != source_size(frame.index):
            os._exit(77)
        return super().detect(frame, roi)


def die_sut(**kw):
    return DieSut(**kw)


def source_size(index: int) -> int:
    """Point count of source frame ``index`` as written by :func:`make_scene` (deterministic)."""
    return len(make_scene(index).points)


# ----------------------------------------------------------------------------------------------- frames


def make_scene(index: int, *, seed: int = 1234, with_pose: bool = True) -> Frame:
    """A small deterministic scene: ground inside and outside the road, cars/pedestrians on the road,
    some near its edges (so that outside points can bridge them), and clutter outside the road."""
    rng = np.random.default_rng([seed, index])
    parts = []
    g = rng.uniform([-35, -30], [55, 30], size=(1500, 2))
    parts.append(np.c_[g, rng.uniform(-1.8, -1.6, len(g))])
    for _ in range(6):  # cars, some at the road's edge
        cx, cy = rng.uniform(-25, 45), rng.choice([-4.8, -2.0, 2.0, 4.8])
        p = rng.uniform([cx - 2, cy - 0.9, -1.2], [cx + 2, cy + 0.9, 0.2], size=(60, 3))
        parts.append(p)
    for _ in range(3):  # pedestrians
        cx, cy = rng.uniform(-20, 40), rng.uniform(-5.5, 5.5)
        parts.append(rng.uniform([cx - 0.3, cy - 0.3, -1.3], [cx + 0.3, cy + 0.3, 0.0], size=(20, 3)))
    for _ in range(8):  # clutter outside the road
        cx, cy = rng.uniform(-30, 50), rng.choice([-1, 1]) * rng.uniform(7.5, 25)
        parts.append(rng.uniform([cx - 1, cy - 1, -1.3], [cx + 1, cy + 1, 1.0], size=(30, 3)))
    xyz = np.concatenate(parts).astype(np.float32)
    pts = make_points(xyz, rng.uniform(0, 100, len(xyz)).astype(np.float32))
    pose = np.eye(4) if with_pose else None
    if pose is not None:
        pose[:3, 3] = [1000.0 + index, 2000.0, 10.0]
    return Frame(pts, pose=pose, stamp=1.5e9 + 0.1 * index, provenance=Provenance("scene", "sim", index))


def write_scenes(folder: str | os.PathLike[str], count: int, *, with_pose: bool = True) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        save_frame_npz(folder / f"{i:06d}.npz", make_scene(i, with_pose=with_pose), compress=False)
    return folder


def write_road_geojson(path: str | os.PathLike[str], *, frame: str = "world") -> Path:
    """A GeoJSON map with one straight road covering the scenes' road strip (|y| <= 6 m ahead of the sensor),
    in world coordinates (the scenes' poses put the sensor at (1000 + i, 2000)) or in sensor coordinates."""
    import json

    x0, y0 = (1000.0, 2000.0) if frame == "world" else (0.0, 0.0)
    ring = [[x0 - 40, y0 + 6], [x0 + 64, y0 + 6], [x0 + 64, y0 - 6], [x0 - 40, y0 - 6], [x0 - 40, y0 + 6]]
    doc = {"type": "FeatureCollection", "frame": frame, "features": [
        {"type": "Feature", "properties": {"kind": "road", "id": "r0"},
         "geometry": {"type": "Polygon", "coordinates": [ring]}}]}
    path = Path(path)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


class TorchGridSut(GridSut):
    """:class:`GridSut`'s obstacles, each scored by a small seeded convolutional network (torch, fp32) over the
    occupancy counts: the obstacles, and so MR1's verdicts, are GridSut's, while the scores are floats from
    oneDNN's kernels, which differ in the last digits between CPU kinds (the cross-ISA replay tests)."""

    name = "torch-grid-test"

    def __init__(self, channels: int = 32, **kw) -> None:
        super().__init__(**kw)
        import torch

        gen = torch.Generator().manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Conv2d(1, channels, 7, padding=3), torch.nn.ReLU(),
                                       torch.nn.Conv2d(channels, channels, 7, padding=3), torch.nn.ReLU(),
                                       torch.nn.Conv2d(channels, 1, 7, padding=3)).eval()
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 / p[0].numel() ** 0.5))

    def detect(self, frame: Frame, roi) -> Obstacles:
        import dataclasses

        import torch

        obs = super().detect(frame, roi)
        xyz = xyz_of(frame.points)
        w = int(round(2 * self.half / self.cell))
        col = np.clip(np.floor((xyz[:, 0] + self.half) / self.cell).astype(np.int64), 0, w - 1)
        row = np.clip(np.floor((xyz[:, 1] + self.half) / self.cell).astype(np.int64), 0, w - 1)
        counts = np.zeros((w, w), dtype=np.float32)
        np.add.at(counts, (row, col), 1.0)
        with torch.no_grad():
            s = torch.sigmoid(self.net(torch.from_numpy(np.log1p(counts))[None, None]))[0, 0].numpy()
        return Obstacles([dataclasses.replace(o, score=float(s[row[o.point_indices], col[o.point_indices]].mean()))
                          for o in obs])


def torch_grid_sut(**kw) -> TorchGridSut:
    return TorchGridSut(**kw)
