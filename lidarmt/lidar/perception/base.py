"""The perception protocol: what the fuzzer and the benchmarks test.

Any object with ``name`` and ``detect(frame, roi) -> Obstacles`` is a perception module. ``detect`` gets a frame
(points in the sensor frame, pose) and the frame's region of interest, and returns the obstacles it reports; it
must not modify the frame. lidarmt calls it through :func:`lidarmt.lidar.perception.guard.guarded_detect`, which hands
it read-only arrays, reports a module that writes into them anyway, and validates the obstacles it returns.
Implementations are found by name through :mod:`lidarmt.lidar.perception.registry` (built-ins, the entry-point group
``lidarmt.perception``, or ``module:callable``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from lidarmt.types import Frame, Obstacles, Roi


@runtime_checkable
class Perception(Protocol):
    """A LiDAR obstacle perception module under test."""

    name: str

    def detect(self, frame: Frame, roi: Roi) -> Obstacles:
        """Obstacles of one frame; points outside ``roi`` may be used as context but never reported."""
        ...
