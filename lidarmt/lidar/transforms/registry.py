"""Find LiDAR transformations by name: built-ins and installed plug-ins.

* Built-ins, by family (Dong et al., CVPR 2023): weather (``fog``, ``rain``, ``snow``, ``sunlight``,
  ``wet-ground``), sensor (``beam-loss``, ``beam-skip``, ``range-noise``, ``intensity``, ``fov-loss``,
  ``crosstalk``, ``impulse``), motion (``rolling-shutter``, ``deskew``), object (``insert``, ``remove``,
  ``object-shear``, ``object-scale``, ``object-rotate``), alignment (``rotate``, ``mirror``,
  ``spatial-misalignment``, ``temporal-misalignment``: these two need the frame's camera).
* Plug-ins: any package declaring an entry point in the group ``lidarmt.lidar_transform``, e.g.::

      [project.entry-points."lidarmt.lidar_transform"]
      dust = "mypkg.dust:Dust"

  The object the entry point names is a transformation instance (see
  :class:`lidarmt.lidar.transforms.base.LidarTransform`), or a class or factory called with no argument that
  returns one.

:func:`select` turns a ``--transforms`` value into the list to walk: ``"all"``, a family or comma-separated
names (families and names may be mixed). Lookup, plug-in loading and the spec grammar are the engine's one
:class:`lidarmt.engine.registry.TransformRegistry`, shared with the camera half.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lidarmt.engine.registry import TransformRegistry
from lidarmt.lidar.errors import LidarTransformError
from lidarmt.lidar.transforms.base import FAMILIES, LEVELS, LidarTransform, Param, resolve_params

ENTRY_POINT_GROUP = "lidarmt.lidar_transform"

# name -> (module, class), imported on first use so that listing names stays cheap
_BUILTINS: dict[str, tuple[str, str]] = {
    "fog": ("weather", "Fog"),
    "rain": ("weather", "Rain"),
    "snow": ("weather", "Snow"),
    "sunlight": ("noise", "Sunlight"),
    "wet-ground": ("ground", "WetGround"),
    "beam-loss": ("sensor", "BeamLoss"),
    "beam-skip": ("sensor", "BeamSkip"),
    "range-noise": ("sensor", "RangeNoise"),
    "intensity": ("sensor", "IntensityShift"),
    "fov-loss": ("sensor", "FovLoss"),
    "crosstalk": ("sensor", "Crosstalk"),
    "impulse": ("noise", "Impulse"),
    "rolling-shutter": ("motion", "RollingShutter"),
    "deskew": ("motion", "Deskew"),
    "insert": ("objects", "Insert"),
    "remove": ("objects", "Remove"),
    "object-shear": ("local", "ObjectShear"),
    "object-scale": ("local", "ObjectScale"),
    "object-rotate": ("local", "ObjectRotate"),
    "rotate": ("alignment", "Rotate"),
    "mirror": ("alignment", "Mirror"),
    "spatial-misalignment": ("misalignment", "SpatialMisalignment"),
    "temporal-misalignment": ("misalignment", "TemporalMisalignment"),
}


def check_transform(obj: Any, name: str) -> LidarTransform:
    """``obj`` if it is a well-formed LiDAR transformation, else a one-line LidarTransformError."""
    if not isinstance(obj, LidarTransform):
        raise LidarTransformError(
            f"LiDAR transformation plug-in {name!r} gave a {type(obj).__name__}, which lacks name/family/params/"
            "doc/levels/apply (see lidarmt.lidar.transforms.base.LidarTransform)")
    if obj.family not in FAMILIES:
        raise LidarTransformError(f"LiDAR transformation plug-in {name!r} has family {obj.family!r}; families are "
                                  + ", ".join(FAMILIES))
    if not all(isinstance(p, Param) for p in obj.params):
        raise LidarTransformError(f"LiDAR transformation plug-in {name!r}: params must be Param instances")
    missing = [lv for lv in LEVELS if lv not in obj.levels]
    if missing:
        raise LidarTransformError(f"LiDAR transformation plug-in {name!r} lacks the level(s) {', '.join(missing)}")
    for lv in LEVELS:
        resolve_params(obj, obj.levels[lv])
    return obj


#: the LiDAR transformations: built-ins and entry points of ``lidarmt.lidar_transform``
REGISTRY: TransformRegistry[LidarTransform] = TransformRegistry(
    what="LiDAR transformation", package="lidarmt.lidar.transforms", builtins=_BUILTINS, group=ENTRY_POINT_GROUP,
    base=LidarTransform, error=LidarTransformError, check=check_transform, families=FAMILIES)


def available() -> list[str]:
    """Names of the built-ins, then of the installed plug-ins (what ``all`` selects)."""
    return REGISTRY.available()


def get_transform(name: str) -> LidarTransform:
    """The LiDAR transformation called ``name``: a built-in or an entry point of ``lidarmt.lidar_transform``."""
    return REGISTRY.get(name)


def list_transforms() -> list[LidarTransform]:
    """Every LiDAR transformation: built-ins in family order, then plug-ins."""
    return [get_transform(n) for n in available()]


def select(spec: str) -> list[LidarTransform]:
    """The transformations a spec names: ``"all"``, a family (``weather``, ``sensor``, ``motion``, ``object``,
    ``alignment``) or comma-separated names and families; duplicates dropped, order kept."""
    names = REGISTRY.select_names(spec, give=f"all, a family ({', '.join(FAMILIES)}) or names")
    return [get_transform(n) for n in names]


def select_for_frame(spec: str, frame: Any, *, streams: bool = True) -> tuple[list[LidarTransform], list[str]]:
    """:func:`select`, less the transformations ``frame`` cannot take for want of a camera (``Frame.camera``; a
    camera stream; with ``streams=False`` also the recording's other frames, which ``temporal-misalignment``
    pairs): left out with a note (returned) when ``all`` or a family selected them, a one-line
    LidarTransformError when the spec names them: a misalignment without a camera is never run as a no-op."""
    from lidarmt.lidar.transforms.misalignment import camera_problem

    chosen = select(spec)
    named = {x.strip() for x in spec.split(",")}
    kept: list[LidarTransform] = []
    notes: list[str] = []
    for t in chosen:
        why = camera_problem(t, frame)
        if why is None and not streams and getattr(t, "needs_stream", False):
            why = f"{t.name}: the recording's other frames are not at hand here"
        if why is None:
            kept.append(t)
        elif t.name in named:
            raise LidarTransformError(why)
        else:
            notes.append(f"left out {why}")
    if not kept:
        raise LidarTransformError(f"no transformation of {spec!r} applies to this recording: " + "; ".join(notes))
    return kept, notes


def validate_params(name: str, params: Mapping[str, Any] | str | None) -> dict[str, float]:
    """The complete parameter setting of transformation ``name`` (a level name or a partial mapping), checked."""
    return resolve_params(get_transform(name), params)


def complete_recorded(name: str, params: Mapping[str, Any]) -> dict[str, float]:
    """A setting read back from a journal or bundle, completed with the ``recorded_default`` of each parameter
    the transformation gained after it was recorded (so an old record keeps meaning what it computed then);
    a transformation that is not installed here is left as recorded (its own error comes when it is applied)."""
    out = {str(k): float(v) for k, v in params.items()}
    try:
        t = get_transform(name)
    except Exception:  # noqa: BLE001 - an unknown plug-in: whoever applies it says so in one line
        return out
    for p in getattr(t, "params", ()):
        if p.name not in out and getattr(p, "recorded_default", None) is not None:
            out[p.name] = float(p.recorded_default)
    return out
