"""MCAP that plays back right (issue 30): a multi-frame ``lidarmt export`` shows, at every frame, exactly that
frame's obstacles (the SceneUpdates delete what the previous frame showed: no ghost boxes), and ``lidarmt info``
reads lidarmt's own MCAP (topics, counts, time range) while the campaigns refuse it in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_fuzz_support import GridSut, write_road_geojson, write_scenes

from lidarmt.cli import main
from lidarmt.engine import mcap as M
from lidarmt.types import Obstacles


class ShrinkingSut(GridSut):
    """The grid SUT, keeping fewer obstacles on each later frame (all of them on frame 0, none on frame 2, then
    one): a frame with fewer boxes than the one before is where ghosts showed."""

    name = "shrinking-test"
    KEEP = {0: None, 1: 2, 2: 0, 3: 1}

    def detect(self, frame, roi) -> Obstacles:
        found = super().detect(frame, roi)
        keep = self.KEEP.get(int(frame.index))
        return found if keep is None else found[:keep]


def shrinking_sut(**kw) -> ShrinkingSut:
    return ShrinkingSut(**kw)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("playback")
    rec = write_scenes(root / "frames", 4)
    world = write_road_geojson(root / "world.geojson")
    out = root / "x.mcap"
    assert main(["export", str(rec), "--map", str(world), "--perception", "test_mcap_playback:shrinking_sut",
                 "--out", str(out), "--quiet"]) == 0
    return out


def test_every_frame_shows_exactly_its_obstacles(exported):
    updates = [m for _, m in M.read_messages(exported, [M.TOPIC_OBSTACLES])]
    per_frame = [{e.id for e in u.entities} for u in updates]
    assert len(per_frame) == 4 and len(per_frame[0]) > 2 and [len(s) for s in per_frame[1:]] == [2, 0, 1]
    shown = M.visible_entities(exported, M.TOPIC_OBSTACLES)
    assert [ids for _, ids in shown] == per_frame  # no ghost of an earlier frame at any frame
    clouds = [msg for msg in M.read_messages(exported, [M.TOPIC_POINTS])]
    assert [t for t, _ in shown] == sorted(t for t, _ in shown) and len(clouds) == 4


def test_visible_entities_follows_deletions_and_replacements(tmp_path):
    """The player model itself: without deletions, boxes of frame 0 would stay (the old files' ghosts)."""
    from test_fuzz_support import make_scene

    F = M._fox()
    frames = [make_scene(i) for i in range(2)]

    class Everything:  # the ROI does not matter here: every obstacle of the whole sweep
        def indices(self, frame):
            return np.arange(len(frame))

    obs = [GridSut().detect(f, Everything()) for f in frames]
    assert len(obs[0]) > 1
    p = tmp_path / "old.mcap"
    with M._Writer(p) as w:  # as lidarmt export wrote before: no deletions
        for k, (f, o) in enumerate(zip(frames, (obs[0], obs[0][:1]), strict=True)):
            t = (k + 1) * 100_000_000
            w.write(M.TOPIC_OBSTACLES, M.obstacles_update(F, o, prefix="obstacle", frame_id=f.frame_id, t_ns=t), t)
    shown = M.visible_entities(p, M.TOPIC_OBSTACLES)
    assert len(shown[1][1]) == len(obs[0])  # ghosts: the player still shows every box of frame 0


def test_info_reads_lidarmt_mcap(exported, capsys):
    assert main(["info", str(exported)]) == 0
    out = capsys.readouterr().out
    assert M.TOPIC_OBSTACLES in out and "foxglove.SceneUpdate" in out and "metadata.yaml" not in out
    assert main(["info", str(exported), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "mcap" and d["topics"][M.TOPIC_POINTS]["messages"] == 4
    assert d["end_ns"] - d["start_ns"] == 300_000_000  # 4 frames, 0.1 s apart
    assert json.loads(d["metadata"]["lidarmt"]["frames"]) == [0, 1, 2, 3]


def test_campaigns_refuse_an_mcap_file_in_one_line(exported, tmp_path, capsys):
    assert main(["perceive", str(exported), "--roi", "labels"]) == 2
    err = capsys.readouterr().err
    assert "lidarmt info" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(exported.read_bytes()[:300])  # cut short: no summary section
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "MCAP" in err and "Traceback" not in err
