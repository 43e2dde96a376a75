"""Old module paths keep working after the layout change of issue 21.

Until then the engine and the LiDAR half's campaign lived in ``lidarmt.fuzz`` and ``lidarmt.report``, and the LiDAR
half's perception, maps and simulator at the top level (``lidarmt.perception``, ``lidarmt.roi``, ``lidarmt.sim``).
Users wrote those paths in scripts, ``module:callable`` specs and plug-ins, so :class:`MovedModuleFinder` (installed
by ``import lidarmt``) answers an old name with the module that now holds the code: the same module object under
both names, so ``isinstance`` checks, pickles and monkeypatches agree. The two packages that were split
(``lidarmt.fuzz``, ``lidarmt.report``) come back as small stand-ins that name where their parts went.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

#: old module -> the module that holds its code now
MOVED: dict[str, str] = {
    "lidarmt.fuzz._kernels": "lidarmt.lidar.mr1._kernels",
    "lidarmt.fuzz.campaign": "lidarmt.lidar.mr1.campaign",
    "lidarmt.fuzz.ddmin": "lidarmt.engine.ddmin",
    "lidarmt.fuzz.engine": "lidarmt.engine.campaign",
    "lidarmt.fuzz.errors": "lidarmt.engine.errors",
    "lidarmt.fuzz.inject": "lidarmt.lidar.mr1.inject",
    "lidarmt.fuzz.journal": "lidarmt.engine.journal",
    "lidarmt.fuzz.oracle": "lidarmt.lidar.mr1.oracle",
    "lidarmt.fuzz.plugins": "lidarmt.lidar.specs",
    "lidarmt.fuzz.ray_backend": "lidarmt.engine.ray_backend",
    "lidarmt.fuzz.replay": "lidarmt.lidar.mr1.replay",
    "lidarmt.fuzz.tally": "lidarmt.engine.tally",
    "lidarmt.report.bench": "lidarmt.bench.report",
    "lidarmt.report.bev": "lidarmt.lidar.bev",
    "lidarmt.report.bundle": "lidarmt.lidar.mr1.bundle",
    "lidarmt.report.camera": "lidarmt.camera.report",
    "lidarmt.report.campaign": "lidarmt.lidar.mr1.report",
    "lidarmt.report.common": "lidarmt.engine.report",
    "lidarmt.report.coverage": "lidarmt.coverage.report",
    "lidarmt.report.html": "lidarmt.engine.html",
    "lidarmt.report.lidar_transforms": "lidarmt.lidar.report",
    "lidarmt.report.manifest": "lidarmt.engine.manifest",
    "lidarmt.report.mcap": "lidarmt.engine.mcap",
    "lidarmt.report.search": "lidarmt.search.report",
    "lidarmt.report.stats": "lidarmt.engine.stats",
    "lidarmt.roi.utm": "lidarmt.utm",
}
#: old package -> new package, for every module below it too
MOVED_PACKAGES: dict[str, str] = {
    "lidarmt.perception": "lidarmt.lidar.perception",
    "lidarmt.roi": "lidarmt.lidar.roi",
    "lidarmt.sim": "lidarmt.lidar.sim",
}
#: old packages that were split: a stand-in whose attributes are the package's old exports
SPLIT_PACKAGES: dict[str, str | None] = {"lidarmt.fuzz": "lidarmt.lidar.mr1", "lidarmt.report": None}


def new_name(old: str) -> str | None:
    """The module that holds what ``old`` held, or None when ``old`` did not move."""
    if old in MOVED:
        return MOVED[old]
    for pkg, new in MOVED_PACKAGES.items():
        if old == pkg or old.startswith(pkg + "."):
            return new + old[len(pkg):]
    return None


def canonical_spec(spec: str) -> str:
    """A ``module:callable`` spec with a moved module renamed (other text unchanged)."""
    mod, sep, attr = spec.partition(":")
    new = new_name(mod.strip()) if sep else None
    return f"{new}:{attr}" if new else spec


_MODULE_ATTRS = ("__spec__", "__loader__", "__path__", "__file__", "__cached__", "__package__")


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.saved: dict[str, Any] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.saved = {k: getattr(module, k) for k in _MODULE_ATTRS if hasattr(module, k)}
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # the target ran its own code already; the import system stamped the old name's spec on it: undo that, so
        # the module keeps its own (importlib.resources, reload and pickle read it)
        for k, v in self.saved.items():
            setattr(module, k, v)


class _SplitPackage(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name
        exports = SPLIT_PACKAGES[name]
        parts = {old.rpartition(".")[2]: new for old, new in MOVED.items() if old.rpartition(".")[0] == name}
        mod = types.ModuleType(name, f"Moved (issue 21): {', '.join(f'{k} -> {v}' for k, v in sorted(parts.items()))}")
        mod.__path__ = []  # a package, so that ``import lidarmt.fuzz.campaign`` reaches the finder

        def __getattr__(attr: str) -> Any:
            if exports is not None:  # the package's own exports first (``from lidarmt.fuzz import ddmin``)
                try:
                    return getattr(importlib.import_module(exports), attr)
                except AttributeError:
                    pass
            if attr in parts:
                return importlib.import_module(parts[attr])
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")

        mod.__getattr__ = __getattr__  # type: ignore[method-assign]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds old module names (see :data:`MOVED`) and answers with the module that holds the code now."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in SPLIT_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _SplitPackage(), is_package=True)
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new), is_package=fullname in MOVED_PACKAGES)


def install() -> None:
    """Put the finder in front of :data:`sys.meta_path` once (the old names exist on no path)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
