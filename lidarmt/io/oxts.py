"""KITTI raw drives' text formats: OXTS packets, timestamp files, and the pose an OXTS packet gives.

**OXTS packets** (``oxts/data/<NNNNNNNNNN>.txt``, one line of 30 numbers, KITTI's ``dataformat.txt``): ``lat lon alt
roll pitch yaw vn ve vf vl vu ax ay az af al au wx wy wz wf wl wu pos_accuracy vel_accuracy navstat numsats posmode
velmode orimode``. Latitude and longitude in degrees (WGS84), altitude in metres; roll (0 = level, positive = left
side up), pitch (0 = level, positive = front down) and yaw (heading, 0 = east, positive = counter-clockwise) in
radians. The IMU's axes are KITTI's vehicle axes: x forward, y left, z up.

**The pose of a packet**, world <- imu, in UTM metres (:mod:`lidarmt.utm`, the projection Apollo's maps use):
translation (easting, northing, altitude); rotation Rz(yaw + γ) · Ry(pitch) · Rx(roll), the rotation of KITTI's
devkit (``convertOxtsToPose.m``: R = Rz(yaw) Ry(pitch) Rx(roll) in the local east-north-up frame) turned by γ, the
angle from true north to UTM grid north at that point (the meridian convergence; 0 on the zone's central meridian,
about Δλ · sin φ elsewhere). Without γ a drive 0.6° of longitude off the central meridian at 49° N (Karlsruhe,
where KITTI was recorded) would be turned 0.45° against the map: 0.5 m at 60 m. The devkit's own Mercator
projection with a scale from the first packet is *not* used: it does not put a drive on an Apollo (UTM) map.

**Timestamp files** (``timestamps.txt``, ``timestamps_start.txt``, ``timestamps_end.txt``): one line per data file,
``YYYY-MM-DD HH:MM:SS.fffffffff``. KITTI does not say which time zone; they are read as UTC (only differences
between them matter here). A blank line is a missing time (NaN).
"""

from __future__ import annotations

import calendar
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt import utm
from lidarmt._paths import read_text
from lidarmt.io.errors import FormatError, RecordingError

OXTS_FIELDS: tuple[str, ...] = (
    "lat", "lon", "alt", "roll", "pitch", "yaw",
    "vn", "ve", "vf", "vl", "vu",
    "ax", "ay", "az", "af", "al", "au",
    "wx", "wy", "wz", "wf", "wl", "wu",
    "pos_accuracy", "vel_accuracy",
    "navstat", "numsats", "posmode", "velmode", "orimode",
)
N_OXTS = len(OXTS_FIELDS)  # 30
_N_FLOAT = 25  # the last five fields are integers (status, satellite count, modes)
UTM_LAT_LIMITS = (-80.0, 84.0)  # UTM's extent; beyond it is UPS, which Apollo does not use


# ----------------------------------------------------------------------------------------------- packets


def parse_oxts_line(line: str, *, where: str) -> np.ndarray:
    """The 30 numbers of one OXTS packet line (float64), checked: count, numbers, a finite position and
    attitude, latitude within UTM's 80° S..84° N and longitude within ±180°."""
    parts = line.split()
    if len(parts) != N_OXTS:
        raise FormatError(f"{where}: expected {N_OXTS} OXTS values (lat lon alt roll pitch yaw ... orimode), "
                          f"got {len(parts)}; is this a KITTI oxts/data file?")
    try:
        v = np.array([float(p) for p in parts], dtype=np.float64)
    except ValueError as err:
        raise FormatError(f"{where}: not a number in the OXTS packet {line.strip()[:80]!r}") from err
    bad = [OXTS_FIELDS[k] for k in range(6) if not math.isfinite(v[k])]
    if bad:
        raise FormatError(f"{where}: non-finite OXTS {', '.join(bad)}; the packet has no usable pose")
    lat, lon = v[0], v[1]
    if not UTM_LAT_LIMITS[0] <= lat <= UTM_LAT_LIMITS[1]:
        raise FormatError(f"{where}: OXTS latitude {lat:g}° is outside UTM's 80° S..84° N")
    if not -180.0 <= lon <= 180.0:
        raise FormatError(f"{where}: OXTS longitude {lon:g}° is outside -180..180°")
    return v


def read_oxts_file(path: str | os.PathLike[str]) -> np.ndarray:
    """The packet of one ``oxts/data/*.txt`` file (its first non-blank line), as 30 float64 values."""
    path = Path(path)
    text = read_text(path, what="OXTS packet", error=RecordingError)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise FormatError(f"{path}: empty OXTS packet file")
    return parse_oxts_line(lines[0], where=str(path))


def format_oxts_line(values: np.ndarray | list[float]) -> str:
    """One OXTS packet line from 30 values (floats written to round-trip exactly; the last five as integers)."""
    v = [float(x) for x in values]
    if len(v) != N_OXTS:
        raise ValueError(f"an OXTS packet has {N_OXTS} values, got {len(v)}")
    return " ".join([repr(x) for x in v[:_N_FLOAT]] + [str(int(x)) for x in v[_N_FLOAT:]])


