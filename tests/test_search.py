"""Searches: the (1+1)-ES core by hand, the noise conditions, DeepTest's Algorithm 1 and TACTIC's ES on a steering
model, the LiDAR condition search; each resumes to exactly the uninterrupted run's records."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from lidarmt.camera.campaign import ModelRef
from lidarmt.cli import main
from lidarmt.engine.campaign import config_from_dict, run_campaign
from lidarmt.engine.errors import InjectionError
from lidarmt.engine.journal import JOURNAL_NAME, iter_records
from lidarmt.lidar.mr1.inject import Bounds, NoiseCondition, make_conditioned_follow_up, ring_sector_points
from lidarmt.search.es import (
    MAX_STEPS,
    PATIENCE,
    SIGMA0,
    Dim,
    EsState,
    Space,
    es_propose,
    es_tell,
    one_fifth,
    reflect,
    replay_es,
    step_rng,
)

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_camera_campaign import write_udacity  # noqa: E402
from test_fuzz_support import StripRoi, make_scene, write_scenes  # noqa: E402

# ----------------------------------------------------------------------------------------------- ES core


def test_one_fifth_rule_by_hand():
    d = 7
    assert one_fifth(1.0, True, d) == pytest.approx(math.exp(0.8 / (0.8 * math.sqrt(8))))
    assert one_fifth(1.0, False, d) == pytest.approx(math.exp(-0.2 / (0.8 * math.sqrt(8))))
    # one success in five keeps σ where it was
    s = 0.5
    for ok in (True, False, False, False, False):
        s = one_fifth(s, ok, d)
    assert s == pytest.approx(0.5)
    assert pytest.approx(5.0 / 6.0) == SIGMA0


def test_reflect_stays_in_the_box():
    u = np.array([-0.25, 1.25, 2.5, -3.1, 0.4])
    r = reflect(u)
    np.testing.assert_allclose(r, [0.25, 0.75, 0.5, 0.9, 0.4], atol=1e-12)
    assert ((r >= 0) & (r <= 1)).all()


def test_es_accepts_equal_counts_strict_successes_and_stops():
    s = es_tell(EsState(), [0.5, 0.5], 1.0, 2)
    assert s.parent == (0.5, 0.5) and s.fitness == 1.0 and s.sigma == SIGMA0
    s2 = es_tell(s, [0.6, 0.4], 1.0, 2)  # neutral: moves, no success, σ shrinks
    assert s2.parent == (0.6, 0.4) and s2.successes == 0 and s2.sigma < s.sigma and s2.since_improvement == 1
    s3 = es_tell(s2, [0.1, 0.1], 0.5, 2)  # worse: stays
    assert s3.parent == (0.6, 0.4) and s3.since_improvement == 2
    s4 = es_tell(s3, [0.2, 0.2], 2.0, 2)  # better: a success, σ grows
    assert s4.parent == (0.2, 0.2) and s4.successes == 1 and s4.sigma > s3.sigma and s4.since_improvement == 0
    st = EsState(parent=(0.5,), fitness=1.0)
    for _ in range(PATIENCE):
        assert not st.stopped()
        st = es_tell(st, [0.1], 0.0, 1)
    assert st.stopped()
    assert EsState(steps=MAX_STEPS).stopped()
    pts = [([0.5, 0.5], 1.0), ([0.6, 0.4], 1.0), ([0.1, 0.1], 0.5), ([0.2, 0.2], 2.0)]
    assert replay_es(pts, 2) == s4


def test_propose_is_reproducible_from_seed_and_step():
    space = Space((Dim("a", 0, 10), Dim("k", 0, 20, integer=True)))
    st = EsState(parent=(0.5, 0.5), fitness=0.0, sigma=0.1)
    a = es_propose(st, space, step_rng(3, 7, 0))
    b = es_propose(st, space, step_rng(3, 7, 0))
    c = es_propose(st, space, step_rng(3, 8, 0))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    p = space.to_params([0.26, 0.26])
    assert p == {"a": 2.6, "k": 5.0}


# ----------------------------------------------------------------------------------------------- conditions


def test_ring_sector_points_by_hand():
    xy = ring_sector_points(np.array([[0.0, 0.0], [1.0, 0.5], [0.5, 1.0]]), 10.0, 20.0, 0.0, 90.0)
    np.testing.assert_allclose(xy[0], [10.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(xy[1], [20 * math.cos(math.radians(45)), 20 * math.sin(math.radians(45))])
    np.testing.assert_allclose(np.hypot(*xy[2]), math.sqrt(0.5 * (100 + 400)))


def test_condition_points_obey_every_parameter():
    frame = make_scene(0)
    roi = StripRoi()
    b = Bounds.of(frame)
    cond = NoiseCondition(800, r_in=15.0, r_out=40.0, sector_start=60.0, sector_width=90.0, z_low=0.25, z_high=0.5,
                          i_low=0.5, i_high=0.75)
    fu = make_conditioned_follow_up(frame, roi, cond, seed=(1, 0, 3, 0))
    e = fu.extra
    xy = np.c_[e["x"], e["y"]].astype(np.float64)
    r = np.hypot(xy[:, 0], xy[:, 1])
    ang = np.degrees(np.arctan2(xy[:, 1], xy[:, 0]))
    assert len(e) == 800 and not roi.contains(xy).any()
    assert r.min() >= 15.0 - 1e-3 and r.max() <= 40.0 + 1e-3
    assert ang.min() >= 60.0 - 1e-3 and ang.max() <= 150.0 + 1e-3
    zr, ir = b.zmax - b.zmin, b.imax - b.imin
    assert e["z"].min() >= b.zmin + 0.25 * zr - 1e-4 and e["z"].max() <= b.zmin + 0.5 * zr + 1e-4
    assert e["intensity"].min() >= b.imin + 0.5 * ir - 1e-3 and e["intensity"].max() <= b.imin + 0.75 * ir + 1e-3
    assert len(fu.frame) == len(frame) + 800 and fu.seed == (1, 0, 3, 0)
    again = make_conditioned_follow_up(frame, roi, cond, seed=(1, 0, 3, 0)).extra
    other = make_conditioned_follow_up(frame, roi, cond, seed=(1, 0, 4, 0)).extra
    assert again.tobytes() == e.tobytes() and other.tobytes() != e.tobytes()


def test_clumps_gather_the_points():
    frame = make_scene(1)
    cond = NoiseCondition(300, r_in=20.0, r_out=100.0, clumps=1, clump_radius=2.0)
    e = make_conditioned_follow_up(frame, StripRoi(), cond, seed=(0, 1, 0, 0)).extra
    xy = np.c_[e["x"], e["y"]].astype(np.float64)
    centre = xy.mean(axis=0)
    assert np.hypot(*(xy - centre).T).max() <= 4.0  # one clump: every point within a diameter of the mean
    spread = make_conditioned_follow_up(frame, StripRoi(), NoiseCondition(300, r_in=20.0, r_out=100.0),
                                        seed=(0, 1, 0, 0)).extra
    assert np.ptp(spread["x"]) > 50


def test_bad_conditions_are_one_line_errors():
    for kw in ({"r_in": 50.0, "r_out": 40.0}, {"sector_width": 0.0}, {"z_low": 0.8, "z_high": 0.2},
               {"clumps": -1}, {"i_high": 1.5}):
        with pytest.raises(InjectionError, match="bad noise condition") as err:
            NoiseCondition(10, **kw)
        assert "\n" not in str(err.value)
    with pytest.raises(InjectionError, match="ROI covers"):
        make_conditioned_follow_up(make_scene(0), StripRoi(half_width=500, xmin=-500, xmax=500),
                                   NoiseCondition(10, r_out=50.0), seed=(0, 0, 0, 0))
    d = NoiseCondition(5, clumps=3).to_dict()
    assert NoiseCondition.from_dict(json.loads(json.dumps(d))) == NoiseCondition(5, clumps=3)


# ----------------------------------------------------------------------------------------------- camera


@pytest.fixture(scope="module")
def udacity(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("search") / "drive", 6)


def _records(out: Path) -> list[dict]:
    drop = ("traceback",)
    return [{k: v for k, v in r.items() if k not in drop} for r in iter_records(out / JOURNAL_NAME)]


def _resume_matches(config, out: Path, cut: int) -> None:
    """Run to the end; keep only the first ``cut`` records; resume; the journal must hold the same records."""
    run_campaign(config, out)
    full = _records(out)
    lines = (out / JOURNAL_NAME).read_text(encoding="utf-8").splitlines(keepends=True)
    (out / JOURNAL_NAME).write_text("".join(lines[:1 + cut]), encoding="utf-8")
    res = run_campaign(config, out, resume=True)
    assert res.resumed == cut
    again = _records(out)
    key = lambda r: tuple(r["key"])  # noqa: E731
    assert sorted(again, key=key) == sorted(full, key=key)


@pytest.mark.slow
def test_deeptest_search_follows_algorithm_1_and_resumes(udacity, tmp_path):
    from lidarmt.search.camera import SIMPLE, CameraSearchConfig

    out = tmp_path / "dt"
    cfg = CameraSearchConfig(str(udacity), ModelRef("dave-orig"), "deeptest", (0, 2, 4), budget=18, seed=1,
                             tries=2, run_dir=str(out))
    assert cfg.per_seed == 6 and cfg.total == 3 * 6 * 2
    assert config_from_dict(cfg.to_dict()) == cfg
    _resume_matches(cfg, out, 11)
    recs = _records(out)
    for pos in range(3):
        g = sorted((r for r in recs if r["key"][0] == pos and r["key"][2] == 0), key=lambda r: r["key"][1])
        u = sorted((r for r in recs if r["key"][0] == pos and r["key"][2] == 1), key=lambda r: r["key"][1])
        ran = [r for r in g if r["status"] == "ok"]
        assert [r["status"] for r in u] == [r["status"] for r in g]  # the unguided twin: as many attempts
        queue: list[str] = []
        failed = 0
        for r in ran:
            steps = [s["transform"] for s in r["steps"]]
            assert all(t in SIMPLE for t in steps)
            if queue:  # T1 comes from the seed's queue of transformations that raised coverage
                assert steps[0] == queue[0]
                queue = queue[1:]
            assert r["kept"] == (r["new"] > 0)
            if r["kept"]:
                queue += steps
            else:
                failed += 1
            assert r["queue"] == queue and r["failed"] == failed
        skipped = [r for r in g if r["status"] == "skipped"]
        # a seed stops after --tries failures: the attempts left are skipped (none when the last one failed)
        assert bool(skipped) == (failed >= 2 and len(ran) < cfg.per_seed)
        assert len(ran) + len(skipped) == cfg.per_seed
        cov = [r["coverage"] for r in ran]
        assert cov == sorted(cov) and all(c >= r["seed_nc"] for c, r in zip(cov, ran, strict=True))


@pytest.mark.slow
def test_camera_search_cli_deeptest_bundles_replay(udacity, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["camera", "search", "--strategy", "deeptest", "--model", "dave-orig", "--images", str(udacity),
            "--budget", "12", "--frames", "3", "--tolerance", "0.5", "--lambda", "0.01", "--bundles", "2",
            "--out", str(out), "-q"]
    assert main(args) == 0
    text = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert set(s["arms"]) == {"guided", "unguided"} and s["seed_nc"] is not None
    assert s["arms"]["guided"]["attempts"] == s["arms"]["unguided"]["attempts"] > 0
    assert ("guided is higher" in text) == s["guided_higher"]
    for name in ("report.md", "table.txt", "junit.xml", "search.png", "run.json"):
        assert (out / name).is_file(), name
    bundles = sorted((out / "violations").iterdir()) if (out / "violations").is_dir() else []
    assert bundles, "λ = 0.01 makes some kept mutant erroneous"
    info = json.loads((bundles[0] / "bundle.json").read_text())
    assert info["kind"] == "camera" and len(info["steps"]) == 2 and info["family"] == "composite"
    assert main(["replay", str(bundles[0])]) == 0
    assert main(args + ["--resume"]) == 0  # a finished search resumes to the same summary
    assert json.loads((out / "summary.json").read_text()) == s
    assert main(args) == 2  # the folder exists
    assert "--resume" in capsys.readouterr().err


def test_es_search_fitness_and_resume(udacity, tmp_path):
    from lidarmt.search.camera import CameraSearchConfig

    out = tmp_path / "es"
    cfg = CameraSearchConfig(str(udacity), ModelRef("dave-orig"), "es", (0, 1, 3), budget=4, seed=2, space="fog",
                             criterion="nbc", run_dir=str(out))
    _resume_matches(cfg, out, 3)
    recs = [r for r in _records(out) if r["status"] == "ok"]
    assert {r["arm"] for r in recs} == {"es", "random"}
    for r in recs:
        fd = float(np.mean(np.abs(np.array(r["pred_t"]) - np.array(r["pred"]))))
        assert r["fd"] == pytest.approx(fd)
        assert r["fitness"] == pytest.approx(r["fc"] + fd / (fd + 1))
        assert 0 <= r["fc"] <= 1 and r["coverage"]["nbc"] >= r["seed_coverage"]["nbc"]
        assert 0.0 <= r["params"]["intensity"] <= 1.0
    es = sorted((r for r in recs if r["arm"] == "es"), key=lambda r: r["key"])
    for a, b in zip(es, es[1:], strict=False):  # σ follows the 1/5 rule
        assert b["sigma"] == pytest.approx(one_fifth(a["sigma"], False, 7)) or \
            b["sigma"] == pytest.approx(one_fifth(a["sigma"], True, 7)) or a["sigma"] == b["sigma"]


def test_search_argument_errors_are_one_line(udacity, tmp_path, capsys):
    base = ["camera", "search", "--images", str(udacity), "--out", str(tmp_path / "x"), "-q"]
    for extra, want in ((["--strategy", "bogus"], "--strategy"), (["--strategy", "es"], "--space"),
                        (["--strategy", "es", "--space", "mirror"], "no continuous"),
                        (["--strategy", "es", "--space", "fog", "--criterion", "nc"], "--criterion"),
                        (["--budget", "0"], "--budget"), (["--seed", "-1"], "--seed")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert want in err and "\n" not in err, err


# ----------------------------------------------------------------------------------------------- LiDAR


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    return write_scenes(tmp_path_factory.mktemp("lsearch") / "frames", 5)


def test_lidar_search_records_validation_and_resume(scenes, tmp_path):
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
    from lidarmt.search.lidar import LidarSearchConfig, condition_of, lidar_space, uniform_start
    from lidarmt.search.report import lidar_summary

    out = tmp_path / "ls"
    cfg = LidarSearchConfig(SourceSpec(str(scenes)), RoiSpec("test_fuzz_support:strip_roi"),
                            SutSpec("test_fuzz_support:grid_sut"), (0, 1), (2, 3, 4), budget=4, n_max=2000, seed=3,
                            top=1, run_dir=str(out))
    assert config_from_dict(cfg.to_dict()) == cfg
    space = lidar_space(2000)
    assert condition_of(space.to_params(uniform_start(space))) == NoiseCondition(2000, 0.0, 120.0, clump_radius=1.16)
    _resume_matches(cfg, out, 5)
    recs = _records(out)
    search = [r for r in recs if r.get("phase") != "validate" and r["status"] == "ok"]
    first_es = next(r for r in search if r["key"] == [0, 0, 0])
    assert first_es["condition"]["n"] == 2000 and first_es["condition"]["clumps"] == 0  # the study's noise first
    for r in search:
        rate = sum(f["subset_violation"] for f in r["frames"]) / 2
        assert r["rate"] == rate and rate <= r["fitness"] <= rate + 0.1 + 1e-12
    val = [r for r in recs if r.get("phase") == "validate"]
    assert len(val) == 3 * 2 * 2 and {r["frame"] for r in val} == {2, 3, 4}
    config, tally = cfg, cfg.new_tally()
    for r in recs:
        tally.add(r)
    s = lidar_summary(config, tally)
    for v in s["validated"]:
        assert v["fresh"]["n"] == 3 and v["uniform"]["n"] == 3
        lo, hi = v["fresh"]["wilson95"]
        assert lo - 1e-12 <= v["fresh"]["k"] / 3 <= hi + 1e-12
    assert s["verdict"]


@pytest.mark.slow
def test_lidar_search_cli_and_condition_bundle(scenes, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["fuzz", "--bag", str(scenes), "--map", "test_fuzz_support:strip_roi", "--sut", "test_fuzz_support:grid_sut",
            "--search", "es", "--frames", "2", "--budget", "3", "--top", "1", "--n", "3000", "--ddmin-budget", "0",
            "--out", str(out), "-q"]
    assert main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["arms"]) == {"es", "random"} and s["fresh_frames"] == [i for i in range(5) if i not in
                                                                         s["search_frames"]]
    assert "verdict" in s and (out / "report.md").is_file() and (out / "search.png").is_file()
    for b in json.loads((out / "run.json").read_text())["bundles"]:
        info = json.loads((out / "violations" / b["id"] / "bundle.json").read_text())
        assert info["config"]["kind"] == "lidar-condition" and info["seed_tuple"][2] == b["step"]
    assert main(["fuzz", "--bag", str(scenes), "--map", "test_fuzz_support:strip_roi", "--search", "es", "--frames",
                 "5", "--out", str(tmp_path / "y"), "-q"]) == 2
    assert "leave some out" in capsys.readouterr().err


@pytest.mark.slow
def test_condition_bundle_holds_the_conditioned_points(scenes, tmp_path):
    from lidarmt.engine.campaign import make_bundles
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
    from lidarmt.search.lidar import ConditionConfig

    cond = NoiseCondition(3000, 0.0, 20.0)  # next to the road: GridSut merges or drops obstacles
    cc = ConditionConfig(SourceSpec(str(scenes)), RoiSpec("test_fuzz_support:strip_roi"),
                         SutSpec("test_fuzz_support:grid_sut"), cond, 7, 4, 1)
    assert config_from_dict(cc.to_dict()) == cc
    frame, roi, fu, source, follow, verdict = cc.evaluator().judge_key((2, 3000, 0))
    assert verdict.subset_violation and fu.seed == (7, 2, 4, 1)
    infos = make_bundles(cc, tmp_path, [(2, 3000, 0)], budget=30)
    assert [b["id"] for b in infos] == ["random-s004-n3000-f000002"] and infos[0]["reproduced"]
    folder = tmp_path / "violations" / infos[0]["id"]
    info = json.loads((folder / "bundle.json").read_text())
    assert info["config"]["kind"] == "lidar-condition" and info["config"]["condition"] == cond.to_dict()
    added = np.load(folder / "added.npy")
    again = cc.follow_up_of(frame, roi, info["seed_tuple"]).extra
    assert added.tobytes() == again.tobytes()
    # lidarmt replay rebuilds the condition from bundle.json (a plug-in SUT: only with trust) and reproduces it
    from lidarmt.lidar.mr1.replay import replay_bundle

    res = replay_bundle(folder, trust_code=True)
    assert res.same, res.details
    np.save(folder / "added.npy", np.zeros_like(added))
    assert not replay_bundle(folder, trust_code=True).same


def test_random_strategies_run_the_random_arm_alone(udacity, scenes, tmp_path):
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec
    from lidarmt.search.camera import CameraSearchConfig
    from lidarmt.search.lidar import LidarSearchConfig
    from lidarmt.search.report import camera_summary

    cfg = CameraSearchConfig(str(udacity), ModelRef("dave-orig"), "random", (0, 3), budget=3, space="rain",
                             run_dir=str(tmp_path / "r"))
    res = run_campaign(cfg, tmp_path / "r")
    recs = _records(tmp_path / "r")
    assert res.ran == 3 and {r["arm"] for r in recs} == {"random"} and all(r["sigma"] is None for r in recs)
    s = camera_summary(cfg, res.tally)
    assert list(s["arms"]) == ["random"] and s["arms"]["random"]["evaluations"] == 3
    assert s["arms"]["random"]["curve"] == sorted(s["arms"]["random"]["curve"])  # best so far never drops
    lcfg = LidarSearchConfig(SourceSpec(str(scenes)), RoiSpec("test_fuzz_support:strip_roi"),
                             SutSpec("test_fuzz_support:grid_sut"), (0,), (1, 2), strategy="random", budget=2, top=2)
    assert lcfg.keys_of(0) == [(0, 1, 0)] and lcfg.keys_of(2) == [(2, r, v) for r in range(2) for v in (0, 1)]
    assert lcfg.total == 2 + 2 * 2 * 2
