"""Issue 32: bundles record the SHA-256 of the CNN weights, and replay finds older shipped weights by it (or says in
one line which file it needs)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from lidarmt.lidar.perception.apollo.config import (
    DEFAULT_WEIGHTS,
    recorded_weights_digest,
    shipped_weights_by_digest,
    weights_for_replay,
)
from lidarmt.lidar.specs import weights_sha256


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_bundles_record_the_full_digest_and_old_labels_still_name_it():
    sut = SimpleNamespace(weights_path=DEFAULT_WEIGHTS[640])
    full = weights_sha256(sut)
    assert full == _sha(DEFAULT_WEIGHTS[640]) and len(full) == 64
    assert weights_sha256(SimpleNamespace()) is None  # a SUT without a weights file
    assert recorded_weights_digest({"sut_weights_sha256": full.upper()}) == full
    assert recorded_weights_digest({"sut_weights": f"weights {full[:12]}"}) == full[:12]  # bundles before issue 32
    assert recorded_weights_digest({"sut_weights": "Apollo 3.0 cnnseg, official weights"}) is None
    assert recorded_weights_digest({}) is None


def test_replay_finds_shipped_weights_by_digest(tmp_path):
    sim = DEFAULT_WEIGHTS[640].with_name("cnnseg640_sim.pt")
    digest = _sha(sim)
    assert shipped_weights_by_digest(digest) == sim
    assert shipped_weights_by_digest(digest[:12]) == sim
    assert shipped_weights_by_digest("0" * 64) is None and shipped_weights_by_digest("xyz") is None
    # a bundle made with the sim weights, replayed where the SUT loads the default: the sim file is found
    sut = SimpleNamespace(weights_path=DEFAULT_WEIGHTS[640])
    assert weights_for_replay(sut, {"sut_weights": f"weights {digest[:12]}"}) == (sim, None)
    # the same weights: nothing to do; nothing recorded: nothing to do
    assert weights_for_replay(sut, {"sut_weights_sha256": _sha(DEFAULT_WEIGHTS[640])}) == (None, None)
    assert weights_for_replay(sut, {}) == (None, None)
    # weights that ship nowhere: one line naming the digest and what to do
    other = tmp_path / "mine.pt"
    other.write_bytes(b"not shipped")
    found, line = weights_for_replay(sut, {"sut_weights_sha256": _sha(other), "sut_name": "apollo-512"})
    assert found is None and _sha(other) in line and "\n" not in line
    assert "lidarmt/lidar/perception/apollo/weights" in line
