"""Average precision of a detector over labelled frames, as the detection literature prints it.

Two computations of the same quantity, both on per-frame IoU matrices of one class (detections × ground truths,
e.g. :func:`lidarmt.lidar.perception.apollo.evaluate.bev_iou` of MinBox rectangles and label boxes):

* :func:`interpolated_ap` — the definition: rank every detection of every frame by score, match greedily (each
  detection, best score first, takes the unmatched ground truth of its frame with the highest IoU at or above the
  threshold), trace precision and recall, take the precision envelope (the best precision at any recall at least
  r) and average it over the recall points: 40 points ``1/40 … 1`` (AP|R40, Simonelli et al., ICCV 2019, which
  KITTI adopted in 2019) and 11 points ``0, 0.1 … 1`` (AP|R11, KITTI's original).
* :func:`kitti_ap` — the KITTI object devkit's procedure (``evaluate_object.cpp`` and its Python ports):
  ground truth takes the highest-scoring overlapping detection to collect the true-positive scores; at most one
  score threshold per 1/40 of recall is chosen from them (``getThresholds``); true and false positives are
  counted again at each threshold with detections below it dropped (a ground truth now takes the overlapping
  detection with the highest IoU); precision is made non-increasing from the right; AP|R40 sums the precisions
  at thresholds 1…40, AP|R11 those at 0, 4, … 40. IoU must *exceed* the threshold (the devkit's ``>``).

Both leave ignored ground truth (too few points, outside the labelled region) out of the count, and a detection
that matches an ignored ground truth, or is itself ignored (outside the region), is neither a true nor a false
positive. They agree when a class has many ground truths; with few they do not, because the devkit picks one
threshold per true positive at most: a perfect detector of 2 cars scores AP|R40 = 2.5 there (precision 1 at the
two thresholds, 0 at the 39 sampled points it never reaches) and 100 here. Robustness tables on a handful of
frames therefore use :func:`interpolated_ap`; :func:`kitti_ap` is there to compare with numbers computed by the
devkit on many frames.

Values are percentages (0-100), as the papers print them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: recall points of AP|R40 and AP|R11
R40 = np.arange(1, 41) / 40.0
R11 = np.arange(0, 11) / 10.0


@dataclass(frozen=True, slots=True)
class FrameScores:
    """One frame's detections and ground truths of one class.

    ``iou[i, j]``: detection i against ground truth j; ``scores[i]``: detection i's confidence;
    ``gt_ignored[j]`` / ``det_ignored[i]``: left out of the count (see the module docstring)."""

    iou: np.ndarray
    scores: np.ndarray
    gt_ignored: np.ndarray | None = None
    det_ignored: np.ndarray | None = None

    def checked(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        scores = np.asarray(self.scores, dtype=np.float64).reshape(-1)
        n_det = len(scores)
        iou = np.asarray(self.iou, dtype=np.float64)
        if iou.size == 0:
            iou = iou.reshape(n_det, -1) if n_det else iou.reshape(0, iou.shape[-1] if iou.ndim == 2 else 0)
        if iou.ndim != 2 or iou.shape[0] != n_det:
            raise ValueError(f"iou has shape {iou.shape}; expected ({n_det}, n_gt) for {n_det} scores")
        n_gt = iou.shape[1]
        gi = np.zeros(n_gt, bool) if self.gt_ignored is None else np.asarray(self.gt_ignored, bool).reshape(-1)
        di = np.zeros(n_det, bool) if self.det_ignored is None else np.asarray(self.det_ignored, bool).reshape(-1)
        if len(gi) != n_gt or len(di) != n_det:
            raise ValueError(f"ignore flags of lengths {len(gi)} / {len(di)} for {n_gt} ground truths and "
                             f"{n_det} detections")
        if not (np.all(np.isfinite(scores)) and np.all(np.isfinite(iou))):
            raise ValueError("scores and IoU must be finite")
        return iou, scores, gi, di


@dataclass(slots=True)
class APResult:
    """AP|R40 and AP|R11 (percent) with the curve they were read from."""

    method: str
    iou_threshold: float
    n_gt: int
    n_det: int
    ap_r40: float
    ap_r11: float
    precision: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"method": self.method, "iou_threshold": self.iou_threshold, "n_gt": self.n_gt, "n_det": self.n_det,
                "ap_r40": round(self.ap_r40, 4), "ap_r11": round(self.ap_r11, 4)}


def _greedy(iou: np.ndarray, scores: np.ndarray, gi: np.ndarray, di: np.ndarray, thr: float,
            strict: bool) -> np.ndarray:
    """Per detection: 1 true positive, 0 false positive, -1 not counted. Detections by decreasing score (ties: the
    earlier one), each to the free ground truth with the highest IoU at (or above, ``strict``) ``thr``; a
    detection whose best match is an ignored ground truth is not counted."""
    out = np.zeros(len(scores), dtype=np.int8)
    taken = np.zeros(iou.shape[1], bool)
    for i in np.argsort(-scores, kind="stable"):
        if di[i]:
            out[i] = -1
            continue
        row = np.where(taken, -1.0, iou[i])
        ok = row > thr if strict else row >= thr
        if ok.any():
            j = int(np.argmax(np.where(ok, row, -1.0)))
            taken[j] = True
            out[i] = -1 if gi[j] else 1
        elif np.any((iou[i] > thr if strict else iou[i] >= thr) & gi):
            out[i] = -1  # overlaps only ignored (or already taken ignored) ground truth
    return out


def _envelope_ap(precision: np.ndarray, recall: np.ndarray, points: np.ndarray) -> float:
    """Mean over ``points`` of the best precision at a recall at least the point (0 where never reached)."""
    if len(precision) == 0:
        return 0.0
    best = np.maximum.accumulate(precision[::-1])[::-1]  # best precision from each rank on
    idx = np.searchsorted(recall, points - 1e-12, side="left")
    vals = np.where(idx < len(recall), best[np.minimum(idx, len(best) - 1)], 0.0)
    return float(vals.mean() * 100.0)


def interpolated_ap(frames: Sequence[FrameScores], iou_threshold: float) -> APResult:
    """AP by its definition (see the module docstring): IoU at or above ``iou_threshold`` matches."""
    all_scores: list[np.ndarray] = []
    all_tp: list[np.ndarray] = []
    n_gt = 0
    for fr in frames:
        iou, scores, gi, di = fr.checked()
        n_gt += int((~gi).sum())
        all_tp.append(_greedy(iou, scores, gi, di, iou_threshold, strict=False))
        all_scores.append(scores)
    scores = np.concatenate(all_scores) if all_scores else np.zeros(0)
    tp = np.concatenate(all_tp) if all_tp else np.zeros(0, np.int8)
    keep = tp >= 0
    scores, tp = scores[keep], tp[keep]
    order = np.argsort(-scores, kind="stable")
    tp = tp[order].astype(np.float64)
    ctp = np.cumsum(tp)
    cfp = np.cumsum(1.0 - tp)
    precision = ctp / np.maximum(ctp + cfp, 1e-12)
    recall = ctp / n_gt if n_gt else np.zeros_like(ctp)
    r40 = _envelope_ap(precision, recall, R40) if n_gt else 0.0
    r11 = _envelope_ap(precision, recall, R11) if n_gt else 0.0
    return APResult("interpolated", float(iou_threshold), n_gt, int(len(scores)), r40, r11,
                    precision.tolist(), recall.tolist())


def _devkit_thresholds(tp_scores: np.ndarray, n_gt: int, n_points: int = 41) -> list[float]:
    """The devkit's ``getThresholds``: from the true positives' scores, at most one threshold per
    ``1/(n_points-1)`` of recall."""
    s = np.sort(tp_scores)[::-1]
    out: list[float] = []
    current = 0.0
    for i, score in enumerate(s):
        left = (i + 1) / n_gt
        right = (i + 2) / n_gt if i < len(s) - 1 else left
        if (right - current) < (current - left) and i < len(s) - 1:
            continue
        out.append(float(score))
        current += 1.0 / (n_points - 1.0)
    return out


def _devkit_frame(iou: np.ndarray, scores: np.ndarray, gi: np.ndarray, di: np.ndarray, thr: float,
                  score_min: float | None) -> tuple[int, int, int, list[float]]:
    """One frame at one score threshold (None: the first pass, collecting true positives' scores):
    (tp, fp, fn, the true positives' scores)."""
    n_det, n_gt = iou.shape
    below = np.zeros(n_det, bool) if score_min is None else scores < score_min
    assigned = np.zeros(n_det, bool)
    tp = fn = 0
    tp_scores: list[float] = []
    for j in range(n_gt):
        best, best_val, best_ign = -1, -np.inf, False
        for i in range(n_det):
            if assigned[i] or below[i] or not iou[i, j] > thr:
                continue
            if score_min is None:  # first pass: the highest-scoring overlapping detection
                if scores[i] > best_val:
                    best, best_val = i, scores[i]
            elif not di[i] and (iou[i, j] > best_val or best_ign):
                best, best_val, best_ign = i, iou[i, j], False
            elif di[i] and best < 0:
                best, best_val, best_ign = i, -np.inf, True
        if best < 0:
            fn += int(not gi[j])
        elif gi[j] or di[best]:
            assigned[best] = True
        else:
            tp += 1
            tp_scores.append(float(scores[best]))
            assigned[best] = True
    fp = int(np.sum(~(assigned | di | below))) if score_min is not None else 0
    return tp, fp, fn, tp_scores


def kitti_ap(frames: Sequence[FrameScores], iou_threshold: float) -> APResult:
    """AP as the KITTI object devkit computes it (see the module docstring): IoU must exceed
    ``iou_threshold``."""
    checked = [fr.checked() for fr in frames]
    n_gt = sum(int((~gi).sum()) for _, _, gi, _ in checked)
    n_det = sum(len(s) for _, s, _, _ in checked)
    if n_gt == 0:
        return APResult("kitti-devkit", float(iou_threshold), 0, n_det, 0.0, 0.0)
    tp_scores = [s for c in checked for s in _devkit_frame(*c, iou_threshold, None)[3]]
    thresholds = _devkit_thresholds(np.asarray(tp_scores, dtype=np.float64), n_gt)
    prec = np.zeros(41)
    rec = np.zeros(41)
    for k, t in enumerate(thresholds[:41]):
        tp = fp = fn = 0
        for c in checked:
            a, b, d, _ = _devkit_frame(*c, iou_threshold, t)
            tp, fp, fn = tp + a, fp + b, fn + d
        prec[k] = tp / (tp + fp) if tp + fp else 0.0
        rec[k] = tp / (tp + fn) if tp + fn else 0.0
    prec = np.maximum.accumulate(prec[::-1])[::-1]
    n = len(thresholds)
    return APResult("kitti-devkit", float(iou_threshold), n_gt, n_det,
                    float(prec[1:41].sum() / 40.0 * 100.0), float(prec[0:41:4].sum() / 11.0 * 100.0),
                    prec[:n].tolist(), rec[:n].tolist())
