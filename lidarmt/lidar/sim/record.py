"""Simulated recordings: an Apollo-style ROS1 bag, its HD map, and ground truth beside it.

``simulate_recording(bag, map_dir, seed=S, frames=N)`` writes

* ``bag``: ``sensor_msgs/PointCloud2`` on ``/apollo/sensor/velodyne64/compensator/PointCloud2`` (frame
  ``velodyne64``, Apollo's 32-byte point layout with ring), ``/tf`` world→novatel per sweep and ``/tf_static``
  novatel→velodyne64 (:data:`NOVATEL_FROM_SENSOR`: novatel is the IMU's right-forward-up frame 1.1 m behind
  and below the LiDAR), so ``lidarmt info`` and the ROI filter read it like a real Apollo recording; with the
  camera on, also a ``sensor_msgs/Image`` (rgb8, 640x480) on ``/apollo/sensor/camera/front_6mm/image`` and the
  ego's front-wheel steering angle as ``std_msgs/Float64`` on ``/lidarmt/steering_angle`` (radians, positive
  = left, bicycle model with a 2.8 m wheelbase), one per sweep at the sweep's stamp;
* ``map_dir``: the town as an Apollo HD map (``base_map.bin``, ``base_map.txt``, ``base_map.geojson``) in
  UTM zone 10 coordinates;
* ``<bag without .bag>.labels.npz``: ground truth, aligned point for point with the bag's clouds: for sweep
  ``k`` the arrays ``point_instance_k`` (int32, -1 = none), ``point_meta_k`` (int8 MetaType, -1 = background)
  ``point_semantic_k`` (int32 SemanticKITTI class id: 40 road, 48 sidewalk, 60 lane marking, 72 terrain,
  50 building, 70 vegetation, 10 car, 30 person, 31 bicyclist, ...) and ``boxes_k`` (lidarmt.types.BOX_DTYPE,
  sensor frame), plus ``stamps`` (float64) and, with the camera on, ``camera_extrinsic`` (4x4 camera <- LiDAR),
  ``camera_intrinsic`` (3x4) and ``camera_size`` (width, height): the frames' camera link. Read it with
  :func:`load_labels`.

The town seed and the drive seed both derive from ``seed``, so a seed names one recording exactly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt._atomic import atomic_path, remove_stale_temporaries
from lidarmt.errors import InputError
from lidarmt.lidar.sim.errors import SimArgumentError, SimOutputError
from lidarmt.types import Labels

CAMERA_TOPIC = "/apollo/sensor/camera/front_6mm/image"
STEERING_TOPIC = "/lidarmt/steering_angle"
NOVATEL_FROM_SENSOR = np.array(
    [[0.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.1], [0.0, 0.0, 1.0, 1.2], [0.0, 0.0, 0.0, 1.0]]
)


@dataclass(frozen=True, slots=True)
class RecordingSummary:
    bag: Path
    map_dir: Path | None
    labels: Path
    frames: int
    points: int
    seconds: float
    #: hidden temporaries of these outputs that an interrupted (SIGKILLed) earlier run had left, now deleted
    removed: tuple[Path, ...] = ()


#: The files :func:`write_town_map` writes in a map folder (their stale temporaries are cleaned on start).
MAP_FILES = r"base_map\.(?:bin|txt|geojson)"


def labels_path(bag: str | os.PathLike[str]) -> Path:
    """Where the ground truth of a simulated bag lives: ``x.bag`` -> ``x.labels.npz``."""
    bag = Path(bag)
    return bag.with_name(bag.stem + ".labels.npz") if bag.suffix == ".bag" else bag.with_name(bag.name + ".labels.npz")


def load_labels(path: str | os.PathLike[str]) -> list[Labels]:
    """The per-sweep ground truth written beside a simulated bag (a bag path or the .labels.npz itself)."""
    path = Path(path)
    if path.suffix == ".bag":
        path = labels_path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            n = len(z["stamps"])
            return [Labels(z[f"boxes_{k}"], z[f"point_instance_{k}"], z[f"point_meta_{k}"],
                           z[f"point_semantic_{k}"] if f"point_semantic_{k}" in z.files else None)
                    for k in range(n)]
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file (simulate the bag with `lidarmt simulate` to get its labels)") from err
    except (OSError, KeyError, ValueError) as err:
        raise InputError(f"{path}: not a lidarmt simulation labels file ({err})") from err


def write_town_map(town, map_dir: str | os.PathLike[str], *, name: str = "lidarmt_town",
                   overwrite: bool = False) -> dict[str, Path]:
    """Write a town's HD map as ``base_map.bin``, ``base_map.txt`` and ``base_map.geojson`` in ``map_dir``."""
    from lidarmt.lidar.roi import write_map

    return write_map(town.hdmap(name=name), map_dir, formats=("bin", "txt", "geojson"), overwrite=overwrite)


