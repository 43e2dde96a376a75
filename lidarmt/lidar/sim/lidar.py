"""The simulated LiDAR (a Velodyne HDL-64E by default, any sensor profile of :mod:`lidarmt.lidar.sensors` with
``Hdl64e.from_profile``: its beams, rate, firings, ranges, range noise, intensity scale and detection threshold)
and its ray caster.

* 64 lasers at the HDL-64E's nominal elevations: the upper block of 32 from +2.0 deg down to -8.33 deg in
  1/3 deg steps, the lower block of 32 from -8.83 deg down to -24.33 deg in 1/2 deg steps. ``ring`` 0 is the
  lowest laser and 63 the highest (the ROS velodyne driver's ring order).
* 10 Hz, 2,083 firings per revolution (0.173 deg), clockwise seen from above, starting behind the vehicle, as
  the real unit does; each point's ``time`` is its firing time within the 100 ms sweep (the frame stamp is the
  sweep's end, as after Apollo's motion compensator). Points are ordered by firing (azimuth), then ring.
* Ranges 0.9-120 m, Gaussian range noise (2 cm), a fixed range bias per laser (calibration residue, σ 2.5 cm),
  rough surfaces (ground roughness seen along the ray: a few cm of asphalt texture spread grazing returns by
  decimetres; pulses enter foliage before returning), no return from the sky, random drop-outs, and a detection
  probability that falls with received power (reflectivity x cos(incidence) / range^2), so dark cars and
  grazing asphalt fade out at range as they do in real sweeps.
* Intensity 0-255 from the material's reflectivity, the incidence angle and range (calibrated against the
  KITTI HDL-64E frames: benchmarks/bench_sim_realism.py).

Casting uses open3d's Embree ``RaycastingScene``: one scene for the static world, built once per drive, and
one per frame for the agents near the sensor; the ground is intersected analytically on the town's raster
(:mod:`lidarmt.lidar.sim._kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import lidarmt.lidar.sim._kernels as _kernels
from lidarmt.errors import require
from lidarmt.lidar.sensors import HDL64, KITTI_ELEVATIONS_DEG, SensorProfile
from lidarmt.lidar.sim.objects import GROUND_REFLECTIVITY, GROUND_SEMANTIC, CompiledMesh, Mat

__all__ = ["KITTI_ELEVATIONS_DEG", "Caster", "Hdl64e", "Hits", "SELF", "hdl64e_elevations", "returns"]


def hdl64e_elevations() -> np.ndarray:
    """The 64 nominal (datasheet) elevation angles in degrees, ascending (index = ring)."""
    upper = 2.0 - np.arange(32) / 3.0
    lower = -8.83 - np.arange(32) * 0.5
    return np.sort(np.concatenate([upper, lower]))


def _ring_range_offsets(n: int = 64) -> np.ndarray:
    """Fixed per-laser range biases, metres: what is left of each laser's distance correction after a real
    unit's calibration (a few centimetres), so neighbouring rings do not line up perfectly on a flat wall."""
    return np.clip(np.random.default_rng(65).normal(0.0, 0.025, n), -0.06, 0.06)


def _ring_gains(n: int = 64) -> np.ndarray:
    """Fixed per-laser intensity gains (the 64 lasers of a real unit differ by 10-20 % after calibration)."""
    return np.clip(np.random.default_rng(64).normal(1.0, 0.12, n), 0.7, 1.3)


