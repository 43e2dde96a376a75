"""Bundles and recordings as MCAP with Foxglove's schemas (issue 24): read back with the ``mcap`` reader.

A real LiDAR bundle is made by ``lidarmt fuzz`` on three small synthetic frames with the grid test SUT (an
entry-point plug-in, as in test_replay_hardening); its ``bundle.mcap`` is decoded and compared with the
bundle's own files (clouds, added and minimal points, obstacles, lost ones, pose). Replay checks it through the
manifest. The camera writer and ``lidarmt export`` are checked the same way.
"""

from __future__ import annotations

import json
import math
import shutil
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_support import write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine import mcap as M
from lidarmt.engine.manifest import MANIFEST_NAME, write_manifest
from lidarmt.io import load_frame_npz

pytestmark = pytest.mark.slow  # whole campaigns end to end: make test-slow (CI) runs them

PLUGIN = EntryPoint(name="grid-test", value="test_fuzz_support:grid_sut", group="lidarmt.perception")


def _install_plugin(mp: pytest.MonkeyPatch) -> None:
    import lidarmt.lidar.perception.registry as registry

    mp.setattr(registry, "_plugins", lambda: {PLUGIN.name: PLUGIN})


@pytest.fixture
def plugin(monkeypatch):
    _install_plugin(monkeypatch)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A fuzz run with bundles (n = 1000 violations, ddmin on)."""
    root = tmp_path_factory.mktemp("mcap")
    rec = write_scenes(root / "frames", 3)
    world = write_road_geojson(root / "world.geojson")
    with pytest.MonkeyPatch.context() as mp:
        _install_plugin(mp)
        assert main(["fuzz", "--bag", str(rec), "--map", str(world), "--sut", "grid-test", "--radius", "30",
                     "--n", "1000", "--bundles", "2", "--ddmin-budget", "12", "--out", str(root / "run"),
                     "--quiet"]) == 0
    return root


def _bundles(made: Path) -> list[Path]:
    found = sorted((made / "run" / "violations").iterdir())
    assert found
    return found


def test_lidar_bundle_mcap_topics_schemas_counts(made):
    for b in _bundles(made):
        got = M.summarize(b / "bundle.mcap")
        want = dict(M.LIDAR_BUNDLE_TOPICS) | {M.TOPIC_ROI: "foxglove.SceneUpdate"}  # a GeoJSON map: polygons
        assert {t: v["schema"] for t, v in got.items()} == want
        assert all(v["messages"] == 1 and v["encoding"] == "protobuf" for v in got.values())
        # the layout shipped beside it opens these topics, follows the sensor frame, and is in the manifest
        layout = json.loads((b / M.LAYOUT_NAME).read_text())
        panel_topics = {t for cfg in layout["configById"].values() for t in cfg.get("topics", {})}
        assert panel_topics <= set(got) and M.TOPIC_MINIMAL_POINTS in panel_topics
        src = load_frame_npz(b / "source.npz")
        assert {cfg["followTf"] for k, cfg in layout["configById"].items() if k.startswith("3D!")} == {src.frame_id}
        listed = json.loads((b / MANIFEST_NAME).read_text())["files"]
        assert M.BUNDLE_MCAP in listed and M.LAYOUT_NAME in listed


def test_lidar_bundle_mcap_holds_what_the_bundle_holds(made):
    b = _bundles(made)[0]
    info = json.loads((b / "bundle.json").read_text())
    src, fu = load_frame_npz(b / "source.npz"), load_frame_npz(b / "followup.npz")
    added, minimal = np.load(b / "added.npy"), np.load(b / "minimal.npy")
    msgs = dict(M.read_messages(b / "bundle.mcap"))

    def cloud(topic: str) -> np.ndarray:
        m = msgs[topic]
        assert m.point_stride == 16 and [f.name for f in m.fields] == ["x", "y", "z", "intensity"]
        assert m.frame_id == src.frame_id
        return np.frombuffer(m.data, dtype="<f4").reshape(-1, 4)

    s = cloud(M.TOPIC_SOURCE_POINTS)
    assert np.array_equal(s[:, 0], src.points["x"]) and np.array_equal(s[:, 3], src.points["intensity"])
    f = cloud(M.TOPIC_FOLLOW_POINTS)
    assert len(f) == len(fu) == len(src) + info["n"] and np.array_equal(f[:, 2], fu.points["z"])
    a = cloud(M.TOPIC_ADDED_POINTS)
    assert np.array_equal(a[:, :3], np.c_[added["x"], added["y"], added["z"]])
    mini = cloud(M.TOPIC_MINIMAL_POINTS)
    assert info["ddmin"] and len(mini) == len(minimal) == info["ddmin"]["size"]
    assert np.array_equal(mini[:, :3], np.c_[minimal["x"], minimal["y"], minimal["z"]])
    # obstacles: one entity each, the lost ones red and labelled LOST with how they were lost
    obs_src = json.loads((b / "obstacles_source.json").read_text())
    obs_fu = json.loads((b / "obstacles_followup.json").read_text())
    ents = msgs[M.TOPIC_SOURCE_OBSTACLES].entities
    assert len(ents) == len(obs_src) and len(msgs[M.TOPIC_FOLLOW_OBSTACLES].entities) == len(obs_fu)
    lost = {m["source"]: m["kind"] for m in info["verdict"]["missing"]}
    assert lost
    for i, e in enumerate(ents):
        assert e.id == f"source/{i}" and e.frame_id == src.frame_id
        cube = e.cubes[0]
        o = obs_src[i]
        assert cube.size.x == pytest.approx(o["length"], abs=1e-3) and cube.size.y == pytest.approx(o["width"], abs=1e-3)
        assert cube.pose.position.x == pytest.approx(o["center"][0], abs=1e-3)
        yaw = 2 * math.atan2(cube.pose.orientation.z, cube.pose.orientation.w)
        assert math.cos(yaw - o["heading"]) == pytest.approx(1.0, abs=1e-6)
        meta = {kv.key: kv.value for kv in e.metadata}
        assert meta["class"] == o["class"]
        if i in lost:
            assert (cube.color.r, cube.color.g) == pytest.approx(M.LOST_RGBA[:2])
            assert e.texts[0].text.startswith(f"LOST #{i} {o['class']}: {lost[i]}") and meta["lost"].startswith(lost[i])
        else:
            assert "lost" not in meta and not e.texts[0].text.startswith("LOST")
    # one identity per obstacle: a follow-up obstacle is labelled with the name of the source obstacle it matches
    names = info["follow_names"]
    assert len(names) == len(obs_fu)
    for e, name in zip(msgs[M.TOPIC_FOLLOW_OBSTACLES].entities, names, strict=True):
        assert e.texts[0].text.startswith(f"{name} ")
    matched = [n for n in names if not n.startswith("new") and not n.endswith("′")]
    assert matched and all(int(n[1:]) not in lost for n in matched)
    roi = msgs[M.TOPIC_ROI].entities[0]
    assert roi.lines and all(len(line.points) >= 3 for line in roi.lines)
    tf = msgs[M.TOPIC_TF]
    assert (tf.parent_frame_id, tf.child_frame_id) == (M.WORLD_FRAME, src.frame_id)
    assert [tf.translation.x, tf.translation.y, tf.translation.z] == pytest.approx(src.pose[:3, 3].tolist())


def test_replay_checks_the_mcap(plugin, made, tmp_path, capsys):
    b = Path(shutil.copytree(_bundles(made)[0], tmp_path / "b"))
    assert main(["replay", str(b)]) == 0
    assert "bundle.mcap opens with its topics" in capsys.readouterr().out
    # a changed MCAP is caught by the manifest
    data = bytearray((b / "bundle.mcap").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (b / "bundle.mcap").write_bytes(bytes(data))
    assert main(["replay", str(b)]) == 1
    assert "changed: bundle.mcap" in capsys.readouterr().out
    # resealed by a careful sender: the broken file itself is reported, in one line
    (b / "bundle.mcap").write_bytes(b"\x89MCAP0\r\nnot really")
    write_manifest(b, sorted(p.name for p in b.iterdir() if p.is_file() and p.name != MANIFEST_NAME))
    assert main(["replay", str(b)]) == 1
    out = capsys.readouterr().out
    assert "not a readable MCAP file" in out and "Traceback" not in out
    # an MCAP left out of the manifest is reported too
    doc = json.loads((b / MANIFEST_NAME).read_text())
    del doc["files"]["bundle.mcap"]
    (b / MANIFEST_NAME).write_text(json.dumps(doc))
    assert main(["replay", str(b)]) == 1
    assert "unlisted: bundle.mcap" in capsys.readouterr().out


def test_the_same_bundle_gives_the_same_bytes(made, tmp_path):
    """Log times come from the data: writing a bundle's MCAP twice gives the same file (stable checksums)."""
    b = _bundles(made)[0]
    src, fu = load_frame_npz(b / "source.npz"), load_frame_npz(b / "followup.npz")
    from lidarmt.lidar.mr1.oracle import judge
    from lidarmt.types import Obstacles

    so = Obstacles.from_list(json.loads((b / "obstacles_source.json").read_text()))
    fo = Obstacles.from_list(json.loads((b / "obstacles_followup.json").read_text()))
    paths = []
    for k in range(2):
        paths.append(M.write_lidar_bundle_mcap(tmp_path / f"{k}.mcap", frame=src, follow_frame=fu, source=so,
                                               follow=fo, verdict=judge(so, fo), minimal=np.arange(3)))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert M.summarize(paths[0])[M.TOPIC_MINIMAL_POINTS]["messages"] == 1
    assert M.TOPIC_ROI not in M.summarize(paths[0])  # no ROI given: no polygon topic


