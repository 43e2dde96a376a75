"""The few types every layer shares: Frame, labels, Obstacle and its classes.

Conventions (see ARCHITECTURE.md):

* Points live in the **sensor frame** (Velodyne/ROS: x forward, y left, z up, metres) as a NumPy structured
  array with fields ``x, y, z`` (float32) and ``intensity`` (float32, 0..255), optionally ``ring`` (uint16) and
  ``time`` (float64, seconds since the Unix epoch, per point).
* ``Frame.pose`` is the 4x4 homogeneous transform **world <- sensor** (Apollo's ``velodyne_trans``), float64.
* Boxes are in the sensor frame: centre of the box (z at mid-height), size (length along the heading, width,
  height), yaw about +z from +x. Obstacles follow Apollo's MinBox convention instead: ``center`` is the centre of
  the box's *bottom* face (z = min z of the cluster).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

# ----------------------------------------------------------------------------------------------- points

XYZI_FIELDS: list[tuple[str, str]] = [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")]
RING_FIELD = ("ring", "<u2")
TIME_FIELD = ("time", "<f8")

POINT_DTYPE = np.dtype(XYZI_FIELDS)
POINT_DTYPE_FULL = np.dtype([*XYZI_FIELDS, RING_FIELD, TIME_FIELD])


def point_dtype(*, ring: bool = False, time: bool = False) -> np.dtype:
    """The structured dtype of a point array with the optional fields asked for."""
    fields = list(XYZI_FIELDS)
    if ring:
        fields.append(RING_FIELD)
    if time:
        fields.append(TIME_FIELD)
    return np.dtype(fields)


def make_points(
    xyz: np.ndarray,
    intensity: np.ndarray | float = 0.0,
    *,
    ring: np.ndarray | None = None,
    time: np.ndarray | None = None,
) -> np.ndarray:
    """Build a structured point array from an (N, 3) array and optional per-point fields."""
    xyz = np.asarray(xyz)
    if xyz.ndim != 2 or xyz.shape[1] < 3:
        raise ValueError(f"xyz must have shape (N, 3), got {xyz.shape}")
    pts = np.empty(len(xyz), dtype=point_dtype(ring=ring is not None, time=time is not None))
    pts["x"], pts["y"], pts["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    pts["intensity"] = intensity
    if ring is not None:
        pts["ring"] = ring
    if time is not None:
        pts["time"] = time
    return pts


def xyz_of(points: np.ndarray) -> np.ndarray:
    """(N, 3) float32 copy of the coordinates of a structured point array."""
    out = np.empty((len(points), 3), dtype=np.float32)
    out[:, 0], out[:, 1], out[:, 2] = points["x"], points["y"], points["z"]
    return out


def finite_mask(points: np.ndarray) -> np.ndarray:
    """Points whose x, y, z and intensity are all finite (Apollo drops the others on input)."""
    m = np.isfinite(points["x"]) & np.isfinite(points["y"]) & np.isfinite(points["z"])
    return m & np.isfinite(points["intensity"])


def concat_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Append point array ``b`` to ``a`` in ``a``'s dtype (fields missing from ``b`` become 0)."""
    out = np.zeros(len(a) + len(b), dtype=a.dtype)
    out[: len(a)] = a
    tail = out[len(a) :]
    for name in a.dtype.names or ():
        if b.dtype.names and name in b.dtype.names:
            tail[name] = b[name]
    return out


# ----------------------------------------------------------------------------------------------- pose


def pose_position(pose: np.ndarray) -> np.ndarray:
    """The sensor origin in world coordinates."""
    return np.asarray(pose, dtype=np.float64)[:3, 3].copy()


