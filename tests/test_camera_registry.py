"""The steering-model registry: zoo names, entry points, module:callable (and its trust rule), Keras paths."""

from __future__ import annotations

import sys
import textwrap
from importlib.metadata import EntryPoint
from types import SimpleNamespace

import numpy as np
import pytest

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models import registry
from lidarmt.camera.models.base import SteeringModel
from lidarmt.errors import UserError

TOY = textwrap.dedent("""
    import numpy as np
    from lidarmt.camera.models.base import InputSpec

    class Toy:
        def __init__(self, gain=1.0):
            self.name = "toy"
            self.input_spec = InputSpec(height=8, width=8)
            self.gain = float(gain)

        def predict(self, images):
            return images.reshape(len(images), -1).mean(axis=1) / 255.0 * self.gain

        @property
        def module(self):
            return None

    def make(**options):
        return Toy(**options)

    def broken(**options):
        return 42

    instance = Toy()
""")


@pytest.fixture
def toy_module(tmp_path, monkeypatch) -> str:
    name = f"lidarmt_toy_steering_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture
def fake_zoo(monkeypatch):
    calls = []

    def load(name, *, weights=None, device="cpu"):
        calls.append((name, weights, device))
        return SimpleNamespace(name=name, input_spec=None, predict=lambda x: np.zeros(len(x)), module=None)

    zoo = SimpleNamespace(available=lambda: ["dave-orig", "epoch"], load=load,
                          describe=lambda name: {"input": "100x100 rgb", "parameters": 123})  # fmt: skip
    monkeypatch.setattr(registry, "_zoo", lambda: zoo)
    return calls


@pytest.fixture
def no_plugins(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [])


def test_module_callable_with_options(toy_module) -> None:
    m = registry.get_model(f"{toy_module}:make", gain=2.0)
    assert isinstance(m, SteeringModel) and m.name == "toy"
    imgs = np.full((3, 8, 8, 3), 255, np.uint8)
    np.testing.assert_allclose(m.predict(imgs), 2.0)
    inst = registry.get_model(f"{toy_module}:instance")
    assert inst.name == "toy"
    with pytest.raises(ModelError, match="is an instance; it takes no options"):
        registry.get_model(f"{toy_module}:instance", gain=3)
    with pytest.raises(ModelError, match="returned int, which lacks"):
        registry.get_model(f"{toy_module}:broken")
    with pytest.raises(ModelError, match="has no attribute 'nothing'"):
        registry.get_model(f"{toy_module}:nothing")
    with pytest.raises(ModelError, match="cannot import module 'no_such_pkg_xyz.mod'"):
        registry.get_model("no_such_pkg_xyz.mod:make")


def test_untrusted_spec_imports_nothing(toy_module) -> None:
    with pytest.raises(ModelError, match=rf"would import and run module '{toy_module}'.*--trust-code") as exc:
        registry.get_model(f"{toy_module}:make", trust_code=False)
    assert toy_module not in sys.modules  # refused before importing
    assert isinstance(exc.value, UserError) and "\n" not in str(exc.value)


def test_entry_points(toy_module, monkeypatch) -> None:
    eps = [
        EntryPoint(name="toy-plugin", value=f"{toy_module}:make", group=registry.ENTRY_POINT_GROUP),
        EntryPoint(name="bad-plugin", value="no_such_pkg_xyz:make", group=registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(
        registry, "entry_points", lambda group: eps if group == registry.ENTRY_POINT_GROUP else []
    )
    monkeypatch.setattr(registry, "_zoo", lambda: None)
    assert registry.available() == ["bad-plugin", "toy-plugin"]
    # an installed plugin is not code from a file: allowed without trust
    m = registry.get_model("toy-plugin", trust_code=False, gain=0.5)
    assert m.gain == 0.5
    assert registry.describe("toy-plugin")["entry_point"] == f"{toy_module}:make"
    with pytest.raises(ModelError, match="cannot load steering model plugin 'bad-plugin'"):
        registry.get_model("bad-plugin")


def test_zoo_names_come_first(fake_zoo, no_plugins) -> None:
    assert registry.available() == ["dave-orig", "epoch"]
    m = registry.get_model("epoch", trust_code=False, weights="w.pt")
    assert m.name == "epoch" and fake_zoo == [("epoch", "w.pt", "cpu")]
    assert registry.describe("dave-orig") == {"name": "dave-orig", "kind": "builtin", "input": "100x100 rgb",
                                              "parameters": 123}  # fmt: skip
    assert registry.kind_of("epoch") == "builtin" and registry.kind_of("a.b:c") == "code"


def test_unknown_name_lists_the_available_ones(fake_zoo, no_plugins) -> None:
    with pytest.raises(
        ModelError, match=r"unknown steering model 'dave-nope'; available: dave-orig, epoch \(or"
    ) as e:
        registry.get_model("dave-nope")
    assert "\n" not in str(e.value)
    assert registry.kind_of("dave-nope") == "unknown"


def test_no_zoo_means_no_builtins(monkeypatch, no_plugins) -> None:
    monkeypatch.setattr(registry, "_zoo", lambda: None)
    assert registry.available() == []
    with pytest.raises(ModelError, match=r"available: \(none installed\)"):
        registry.get_model("dave-orig")


def test_keras_paths_are_data(tmp_path) -> None:
    from test_camera_keras import keras2_layers, write_keras

    path = write_keras(tmp_path / "model.h5", keras2_layers(), version=2)
    m = registry.get_model(str(path), trust_code=False, preprocess="resize")
    assert m.input_spec.height == 23 and m.module is not None
    assert registry.kind_of(str(path)) == "keras"
    # the HDF5 signature is enough, whatever the suffix
    other = tmp_path / "model.weights"
    other.write_bytes(path.read_bytes())
    assert registry.is_keras_path(str(other))
    assert registry.get_model(str(other)).input_spec.width == 30
    with pytest.raises(ModelError, match="does not exist"):
        registry.get_model(str(tmp_path / "absent.h5"))
