"""Perception registry: built-ins, entry points, module:callable, and the error for unknown names."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata

import pytest

from lidarmt.errors import UserError
from lidarmt.lidar.perception.base import Perception
from lidarmt.lidar.perception.registry import available, get_perception

PLUGIN = '''
from lidarmt.types import Obstacles


class NullPerception:
    """Reports nothing: a third-party perception module for the registry tests."""

    def __init__(self, tag="x"):
        self.name = f"null-{tag}"

    def detect(self, frame, roi):
        return Obstacles()


def make(**options):
    return NullPerception(**options)


class NotAPerception:
    pass
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "lidarmt_null_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "lidarmt_null_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lidarmt-null-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [lidarmt.perception]
            nullperc = lidarmt_null_plugin:NullPerception
            broken = lidarmt_null_plugin_missing:Thing
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("lidarmt_null_plugin", None)


def test_builtins_are_listed() -> None:
    names = available()
    assert names[:2] == ["apollo", "apollo-640"] and "apollo-512" in names


def test_builtin_apollo_with_options() -> None:
    p = get_perception(
        "apollo-512", weights=None, allow_random=True, mode="fast", set=["objectness_thresh=0.7"]
    )
    assert isinstance(p, Perception)
    assert p.name == "apollo-512" and p.config.grid == 512 and p.config.mode == "fast"
    assert p.config.objectness_thresh == 0.7


def test_entry_point_plugin(plugin_dir) -> None:
    assert any(ep.name == "nullperc" for ep in metadata.entry_points(group="lidarmt.perception"))
    assert "nullperc" in available()
    p = get_perception("nullperc", tag="ep")
    assert p.name == "null-ep" and len(p.detect(None, None)) == 0
    with pytest.raises(UserError, match="cannot load perception plugin 'broken'"):
        get_perception("broken")


def test_module_callable(plugin_dir) -> None:
    p = get_perception("lidarmt_null_plugin:make", tag="mc")
    assert p.name == "null-mc"
    with pytest.raises(UserError, match="lacks"):
        get_perception("lidarmt_null_plugin:NotAPerception")
    with pytest.raises(UserError, match="no attribute"):
        get_perception("lidarmt_null_plugin:nothing_here")
    with pytest.raises(UserError, match="cannot import"):
        get_perception("no_such_module_xyz:thing")


def test_unknown_name_lists_what_exists() -> None:
    with pytest.raises(UserError) as err:
        get_perception("apolo")
    msg = str(err.value)
    assert "unknown perception 'apolo'" in msg and "apollo-512" in msg and "module:callable" in msg
