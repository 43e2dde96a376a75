"""``lidarmt camera transforms``: the listing and the picture sheet."""

from __future__ import annotations

import sys
from pathlib import Path

from lidarmt.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_camera_campaign import write_udacity  # noqa: E402


def test_listing_names_every_transformation(capsys):
    assert main(["camera", "transforms"]) == 0
    out = capsys.readouterr().out
    for name in ("brightness", "rotation", "blur", "fog", "rain", "snow", "night", "glare", "mirror"):
        assert name in out
    assert "negate" in out


def test_sheet_is_a_png_and_errors_are_one_line(tmp_path, capsys):
    src = write_udacity(tmp_path / "drive", n=2)
    out = tmp_path / "sheet.png"
    assert main(["camera", "transforms", "--sheet", str(out), "--images", str(src), "--transforms", "fog,mirror"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["camera", "transforms", "--sheet", str(out), "--images", str(src), "--frame", "5", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--frame 5" in err[0]
    assert main(["camera", "transforms", "--sheet", str(out)]) == 2
