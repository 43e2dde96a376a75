"""The things in a town: static scenery (buildings, walls, trees, poles, signs, bins, parked cars) and traffic
(cars, vans, trucks and buses on lanes, pedestrians on sidewalks and crosswalks, cyclists at the road edge)
moving at constant speed along their paths, plus the ego vehicle's route.

Everything is drawn from one ``numpy.random.Generator`` seeded by the caller, so a (town, seed) pair always
gives the same scene. Agents whose paths would overlap another agent or the ego vehicle during the drive are
dropped before the first frame (there is no traffic logic, only constant speeds).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial import cKDTree

import lidarmt.lidar.sim.geom as geom
import lidarmt.lidar.sim.objects as objects
from lidarmt.lidar.sim.objects import CompiledMesh, Model
from lidarmt.lidar.sim.town import Town
from lidarmt.types import MetaType

BACKGROUND = -1
PHASES = 8  # animation poses per stride of a walking or pedalling person
EGO_HEADWAY = 6.0  # metres kept clear ahead of and behind the ego vehicle in its lane


@dataclass(slots=True)
class StaticObject:
    instance: int  # -1 for background (buildings, walls, trees)
    meta: int  # MetaType, or -1
    kind: str
    x: float
    y: float
    z: float
    yaw: float
    length: float
    width: float
    height: float


@dataclass(slots=True)
class Agent:
    """A moving object: a path (polyline), start arc length, speed and sideways offset from the path."""

    instance: int
    meta: int
    kind: str
    path: np.ndarray
    s_cum: np.ndarray
    s0: float
    speed: float
    lateral: float = 0.0
    model: Model | None = None  # fixed shape (vehicles); people are rebuilt per frame from params
    params: dict = field(default_factory=dict)
    pingpong: bool = False
    _lists: tuple | None = field(default=None, repr=False, compare=False)

    def arc(self, t: float) -> float:
        s = self.s0 + self.speed * t
        if self.pingpong:
            span = self.s_cum[-1]
            period = 2 * span
            s = s % period
            s = s if s <= span else period - s
        return s

    def pose(self, t: float) -> tuple[float, float, float]:
        """(x, y, heading) at time ``t``: scalar arithmetic, as this runs for every agent in every frame."""
        if self._lists is None:
            self._lists = (self.s_cum.tolist(), self.path[:, 0].tolist(), self.path[:, 1].tolist())
        sl, px, py = self._lists
        s = min(max(self.arc(t), 0.0), sl[-1])
        i = min(max(bisect.bisect_right(sl, s) - 1, 0), len(sl) - 2)
        ds = sl[i + 1] - sl[i]
        f = (s - sl[i]) / ds if ds > 1e-12 else 0.0
        dx, dy = px[i + 1] - px[i], py[i + 1] - py[i]
        head = math.atan2(dy, dx)
        if self.pingpong and (self.s0 + self.speed * t) % (2 * sl[-1]) > sl[-1]:
            head += math.pi
        x = px[i] + dx * f - math.sin(head) * self.lateral
        y = py[i] + dy * f + math.cos(head) * self.lateral
        return x, y, head

    def dims(self) -> tuple[float, float, float]:
        if self.model is not None:
            return self.model.length, self.model.width, self.model.height
        return self.params.get("_dims", (0.6, 0.6, 1.7))


@dataclass(slots=True)
class Ego:
    path: np.ndarray
    s_cum: np.ndarray
    s0: float
    speed: float
    sensor_height: float
    lane_ids: list[str]

    def pose(self, t: float) -> tuple[float, float, float]:
        pos, head = geom.interp_pose(self.path, self.s_cum, self.s0 + self.speed * t)
        return float(pos[0]), float(pos[1]), float(head)

    def steering(self, t: float, wheelbase: float = 2.8) -> float:
        """Front-wheel steering angle (radians, positive left) from the path curvature (bicycle model)."""
        ds = 2.0
        _, h0 = geom.interp_pose(self.path, self.s_cum, self.s0 + self.speed * t - ds)
        _, h1 = geom.interp_pose(self.path, self.s_cum, self.s0 + self.speed * t + ds)
        dh = (h1 - h0 + np.pi) % (2 * np.pi) - np.pi
        return float(np.arctan(wheelbase * dh / (2 * ds)))


@dataclass(slots=True)
class Scene:
    town: Town
    static_mesh: CompiledMesh
    statics: list[StaticObject]
    agents: list[Agent]
    ego: Ego
    duration: float
    _meshes: dict = field(default_factory=dict, repr=False)  # (instance, phase) -> (local mesh, dims)

    def _local_mesh(self, a: Agent, t: float) -> tuple[CompiledMesh, tuple[float, float, float]]:
        """The agent's mesh in its own frame; people walk and pedal through ``PHASES`` cached poses."""
        if a.model is not None:
            key = (a.instance, 0)
        else:
            key = (a.instance, int(round(a.arc(t) / a.params["stride"] * PHASES)) % PHASES)
        hit = self._meshes.get(key)
        if hit is None:
            if a.model is not None:
                model = a.model
            else:
                builder = objects.pedestrian if a.kind == "pedestrian" else objects.cyclist
                model, _ = builder(None, phase=2 * np.pi * key[1] / PHASES, params=a.params)  # type: ignore[arg-type]
            mesh = objects.compile_model(model, x=0.0, y=0.0, z=0.0, yaw=0.0, instance=a.instance, meta=a.meta,
                                         kind=a.kind)
            hit = self._meshes[key] = (mesh, (model.length, model.width, model.height))
        return hit

    def agent_meshes(self, t: float, center: np.ndarray, radius: float, *, sweep: tuple[float, float] | None = None
                     ) -> tuple[CompiledMesh, list[StaticObject]]:
        """The agents within ``radius`` of ``center`` at time ``t``: one mesh, and their boxes.

        With ``sweep = (sensor_yaw, period)`` each agent is placed where it is when a spinning LiDAR at
        ``center`` that ends its sweep at ``t`` (starting behind, turning clockwise) fires towards it, as in a
        motion-compensated cloud: a car the laser passes early in the sweep appears where it was then.
        """
        poses = [a.pose(t) for a in self.agents]
        near = [i for i, (x, y, _) in enumerate(poses)
                if (x - center[0]) ** 2 + (y - center[1]) ** 2 <= radius * radius]
        if not near:
            return CompiledMesh.empty(), []
        if sweep is not None:
            yaw0, period = sweep
            for i in near:
                x, y, _ = poses[i]
                az = math.atan2(y - center[1], x - center[0]) - yaw0
                frac = ((math.pi - az) % (2 * math.pi)) / (2 * math.pi)
                poses[i] = self.agents[i].pose(t - period * (1.0 - frac))
        zs = self.town.ground_z(np.array([poses[i][:2] for i in near]))
        parts, boxes = [], []
        for i, z in zip(near, zs.tolist(), strict=True):
            a = self.agents[i]
            x, y, yaw = poses[i]
            local, (ln, wd, ht) = self._local_mesh(a, t)
            c, s = math.cos(yaw), math.sin(yaw)
            rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            parts.append(CompiledMesh(local.vertices @ rot.T + [x, y, z], local.triangles, local.reflectivity,
                                      local.rgb, local.mat, local.instance, local.meta, local.semantic))
            boxes.append(StaticObject(a.instance, a.meta, a.kind, x, y, z, yaw, ln, wd, ht))
        return CompiledMesh.concat(parts), boxes


