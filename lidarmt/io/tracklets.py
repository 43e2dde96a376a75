"""KITTI raw tracklets (``tracklet_labels.xml`` beside a drive) as per-frame :class:`~lidarmt.types.Labels`.

The file is the KITTI devkit's boost-serialisation XML: ``<tracklets>`` holds ``<count>`` and one ``<item>`` per
tracklet with ``objectType``, box size ``h``, ``w``, ``l`` (metres), ``first_frame`` and ``<poses>``: one
``<item>`` per frame from ``first_frame`` on, with ``tx, ty, tz`` (the centre of the box's *bottom*, velodyne
frame), ``rx, ry, rz`` (rotations; ``rz`` is the yaw about z, the box's length along x at rz = 0),
``state`` (0 unset, 1 interpolated, 2 labelled), ``occlusion`` (-1 unset, 0 visible, 1 partly, 2 fully) and
``truncation`` (-1 unset, 0 in the image, 1 truncated, 2 outside the image, 3 behind it).

As sensor-frame boxes (:data:`~lidarmt.types.BOX_DTYPE`): centre ``(tx, ty, tz + h/2)`` (mid-height),
length ``l``, width ``w``, height ``h``, yaw ``rz``; ``instance`` = the tracklet's index in the file (the same
object keeps its id from frame to frame). Types map to Apollo's meta types: Car, Van → SMALLMOT, Truck →
BIGMOT (both "car"), Pedestrian, Person_sitting → PEDESTRIAN, Cyclist → NONMOT, Tram, Misc and any other type
→ UNKNOWN; DontCare is skipped. Poses with ``state`` 0 (unset) are skipped.

Per-point labels follow from the boxes: a point inside a box (its BEV rectangle, bottom to top) gets the box's
instance and meta type (a point in two boxes: the smaller box's); every other point is -1. KITTI labels only
what the front camera sees, so the reader of a drive also sets ``Labels.region``
(:func:`lidarmt.io.kitti_region.raw_region`): outside it a point is unlabelled, not background.

The XML comes from whoever sent the drive, so it is parsed as data with limits: at most
:data:`MAX_BYTES` bytes, no DTD entity declarations (no entity expansion), declared counts that match the
items, finite numbers, plausible sizes and frame numbers. Anything else is a one-line
:class:`~lidarmt.io.errors.FormatError`.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lidarmt._paths import read_bytes
from lidarmt.io.errors import FormatError, WriterError
from lidarmt.types import BOX_DTYPE, LabelledRegion, Labels, MetaType

TRACKLET_FILE = "tracklet_labels.xml"
MAX_BYTES = 256 * 1024 * 1024  # a long KITTI drive's file is a few MB
MAX_TRACKLETS = 100_000
MAX_FRAME = 10_000_000  # first_frame + poses: KITTI drives have at most a few thousand sweeps
MAX_BOX_SIDE = 100.0  # metres
#: the most boxes one frame's labels may hold, in any label format (a KITTI frame has a few dozen): a valid file
#: with 100,000 boxes in a frame is refused in one line rather than labelled for minutes
MAX_BOXES_PER_FRAME = 10_000

#: KITTI tracklet type -> Apollo meta type (None: skipped). Other types are UNKNOWN.
TRACKLET_META: dict[str, MetaType | None] = {
    "Car": MetaType.SMALLMOT,
    "Van": MetaType.SMALLMOT,
    "Truck": MetaType.BIGMOT,
    "Pedestrian": MetaType.PEDESTRIAN,
    "Person_sitting": MetaType.PEDESTRIAN,
    "Cyclist": MetaType.NONMOT,
    "Tram": MetaType.UNKNOWN,
    "Misc": MetaType.UNKNOWN,
    "DontCare": None,
}

POSE_DTYPE = np.dtype([("tx", "<f8"), ("ty", "<f8"), ("tz", "<f8"), ("rx", "<f8"), ("ry", "<f8"), ("rz", "<f8"),
                       ("state", "<i1"), ("occlusion", "<i1"), ("truncation", "<i1")])
_POSE_FLOATS = ("tx", "ty", "tz", "rx", "ry", "rz")
_POSE_INTS = ("state", "occlusion", "truncation")


def meta_of(object_type: str) -> MetaType | None:
    """The meta type of a tracklet's ``objectType`` (None: DontCare, skipped)."""
    return TRACKLET_META.get(object_type, MetaType.UNKNOWN)


