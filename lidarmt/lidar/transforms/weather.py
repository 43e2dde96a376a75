"""Weather on real sweeps: fog after Hahner et al. (ICCV 2021), rain and snow as attenuation plus the echoes of
drops and flakes drawn from their published size distributions (Marshall and Palmer 1948; Gunn and Marshall
1958) with LISA's particle model (Kilic et al. 2021, checked against its released code).
docs/lidar-transforms.md states every constant.

Shared sensor model (the context's sensor profile, :mod:`lidarmt.lidar.sensors`, default ``hdl64``, the KITTI
car's Velodyne HDL-64E; powers are in units of C_A P_0 2/c, i.e. 1/(m^2 sr)), for fog, rain and snow alike:

* a hard target of reflectance rho at range R returns beta0 exp(-2 alpha R) / R^2 with beta0 = rho / pi;
  rho is read from the point's intensity through the profile's **intensity calibration** (rho = intensity /
  intensity_scale: KITTI's 0..255 = reflectance 0..1 x 255; Velodyne's and Ouster's calibrated reflectivity reads
  0..100 for diffuse targets), at least 0.10 (the HDL-64E datasheet's pavement), and at least what reaches the
  noise floor in clear air (the point was reported, so beta0 >= floor x R^2);
* the noise floor (detection threshold) is the power of the profile's datasheet's weakest specified return: for
  the HDL-64E pavement (rho = 0.10) at 50 m, 0.10 / (pi 50^2) = 1.27e-5 (its other figure, cars and foliage
  rho = 0.80 at 120 m, gives 1.77e-5);
* the sensor reports the strongest echo of each ray (the default strongest-return mode); an echo of power P at
  range R is given the intensity of the reflectance that would return it, intensity_scale min(1, pi P R^2).

Rays that gave no return in the source (sky) are not simulated: their directions are not in the sweep.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

import lidarmt.lidar.transforms._weather_kernels as K
from lidarmt.lidar.sensors import HDL64, SensorProfile, sensor_of
from lidarmt.lidar.transforms._common import Builtin, ranges_of, scale_along_ray
from lidarmt.lidar.transforms.base import Param, make_change

C = 299_792_458.0  # m/s
TAU_H = 20e-9  # half-power pulse width, s (Hahner et al. 2021)
PULSE_LEN = C * TAU_H  # c tau_H: the pulse's length in range, 6.0 m
R1, R2 = 0.9, 1.0  # crossover of transmitter and receiver fields of view, m (Hahner et al. 2021): where the
# overlap xi starts (R1, for every setting) and where Hahner et al. take it complete (their R2; fog's overlap_m = 1)
OVERLAP_M = 9.5  # m: fog's default complete overlap (the nearest focus of an HDL-64E's upper-block receivers;
# docs/sensors.md "The near range")
ECHO_MIN_RANGE = 1.0  # m: a fog return is never reported nearer (the HDL-64E reports nothing nearer than ~0.9 m)
# Hahner et al.'s code fixes the hard target's differential reflectivity at gamma / pi = 1e-6 / pi for every point
# and compares in intensity units with the echo's time integral: not used (see Fog and docs/sensors.md)
HAHNER_BETA0 = 1e-6 / math.pi
NOISE_FLOOR = HDL64.noise_floor  # 1/(m^2 sr): pavement at 50 m (HDL-64E datasheet); other profiles: their own
ECHO_DR = 0.02  # m: the fog integral's step
ECHO_R0_MAX = 30.0  # m: beyond, the target no longer cuts the fog's echo (its peak lies within ~4 m)
BEAM_DIVERGENCE = 3e-3  # rad: the beam's diameter is tan(3 mrad) x range (LISA, Kilic et al. 2021)
FRESNEL_WATER = ((1.328 - 1) / (1.328 + 1)) ** 2  # normal-incidence reflectance of water at 905 nm: 0.0198
FRESNEL_ICE = ((1.3031 - 1) / (1.3031 + 1)) ** 2  # ... of ice (n = 1.3031, as LISA): 0.0173
PARTICLE_R_MIN = 1.5  # m: nearest particle echo (LISA's minimum range of a bistatic sensor)
RHO_MIN = 0.10  # darkest reflectance assumed for a reported return: the datasheet's pavement (KITTI reads 0 on
# dark car paint that the sensor sees well: specular, little diffuse light, yet detected)


def _finite_ranges(points: np.ndarray) -> np.ndarray:
    """Ranges, 0 for a point with a non-finite coordinate or intensity (readers drop those; here they are lost)."""
    r = ranges_of(points)
    ok = np.isfinite(r) & np.isfinite(points["intensity"])
    return np.where(ok, r, 0.0)


def _reflectance_beta0(points: np.ndarray, r: np.ndarray, profile: SensorProfile = HDL64) -> np.ndarray:
    """Each point's differential reflectivity beta0 = rho / pi, rho from its intensity by the profile's
    calibration (at least RHO_MIN), and at least what reaches the profile's noise floor at its range."""
    rho = np.clip(points["intensity"].astype(np.float64) / profile.intensity_scale, RHO_MIN, 1.0)
    return np.maximum(rho / math.pi, profile.noise_floor * r * r)


