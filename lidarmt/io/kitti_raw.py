"""KITTI raw drives, read as they come, with a world pose per scan from the OXTS packets.

A drive folder (``2011_09_26_drive_0005_sync``) sits in its date folder beside the date's calibration::

    2011_09_26/
        calib_imu_to_velo.txt          R, T: velodyne <- imu (read when present)
        calib_velo_to_cam.txt          R, T: camera 0 <- velodyne (read when present; not needed for the pose)
        2011_09_26_drive_0005_sync/
            velodyne_points/data/0000000000.bin ...   float32 x, y, z, reflectance (as KITTI object scans)
            velodyne_points/timestamps.txt            one time per scan (the laser facing forward)
            velodyne_points/timestamps_start.txt      (optional) start and end of each sweep
            velodyne_points/timestamps_end.txt
            oxts/data/0000000000.txt ...              one OXTS packet each (lidarmt.io.oxts)
            oxts/timestamps.txt

The path may be the drive folder, its ``velodyne_points`` or ``velodyne_points/data`` folder, or one scan
``velodyne_points/data/NNNNNNNNNN.bin``. A scan's number (its file name) is its line in the timestamp files.

**Pose** world <- velodyne = world <- imu · imu <- velodyne: world <- imu from the OXTS packet nearest in time to
the scan's ``timestamps.txt`` time (:meth:`lidarmt.io.oxts.UtmZone.pose`: UTM easting, northing, altitude; roll,
pitch, yaw turned onto the UTM grid), imu <- velodyne the inverse of ``calib_imu_to_velo.txt``'s R, T (looked for
in the drive folder, then in its date folder). Without that file the extrinsic is the identity, and ``describe()``
says "identity-extrinsic": the poses are then the IMU's, about a metre off. Without timestamps (either side) the
packet with the scan's own number is taken, and ``describe()`` says "by index". A scan whose nearest packet is
more than ``max_oxts_gap`` seconds away has no pose. All poses of a drive are in the UTM zone of its first packet
(or ``utm_zone``), so that they do not jump at a zone border.

``frame.stamp`` is the scan's ``timestamps.txt`` time (without the file: its packet's time, else 0); the sweep's start and end times are
kept in :attr:`KittiRawRecording.sweep_start` / :attr:`KittiRawRecording.sweep_end` (NaN when absent).

**Labels.** When the drive folder holds KITTI's ``tracklet_labels.xml`` (:mod:`lidarmt.io.tracklets`), every
scan carries :class:`~lidarmt.types.Labels`: the boxes of the tracklets in that frame (frame = the scan's
number), per-point instance and meta type of the points inside them, and ``region`` = camera 2's view
(:func:`lidarmt.io.kitti_region.raw_region`, from ``calib_velo_to_cam.txt`` and ``calib_cam_to_cam.txt`` in the
drive or date folder): KITTI labels only what that camera sees, so points outside it are unlabelled. Without the
camera calibration the region is None and ``describe()`` says so. ``tracklets=False`` ignores the file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from lidarmt.io.base import Recording, RecordingInfo
from lidarmt.io.errors import NO_POSE, FormatError, NoPointCloudError, PoseError, RecordingError, WriterError
from lidarmt.io.kitti import read_calib, read_velodyne_bin, velodyne_points
from lidarmt.io.oxts import UtmZone, format_oxts_line, format_timestamp, read_oxts_file, read_timestamps
from lidarmt.io.tracklets import TRACKLET_FILE, TrackletLabels, read_tracklets
from lidarmt.types import CameraLink, Frame, LabelledRegion, Provenance

IMU_TO_VELO = "calib_imu_to_velo.txt"
VELO_TO_CAM = "calib_velo_to_cam.txt"
CAM_TO_CAM = "calib_cam_to_cam.txt"


def _number(p: Path) -> int | None:
    return int(p.stem) if p.stem.isdigit() else None


def _numbered(folder: Path, suffix: str) -> list[Path]:
    """Files ``NNN<suffix>`` of a folder in numeric order (names that are not numbers last, by name)."""
    files = [c for c in folder.iterdir() if c.suffix.lower() == suffix and c.is_file()] if folder.is_dir() else []
    return sorted(files, key=lambda c: (_number(c) is None, _number(c) or 0, c.name))


def read_rt(path: Path) -> np.ndarray:
    """4x4 transform of a KITTI raw calibration file with ``R:`` (3x3, row-major) and ``T:`` (3) lines."""
    calib = read_calib(path)
    r, t = calib.get("R"), calib.get("T")
    if r is None or t is None or r.size != 9 or t.size != 3:
        raise FormatError(f"{path}: expected 'R:' with 9 numbers and 'T:' with 3; is this a KITTI raw calibration "
                          f"file?")
    out = np.eye(4)
    out[:3, :3] = r.reshape(3, 3)
    out[:3, 3] = t
    if not np.all(np.isfinite(out)) or abs(np.linalg.det(out[:3, :3]) - 1.0) > 1e-3:
        raise FormatError(f"{path}: R is not a rotation (determinant {np.linalg.det(out[:3, :3]):.6g})")
    return out


def drive_folder(path: str | os.PathLike[str]) -> Path | None:
    """The drive folder of a KITTI raw path (drive, ``velodyne_points``, ``velodyne_points/data`` or a scan in
    it), or None when the path is not in a raw drive."""
    p = Path(path)
    if p.is_file():
        if p.parent.name == "data" and p.parent.parent.name == "velodyne_points":
            return p.parent.parent.parent
        return None
    if (p / "velodyne_points").is_dir():
        return p
    if p.name == "velodyne_points" and (p / "data").is_dir():
        return p.parent
    if p.name == "data" and p.parent.name == "velodyne_points":
        return p.parent.parent
    return None


class KittiRawRecording(Recording):
    """A KITTI raw drive (see the module docstring): scans streamed one at a time, poses from OXTS."""

    format = "kitti-raw"

    def __init__(self, path: str | os.PathLike[str], *, require_pose: bool = False, allow_empty: bool = False,
                 max_oxts_gap: float = 0.5, utm_zone: int | None = None, tracklets: bool = True) -> None:
        super().__init__(path, require_pose=require_pose)
        p = self.path
        if not p.exists():
            raise RecordingError(f"{p}: no such file or folder")
        drive = drive_folder(p)
        if drive is None:
            raise RecordingError(f"{p}: not in a KITTI raw drive (expected <drive>_sync/velodyne_points/data/)")
        self.drive = drive
        self.velo_dir = drive / "velodyne_points"
        data = self.velo_dir / "data"
        self.files = [p] if p.is_file() else _numbered(data, ".bin")
        if not self.files:
            if _numbered(data, ".txt"):
                raise NoPointCloudError(f"{data}: scans stored as text (an unsynced _extract drive?); only the "
                                        f".bin scans of a _sync drive are read")
            if not allow_empty:
                raise NoPointCloudError(f"{data}: no .bin scans")
        position = {f.name: k for k, f in enumerate(_numbered(data, ".bin") if p.is_file() else self.files)}
        # a scan's number is its line in the timestamp files: its file name, or its place for other names
        self._numbers = [n if (n := _number(f)) is not None else position.get(f.name, 0) for f in self.files]
        self.max_oxts_gap = float(max_oxts_gap)

        # times of the scans (by scan number)
        self.scan_times = self._times(self.velo_dir / "timestamps.txt")
        self.sweep_start = self._times(self.velo_dir / "timestamps_start.txt")
        self.sweep_end = self._times(self.velo_dir / "timestamps_end.txt")

        # calibration: the drive folder first, then its date folder
        self.imu_to_velo_path = self._calib(IMU_TO_VELO)
        self.velo_to_cam_path = self._calib(VELO_TO_CAM)
        self.velo_from_imu = None if self.imu_to_velo_path is None else read_rt(self.imu_to_velo_path)
        self.cam_from_velo = None if self.velo_to_cam_path is None else read_rt(self.velo_to_cam_path)
        self.imu_from_velo = np.eye(4) if self.velo_from_imu is None else np.linalg.inv(self.velo_from_imu)

        # tracklet labels and the part of the sweep they cover (camera 2's view)
        self.tracklet_path: Path | None = drive / TRACKLET_FILE if tracklets and (drive / TRACKLET_FILE).is_file() else None
        self.tracklets: TrackletLabels | None = None
        self.region: LabelledRegion | None = None
        if self.tracklet_path is not None:
            self.tracklets = TrackletLabels(read_tracklets(self.tracklet_path), source=str(self.tracklet_path))
            cam_to_cam = self._calib(CAM_TO_CAM)
            if self.velo_to_cam_path is not None and cam_to_cam is not None:
                from lidarmt.io.kitti_region import raw_region

                if cam_to_cam.parent == self.velo_to_cam_path.parent:
                    self.region = raw_region(cam_to_cam.parent)

        # camera 2 (calibration in the date folder, image_02 beside the scans when present): the stream each
        # sweep is paired with, image k with scan k (KITTI's cameras are triggered by the Velodyne)
        self.camera: CameraLink | None = None
        self.image_dir = drive / "image_02"
        self.image_times: np.ndarray | None = None
        cam_to_cam_path = self._calib(CAM_TO_CAM)
        if (self.velo_to_cam_path is not None and cam_to_cam_path is not None
                and cam_to_cam_path.parent == self.velo_to_cam_path.parent):
            from lidarmt.io.kitti_region import raw_camera

            self.camera = raw_camera(cam_to_cam_path.parent)
            self.image_times = self._times(self.image_dir / "timestamps.txt")

        # OXTS packets and which one each scan takes
        self.oxts_dir = drive / "oxts"
        self.oxts_files = _numbered(self.oxts_dir / "data", ".txt")
        self._oxts_by_number = {n: f for f in self.oxts_files if (n := _number(f)) is not None}
        self.oxts_times = self._times(self.oxts_dir / "timestamps.txt", scans=False)
        self.zone: UtmZone | None = None
        if self.oxts_files:
            first = read_oxts_file(self.oxts_files[0])
            self.zone = UtmZone(utm_zone, bool(first[0] < 0)) if utm_zone else UtmZone.of(first[0], first[1])
        self._match()

    # ------------------------------------------------------------------------------------------ opening

    def _calib(self, name: str) -> Path | None:
        for d in (self.drive, self.drive.parent):
            if (d / name).is_file():
                return d / name
        return None

    def _times(self, path: Path, *, scans: bool = True) -> np.ndarray | None:
        if not path.is_file():
            return None
        t = read_timestamps(path)
        if scans and self._numbers:
            need = max(self._numbers) + 1
            if len(t) < need:
                raise FormatError(f"{path}: {len(t)} times for scans numbered up to {need - 1} in "
                                  f"{self.velo_dir / 'data'}; the file is short or belongs to another drive")
        return t

    def _match(self) -> None:
        """Choose the OXTS packet of every scan: nearest in time, else the same number."""
        n = len(self.files)
        self._oxts_of = np.full(n, -1, dtype=np.int64)  # packet number, -1 = none
        self._gap = np.full(n, np.nan)
        if not self._oxts_by_number:
            self.matching = self.matching_detail = f"none (no oxts/data/*.txt in {self.drive})"
            return
        nums = np.array(sorted(self._oxts_by_number), dtype=np.int64)
        if self.scan_times is not None and self.oxts_times is not None:
            have = nums[nums < len(self.oxts_times)]
            t = self.oxts_times[have]
            ok = np.isfinite(t)
            have, t = have[ok], t[ok]
            order = np.argsort(t, kind="stable")
            have, t = have[order], t[order]
            if len(t):
                for i, num in enumerate(self._numbers):
                    ts = self.scan_times[num]
                    if not np.isfinite(ts):
                        continue
                    k = int(np.searchsorted(t, ts))
                    best = min((c for c in (k - 1, k) if 0 <= c < len(t)), key=lambda c: abs(t[c] - ts))
                    self._gap[i] = abs(t[best] - ts)
                    if self._gap[i] <= self.max_oxts_gap:
                        self._oxts_of[i] = have[best]
            gaps = self._gap[np.isfinite(self._gap)]
            self.matching = "nearest in time"
            self.matching_detail = "nearest in time" + (f" (largest |Δt| {gaps.max():.4f} s)" if len(gaps) else "")
            return
        missing = "velodyne_points/timestamps.txt" if self.scan_times is None else "oxts/timestamps.txt"
        for i, num in enumerate(self._numbers):
            if num in self._oxts_by_number:
                self._oxts_of[i] = num
        self.matching = "by index"
        self.matching_detail = f"by index (no {missing}): the packet with the scan's number"

    # ------------------------------------------------------------------------------------------ reading

    def _count(self) -> int:
        return len(self.files)

    def pose_of(self, i: int) -> np.ndarray | None:
        """The pose world <- velodyne of scan ``i`` (None when no OXTS packet is matched to it)."""
        num = int(self._oxts_of[i])
        if num < 0 or self.zone is None:
            return None
        world_from_imu = self.zone.pose(read_oxts_file(self._oxts_by_number[num]))
        return world_from_imu @ self.imu_from_velo

    def _read(self, i: int) -> Frame:
        f = self.files[i]
        raw = read_velodyne_bin(f)
        pts, _finite = velodyne_points(raw)
        num = self._numbers[i]
        stamp = 0.0
        if self.scan_times is not None and np.isfinite(self.scan_times[num]):
            stamp = float(self.scan_times[num])
        elif self.oxts_times is not None and 0 <= self._oxts_of[i] < len(self.oxts_times):
            stamp = float(np.nan_to_num(self.oxts_times[self._oxts_of[i]]))  # by index: the packet's time
        labels = None if self.tracklets is None else self.tracklets.labels(num, pts, region=self.region)
        return Frame(pts, self.pose_of(i), stamp, "velodyne64",
                     Provenance(str(self.path), self.format, i, None, f.name), labels=labels,
                     dropped=len(raw) - len(pts), camera=self.camera_of(num, stamp))

    def camera_of(self, num: int, stamp: float) -> CameraLink | None:
        """Camera 2's image paired with scan ``num``: its index, time (``image_02/timestamps.txt``, else the
        scan's) and file (``image_02/data/<num>.png`` when present); None without the camera calibration."""
        if self.camera is None:
            return None
        t = stamp
        if self.image_times is not None and np.isfinite(self.image_times[num]):
            t = float(self.image_times[num])
        image = self.image_dir / "data" / f"{num:010d}.png"
        return dataclasses.replace(self.camera, index=num, stamp=t, image=str(image) if image.is_file() else None)

    # ------------------------------------------------------------------------------------------ summary

    @property
    def extrinsic(self) -> str:
        """Where imu <- velodyne comes from, in words."""
        if self.imu_to_velo_path is None:
            return f"identity-extrinsic (no {IMU_TO_VELO} in {self.drive} or {self.drive.parent})"
        return f"{self.imu_to_velo_path} (velodyne <- imu, inverted)"

    @property
    def pose_source(self) -> str:
        if self.zone is None:
            return f"none (no OXTS packets in {self.oxts_dir / 'data'})"
        ext = IMU_TO_VELO if self.imu_to_velo_path is not None else "identity-extrinsic"
        return f"OXTS (UTM zone {self.zone.name}, matched {self.matching}) · imu <- velodyne from {ext}"

    def _describe_extra(self, info: RecordingInfo) -> None:
        info.extra["oxts_packets"] = len(self.oxts_files)
        if self.zone is not None:
            info.extra["utm_zone"] = self.zone.name
        info.extra["oxts_matching"] = self.matching_detail
        if self.tracklets is not None:
            info.extra["labels"] = f"{TRACKLET_FILE}: {self.tracklets.summary()}"
            info.extra["labelled_region"] = (self.region.describe() if self.region is not None else
                                             f"unknown (no {VELO_TO_CAM} and {CAM_TO_CAM} in one folder)")
            if self.region is None:
                info.notes.append(f"the tracklets cover only camera 2's view, but without {VELO_TO_CAM} and "
                                  f"{CAM_TO_CAM} beside the drive that view is unknown: every point counts as "
                                  "labelled; copy the date folder's calibration files")
        info.extra["extrinsic"] = self.extrinsic
        if self.velo_to_cam_path is not None:
            info.extra["camera_calibration"] = str(self.velo_to_cam_path)
        if self.sweep_start is not None and self.sweep_end is not None:
            nums = np.asarray(self._numbers, dtype=np.int64)
            if len(self.sweep_end) > nums.max(initial=-1):
                d = self.sweep_end[nums] - self.sweep_start[nums]
                d = d[np.isfinite(d)]
                if len(d):
                    info.extra["sweep_duration_s"] = round(float(np.median(d)), 6)
        if self.imu_to_velo_path is None and self.zone is not None:
            info.notes.append(f"identity-extrinsic: no {IMU_TO_VELO} beside the drive, so the poses are the IMU's "
                              f"(KITTI's velodyne is about 1 m from it); copy the date folder's calibration files")
        unmatched = int((self._oxts_of < 0).sum())
        if unmatched and self.zone is not None:
            why = (f"no OXTS packet within {self.max_oxts_gap:g} s" if self.matching.startswith("nearest")
                   else "no OXTS packet with the same number")
            info.notes.append(f"{unmatched} scan(s) have {NO_POSE}: {why}")


