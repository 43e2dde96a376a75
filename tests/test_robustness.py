"""``lidarmt robustness`` (lidarmt.lidar.robustness): Robo3D's CE/mCE and RR/mRR on hand numbers, the fold's AP
and operating point against evaluate's matching, and the command end to end on a synthetic labelled recording
(tables, JSON, chart, report.html; a resumed run on workers gives the same summary)."""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lidarmt.cli import main
from lidarmt.lidar.robustness import (
    CLASSES,
    CLEAN,
    IOU_SETS,
    MEAN,
    _facts,
    class_scores,
    corruption_error,
    mean_of,
    operating_point,
    resilience_rate,
    scores,
)

# ----------------------------------------------------------------------------------------------- hand numbers


def test_corruption_error_and_resilience_rate_by_hand():
    # CE: (40 + 60 + 80) / (30 + 50 + 70) = 180 / 150 = 120 %; the baseline against itself is 100 %
    assert corruption_error([60, 40, 20], [70, 50, 30]) == pytest.approx(120.0)
    assert corruption_error([70, 50, 30], [70, 50, 30]) == pytest.approx(100.0)
    # RR: (60 + 40 + 20) / (3 * 80) = 50 %; a module unhurt by the corruption keeps 100 %
    assert resilience_rate([60, 40, 20], 80) == pytest.approx(50.0)
    assert resilience_rate([80, 80, 80], 80) == pytest.approx(100.0)
    # undefined: a perfect baseline leaves nothing to compare with; a clean AP of 0 nothing to keep
    assert corruption_error([50, 50, 50], [100, 100, 100]) is None
    assert resilience_rate([10, 10, 10], 0.0) is None
    with pytest.raises(ValueError):
        corruption_error([1, 2], [1, 2, 3])
    # mCE, mRR: the plain mean over the corruptions; an undefined one makes the mean undefined
    assert mean_of([120.0, 80.0, 100.0]) == pytest.approx(100.0)
    assert mean_of([120.0, None]) is None and mean_of([]) is None


AP = st.floats(0, 100, allow_nan=False)
LEVELS3 = st.lists(AP, min_size=3, max_size=3)


@settings(derandomize=True, database=None, deadline=None, max_examples=80)
@given(LEVELS3, LEVELS3, st.floats(0.01, 100), st.floats(0, 100))
def test_score_properties(ap, base, clean, better):
    ce = corruption_error(ap, base)
    if sum(base) < 300:
        assert ce is not None and ce >= 0
        assert corruption_error(base, base) == pytest.approx(100.0)
        # a module at least as good at every level errs no more than the baseline
        up = [max(a, b) for a, b in zip(ap, base, strict=True)]
        assert corruption_error(up, base) <= 100.0 + 1e-9
    rr = resilience_rate(ap, clean)
    assert rr == pytest.approx(100.0 * np.mean(ap) / clean)
    # RR is at most 100 exactly when the corrupted APs average no more than the clean one
    assert (rr <= 100.0 + 1e-9) == (np.mean(ap) <= clean + 1e-9)


def _cell(module: str, corruption: str, level: str, ap: dict[str, float], gt: dict[str, int]) -> dict:
    """A folded cell as the tally writes it, with the same AP|R40 at every threshold set."""
    classes = {c: {"ap": {s: {"ap_r40": ap[c], "ap_r11": ap[c]} for s in IOU_SETS}, "gt": gt[c]} for c in CLASSES}
    return {"module": module, "corruption": corruption, "level": level, "classes": classes}


