"""What every bug-bundle replay shares, whatever the relation: the result it returns and its outcome, the
tolerances numbers made on another CPU are compared with, the manifest and MCAP checks (a bundle shows files
Foxglove opens: they must be listed and hold their topics) and the paths a bundle stored relative to the folder its
campaign ran in. Each relation's replay (:mod:`lidarmt.lidar.mr1.replay`, :mod:`lidarmt.lidar.replay`,
:mod:`lidarmt.camera.replay`) builds on these.

**Outcomes.** A replay ends in one of :data:`OUTCOMES`:

* ``identical``: every check passed and every number is bit for bit the stored one (the same machine, as a rule);
* ``reproduced``: every check passed, the relation is still violated, and the numbers that moved are each within
  the tolerance of their kind (:data:`TOLERANCES`). oneDNN picks other kernels on another instruction set (AMX,
  AVX-512, AVX2), so a network's outputs differ in the last digits from one CPU to the next; where those digits
  change what follows (a confidence on a threshold moves a cell into another cluster), the LiDAR replays list the
  obstacle differences (:meth:`ReplayResult.moved`) and accept them as long as the relation still holds;
* ``not reproduced``: a check failed, the relation no longer holds, a number moved past its tolerance, or things
  moved with nothing to explain it (no number drifted and the bundle was made with the same kernels as here).

Tolerances are one table for both halves, by the kind of quantity (a steering angle and a box heading are both
angles). They are chosen from ``benchmarks/isa_drift.py``'s measurements (docs/replay-tolerances.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lidarmt._machine import record as machine_record
from lidarmt.engine.trust import check_trust, is_callable_spec

#: what a replay can conclude, best first (exit status 0, 0, 1)
OUTCOMES = ("identical", "reproduced", "not reproduced")


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a number of one kind may move between CPU kinds: ``abs`` in ``unit`` (the stored values' rounding
    is below it)."""

    kind: str
    abs: float
    unit: str
    what: str

    def allows(self, now: float, stored: float) -> bool:
        return math.isfinite(now) and math.isfinite(stored) and abs(now - stored) <= self.abs


#: The tolerances, by kind of quantity, for both halves. Measured with ``benchmarks/isa_drift.py`` (the seven
#: steering models and Apollo's CNN under ONEDNN_MAX_CPU_ISA=AVX512_CORE, AVX2, SSE41 against AMX;
#: docs/replay-tolerances.md): steering angles moved by at most 4.1e-7 rad, the CNN's outputs by 4.3e-6, obstacle
#: scores by 1e-6 (one step of their rounding), boxes not at all. Each tolerance is over 20x its measurement and
#: at least two steps of the coarsest rounding its numbers are stored with (facts' scores and overlaps: 4
#: decimals; verdicts' distances and sizes: 3).
TOLERANCES: dict[str, Tolerance] = {
    "angle": Tolerance("angle", 1e-5, "rad", "steering angles, box headings"),
    "probability": Tolerance("probability", 2e-4, "", "network scores and class probabilities, overlaps (0..1)"),
    "length": Tolerance("length", 2e-3, "m", "box centres and sizes, polygons, distances"),
}

#: the kind of the floats under a JSON key (obstacle lists, verdicts, facts); a key not here is a length
NUMBER_KINDS = {"score": "probability", "type_probs": "probability", "shared": "probability",
                "matches": "probability", "iou": "probability", "label_iou": "probability",
                "confidence": "probability", "overlap": "probability", "ghost": "probability",
                "heading": "angle", "pred": "angle", "pred_t": "angle", "yaw": "angle"}


@dataclass(slots=True)
class Drift:
    """A number that is not bit for bit the stored one."""

    name: str
    kind: str
    now: float
    stored: float

    @property
    def diff(self) -> float:
        return abs(self.now - self.stored)

    @property
    def tolerance(self) -> Tolerance:
        return TOLERANCES[self.kind]

    def to_dict(self) -> dict[str, Any]:
        t = self.tolerance
        return {"name": self.name, "kind": self.kind, "now": self.now, "stored": self.stored, "difference": self.diff,
                "tolerance": t.abs, "unit": t.unit}

    def text(self) -> str:
        t = self.tolerance
        unit = f" {t.unit}" if t.unit else ""
        return f"{self.name}: {self.now!r} now, {self.stored!r} stored ({self.diff:.3g}{unit}; {t.kind} tolerance " \
               f"{t.abs:g}{unit})"