@dataclass(slots=True)
class Tracklet:
    """One object's track: its type and size, and a pose per frame from ``first_frame`` on (POSE_DTYPE)."""

    object_type: str
    h: float
    w: float
    l: float  # noqa: E741 (KITTI's name)
    first_frame: int
    poses: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=POSE_DTYPE))

    @property
    def meta(self) -> MetaType | None:
        return meta_of(self.object_type)

    @property
    def frames(self) -> range:
        return range(self.first_frame, self.first_frame + len(self.poses))


# ----------------------------------------------------------------------------------------------- reading


def _text(parent: ET.Element, tag: str, where: str) -> str:
    el = parent.find(tag)
    if el is None or el.text is None:
        raise FormatError(f"{where}: missing <{tag}>")
    return el.text.strip()


def _float(parent: ET.Element, tag: str, where: str) -> float:
    s = _text(parent, tag, where)
    try:
        v = float(s)
    except ValueError as err:
        raise FormatError(f"{where}: <{tag}> is not a number ({s[:40]!r})") from err
    if not math.isfinite(v):
        raise FormatError(f"{where}: <{tag}> is not finite ({s[:40]!r})")
    return v


def _int(parent: ET.Element, tag: str, where: str, lo: int, hi: int) -> int:
    s = _text(parent, tag, where)
    try:
        v = int(s)
    except ValueError as err:
        raise FormatError(f"{where}: <{tag}> is not an integer ({s[:40]!r})") from err
    if not lo <= v <= hi:
        raise FormatError(f"{where}: <{tag}> {v} is outside {lo}..{hi}")
    return v


def _items(parent: ET.Element, where: str, limit: int) -> list[ET.Element]:
    """The ``<item>`` children of a boost list, checked against its declared ``<count>``."""
    count = _int(parent, "count", where, 0, limit)
    items = parent.findall("item")
    if len(items) != count:
        raise FormatError(f"{where}: <count> says {count} items but {len(items)} are there; truncated or edited?")
    return items


def parse_tracklets(data: bytes, *, where: str = TRACKLET_FILE) -> list[Tracklet]:
    """Tracklets of the bytes of a ``tracklet_labels.xml`` (see the module docstring for the checks)."""
    if len(data) > MAX_BYTES:
        raise FormatError(f"{where}: {len(data):,} bytes, more than the {MAX_BYTES:,} a tracklet file may have")
    head = data[:4096]
    # no entity declarations at all (the devkit's files have none): nothing can expand or fetch anything
    if re.search(rb"<!ENTITY", data, re.IGNORECASE) or re.search(rb"<!DOCTYPE[^>\[]*\[", head, re.IGNORECASE):
        raise FormatError(f"{where}: declares DTD entities; a KITTI tracklet file has none, refused")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise FormatError(f"{where}: not well-formed XML ({err})") from err
    node = root if root.tag == "tracklets" else root.find("tracklets")
    if node is None:
        raise FormatError(f"{where}: no <tracklets> element; is this a KITTI raw tracklet_labels.xml?")
    out: list[Tracklet] = []
    total = 0
    for k, item in enumerate(_items(node, f"{where}: <tracklets>", MAX_TRACKLETS)):
        w = f"{where}: tracklet {k}"
        otype = _text(item, "objectType", w)
        if not otype.isprintable() or len(otype) > 64:
            raise FormatError(f"{w}: <objectType> is not a type name")
        h, wd, ln = (_float(item, t, w) for t in ("h", "w", "l"))
        for name, v in (("h", h), ("w", wd), ("l", ln)):
            if not 0.0 < v <= MAX_BOX_SIDE:
                raise FormatError(f"{w}: <{name}> {v:g} m is not a box side (0..{MAX_BOX_SIDE:g} m)")
        first = _int(item, "first_frame", w, 0, MAX_FRAME)
        poses_el = item.find("poses")
        if poses_el is None:
            raise FormatError(f"{w}: missing <poses>")
        pose_items = _items(poses_el, f"{w} <poses>", MAX_FRAME - first)
        total += len(pose_items)
        if total > MAX_FRAME:
            raise FormatError(f"{where}: more than {MAX_FRAME:,} poses in all")
        poses = np.zeros(len(pose_items), dtype=POSE_DTYPE)
        for j, p in enumerate(pose_items):
            wp = f"{w} pose {j}"
            for t in _POSE_FLOATS:
                poses[j][t] = _float(p, t, wp)
            for t in _POSE_INTS:
                poses[j][t] = _int(p, t, wp, -1, 3)
        if len(poses) and (np.abs(poses["tx"]).max() > 1e4 or np.abs(poses["ty"]).max() > 1e4
                           or np.abs(poses["tz"]).max() > 1e4):
            raise FormatError(f"{w}: a pose lies more than 10 km from the sensor")
        out.append(Tracklet(otype, h, wd, ln, first, poses))
    return out


