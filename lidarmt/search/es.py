"""The (1+1) evolution strategy with the 1/5 success rule (TACTIC, Li et al. ICML 2021) and its random twin.

Both work in a *unit box*: every searched parameter is mapped to [0, 1] by its range (:class:`Space`), so one
step size σ serves parameters of any scale; σ₀ is TACTIC's 5.0 expressed in the same units: TACTIC mutates a
style vector whose prior is N(0, I), i.e. whose useful range is about ±3 (6 units wide), so σ₀ = 5/6 of a
parameter's range. Mutations that leave the box are reflected back into it.

* :func:`es_propose`: the child ``parent + σ·N(0, I)`` (reflected), from a generator seeded by (seed, step),
  so a step is reproducible alone;
* :func:`es_tell`: a child at least as fit as its parent replaces it (neutral moves let the search drift
  across plateaus); a *strictly* better child is a success; σ ← σ·exp((success − 0.2)/(0.8·√(d+1))) (TACTIC's
  1/5 rule, d the dimension); TACTIC's stop: 60 steps without improvement or 150 in all;
* :func:`random_propose`: a uniform point of the box (the random-search baseline, the same budget).

The state is a small frozen value folded from the journal's records, so a killed search resumes exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

SIGMA0_TACTIC = 5.0  # in TACTIC's style space (prior N(0, I))
STYLE_RANGE = 6.0  # the width of that space's useful range (±3 σ)
SIGMA0 = SIGMA0_TACTIC / STYLE_RANGE  # σ₀ in unit-box terms
PATIENCE = 60  # TACTIC's code: stop after 60 steps without improvement (the paper says 100)
MAX_STEPS = 150


@dataclass(frozen=True, slots=True)
class Dim:
    """One searched parameter: its name and range; ``integer`` ones are rounded after mapping."""

    name: str
    low: float
    high: float
    integer: bool = False


@dataclass(frozen=True, slots=True)
class Space:
    """The parameters a search moves, each mapped to [0, 1]."""

    dims: tuple[Dim, ...]

    @property
    def d(self) -> int:
        return len(self.dims)

    def to_params(self, u: Sequence[float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for dim, v in zip(self.dims, u, strict=True):
            x = dim.low + float(v) * (dim.high - dim.low)
            out[dim.name] = float(round(x)) if dim.integer else round(x, 6)
        return out

    def to_dict(self) -> list[dict[str, Any]]:
        return [{"name": d.name, "low": d.low, "high": d.high, "integer": d.integer} for d in self.dims]


def reflect(u: np.ndarray) -> np.ndarray:
    """Fold values back into [0, 1] (a mirror at each face; any distance)."""
    u = np.mod(np.asarray(u, dtype=np.float64), 2.0)
    return np.where(u > 1.0, 2.0 - u, u)


def step_rng(seed: int, step: int, arm: int) -> np.random.Generator:
    """The generator of one search step and arm."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(step), int(arm),
                                                                        0x736561726368])))  # "search"


@dataclass(frozen=True, slots=True)
class EsState:
    """Where a (1+1)-ES stands: the parent (unit box), its fitness, σ, steps since the last improvement."""

    parent: tuple[float, ...] | None = None
    fitness: float = -math.inf
    sigma: float = SIGMA0
    since_improvement: int = 0
    steps: int = 0
    successes: int = 0

    def stopped(self, *, patience: int = PATIENCE, max_steps: int = MAX_STEPS) -> bool:
        return self.steps >= max_steps or (self.parent is not None and self.since_improvement >= patience)

    def to_dict(self) -> dict[str, Any]:
        return {"parent": None if self.parent is None else list(self.parent), "fitness": self.fitness,
                "sigma": self.sigma, "since_improvement": self.since_improvement, "steps": self.steps,
                "successes": self.successes}


def one_fifth(sigma: float, success: bool, d: int) -> float:
    """TACTIC's 1/5 success rule for one step."""
    return sigma * math.exp((float(success) - 0.2) / (0.8 * math.sqrt(d + 1)))


def random_propose(space: Space, rng: np.random.Generator) -> np.ndarray:
    return rng.random(space.d)


def es_propose(state: EsState, space: Space, rng: np.random.Generator, start: Sequence[float] | None = None
               ) -> np.ndarray:
    """The next point to evaluate: the start point (given, or uniform) first, then parent + σ·N(0, I)."""
    if state.parent is None:
        return np.asarray(start, dtype=np.float64) if start is not None else rng.random(space.d)
    return reflect(np.asarray(state.parent) + state.sigma * rng.standard_normal(space.d))


def es_tell(state: EsState, u: Sequence[float], fitness: float, d: int) -> EsState:
    """Fold one evaluated point into the state (the first point becomes the parent)."""
    if state.parent is None:
        return replace(state, parent=tuple(float(v) for v in u), fitness=float(fitness), steps=state.steps + 1)
    better = fitness > state.fitness
    accept = fitness >= state.fitness
    return EsState(tuple(float(v) for v in u) if accept else state.parent,
                   float(fitness) if accept else state.fitness, one_fifth(state.sigma, better, d),
                   0 if better else state.since_improvement + 1, state.steps + 1, state.successes + int(better))


def replay_es(points: Sequence[tuple[Sequence[float], float]], d: int) -> EsState:
    """The state after telling ``points`` (unit point, fitness) in order."""
    state = EsState()
    for u, f in points:
        state = es_tell(state, u, f, d)
    return state


def ranked(records: Sequence[Mapping[str, Any]], *, key: str = "fitness", top: int = 5,
           ident: str = "params") -> list[Mapping[str, Any]]:
    """The ``top`` best records by ``key`` (ties: the earlier one), distinct by ``ident``."""
    seen: set[str] = set()
    out = []
    for rec in sorted(records, key=lambda r: (-float(r[key]), r["step"])):
        tag = repr(sorted(dict(rec[ident]).items()))
        if tag in seen:
            continue
        seen.add(tag)
        out.append(rec)
        if len(out) >= top:
            break
    return out