# ----------------------------------------------------------------------------------------------- building


def _vehicle_kind(rng: np.random.Generator) -> str:
    return str(rng.choice(["car", "van", "truck", "bus"], p=[0.76, 0.12, 0.07, 0.05]))


def build_scene(town: Town, seed: int, *, duration: float, density: float = 1.0,
                sensor_height: float | None = None) -> Scene:
    """Populate a town for a drive of ``duration`` seconds (deterministic for a seed).

    ``density`` scales the amount of traffic, parked cars and pedestrians (1.0: a busy town street).
    """
    rng = np.random.default_rng([seed, 0x5CE7E])
    next_id = [0]

    def new_id() -> int:
        next_id[0] += 1
        return next_id[0] - 1

    statics: list[StaticObject] = []
    meshes: list[CompiledMesh] = []

    def put(model: Model, kind: str, x: float, y: float, yaw: float, meta: int, instance: int) -> None:
        z = float(town.ground_z(np.array([[x, y]]))[0])
        meshes.append(objects.compile_model(model, x=x, y=y, z=z, yaw=yaw, instance=instance, meta=meta, kind=kind))
        statics.append(StaticObject(instance, meta, kind, x, y, z, yaw, model.length, model.width, model.height))

    sw = town.sidewalk_width
    for r in town.roads:
        s = geom.arc_length(r.center)
        length = s[-1]
        for side in (1, -1):  # 1: left of the road direction, -1: right
            half = r.half_left if side == 1 else r.half_right
            park = r.park_left if side == 1 else r.park_right
            park_heading = 0.0 if side == -1 else np.pi

            def at(s_val: float, off: float, center=r.center, s=s) -> tuple[float, float, float]:
                pos, head = geom.interp_pose(center, s, s_val)
                return (float(pos[0] - np.sin(head) * off), float(pos[1] + np.cos(head) * off), float(head))

            face = 0.0 if side == -1 else np.pi  # yaw offset that turns a model's +y towards the road
            # parked cars
            if park > 0:
                pos_s = 7.0 + rng.uniform(0, 4)
                while pos_s < length - 9:
                    kind = "car" if rng.random() < 0.88 else "van"
                    model = objects.VEHICLE_BUILDERS[kind][0](rng)
                    pos_s += model.length / 2
                    if rng.random() < 0.5 * min(density, 2.0):
                        x, y, h = at(pos_s, side * (half - park / 2 - 0.05))
                        put(model, f"parked_{kind}", x, y, h + park_heading + rng.normal(0, 0.02),
                            int(MetaType.SMALLMOT), new_id())
                    pos_s += model.length / 2 + rng.uniform(0.8, 9.0)
            # lamps along the curb
            pos_s = rng.uniform(3, 15)
            while pos_s < length - 3:
                lamp = objects.pole(rng, lamp=True)
                x, y, h = at(pos_s, side * (half + 0.6 - (lamp.width - 0.3) / 2))  # post 0.6 m behind the curb
                put(lamp, "lamp", x, y, h + face, int(MetaType.UNKNOWN), new_id())
                pos_s += rng.uniform(25, 40)
            # signs near the road end facing oncoming traffic, posts, bins, cabinets
            if rng.random() < 0.6:
                s_sign = length - rng.uniform(4, 9) if side == -1 else rng.uniform(4, 9)
                x, y, h = at(s_sign, side * (half + 0.45))
                put(objects.sign(rng), "sign", x, y, h + (np.pi if side == -1 else 0.0), int(MetaType.UNKNOWN), new_id())
            pos_s = rng.uniform(5, 25)
            while pos_s < length - 5:
                if rng.random() < 0.5:
                    x, y, h = at(pos_s, side * (half + rng.uniform(0.5, 1.2)))
                    put(objects.bin_or_box(rng), "street_furniture", x, y, h + face, int(MetaType.UNKNOWN), new_id())
                else:
                    x, y, h = at(pos_s, side * (half + 0.4))
                    put(objects.pole(rng, lamp=False), "post", x, y, h + face, int(MetaType.UNKNOWN), new_id())
                pos_s += rng.uniform(12, 35) / max(density, 0.2)
            # trees on the outer sidewalk edge
            if rng.random() < 0.85:
                pos_s = rng.uniform(2, 10)
                while pos_s < length - 2:
                    x, y, h = at(pos_s, side * (half + sw - rng.uniform(0.6, 1.0)))
                    put(objects.tree(rng), "tree", x, y, rng.uniform(0, 2 * np.pi), BACKGROUND, BACKGROUND)
                    pos_s += rng.uniform(6, 13)
            # shrubs along the back of the sidewalk
            pos_s = rng.uniform(0, 12)
            while pos_s < length - 2:
                ln_h = rng.uniform(2.0, 8.0)
                x, y, h = at(pos_s + ln_h / 2, side * (half + sw + 0.6))
                if _clear(town, x, y, h, ln_h, 0.8, sw + 0.1):
                    put(objects.hedge(rng, ln_h), "hedge", x, y, h, BACKGROUND, BACKGROUND)
                pos_s += ln_h + rng.uniform(3, 20)
            # buildings set back from the sidewalk or flush with its back edge (row houses, as in KITTI's city
            # streets), front walls, fences, hedges and vegetated embankments along the sidewalk, hoardings on it:
            # large static structure right next to where the cars are, which perception must call background
            pos_s = rng.uniform(-5, 5)
            while pos_s < length + 5:
                frontage, depth = rng.uniform(10, 30), rng.uniform(8, 20)
                flush = rng.random() < 0.3
                setback = rng.uniform(0.0, 0.5) if flush else rng.uniform(1.0, 8.0)
                off = side * (half + sw + setback + depth / 2)
                x, y, h = at(pos_s + frontage / 2, off)
                if _clear(town, x, y, h, frontage, depth, sw + min(setback, 0.5) - 0.05):
                    put(objects.building(rng, frontage, depth), "building", x, y, h + face, BACKGROUND, BACKGROUND)
                    if setback > 1.2 and rng.random() < 0.85:  # a front garden behind a hedge, wall or fence
                        hx, hy, hh = at(pos_s + frontage / 2, side * (half + sw + 0.5))
                        _frontage(town, rng, put, hx, hy, hh + face, frontage * 0.9, sw + 0.2)
                    if setback > 4.0 and rng.random() < 0.6:  # and a tree in it
                        tx, ty, _ = at(pos_s + frontage * rng.uniform(0.2, 0.8), side * (half + sw + setback / 2 + 0.5))
                        put(objects.tree(rng), "tree", tx, ty, rng.uniform(0, 2 * np.pi), BACKGROUND, BACKGROUND)
                elif rng.random() < 0.5:  # an embankment overgrown with grass and shrubs
                    dep = rng.uniform(2.5, 7.0)
                    x, y, h = at(pos_s + frontage / 2, side * (half + sw + 0.1 + dep / 2))
                    if _clear(town, x, y, h, frontage, dep, sw):
                        put(objects.slope_bank(rng, frontage, dep), "slope", x, y, h + face + np.pi, BACKGROUND,
                            BACKGROUND)  # rises away from the road
                elif rng.random() < 0.85:
                    x, y, h = at(pos_s + frontage / 2, side * (half + sw + rng.uniform(0.15, 1.0)))
                    _frontage(town, rng, put, x, y, h + face, frontage * 0.8, sw + 0.05)
                pos_s += frontage + rng.uniform(0.0, 8.0)
            # now and then a hoarding or a fence on the sidewalk, close to the curb
            if rng.random() < 0.15:
                ln_h = rng.uniform(6.0, 25.0)
                s_h = rng.uniform(0, max(length - ln_h, 1.0))
                x, y, h = at(s_h + ln_h / 2, side * (half + rng.uniform(0.8, 1.5)))
                if _clear(town, x, y, h, ln_h, 0.2, 0.4):
                    kind = "hoarding" if rng.random() < 0.6 else "fence"
                    model = objects.hoarding(rng, ln_h) if kind == "hoarding" else objects.fence(rng, ln_h)
                    put(model, kind, x, y, h + face, BACKGROUND, BACKGROUND)
    # scattered trees and bushes in open terrain
    lo = town.raster_origin
    hi = lo + np.array(town.raster.shape[::-1]) * town.res
    for _ in range(int(220 * density)):
        x, y = rng.uniform(lo[0], hi[0]), rng.uniform(lo[1], hi[1])
        if town.distance_to_road(np.array([[x, y]]))[0] > sw + 2:
            put(objects.tree(rng), "tree", x, y, rng.uniform(0, 2 * np.pi), BACKGROUND, BACKGROUND)

    agents: list[Agent] = []
    for ln in town.driving_lanes():
        pos_s = rng.uniform(0, 25)
        while pos_s < ln.length:
            kind = _vehicle_kind(rng)
            builder, meta = objects.VEHICLE_BUILDERS[kind]
            model = builder(rng)
            speed = rng.uniform(6.0, 12.0)
            path, _ = town.route(rng, ln.id, pos_s + speed * duration + model.length + 5)
            agents.append(Agent(new_id(), int(meta), kind, path, geom.arc_length(path), pos_s, speed, 0.0, model))
            pos_s += model.length + rng.uniform(8, 55) / max(density, 0.2)
    # cyclists near the right edge of the outer lane
    for r in town.roads:
        for lanes in (r.lanes_fwd, r.lanes_bwd):
            ln = town.lanes[lanes[-1]]
            pos_s = rng.uniform(0, 40)
            while pos_s < ln.length:
                _, params = objects.cyclist(rng)
                speed = rng.uniform(3.0, 6.5)
                path, _ = town.route(rng, ln.id, pos_s + speed * duration + 5)
                m, _ = objects.cyclist(rng, phase=0.0, params=params)
                params["stride"] = 2.1
                params["_dims"] = (m.length, m.width, m.height)
                agents.append(Agent(new_id(), int(MetaType.NONMOT), "cyclist", path, geom.arc_length(path), pos_s,
                                    speed, -(ln.width / 2 - 0.75), None, params))
                pos_s += rng.uniform(12, 35) / max(density, 0.2)
    # pedestrians on sidewalks (walking to and fro) and across crosswalks
    for r in town.roads:
        for side in (1, -1):
            half = r.half_left if side == 1 else r.half_right
            path = geom.offset(r.center, side * (half + rng.uniform(0.7, max(sw - 0.9, 0.8))))
            s_cum = geom.arc_length(path)
            n = rng.poisson(s_cum[-1] / 14 * density)
            for _ in range(n):
                agents.append(_walker(rng, new_id(), path, s_cum))
    for cw in town.crosswalks:
        if rng.random() < 0.6 * min(density, 1.5):
            a, b, c, d = cw
            start = (a + b) / 2
            end = (c + d) / 2
            u = (end - start) / np.linalg.norm(end - start)
            path = np.array([start - u * 1.5, end + u * 1.5])
            agents.append(_walker(rng, new_id(), path, geom.arc_length(path)))

    ego = _make_ego(town, rng, duration, sensor_height)
    agents = _near_ego(town, rng, ego, duration, new_id) + agents  # first: they win conflicts with traffic
    agents = _remove_conflicts(agents, ego, duration)
    return Scene(town=town, static_mesh=CompiledMesh.concat(meshes), statics=statics, agents=agents, ego=ego,
                 duration=duration)


