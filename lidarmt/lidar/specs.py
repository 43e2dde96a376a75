"""How a campaign finds its three inputs from plain, picklable specs (so every worker can rebuild them).

* **SUT** (system under test): a registered perception name (``apollo``...) resolved by
  :func:`lidarmt.lidar.perception.registry.get_perception`, or ``package.module:callable`` returning an object with
  ``name`` and ``detect(frame, roi)``, or ``exec:COMMAND``: a program speaking the exec protocol.
* **ROI**: an HD-map path (any format :func:`lidarmt.lidar.roi.load_map` reads) turned into a per-frame mask by
  ``HDMapRoi(map, range=...).mask(pose)``; or ``"labels"`` (:data:`LABELS`): the area each source frame's own
  ground labels cover (:class:`lidarmt.lidar.roi.query.LabelRoi`, for frames with SemanticKITTI labels and no map; for
  frames with box labels of a part of the sweep and no ground labels, a KITTI raw drive with its tracklets, that
  labelled region: :func:`lidarmt.lidar.roi.query.region_roi`); or ``package.module:callable`` returning an object with
  ``roi_for(frame) -> Roi`` (or ``mask(pose) -> Roi``). With ``map_frame="sensor"`` the map is drawn in the
  sensor frame and the identity pose is used, for recordings without poses.
* **Recording**: a path opened with :func:`lidarmt.io.open_recording` (random access ``rec[i]``, ``len``), or
  a folder of ``.npz`` frames (:mod:`lidarmt.io.npz`).

**Trust.** A spec typed by the user (``lidarmt fuzz --sut pkg.mod:make``) may name any code: the user runs
it. A spec read from a *file* (a bug bundle's ``bundle.json``, a journal header, a summary) is data a stranger
may have written, so building from it goes through a gate: pass ``origin=`` (the file it came from) to
:func:`build_sut` / :func:`build_roi_provider` and it refuses, with :class:`UntrustedCodeError`, anything
that would import code other than lidarmt's registered built-ins and installed entry points: a
``module:callable`` SUT or ROI spec, an ``exec:COMMAND`` SUT (it runs a program), and any option value
shaped like ``module:callable`` (for a plug-in that might import it). ``trust_code=True`` (``--trust-code`` on the command line) lifts the gate;
:func:`code_in_sut` / :func:`code_in_roi` say what would be imported, to show the user first.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lidarmt.engine.errors import FuzzInputError, SutError
from lidarmt.engine.trust import (  # noqa: F401  (re-exported: lidarmt.fuzz.plugins held them)
    UntrustedCodeError,
    check_trust,
    code_in_options,
    describe_ref,
    is_callable_spec,
    names_code,
)
from lidarmt.errors import UserError
from lidarmt.types import Frame, Roi


def _load_callable(spec: str, what: str) -> Callable[..., Any]:
    from lidarmt._plugins import load_object

    obj = load_object(spec, what=what, error=SutError)
    if not callable(obj):
        raise SutError(f"{what} spec {spec!r} does not name a callable")
    return obj


def _builtin_perceptions() -> set[str]:
    try:
        return set(importlib.import_module("lidarmt.lidar.perception.registry").BUILTINS)
    except (ImportError, AttributeError):
        return set()


def code_in_sut(spec: SutSpec) -> list[str]:
    """What building ``spec`` would import besides lidarmt's built-ins and installed entry-point plug-ins.

    One line per item: the ``module:callable`` SUT itself (naming the module and the call), and every option
    value shaped like ``module:callable``. An empty list: building it runs no code the user did not install.
    """
    found: list[str] = []
    name = spec.name.strip()
    if name.startswith("exec:"):  # get_perception runs the program (perception/exec_sut.py)
        found.append(f"SUT {name!r} (runs the program {name[5:].strip()!r})")
    elif ":" in name and name not in _builtin_perceptions():  # get_perception imports anything with a colon
        found.append("SUT " + describe_ref(name, spec.options))
    return found + [f"SUT {x}" for x in code_in_options(dict(spec.options))]


def code_in_roi(spec: RoiSpec) -> list[str]:
    """What building the ROI provider of ``spec`` would import (a ``module:callable`` map spec), as lines."""
    return [f"ROI provider {describe_ref(spec.map, {})}"] if is_callable_spec(spec.map) else []


# ----------------------------------------------------------------------------------------------- SUT


@dataclass(frozen=True, slots=True)
class SutSpec:
    """A perception module to build: name or ``module:callable``, with keyword options."""

    name: str = "apollo"
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SutSpec:
        return cls(str(d["name"]), dict(d.get("options", {})))


def build_sut(spec: SutSpec, *, origin: str | os.PathLike[str] | None = None, trust_code: bool = False):
    """Build the perception module of ``spec`` (:func:`lidarmt.lidar.perception.registry.get_perception`).

    ``origin``: the file ``spec`` was read from (None: the user gave it); such a spec may only name built-ins
    and installed plug-ins unless ``trust_code`` (see :func:`check_trust`).
    """
    check_trust(code_in_sut(spec), origin=origin, trust_code=trust_code)
    try:
        get_perception = importlib.import_module("lidarmt.lidar.perception.registry").get_perception
    except (ImportError, AttributeError):
        get_perception = None
    try:
        if get_perception is not None:
            sut = get_perception(spec.name, **dict(spec.options))
        elif is_callable_spec(spec.name):
            sut = _load_callable(spec.name, "SUT")(**dict(spec.options))
        else:
            sut = None
    except (TypeError, ValueError, AttributeError) as err:  # options the SUT does not take, or values it refuses
        opts = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "none"
        raise SutError(f"cannot build SUT {spec.name!r} with options ({opts}): {err}; check --sut-option") from err
    if sut is None:
        raise SutError(
            f"unknown SUT {spec.name!r}: the perception registry (lidarmt.lidar.perception.registry) is not "
            "available in this installation; pass --sut package.module:callable"
        )
    if not hasattr(sut, "detect"):
        raise SutError(f"SUT {spec.name!r} built {type(sut).__name__}, which has no detect(frame, roi) method")
    return sut


def sut_name(sut: Any, spec: SutSpec) -> str:
    return str(getattr(sut, "name", spec.name))


# ----------------------------------------------------------------------------------------------- ROI


class RoiProvider(Protocol):
    def roi_for(self, frame: Frame) -> Roi: ...


@dataclass(frozen=True, slots=True)
class RoiSpec:
    """Where a frame's ROI comes from: a map path (or ``module:callable``), its range and frame."""

    map: str
    range: float = 70.0
    map_frame: str = "auto"  # "world": place by each frame's pose; "sensor": the map is in the sensor frame;
    # "auto": as the map declares (GeoJSON "frame": "sensor"), else world

    def to_dict(self) -> dict[str, Any]:
        return {"map": self.map, "range": self.range, "map_frame": self.map_frame}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoiSpec:
        return cls(str(d["map"]), float(d.get("range", 70.0)), str(d.get("map_frame", "auto")))