def read_tracklets(path: str | os.PathLike[str]) -> list[Tracklet]:
    """The tracklets of a ``tracklet_labels.xml`` file; one-line errors for unreadable or malformed files."""
    p = Path(path)
    data = read_bytes(p, max_bytes=MAX_BYTES, what="tracklet file", error=FormatError)
    return parse_tracklets(data, where=str(p))


# ----------------------------------------------------------------------------------------------- labels


class TrackletLabels:
    """Per-frame boxes of a drive's tracklets (frame = the scan's number, its ``.bin`` name)."""

    def __init__(self, tracklets: Sequence[Tracklet], *, source: str = "") -> None:
        self.tracklets = list(tracklets)
        self.source = source
        rows: dict[int, list[tuple]] = {}
        for k, t in enumerate(self.tracklets):
            meta = t.meta
            if meta is None:
                continue
            for j, pose in enumerate(t.poses):
                if int(pose["state"]) == 0:
                    continue
                yaw = math.atan2(math.sin(pose["rz"]), math.cos(pose["rz"]))
                rows.setdefault(t.first_frame + j, []).append(
                    (pose["tx"], pose["ty"], pose["tz"] + t.h / 2.0, t.l, t.w, t.h, yaw, int(meta), k))
        for f, r in rows.items():
            if len(r) > MAX_BOXES_PER_FRAME:
                raise FormatError(f"{source or TRACKLET_FILE}: frame {f} has {len(r):,} boxes, more than the "
                                  f"{MAX_BOXES_PER_FRAME:,} lidarmt reads for one frame")
        self._boxes = {f: np.array(r, dtype=BOX_DTYPE) for f, r in rows.items()}

    def boxes(self, frame: int) -> np.ndarray:
        """The sensor-frame boxes of frame ``frame`` (BOX_DTYPE; empty when none)."""
        b = self._boxes.get(int(frame))
        return np.zeros(0, dtype=BOX_DTYPE) if b is None else b.copy()

    def labels(self, frame: int, points: np.ndarray, *, region: LabelledRegion | None = None) -> Labels:
        """Labels of one frame: its boxes, the per-point instance and meta of the points inside them, and the
        labelled region."""
        boxes = self.boxes(frame)
        inst, meta = points_in_boxes(points, boxes)
        return Labels(boxes, inst, meta, None, region)

    @property
    def box_count(self) -> int:
        return sum(len(b) for b in self._boxes.values())

    def summary(self) -> str:
        """One line for ``lidarmt info``: tracklets per type and per class, boxes, frames."""
        from lidarmt.types import ObstacleClass

        types = Counter(t.object_type for t in self.tracklets)
        classes: Counter[str] = Counter()
        for t in self.tracklets:
            if t.meta is not None:
                classes[ObstacleClass(t.meta.obstacle_class).value] += 1
        frames = sorted(self._boxes)
        per_type = ", ".join(f"{n} {k}" for k, n in types.most_common())
        per_class = ", ".join(f"{k} {n}" for k, n in sorted(classes.items()))
        span = f"frames {frames[0]}–{frames[-1]}" if frames else "no frame"
        return (f"{len(self.tracklets)} tracklets ({per_type or 'none'}) → {per_class or 'no classes'}; "
                f"{self.box_count} boxes in {len(frames)} frames ({span})")