def test_scores_from_cells_by_hand():
    gt = {"car": 10, "pedestrian": 4, "cyclist": 0}  # no cyclist: the mean is over car and pedestrian
    levels = ["light", "moderate", "heavy"]
    cells = [
        _cell("a", CLEAN, CLEAN, {"car": 80, "pedestrian": 40, "cyclist": 0}, gt),
        _cell("base", CLEAN, CLEAN, {"car": 90, "pedestrian": 50, "cyclist": 0}, gt),
    ]
    a_fog = [(70, 30), (60, 20), (50, 10)]  # (car, pedestrian) per level
    b_fog = [(80, 40), (70, 30), (60, 20)]
    for lv, (ca, pa), (cb, pb) in zip(levels, a_fog, b_fog, strict=True):
        cells.append(_cell("a", "fog", lv, {"car": ca, "pedestrian": pa, "cyclist": 0}, gt))
        cells.append(_cell("base", "fog", lv, {"car": cb, "pedestrian": pb, "cyclist": 0}, gt))
    sc = scores(cells, modules=["a", "base"], corruptions=[{"name": "fog", "levels": levels}], baseline="base")
    assert sc["scored_classes"] == ["car", "pedestrian"]
    a = sc["modules"]["a"]["project"]
    # mean AP per level: a 50, 40, 30 (clean 60); base 60, 50, 40 (clean 70)
    assert a[MEAN]["clean"] == pytest.approx(60.0)
    assert a[MEAN]["corruptions"]["fog"]["ap"] == pytest.approx([50.0, 40.0, 30.0])
    # CE = (50 + 60 + 70) / (40 + 50 + 60) = 120 %; RR = 120 / (3 * 60) = 66.67 %
    assert a[MEAN]["corruptions"]["fog"]["ce"] == pytest.approx(120.0)
    assert a[MEAN]["corruptions"]["fog"]["rr"] == pytest.approx(100 * 120 / 180, abs=1e-3)
    assert a[MEAN]["mce"] == pytest.approx(120.0) and a[MEAN]["mrr"] == pytest.approx(66.6667, abs=1e-3)
    # per class too: car CE = (30 + 40 + 50) / (20 + 30 + 40) = 133.33 %
    assert a["car"]["corruptions"]["fog"]["ce"] == pytest.approx(133.3333, abs=1e-3)
    base = sc["modules"]["base"]["project"][MEAN]
    assert base["mce"] == pytest.approx(100.0)
    # without a baseline there is no CE, and RR stays
    nob = scores(cells, modules=["a", "base"], corruptions=[{"name": "fog", "levels": levels}], baseline=None)
    assert nob["modules"]["a"]["project"][MEAN]["mce"] is None
    assert nob["modules"]["a"]["project"][MEAN]["mrr"] == pytest.approx(66.6667, abs=1e-3)


# ----------------------------------------------------------------------------------------------- the fold


def _rec(dets, gts, iou, status="ok") -> dict:
    nz = [[i, j, float(iou[i][j])] for i in range(len(dets)) for j in range(len(gts)) if iou[i][j] > 0]
    return {"key": [0, 0, 0, 0], "status": status, "dets": dets, "gts": gts, "iou": nz}


def test_an_ignored_box_of_another_class_is_neither_hit_nor_false_positive():
    from lidarmt.lidar.ap import interpolated_ap

    # car detection 0 hits the car; detection 1 overlaps an ignored pedestrian (not counted), detection 2 a
    # counted pedestrian (a false positive for cars)
    gts = [["car", False], ["pedestrian", True], ["pedestrian", False]]
    iou = [[0.8, 0, 0], [0, 0.6, 0], [0, 0, 0.6]]
    dets = [["car", 0.9, True], ["car", 0.8, True], ["car", 0.7, True]]
    fr = _facts(_rec(dets, gts, iou))
    cs = class_scores(fr, "car")
    assert cs.iou.shape == (3, 2)  # the car and the ignored pedestrian
    r = interpolated_ap([cs], IOU_SETS["project"]["car"])
    assert r.n_gt == 1 and r.n_det == 2  # detection 1 is not counted
    assert r.precision == pytest.approx([1.0, 0.5])
    op = operating_point(fr)
    from lidarmt.types import ObstacleClass

    assert (op[ObstacleClass.CAR].tp, op[ObstacleClass.CAR].fp) == (1, 1)
    assert op[ObstacleClass.PEDESTRIAN].fn == 1 and op[ObstacleClass.PEDESTRIAN].found == 1


def test_a_failed_call_is_a_frame_without_detections():
    fr = _facts(_rec([], [["car", False], ["car", False]], [], status="crash"))
    from lidarmt.types import ObstacleClass

    assert operating_point(fr)[ObstacleClass.CAR].fn == 2
    assert class_scores(fr, "car").iou.shape == (0, 2)