def _near_ego(town: Town, rng: np.random.Generator, ego: Ego, duration: float, new_id) -> list[Agent]:
    """Road users the ego vehicle meets for sure: cyclists ahead at the right edge of its road, people on the
    crosswalks along its route (both inside the HD map's ROI, where perception must see them)."""
    out: list[Agent] = []
    lane = town.lanes[ego.lane_ids[0]]
    road = next(r for r in town.roads if r.id == lane.road)
    same = road.lanes_fwd if lane.id in road.lanes_fwd else road.lanes_bwd
    edge = town.lanes[same[-1]]
    # cyclists ahead at the right edge of the ego's road (beyond where the ego will be at the end, so that it
    # never has to overtake them), and oncoming ones at the far edge
    opposite = road.lanes_bwd if lane.id in road.lanes_fwd else road.lanes_fwd
    starts = [(edge, ego.s0 + ego.speed * duration + rng.uniform(4, 30)) for _ in range(int(rng.integers(1, 3)))]
    if opposite:
        far = town.lanes[opposite[-1]]
        starts.append((far, far.length - ego.s0 - rng.uniform(0, 50)))
    for ln, s0 in starts:
        if not 0 <= s0 < ln.length:
            continue
        _, params = objects.cyclist(rng)
        m, _ = objects.cyclist(rng, phase=0.0, params=params)
        params["stride"] = 2.1
        params["_dims"] = (m.length, m.width, m.height)
        speed = float(rng.uniform(3.5, 6.0))
        path, _ = town.route(rng, ln.id, s0 + speed * duration + 5)
        out.append(Agent(new_id(), int(MetaType.NONMOT), "cyclist", path, geom.arc_length(path), float(s0), speed,
                         -(ln.width / 2 - 0.75), None, params))
    route = [ego.pose(t)[:2] for t in np.linspace(0, duration, 5)]
    for cw in town.crosswalks:
        c = cw.mean(axis=0)
        if min(np.hypot(c[0] - x, c[1] - y) for x, y in route) > 60:
            continue
        a, b, cc, d = cw
        start, end = (a + b) / 2, (cc + d) / 2
        u = (end - start) / np.linalg.norm(end - start)
        path = np.array([start - u * 1.5, end + u * 1.5])
        for _ in range(int(rng.integers(1, 3))):
            w = _walker(rng, new_id(), path + rng.normal(0, 0.4, 2), geom.arc_length(path))
            out.append(w)
    return out