def _intensity(power: np.ndarray, r: np.ndarray, profile: SensorProfile = HDL64) -> np.ndarray:
    return profile.intensity_of_power(power, r)


@lru_cache(maxsize=32)
def _echo_table(alpha: float, overlap_m: float = R2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fog's echo per target range (see :func:`~lidarmt.lidar.transforms._weather_kernels.fog_echo_table`)
    with the fields of view overlapping from R1 = 0.9 m, completely from ``overlap_m``; its reported ranges are
    kept at or beyond ECHO_MIN_RANGE (the pulse's own length would otherwise place part of the echo nearer than
    any return the HDL-64E reports)."""
    r0_max = max(ECHO_R0_MAX, overlap_m + 4 * PULSE_LEN)
    peak, lo, hi = K.fog_echo_table(alpha, dr=ECHO_DR, r0_max=r0_max, pulse_len=PULSE_LEN, r1=R1, r2=overlap_m)
    return peak, np.maximum(lo, ECHO_MIN_RANGE), np.maximum(hi, ECHO_MIN_RANGE)


def fog_coefficients(visibility_m: float) -> tuple[float, float]:
    """(alpha, beta) of a fog of meteorological optical range ``visibility_m``: the attenuation coefficient
    alpha = ln(20) / V (Koschmieder, 5 % contrast threshold; 1/m) and the backscattering coefficient
    beta = 0.046 / V (Rasshofer et al. 2011; 1/(m sr)), as Hahner et al. use them."""
    return math.log(20.0) / visibility_m, 0.046 / visibility_m


class Fog(Builtin):
    name = "fog"
    family = "weather"
    summary = "attenuation exp(-2 alpha R) and fog backscatter (Hahner et al. 2021), calibrated per sensor"
    params = (Param("visibility_m", "m", 10.0, 2000.0, "meteorological optical range (visibility)"),
              Param("overlap_m", "m", 1.0, 30.0, "range from which the sensor's transmitter and receiver fields of "
                    "view overlap completely (from 0.9 m they start to); 1: Hahner et al.'s choice",
                    recorded_default=R2))
    doc = ("Fog after Hahner et al. (ICCV 2021): alpha = ln(20)/V, beta = 0.046/V; every return's intensity "
           "attenuated by exp(-2 alpha R); the fog's echo (the pulse sin^2, tau_H = 20 ns, convolved with the fog's "
           "impulse response exp(-2 alpha R') xi(R')/R'^2 in front of the target, the overlap xi rising linearly "
           "from 0 at 0.9 m to 1 at overlap_m: 9.5 m by default, the nearest focus of the HDL-64E's upper-block "
           "receivers; Hahner et al. take 1.0 m, which makes the first metre of fog echo as strongly as a dark "
           "car at 15 m in 300 m fog) has the power beta x its peak; the return's power is (rho/pi) "
           "exp(-2 alpha R0)/R0^2 with rho the point's reflectance through the sensor profile's intensity calibration (intensity / "
           "intensity_scale: KITTI 255, Velodyne and Ouster calibrated reflectivity 100). The stronger echo is "
           "reported when it reaches the profile's detection threshold (HDL-64E: pavement at 50 m), else the "
           "return is lost. A scattered return lies on the same ray, at a range uniform in the part of the fog's "
           "echo above half its peak (and at least 1.0 m), with the intensity of the reflectance that would return "
           "its power. Calibration: Hahner et al.'s code instead fixes every target's reflectivity at 1e-6/pi and "
           "compares in intensity units (their issues #7/#11: almost every KITTI point becomes fog); here both "
           "echoes are powers in the same units (docs/sensors.md, checked on KITTI against an independent "
           "integral).")
    levels = {"light": {"visibility_m": 300.0, "overlap_m": OVERLAP_M},
              "moderate": {"visibility_m": 100.0, "overlap_m": OVERLAP_M},
              "heavy": {"visibility_m": 50.0, "overlap_m": OVERLAP_M}}

    def _apply(self, frame, p, rng, context):
        prof = sensor_of(context)
        v, overlap = p["visibility_m"], p["overlap_m"]
        alpha, beta = fog_coefficients(v)
        pts = frame.points
        r = _finite_ranges(pts)
        u = rng.random(len(pts))
        peak, lo, hi = _echo_table(alpha, overlap)
        floor = prof.noise_floor
        action, new_r, power = K.fog_decide(r, _reflectance_beta0(pts, r, prof), u, peak, lo, hi, ECHO_DR, alpha,
                                            beta, floor)
        return _weather_change(frame, r, action, new_r, _intensity(power, new_r, prof), alpha, {
            "visibility_m": v, "overlap_m": overlap, "alpha": alpha, "beta": beta, "noise_floor": floor,
            **_sensor_info(prof)})


def _sensor_info(prof: SensorProfile) -> dict[str, str]:
    """The profile's name in a change's info, for any but the default (whose info reads as before profiles)."""
    return {} if prof.name == HDL64.name else {"sensor": prof.name}


def _weather_change(frame, r, action, new_r, scatter_intensity, alpha, info):
    """The change of a weather model: LOST points dropped, SCATTER points moved to ``new_r`` on their ray with
    ``scatter_intensity``, KEEP points attenuated by exp(-2 alpha R)."""
    pts = frame.points
    keep = action != K.LOST
    factor = np.where(r > 0, new_r / np.where(r > 0, r, 1.0), 1.0)
    out = scale_along_ray(pts, factor)
    hard = action == K.KEEP
    out["intensity"][hard] = (pts["intensity"][hard].astype(np.float64) * np.exp(-2 * alpha * r[hard])).astype(
        np.float32)
    sc = action == K.SCATTER
    out["intensity"][sc] = scatter_intensity[sc].astype(np.float32)
    info = {**info, "n_scattered": int(np.count_nonzero(sc)), "n_lost": int(np.count_nonzero(~keep)),
            "n_kept": int(np.count_nonzero(hard))}
    return make_change(frame, keep, out[keep], info=info)


# ----------------------------------------------------------------------------------------------- rain and snow


def beam_width(r: np.ndarray | float) -> np.ndarray | float:
    """Beam diameter at range r, m (LISA: tan(divergence) x r)."""
    return math.tan(BEAM_DIVERGENCE) * r


class _Precipitation(Builtin):
    """Attenuation plus particle echoes, as LISA (Kilic et al. 2021) models them: particles of diameter D (mm) with
    density N0 exp(-Lambda D) per m^3 and mm; extinction of large particles (efficiency 2) alpha = 2 (pi/4)
    int D^2 N(D) dD = pi N0 / Lambda^3 (x 1e-6 m^2/mm^2); a particle at range r returns the power of a target of
    reflectance R_F min((D / D_b(r))^2, 1) (its Fresnel reflectance times the share of the beam it covers, D_b the
    beam's diameter), i.e. R_F min(...) exp(-2 alpha r) / (pi r^2) in this module's units. Only particles that
    reach the noise floor are drawn (they alone can be reported): per ray, a Poisson number with the mean over the
    beam's cone in front of the target, positions by inverse CDF, sizes D_min(r) + Exp(Lambda) (the exponential
    is memoryless)."""

    rate_param = "rate_mm_h"
    fresnel: float

    def size_distribution(self, rate: float) -> tuple[float, float]:  # (N0 per m^3 mm, Lambda per mm)
        raise NotImplementedError

    def particle_power(self, d_m: np.ndarray, r: np.ndarray, alpha: float) -> np.ndarray:
        """Received power (1/(m^2 sr)) of particles of diameter ``d_m`` (m) at ranges ``r``."""
        cover = np.minimum((d_m / beam_width(r)) ** 2, 1.0)
        return self.fresnel / math.pi * cover * np.exp(-2 * alpha * r) / (r * r)

    def _tables(self, rate: float, floor: float = NOISE_FLOOR):
        n0, lam = self.size_distribution(rate)
        alpha = math.pi * n0 / lam**3 * 1e-6
        dr = 0.02
        r = np.arange(PARTICLE_R_MIN, 130.0 + dr, dr)
        db = beam_width(r)
        # detectable: (R_F / pi) (D / D_b)^2 exp(-2 alpha r) / r^2 >= floor, with D <= D_b (beyond, the particle
        # covers the beam and returns no more): D >= D_min(r); none is detectable where D_min > D_b
        d_min = db * r * np.exp(alpha * r) * np.sqrt(math.pi * floor / self.fresnel)
        d_min_mm = np.where(d_min <= db, d_min, np.inf) * 1e3
        area = math.pi * db**2 / 4
        dens = np.where(np.isfinite(d_min_mm), area * (n0 / lam) * np.exp(-lam * np.minimum(d_min_mm, 1e6)), 0.0)
        cum = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * dr)])
        return alpha, r, np.where(np.isfinite(d_min_mm), d_min_mm, 1e6), cum, lam

    def _apply(self, frame, p, rng, context):
        prof = sensor_of(context)
        floor = prof.noise_floor
        rate = p[self.rate_param]
        alpha, rgrid, d_min_mm, cum, lam = self._tables(rate, floor)
        pts = frame.points
        r0 = _finite_ranges(pts)
        n = len(pts)
        # particles in front of the target only (a particle within 10 cm of it merges with its echo)
        mean = np.interp(np.maximum(r0 - 0.1, PARTICLE_R_MIN), rgrid, cum)
        counts = rng.poisson(mean)
        ray = np.repeat(np.arange(n, dtype=np.int64), counts)
        u = rng.random(len(ray))
        e = rng.standard_exponential(len(ray))
        pr = np.interp(u * mean[ray], cum, rgrid)  # inverse CDF (cum is non-decreasing)
        d = (np.interp(pr, rgrid, d_min_mm) + e / lam) * 1e-3  # m
        ppow = self.particle_power(d, pr, alpha)
        best = K.strongest_per_ray(ray, ppow, n)
        beta0 = _reflectance_beta0(pts, r0, prof)
        with np.errstate(divide="ignore", invalid="ignore"):
            hard = np.where(r0 > 0, beta0 * np.exp(-2 * alpha * r0) / (r0 * r0), 0.0)
        has = best >= 0
        bp = np.where(has, ppow[np.maximum(best, 0)] if len(ppow) else 0.0, 0.0)
        scatter = has & (bp > hard) & (bp >= floor)
        action = np.where(scatter, K.SCATTER, np.where(hard >= floor, K.KEEP, K.LOST)).astype(np.int8)
        new_r = np.where(scatter, pr[np.maximum(best, 0)] if len(pr) else r0, r0)
        inten = np.where(scatter, _intensity(bp, new_r, prof), 0.0)
        return _weather_change(frame, r0, action, new_r, inten, alpha, {
            self.rate_param: rate, "alpha": alpha, "n_particles": len(ray), "noise_floor": floor,
            **_sensor_info(prof)})


class Rain(_Precipitation):
    name = "rain"
    family = "weather"
    summary = "attenuation and drop echoes, Marshall-Palmer drop sizes"
    params = (Param("rate_mm_h", "mm/h", 0.1, 200.0, "rain rate"),)
    doc = ("Rain: drops with the Marshall-Palmer (1948) size distribution N(D) = 8000 exp(-4.1 R^-0.21 D) per m^3 "
           "and mm (R the rain rate in mm/h, D in mm); extinction alpha = pi N0 / Lambda^3; each return attenuated "
           "by exp(-2 alpha R); a drop at r returns like a target of reflectance R_F min((D/D_b)^2, 1) (LISA: "
           "R_F = 0.0198, water's Fresnel reflectance at 905 nm; D_b = tan(3 mrad) r the beam's diameter); only "
           "drops beyond 1.5 m are seen; the strongest echo of each ray (target or drop) is reported.")
    levels = {"light": {"rate_mm_h": 5.0}, "moderate": {"rate_mm_h": 25.0}, "heavy": {"rate_mm_h": 100.0}}

    fresnel = FRESNEL_WATER

    def size_distribution(self, rate):
        return 8000.0, 4.1 * rate ** -0.21


class Snow(_Precipitation):
    name = "snow"
    family = "weather"
    summary = "attenuation and flake echoes, Gunn-Marshall flake sizes"
    params = (Param("rate_mm_h", "mm/h", 0.1, 20.0, "snowfall rate (melted water equivalent)"),)
    doc = ("Snow: flakes with the Gunn-Marshall (1958) size distribution N(D) = 3800 R^-0.87 exp(-2.55 R^-0.48 D) "
           "per m^3 and mm (R the snowfall rate in mm/h of melted water, D in mm); extinction alpha = pi N0 / "
           "Lambda^3; each return attenuated by exp(-2 alpha R); a flake returns like a drop of ice (LISA: Fresnel "
           "reflectance 0.0173, n = 1.3031) in the same beam as rain; the strongest echo of each ray is reported.")
    levels = {"light": {"rate_mm_h": 0.5}, "moderate": {"rate_mm_h": 2.0}, "heavy": {"rate_mm_h": 8.0}}

    fresnel = FRESNEL_ICE

    def size_distribution(self, rate):
        return 3800.0 * rate ** -0.87, 2.55 * rate ** -0.48