def test_operating_point_is_evaluates_matching():
    """The fold's counts from the stored IoU are match_frame's from the polygons (one rule, one place)."""
    from shapely.geometry import box as sbox

    from lidarmt.lidar.perception.apollo.evaluate import GroundTruth, iou_matrix, match_frame
    from lidarmt.types import ObstacleClass as C

    rng = np.random.default_rng(5)
    for _ in range(20):
        gts = [GroundTruth(sbox(x, y, x + w, y + h), C(c), bool(ig)) for x, y, w, h, c, ig in
               zip(rng.uniform(0, 10, 6), rng.uniform(0, 10, 6), rng.uniform(0.5, 4, 6), rng.uniform(0.5, 2, 6),
                   rng.choice(["car", "pedestrian", "cyclist"], 6), rng.random(6) < 0.2, strict=True)]
        dets = [(sbox(x, y, x + w, y + h), C(c), float(s), bool(k)) for x, y, w, h, c, s, k in
                zip(rng.uniform(0, 10, 8), rng.uniform(0, 10, 8), rng.uniform(0.5, 4, 8), rng.uniform(0.5, 2, 8),
                    rng.choice(["car", "pedestrian", "cyclist", "unknown"], 8), rng.random(8), rng.random(8) < 0.9,
                    strict=True)]
        iou = iou_matrix(dets, gts)
        rec = _rec([[d[1].value, round(d[2], 6), d[3]] for d in dets], [[g.cls.value, g.ignored] for g in gts],
                   np.round(iou, 6).tolist())
        want = match_frame(gts, dets)
        got = operating_point(_facts(rec))
        assert {c: v.to_dict() for c, v in got.items()} == {c: v.to_dict() for c, v in want.items()}


def test_object_and_alignment_transformations_are_refused(tmp_path, capsys):
    for name in ("insert", "rotate"):
        assert main(["robustness", "--data", str(tmp_path), "--transforms", name]) == 2
        err = capsys.readouterr().err
        assert "clean frame's labels do not describe" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------- end to end


def write_frames(folder: Path, n: int = 2) -> Path:
    """A labelled recording: the synthetic street with its objects moved per frame, road labels on the ground,
    written with the project's .npz writer."""
    from lidarmt.io import save_frame_npz
    from lidarmt.lidar.synthetic import DEFAULT_OBJECTS, synthetic_sweep

    folder.mkdir(parents=True)
    for i in range(n):
        objs = tuple((cx + 2.0 * i, cy, yaw, size, m) for cx, cy, yaw, size, m in DEFAULT_OBJECTS)
        f = synthetic_sweep(seed=i, n_azimuth=512, objects=objs)
        lb = f.labels
        road = np.where((lb.point_meta < 0) & (f.points["z"] < -1.5), 40, 0).astype(np.uint32)
        save_frame_npz(folder / f"{i:06d}.npz",
                       dataclasses.replace(f, labels=dataclasses.replace(lb, point_semantic=road)))
    return folder


MODULES = "test_fuzz_support:grid_sut,test_lidar_relations_support:relative_sut"


ARGS = ["--sut", MODULES, "--baseline", "test_fuzz_support:grid_sut", "--transforms", "fog,rolling-shutter",
        "--quiet"]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory) -> Path:
    """One campaign on the synthetic recording: its run folder (the recording is in its parent)."""
    root = tmp_path_factory.mktemp("robustness")
    data = write_frames(root / "frames")
    assert main(["robustness", "--data", str(data), *ARGS, "--out", str(root / "a")]) == 0
    return root / "a"


