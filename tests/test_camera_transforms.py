"""Image transformations: registry, DeepTest's definitions against independent references, weather models."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import ndimage

from lidarmt.camera.errors import TransformError
from lidarmt.camera.transforms import Transform, available, get_transform, select
from lidarmt.camera.transforms import registry as reg
from lidarmt.camera.transforms.sheet import sheet_settings, transform_sheet
from lidarmt.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SIMPLE = ["brightness", "contrast", "translation", "scale", "shear", "rotation", "blur"]
WEATHER = ["fog", "rain", "snow", "night", "glare", "droplets", "dirt"]


def road_scene(h: int = 120, w: int = 160, seed: int = 0) -> np.ndarray:
    """A small synthetic road picture: blue sky, green verge, grey road, white lane marks, some texture."""
    rng = np.random.default_rng(seed)
    img = np.zeros((h, w, 3), np.float32)
    hz = int(0.55 * h)
    sky = np.linspace(0, 1, hz)[:, None, None]
    img[:hz] = (1 - sky) * np.array([90, 140, 220]) + sky * np.array([200, 215, 235])
    img[hz:] = np.array([95, 95, 100])
    yy, xx = np.mgrid[hz:h, 0:w]
    t = (yy - hz) / (h - hz)
    verge = np.abs(xx - w / 2) > (0.05 + 0.6 * t) * w / 1.2
    img[hz:][verge] = np.array([60, 120, 50])
    for side in (-1, 1):
        lane = np.abs(xx - (w / 2 + side * (0.05 + 0.45 * t) * w / 1.2)) < 1 + 2 * t
        img[hz:][lane] = 235
    for _ in range(6):  # trees / posts above the horizon
        x = rng.integers(0, w)
        img[int(0.2 * h):hz, max(0, x - 3):x + 3] = np.array([40, 70, 35])
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def scene() -> np.ndarray:
    return road_scene()


def luminance(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


# ---------------------------------------------------------------------------------------------- registry


def test_registry_lists_every_family():
    names = available()
    assert names[:len(SIMPLE)] == SIMPLE
    assert set(WEATHER) <= set(names) and "mirror" in names
    assert [t.name for t in select("simple")] == SIMPLE
    assert [t.name for t in select("weather")] == WEATHER
    assert [t.name for t in select("mirror")] == ["mirror"]
    assert [t.name for t in select("all")] == names
    assert [t.name for t in select(" fog, mirror ,fog,brightness")] == ["fog", "mirror", "brightness"]
    assert [t.name for t in select("mirror,simple")] == ["mirror", *SIMPLE]
    assert get_transform("fog") is get_transform(" fog")


@pytest.mark.parametrize("spec", ["fgo", "simple,bogus", "", " , ", "Fog"])
def test_select_unknown_names_the_known_ones(spec):
    with pytest.raises(TransformError) as exc:
        select(spec)
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, UserError)
    if spec.strip(" ,"):
        assert "brightness" in msg and "fog" in msg and "mirror" in msg
    with pytest.raises(TransformError, match="known: brightness"):
        get_transform("nope")


class _FakeEP:
    def __init__(self, name, obj):
        self.name, self.value, self._obj = name, f"fake:{name}", obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


class Haze:
    """A minimal plug-in: a constant grey veil."""

    name = "haze"
    family = "weather"
    relation = "keep"
    grid = ({"intensity": 0.5},)
    space: dict = {}
    description = "test plug-in"

    def apply(self, image, params, seed):
        a = params["intensity"]
        return (image * (1 - a) + 128 * a).astype(np.uint8)

    def label(self, params):
        return f"haze {params['intensity']}"


def test_plugins_from_entry_points(monkeypatch, scene):
    class NotATransform:
        name = "x"

    eps = {"haze": _FakeEP("haze", Haze), "broken": _FakeEP("broken", ImportError("no module mypkg")),
           "odd": _FakeEP("odd", NotATransform()), "fog": _FakeEP("fog", Haze)}
    monkeypatch.setattr(reg.REGISTRY, "plugins", lambda: eps)
    monkeypatch.setattr(reg.REGISTRY, "cache", {})
    assert available()[-3:] == ["broken", "haze", "odd"] and available().count("fog") == 1
    haze = get_transform("haze")
    assert isinstance(haze, Transform) and haze.name == "haze"
    assert get_transform("fog").__class__.__name__ == "Fog"  # a plug-in cannot shadow a built-in
    with pytest.raises(TransformError, match="'broken'"):  # a family needs every plug-in's family
        select("weather")
    eps.pop("broken"), eps.pop("odd")
    assert [t.name for t in select("weather")][-1] == "haze"
    out = haze.apply(scene, {"intensity": 0.5}, 0)
    assert out.shape == scene.shape
    eps.update(broken=_FakeEP("broken", ImportError("no module mypkg")), odd=_FakeEP("odd", NotATransform()))
    with pytest.raises(TransformError, match="cannot load transformation plug-in 'broken'.*no module mypkg"):
        get_transform("broken")
    with pytest.raises(TransformError, match="'odd' gave a NotATransform"):
        get_transform("odd")


# ---------------------------------------------------------------------------------------------- protocol


@pytest.mark.parametrize("name", SIMPLE + WEATHER + ["mirror"])
def test_protocol_and_grid_settings_are_valid(name):
    t = get_transform(name)
    assert isinstance(t, Transform)
    assert t.name == name and t.description
    assert t.family in ("simple", "weather", "mirror") and t.relation in ("keep", "negate")
    assert (t.relation == "negate") == (name == "mirror")
    labels = [t.label(p) for p in t.grid]
    assert len(set(labels)) == len(labels) and all(labels)
    for p in t.grid:
        full = t.resolve(p, seed=1)
        for k, v in full.items():  # every resolved value lies in the declared space
            r = t.space[k]
            assert r.low <= v <= r.high, (name, k, v)
            assert not r.integer or isinstance(v, int)


def test_grids_are_deepTest_table_4():
    g = {n: list(get_transform(n).grid) for n in SIMPLE}
    assert [p["beta"] for p in g["brightness"]] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert [p["alpha"] for p in g["contrast"]] == [1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 2.6, 2.8, 3.0]
    assert [(p["tx"], p["ty"]) for p in g["translation"]] == [(v, v) for v in range(10, 101, 10)]
    scales = (1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6)
    assert [(p["sx"], p["sy"]) for p in g["scale"]] == [(v, v) for v in scales]
    assert [p["sx"] for p in g["shear"]] == [-1.0, -0.9, -0.8, -0.7, -0.6, -0.5, -0.4, -0.3, -0.2, -0.1]
    assert [p["angle"] for p in g["rotation"]] == list(range(3, 31, 3))
    blur = get_transform("blur")
    assert [blur.label(p) for p in g["blur"]] == [
        "blur average 3×3", "blur average 4×4", "blur average 5×5", "blur gaussian 3×3", "blur gaussian 5×5",
        "blur gaussian 7×7", "blur median 3×3", "blur median 5×5", "blur average 6×6",
        "blur bilateral 9/75/75"]
    for n in WEATHER:
        assert [p["intensity"] for p in get_transform(n).grid] == [0.25, 0.5, 0.75, 1.0]
    assert list(get_transform("mirror").grid) == [{}]


# ------------------------------------------------------------------------------- contract of every setting


@pytest.mark.parametrize("name", SIMPLE + WEATHER + ["mirror"])
def test_size_kept_input_untouched_deterministic(name, scene):
    t = get_transform(name)
    ro = scene.copy()
    ro.flags.writeable = False
    before = scene.copy()
    settings_ = [t.grid[0], t.grid[-1]]
    for p in settings_:
        a = t.apply(scene, p, 7)
        b = t.apply(ro, p, 7)
        assert a.shape == scene.shape and a.dtype == np.uint8 and a.flags.c_contiguous
        assert a.tobytes() == b.tobytes()  # same (image, params, seed) → same bytes
        assert not np.shares_memory(a, scene)
        assert np.array_equal(scene, before) and np.array_equal(ro, before)  # inputs untouched
    # a non-contiguous view (every other column, reversed) is accepted too
    view = road_scene(120, 320)[:, ::-2]
    assert t.apply(view, t.grid[-1], 0).shape == view.shape


@pytest.mark.parametrize("shape", [(2, 2, 3), (7, 2, 3), (3, 50, 3)])
def test_tiny_and_odd_shapes(shape):
    img = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    for t in select("all"):
        for p in (t.grid[0], t.grid[-1]):
            out = t.apply(img, p, 1)
            assert out.shape == shape and out.dtype == np.uint8, t.name


@pytest.mark.parametrize("name", WEATHER)
def test_weather_seed_matters_and_zero_is_identity(name, scene):
    t = get_transform(name)
    a = t.apply(scene, {"intensity": 1.0}, 0)
    b = t.apply(scene, {"intensity": 1.0}, 1)
    assert a.tobytes() != b.tobytes()
    assert t.resolve({"intensity": 1.0}, 0) != t.resolve({"intensity": 1.0}, 1)  # style drawn from the seed
    zero = t.apply(scene, {"intensity": 0.0}, 5)
    assert zero.tobytes() == scene.tobytes() and zero is not scene
    assert t.apply(scene, {"intensity": 0}, 5).tobytes() == scene.tobytes()


@pytest.mark.parametrize("name", WEATHER)
def test_weather_grows_with_intensity(name, scene):
    t = get_transform(name)
    levels = (0.25, 0.5, 0.75, 1)
    diffs = [np.abs(t.apply(scene, {"intensity": v}, 3).astype(float) - scene).mean() for v in levels]
    assert all(b > a for a, b in zip(diffs, diffs[1:], strict=False)), diffs
    assert diffs[0] > 0.15


@pytest.mark.parametrize("name", WEATHER)
def test_explicit_style_pins_only_that_value(name):
    t = get_transform(name)
    drawn = t.resolve({"intensity": 0.5}, seed=11)
    key = t.style[0]
    r = t.space[key]
    pinned_value = r.low if drawn[key] != r.low else r.high
    pinned = t.resolve({"intensity": 0.5, key: pinned_value}, seed=11)
    assert pinned[key] == pinned_value
    assert {k: v for k, v in pinned.items() if k != key} == {k: v for k, v in drawn.items() if k != key}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_point_of_the_space_works(data):
    name = data.draw(st.sampled_from(SIMPLE + WEATHER))
    t = get_transform(name)
    params = {}
    for k, r in t.space.items():
        if r.integer:
            params[k] = data.draw(st.integers(int(r.low), int(r.high)))
        else:
            params[k] = data.draw(st.floats(r.low, r.high, allow_nan=False))
    img = road_scene(30, 40, seed=data.draw(st.integers(0, 3)))
    out = t.apply(img, params, data.draw(st.integers(0, 2**63)))
    assert out.shape == img.shape and out.dtype == np.uint8


@pytest.mark.slow
def test_outputs_identical_in_a_fresh_process(scene):
    """No hidden state (hash randomisation, global RNGs, thread counts) changes the bytes between runs."""
    code = (
        "import hashlib, json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_camera_transforms import road_scene\n"
        "from lidarmt.camera.transforms import select\n"
        "img = road_scene()\n"
        "print(json.dumps({t.name: hashlib.sha256(t.apply(img, t.grid[-1], 9).tobytes()).hexdigest()"
        " for t in select('all')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    there = json.loads(out.stdout)
    here = {t.name: hashlib.sha256(t.apply(scene, t.grid[-1], 9).tobytes()).hexdigest()
            for t in select("all")}
    assert there == here


def test_outputs_do_not_depend_on_opencv_threads(scene):
    before = cv2.getNumThreads()
    try:
        cv2.setNumThreads(1)
        one = {t.name: t.apply(scene, t.grid[-1], 4).tobytes() for t in select("all")}
        cv2.setNumThreads(4)
        four = {t.name: t.apply(scene, t.grid[-1], 4).tobytes() for t in select("all")}
    finally:
        cv2.setNumThreads(before)
    assert one == four


# -------------------------------------------------------------------- simple ones vs independent references


def test_brightness_and_contrast_saturate(scene):
    x = scene.astype(np.int64)
    for beta in (10, 50, 100, -30):
        out = get_transform("brightness").apply(scene, {"beta": beta}, 0)
        assert np.array_equal(out, np.clip(x + beta, 0, 255))
    for alpha in (1.2, 1.8, 3.0, 0.5):
        out = get_transform("contrast").apply(scene, {"alpha": alpha}, 0)
        assert np.array_equal(out, np.clip(np.rint(x * alpha), 0, 255)), alpha  # every channel, not just one


def _dot(h=60, w=80, x=20, y=15):
    img = np.zeros((h, w, 3), np.uint8)
    img[y, x] = 255
    return img


def test_translation_moves_a_pixel():
    t = get_transform("translation")
    out = t.apply(_dot(), {"tx": 10, "ty": 30}, 0)
    assert list(zip(*np.nonzero(out[..., 0]), strict=True)) == [(45, 30)]
    assert np.all(out[45, 30] == 255)
    assert not t.apply(_dot(), {"tx": 70, "ty": 0}, 0).any()  # moved out of the frame: black border
    assert np.array_equal(t.apply(_dot(), {"tx": -20, "ty": -15}, 0)[0, 0], [255, 255, 255])


def test_shear_is_horizontal_and_proportional_to_the_row():
    out = get_transform("shear").apply(_dot(x=40, y=20), {"sx": -0.5}, 0)
    assert list(zip(*np.nonzero(out[..., 0]), strict=True)) == [(20, 30)]  # x + sx·y = 40 − 10
    out = get_transform("shear").apply(_dot(x=40, y=20), {"sx": -0.5, "sy": 0.5}, 0)
    gx, gy = _centroid(out)  # (x + sx·y, y + sy·x) = (30, 40)
    assert abs(gx - 30) < 0.3 and abs(gy - 40) < 0.3, (gx, gy)


def _centroid(img):
    m = img[..., 0].astype(float)
    ys, xs = np.mgrid[: m.shape[0], : m.shape[1]]
    return (m * xs).sum() / m.sum(), (m * ys).sum() / m.sum()


@pytest.mark.parametrize("angle", [3, 15, 30, -12])
def test_rotation_about_the_centre(angle):
    h, w, x, y = 60, 80, 60.0, 12.0
    img = np.zeros((h, w, 3), np.uint8)
    img[int(y) - 1:int(y) + 2, int(x) - 1:int(x) + 2] = 255
    out = get_transform("rotation").apply(img, {"angle": angle}, 0)
    q = math.radians(angle)  # counter-clockwise on screen (y down) about (w/2, h/2)
    cx, cy = w / 2, h / 2
    ex = cx + math.cos(q) * (x - cx) + math.sin(q) * (y - cy)
    ey = cy - math.sin(q) * (x - cx) + math.cos(q) * (y - cy)
    gx, gy = _centroid(out)
    assert abs(gx - ex) < 0.3 and abs(gy - ey) < 0.3, (gx, gy, ex, ey)


def test_scale_is_about_the_origin():
    h, w = 60, 80
    ys, xs = np.mgrid[:h, :w]
    ramp = np.repeat((2 * xs + ys).astype(np.uint8)[..., None], 3, axis=2)  # linear: cubic reproduces it
    out = get_transform("scale").apply(ramp, {"sx": 2.0, "sy": 2.0}, 0).astype(float)
    inner = (slice(4, h - 4), slice(4, w - 4))
    assert np.abs(out[inner][..., 0] - (2 * xs + ys)[inner] / 2.0).max() <= 1.0
    out = get_transform("scale").apply(ramp, {"sx": 1.5, "sy": 3.0}, 0).astype(float)
    assert np.abs(out[inner][..., 1] - (2 * xs / 1.5 + ys / 3.0)[inner]).max() <= 1.0


def test_blur_filters_match_their_definitions(scene):
    b = get_transform("blur")
    x = scene.astype(float)
    inner = (slice(4, -4), slice(4, -4))
    avg3 = ndimage.uniform_filter(x, size=(3, 3, 1), mode="mirror")
    assert np.abs(b.apply(scene, {"id": 1}, 0)[inner] - avg3[inner]).max() <= 1.0
    med5 = ndimage.median_filter(scene, size=(5, 5, 1))
    assert np.array_equal(b.apply(scene, {"id": 8}, 0)[inner], med5[inner])
    k = np.array([1, 4, 6, 4, 1]) / 16  # OpenCV's 5-tap Gaussian for σ = 0: the binomial kernel
    g5 = ndimage.correlate1d(ndimage.correlate1d(x, k, axis=0, mode="mirror"), k, axis=1, mode="mirror")
    assert np.abs(b.apply(scene, {"id": 5}, 0)[inner] - g5[inner]).max() <= 1.0
    # bilateral keeps a strong edge that averaging smears
    step = np.zeros((40, 40, 3), np.uint8)
    step[:, 20:] = 200
    bil = b.apply(step, {"id": 10}, 0).astype(int)
    avg = b.apply(step, {"id": 9}, 0).astype(int)
    assert np.abs(bil - step).max() <= 3 and np.abs(avg - step).max() >= 60


def test_mirror_flips_and_negates(scene):
    m = get_transform("mirror")
    assert m.relation == "negate" and m.family == "mirror"
    out = m.apply(scene, {}, 0)
    assert np.array_equal(out, scene[:, ::-1])
    assert np.array_equal(m.apply(out, {}, 3), scene)


# ------------------------------------------------------------------------------------ weather, physically


def test_fog_follows_koschmieder(scene):
    fog = get_transform("fog")
    style = {"visibility": 60.0, "horizon": 0.55, "far": 50.0, "patchiness": 0.0, "airlight": 0.8,
             "tint": 0.0}
    levels = (0, 0.25, 0.5, 0.75, 1)
    contrast = [luminance(fog.apply(scene, {"intensity": v, **style}, 0)).std() for v in levels]
    assert all(b < a for a, b in zip(contrast, contrast[1:], strict=False)), contrast
    # uniform fog: I = J·t + A·(1 − t) with t = exp(−3.912·d/V), d the ground-plane depth of the row
    out = fog.apply(scene, {"intensity": 1.0, **style}, 0).astype(float)
    h, w = scene.shape[:2]
    f = (w / 2) / math.tan(math.radians(30))
    for row in (h - 1, int(0.75 * h), 10):
        v = row + 0.5 - 0.55 * h
        d = min(50.0, 1.5 * f / v) if v > 0 else 50.0
        t = math.exp(-3.912 * d / 60.0)
        expect = scene[row].astype(float) * t + 0.8 * 255 * (1 - t)
        assert np.abs(out[row] - expect).max() <= 1.0, row
    # near rows keep more of the scene than rows near the horizon
    changed = np.abs(out - scene).mean(axis=(1, 2))
    assert changed[-1] < changed[int(0.6 * h)]


def test_night_is_darker_and_noisier(scene):
    night = get_transform("night")
    style = {"lamps": 0, "headlights": 0.4}
    levels = (0, 0.25, 0.5, 0.75, 1)
    means = [luminance(night.apply(scene, {"intensity": v, **style}, 0)).mean() for v in levels]
    assert all(b < a for a, b in zip(means, means[1:], strict=False)), means
    flat = np.full((64, 64, 3), 120, np.uint8)
    noise = [night.apply(flat, {"intensity": v, **style}, 0)[:32].astype(float) for v in (0.5, 1.0)]
    rel = [n.std() / max(n.mean(), 1e-6) for n in noise]  # relative noise grows as the light falls
    assert rel[1] > rel[0] > 0
    dark = night.apply(scene, {"intensity": 1.0, "headlights": 1.0, "lamps": 0}, 0).astype(float)
    h = scene.shape[0]
    assert dark[-8:].mean() > dark[int(0.6 * h):int(0.7 * h)].mean()  # the headlights light the near road
    lamp = night.apply(scene, {"intensity": 1.0, "lamps": 2}, 0)
    assert lamp.max() >= 250 and night.apply(scene, {"intensity": 1.0, **style}, 0).max() < lamp.max()


def test_glare_is_brightest_at_the_source(scene):
    glare = get_transform("glare")
    dark = np.full_like(scene, 40)
    out = glare.apply(dark, {"intensity": 1.0, "x": 0.7, "y": 0.2, "ghosts": 3}, 0)
    lum = luminance(out)
    ys, xs = np.nonzero(lum >= lum.max() - 1)  # the saturated core
    h, w = scene.shape[:2]
    assert abs(xs.mean() - 0.7 * w) <= 1.5 and abs(ys.mean() - 0.2 * h) <= 1.5, (xs.mean(), ys.mean())
    out = glare.apply(scene, {"intensity": 1.0, "x": 0.7, "y": 0.2}, 0)
    assert luminance(out).mean() > luminance(scene).mean() + 10
    # veiling glare lifts the dark parts most: the road's contrast falls
    road = (slice(int(0.6 * scene.shape[0]), None), slice(None))
    assert out[road].std() < scene[road].std()


def test_snow_brightens_and_flattens(scene):
    snow = get_transform("snow")
    a, b = (snow.apply(scene, {"intensity": v}, 2) for v in (0.5, 1.0))
    assert luminance(scene).mean() < luminance(a).mean() < luminance(b).mean()
    assert luminance(b).std() < luminance(scene).std()
    # flakes: small bright spots on a flat dark picture, more of them as the snow gets heavier (counted in
    # the lower half, where the snow haze is thin)
    flat = np.full((120, 160, 3), 50, np.uint8)

    def spots(img):
        lum = luminance(img)
        return (lum - ndimage.median_filter(lum, 5) > 10)[60:-2, 2:-2].sum()

    counts = [spots(snow.apply(flat, {"intensity": v}, 2)) for v in (0, 0.25, 0.5, 0.75, 1.0)]
    assert counts[0] == 0 and counts[1] > 50, counts
    assert all(b > a for a, b in zip(counts, counts[1:], strict=False)), counts


def test_rain_streaks_follow_the_slant(scene):
    rain = get_transform("rain")
    flat = np.full((120, 160, 3), 60, np.uint8)
    out = luminance(rain.apply(flat, {"intensity": 1.0, "angle": 20.0, "length": 0.15}, 0))
    streak = out - ndimage.uniform_filter(out, 9)
    # the autocorrelation of the streak layer is elongated along the slant (20° from vertical, leaning right
    # as it goes down: (dx, dy) = (sin 20°, cos 20°))
    f = np.fft.fft2(streak - streak.mean())
    ac = np.fft.fftshift(np.real(np.fft.ifft2(f * np.conj(f))))
    cy, cx = np.array(ac.shape) // 2

    def at(r, deg):
        q = math.radians(deg)
        return ac[cy + int(round(r * math.cos(q))), cx + int(round(r * math.sin(q)))]

    along = [at(r, 20) for r in (4, 6, 8)]
    across = [at(r, -40) for r in (4, 6, 8)]
    assert sum(along) > 2 * sum(across)
    assert luminance(rain.apply(scene, {"intensity": 1.0}, 0)).mean() < luminance(scene).mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lens_effects_stay_local(scene, seed):
    drops = get_transform("droplets").apply(scene, {"intensity": 1.0}, seed)
    dirt = get_transform("dirt").apply(scene, {"intensity": 1.0, "coverage": 0.2}, seed)
    for out in (drops, dirt):
        d = np.abs(out.astype(float) - scene).max(axis=2)
        assert (d < 12).mean() > 0.6  # most of the frame only slightly changed (the water film, the blur)
        assert (d > 25).mean() > 0.004  # and some places strongly
    heavy = {"intensity": 1.0, "coverage": 0.45, "opacity": 0.95}
    dirt_full = get_transform("dirt").apply(scene, heavy, seed)
    assert luminance(dirt_full).mean() < luminance(scene).mean() - 5  # the dirt absorbs light


# ------------------------------------------------------------------------------------------ bad parameters


@pytest.mark.parametrize("name, params, match", [
    ("brightness", {"beta": 500}, r"beta=500 .* out of range; give a value in \[-100, 100\]"),
    ("brightness", {"beta": float("nan")}, "out of range"),
    ("brightness", {"beta": "10"}, "must be a number"),
    ("brightness", {"beta": True}, "must be a number"),
    ("brightness", {}, "needs parameter"),
    ("brightness", {"beta": 10, "gamma": 2}, "unknown parameter.*gamma.*known: beta"),
    ("blur", {"id": 11}, "out of range"),
    ("blur", {"id": 2.5}, "must be an integer"),
    ("rotation", {"angle": 45}, r"\[-30, 30\]"),
    ("fog", {"intensity": 1.5}, r"intensity=1.5 .* \[0, 1\]"),
    ("fog", {"intensity": 0.5, "visibility": 5}, "visibility=5"),
    ("night", {"intensity": 0.5, "lamps": 1.5}, "must be an integer"),
    ("mirror", {"x": 1}, "unknown parameter"),
])
def test_bad_parameters_are_one_line_user_errors(name, params, match, scene):
    with pytest.raises(TransformError, match=match) as exc:
        get_transform(name).apply(scene, params, 0)
    assert "\n" not in str(exc.value) and name in str(exc.value)
    assert isinstance(exc.value, UserError)


@pytest.mark.parametrize("image, match", [
    (np.zeros((10, 10), np.uint8), r"\(H, W, 3\) uint8"),
    (np.zeros((10, 10, 3), np.float32), "float32"),
    (np.zeros((10, 10, 4), np.uint8), r"\(10, 10, 4\)"),
    ([[0, 0, 0]], "got list"),
])
def test_bad_images(image, match):
    with pytest.raises(TransformError, match=match):
        get_transform("fog").apply(image, {"intensity": 0.5}, 0)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", None])
def test_bad_seeds(seed, scene):
    with pytest.raises(TransformError, match="seed"):
        get_transform("rain").apply(scene, {"intensity": 0.5}, seed)


# ------------------------------------------------------------------------------------------------ the sheet


def test_sheet_layout(tmp_path, scene):
    ts = select("brightness,fog,mirror")
    assert [len(sheet_settings(t)) for t in ts] == [3, 3, 1]
    assert sheet_settings(ts[0]) == [{"beta": 10.0}, {"beta": 50.0}, {"beta": 100.0}]
    assert sheet_settings(ts[1]) == [{"intensity": 0.33}, {"intensity": 0.66}, {"intensity": 1.0}]
    path = transform_sheet(scene, ts, tmp_path / "out" / "sheet.png", thumb_size=(80, 60), blocks_per_row=2)
    img = cv2.imread(str(path))
    assert img.shape[1] == 2 * 6 + 2 * (3 * 80 + 2 * 2) + 10
    assert img.shape[0] > 2 * 60
    assert sorted(p.name for p in path.parent.iterdir()) == ["sheet.png"]  # no temporary files left
    # the first thumbnail is brightness β=10 of the scene, shrunk
    brighter = np.clip(scene.astype(int) + 10, 0, 255).astype(np.uint8)
    thumb = cv2.resize(brighter, (80, 60), interpolation=cv2.INTER_AREA)
    assert np.abs(img[6:66, 6:86, ::-1].astype(int) - thumb).max() <= 1
    with pytest.raises(TransformError):
        transform_sheet(scene, [], tmp_path / "x.png")
    with pytest.raises(TransformError, match="unknown transformation 'smog'"):
        transform_sheet(scene, "fog,smog", tmp_path / "x.png")
    small = transform_sheet(scene, "mirror", tmp_path / "m.png", thumb_size=(40, 30))
    assert cv2.imread(str(small)).shape[1] == 2 * 6 + 3 * 40 + 2 * 2


@pytest.mark.realdata
def test_sheet_on_a_real_udacity_frame(tmp_path, shared_data):
    frames = sorted((shared_data / "udacity" / "center").glob("*.jpg"))
    if not frames:
        pytest.skip("no Udacity frames in ../shared/data/udacity/center")
    rgb = cv2.cvtColor(cv2.imread(str(frames[0])), cv2.COLOR_BGR2RGB)
    path = transform_sheet(rgb, select("all"), tmp_path / "sheet.png")
    assert 50_000 < path.stat().st_size < 1_500_000
