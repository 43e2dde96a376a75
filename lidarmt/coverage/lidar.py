"""Coverage of Apollo's cnnseg network over source frames and MR1 follow-ups (beyond the papers).

The question: does adding ``n`` points outside the ROI drive the CNN into states that the source frames never
reach? :func:`run_study` answers it per ``n`` with every criterion:

1. every source frame goes through the SUT (the campaign's own :class:`~lidarmt.lidar.mr1.campaign.Evaluator`: the
   same recording, ROI, perception and guard as ``lidarmt fuzz``), with the coverage hooks on the network;
   the neurons are the 29 convolutions' channel means *after* their ReLU (cnnseg applies ``torch.relu_``
   functionally, so the probe is told which layers have one: all but ``deconv0``, whose 12 raw output channels
   are counted as they are);
2. the profile (KMNC/NBC/SNAC bounds) comes from ``profile_frames`` of a recording (by default the source
   frames themselves: then a source frame never leaves the bounds, and every NBC/SNAC unit a follow-up covers
   is a neuron value no source frame reached);
3. per ``n``, every follow-up (``make_follow_up`` with the campaign's seed tuple, exactly the follow-up ``lidarmt
   fuzz`` judges) goes through the SUT the same way. Per pair: the units it covers that no source frame covers
   (measured against the sources' cumulative coverage, not committed), and MR1's verdict; per n: the
   cumulative coverage of sources ∪ follow-ups against the sources alone; and how far the follow-up moves the
   network from its own source: the largest change of any neuron, in units of that neuron's standard deviation
   over the profile, floored at a tenth of the mean standard deviation of its layer so that neurons the
   sources leave (almost) constant do not divide by ~0 (``shift_sigma``), and how many neurons move by more
   than one such unit (``moved``); this separates "crosses a bound by a hair" from "reaches a new state".

With few source frames the bounds are tight, and a follow-up of the frame that set a neuron's maximum crosses it
with any nudge; NBC and SNAC are therefore also reported with the bounds widened by each of ``widen_levels``
standard deviations (DeepGauge's 0.5σ and 1σ), which asks for a real excursion.

Costs one network forward pass per frame and follow-up (the perception call the campaign makes anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lidarmt.coverage.criteria import CoverageConfig, CoverageTracker
from lidarmt.coverage.errors import CoverageArgumentError
from lidarmt.coverage.neurons import NeuronProbe
from lidarmt.coverage.profile import Profile, ProfileAccumulator


def network_of(sut: Any) -> Any:
    """The torch module a SUT runs (ApolloLOP: ``runner.net``, the module its runner calls)."""
    runner = getattr(sut, "runner", None)
    net = getattr(runner, "net", None) if runner is not None else getattr(sut, "network", None)
    if net is None or not hasattr(net, "named_modules"):
        raise CoverageArgumentError(f"perception {getattr(sut, 'name', sut)!r} exposes no torch network "
                                    f"(runner.net); coverage needs Apollo's CNN or a SUT that has one")
    if getattr(runner, "compiled", False):
        raise CoverageArgumentError("the CNN is torch.compile'd, so forward hooks do not fire; run without "
                                    "compile")
    return net


def apollo_probe(net: Any) -> NeuronProbe:
    """cnnseg's counted layers: every conv and deconv, post-ReLU except the raw ``deconv0`` output."""
    names = [n for n, m in net.named_modules() if n and type(m).__name__ in ("Conv2d", "ConvTranspose2d")]
    return NeuronProbe(net, layers=names, relu_after={n for n in names if n != "deconv0"})


def _capture(probe: NeuronProbe, evaluator: Any, frame: Any, roi: Any) -> tuple[Any, np.ndarray] | None:
    """(obstacles, (1, neurons) values) of one perception call, None when the network was not run (empty ROI)."""
    try:
        return probe.capture(lambda: evaluator._detect(frame, roi), 1)
    except CoverageArgumentError as err:
        if "produced no output" in str(err):
            return None
        raise


