"""Apollo's LiDAR obstacle perception (cnnseg era 2.0-3.0), reimplemented: features, CNN, Cluster2D, MinBox.

Public entry points: :class:`ApolloConfig`, :func:`compute_features`, :func:`build_network`, and (imported
lazily, as they pull in torch) :class:`ApolloLOP` from :mod:`lidarmt.lidar.perception.apollo.pipeline`.
"""

from __future__ import annotations

from typing import Any

from lidarmt.lidar.perception.apollo.config import ApolloConfig
from lidarmt.lidar.perception.apollo.features import FEATURE_NAMES, compute_features

__all__ = ["FEATURE_NAMES", "ApolloConfig", "ApolloLOP", "build_network", "compute_features"]


def __getattr__(name: str) -> Any:  # lazy: torch is heavy
    if name == "build_network":
        from lidarmt.lidar.perception.apollo.network import build_network

        return build_network
    if name == "ApolloLOP":
        from lidarmt.lidar.perception.apollo.pipeline import ApolloLOP

        return ApolloLOP
    raise AttributeError(name)
