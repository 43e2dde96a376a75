"""Camera campaigns judge a frame's batches two at a time for the project's own torch models (the second lane,
:meth:`lidarmt.camera.campaign.CameraEvaluator._second_lane`): the same records, byte for byte (timing fields
aside), as one batch after the other; failures in the second lane recorded exactly as without it; torch's
threads given back after the campaign."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from lidarmt import _limits
from lidarmt.camera import campaign as camera_campaign
from lidarmt.camera import prefetch
from lidarmt.camera.campaign import CameraCampaignConfig, ModelRef, transform_refs
from lidarmt.camera.models.torchmodel import TorchSteeringModel
from lidarmt.camera.transforms.registry import select
from lidarmt.engine.campaign import run_campaign
from lidarmt.engine.journal import JOURNAL_NAME, iter_records

torch = pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_camera_campaign import write_udacity  # noqa: E402
from test_camera_prefetch import TIMING  # noqa: E402 - the timing fields a journal comparison leaves out


@pytest.fixture(scope="module")
def udacity(tmp_path_factory) -> Path:
    return write_udacity(tmp_path_factory.mktemp("lanes") / "drive", n=6)


@pytest.fixture
def one_torch_thread():
    """Every run of a test on one torch thread (the lanes' count on 2 cores), so that the serial runs compute
    the very bits the lanes do; the count is given back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def lanes_counted(monkeypatch):
    """Two cores (so the second lane exists on any machine) and a count of the batches judged in it."""
    monkeypatch.setattr(_limits, "cpu_cores", lambda: 2)
    calls = []
    timed = camera_campaign._timed

    def counted(fn, x):
        calls.append(len(x))
        return timed(fn, x)

    monkeypatch.setattr(camera_campaign, "_timed", counted)
    return calls


def _config(src: Path) -> CameraCampaignConfig:
    # dave-orig (lane safe) beside a plug-in (never in the second lane); batches of 5 cut every frame in several
    return CameraCampaignConfig(str(src), (ModelRef("dave-orig", {}), ModelRef("test_camera_campaign:tilt", {})),
                                transform_refs(select("brightness,rotation,fog,mirror")), (0, 2, 3, 5), seed=7,
                                trials=2, batch_size=5)


def _journal(src: Path, out: Path, threads: int, monkeypatch) -> bytes:
    monkeypatch.setenv(prefetch.ENV, str(threads))
    run_campaign(_config(src), out)
    return TIMING.sub(b'"\\1":0', (out / JOURNAL_NAME).read_bytes())


def test_lane_safe_models():
    from lidarmt.camera.models.registry import get_model

    assert camera_campaign._lane_safe(get_model("dave-orig"))
    assert not camera_campaign._lane_safe(get_model("chauffeur"))  # its feature cache
    from test_camera_campaign import TiltModel

    assert not camera_campaign._lane_safe(TiltModel())
    plugin = TorchSteeringModel("p", torch.nn.Linear(3, 1), get_model("dave-orig").input_spec,
                                lambda x: torch.as_tensor(x))
    assert not camera_campaign._lane_safe(plugin)  # its own preprocessing: unknown thread safety


def test_journal_bytes_do_not_depend_on_lanes(udacity, tmp_path, monkeypatch, one_torch_thread, lanes_counted):
    serial = _journal(udacity, tmp_path / "serial", 0, monkeypatch)  # no pool: no lanes
    assert not lanes_counted
    laned = _journal(udacity, tmp_path / "laned", 2, monkeypatch)
    assert lanes_counted and set(lanes_counted) <= {5}  # whole batches of dave-orig, none of the plug-in
    assert torch.get_num_threads() == 1
    n = len(lanes_counted)
    monkeypatch.setenv(camera_campaign.LANES_ENV, "0")
    pooled = _journal(udacity, tmp_path / "pooled", 2, monkeypatch)  # the pool without lanes
    assert len(lanes_counted) == n
    recs = list(iter_records(tmp_path / "laned" / JOURNAL_NAME))
    assert len(recs) == _config(udacity).total and all(r["status"] == "ok" for r in recs)
    assert laned == serial and pooled == serial


@pytest.mark.parametrize(("threads", "per_lane"), [(2, 1), (4, 2), (1, 1)])
def test_torch_threads_are_given_back(udacity, tmp_path, monkeypatch, lanes_counted, threads, per_lane):
    """Each lane runs on half of torch's threads (at least one); torch's count is given back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        monkeypatch.setenv(prefetch.ENV, "2")
        seen = []
        predict = TorchSteeringModel.predict

        def spy(self, images):
            seen.append(torch.get_num_threads())
            return predict(self, images)

        monkeypatch.setattr(TorchSteeringModel, "predict", spy)
        run_campaign(_config(udacity), tmp_path / "run")
        assert lanes_counted and set(seen) == {per_lane}
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_second_lane_failures_are_recorded_as_without_lanes(udacity, tmp_path, monkeypatch, one_torch_thread,
                                                            lanes_counted):
    """A model that raises on some batches and writes into its images on others (decided by the batch's
    content, so the same batches fail in every run): the same records, tracebacks included."""
    predict = TorchSteeringModel.predict

    def flaky(self, images):
        s = int(np.asarray(images, dtype=np.int64).sum())
        if s % 3 == 0:
            raise ZeroDivisionError(f"batch of {len(images)} failed on purpose")
        if s % 3 == 1 and len(images) > 1:
            images.flags.writeable = True
            images[0, 0, 0, 0] ^= 1
        return predict(self, images)

    monkeypatch.setattr(TorchSteeringModel, "predict", flaky)
    serial = _journal(udacity, tmp_path / "serial", 0, monkeypatch)
    laned = _journal(udacity, tmp_path / "laned", 2, monkeypatch)
    assert lanes_counted
    assert b"failed on purpose" in serial and b"wrote into its input images" in serial
    assert b'"status":"ok"' in serial
    assert laned == serial


def test_a_resumed_campaign_judges_the_same_batches(udacity, tmp_path, monkeypatch, one_torch_thread,
                                                    lanes_counted):
    """Cut in the middle of a frame, then resumed with lanes: the frame's batches are cut from its whole key
    list as before, so the resumed records equal the uninterrupted run's."""
    full = tmp_path / "full"
    _journal(udacity, full, 2, monkeypatch)
    lines = (full / JOURNAL_NAME).read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / JOURNAL_NAME).write_bytes(b"".join(lines[:1 + len(lines) // 3]))  # the header and a third, mid-frame
    lanes_counted.clear()
    run_campaign(_config(udacity), cut, resume=True)
    assert lanes_counted

    def records(path):
        return sorted(TIMING.sub(b'"\\1":0', line) for line in path.read_bytes().splitlines()
                       if b'"type":"pair"' in line)

    assert records(cut / JOURNAL_NAME) == records(full / JOURNAL_NAME)
