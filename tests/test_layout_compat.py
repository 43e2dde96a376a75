"""Bundles and journals written before the package layout changed (issue 21) still replay and resume.

``tests/data/pre_layout`` was written by lidarmt at commit ``RELEASE`` (the tree before ``lidarmt/engine``,
``lidarmt/lidar`` and ``lidarmt/camera`` took their present shape), by ``lidarmt fuzz`` on three synthetic frames with
the grid test SUT (an entry-point plug-in) and ``lidarmt camera fuzz`` on four synthetic images with Dave-orig. The
files are the release's output, untouched, made on an AMX Xeon. The tests replay its bundles, resume its journals
from a cut after a few pairs and require the summary the uninterrupted run wrote: its counts exactly, its floats
within :mod:`_approx`'s tolerance, since Dave-orig's angles differ in the last digits on another CPU kind (AVX2,
AVX-512). The camera bundle therefore replays as *identical* on an AMX machine and *reproduced* elsewhere.
"""

from __future__ import annotations

import json
import shutil
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from _approx import json_close

from lidarmt.cli import main

DATA = Path(__file__).parent / "data" / "pre_layout"
PLUGIN = EntryPoint(name="grid-test", value="test_fuzz_support:grid_sut", group="lidarmt.perception")


@pytest.fixture
def grid_plugin(monkeypatch):
    import lidarmt.lidar.perception.registry as registry

    monkeypatch.setattr(registry, "_plugins", lambda: {PLUGIN.name: PLUGIN})


def _copy(tmp_path: Path, half: str, monkeypatch) -> Path:
    root = Path(shutil.copytree(DATA / half, tmp_path / half))
    monkeypatch.chdir(root)  # the journals name their inputs relative to the folder they ran in
    return root


def _cut(journal: Path, keep_pairs: int) -> int:
    """Keep the header and the first ``keep_pairs`` records, as an interrupted run leaves it."""
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[: 1 + keep_pairs]))
    return len(lines) - 1 - keep_pairs


def _summary(path: Path) -> dict:
    return json.loads(path.read_text())


