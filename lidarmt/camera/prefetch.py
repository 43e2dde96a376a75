"""Camera campaigns: the transformed images of the next seed frame are made while the models judge this one's.

A camera campaign judges one seed frame at a time: every (transformation, parameter, trial) image of the frame is
made once, then every model predicts them in batches. Made one after the other, the transformations and the
forward passes add up; opencv, NumPy and the batched implementation's numba kernels release the GIL, so a small
thread pool makes the images of frame i+1 while the models run on frame i (and, for the first frame, the images
are spread over the threads). A unit of the pool's work is one transformation's settings of a frame, made in one
batched call (:func:`make_group`, :func:`lidarmt.camera.transforms.batched.apply_settings`); a unit that raises
is made again image by image, so a failing setting is recorded alone, with the same text.

The campaign's thread does not wait idle for the pool: images of the frame it needs that no pool thread has
started yet it makes itself (from the end of the queue, the pool working from the front). A model with history
gets windows of frames; a built-in transformation makes what depends only on its setting and seed (a weather's
noise field, streaks, drops) once per window (:meth:`lidarmt.camera.transforms._common.BaseTransform.apply_same`),
so a window of Chauffeur's 11 frames costs about half of 11 single images.

What is made never depends on the threads: an image is a pure function of (window, transformation, parameter,
seed) (:func:`lidarmt.camera.campaign.transform_seed`), every record is emitted by the campaign's own thread in
the order of the keys, and a failed transformation is recorded with the same text as without the pool (the
try/except is the same function, :func:`make_one`, in both cases). Only the journal's timing fields
(``model_s``, ``transform_s``) differ between runs, as they always did.

What runs in the pool: the built-in transformations (``lidarmt.camera.transforms``: simple, weather, mirror).
Learned translators (torch, on the campaign's device, with a cache of content codes), follow-ups read from a
second source (``--pairs``) and transformation plug-ins (whose thread safety we cannot know) are made in the
campaign's thread as before.

The next frame is known only while the calls come in the campaign's own order (the in-process engine walks the
configuration's frames in order; a worker process among several gets frames in no order it can predict): the
prefetcher speculates on the first frame and then only while the last two frames were consecutive in that
order, so a worker process of a parallel campaign seldom makes images it will not be asked for.

``LIDARMT_PREFETCH_THREADS``: the pool's threads (default: the CPU cores this process may use, at most 4);
``0`` turns prefetching off (the images are made in the campaign's thread, as before).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ENV = "LIDARMT_PREFETCH_THREADS"
MAX_THREADS = 4

TPR = tuple[int, int, int]  # (transformation, parameter, trial)
Made = tuple[np.ndarray | None, dict | None, float]  # (image window, failure fields, seconds)


def default_threads() -> int:
    """Threads of the pool: ``LIDARMT_PREFETCH_THREADS`` when set (0: no prefetching), else the CPU cores this
    process may use, at most :data:`MAX_THREADS`."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            return max(0, min(int(raw), 64))
        except ValueError:
            return 0
    from lidarmt._limits import cpu_cores

    return min(MAX_THREADS, cpu_cores())


def make_one(make: Callable[..., np.ndarray], window: np.ndarray, index: int, tpr: TPR) -> Made:
    """One transformed window: ``(images, None, seconds)``, or ``(None, failure fields, seconds)`` when the
    transformation raised (its failure is recorded, not the model's)."""
    from lidarmt.engine.campaign import failure

    t0 = time.perf_counter()
    try:
        return make(window, index, *tpr), None, time.perf_counter() - t0
    except Exception as err:
        return None, {"status": "crash", "error": f"transformation failed: {type(err).__name__}: {err}",
                      "traceback": failure(err)["traceback"]}, time.perf_counter() - t0


def groups(wanted: Sequence[TPR], batched: Callable[[int], bool]) -> list[tuple[int, list[tuple[int, int]]]]:
    """``wanted`` as the work units of a frame: each transformation that ``batched(t)`` makes in one call gets
    one unit with all its (parameter, trial) settings; every other image is a unit of its own. In the order of
    ``wanted``."""
    out: list[tuple[int, list[tuple[int, int]]]] = []
    at: dict[int, int] = {}
    for t, p, r in wanted:
        if batched(t) and t in at:
            out[at[t]][1].append((p, r))
            continue
        if batched(t):
            at[t] = len(out)
        out.append((t, [(p, r)]))
    return out


def make_group(make_many: Callable[..., list[np.ndarray]] | None, make: Callable[..., np.ndarray],
               window: np.ndarray, index: int, t: int, settings: Sequence[tuple[int, int]]) -> dict[TPR, Made]:
    """The transformed windows of transformation ``t`` at ``settings`` ((parameter, trial) pairs): in one call of
    ``make_many(window, index, t, settings)`` when given (the seconds shared equally), else image by image. When
    the batched call raises, every image is made again alone (:func:`make_one`), so a failing setting is recorded
    with the same text as without batching and the others are kept."""
    if make_many is not None and len(settings) > 1:
        t0 = time.perf_counter()
        try:
            imgs = make_many(window, index, t, settings)
        except Exception:
            pass
        else:
            s = (time.perf_counter() - t0) / len(settings)
            return {(t, p, r): (img, None, s) for (p, r), img in zip(settings, imgs, strict=True)}
    return {(t, p, r): make_one(make, window, index, (t, p, r)) for p, r in settings}


