"""One registry of named transformations for both halves: built-ins imported on first use, plug-ins from an
entry-point group, a cache, and the ``--transforms`` spec grammar (``all``, a family, or comma-separated names and
families, duplicates dropped, order kept).

The camera registry (:mod:`lidarmt.camera.transforms.registry`) and the LiDAR one
(:mod:`lidarmt.lidar.transforms.registry`) are each one :class:`TransformRegistry` with their own built-ins, entry
point group, error class and well-formedness check; the camera one adds translators through ``extra``. A new kind
of transformation registry is a new instance, not a copy of this code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class TransformRegistry(Generic[T]):
    """Transformations by name.

    ``builtins`` maps a name to ``(module, class)`` under ``package``; ``group`` is the entry-point group of
    plug-ins; ``base`` is the class an instance must be (a loaded plug-in that is a class or factory is called
    with no argument first); ``check(obj, name)`` returns a plug-in's object when well formed and raises
    ``error`` otherwise; ``what`` names the kind in messages (``"transformation"``, ``"LiDAR transformation"``).
    """

    def __init__(self, *, what: str, package: str, builtins: Mapping[str, tuple[str, str]], group: str,
                 base: type, error: type[Exception], check: Callable[[Any, str], T],
                 families: Sequence[str]) -> None:
        self.what = what
        self.package = package
        self.builtins = dict(builtins)
        self.group = group
        self.base = base
        self.error = error
        self.check = check
        self.families = tuple(families)
        self.cache: dict[str, T] = {}

    def plugins(self) -> dict[str, Any]:
        """The installed entry points of :attr:`group`, by name."""
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def available(self) -> list[str]:
        """Names of the built-ins, then of the installed plug-ins that do not shadow one (what ``all`` selects)."""
        return list(self.builtins) + sorted(n for n in self.plugins() if n not in self.builtins)

    def has(self, name: str) -> bool:
        """Whether ``name`` is a built-in or an installed plug-in."""
        return name in self.builtins or name in self.plugins()

    def get(self, name: str, *, known: Callable[[], str] | None = None) -> T:
        """The transformation called ``name`` (cached); an unknown name is one ``error`` line listing ``known()``
        (default: :meth:`available`)."""
        name = name.strip()
        if name in self.cache:
            return self.cache[name]
        if name in self.builtins:
            mod, cls = self.builtins[name]
            obj = getattr(importlib.import_module(f"{self.package}.{mod}"), cls)()
        else:
            plugins = self.plugins()
            if name not in plugins:
                listed = known() if known is not None else ", ".join(self.available())
                raise self.error(f"unknown {self.what} {name!r}; known: {listed}")
            try:
                obj = plugins[name].load()
                if isinstance(obj, type) or (callable(obj) and not isinstance(obj, self.base)):
                    obj = obj()
            except self.error:
                raise
            except Exception as err:
                raise self.error(f"cannot load {self.what} plug-in {name!r} ({plugins[name].value}): {err}") from err
            obj = self.check(obj, name)
        self.cache[name] = obj
        return obj

    def forget(self, name: str) -> None:
        """Drop ``name`` from the cache (a plug-in reinstalled, or a test)."""
        self.cache.pop(name, None)

    def select_names(self, spec: Any, *, give: str, known: Callable[[], str] | None = None,
                     extra: Callable[[str, list[str]], list[str] | None] | None = None) -> list[str]:
        """The names a ``--transforms`` spec selects, duplicates dropped, order kept: ``all``, a family (in
        registry order), or names. ``extra(item, items)`` may claim an item first (the camera's translators),
        returning the names it stands for, or None to leave it to the rules above. ``give`` is the hint of the
        error lines ("all, a family (...) or names")."""
        listed = known if known is not None else (lambda: ", ".join(self.available()))
        if not isinstance(spec, str) or not spec.strip():
            raise self.error(f"empty {self.what} list {spec!r}; give {give}: {listed()}")
        items = [x.strip() for x in spec.split(",") if x.strip()]
        names: list[str] = []
        for item in items:
            claimed = extra(item, items) if extra is not None else None
            if claimed is not None:
                names += claimed
            elif item == "all":
                names += self.available()
            elif item in self.families:
                names += [n for n in self.available() if getattr(self.get(n), "family", None) == item]
            elif self.has(item):
                names.append(item)
            else:
                raise self.error(f"unknown {self.what} {item!r} in {spec!r}; give {give}: {listed()}")
        out = list(dict.fromkeys(names))
        if not out:
            raise self.error(f"no {self.what} in {spec!r}; give {give}")
        return out