def _walker(rng: np.random.Generator, instance: int, path: np.ndarray, s_cum: np.ndarray) -> Agent:
    _, params = objects.pedestrian(rng)
    params["stride"] = 1.45 * params["h"] / 1.75
    speed = rng.uniform(0.8, 1.7) * (1 if rng.random() < 0.5 else -1)
    s0 = rng.uniform(0, s_cum[-1])
    if speed < 0:  # walk the other way: reverse the path
        path = path[::-1].copy()
        s_cum = geom.arc_length(path)
        speed = -speed
    return Agent(instance, int(MetaType.PEDESTRIAN), "pedestrian", path, s_cum, s0, speed, 0.0, None, params,
                 pingpong=True)


def _frontage(town: Town, rng: np.random.Generator, put, x: float, y: float, yaw: float, length: float,
              min_dist: float) -> None:
    """A hedge, wall or fence of ``length`` along a sidewalk's back edge (where it fits)."""
    u = rng.random()
    kind = "hedge" if u < 0.5 else ("wall" if u < 0.7 else "fence")
    builder = {"hedge": objects.hedge, "wall": objects.wall, "fence": objects.fence}[kind]
    width = 1.0 if kind == "hedge" else 0.3
    if _clear(town, x, y, yaw, length, width, min_dist):
        put(builder(rng, length), kind, x, y, yaw, BACKGROUND, BACKGROUND)