class _HDMapProvider:
    def __init__(self, spec: RoiSpec) -> None:
        try:
            roi_mod = importlib.import_module("lidarmt.lidar.roi")
            load_map, hdmap_roi = roi_mod.load_map, roi_mod.HDMapRoi
        except (ImportError, AttributeError) as err:
            raise FuzzInputError(
                f"cannot read map {spec.map}: the HD-map ROI module (lidarmt.lidar.roi.load_map, HDMapRoi) is not "
                "available in this installation"
            ) from err
        hdmap = load_map(spec.map)
        self._roi = hdmap_roi(hdmap, range=spec.range)
        declared = str(getattr(hdmap, "frame", "world") or "world")
        # a map drawn in sensor coordinates (GeoJSON "frame": "sensor", or --map-frame sensor) needs no pose
        self._sensor = spec.map_frame == "sensor" or (spec.map_frame == "auto" and declared == "sensor")
        self._map = spec.map
        self._hdmap = hdmap
        self._fixed: Roi | None = None
        self._paths: dict[bytes, Any] = {}

    def ego_path(self, frame: Frame):
        """The ego lane of the map for this frame (:class:`lidarmt.lidar.lanes.EgoPath`), or None where no lane
        heads the sensor's way near it."""
        from lidarmt.lidar.lanes import EgoPath

        pose = np.eye(4) if self._sensor else frame.pose
        if pose is None:
            return None
        key = np.asarray(pose, dtype=np.float64).tobytes()
        if key not in self._paths:
            if len(self._paths) > 64:
                self._paths.clear()
            self._paths[key] = EgoPath.from_map(self._hdmap, pose)
        return self._paths[key]

    def roi_for(self, frame: Frame) -> Roi:
        if self._sensor:
            if self._fixed is None:  # the same mask for every frame
                self._fixed = self._roi.mask(np.eye(4))
            return self._fixed
        if frame.pose is None:
            raise FuzzInputError(no_pose_message(frame, self._map))
        return self._roi.mask(frame.pose)


