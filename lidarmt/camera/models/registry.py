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
  :func:`lidarmt.camera.models.keras.load_keras`. A ``.h5`` file is data: nothing in it is executed. Its input
  recipe comes from options, or from a JSON file beside it (:func:`resolve_options`).
* A path to a weights file written by ``lidarmt camera train`` (``.pt``/``.pth``): read as data
  (``torch.load(weights_only=True)``), the architecture it names built from the project's own table
  (:data:`lidarmt.camera.models.archs.ARCHS`); nothing is imported from the file.

Which options each kind takes is :func:`option_keys`; an option a model does not take is one line naming the
ones it does (never a ``TypeError`` from a constructor). :func:`file_sha256` fingerprints a model given by path,
so a bundle can check that replay uses the same file.

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

from lidarmt._plugins import instantiate
from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import SteeringModel

ENTRY_POINT_GROUP = "lidarmt.steering"
ZOO_MODULE = "lidarmt.camera.models.zoo"
KERAS_SUFFIXES = (".h5", ".hdf5")
WEIGHTS_SUFFIXES = (".pt", ".pth")
ONNX_SUFFIXES = (".onnx",)
#: Options of the zoo's models (zoo.load) and of a weights file given by path (zoo.model_from_file).
ZOO_OPTION_KEYS = ("weights", "device")
WEIGHTS_OPTION_KEYS = ("device", "batch_size")
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


def is_weights_path(spec: str) -> bool:
    """Whether ``spec`` names a steering weights file (``.pt``/``.pth``) rather than a model name."""
    return spec.strip().lower().endswith(WEIGHTS_SUFFIXES)


def is_onnx_path(spec: str) -> bool:
    """Whether ``spec`` names an ONNX model file (by its suffix)."""
    return spec.strip().lower().endswith(ONNX_SUFFIXES)


def kind_of(spec: str) -> str:
    """What a spec names: ``"keras"``, ``"onnx"``, ``"weights"`` (a ``camera train`` file), ``"builtin"``,
    ``"code"`` (``module:callable``), ``"plugin"`` or ``"unknown"``."""
    spec = spec.strip()
    if is_keras_path(spec):
        return "keras"
    if is_onnx_path(spec):
        return "onnx"
    if is_weights_path(spec):
        return "weights"
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
    def build_failed(err: TypeError) -> Exception:  # e.g. an option it does not take
        msg = str(err).strip().splitlines()[0] if str(err).strip() else "TypeError"
        return ModelError(f"steering model {spec!r} cannot be built with the options {sorted(options)} ({msg})")

    return instantiate(obj, spec, options, protocol=SteeringModel, what="steering model",
                       lacks="`name`, `input_spec`, `predict(images)` and `module`", unknown=UnknownModelError,
                       options_error=ModelError, build_failed=build_failed)



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
    if is_onnx_path(spec):
        from lidarmt.camera.models.onnxmodel import load_onnx

        return load_onnx(spec, **options)
    if is_weights_path(spec):
        _check_keys(spec, options, WEIGHTS_OPTION_KEYS)
        from lidarmt.camera.models.zoo import model_from_file

        if "batch_size" in options:
            options["batch_size"] = _whole(options["batch_size"], "batch_size", spec)
        try:
            return model_from_file(spec, **options)
        except ModelError as err:  # the line may quote the file (an architecture name): keep it short
            if len(str(err)) <= 400:
                raise
            raise ModelError(str(err)[:400] + "…") from err
    zoo = _zoo()
    if zoo is not None and _zoo_accepts(zoo, spec):
        _check_keys(spec, options, ZOO_OPTION_KEYS)
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
        "(or give the path of a Keras .h5 file, an .onnx file, a weights .pt file from 'lidarmt camera train', or "
        "'package.module:callable')"
    )


