"""Numba kernels of the weather transformations, each beside a plain NumPy reference the tests cross-check.

* :func:`fog_echo_table`: the fog's (soft target's) received power per hard-target range R0, as Hahner et al.
  (ICCV 2021, Eq. 1-3) integrate it: the transmitted pulse sin^2(pi t / (2 tau_H)) convolved with the fog's
  impulse response exp(-2 alpha R') xi(R') / R'^2 for R' < R0; its peak over time, and the range interval where
  the echo is above half its peak.
* :func:`fog_decide`: per point, the attenuated hard return against the fog's echo, both as received powers
  (the sensor profile's intensity calibration gives the hard target's reflectance), and the noise floor.
* :func:`strongest_per_ray`: per ray, the strongest of the sampled rain drops or snow flakes.

Random numbers come from a NumPy Generator outside the kernels; the kernels are pure functions of their arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

KEEP = 0  # the attenuated hard return is reported
SCATTER = 1  # the fog's (or a particle's) echo is reported instead, on the same ray
LOST = 2  # nothing rises above the noise floor


def _fog_grid(alpha: float, dr: float, n_r0: int, r1: float, r2: float) -> np.ndarray:
    """g_k dR: the fog's impulse response exp(-2 alpha R') xi(R') / R'^2 sampled at R'_k = (k + 1/2) dR."""
    r = (np.arange(n_r0) + 0.5) * dr
    xi = np.clip((r - r1) / (r2 - r1), 0.0, 1.0)
    return np.exp(-2.0 * alpha * r) * xi / (r * r) * dr


def _pulse(dr: float, pulse_len: float) -> np.ndarray:
    """The pulse sin^2(pi d / (c tau_H)) sampled at d = m dR, 0 <= d <= c tau_H (d = R - R', the echo's delay)."""
    m = int(round(pulse_len / dr))
    d = np.arange(m + 1) * dr
    return np.sin(np.pi * d / pulse_len) ** 2


@njit(cache=True)
def _echo_table_kernel(g: np.ndarray, p: np.ndarray, dr: float, half_len: float):
    k_n = g.shape[0]
    m = p.shape[0] - 1
    acc = np.zeros(k_n + m + 1)
    peak = np.empty(k_n)
    lo = np.empty(k_n)
    hi = np.empty(k_n)
    for k0 in range(k_n):
        gk = g[k0]
        for j in range(m + 1):
            acc[k0 + j] += gk * p[j]
        best = 0.0
        jb = 0
        for j in range(k0 + m + 1):
            if acc[j] > best:
                best = acc[j]
                jb = j
        peak[k0] = best
        ja = jb
        while ja > 0 and acc[ja - 1] >= 0.5 * best:
            ja -= 1
        je = jb
        while je < k0 + m and acc[je + 1] >= 0.5 * best:
            je += 1
        # echo sample j lies at R_j = (j + 1/2) dR; a hard target at R0 peaks at R0 + c tau_H / 2, which the
        # sensor reports as R0: reported range = R_j - c tau_H / 2
        lo[k0] = (ja + 0.5) * dr - half_len
        hi[k0] = (je + 0.5) * dr - half_len
    return peak, lo, hi


def fog_echo_table(alpha: float, *, dr: float, r0_max: float, pulse_len: float, r1: float, r2: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per hard-target range R0_k = (k + 1/2) dR (k < r0_max / dR): the peak of the fog's echo (per unit
    backscatter coefficient beta, in 1/m), and the reported-range interval where it is above half its peak."""
    n = int(np.ceil(r0_max / dr))
    return _echo_table_kernel(_fog_grid(alpha, dr, n, r1, r2), _pulse(dr, pulse_len), dr, pulse_len / 2.0)


def fog_echo_table_reference(alpha: float, *, dr: float, r0_max: float, pulse_len: float, r1: float, r2: float
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NumPy reference of :func:`fog_echo_table`: the full matrix I[R0, R] = sum_{R' <= R0} p(R - R') g(R')."""
    n = int(np.ceil(r0_max / dr))
    g = _fog_grid(alpha, dr, n, r1, r2)
    p = _pulse(dr, pulse_len)
    m = len(p) - 1
    k = np.arange(n)
    j = np.arange(n + m + 1)
    delay = j[None, :] - k[:, None]  # (R', R)
    kern = np.where((delay >= 0) & (delay <= m), p[np.clip(delay, 0, m)], 0.0)
    contrib = g[:, None] * kern
    cum = np.cumsum(contrib, axis=0)  # row k0: echo of the fog in front of a target at R0_k0
    peak = cum.max(axis=1)
    jb = cum.argmax(axis=1)
    lo = np.empty(n)
    hi = np.empty(n)
    for k0 in range(n):
        above = cum[k0] >= 0.5 * peak[k0]
        a = jb[k0]
        while a > 0 and above[a - 1]:
            a -= 1
        e = jb[k0]
        while e < k0 + m and above[e + 1]:
            e += 1
        lo[k0] = (a + 0.5) * dr - pulse_len / 2
        hi[k0] = (e + 0.5) * dr - pulse_len / 2
    return peak, lo, hi


@njit(cache=True)
def fog_decide(r0: np.ndarray, beta0: np.ndarray, u: np.ndarray, peak: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               dr: float, alpha: float, beta: float, floor: float):
    """Per point: action (KEEP, SCATTER, LOST), reported range and the reported echo's power (1/(m^2 sr)).

    Both echoes in the same units (C_A P_0 2/c): the hard target's beta0 exp(-2 alpha R0) / R0^2 (beta0 its
    differential reflectivity, from the point's calibrated reflectance) and the fog's beta peak[R0] (Hahner et
    al.'s Eq. 1-3 with the fog's backscattering coefficient beta). The sensor reports the stronger when it reaches
    the noise floor: the fog's echo replaces the return when it is stronger and detectable (SCATTER, at a range
    lo + u (hi - lo) in the part of the echo above half its peak); else the attenuated return is kept when
    detectable (KEEP); else nothing is reported (LOST)."""
    n = r0.shape[0]
    action = np.empty(n, dtype=np.int8)
    rng_out = np.empty(n)
    power = np.empty(n)
    last = peak.shape[0] - 1
    for i in range(n):
        r = r0[i]
        k = int(r / dr)
        if k > last:
            k = last
        att = np.exp(-2.0 * alpha * r)
        soft = beta * peak[k]
        hard = beta0[i] * att / (r * r) if r > 0 else 0.0
        if soft > hard and soft >= floor:
            action[i] = SCATTER
            rng_out[i] = lo[k] + u[i] * (hi[k] - lo[k])
            power[i] = soft
        elif r > 0 and hard >= floor:
            action[i] = KEEP
            rng_out[i] = r
            power[i] = hard
        else:
            action[i] = LOST
            rng_out[i] = r
            power[i] = hard
    return action, rng_out, power


def fog_decide_reference(r0, beta0, u, peak, lo, hi, dr, alpha, beta, floor):
    """NumPy reference of :func:`fog_decide`."""
    k = np.minimum((r0 / dr).astype(np.int64), len(peak) - 1)
    att = np.exp(-2.0 * alpha * r0)
    soft = beta * peak[k]
    with np.errstate(divide="ignore", invalid="ignore"):
        hard = np.where(r0 > 0, beta0 * att / (r0 * r0), 0.0)
    scatter = (soft > hard) & (soft >= floor)
    keep = ~scatter & (r0 > 0) & (hard >= floor)
    action = np.where(scatter, SCATTER, np.where(keep, KEEP, LOST)).astype(np.int8)
    rng_out = np.where(scatter, lo[k] + u * (hi[k] - lo[k]), r0)
    power = np.where(scatter, soft, hard)
    return action, rng_out, power


@njit(cache=True)
def strongest_per_ray(ray: np.ndarray, power: np.ndarray, n_rays: int):
    """Per ray: the index of its strongest particle (-1: none) given each particle's ray (ascending) and power."""
    best = np.full(n_rays, -1, dtype=np.int64)
    for q in range(ray.shape[0]):
        r = ray[q]
        b = best[r]
        if b < 0 or power[q] > power[b]:
            best[r] = q
    return best


def strongest_per_ray_reference(ray: np.ndarray, power: np.ndarray, n_rays: int) -> np.ndarray:
    """NumPy reference of :func:`strongest_per_ray` (ties: the first particle)."""
    best = np.full(n_rays, -1, dtype=np.int64)
    if len(ray) == 0:
        return best
    order = np.lexsort((np.arange(len(ray)), -power, ray))
    first = np.ones(len(order), dtype=bool)
    first[1:] = ray[order][1:] != ray[order][:-1]
    best[ray[order][first]] = order[first]
    return best
