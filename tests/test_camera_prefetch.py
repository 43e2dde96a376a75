"""Camera campaigns with the transformations made ahead in a thread pool (lidarmt.camera.prefetch): the same
records, byte for byte (timing fields aside), as without it; the next frame really is made ahead."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lidarmt.camera import prefetch
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs
from lidarmt.camera.transforms.registry import get_transform, select
from lidarmt.engine.campaign import run_campaign
from lidarmt.engine.journal import JOURNAL_NAME

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_camera_campaign import write_udacity  # noqa: E402

TIMING = re.compile(rb'"(model_s|transform_s)":[-0-9.e]+')


@pytest.fixture(scope="module")
def udacity(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("prefetch") / "drive", n=6)


@pytest.fixture
def flaky_rotation(monkeypatch):
    """Rotation fails on its second setting (a transformation's own failure is a recorded crash)."""
    rot = type(get_transform("rotation"))
    second = dict(get_transform("rotation").grid[1])
    original = rot.apply

    def apply(self, image, params, seed):
        if dict(params) == second:
            raise ValueError("rotation broke on purpose")
        return original(self, image, params, seed)

    monkeypatch.setattr(rot, "apply", apply)


def _config(src: Path, frames=(0, 2, 3, 5)) -> CameraCampaignConfig:
    return CameraCampaignConfig(str(src), (ModelRef("test_camera_campaign:tilt", {}),
                                           ModelRef("test_camera_campaign:tilt", {"gain": 0.3})),
                                transform_refs(select("brightness,rotation,fog,rain,mirror")), tuple(frames),
                                seed=11, batch_size=7)


def _journal(src: Path, out: Path, threads: int, monkeypatch) -> bytes:
    monkeypatch.setenv(prefetch.ENV, str(threads))
    run_campaign(_config(src), out)
    return TIMING.sub(b'"\\1":0', (out / JOURNAL_NAME).read_bytes())


def test_journal_bytes_do_not_depend_on_prefetching(udacity, tmp_path, monkeypatch, flaky_rotation):
    plain = _journal(udacity, tmp_path / "plain", 0, monkeypatch)
    pooled = _journal(udacity, tmp_path / "pooled", 2, monkeypatch)
    one = _journal(udacity, tmp_path / "one", 1, monkeypatch)
    assert b"rotation broke on purpose" in plain and b'"status":"ok"' in plain
    assert pooled == plain and one == plain


def test_the_next_frame_is_made_ahead_only_in_order(udacity, monkeypatch):
    monkeypatch.setenv(prefetch.ENV, "2")
    cfg = _config(udacity)
    ev = cfg.evaluator()
    out: list[dict] = []
    for f in cfg.frames:
        ev.run_item(f, cfg.keys_of(f), lambda kind, rec: out.append(rec))
    assert ev._prefetch.hits == len(cfg.frames) - 1 and len(out) == cfg.total
    # out of order (as a worker among several sees frames): no image made for nothing after the first guess
    ev2 = cfg.evaluator()
    for f in (5, 0, 3, 2):
        ev2.run_item(f, cfg.keys_of(f), lambda kind, rec: None)
    assert ev2._prefetch.hits == 0
    ev._prefetch.close()
    ev2._prefetch.close()


def test_images_match_the_serial_path(udacity, monkeypatch):
    cfg = _config(udacity)
    monkeypatch.setenv(prefetch.ENV, "0")
    serial = cfg.evaluator()
    monkeypatch.setenv(prefetch.ENV, "3")
    pooled = cfg.evaluator()
    for f in cfg.frames:
        wanted = sorted({(k[2], k[3], k[4]) for k in cfg.keys_of(f)})
        a, b = serial._images(f, wanted), pooled._images(f, wanted)
        assert a.made.keys() == b.made.keys() and a.broken == b.broken
        assert all(np.array_equal(a.made[k], b.made[k]) for k in a.made)
    pooled._prefetch.close()


def test_threads_setting(monkeypatch):
    monkeypatch.setenv(prefetch.ENV, "0")
    assert prefetch.default_threads() == 0
    monkeypatch.setenv(prefetch.ENV, "nonsense")
    assert prefetch.default_threads() == 0
    monkeypatch.delenv(prefetch.ENV)
    assert 1 <= prefetch.default_threads() <= prefetch.MAX_THREADS
    assert prefetch.pool_safe(get_transform("fog")) and prefetch.pool_safe(get_transform("mirror"))
