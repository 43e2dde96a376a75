"""Coverage criteria over a probe's neuron values, and the cumulative tracker the searches use.

Given the ``(N, neurons)`` values of N inputs (:class:`~lidarmt.coverage.neurons.NeuronProbe`), each criterion
says which *units* every input covers; a tracker keeps, per criterion, the set of units covered so far as a bitset
(``numpy`` bool array) and reports what each new input adds. Units per criterion:

* ``nc`` (DeepTest): one unit per neuron. Per input, each layer's values are min-max scaled *within the layer*
  (``(v - min_layer) / (max_layer - min_layer)``, 0 when the layer is constant); a neuron is covered when its
  scaled value is above ``nc_threshold`` (0.2, the paper's; DeepTest's code defaults to 0.1, DeepHunter uses
  0.75). Needs no profile.
* ``kmnc`` (DeepGauge, TACTIC): ``k`` equal sections (``kmnc_k`` = 1000) between each neuron's training
  ``low`` and ``high``; a value in ``[low, high]`` covers its section (``high`` itself the last one). A value
  *outside* the bounds covers no section. TACTIC's released code computes the section index of a value below
  ``low`` as −1, which NumPy indexing turns into the *last* section, so values under the lower bound mark the top
  section covered; here they do not (``tests/test_coverage.py`` proves it). A neuron with ``low == high`` has
  its value covering section 0 only when it equals ``low``.
* ``nbc`` (neuron boundary coverage): two units per neuron, "below ``low``" and "above ``high``".
* ``snac`` (strong neuron activation coverage): one unit per neuron, "above ``high``".
* ``tknc`` (top-k neuron coverage): one unit per neuron, covered when the neuron is among the ``tknc_k``
  (2) largest of its layer for some input (DeepGauge reports k = 1, 2, 3).

``kmnc``, ``nbc`` and ``snac`` need a :class:`~lidarmt.coverage.profile.Profile`; the bounds may be widened by
``widen`` training standard deviations (DeepGauge's 0, 0.5σ, σ; default 0). Bounds are compared with a
tolerance (``bound_tolerance`` x max(1, |bound|), default 1e-4): the same frame's neuron values differ by a few
1e-6 between batch sizes in fp32, and a strict comparison would count that noise as going beyond the training
range (the profile's own frames gave NBC 17 % and SNAC 32 %); a value within the tolerance of a bound counts as
on it (KMNC's first or last section).

Everything is vectorised over inputs and neurons (``reduceat`` over the layers' column ranges for NC's per-layer
scaling, ``argpartition`` per layer for TKNC, ``np.unique`` over flat section indices for KMNC); the only Python
loop is over layers for TKNC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lidarmt.coverage.errors import CoverageArgumentError
from lidarmt.coverage.neurons import NeuronProbe
from lidarmt.coverage.profile import Profile

CRITERIA = ("nc", "kmnc", "nbc", "snac", "tknc")
NEEDS_PROFILE = frozenset({"kmnc", "nbc", "snac"})
TITLES = {"nc": "NC", "kmnc": "KMNC", "nbc": "NBC", "snac": "SNAC", "tknc": "TKNC"}


@dataclass(frozen=True, slots=True)
class CoverageConfig:
    """The criteria to track and their parameters. ``criteria=None``: every criterion the tracker can compute
    (all five with a profile, ``nc`` and ``tknc`` without)."""

    criteria: tuple[str, ...] | None = None
    nc_threshold: float = 0.2
    kmnc_k: int = 1000
    tknc_k: int = 2
    widen: float = 0.0
    bound_tolerance: float = 1e-4

    def __post_init__(self) -> None:
        if self.criteria is not None:
            bad = [c for c in self.criteria if c not in CRITERIA]
            if bad or not self.criteria:
                raise CoverageArgumentError(f"unknown coverage criterion {', '.join(bad) or '(none)'}; choose from "
                                            f"{', '.join(CRITERIA)}")
        if not 0.0 <= self.nc_threshold < 1.0:
            raise CoverageArgumentError(f"NC threshold {self.nc_threshold}: use a value in [0, 1)")
        if self.kmnc_k < 1:
            raise CoverageArgumentError(f"KMNC k {self.kmnc_k}: use at least 1 section")
        if self.tknc_k < 1:
            raise CoverageArgumentError(f"TKNC k {self.tknc_k}: use at least 1")
        if not (self.widen >= 0 and np.isfinite(self.widen)):
            raise CoverageArgumentError(f"bound widening {self.widen}: use a non-negative number of std devs")
        if not (self.bound_tolerance >= 0 and np.isfinite(self.bound_tolerance)):
            raise CoverageArgumentError(f"bound tolerance {self.bound_tolerance}: use a non-negative number")

    def resolve(self, *, has_profile: bool) -> tuple[str, ...]:
        if self.criteria is None:
            return CRITERIA if has_profile else ("nc", "tknc")
        missing = [c for c in self.criteria if c in NEEDS_PROFILE and not has_profile]
        if missing:
            raise CoverageArgumentError(f"{', '.join(missing)} need(s) the model's profile (training bounds); make "
                                        f"one with 'lidarmt camera profile' or leave them out")
        return tuple(self.criteria)

    def to_dict(self) -> dict[str, Any]:
        return {"criteria": list(self.criteria) if self.criteria else None, "nc_threshold": self.nc_threshold,
                "kmnc_k": self.kmnc_k, "tknc_k": self.tknc_k, "widen": self.widen,
                "bound_tolerance": self.bound_tolerance}


# ------------------------------------------------------------------------------------------ unit hits


def layer_scaled(acts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each row's values min-max scaled within each layer (DeepTest's NC scaling); constant layers give 0."""
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    lo = np.repeat(np.minimum.reduceat(acts, starts, axis=1), sizes, axis=1)
    hi = np.repeat(np.maximum.reduceat(acts, starts, axis=1), sizes, axis=1)
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(span > 0, (acts - lo) / np.where(span > 0, span, 1), 0.0)
    return out.astype(np.float32, copy=False)


