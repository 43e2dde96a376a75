"""Image transformations (DeepTest's simple ones, composite weather, mirror): named, parameterised, seeded.

    >>> from lidarmt.camera.transforms import get_transform, select
    >>> fog = get_transform("fog")
    >>> foggy = fog.apply(image, {"intensity": 0.75}, seed=3)      # (H, W, 3) uint8 RGB, a new array
    >>> [t.name for t in select("simple")]
    ['brightness', 'contrast', 'translation', 'scale', 'shear', 'rotation', 'blur']

Every transformation is a deterministic function of (image, parameters, seed), never modifies its input and
keeps the image size. ``t.grid`` lists the settings a campaign walks (DeepTest's Table 4 for the simple ones;
intensities 0.25/0.5/0.75/1.0 for weather), ``t.space`` the range of every parameter, ``t.relation`` what the
steering angle must do ("keep", or "negate" for the mirror). The built-ins also have
``resolve(params, seed)``: the complete setting used (weather style parameters drawn from the seed), for
journals.

Modules: :mod:`.simple` (DeepTest's seven and the mirror), :mod:`.weather` (fog, rain, snow, night),
:mod:`.optics` (sun glare, wet lens, dirty lens), :mod:`.registry` (names, families, plug-ins),
:mod:`.sheet` (a picture of every transformation at three strengths).
"""

from lidarmt.camera.transforms.base import Applied, ParamRange, Transform
from lidarmt.camera.transforms.registry import ENTRY_POINT_GROUP, available, get_transform, select

__all__ = ["ENTRY_POINT_GROUP", "Applied", "ParamRange", "Transform", "available", "get_transform", "select"]