CHECK_FILES = "file checksums (MANIFEST.json)"
CHECK_MCAP = "bundle.mcap opens with its topics"


#: Files a bundle shows but replay does not read (Foxglove's): when present, the manifest must list them too.
_SHOWN = ("bundle.mcap", "foxglove-layout.json")


@dataclass(slots=True)
class ReplayResult:
    """What a replay found: ``same`` is True only when every check in ``checks`` passed; :attr:`outcome` is the
    conclusion (:data:`OUTCOMES`), which also weighs the numbers that moved (``drift``) and the differences they
    explain (``moved``)."""

    bundle: Path
    same: bool
    checks: dict[str, bool] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # one line per thing that differs
    verdict: dict[str, Any] | None = None
    imports: list[str] = field(default_factory=list)  # code named by the bundle and imported (--trust-code)
    drift: list[Drift] = field(default_factory=list)  # numbers within their tolerance, not bit for bit
    moved: list[str] = field(default_factory=list)  # differences numbers moving explain (obstacle lists, claims)
    machine: dict[str, Any] | None = None  # where the bundle was made (bundle.json; None: an older bundle)
    machine_now: dict[str, Any] = field(default_factory=machine_record)
    # the SUT's implementation when the bundle was made and now (e.g. Apollo's exact-v1 / exact-v2; None: not named)
    implementation: str | None = None
    implementation_now: str | None = None

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        """Record one check (a name checked twice passes only if it passed both times); ``ok`` is returned."""
        self.checks[name] = bool(ok) and self.checks.get(name, True)
        if not ok:
            self.same = False
            self.details.append(f"{name}: {detail}" if detail else name)
        return bool(ok)

    def compare(self, name: str, now: float, stored: Any, kind: str) -> bool:
        """Check a number against the stored one: bit for bit passes; within the tolerance of ``kind`` passes
        and is recorded as drift; otherwise the check fails."""
        bad = self._number(name, now, stored, kind)
        return self.check(name, not bad, bad)

    def _number(self, name: str, now: Any, stored: Any, kind: str) -> str:
        """"" when ``now`` equals ``stored`` or is within the tolerance of ``kind`` (then recorded as drift), else
        what is wrong."""
        if not isinstance(stored, (int, float)) or isinstance(stored, bool) or not isinstance(now, (int, float)):
            return f"{now!r} now, {stored!r} stored (not a number)"
        now, stored = float(now), float(stored)
        if now == stored or (math.isnan(now) and math.isnan(stored)):
            return ""
        d = Drift(name, kind, now, stored)
        if TOLERANCES[kind].allows(now, stored):
            self.drift.append(d)
            return ""
        t = d.tolerance
        unit = f" {t.unit}" if t.unit else ""
        return f"{now!r} now, {stored!r} stored: {d.diff:.3g}{unit} is beyond the {kind} tolerance {t.abs:g}{unit}"

    def compare_json(self, name: str, now: Any, stored: Any) -> bool | None:
        """Check JSON made of numbers (an obstacle list, a verdict) against the stored one: True when equal or
        every float within the tolerance of its kind (:data:`NUMBER_KINDS`, by the key it is under), False (the
        check failed) when a float moved past it, None when the two differ in more than floats (another number
        of obstacles, other points in one): the caller lists that (:meth:`differ`) or fails it."""
        pairs: list[tuple[str, str, float, float]] = []
        if not _pair_floats(now, stored, "", "length", pairs):
            return None
        bad = [f"{path}: {b}" for path, kind, a, st in pairs if (b := self._number(f"{name} {path}", a, st, kind))]
        return self.check(name, not bad, "; ".join(bad[:3]) + (f"; {len(bad) - 3} more" if len(bad) > 3 else ""))

    def compare_scores(self, name: str, now: list[float], stored: Any) -> None:
        """The full-precision scores a LiDAR bundle stores beside its rounded obstacle lists (``scores`` in
        bundle.json; absent in older bundles) against the SUT's now, as probabilities. Lists of other lengths are
        the obstacle lists' difference, listed there."""
        if isinstance(stored, list) and len(stored) == len(now):
            self.compare_json(name, {"score": [float(x) for x in now]}, {"score": stored})

    def compare_listed(self, name: str, now: Any, stored: Any) -> None:
        """:meth:`compare_json` for what numbers moving can change the shape of (obstacle lists, verdicts,
        facts): a difference beyond floats is listed (:meth:`differ`) with what changed."""
        if self.compare_json(name, now, stored) is None:
            self.differ(name, list_difference(now, stored))

    def recheck_one_minimal(self, name: str, items: Any, fails: Callable[[Any], bool]) -> None:
        """Re-check ddmin's claim that ``items`` is 1-minimal: ``fails(items without one)`` must be False for
        each one (as many calls as items; ddmin spent at least as many to make the claim). One that still fails
        is listed (:meth:`differ`): on another CPU the relation can hinge on other points."""
        import numpy as np

        items = np.asarray(items)
        still = [int(i) for i in range(len(items)) if fails(np.delete(items, i))]
        if still:
            self.differ(name, f"without its point(s) #{', #'.join(map(str, still[:5]))}"
                              f"{' …' if len(still) > 5 else ''} the relation is still violated "
                              f"({len(still)} of {len(items)})")
        else:
            self.check(name, True)

    def differ(self, name: str, detail: str) -> None:
        """A difference that numbers moving between CPU kinds can cause (an obstacle list, 1-minimality): listed;
        the replay is *reproduced* at best, and *not reproduced* when nothing explains it (:attr:`explained`)."""
        self.moved.append(f"{name}: {detail}")

    @property
    def other_kernels(self) -> bool:
        """Whether the bundle was made with other kernels than this replay runs (or its machine is unknown)."""
        from lidarmt._machine import kernels

        made = kernels(self.machine)
        return made is None or made != kernels(self.machine_now)

    @property
    def other_implementation(self) -> bool:
        """Whether the SUT now computes with another implementation than the one the bundle names (a bundle that
        names none, made before implementations were recorded, counts as another)."""
        return self.implementation_now is not None and self.implementation != self.implementation_now

    @property
    def explained(self) -> bool:
        """Whether the listed differences (:attr:`moved`) can come from another CPU or implementation: a number
        drifted, or the bundle was made with other kernels or another implementation of the SUT."""
        return not self.moved or bool(self.drift) or self.other_kernels or self.other_implementation

    @property
    def outcome(self) -> str:
        if not self.same or not self.explained:
            return "not reproduced"
        return "reproduced" if self.drift or self.moved else "identical"

    @property
    def ok(self) -> bool:
        return self.outcome != "not reproduced"

    @property
    def largest(self) -> Drift | None:
        """The number that moved most, relative to its tolerance."""
        return max(self.drift, key=lambda d: d.diff / d.tolerance.abs, default=None)

    def summary(self) -> str:
        """The outcome in one line, as the terminal shows it."""
        from lidarmt._machine import isa_label

        machines = f"made on {isa_label(self.machine)}, replayed on {isa_label(self.machine_now)}"
        if self.other_implementation:
            machines += f"; SUT made with {self.implementation or 'an unrecorded implementation'}, replayed with " \
                        f"{self.implementation_now}"
        if self.outcome == "identical":
            return f"identical: the bundle replayed bit for bit, every check passed ({machines})"
        if self.outcome == "reproduced":
            big = self.largest
            what = (f"largest difference {big.text()}" if big is not None else "no number moved")
            extra = f"; {len(self.moved)} difference(s) listed above" if self.moved else ""
            return f"reproduced: the relation is still violated and every number is within tolerance; {what}{extra} " \
                   f"({machines})"
        why = ("differences with nothing to explain them (no number moved, same kernels)"
               if self.same else f"{len(self.details)} check(s) failed")
        return f"not reproduced: {why} ({machines})"

    def to_dict(self) -> dict[str, Any]:
        """The result as ``--json`` prints it."""
        from lidarmt._machine import isa_label

        big = self.largest
        return {"bundle": str(self.bundle), "outcome": self.outcome, "exit_status": 0 if self.ok else 1,
                "summary": self.summary(), "checks": dict(self.checks), "failures": list(self.details),
                "moved": list(self.moved), "drifted": len(self.drift),
                "largest_difference": big.to_dict() if big is not None else None,
                "made_on": self.machine, "made_on_isa": isa_label(self.machine),
                "replayed_on": self.machine_now, "replayed_on_isa": isa_label(self.machine_now),
                "made_with": self.implementation, "replayed_with": self.implementation_now,
                "tolerances": {k: {"abs": t.abs, "unit": t.unit, "applies_to": t.what} for k, t in TOLERANCES.items()},
                "verdict": self.verdict, "imports": list(self.imports)}


