"""LiDAR relations beyond MR1 end to end on a simulated labelled sweep: campaign, fold, resume, workers, CLI,
bundles with delta debugging, and replay bit for bit for the robustness, insertion, removal and equivariance
relations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_lidar_relations_support import simulated_frames

from lidarmt.engine.campaign import load_tally, make_bundles, run_campaign
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.campaign import LidarCampaignConfig, transform_refs, violating_keys
from lidarmt.lidar.mr1.replay import load_bundle, replay_bundle
from lidarmt.lidar.relations import Thresholds
from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

SUT = "test_lidar_relations_support:relative_sut"
NAMES = ("crosstalk", "insert", "remove", "rotate", "mirror")
#: strict enough that the flawed test SUT breaks each relation on the simulated sweeps (thresholds are the fold's)
STRICT = Thresholds(distance_m=70.0, min_points=10, tolerance=0.95, occlusion=0.5, insert_overlap=0.95)


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("open3d")
    return simulated_frames(tmp_path_factory.mktemp("lidar-relations"), frames=2)


def config(sim, names=NAMES, *, levels=("light", "heavy"), thresholds=STRICT, frames=(0, 1)) -> LidarCampaignConfig:
    frames_dir, map_dir = sim
    return LidarCampaignConfig(SourceSpec(str(frames_dir)), RoiSpec(str(map_dir)), SutSpec(SUT),
                               transform_refs(list(names), levels=levels), frames, seed=3, thresholds=thresholds)


@pytest.fixture(scope="module")
def campaign(sim, tmp_path_factory):
    cfg = config(sim)
    out = tmp_path_factory.mktemp("run") / "run"
    return cfg, out, run_campaign(cfg, out)


def test_every_relation_is_judged_and_folds_from_raw_facts(campaign):
    cfg, out, r = campaign
    assert r.ran == 2 * (4 * 2 + 1)  # mirror has no parameter: one setting, not two
    relations = {t.name: t.relation for t in cfg.transforms}
    assert relations == {"crosstalk": "robustness", "insert": "insertion", "remove": "removal",
                         "rotate": "equivariance", "mirror": "equivariance"}
    recs = [x for x in iter_records(out / JOURNAL_NAME) if x["status"] == "ok"]
    assert len(recs) == r.ran
    for x in recs:  # raw facts: every source obstacle with class, size, distance, kept points and match score
        for row in x["facts"]["source"]:
            assert {"class", "size", "distance", "points", "kept", "score"} <= set(row)
    ins = [x for x in recs if x["transform"] == "insert"]
    assert all(x["facts"]["inserted"] and x["info"]["placed"] for x in ins)
    rem = [x for x in recs if x["transform"] == "remove"]
    assert all(len(x["facts"]["removed"]) == x["info"]["n_removed"] >= 1 for x in rem)
    # each relation is violated somewhere at the strict thresholds
    viol = violating_keys(out, cfg)
    assert {cfg.transforms[k[1]].relation for k, _ in viol} == {"robustness", "insertion", "removal", "equivariance"}
    # the same journal folded at the default thresholds counts fewer violations (thresholds apply when folding)
    _, default = load_tally(out)
    strict = sum(c.violations for c in r.tally.cells.values())
    assert sum(c.violations for c in default.cells.values()) < strict == len(viol)
    # the ranking is most severe first, then nearest, and names the class, size and distance of what was lost
    from lidarmt.engine.findings import severity_rank

    ranked = r.tally.ranked()
    keys = [(severity_rank(f["severity"]), f["distance"]) for f in ranked]
    assert ranked and keys == sorted(keys)
    assert all(len(f["size"]) == 3 and f["class"] for f in ranked)


def test_a_campaign_is_deterministic_and_workers_give_the_same_totals(sim, campaign, tmp_path):
    cfg, _, r = campaign
    small = config(sim, ("crosstalk", "rotate"), levels=("light",))
    a = run_campaign(small, tmp_path / "w1")
    b = run_campaign(small, tmp_path / "w2", workers=2)
    assert a.tally.to_dict() == b.tally.to_dict()
    recs_a = {tuple(x["key"]): x["facts"] for x in iter_records(tmp_path / "w1" / JOURNAL_NAME)}
    recs_b = {tuple(x["key"]): x["facts"] for x in iter_records(tmp_path / "w2" / JOURNAL_NAME)}
    assert recs_a == recs_b


def _cli(sim, out: Path, *extra: str) -> list[str]:
    frames_dir, map_dir = sim
    return ["fuzz", "--bag", str(frames_dir), "--map", str(map_dir), "--sut", SUT, "--transforms",
            "crosstalk,remove,rotate", "--levels", "light,heavy", "--seed", "3", "--out", str(out), "--quiet",
            "--bundles", "0", "--safety-distance", "70", "--tolerance", "0.95", *extra]


def test_cli_resume_after_a_cut_gives_the_same_summary(sim, tmp_path, capsys):
    from lidarmt.cli import main

    assert main(_cli(sim, tmp_path / "full")) == 0
    assert main(_cli(sim, tmp_path / "cut")) == 0
    journal = tmp_path / "cut" / JOURNAL_NAME
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 + 2 * 6
    journal.write_bytes(b"".join(lines[:5]) + lines[5][:17])  # a kill mid-record: header, 3 verdicts, a torn one
    (tmp_path / "cut" / "summary.json").unlink()
    assert main(_cli(sim, tmp_path / "cut", "--resume")) == 0
    assert (tmp_path / "cut" / "summary.json").read_bytes() == (tmp_path / "full" / "summary.json").read_bytes()
    summary = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert summary["kind"] == "lidar-transform" and summary["thresholds"]["distance_m"] == 70.0
    assert summary["total"]["pairs"] == 12 and summary["ranking"]
    table = (tmp_path / "full" / "table.txt").read_text()
    assert "Table 8" in table and "D = 70 m" in table and "most severe first, then nearest" in table
    for name in ("report.md", "junit.xml", "violations.png", "run.json"):
        assert (tmp_path / "full" / name).is_file()
    # another relation's settings are refused on resume, and a bad option is one line
    capsys.readouterr()
    assert main(_cli(sim, tmp_path / "cut", "--resume", "--seed", "4")) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "Traceback" not in err
    assert main(_cli(sim, tmp_path / "x", "--relation", "insertion")) == 2
    assert "cannot judge crosstalk" in capsys.readouterr().err
    assert main(["fuzz", "--bag", str(sim[0]), "--map", str(sim[1]), "--relation", "robustness"]) == 2
    assert "--transforms" in capsys.readouterr().err


@pytest.fixture(scope="module")
def bundles(campaign):
    cfg, out, _ = campaign
    viol = violating_keys(out, cfg)
    first: dict[str, tuple] = {}
    for key, _ in viol:
        first.setdefault(cfg.transforms[key[1]].relation, key)
    infos = make_bundles(cfg, out, list(first.values()), budget=25, thresholds=cfg.thresholds.to_dict())
    return cfg, out, {cfg.transforms[tuple(i["key"])[1]].relation: i for i in infos}


def test_bundles_of_four_relations_replay_bit_for_bit(bundles):
    cfg, out, infos = bundles
    assert set(infos) == {"robustness", "insertion", "removal", "equivariance"}
    for rel, info in infos.items():
        assert info["reproduced"], rel
        folder = out / "violations" / info["id"]
        for name in ("source.npz", "followup.npz", "minimal.npz", "change.npz", "bev_source.png",
                     "bev_followup.png", "report.md", "MANIFEST.json"):
            assert (folder / name).is_file(), (rel, name)
        b = load_bundle(folder)
        assert b["kind"] == "lidar-transform" and b["relation"] == rel and b["findings"]
        res = replay_bundle(folder, trust_code=True)
        assert res.same, (rel, res.details)
        assert res.checks["follow-up regenerated from the seed"] and res.checks["facts"]
        assert res.checks["bundle.mcap opens with its topics"]
    eq = load_bundle(out / "violations" / infos["equivariance"]["id"])
    assert eq["ddmin"] is None and "rotation or mirror" in eq["ddmin_skipped"]


def test_delta_debugging_shrinks_the_change_to_edits_that_still_lose_the_obstacle(bundles):
    cfg, out, infos = bundles
    from lidarmt.io.npz import load_frame_npz

    shrunk = [r for r in ("robustness", "removal", "insertion") if (infos[r].get("ddmin") or {}).get("size")]
    assert shrunk
    for rel in shrunk:
        folder = out / "violations" / infos[rel]["id"]
        b = load_bundle(folder)
        assert 0 < b["ddmin"]["size"] <= b["edits"]
        lost = {x["source"] for x in b["findings"] if "source" in x}
        assert lost & {x["source"] for x in b["minimal_findings"] if "source" in x}
        with np.load(folder / "change.npz") as z:
            minimal = z["minimal_edits"]
        assert len(minimal) == b["ddmin"]["size"]
        n_src = len(load_frame_npz(folder / "source.npz").points)
        assert len(load_frame_npz(folder / "minimal.npz").points) <= n_src + len(minimal)


def test_replay_notices_a_changed_file_and_refuses_code_without_trust(bundles, tmp_path):
    import shutil

    from lidarmt.lidar.specs import UntrustedCodeError

    cfg, out, infos = bundles
    folder = tmp_path / "b"
    shutil.copytree(out / "violations" / infos["robustness"]["id"], folder)
    with pytest.raises(UntrustedCodeError):
        replay_bundle(folder)
    data = bytearray((folder / "followup.npz").read_bytes())
    data[-40] ^= 0xFF
    (folder / "followup.npz").write_bytes(bytes(data))
    res = replay_bundle(folder, trust_code=True)
    assert not res.same and any("MANIFEST" in d for d in res.details)


def test_bundles_carry_an_mcap_of_both_sweeps_and_the_change(bundles):
    """Issue 24: bundle.mcap read back with the mcap reader: topics, schemas, counts, boxes, lost obstacles."""
    from lidarmt.engine import mcap as M
    from lidarmt.engine.manifest import MANIFEST_NAME

    cfg, out, infos = bundles
    seen_lost = seen_minimal = 0
    for rel, info in infos.items():
        folder = out / "violations" / info["id"]
        got = M.summarize(folder / M.BUNDLE_MCAP)
        assert {t: v["schema"] for t, v in got.items() if t != M.TOPIC_ROI} == M.LIDAR_TRANSFORM_BUNDLE_TOPICS, rel
        assert all(v["messages"] == 1 and v["encoding"] == "protobuf" for v in got.values()), rel
        listed = json.loads((folder / MANIFEST_NAME).read_text())["files"]
        assert M.BUNDLE_MCAP in listed and M.LAYOUT_NAME in listed
        layout = json.loads((folder / M.LAYOUT_NAME).read_text())
        assert M.TOPIC_CHANGE_BOXES in layout["configById"]["3D!followup"]["topics"]
        msgs = dict(M.read_messages(folder / M.BUNDLE_MCAP))
        b = load_bundle(folder)
        with np.load(folder / "change.npz") as z:
            origin, inserted, removed, minimal = z["origin"], z["inserted"], z["removed"], z["minimal_edits"]
        clouds = {t: len(msgs[t].data) // 16 for t in (M.TOPIC_SOURCE_POINTS, M.TOPIC_FOLLOW_POINTS,
                                                      M.TOPIC_ADDED_POINTS, M.TOPIC_MINIMAL_POINTS)}
        from lidarmt.io.npz import load_frame_npz

        assert clouds[M.TOPIC_SOURCE_POINTS] == len(load_frame_npz(folder / "source.npz").points)
        assert clouds[M.TOPIC_FOLLOW_POINTS] == len(origin) and clouds[M.TOPIC_ADDED_POINTS] == int((origin < 0).sum())
        assert clouds[M.TOPIC_MINIMAL_POINTS] == (len(minimal) if b["ddmin"] else 0), rel
        boxes = [e.id for e in msgs[M.TOPIC_CHANGE_BOXES].entities]
        assert boxes == [f"inserted/{i}" for i in range(len(inserted))] + [f"removed/{i}" for i in range(len(removed))]
        if rel == "insertion":
            assert len(inserted) and msgs[M.TOPIC_CHANGE_BOXES].entities[0].cubes[0].size.x == pytest.approx(
                max(float(inserted[0]["length"]), 0.05))
        if rel == "removal":
            assert len(removed)
        ents = msgs[M.TOPIC_SOURCE_OBSTACLES].entities
        assert len(ents) == b["n_source"] and len(msgs[M.TOPIC_FOLLOW_OBSTACLES].entities) == b["n_follow"]
        lost = {x["source"] for x in b["findings"] if "source" in x}
        red = {i for i, e in enumerate(ents) if e.texts[0].text.startswith("LOST")}
        assert red == lost, rel
        assert all((ents[i].cubes[0].color.r, ents[i].cubes[0].color.g) == pytest.approx(M.LOST_RGBA[:2]) for i in red)
        seen_lost += len(red)
        seen_minimal += clouds[M.TOPIC_MINIMAL_POINTS]
    assert seen_lost and seen_minimal


def test_replay_checks_the_mcap_of_a_transformation_bundle(bundles, tmp_path):
    import shutil

    from lidarmt.engine.manifest import MANIFEST_NAME, write_manifest

    cfg, out, infos = bundles
    folder = Path(shutil.copytree(out / "violations" / infos["equivariance"]["id"], tmp_path / "b"))
    data = bytearray((folder / "bundle.mcap").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "bundle.mcap").write_bytes(bytes(data))
    res = replay_bundle(folder, trust_code=True)
    assert not res.same and any("changed: bundle.mcap" in d for d in res.details)
    # resealed by a careful sender: the broken file itself is reported
    (folder / "bundle.mcap").write_bytes(b"\x89MCAP0\r\nnot really")
    write_manifest(folder, sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST_NAME))
    res = replay_bundle(folder, trust_code=True)
    assert not res.same and not res.checks["bundle.mcap opens with its topics"]
    assert any("not a readable MCAP file" in d for d in res.details)
    # an MCAP left out of the manifest
    doc = json.loads((folder / MANIFEST_NAME).read_text())
    del doc["files"]["bundle.mcap"]
    (folder / MANIFEST_NAME).write_text(json.dumps(doc))
    res = replay_bundle(folder, trust_code=True)
    assert not res.same and any("unlisted: bundle.mcap" in d for d in res.details)


def test_bench_pairs_two_modules_per_transformation(sim, tmp_path, capsys):
    from lidarmt.cli import main

    frames_dir, map_dir = sim
    out = tmp_path / "bench"
    argv = ["bench", "--bag", str(frames_dir), "--map", str(map_dir), "--sut", "test_fuzz_support:grid_sut",
            "--sut", SUT, "--transforms", "remove,rotate", "--levels", "light,heavy", "--seed", "3",
            "--safety-distance", "70", "--tolerance", "0.95", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["kind"] == "lidar-transform" and [m["role"] for m in s["modules"]] == ["baseline", "candidate"]
    rows = {r["transform"]: r for r in s["comparisons"][0]["rows"] if r["relation"] == "relation"}
    assert set(rows) == {"remove", "rotate", "all"} and rows["all"]["pairs"] == 2 * 4
    # the frame-relative classifier breaks removal where the plain grid SUT does not: discordant pairs c > 0
    assert rows["remove"]["c"] >= 1 and rows["remove"]["b"] == 0
    assert (out / "transforms.png").is_file() and "McNemar" in (out / "report.md").read_text()
    capsys.readouterr()


def test_search_over_a_transformations_parameters_resumes_exactly(sim, tmp_path, capsys):
    from lidarmt.cli import main

    frames_dir, map_dir = sim
    argv = ["fuzz", "--bag", str(frames_dir), "--map", str(map_dir), "--sut", "test_fuzz_support:grid_sut",
            "--transforms", "range-noise", "--search", "es", "--budget", "3", "--frames", "1", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    journal = tmp_path / "b" / JOURNAL_NAME
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 + 3 * 2
    journal.write_bytes(b"".join(lines[:4]))
    assert main([*argv, "--out", str(tmp_path / "b"), "--resume"]) == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert a == json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["kind"] == "lidar-transform-search" and set(a["arms"]) == {"es", "random"}
    from lidarmt.lidar.transforms.registry import get_transform

    (p,) = get_transform("range-noise").params  # every candidate is a setting inside the physical range
    steps = [r for r in iter_records(tmp_path / "a" / JOURNAL_NAME) if r.get("arm") == "es"]
    assert steps[0]["params"]["sigma_cm"] == get_transform("range-noise").levels["moderate"]["sigma_cm"]
    assert all(p.lo <= r["params"][p.name] <= p.hi for r in steps)
    assert main([*argv, "--transforms", "mirror", "--out", str(tmp_path / "c")]) == 2
    assert "no parameter" in capsys.readouterr().err