def build_profile(evaluator: Any, frames: Sequence[int], *, probe: NeuronProbe | None = None,
                  source: Any = None, progress: Callable[[int], None] | None = None) -> Profile:
    """The CNN's profile over ``frames`` of ``source`` (default: the evaluator's recording) and their ROI."""
    probe = probe or apollo_probe(network_of(evaluator.sut))
    rec = source if source is not None else evaluator.source
    acc = ProfileAccumulator()
    for i in frames:
        frame = rec[int(i)]
        got = _capture(probe, evaluator, frame, evaluator.rois.roi_for(frame))
        if got is not None:
            acc.add(got[1])
        if progress is not None:
            progress(1)
    return acc.result(probe.names, probe.sizes or [], {"frames": len(frames), "network": "cnnseg"})


def _scale(profile: Profile, offsets: np.ndarray) -> np.ndarray:
    """Per-neuron unit of change: its std, at least a tenth of its layer's mean std (inf for constant layers);
    the mean, not the median, because most channels of a layer may be (almost) silent on every source frame."""
    std = profile.std.astype(np.float64)
    floor = np.repeat([0.1 * float(np.mean(std[a:b])) for a, b in zip(offsets[:-1], offsets[1:], strict=True)],
                      np.diff(offsets))
    scale = np.maximum(std, floor)
    return np.where(scale > 0, scale, np.inf)