def _check_keys(spec: str, options: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        raise ModelError(f"steering model {spec}: unknown option(s) {', '.join(unknown)}; it takes "
                         f"{', '.join(known)}")


def _whole(value: Any, key: str, spec: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError) as err:
        raise ModelError(f"steering model {spec}: option {key}={value!r}: expected a whole number") from err
    if not 1 <= n <= 4096:
        raise ModelError(f"steering model {spec}: option {key}={value!r}: give 1 to 4096")
    return n


def option_keys(spec: str) -> tuple[str, ...] | None:
    """The options the model ``spec`` takes, or None when they cannot be known (plugins, ``module:callable``:
    their constructor's keywords). ``recipe`` (a recipe file for a Keras model) is resolved by
    :func:`resolve_options` before the model is built."""
    kind = kind_of(spec)
    if kind == "keras":
        from lidarmt.camera.models.keras import OPTION_KEYS

        return (*OPTION_KEYS, "recipe")
    if kind == "onnx":
        from lidarmt.camera.models.onnxmodel import OPTION_KEYS as ONNX_KEYS

        return (*ONNX_KEYS, "recipe")
    if kind == "weights":
        return WEIGHTS_OPTION_KEYS
    if kind == "builtin":
        return ZOO_OPTION_KEYS
    return None


def resolve_options(spec: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a Keras model is built with: its recipe file (``recipe=FILE`` among ``options``, else the
    sidecar ``<model>.recipe.json`` when present) under the options given. Other models' options are returned
    as given. The result is what a campaign records, so replay never reads the sidecar again."""
    options = dict(options)
    recipe = options.pop("recipe", None)
    if kind_of(spec) not in ("keras", "onnx"):
        if recipe is not None:
            raise ModelError(f"steering model {spec}: recipe= is for Keras .h5 and ONNX models (an input recipe); "
                             f"{spec} prepares its own input")
        return options
    from lidarmt.camera.models.keras import recipe_options

    return {**recipe_options(spec, None if recipe in (None, "") else str(recipe)), **options}


def file_sha256(spec: str) -> str | None:
    """The SHA-256 of the file a model spec names (a Keras or weights file), or None for names and code."""
    if kind_of(spec) not in ("keras", "onnx", "weights"):
        return None
    from lidarmt._paths import sha256_file

    p = Path(spec.strip())
    if not p.is_file():
        return None
    try:
        return sha256_file(p)
    except OSError as err:
        raise ModelError(f"{p}: unreadable model file ({err.strerror or err})") from err


def training_mean(spec: str, options: dict[str, Any] | None = None) -> tuple[float | None, str]:
    """``(mean training label in radians, where it was read)`` of a zoo model or a weights file: the weights
    file's metadata (``train_mean_rad``) when it records it, else the metrics file ``camera train`` wrote beside
    the weights (``<arch>.json``); ``(None, why)`` when neither says."""
    import json
    import math

    kind = kind_of(spec)
    options = options or {}
    if kind == "weights":
        path = Path(spec.strip())
    elif kind == "builtin":
        zoo = _zoo()
        path = Path(options["weights"]) if options.get("weights") else zoo.shipped_weights(spec)
    else:
        return None, "not recorded for this kind of model"
    from lidarmt.camera.models.train import read_weights

    _arch, _state, meta = read_weights(path)

    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    got = number(meta.get("train_mean_rad")) if isinstance(meta, dict) else None
    if got is not None:
        return got, f"{path.name} metadata"
    metrics = path.with_suffix(".json")
    try:
        doc = json.loads(metrics.read_text(encoding="utf-8")) if metrics.is_file() else None
    except (OSError, ValueError, RecursionError):
        doc = None
    got = number(doc.get("train_mean_rad")) if isinstance(doc, dict) else None
    if got is not None:
        return got, metrics.name
    return None, f"{path.name} does not record its training labels' mean"


def training_frames(spec: str, options: dict[str, Any] | None, labels: list[float | None]) -> dict[str, Any] | None:
    """Which frames of a source trained the model, when its card (the metrics file ``camera train`` wrote
    beside the weights: ``data``, ``data_frames``, ``train_frames``, ``labels_sha256``) shows the source *is*
    its training drive (as many frames, the same labels' fingerprint): ``{"stop": first validation index,
    "frames": data_frames, "data": the training folder as recorded}`` (frames ``0 .. stop-1`` trained it, split
    in time); None when the card says nothing or the source is another drive."""
    import json

    import numpy as np

    kind = kind_of(spec)
    options = options or {}
    if kind == "weights":
        path = Path(spec.strip())
    elif kind == "builtin":
        path = Path(options["weights"]) if options.get("weights") else _zoo().shipped_weights(spec)
    else:
        return None
    try:
        doc = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    n, stop, sha = doc.get("data_frames"), doc.get("train_frames"), doc.get("labels_sha256")
    if not (isinstance(n, int) and isinstance(stop, int) and isinstance(sha, str)) or len(labels) != n:
        return None
    if any(v is None for v in labels):
        return None
    from lidarmt.camera.models.train import labels_fingerprint

    if labels_fingerprint(np.asarray(labels, dtype=np.float64)) != sha:
        return None
    return {"stop": int(stop), "frames": int(n), "data": str(doc.get("data", "")), "card": path.with_suffix(".json").name}


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
