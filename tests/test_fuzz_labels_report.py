"""Issue 11 in the fuzzer: ``--roi labels``, the added points that reach the network, ``--preset study``, the
lost obstacles' points/size/distance with ``--min-points``/``--min-size`` and the size x distance breakdown."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_support import make_scene

from lidarmt.cli import main
from lidarmt.engine.errors import FuzzArgumentError, FuzzInputError
from lidarmt.engine.tally import LostFilter, Tally, distance_band, size_class
from lidarmt.io.npz import save_frame_npz
from lidarmt.lidar.mr1.inject import NetworkReach, Region, make_follow_up
from lidarmt.lidar.specs import RoiSpec, build_roi_provider
from lidarmt.types import Labels, make_points


def labelled_scene(index: int):
    """make_scene's frame with SemanticKITTI labels: ground on the road strip (|y| <= 6 m) is road (40), other
    ground terrain (70), everything above the ground car (10); no pose (labels need none)."""
    f = make_scene(index, with_pose=False)
    x, y, z = (f.points[c].astype(np.float64) for c in ("x", "y", "z"))
    ground = z < -1.5
    sem = np.where(ground & (np.abs(y) <= 6) & (x >= -35) & (x <= 55), 40, np.where(ground, 70, 10)).astype(np.int32)
    return replace(f, labels=Labels(point_semantic=sem))


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("labels") / "frames"
    folder.mkdir()
    for i in range(3):
        save_frame_npz(folder / f"{i:06d}.npz", labelled_scene(i), compress=False)
    return folder


def fuzz(rec: Path, out: Path, *extra: str) -> list[str]:
    return ["fuzz", "--bag", str(rec), "--roi", "labels", "--sut", "test_fuzz_support:grid_sut", "--radius", "30",
            "--out", str(out), "--quiet", "--ddmin-budget", "20", *extra]


def test_label_provider_builds_the_area_from_the_source_frame_and_injects_outside_it():
    frame = labelled_scene(0)
    roi = build_roi_provider(RoiSpec("labels")).roi_for(frame)
    on_road = np.abs(frame.points["y"]) < 5.0
    assert roi.contains(frame.points[on_road & (frame.points["x"] > -30) & (frame.points["x"] < 50)]).mean() > 0.9
    fu = make_follow_up(frame, roi, 500, seed=0, frame_index=0, region=Region.disk(30.0))
    assert not roi.contains(fu.extra).any()  # added points are judged by position only, against t's area
    with pytest.raises(FuzzInputError, match="no per-point ground labels"):
        build_roi_provider(RoiSpec("labels")).roi_for(make_scene(0))


def test_network_reach_counts_the_grid_and_height_band():
    pts = make_points(np.array([[10, 0, 0], [59.9, -59.9, 4.9], [61, 0, 0], [0, 0, 5.0], [0, 0, -5.0], [-59.9, 0, -4.9]],
                               dtype=np.float32), 1.0)
    assert NetworkReach().count(pts) == 3
    assert NetworkReach(range=10.0).count(pts) == 1  # x = +10 is in the first row (Apollo: x in (-range, range])
    assert NetworkReach(full_cloud=False).count(pts) == 0

    class Sut:
        class config:  # noqa: N801 - an Apollo-like config
            grid, range, min_height, max_height, use_full_cloud = 512, 60.0, -5.0, 5.0, True

    assert NetworkReach.of(Sut()) == NetworkReach(512, 60.0, -5.0, 5.0, True)
    assert NetworkReach.of(object()) == NetworkReach()


def test_fold_filters_and_breaks_down_the_lost_obstacles():
    def rec(frame, lost):
        return {"frame": frame, "n": 10, "trial": 0, "status": "ok", "added_reached": 4,
                "verdict": {"counts_source": {"car": 2, "pedestrian": 0, "cyclist": 0, "unknown": 0},
                            "counts_follow": {"car": 2 - len(lost), "pedestrian": 0, "cyclist": 0, "unknown": 0},
                            "count_violation": bool(lost), "class_violations": ["car"] if lost else [],
                            "subset_violation": bool(lost), "missing": lost}}

    junk = {"source": 0, "class": "car", "kind": "vanished", "points": 4, "size": [2.6, 0.09, 0.03], "distance": 8.0}
    car = {"source": 1, "class": "car", "kind": "merged", "points": 300, "size": [4.2, 1.8, 1.5], "distance": 25.0}
    old = {"source": 1, "class": "car", "kind": "merged"}  # a journal from before: passes every filter
    records = [rec(0, [junk]), rec(1, [car]), rec(2, []), rec(3, [old])]
    t = Tally([10])
    for r in records:
        t.add(r)
    row = t.to_dict()["10"]
    assert row["count_violations"] == 3 and row["reached_mean"] == 4.0
    assert row["breakdown"]["<1 m³"]["0–20 m"] == 1 and row["breakdown"][">10 m³"]["20–40 m"] == 1
    assert row["breakdown"]["unknown"]["unknown"] == 1
    f = Tally([10], lost_filter=LostFilter(min_points=10, min_size=1.0))
    for r in records:
        f.add(r)
    row = f.to_dict()["10"]
    assert row["count_violations"] == 2 and row["subset_violations"] == 2 and row["lost_filtered_out"] == 1
    assert row["breakdown"]["<1 m³"]["0–20 m"] == 0
    assert size_class({"size": [1, 1, 1]}) == "1–10 m³" and distance_band({"distance": 40.0}) == "40+ m"
    with pytest.raises(FuzzArgumentError, match="--min-size"):
        LostFilter(min_size=-1)


@pytest.mark.slow
def test_fuzz_with_label_roi_reports_reach_lost_obstacles_and_filters(rec, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(fuzz(rec, out, "--n", "10,1000", "--bundles", "1")) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["roi"]["map"] == "labels" and s["filter"] == {"min_points": 0, "min_size_m3": 0.0}
    by_n = {r["n"]: r for r in s["by_n"]}
    assert by_n[10]["reached_mean"] == 10 and by_n[1000]["reached_mean"] > 900  # disk r=30: inside the grid
    viol = by_n[1000]["subset_relation"]["k"]
    assert viol > 0, "the scene must lose obstacles at n = 1000"
    lost = sum(sum(v.values()) for v in by_n[1000]["breakdown"].values())
    assert lost == sum(by_n[1000]["missing"].values()) > 0
    assert "reached" in printed and "by size" in printed
    md = (out / "report.md").read_text()
    assert "ROI: the area each source frame's ground labels cover" in md and "| size |" in md
    assert " pts, " in (out / "junit.xml").read_text()
    bundle = next((out / "violations").iterdir())
    info = json.loads((bundle / "bundle.json").read_text())
    assert " pts, " in info["lost_details"] and " m away" in info["lost_details"]
    bmd = (bundle / "report.md").read_text()
    assert "the original topic" not in bmd and "m away" in bmd and "inside the network's grid" in bmd
    assert info["added_reached"] == 1000
    assert (bundle / "bev.png").stat().st_size > 10_000
    # a label-ROI bundle replays: its source.npz carries the labels the ROI is built from
    capsys.readouterr()
    assert main(["replay", str(bundle), "--trust-code"]) == 0
    assert "bit for bit" in capsys.readouterr().out
    # the filters apply when the journal is folded: resuming with them re-reports, the journal is unchanged
    journal = (out / "journal.jsonl").read_bytes()
    assert main(fuzz(rec, out, "--n", "10,1000", "--bundles", "0", "--resume", "--min-points", "100000")) == 0
    f = json.loads((out / "summary.json").read_text())
    assert f["filter"]["min_points"] == 100000
    assert all(r["subset_relation"]["k"] == 0 for r in f["by_n"])
    assert sum(r["lost_filtered_out"] for r in f["by_n"]) >= viol
    assert (out / "journal.jsonl").read_bytes()[: len(journal)] == journal
    from lidarmt.lidar.mr1.campaign import violating_keys

    assert len(violating_keys(out)) >= 1 and violating_keys(out, lost_filter=LostFilter(min_points=100000)) == []


def test_fuzz_without_any_roi_says_what_to_give(rec, tmp_path, capsys):
    args = fuzz(rec, tmp_path / "o")
    i = args.index("--roi")
    del args[i : i + 2]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--roi labels" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_preset_study_sets_the_study_configuration(rec, tmp_path, capsys):
    out = tmp_path / "study"
    # explicit options win over the preset (a tiny SUT here, so the test does not need the 512 network)
    assert main(fuzz(rec, out, "--preset", "study", "--bundles", "0")) == 0
    cfg = json.loads((out / "summary.json").read_text())["config"]
    assert cfg["ns"] == [10, 100, 1000] and cfg["roi"]["range"] == 120.0
    assert cfg["region"] == {"shape": "grid", "size": 30.0} and len(cfg["frames"]) == 3  # all there are
    assert main(fuzz(rec, tmp_path / "x", "--preset", "nope")) == 2
    capsys.readouterr()