def nc_mask(acts: np.ndarray, offsets: np.ndarray, threshold: float) -> np.ndarray:
    """(N, neurons) bool: NC's activated neurons per input."""
    return layer_scaled(acts, offsets) > threshold


def bound_tolerance(low: np.ndarray, high: np.ndarray, rel: float) -> np.ndarray:
    """Per-neuron tolerance of a bound comparison: ``rel`` x max(1, |low|, |high|)."""
    return (rel * np.maximum(1.0, np.maximum(np.abs(low), np.abs(high)))).astype(np.float64)


def kmnc_sections(acts: np.ndarray, low: np.ndarray, high: np.ndarray, k: int, tol: Any = 0.0) -> np.ndarray:
    """(N, neurons) int64 section index per value, −1 where the value lies outside ``[low − tol, high + tol]``
    (it covers no section: the fix of TACTIC's bug, where −1 indexed the top section); a value within ``tol``
    outside a bound counts in the first or last section."""
    width = (high - low).astype(np.float64)
    x = acts.astype(np.float64)
    inside = (x >= low - tol) & (x <= high + tol)
    with np.errstate(invalid="ignore", divide="ignore"):
        sec = np.floor((x - low) / np.where(width > 0, width, 1.0) * k)
    sec = np.clip(np.nan_to_num(sec, nan=0.0), 0, k - 1).astype(np.int64)
    sec[~inside] = -1
    return sec


def nbc_mask(acts: np.ndarray, low: np.ndarray, high: np.ndarray, tol: Any = 0.0) -> np.ndarray:
    """(N, 2·neurons) bool: below ``low − tol`` (first half), above ``high + tol`` (second half)."""
    return np.concatenate([acts < low - tol, acts > high + tol], axis=1)


