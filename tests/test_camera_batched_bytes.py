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


if __name__ == "__main__":  # regenerate (only with the code the digests pin: see the module docstring)
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_camera_batched_bytes.py --write")
    sys.path.insert(0, str(TESTS.parent))
    shared = TESTS.parents[1] / "shared" / "data"
    got = {f"{k}/{n}": digests(n, w) for k, w in windows(shared if (shared / UDACITY_FRAME).is_file() else None).items()
           for n in NAMES}
    FIXTURE.write_text(json.dumps(got, indent=1) + "\n")
    print(f"wrote {FIXTURE} ({len(got)} lists)")
