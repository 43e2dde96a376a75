"""``lidarmt evaluate`` end to end on a tiny labelled folder, and its user errors."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from test_training_targets import _frame  # noqa: E402

from lidarmt.cli import main  # noqa: E402
from lidarmt.io.npz import save_frame_npz  # noqa: E402


@pytest.mark.slow
def test_evaluate_writes_json_with_per_class_counts(tmp_path, capsys):
    from lidarmt.lidar.perception.apollo.network import build_network

    data = tmp_path / "val"
    save_frame_npz(data / "000000.npz", _frame(0))
    w = tmp_path / "w.pt"
    torch.save(build_network(640, seed=1).state_dict(), w)
    out = tmp_path / "eval.json"
    rc = main(["evaluate", "--data", str(data), "--weights", str(w), "--out", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    (res,) = d["results"]
    assert res["frames"] == 1
    assert set(res["classes"]) == {"car", "pedestrian", "cyclist", "unknown"}
    assert res["iou_thresholds"]["car"] == 0.5 and res["iou_thresholds"]["pedestrian"] == 0.3
    for c in res["classes"].values():
        assert c["tp"] + c["fn"] == c["gt"] and c["tp"] + c["fp"] == c["det"]
    assert "precision" in capsys.readouterr().out


def test_evaluate_needs_something_to_evaluate(capsys):
    assert main(["evaluate"]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err


def test_evaluate_missing_weights_is_one_line(tmp_path, capsys):
    data = tmp_path / "val"
    save_frame_npz(data / "000000.npz", _frame(0))
    assert main(["evaluate", "--data", str(data), "--weights", str(tmp_path / "nope.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope.pt" in err and len(err.splitlines()) == 1