#: The ROI spec that means "the area of each frame's ground labels" (``--roi labels``) instead of a map path.
LABELS = "labels"


class _LabelProvider:
    """The label ROI of each source frame (:class:`lidarmt.lidar.roi.query.LabelRoi`): a function of that frame's
    labelled ground only, shared by its follow-ups, which therefore are judged against the source's ROI and
    whose added points are classified by their position alone."""

    def __init__(self, spec: RoiSpec) -> None:
        from lidarmt.lidar.roi.query import LabelRoi

        self._roi = LabelRoi(range=spec.range)

    def roi_for(self, frame: Frame) -> Roi:
        if not self._roi.has_labels(frame):
            region = frame.labels.region if frame.labels is not None else None
            if region is not None:  # box labels of a part of the sweep (KITTI raw tracklets): that part
                from lidarmt.lidar.roi.query import region_roi

                return region_roi(region, range=self._roi.range, cell=self._roi.cell)
            src = frame.provenance.source if frame.provenance else "the recording"
            raise FuzzInputError(
                f"{src}: frame {frame.index} has no per-point ground labels (SemanticKITTI labels/, KITTI "
                "road_label/) and no labelled region (KITTI boxes with their calibration), so --roi labels cannot "
                "build its ROI; give a map with --map (Apollo map, or a GeoJSON drawn in the sensor frame)"
            )
        return self._roi.mask(frame)


class _CallableProvider:
    def __init__(self, obj: Any, spec: RoiSpec) -> None:
        self._obj, self._sensor = obj, spec.map_frame == "sensor"

    def roi_for(self, frame: Frame) -> Roi:
        if hasattr(self._obj, "roi_for"):
            return self._obj.roi_for(frame)
        if not self._sensor and frame.pose is None:
            raise FuzzInputError(no_pose_message(frame, "(ROI plug-in)"))
        return self._obj.mask(np.eye(4) if self._sensor else frame.pose)


def no_pose_message(frame: Frame, map_path: str) -> str:
    src = frame.provenance.source if frame.provenance else "the recording"
    return (
        f"{src}: frame {frame.index} has no pose (world <- sensor), so the map {map_path} cannot be placed; "
        "record /tf or a localization topic with the cloud, or draw the map in the sensor frame (GeoJSON) and "
        "pass --map-frame sensor"
    )


def ego_path_for(rois: Any, frame: Frame):
    """The ego lane for a frame: the HD map's where the ROI provider has a map and finds the lane, else the
    corridor along the sensor's x axis (:class:`lidarmt.lidar.lanes.EgoPath`)."""
    from lidarmt.lidar.lanes import EgoPath

    fn = getattr(rois, "ego_path", None)
    path = fn(frame) if callable(fn) else None
    return path if path is not None else EgoPath.corridor()


