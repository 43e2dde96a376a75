"""Issue 19: ``--roi labels`` on a drive whose labels are boxes (KITTI raw tracklets: no per-point ground labels)
is the labelled region; ``perceive`` builds a named SUT exactly as ``fuzz`` does (apollo-3.0's filters on)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_io_tracklets import write_tiny_drive

from lidarmt.io import open_recording
from lidarmt.lidar.mr1.inject import Region, make_follow_up
from lidarmt.lidar.roi.query import region_roi
from lidarmt.lidar.specs import RoiSpec, SutSpec, build_roi_provider, build_sut
from lidarmt.types import LabelledRegion


def test_region_roi_is_the_sector_within_range():
    sector = LabelledRegion(math.radians(-40), math.radians(40))
    roi = region_roi(sector, range=50.0, cell=0.5)
    xy = np.array([[20.0, 0.0], [20.0, 15.0], [20.0, -15.0], [-20.0, 0.0], [0.0, 20.0], [55.0, 0.0], [30.0, 22.0]])
    assert roi.contains(xy).tolist() == [True, True, True, False, False, False, True]
    empty = region_roi(LabelledRegion(3.0, 3.001), range=10.0, cell=1.0)
    assert empty.empty


def test_label_roi_of_a_tracklet_drive_is_its_labelled_region(tmp_path):
    drive = write_tiny_drive(tmp_path)
    frame = open_recording(drive)[0]
    roi = build_roi_provider(RoiSpec("labels", 70.0)).roi_for(frame)  # refused before: no ground labels
    inside = roi.contains(frame.points)
    # car, car, car top, cyclist, tram ahead are inside; the van behind and the (5, 5) point at 45 deg are not
    assert inside.tolist() == [True, True, True, True, True, False, False]
    fu = make_follow_up(frame, roi, 300, seed=0, frame_index=0, region=Region.disk(60.0))
    assert not roi.contains(fu.extra).any()  # MR1's points go beside and behind the car


@pytest.fixture(scope="module")
def w64(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from lidarmt.lidar.perception.apollo.network import build_network

    path = tmp_path_factory.mktemp("w") / "w64.pt"
    torch.save(build_network(64, seed=0).state_dict(), path)
    return path


def test_perceive_builds_apollo_3_0_as_fuzz_does(tmp_path, capsys, w64):
    from lidarmt.cli import main

    drive = write_tiny_drive(tmp_path)
    args = ["perceive", str(drive), "--roi", "labels", "--json", "--cold", "--grid", "64", "--weights", str(w64)]
    assert main([*args, "--perception", "apollo-3.0"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    fuzz_cfg = build_sut(SutSpec("apollo-3.0", {"grid": 64, "weights": str(w64)})).config.to_dict()
    assert cfg["low_object_filter"] is True and cfg["filter_noise"] is True
    assert cfg == fuzz_cfg  # it had the LowObjectFilter off, so its output equalled plain apollo's
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["config"]
    assert plain["low_object_filter"] is False and plain["filter_noise"] is False
    assert main(["perceive", str(drive), "--roi", "labels", "--perception", "apollo-512", "--json", "--cold",
                 "--weights", str(w64), "--grid", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["grid"] == 64
