"""Issue 19: campaigns split the lost obstacles into labelled objects (a real car, pedestrian or cyclist lost) and
unlabelled junk, per class, in the verdicts, the totals, the size x distance breakdown and the reports; old
journals (without the split) still fold and report."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_fuzz_labels_report import labelled_scene
from test_fuzz_support import make_scene

from lidarmt.cli import main
from lidarmt.engine.tally import Tally
from lidarmt.io.npz import save_frame_npz
from lidarmt.lidar.mr1.oracle import Missing, Verdict, attach_labels, describe_lost, without_labels
from lidarmt.lidar.mr1.report import markdown_tables, summary_dict, text_table
from lidarmt.lidar.perception.apollo.evaluate import LABEL_MATCH_RULE
from lidarmt.types import BOX_DTYPE, MetaType, ObstacleClass


def scene_cars(index: int, seed: int = 1234) -> list[tuple[float, float]]:
    """The car centres make_scene draws (the same generator calls, in the same order)."""
    rng = np.random.default_rng([seed, index])
    rng.uniform([-35, -30], [55, 30], size=(1500, 2))
    rng.uniform(-1.8, -1.6, 1500)
    cars = []
    for _ in range(6):
        cx, cy = rng.uniform(-25, 45), rng.choice([-4.8, -2.0, 2.0, 4.8])
        rng.uniform([cx - 2, cy - 0.9, -1.2], [cx + 2, cy + 0.9, 0.2], size=(60, 3))
        cars.append((float(cx), float(cy)))
    return cars


def boxed_scene(index: int):
    """labelled_scene (road labels) with its six cars labelled as boxes."""
    f = labelled_scene(index)
    rows = [(cx, cy, -0.5, 4.0, 1.8, 1.4, 0.0, int(MetaType.SMALLMOT), k) for k, (cx, cy) in enumerate(scene_cars(index))]
    return replace(f, labels=replace(f.labels, boxes=np.array(rows, dtype=BOX_DTYPE)))


def test_scene_cars_are_where_make_scene_puts_them():
    f = make_scene(2)
    for cx, cy in scene_cars(2):
        near = (np.abs(f.points["x"] - cx) <= 2) & (np.abs(f.points["y"] - cy) <= 0.9) & (f.points["z"] > -1.25)
        assert near.sum() >= 60


def record(frame, missing, *, labelled=True):
    rec = {"frame": frame, "n": 100, "trial": 0, "status": "ok",
           "verdict": {"counts_source": {"car": 3, "pedestrian": 1, "cyclist": 0, "unknown": 0},
                       "counts_follow": {"car": 3 - len(missing), "pedestrian": 1, "cyclist": 0, "unknown": 0},
                       "count_violation": bool(missing), "class_violations": ["car"] if missing else [],
                       "subset_violation": bool(missing), "missing": missing}}
    if labelled is not None:
        rec["labelled"] = labelled
    if labelled:
        rec["labelled_source"] = {"car": 2, "pedestrian": 1}
    return rec


CAR = {"source": 0, "class": "car", "kind": "merged", "points": 300, "size": [4.2, 1.8, 1.5], "distance": 12.0,
       "label": "labelled", "label_class": "car", "label_iou": 0.61}
JUNK = {"source": 1, "class": "car", "kind": "vanished", "points": 4, "size": [2.0, 0.1, 0.05], "distance": 30.0,
        "label": "unlabelled"}
BEHIND = {"source": 2, "class": "pedestrian", "kind": "vanished", "points": 9, "size": [0.5, 0.4, 1.6],
          "distance": 8.0, "label": "outside"}
OLD = {"source": 0, "class": "car", "kind": "merged", "points": 50, "size": [2.0, 1.0, 1.0], "distance": 5.0}


def test_totals_split_lost_obstacles_by_what_the_labels_say():
    t = Tally([100])
    for r in (record(0, [CAR, JUNK]), record(1, [BEHIND]), record(2, []), record(3, [OLD], labelled=None)):
        t.add(r)
    row = t.to_dict()["100"]
    assert row["labelled_pairs"] == 3 and row["labelled_violations"] == 1
    by = row["lost_by_label"]
    assert by["labelled"]["car"] == 1 and by["unlabelled"]["car"] == 1 and by["outside"]["pedestrian"] == 1
    assert by["not known"]["car"] == 1  # a journal written before the split
    assert sum(sum(v.values()) for v in by.values()) == sum(row["missing"].values()) == 4
    assert row["labelled_as"] == {"car": 1, "pedestrian": 0, "cyclist": 0}
    assert row["labelled_source"] == {"car": 6, "pedestrian": 3, "cyclist": 0}  # summed over the labelled pairs
    assert row["breakdown_labelled"][">10 m³"]["0–20 m"] == 1
    assert sum(sum(v.values()) for v in row["breakdown_labelled"].values()) == 1
    # the filters apply to the split too: junk under 10 points goes
    from lidarmt.engine.tally import LostFilter

    f = Tally([100], lost_filter=LostFilter(min_points=10))
    for r in (record(0, [CAR, JUNK]), record(1, [BEHIND])):
        f.add(r)
    by = f.to_dict()["100"]["lost_by_label"]
    assert by["unlabelled"]["car"] == 0 and by["outside"]["pedestrian"] == 0 and by["labelled"]["car"] == 1


def test_reports_show_the_split_and_the_rule():
    t = Tally([100])
    for r in (record(0, [CAR, JUNK]), record(1, [BEHIND]), record(2, [])):
        t.add(r)
    config = {"source": {"path": "x"}, "roi": {"map": "labels", "range": 70.0, "map_frame": "auto"},
              "sut": {"name": "apollo", "options": {}}, "ns": [100], "frames": [0, 1, 2], "seed": 0, "trials": 1,
              "region": {"shape": "disk", "size": 120.0}, "timeout": None}
    s = summary_dict(config, t)
    (row,) = s["by_n"]
    assert row["labelled_relation"]["k"] == 1 and row["labelled_relation"]["n"] == 3
    assert s["label_matching"] == LABEL_MATCH_RULE
    md = markdown_tables(s)
    assert "Lost labelled objects" in md and LABEL_MATCH_RULE in md and "(1 L)" in md
    assert "| 100 | all | 1 | 1 | 1 | 0 | 1 of 3" in md
    txt = text_table(s)
    assert "labelled objects lost: 1 car of 9 in O (car 6, pedestrian 3)" in txt and "1 (1 L)" in txt
    # frames without object labels: the report says the split is unavailable, and nothing else changes
    bare = Tally([100])
    bare.add(record(0, [OLD], labelled=False))
    md = markdown_tables(summary_dict(config, bare))
    assert "carry no object labels" in md and "(1 L)" not in md


def test_verdict_records_the_labels_and_reads_old_records():
    v = Verdict({c: 1 for c in ObstacleClass}, {c: 0 for c in ObstacleClass}, [],
                [Missing(0, ObstacleClass.CAR, "vanished", points=80, size=(4.0, 1.8, 1.5), distance=9.0)])
    attach_labels(v, {0: {"label": "labelled", "label_class": "car", "label_iou": 0.7}})
    d = v.to_dict()
    assert d["missing"][0]["label"] == "labelled" and d["missing"][0]["label_iou"] == 0.7
    assert Verdict.from_dict(d).missing[0].label_class == "car"
    assert describe_lost(d["missing"][0]).startswith("LABELLED car (IoU 0.70)")
    assert "label" not in without_labels(d)["missing"][0]
    old = Verdict.from_dict(without_labels(d))
    assert old.missing[0].label is None and "LABELLED" not in old.missing[0].what()
    assert attach_labels(v, None) is v  # a frame without object labels: nothing set


@pytest.fixture(scope="module")
def boxed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("boxed") / "frames"
    folder.mkdir()
    for i in range(2):
        save_frame_npz(folder / f"{i:06d}.npz", boxed_scene(i), compress=False)
    return folder


@pytest.mark.slow
def test_a_campaign_on_labelled_frames_reports_lost_labelled_objects(boxed, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["fuzz", "--bag", str(boxed), "--roi", "labels", "--sut", "test_fuzz_support:grid_sut", "--radius", "30",
            "--out", str(out), "--quiet", "--n", "1000", "--trials", "2", "--bundles", "1", "--ddmin-budget", "8"]
    assert main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    (row,) = s["by_n"]
    assert row["labelled_pairs"] == row["pairs"] == 4
    by = row["lost_by_label"]
    lost = sum(row["missing"].values())
    assert lost > 0, "the scene must lose obstacles at n = 1000"
    assert sum(sum(v.values()) for v in by.values()) == lost and sum(by["not known"].values()) == 0
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    pairs = [r for r in journal if r.get("type") == "pair"]
    assert all(r["labelled"] for r in pairs)
    assert all(m.get("label") in ("labelled", "unlabelled") for r in pairs for m in r["verdict"]["missing"])
    # the scene's cars touch the noise at n = 1000: the first bundle is a pair that lost a labelled car
    assert row["labelled_violations"] > 0 and 0 < row["labelled_as"]["car"] <= row["labelled_source"]["car"]
    bundle = next((out / "violations").iterdir())
    info = json.loads((bundle / "bundle.json").read_text())
    assert "LABELLED car" in info["lost_details"]
    assert "Lost labelled objects" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["replay", str(bundle), "--trust-code"]) == 0  # the verdict's label annotations replay too
    capsys.readouterr()
    # an old journal (no labels) resumes and reports: its lost obstacles are "not known"
    old = []
    for r in journal:
        r = dict(r)
        r.pop("labelled", None)
        if r.get("type") == "pair" and r.get("status") == "ok":
            r["verdict"] = without_labels(r["verdict"])
        old.append(json.dumps(r))
    (out / "journal.jsonl").write_text("\n".join(old) + "\n")
    assert main([*args, "--resume", "--bundles", "0"]) == 0
    (row,) = json.loads((out / "summary.json").read_text())["by_n"]
    assert sum(row["lost_by_label"]["not known"].values()) == lost and row["labelled_pairs"] == 0
