"""Find perception implementations by name: built-ins, installed plugins, or ``module:callable``.

* Built-ins: ``"apollo"`` (Apollo 2.5/3.0, 640x640 grid), ``"apollo-512"`` (the 2.0-era 512x512 model, as in
  the CACM paper's checkout), ``"apollo-3.0"`` (640 plus the 3.0 noise filter and the 2.5+ LowObjectFilter),
  ``"apollo-sim"`` and ``"apollo-512-sim"`` (those grids with the shipped weights trained on simulated sweeps
  only, ``weights=sim``), ``"apollo-streets"`` (the 640 grid with the v4 weights trained on many real streets,
  ``weights=streets``, what ``"apollo"`` loads), ``"apollo-v3"`` (the v3 weights, the default before v4,
  ``weights=v3``).
* Plugins: any package declaring an entry point in the group ``lidarmt.perception``, e.g. in pyproject.toml::

      [project.entry-points."lidarmt.perception"]
      mydet = "mypkg.perception:MyDetector"

* ``"package.module:callable"``: anything importable.
* ``"exec:COMMAND"``: an external program speaking the lidarmt exec protocol on stdin/stdout
  (:class:`lidarmt.lidar.perception.exec_sut.ExecPerception`, ``docs/exec-sut.md``).

The object found is called with the keyword options given to :func:`get_perception` and must return an object
with ``name`` and ``detect(frame, roi) -> Obstacles`` (:class:`lidarmt.lidar.perception.base.Perception`). A class or
factory that already is a Perception instance is returned as is.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from lidarmt._plugins import instantiate
from lidarmt.errors import ArgumentError
from lidarmt.lidar.perception.base import Perception

ENTRY_POINT_GROUP = "lidarmt.perception"


class UnknownPerceptionError(ArgumentError):
    """No perception implementation has the name asked for."""


def _apollo(grid: int, **preset: Any) -> Callable[..., Perception]:
    def factory(**options: Any) -> Perception:
        from lidarmt._plugins import check_options, keyword_options
        from lidarmt.lidar.perception.apollo.config import ApolloConfig
        from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP

        cfg_names = list(ApolloConfig.keys())
        lop_keys = [k for k in keyword_options(ApolloLOP) or [] if k != "config" and k not in cfg_names]
        preset_keys = ["sensor"] if "sensor" in preset else []
        check_options(options, ["config", "set", "overrides", *preset_keys, *cfg_names, *lop_keys],
                      what=f"the Apollo perception ({grid}x{grid} grid)", error=ArgumentError)
        config = options.pop("config", None)
        chosen = dict(preset)
        if "sensor" in preset:  # apollo-3.5: the sensor picks grid, range and channels
            base = ApolloConfig.apollo_3_5(str(options.pop("sensor", preset["sensor"])))
            chosen = {"grid": base.grid, "range": base.range, "in_channels": base.in_channels}
        sets = options.pop("set", None) or options.pop("overrides", None)
        cfg_keys = set(ApolloConfig.keys())
        direct = {k: options.pop(k) for k in list(options) if k in cfg_keys and k != "weights"}
        if options.get("weights") is not None:
            direct["weights"] = str(options.pop("weights"))
        cfg = config or ApolloConfig(**{"grid": grid, **chosen})
        if direct:
            cfg = cfg.replace(**direct)
        if sets:
            cfg = cfg.with_overrides(sets)
        return ApolloLOP(cfg, **options)

    factory.__doc__ = f"Apollo cnnseg perception, {grid}x{grid} grid {preset or ''}".strip()
    return factory


BUILTINS: dict[str, Callable[..., Perception]] = {
    "apollo": _apollo(640),
    "apollo-640": _apollo(640),
    "apollo-512": _apollo(512),
    "apollo-3.0": _apollo(640, filter_noise=True, low_object_filter=True),
    # Apollo 3.5+'s networks (--sut-option sensor=velodyne16|velodyne64|velodyne128): their grids, ranges and
    # feature channels, so that Apollo's official 3.5+ weight files load; post-processing stays 2.x/3.0's
    "apollo-3.5": _apollo(672, sensor="velodyne64"),
    # the shipped weights trained on simulated sweeps only (weights/MODEL_CARD.md; = --sut-option weights=sim)
    "apollo-sim": _apollo(640, weights="sim"),
    "apollo-512-sim": _apollo(512, weights="sim"),
    # v4: drive 0001 + nine SemanticKITTI sequences + simulated frames (weights/MODEL_CARD.md; = weights=streets),
    # what "apollo" loads since issue 32
    "apollo-streets": _apollo(640, weights="streets"),
    # v3: drive 0001 + simulated frames, the default before v4 (= weights=v3)
    "apollo-v3": _apollo(640, weights="v3"),
}


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names :func:`get_perception` accepts (built-ins, then installed plugins), besides ``module:callable``."""
    names = list(BUILTINS)
    names += sorted(n for n in _plugins() if n not in BUILTINS)
    return names


def _load_object(spec: str) -> Any:
    from lidarmt._plugins import load_object

    return load_object(spec, what="perception", error=UnknownPerceptionError)


def _instantiate(obj: Any, spec: str, options: dict[str, Any]) -> Perception:
    return instantiate(obj, spec, options, protocol=Perception, what="perception", lacks="`name` and `detect(frame, roi)`",
                       unknown=UnknownPerceptionError, options_error=ArgumentError)



def get_perception(spec: str, **options: Any) -> Perception:
    """The perception implementation named ``spec``, built with ``options``.

    ``spec`` is a built-in name, an entry-point name of the group ``lidarmt.perception``, or
    ``"module:callable"``. Apollo built-ins take ``config=ApolloConfig``, any ApolloConfig field
    (``mode="fast"``, ``weights=...``), ``set=["key=value", ...]``, and ApolloLOP's own options
    (``allow_random=True, weights=None`` for random weights).
    """
    spec = spec.strip()
    if spec in BUILTINS:
        return BUILTINS[spec](**options)
    if spec.startswith("exec:"):  # an external program (perception/exec_sut.py), not an import
        from lidarmt.lidar.perception.exec_sut import ExecPerception

        return ExecPerception(spec, **options)
    if ":" in spec:
        return _instantiate(_load_object(spec), spec, options)
    plugins = _plugins()
    if spec in plugins:
        try:
            obj = plugins[spec].load()
        except Exception as err:
            raise UnknownPerceptionError(
                f"cannot load perception plugin {spec!r} ({plugins[spec].value}): {err}"
            ) from err
        return _instantiate(obj, spec, options)
    raise UnknownPerceptionError(
        f"unknown perception {spec!r}; available: {', '.join(available())} (or give 'package.module:callable')"
    )
