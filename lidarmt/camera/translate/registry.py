"""Find translators by name: the shipped ones, installed plug-ins, ``module:callable`` or a translator file.

* Built-ins: the translators shipped in ``lidarmt/camera/translate/weights/`` (``<name>.pt`` weights written
  by ``lidarmt camera train-translator``, ``<name>.md`` model card, ``<name>.json`` metrics), e.g.
  ``munit-night``, ``unit-snow``.
* Plug-ins: any package declaring an entry point in the group ``lidarmt.translator``, e.g. in pyproject.toml::

      [project.entry-points."lidarmt.translator"]
      cyclegan-fog = "mypkg.fog:build"

  The object is a :class:`~lidarmt.camera.translate.base.Translator`, or a callable returning one when called
  with the keyword options of :func:`get_translator` (``device=``).
* ``"package.module:callable"``: anything importable. This imports code, so a spec read from a file (a bug
  bundle, a journal) is refused unless ``trust_code=True`` (the CLI's ``--trust-code``).
* A path to a ``translator.pt`` file (from ``lidarmt camera train-translator``): read as data, never code.
"""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from lidarmt._plugins import instantiate
from lidarmt.camera.errors import ModelError
from lidarmt.camera.translate.base import Translator

ENTRY_POINT_GROUP = "lidarmt.translator"
#: Where the shipped translators, their cards and metrics live.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


class UnknownTranslatorError(ModelError):
    """No translator has the name asked for."""


class UntrustedTranslatorError(ModelError):
    """A translator spec would import code, and it was read from a file that is not trusted."""


def builtin_names() -> list[str]:
    """Names of the shipped translators (those with a weights file), sorted."""
    if not WEIGHTS_DIR.is_dir():
        return []
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.pt"))


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names :func:`get_translator` accepts: shipped ones, then plug-ins (besides module:callable and paths)."""
    names = builtin_names()
    return names + sorted(n for n in _plugins() if n not in names)


def is_translator_path(spec: str) -> bool:
    return spec.endswith(".pt") and ("/" in spec or Path(spec).is_file())


def kind_of(spec: str) -> str:
    """``"builtin"``, ``"path"``, ``"code"``, ``"plugin"`` or ``"unknown"``."""
    spec = spec.strip()
    if spec in builtin_names():
        return "builtin"
    if is_translator_path(spec):
        return "path"
    if ":" in spec:
        return "code"
    if spec in _plugins():
        return "plugin"
    return "unknown"


def _metrics(name: str) -> dict[str, Any]:
    p = WEIGHTS_DIR / f"{name}.json"
    if not p.is_file():
        return {}
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ModelError(f"{p}: unreadable translator metrics ({err}); reinstall lidarmt") from err
    return d if isinstance(d, dict) else {}


def _instantiate(obj: Any, spec: str, options: dict[str, Any]) -> Translator:
    return instantiate(obj, spec, options, protocol=Translator, what="translator",
                       lacks="name, arch, style_dim, weather, translate(images, style, seed) and describe() (see "
                             "lidarmt.camera.translate.base.Translator)", unknown=UnknownTranslatorError,
                       options_error=None, build_failed=lambda err: UnknownTranslatorError(
                           f"translator {spec!r} could not be built with {sorted(options)}: {err}"))



def get_translator(spec: str, *, trust_code: bool = True, device: str = "cpu", **options: Any) -> Translator:
    """The translator ``spec`` names (see the module docstring), on ``device`` (a resolved torch device)."""
    from lidarmt.camera.translate.model import LearnedTranslator

    spec = str(spec).strip()
    if spec in builtin_names():
        m = _metrics(spec)
        card = WEIGHTS_DIR / f"{spec}.md"
        return LearnedTranslator(spec, WEIGHTS_DIR / f"{spec}.pt", device=device, card=str(card) if card.is_file()
                                 else "", weather=str(m.get("weather", "")), title=str(m.get("title", "")),
                                 **options)
    if is_translator_path(spec):
        p = Path(spec)
        return LearnedTranslator(p.parent.name if p.stem == "translator" else p.stem, p, device=device, **options)
    if ":" in spec:
        if not trust_code:
            raise UntrustedTranslatorError(
                f"translator {spec!r} would import and run module {spec.partition(':')[0]!r}, and it was read from "
                "a file that is not trusted; rerun with --trust-code if you trust that file")
        from lidarmt._plugins import load_object

        return _instantiate(load_object(spec, what="translator", error=UnknownTranslatorError), spec,
                            {"device": device, **options})
    plugins = _plugins()
    if spec in plugins:
        try:
            obj = plugins[spec].load()
        except Exception as err:
            why = " ".join(str(err).split()) or type(err).__name__  # one line, whatever the plug-in raised
            raise UnknownTranslatorError(f"cannot load translator plug-in {spec!r} ({plugins[spec].value}): {why}; "
                                         "reinstall or uninstall the package that declares it") from err
        return _instantiate(obj, spec, {"device": device, **options})
    names = available()
    raise UnknownTranslatorError(
        f"unknown translator {spec!r}; available: {', '.join(names) if names else '(none installed)'} "
        "(or the path of a translator.pt from 'lidarmt camera train-translator', or 'package.module:callable')")


def _file_facts(path: Path) -> dict[str, Any]:
    """Settings and size of a translator file, from its metadata and tensors (no network is built)."""
    from lidarmt.camera.translate.model import read_translator

    state, meta = read_translator(path)
    net = meta.get("net", {})
    return {"arch": net.get("arch"), "style_dim": net.get("style_dim", 0) if net.get("arch") == "munit" else 0,
            "load_size": meta.get("load_size"), "iterations": meta.get("iterations"),
            "parameters": int(sum(t.numel() for t in state.values())), "net": net, "weights": str(path)}


def describe(spec: str) -> dict[str, Any]:
    """What ``lidarmt camera translators`` shows. A shipped translator: its settings, parameters, card and the
    numbers of its metrics file; a translator file: its settings; a plug-in: its entry point and package (not
    loaded: listing imports no code)."""
    spec = str(spec).strip()
    if spec in builtin_names():
        card = WEIGHTS_DIR / f"{spec}.md"
        d: dict[str, Any] = {"name": spec, "kind": "builtin", **_file_facts(WEIGHTS_DIR / f"{spec}.pt"),
                             "card": str(card) if card.is_file() else ""}
        for k, v in _metrics(spec).items():
            d.setdefault(k, v)
        return d
    if is_translator_path(spec):
        p = Path(spec)
        return {"name": p.parent.name if p.stem == "translator" else p.stem, "kind": "path", **_file_facts(p)}
    plugins = _plugins()
    if spec in plugins:
        ep = plugins[spec]
        dist = getattr(ep, "dist", None)
        return {"name": spec, "kind": "plugin", "entry_point": ep.value,
                "package": getattr(dist, "name", None) if dist is not None else None}
    raise UnknownTranslatorError(f"unknown translator {spec!r}; available: {', '.join(available()) or '(none)'} "
                                 "(or the path of a translator.pt)")
