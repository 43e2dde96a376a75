"""The camera half of lidarmt: metamorphic testing of steering models (DeepTest, DeepRoad, TACTIC).

The data walks as in the LiDAR half: image source (:mod:`lidarmt.camera.sources`) ─► transformation
(:mod:`lidarmt.camera.transforms`) ─► steering model, the system under test (:mod:`lidarmt.camera.models`)
─► relation (:mod:`lidarmt.camera.relations`) ─► verdict ─► journal ─► reports and bundles, on the campaign
engine shared with the LiDAR fuzzer (:mod:`lidarmt.engine.campaign`).
"""

from lidarmt.camera.types import CameraFrame

__all__ = ["CameraFrame"]