def simulate_recording(
    bag: str | os.PathLike[str],
    map_dir: str | os.PathLike[str] | None,
    *,
    seed: int,
    frames: int,
    overwrite: bool = False,
    camera: bool = True,
    density: float = 1.0,
    on_frame: Callable[[int, int], None] | None = None,
    sensor: str = "hdl64",
) -> RecordingSummary:
    """Simulate ``frames`` sweeps of a drive through the town of ``seed`` and record them (see the module doc);
    ``sensor`` names the sensor profile cast (:mod:`lidarmt.lidar.sensors`, default the KITTI HDL-64E)."""
    import time

    from lidarmt.io import Ros1BagWriter
    from lidarmt.lidar.sim.drive import STAMP0, Drive
    from lidarmt.lidar.sim.lidar import sensor_model

    if frames < 1:
        raise SimArgumentError(f"--frames must be at least 1, got {frames}")
    bag = Path(bag)
    lab = labels_path(bag)
    if not overwrite:
        taken = [str(p) for p in (bag, lab) if p.exists()]
        if map_dir is not None:
            taken += [str(Path(map_dir) / n) for n in ("base_map.bin", "base_map.txt", "base_map.geojson")
                      if (Path(map_dir) / n).exists()]
        if taken:
            raise SimOutputError(f"{', '.join(taken)} already exist(s); pass --overwrite to replace, or choose new paths")
    if bag.exists() and bag.is_dir():
        raise SimOutputError(f"{bag} is a folder; --out names the .bag file to write")
    if map_dir is not None and Path(map_dir).exists() and not Path(map_dir).is_dir():
        raise SimOutputError(f"{map_dir} exists and is not a folder; --map-out names the map folder to write")
    # a run killed by SIGKILL leaves its hidden temporaries (.demo.bag.1a2b3c4d.tmp): this run writes the same
    # outputs, so it removes them (only lidarmt's own temporaries of these outputs, and none a process holds open)
    removed = remove_stale_temporaries(bag.parent, re.escape(bag.name))
    removed += remove_stale_temporaries(lab.parent, re.escape(lab.name))
    if map_dir is not None:
        removed += remove_stale_temporaries(map_dir, MAP_FILES)
    t0 = time.perf_counter()
    drive = Drive.create(town_seed=seed * 7919 + 1, seed=seed, frames=frames, density=density,
                         stamp0=STAMP0 + seed * 10_000.0, sensor=sensor_model(sensor))
    drive.source = str(bag)
    cam = None
    if camera:
        from lidarmt.lidar.sim.camera import Camera

        cam = Camera()
    labels: dict[str, np.ndarray] = {}
    stamps = []
    total_points = 0
    with Ros1BagWriter(bag, novatel_from_sensor=NOVATEL_FROM_SENSOR, overwrite=overwrite) as writer:
        for k in range(frames):
            frame = drive.frame(k)
            writer.write(frame)
            t_ns = int(round(frame.stamp * 1e9))
            if cam is not None:
                img = cam.render(drive, k)
                writer.write_message(CAMERA_TOPIC, "sensor_msgs/msg/Image", _image_msg(writer, img, t_ns), t_ns)
                steer = drive.scene.ego.steering((k + 1) / 10.0)
                msg = writer.typestore.types["std_msgs/msg/Float64"](data=float(steer))
                writer.write_message(STEERING_TOPIC, "std_msgs/msg/Float64", msg, t_ns)
            assert frame.labels is not None
            labels[f"boxes_{k}"] = frame.labels.boxes
            labels[f"point_instance_{k}"] = frame.labels.point_instance
            labels[f"point_meta_{k}"] = frame.labels.point_meta
            labels[f"point_semantic_{k}"] = frame.labels.point_semantic
            stamps.append(frame.stamp)
            total_points += len(frame.points)
            if on_frame is not None:
                on_frame(k + 1, frames)
        if map_dir is not None:
            write_town_map(drive.town, map_dir, name=f"lidarmt_town_{seed}", overwrite=overwrite)
        labels["stamps"] = np.asarray(stamps, dtype=np.float64)
        if cam is not None:  # the camera the images come from: each sweep's image was rendered at its stamp
            labels["camera_extrinsic"] = cam.extrinsic(drive.scene.ego.sensor_height)
            labels["camera_intrinsic"] = cam.intrinsic()
            labels["camera_size"] = np.array([cam.width, cam.height], dtype=np.int64)
        write_npz_deterministic(lab, labels)
    return RecordingSummary(bag, None if map_dir is None else Path(map_dir), lab, frames, total_points,
                            time.perf_counter() - t0, tuple(removed))


def write_npz_deterministic(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> None:
    """Write arrays as a compressed .npz whose bytes depend only on the arrays (fixed zip time stamps)."""
    import io
    import zipfile

    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def _image_msg(writer, img: np.ndarray, t_ns: int):
    ts = writer.typestore
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]
    Image = ts.types["sensor_msgs/msg/Image"]
    h, w, _ = img.shape
    header = Header(seq=0, stamp=Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000),
                    frame_id="front_6mm")
    return Image(header=header, height=h, width=w, encoding="rgb8", is_bigendian=0, step=3 * w,
                 data=np.ascontiguousarray(img, dtype=np.uint8).reshape(-1))


def ensure_demo(bag: str | os.PathLike[str] = "bags/demo.bag", map_dir: str | os.PathLike[str] = "hdmaps/demo", *,
                seed: int = 7, frames: int = 30, camera: bool = True,
                on_frame: Callable[[int, int], None] | None = None) -> tuple[Path, Path]:
    """Build the demo recording and its map when either is missing (deterministic; a fresh clone runs offline).

    Returns (bag, map_dir). Nothing is rebuilt when the bag, its labels and ``map_dir/base_map.bin`` exist.
    """
    bag, map_dir = Path(bag), Path(map_dir)
    if bag.is_file() and labels_path(bag).is_file() and (map_dir / "base_map.bin").is_file():
        return bag, map_dir
    simulate_recording(bag, map_dir, seed=seed, frames=frames, overwrite=True, camera=camera, on_frame=on_frame)
    return bag, map_dir
