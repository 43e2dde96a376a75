"""Find steering models by name: the project's zoo, installed plugins, ``module:callable``, or a Keras file.

* Built-ins: the names of the project's own model zoo (:mod:`lidarmt.camera.models.zoo`: ``dave-orig``,
  ``epoch``, ...), loaded with ``zoo.load(name, weights=..., device=...)``. :func:`available` lists those with
  shipped weights; the zoo's other architectures are accepted too (with ``weights=`` a trained file).
* Plugins: any package declaring an entry point in the group ``lidarmt.steering``, e.g. in pyproject.toml::

      [project.entry-points."lidarmt.steering"]
      mymodel = "mypkg.steering:build_model"

* ``"package.module:callable"``: anything importable. This imports and runs code, so a spec read from a file
  somebody sent (a bug bundle, a journal) is refused unless the caller passes ``trust_code=True`` (the CLI's
  ``--trust-code``).
* A path to a Keras HDF5 model (``.h5``/``.hdf5``, or any file with the HDF5 signature): imported by
  :func:`lidarmt.camera.models.keras.load_keras`. A ``.h5`` file is data: nothing in it is executed.

The object found is called with the keyword options given to :func:`get_model` and must return a
:class:`~lidarmt.camera.models.base.SteeringModel` (``name``, ``input_spec``, ``predict(images)``,
``module``). An object that already is a SteeringModel is returned as is.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import SteeringModel

ENTRY_POINT_GROUP = "lidarmt.steering"
ZOO_MODULE = "lidarmt.camera.models.zoo"
KERAS_SUFFIXES = (".h5", ".hdf5")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class UnknownModelError(ModelError):
    """No steering model has the name asked for."""


class UntrustedCodeError(ModelError):
    """A model spec would import code, and the spec came from a file that is not trusted."""


def _zoo() -> Any | None:
    """The zoo module, or None while the project has none (then there are no built-ins)."""
    if importlib.util.find_spec(ZOO_MODULE) is None:
        return None
    return importlib.import_module(ZOO_MODULE)


def builtin_names() -> list[str]:
    """The zoo's model names (empty when the zoo is absent)."""
    zoo = _zoo()
    return list(zoo.available()) if zoo is not None else []


def _zoo_accepts(zoo: Any, spec: str) -> bool:
    """Zoo names with shipped weights, and the zoo's other architectures (which then need ``weights=``)."""
    names = getattr(zoo, "architectures", zoo.available)()
    return spec in names or spec in zoo.available()


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names :func:`get_model` accepts (built-ins, then plugins), besides ``module:callable``, Keras paths."""
    names = builtin_names()
    names += sorted(n for n in _plugins() if n not in names)
    return names


def is_keras_path(spec: str) -> bool:
    """Whether ``spec`` names a Keras HDF5 file: by its suffix, or by the signature of an existing file."""
    if spec.lower().endswith(KERAS_SUFFIXES):
        return True
    p = Path(spec)
    try:
        if p.is_file():
            with open(p, "rb") as fh:
                return fh.read(8) == _HDF5_SIGNATURE
    except OSError:
        return False
    return False


def kind_of(spec: str) -> str:
    """What a spec names: ``"keras"``, ``"builtin"``, ``"code"`` (``module:callable``), ``"plugin"`` or
    ``"unknown"``."""
    spec = spec.strip()
    if is_keras_path(spec):
        return "keras"
    zoo = _zoo()
    if zoo is not None and _zoo_accepts(zoo, spec):
        return "builtin"
    if ":" in spec:
        return "code"
    if spec in _plugins():
        return "plugin"
    return "unknown"


def _load_object(spec: str) -> Any:
    from lidarmt._plugins import load_object

    return load_object(spec, what="steering model", error=UnknownModelError)


def _instantiate(obj: Any, spec: str, options: dict[str, Any]) -> SteeringModel:
    if isinstance(obj, SteeringModel) and not isinstance(obj, type):
        if options:
            raise ModelError(
                f"steering model {spec!r} is an instance; it takes no options (got {sorted(options)})"
            )
        return obj
    if not callable(obj):
        raise UnknownModelError(f"steering model {spec!r} is neither callable nor a SteeringModel")
    inst = obj(**options)
    if not isinstance(inst, SteeringModel) or isinstance(inst, type):
        raise UnknownModelError(
            f"steering model {spec!r} returned {type(inst).__name__}, which lacks `name`, `input_spec`, "
            "`predict(images)` and `module`"
        )
    return inst


def get_model(spec: str, *, trust_code: bool = True, **options: Any) -> SteeringModel:
    """The steering model named ``spec``, built with ``options``.

    ``spec`` is a zoo name, an entry-point name of the group ``lidarmt.steering``, ``"module:callable"``, or
    the path of a Keras HDF5 file. Zoo models take ``weights=`` and ``device=``; Keras files take the options
    of :func:`~lidarmt.camera.models.keras.load_keras` (``preprocess``, ``output``, ``lambda``, ``device``).
    ``trust_code=False`` (for specs read from files) refuses ``module:callable``, which would import code;
    zoo names, installed plugins and Keras files are still allowed.
    """
    spec = str(spec).strip()
    if is_keras_path(spec):
        from lidarmt.camera.models.keras import load_keras

        return load_keras(spec, **options)
    zoo = _zoo()
    if zoo is not None and _zoo_accepts(zoo, spec):
        return zoo.load(spec, **options)
    if ":" in spec:
        if not trust_code:
            raise UntrustedCodeError(
                f"steering model {spec!r} would import and run module {spec.partition(':')[0]!r}, and it was "
                "read from a file that is not trusted; rerun with --trust-code if you trust that file"
            )
        return _instantiate(_load_object(spec), spec, options)
    plugins = _plugins()
    if spec in plugins:
        try:
            obj = plugins[spec].load()
        except Exception as err:
            raise UnknownModelError(
                f"cannot load steering model plugin {spec!r} ({plugins[spec].value}): {err}"
            ) from err
        return _instantiate(obj, spec, options)
    names = available()
    raise UnknownModelError(
        f"unknown steering model {spec!r}; available: {', '.join(names) if names else '(none installed)'} "
        "(or give the path of a Keras .h5 file, or 'package.module:callable')"
    )


def describe(spec: str) -> dict[str, Any]:
    """What ``lidarmt camera models`` shows about one name: the zoo's description, or a plugin's origin."""
    zoo = _zoo()
    if zoo is not None and spec in zoo.available():
        return {"name": spec, "kind": "builtin", **dict(zoo.describe(spec))}
    plugins = _plugins()
    if spec in plugins:
        ep = plugins[spec]
        dist = getattr(ep, "dist", None)
        return {
            "name": spec,
            "kind": "plugin",
            "entry_point": ep.value,
            "package": getattr(dist, "name", None) if dist is not None else None,
        }
    raise UnknownModelError(
        f"unknown steering model {spec!r}; available: {', '.join(available()) or '(none)'}"
    )
