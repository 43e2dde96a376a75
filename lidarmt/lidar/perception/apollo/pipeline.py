"""``ApolloLOP``: Apollo's LiDAR obstacle perception as a :class:`lidarmt.lidar.perception.base.Perception`.

Per frame (apollo-lop-facts.md §1, §3-§5), all in the sensor frame:

1. ROI: ``roi.indices(frame)``; an empty ROI gives no obstacles (Apollo's HDMap filter fails the frame).
2. Features from the **full** cloud when ``use_full_cloud`` (Apollo's setting), else from the ROI points.
3. CNN (``exact`` fp32 or ``fast`` bf16/channels_last; on the CPU or a CUDA GPU: ``device``, docs/gpu.md).
4. Cluster2D on the ROI points only (``use_all_grids``: object cells need no ROI point).
5. With ``low_object_filter`` (Apollo 2.5+; on in ``apollo-3.0``): drop the clusters that are low and flat, as
   Apollo's LowObjectFilter does between segmentation and MinBox (:mod:`lidarmt.lidar.perception.apollo.low_object`).
6. MinBox per emitted cluster (reference centre = sensor origin).

The tracker and type fuser are not run: they change neither the count nor (with the offline tool's
DummyTypeFuser) the types of one frame.

The obstacles' ``point_indices`` index the frame's full point array. ``detect(..., timings=d)`` fills ``d`` with
per-stage seconds; ``last_timings`` keeps those of the last call. ``forward_grid(frame)`` and ``stages(frame,
roi)`` expose the intermediate outputs (features, CNN heads, clusters) for debugging and throughput runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.lidar.perception.apollo.cluster2d import ClusterOutput, cluster2d
from lidarmt.lidar.perception.apollo.config import ApolloConfig
from lidarmt.lidar.perception.apollo.errors import WeightsError
from lidarmt.lidar.perception.apollo.features import compute_features
from lidarmt.lidar.perception.apollo.minbox import build_boxes_arrays
from lidarmt.types import Frame, MetaType, Obstacle, Obstacles, Roi, finite_mask

__all__ = ["ApolloLOP", "StageOutputs"]

_DEFAULT = object()


@dataclass(slots=True)
class StageOutputs:
    """Everything one pipeline run produced (see :meth:`ApolloLOP.stages`)."""

    roi_indices: np.ndarray  # int64 indices of the frame's ROI points
    features: np.ndarray | None  # (8, H, W) float32
    heads: dict[str, np.ndarray] | None  # CNN outputs (see CnnRunner)
    clusters: ClusterOutput | None
    obstacles: Obstacles
    timings: dict[str, float] = field(default_factory=dict)


class ApolloLOP:
    """Apollo's cnnseg obstacle perception (2.0-3.0 era).

    ``ApolloLOP(config)`` loads the weights named by ``config.weights`` or, by default, the shipped
    ``lidarmt/lidar/perception/apollo/weights/cnnseg<grid>.pt``; a missing file is a :class:`WeightsError` (a
    UserError) telling to run ``lidarmt train``. Tests and benchmarks pass ``weights=None, allow_random=True``
    for a randomly initialised network (``seed``), or ``network=`` a ready :class:`CnnSegNet`.
    """

    name = "apollo"

    def __init__(
        self,
        config: ApolloConfig | None = None,
        *,
        weights: str | os.PathLike[str] | None | Any = _DEFAULT,
        allow_random: bool = False,
        seed: int = 0,
        network: Any = None,
    ) -> None:
        from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network

        self.config = config or ApolloConfig()
        cfg = self.config
        self.name = "apollo" if cfg.grid == 640 else f"apollo-{cfg.grid}"
        if network is not None:
            net = network
            self.weights_path: Path | None = None
        elif weights is None:
            if not allow_random:
                raise WeightsError(
                    "weights=None runs the CNN with random weights; pass allow_random=True to mean it "
                    "(tests and benchmarks only)"
                )
            net = build_network(cfg.grid, seed=seed, in_channels=cfg.in_channels)
            self.weights_path = None
        else:
            path = Path(cfg.weights_path() if weights is _DEFAULT else weights).expanduser()
            if not path.is_file():
                if weights is _DEFAULT and cfg.weights is None:
                    hint = "train them with `lidarmt train --ship` (which installs them there), or pass --weights FILE"
                else:
                    hint = "pass an existing weights file, or train one with `lidarmt train`"
                raise WeightsError(f"CNN weights {path} not found: {hint}")
            self.weights_path = path
            if path.suffix.lower() == ".onnx":
                net = None
            else:
                from lidarmt.lidar.perception.apollo.caffe import load_any_network

                net = load_any_network(path, grid=cfg.grid, prototxt=cfg.prototxt, in_channels=cfg.in_channels)
                if net.in_channels != cfg.in_channels:
                    hint = ("use --sut apollo-3.5 (sensor=velodyne16|velodyne64|velodyne128)" if net.in_channels != 8
                            else "use --sut apollo (Apollo 2.5/3.0)")
                    raise WeightsError(f"{path}: a {net.in_channels}-channel network; this preset computes "
                                       f"{cfg.in_channels} feature channels; {hint}")
        self.network = net
        if net is None:  # an ONNX file: onnxruntime runs the CNN stage (fp32)
            from lidarmt.lidar.perception.apollo.onnxnet import OnnxCnnRunner

            self.runner: Any = OnnxCnnRunner(self.weights_path, grid=cfg.grid, in_channels=cfg.in_channels,
                                             device=cfg.device, threads=cfg.threads)
        else:
            self.runner = CnnRunner(net, mode=cfg.mode, compile=cfg.compile, threads=cfg.threads,
                                    device=cfg.device)
        #: how reports name the weights: "Apollo 3.0 cnnseg, official weights", "caffemodel <sha256[:12]>", ...
        #: (hashed after the file passed its reader's size checks)
        self.weights_label = "random" if weights is None and network is None else "in-memory network"
        if self.weights_path is not None:
            from lidarmt.lidar.perception.apollo.caffe import weights_label

            self.weights_label = weights_label(self.weights_path)
        self.last_timings: dict[str, float] = {}
        self._feat_buf: np.ndarray | None = None
        self._feat_key: tuple[int, float] | None = None

    @property
    def implementation(self) -> str:
        """The CNN stage's implementation, as bundles and journals record it: ``exact-v2`` (the version of exact
        mode, :data:`lidarmt.lidar.perception.apollo.network.EXACT_IMPLEMENTATIONS`), ``fast-bf16``, ``fast-fp32``
        or ``onnxruntime``."""
        return str(getattr(self.runner, "implementation", "unknown"))

    def __repr__(self) -> str:
        w = self.weights_path.name if self.weights_path else "random/in-memory"
        return (f"ApolloLOP(grid={self.config.grid}, mode={self.config.mode}/{self.runner.precision}, "
                f"device={self.runner.device}, weights={w}, {self.weights_label})")

    # ------------------------------------------------------------------ stages
    def features(self, frame: Frame, roi_indices: np.ndarray | None = None) -> np.ndarray:
        """The (8, H, W) feature grid Apollo feeds the CNN: full cloud or (``use_full_cloud=False``) ROI points.

        The returned array is a buffer reused by the next call; copy it to keep it. Apollo 3.5+'s networks
        (``in_channels`` 6 or 4) get their channels of the same generator (``config.FEATURE_CHANNELS``)."""
        cfg = self.config
        key = (cfg.grid, float(cfg.range))
        fresh = self._feat_buf is None or self._feat_key != key
        if fresh:
            self._feat_buf = np.empty((8, cfg.grid, cfg.grid), dtype=np.float32)
            self._feat_key = key
        indices = (
            None
            if cfg.use_full_cloud
            else (roi_indices if roi_indices is not None else np.zeros(0, np.int64))
        )
        feats = compute_features(
            frame.points,
            grid=cfg.grid,
            range=cfg.range,
            min_height=cfg.min_height,
            max_height=cfg.max_height,
            indices=indices,
            out=self._feat_buf,
            constants_filled=not fresh,  # the buffer is private: channels 3 and 6 stay as written
        )
        if cfg.in_channels != 8:
            from lidarmt.lidar.perception.apollo.config import FEATURE_CHANNELS

            return feats[list(FEATURE_CHANNELS[cfg.in_channels])]
        return feats

    def forward_grid(self, frame: Frame, roi_indices: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Features and CNN outputs of a frame: the six heads plus ``"features"`` (a copy)."""
        feats = self.features(frame, roi_indices)
        heads = dict(self.runner(feats))
        heads["features"] = feats.copy()
        return heads

    def stages(self, frame: Frame, roi: Roi) -> StageOutputs:
        """Run every stage and keep all intermediate outputs."""
        return self._run(frame, roi, keep=True)

    def detect(self, frame: Frame, roi: Roi, *, timings: dict[str, float] | None = None) -> Obstacles:
        """The obstacles of one frame (see the module docstring); ``timings`` receives per-stage seconds."""
        out = self._run(frame, roi, keep=False)
        if timings is not None:
            timings.update(out.timings)
        return out.obstacles

    # ------------------------------------------------------------------ implementation
    def _run(self, frame: Frame, roi: Roi, *, keep: bool) -> StageOutputs:
        cfg = self.config
        t = {"roi": 0.0, "features": 0.0, "cnn": 0.0, "cluster": 0.0, "minbox": 0.0}
        t0 = time.perf_counter()
        pts = frame.points
        if getattr(roi, "empty", False):
            roi_idx = np.zeros(0, np.int64)
        else:
            roi_idx = np.asarray(roi.indices(frame), dtype=np.int64)
            if len(roi_idx):
                roi_idx = roi_idx[finite_mask(pts[roi_idx])]  # Apollo drops NaN points before everything
        t1 = time.perf_counter()
        t["roi"] = t1 - t0
        if len(roi_idx) == 0:  # Apollo: no ROI -> the frame yields no objects
            t["total"] = t1 - t0
            self.last_timings = t
            return StageOutputs(roi_idx, None, None, None, Obstacles(), t)
        feats = self.features(frame, roi_idx)
        t2 = time.perf_counter()
        heads = self.runner(feats)
        t3 = time.perf_counter()
        rp = pts[roi_idx]
        clusters = cluster2d(
            heads,
            rp["x"],
            rp["y"],
            rp["z"],
            range=cfg.range,
            objectness_thresh=cfg.objectness_thresh,
            confidence_thresh=cfg.confidence_thresh,
            height_thresh=cfg.height_thresh,
            min_pts_num=cfg.min_pts_num,
            use_all_grids=cfg.use_all_grids,
            filter_noise=cfg.filter_noise,
            filter_thresh=cfg.filter_thresh,
            enable_filter_thresh=cfg.enable_filter_thresh,
            log_count=feats[2] if cfg.filter_noise else None,
        )
        if cfg.low_object_filter:
            clusters = _low_object_filter(clusters, rp["z"], cfg)
        t4 = time.perf_counter()
        obstacles = self._build(rp, roi_idx, clusters)
        t5 = time.perf_counter()
        t.update(features=t2 - t1, cnn=t3 - t2, cluster=t4 - t3, minbox=t5 - t4, total=t5 - t0)
        self.last_timings = t
        return StageOutputs(
            roi_idx,
            feats.copy() if keep else None,
            heads if keep else None,
            clusters if keep else None,
            obstacles,
            t,
        )

    @staticmethod
    def _build(rp: np.ndarray, roi_idx: np.ndarray, clusters: ClusterOutput) -> Obstacles:
        kept, members, offsets = clusters.kept, clusters.members, clusters.offsets
        k_total = len(kept)
        if k_total == 0:
            return Obstacles()
        sel = rp[members]
        xyz = np.empty((len(members), 3), dtype=np.float32)
        xyz[:, 0], xyz[:, 1], xyz[:, 2] = sel["x"], sel["y"], sel["z"]
        boxes, heights, poly, poly_off = build_boxes_arrays(xyz, offsets)
        probs = clusters.meta_probs[kept]  # (K, 5)
        metas = np.argmax(probs, axis=1).tolist()  # the first maximum wins, as std::max_element
        tprobs = np.zeros((k_total, 6), dtype=np.float32)
        tprobs[:, 0], tprobs[:, 3], tprobs[:, 4] = probs[:, 0], probs[:, 4], probs[:, 3]
        tprobs[:, 5] = probs[:, 1] + probs[:, 2]
        point_idx = roi_idx[members]
        scores = clusters.scores[kept].astype(np.float64).tolist()
        lengths, widths, hs = boxes[:, 3].tolist(), boxes[:, 4].tolist(), heights.tolist()
        off, poff = offsets.tolist(), poly_off.tolist()
        out = [
            Obstacle(
                cls=_CLASSES[m],
                score=scores[k],
                point_indices=point_idx[off[k] : off[k + 1]],
                center=boxes[k, 0:3],
                length=lengths[k],
                width=widths[k],
                height=hs[k],
                direction=boxes[k, 5:8],
                polygon=poly[poff[k] : poff[k + 1]],
                meta_type=_METAS[m],
                type_probs=tprobs[k],
            )
            for k, m in enumerate(metas)
        ]
        return Obstacles(out)


def _low_object_filter(clusters: ClusterOutput, z: np.ndarray, cfg: ApolloConfig) -> ClusterOutput:
    """``clusters`` without the objects Apollo's LowObjectFilter erases (order kept); the grids are shared."""
    from lidarmt.lidar.perception.apollo.low_object import low_object_keep

    members, offsets = clusters.members, clusters.offsets
    keep = low_object_keep(z[members], offsets, height_threshold=cfg.object_height_threshold,
                           position_threshold=cfg.object_position_height_threshold)
    if keep.all():
        return clusters
    counts = np.diff(offsets)[keep]
    new_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    point_keep = np.repeat(keep, np.diff(offsets))
    return ClusterOutput(
        id_img=clusters.id_img, num_obstacles=clusters.num_obstacles, scores=clusters.scores,
        heights=clusters.heights, meta_probs=clusters.meta_probs, cells=clusters.cells,
        point_obstacle=clusters.point_obstacle, kept=clusters.kept[keep], members=members[point_keep],
        offsets=new_offsets,
    )


_METAS = tuple(MetaType)
_CLASSES = tuple(m.obstacle_class for m in _METAS)