# ----------------------------------------------------------------------------------------------- rotations


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Rz(yaw) · Ry(pitch) · Rx(roll): KITTI's OXTS attitude as a rotation matrix (3x3)."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def matrix_rpy(r: np.ndarray) -> tuple[float, float, float]:
    """(roll, pitch, yaw) of a rotation matrix, inverse of :func:`rpy_matrix` (pitch in [-π/2, π/2])."""
    r = np.asarray(r, dtype=np.float64)
    pitch = -math.asin(max(-1.0, min(1.0, float(r[2, 0]))))
    roll = math.atan2(float(r[2, 1]), float(r[2, 2]))
    yaw = math.atan2(float(r[1, 0]), float(r[0, 0]))
    return roll, pitch, yaw


def grid_convergence(lat: float, lon: float, zone: int, *, south: bool = False) -> float:
    """γ (radians): the angle, counter-clockwise, from UTM grid north to true north at (lat, lon).

    Measured on the projection itself (the grid direction of a 1e-5° step north), so it holds for any point of
    the zone; positive east of the central meridian in the northern hemisphere.
    """
    d = 1e-5
    e0, n0 = utm.wgs84_to_utm(lon, lat - d, zone, south=south)
    e1, n1 = utm.wgs84_to_utm(lon, lat + d, zone, south=south)
    return math.atan2(-float(e1 - e0), float(n1 - n0))


# ----------------------------------------------------------------------------------------------- poses


@dataclass(frozen=True, slots=True)
class UtmZone:
    """The UTM zone a drive's poses are expressed in (one zone per drive, so that poses do not jump)."""

    zone: int
    south: bool = False

    @classmethod
    def of(cls, lat: float, lon: float) -> UtmZone:
        """The zone that holds (lat, lon)."""
        return cls(utm.zone_of(lon), lat < 0)

    @property
    def name(self) -> str:
        return f"{self.zone}{'S' if self.south else 'N'}"

    @property
    def proj(self) -> str:
        """Apollo's projection string for the zone (what an Apollo map's header says)."""
        return utm.utm_proj(self.zone, south=self.south)

    def pose(self, packet: np.ndarray) -> np.ndarray:
        """4x4 world <- imu of an OXTS packet (its first six values are used)."""
        lat, lon, alt, roll, pitch, yaw = (float(x) for x in packet[:6])
        e, n = utm.wgs84_to_utm(lon, lat, self.zone, south=self.south)
        gamma = grid_convergence(lat, lon, self.zone, south=self.south)
        out = np.eye(4)
        out[:3, :3] = rpy_matrix(roll, pitch, yaw + gamma)
        out[:3, 3] = (float(e), float(n), alt)
        return out

    def packet(self, pose: np.ndarray) -> tuple[float, float, float, float, float, float]:
        """(lat, lon, alt, roll, pitch, yaw) of a pose world <- imu: the inverse of :meth:`pose`."""
        pose = np.asarray(pose, dtype=np.float64)
        lon, lat = utm.utm_to_wgs84(pose[0, 3], pose[1, 3], self.zone, south=self.south)
        lat, lon = float(lat), float(lon)
        roll, pitch, yaw = matrix_rpy(pose[:3, :3])
        yaw -= grid_convergence(lat, lon, self.zone, south=self.south)
        yaw = (yaw + math.pi) % (2 * math.pi) - math.pi
        return lat, lon, float(pose[2, 3]), roll, pitch, yaw


# ----------------------------------------------------------------------------------------------- timestamps

_STAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")


def parse_timestamp(text: str, *, where: str) -> float:
    """Seconds since the Unix epoch of ``YYYY-MM-DD HH:MM:SS.fffffffff`` (read as UTC)."""
    m = _STAMP.match(text.strip())
    if not m:
        raise FormatError(f"{where}: expected a time 'YYYY-MM-DD HH:MM:SS.fffffffff', got {text.strip()[:40]!r}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        raise FormatError(f"{where}: not a valid date and time: {text.strip()!r}")
    try:
        whole = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    except (ValueError, OverflowError) as err:
        raise FormatError(f"{where}: not a valid date and time: {text.strip()!r}") from err
    frac = m.group(7)
    return float(whole) + (int(frac) / 10 ** len(frac) if frac else 0.0)


def format_timestamp(t: float) -> str:
    """KITTI's ``YYYY-MM-DD HH:MM:SS.fffffffff`` of seconds since the Unix epoch (UTC)."""
    ns = round(t * 1e9)
    whole, frac = divmod(ns, 10**9)
    tm = time.gmtime(whole)
    return (f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d} "
            f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}.{frac:09d}")


def read_timestamps(path: str | os.PathLike[str]) -> np.ndarray:
    """The times of a KITTI ``timestamps*.txt`` file, one per line (float64 seconds; NaN for a blank line
    inside the file; trailing blank lines are ignored)."""
    path = Path(path)
    text = read_text(path, what="timestamps", error=RecordingError)
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out = np.full(len(lines), np.nan)
    for k, ln in enumerate(lines):
        if ln.strip():
            out[k] = parse_timestamp(ln, where=f"{path}:{k + 1}")
    return out
