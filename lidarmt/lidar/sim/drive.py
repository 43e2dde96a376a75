"""A drive: the ego vehicle follows its route through a populated town and the HDL-64E sweeps at 10 Hz.

:class:`Drive` turns (town, scene, sensor) into :class:`lidarmt.types.Frame` objects with ground truth:
points in the sensor frame (x forward, y left, z up) with ``ring`` and ``time``, the pose world <- sensor
(UTM-like world coordinates), and :class:`lidarmt.types.Labels` (per-point instance and MetaType, one box per
object that has at least one point). The cloud is as Apollo's motion compensator leaves it: the static world as
seen from the sensor's pose at the end of the sweep, and each moving object where it was when the laser swept
past it (its points' ``time``), with its box there too. Frame ``k`` is the sweep that ends at ``(k + 1) / 10`` s
after the start, and
depends only on (town seed, scene seed, k): frames can be made in any order and are identical every time.
"""

from __future__ import annotations

import time

import numpy as np

import lidarmt.lidar.sim.geom as geom
import lidarmt.lidar.sim.objects as objects
from lidarmt.lidar.sim.lidar import SELF, Caster, Hdl64e, returns
from lidarmt.lidar.sim.objects import CompiledMesh
from lidarmt.lidar.sim.scene import Scene, StaticObject, build_scene
from lidarmt.lidar.sim.town import Town, build_town
from lidarmt.types import BOX_DTYPE, Frame, Labels, Provenance, point_dtype

STAMP0 = 1_700_000_000.0  # stamps of simulated drives start here (seconds since the Unix epoch)
DYNAMIC_RADIUS = 135.0


def _rotate(v: np.ndarray, rot: np.ndarray) -> np.ndarray:
    """(N, 3) vectors rotated by a 3x3 matrix, as float32, without BLAS (whose threads cost more than the
    product itself for a 3-wide matrix on a busy machine)."""
    out = np.empty(v.shape, np.float32)
    for j in range(3):
        out[:, j] = v[:, 0] * rot[j, 0] + v[:, 1] * rot[j, 1] + v[:, 2] * rot[j, 2]
    return out


