"""Configuration of the Apollo LiDAR obstacle perception pipeline, as ``cnnseg.conf`` sets it.

Defaults follow Apollo 2.5/3.0 (``model/cnn_segmentation/cnnseg.conf``): a 640x640 grid over +-60 m, heights in
(-5, 5) m, objectness 0.5, confidence 0.1, height_thresh 0.5, min_pts_num 3, ``use_full_cloud`` and
``use_all_grids_for_clustering`` both **true** (the two flags that let points outside the ROI change obstacles
inside it). ``ApolloConfig.apollo_2_0()`` gives the 512x512 model of the paper's 2018 checkout.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from lidarmt._paths import sha256_file  # noqa: F401 - re-exported (caffe.sha256_file)
from lidarmt.lidar.perception.apollo.errors import ConfigError

#: Where ``lidarmt train`` ships the default weights of each grid size.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
#: The default of the 640 grid is v4, "streets" (issue 32: v3 fine-tuned on drive 0001, the nine SemanticKITTI
#: sequences and simulated frames); v3 (drive 0001 + simulated frames, the default before it) stays by name.
DEFAULT_WEIGHTS = {640: WEIGHTS_DIR / "cnnseg640_streets.pt", 512: WEIGHTS_DIR / "cnnseg512.pt"}
#: Shipped weights selectable by name (``--sut-option weights=sim``), per grid: files of WEIGHTS_DIR (see its
#: MODEL_CARD.md). A name is looked up here only, never taken as a path. "default" is what loads without one.
NAMED_WEIGHTS: dict[str, dict[int, str]] = {
    "default": {grid: path.name for grid, path in DEFAULT_WEIGHTS.items()},
    "sim": {640: "cnnseg640_sim.pt", 512: "cnnseg512_sim.pt"},  # trained on simulated sweeps only (v2)
    # v3: v2 fine-tuned on drive 0001 + simulated frames (the 640 default until issue 32; the 512 default)
    "v3": {640: "cnnseg640.pt", 512: "cnnseg512.pt"},
    # v4 (issue 32): v3 fine-tuned on drive 0001, the nine SemanticKITTI sequences and simulated frames
    "streets": {640: "cnnseg640_streets.pt"},
}

MODES = ("exact", "fast")

#: the implementations of the CNN's ``exact`` mode on the CPU, by version (:mod:`lidarmt.lidar.perception.apollo.
#: network`): what decides the last digits of its outputs besides the CPU's kernels, so bundles and journals record
#: it. On CUDA ``exact`` is NCHW with cuDNN's deterministic algorithms whatever the version (recorded as exact-v1).
EXACT_IMPLEMENTATIONS = {
    1: "fp32, NCHW (torch's default layout), deterministic algorithms (lidarmt up to issue 34)",
    2: "fp32, channels-last (NHWC) activations and weights, ReLU fused into oneDNN's kernels, deterministic "
       "algorithms",
}
#: the version ``exact`` runs unless a runner is told otherwise (read when a runner is built)
EXACT_VERSION = 2


def implementations() -> dict[str, str]:
    """The versioned implementations this lidarmt runs, as a journal's header records them (without building a
    network or importing torch): ``{"apollo_cnn_exact": "exact-v2"}``."""
    return {"apollo_cnn_exact": f"exact-v{EXACT_VERSION}"}


def shipped_name(grid: int, in_channels: int = 8) -> str:
    """The file name of a network's shipped weights by its grid and channels: ``cnnseg512.pt``; Apollo 3.5+'s
    ``cnnseg672_6ch.pt`` (the 640 grid's default is :data:`DEFAULT_WEIGHTS`' file)."""
    return f"cnnseg{grid}.pt" if in_channels == 8 else f"cnnseg{grid}_{in_channels}ch.pt"

#: the feature channels each network takes, as indices into the 8 of Apollo 2.x's feature generator (max height,
#: mean height, log count, direction, top intensity, mean intensity, distance, non-empty): Apollo 3.5+ drops the
#: constant direction/distance channels (``use_constant_feature: false``), velodyne128 the intensities too
FEATURE_CHANNELS = {8: (0, 1, 2, 3, 4, 5, 6, 7), 6: (0, 1, 2, 4, 5, 7), 4: (0, 1, 2, 7)}
#: Apollo 3.5+'s networks per sensor (cnnseg_param.conf): grid, range, feature channels
SENSORS_3_5 = {"velodyne16": (672, 70.0, 6), "velodyne64": (672, 70.0, 6), "velodyne128": (576, 60.0, 4)}
#: a lower bound on the bytes per grid cell of one detect call: the 8 feature maps and the 12 output maps, fp32
GRID_BYTES_PER_CELL = (8 + 12) * 4


@dataclass(frozen=True, slots=True)
class ApolloConfig:
    """Every constant of the cnnseg stage; each one can be overridden (``ApolloConfig().replace(...)``,
    or ``--set key=value`` on the command line through :meth:`with_overrides`)."""

    grid: int = 640  # feature_param.width == height (512 in the 2.0 era)
    range: float = 60.0  # point_cloud_range, metres
    min_height: float = -5.0  # strict: points with z <= min_height are skipped
    max_height: float = 5.0  # strict: points with z >= max_height are skipped
    objectness_thresh: float = 0.5
    confidence_thresh: float = 0.1
    height_thresh: float = 0.5  # < 0 disables the height cut
    min_pts_num: int = 3
    use_full_cloud: bool = True
    use_all_grids: bool = True  # use_all_grids_for_clustering
    filter_noise: bool = False  # Apollo 3.0 FilterNoise
    filter_thresh: float = 30.0  # 3.0: cells with (1 + count) < this are dropped ...
    enable_filter_thresh: float = 700.0  # ... from obstacles whose max (1 + count) >= this
    low_object_filter: bool = False  # Apollo 2.5+ LowObjectFilter (on in apollo-3.0): drop low, flat objects
    object_height_threshold: float = 0.10  # ... whose z extent (Apollo's scan) is below this, metres
    object_position_height_threshold: float = -1.6  # ... and whose top is below this z (LiDAR frame), metres
    mode: str = "exact"  # "exact" (fp32, deterministic) | "fast" (channels_last + bf16 where supported)
    compile: bool = False  # torch.compile the network (fast mode)
    threads: int = 0  # torch intra-op threads for the CNN; 0 = leave torch's setting alone
    in_channels: int = 8  # feature channels: 8 (2.x/3.0), 6 (3.5+ velodyne16/64), 4 (3.5+ velodyne128)
    device: str = "cpu"  # where the CNN runs: cpu | cuda | cuda:N | auto (cuda when available), see docs/gpu.md
    # None = the shipped weights for this grid size; a name of NAMED_WEIGHTS ("sim"); else a path to a .pt file,
    # Apollo's .caffemodel (with its prototxt) or an .onnx file (run with onnxruntime)
    weights: str | None = field(default=None)
    # Apollo's deploy.prototxt for a .caffemodel in weights (None: the deploy.prototxt beside it, else lidarmt's copy)
    prototxt: str | None = field(default=None)

    def __post_init__(self) -> None:
        from lidarmt._limits import check_memory, check_threads

        if not isinstance(self.grid, int) or isinstance(self.grid, bool) or self.grid <= 0 or self.grid % 32:
            raise ConfigError(
                f"grid must be a positive multiple of 32 (the CNN downsamples 5 times), got {self.grid}"
            )
        if not self.range > 0:
            raise ConfigError(f"range must be positive, got {self.range}")
        if not self.min_height < self.max_height:
            raise ConfigError(f"min_height ({self.min_height}) must be below max_height ({self.max_height})")
        if self.in_channels not in FEATURE_CHANNELS:
            raise ConfigError(f"in_channels must be one of {', '.join(map(str, FEATURE_CHANNELS))} (Apollo's "
                              f"cnnseg networks), got {self.in_channels}")
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.min_pts_num < 0:
            raise ConfigError(f"min_pts_num must be >= 0, got {self.min_pts_num}")
        check_threads(self.threads, what="threads", error=ConfigError, zero_ok=True)  # 100000 segfaults torch
        if self.grid * self.grid * GRID_BYTES_PER_CELL > 1 << 30:  # a grid a file or option claims: fits memory?
            check_memory(self.grid * self.grid * GRID_BYTES_PER_CELL, what=f"grid {self.grid}", error=ConfigError,
                         hint="Apollo's grids are 512 or 640")
        dev = str(self.device).strip().lower()
        head, sep, index = dev.partition(":")
        if dev not in ("auto", "cpu", "cuda") and not (head == "cuda" and sep and index.isdigit()):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def apollo_2_0(cls, **overrides: Any) -> ApolloConfig:
        """The 2.0-era model (512x512 grid), as in the CACM paper's 2018-01-31 checkout."""
        return cls(grid=512, **overrides)

    @classmethod
    def apollo_3_5(cls, sensor: str = "velodyne64", **overrides: Any) -> ApolloConfig:
        """Apollo 3.5+'s network for ``sensor`` (velodyne16/64: 672 grid, ±70 m, 6 channels; velodyne128: 576
        grid, ±60 m, 4 channels), with 2.x/3.0's post-processing (see the registry's ``apollo-3.5``)."""
        if sensor not in SENSORS_3_5:
            raise ConfigError(f"sensor must be one of {', '.join(SENSORS_3_5)}, got {sensor!r}")
        grid, rng, chans = SENSORS_3_5[sensor]
        return cls(**{"grid": grid, "range": rng, "in_channels": chans, **overrides})

    @classmethod
    def apollo_3_0(cls, **overrides: Any) -> ApolloConfig:
        """Apollo 3.0: the 640 model plus the noise filter and the LowObjectFilter."""
        return cls(grid=640, filter_noise=True, low_object_filter=True, **overrides)

    def replace(self, **changes: Any) -> ApolloConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(
                f"unknown ApolloConfig key(s) {sorted(unknown)}; known: {', '.join(self.keys())}"
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_overrides(self, items: list[str] | tuple[str, ...] | dict[str, Any]) -> ApolloConfig:
        """A copy with ``key=value`` strings (or a dict) applied; values are parsed by the field's type.

        Aliases: ``use_all_grids_for_clustering`` = ``use_all_grids``, ``min_pts`` = ``min_pts_num``,
        ``point_cloud_range`` = ``range``, ``width``/``height`` = ``grid``.
        """
        pairs: dict[str, str | Any] = {}
        if isinstance(items, dict):
            pairs = dict(items)
        else:
            for item in items:
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise ConfigError(f"--set expects key=value, got {item!r}")
                pairs[key.strip()] = value.strip()
        changes: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(self)}
        for key, raw in pairs.items():
            name = _ALIASES.get(key, key)
            if name not in types:
                raise ConfigError(f"unknown setting {key!r}; known: {', '.join(self.keys())}")
            changes[name] = _parse(name, str(types[name]), raw)
        return self.replace(**changes)

    @property
    def inv_res(self) -> float:
        """Cells per metre (grid / (2 range)); also Cluster2D's ``scale`` for the instance offsets."""
        return 0.5 * self.grid / self.range

    def weights_path(self) -> Path:
        """The weights file this configuration loads: the shipped one of the grid, a shipped one by name
        (:data:`NAMED_WEIGHTS`), or a path."""
        if self.weights:
            named = NAMED_WEIGHTS.get(self.weights)
            if named is not None:
                if self.grid not in named:
                    raise ConfigError(f"weights={self.weights}: no shipped weights of that name for grid "
                                      f"{self.grid} (it has: {', '.join(map(str, sorted(named)))})")
                return WEIGHTS_DIR / named[self.grid]
            path = Path(self.weights).expanduser()
            if (not path.exists() and "/" not in self.weights
                    and not self.weights.lower().endswith((".pt", ".caffemodel", ".onnx"))):
                raise ConfigError(f"weights={self.weights}: not a shipped name ({', '.join(NAMED_WEIGHTS)}) nor "
                                  "a .pt, .caffemodel or .onnx file path")
            return path
        if self.in_channels != 8:
            shipped = WEIGHTS_DIR / shipped_name(self.grid, self.in_channels)
            if shipped.is_file():
                return shipped
            raise ConfigError(f"no shipped weights for Apollo 3.5+'s {self.in_channels}-channel network on a "
                              f"{self.grid} grid; pass weights=PATH (Apollo's deploy.caffemodel for it, an .onnx or "
                              "a .pt of that network)")
        return DEFAULT_WEIGHTS.get(self.grid, WEIGHTS_DIR / f"cnnseg{self.grid}.pt")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ALIASES = {
    "use_all_grids_for_clustering": "use_all_grids",
    "min_pts": "min_pts_num",
    "point_cloud_range": "range",
    "width": "grid",
    "height": "grid",
    "enable_filter": "filter_noise",
}


