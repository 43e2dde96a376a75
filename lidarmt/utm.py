"""WGS84 longitude/latitude <-> UTM, for Apollo's XML maps (whose points are longitude/latitude).

Transverse Mercator by Krüger's series in the third flattening n, to sixth order (Karney, "Transverse Mercator
with an accuracy of a few nanometers", J. Geodesy 85, 2011): well below a millimetre inside a UTM zone. UTM:
scale 0.9996 on the central meridian, false easting 500 km, false northing 0 (north) or 10,000 km (south).
"""

from __future__ import annotations

import math
import re

import numpy as np

WGS84_A = 6378137.0
WGS84_F = 1 / 298.257223563
K0 = 0.9996
FALSE_EASTING = 500_000.0
FALSE_NORTHING_SOUTH = 10_000_000.0

_N = WGS84_F / (2 - WGS84_F)
_E = 2 * math.sqrt(_N) / (1 + _N)  # first eccentricity
_A = WGS84_A / (1 + _N) * (1 + _N**2 / 4 + _N**4 / 64 + _N**6 / 256)
_ALPHA = (
    _N / 2 - 2 * _N**2 / 3 + 5 * _N**3 / 16 + 41 * _N**4 / 180 - 127 * _N**5 / 288 + 7891 * _N**6 / 37800,
    13 * _N**2 / 48 - 3 * _N**3 / 5 + 557 * _N**4 / 1440 + 281 * _N**5 / 630 - 1983433 * _N**6 / 1935360,
    61 * _N**3 / 240 - 103 * _N**4 / 140 + 15061 * _N**5 / 26880 + 167603 * _N**6 / 181440,
    49561 * _N**4 / 161280 - 179 * _N**5 / 168 + 6601661 * _N**6 / 7257600,
    34729 * _N**5 / 80640 - 3418889 * _N**6 / 1995840,
    212378941 * _N**6 / 319334400,
)
_BETA = (
    _N / 2 - 2 * _N**2 / 3 + 37 * _N**3 / 96 - _N**4 / 360 - 81 * _N**5 / 512 + 96199 * _N**6 / 604800,
    _N**2 / 48 + _N**3 / 15 - 437 * _N**4 / 1440 + 46 * _N**5 / 105 - 1118711 * _N**6 / 3870720,
    17 * _N**3 / 480 - 37 * _N**4 / 840 - 209 * _N**5 / 4480 + 5569 * _N**6 / 90720,
    4397 * _N**4 / 161280 - 11 * _N**5 / 504 - 830251 * _N**6 / 7257600,
    4583 * _N**5 / 161280 - 108847 * _N**6 / 3991680,
    20648693 * _N**6 / 638668800,
)


def zone_of(longitude: float) -> int:
    """The UTM zone (1..60) of a longitude in degrees."""
    return int(math.floor((longitude + 180.0) / 6.0)) % 60 + 1


def central_meridian(zone: int) -> float:
    return zone * 6.0 - 183.0


def parse_proj_zone(proj: str) -> tuple[int, bool] | None:
    """(zone, south) from a PROJ.4 string such as ``+proj=utm +zone=10 +ellps=WGS84``; None if not UTM or the
    zone is not one of UTM's 1..60 (the string comes from a map file: text, never trusted)."""
    if "+proj=utm" not in proj:
        return None
    m = re.search(r"\+zone=(\d{1,3})(?!\d)", proj)
    if not m or not 1 <= int(m.group(1)) <= 60:
        return None
    return int(m.group(1)), "+south" in proj


def utm_proj(zone: int, *, south: bool = False) -> str:
    """Apollo's projection string for a UTM zone."""
    return f"+proj=utm +zone={zone}{' +south' if south else ''} +ellps=WGS84 +datum=WGS84 +units=m +no_defs"


def wgs84_to_utm(lon, lat, zone: int, *, south: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Easting and northing (metres) of longitude/latitude (degrees) in a UTM zone."""
    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    phi = np.radians(lat)
    dlam = np.radians(lon - central_meridian(zone))
    s = np.sin(phi)
    t = np.sinh(np.arctanh(s) - _E * np.arctanh(_E * s))
    xi_p = np.arctan2(t, np.cos(dlam))
    eta_p = np.arctanh(np.sin(dlam) / np.sqrt(1 + t * t))
    xi = xi_p.copy()
    eta = eta_p.copy()
    for j, a in enumerate(_ALPHA, start=1):
        xi += a * np.sin(2 * j * xi_p) * np.cosh(2 * j * eta_p)
        eta += a * np.cos(2 * j * xi_p) * np.sinh(2 * j * eta_p)
    e = FALSE_EASTING + K0 * _A * eta
    n = K0 * _A * xi + (FALSE_NORTHING_SOUTH if south else 0.0)
    return e, n


def utm_to_wgs84(easting, northing, zone: int, *, south: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Longitude and latitude (degrees) of UTM coordinates (inverse of :func:`wgs84_to_utm`)."""
    xi = (np.asarray(northing, dtype=np.float64) - (FALSE_NORTHING_SOUTH if south else 0.0)) / (K0 * _A)
    eta = (np.asarray(easting, dtype=np.float64) - FALSE_EASTING) / (K0 * _A)
    xi_p = xi.copy()
    eta_p = eta.copy()
    for j, b in enumerate(_BETA, start=1):
        xi_p -= b * np.sin(2 * j * xi) * np.cosh(2 * j * eta)
        eta_p -= b * np.cos(2 * j * xi) * np.sinh(2 * j * eta)
    chi = np.arcsin(np.sin(xi_p) / np.cosh(eta_p))
    # conformal latitude -> geodetic latitude by Newton iteration on tau = tan(phi)
    tau_p = np.tan(chi)
    tau = tau_p.copy()
    for _ in range(8):
        sig = np.sinh(_E * np.arctanh(_E * tau / np.sqrt(1 + tau * tau)))
        tau_i = tau * np.sqrt(1 + sig * sig) - sig * np.sqrt(1 + tau * tau)
        dtau = (tau_p - tau_i) / np.sqrt(1 + tau_i * tau_i) * (1 + (1 - _E**2) * tau * tau) / (
            (1 - _E**2) * np.sqrt(1 + tau * tau)
        )
        tau = tau + dtau
    lat = np.degrees(np.arctan(tau))
    lon = central_meridian(zone) + np.degrees(np.arctan2(np.sinh(eta_p), np.cos(xi_p)))
    return lon, lat
