"""Shared fixtures. Real data lives in ../shared/data beside the project; tests that need it skip without it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data folder ../shared/data, or a skip when it is absent (as on a user's machine)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kitti_dir(shared_data: Path) -> Path:
    p = shared_data / "kitti" / "training"
    if not p.is_dir():
        pytest.skip(f"KITTI frames not available at {p}")
    return p


@pytest.fixture(scope="session")
def apollo_maps(shared_data: Path) -> Path:
    p = shared_data / "apollo" / "maps"
    if not p.is_dir():
        pytest.skip(f"Apollo maps not available at {p}")
    return p
