"""batched-v1's bytes are pinned: old journals and bundles name the implementation and must replay identical, so a
speed-up of batched-v1 may change how an image is made, never what it is.

``tests/data/camera_batched_v1_digests.json`` holds the SHA-256 (first 16 hex digits) of batched-v1's output for
every grid setting of the weathers and blur on three seeds, on a synthetic road picture (160×120), a window of two
synthetic frames (64×48) and a Udacity frame (320×240; checked only when ../shared/data is there). They were
computed with the code before issue 34's speed-ups (commit d331305) and are rewritten only by
``python tests/test_camera_batched_bytes.py --write`` (which a change of batched-v1's bytes must never need).

The float kernels' bytes depend on the CPU kind in principle; measured on an AVX-512 (Sapphire Rapids) machine,
they were the same with numba compiling for Haswell (``NUMBA_CPU_NAME=haswell``) and with OpenCV's AVX-512 code
paths off, but not with OpenCV's AVX2 paths off (its float Gaussian filter then rounds some sums differently). The
digests are therefore checked only where OpenCV dispatches to AVX2 (``*AVX2`` in ``cv2.getCPUFeaturesLine()``);
elsewhere ``tests/test_camera_batched.py`` still checks batched-v1 against the reference within its tolerances.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
FIXTURE = TESTS / "data" / "camera_batched_v1_digests.json"
UDACITY_FRAME = "udacity/center/1479425441182877835.jpg"
NAMES = ("fog", "rain", "snow", "night", "glare", "droplets", "dirt", "blur")
SEEDS = (0, 7, 123456789)

sys.path.insert(0, str(TESTS))


def _road(h: int, w: int, seed: int) -> np.ndarray:
    from test_camera_batched import road

    return road(h, w, seed=seed)


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def digests(name: str, window: np.ndarray) -> list[str]:
    """batched-v1's output digests for ``window`` over every grid setting of ``name`` on every seed, made in one
    :func:`apply_settings` call as a campaign makes them."""
    from lidarmt.camera.transforms import get_transform
    from lidarmt.camera.transforms.batched import apply_settings

    t = get_transform(name)
    sets = [(dict(params), seed) for seed in SEEDS for params in t.grid]
    return [_digest(g) for g in apply_settings(t, window, sets, "batched-v1")]


def windows(shared: Path | None) -> dict[str, np.ndarray]:
    out = {"synthetic": _road(120, 160, 3)[None], "window2": np.stack([_road(48, 64, 4), _road(48, 64, 5)])}
    if shared is not None:
        import cv2

        out["udacity"] = np.ascontiguousarray(cv2.imread(str(shared / UDACITY_FRAME))[:, :, ::-1])[None]
    return out


def _opencv_avx2() -> bool:
    import cv2

    return "*AVX2" in cv2.getCPUFeaturesLine().split()  # "*AVX2?" when turned off (OPENCV_CPU_DISABLE)


@pytest.fixture(scope="module")
def pinned() -> dict[str, list[str]]:
    if not _opencv_avx2():
        pytest.skip("batched-v1's digests were recorded with OpenCV's AVX2 code paths, off or absent here")
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("image", ["synthetic", "window2"])
def test_batched_v1_bytes_are_the_pinned_ones(pinned, name, image):
    assert digests(name, windows(None)[image]) == pinned[f"{image}/{name}"]


@pytest.mark.parametrize("name", NAMES)
def test_batched_v1_bytes_are_the_pinned_ones_on_a_udacity_frame(pinned, shared_data, name):
    if not (shared_data / UDACITY_FRAME).is_file():
        pytest.skip(f"the Udacity frame {UDACITY_FRAME} is not in {shared_data}")
    assert digests(name, windows(shared_data)["udacity"]) == pinned[f"udacity/{name}"]


def test_the_digests_see_a_change_of_one_grey_level():
    img = _road(48, 64, 4)
    moved = img.copy()
    moved[10, 10, 1] ^= 1
    assert _digest(img) != _digest(moved)
    assert len(set(digests("fog", img[None]))) == 12  # every setting and seed its own picture


def test_scratch_arrays_are_per_thread_reused_and_bounded(monkeypatch):
    import threading

    from lidarmt.camera.transforms import batched

    a = batched._scratch("f1a", (5, 7))
    assert a.shape == (5, 7) and a.dtype == np.float32
    assert batched._scratch("f1a", (5, 7)) is a  # reused call after call
    assert batched._scratch("f1a", (5, 8)) is not a and batched._scratch("u3a", (5, 7), np.uint8).dtype == np.uint8
    other: list[np.ndarray] = []
    th = threading.Thread(target=lambda: other.append(batched._scratch("f1a", (5, 7))))
    th.start()
    th.join()
    assert other[0] is not a  # another thread never gets this thread's array
    monkeypatch.setattr(batched, "SCRATCH_BYTES", 1000)
    big = batched._scratch("f1b", (10, 20))  # 800 bytes more than the bound allows: the pool is emptied first
    assert batched._scratch("f1a", (5, 7)) is not a and batched._scratch("f1b", (10, 20)) is big


def test_the_new_kernels_are_their_numpy_expressions():
    from lidarmt.camera.transforms import _batched_kernels as K
    from lidarmt.camera.transforms._common import to_float

    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    img[0, :3] = (0, 255, 128)
    out = np.empty(img.shape, np.float32)
    K.u8_to_float(img, out)
    assert np.array_equal(out, to_float(img))
    z = rng.random((17, 23), dtype=np.float32) * np.float32(0.6)
    layer = rng.random((17, 23), dtype=np.float32) * np.float32(3.0)
    want = np.maximum(z, layer * np.float32(0.22))
    K.max_scaled(z, layer, np.float32(0.22))
    assert np.array_equal(z, want)
    n = rng.random((17, 23), dtype=np.float32)
    specks = np.where(rng.random((17, 23)) < 0.2, rng.uniform(0.4, 0.9, (17, 23)), 0.0).astype(np.float32)
    thr = float(np.quantile(n, 0.7))
    got = np.empty_like(n)
    K.blotches(n, np.float32(thr), specks, got)
    assert np.array_equal(got, np.maximum(np.clip((n - thr) / 0.12, 0.0, 1.0), specks))


def test_night_reads_its_noise_field_across_the_wrap_as_a_rolled_field():
    from lidarmt.camera.transforms import get_transform
    from lidarmt.camera.transforms._common import rng_factory
    from lidarmt.camera.transforms.batched import night_kernel, night_layers

    t = get_transform("night")
    img = _road(40, 64, 6)
    p = t.resolve({"intensity": 0.75}, 4)
    base = dict(night_layers(40, 64, p, rng_factory(4, "night")))
    bank = np.random.default_rng(1).standard_normal((48, 80, 3), dtype=np.float32)  # smaller than the image + wrap
    for oy, ox, oc in ((0, 0, 0), (30, 70, 1), (47, 79, 2), (10, 16, 0)):
        wrapped = night_kernel(img, p, {**base, "bank": bank, "oy": oy, "ox": ox, "oc": oc})
        rolled = np.roll(np.roll(np.roll(bank, -oy, 0), -ox, 1), -oc, 2)
        assert np.array_equal(wrapped, night_kernel(img, p, {**base, "bank": rolled, "oy": 0, "ox": 0, "oc": 0}))


if __name__ == "__main__":  # regenerate (only with the code the digests pin: see the module docstring)
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_camera_batched_bytes.py --write")
    sys.path.insert(0, str(TESTS.parent))
    shared = TESTS.parents[1] / "shared" / "data"
    got = {f"{k}/{n}": digests(n, w) for k, w in windows(shared if (shared / UDACITY_FRAME).is_file() else None).items()
           for n in NAMES}
    FIXTURE.write_text(json.dumps(got, indent=1) + "\n")
    print(f"wrote {FIXTURE} ({len(got)} lists)")
