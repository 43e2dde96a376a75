"""Replay vouches only for what it checked (issue 29, items 7 and 11): every file of a bundle a person looks at
(bundle.mcap and its Foxglove layout, the PCDs and bag, the pictures, report.md) is regenerated from the bundle's
stored data and compared; a file swapped for another bundle's, emptied, deleted or made code-bearing makes replay
fail (exit 1) with a line naming it, even when the sender rewrote MANIFEST.json to match.

The MR1 bundles come from ``lidarmt fuzz`` on three small synthetic frames with the grid test SUT (as in
``test_replay_hardening``), two bundles of different frames; the camera ones from ``lidarmt camera fuzz`` with the
tilt test model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_fuzz_support import write_road_geojson, write_scenes
from test_replay_hardening import _install_plugin, seal

from lidarmt.cli import main
from lidarmt.engine import mcap as M
from lidarmt.engine.verify import CHECK_SHOWN, layout_problems

pytestmark = pytest.mark.slow  # whole campaigns, then a replay per case


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("shown")
    rec = write_scenes(root / "frames", 3)
    world = write_road_geojson(root / "world.geojson")
    with pytest.MonkeyPatch.context() as mp:
        _install_plugin(mp)
        assert main(["fuzz", "--bag", str(rec), "--map", str(world), "--sut", "grid-test", "--radius", "30",
                     "--n", "100,1000", "--bundles", "2", "--ddmin-budget", "12", "--out", str(root / "run"),
                     "--quiet"]) == 0
    a, b = sorted((root / "run" / "violations").iterdir())[:2]
    return a, b


@pytest.fixture
def plugin(monkeypatch):
    _install_plugin(monkeypatch)


def _replay_fails_naming(bundle: Path, name: str, capsys) -> str:
    capsys.readouterr()
    assert main(["replay", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert "bit for bit" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{CHECK_SHOWN}: {name}") or
             (name in ln and not ln.startswith(("same", "DIFFERENT")))]
    assert lines, out
    return out


def test_untouched_bundle_names_the_files_it_verified(plugin, two, capsys):
    assert main(["replay", str(two[0])]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if CHECK_SHOWN in ln)
    for name in ("bundle.mcap", "foxglove-layout.json", "bev.png", "report.md", "source.pcd", "followup.pcd",
                 "replay.bag"):
        assert name in line, line


@pytest.mark.parametrize("name", ["bundle.mcap", "bev.png", "report.md", "bev_source.png", "replay.bag"])
def test_a_file_from_another_bundle_fails(plugin, two, tmp_path, capsys, name):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    shutil.copy(two[1] / name, a / name)
    seal(a)
    _replay_fails_naming(a, name, capsys)


def test_bundle_mcap_with_the_right_topics_and_empty_messages_fails(plugin, two, tmp_path, capsys):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    F = M._fox()
    kinds = {"foxglove.FrameTransform": F.FrameTransform, "foxglove.PointCloud": F.PointCloud,
             "foxglove.SceneUpdate": F.SceneUpdate}
    with M._Writer(a / "bundle.mcap") as w:
        for topic, schema in M.LIDAR_BUNDLE_TOPICS.items():
            w.write(topic, kinds[schema](), 0)
    seal(a)
    _replay_fails_naming(a, "bundle.mcap", capsys)


def test_followup_pcd_a_copy_of_source_pcd_fails(plugin, two, tmp_path, capsys):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    shutil.copy(a / "source.pcd", a / "followup.pcd")
    seal(a)
    _replay_fails_naming(a, "followup.pcd", capsys)


@pytest.mark.parametrize("name", ["bundle.mcap", "foxglove-layout.json", "bev.png"])
def test_a_deleted_file_fails_even_with_the_manifest_rewritten(plugin, two, tmp_path, capsys, name):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    (a / name).unlink()
    seal(a)
    out = _replay_fails_naming(a, name, capsys)
    assert "missing" in out


def test_a_file_lidarmt_does_not_write_is_named(plugin, two, tmp_path, capsys):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    (a / "README-first.html").write_text("<script>alert(1)</script>")
    seal(a)
    out = _replay_fails_naming(a, "README-first.html", capsys)
    assert "not verified" in out


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    (None, "User Script"),
    ("[]", "not a JSON object"),
])
def test_a_layout_that_is_not_lidarmts_fails(plugin, two, tmp_path, capsys, text, why):
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    if text is None:  # a User Script panel: Foxglove runs its code in the receiver's browser
        doc = json.loads((a / M.LAYOUT_NAME).read_text())
        doc["userNodes"] = {"n1": {"name": "x", "sourceCode": "export default function script() {}"}}
        doc["configById"]["NodePlayground!x"] = {"selectedNodeId": "n1"}
        text = json.dumps(doc)
    (a / M.LAYOUT_NAME).write_text(text)
    seal(a)
    out = _replay_fails_naming(a, M.LAYOUT_NAME, capsys)
    assert why in out


def test_layout_problems_unit(tmp_path):
    p = tmp_path / M.LAYOUT_NAME
    p.write_text(M.layout_text("lidar-bundle"))
    assert layout_problems(p, "lidar-bundle") == []
    doc = json.loads(M.layout_text("camera-bundle"))
    doc["configById"]["UserScript!a"] = {}
    doc["layout"] = {"first": "Image!seed", "second": "UserScript!a"}
    p.write_text(json.dumps(doc))
    assert any("UserScript" in x for x in layout_problems(p, "camera-bundle"))


# ----------------------------------------------------------------------------------------------- camera


@pytest.fixture(scope="module")
def camera_two(tmp_path_factory) -> list[Path]:
    from test_camera_campaign import write_udacity

    root = tmp_path_factory.mktemp("camera-shown")
    images = write_udacity(root / "udacity")
    out = root / "run"
    assert main(["camera", "fuzz", "--images", str(images), "--model", "test_camera_campaign:tilt",
                 "--model-option", "gain=1.0", "--transforms", "brightness,contrast,fog,mirror", "--out", str(out),
                 "--quiet", "--lambda", "1", "--bundles", "8"]) == 0
    return sorted((out / "violations").iterdir())


@pytest.mark.parametrize("name", ["pair.png", "seed.png", "transformed.png", "report.md", "bundle.mcap"])
def test_camera_picture_from_another_bundle_fails(camera_two, tmp_path, capsys, name):
    a = Path(shutil.copytree(camera_two[0], tmp_path / camera_two[0].name))
    donor = next((b for b in camera_two[1:] if (b / name).read_bytes() != (a / name).read_bytes()), None)
    if donor is not None:
        shutil.copy(donor / name, a / name)
    else:  # every bundle is of the same seed frame: another frame's picture, the same size
        import cv2

        img = cv2.imread(str(a / name))
        assert cv2.imwrite(str(a / name), img[::-1].copy())
    seal(a)
    capsys.readouterr()
    assert main(["replay", str(a), "--trust-code"]) == 1
    out = capsys.readouterr().out
    assert any(ln.startswith(f"{CHECK_SHOWN}: {name}") for ln in out.splitlines()), out


def test_camera_bundle_untouched_replays(camera_two, capsys):
    assert main(["replay", str(camera_two[0]), "--trust-code"]) == 0
    out = capsys.readouterr().out
    assert "pair.png" in next(ln for ln in out.splitlines() if CHECK_SHOWN in ln)


def test_an_older_bundle_names_what_it_could_not_verify(plugin, two, tmp_path, capsys):
    """A bundle without ``shown`` (made before replay regenerated its pictures, or stripped by a sender): a
    picture that differs is named NOT VERIFIED and the last line says so; it never reads "every check passed"."""
    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    info = json.loads((a / "bundle.json").read_text())
    assert info.pop("shown") == 1
    (a / "bundle.json").write_text(json.dumps(info))
    shutil.copy(two[1] / "bev.png", a / "bev.png")
    seal(a)
    assert main(["replay", str(a)]) == 0
    out = capsys.readouterr().out
    assert any(ln.startswith("NOT VERIFIED  bev.png") for ln in out.splitlines()), out
    assert "every check passed" not in out and "NOT verified" in out.splitlines()[-1]


def test_a_crafted_schema_name_cannot_forge_replay_output(plugin, two, tmp_path, capsys):
    """Issue 29 item 6: an MCAP schema name with ESC sequences and a newline is shown escaped, on one line; it
    cannot clear the screen nor print a line of its own saying the bundle was reproduced."""
    from mcap.writer import Writer

    a = Path(shutil.copytree(two[0], tmp_path / two[0].name))
    forged = "\x1b[2J\x1b[H\nidentical: the bundle replayed bit for bit, every check passed\n\u202e"
    with open(a / "bundle.mcap", "wb") as fh:
        w = Writer(fh)
        w.start()
        for topic in M.LIDAR_BUNDLE_TOPICS:
            sid = w.register_schema(name=forged, encoding="protobuf", data=b"")
            cid = w.register_channel(topic=topic, message_encoding="protobuf", schema_id=sid)
            w.add_message(cid, log_time=0, data=b"", publish_time=0)
        w.finish()
    seal(a)
    capsys.readouterr()
    assert main(["replay", str(a)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[2J" in out
    assert not any(ln.startswith(("identical", "reproduced")) for ln in out.splitlines()), out
    assert out.splitlines()[-1].startswith("not reproduced: ")


def test_pictures_are_drawn_from_the_stored_data_pixel_for_pixel(plugin, two, monkeypatch, capsys):
    """A bundle's pictures are drawn from its data as stored (the obstacle lists' JSON rounds boxes to 0.1 mm), at
    creation as at replay: on the machine that made it they match pixel for pixel, with no tolerance (drawn from
    the unrounded boxes at creation, a demo bundle once had a pixel 19 levels off and did not replay)."""
    import lidarmt.engine.verify as verify

    monkeypatch.setattr(verify, "PIXEL_STEP_DRAWN", 0)
    for bundle in two:
        capsys.readouterr()
        assert main(["replay", str(bundle)]) == 0, capsys.readouterr().out