def build_roi_provider(spec: RoiSpec, *, origin: str | os.PathLike[str] | None = None,
                       trust_code: bool = False) -> RoiProvider:
    """The ROI provider of ``spec``; ``origin``/``trust_code`` as for :func:`build_sut`. ``spec.map`` is a map
    path, ``module:callable``, or ``"labels"`` (the label ROI; a file of that name is read as ``./labels``)."""
    if spec.map_frame not in ("auto", "world", "sensor"):
        raise FuzzInputError(f"--map-frame must be auto, world or sensor, got {spec.map_frame!r}")
    check_trust(code_in_roi(spec), origin=origin, trust_code=trust_code)
    if spec.map == LABELS:
        return _LabelProvider(spec)
    if is_callable_spec(spec.map):
        return _CallableProvider(_load_callable(spec.map, "ROI")(), spec)
    if not os.path.exists(spec.map):
        raise FuzzInputError(f"map {spec.map}: no such file or folder")
    return _HDMapProvider(spec)


# ----------------------------------------------------------------------------------------------- recording


class NpzFolder:
    """Random access to a folder of ``.npz`` frames (sorted by name)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.files = sorted(self.path.glob("*.npz"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Frame:
        from dataclasses import replace

        from lidarmt.io.npz import load_frame_npz
        from lidarmt.types import Provenance

        f = load_frame_npz(self.files[i])
        return replace(f, provenance=Provenance(str(self.path), "npz", int(i), detail=self.files[i].name))


@dataclass(frozen=True, slots=True)
class SourceSpec:
    path: str
    topic: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "topic": self.topic}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceSpec:
        return cls(str(d["path"]), d.get("topic"))


def open_source(spec: SourceSpec):
    """Open a recording for random access (``len(rec)``, ``rec[i] -> Frame``)."""
    p = Path(spec.path)
    if not p.exists():
        raise FuzzInputError(f"recording {spec.path}: no such file or folder")
    try:
        open_recording = importlib.import_module("lidarmt.io").open_recording
    except (ImportError, AttributeError):
        open_recording = None
    if open_recording is None:
        if p.is_dir() and any(p.glob("*.npz")):
            return NpzFolder(p)
        raise FuzzInputError(
            f"cannot read {spec.path}: the recording readers (lidarmt.io.open_recording) are not available in "
            "this installation"
        )
    try:
        rec = open_recording(spec.path, topic=spec.topic) if spec.topic else open_recording(spec.path)
    except ImportError:  # a reader of this installation is missing; .npz folders we can read ourselves
        if p.is_dir() and any(p.glob("*.npz")):
            return NpzFolder(p)
        raise
    if not hasattr(rec, "__getitem__"):
        raise FuzzInputError(f"{spec.path}: the reader does not allow random access to frames")
    return with_simulator_labels(rec, p)


class SimLabelled:
    """A simulated bag's frames with the ground truth the simulator wrote beside it (``x.labels.npz``, aligned
    point for point; :func:`lidarmt.lidar.sim.record.load_labels`), so that every command that reads the bag
    (fuzz, its transformations' object library and removals, bench, export) sees its labels as it sees KITTI's.
    A frame whose points do not line up with its labels (dropped non-finite points) is read without them."""

    def __init__(self, rec: Any, labels: Sequence[Any], path: Path) -> None:
        self._rec, self._labels, self.labels_path = rec, labels, path

    def __len__(self) -> int:
        return len(self._rec)

    def __getitem__(self, i: int) -> Frame:
        from dataclasses import replace

        f = self._rec[i]
        camera = getattr(self._labels, "camera", None)
        if f.camera is None and camera is not None:  # the simulator's camera, one image per sweep at its stamp
            f = replace(f, camera=replace(camera, index=f.index, stamp=f.stamp))
        lb = self._labels[int(i) % len(self._labels)] if len(self._labels) else None
        if f.labels is not None or lb is None or f.dropped or lb.point_meta is None \
                or len(lb.point_meta) != len(f.points):
            return f
        return replace(f, labels=lb)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __enter__(self) -> SimLabelled:
        return self

    def __exit__(self, *exc: Any) -> None:
        close = getattr(self._rec, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:  # close(), describe(), ...: the recording's own
        return getattr(self._rec, name)


def with_simulator_labels(rec: Any, path: str | os.PathLike[str]) -> Any:
    """``rec`` with the simulator's ground truth when a ``<bag>.labels.npz`` of as many sweeps lies beside the
    file ``path`` (:class:`SimLabelled`), else ``rec`` itself. The one place every reader of a recording gets
    a simulated bag's labels."""
    p = Path(path)
    if not p.is_file():
        return rec
    from lidarmt.lidar.sim.record import labels_path

    lab = labels_path(p)
    if not lab.is_file():
        return rec
    try:
        labels = _LazyLabels(lab)
    except UserError:  # not a labels file of ours: the bag is read without labels, as before
        return rec
    if len(labels) != len(rec):
        return rec
    return SimLabelled(rec, labels, lab)


class _LazyLabels:
    """The sweeps of a ``.labels.npz``, each read when asked for (a campaign reads a few of many)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: the simulator's camera (:class:`lidarmt.types.CameraLink`, a 10 Hz stream) when the bag has images
        self.camera: Any = None
        try:
            with np.load(path, allow_pickle=False) as z:
                self._n = len(z["stamps"])
                if "camera_extrinsic" in z.files:
                    from lidarmt.types import CameraLink

                    w, h = (int(v) for v in z["camera_size"][:2])
                    self.camera = CameraLink(z["camera_extrinsic"], z["camera_intrinsic"], w, h, period_s=0.1,
                                             source=f"simulator camera from {path.name}")
        except (OSError, KeyError, ValueError) as err:
            from lidarmt.errors import InputError

            raise InputError(f"{path}: not a lidarmt simulation labels file ({err})") from err

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k: int) -> Any:
        from lidarmt.types import Labels

        try:
            with np.load(self.path, allow_pickle=False) as z:
                return Labels(z[f"boxes_{k}"], z[f"point_instance_{k}"], z[f"point_meta_{k}"],
                              z[f"point_semantic_{k}"] if f"point_semantic_{k}" in z.files else None)
        except (OSError, KeyError, ValueError):
            return None  # an unreadable sweep: that frame is read without labels


def weights_sha256(sut: Any) -> str | None:
    """SHA-256 of the weights file a SUT loaded (its ``weights_path``: Apollo's CNN), for bundles to record so that
    replay can find those weights again after the shipped default changes; None for SUTs without one."""
    path = getattr(sut, "weights_path", None)
    if path is None:
        return None
    from lidarmt._paths import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def sut_on_recorded_weights(sut_obj: Any, sut_spec: SutSpec, info: dict, check: Callable[..., bool], *,
                            origin: Any, trust_code: bool) -> Any:
    """``sut_obj``, or the same SUT on the shipped weights file whose SHA-256 the bundle recorded when the installed
    default has changed since (:func:`lidarmt.lidar.perception.apollo.config.weights_for_replay`); a failed check
    "SUT weights (SHA-256)" naming the digest when no shipped file has it."""
    from lidarmt.lidar.perception.apollo.config import weights_for_replay

    older, missing = weights_for_replay(sut_obj, info)
    if older is not None:
        spec = SutSpec(sut_spec.name, {**dict(sut_spec.options), "weights": str(older)})
        return build_sut(spec, origin=origin, trust_code=trust_code)
    if missing is not None:
        check("SUT weights (SHA-256)", False, missing)
    return sut_obj