@pytest.mark.slow
def test_robustness_end_to_end(run_a, capsys):
    from lidarmt.engine.html import check_links

    a = run_a
    for name in ("table.txt", "summary.json", "robustness.png", "report.html", "report.md", "junit.xml"):
        assert (a / name).is_file(), name
    table = (a / "table.txt").read_text()
    assert "test_fuzz_support:grid_sut (baseline)" in table and "AP|R40" in table and "mCE" in table
    assert "rolling-shutter" in table
    s = json.loads((a / "summary.json").read_text())
    assert s["baseline"] == "test_fuzz_support:grid_sut"
    # AP per module × corruption × severity × class at every threshold set
    cells = {(c["module"], c["corruption"], c["level"]): c for c in s["cells"]}
    assert len(cells) == 2 * (1 + 2 * 3)
    for c in cells.values():
        assert c["frames"] == 2
        for cls in CLASSES:
            assert set(c["classes"][cls]["ap"]) == set(IOU_SETS)
    # the synthetic street has cars and pedestrians, no cyclists: the headline mean is over those two
    assert s["scores"]["scored_classes"] == ["car", "pedestrian"]
    base = s["scores"]["modules"]["test_fuzz_support:grid_sut"]["project"][MEAN]
    assert base["mce"] == pytest.approx(100.0)
    assert base["clean"] > 0 and base["mrr"] is not None
    # the heaviest rolling shutter smears the cars: their AP drops below the clean one
    car = s["scores"]["modules"]["test_fuzz_support:grid_sut"]["project"]["car"]
    assert car["corruptions"]["rolling-shutter"]["ap"][2] < car["clean"]
    assert check_links(a / "report.html") == []
    html = (a / "report.html").read_text()
    assert "mCE" in html and "robustness.png" in html
    # resuming the finished campaign runs nothing, prints the papers' table and rewrites the same summary
    before = (a / "summary.json").read_text()
    assert main(["robustness", "--data", str(a.parent / "frames"), *ARGS, "--out", str(a), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "mCE" in printed and "mRR" in printed and "0 perception calls" in printed
    assert (a / "summary.json").read_text() == before


@pytest.mark.slow
def test_a_resumed_campaign_on_workers_gives_the_same_results(run_a, tmp_path):
    """The same campaign interrupted after a few results and resumed on two workers: the same summary."""
    from lidarmt.engine.journal import JOURNAL_NAME

    b = tmp_path / "b"
    b.mkdir()
    lines = (run_a / JOURNAL_NAME).read_text().splitlines(keepends=True)
    (b / JOURNAL_NAME).write_text("".join(lines[:6]))
    data = run_a.parent / "frames"
    assert main(["robustness", "--data", str(data), *ARGS, "--out", str(b), "--resume", "--workers", "2"]) == 0
    assert json.loads((b / "summary.json").read_text()) == json.loads((run_a / "summary.json").read_text())
    assert (b / "table.txt").read_text() == (run_a / "table.txt").read_text()


@pytest.mark.slow
def test_the_page_in_chromium(run_a):
    from test_html_report import CHROMIUM, _check_sort, browse

    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    res = browse(run_a / "report.html", "table0", 1)  # the papers' table sorted by the clean AP
    assert res["broken"] == [] and res["images"] >= 1
    assert res["tables"]["table0"] == 2 and res["tables"]["table2"] == 2 * (1 + 2 * 3)
    _check_sort(res)


#: a content security policy that lets the page load files and data only (and run its inline script): any fetch
#: from the network is blocked and reported to the probe as a violation
LOCAL_ONLY = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src file: data:; '
              'style-src \'unsafe-inline\' file:; script-src \'unsafe-inline\'; font-src file: data:">')


@pytest.mark.slow
def test_the_page_renders_its_table_and_chart_and_fetches_nothing_from_outside(run_a):
    """report.html in a 1,400 px headless Chromium (tests/test_html_pages.py's probe) under a policy that allows
    only files: no logged error, no blocked fetch, the chart loads, nothing wider than the window; the papers'
    table holds every module and the chart is robustness.png beside the page."""
    from test_html_pages import look
    from test_html_report import CHROMIUM

    from lidarmt.engine.html import check_links

    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    page = run_a / "report.html"
    text = page.read_text(encoding="utf-8")
    assert check_links(page) == []
    assert '<img class="chart" src="robustness.png"' in text and (run_a / "robustness.png").stat().st_size > 0
    table = text.split('<table id="table0"', 1)[1].split("</table>", 1)[0]
    for module in MODULES.split(","):
        assert html.escape(module) in table
    probe = page.with_name("local-only.html")
    probe.write_text(text.replace("<head>", "<head>" + LOCAL_ONLY, 1), encoding="utf-8")
    try:
        clean = look(probe)
        # the probe sees what it must: an outside picture is blocked and reported
        probe.write_text(text.replace("<head>", "<head>" + LOCAL_ONLY, 1).replace(
            "</body>", '<img src="https://example.org/x.png"></body>'), encoding="utf-8")
        dirty = look(probe)
    finally:
        probe.unlink(missing_ok=True)
    assert clean["errs"] == [] and clean["broken"] == [] and clean["images"] == 1, clean
    assert clean["page"] <= clean["inner"] and clean["wide"] == [], clean
    assert any(e.startswith("csp: img-src https://example.org") for e in dirty["errs"]), dirty


def test_the_configuration_round_trips_through_the_engines_kinds():
    from lidarmt.engine.kinds import config_from_dict
    from lidarmt.lidar.robustness import RobustnessConfig, corruption_refs
    from lidarmt.lidar.specs import RoiSpec, SourceSpec, SutSpec

    cfg = RobustnessConfig(SourceSpec("frames"), RoiSpec("labels"), ("apollo", "apollo-512-sim"),
                           (SutSpec("apollo"), SutSpec("apollo-512-sim", {"mode": "fast"})),
                           corruption_refs(["fog", "beam-skip"]), (0, 3), seed=2, max_range=40.0)
    back = config_from_dict(cfg.to_dict())
    assert isinstance(back, RobustnessConfig) and back == cfg
    # the clean frame once, then every corruption at light, moderate, heavy; for each module
    assert cfg.per_frame == 2 * (1 + 2 * 3) and cfg.total == 2 * cfg.per_frame
    assert cfg.key_fields((3, 1, 2, 2)) == {"key": [3, 1, 2, 2], "frame": 3, "module": "apollo-512-sim",
                                            "corruption": "beam-skip", "level": "heavy"}
    # the corrupted sweep is the one lidarmt fuzz --transforms makes with the same seed (trial 0)
    from lidarmt.lidar.campaign import transform_seed

    assert cfg.seed_of((3, 0, 1, 1)) == cfg.seed_of((3, 1, 1, 1)) == transform_seed(2, 3, "fog", 1, 0)


def test_object_level_corruptions_are_scored_against_the_boxes_as_they_changed(tmp_path):
    """object-shear/-scale/-rotate deform each labelled object in place: the truth of a follow-up is its own boxes
    (one per clean box, same order), with the clean frame's classes and ignore rules; a module that reports the
    changed boxes exactly scores IoU 1 against them, less against the clean ones."""
    from lidarmt.lidar.perception.apollo.evaluate import GridRoi, box_polygon, frame_ground_truth, iou_matrix
    from lidarmt.lidar.robustness import corruption_refs, followup_truth
    from lidarmt.lidar.synthetic import synthetic_sweep
    from lidarmt.lidar.transforms import get_transform

    refs = corruption_refs(["object-shear", "object-scale", "object-rotate", "fog"])
    assert [r.name for r in refs] == ["object-shear", "object-scale", "object-rotate", "fog"]
    frame = synthetic_sweep(seed=3, n_azimuth=512)
    roi = GridRoi()
    gts = frame_ground_truth(frame, roi)
    assert len(gts) >= 3
    change = get_transform("object-rotate").apply(frame, "heavy", seed=5)
    truth = followup_truth(gts, change.frame)
    assert [(g.cls, g.ignored, g.num_points) for g in truth] == [(g.cls, g.ignored, g.num_points) for g in gts]
    dets = [(box_polygon(b), g.cls, 1.0, True) for b, g in zip(change.frame.labels.boxes, gts, strict=True)]
    on_new, on_clean = iou_matrix(dets, truth), iou_matrix(dets, gts)
    assert np.allclose(np.diag(on_new), 1.0)
    assert np.diag(on_clean).min() < 0.99  # the heavy rotation turned the boxes: the clean ones no longer fit
    with pytest.raises(RuntimeError, match="in place"):
        followup_truth(gts[:-1], change.frame)


def test_an_object_level_corruption_runs_end_to_end(tmp_path):
    data = write_frames(tmp_path / "frames", n=1)
    out = tmp_path / "run"
    assert main(["robustness", "--data", str(data), "--sut", "test_fuzz_support:grid_sut", "--transforms",
                 "object-scale", "--quiet", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    cells = {(c["corruption"], c["level"]) for c in s["cells"]}
    assert cells == {("clean", "clean"), ("object-scale", "light"), ("object-scale", "moderate"), ("object-scale", "heavy")}
    assert "object-scale" in (out / "table.txt").read_text()