def run_study(evaluator: Any, *, profile: Profile | None = None, profile_frames: Sequence[int] | None = None,
              config: CoverageConfig | None = None, widen_levels: Sequence[float] = (0.5, 1.0),
              progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The study over the evaluator's campaign (its frames, ``ns``, trials, seed and region); JSON-ready."""
    from lidarmt.lidar.mr1.oracle import judge

    cfg = evaluator.config
    probe = apollo_probe(network_of(evaluator.sut))
    source_acts: list[np.ndarray] = []
    loaded: list[tuple[int, Any, Any, Any]] = []
    skipped = 0
    for f in cfg.frames:
        frame, roi = evaluator.load(f)
        got = _capture(probe, evaluator, frame, roi)
        if progress is not None:
            progress(1)
        if got is None:
            skipped += 1
            continue
        obstacles, acts = got
        source_acts.append(acts)
        loaded.append((int(f), frame, roi, obstacles))
    if not loaded:
        raise CoverageArgumentError("no source frame has a non-empty ROI, so the CNN never ran; check --map")
    profile_note = "given"
    if profile is None:
        if profile_frames is None:
            acc = ProfileAccumulator()
            for a in source_acts:
                acc.add(a)
            profile = acc.result(probe.names, probe.sizes or [], {"frames": len(source_acts),
                                                                   "network": "cnnseg"})
            profile_note = "the source frames"
        else:
            profile = build_profile(evaluator, profile_frames, probe=probe)
            profile_note = f"{len(profile_frames)} profile frames"
    tracker = CoverageTracker(probe, profile=profile, config=config or CoverageConfig())
    for a in source_acts:
        tracker.update_activations(a)
    sources = tracker.copy()
    base_counts = sources.covered_counts()
    scale = _scale(profile, probe.offsets)
    wide: dict[float, CoverageTracker] = {}
    for w in widen_levels:
        base = tracker.config
        wcfg = CoverageConfig(criteria=("nbc", "snac"), nc_threshold=base.nc_threshold, kmnc_k=base.kmnc_k,
                              tknc_k=base.tknc_k, widen=base.widen + float(w))
        wide[float(w)] = CoverageTracker(probe, profile=profile, config=wcfg)
        for a in source_acts:
            wide[float(w)].update_activations(a)
    src_acts = {f: a for (f, *_), a in zip(loaded, source_acts, strict=True)}
    per_n = []
    for n in cfg.ns:
        cum = sources.copy()
        pairs = []
        for f, frame, roi, obstacles in loaded:
            for trial in range(cfg.trials):
                fu = evaluator.follow_up(frame, roi, (f, n, trial))
                got = _capture(probe, evaluator, fu.frame, roi)
                if progress is not None:
                    progress(1)
                if got is None:
                    continue
                follow, acts = got
                beyond = sources.update_activations(acts, commit=False).new  # units no source covers
                cum.update_activations(acts)
                verdict = judge(obstacles, follow)
                moves = np.abs(acts[0].astype(np.float64) - src_acts[f][0]) / scale
                wb = {str(w): {c: int(v[0]) for c, v in t.update_activations(acts, commit=False).new.items()}
                      for w, t in wide.items()}
                pairs.append({"frame": f, "trial": trial, "beyond": {c: int(v[0]) for c, v in beyond.items()},
                              "shift_sigma": round(float(moves.max()), 4), "moved": int((moves > 1).sum()),
                              "beyond_widened": wb,
                              "count_violation": bool(verdict.count_violation),
                              "subset_violation": bool(verdict.subset_violation),
                              "added_reached": int(evaluator.reach.count(fu.extra))})
        cum_counts = cum.covered_counts()
        row: dict[str, Any] = {"n": int(n), "pairs": len(pairs), "criteria": {}}
        viol = np.array([p["count_violation"] or p["subset_violation"] for p in pairs], dtype=bool)
        row["violations"] = int(viol.sum())
        shifts = np.array([p["shift_sigma"] for p in pairs])
        moved = np.array([p["moved"] for p in pairs])
        row["shift_sigma"] = {"median": round(float(np.median(shifts)), 4) if len(shifts) else None,
                              "max": round(float(shifts.max()), 4) if len(shifts) else None,
                              "violations_median": round(float(np.median(shifts[viol])), 4) if viol.any() else None,
                              "moved_median": float(np.median(moved)) if len(moved) else None,
                              "moved_max": int(moved.max()) if len(moved) else None}
        row["widened"] = {}
        for w in wide:
            row["widened"][str(w)] = {
                c: {"pairs_beyond": int(sum(p["beyond_widened"][str(w)][c] > 0 for p in pairs)),
                    "max_beyond": int(max((p["beyond_widened"][str(w)][c] for p in pairs), default=0)),
                    "violations_beyond": int(sum(p["beyond_widened"][str(w)][c] > 0 and bool(v)
                                                 for p, v in zip(pairs, viol, strict=True)))}
                for c in ("nbc", "snac")}
        for c in tracker.criteria:
            b = np.array([p["beyond"][c] for p in pairs])
            units = tracker.units(c)
            reach = b > 0
            row["criteria"][c] = {
                "sources": base_counts[c], "with_follow_ups": cum_counts[c], "units": units,
                "sources_share": round(base_counts[c] / units, 6), "with_follow_ups_share": round(cum_counts[c] / units,
                                                                                                  6),
                "new_units": cum_counts[c] - base_counts[c],
                "pairs_beyond": int(reach.sum()), "pairs_beyond_share": round(float(reach.mean()), 4) if len(b) else 0,
                "mean_beyond": round(float(b.mean()), 3) if len(b) else 0.0,
                "max_beyond": int(b.max()) if len(b) else 0,
                "violations_beyond": int((reach & viol).sum()),
                "violations_not_beyond": int((~reach & viol).sum()),
            }
        row["pairs_detail"] = pairs
        per_n.append(row)
    return {
        "frames": [f for f, *_ in loaded], "skipped_empty_roi": skipped, "ns": list(cfg.ns), "trials": cfg.trials,
        "seed": cfg.seed, "region": {"shape": cfg.region.shape, "size": cfg.region.size},
        "neurons": probe.size, "layers": [{"name": li.name, "size": li.size, "relu": li.relu} for li in probe.layers],
        "criteria": list(tracker.criteria), "config": tracker.config.to_dict(), "profile": profile_note,
        "widen_levels": [float(w) for w in widen_levels],
        "profile_count": profile.count, "sources": {c: {"covered": base_counts[c], "units": tracker.units(c)}
                                                    for c in tracker.criteria},
        "per_n": per_n,
    }
