"""KITTI object-benchmark folders: ``velodyne/*.bin`` with ``label_2`` boxes, ``calib`` and ``road_label``.

* ``velodyne/<id>.bin``: float32 x, y, z, reflectance (0..1) per point; intensity = reflectance x 255.
* ``label_2/<id>.txt``: camera-frame boxes (type, truncation, occlusion, alpha, 2D box, h w l, x y z of the
  bottom centre in the rectified camera frame, rotation_y). They become sensor-frame :data:`BOX_DTYPE` rows:
  centre = inv(R0_rect · Tr_velo_to_cam) · (x, y - h/2, z) (the camera's y points down, so the mid-height is
  h/2 above the bottom), length l, width w, height h, yaw = -rotation_y - π/2. Types map to Apollo's meta types:
  Car/Van → SMALLMOT, Truck → BIGMOT, Cyclist → NONMOT, Pedestrian/Person_sitting → PEDESTRIAN,
  Tram/Misc → UNKNOWN (as in the raw drives' tracklets: a tram is no car); DontCare is skipped. ``instance`` is the label's line number.
* ``calib/<id>.txt``: ``R0_rect`` (3x3), ``Tr_velo_to_cam`` (3x4) and ``P2``: with ``label_2`` the frame's labels
  carry ``Labels.region``, camera 2's view (:func:`lidarmt.io.kitti_region.object_region`, about 80 degrees ahead;
  None when the file lacks ``P2``): KITTI labels nothing outside it, so points and detections there are
  unlabelled, not background.
* ``road_label/<id>.label``: one uint32 per point, SemanticKITTI class id in the low 16 bits →
  ``Labels.point_semantic`` (aligned with the points after non-finite ones are dropped).

KITTI object frames have no world pose: ``frame.pose`` is None and ``describe()`` says so in the words every
command uses (:data:`lidarmt.io.errors.NO_POSE`); stamps are 0. The path may be the folder that holds
``velodyne/`` (or its ``training/`` parent), the ``velodyne/`` folder itself, or one ``.bin`` file anywhere.

The helpers :func:`read_velodyne_bin`, :func:`velodyne_points` and :func:`read_point_labels` are shared with the
KITTI raw (:mod:`lidarmt.io.kitti_raw`) and SemanticKITTI (:mod:`lidarmt.io.semantickitti`) readers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from lidarmt._limits import available_memory
from lidarmt._paths import open_readable, read_bytes
from lidarmt.io.base import Recording, RecordingInfo
from lidarmt.io.errors import NO_POSE, FormatError, NoPointCloudError, RecordingError
from lidarmt.io.kitti_region import read_calib
from lidarmt.io.tracklets import MAX_BOX_SIDE, MAX_BOXES_PER_FRAME
from lidarmt.types import BOX_DTYPE, Frame, Labels, MetaType, Provenance, finite_mask, make_points

KITTI_META: dict[str, MetaType | None] = {
    "Car": MetaType.SMALLMOT,
    "Van": MetaType.SMALLMOT,
    "Truck": MetaType.BIGMOT,
    "Tram": MetaType.UNKNOWN,
    "Cyclist": MetaType.NONMOT,
    "Pedestrian": MetaType.PEDESTRIAN,
    "Person_sitting": MetaType.PEDESTRIAN,
    "Misc": MetaType.UNKNOWN,
    "DontCare": None,
}


def velo_to_rect(calib: dict[str, np.ndarray], where: str) -> np.ndarray:
    """4x4 T(rectified camera <- velodyne) = R0_rect · Tr_velo_to_cam."""
    try:
        r0 = calib["R0_rect"].reshape(3, 3)
        tr = calib.get("Tr_velo_to_cam", calib.get("Tr_velo_cam"))
        tr = tr.reshape(3, 4)  # type: ignore[union-attr]
    except (KeyError, AttributeError, ValueError) as err:
        raise FormatError(f"{where}: calibration lacks R0_rect (3x3) or Tr_velo_to_cam (3x4)") from err
    a = np.eye(4)
    a[:3, :3] = r0
    b = np.eye(4)
    b[:3, :] = tr
    return a @ b


#: the most bytes a label_2 file may have: :data:`MAX_BOXES_PER_FRAME` lines of a few hundred characters
MAX_LABEL_BYTES = MAX_BOXES_PER_FRAME * 256


def read_label_boxes(path: Path, rect_from_velo: np.ndarray) -> np.ndarray:
    """KITTI label_2 lines as sensor-frame boxes (BOX_DTYPE); DontCare and unknown types are skipped.

    The file comes from whoever sent the folder, so it is read as data with limits, as the tracklet reader does:
    at most :data:`MAX_LABEL_BYTES` bytes and :data:`MAX_BOXES_PER_FRAME` lines, finite numbers, box sides from
    0 to :data:`MAX_BOX_SIDE` metres; anything else is a one-line :class:`FormatError` naming the line."""
    data = read_bytes(path, max_bytes=MAX_LABEL_BYTES, what="KITTI labels", error=FormatError)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise RecordingError(f"{path}: unreadable labels ({err})") from err
    if len(lines) > MAX_BOXES_PER_FRAME:
        raise FormatError(f"{path}: {len(lines):,} lines, more than the {MAX_BOXES_PER_FRAME:,} boxes lidarmt "
                          "reads for one frame")
    try:
        velo_from_rect = np.linalg.inv(rect_from_velo)
    except np.linalg.LinAlgError as err:
        raise FormatError(f"{path}: the calibration R0_rect · Tr_velo_to_cam is not invertible") from err
    rows = []
    for k, line in enumerate(lines):
        parts = line.split()
        if not parts:
            continue
        meta = KITTI_META.get(parts[0], MetaType.UNKNOWN if parts[0] not in KITTI_META else None)
        if meta is None:
            continue
        if len(parts) < 15:
            raise FormatError(f"{path}:{k + 1}: expected 15 values in a KITTI label, got {len(parts)}")
        try:
            h, w, l_, x, y, z, ry = (float(v) for v in parts[8:15])
        except ValueError as err:
            raise FormatError(f"{path}:{k + 1}: bad number in {line[:200]!r}") from err
        if not all(math.isfinite(v) for v in (h, w, l_, x, y, z, ry)):
            raise FormatError(f"{path}:{k + 1}: a number that is not finite (nan or inf) in {line[:200]!r}")
        if not all(0.0 <= v <= MAX_BOX_SIDE for v in (h, w, l_)):
            raise FormatError(f"{path}:{k + 1}: box sides h w l {h:g} {w:g} {l_:g} m are not all from 0 to "
                              f"{MAX_BOX_SIDE:g} m")
        c = velo_from_rect @ np.array([x, y - h / 2.0, z, 1.0])
        yaw = -ry - np.pi / 2.0
        yaw = (yaw + np.pi) % (2 * np.pi) - np.pi
        rows.append((c[0], c[1], c[2], l_, w, h, yaw, int(meta), k))
    return np.array(rows, dtype=BOX_DTYPE)


def read_velodyne_bin(path: Path) -> np.ndarray:
    """The (N, 4) float32 rows x, y, z, reflectance of a KITTI velodyne ``.bin`` scan."""
    # a regular file no bigger than the memory available now (never a FIFO or /dev/zero: lidarmt._paths)
    with open_readable(path, max_bytes=available_memory(), what="scan", error=RecordingError) as fh:
        try:
            raw = np.fromfile(fh, dtype="<f4")
        except OSError as err:
            raise RecordingError(f"{path}: unreadable ({err.strerror or err})") from err
    if raw.size % 4:
        raise FormatError(f"{path}: size {raw.size * 4} bytes is not a whole number of 16-byte points (truncated?)")
    return raw.reshape(-1, 4)


def velodyne_points(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(points, finite)`` of (N, 4) velodyne rows: every finite point (intensity = reflectance x 255), and the
    mask of the kept rows (None when all are kept) to align per-point labels with."""
    with np.errstate(over="ignore"):  # a reflectance beyond 1.3e36 becomes an infinite intensity: dropped
        pts = make_points(raw[:, :3], raw[:, 3] * np.float32(255.0))
    finite = finite_mask(pts)
    if finite.all():
        return pts, None
    return pts[finite], finite


