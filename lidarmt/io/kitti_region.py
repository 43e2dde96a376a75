"""The part of a KITTI sweep that its labels cover: the left colour camera's (camera 2's) horizontal view.

KITTI's 3D labels (object benchmark ``label_2`` and raw-drive tracklets) were drawn for objects visible in camera
2, so a point outside that camera's view is *unlabelled*, not background. The view is a sector about the sensor's
z axis: the azimuths, in the velodyne frame, of the horizontal rays that camera 2 images inside columns
``0 .. width``. It follows from the calibration:

* object benchmark: ``P2`` (3x4), ``R0_rect`` (3x3), ``Tr_velo_to_cam`` (3x4); the image width is not in the
  file (the benchmark's images are 1224–1242 px wide; 1242 is used unless given);
* raw drives: ``calib_velo_to_cam.txt`` (R, T) and ``calib_cam_to_cam.txt`` (``R_rect_00``, ``P_rect_02``, and
  ``S_rect_02`` for the width).

The sector is computed for points ``reference_range`` metres away on the sensor's horizontal plane (the 0.27 m
between the velodyne and the camera moves the edges by about 1.5 degrees at 10 m and 0.4 at 40 m).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lidarmt._paths import read_text
from lidarmt.io.errors import FormatError, RecordingError
from lidarmt.types import CameraLink, LabelledRegion

DEFAULT_IMAGE_WIDTH = 1242.0
DEFAULT_IMAGE_HEIGHT = 375.0
#: KITTI's cameras are triggered by the Velodyne once per turn, 10 times a second (Geiger et al., "Vision meets
#: robotics: the KITTI dataset", IJRR 2013, section III): the camera stream of a raw drive has the sweeps' period
KITTI_CAMERA_PERIOD_S = 0.1
REFERENCE_RANGE_M = 20.0


def region_from_projection(
    projection: np.ndarray,
    *,
    width: float = DEFAULT_IMAGE_WIDTH,
    reference_range: float = REFERENCE_RANGE_M,
    source: str = "",
) -> LabelledRegion:
    """The sector of azimuths whose horizontal rays project into image columns ``[0, width)``.

    ``projection`` is the 3x4 matrix image <- velodyne (homogeneous). Azimuths are sampled every 0.05 degrees.
    """
    p = np.asarray(projection, dtype=np.float64).reshape(3, 4)
    az = np.radians(np.arange(-180.0, 180.0, 0.05))
    pts = np.stack([reference_range * np.cos(az), reference_range * np.sin(az), np.zeros_like(az),
                    np.ones_like(az)])
    img = p @ pts
    depth = img[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = img[0] / depth
    visible = (depth > 0) & (u >= 0) & (u < width)
    if not visible.any():
        raise FormatError(f"{source or 'calibration'}: no horizontal ray projects into the camera image; "
                          "is this a KITTI calibration?")
    vis_az = az[visible]
    # the camera looks forward, so the visible sector does not wrap around +-180 degrees
    return LabelledRegion(float(vis_az.min()), float(vis_az.max()), None,
                          source or f"camera 2 view, {math.degrees(vis_az.max() - vis_az.min()):.1f} deg")


def object_region(calib: Mapping[str, np.ndarray], *, width: float = DEFAULT_IMAGE_WIDTH,
                  where: str = "calib") -> LabelledRegion:
    """Camera 2's view for a KITTI object-benchmark calibration (``P2``, ``R0_rect``, ``Tr_velo_to_cam``)."""
    try:
        p2 = np.asarray(calib["P2"], dtype=np.float64).reshape(3, 4)
        r0 = np.asarray(calib["R0_rect"], dtype=np.float64).reshape(3, 3)
        tr = np.asarray(calib.get("Tr_velo_to_cam", calib.get("Tr_velo_cam")), dtype=np.float64).reshape(3, 4)
    except (KeyError, TypeError, ValueError) as err:
        raise FormatError(f"{where}: calibration lacks P2 (3x4), R0_rect (3x3) or Tr_velo_to_cam (3x4)") from err
    rect = np.eye(4)
    rect[:3, :3] = r0
    velo = np.eye(4)
    velo[:3, :] = tr
    return region_from_projection(p2 @ rect @ velo, width=width, source=f"camera 2 view from {where}")


