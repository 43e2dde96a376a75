"""A bug bundle is data, not code; replay checks everything a bundle claims (issue 9, items 1 and 6).

The bundles are made by ``lidarmt fuzz`` on three small synthetic frames with the grid test SUT, installed as
an entry-point plug-in (``grid-test``, what a third party's ``pip install`` gives) and a GeoJSON map, so an
untouched bundle names no code and replays without ``--trust-code``. Tampered copies are then replayed.
"""

from __future__ import annotations

import json
import shutil
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_support import write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine.manifest import MANIFEST_NAME, check_name, verify_manifest, write_manifest
from lidarmt.lidar.mr1.bundle import BUNDLE_VERSION
from lidarmt.lidar.mr1.replay import CHECK_FILES, SUPPORTED_VERSION, replay_bundle
from lidarmt.lidar.specs import (
    RoiSpec,
    SutSpec,
    UntrustedCodeError,
    build_roi_provider,
    build_sut,
    code_in_roi,
    code_in_sut,
    names_code,
)

PLUGIN = EntryPoint(name="grid-test", value="test_fuzz_support:grid_sut", group="lidarmt.perception")


def _install_plugin(mp: pytest.MonkeyPatch) -> None:
    import lidarmt.lidar.perception.registry as registry

    mp.setattr(registry, "_plugins", lambda: {PLUGIN.name: PLUGIN})


@pytest.fixture
def plugin(monkeypatch):
    """The grid test SUT, installed as the entry-point plug-in ``grid-test``."""
    _install_plugin(monkeypatch)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """One bundle of an n=1000 violation (ddmin reduced it: it claims a minimal violating subset)."""
    root = tmp_path_factory.mktemp("hardening")
    rec = write_scenes(root / "frames", 3)
    world = write_road_geojson(root / "world.geojson")
    with pytest.MonkeyPatch.context() as mp:
        _install_plugin(mp)
        assert main(["fuzz", "--bag", str(rec), "--map", str(world), "--sut", "grid-test", "--radius", "30",
                     "--n", "1000", "--bundles", "1", "--ddmin-budget", "12", "--out", str(root / "run"),
                     "--quiet"]) == 0
    (bundle,) = (root / "run" / "violations").iterdir()
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["version"] == BUNDLE_VERSION == SUPPORTED_VERSION == 2
    assert info["minimal_verdict"] is not None and info["reproduced"]
    return bundle


@pytest.fixture
def bundle(made, tmp_path) -> Path:
    """A fresh copy of the bundle, to tamper with."""
    return Path(shutil.copytree(made, tmp_path / made.name))


def seal(bundle: Path) -> None:
    """Rewrite the manifest after tampering, as a sender covering their tracks would."""
    write_manifest(bundle, sorted(p.name for p in bundle.iterdir() if p.is_file() and p.name != MANIFEST_NAME))


def edit_json(bundle: Path, change) -> None:
    info = json.loads((bundle / "bundle.json").read_text())
    change(info)
    (bundle / "bundle.json").write_text(json.dumps(info))


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("lidarmt: error:") and "Traceback" not in err and "\n" not in err, err
    return err


# ----------------------------------------------------------------------------------------------- untouched


