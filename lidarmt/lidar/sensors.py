"""Sensor profiles: what the transformations, object insertion and the simulator need to know about a spinning
LiDAR, one profile per sensor model, from its datasheet (docs/sensors.md states every number and its source).

    from lidarmt.lidar.sensors import get_sensor, sensor_names
    vlp16 = get_sensor("vlp16")
    vlp16.rings, vlp16.elevations_deg, vlp16.noise_floor, vlp16.reflectance(points["intensity"])

A profile holds:

* the beams: elevation table in degrees, ascending (index = ring, ring 0 the lowest laser, the ROS drivers'
  order), firings per revolution at the rotation rate (the azimuth resolution), the rotation rate;
* ranging: minimum and maximum range, range accuracy (1 sigma), wavelength;
* the **intensity calibration**: the reading of a Lambertian target of reflectance 1 (``intensity_scale``), so a
  point's reflectance is ``intensity / intensity_scale`` (clipped to 0..1; a retro-reflector reads above the
  scale on the Velodyne and Ouster units), and the **detection threshold** (``noise_floor``), the received power
  of the datasheet's weakest specified return: reflectance ``floor_reflectance`` at ``floor_range_m``, i.e.
  ``floor_reflectance / (pi floor_range_m^2)`` in units of C_A P_0 2/c (1/(m^2 sr)), the unit of the weather
  models (:mod:`lidarmt.lidar.transforms.weather`).

The registry: built-ins by name (:data:`BUILTINS`) and plug-ins, any package declaring an entry point in the
group ``lidarmt.sensor`` that names a :class:`SensorProfile` (or a callable returning one). ``hdl64`` is the
default everywhere: the KITTI car's HDL-64E, whose measured elevations the project used before profiles existed.
A profile is recorded by name in a campaign's configuration (journal header, bundles), so a replay applies the
same one; a plug-in profile must be installed where the journal is replayed.

Sources (datasheets as the manufacturers published them; versions named in each profile's ``sources``):
Velodyne HDL-64E S2 datasheet and the KITTI car's sweeps; Velodyne HDL-32E datasheet (97-0038) and user manual
(63-9113); Velodyne VLP-16 datasheet (63-9229) and user manual (63-9243); Velodyne VLS-128 / Alpha Prime user
manual (63-9480) with Apollo's nominal calibration file ``velodyne128_VLS_calibration.yaml``; Ouster OS1 datasheet
(Gen 1, OS1-64).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lidarmt.errors import ArgumentError

ENTRY_POINT_GROUP = "lidarmt.sensor"
DEFAULT_SENSOR = "hdl64"


class UnknownSensorError(ArgumentError):
    """``--sensor NAME`` names no profile (one line listing the known ones), or a plug-in is malformed."""


#: The elevations of the KITTI car's HDL-64E as seen in its sweeps: per ring, the median over the 7 KITTI
#: frames of the median atan2(z, hypot(x, y)) of the ring's points beyond 3 m (rings recovered from the
#: point order; measured with benchmarks/bench_sim_realism.py). They sit 0.4-1.0 deg above the datasheet
#: values and are irregularly spaced, as a calibrated unit is; on flat ground they reproduce where the real
#: rings fall.
KITTI_ELEVATIONS_DEG = np.array([
    -23.62, -23.12, -22.59, -21.96, -21.51, -21.12, -20.63, -20.04, -19.53, -18.98, -18.52, -18.11, -17.61,
    -17.15, -16.59, -16.07, -15.45, -15.09, -14.58, -13.95, -13.41, -12.87, -12.41, -11.97, -11.54, -11.09,
    -10.65, -10.09, -9.62, -9.21, -8.78, -8.24, -7.6, -7.27, -6.92, -6.57, -6.29, -6.0, -5.75, -5.42, -5.04,
    -4.8, -4.48, -4.17, -3.8, -3.52, -3.16, -2.9, -2.48, -2.14, -1.79, -1.42, -1.08, -0.77, -0.37, 0.0, 0.36,
    0.66, 1.04, 1.34, 1.74, 2.02, 2.34, 2.58,
])

#: The VLS-128's 128 nominal elevations (degrees, ascending): the user manual's laser table as Apollo's
#: ``modules/drivers/lidar/velodyne/params/velodyne128_VLS_calibration.yaml`` carries it (``vert_correction`` in
#: radians, converted and rounded to 0.001 deg): 0.11 deg apart from -6.39 to +4.83 deg (the band around the
#: horizon), widening to -25 and +15 deg at the edges.
VLS128_ELEVATIONS_DEG = np.array([
    -25.0, -19.582, -16.042, -13.565, -11.742, -10.346, -9.244, -8.352, -7.65, -7.15, -6.85, -6.65, -6.5, -6.39,
    -6.28, -6.17, -6.06, -5.95, -5.84, -5.73, -5.62, -5.51, -5.4, -5.29, -5.18, -5.07, -4.96, -4.85, -4.74, -4.63,
    -4.52, -4.41, -4.3, -4.19, -4.08, -3.97, -3.86, -3.75, -3.64, -3.53, -3.42, -3.31, -3.2, -3.09, -2.98, -2.87,
    -2.76, -2.65, -2.54, -2.43, -2.32, -2.21, -2.1, -1.99, -1.88, -1.77, -1.66, -1.55, -1.44, -1.33, -1.22, -1.11,
    -1.0, -0.89, -0.78, -0.67, -0.56, -0.45, -0.34, -0.23, -0.12, -0.01, 0.1, 0.21, 0.32, 0.43, 0.54, 0.65, 0.76,
    0.87, 0.98, 1.09, 1.2, 1.31, 1.42, 1.53, 1.64, 1.75, 1.86, 1.97, 2.08, 2.19, 2.3, 2.41, 2.52, 2.63, 2.74, 2.85,
    2.96, 3.07, 3.18, 3.29, 3.4, 3.51, 3.62, 3.73, 3.84, 3.95, 4.06, 4.17, 4.28, 4.39, 4.5, 4.61, 4.72, 4.83, 4.98,
    5.18, 5.43, 5.73, 6.08, 6.48, 6.98, 7.58, 8.43, 9.7, 11.75, 15.0,
])


@dataclass(frozen=True, eq=False)
class SensorProfile:
    """One spinning LiDAR as the transformations and the simulator model it (see the module's docstring)."""

    name: str  # registry name, e.g. "vlp16"
    model: str  # e.g. "Velodyne VLP-16 (Puck)"
    elevations_deg: tuple[float, ...]  # ascending; index = ring
    rate_hz: float  # rotation rate the profile describes
    azimuth_steps: int  # firings per revolution at rate_hz
    range_accuracy_m: float  # 1 sigma
    min_range_m: float
    max_range_m: float
    wavelength_nm: float
    intensity_scale: float  # the intensity a Lambertian target of reflectance 1 reads (the calibration)
    floor_reflectance: float  # the datasheet's weakest specified return: this reflectance ...
    floor_range_m: float  # ... at this range
    sources: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        el = np.asarray(self.elevations_deg, dtype=np.float64)
        if el.ndim != 1 or len(el) < 1 or not np.all(np.isfinite(el)) or np.any(np.diff(el) <= 0):
            raise UnknownSensorError(f"sensor profile {self.name!r}: elevations must be finite and strictly "
                                     "ascending (index = ring)")
        if not (0 < self.min_range_m < self.max_range_m and self.azimuth_steps >= 1 and self.rate_hz > 0
                and self.intensity_scale > 0 and self.floor_reflectance > 0 and self.floor_range_m > 0):
            raise UnknownSensorError(f"sensor profile {self.name!r}: ranges, rate, azimuth steps, intensity scale "
                                     "and detection threshold must be positive (min range < max range)")

    # ------------------------------------------------------------------------------------------- beams

    @property
    def rings(self) -> int:
        return len(self.elevations_deg)

    def elevations(self) -> np.ndarray:
        """float64 elevations in degrees, ascending (index = ring)."""
        return np.asarray(self.elevations_deg, dtype=np.float64)

    @property
    def azimuth_resolution_deg(self) -> float:
        return 360.0 / self.azimuth_steps

    @property
    def vertical_fov_deg(self) -> tuple[float, float]:
        return float(self.elevations_deg[0]), float(self.elevations_deg[-1])

    def ring_of_elevation(self, elevation_deg: np.ndarray) -> np.ndarray:
        """int64 nearest ring of each elevation (degrees)."""
        table = self.elevations()
        mids = (table[1:] + table[:-1]) / 2
        return np.searchsorted(mids, elevation_deg).astype(np.int64)

    # ------------------------------------------------------------------------------------------- calibration

    @property
    def noise_floor(self) -> float:
        """The detection threshold, 1/(m^2 sr): the power of the weakest specified return."""
        return self.floor_reflectance / (math.pi * self.floor_range_m**2)

    def reflectance(self, intensity: np.ndarray) -> np.ndarray:
        """float64 reflectance 0..1 of each reading (a retro-reflector's reading above the scale gives 1)."""
        return np.clip(np.asarray(intensity, dtype=np.float64) / self.intensity_scale, 0.0, 1.0)

    def intensity_of_power(self, power: np.ndarray, r: np.ndarray) -> np.ndarray:
        """float32 reading of an echo of power ``power`` (1/(m^2 sr)) from range ``r``: the reading of the
        Lambertian reflectance that would return it, ``intensity_scale min(1, pi P R^2)``."""
        return (self.intensity_scale * np.minimum(1.0, math.pi * power * r * r)).astype(np.float32)

    def scaled_intensity(self, value_on_255: float) -> float:
        """A reading given on the 0..255 scale of a reflectance x 255 sensor (the KITTI HDL-64E's), on this
        profile's scale (exactly the same number for a profile whose scale is 255)."""
        return value_on_255 * self.intensity_scale / 255.0

    # ------------------------------------------------------------------------------------------- record

    def describe(self) -> str:
        lo, hi = self.vertical_fov_deg
        return (f"{self.name}: {self.model}, {self.rings} beams {lo:+.2f}..{hi:+.2f} deg, "
                f"{self.azimuth_resolution_deg:.3f} deg at {self.rate_hz:g} Hz, {self.min_range_m:g}-"
                f"{self.max_range_m:g} m, {self.wavelength_nm:g} nm")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "rings": self.rings,
                "elevations_deg": [float(e) for e in self.elevations_deg], "rate_hz": self.rate_hz,
                "azimuth_steps": self.azimuth_steps, "range_accuracy_m": self.range_accuracy_m,
                "min_range_m": self.min_range_m, "max_range_m": self.max_range_m,
                "wavelength_nm": self.wavelength_nm, "intensity_scale": self.intensity_scale,
                "floor_reflectance": self.floor_reflectance, "floor_range_m": self.floor_range_m,
                "noise_floor": self.noise_floor, "sources": list(self.sources)}

    def __repr__(self) -> str:
        return f"<sensor profile {self.describe()}>"


