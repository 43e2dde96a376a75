"""Find image transformations by name: built-ins, installed plug-ins and learned translators.

* Built-ins: DeepTest's seven simple transformations (``brightness``, ``contrast``, ``translation``,
  ``scale``, ``shear``, ``rotation``, ``blur``), the weather effects (``fog``, ``rain``, ``snow``,
  ``night``, ``glare``, ``droplets``, ``dirt``) and ``mirror``.
* Translators (family ``translator``): every translator :mod:`lidarmt.camera.translate.registry` knows (the
  shipped ``munit-night``, ``unit-snow``, ...; entry points of ``lidarmt.translator``), the path of a
  ``translator.pt`` and ``package.module:callable`` (which imports code: refused with ``trust_code=False``),
  wrapped by :class:`lidarmt.camera.translate.transform.TranslatorTransform`.
* Plug-ins: any package declaring an entry point in the group ``lidarmt.transform``, e.g. in pyproject.toml::

      [project.entry-points."lidarmt.transform"]
      haze = "mypkg.haze:Haze"

  The object the entry point names is a Transform instance, or a class or factory called with no argument
  that returns one (see :class:`lidarmt.camera.transforms.base.Transform`).

:func:`select` turns a campaign's ``--transforms`` value into the list to walk: ``"all"``, a family
(``"simple"``, ``"weather"``, ``"mirror"``, ``"translator"``) or comma-separated names, which may mix families
and names (``"simple,fog,mirror"``, ``"weather,munit-night"``). ``"all"`` is every simple, weather and mirror
transformation and plug-in, but no translator: a translator costs a network pass per image (tens of ms on a CPU,
like the steering model itself) and ships or is installed separately, so ``all`` would grow and slow down, and a
campaign started with ``all`` could no longer be resumed once a translator is installed. Name them, or add
``translator``.

The lookup, plug-in loading and spec grammar are the engine's one :class:`lidarmt.engine.registry.TransformRegistry`,
shared with the LiDAR half; this module adds the translators.
"""

from __future__ import annotations

from typing import Any

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms.base import Transform
from lidarmt.engine.registry import TransformRegistry

ENTRY_POINT_GROUP = "lidarmt.transform"
FAMILIES = ("simple", "weather", "mirror", "translator")
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


#: the camera's transformations (translators are added by :func:`get_transform` and :func:`select`)
REGISTRY: TransformRegistry[Transform] = TransformRegistry(
    what="transformation", package="lidarmt.camera.transforms", builtins=_BUILTINS, group=ENTRY_POINT_GROUP,
    base=Transform, error=TransformError, check=_check, families=FAMILIES)


def available() -> list[str]:
    """Names of the built-ins (simple, weather, mirror), then installed plug-ins: what ``all`` selects."""
    return REGISTRY.available()


def translators() -> list[str]:
    """Names of the translators installed (shipped, then plug-ins) that are not also a transformation's name:
    what the family ``translator`` selects."""
    from lidarmt.camera.translate.registry import available as translator_names

    taken = set(available())
    return [n for n in translator_names() if n not in taken]


def is_translator(name: str) -> bool:
    """Whether ``name`` is a translator spec (installed name, translator.pt path or module:callable) and not a
    transformation's name."""
    from lidarmt.camera.translate.registry import kind_of

    name = name.strip()
    return not REGISTRY.has(name) and kind_of(name) != "unknown"


def _known() -> str:
    names = available() + translators()
    return ", ".join(names) + " (or a translator.pt path)"


def get_transform(name: str, *, trust_code: bool = True) -> Transform:
    """The transformation called ``name``: a built-in, an entry point of the group ``lidarmt.transform``, or a
    translator spec (a translator is built on first use; ``trust_code=False`` refuses a ``module:callable``
    one, as for a spec read from a bundle)."""
    name = name.strip()
    if name not in _BUILTINS and is_translator(name):
        from lidarmt.camera.translate.registry import UntrustedTranslatorError, kind_of

        if kind_of(name) == "code" and not trust_code:
            raise UntrustedTranslatorError(
                f"transformation {name!r} would import and run module {name.partition(':')[0]!r} as a translator, "
                "and it was read from a file that is not trusted; rerun with --trust-code if you trust that file")
        from lidarmt.camera.translate.transform import TranslatorTransform

        return TranslatorTransform(name, trust_code=trust_code)
    return REGISTRY.get(name, known=_known)


def build(name: str, options: dict[str, Any] | None = None, *, trust_code: bool = True) -> Transform:
    """The transformation ``name`` with a campaign's options applied (a translator's ``device``), behind the
    trust gate for translators that are code."""
    t = get_transform(name, trust_code=trust_code)
    opts = dict(options or {})
    if not opts:
        return t
    with_options = getattr(t, "with_options", None)
    if not callable(with_options):
        raise TransformError(f"transformation {name!r} takes no options; got {', '.join(sorted(opts))}")
    return with_options(**opts)


def _translator_items(item: str, items: list[str]) -> list[str] | None:
    """The spec items that name translators: the family ``translator`` (refused alone when none is installed) and
    translator specs; None for every other item."""
    if item == "translator":
        found = translators()
        if not found and len(items) == 1:
            raise TransformError(
                "--transforms translator: no translator is installed; train one with 'lidarmt camera "
                "train-translator' and pass its translator.pt, or install a lidarmt.translator plug-in")
        return found
    if item not in ("all", *FAMILIES) and is_translator(item):
        return [item]
    return None


def select(spec: str) -> list[Transform]:
    """The transformations a spec names, in registry order for families, in the spec's order for names.

    ``spec`` is ``"all"`` (simple, weather, mirror and plug-ins; no translator), a family (``"simple"``,
    ``"weather"``, ``"mirror"``, ``"translator"``) or comma-separated names, translator specs and families;
    duplicates are dropped. An unknown item raises a TransformError listing the known ones.
    """
    names = REGISTRY.select_names(spec, give=f"all, {', '.join(FAMILIES)} or names", known=_known,
                                  extra=_translator_items)
    return [get_transform(n) for n in names]