def _raw_calibration(date_folder: str | Path, where: str | None) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(velodyne -> rectified camera 0 as 4x4, ``P_rect_02``, image width, image height) of a KITTI raw date folder
    (``calib_velo_to_cam.txt``: R, T; ``calib_cam_to_cam.txt``: ``R_rect_00``, ``P_rect_02``, ``S_rect_02``)."""
    folder = Path(date_folder)
    v2c = read_calib(folder / "calib_velo_to_cam.txt")
    c2c = read_calib(folder / "calib_cam_to_cam.txt")
    try:
        velo = np.eye(4)
        velo[:3, :3] = np.asarray(v2c["R"], dtype=np.float64).reshape(3, 3)
        velo[:3, 3] = np.asarray(v2c["T"], dtype=np.float64).reshape(3)
        rect = np.eye(4)
        rect[:3, :3] = np.asarray(c2c["R_rect_00"], dtype=np.float64).reshape(3, 3)
        p2 = np.asarray(c2c["P_rect_02"], dtype=np.float64).reshape(3, 4)
        size = c2c.get("S_rect_02")
        if size is not None and np.size(size) >= 2:
            w, h = (float(v) for v in np.asarray(size).reshape(-1)[:2])
        elif size is not None and np.size(size) == 1:
            w, h = float(np.asarray(size).reshape(-1)[0]), float(DEFAULT_IMAGE_HEIGHT)
        else:
            w, h = float(DEFAULT_IMAGE_WIDTH), float(DEFAULT_IMAGE_HEIGHT)
    except (KeyError, TypeError, ValueError) as err:
        raise FormatError(f"{where or folder}: calib_velo_to_cam.txt needs R, T and calib_cam_to_cam.txt needs "
                          "R_rect_00 and P_rect_02") from err
    return rect @ velo, p2, w, h


def raw_region(date_folder: str | Path, *, where: str | None = None) -> LabelledRegion:
    """Camera 2's view for a KITTI raw date folder (``calib_velo_to_cam.txt`` and ``calib_cam_to_cam.txt``)."""
    ext, p2, width, _ = _raw_calibration(date_folder, where)
    return region_from_projection(p2 @ ext, width=width,
                                  source=f"camera 2 view from {where or Path(date_folder).name}/calib_*_to_cam.txt")


def read_calib(path: Path) -> dict[str, np.ndarray]:
    """A KITTI calibration file (object ``calib/*.txt`` or raw ``calib_*.txt``) as key -> numbers."""
    out: dict[str, np.ndarray] = {}
    text = read_text(path, what="calibration", error=RecordingError)  # a regular file of bounded size
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, rest = line.partition(":")
        if key.strip() == "calib_time":  # KITTI raw calibration files: "calib_time: 25-May-2012 16:30:16"
            continue
        try:
            out[key.strip()] = np.array([float(v) for v in rest.split()], dtype=np.float64)
        except ValueError as err:
            raise FormatError(f"{path}: bad number in {key.strip()}") from err
    return out


def object_camera(calib: Mapping[str, np.ndarray], *, where: str, image: str | None = None) -> CameraLink | None:
    """Camera 2 of a KITTI object-benchmark frame (``P2``, ``R0_rect``, ``Tr_velo_to_cam``) as a single image (the
    benchmark's frames are not a stream); None when the calibration lacks one of them."""
    try:
        p2 = np.asarray(calib["P2"], dtype=np.float64).reshape(3, 4)
        r0 = np.asarray(calib["R0_rect"], dtype=np.float64).reshape(3, 3)
        tr = np.asarray(calib.get("Tr_velo_to_cam", calib.get("Tr_velo_cam")), dtype=np.float64).reshape(3, 4)
    except (KeyError, TypeError, ValueError):
        return None
    ext = np.eye(4)
    ext[:3, :] = tr
    rect = np.eye(4)
    rect[:3, :3] = r0
    return CameraLink(rect @ ext, p2, int(DEFAULT_IMAGE_WIDTH), int(DEFAULT_IMAGE_HEIGHT), image=image,
                      source=f"camera 2 from {where}")


def raw_camera(date_folder: str | Path, *, where: str | None = None) -> CameraLink:
    """Camera 2 of a KITTI raw date folder (``calib_velo_to_cam.txt``: R, T; ``calib_cam_to_cam.txt``:
    ``R_rect_00``, ``P_rect_02``, ``S_rect_02``), as the stream of a drive (10 Hz, one image per sweep); the
    reader sets each frame's image index, stamp and file."""
    ext, p2, w, h = _raw_calibration(date_folder, where)
    return CameraLink(ext, p2, int(round(w)), int(round(h)), period_s=KITTI_CAMERA_PERIOD_S,
                      source=f"camera 2 from {where or Path(date_folder).name}/calib_*_to_cam.txt")