def quat_to_matrix(qx: float, qy: float, qz: float, qw: float) -> np.ndarray:
    """3x3 rotation matrix of a quaternion given as (x, y, z, w); it is normalised first."""
    q = np.array([qw, qx, qy, qz], dtype=np.float64)
    n = float(np.dot(q, q))
    if not np.isfinite(n) or n < 1e-12:
        raise ValueError("quaternion has zero or non-finite norm")
    w, x, y, z = q / np.sqrt(n)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quat(r: np.ndarray) -> tuple[float, float, float, float]:
    """Quaternion (x, y, z, w) of a 3x3 rotation matrix, with w >= 0."""
    r = np.asarray(r, dtype=np.float64)
    t = np.trace(r)
    if t > 0:
        s = np.sqrt(t + 1.0) * 2
        w, x, y, z = 0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2]) * 2
        w, x, y, z = (r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s
    elif r[1, 1] > r[2, 2]:
        s = np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2]) * 2
        w, x, y, z = (r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s
    else:
        s = np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1]) * 2
        w, x, y, z = (r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    return float(x), float(y), float(z), float(w)


def make_pose(translation: Sequence[float], quat_xyzw: Sequence[float]) -> np.ndarray:
    """4x4 homogeneous transform from a translation and a quaternion (x, y, z, w)."""
    t = np.eye(4)
    t[:3, :3] = quat_to_matrix(*quat_xyzw)
    t[:3, 3] = translation
    return t


# ----------------------------------------------------------------------------------------------- classes


class ObstacleClass(enum.StrEnum):
    """The four classes the study counts obstacles by (Apollo: VEHICLE, PEDESTRIAN, BICYCLE, UNKNOWN*)."""

    CAR = "car"
    PEDESTRIAN = "pedestrian"
    CYCLIST = "cyclist"
    UNKNOWN = "unknown"


class MetaType(enum.IntEnum):
    """Apollo's five CNN meta types (the class head's channel order) and the simulator's finer truth."""

    UNKNOWN = 0  # static unknown / background objects
    SMALLMOT = 1  # small motor vehicle: car, van
    BIGMOT = 2  # big motor vehicle: truck, bus
    NONMOT = 3  # non-motor vehicle: bicycle with rider
    PEDESTRIAN = 4

    @property
    def obstacle_class(self) -> ObstacleClass:
        return _META_TO_CLASS[self]


_META_TO_CLASS = {
    MetaType.UNKNOWN: ObstacleClass.UNKNOWN,
    MetaType.SMALLMOT: ObstacleClass.CAR,
    MetaType.BIGMOT: ObstacleClass.CAR,
    MetaType.NONMOT: ObstacleClass.CYCLIST,
    MetaType.PEDESTRIAN: ObstacleClass.PEDESTRIAN,
}

CLASS_ORDER: tuple[ObstacleClass, ...] = (
    ObstacleClass.CAR,
    ObstacleClass.PEDESTRIAN,
    ObstacleClass.CYCLIST,
    ObstacleClass.UNKNOWN,
)


# ----------------------------------------------------------------------------------------------- labels

BOX_DTYPE = np.dtype(
    [
        ("cx", "<f8"),
        ("cy", "<f8"),
        ("cz", "<f8"),
        ("length", "<f8"),
        ("width", "<f8"),
        ("height", "<f8"),
        ("yaw", "<f8"),
        ("meta", "<i1"),  # MetaType
        ("instance", "<i4"),  # matches Labels.point_instance; -1 when unknown
    ]
)


@dataclass(frozen=True, slots=True)
class LabelledRegion:
    """The part of a sweep that a frame's labels cover, in the sensor frame.

    KITTI labels only what the front camera sees (about 90 degrees ahead): a point outside the region is
    *unlabelled*, not background. The region is a sector about the sensor's z axis, from ``azimuth_min`` to
    ``azimuth_max`` (radians, counter-clockwise from +x, ``-pi <= azimuth_min < azimuth_max <= pi``), optionally
    cut at ``max_range`` metres (horizontal distance). ``source`` says how it was derived (e.g. the calibration
    files it came from), for reports.
    """

    azimuth_min: float
    azimuth_max: float
    max_range: float | None = None
    source: str = ""

    def contains(self, xy: np.ndarray) -> np.ndarray:
        """Boolean mask of the positions (N x 2+ array, or a structured point array) inside the region."""
        if getattr(xy, "dtype", None) is not None and xy.dtype.names:
            x = np.asarray(xy["x"], dtype=np.float64)
            y = np.asarray(xy["y"], dtype=np.float64)
        else:
            a = np.asarray(xy, dtype=np.float64).reshape(-1, np.shape(xy)[-1] if np.ndim(xy) > 1 else 2)
            x, y = a[:, 0], a[:, 1]
        az = np.arctan2(y, x)
        inside = (az >= self.azimuth_min) & (az <= self.azimuth_max)
        if self.max_range is not None:
            inside &= np.hypot(x, y) <= self.max_range
        return inside

    def contains_point(self, x: float, y: float) -> bool:
        """Whether one sensor-frame position lies in the region."""
        return bool(self.contains(np.array([[x, y]], dtype=np.float64))[0])

    @property
    def width_deg(self) -> float:
        """The sector's opening angle in degrees."""
        return float(np.degrees(self.azimuth_max - self.azimuth_min))

    def describe(self) -> str:
        """One line for reports: the sector in degrees and where it came from."""
        text = f"azimuth {np.degrees(self.azimuth_min):+.1f} to {np.degrees(self.azimuth_max):+.1f} deg"
        if self.max_range is not None:
            text += f" within {self.max_range:g} m"
        return text + (f" ({self.source})" if self.source else "")


@dataclass(slots=True)
class Labels:
    """Ground truth for a frame, in the sensor frame.

    ``boxes`` is a structured array of :data:`BOX_DTYPE`. ``point_instance`` (int32, -1 = no object) and
    ``point_meta`` (int8 MetaType, -1 = background such as ground and buildings) are per point, aligned with
    the frame's points, when the source has them (the simulator does; KITTI's road labels are kept in
    ``point_semantic`` as SemanticKITTI ids instead). ``region`` is the labelled field of view when the labels
    cover only part of the sweep (KITTI: the front camera's view).
    """

    boxes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=BOX_DTYPE))
    point_instance: np.ndarray | None = None
    point_meta: np.ndarray | None = None
    point_semantic: np.ndarray | None = None
    #: the part of the sweep the labels cover (None: all of it); points and detections outside are unlabelled
    region: LabelledRegion | None = None

    def select(self, keep: np.ndarray) -> Labels:
        """Labels for a subset of the points (boolean mask or indices); boxes and the region are kept."""

        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[keep]

        return Labels(self.boxes, sub(self.point_instance), sub(self.point_meta), sub(self.point_semantic),
                      self.region)