class Drive:
    """One simulated drive: a scene and the ego route through it."""

    def __init__(self, town: Town, scene: Scene, *, seed: int, sensor: Hdl64e | None = None,
                 stamp0: float = STAMP0, source: str = "lidarmt.lidar.sim") -> None:
        self.town = town
        self.scene = scene
        self.seed = int(seed)
        self.sensor = sensor or Hdl64e()
        self.stamp0 = float(stamp0)
        self.source = source
        self._dirs, self._ring, self._frac = self.sensor.ray_table()
        self._dirs = self._dirs.astype(np.float64)
        self._caster: Caster | None = None
        self._ego_model = None
        #: cumulative seconds spent per stage of :meth:`frame` (agent meshes, ray casting, post-processing)
        self.timings = {"agents": 0.0, "cast": 0.0, "post": 0.0, "frames": 0}
        rng = np.random.default_rng([self.seed, 0xB0D1])
        # slow body motion: pitch and roll wobble of a few tenths of a degree
        self._wobble = rng.uniform(0, 2 * np.pi, 4), rng.uniform(0.3, 1.2, 4), rng.uniform(0.1, 0.35, 2)

    @classmethod
    def create(cls, *, town_seed: int, seed: int, frames: int, density: float = 1.0,
               sensor_height: float | None = None, sensor: Hdl64e | None = None, stamp0: float = STAMP0) -> Drive:
        """Build the town of ``town_seed``, populate it for ``frames`` sweeps with ``seed``, and set up a drive."""
        town = build_town(town_seed)
        scene = build_scene(town, seed, duration=frames / 10.0, density=density, sensor_height=sensor_height)
        return cls(town, scene, seed=seed, sensor=sensor, stamp0=stamp0)

    @property
    def caster(self) -> Caster:
        if self._caster is None:
            self._caster = Caster(self.scene.static_mesh, self.town)
        return self._caster

    # -------------------------------------------------------------------------------------------- poses

    def sensor_pose_local(self, t: float) -> np.ndarray:
        """4x4 town-local <- sensor at time ``t`` (s since the start).

        The car follows the terrain (pitch and roll from the ground's slope under it) plus a slow body wobble
        of a few tenths of a degree.
        """
        ego = self.scene.ego
        x, y, yaw = ego.pose(t)
        ph, fr, amp = self._wobble
        pitch = np.radians(amp[0] * np.sin(ph[0] + fr[0] * t * 2 * np.pi) * 0.5 + 0.1 * np.sin(ph[1] + fr[1] * t))
        roll = np.radians(amp[1] * np.sin(ph[2] + fr[2] * t * 2 * np.pi) * 0.5 + 0.1 * np.sin(ph[3] + fr[3] * t))
        gx, gy = self.town.slope(np.array([[x, y]]))[0]
        c, s = np.cos(yaw), np.sin(yaw)
        pitch -= np.arctan(gx * c + gy * s)  # nose up on an uphill grade
        roll += np.arctan(-gx * s + gy * c)  # left side up where the ground rises to the left
        pose = np.eye(4)
        pose[:3, :3] = geom.rot_z(yaw) @ geom.rot_y(pitch) @ geom.rot_x(roll)
        pose[:3, 3] = [x, y, float(self.town.height(np.array([[x, y]]))[0]) + ego.sensor_height]
        return pose

    def _ego_body(self, pose_l: np.ndarray) -> CompiledMesh:
        """The ego vehicle under the sensor: it hides the ground next to the car from the lowest lasers."""
        if self._ego_model is None:
            h = self.scene.ego.sensor_height
            local = objects.compile_model(objects.ego_body(sensor_height=h), x=0.0, y=0.0, z=-h, yaw=0.0,
                                          instance=SELF, meta=-1, kind="ego")
            self._ego_model = local  # in the sensor frame
        m = self._ego_model
        return CompiledMesh(m.vertices @ pose_l[:3, :3].T + pose_l[:3, 3], m.triangles, m.reflectivity, m.rgb, m.mat,
                            m.instance, m.meta, m.semantic)

    def world_pose(self, local: np.ndarray) -> np.ndarray:
        w = local.copy()
        w[:2, 3] += self.town.origin
        return w

    def stamp(self, k: int) -> float:
        return self.stamp0 + (k + 1) / self.sensor.rate_hz

    # -------------------------------------------------------------------------------------------- frames

    def frame(self, k: int, *, index: int | None = None) -> Frame:
        """Sweep ``k`` of the drive (0-based) as a Frame with labels."""
        t0 = time.perf_counter()
        t = (k + 1) / self.sensor.rate_hz
        pose_l = self.sensor_pose_local(t)
        origin = pose_l[:3, 3]
        dirs_w = _rotate(self._dirs, pose_l[:3, :3])
        yaw = float(np.arctan2(pose_l[1, 0], pose_l[0, 0]))
        dyn, boxes = self.scene.agent_meshes(t, origin[:2], DYNAMIC_RADIUS, sweep=(yaw, 1.0 / self.sensor.rate_hz))
        dyn = CompiledMesh.concat([dyn, self._ego_body(pose_l)])
        t1 = time.perf_counter()
        hits = self.caster.cast(origin, dirs_w, dyn, max_range=self.sensor.max_range)
        t2 = time.perf_counter()
        rng = np.random.default_rng([self.seed, 0x11DA5, k])
        keep, r, inten = returns(hits, self.sensor, rng, self._ring)
        idx = np.flatnonzero(keep)
        xyz = self._dirs[idx] * r[idx, None]
        pts = np.empty(len(idx), dtype=point_dtype(ring=True, time=True))
        pts["x"], pts["y"], pts["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        pts["intensity"] = inten[idx]
        pts["ring"] = self._ring[idx]
        stamp = self.stamp(k)
        pts["time"] = stamp - 1.0 / self.sensor.rate_hz + self._frac[idx] / self.sensor.rate_hz
        inst = hits.instance[idx]
        meta = hits.meta[idx]
        labels = Labels(boxes=self._boxes(inst, boxes, pose_l), point_instance=inst, point_meta=meta,
                        point_semantic=hits.semantic[idx])
        t3 = time.perf_counter()
        tm = self.timings
        tm["agents"] += t1 - t0
        tm["cast"] += t2 - t1
        tm["post"] += t3 - t2
        tm["frames"] += 1
        return Frame(points=pts, pose=self.world_pose(pose_l), stamp=stamp, frame_id="velodyne64",
                     provenance=Provenance(self.source, "sim", k if index is None else index,
                                           detail=f"town {self.town.seed} drive {self.seed} sweep {k}"),
                     labels=labels)

    def _boxes(self, inst: np.ndarray, agent_boxes: list[StaticObject], pose_l: np.ndarray) -> np.ndarray:
        present = set(np.unique(inst[inst >= 0]).tolist())
        objs = [o for o in self.scene.statics if o.instance in present]
        objs += [o for o in agent_boxes if o.instance in present]
        out = np.zeros(len(objs), dtype=BOX_DTYPE)
        if not objs:
            return out
        rot = pose_l[:3, :3]
        c = np.array([[o.x, o.y, o.z + o.height / 2] for o in objs]) - pose_l[:3, 3]
        cs = c @ rot  # R^T (p - t)
        yaw0 = np.arctan2(rot[1, 0], rot[0, 0])
        out["cx"], out["cy"], out["cz"] = cs[:, 0], cs[:, 1], cs[:, 2]
        out["length"] = [o.length for o in objs]
        out["width"] = [o.width for o in objs]
        out["height"] = [o.height for o in objs]
        yaw = np.array([o.yaw for o in objs]) - yaw0
        out["yaw"] = (yaw + np.pi) % (2 * np.pi) - np.pi
        out["meta"] = [o.meta for o in objs]
        out["instance"] = [o.instance for o in objs]
        order = np.argsort(out["instance"], kind="stable")
        return out[order]
