"""The translator registry: shipped names, translator files, module:callable (and its trust rule), entry-point
plug-ins (a fake installed distribution), descriptions and unknown names."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("cv2")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _translators import tiny_translator  # noqa: E402

from lidarmt.camera.errors import ModelError  # noqa: E402
from lidarmt.camera.translate import registry  # noqa: E402
from lidarmt.camera.translate.base import Translator  # noqa: E402
from lidarmt.camera.translate.model import LearnedTranslator  # noqa: E402
from lidarmt.errors import UserError  # noqa: E402

PLUGIN = textwrap.dedent('''
    import numpy as np

    class Invert:
        """A plug-in translator: photographic negative (a stand-in for a real model)."""
        arch = "invert"
        style_dim = 0
        weather = "negative"

        def __init__(self, device="cpu", gain=1.0):
            self.name = "invert"
            self.device = device

        def translate(self, images, style=None, seed=0):
            return 255 - np.asarray(images, np.uint8)

        def describe(self):
            return {"name": self.name, "arch": self.arch, "style_dim": 0}

    def build(**options):
        return Invert(**options)

    def broken(**options):
        return 42

    instance = Invert()
''')


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_translator(tmp_path_factory.mktemp("tiny"), "munit")


@pytest.fixture
def shipped(tiny, tmp_path, monkeypatch) -> Path:
    """A weights folder with one 'shipped' translator, its card and metrics."""
    w = tmp_path / "weights"
    w.mkdir()
    shutil.copyfile(tiny, w / "munit-tiny.pt")
    (w / "munit-tiny.md").write_text("# munit-tiny\n\nA tiny test translator.\n")
    (w / "munit-tiny.json").write_text(json.dumps({"weather": "night", "title": "tiny night",
                                                   "ssim_to_source": 0.5, "iterations": 999}))
    monkeypatch.setattr(registry, "WEIGHTS_DIR", w)
    return w


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """An installed distribution (a .dist-info folder on sys.path) declaring lidarmt.translator entry points."""
    mod = f"lidarmt_fake_translator_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{mod}.py").write_text(PLUGIN)
    dist = tmp_path / "lidarmt_fake_translator-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lidarmt-fake-translator\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[lidarmt.translator]\ninvert = {mod}:build\n"
                                           f"broken-plugin = {mod}_missing:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield mod
    sys.modules.pop(mod, None)


@pytest.fixture
def no_builtins(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "WEIGHTS_DIR", tmp_path / "no-weights")


def test_shipped_translator(shipped):
    assert registry.builtin_names() == ["munit-tiny"]
    assert registry.available()[0] == "munit-tiny"
    assert registry.kind_of("munit-tiny") == "builtin"
    tr = registry.get_translator("munit-tiny", trust_code=False)
    assert isinstance(tr, LearnedTranslator) and isinstance(tr, Translator)
    assert (tr.name, tr.weather, tr.title, tr.card) == ("munit-tiny", "night", "tiny night",
                                                        str(shipped / "munit-tiny.md"))
    d = registry.describe("munit-tiny")
    assert d["kind"] == "builtin" and d["arch"] == "munit" and d["style_dim"] == 3
    assert d["parameters"] == tr.parameters and d["ssim_to_source"] == 0.5
    assert d["iterations"] == 2  # the weights' own count wins over the metrics file
    (shipped / "munit-tiny.json").write_text("{not json")
    with pytest.raises(ModelError, match="unreadable translator metrics") as exc:
        registry.describe("munit-tiny")
    assert "\n" not in str(exc.value)


def test_translator_file_by_path(tiny, no_builtins):
    spec = str(tiny)
    assert registry.kind_of(spec) == "path"
    tr = registry.get_translator(spec, trust_code=False, batch_size=3)
    assert tr.name == tiny.parent.name and tr.batch_size == 3
    d = registry.describe(spec)
    assert d["kind"] == "path" and d["weights"] == spec and d["parameters"] == tr.parameters
    with pytest.raises(ModelError, match="no such translator file"):
        registry.get_translator(str(tiny.parent / "missing.pt"))


def test_module_callable_and_the_trust_rule(plugin_dist, no_builtins):
    spec = f"{plugin_dist}:build"
    assert registry.kind_of(spec) == "code"
    with pytest.raises(registry.UntrustedTranslatorError, match=r"would import and run module .*--trust-code") as e:
        registry.get_translator(spec, trust_code=False)
    assert plugin_dist not in sys.modules  # refused before importing
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)
    tr = registry.get_translator(spec, device="cpu")
    img = np.zeros((1, 4, 4, 3), np.uint8)
    assert tr.name == "invert" and np.all(tr.translate(img) == 255)
    assert registry.get_translator(f"{plugin_dist}:instance").name == "invert"
    with pytest.raises(ModelError, match="returned int, which lacks name, arch"):
        registry.get_translator(f"{plugin_dist}:broken")
    with pytest.raises(ModelError, match="has no attribute 'nothing'"):
        registry.get_translator(f"{plugin_dist}:nothing")


def test_entry_point_plugin_from_an_installed_distribution(plugin_dist, no_builtins):
    assert registry.available() == ["broken-plugin", "invert"]
    assert registry.kind_of("invert") == "plugin"
    tr = registry.get_translator("invert", trust_code=False)  # installed code is not code from a file
    assert tr.weather == "negative" and isinstance(tr, Translator)
    d = registry.describe("invert")
    assert d == {"name": "invert", "kind": "plugin", "entry_point": f"{plugin_dist}:build",
                 "package": "lidarmt-fake-translator"}
    with pytest.raises(ModelError, match="cannot load translator plug-in 'broken-plugin'") as exc:
        registry.get_translator("broken-plugin")
    assert "\n" not in str(exc.value)


def test_unknown_names(no_builtins, monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    with pytest.raises(registry.UnknownTranslatorError, match=r"unknown translator 'munit-fog'; available: "
                       r"\(none installed\) \(or the path") as exc:
        registry.get_translator("munit-fog")
    assert isinstance(exc.value, UserError) and "\n" not in str(exc.value)
    assert registry.kind_of("munit-fog") == "unknown"
    with pytest.raises(ModelError, match="unknown translator 'munit-fog'"):
        registry.describe("munit-fog")
    assert registry.available() == []
