"""SemanticKITTI sequences, read as they come: scans, per-point labels and poses.

A sequence folder (``dataset/sequences/08``) holds::

    velodyne/000000.bin ...   float32 x, y, z, reflectance per point (KITTI's scan format)
    labels/000000.label ...   (optional) one uint32 per point: class id in the low 16 bits, instance in the high 16
    poses.txt                 (optional) one pose per scan: 12 numbers, a row-major 3x4 matrix
                              T(camera 0 of scan 0 <- camera 0 of scan i)
    calib.txt                 P0..P3 and ``Tr:`` (12 numbers, 3x4) T(camera 0 <- velodyne)
    times.txt                 (optional) seconds since the sequence start, one per scan

The path may be the sequence folder, its ``velodyne`` folder or one scan in it. A scan's number (its file name) is
its line in ``poses.txt`` and ``times.txt``.

**Pose** world <- velodyne of scan i = inv(Tr) · pose_i · Tr: the convention of SemanticKITTI's own tools
(semantic-kitti-api, ``generate_sequential.py``'s ``parse_poses``: ``np.matmul(Tr_inv, np.matmul(pose, Tr))``).
The world is the velodyne frame of scan 0: a drive placed on itself, not on a map. Without ``calib.txt``, or with
one that has no ``Tr:`` line, the poses cannot be turned into the velodyne frame: the sweeps are read and the poses
are not used (``describe()`` says so; ``require_pose`` then refuses). A ``Tr:`` line that is there but damaged
(not 12 finite numbers, not a rotation) is an error.

**Labels** become ``Labels.point_semantic`` (the SemanticKITTI class ids, aligned with the points after the
non-finite ones are dropped), exactly as the KITTI object reader does with ``road_label/``. The **objects** are
SemanticKITTI's instances (:func:`instance_labels`): the points of a "thing" class (:data:`THING_META`) that share
a label (class in the low 16 bits, instance id > 0 in the high 16) are one object, numbered in
``Labels.point_instance`` (-1: no object) with its Apollo meta type in ``Labels.point_meta``, and a box fitted to
its points in ``Labels.boxes`` (the minimum-area rectangle of their x/y, their z extent; ``instance`` = its
number), so ``lidarmt evaluate`` counts them as it counts the simulator's objects. The labels cover the whole
sweep (``region`` None). ``frame.stamp`` is the scan's ``times.txt`` value (0 without the file).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_write_text
from lidarmt._paths import read_text
from lidarmt.io.base import Recording, RecordingInfo
from lidarmt.io.errors import NO_POSE, FormatError, NoPointCloudError, PoseError, RecordingError, WriterError
from lidarmt.io.kitti import read_calib, read_point_labels, read_velodyne_bin, semantic_of, velodyne_points
from lidarmt.io.posefile import MAX_POSE_BYTES
from lidarmt.types import BOX_DTYPE, Frame, Labels, MetaType, Provenance

#: SemanticKITTI "thing" classes (semantic-kitti.yaml) whose instances are objects, as Apollo's meta types:
#: vehicles are cars (car and moving-car small; bus, truck, other-vehicle big), person -> pedestrian, bicyclist
#: and motorcyclist (the riders) -> cyclist; a bicycle or motorcycle without a rider (11, 15; also the rider's
#: vehicle, which SemanticKITTI labels apart) and rail vehicles (16, 256) are unknown objects.
THING_META: dict[int, MetaType] = {
    10: MetaType.SMALLMOT, 252: MetaType.SMALLMOT,
    13: MetaType.BIGMOT, 18: MetaType.BIGMOT, 20: MetaType.BIGMOT, 257: MetaType.BIGMOT, 258: MetaType.BIGMOT,
    259: MetaType.BIGMOT,
    30: MetaType.PEDESTRIAN, 254: MetaType.PEDESTRIAN,
    31: MetaType.NONMOT, 32: MetaType.NONMOT, 253: MetaType.NONMOT, 255: MetaType.NONMOT,
    11: MetaType.UNKNOWN, 15: MetaType.UNKNOWN, 16: MetaType.UNKNOWN, 256: MetaType.UNKNOWN,
}

#: SemanticKITTI classes that are not background but unlabelled: 0 "unlabeled" (the ego car's roof ring, points
#: the annotators left) and 1 "outlier"; training leaves cells holding only these out of its losses.
UNLABELLED_CLASSES: tuple[int, ...] = (0, 1)

SEQUENCE_MARKERS = ("labels", "poses.txt", "calib.txt", "times.txt")


def sequence_folder(path: str | os.PathLike[str]) -> Path | None:
    """The sequence folder of a SemanticKITTI path (sequence, its ``velodyne`` folder, or a scan in it), or
    None when the path does not look like one (a ``velodyne/`` folder beside ``labels/``, ``poses.txt``,
    ``calib.txt`` or ``times.txt``; KITTI object folders have ``label_2/`` and ``calib/`` instead)."""
    p = Path(path)
    if p.is_file():
        p = p.parent
        if p.name != "velodyne":
            return None
    seq = p if (p / "velodyne").is_dir() else p.parent if p.name == "velodyne" else None
    if seq is None or not any((seq / m).exists() for m in SEQUENCE_MARKERS):
        return None
    return seq


def _rows(path: Path, width: int, what: str) -> np.ndarray:
    """The numbers of a text file of ``width`` numbers per line, as an (N, width) float64 array."""
    lines = read_text(path, max_bytes=MAX_POSE_BYTES, error=RecordingError).splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out = np.empty((len(lines), width))
    for k, ln in enumerate(lines):
        parts = ln.split()
        if len(parts) != width:
            raise FormatError(f"{path}:{k + 1}: expected {width} numbers ({what}), got {len(parts)}")
        try:
            out[k] = [float(v) for v in parts]
        except ValueError as err:
            raise FormatError(f"{path}:{k + 1}: not a number in {ln.strip()[:80]!r}") from err
        if not np.all(np.isfinite(out[k])):
            raise FormatError(f"{path}:{k + 1}: non-finite number in {ln.strip()[:80]!r}")
    return out


def read_poses_txt(path: str | os.PathLike[str]) -> np.ndarray:
    """The poses of a KITTI odometry / SemanticKITTI ``poses.txt`` as (N, 4, 4) float64 matrices."""
    rows = _rows(Path(path), 12, "a row-major 3x4 pose")
    out = np.tile(np.eye(4), (len(rows), 1, 1))
    out[:, :3, :] = rows.reshape(-1, 3, 4)
    return out


def read_tr(path: str | os.PathLike[str], *, missing_ok: bool = False) -> np.ndarray | None:
    """4x4 T(camera 0 <- velodyne) from a sequence's ``calib.txt`` (its ``Tr:`` line). With ``missing_ok`` a file
    without a ``Tr:`` line gives None (the poses are then not used); a ``Tr:`` line that is there but damaged is
    always an error."""
    path = Path(path)
    tr = read_calib(path).get("Tr")
    if tr is None and missing_ok:
        return None
    if tr is None or tr.size != 12 or not np.all(np.isfinite(tr)):
        raise FormatError(f"{path}: no 'Tr:' line of 12 numbers (velodyne -> camera 0); is this a KITTI odometry "
                          f"calib.txt?")
    out = np.eye(4)
    out[:3, :] = tr.reshape(3, 4)
    if abs(np.linalg.det(out[:3, :3]) - 1.0) > 1e-3:
        raise FormatError(f"{path}: Tr's rotation is not a rotation (determinant {np.linalg.det(out[:3, :3]):.6g})")
    return out


def velo_poses(poses: np.ndarray, tr: np.ndarray) -> np.ndarray:
    """World <- velodyne poses from camera-0 poses: inv(Tr) · pose_i · Tr (SemanticKITTI's convention)."""
    return np.linalg.inv(tr) @ poses @ tr


def fit_box(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[float, ...]:
    """``(cx, cy, cz, length, width, height, yaw)`` of the box around points: the minimum-area rectangle of
    their x/y (length along its longer side, ``yaw`` that side's direction in (-pi, pi]) and their z extent."""
    from shapely.geometry import MultiPoint

    xy = np.c_[x, y].astype(np.float64)
    zlo, zhi = float(np.min(z)), float(np.max(z))
    rect = MultiPoint(xy).minimum_rotated_rectangle if len(xy) >= 3 else None
    if rect is None or rect.geom_type != "Polygon" or rect.area <= 0:  # 1-2 points or collinear ones
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        d = hi - lo
        yaw = float(np.arctan2(d[1], d[0])) if d.any() else 0.0
        c = (lo + hi) / 2
        return (float(c[0]), float(c[1]), (zlo + zhi) / 2, float(np.hypot(*d)), 0.0, zhi - zlo, yaw)
    corners = np.asarray(rect.exterior.coords)[:4]
    e1, e2 = corners[1] - corners[0], corners[2] - corners[1]
    n1, n2 = float(np.hypot(*e1)), float(np.hypot(*e2))
    long_edge = e1 if n1 >= n2 else e2
    c = corners.mean(axis=0)
    yaw = float(np.arctan2(long_edge[1], long_edge[0]))
    return (float(c[0]), float(c[1]), (zlo + zhi) / 2, max(n1, n2), min(n1, n2), zhi - zlo, yaw)


def instance_labels(points: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(boxes, point_instance, point_meta)`` of a scan's uint32 SemanticKITTI labels (aligned with
    ``points``): one object per distinct label of a :data:`THING_META` class with an instance id > 0, numbered
    0.. in the order of their labels; a box (:data:`~lidarmt.types.BOX_DTYPE`) fitted to each (:func:`fit_box`)."""
    lab = np.asarray(labels, dtype=np.uint32)
    sem = (lab & 0xFFFF).astype(np.int64)
    inst_id = lab >> 16
    point_instance = np.full(len(lab), -1, dtype=np.int32)
    point_meta = np.full(len(lab), -1, dtype=np.int8)
    thing = np.isin(sem, np.fromiter(THING_META, dtype=np.int64)) & (inst_id > 0)
    rows = []
    if thing.any():
        idx = np.flatnonzero(thing)
        uniq, inverse = np.unique(lab[idx], return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
        for k, value in enumerate(uniq):
            members = idx[order[bounds[k]:bounds[k + 1]]]
            meta = THING_META[int(value) & 0xFFFF]
            point_instance[members] = k
            point_meta[members] = int(meta)
            p = points[members]
            rows.append((*fit_box(p["x"], p["y"], p["z"]), int(meta), k))
    return np.array(rows, dtype=BOX_DTYPE), point_instance, point_meta


class SemanticKittiRecording(Recording):
    """A SemanticKITTI sequence (see the module docstring): scans streamed one at a time, labels, poses."""

    format = "semantickitti"

    def __init__(self, path: str | os.PathLike[str], *, require_pose: bool = False,
                 allow_empty: bool = False) -> None:
        super().__init__(path, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file or folder")
        seq = sequence_folder(p)
        if seq is None:
            raise RecordingError(f"{p}: not a SemanticKITTI sequence (expected velodyne/ beside labels/, poses.txt "
                                 f"or calib.txt)")
        self.sequence = seq
        vdir = seq / "velodyne"
        every = sorted((c for c in vdir.iterdir() if c.suffix == ".bin" and c.is_file()),
                       key=lambda c: (not c.stem.isdigit(), int(c.stem) if c.stem.isdigit() else 0, c.name))
        self.files = [p] if p.is_file() else every
        if not self.files and not allow_empty:
            raise NoPointCloudError(f"{vdir}: no .bin scans")
        position = {f.name: k for k, f in enumerate(every)}
        self._numbers = [int(f.stem) if f.stem.isdigit() else position.get(f.name, 0) for f in self.files]
        need = max(self._numbers, default=-1) + 1
        n_scans = len(every)

        self.times: np.ndarray | None = None
        if (seq / "times.txt").is_file():
            self.times = _rows(seq / "times.txt", 1, "seconds since the sequence start")[:, 0]
            if len(self.times) < need:
                raise FormatError(f"{seq / 'times.txt'}: {len(self.times)} times for {n_scans} scans in {vdir} "
                                  f"(numbered up to {need - 1}); the file is short or belongs to another sequence")
        has_calib = (seq / "calib.txt").is_file()
        self.tr: np.ndarray | None = read_tr(seq / "calib.txt", missing_ok=True) if has_calib else None
        self._calib_without_tr = has_calib and self.tr is None
        self.cam_poses: np.ndarray | None = None
        self.poses: np.ndarray | None = None  # world <- velodyne, by scan number
        if (seq / "poses.txt").is_file():
            self.cam_poses = read_poses_txt(seq / "poses.txt")
            if len(self.cam_poses) < need:
                raise PoseError(f"{seq / 'poses.txt'}: {len(self.cam_poses)} poses for {n_scans} scans in {vdir} "
                                f"(numbered up to {need - 1}); the file is short or belongs to another sequence")
            if self.tr is not None:
                self.poses = velo_poses(self.cam_poses, self.tr)

    def _count(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> Frame:
        f = self.files[i]
        num = self._numbers[i]
        raw = read_velodyne_bin(f)
        pts, finite = velodyne_points(raw)
        labels = None
        lab_path = self.sequence / "labels" / (f.stem + ".label")
        if lab_path.is_file():
            full = read_point_labels(lab_path, len(raw), f.name)
            full = full if finite is None else full[finite]
            boxes, point_instance, point_meta = instance_labels(pts, full)
            labels = Labels(boxes, point_instance, point_meta, semantic_of(full))
        pose = None if self.poses is None else self.poses[num].copy()
        stamp = 0.0 if self.times is None else float(self.times[num])
        return Frame(pts, pose, stamp, "velodyne64", Provenance(str(self.path), self.format, i, None, f.name),
                     labels=labels, dropped=len(raw) - len(pts))

    @property
    def pose_source(self) -> str:
        if self.poses is not None:
            return ("SemanticKITTI poses.txt with calib.txt's Tr: inv(Tr) · pose · Tr (world = the velodyne frame "
                    "of scan 0, not a map frame)")
        if self.cam_poses is not None:
            if self._calib_without_tr:
                return f"none (poses.txt needs calib.txt's Tr, and {self.sequence / 'calib.txt'} has no 'Tr:' line)"
            return f"none (poses.txt needs calib.txt's Tr, and {self.sequence} has no calib.txt)"
        return f"none (no poses.txt in {self.sequence})"

    def _describe_extra(self, info: RecordingInfo) -> None:
        n_lab = sum((self.sequence / "labels" / (f.stem + ".label")).is_file() for f in self.files)
        info.extra["frames_with_point_labels"] = n_lab
        if self.cam_poses is not None and self.poses is None:
            where = (f"{self.sequence / 'calib.txt'} has no 'Tr:' line" if self._calib_without_tr
                     else f"calib.txt is missing from {self.sequence}")
            info.notes.append(f"{NO_POSE}: poses.txt is in camera-0 coordinates and needs calib.txt's Tr (velodyne "
                              f"-> camera 0), but {where}; the sweeps are read and the poses are not used (copy "
                              f"calib.txt from the KITTI odometry calibration to use them)")
        elif self.poses is not None:
            info.notes.append("poses are relative to scan 0 (SemanticKITTI has no map frame): an HD map in world "
                              "coordinates cannot be placed on them")


def write_semantickitti_sequence(
    folder: str | os.PathLike[str],
    frames,
    *,
    tr: np.ndarray,
    overwrite: bool = False,
) -> int:
    """Write frames as a SemanticKITTI sequence folder; returns the number of scans.

    ``velodyne/NNNNNN.bin`` (reflectance = intensity / 255), ``labels/NNNNNN.label`` when a frame has
    ``labels.point_semantic`` (class id in the low 16 bits; ``point_instance`` k, when given, as instance id k + 1
    in the high 16), ``times.txt`` from the stamps, ``calib.txt`` with
    ``Tr`` (4x4 or 3x4, camera 0 <- velodyne) and, when every frame has a pose world <- velodyne W_i,
    ``poses.txt`` with Tr · W_i · inv(Tr) (read back as W_i). Built beside the target, renamed into place.
    """
    from lidarmt.io._output import staged

    frames = list(frames)
    t = np.eye(4)
    t[:3, :] = np.asarray(tr, dtype=np.float64)[:3, :]
    posed = bool(frames) and all(f.pose is not None for f in frames)
    if not posed and any(f.pose is not None for f in frames):
        raise WriterError(f"{folder}: some frames have a pose and some do not; poses.txt needs one per scan")
    with staged(folder, overwrite=overwrite) as tmp:
        (tmp / "velodyne").mkdir(parents=True)
        for k, f in enumerate(frames):
            raw = np.empty((len(f.points), 4), dtype="<f4")
            for j, axis in enumerate("xyz"):
                raw[:, j] = f.points[axis]
            raw[:, 3] = f.points["intensity"] / np.float32(255.0)
            raw.tofile(tmp / "velodyne" / f"{k:06d}.bin")
            if f.labels is not None and f.labels.point_semantic is not None:
                (tmp / "labels").mkdir(exist_ok=True)
                value = f.labels.point_semantic.astype("<u4")
                if f.labels.point_instance is not None:  # instance k as SemanticKITTI's id k + 1 (0: none)
                    inst = f.labels.point_instance.astype(np.int64)
                    value = (value & np.uint32(0xFFFF)) | (np.where(inst >= 0, inst + 1, 0).astype("<u4")
                                                            << np.uint32(16))
                value.tofile(tmp / "labels" / f"{k:06d}.label")

        def row(m: np.ndarray) -> str:
            return " ".join(repr(float(v)) for v in m[:3, :].ravel())

        calib = "".join(f"P{c}: " + " ".join(["0.0"] * 12) + "\n" for c in range(4)) + f"Tr: {row(t)}\n"
        atomic_write_text(tmp / "calib.txt", calib)
        atomic_write_text(tmp / "times.txt", "".join(f"{f.stamp!r}\n" for f in frames))
        if posed:
            inv = np.linalg.inv(t)
            atomic_write_text(tmp / "poses.txt", "".join(row(t @ f.pose @ inv) + "\n" for f in frames))
    return len(frames)
