"""Types shared by the camera half: one camera frame with its optional steering label.

Conventions:

* ``image`` is an ``(H, W, 3)`` ``uint8`` array in **RGB** order (opencv reads BGR: sources convert), C-contiguous.
* Steering angles are in **radians**, positive = turning left (counter-clockwise seen from above), the sign
  convention of the Udacity data set and of ``lidarmt simulate``'s ``/lidarmt/steering_angle``.
* ``index`` is the frame's position in its source (time order); ``frame_id`` is the source's own name for it
  (the Udacity CSV's ``frame_id``, a file stem, or the message's timestamp in nanoseconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the largest steering angle (radians) a label or a prediction may have: far beyond any steering wheel, and its
#: square stays finite (1e308 radians overflowed the relations' squared errors)
MAX_ANGLE_RAD = 1e6


@dataclass(frozen=True, slots=True)
class CameraFrame:
    """One image of a source, in time order, with its steering label when the source has one."""

    image: np.ndarray  # (H, W, 3) uint8 RGB
    index: int
    frame_id: str
    stamp: float | None = None  # seconds since the Unix epoch, when known
    label: float | None = None  # steering angle in radians (None: the source has no labels)
    source: str = ""  # path of the source it came from
    detail: dict[str, Any] = field(default_factory=dict)  # e.g. {"file": "center/1479425441182877835.jpg"}

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    @property
    def width(self) -> int:
        return int(self.image.shape[1])
