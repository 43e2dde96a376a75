"""Dataset mode is self-describing: provenance in dataset.json, each town's map saved, evaluation finds it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open3d")

import lidarmt  # noqa: E402
from lidarmt.io import open_recording  # noqa: E402
from lidarmt.io.npz import load_frame_npz  # noqa: E402
from lidarmt.lidar.perception.apollo.evaluate import SimRoi, save_dataset_maps  # noqa: E402
from lidarmt.lidar.roi import HDMapRoi, load_map  # noqa: E402
from lidarmt.lidar.sim.dataset import generate_dataset, git_state, simulator_fingerprint  # noqa: E402

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

SEED = 5
TOWNS = [SEED * 1000, SEED * 1000 + 1]  # frames_per_drive=2, drives_per_town=1: frames 0-1 town 0, frame 2 town 1


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "data"
    s = generate_dataset(out, frames=3, seed=SEED, frames_per_drive=2, drives_per_town=1, stride=2, density=0.5)
    assert (s.frames, s.drives, s.towns) == (3, 2, 2)
    return out


def test_provenance_block(dataset: Path) -> None:
    meta = json.loads((dataset / "dataset.json").read_text())
    prov = meta["provenance"]
    assert prov["lidarmt_version"] == lidarmt.__version__
    assert prov["arguments"] == {"frames": 3, "seed": SEED, "frames_per_drive": 2, "drives_per_town": 1,
                                 "stride": 2, "density": 0.5}
    assert prov["command"] == ("lidarmt simulate --dataset DIR --frames 3 --seed 5 --density 0.5 "
                               "--frames-per-drive 2 --drives-per-town 1 --stride 2")
    # the fingerprint, recomputed here independently from the sources of the imported simulator
    sim = Path(lidarmt.__file__).parent / "lidar" / "sim"
    h = hashlib.sha256()
    for f in sorted(sim.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    assert prov["simulator"]["sha256"] == h.hexdigest()
    assert "dataset.py" in prov["simulator"]["files"] and "town.py" in prov["simulator"]["files"]
    root = Path(lidarmt.__file__).parent.parent
    git = shutil.which("git")
    if git is not None and (root / ".git").exists():
        head = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        dirty = subprocess.run([git, "-C", str(root), "status", "--porcelain", "--", "lidarmt/lidar/sim"],
                               capture_output=True, text=True).stdout
        assert prov["git"] == {"commit": head.strip(), "dirty": bool(dirty.strip())}
    else:
        assert prov["git"] == {"commit": None, "dirty": None}
    assert "time" not in json.dumps(meta).lower().replace("timestamp", "")  # nothing wall-clock in it


def test_fingerprint_follows_the_sources(tmp_path) -> None:
    sim = Path(lidarmt.__file__).parent / "lidar" / "sim"
    copy = tmp_path / "sim"
    copy.mkdir()
    for f in sim.glob("*.py"):
        shutil.copy(f, copy / f.name)
    assert simulator_fingerprint(copy) == simulator_fingerprint()
    (copy / "town.py").write_text((copy / "town.py").read_text() + "\n# changed\n")
    assert simulator_fingerprint(copy)["sha256"] != simulator_fingerprint()["sha256"]


def test_git_state_without_a_checkout_or_git(tmp_path, monkeypatch) -> None:
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # not a git checkout
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable
    assert git_state() == {"commit": None, "dirty": None}


@pytest.mark.filterwarnings("ignore:sensor position")  # the other town's map is far away: an empty ROI
def test_maps_are_saved_and_match_the_frames(dataset: Path) -> None:
    meta = json.loads((dataset / "dataset.json").read_text())
    assert meta["towns"] == TOWNS
    assert meta["maps"] == {str(t): f"maps/town_{t}" for t in TOWNS}
    assert [(d["town_seed"], d["frames"], d["map"]) for d in meta["drives"]] == [
        (TOWNS[0], [0, 1], f"maps/town_{TOWNS[0]}"), (TOWNS[1], [2, 2], f"maps/town_{TOWNS[1]}")]
    with open_recording(dataset) as rec:
        frames = [rec[i] for i in range(len(rec))]
    towns_of_frames = [TOWNS[0], TOWNS[0], TOWNS[1]]
    for f, town in zip(frames, towns_of_frames, strict=True):
        # the frame file itself names its town (open_recording's folder reader shows the file name instead)
        assert f"town {town} " in load_frame_npz(dataset / f"{f.index:06d}.npz").provenance.detail
        folder = dataset / f"maps/town_{town}"
        assert {p.name for p in folder.iterdir()} == {"base_map.bin", "base_map.txt", "base_map.geojson"}
        inside = np.zeros(len(f.points), bool)
        inside[HDMapRoi(load_map(folder)).mask(f.pose).indices(f)] = True
        road = np.isin(f.labels.point_semantic, (40, 60))
        assert road.any() and inside[road].mean() > 0.9  # the saved map is the town the frame was simulated in
    # the other town's map does not fit the frame (the maps are not interchangeable)
    f = frames[2]
    inside = np.zeros(len(f.points), bool)
    inside[HDMapRoi(load_map(dataset / f"maps/town_{TOWNS[0]}")).mask(f.pose).indices(f)] = True
    assert inside[np.isin(f.labels.point_semantic, (40, 60))].mean() < 0.9


def test_evaluate_uses_the_saved_maps(dataset: Path, monkeypatch) -> None:
    roi = SimRoi(str(dataset))
    assert roi.kind == "hdmap"
    assert [roi.town_of(i) for i in range(3)] == [TOWNS[0], TOWNS[0], TOWNS[1]] and roi.town_of(3) is None
    assert [roi.map_dir(t) for t in TOWNS] == [dataset / f"maps/town_{t}" for t in TOWNS]
    assert "saved with the dataset)" in roi.describe()
    assert save_dataset_maps(str(dataset)) == []  # the stopgap leaves the dataset's own maps alone

    import lidarmt.lidar.sim.town

    def no_rebuild(seed):  # the ROI must come from the saved maps, not from the current simulator
        raise AssertionError(f"town {seed} rebuilt")

    monkeypatch.setattr(lidarmt.lidar.sim.town, "build_town", no_rebuild)
    with open_recording(dataset) as rec:
        f = rec[2]
    mask = roi(f)
    ref = HDMapRoi(load_map(dataset / f"maps/town_{TOWNS[1]}")).mask(f.pose)
    np.testing.assert_array_equal(mask.indices(f), ref.indices(f))
    assert len(mask.indices(f)) > 0


def test_old_dataset_falls_back_and_overwrite_clears_stale_maps(dataset: Path, tmp_path) -> None:
    old = tmp_path / "old"
    shutil.copytree(dataset, old)
    shutil.rmtree(old / "maps")
    meta = json.loads((old / "dataset.json").read_text())
    for d in meta["drives"]:  # what a lidarmt-sim-dataset/1 dataset.json looked like
        del d["map"]
    (old / "dataset.json").write_text(json.dumps(meta))
    roi = SimRoi(str(old))
    assert roi.map_dir(TOWNS[0]) is None and "rebuilt from their seeds" in roi.describe()
    written = save_dataset_maps(str(old))
    assert written == [str(old / f"maps/town_{t}") for t in TOWNS]
    assert (old / f"maps/town_{TOWNS[0]}/base_map.bin").read_bytes() == (
        dataset / f"maps/town_{TOWNS[0]}/base_map.bin").read_bytes()
    assert SimRoi(str(old)).map_dir(TOWNS[1]) == old / f"maps/town_{TOWNS[1]}"

    # regenerating into the folder with another seed replaces frames, maps and dataset.json
    generate_dataset(old, frames=1, seed=6, overwrite=True)
    assert sorted(p.name for p in (old / "maps").iterdir()) == ["town_6000"]
    assert sorted(p.name for p in old.glob("*.npz")) == ["000000.npz"]
    assert json.loads((old / "dataset.json").read_text())["maps"] == {"6000": "maps/town_6000"}