def test_camera_bundle_mcap_images_and_angles(tmp_path):
    import cv2

    rng = np.random.default_rng(3)
    seed = rng.integers(0, 255, (66, 200, 3), dtype=np.uint8)
    tr = seed[:, ::-1].copy()
    p = M.write_camera_bundle_mcap(tmp_path / "c.mcap", seed=seed, transformed=tr, label=0.1, pred=0.2,
                                   pred_t=-0.05, expect="negate", title="mirror <b>", info={"id": "x"})
    got = M.summarize(p)
    assert {t: v["schema"] for t, v in got.items()} == M.CAMERA_BUNDLE_TOPICS
    assert all(v["messages"] == 1 for v in got.values())
    msgs = dict(M.read_messages(p))
    for topic, img in ((M.TOPIC_SEED_IMAGE, seed), (M.TOPIC_TRANSFORMED_IMAGE, tr)):
        m = msgs[topic]
        assert m.format == "png"
        back = cv2.imdecode(np.frombuffer(m.data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        assert np.array_equal(back, img)  # lossless, RGB kept
    ann = msgs[M.TOPIC_TRANSFORMED_ANNOTATIONS]
    texts = [t.text for t in ann.texts]
    # the mirror: the label and θ(i) are drawn negated on the transformed image, θ(τ(i)) as predicted
    assert texts[0] == "mirror <b>"
    assert f"label {math.degrees(-0.1):+.1f}°" in texts and f"θ(τ(i)) {math.degrees(-0.05):+.1f}°" in texts
    assert len(ann.points) == 3 and len(msgs[M.TOPIC_SEED_ANNOTATIONS].points) == 2
    tip = ann.points[2].points[1]  # θ(τ(i)) < 0: a right turn, the arrow leans right of the centre
    assert tip.x > 100 and tip.y < 66
    assert M.mcap_problems(p, M.CAMERA_BUNDLE_TOPICS) == []
    assert M.mcap_problems(p, M.LIDAR_BUNDLE_TOPICS)  # not a LiDAR bundle's


def test_export_cli_writes_frames_and_layout(made, tmp_path, capsys):
    out = tmp_path / "x.mcap"
    rc = main(["export", str(made / "frames"), "--map", str(made / "world.geojson"), "--perception",
               "test_fuzz_support:grid_sut", "--frames", "0:2", "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    got = M.summarize(out)
    assert {t: (v["schema"], v["messages"]) for t, v in got.items()} == {
        M.TOPIC_TF: ("foxglove.FrameTransform", 2), M.TOPIC_POINTS: ("foxglove.PointCloud", 2),
        M.TOPIC_OBSTACLES: ("foxglove.SceneUpdate", 2), M.TOPIC_ROI: ("foxglove.SceneUpdate", 2)}
    frames = [load_frame_npz(p) for p in sorted((made / "frames").glob("*.npz"))[:2]]
    clouds = [m for t, m in M.read_messages(out) if t == M.TOPIC_POINTS]
    assert [len(m.data) // 16 for m in clouds] == [len(f) for f in frames]
    layout = json.loads((tmp_path / "x.layout.json").read_text())
    assert set(layout["configById"]["3D!recording"]["topics"]) <= set(got)
    assert "wrote" in capsys.readouterr().out
    # comma lists and negative indices
    assert main(["export", str(made / "frames"), "--map", str(made / "world.geojson"), "--perception",
                 "test_fuzz_support:grid_sut", "--frames", "0,-1", "--out", str(out), "--quiet", "--force"]) == 0
    assert M.summarize(out)[M.TOPIC_POINTS]["messages"] == 2


@pytest.mark.parametrize("args, needle", [
    (["--frames", "7:9"], "selects no frame"),
    (["--frames", "a:b"], "START:STOP"),
    (["--frames", "0:3:0"], "step must not be 0"),
    (["--frames", "5"], "out of range"),
    (["--out", "x.bag"], ".mcap"),
    (["--perception", "no-such-module"], "perception"),
])
def test_export_user_errors_are_one_line(made, tmp_path, capsys, args, needle):
    base = {"--frames": "0:1", "--out": str(tmp_path / "y.mcap"), "--perception": "test_fuzz_support:grid_sut"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["export", str(made / "frames"), "--map", str(made / "world.geojson"), "--quiet"]
    for k, v in base.items():
        argv += [k, v]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.mcap").exists()
