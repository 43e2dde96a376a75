"""DeepTest's coverage studies (Tian et al., ICSE 2018, §5 RQ1-RQ3) on any steering model, as numbers.

:func:`collect` forwards the seed frames and every (transformation, parameter) image of them through the model
once, hooks on, and keeps each image's neuron values and steering angle. Transformed images are made exactly as
a camera campaign makes them (:class:`~lidarmt.camera.campaign.CameraEvaluator`: the same windows, the same
``transform_seed(seed, frame, transformation, parameter, trial 0)``), so ``lidarmt camera fuzz`` with the same
``--seed`` and frames judges the very same images. :func:`analyse` turns them into:

* ``per_param`` (the issue's "Table 5"; in the paper Figure 5 and its "median increase" table): per
  transformation and parameter, each criterion's cumulative coverage over the seeds' transformed images, the mean
  per-image NC, and the median per-image increase of activated neurons over the seed image (N_T − N_O, and
  (N_T − N_O)/N_O); per transformation, the same over all its parameters with a Wilcoxon signed-rank test of
  N_T against N_O and Cohen's d.
* ``cumulative`` (Table 6): the seeds' own coverage (baseline) against the transformed images' cumulative
  coverage, and the seeds and transformed images together, for every criterion; plus Figure 4.2's average
  per-seed NC as transformations are added one by one.
* ``jaccard`` (Figure 4): for a seed image I, transformation T activates N_T(I), the union over T's parameter
  settings of the neurons NC counts active; the Jaccard distance 1 − |N₁ ∩ N₂| / |N₁ ∪ N₂| per pair of
  transformations and seed, summarised by its median over the seeds.
* ``rq1`` (RQ1, the paper's Table 5): Spearman's rank correlation between each image's NC (share of neurons
  active) and the model's steering angle (``scipy.stats.spearmanr``), on the seeds and on all images; and the
  steering direction: NC of left- (θ > 0) vs right-steering (θ < 0) images, Mann-Whitney U (the paper's
  "Wilcoxon test" of two independent groups) with Cohen's d.

Every number comes from the stored neuron values, so :func:`analyse` is cheap and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lidarmt.coverage.criteria import CoverageTracker, jaccard_distance, nc_mask


@dataclass
class StudyData:
    """Neuron values and angles of the seeds and of every (transformation, parameter) image of them."""

    model: str
    frames: list[int]
    labels: np.ndarray  # (S,) radians, NaN where the source has no label
    transforms: list[str]
    param_labels: list[list[str]]
    seed_angles: np.ndarray  # (S,)
    seed_acts: np.ndarray  # (S, U); (S, 0) when rebuilt from a coverage journal (seed_hits set)
    angles: list[list[np.ndarray]]  # [t][p] -> (S,)
    acts: list[list[np.ndarray]] | None  # [t][p] -> (S, U); None when only the hits are kept
    campaign_seed: int = 0
    seed_hits: dict[str, np.ndarray] | None = None  # :func:`image_hits` of the seeds (from seed_acts when None)
    hits: list[list[dict[str, np.ndarray]]] | None = None  # [t][p] -> image_hits (from acts when None)


def image_hits(tracker: CoverageTracker, acts: np.ndarray) -> dict[str, np.ndarray]:
    """What each of ``acts``' images covers, per criterion of ``tracker`` plus ``"nc"`` (always: the studies
    count NC-active neurons): (N, units) bool masks, or (N, neurons) unit indices for ``kmnc`` (−1 = none).

    Coverage over a set of images is the union of their hits, so :func:`analyse` needs nothing else; a coverage
    campaign (:mod:`lidarmt.coverage.campaign`) journals these per image instead of the neuron values."""
    acts = np.asarray(acts, dtype=np.float32)
    out = tracker.hits(acts)
    if "nc" not in out:
        out["nc"] = nc_mask(acts, tracker.probe.offsets, tracker.config.nc_threshold)
    return out


def collect(evaluator: Any, tracker: CoverageTracker, *, progress: Callable[[int], None] | None = None
            ) -> StudyData:
    """Forward the seeds of ``evaluator.config`` (a one-model camera campaign) and their transformed images.

    One forward pass per seed frame (the seed and all its transformed images in one batch)."""
    cfg = evaluator.config
    model = evaluator.models[0]
    history = int(model.input_spec.history)
    nt = len(cfg.transforms)
    grids = [len(t.grid) for t in cfg.transforms]
    seed_acts, seed_angles, labels = [], [], []
    per: list[list[list[np.ndarray]]] = [[[] for _ in range(g)] for g in grids]
    per_ang: list[list[list[np.ndarray]]] = [[[] for _ in range(g)] for g in grids]
    for frame in cfg.frames:
        window, cur = evaluator.window(frame)
        batch = [evaluator.model_input(window, history)]
        for t in range(nt):
            for p in range(grids[t]):
                batch.append(evaluator.model_input(evaluator.transformed(window, frame, t, p, 0), history))
        angles, acts = tracker.measure(np.stack(batch))
        angles = np.asarray(angles, dtype=np.float64).reshape(-1)
        seed_acts.append(acts[0])
        seed_angles.append(angles[0])
        labels.append(math.nan if cur.label is None else float(cur.label))
        k = 1
        for t in range(nt):
            for p in range(grids[t]):
                per[t][p].append(acts[k])
                per_ang[t][p].append(angles[k])
                k += 1
        if progress is not None:
            progress(1)
    return StudyData(
        model=model.name, frames=[int(f) for f in cfg.frames], labels=np.asarray(labels),
        transforms=[t.name for t in cfg.transforms], param_labels=cfg.param_labels(),
        seed_angles=np.asarray(seed_angles), seed_acts=np.stack(seed_acts),
        angles=[[np.asarray(a) for a in row] for row in per_ang],
        acts=[[np.stack(a) for a in row] for row in per], campaign_seed=int(cfg.seed))


def _cov(tracker: CoverageTracker, neurons: int, *groups: dict[str, np.ndarray]
         ) -> dict[str, dict[str, float | int]]:
    """Cumulative coverage of the images of ``groups`` (:func:`image_hits`): the union of their hits."""
    out: dict[str, dict[str, float | int]] = {}
    for c in tracker.criteria:
        units = tracker.units(c, neurons)
        if not groups:
            covered = 0
        elif c == "kmnc":
            covered = int(np.unique(np.concatenate([g[c][g[c] >= 0] for g in groups])).size)
        else:
            covered = int(np.count_nonzero(np.logical_or.reduce([g[c].any(0) for g in groups])))
        out[c] = {"covered": covered, "units": units, "share": round(covered / units, 6)}
    return out


def _cohen_d(a: np.ndarray, b: np.ndarray) -> float | None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        return None
    pooled = math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))
    return None if pooled == 0 else round(float((a.mean() - b.mean()) / pooled), 4)


def _effect(d: float | None) -> str:
    if d is None:
        return "n/a"
    d = abs(d)
    return "negligible" if d < 0.2 else "small" if d < 0.5 else "medium" if d < 0.8 else "large"


def _num(x: Any) -> float | None:
    x = float(x)
    return None if not math.isfinite(x) else round(x, 6)


def analyse(tracker: CoverageTracker, data: StudyData) -> dict[str, Any]:
    """The four studies as a JSON-ready dict (see the module docstring)."""
    from scipy import stats

    neurons = int(tracker.probe.offsets[-1])
    s = len(data.frames)
    seed_hits = data.seed_hits if data.seed_hits is not None else image_hits(tracker, data.seed_acts)
    if data.hits is not None:
        hits = data.hits
    else:
        assert data.acts is not None, "StudyData needs acts or hits"
        hits = [[image_hits(tracker, a) for a in row] for row in data.acts]
    seed_mask = seed_hits["nc"]
    n_o = seed_mask.sum(1)
    masks = [[h["nc"] for h in row] for row in hits]
    all_transformed = [h for row in hits for h in row]

    per_param = []
    per_transform = []
    for t, name in enumerate(data.transforms):
        rows = []
        for p, label in enumerate(data.param_labels[t]):
            n_t = masks[t][p].sum(1)
            inc = n_t - n_o
            rel = np.where(n_o > 0, inc / np.maximum(n_o, 1), np.nan)
            rows.append({
                "param": p, "label": label, "coverage": _cov(tracker, neurons, hits[t][p]),
                "mean_image_nc": round(float(n_t.mean() / neurons), 6),
                "median_increase": float(np.median(inc)), "median_increase_pct": _num(np.nanmedian(rel) * 100)
                if np.isfinite(rel).any() else None,
                "mean_abs_angle_change_deg": round(float(np.degrees(np.abs(data.angles[t][p] -
                                                                             data.seed_angles)).mean()), 4),
            })
        per_param.append({"transform": name, "params": rows})
        n_t_all = np.concatenate([masks[t][p].sum(1) for p in range(len(masks[t]))])
        n_o_all = np.tile(n_o, len(masks[t]))
        inc = n_t_all - n_o_all
        try:
            w = stats.wilcoxon(n_t_all, n_o_all) if np.any(inc != 0) else None
        except ValueError:
            w = None
        d = _cohen_d(n_t_all, n_o_all)
        with_seeds = _cov(tracker, neurons, seed_hits, *hits[t])
        per_transform.append({
            "transform": name, "images": int(len(n_t_all)), "coverage": _cov(tracker, neurons, *hits[t]),
            "coverage_with_seeds": with_seeds,
            "median_increase": float(np.median(inc)),
            "median_increase_pct": _num(np.median(inc / np.maximum(n_o_all, 1)) * 100),
            "wilcoxon_p": None if w is None else _num(w.pvalue), "cohen_d": d, "effect": _effect(d),
        })

    baseline = _cov(tracker, neurons, seed_hits)
    transformed = _cov(tracker, neurons, *all_transformed)
    together = _cov(tracker, neurons, seed_hits, *all_transformed)
    table6 = {}
    for c in baseline:
        b, y = baseline[c]["covered"], together[c]["covered"]
        table6[c] = {"baseline": baseline[c], "transformed": transformed[c], "together": together[c],
                     "increase_pct": None if b == 0 else round(100.0 * (y - b) / b, 3)}
    # Figure 4.2: per seed image, neurons activated by T1, T1 ∪ T2, ..., averaged over the seeds
    union_t = np.stack([np.logical_or.reduce(np.stack(masks[t]), axis=0) for t in range(len(masks))], axis=1) \
        if masks else np.zeros((s, 0, neurons), bool)  # (S, T, U)
    steps = [float(seed_mask.sum(1).mean() / neurons)]
    acc = seed_mask.copy()
    for t in range(union_t.shape[1]):
        acc |= union_t[:, t]
        steps.append(float(acc.sum(1).mean() / neurons))
    cumulative = {"table6": table6, "per_seed_steps": {"labels": ["seed", *data.transforms],
                                                        "mean_nc": [round(v, 6) for v in steps]}}

    # Figure 4: Jaccard distances between the neuron sets of pairs of transformations, per seed image
    nt = len(data.transforms)
    med = np.zeros((nt, nt))
    pairs = []
    if nt:
        a = union_t.astype(np.float32)
        inter = np.einsum("siu,sju->sij", a, a)
        sizes = a.sum(2)
        union = sizes[:, :, None] + sizes[:, None, :] - inter
        dist = np.where(union > 0, 1.0 - inter / np.where(union > 0, union, 1), 0.0)  # (S, T, T)
        med = np.median(dist, axis=0)
        for i in range(nt):
            for j in range(i + 1, nt):
                pairs.append(float(med[i, j]))
    jacc = {"transforms": data.transforms, "median": [[round(float(v), 4) for v in row] for row in med],
            "median_of_pairs": round(float(np.median(pairs)), 4) if pairs else None,
            "seed_vs_transformed_median": [round(float(np.median([jaccard_distance(seed_mask[i], union_t[i, t])
                                                                  for i in range(s)])), 4) for t in range(nt)]}

    # RQ1: Spearman correlation between an image's NC and its steering angle; direction groups
    img_nc = [n_o / neurons] + [m.sum(1) / neurons for row in masks for m in row]
    img_ang = [data.seed_angles] + [a for row in data.angles for a in row]
    rq1 = {"seeds": _rq1(stats, n_o / neurons, data.seed_angles),
           "all_images": _rq1(stats, np.concatenate(img_nc), np.concatenate(img_ang))}

    return {
        "model": data.model, "frames": data.frames, "seeds": s, "neurons": neurons,
        "layers": [{"name": li.name, "kind": li.kind, "size": li.size} for li in tracker.probe.layers],
        "config": tracker.config.to_dict(), "criteria": list(tracker.criteria), "campaign_seed": data.campaign_seed,
        "transforms": data.transforms, "images": int(s * (1 + sum(len(r) for r in hits))),
        "per_param": per_param, "per_transform": per_transform, "cumulative": cumulative, "jaccard": jacc,
        "rq1": rq1,
    }


def _rq1(stats: Any, nc: np.ndarray, angle: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"images": int(len(nc))}
    if len(nc) >= 3 and np.ptp(nc) > 0 and np.ptp(angle) > 0:
        r = stats.spearmanr(nc, angle)
        out["spearman_rho"], out["spearman_p"] = _num(r.statistic), _num(r.pvalue)
    else:
        out["spearman_rho"] = out["spearman_p"] = None
    left, right = nc[angle > 0], nc[angle < 0]
    out["left"], out["right"] = int(len(left)), int(len(right))
    if len(left) and len(right) and (np.ptp(np.concatenate([left, right])) > 0):
        u = stats.mannwhitneyu(left, right)
        out["direction_p"] = _num(u.pvalue)
        out["left_mean_nc"], out["right_mean_nc"] = round(float(left.mean()), 6), round(float(right.mean()), 6)
        d = _cohen_d(left, right)
        out["cohen_d"], out["effect"] = d, _effect(d)
    else:
        out["direction_p"] = None
    return out


def seeds_for(n_frames: int, count: int | None, seed: int) -> tuple[int, ...]:
    """The seed frames a camera campaign with the same ``--frames`` and ``--seed`` samples."""
    from lidarmt.engine.campaign import select_items

    return tuple(int(i) for i in select_items(n_frames, count, seed, what="images"))


def make_evaluator(images: str, model: str, transforms: Sequence[Any], frames: Sequence[int], *, seed: int = 0,
                   topic: str | None = None, model_options: dict[str, Any] | None = None) -> Any:
    """A one-model camera campaign's evaluator (it opens the source, builds the model and transformations)."""
    from lidarmt.camera.campaign import CameraCampaignConfig, CameraEvaluator, ModelRef, transform_refs

    cfg = CameraCampaignConfig(str(images), (ModelRef(model, dict(model_options or {})),),
                               transform_refs(transforms), tuple(int(f) for f in frames), seed=seed, topic=topic)
    return CameraEvaluator(cfg, enforce_timeout=False)
