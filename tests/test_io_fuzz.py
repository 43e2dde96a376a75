"""Damaged recordings (random truncations and byte flips) end as a UserError, never another exception."""

from __future__ import annotations

import json
import random
import shutil
import warnings

import pytest

from lidarmt.errors import UserError
from lidarmt.io import open_recording, write_cyber_record, write_pcd, write_ros1_bag, write_ros2_bag
from lidarmt.io._synthetic import synthetic_frames


def _exercise(path, **kw) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with open_recording(path, **kw) as rec:
                for _f in rec:
                    pass
                json.dumps(rec.describe().to_dict())
                if len(rec):
                    rec[len(rec) - 1]
    except UserError:
        pass


@pytest.mark.parametrize("kind", ["bag", "bag-recover", "record", "pcd-compressed", "pcd-ascii", "mcap"])
def test_damaged_inputs_raise_user_errors_only(tmp_path, kind):
    frames = synthetic_frames(3, 200, seed=1, ring=True)
    src = tmp_path / "src"
    src.mkdir()
    if kind.startswith("bag"):
        path = src / "a.bag"
        write_ros1_bag(path, frames, chunk_threshold=4000)
    elif kind == "record":
        path = src / "a.record"
        write_cyber_record(path, frames, chunk_raw_size=4000)
    elif kind.startswith("pcd"):
        path = src / "a.pcd"
        write_pcd(path, frames[0], encoding="binary_compressed" if kind.endswith("compressed") else "ascii")
    else:
        write_ros2_bag(src / "r2", frames, storage="mcap")
        path = src / "r2" / "r2.mcap"
    data = path.read_bytes()
    rng = random.Random(kind)
    for _ in range(40):
        b = bytearray(data)
        if rng.random() < 0.4:
            b = b[: rng.randrange(len(b))]
        else:
            for _ in range(rng.randint(1, 20)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        if kind == "mcap":
            target = tmp_path / "m"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(src / "r2", target)
            (target / "r2.mcap").write_bytes(bytes(b))
        else:
            target = tmp_path / path.name
            target.write_bytes(bytes(b))
        _exercise(target, recover=kind == "bag-recover")
