"""Meshes of the things in the simulated town: vehicles, pedestrians, cyclists, street furniture, trees, buildings.

Every builder draws its random sizes and colours from the ``numpy.random.Generator`` it is given and returns
a :class:`Model`: coloured parts in the object's own frame (x forward, y left, z up, origin on the ground below
the centre of its bounding box) and the box size. Shapes are simple but not boxes: a car has a chamfered body,
a tapered cabin with glass and four wheels; a pedestrian has legs that swing with the walking phase, a torso,
arms and a head; a cyclist rides a bicycle with two tyres and a frame.

Reflectivities are the LiDAR's diffuse reflectance (0..1) before incidence and range effects; colours are
sRGB for the camera.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import lidarmt.lidar.sim.geom as geom
from lidarmt.lidar.sim.geom import Mesh
from lidarmt.types import MetaType


class Mat:
    """Material ids (for the camera's shading and the realism statistics) with their base reflectivity."""

    ASPHALT, MARKING, CROSSWALK, SIDEWALK, TERRAIN, CURB = 0, 1, 2, 3, 4, 5
    BUILDING, WALL, FOLIAGE, TRUNK, METAL, SIGN, PAINT, GLASS, TYRE, CLOTH, SKIN, PLASTIC = range(6, 18)


#: base LiDAR reflectivity and colour per ground material code (indices = Mat ids 0..5)
GROUND_REFLECTIVITY = np.array([0.255, 0.57, 0.57, 0.33, 0.36, 0.32], dtype=np.float32)
GROUND_RGB = np.array(
    [[72, 72, 76], [235, 235, 228], [238, 238, 232], [172, 170, 164], [86, 128, 62], [190, 188, 182]],
    dtype=np.uint8,
)

#: SemanticKITTI class id per ground material code (road, lane-marking, lane-marking, sidewalk, terrain, sidewalk)
GROUND_SEMANTIC = np.array([40, 60, 60, 48, 72, 48], dtype=np.int32)
#: SemanticKITTI class id of each kind of object (per-material exceptions in :func:`semantic_id`)
SEMANTIC_BY_KIND = {
    "car": 10, "van": 10, "parked_car": 10, "parked_van": 10, "truck": 18, "bus": 13, "pedestrian": 30,
    "cyclist": 31, "building": 50, "wall": 51, "fence": 51, "hoarding": 52, "tree": 70, "hedge": 70,
    "slope": 70, "lamp": 80, "post": 80, "sign": 81, "street_furniture": 99,
}


def semantic_id(kind: str, mat: int) -> int:
    """SemanticKITTI id of a part: trunks and foliage of trees, sign plates and their posts differ."""
    if mat == Mat.TRUNK:
        return 71
    if mat == Mat.FOLIAGE:
        return 70
    if kind == "sign":
        return 81 if mat == Mat.SIGN else 80
    return SEMANTIC_BY_KIND.get(kind, 99)


_CAR_COLOURS = [  # (rgb, diffuse reflectivity): glossy paint returns little light; KITTI's cars read mostly 0
    ((20, 20, 22), 0.005), ((235, 235, 235), 0.09), ((150, 152, 156), 0.05), ((110, 20, 24), 0.02),
    ((25, 45, 110), 0.015), ((60, 62, 66), 0.01), ((200, 190, 160), 0.07), ((30, 80, 40), 0.015),
]
_CLOTH = [(30, 30, 40), (60, 60, 90), (150, 30, 30), (200, 200, 200), (40, 90, 140), (90, 70, 50), (220, 180, 40)]


@dataclass(slots=True)
class Part:
    vertices: np.ndarray
    triangles: np.ndarray
    mat: int
    reflectivity: float
    rgb: tuple[int, int, int]


@dataclass(slots=True)
class Model:
    parts: list[Part] = field(default_factory=list)
    length: float = 0.0
    width: float = 0.0
    height: float = 0.0

    def add(self, mesh: Mesh, mat: int, reflectivity: float, rgb) -> None:
        self.parts.append(Part(mesh[0], mesh[1], mat, float(reflectivity), tuple(int(c) for c in rgb)))


@dataclass(slots=True)
class CompiledMesh:
    """Triangles with per-triangle attributes, ready for the ray caster."""

    vertices: np.ndarray  # (N, 3) float64
    triangles: np.ndarray  # (M, 3) int64
    reflectivity: np.ndarray  # (M,) float32
    rgb: np.ndarray  # (M, 3) uint8
    mat: np.ndarray  # (M,) uint8
    instance: np.ndarray  # (M,) int32, -1 for background
    meta: np.ndarray  # (M,) int8 MetaType, -1 for background
    semantic: np.ndarray  # (M,) int32 SemanticKITTI class id

    @classmethod
    def empty(cls) -> CompiledMesh:
        return cls(np.zeros((0, 3)), np.zeros((0, 3), np.int64), np.zeros(0, np.float32),
                   np.zeros((0, 3), np.uint8), np.zeros(0, np.uint8), np.zeros(0, np.int32), np.zeros(0, np.int8),
                   np.zeros(0, np.int32))

    @classmethod
    def concat(cls, items: list[CompiledMesh]) -> CompiledMesh:
        items = [m for m in items if len(m.triangles)]
        if not items:
            return cls.empty()
        v, f = geom.merge([(m.vertices, m.triangles) for m in items])
        return cls(v, f, *(np.concatenate([getattr(m, k) for m in items])
                           for k in ("reflectivity", "rgb", "mat", "instance", "meta", "semantic")))


def compile_model(model: Model, *, x: float, y: float, z: float, yaw: float, instance: int, meta: int,
                  kind: str = "", pitch: float = 0.0) -> CompiledMesh:
    """Place a model in the world and flatten it into one attributed triangle mesh."""
    vs, fs, refl, rgb, mat, sem = [], [], [], [], [], []
    n = 0
    rot = geom.rot_z(yaw) @ geom.rot_y(pitch) if pitch else geom.rot_z(yaw)
    for p in model.parts:
        vs.append(p.vertices @ rot.T + [x, y, z])
        fs.append(p.triangles + n)
        n += len(p.vertices)
        m = len(p.triangles)
        refl.append(np.full(m, p.reflectivity, np.float32))
        rgb.append(np.tile(np.array(p.rgb, np.uint8), (m, 1)))
        mat.append(np.full(m, p.mat, np.uint8))
        sem.append(np.full(m, semantic_id(kind, p.mat), np.int32))
    m_tot = sum(len(f) for f in fs)
    return CompiledMesh(np.concatenate(vs), np.concatenate(fs), np.concatenate(refl), np.concatenate(rgb),
                        np.concatenate(mat), np.full(m_tot, instance, np.int32), np.full(m_tot, meta, np.int8),
                        np.concatenate(sem))


# ----------------------------------------------------------------------------------------------- vehicles


def _paint(rng: np.random.Generator) -> tuple[tuple[int, int, int], float]:
    rgb, refl = _CAR_COLOURS[rng.integers(len(_CAR_COLOURS))]
    return rgb, float(np.clip(refl * rng.uniform(0.6, 1.4), 0.0, 0.6))


def _wheels(model: Model, xs: list[float], width: float, radius: float, tyre_w: float = 0.22) -> None:
    for x in xs:
        for side in (-1, 1):
            w = geom.wheel(radius, tyre_w, segments=10)
            model.add(geom.transform(w, None, [x, side * (width / 2 - tyre_w / 2 + 0.02), radius]),
                      Mat.TYRE, 0.03, (18, 18, 18))


def car(rng: np.random.Generator) -> Model:
    """A passenger car (sedan/hatchback/SUV): chamfered body, tapered cabin with glass, four wheels."""
    kind = rng.choice(["sedan", "hatch", "suv"], p=[0.5, 0.3, 0.2])
    length = {"sedan": rng.uniform(4.3, 4.9), "hatch": rng.uniform(3.7, 4.3), "suv": rng.uniform(4.4, 4.9)}[kind]
    width = rng.uniform(1.68, 1.9) + (0.08 if kind == "suv" else 0.0)
    height = {"sedan": rng.uniform(1.38, 1.52), "hatch": rng.uniform(1.42, 1.58), "suv": rng.uniform(1.65, 1.85)}[kind]
    rgb, refl = _paint(rng)
    m = Model(length=length, width=width, height=height)
    r_wheel = 0.31 if kind != "suv" else 0.36
    clear = 0.17 if kind != "suv" else 0.22
    belt = clear + 0.48 * (height - clear) + (0.05 if kind == "suv" else 0.0)
    hl = length / 2
    body = np.array([[-hl, clear + 0.1], [-hl + 0.12, clear], [hl - 0.15, clear], [hl, clear + 0.15],
                     [hl - 0.05, belt - 0.05], [hl - 0.35, belt], [-hl + 0.1, belt], [-hl, belt - 0.1]])
    m.add(geom.extrude_xz(body, width), Mat.PAINT, refl, rgb)
    # cabin: windscreen sloping back from about a third of the length, roof, rear window
    front = hl - (0.32 if kind == "hatch" else 0.36) * length + (0.25 if kind == "suv" else 0.0)
    back = -hl + (0.22 if kind == "sedan" else 0.05)
    cabin = np.array([[back, belt], [front, belt], [front - 0.45 * (height - belt) - 0.25, height],
                      [back + (0.55 if kind == "sedan" else 0.15), height]])
    m.add(geom.extrude_xz(cabin, width - 0.06, width - 0.3), Mat.GLASS, 0.01, (40, 50, 60))
    roof = np.array([[back + 0.1, height - 0.07], [front - 0.45 * (height - belt) - 0.3, height - 0.07],
                     [front - 0.45 * (height - belt) - 0.32, height], [back + 0.12, height]])
    m.add(geom.extrude_xz(roof, width - 0.28), Mat.PAINT, refl, rgb)
    _wheels(m, [hl - 0.8, -hl + 0.85], width, r_wheel)
    return m


def ego_body(*, sensor_height: float) -> Model:
    """The ego vehicle's body (an estate car) in the LiDAR's frame (origin on the ground below the sensor).

    It only blocks rays (the caster drops hits on it): the roof under the sensor, the windscreen and the bonnet
    hide the ground next to the car from the lowest lasers, as on KITTI's car where the lowest rings keep
    only about half of their points.
    """
    roof = sensor_height - 0.45  # the sensor sits on a rack 0.45 m above the roof
    m = Model(length=4.7, width=1.8, height=roof)
    body = np.array([[-2.45, 0.3], [2.15, 0.3], [2.25, 0.45], [2.25, 0.8], [1.5, 0.98], [-2.45, 0.98]])
    m.add(geom.extrude_xz(body, 1.8), Mat.PAINT, 0.1, (200, 200, 200))
    cabin = np.array([[-2.35, 0.98], [1.35, 0.98], [0.5, roof], [-1.0, roof]])
    m.add(geom.extrude_xz(cabin, 1.75, 1.25), Mat.GLASS, 0.05, (40, 50, 60))
    return m


def van(rng: np.random.Generator) -> Model:
    """A van / minibus: short bonnet, tall box body with glass band."""
    length, width, height = rng.uniform(4.8, 5.6), rng.uniform(1.9, 2.05), rng.uniform(1.9, 2.4)
    rgb, refl = _paint(rng)
    m = Model(length=length, width=width, height=height)
    hl = length / 2
    clear = 0.2
    body = np.array([[-hl, clear], [hl - 0.1, clear], [hl, clear + 0.3], [hl, clear + 0.75], [hl - 0.7, 1.05],
                     [hl - 1.2, height], [-hl, height]])
    m.add(geom.extrude_xz(body, width, width - 0.1), Mat.PAINT, refl, rgb)
    glass = np.array([[-hl + 0.3, 1.15], [hl - 0.95, 1.15], [hl - 1.3, height - 0.15], [-hl + 0.3, height - 0.15]])
    m.add(geom.extrude_xz(glass, width + 0.01, width - 0.09), Mat.GLASS, 0.01, (40, 50, 60))
    _wheels(m, [hl - 0.9, -hl + 1.0], width, 0.34)
    return m


def truck(rng: np.random.Generator) -> Model:
    """A box truck: cab with windscreen, cargo box, six wheels."""
    length, width, height = rng.uniform(6.5, 10.0), rng.uniform(2.35, 2.55), rng.uniform(3.0, 3.8)
    rgb, refl = _paint(rng)
    box_rgb = (225, 225, 220) if rng.random() < 0.6 else rgb
    m = Model(length=length, width=width, height=height)
    hl = length / 2
    cab_l = 2.1
    cab = np.array([[hl - cab_l, 0.45], [hl, 0.45], [hl, 2.0], [hl - 0.35, 2.9], [hl - cab_l, 2.9]])
    m.add(geom.extrude_xz(cab, width - 0.1), Mat.PAINT, refl, rgb)
    m.add(geom.box(0.05, width - 0.3, 0.8, center=(hl + 0.005 - 0.2, 0, 2.4)), Mat.GLASS, 0.01, (40, 50, 60))
    m.add(geom.box(length - cab_l - 0.15, width, height - 0.9, center=(-cab_l / 2 - 0.075, 0, 0.9 + (height - 0.9) / 2)),
          Mat.PAINT, rng.uniform(0.25, 0.45), box_rgb)
    m.add(geom.box(length - 0.5, 0.9, 0.3, center=(0, 0, 0.75)), Mat.METAL, 0.15, (40, 40, 40))  # chassis
    _wheels(m, [hl - 1.2, -hl + 2.2, -hl + 1.2], width, 0.5, 0.3)
    return m


def bus(rng: np.random.Generator) -> Model:
    """A city bus: long body with rounded front, window band, six wheels."""
    length, width, height = rng.uniform(10.5, 12.8), rng.uniform(2.45, 2.55), rng.uniform(2.95, 3.3)
    rgb, refl = _paint(rng)
    m = Model(length=length, width=width, height=height)
    hl = length / 2
    body = np.array([[-hl, 0.35], [hl - 0.1, 0.35], [hl, 0.6], [hl, height - 0.25], [hl - 0.25, height],
                     [-hl + 0.2, height], [-hl, height - 0.2]])
    m.add(geom.extrude_xz(body, width, width - 0.08), Mat.PAINT, max(refl, 0.15), rgb)
    band = np.array([[-hl + 0.3, 1.25], [hl - 0.2, 1.25], [hl - 0.2, height - 0.35], [-hl + 0.3, height - 0.35]])
    m.add(geom.extrude_xz(band, width + 0.012), Mat.GLASS, 0.01, (35, 45, 55))
    _wheels(m, [hl - 2.6, -hl + 3.0, -hl + 1.7], width, 0.5, 0.3)
    return m


# ----------------------------------------------------------------------------------------------- people


def pedestrian(rng: np.random.Generator, *, phase: float = 0.0, params: dict | None = None) -> tuple[Model, dict]:
    """A walking person: legs swinging with ``phase`` (radians), torso, arms, head.

    Returns the model and the drawn parameters; pass them back with another phase to animate the same person.
    """
    if params is None:
        h = float(np.clip(rng.normal(1.72, 0.09), 1.5, 1.95))
        params = {
            "h": h, "shoulder": h * rng.uniform(0.23, 0.27), "depth": rng.uniform(0.2, 0.3),
            "top": _CLOTH[rng.integers(len(_CLOTH))], "bottom": _CLOTH[rng.integers(len(_CLOTH))],
            "r_top": rng.uniform(0.15, 0.45), "r_bottom": rng.uniform(0.1, 0.35), "bag": bool(rng.random() < 0.25),
        }
    p = params
    h = p["h"]
    hip = 0.5 * h
    swing = 0.35 * np.sin(phase)
    m = Model(length=0.0, width=0.0, height=h)
    for side, sgn in ((-1, 1.0), (1, -1.0)):
        a = np.array([0.0, side * 0.09, hip])
        foot = a + [sgn * hip * np.sin(swing), 0.0, -hip * np.cos(swing)]
        m.add(geom.segment_box(a, foot, 0.13), Mat.CLOTH, p["r_bottom"], p["bottom"])
    torso = geom.box(p["depth"], p["shoulder"] * 1.55, 0.3 * h, center=(0, 0, hip + 0.15 * h + 0.02))
    m.add(torso, Mat.CLOTH, p["r_top"], p["top"])
    sh_z = hip + 0.3 * h
    for side, sgn in ((-1, -1.0), (1, 1.0)):
        a = np.array([0.0, side * (p["shoulder"] * 0.78 + 0.05), sh_z - 0.03])
        hand = a + [sgn * 0.6 * swing * 0.35 * h * 0.9, 0.0, -0.36 * h]
        m.add(geom.segment_box(a, hand, 0.08), Mat.CLOTH, p["r_top"], p["top"])
    m.add(geom.box(0.1, 0.1, 0.06, center=(0, 0, sh_z + 0.03)), Mat.SKIN, 0.35, (200, 160, 130))
    m.add(geom.sphere((0.1, 0.09, 0.115), center=(0, 0, h - 0.115), subdiv=1), Mat.SKIN, 0.35, (200, 160, 130))
    if p["bag"]:
        m.add(geom.box(0.15, 0.3, 0.4, center=(-p["depth"] / 2 - 0.08, 0, hip + 0.18 * h)), Mat.PLASTIC, 0.2, (60, 60, 60))
    # bounding box: legs and arms swing, so take the extent of the mesh
    v = np.concatenate([q.vertices for q in m.parts])
    m.length = float(max(2 * np.abs(v[:, 0]).max(), 0.3))
    m.width = float(max(2 * np.abs(v[:, 1]).max(), 0.4))
    return m, params


def cyclist(rng: np.random.Generator, *, phase: float = 0.0, params: dict | None = None) -> tuple[Model, dict]:
    """A person riding a bicycle: two tyres, a frame, handlebar, and a rider pedalling with ``phase``."""
    if params is None:
        params = {
            "wr": rng.uniform(0.33, 0.36), "base": rng.uniform(1.0, 1.1), "h": float(np.clip(rng.normal(1.75, 0.08), 1.55, 1.95)),
            "frame": _CLOTH[rng.integers(len(_CLOTH))], "top": _CLOTH[rng.integers(len(_CLOTH))],
            "bottom": _CLOTH[rng.integers(len(_CLOTH))], "r_top": rng.uniform(0.15, 0.45), "r_bottom": rng.uniform(0.1, 0.35),
        }
    p = params
    wr, base, h = p["wr"], p["base"], p["h"]
    m = Model()
    xf, xr = base / 2, -base / 2
    for x in (xf, xr):
        m.add(geom.transform(geom.ring(wr, 0.025, segments=18, sides=4), None, [x, 0, wr]), Mat.TYRE, 0.06, (20, 20, 20))
    crank = np.array([0.0, 0, wr])
    seat = np.array([xr + 0.25, 0, wr + 0.55])
    head_tube = np.array([xf - 0.15, 0, wr + 0.55])
    bar = np.array([xf - 0.1, 0, wr + 0.7])
    for a, b in ((np.array([xr, 0, wr]), crank), (crank, seat), (seat, np.array([xr, 0, wr])), (crank, head_tube),
                 (seat, head_tube), (head_tube, np.array([xf, 0, wr])), (head_tube, bar)):
        m.add(geom.segment_box(a, b, 0.04), Mat.METAL, 0.3, p["frame"])
    m.add(geom.box(0.06, 0.55, 0.03, center=tuple(bar)), Mat.METAL, 0.3, (40, 40, 40))
    # rider
    hip = seat + [0.0, 0, 0.08]
    for side, ph in ((-1, phase), (1, phase + np.pi)):
        pedal = crank + [0.17 * np.cos(ph), side * 0.12, 0.17 * np.sin(ph)]
        knee = (hip + pedal) / 2 + [0.22, 0, 0.12]
        m.add(geom.segment_box(hip + [0, side * 0.1, 0], knee + [0, side * 0.1, 0], 0.12), Mat.CLOTH, p["r_bottom"], p["bottom"])
        m.add(geom.segment_box(knee + [0, side * 0.1, 0], pedal, 0.1), Mat.CLOTH, p["r_bottom"], p["bottom"])
    shoulder = hip + [0.33, 0, 0.5 * (h - 1.0) + 0.25]
    m.add(geom.segment_box(hip, shoulder, 0.3), Mat.CLOTH, p["r_top"], p["top"])
    for side in (-1, 1):
        m.add(geom.segment_box(shoulder + [0, side * 0.2, 0], bar + [0, side * 0.25, 0], 0.08), Mat.CLOTH, p["r_top"], p["top"])
    m.add(geom.sphere((0.11, 0.1, 0.12), center=tuple(shoulder + [0.08, 0, 0.2]), subdiv=1), Mat.SKIN, 0.35, (200, 160, 130))
    v = np.concatenate([q.vertices for q in m.parts])
    m.length = float(v[:, 0].max() - v[:, 0].min())
    m.width = 0.6
    m.height = float(v[:, 2].max())
    # centre the bounding box on x = 0
    dx = (v[:, 0].max() + v[:, 0].min()) / 2
    for q in m.parts:
        q.vertices = q.vertices - [dx, 0, 0]
    return m, p


# ----------------------------------------------------------------------------------------------- static things


def pole(rng: np.random.Generator, *, lamp: bool) -> Model:
    """A street-light pole (with an arm and lamp head, facing +y) or a plain post."""
    h = rng.uniform(5.5, 8.5) if lamp else rng.uniform(2.5, 3.5)
    m = Model(length=0.3, width=0.3, height=h)
    m.add(geom.cylinder(0.11 if lamp else 0.06, h, segments=8, radius_top=0.07 if lamp else 0.06), Mat.METAL, 0.22, (110, 110, 115))
    if lamp:
        arm = rng.uniform(1.2, 2.2)
        m.add(geom.segment_box([0, 0, h - 0.1], [0, arm, h], 0.08), Mat.METAL, 0.28, (110, 110, 115))
        m.add(geom.box(0.3, 0.6, 0.15, center=(0, arm, h - 0.05)), Mat.METAL, 0.35, (90, 90, 95))
        # centre the bounding box (post and arm) on the origin: the post stands arm/2 behind it
        for q in m.parts:
            q.vertices = q.vertices - [0.0, arm / 2, 0.0]
        m.width = arm + 0.3
    return m


def sign(rng: np.random.Generator) -> Model:
    """A traffic sign: post and a retro-reflective plate (round, triangular or square) facing +x."""
    h = rng.uniform(2.2, 2.8)
    m = Model(length=0.2, width=0.75, height=h + 0.4)
    m.add(geom.cylinder(0.04, h, segments=6), Mat.METAL, 0.28, (140, 140, 140))
    colour = [(200, 30, 30), (30, 60, 170), (230, 200, 30), (240, 240, 240)][rng.integers(4)]
    m.add(geom.transform(geom.cylinder(0.35, 0.03, segments=8 if rng.random() < 0.5 else 4), geom.rot_y(np.pi / 2),
                         [0.06, 0, h]), Mat.SIGN, 0.95, colour)
    return m


def bin_or_box(rng: np.random.Generator) -> Model:
    """A rubbish bin, utility cabinet or bollard on the sidewalk."""
    kind = rng.integers(3)
    if kind == 0:
        m = Model(length=0.6, width=0.6, height=1.05)
        m.add(geom.box(0.6, 0.6, 1.0, center=(0, 0, 0.5)), Mat.PLASTIC, 0.25, (40, 90, 40))
        m.add(geom.box(0.62, 0.62, 0.05, center=(0, 0, 1.025)), Mat.PLASTIC, 0.25, (30, 70, 30))
    elif kind == 1:
        m = Model(length=0.5, width=1.0, height=1.3)
        m.add(geom.box(0.5, 1.0, 1.3, center=(0, 0, 0.65)), Mat.METAL, 0.3, (150, 150, 140))
    else:
        m = Model(length=0.25, width=0.25, height=0.9)
        m.add(geom.cylinder(0.12, 0.9, segments=8), Mat.METAL, 0.3, (70, 70, 70))
    return m


def tree(rng: np.random.Generator) -> Model:
    """A tree: trunk and a lumpy crown (one or two blobs)."""
    trunk_h = rng.uniform(1.8, 3.5)
    r_trunk = rng.uniform(0.12, 0.3)
    crown_r = rng.uniform(1.3, 3.2)
    m = Model(length=2 * crown_r, width=2 * crown_r, height=trunk_h + 2 * crown_r)
    m.add(geom.cylinder(r_trunk, trunk_h + crown_r * 0.5, segments=8, radius_top=r_trunk * 0.7), Mat.TRUNK, 0.32, (85, 62, 40))
    n = geom.sphere_vertex_count(2)
    colour = (int(rng.integers(35, 70)), int(rng.integers(85, 130)), int(rng.integers(30, 55)))
    blobs = 1 if rng.random() < 0.6 else 2
    for b in range(blobs):
        jit = rng.uniform(0.78, 1.12, n)
        c = (rng.uniform(-0.3, 0.3) * b, rng.uniform(-0.3, 0.3) * b, trunk_h + crown_r * (0.9 + 0.25 * b))
        rr = crown_r * (1.0 - 0.2 * b)
        m.add(geom.sphere((rr, rr, rr * rng.uniform(0.8, 1.1)), center=c, subdiv=2, jitter=jit), Mat.FOLIAGE,
              rng.uniform(0.28, 0.38), colour)
    return m


def building(rng: np.random.Generator, frontage: float, depth: float) -> Model:
    """A building block: one or two stacked boxes, with a window band on the front (+y) facade."""
    h = rng.uniform(4.0, 22.0) if rng.random() < 0.8 else rng.uniform(3.0, 6.0)
    colour = tuple(int(c) for c in rng.integers(90, 230, 3))
    refl = rng.uniform(0.32, 0.52)
    m = Model(length=frontage, width=depth, height=h)
    # the walls reach 1.5 m below the ground so that nothing shows under them on sloping ground
    m.add(geom.box(frontage, depth, h + 1.5, center=(0, 0, (h - 1.5) / 2)), Mat.BUILDING, refl, colour)
    if h > 8 and rng.random() < 0.5:
        h2 = rng.uniform(2.5, 6.0)
        m.add(geom.box(frontage * 0.7, depth * 0.7, h2, center=(0, -depth * 0.1, h + h2 / 2)), Mat.BUILDING, refl, colour)
        m.height = h + h2
    if rng.random() < 0.7:  # shop windows on the street side
        m.add(geom.box(frontage * 0.9, 0.05, min(2.2, h - 0.8), center=(0, depth / 2 + 0.02, 0.5 + min(2.2, h - 0.8) / 2)),
              Mat.GLASS, 0.08, (50, 60, 70))
    return m


def hedge(rng: np.random.Generator, length: float) -> Model:
    """A hedge or row of shrubs along x: lumpy blobs 0.8-2.2 m tall, 0.8-1.8 m deep."""
    h = rng.uniform(0.8, 2.2)
    depth = rng.uniform(0.8, 1.8)
    m = Model(length=length, width=depth, height=h)
    colour = (int(rng.integers(35, 70)), int(rng.integers(80, 125)), int(rng.integers(30, 55)))
    n_blob = max(int(length / (depth * 1.2)), 1)
    nv = geom.sphere_vertex_count(1)
    step = length / n_blob
    for i in range(n_blob):
        cx = -length / 2 + step * (i + 0.5)
        r = (step * 0.65, depth / 2, h / 2 * rng.uniform(0.85, 1.0))
        m.add(geom.sphere(r, center=(cx, 0, r[2] - 0.15), subdiv=1, jitter=rng.uniform(0.8, 1.1, nv)), Mat.FOLIAGE,
              rng.uniform(0.28, 0.38), colour)
    return m


def wall(rng: np.random.Generator, length: float) -> Model:
    """A garden wall or fence segment along x."""
    h = rng.uniform(0.8, 2.2)
    t = rng.uniform(0.15, 0.3)
    m = Model(length=length, width=t, height=h)
    m.add(geom.box(length, t, h + 0.5, center=(0, 0, (h - 0.5) / 2)), Mat.WALL, rng.uniform(0.25, 0.45),
          tuple(int(c) for c in rng.integers(100, 200, 3)))
    return m


def fence(rng: np.random.Generator, length: float) -> Model:
    """A fence along x: posts every 2-3 m with either closed boards (a solid face) or open bars/mesh rails
    that let part of the laser through (the gappy returns of real railings)."""
    h = rng.uniform(0.9, 2.0)
    m = Model(length=length, width=0.12, height=h)
    metal = rng.random() < 0.5
    refl = rng.uniform(0.2, 0.45)
    colour = (80, 84, 80) if metal else tuple(int(c) for c in rng.integers(90, 170, 3))
    mat = Mat.METAL if metal else Mat.WALL
    n_post = max(int(length / rng.uniform(2.0, 3.0)), 1) + 1
    for x in np.linspace(-length / 2, length / 2, n_post):
        m.add(geom.box(0.08, 0.08, h + 0.3, center=(float(x), 0, (h - 0.3) / 2)), mat, refl, colour)
    if rng.random() < 0.45:  # closed boards
        m.add(geom.box(length, 0.04, h - 0.05, center=(0, 0.04, h / 2)), mat, refl, colour)
    else:  # rails top and bottom, vertical bars every 0.12-0.3 m
        for zr in (0.12, h - 0.05):
            m.add(geom.box(length, 0.05, 0.05, center=(0, 0.03, zr)), mat, refl, colour)
        gap = rng.uniform(0.12, 0.3)
        for x in np.arange(-length / 2 + gap / 2, length / 2, gap):
            m.add(geom.box(0.025, 0.025, h - 0.1, center=(float(x), 0.03, h / 2)), mat, refl, colour)
    return m


def slope_bank(rng: np.random.Generator, length: float, depth: float) -> Model:
    """A vegetated embankment along x: rises from the sidewalk's back edge (y = -depth/2) to 0.6-3.5 m at
    y = +depth/2, its surface lumpy (grass, bushes), with a few shrubs on it. Background, like a hedge."""
    top = rng.uniform(0.6, 3.5)
    m = Model(length=length, width=depth, height=top + 0.8)
    nx, ny = max(int(length / 0.7), 2), max(int(depth / 0.7), 2)
    xs = np.linspace(-length / 2, length / 2, nx + 1)
    ys = np.linspace(-depth / 2, depth / 2, ny + 1)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    frac = (gy + depth / 2) / depth
    gz = top * np.clip(frac * rng.uniform(1.0, 1.6), 0, 1) + rng.normal(0, 0.12, gx.shape) * (frac > 0)
    gz[:, 0] = -0.3  # the toe sinks into the ground
    verts = np.stack([gx.ravel(), gy.ravel(), gz.ravel()], axis=1)
    idx = np.arange((nx + 1) * (ny + 1)).reshape(nx + 1, ny + 1)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    colour = (int(rng.integers(50, 90)), int(rng.integers(90, 140)), int(rng.integers(35, 60)))
    m.add((verts.astype(np.float64), tris.astype(np.int64)), Mat.FOLIAGE, rng.uniform(0.28, 0.4), colour)
    nv = geom.sphere_vertex_count(1)
    for _ in range(int(rng.integers(0, max(int(length / 4), 1) + 1))):
        r = rng.uniform(0.4, 1.2)
        x, y = rng.uniform(-length / 2 + r, length / 2 - r), rng.uniform(-depth / 4, depth / 2 - r)
        z = top * np.clip((y + depth / 2) / depth, 0, 1)
        m.add(geom.sphere((r, r, r * 0.8), center=(x, y, z + r * 0.5), subdiv=1, jitter=rng.uniform(0.75, 1.15, nv)),
              Mat.FOLIAGE, rng.uniform(0.28, 0.38), colour)
    return m


def hoarding(rng: np.random.Generator, length: float) -> Model:
    """A tall solid panel on the sidewalk (construction hoarding, noise barrier, billboard base): a large
    flat static structure right next to the road, 2-3.5 m tall."""
    h = rng.uniform(2.0, 3.5)
    m = Model(length=length, width=0.1, height=h)
    m.add(geom.box(length, 0.1, h + 0.2, center=(0, 0, (h - 0.2) / 2)), Mat.WALL, rng.uniform(0.25, 0.55),
          tuple(int(c) for c in rng.integers(80, 230, 3)))
    return m


VEHICLE_BUILDERS = {"car": (car, MetaType.SMALLMOT), "van": (van, MetaType.SMALLMOT),
                    "truck": (truck, MetaType.BIGMOT), "bus": (bus, MetaType.BIGMOT)}