def _uniform(lo: float, hi: float, n: int) -> tuple[float, ...]:
    return tuple(float(v) for v in np.round(np.linspace(lo, hi, n), 4))


HDL64 = SensorProfile(
    name="hdl64", model="Velodyne HDL-64E S2 (the KITTI car's)",
    elevations_deg=tuple(float(v) for v in KITTI_ELEVATIONS_DEG), rate_hz=10.0, azimuth_steps=2083,
    range_accuracy_m=0.02, min_range_m=0.9, max_range_m=120.0, wavelength_nm=905.0, intensity_scale=255.0,
    floor_reflectance=0.10, floor_range_m=50.0,
    sources=("Velodyne HDL-64E S2 datasheet (2008-2010): 64 lasers, +2 to -24.8 deg, 0.09 deg azimuth, "
             "5-15 Hz, range 50 m pavement (0.10) / 120 m cars and foliage (0.80), accuracy < 2 cm (1 sigma), "
             "905 nm",
             "elevations: measured on the 7 KITTI object frames (benchmarks/bench_sim_realism.py)",
             "intensity: KITTI stores a reflectance 0..1, lidarmt's reader multiplies it by 255"),
    notes="2,083 firings per turn at 10 Hz (0.173 deg), as the simulator casts; minimum range 0.9 m as Apollo's "
          "velodyne driver configures it")

