"""A network's neuron profile: per-neuron minimum, maximum, mean and standard deviation over training data.

KMNC, NBC and SNAC measure an input against the range each neuron takes on the training data (DeepGauge's
``[low, high]``), so the range is computed once (:func:`build_profile`, ``lidarmt camera profile``) and stored
beside the model as plain arrays in an ``.npz`` file (:meth:`Profile.save`; no pickle, so a profile from a stranger
is data, never code). The file records the counted layers' names and sizes, so a tracker refuses the profile of
another network or another layer selection in one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.coverage.errors import ProfileError

FORMAT = "lidarmt-coverage-profile/1"


@dataclass(frozen=True)
class Profile:
    """Per-neuron statistics over ``count`` training inputs; arrays are ``(neurons,)`` in the probe's column
    order (layers in ``layers`` order, ``sizes`` neurons each). ``meta`` says what it was computed from."""

    layers: tuple[str, ...]
    sizes: tuple[int, ...]
    low: np.ndarray
    high: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    count: int
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(sum(self.sizes))

    def bounds(self, *, widen: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)``, optionally widened by ``widen`` standard deviations (DeepGauge's 0, 0.5σ, σ)."""
        return self.low - widen * self.std, self.high + widen * self.std

    def check(self, layers: Iterable[str], sizes: Iterable[int], *, what: str = "the network") -> None:
        """Raise a :class:`ProfileError` unless the profile was computed for these layers and sizes."""
        layers, sizes = tuple(layers), tuple(int(s) for s in sizes)
        if layers != self.layers or sizes != self.sizes:
            src = self.meta.get("path", "the profile")
            raise ProfileError(f"{src}: profiled layers {len(self.layers)} ({sum(self.sizes)} neurons) do not match "
                               f"{what}'s {len(layers)} ({sum(sizes)} neurons); recompute it with "
                               f"'lidarmt camera profile'")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the profile atomically as an ``.npz`` of plain arrays."""
        from lidarmt._atomic import atomic_path

        path = Path(path)
        meta = {k: v for k, v in self.meta.items() if k != "path"}
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(
                fh, format=np.array(FORMAT), layers=np.array(self.layers, dtype=np.str_),
                sizes=np.asarray(self.sizes, dtype=np.int64), low=self.low.astype(np.float32),
                high=self.high.astype(np.float32), mean=self.mean.astype(np.float32),
                std=self.std.astype(np.float32), count=np.int64(self.count),
                meta=np.array(json.dumps(meta, sort_keys=True, default=str)))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        """Read a profile written by :meth:`save` (``allow_pickle=False``); one-line errors for anything else."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                if "format" not in z.files or str(z["format"]) != FORMAT:
                    raise ProfileError(f"{path}: not a lidarmt coverage profile; make one with "
                                       f"'lidarmt camera profile'")
                layers = tuple(str(s) for s in z["layers"].reshape(-1))
                sizes = tuple(int(s) for s in z["sizes"].reshape(-1))
                arrays = [np.asarray(z[k], dtype=np.float32).reshape(-1) for k in ("low", "high", "mean", "std")]
                count = int(z["count"])
                from lidarmt._limits import loads_json

                meta = loads_json(str(z["meta"]), what=f"{path}: its meta", error=ProfileError)
        except ProfileError:
            raise
        except FileNotFoundError as err:
            raise ProfileError(f"{path}: no such profile; make one with 'lidarmt camera profile'") from err
        except (OSError, ValueError, KeyError, json.JSONDecodeError, EOFError) as err:
            raise ProfileError(f"{path}: unreadable coverage profile ({type(err).__name__}: {err}); make it "
                               f"again with 'lidarmt camera profile'") from err
        total = sum(sizes)
        if len(layers) != len(sizes) or any(s < 0 for s in sizes) or any(a.shape != (total,) for a in arrays):
            raise ProfileError(f"{path}: inconsistent coverage profile ({len(layers)} layers, {total} neurons, "
                               f"arrays of {[a.shape[0] for a in arrays]}); make it again")
        low, high, mean, std = arrays
        if not (np.isfinite(low).all() and np.isfinite(high).all()) or (low > high).any():
            raise ProfileError(f"{path}: profile bounds are not finite or low > high; make it again")
        if not isinstance(meta, dict):
            meta = {}
        meta["path"] = str(path)
        return cls(layers, sizes, low, high, mean, std, count, meta)


class ProfileAccumulator:
    """Streaming per-neuron min, max, mean and std (float64 sums; batches in any number)."""

    def __init__(self) -> None:
        self.count = 0
        self._min: np.ndarray | None = None
        self._max: np.ndarray | None = None
        self._sum: np.ndarray | None = None
        self._sq: np.ndarray | None = None
        self._shift: np.ndarray | None = None  # first row: sums of (x - shift) keep the variance accurate

    def add(self, acts: np.ndarray) -> None:
        a = np.asarray(acts, dtype=np.float64)
        if a.ndim != 2 or not len(a):
            return
        if self._min is None:
            self._shift = a[0].copy()
            self._min, self._max = a.min(0), a.max(0)
            self._sum = np.zeros(a.shape[1])
            self._sq = np.zeros(a.shape[1])
        else:
            np.minimum(self._min, a.min(0), out=self._min)
            np.maximum(self._max, a.max(0), out=self._max)
        d = a - self._shift
        self._sum += d.sum(0)
        self._sq += (d * d).sum(0)
        self.count += len(a)

    def result(self, layers: Iterable[str], sizes: Iterable[int], meta: Mapping[str, Any] | None = None) -> Profile:
        if self._min is None or self.count == 0:
            raise ProfileError("no input was profiled; give at least one training frame")
        m = self._sum / self.count
        var = np.maximum(self._sq / self.count - m * m, 0.0)
        return Profile(tuple(layers), tuple(int(s) for s in sizes), self._min.astype(np.float32),
                       self._max.astype(np.float32), (m + self._shift).astype(np.float32),
                       np.sqrt(var).astype(np.float32), self.count, dict(meta or {}))