def _as_old(new: object, old: object) -> object:
    """``new`` restricted to the keys ``old`` has (a summary written now adds keys, e.g. the findings' evidence and
    severity of issue 30, that the release's summary did not have)."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _as_old(new[k], old[k]) if k in new else None for k in old}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [_as_old(a, b) for a, b in zip(new, old, strict=True)]
    return new


def test_fixture_is_the_release_output():
    assert (DATA / "RELEASE").read_text().strip() == "53da124"
    header = json.loads((DATA / "lidar" / "run" / "journal.jsonl").read_text().splitlines()[0])
    assert header["type"] == "header" and header["config"]["sut"]["name"] == "grid-test"


def _replayed(capsys, args: list[str]) -> dict:
    """``lidarmt replay ARGS --json``: it must exit 0 (identical or reproduced); its JSON."""
    code = main(["replay", *args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["outcome"] in ("identical", "reproduced"), doc
    assert doc["made_on"] is None and doc["made_on_isa"] == "unknown"  # written before bundles named the machine
    if doc["outcome"] == "reproduced":  # another CPU kind: it names the largest difference, within tolerance
        big = doc["largest_difference"]
        assert big is not None and 0 < big["difference"] <= big["tolerance"], doc
    return doc


def test_pre_layout_lidar_bundle_replays(grid_plugin, tmp_path, monkeypatch, capsys):
    root = _copy(tmp_path, "lidar", monkeypatch)
    (bundle,) = (root / "run" / "violations").iterdir()
    doc = _replayed(capsys, [str(bundle), "--map", str(root / "world.geojson")])
    assert doc["outcome"] == "identical"  # the grid SUT computes no network: the same on every CPU


def test_pre_layout_camera_bundle_replays(tmp_path, monkeypatch, capsys):
    root = _copy(tmp_path, "camera", monkeypatch)
    (bundle,) = (root / "camrun" / "violations").iterdir()
    doc = _replayed(capsys, [str(bundle)])
    assert doc["checks"]["relation still violated"]
    assert main(["replay", str(bundle)]) == 0  # the terminal's last line says the same
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(doc["outcome"] + ":") and "replayed on" in last


def test_pre_layout_lidar_journal_resumes_to_the_same_summary(grid_plugin, tmp_path, monkeypatch):
    root = _copy(tmp_path, "lidar", monkeypatch)
    expected = _summary(root / "run" / "summary.json")
    (root / "run" / "summary.json").unlink()
    shutil.rmtree(root / "run" / "violations")
    assert _cut(root / "run" / "journal.jsonl", 2) > 0
    assert main(["fuzz", "--bag", "frames", "--map", "world.geojson", "--sut", "grid-test", "--radius", "30",
                 "--n", "100,1000", "--bundles", "0", "--out", "run", "--resume", "--quiet"]) == 0
    got = _summary(root / "run" / "summary.json")
    # the journal records the machine each segment ran on; the release's pairs were made on an unrecorded one
    from lidarmt._machine import isa_label, record

    total = sum(1 for line in (root / "run" / "journal.jsonl").read_text().splitlines() if '"type":"pair"' in line)
    assert got.pop("machines") == [{"isa": "unknown", "pairs": 2}, {"isa": isa_label(record()), "pairs": total - 2}]
    assert got.pop("machines_note").startswith("verdicts from more than one ISA: 2 pair(s) on unknown")
    assert _as_old(got, expected) == expected  # the grid SUT: no float from torch, the very summary


def test_pre_layout_camera_journal_resumes_to_the_same_summary(tmp_path, monkeypatch):
    root = _copy(tmp_path, "camera", monkeypatch)
    expected = _summary(root / "camrun" / "summary.json")
    (root / "camrun" / "summary.json").unlink()
    shutil.rmtree(root / "camrun" / "violations")
    assert _cut(root / "camrun" / "journal.jsonl", 10) > 0
    assert main(["camera", "fuzz", "--images", "drive", "--model", "dave-orig", "--transforms", "brightness,mirror",
                 "--out", "camrun", "--quiet", "--lambda", "0.05", "--bundles", "0", "--resume"]) == 0
    got = _summary(root / "camrun" / "summary.json")
    assert len(got.pop("machines")) == 2 and got.pop("machines_note")  # the release's machine and this one
    # DeepTest errors whose seed was already wrong or that barely moved are now set apart from the headline
    # (issue 30): the release's counts are the headline plus those set apart
    for g in got["groups"]:
        g["deeptest"] += g["deeptest_seed_error"] + g["deeptest_no_change"]
    apart = got["deeptest_apart"]["seed_error"] + got["deeptest_apart"]["no_change"]
    assert sum(r["dave-orig"] for r in got["table8"]["rows"]) + apart == sum(
        r["dave-orig"] for r in expected["table8"]["rows"])
    got["table8"] = expected["table8"]
    assert json_close(_as_old(got, expected), expected)  # counts exactly; angles' statistics within the tolerance


# ----------------------------------------------------------------------------------------------- old import paths


@pytest.mark.parametrize(("old", "new"), [
    ("lidarmt.fuzz.campaign", "lidarmt.lidar.mr1.campaign"),
    ("lidarmt.fuzz.engine", "lidarmt.engine.campaign"),
    ("lidarmt.fuzz.oracle", "lidarmt.lidar.mr1.oracle"),
    ("lidarmt.fuzz.plugins", "lidarmt.lidar.specs"),
    ("lidarmt.report.bundle", "lidarmt.lidar.mr1.bundle"),
    ("lidarmt.report.mcap", "lidarmt.engine.mcap"),
    ("lidarmt.perception.apollo.pipeline", "lidarmt.lidar.perception.apollo.pipeline"),
    ("lidarmt.roi", "lidarmt.lidar.roi"),
    ("lidarmt.roi.utm", "lidarmt.utm"),
    ("lidarmt.sim.lidar", "lidarmt.lidar.sim.lidar"),
])
def test_old_module_paths_are_the_same_modules(old, new):
    import importlib

    a, b = importlib.import_module(old), importlib.import_module(new)
    assert a is b
    assert a.__spec__.name == new  # the module keeps its own spec (importlib.resources, pickle, reload read it)


def test_old_names_users_wrote_still_import():
    from lidarmt.fuzz import CampaignConfig, ddmin, run_campaign
    from lidarmt.fuzz.plugins import SutSpec, check_trust
    from lidarmt.perception.base import Perception
    from lidarmt.perception.registry import ENTRY_POINT_GROUP
    from lidarmt.roi import HDMapRoi, utm

    from lidarmt import Obstacles
    from lidarmt.lidar.mr1.campaign import CampaignConfig as New

    assert CampaignConfig is New and callable(run_campaign) and callable(ddmin) and callable(check_trust)
    assert Obstacles.__module__ == "lidarmt.types" and SutSpec and Perception and HDMapRoi and utm.utm_proj
    assert ENTRY_POINT_GROUP == "lidarmt.perception"  # the plug-in group keeps its name


def test_a_module_callable_spec_with_an_old_path_loads():
    from lidarmt._plugins import load_object

    assert load_object("lidarmt.fuzz.oracle:judge", what="t", error=ValueError).__module__ == "lidarmt.lidar.mr1.oracle"


def test_old_packages_that_were_split_say_where_things_went():
    import lidarmt.fuzz
    import lidarmt.report

    assert "campaign -> lidarmt.lidar.mr1.campaign" in lidarmt.fuzz.__doc__
    assert lidarmt.report.html.__name__ == "lidarmt.engine.html"
    with pytest.raises(AttributeError):
        lidarmt.report.nothing_here  # noqa: B018