@dataclass(frozen=True, slots=True)
class Hdl64e:
    """Parameters of the simulated sensor: the HDL-64E of the KITTI car by default, any sensor profile with
    :meth:`from_profile` (``lidarmt simulate --sensor``)."""

    elevations_deg: np.ndarray = field(default_factory=lambda: KITTI_ELEVATIONS_DEG.copy())
    azimuth_steps: int = 2083
    rate_hz: float = 10.0
    min_range: float = 0.9
    max_range: float = 120.0
    range_noise: float = 0.02
    dropout: float = 0.01
    # detection: p = sigmoid((log(signal) - log(threshold)) / softness), signal = max(rho, floor) * cos / r^2
    detect_threshold: float = 2.5e-6
    detect_softness: float = 0.6
    detect_floor: float = 0.2  # specular car paint returns little light diffusely yet is detected
    glass_returns: float = 0.35  # windows: most pulses pass through or glance off
    # intensity = 255 * (rho * gain[ring] * g(cos) / (1 + (r / r_half)^2) * lognormal(noise) + N(0, add_noise)
    #                    - offset), clipped to 0..255, with g(cos) = 1 / (1 + (cos0 / cos)^power): flat until
    # grazing incidence, then a steep fall. KITTI's road reads ~59 up to 20 m, and mostly 0 beyond 30 m (cos < 0.06),
    # where its points are still detected; its dark cars read 0.
    intensity_cos0: float = 0.068
    intensity_cos_power: float = 10.0
    intensity_offset: float = 0.02
    intensity_range_half: float = 60.0
    intensity_noise: float = 0.25
    intensity_add_noise: float = 0.015
    ring_gain: np.ndarray = field(default_factory=_ring_gains)
    ring_range_offset: np.ndarray = field(default_factory=_ring_range_offsets)
    # surface roughness, metres (std of the surface height along the normal) by ground material code
    # (asphalt, marking, crosswalk, sidewalk, terrain, curb face): a ray at grazing incidence turns a few cm of
    # roughness into a range error of roughness / cos(incidence), as on KITTI's worn asphalt
    ground_roughness: tuple[float, ...] = (0.012, 0.006, 0.006, 0.01, 0.035, 0.01)
    # foliage: a pulse enters the crown or hedge before it returns; depth ~ |N(0, foliage_depth)| metres
    foliage_depth: float = 0.12
    # the intensity a reflectance of 1 reads (255: KITTI's reflectance x 255; 100: Velodyne's and Ouster's
    # calibrated reflectivity, whose diffuse targets read 0..100)
    intensity_scale: float = 255.0
    profile: str = "hdl64"  # the sensor profile's name (lidarmt.lidar.sensors)

    @classmethod
    def from_profile(cls, profile: SensorProfile, **kwargs) -> Hdl64e:
        """The simulated sensor with a profile's beams, rate, firings per turn, ranges, range noise and intensity
        scale. The detection threshold scales with the profile's (its noise floor against the HDL-64E's, for
        which ``detect_threshold`` was calibrated on KITTI); per-laser gains and range biases are drawn for its
        number of lasers (the same 64 as the default for a 64-laser profile). ``hdl64`` gives the default
        sensor exactly."""
        n = profile.rings
        base = cls()
        values = {
            "elevations_deg": profile.elevations().copy(), "azimuth_steps": int(profile.azimuth_steps),
            "rate_hz": float(profile.rate_hz), "min_range": float(profile.min_range_m),
            "max_range": float(profile.max_range_m), "range_noise": float(profile.range_accuracy_m),
            "detect_threshold": base.detect_threshold * (profile.noise_floor / HDL64.noise_floor),
            "intensity_scale": float(profile.intensity_scale), "ring_gain": _ring_gains(n),
            "ring_range_offset": _ring_range_offsets(n), "profile": profile.name,
        }
        values.update(kwargs)
        return cls(**values)

    @classmethod
    def nominal(cls, **kwargs) -> Hdl64e:
        """The sensor with the datasheet elevations instead of the KITTI-measured ones."""
        return cls(elevations_deg=hdl64e_elevations(), **kwargs)

    @property
    def rings(self) -> int:
        return len(self.elevations_deg)

    @property
    def rays_per_frame(self) -> int:
        return self.rings * self.azimuth_steps

    def ray_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit directions (N, 3) in the sensor frame, ring (N,) and firing fraction of the sweep (N,) in [0, 1)."""
        k = np.arange(self.azimuth_steps)
        az = np.pi - 2 * np.pi * (k + 0.5) / self.azimuth_steps  # start behind, turn clockwise
        el = np.radians(self.elevations_deg)
        azg, elg = np.meshgrid(az, el, indexing="ij")  # (steps, rings)
        d = np.stack([np.cos(elg) * np.cos(azg), np.cos(elg) * np.sin(azg), np.sin(elg)], axis=-1).reshape(-1, 3)
        ring = np.tile(np.arange(self.rings, dtype=np.uint16), self.azimuth_steps)
        frac = np.repeat(k / self.azimuth_steps, self.rings)
        return d, ring, frac


@dataclass(slots=True)
class Hits:
    """Raw result of a cast, before noise and drop-outs: per ray."""

    t: np.ndarray  # (N,) float32 distance (inf: nothing)
    reflectivity: np.ndarray  # (N,) float32
    cos: np.ndarray  # (N,) float32 |cos| of incidence
    instance: np.ndarray  # (N,) int32
    meta: np.ndarray  # (N,) int8
    code: np.ndarray  # (N,) uint8 surface code for ground hits (255 for objects or none)
    semantic: np.ndarray  # (N,) int32 SemanticKITTI id (0 = nothing hit)
    mat: np.ndarray  # (N,) uint8 material (objects.Mat; ground hits carry their surface code)
    rgb: np.ndarray | None = None  # (N, 3) uint8 when asked for
    normal: np.ndarray | None = None  # (N, 3) float32 when asked for


SELF = -2  # instance id of the ego vehicle's own body: it blocks rays but gives no returns


class Caster:
    """Casts rays against a static mesh (kept) plus a dynamic mesh (per call) and the analytic ground."""

    def __init__(self, static: CompiledMesh, town) -> None:
        self._o3d = require("open3d", extra="sim", purpose="the LiDAR simulator's ray casting")
        self.town = town
        self.static = static
        self._static_scene = self._scene(static)

    def _scene(self, mesh: CompiledMesh):
        o3d = self._o3d
        if len(mesh.triangles) == 0:
            return None
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(o3d.core.Tensor(mesh.vertices.astype(np.float32)),
                            o3d.core.Tensor(mesh.triangles.astype(np.uint32)))
        return scene

    def _cast_mesh(self, scene, rays: np.ndarray):
        if scene is None:
            n = len(rays)
            return np.full(n, np.inf, np.float32), np.zeros(n, np.int64), np.zeros((n, 3), np.float32)
        out = scene.cast_rays(self._o3d.core.Tensor(rays))
        return out["t_hit"].numpy(), out["primitive_ids"].numpy().astype(np.int64), out["primitive_normals"].numpy()

    def cast(self, origin: np.ndarray, dirs: np.ndarray, dynamic: CompiledMesh, *, max_range: float,
             with_rgb: bool = False, with_normal: bool = False) -> Hits:
        n = len(dirs)
        rays = np.empty((n, 6), np.float32)
        rays[:, :3] = origin
        rays[:, 3:] = dirs
        t_s, p_s, n_s = self._cast_mesh(self._static_scene, rays)
        dyn_scene = self._scene(dynamic)
        t_d, p_d, n_d = self._cast_mesh(dyn_scene, rays)
        town = self.town
        t_g, code = _kernels.cast_ground(
            rays[:, :3].astype(np.float64), dirs.astype(np.float64), town.raster, float(town.raster_origin[0]),
            float(town.raster_origin[1]), town.res, float(town.curb_height), float(max_range) * 1.05, 4,
            town.hgrid, float(town.hres), float(town.gmax),
        )
        which = np.argmin(np.stack([t_g, t_s, t_d]), axis=0)  # ties: ground first
        t = np.minimum(np.minimum(t_g, t_s), t_d).astype(np.float32)
        hit = np.isfinite(t)
        refl = np.zeros(n, np.float32)
        cos = np.zeros(n, np.float32)
        inst = np.full(n, -1, np.int32)
        meta = np.full(n, -1, np.int8)
        code_out = np.full(n, 255, np.uint8)
        sem = np.zeros(n, np.int32)
        mat = np.full(n, 255, np.uint8)
        rgb = np.zeros((n, 3), np.uint8) if with_rgb else None
        normal = np.zeros((n, 3), np.float32) if with_normal else None
        g = hit & (which == 0)
        gc = code[g]
        refl[g] = GROUND_REFLECTIVITY[np.minimum(gc, len(GROUND_REFLECTIVITY) - 1)]
        face = gc == _kernels.CURB_FACE
        dz = np.abs(dirs[g, 2])
        cos[g] = np.where(face, np.sqrt(np.maximum(1 - dz * dz, 0)) * 0.8, dz)
        code_out[g] = gc
        sem[g] = GROUND_SEMANTIC[np.minimum(gc, len(GROUND_SEMANTIC) - 1)]
        mat[g] = gc
        if with_rgb or with_normal:
            from lidarmt.lidar.sim.objects import GROUND_RGB

            if with_rgb:
                rgb[g] = GROUND_RGB[np.minimum(gc, len(GROUND_RGB) - 1)]
            if with_normal:
                nn = np.zeros((int(g.sum()), 3), np.float32)
                nn[:, 2] = 1.0
                nn[face] = np.concatenate([-dirs[g][face][:, :2], np.zeros((int(face.sum()), 1))], axis=1)
                normal[g] = nn
        for k, (mesh, prim, nrm) in enumerate(((self.static, p_s, n_s), (dynamic, p_d, n_d)), start=1):
            m = hit & (which == k)
            if not m.any():
                continue
            pid = prim[m]
            refl[m] = mesh.reflectivity[pid]
            cos[m] = np.abs(np.einsum("ij,ij->i", nrm[m], dirs[m]))
            inst[m] = mesh.instance[pid]
            meta[m] = mesh.meta[pid]
            sem[m] = mesh.semantic[pid]
            mat[m] = mesh.mat[pid]
            if with_rgb:
                rgb[m] = mesh.rgb[pid]
            if with_normal:
                normal[m] = nrm[m]
        return Hits(t, refl, cos, inst, meta, code_out, sem, mat, rgb, normal)


def returns(hits: Hits, model: Hdl64e, rng: np.random.Generator, ring: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which rays give a return, their noisy range and their intensity (0..255), as (keep, range, intensity).

    Random numbers are drawn for every ray in a fixed order, so the result depends only on the generator's
    state and the hits.
    """
    n = len(hits.t)
    u_drop = rng.random(n)
    u_det = rng.random(n)
    noise = rng.standard_normal(n)
    inoise = rng.standard_normal(n)
    u_add = rng.standard_normal(n)
    rough = rng.standard_normal(n)
    t = hits.t.astype(np.float64)
    ground = hits.code != 255
    sigma = np.where(ground, np.asarray(model.ground_roughness)[np.minimum(hits.code, len(model.ground_roughness) - 1)],
                     0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = rough * sigma / np.maximum(hits.cos, 0.08)  # vertical roughness seen along the ray
    extra = np.clip(extra, -0.6, 0.6)
    extra = np.where(hits.mat == Mat.FOLIAGE, np.abs(rough) * model.foliage_depth, extra)
    rng_m = t + noise * model.range_noise + extra + model.ring_range_offset[ring]
    ok = np.isfinite(t) & (rng_m >= model.min_range) & (rng_m <= model.max_range) & (hits.instance != SELF)
    with np.errstate(divide="ignore", invalid="ignore"):
        signal = np.maximum(hits.reflectivity, model.detect_floor) * np.maximum(hits.cos, 0.02) / np.maximum(t, 0.5) ** 2
        z = (np.log(np.maximum(signal, 1e-30)) - np.log(model.detect_threshold)) / model.detect_softness
    p_det = 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
    p_det = np.where(hits.mat == Mat.GLASS, p_det * model.glass_returns, p_det)
    keep = ok & (u_drop >= model.dropout) & (u_det < p_det)
    r = np.where(keep, rng_m, 0.0)
    falloff = 1.0 / (1.0 + (np.where(keep, t, 0.0) / model.intensity_range_half) ** 2)
    g = 1.0 / (1.0 + (model.intensity_cos0 / np.maximum(hits.cos, 1e-3)) ** model.intensity_cos_power)
    value = hits.reflectivity * model.ring_gain[ring] * g * falloff * np.exp(inoise * model.intensity_noise)
    value = value + u_add * model.intensity_add_noise - model.intensity_offset
    inten = np.clip(np.round(value * model.intensity_scale), 0, 255).astype(np.float32)
    return keep, r, inten


def sensor_model(name: str | SensorProfile | None) -> Hdl64e | None:
    """The simulated sensor of a profile name (:mod:`lidarmt.lidar.sensors`); None for ``hdl64`` (and None), the
    simulator's default sensor (:class:`Hdl64e`), which ``Hdl64e.from_profile(HDL64)`` equals."""
    from lidarmt.lidar.sensors import get_sensor

    profile = get_sensor(name)
    return None if profile.name == HDL64.name else Hdl64e.from_profile(profile)
