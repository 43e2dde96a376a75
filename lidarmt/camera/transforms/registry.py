"""Find image transformations by name: built-ins and installed plug-ins.

* Built-ins: DeepTest's seven simple transformations (``brightness``, ``contrast``, ``translation``,
  ``scale``, ``shear``, ``rotation``, ``blur``), the weather effects (``fog``, ``rain``, ``snow``,
  ``night``, ``glare``, ``droplets``, ``dirt``) and ``mirror``.
* Plug-ins: any package declaring an entry point in the group ``lidarmt.transform``, e.g. in pyproject.toml::

      [project.entry-points."lidarmt.transform"]
      haze = "mypkg.haze:Haze"

  The object the entry point names is a Transform instance, or a class or factory called with no argument
  that returns one (see :class:`lidarmt.camera.transforms.base.Transform`).

:func:`select` turns a campaign's ``--transforms`` value into the list to walk: ``"all"``, a family
(``"simple"``, ``"weather"``, ``"mirror"``) or comma-separated names, which may mix families and names
(``"simple,fog,mirror"``).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms.base import Transform

ENTRY_POINT_GROUP = "lidarmt.transform"
FAMILIES = ("simple", "weather", "mirror")
RELATIONS = ("keep", "negate")

# name → (module, class); modules are imported on first use so that listing names stays cheap
_BUILTINS: dict[str, tuple[str, str]] = {
    "brightness": ("simple", "Brightness"),
    "contrast": ("simple", "Contrast"),
    "translation": ("simple", "Translation"),
    "scale": ("simple", "Scale"),
    "shear": ("simple", "Shear"),
    "rotation": ("simple", "Rotation"),
    "blur": ("simple", "Blur"),
    "fog": ("weather", "Fog"),
    "rain": ("weather", "Rain"),
    "snow": ("weather", "Snow"),
    "night": ("weather", "Night"),
    "glare": ("optics", "Glare"),
    "droplets": ("optics", "Droplets"),
    "dirt": ("optics", "Dirt"),
    "mirror": ("simple", "Mirror"),
}

_cache: dict[str, Transform] = {}


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names :func:`get_transform` accepts: built-ins (simple, weather, mirror), then installed plug-ins."""
    return list(_BUILTINS) + sorted(n for n in _plugins() if n not in _BUILTINS)


def _check(obj: Any, name: str) -> Transform:
    if not isinstance(obj, Transform):
        raise TransformError(
            f"transformation plug-in {name!r} gave a {type(obj).__name__}, which lacks name/family/relation/"
            "grid/space/description/apply/label (see lidarmt.camera.transforms.base.Transform)"
        )
    if obj.family not in FAMILIES or obj.relation not in RELATIONS:
        raise TransformError(
            f"transformation plug-in {name!r} has family {obj.family!r} and relation {obj.relation!r}; "
            f"families are {', '.join(FAMILIES)} and relations {', '.join(RELATIONS)}"
        )
    if not obj.grid:
        raise TransformError(f"transformation plug-in {name!r} has an empty grid; give at least one setting")
    return obj


def get_transform(name: str) -> Transform:
    """The transformation called ``name``: a built-in or an entry point of the group ``lidarmt.transform``."""
    name = name.strip()
    if name in _cache:
        return _cache[name]
    if name in _BUILTINS:
        mod, cls = _BUILTINS[name]
        obj = getattr(importlib.import_module(f"lidarmt.camera.transforms.{mod}"), cls)()
    else:
        plugins = _plugins()
        if name not in plugins:
            raise TransformError(f"unknown transformation {name!r}; known: {', '.join(available())}")
        try:
            obj = plugins[name].load()
            if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Transform)):
                obj = obj()
        except TransformError:
            raise
        except Exception as err:
            raise TransformError(
                f"cannot load transformation plug-in {name!r} ({plugins[name].value}): {err}"
            ) from err
        obj = _check(obj, name)
    _cache[name] = obj
    return obj


def select(spec: str) -> list[Transform]:
    """The transformations a spec names, in registry order for families, in the spec's order for names.

    ``spec`` is ``"all"``, a family (``"simple"``, ``"weather"``, ``"mirror"``) or comma-separated names and
    families; duplicates are dropped. An unknown item raises a TransformError listing the known ones.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise TransformError(
            f"empty transformation list {spec!r}; give all, simple, weather, mirror or names: "
            f"{', '.join(available())}"
        )
    names: list[str] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if item == "all":
            names += available()
        elif item in FAMILIES:
            names += [n for n in available() if get_transform(n).family == item]
        elif item in _BUILTINS or item in _plugins():
            names.append(item)
        else:
            raise TransformError(
                f"unknown transformation {item!r} in {spec!r}; give all, {', '.join(FAMILIES)} or names: "
                f"{', '.join(available())}"
            )
    out: list[Transform] = []
    seen: set[str] = set()
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(get_transform(n))
    if not out:
        raise TransformError(f"no transformation in {spec!r}; give all, simple, weather, mirror or names")
    return out