def _clear(town: Town, x: float, y: float, yaw: float, length: float, width: float, min_dist: float) -> bool:
    u = np.linspace(-0.5, 0.5, 5)
    gx, gy = np.meshgrid(u * length, u * width)
    c, s = np.cos(yaw), np.sin(yaw)
    pts = np.stack([x + c * gx.ravel() - s * gy.ravel(), y + s * gx.ravel() + c * gy.ravel()], axis=1)
    return bool(np.all(town.distance_to_road(pts) >= min_dist))


def _make_ego(town: Town, rng: np.random.Generator, duration: float, sensor_height: float | None) -> Ego:
    lanes = sorted(town.driving_lanes(), key=lambda ln: ln.id)
    weights = np.array([ln.length for ln in lanes])
    ln = lanes[int(rng.choice(len(lanes), p=weights / weights.sum()))]
    speed = float(rng.uniform(5.0, 11.0))
    s0 = float(rng.uniform(0, max(ln.length - 10, 1)))
    path, ids = town.route(rng, ln.id, s0 + speed * duration + 30)
    h = float(rng.uniform(1.73, 1.95)) if sensor_height is None else float(sensor_height)
    return Ego(path, geom.arc_length(path), s0, speed, h, ids)


def _footprint_circles(x: float, y: float, yaw: float, length: float, width: float) -> np.ndarray:
    r = width / 2 + 0.25
    k = max(int(np.ceil(length / max(width, 0.5))), 1)
    offs = (np.arange(k) - (k - 1) / 2) * (length - width) / max(k - 1, 1) if k > 1 else np.zeros(1)
    return np.stack([x + np.cos(yaw) * offs, y + np.sin(yaw) * offs, np.full(k, r)], axis=1)