def near_pairs(x: np.ndarray, y: np.ndarray, boxes: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(box index, point index)`` pairs of the points whose (x, y) lie in the square of half-side ``reach[i]``
    around box ``i``'s centre (every point of a rotated box of half-diagonal ``reach`` is in it), and perhaps a
    few more: the candidates a caller then tests exactly. Found through a grid of square cells (points sorted by
    cell, each box looking only at the cells it covers), all in NumPy, so that the work grows with the points
    near the boxes, not with boxes × points. Non-finite points and boxes are never near."""
    empty = np.zeros(0, np.intp)
    keep = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    reach = np.asarray(reach, np.float64) * (1 + 1e-9) + 1e-9  # never lose a point on the rim to rounding
    cx, cy = boxes["cx"].astype(np.float64), boxes["cy"].astype(np.float64)
    good = np.flatnonzero(np.isfinite(cx) & np.isfinite(cy) & np.isfinite(reach) & (reach >= 0))
    if not len(keep) or not len(good):
        return empty, empty
    px, py, cx, cy, reach = x[keep], y[keep], cx[good], cy[good], reach[good]
    # a cell about the size of a box, grown until the boxes cover a bounded number of cells in all
    cell = max(float(np.median(reach)), 0.25)
    lim = 1 << 30
    while True:
        def index(v: np.ndarray, cell: float = cell) -> np.ndarray:
            return np.clip(np.floor(v / cell), -lim, lim).astype(np.int64)

        x0, x1, y0, y1 = index(cx - reach), index(cx + reach), index(cy - reach), index(cy + reach)
        ny = y1 - y0 + 1
        ncell = (x1 - x0 + 1) * ny
        if ncell.sum() <= 8 * (len(keep) + len(good)) + (1 << 16):
            break
        cell *= 2.0
    key = (index(px) + lim) * (2 * lim + 1) + (index(py) + lim)
    order = np.argsort(key, kind="stable")
    cells, start, count = np.unique(key[order], return_index=True, return_counts=True)
    # every (box, cell it covers)
    bi = np.repeat(np.arange(len(good)), ncell)
    k = np.arange(len(bi)) - np.repeat(np.cumsum(ncell) - ncell, ncell)
    want = (x0[bi] + k // ny[bi] + lim) * (2 * lim + 1) + (y0[bi] + k % ny[bi] + lim)
    at = np.minimum(np.searchsorted(cells, want), len(cells) - 1)
    hit = cells[at] == want
    bi, at = bi[hit], at[hit]
    # every (box, point of such a cell), then the square test
    n = count[at]
    pb = np.repeat(bi, n)
    pp = order[np.repeat(start[at], n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))]
    sq = (np.abs(px[pp] - cx[pb]) <= reach[pb]) & (np.abs(py[pp] - cy[pb]) <= reach[pb])
    return good[pb[sq]], keep[pp[sq]]


def box_candidates(points: np.ndarray, boxes: np.ndarray, *, margin: float = 0.0) -> list[np.ndarray]:
    """For each box, the sorted indices of the points near it (a superset of those inside it grown by
    ``margin``), from :func:`near_pairs`: a frame with many boxes costs the points near
    them, not boxes × points."""
    reach = np.hypot(boxes["length"] / 2 + abs(margin), boxes["width"] / 2 + abs(margin))
    bi, pi = near_pairs(points["x"].astype(np.float64), points["y"].astype(np.float64), boxes, reach)
    by = np.lexsort((pi, bi))
    bi, pi = bi[by], pi[by]
    bounds = np.searchsorted(bi, np.arange(len(boxes) + 1))
    return [pi[bounds[i]:bounds[i + 1]] for i in range(len(boxes))]


def points_in_boxes(points: np.ndarray, boxes: np.ndarray, *, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(point_instance int32, point_meta int8) of the points inside each box (-1 outside every box).

    Inside = within the box's BEV rectangle (grown by ``margin`` metres) and between its bottom and top (grown
    alike). A point in two boxes takes the smaller one's labels. ``points`` is a structured point array. The
    points near each box come from a grid of cells (:func:`near_pairs`): the cost grows with the points inside and
    around the boxes, not with boxes × points; :func:`points_in_boxes_reference` is the plain NumPy loop the
    tests cross-check it against."""
    n = len(points)
    inst = np.full(n, -1, dtype=np.int32)
    meta = np.full(n, -1, dtype=np.int8)
    if n == 0 or len(boxes) == 0:
        return inst, meta
    x = points["x"].astype(np.float64)
    y = points["y"].astype(np.float64)
    z = points["z"].astype(np.float64)
    hl = boxes["length"] / 2 + margin
    hw = boxes["width"] / 2 + margin
    hh = boxes["height"] / 2 + margin
    bi, pi = near_pairs(x, y, boxes, np.hypot(hl, hw))
    cos = np.array([math.cos(v) for v in boxes["yaw"]])
    sin = np.array([math.sin(v) for v in boxes["yaw"]])
    dx, dy = x[pi] - boxes["cx"][bi], y[pi] - boxes["cy"][bi]
    u = dx * cos[bi] + dy * sin[bi]
    v = -dx * sin[bi] + dy * cos[bi]
    ok = (np.abs(u) <= hl[bi]) & (np.abs(v) <= hw[bi]) & (np.abs(z[pi] - boxes["cz"][bi]) <= hh[bi])
    bi, pi = bi[ok], pi[ok]
    if not len(pi):
        return inst, meta
    # the reference labels larger boxes first and lets later (smaller) ones override: the winner of a point is
    # the box that comes last in that order
    order = np.argsort(-(boxes["length"] * boxes["width"] * boxes["height"]), kind="stable")
    rank = np.empty(len(boxes), np.int64)
    rank[order] = np.arange(len(boxes))
    by = np.lexsort((rank[bi], pi))
    pi, bi = pi[by], bi[by]
    last = np.r_[pi[1:] != pi[:-1], True]
    inst[pi[last]] = boxes["instance"][bi[last]]
    meta[pi[last]] = boxes["meta"][bi[last]]
    return inst, meta


def points_in_boxes_reference(points: np.ndarray, boxes: np.ndarray, *, margin: float = 0.0
                              ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`points_in_boxes` as a plain loop over the boxes (boxes × points): the reference the tests check
    the grid version against."""
    n = len(points)
    inst = np.full(n, -1, dtype=np.int32)
    meta = np.full(n, -1, dtype=np.int8)
    if n == 0 or len(boxes) == 0:
        return inst, meta
    x = points["x"].astype(np.float64)
    y = points["y"].astype(np.float64)
    z = points["z"].astype(np.float64)
    order = np.argsort(-(boxes["length"] * boxes["width"] * boxes["height"]), kind="stable")
    for i in order:  # larger boxes first: a smaller box inside a larger one overrides it
        b = boxes[i]
        hl, hw, hh = b["length"] / 2 + margin, b["width"] / 2 + margin, b["height"] / 2 + margin
        rad = math.hypot(hl, hw)
        near = np.flatnonzero((np.abs(x - b["cx"]) <= rad) & (np.abs(y - b["cy"]) <= rad)
                              & (np.abs(z - b["cz"]) <= hh))
        if not len(near):
            continue
        dx, dy = x[near] - b["cx"], y[near] - b["cy"]
        c, s = math.cos(b["yaw"]), math.sin(b["yaw"])
        u = dx * c + dy * s
        v = -dx * s + dy * c
        hit = near[(np.abs(u) <= hl) & (np.abs(v) <= hw)]
        inst[hit] = b["instance"]
        meta[hit] = b["meta"]
    return inst, meta


# ----------------------------------------------------------------------------------------------- writing


def format_tracklets(tracklets: Sequence[Tracklet]) -> str:
    """The devkit's XML for tracklets (what :func:`parse_tracklets` reads; for tests and simulated drives)."""
    lines = ['<?xml version="1.0" encoding="UTF-8" standalone="yes" ?>', "<!DOCTYPE boost_serialization>",
             '<boost_serialization signature="serialization::archive" version="9">',
             '<tracklets class_id="0" tracking_level="0" version="0">',
             f"\t<count>{len(tracklets)}</count>", "\t<item_version>1</item_version>"]
    for t in tracklets:
        if not re.fullmatch(r"[A-Za-z_]+", t.object_type):
            raise WriterError(f"tracklet type {t.object_type!r} is not a KITTI type name")
        lines += ["\t<item>", f"\t\t<objectType>{t.object_type}</objectType>", f"\t\t<h>{t.h!r}</h>",
                  f"\t\t<w>{t.w!r}</w>", f"\t\t<l>{t.l!r}</l>", f"\t\t<first_frame>{t.first_frame}</first_frame>",
                  "\t\t<poses>", f"\t\t\t<count>{len(t.poses)}</count>", "\t\t\t<item_version>2</item_version>"]
        for p in t.poses:
            body = "".join(f"<{k}>{float(p[k])!r}</{k}>" for k in _POSE_FLOATS)
            body += "".join(f"<{k}>{int(p[k])}</{k}>" for k in _POSE_INTS)
            lines.append(f"\t\t\t<item>{body}</item>")
        lines += ["\t\t</poses>", "\t\t<finished>1</finished>", "\t</item>"]
    lines += ["</tracklets>", "</boost_serialization>", ""]
    return "\n".join(lines)


def write_tracklets(path: str | os.PathLike[str], tracklets: Sequence[Tracklet]) -> None:
    """Write ``tracklet_labels.xml`` (atomically)."""
    from lidarmt._atomic import atomic_write_text

    atomic_write_text(Path(path), format_tracklets(tracklets))