# ----------------------------------------------------------------------------------------------- frame


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a frame came from: enough to find it again and to cite it in a bug report."""

    source: str  # path of the recording or folder
    format: str  # "ros1", "ros2", "cyber", "pcd", "kitti", "npz", "sim", ...
    index: int  # frame index within the source (0-based, in reading order)
    topic: str | None = None
    detail: str | None = None  # e.g. the file name of a PCD in a folder


@dataclass(frozen=True, slots=True, eq=False)
class CameraLink:
    """The camera image paired with a sweep: its calibration, and where the image lies in its stream.

    ``extrinsic`` (4x4) maps the LiDAR's frame onto the camera's (KITTI: the rectified camera 0 frame,
    ``R0_rect · Tr_velo_to_cam``); ``intrinsic`` (3x4) maps the camera's frame onto pixels (KITTI: ``P2`` /
    ``P_rect_02``, camera 2's); ``width`` x ``height`` the image size. ``index`` and ``stamp`` are the paired image's
    place and time in its stream; ``period_s`` the stream's frame period, None when the images are single shots,
    not a stream (KITTI's object benchmark); ``image`` the image file when the recording holds it; ``source``
    where the calibration came from, for reports. Readers set it (KITTI object and raw); a frame without a camera
    has ``Frame.camera = None``.
    """

    extrinsic: np.ndarray
    intrinsic: np.ndarray
    width: int
    height: int
    index: int = 0
    stamp: float = 0.0
    period_s: float | None = None
    image: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        e = np.asarray(self.extrinsic, dtype=np.float64)
        k = np.asarray(self.intrinsic, dtype=np.float64)
        if e.shape != (4, 4) or k.shape != (3, 4):
            raise ValueError(f"camera extrinsic must be 4x4 and intrinsic 3x4, got {e.shape} and {k.shape}")
        object.__setattr__(self, "extrinsic", e)
        object.__setattr__(self, "intrinsic", k)

    @property
    def projection(self) -> np.ndarray:
        """3x4 pixels <- LiDAR (homogeneous): ``intrinsic · extrinsic``."""
        return self.intrinsic @ self.extrinsic

    def describe(self) -> str:
        stream = f"{1.0 / self.period_s:g} Hz stream" if self.period_s else "single images"
        return f"camera {self.width}x{self.height}, {stream}" + (f" ({self.source})" if self.source else "")


@dataclass(slots=True)
class Frame:
    """One LiDAR sweep: points in the sensor frame, the pose world <- sensor, and where it came from."""

    points: np.ndarray
    pose: np.ndarray | None = None
    stamp: float = 0.0  # seconds since the Unix epoch (the cloud's header stamp)
    frame_id: str = "velodyne64"
    provenance: Provenance | None = None
    labels: Labels | None = None
    dropped: int = 0  # non-finite points dropped when reading, as Apollo does
    camera: CameraLink | None = None  # the camera image paired with the sweep, when the recording has one

    def __post_init__(self) -> None:
        names = self.points.dtype.names or ()
        missing = {"x", "y", "z", "intensity"} - set(names)
        if missing:
            raise ValueError(f"Frame points lack field(s) {sorted(missing)}; have {list(names)}")
        if self.pose is not None:
            self.pose = np.asarray(self.pose, dtype=np.float64)
            if self.pose.shape != (4, 4):
                raise ValueError(f"pose must be 4x4, got {self.pose.shape}")

    def __len__(self) -> int:
        return len(self.points)

    @property
    def index(self) -> int:
        return self.provenance.index if self.provenance else 0

    @property
    def xyz(self) -> np.ndarray:
        """(N, 3) float32 copy of the coordinates."""
        return xyz_of(self.points)

    @property
    def position(self) -> np.ndarray | None:
        """The sensor origin in world coordinates, if the pose is known."""
        return None if self.pose is None else pose_position(self.pose)

    def with_points(self, points: np.ndarray, *, labels: Labels | None = None) -> Frame:
        """A copy with other points (same pose, stamp, provenance); labels are dropped unless given."""
        return replace(self, points=points, labels=labels)

    def with_extra_points(self, extra: np.ndarray) -> Frame:
        """A copy with ``extra`` appended after the existing points (their indices are unchanged)."""
        labels = None
        if self.labels is not None:

            def pad(a: np.ndarray | None) -> np.ndarray | None:
                if a is None:
                    return None
                fill = -1 if np.issubdtype(a.dtype, np.signedinteger) or a.dtype.kind == "f" else np.iinfo(a.dtype).max
                return np.concatenate([a, np.full(len(extra), fill, dtype=a.dtype)])

            lb = self.labels
            labels = Labels(lb.boxes, pad(lb.point_instance), pad(lb.point_meta), pad(lb.point_semantic), lb.region)
        return replace(self, points=concat_points(self.points, extra), labels=labels)


# ----------------------------------------------------------------------------------------------- ROI


@runtime_checkable
class Roi(Protocol):
    """A region of interest in a frame's sensor frame (what perception may report obstacles from)."""

    @property
    def empty(self) -> bool:
        """True when the region holds nothing (e.g. a pose far from every road)."""
        ...

    def contains(self, xy: np.ndarray) -> np.ndarray:
        """Boolean per point for sensor-frame points given as (N, 2) or (N, 3) (z is ignored)."""
        ...

    def indices(self, frame: Frame) -> np.ndarray:
        """int64 indices of the frame's points inside the region, ascending."""
        ...


# ----------------------------------------------------------------------------------------------- obstacles


@dataclass(slots=True)
class Obstacle:
    """One detected obstacle, in the sensor frame (Apollo's MinBox output plus the CNN's class)."""

    cls: ObstacleClass
    score: float
    point_indices: np.ndarray  # int64 indices into the frame's points (Apollo: the obstacle cloud)
    center: np.ndarray  # (3,) centre of the box's bottom face
    length: float
    width: float
    height: float
    direction: np.ndarray  # (3,) unit vector along the length
    polygon: np.ndarray  # (K, 3) convex hull at z = min z, clockwise
    meta_type: MetaType = MetaType.UNKNOWN
    type_probs: np.ndarray | None = None  # Apollo's 6 entries: UNKNOWN, -, -, PED, BIC, VEH

    @property
    def heading(self) -> float:
        return float(np.arctan2(self.direction[1], self.direction[0]))

    @property
    def num_points(self) -> int:
        return len(self.point_indices)

    def to_dict(self, *, with_points: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "class": self.cls.value,
            "meta_type": self.meta_type.name,
            "score": round(float(self.score), 6),
            "num_points": self.num_points,
            "center": [round(float(v), 4) for v in self.center],
            "length": round(float(self.length), 4),
            "width": round(float(self.width), 4),
            "height": round(float(self.height), 4),
            "heading": round(self.heading, 6),
            "polygon": [[round(float(v), 4) for v in p[:2]] for p in self.polygon],
        }
        if self.type_probs is not None:
            d["type_probs"] = [round(float(v), 6) for v in self.type_probs]
        if with_points:
            d["point_indices"] = [int(i) for i in self.point_indices]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Obstacle:
        heading = float(d["heading"])
        poly = np.array([[p[0], p[1], d["center"][2]] for p in d.get("polygon", [])], dtype=np.float64)
        return cls(
            cls=ObstacleClass(d["class"]),
            score=float(d["score"]),
            point_indices=np.asarray(d.get("point_indices", []), dtype=np.int64),
            center=np.asarray(d["center"], dtype=np.float64),
            length=float(d["length"]),
            width=float(d["width"]),
            height=float(d["height"]),
            direction=np.array([np.cos(heading), np.sin(heading), 0.0]),
            polygon=poly.reshape(-1, 3),
            meta_type=MetaType[d.get("meta_type", "UNKNOWN")],
            type_probs=None if d.get("type_probs") is None else np.asarray(d["type_probs"]),
        )


class Obstacles(Sequence[Obstacle]):
    """The obstacles perception reported for one frame, with per-class counts."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[Obstacle] = ()) -> None:
        self._items = list(items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return Obstacles(self._items[i])
        return self._items[i]

    def __iter__(self) -> Iterator[Obstacle]:
        return iter(self._items)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k.value}={v}" for k, v in self.counts().items() if v)
        return f"Obstacles({len(self)}: {counts or 'none'})"

    def counts(self) -> dict[ObstacleClass, int]:
        """Number of obstacles per class, every class present (zero when absent), in CLASS_ORDER."""
        out = dict.fromkeys(CLASS_ORDER, 0)
        for o in self._items:
            out[o.cls] += 1
        return out

    def to_list(self, *, with_points: bool = True) -> list[dict[str, Any]]:
        return [o.to_dict(with_points=with_points) for o in self._items]

    @classmethod
    def from_list(cls, items: Iterable[Mapping[str, Any]]) -> Obstacles:
        return cls(Obstacle.from_dict(d) for d in items)