HDL32 = SensorProfile(
    name="hdl32", model="Velodyne HDL-32E",
    elevations_deg=tuple(float(v) for v in np.round((-92.0 + 4.0 * np.arange(32)) / 3.0, 2)), rate_hz=10.0,
    azimuth_steps=2170, range_accuracy_m=0.02, min_range_m=1.0, max_range_m=100.0, wavelength_nm=903.0,
    intensity_scale=100.0, floor_reflectance=0.80, floor_range_m=100.0,
    sources=("Velodyne HDL-32E datasheet 97-0038 (Rev. M): 32 channels, +10.67 to -30.67 deg (1.33 deg), "
             "0.08-0.33 deg azimuth at 5-20 Hz, range up to 100 m, accuracy +-2 cm typical, 903 nm",
             "Velodyne HDL-32E user manual 63-9113: a firing cycle every 46.08 us (2,170 per turn at 10 Hz); "
             "calibrated reflectivity 0-100 for diffuse targets, 101-255 for retro-reflectors"),
    notes="the datasheet gives its 100 m range without a reflectance; lidarmt reads it as the HDL-64E datasheet's "
          "bright-target figure (0.80) and takes that as the detection threshold")

VLP16 = SensorProfile(
    name="vlp16", model="Velodyne VLP-16 (Puck)",
    elevations_deg=tuple(float(v) for v in range(-15, 16, 2)), rate_hz=10.0, azimuth_steps=1808,
    range_accuracy_m=0.03, min_range_m=0.5, max_range_m=100.0, wavelength_nm=903.0, intensity_scale=100.0,
    floor_reflectance=0.80, floor_range_m=100.0,
    sources=("Velodyne VLP-16 datasheet 63-9229 (Rev. K): 16 channels, +-15 deg (2 deg), 0.1-0.4 deg azimuth at "
             "5-20 Hz, range up to 100 m, accuracy +-3 cm typical, 903 nm",
             "Velodyne VLP-16 user manual 63-9243: a firing cycle every 55.296 us (1,808 per turn at 10 Hz); "
             "calibrated reflectivity 0-100 for diffuse targets, 101-255 for retro-reflectors"),
    notes="the datasheet gives its 100 m range without a reflectance; lidarmt reads it as the HDL-64E datasheet's "
          "bright-target figure (0.80) and takes that as the detection threshold; minimum range 0.5 m as the "
          "ROS velodyne driver's VLP-16 default")

