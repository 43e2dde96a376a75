"""A small transform buffer: the pose world <- sensor at a cloud's stamp from /tf and /tf_static.

It keeps, per edge parent -> child, the time series of transforms T(parent <- child) from dynamic messages
(``/tf``) and the latest static one (``/tf_static``). :meth:`TfBuffer.lookup` walks from the sensor frame up to
the root (``world``) and composes the edges, interpolating each dynamic edge at the requested time: linear in the
translation and spherical-linear (slerp) in the rotation, as tf2 does. A time outside a dynamic edge's samples is
accepted up to ``max_extrapolation`` seconds beyond the ends (the nearest sample is used); farther, there is no
pose.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from lidarmt.types import make_pose, matrix_to_quat


def slerp(q0: np.ndarray, q1: np.ndarray, u: float) -> np.ndarray:
    """Spherical linear interpolation between unit quaternions (x, y, z, w), shortest arc."""
    q0 = np.asarray(q0, dtype=np.float64)
    q1 = np.asarray(q1, dtype=np.float64)
    d = float(np.dot(q0, q1))
    if d < 0.0:
        q1, d = -q1, -d
    if d > 0.9995:
        q = q0 + u * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = np.arccos(min(d, 1.0))
    s = np.sin(theta)
    return (np.sin((1 - u) * theta) * q0 + np.sin(u * theta) * q1) / s


@dataclass(slots=True)
class _Series:
    times: list[float] = field(default_factory=list)
    trans: list[np.ndarray] = field(default_factory=list)
    quats: list[np.ndarray] = field(default_factory=list)
    sorted: bool = True

    def add(self, t: float, xyz: np.ndarray, q: np.ndarray) -> None:
        xyz = np.asarray(xyz, dtype=np.float64)
        q = np.asarray(q, dtype=np.float64)
        norm = float(np.linalg.norm(q))
        if not (np.isfinite(t) and np.all(np.isfinite(xyz)) and np.isfinite(norm) and norm > 1e-9):
            raise ValueError("non-finite transform or zero quaternion")
        if self.times and t < self.times[-1]:
            self.sorted = False
        self.times.append(t)
        self.trans.append(np.asarray(xyz, dtype=np.float64))
        self.quats.append(np.asarray(q, dtype=np.float64) / np.linalg.norm(q))

    def _sort(self) -> None:
        if not self.sorted:
            order = sorted(range(len(self.times)), key=self.times.__getitem__)
            self.times = [self.times[i] for i in order]
            self.trans = [self.trans[i] for i in order]
            self.quats = [self.quats[i] for i in order]
            self.sorted = True

    def at(self, t: float, max_extrapolation: float) -> np.ndarray | None:
        self._sort()
        ts = self.times
        if not ts:
            return None
        if t <= ts[0]:
            return make_pose(self.trans[0], self.quats[0]) if ts[0] - t <= max_extrapolation else None
        if t >= ts[-1]:
            return make_pose(self.trans[-1], self.quats[-1]) if t - ts[-1] <= max_extrapolation else None
        j = bisect.bisect_right(ts, t)
        t0, t1 = ts[j - 1], ts[j]
        # a stamp within 1 µs of a sample (float rounding of ns stamps near 1.5e9 s is ~0.2 µs) takes it exactly
        if t - t0 < 1e-6:
            return make_pose(self.trans[j - 1], self.quats[j - 1])
        if t1 - t < 1e-6:
            return make_pose(self.trans[j], self.quats[j])
        u = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        xyz = self.trans[j - 1] + u * (self.trans[j] - self.trans[j - 1])
        return make_pose(xyz, slerp(self.quats[j - 1], self.quats[j], u))


class TfBuffer:
    """Transforms by edge; ``lookup(target, source, t)`` gives T(target <- source) at time ``t`` (seconds)."""

    def __init__(self, *, max_extrapolation: float = 0.1) -> None:
        self.max_extrapolation = max_extrapolation
        self._dynamic: dict[tuple[str, str], _Series] = defaultdict(_Series)
        self._static: dict[tuple[str, str], np.ndarray] = {}
        self._parent: dict[str, str] = {}

    @staticmethod
    def _norm(name: str | bytes) -> str:
        if isinstance(name, bytes):  # a string field that was not valid UTF-8
            name = name.decode("utf-8", "replace")
        return name.lstrip("/")

    def add(self, parent: str, child: str, t: float, xyz, quat_xyzw, *, static: bool = False) -> None:
        parent, child = self._norm(parent), self._norm(child)
        if static:
            m = make_pose(xyz, quat_xyzw)  # raises ValueError for a zero or non-finite quaternion
            if not np.all(np.isfinite(m)):
                raise ValueError("non-finite static transform")
            self._static[(parent, child)] = m
        else:
            self._dynamic[(parent, child)].add(float(t), np.asarray(xyz), np.asarray(quat_xyzw))
        self._parent[child] = parent

    def add_matrix(self, parent: str, child: str, t: float, m: np.ndarray, *, static: bool = False) -> None:
        m = np.asarray(m, dtype=np.float64)
        self.add(parent, child, t, m[:3, 3], matrix_to_quat(m[:3, :3]), static=static)

    def __len__(self) -> int:
        return len(self._static) + sum(len(s.times) for s in self._dynamic.values())

    @property
    def edges(self) -> list[tuple[str, str, str]]:
        """(parent, child, "static"/"dynamic") for every edge."""
        out = [(p, c, "static") for (p, c) in self._static]
        out += [(p, c, "dynamic") for (p, c) in self._dynamic if (p, c) not in self._static]
        return sorted(out)

    def chain(self, source: str) -> list[str]:
        """Frames from ``source`` up to the root, ``[source, parent, ..., root]``."""
        out = [self._norm(source)]
        while out[-1] in self._parent and len(out) < 64:
            nxt = self._parent[out[-1]]
            if nxt in out:
                break  # a cycle: stop
            out.append(nxt)
        return out

    def has_dynamic(self, source: str) -> bool:
        """True when the chain above ``source`` has a dynamic edge (a static-only chain is a sensor mount, no pose)."""
        c = self.chain(source)
        return any((p, ch) not in self._static for ch, p in zip(c[:-1], c[1:], strict=True))

    def root(self, source: str) -> str:
        return self.chain(source)[-1]

    def describe_chain(self, source: str) -> str:
        c = self.chain(source)
        if len(c) == 1:
            return "none"
        if not self.has_dynamic(source):
            return "none"
        parts = []
        for child, parent in zip(c[:-1], c[1:], strict=True):
            kind = "static" if (parent, child) in self._static else "dynamic"
            parts.append(f"{parent}→{child} ({kind})")
        return ", ".join(reversed(parts))

    def lookup(self, target: str | None, source: str, t: float) -> np.ndarray | None:
        """T(target <- source) at time ``t``, or None when the chain is broken or ``t`` out of range.

        ``target=None`` means the root of ``source``'s tree (``world`` in Apollo's tree).
        """
        chain = self.chain(source)
        target = chain[-1] if target is None else self._norm(target)
        if target not in chain or len(chain) == 1 and target != chain[0]:
            return None
        m = np.eye(4)
        for child, parent in zip(chain[:-1], chain[1:], strict=True):
            if child == target:
                break
            e = self._static.get((parent, child))
            if e is None:
                s = self._dynamic.get((parent, child))
                e = None if s is None else s.at(t, self.max_extrapolation)
            if e is None:
                return None
            m = e @ m
            if parent == target:
                break
        return m

    def time_range(self) -> tuple[float, float] | None:
        ts = [t for s in self._dynamic.values() if s.times for t in (min(s.times), max(s.times))]
        return (min(ts), max(ts)) if ts else None


class LoadedWindows:
    """Which time intervals (integer ns) have been loaded; :meth:`missing` gives the parts of a window still to load.

    Readers load /tf lazily around the stamps of the frames they read, so a 9 GB bag is never read whole for its
    poses; this keeps track of what is already in the buffer.
    """

    def __init__(self) -> None:
        self._iv: list[tuple[int, int]] = []  # sorted, disjoint, half-open [lo, hi)

    def missing(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The sub-intervals of [lo, hi) not loaded yet; they are marked loaded."""
        out = []
        cur = lo
        for a, b in self._iv:
            if b <= cur:
                continue
            if a >= hi:
                break
            if a > cur:
                out.append((cur, a))
            cur = max(cur, b)
            if cur >= hi:
                break
        if cur < hi:
            out.append((cur, hi))
        if out:
            merged = sorted([*self._iv, (lo, hi)])
            self._iv = []
            for a, b in merged:
                if self._iv and a <= self._iv[-1][1]:
                    self._iv[-1] = (self._iv[-1][0], max(self._iv[-1][1], b))
                else:
                    self._iv.append((a, b))
        return out