def read_point_labels(path: Path, n_points: int, scan: str) -> np.ndarray:
    """The uint32 per-point labels of a ``.label`` file (SemanticKITTI: class id in the low 16 bits, instance in
    the high 16), checked to hold one label per point of ``scan``."""
    with open_readable(path, max_bytes=None, what="point labels", error=RecordingError) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            if size != 4 * n_points:
                raise FormatError(f"{path}: {size // 4} labels{' (and a partial one)' if size % 4 else ''} for "
                                  f"{n_points} points in {scan}; the label file does not belong to this scan")
            return np.fromfile(fh, dtype="<u4")
        except OSError as err:
            raise RecordingError(f"{path}: unreadable labels ({err.strerror or err})") from err


def semantic_of(labels: np.ndarray) -> np.ndarray:
    """SemanticKITTI class ids (int32) of uint32 labels: their low 16 bits."""
    return (labels & 0xFFFF).astype(np.int32)


class KittiRecording(Recording):
    """A KITTI object folder (``training/`` or its parent, its ``velodyne/`` folder, or one ``.bin`` anywhere)."""

    format = "kitti"

    def __init__(self, path, *, require_pose: bool = False, allow_empty: bool = False) -> None:
        super().__init__(path, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file or folder")
        if p.is_file():
            self.root = p.parent.parent if p.parent.name == "velodyne" else p.parent
            self.files = [p]
        else:
            self.root = p if (p / "velodyne").is_dir() else p.parent if p.name == "velodyne" else p / "training"
            vdir = self.root / "velodyne"
            if not vdir.is_dir():
                raise RecordingError(f"{p}: not a KITTI folder (no velodyne/ or training/velodyne/)")
            self.files = sorted(vdir.glob("*.bin"))
        if not self.files and not allow_empty:
            raise NoPointCloudError(f"{p}: no velodyne/*.bin frames")

    def _count(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> Frame:
        f = self.files[i]
        raw = read_velodyne_bin(f)
        pts, finite = velodyne_points(raw)
        dropped = len(raw) - len(pts)
        sem = None
        lab_path = self.root / "road_label" / (f.stem + ".label")
        if lab_path.is_file():
            sem = semantic_of(read_point_labels(lab_path, len(raw), f.name))
            sem = sem if finite is None else sem[finite]
        boxes = np.zeros(0, dtype=BOX_DTYPE)
        have_labels = False
        label_path = self.root / "label_2" / (f.stem + ".txt")
        calib_path = self.root / "calib" / (f.stem + ".txt")
        region = camera = calib = None
        if calib_path.exists():  # not is_file(): a FIFO is refused in one line, not skipped
            from lidarmt.io.kitti_region import object_camera

            calib = read_calib(calib_path)
            image = self.root / "image_2" / (f.stem + ".png")
            camera = object_camera(calib, where=str(calib_path), image=str(image) if image.is_file() else None)
        if label_path.exists() and calib is not None:
            from lidarmt.io.kitti_region import object_region

            rect_from_velo = velo_to_rect(calib, str(calib_path))
            boxes = read_label_boxes(label_path, rect_from_velo)
            # without P2 the view is unknown: the region stays None (evaluate then counts a forward sector)
            region = object_region(calib, where=str(calib_path)) if "P2" in calib else None
            have_labels = True
        labels = Labels(boxes, point_semantic=sem, region=region) if (have_labels or sem is not None) else None
        return Frame(pts, None, 0.0, "velodyne64", Provenance(str(self.path), "kitti", i, None, f.name),
                     labels=labels, dropped=dropped, camera=camera)

    @property
    def pose_source(self) -> str:
        return "none (KITTI object frames carry no pose)"

    def _describe_extra(self, info: RecordingInfo) -> None:
        n_lab = sum((self.root / "label_2" / (f.stem + ".txt")).is_file() for f in self.files)
        n_road = sum((self.root / "road_label" / (f.stem + ".label")).is_file() for f in self.files)
        info.extra["frames_with_boxes"] = n_lab
        info.extra["frames_with_road_labels"] = n_road
        info.notes.append(f"{NO_POSE}: KITTI object frames carry none, so an HD map in world coordinates cannot "
                          f"be placed; use the frames' road labels (--roi labels) or a map drawn in sensor "
                          f"coordinates (GeoJSON \"frame\": \"sensor\")")