VLS128 = SensorProfile(
    name="vls128", model="Velodyne VLS-128 (Alpha Prime)",
    elevations_deg=tuple(float(v) for v in VLS128_ELEVATIONS_DEG), rate_hz=10.0, azimuth_steps=1876,
    range_accuracy_m=0.03, min_range_m=1.0, max_range_m=245.0, wavelength_nm=903.0, intensity_scale=100.0,
    floor_reflectance=0.10, floor_range_m=220.0,
    sources=("Velodyne Alpha Prime (VLS-128) datasheet 63-9679: 128 channels, +15 to -25 deg, 0.11 deg finest "
             "vertical resolution, 0.1-0.4 deg azimuth at 5-20 Hz, range up to 245 m, accuracy +-3 cm, 903 nm",
             "elevation table: the VLS-128 user manual 63-9480 as Apollo's velodyne128_VLS_calibration.yaml "
             "(ApolloAuto/apollo, modules/drivers/lidar/velodyne/params) carries it",
             "VLS-128 user manual: a firing sequence every 53.3 us (1,876 per turn at 10 Hz); calibrated "
             "reflectivity 0-100 diffuse, 101-255 retro-reflective"),
    notes="detection threshold: reflectance 0.10 at 220 m, the Alpha Prime's stated range for 10 % targets as "
          "lidarmt recalls it (not checked against the PDF here); minimum range 1 m, unverified")