def tknc_mask(acts: np.ndarray, offsets: np.ndarray, k: int) -> np.ndarray:
    """(N, neurons) bool: the ``k`` largest neurons of each layer per input (ties broken by position)."""
    n = acts.shape[0]
    out = np.zeros(acts.shape, dtype=bool)
    rows = np.arange(n)[:, None]
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        size = int(b - a)
        if size <= k:
            out[:, a:b] = True
            continue
        top = np.argpartition(-acts[:, a:b], k - 1, axis=1)[:, :k]
        out[rows, a + top] = True
    return out


def _new_from_mask(mask: np.ndarray, covered: np.ndarray, *, commit: bool) -> np.ndarray:
    """Per-row count of units first covered by that row (rows in order, after ``covered``)."""
    hits = mask & ~covered
    anyhit = hits.any(0)
    first = hits.argmax(0)
    new = np.bincount(first[anyhit], minlength=mask.shape[0])
    if commit:
        covered |= anyhit
    return new


def _new_from_index(idx: np.ndarray, covered: np.ndarray, *, commit: bool) -> np.ndarray:
    """Like :func:`_new_from_mask` for (N, m) flat unit indices (−1 = none)."""
    n, m = idx.shape
    flat = idx.reshape(-1)
    pos = np.flatnonzero(flat >= 0)
    if not len(pos):
        return np.zeros(n, dtype=np.int64)
    uniq, first = np.unique(flat[pos], return_index=True)
    fresh = ~covered[uniq]
    new = np.bincount(pos[first[fresh]] // m, minlength=n)
    if commit:
        covered[uniq[fresh]] = True
    return new


# ------------------------------------------------------------------------------------------ tracker


@dataclass(frozen=True)
class Step:
    """What :meth:`CoverageTracker.update` saw: the run's outputs (e.g. steering angles), the inputs' neuron
    values, and per criterion the units each input newly covered (``new[c]``: ``(N,)`` int, in input order:
    input i counts what neither the earlier state nor inputs 0..i−1 covered) and ``gain[c]``: the share of the
    units uncovered before the call that the batch covered (TACTIC's Fc)."""

    outputs: Any
    acts: np.ndarray
    new: Mapping[str, np.ndarray]
    gain: Mapping[str, float]

    @property
    def new_total(self) -> dict[str, int]:
        return {c: int(v.sum()) for c, v in self.new.items()}


@dataclass(frozen=True)
class CoverageState:
    """A snapshot of a tracker's bitsets (copies; safe to keep while the tracker moves on)."""

    covered: Mapping[str, np.ndarray] = field(default_factory=dict)

    def packed(self) -> dict[str, np.ndarray]:
        """The bitsets packed 8 units a byte (``np.packbits``), e.g. to store in an ``.npz``."""
        return {c: np.packbits(v) for c, v in self.covered.items()}


class CoverageTracker:
    """Cumulative coverage of a network over every input it has been shown.

    Build it with :func:`lidarmt.coverage.camera.tracker_for` for a steering model, or directly::

        probe = NeuronProbe(net)                          # default layers (see lidarmt.coverage.neurons)
        tr = CoverageTracker(probe, run=lambda x: net(torch.as_tensor(x)), profile=Profile.load(p))
        step = tr.update(batch)                           # forwards the batch once, hooks on
        step.outputs, step.new["nc"], step.gain["kmnc"]
        tr.coverage()                                     # {"nc": 0.41, "kmnc": 0.07, ...}
        snap = tr.copy()                                  # independent copy (bitsets copied, probe shared)

    ``run(inputs)`` must forward all of ``inputs`` through the probed module (any batching) and return
    whatever the caller wants back in :attr:`Step.outputs`. ``update(inputs, commit=False)`` measures what the
    inputs would add without changing the state (a search's trial). :meth:`update_activations` does the same
    for neuron values captured elsewhere (``probe.capture``).
    """

    def __init__(self, probe: NeuronProbe, *, run: Callable[[Any], Any] | None = None,
                 profile: Profile | None = None, config: CoverageConfig | None = None) -> None:
        self.probe = probe
        self.run = run
        self.profile = profile
        self.config = config or CoverageConfig()
        self.criteria = self.config.resolve(has_profile=profile is not None)
        self._covered: dict[str, np.ndarray] | None = None
        self._bounds: tuple[np.ndarray, np.ndarray] | None = None
        self._tol: np.ndarray | float = 0.0
        if profile is not None:
            self._bounds = profile.bounds(widen=self.config.widen)
            self._tol = bound_tolerance(*self._bounds, self.config.bound_tolerance)
        self.inputs_seen = 0

    # -------------------------------------------------------------------------------------- shape

    def _ready(self) -> dict[str, np.ndarray]:
        if self._covered is None:
            sizes = self.probe.sizes
            if sizes is None:
                raise CoverageArgumentError("the tracker has not seen an input yet; update() it first")
            if self.profile is not None:
                self.profile.check(self.probe.names, sizes)
            self._covered = {c: np.zeros(self.units(c, sum(sizes)), dtype=bool) for c in self.criteria}
        return self._covered

    def units(self, criterion: str, neurons: int | None = None) -> int:
        """How many units ``criterion`` has (its coverage's denominator)."""
        if neurons is None:
            neurons = self.probe.size
        return {"nc": neurons, "kmnc": neurons * self.config.kmnc_k, "nbc": 2 * neurons, "snac": neurons,
                "tknc": neurons}[criterion]

    # -------------------------------------------------------------------------------------- measuring

    def measure(self, inputs: Any) -> tuple[Any, np.ndarray]:
        """Forward ``inputs`` once with the hooks on: ``(outputs, (N, neurons) values)``; no state change."""
        if self.run is None:
            raise CoverageArgumentError("this tracker has no run function; use update_activations()")
        n = len(inputs)
        return self.probe.capture(lambda: self.run(inputs), n)

    def hits(self, acts: np.ndarray) -> dict[str, np.ndarray]:
        """Per criterion, what each input covers: (N, units) bool masks, or (N, neurons) section indices for
        ``kmnc`` (−1 = none)."""
        acts = np.asarray(acts, dtype=np.float32)
        offsets = self.probe.offsets
        out: dict[str, np.ndarray] = {}
        for c in self.criteria:
            if c == "nc":
                out[c] = nc_mask(acts, offsets, self.config.nc_threshold)
            elif c == "tknc":
                out[c] = tknc_mask(acts, offsets, self.config.tknc_k)
            else:
                low, high = self._bounds  # type: ignore[misc]
                if c == "kmnc":
                    sec = kmnc_sections(acts, low, high, self.config.kmnc_k, self._tol)
                    base = (np.arange(acts.shape[1], dtype=np.int64) * self.config.kmnc_k)[None]
                    out[c] = np.where(sec >= 0, base + sec, -1)
                elif c == "nbc":
                    out[c] = nbc_mask(acts, low, high, self._tol)
                else:
                    out[c] = acts > high + self._tol
        return out

    def update_activations(self, acts: np.ndarray, *, commit: bool = True, outputs: Any = None) -> Step:
        covered = self._ready()
        hits = self.hits(acts)
        new: dict[str, np.ndarray] = {}
        gain: dict[str, float] = {}
        for c in self.criteria:
            cov = covered[c]
            before = int(cov.size - np.count_nonzero(cov))
            h = hits[c]
            if c == "kmnc":
                new[c] = _new_from_index(h, cov, commit=commit)
            else:
                new[c] = _new_from_mask(h, cov, commit=commit)
            gain[c] = float(new[c].sum()) / before if before else 0.0
        if commit:
            self.inputs_seen += int(acts.shape[0])
        return Step(outputs, acts, new, gain)

    def update(self, inputs: Any, *, commit: bool = True) -> Step:
        """Forward ``inputs`` once and fold their coverage in (``commit=False``: measure only)."""
        outputs, acts = self.measure(inputs)
        return self.update_activations(acts, commit=commit, outputs=outputs)

    # -------------------------------------------------------------------------------------- state

    def covered_counts(self) -> dict[str, int]:
        cov = self._ready()
        return {c: int(np.count_nonzero(cov[c])) for c in self.criteria}

    def coverage(self) -> dict[str, float]:
        """{criterion: covered share in [0, 1]} (all 0 before the first update)."""
        if self._covered is None:
            return dict.fromkeys(self.criteria, 0.0)
        return {c: float(np.count_nonzero(v)) / v.size if v.size else 0.0 for c, v in self._covered.items()}

    def covered(self, criterion: str) -> np.ndarray:
        """The bitset of one criterion (a copy): which units are covered."""
        return self._ready()[criterion].copy()

    @property
    def state(self) -> CoverageState:
        cov = self._ready()
        return CoverageState({c: v.copy() for c, v in cov.items()})

    def restore(self, state: CoverageState) -> None:
        """Set the bitsets to a snapshot taken from this tracker (or one of its copies)."""
        cov = self._ready()
        for c in self.criteria:
            if c not in state.covered or state.covered[c].shape != cov[c].shape:
                raise CoverageArgumentError(f"coverage snapshot lacks {c} or has another size")
            cov[c] = state.covered[c].copy()

    def reset(self) -> None:
        if self._covered is not None:
            for v in self._covered.values():
                v[:] = False
        self.inputs_seen = 0

    def copy(self) -> CoverageTracker:
        """An independent tracker with the same probe, run function, profile and a copy of the bitsets."""
        other = CoverageTracker.__new__(CoverageTracker)
        other.__dict__.update(self.__dict__)
        other._covered = None if self._covered is None else {c: v.copy() for c, v in self._covered.items()}
        return other

    def fresh(self) -> CoverageTracker:
        """A tracker like this one with nothing covered."""
        other = self.copy()
        other.reset()
        return other

    def layer_coverage(self, criterion: str) -> dict[str, float]:
        """Covered share per layer (units of a neuron belong to its layer)."""
        cov = self._ready()[criterion]
        per = cov.size // self.probe.size
        offs = self.probe.offsets
        if criterion == "nbc":  # [below..., above...]
            v = cov.reshape(2, -1)
            return {name: float(v[:, a:b].mean()) for name, a, b in zip(self.probe.names, offs[:-1], offs[1:],
                                                                           strict=True)}
        v = cov.reshape(-1, per)
        return {name: float(v[a:b].mean()) for name, a, b in zip(self.probe.names, offs[:-1], offs[1:], strict=True)}


# ------------------------------------------------------------------------------------------ sets


def activated_set(tracker: CoverageTracker, inputs: Iterable[Any] | None = None, *, criterion: str = "nc",
                  acts: np.ndarray | Sequence[np.ndarray] | None = None) -> np.ndarray:
    """The units of ``criterion`` that a set of inputs covers (a bool array), from a fresh copy of ``tracker``:
    give ``inputs`` (batches, each forwarded once) or already captured ``acts`` (arrays of neuron values)."""
    t = tracker.fresh()
    if acts is not None:
        for a in ([acts] if isinstance(acts, np.ndarray) else acts):
            t.update_activations(a)
    for batch in inputs or ():
        t.update(batch)
    if t._covered is None:
        return np.zeros(t.units(criterion), dtype=bool)
    return t.covered(criterion)


def jaccard_distance(a: np.ndarray, b: np.ndarray) -> float:
    """1 − |A ∩ B| / |A ∪ B| of two bool unit sets (0 when both are empty)."""
    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    union = np.count_nonzero(a | b)
    return 0.0 if union == 0 else 1.0 - np.count_nonzero(a & b) / union
