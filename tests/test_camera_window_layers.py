"""Windows of frames (models with history) transformed with what depends only on the setting and seed made once
per window (``BaseTransform.apply_same``, :func:`lidarmt.camera.transforms._common.once`): the same bytes as
frame by frame, for every built-in transformation, and the same campaign journal."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lidarmt.camera import prefetch
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs, transform_seed
from lidarmt.camera.models.base import InputSpec
from lidarmt.camera.transforms import _common
from lidarmt.camera.transforms.base import apply_window
from lidarmt.camera.transforms.registry import select
from lidarmt.engine.campaign import run_campaign
from lidarmt.engine.journal import JOURNAL_NAME

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_camera_campaign import write_udacity  # noqa: E402

TIMING = re.compile(rb'"(model_s|transform_s)":[-0-9.e]+')


def _window(t: int = 3, h: int = 40, w: int = 56, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    # consecutive frames: alike but not equal (a shift and some noise)
    frames = [np.clip(np.roll(base, k, axis=1).astype(int) + rng.integers(-9, 10, base.shape), 0, 255)
              for k in range(t)]
    return np.stack(frames).astype(np.uint8)


@pytest.mark.parametrize("transform", select("all"), ids=lambda t: t.name)
def test_a_window_is_the_same_bytes_as_frame_by_frame(transform):
    window = _window()
    before = window.copy()
    for p, params in enumerate(transform.grid):
        for trial in range(2):
            seed = transform_seed(5, 7, transform.name, p, trial)
            got = apply_window(transform, window, params, seed)
            want = np.stack([transform.apply(img, params, seed) for img in window])
            assert got.dtype == np.uint8 and got.shape == window.shape
            assert np.array_equal(got, want), (transform.name, p, trial)
            assert not np.shares_memory(got, window)
    assert np.array_equal(window, before)  # the caller's frames are never written to


def test_weather_layers_are_made_once_per_window(monkeypatch):
    calls = []
    real = _common.smooth_noise

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    import lidarmt.camera.transforms.weather as weather

    monkeypatch.setattr(weather, "smooth_noise", counting)
    fog = select("fog")[0]
    window = _window(t=4)
    fog.apply_same(window, fog.grid[-1], 3)
    assert len(calls) == 1
    for img in window:
        fog.apply(img, fog.grid[-1], 3)
    assert len(calls) == 5  # one apply, one field: nothing is kept between calls


class WindowTilt:
    """A steering 'model' with history 2 that looks at every frame of its window."""

    name = "window-tilt"
    input_spec = InputSpec(48, 64, history=2)
    module = None

    def predict(self, images: np.ndarray) -> np.ndarray:
        x = images.astype(np.float64)
        w = x.shape[3]
        diff = x[:, :, :, : w // 2].mean(axis=(2, 3, 4)) - x[:, :, :, w - w // 2:].mean(axis=(2, 3, 4))
        return 0.5 * (diff * np.array([0.2, 0.3, 0.5])).sum(axis=1) / 255.0


def window_tilt() -> WindowTilt:
    return WindowTilt()


def _journal(src: Path, out: Path) -> bytes:
    cfg = CameraCampaignConfig(str(src), (ModelRef("test_camera_window_layers:window_tilt", {}),),
                               transform_refs(select("all")), (0, 2, 3, 5), seed=4, batch_size=16)
    run_campaign(cfg, out)
    return TIMING.sub(b'"\\1":0', (out / JOURNAL_NAME).read_bytes())


def test_campaign_journal_is_the_same_with_and_without_shared_layers(tmp_path, monkeypatch):
    src = write_udacity(tmp_path / "drive", n=6)
    monkeypatch.setenv(prefetch.ENV, "2")
    shared = _journal(src, tmp_path / "shared")
    monkeypatch.setenv(prefetch.ENV, "0")
    serial = _journal(src, tmp_path / "serial")
    monkeypatch.delattr(_common.BaseTransform, "apply_same")  # apply_window falls back to frame by frame
    plain = _journal(src, tmp_path / "plain")
    assert b'"status":"ok"' in plain and plain.count(b'"type":"pair"') == 4 * 99
    assert shared == plain and serial == plain
