"""Regression benchmarks of perception modules: the same inputs through several modules, compared pairwise.

``lidarmt bench`` (LiDAR, MR1) and ``lidarmt camera bench`` (steering models, DeepTest/DeepRoad) run one
ordinary campaign per module on the shared campaign engine, all with the same frames, seed and follow-ups, in
one bench folder (:mod:`lidarmt.bench.folder`); then they pair the journals key by key and test each
difference with an exact McNemar test (:mod:`lidarmt.bench.stats`, :mod:`lidarmt.bench.compare`). The
relation-specific parts are :mod:`lidarmt.bench.lidar` (MR1 relations per n and class, detection
precision/recall on labelled frames, speed) and :mod:`lidarmt.bench.camera`. Reports:
:mod:`lidarmt.bench.report`.
"""

from __future__ import annotations

from lidarmt.bench.stats import PairedTest, SignTest, holm, mcnemar_counts, mcnemar_exact, sign_test

__all__ = ["PairedTest", "SignTest", "holm", "mcnemar_counts", "mcnemar_exact", "sign_test"]