OS1_64 = SensorProfile(
    name="os1-64", model="Ouster OS1-64 (Gen 1)",
    elevations_deg=_uniform(-16.6, 16.6, 64), rate_hz=10.0, azimuth_steps=1024, range_accuracy_m=0.03,
    min_range_m=0.8, max_range_m=120.0, wavelength_nm=850.0, intensity_scale=100.0, floor_reflectance=0.10,
    floor_range_m=40.0,
    sources=("Ouster OS1 datasheet (Gen 1, OS1-64/16): +16.6 to -16.6 deg (33.2 deg) over 64 beams, 512/1024/"
             "2048 columns at 10 or 20 Hz, range 0.8-120 m at 80 % and 0.8-40 m at 10 % Lambertian reflectivity, "
             "repeatability +-3 cm at SNR 100 (1 sigma), 850 nm (later revisions: 865 nm)",
             "Ouster software user manual (firmware 2.x): the reflectivity channel is calibrated, 0-100 for "
             "Lambertian targets, 101-255 for retro-reflectors"),
    notes="elevations uniform (0.527 deg apart), the nominal table; each unit's own beam_altitude_angles differ "
          "slightly; 1024 x 10 Hz, the default mode; intensity here is Ouster's calibrated reflectivity channel, "
          "not its photon-count 'intensity' channel")

#: the built-in profiles by name
BUILTINS: dict[str, SensorProfile] = {p.name: p for p in (HDL64, HDL32, VLP16, VLS128, OS1_64)}


def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def sensor_names() -> list[str]:
    """Built-in profile names, then installed plug-ins'."""
    return list(BUILTINS) + sorted(n for n in _plugins() if n not in BUILTINS)


def get_sensor(name: str | SensorProfile | None = None) -> SensorProfile:
    """The profile called ``name`` (None: :data:`DEFAULT_SENSOR`); a profile is returned as is. An unknown name
    is one line listing the known ones."""
    if isinstance(name, SensorProfile):
        return name
    key = DEFAULT_SENSOR if name is None else str(name).strip().lower()
    if key in BUILTINS:
        return BUILTINS[key]
    plugins = _plugins()
    if key not in plugins:
        raise UnknownSensorError(f"unknown sensor {name!r}; known: {', '.join(sensor_names())}")
    try:
        obj = plugins[key].load()
    except Exception as err:  # a broken plug-in is one line, not a traceback
        raise UnknownSensorError(f"sensor plug-in {key!r} cannot be loaded: {type(err).__name__}: {err}") from err
    if callable(obj) and not isinstance(obj, SensorProfile):
        obj = obj()
    if not isinstance(obj, SensorProfile):
        raise UnknownSensorError(f"sensor plug-in {key!r} gave a {type(obj).__name__}, not a "
                                 "lidarmt.lidar.sensors.SensorProfile")
    return obj


def sensor_of(context: Any) -> SensorProfile:
    """The profile a transformation applies: ``context.sensor`` (a name or a profile) when given, else hdl64."""
    return get_sensor(getattr(context, "sensor", None) if context is not None else None)


def sensor_record(name: str | None) -> Mapping[str, str]:
    """What a campaign configuration records of its sensor: nothing for the default (so journals and bundles
    written before profiles existed read the same), ``{"sensor": name}`` otherwise."""
    key = get_sensor(name).name
    return {} if key == DEFAULT_SENSOR else {"sensor": key}
