"""``lidarmt camera info``: text and JSON summaries of image sources; bad input is one line, exit status 2."""

from __future__ import annotations

import csv
import json

import cv2
import numpy as np
import pytest

from lidarmt.camera.sources.recording import SIM_CAMERA_TOPIC, SIM_STEERING_TOPIC
from lidarmt.cli import main
from lidarmt.io import Ros1BagWriter
from lidarmt.io.ros1 import TYPESTORE

T0 = 1_479_425_441_182_877_835
PERIOD = 100_000_000


def run(capsys, *args: object) -> tuple[int, str, str]:
    rc = main(["camera", "info", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def has(out: str, needle: str) -> bool:
    """``needle`` in the text output, whitespace-insensitive (rich folds long lines at the terminal width)."""
    return " ".join(needle.split()) in " ".join(out.split())


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("lidarmt: error:") and "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def udacity(tmp_path):
    root = tmp_path / "ud"
    (root / "center").mkdir(parents=True)
    angles = [0.1, -0.2, 0.005, 0.3]
    rows = []
    for k, a in enumerate(angles):
        fid = T0 + k * PERIOD
        size = (48, 64) if k < 3 else (24, 32)
        cv2.imwrite(str(root / "center" / f"{fid}.jpg"), np.full((*size, 3), 40 * k, np.uint8))
        rows.append([fid, a])
    with open(root / "steering.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["frame_id", "steering_angle"])
        w.writerows(rows)
    return root, angles


def test_text_summary(udacity, capsys):
    root, angles = udacity
    rc, out, err = run(capsys, root)
    assert rc == 0, err
    assert "udacity" in out and "steering.csv" in "".join(out.split())  # rich may fold the long path
    assert has(out, "64x48 (3 frames), 32x24 (1 frames)")
    assert has(out, "duration 0.300 s, 10.00 frames/s")
    deg = np.degrees(angles)
    assert has(out, f"4 labelled min {deg.min():.2f}° max {deg.max():.2f}° mean {deg.mean():.2f}°")
    assert has(out, "|angle| < 1°: 25.0 %")


def test_json_summary_and_sample(udacity, capsys):
    root, angles = udacity
    rc, out, _ = run(capsys, root, "--json", "--sample", "2")
    assert rc == 0
    d = json.loads(out)
    assert d["format"] == "udacity" and d["frames"] == 4 and d["frames_read"] == 2
    assert d["labels"]["count"] == 4 and d["labels"]["mean_deg"] == pytest.approx(np.degrees(angles).mean())
    assert d["start"] == pytest.approx(T0 * 1e-9) and d["rate_hz"] == pytest.approx(10.0, rel=1e-6)


def test_bag_lists_topics_and_steering(tmp_path, capsys):
    path = tmp_path / "cam.bag"
    T = TYPESTORE.types
    with Ros1BagWriter(path) as w:
        for k in range(3):
            t = T0 + k * PERIOD
            hdr = T["std_msgs/msg/Header"](seq=0, stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9,
                                                                                      nanosec=t % 10**9),
                                           frame_id="cam")
            img = T["sensor_msgs/msg/Image"](header=hdr, height=4, width=6, encoding="mono8", is_bigendian=0, step=6,
                                             data=np.full(24, 9 * k, np.uint8))
            w.write_message(SIM_CAMERA_TOPIC, "sensor_msgs/msg/Image", img, t)
            w.write_message(SIM_STEERING_TOPIC, "std_msgs/msg/Float64", T["std_msgs/msg/Float64"](data=0.01 * k), t)
    rc, out, err = run(capsys, path)
    assert rc == 0, err
    assert "ros1" in out and has(out, "6x4") and has(out, "3 labelled") and "topics" in out
    assert "".join(out.split()).count(SIM_CAMERA_TOPIC) == 2  # image topic line and the topics table
    assert "".join(out.split()).count(SIM_STEERING_TOPIC) == 2
    rc, out, _ = run(capsys, path, "--json")
    d = json.loads(out)
    assert d["topic"] == SIM_CAMERA_TOPIC and d["steering_topic"] == SIM_STEERING_TOPIC
    assert {t["name"]: t["count"] for t in d["topics"]} == {SIM_CAMERA_TOPIC: 3, SIM_STEERING_TOPIC: 3}
    rc, _, err = run(capsys, path, "--topic", "/nope")
    assert_one_line_error(rc, err, "no topic '/nope'", SIM_CAMERA_TOPIC)


def test_user_errors_are_one_line(udacity, tmp_path, capsys):
    root, _ = udacity
    rc, _, err = run(capsys, tmp_path / "missing")
    assert_one_line_error(rc, err, "missing: no such file or folder")
    with open(root / "steering.csv", "a") as fh:
        fh.write(f"{T0 + 9 * PERIOD},oops\n")
    rc, _, err = run(capsys, root)
    assert_one_line_error(rc, err, "steering.csv: line 6", "'oops' is not a number")
    rc, _, err = run(capsys, root / "center", "--topic", "/cam")
    assert_one_line_error(rc, err, "has no topics")


def test_help_has_examples(capsys):
    assert main(["camera", "info", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out and "lidarmt camera info ../shared/data/udacity" in out


def test_real_udacity(shared_data, capsys):
    root = shared_data / "udacity"
    if not root.is_dir():
        pytest.skip(f"Udacity frames not available at {root}")
    rc, out, _ = run(capsys, root, "--json", "--sample", "20")
    assert rc == 0
    d = json.loads(out)
    with open(root / "steering.csv", newline="") as fh:
        n = sum(1 for _ in csv.DictReader(fh))
    assert n > 20 and d["frames"] == n and d["image_sizes"] == [{"width": 320, "height": 240, "frames": 20}]
    assert d["labels"]["count"] == n