def list_difference(now: Any, stored: Any) -> str:
    """What differs between two JSON lists of objects (obstacles), in one phrase: the counts and the first few
    entries that differ by class and number of points where they have them."""
    if isinstance(now, dict) and isinstance(stored, dict):
        keys = sorted(k for k in set(now) | set(stored)
                      if k not in now or k not in stored or _pair_floats(now[k], stored[k], "", "length", []) is False)
        return f"{', '.join(map(str, keys[:6]))} differ from the stored one"
    if not isinstance(now, list) or not isinstance(stored, list):
        return "differs from the stored one"

    def label(o: Any) -> str:
        if not isinstance(o, dict):
            return "?"
        pts = o.get("num_points", o.get("points"))
        return f"{o.get('class', '?')}" + (f" {pts} pts" if isinstance(pts, int) else "")

    diff = [i for i in range(max(len(now), len(stored)))
            if i >= len(now) or i >= len(stored) or _pair_floats(now[i], stored[i], "", "length", []) is False]
    shown = "; ".join(f"#{i}: {label(now[i]) if i < len(now) else 'none'} now, "
                      f"{label(stored[i]) if i < len(stored) else 'none'} stored" for i in diff[:4])
    more = f"; {len(diff) - 4} more" if len(diff) > 4 else ""
    return f"{len(now)} now, {len(stored)} stored" + (f"; {shown}{more}" if shown else "")


