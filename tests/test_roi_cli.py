"""``lidarmt roi``: picture and counts for a frame on a real map; one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lidarmt.cli import main
from lidarmt.io.npz import save_frame_npz
from lidarmt.lidar.roi import HDMapRoi, load_map
from lidarmt.types import Frame, Provenance, make_points, make_pose


def ring_cloud(n: int = 30_000, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    r = g.uniform(2, 75, n)
    a = g.uniform(-np.pi, np.pi, n)
    return np.stack([r * np.cos(a), r * np.sin(a), g.uniform(-1.8, 1.0, n)], axis=1).astype(np.float32)


@pytest.fixture()
def recording(apollo_maps: Path, tmp_path: Path) -> tuple[Path, list[Frame]]:
    hd = load_map(apollo_maps / "borregas_ave")
    folder = tmp_path / "rec"
    frames = []
    pos = hd.junctions[0].polygon[:, :2].mean(axis=0)
    for i, (dx, yaw) in enumerate([(0.0, 0.3), (5000.0, 0.0)]):  # the second frame is 5 km off the map
        pose = make_pose([pos[0] + dx, pos[1], 1.9], [0, 0, np.sin(yaw / 2), np.cos(yaw / 2)])
        f = Frame(make_points(ring_cloud(seed=i)), pose=pose, provenance=Provenance(str(folder), "npz", i))
        save_frame_npz(folder / f"frame_{i:06d}.npz", f)
        frames.append(f)
    return folder, frames


@pytest.mark.slow
def test_roi_command_draws_and_counts(apollo_maps: Path, recording, tmp_path: Path, capsys):
    folder, frames = recording
    out = tmp_path / "roi.png"
    rc = main(["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--frame", "0", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    expected = HDMapRoi(load_map(apollo_maps / "borregas_ave")).mask(frames[0].pose)
    n_in = len(expected.indices(frames[0]))
    assert f"points in ROI: {n_in:,} / {len(frames[0]):,}" in text
    assert f"polygons: {len(expected.polygons)}" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    # refuses to overwrite, then --force
    assert main(["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--out", str(out),
                 "--range", "120", "--force"]) == 0


def test_roi_command_far_frame_is_an_empty_roi(apollo_maps: Path, recording, tmp_path: Path, capsys):
    folder, _ = recording
    out = tmp_path / "far.png"
    assert main(["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--frame", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "points in ROI: 0 /" in text and "empty ROI" in text and out.exists()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--frame", "7"], "has 2 frame(s)"),
        (["--map", "/nonexistent/map"], "no such map"),
        (["--out", "roi.txt"], "use a .png"),
    ],
)
def test_roi_command_errors_are_one_line(apollo_maps: Path, recording, tmp_path: Path, capsys, args, match):
    folder, _ = recording
    base = ["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--out", str(tmp_path / "x.png")]
    for k in range(0, len(args), 2):
        if args[k] in base:
            base[base.index(args[k]) + 1] = args[k + 1]
        else:
            base += args[k : k + 2]
    assert main(base) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1


def test_roi_command_wrong_projection(apollo_maps: Path, tmp_path: Path, capsys):
    folder = tmp_path / "rec"
    pose = make_pose([215_750.0, 2_546_150.0, 0.0], [0, 0, 0, 1])  # a Shalun (zone 51) pose
    save_frame_npz(folder / "frame_000000.npz", Frame(make_points(ring_cloud(1000)), pose=pose))
    assert main(["roi", str(folder), "--map", str(apollo_maps / "borregas_ave"), "--out",
                 str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "km outside the bounds" in err and len(err.splitlines()) == 1