def _parse(name: str, type_name: str, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if type_name.startswith("bool"):
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if type_name.startswith("int"):
            return int(raw)
        if type_name.startswith("float"):
            value = float(raw)
            if not math.isfinite(value):  # nan/inf thresholds silently make every comparison false
                raise ValueError(raw)
            return value
        if "None" in type_name and raw.lower() in ("", "none", "null"):
            return None
        return raw
    except ValueError as err:
        raise ConfigError(f"bad value {raw!r} for {name} (expects {type_name.split(' ')[0]})") from err


def shipped_weights_by_digest(digest: str) -> Path | None:
    """The shipped weights file (any ``*.pt`` of :data:`WEIGHTS_DIR`) whose SHA-256 is ``digest`` or starts
    with it (bundles before issue 32 recorded 12 hex digits: ``"weights 1a2b3c4d5e6f"``); None when none is."""
    digest = digest.strip().lower()
    if len(digest) < 12 or any(c not in "0123456789abcdef" for c in digest):
        return None
    for p in sorted(WEIGHTS_DIR.glob("*.pt")):
        if sha256_file(p).startswith(digest):
            return p
    return None


def recorded_weights_digest(info: dict[str, Any]) -> str | None:
    """The SHA-256 (or its first 12 hex digits) of the weights a bundle was made with: ``sut_weights_sha256``,
    else the digest in its ``sut_weights`` label (``"weights 1a2b3c4d5e6f"``); None for Apollo's official files
    (named, not hashed, in the label), random or in-memory networks and bundles of other SUTs."""
    full = info.get("sut_weights_sha256")
    if isinstance(full, str) and full:
        return full.lower()
    label = info.get("sut_weights")
    if isinstance(label, str):
        parts = label.split()
        if len(parts) == 2 and parts[0] in ("weights", "onnx", "caffemodel") and len(parts[1]) == 12:
            return parts[1].lower()
    return None


def weights_for_replay(sut: Any, info: dict[str, Any]) -> tuple[Path | None, str | None]:
    """What replay needs to run a bundle on the weights it was made with: ``(file, None)`` when the SUT ``sut``
    (built from the bundle's config) loads other weights than the bundle recorded and a shipped file has the
    recorded digest (older shipped weights stay in the package, e.g. ``cnnseg640_v3.pt``); ``(None, line)`` when
    no shipped file has it (the line names the SHA-256 and where to put that file); ``(None, None)`` when the
    weights are the recorded ones or nothing was recorded."""
    want = recorded_weights_digest(info)
    path = getattr(sut, "weights_path", None)
    if want is None or path is None:
        return None, None
    try:
        have = sha256_file(path)
    except OSError:
        have = ""
    if have.startswith(want):
        return None, None
    found = shipped_weights_by_digest(want)
    if found is not None:
        return found, None
    return None, (f"the bundle was made with weights of SHA-256 {want}{'…' if len(want) < 64 else ''}, not the "
                  f"{Path(path).name} installed here ({have[:12]}…); copy the weights file of that digest into "
                  "lidarmt/lidar/perception/apollo/weights/ (replay finds it there by its SHA-256)")