def _require_pose(frame: Frame, k: int) -> np.ndarray:
    if frame.pose is None:
        raise PoseError(f"frame {k} has {NO_POSE}; a KITTI raw drive needs one per scan for its OXTS packet")
    return frame.pose


def write_kitti_raw_drive(
    drive: str | os.PathLike[str],
    frames,
    *,
    velo_from_imu: np.ndarray | None = None,
    zone: UtmZone | None = None,
    sweep: float = 0.1,
    overwrite: bool = False,
    camera: CameraLink | None = None,
) -> int:
    """Write frames (with UTM poses world <- velodyne) as a KITTI raw ``_sync`` drive folder; returns the count.

    Scans go to ``velodyne_points/data`` (reflectance = intensity / 255), their stamps to the timestamp files
    (start/end = stamp ∓ ``sweep`` / 2), one OXTS packet per scan (attitude and position of world <- imu =
    pose · inv(velo_from_imu); velocities and accelerations 0) to ``oxts/``, and ``velo_from_imu`` (when given)
    to the date folder's ``calib_imu_to_velo.txt``, as KITTI lays them out. The drive folder is built beside its
    target and renamed into place when complete. For tests and for handing simulated drives to KITTI tools.

    ``camera`` (a :class:`lidarmt.types.CameraLink`) adds camera 2's stream: its calibration to the date folder's
    ``calib_velo_to_cam.txt`` (R, T = the extrinsic; ``R_rect_00`` = identity) and ``calib_cam_to_cam.txt``
    (``P_rect_02``, ``S_rect_02``), and ``image_02/timestamps.txt``: each frame's own ``camera.stamp`` when it has
    a camera link, else its scan's stamp. No pixels are written.
    """
    from lidarmt._atomic import atomic_write_text
    from lidarmt.io._output import staged

    drive = Path(drive)
    frames = list(frames)
    if zone is None:
        zone = UtmZone(32)  # KITTI's (Karlsruhe)
    imu_from_velo = np.eye(4) if velo_from_imu is None else np.linalg.inv(np.asarray(velo_from_imu, float))
    for name, wanted in ((IMU_TO_VELO, velo_from_imu), (VELO_TO_CAM, camera), (CAM_TO_CAM, camera)):
        calib = drive.parent / name
        if wanted is not None and calib.exists() and not overwrite:
            raise WriterError(f"{calib} exists; pass overwrite=True to replace it")
    with staged(drive, overwrite=overwrite) as tmp:
        vd, od = tmp / "velodyne_points" / "data", tmp / "oxts" / "data"
        vd.mkdir(parents=True)
        od.mkdir(parents=True)
        stamps = []
        for k, f in enumerate(frames):
            raw = np.empty((len(f.points), 4), dtype="<f4")
            for j, axis in enumerate("xyz"):
                raw[:, j] = f.points[axis]
            raw[:, 3] = f.points["intensity"] / np.float32(255.0)
            raw.tofile(vd / f"{k:010d}.bin")
            world_from_imu = _require_pose(f, k) @ np.linalg.inv(imu_from_velo)
            packet = [*zone.packet(world_from_imu)] + [0.0] * 19 + [4, 10, 5, 5, 5]
            (od / f"{k:010d}.txt").write_text(format_oxts_line(packet) + "\n")
            stamps.append(f.stamp)
        text = "".join(format_timestamp(t) + "\n" for t in stamps)
        (tmp / "velodyne_points" / "timestamps.txt").write_text(text)
        (tmp / "oxts" / "timestamps.txt").write_text(text)
        for name, d in (("timestamps_start.txt", -sweep / 2), ("timestamps_end.txt", sweep / 2)):
            (tmp / "velodyne_points" / name).write_text("".join(format_timestamp(t + d) + "\n" for t in stamps))
        if camera is not None:
            (tmp / "image_02").mkdir()
            (tmp / "image_02" / "timestamps.txt").write_text("".join(
                format_timestamp(f.camera.stamp if f.camera is not None else f.stamp) + "\n" for f in frames))
    if velo_from_imu is not None:
        m = np.asarray(velo_from_imu, dtype=np.float64)
        atomic_write_text(drive.parent / IMU_TO_VELO, "calib_time: written by lidarmt\n"
                          f"R: {' '.join(repr(float(v)) for v in m[:3, :3].ravel())}\n"
                          f"T: {' '.join(repr(float(v)) for v in m[:3, 3])}\n")
    if camera is not None:
        e = camera.extrinsic

        def nums(a: np.ndarray) -> str:
            return " ".join(repr(float(v)) for v in np.asarray(a, dtype=np.float64).ravel())

        atomic_write_text(drive.parent / VELO_TO_CAM, f"calib_time: written by lidarmt\nR: {nums(e[:3, :3])}\n"
                          f"T: {nums(e[:3, 3])}\n")
        atomic_write_text(drive.parent / CAM_TO_CAM, f"calib_time: written by lidarmt\nR_rect_00: {nums(np.eye(3))}\n"
                          f"S_rect_02: {camera.width} {camera.height}\nP_rect_02: {nums(camera.intrinsic)}\n")
    return len(frames)
