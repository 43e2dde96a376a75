"""``lidarmt transforms``: the listing, the picture sheet, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.lidar.synthetic import synthetic_sweep
from lidarmt.lidar.transforms.registry import available


def test_listing_names_every_transformation_with_units_and_levels(capsys):
    assert main(["transforms"]) == 0
    out = capsys.readouterr().out
    for name in available():
        assert name in out
    for text in ("visibility_m [10, 2000] m", "rate_mm_h [0.1, 200] mm/h", "sigma_cm [0, 100] cm", "weather",
                 "alignment", "visibility_m=100", f"LiDAR transformations ({len(available())})"):
        assert text in out


def test_listing_a_family(capsys):
    assert main(["transforms", "--transforms", "motion"]) == 0
    out = capsys.readouterr().out
    assert "rolling-shutter" in out and "deskew" in out and "fog" not in out


@pytest.mark.slow
def test_sheet_on_the_synthetic_sweep(tmp_path, capsys):
    out = tmp_path / "sheet.png"
    assert main(["transforms", "--sheet", str(out), "--transforms", "beam-skip,insert,mirror", "--extent", "25"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(out) as im:
        w, h = im.size
        assert w > 500 and h > 200
        arr = np.asarray(im.convert("RGB"))
    # the inserted object's points are drawn red
    red = (arr[..., 0] > 190) & (arr[..., 1] < 80) & (arr[..., 2] < 80)
    assert red.sum() > 5
    assert "wrote" in capsys.readouterr().out


def test_sheet_on_a_recording_with_levels(tmp_path):
    from lidarmt.io.npzdir import write_npz_folder

    write_npz_folder(tmp_path / "rec", [synthetic_sweep(n_azimuth=256), synthetic_sweep(n_azimuth=256, seed=1)])
    out = tmp_path / "fog.png"
    assert main(["transforms", "--sheet", str(out), "--transforms", "fog", "--levels", "light,heavy",
                 "--bag", str(tmp_path / "rec"), "--frame", "1"]) == 0
    assert out.stat().st_size > 1000


@pytest.mark.parametrize(("argv", "message"), [
    (["transforms", "--transforms", "haze"], "unknown LiDAR transformation 'haze'"),
    (["transforms", "--sheet", "x.png", "--levels", "extreme"], "--levels 'extreme': give one or more of light"),
    (["transforms", "--sheet", "x.png", "--bag", "REC", "--frame", "9"], "--frame 9: "),
])
def test_errors_are_one_line(tmp_path, capsys, argv, message):
    from lidarmt.io.npzdir import write_npz_folder

    write_npz_folder(tmp_path / "rec", [synthetic_sweep(n_azimuth=64)])
    argv = [a.replace("REC", str(tmp_path / "rec")).replace("x.png", str(tmp_path / "x.png")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("lidarmt: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "x.png").exists()