def pool_safe(transform: Any) -> bool:
    """Whether a transformation may run in the pool's threads: the project's own image transformations only."""
    return (type(transform).__module__.startswith("lidarmt.camera.transforms.")
            and getattr(transform, "family", "") not in ("translator", "external")
            and not callable(getattr(transform, "apply_batch", None)))


@dataclass(slots=True)
class _Job:
    index: int
    window: np.ndarray
    current: Any
    futures: dict[int, Future] = field(default_factory=dict)  # by unit number
    units: list[tuple[int, list[tuple[int, int]]]] = field(default_factory=list)


@dataclass(slots=True)
class Images:
    """The transformed images of one seed frame."""

    window: np.ndarray
    current: Any
    made: dict[TPR, np.ndarray]
    broken: dict[TPR, dict]
    seconds: float  # the transformations' own time, summed over the images


class Prefetcher:
    """Makes a frame's transformed images in a thread pool, and the next frame's while the caller judges.

    ``window(index)`` -> (window, current frame) decodes a seed window (called in the caller's thread only);
    ``make(window, index, t, p, trial)`` makes one transformed window; ``make_many(window, index, t, settings)``
    (optional) makes all the settings of transformation ``t`` in one batched call, one unit of the pool's work;
    ``safe(t)``: whether transformation ``t`` may run in the pool (and be batched); ``order``: the frames in the
    order the campaign walks them; ``keys_of(index)``: the keys of a frame (to know what the next frame will
    want)."""

    def __init__(self, *, window: Callable[[int], tuple[np.ndarray, Any]], make: Callable[..., np.ndarray],
                 safe: Callable[[int], bool], order: Sequence[int], keys_of: Callable[[int], Sequence[tuple]],
                 threads: int, make_many: Callable[..., list[np.ndarray]] | None = None) -> None:
        self._window, self._make, self._safe, self._keys_of = window, make, safe, keys_of
        self._make_many = make_many
        self._next = {f: order[i + 1] for i, f in enumerate(order[:-1])}
        self._threads = max(1, int(threads))
        self._pool: ThreadPoolExecutor | None = None
        self._job: _Job | None = None
        self._last: int | None = None
        self._in_order = True  # the last two calls came in the campaign's order (speculate only then)
        self.hits = 0  # frames whose images were made ahead (for tests and benchmarks)
        self.stolen = 0  # units this thread made itself rather than wait for the pool to start them

    def _unit(self, job: _Job, u: int) -> dict[TPR, Made]:
        t, settings = job.units[u]
        return make_group(self._make_many, self._make, job.window, job.index, t, settings)

    def _submit(self, index: int, wanted: Sequence[TPR]) -> _Job:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="lidarmt-transform")
        window, current = self._window(index)
        job = _Job(index, window, current, units=groups(wanted, self._safe))
        for u, (t, _) in enumerate(job.units):
            if self._safe(t):
                job.futures[u] = self._pool.submit(self._unit, job, u)
        return job

    def images(self, index: int, wanted: Sequence[TPR]) -> Images:
        """The transformed images ``wanted`` of frame ``index``; then starts on the next frame's, when the calls
        come in the campaign's order."""
        job, self._job = self._job, None
        if job is not None and (job.index != index
                                or {(t, p, r) for t, ss in job.units for p, r in ss} != set(wanted)):
            for f in job.futures.values():  # a wrong guess: let it finish (nothing to cancel mid-call)
                f.cancel()
            job = None
        if job is not None:
            self.hits += 1
        self._in_order = self._last is None or self._next.get(self._last) == index
        self._last = index
        if job is None:
            job = self._submit(index, wanted)
        got: dict[TPR, Made] = {}
        # the pool's work first, then what only this thread may make. This thread does not wait idle for the
        # pool: what no pool thread has started yet it makes itself, from the end of the queue (the pool
        # takes from the front); what one has started it waits for
        for u in reversed(sorted(job.futures)):
            fut = job.futures[u]
            if fut.cancel():
                got.update(self._unit(job, u))
                self.stolen += 1
            else:
                got.update(fut.result())
        nxt = self._next.get(index) if self._in_order else None
        if nxt is not None:  # start on the next frame now: its images are made while the models judge this one
            want = sorted({(int(k[2]), int(k[3]), int(k[4])) for k in self._keys_of(nxt)})
            self._job = self._submit(nxt, want)
        for u in range(len(job.units)):
            if u not in job.futures:
                got.update(self._unit(job, u))
        return collect(job.window, job.current, wanted, got)

    def close(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            for f in job.futures.values():
                f.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def collect(window: np.ndarray, current: Any, wanted: Sequence[TPR], got: dict[TPR, Made]) -> Images:
    """The images of ``wanted`` from what the units made: the made ones, the failures, the seconds summed."""
    made: dict[TPR, np.ndarray] = {}
    broken: dict[TPR, dict] = {}
    seconds = 0.0
    for tpr in wanted:
        img, fail, s = got[tpr]
        seconds += s
        if fail is None:
            made[tpr] = img
        else:
            broken[tpr] = fail
    return Images(window, current, made, broken, seconds)