def _remove_conflicts(agents: list[Agent], ego: Ego, duration: float) -> list[Agent]:
    """Drop agents that overlap the ego vehicle or an earlier agent at any frame time of the drive."""
    alive = np.ones(len(agents), bool)
    for t in np.arange(0.0, duration + 1e-9, 0.1):
        ex, ey, eyaw = ego.pose(t)
        circles = [_footprint_circles(ex, ey, eyaw, 4.8 + 2 * EGO_HEADWAY, 2.0)]  # keep a gap ahead and behind
        owner = [np.full(len(circles[0]), -1)]
        for i, a in enumerate(agents):
            if not alive[i]:
                continue
            x, y, yaw = a.pose(t)
            if (x - ex) ** 2 + (y - ey) ** 2 > 150.0**2:
                continue
            ln, wd, _ = a.dims()
            c = _footprint_circles(x, y, yaw, ln, wd)
            circles.append(c)
            owner.append(np.full(len(c), i))
        cs = np.concatenate(circles)
        ow = np.concatenate(owner)
        tree = cKDTree(cs[:, :2])
        for p, q in sorted(tree.query_pairs(r=2 * cs[:, 2].max())):
            if ow[p] == ow[q] or not (alive[ow[q]] if ow[q] >= 0 else True):
                continue
            if np.hypot(*(cs[p, :2] - cs[q, :2])) >= cs[p, 2] + cs[q, 2]:
                continue
            a_, b_ = ow[p], ow[q]
            if a_ >= 0 and not alive[a_]:
                continue
            victim = b_ if a_ == -1 else (a_ if b_ == -1 else max(a_, b_))
            alive[victim] = False
    return [a for i, a in enumerate(agents) if alive[i]]
