"""The comparisons of :mod:`lidarmt.engine.verify` on their own (issue 29, items 7 and 11): pictures, labels in
MCAP messages, Foxglove layouts."""

from __future__ import annotations

import json

import cv2
import numpy as np

from lidarmt.engine import mcap as M
from lidarmt.engine.verify import PIXEL_STEP_DRAWN, _close, compare_file, layout_problems


def _png(path, img):
    assert cv2.imwrite(str(path), img)
    return path


def test_pictures_anti_aliasing_passes_where_drawn_and_content_never(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)
    want = _png(tmp_path / "want.png", base)
    aa = base.astype(int)
    aa[50:52, 10:60] = np.clip(aa[50:52, 10:60] + 4, 0, 255)  # what a 0.1 mm rounding does to an outline
    got_aa = _png(tmp_path / "aa.png", aa.astype(np.uint8))
    assert compare_file(got_aa, want, pixel_step=PIXEL_STEP_DRAWN) == ""
    assert "pixels differ" in compare_file(got_aa, want)  # a picture copied from stored arrays: exact
    digit = base.copy()
    digit[5:15, 5:12] = 255 - digit[5:15, 5:12]  # a digit of the title changed
    assert "pixels differ" in compare_file(_png(tmp_path / "d.png", digit), want, pixel_step=PIXEL_STEP_DRAWN)
    assert "another picture" in compare_file(_png(tmp_path / "s.png", base[:-1]), want, pixel_step=PIXEL_STEP_DRAWN)
    (tmp_path / "bad.png").write_bytes(b"BM" + bytes(100))
    assert "cannot be decoded" in compare_file(tmp_path / "bad.png", want)


def test_message_numbers_and_labels():
    assert _close({"x": 1.00004, "t": "size 4.25 x 1.80"}, {"x": 1.0, "t": "size 4.24 x 1.80"}, "m") == ""
    assert _close({"x": 1.1}, {"x": 1.0}, "m")
    assert _close({"t": "#3 car"}, {"t": "#4 car"}, "m")  # ids and counts: exact
    assert _close({"t": "LOST #1 car"}, {"t": "#1 car 0.95"}, "m")
    assert _close({"data": "AAAA"}, {"data": "AAAB"}, "m")  # bytes (point clouds, images): exact
    assert _close([1, 2], [1, 2, 3], "m")


def test_layouts(tmp_path):
    p = tmp_path / M.LAYOUT_NAME
    for kind in M.LAYOUTS:
        p.write_text(M.layout_text(kind))
        assert layout_problems(p, kind) == []
    doc = json.loads(M.layout_text("lidar-bundle"))
    doc["userNodes"] = {"a": {"name": "a", "sourceCode": "fetch('http://x')"}}
    p.write_text(json.dumps(doc))
    assert any("User Script" in x for x in layout_problems(p, "lidar-bundle"))
    doc = json.loads(M.layout_text("lidar-bundle"))
    doc["layout"]["second"] = "Plot!evil"
    p.write_text(json.dumps(doc))
    assert any("Plot" in x for x in layout_problems(p, "lidar-bundle"))
    p.write_text("[" * 100_000)
    assert any("not JSON" in x for x in layout_problems(p, "lidar-bundle"))
    p.unlink()
    p.symlink_to(tmp_path)
    assert layout_problems(p, "lidar-bundle") == [f"{M.LAYOUT_NAME}: not a regular file"]