def test_untouched_bundle_replays_without_trust_code(plugin, bundle, capsys):
    assert sorted(json.loads((bundle / MANIFEST_NAME).read_text())["files"]) == sorted(
        p.name for p in bundle.iterdir() if p.name != MANIFEST_NAME)
    assert main(["replay", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "bit for bit" in out and "DIFFERENT" not in out and "importing" not in out
    res = replay_bundle(bundle)
    assert res.same and not res.imports
    for name in (CHECK_FILES, "added points regenerated from the seed tuple", "minimal subset is part of the "
                 "added points", f"minimal subset still violates the {json.loads((bundle / 'bundle.json').read_text())['relation']} relation",
                 "minimal obstacles", "follow-up obstacles", "verdict"):
        assert res.checks[name], name


# ----------------------------------------------------------------------------------------------- code


def test_subprocess_attack_does_not_run(plugin, bundle, tmp_path, capsys):
    """The shared-bundle attack: its SUT is subprocess:getoutput with a command. It must not run."""
    marker = tmp_path / "pwned"
    cmd = f"touch {marker}"

    def attack(info):
        info["config"]["sut"] = {"name": "subprocess:getoutput", "options": {"cmd": cmd}}

    edit_json(bundle, attack)
    seal(bundle)  # a careful attacker keeps the checksums consistent
    assert main(["replay", str(bundle)]) == 2
    err = one_line_error(capsys)
    assert "subprocess:getoutput" in err and "module 'subprocess'" in err and "pass --trust-code to allow it" in err
    assert not marker.exists()
    with pytest.raises(UntrustedCodeError):
        replay_bundle(bundle)
    assert not marker.exists()
    # also with --from-recording, and when the manifest was not resealed
    assert main(["replay", str(bundle), "--from-recording"]) == 2
    (bundle / MANIFEST_NAME).unlink()
    assert main(["replay", str(bundle)]) == 2
    assert not marker.exists()


def test_roi_callable_in_a_bundle_is_not_imported(plugin, bundle, tmp_path, monkeypatch, capsys):
    mods = tmp_path / "mods"
    mods.mkdir()
    marker = tmp_path / "imported"
    (mods / "evil_roi_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef make():\n    return None\n")
    monkeypatch.syspath_prepend(str(mods))
    edit_json(bundle, lambda info: info["config"]["roi"].update(map="evil_roi_mod:make"))
    seal(bundle)
    assert main(["replay", str(bundle)]) == 2
    err = one_line_error(capsys)
    assert "ROI provider 'evil_roi_mod:make'" in err and "--trust-code" in err
    assert not marker.exists() and "evil_roi_mod" not in sys.modules


def test_sut_option_naming_code_is_refused(plugin, bundle, capsys):
    edit_json(bundle, lambda info: info["config"]["sut"]["options"].update(backend=["ok", "os:system"]))
    seal(bundle)
    assert main(["replay", str(bundle)]) == 2
    assert "option backend[1]='os:system'" in one_line_error(capsys)


def test_trust_code_runs_a_named_callable_and_says_so(plugin, bundle, capsys):
    edit_json(bundle, lambda info: info["config"]["sut"].update(name="test_fuzz_support:grid_sut"))
    seal(bundle)
    assert main(["replay", str(bundle)]) == 2
    assert "test_fuzz_support:grid_sut" in one_line_error(capsys)
    # the SUT named anew in bundle.json runs and reproduces every number; report.md (and the page) still name
    # the SUT the campaign ran, so replay says that what a person reads no longer matches the data (item 11)
    assert main(["replay", str(bundle), "--trust-code"]) == 1
    out = capsys.readouterr().out
    assert "--trust-code: importing and running SUT 'test_fuzz_support:grid_sut' (imports module " \
           "'test_fuzz_support'" in out and "report.md: differs" in out
    res = replay_bundle(bundle, trust_code=True)
    assert res.imports == code_in_sut(SutSpec("test_fuzz_support:grid_sut"))
    from lidarmt.engine.verify import CHECK_SHOWN

    assert [name for name, ok in res.checks.items() if not ok] == [CHECK_SHOWN]


def test_a_spec_the_user_types_stays_allowed(plugin, bundle, capsys):
    # --sut on the command line is the user's own choice: no --trust-code needed
    assert main(["replay", str(bundle), "--sut", "test_fuzz_support:grid_sut"]) == 0
    assert "importing" not in capsys.readouterr().out


def test_gate_in_plugins(tmp_path):
    marker = tmp_path / "pwned"
    attack = SutSpec("subprocess:getoutput", {"cmd": f"touch {marker}"})
    with pytest.raises(UntrustedCodeError, match="pass --trust-code to allow it"):
        build_sut(attack, origin=tmp_path / "bundle.json")
    with pytest.raises(UntrustedCodeError, match="evil_x"):
        build_roi_provider(RoiSpec("evil_x:make"), origin="summary.json")
    assert not marker.exists()
    # specs the user gives, and trusted files, build
    assert build_sut(SutSpec("test_fuzz_support:grid_sut")).name == "grid-test"
    assert build_sut(SutSpec("test_fuzz_support:grid_sut"), origin="b.json", trust_code=True).name == "grid-test"
    assert build_roi_provider(RoiSpec("test_fuzz_support:strip_roi"), origin="b.json", trust_code=True)
    # built-ins and their plain options name no code
    assert code_in_sut(SutSpec("apollo", {"mode": "fast", "set": ["min_pts=2"], "weights": "/w/cnn.pt"})) == []
    assert code_in_sut(SutSpec(" apollo-512 ")) == []
    assert code_in_roi(RoiSpec(str(tmp_path))) == []
    assert names_code("pkg.mod:make") and names_code(" os : system ") and names_code("a:b.c")
    assert not any(names_code(v) for v in ("12:30", "C:\\maps\\x", "/maps/a:b", "a b:c", "pkg:", ":x", "fast"))


def test_journal_header_naming_code_is_never_built(tmp_path, capsys):
    """``fuzz --resume`` and ``load_tally`` read the journal header: nothing in it may run."""
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.mr1.campaign import load_tally

    rec = write_scenes(tmp_path / "frames", 2)
    out = tmp_path / "run"
    args = ["fuzz", "--bag", str(rec), "--map", "test_fuzz_support:strip_roi", "--sut", "test_fuzz_support:grid_sut",
            "--radius", "30", "--n", "10", "--bundles", "0", "--out", str(out), "--quiet"]
    assert main(args) == 0
    marker = tmp_path / "pwned"
    journal = out / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["config"]["sut"] = {"name": "subprocess:getoutput", "options": {"cmd": f"touch {marker}"}}
    journal.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    config, tally = load_tally(out)
    assert config.sut.name == "subprocess:getoutput" and tally.done == 2
    capsys.readouterr()
    assert main([*args, "--resume"]) == 2  # the user's own settings are built; the header is only compared
    assert "--resume" in one_line_error(capsys)
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------- files


def test_deleted_added_npy_is_different(plugin, bundle, capsys):
    (bundle / "added.npy").unlink()
    assert main(["replay", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "missing: added.npy" in out and "bit for bit" not in out
    # the same with the manifest rewritten without it
    seal(bundle)
    res = replay_bundle(bundle)
    assert not res.same and not res.checks[CHECK_FILES] and not res.checks["read added.npy"]
    assert any("unlisted: added.npy" in d for d in res.details)


def test_minimal_moved_50m_and_added_zeroed_is_different(plugin, bundle, capsys):
    minimal = np.load(bundle / "minimal.npy")
    minimal["x"] += np.float32(50.0)
    np.save(bundle / "minimal.npy", minimal)
    added = np.load(bundle / "added.npy")
    added[:] = np.zeros(1, dtype=added.dtype)
    np.save(bundle / "added.npy", added)
    assert main(["replay", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "changed: minimal.npy" in out and "changed: added.npy" in out and "bit for bit" not in out
    # with consistent checksums, the points themselves are found out
    seal(bundle)
    assert main(["replay", str(bundle)]) == 1
    res = replay_bundle(bundle)
    assert res.checks[CHECK_FILES] and not res.same
    assert not res.checks["added points regenerated from the seed tuple"]
    assert not res.checks["minimal subset is part of the added points"]


def test_minimal_subset_that_no_longer_violates_is_different(plugin, bundle):
    """An honest subset of the added points (here: none of them) that does not cause the violation."""
    added = np.load(bundle / "added.npy")
    np.save(bundle / "minimal.npy", added[:0])
    edit_json(bundle, lambda info: info.update(minimal_indices=[]))
    seal(bundle)
    res = replay_bundle(bundle)
    relation = json.loads((bundle / "bundle.json").read_text())["relation"]
    assert res.checks["minimal subset is part of the added points"] and res.checks["added points regenerated "
                                                                                   "from the seed tuple"]
    assert not res.checks[f"minimal subset still violates the {relation} relation"] and not res.same


def test_inconsistent_seed_tuple_is_different(plugin, bundle):
    edit_json(bundle, lambda info: info.update(seed_tuple=[info["seed_tuple"][0] + 1, *info["seed_tuple"][1:]]))
    seal(bundle)
    res = replay_bundle(bundle)
    assert not res.same and not res.checks["bundle.json is consistent"]


def test_old_and_corrupt_bundles_are_one_line_errors(plugin, bundle, capsys):
    edit_json(bundle, lambda info: info.update(version=1))
    assert main(["replay", str(bundle)]) == 2
    assert "format 1 has no file checksums" in one_line_error(capsys)
    edit_json(bundle, lambda info: info.update(version=2, config={"sut": 3}))
    assert main(["replay", str(bundle)]) == 2
    assert "corrupt bundle.json" in one_line_error(capsys)


# ----------------------------------------------------------------------------------------------- manifest


def test_manifest_round_trip_and_problems(tmp_path):
    d = tmp_path / "f"
    (d / "sub").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"abc")
    (d / "b.txt").write_text("hello")
    (d / "sub" / "c.json").write_text("{}")
    doc = write_manifest(d, ["a.bin", "b.txt", "sub/c.json"])
    assert doc["files"]["a.bin"] == {"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                                     "size": 3}
    assert verify_manifest(d) == [] and verify_manifest(d, strict=True) == []
    (d / "a.bin").write_bytes(b"abd")  # same size, other bytes
    (d / "b.txt").unlink()
    (d / "extra").write_text("x")
    problems = {(p.kind, p.name) for p in verify_manifest(d, strict=True)}
    assert problems == {("changed", "a.bin"), ("missing", "b.txt"), ("unlisted", "extra")}
    assert {(p.kind, p.name) for p in verify_manifest(d)} == {("changed", "a.bin"), ("missing", "b.txt")}
    (d / MANIFEST_NAME).write_text("{not json")
    assert [p.kind for p in verify_manifest(d)] == ["bad-manifest"]
    (d / MANIFEST_NAME).unlink()
    assert [p.kind for p in verify_manifest(d)] == ["no-manifest"]


def test_hostile_manifest_reads_nothing_outside_the_folder(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("s")
    (d / "link").symlink_to(secret)
    good = {"sha256": "0" * 64, "size": 1}
    doc = {"format": "lidarmt-manifest", "version": 1, "algorithm": "sha256",
           "files": {"../secret": good, str(secret): good, "link": good, "a\\b": good, "x": {"size": 1}}}
    (d / MANIFEST_NAME).write_text(json.dumps(doc))
    kinds = {p.name: p.kind for p in verify_manifest(d)}
    assert kinds == {"'../secret'": "unsafe-name", repr(str(secret)): "unsafe-name", "link": "not-a-file",
                     "'a\\\\b'": "unsafe-name", "x": "bad-manifest"}
    for name in ("../x", "/abs", "", "a/./b", "a\\b", MANIFEST_NAME):
        assert check_name(name), name
        with pytest.raises(ValueError):
            write_manifest(d, [name])
    with pytest.raises(ValueError, match="regular file"):
        write_manifest(d, ["link"])