def _pair_floats(a: Any, b: Any, path: str, kind: str, out: list) -> bool:
    """Walk two JSON values alike; collect (path, kind, a, b) for each pair of numbers of which one is a float.
    False when they differ in anything but floats."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return all(_pair_floats(a[k], b[k], f"{path}.{k}" if path else str(k), NUMBER_KINDS.get(str(k), kind), out)
                   for k in sorted(a))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_pair_floats(x, y, f"{path}[{i}]", kind, out)
                                        for i, (x, y) in enumerate(zip(a, b, strict=True)))
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        if isinstance(a, float) or isinstance(b, float):
            out.append((path, kind, float(a), float(b)))
            return True
        return a == b
    return a == b and type(a) is type(b)


def begin_replay(folder: Path, imports: list[str], *, origin: Path, trust_code: bool,
                 on_code: Callable[[str], None] | None, info: dict[str, Any] | None = None) -> ReplayResult:
    """The trust gate for the code a bundle's ``origin`` file names (before anything is read or built), then an
    empty result that records those imports and the machine ``info`` (bundle.json) was made on; ``on_code`` is
    told each import first."""
    check_trust(imports, origin=origin, trust_code=trust_code)
    if on_code is not None:
        for line in imports:
            on_code(line)
    return ReplayResult(folder, True, imports=list(imports), machine=machine_of(info))


def machine_of(info: Any) -> dict[str, Any] | None:
    """The machine a bundle's ``bundle.json`` (``info``) says it was made on (None for older bundles)."""
    m = info.get("machine") if isinstance(info, dict) else None
    return m if isinstance(m, dict) else None



def shown_unlisted(folder: Path, listed: Any) -> list[Any]:
    """The files a bundle shows (:data:`_SHOWN`) that it holds but its manifest does not list."""
    from lidarmt.engine.manifest import ManifestProblem

    return [ManifestProblem("unlisted", n, "the bundle holds it but MANIFEST.json does not list it")
            for n in _SHOWN if n not in listed and (folder / n).exists()]


def check_mcap(folder: Path, check: Callable[..., bool], expected: Any = None) -> None:
    """Check ``bundle.mcap``, when the bundle has one, for its topics (``expected``: topic -> schema; default the
    MR1 bundles' :data:`lidarmt.engine.mcap.LIDAR_BUNDLE_TOPICS`)."""
    if (folder / "bundle.mcap").exists():  # what Foxglove opens: it must hold what the bundle shows
        from lidarmt.engine.mcap import LIDAR_BUNDLE_TOPICS, mcap_problems

        bad = mcap_problems(folder / "bundle.mcap", LIDAR_BUNDLE_TOPICS if expected is None else expected)
        check(CHECK_MCAP, not bad, "; ".join(bad))


def resolve_path(path: str, cwd: str | None) -> str:
    """A path stored in a bundle, relative to the folder the campaign ran in (``cwd``), made usable from here (a
    ``module:callable`` spec, an absolute or an existing path is left as it is)."""

    if is_callable_spec(path) or Path(path).is_absolute() or Path(path).exists() or not cwd:
        return path
    cand = Path(cwd) / path
    return str(cand) if cand.exists() else path
