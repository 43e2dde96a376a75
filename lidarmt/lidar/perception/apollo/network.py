"""Apollo's cnnseg network (deploy.prototxt of Apollo 2.5/3.0) in PyTorch, and how it is run.

Topology (fully convolutional; every conv has a bias and a ReLU unless said otherwise)::

    data (1, 8, H, W) ─ mask = data[:, 7]
    conv0_1 1x1 24 ─ conv0 3x3 24
    conv1_1 3x3/2 48 ─ conv1 48                       (1/2)
    conv2_1 /2 64 ─ conv2_2 64 ─ conv2 64             (1/4)
    conv3_1 /2 96 ─ conv3_2 96 ─ conv3 96             (1/8)
    conv4_1 /2 128 ─ conv4_2 128 ─ conv4 128          (1/16)
    conv5_1 /2 192 ─ conv5 192                        (1/32)
    deconv5_1 3x3 conv 192
    deconv4 4x4/2 128 ─ cat[conv4, ·] ─ deconv4_1 3x3 128
    deconv3 96 ─ cat[conv3, ·] ─ deconv3_1 96
    deconv2 64 ─ cat[conv2, ·] ─ deconv2_1 64
    deconv1 48 ─ cat[conv1, ·] ─ deconv1_1 48
    deconv0 4x4/2 12, no ReLU                         (full resolution; conv0 is not skip-connected)
    heads: category 1 | instance 2 | confidence 1 | class 5 | heading 2 | height 1

Outputs: ``category_score = sigmoid(category) * mask``, ``confidence_score = sigmoid``, ``class_score =
sigmoid`` (element-wise, not softmax), ``instance_pt``, ``heading_pt``, ``height_pt`` raw. Module names are
Apollo's layer names, so a state_dict reads like the Caffe model (``conv0_1.weight``, ..., ``deconv0.bias``).

DEVIATION: Apollo ran Caffe in fp32 on a GPU; ``fast`` mode computes in bf16 (its agreement with ``exact`` is
measured by benchmarks/bench_perception.py). Weights are this project's own (Apollo's caffemodel is not
available).

Two execution modes (:class:`CnnRunner`): ``exact`` (fp32, deterministic algorithms, fixed threads) and ``fast``
(channels_last, bf16 autocast where the CPU has native bf16 (AVX512-BF16 / AMX), optional ``torch.compile``).

``exact`` is versioned (:data:`EXACT_IMPLEMENTATIONS`): the layout and kernels decide the last digits of its outputs
as much as the CPU does, so bundles and journals record the implementation that made them (:attr:`CnnRunner.
implementation`, e.g. ``exact-v2``) and replay names it. Version 1 (lidarmt up to issue 34) ran in torch's
default NCHW layout, where oneDNN reorders every activation into its blocked layout and back around each
convolution (and runs the stride-2 deconvolutions through a slow path): 0.43-0.48 of an fp32 matmul's FLOP/s.
Version 2 keeps activations and weights channels-last (NHWC), the layout oneDNN's direct kernels read and write
natively, applies each layer's ReLU inside its oneDNN kernel (:func:`fuse_relu`) and does not fill new tensors
with NaN (deterministic mode's ``fill_uninitialized_memory``: every output is written in full by its kernel): the
same fp32 arithmetic, summed in another order (max |diff| ~2e-6 against version 1, within replay's tolerances),
deterministic run to run on one machine, about 0.7-0.8 of the matmul on AVX-512 and AVX2
(benchmarks/bench_perception.py, README "Speed"). Version 1 stays selectable (``CnnRunner(exact_version=1)``) for
the benchmark and for tests that make an old bundle.

Devices (``device=``, resolved by :func:`resolve_device`): ``cpu``, ``cuda``/``cuda:N`` or ``auto`` (cuda when
``torch.cuda.is_available()``). On CUDA, ``exact`` is fp32 with cuDNN's deterministic algorithms, cuDNN autotuning
off and TF32 off (the same input on the same GPU, driver and torch gives the same bits); ``fast`` is bf16 (fp16 on
GPUs without bf16) channels_last. Inputs go up through pinned memory; results always come back as CPU NumPy.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import lidarmt.lidar.perception.apollo.config as _config  # EXACT_VERSION is read when a runner is built
from lidarmt.lidar.perception.apollo.config import EXACT_IMPLEMENTATIONS, EXACT_VERSION  # noqa: F401 - re-exported
from lidarmt.lidar.perception.apollo.errors import ConfigError, WeightsError

DEVICES = ("auto", "cpu", "cuda", "cuda:N")

HEAD_NAMES = ("category_score", "instance_pt", "confidence_score", "class_score", "heading_pt", "height_pt")
HEAD_CHANNELS = {
    "category_pt": 1,
    "instance_pt": 2,
    "confidence_pt": 1,
    "class_pt": 5,
    "heading_pt": 2,
    "height_pt": 1,
}

# (name, in, out, kernel, stride) of the encoder convolutions, in order
_ENCODER = (
    ("conv0_1", 8, 24, 1, 1),
    ("conv0", 24, 24, 3, 1),
    ("conv1_1", 24, 48, 3, 2),
    ("conv1", 48, 48, 3, 1),
    ("conv2_1", 48, 64, 3, 2),
    ("conv2_2", 64, 64, 3, 1),
    ("conv2", 64, 64, 3, 1),
    ("conv3_1", 64, 96, 3, 2),
    ("conv3_2", 96, 96, 3, 1),
    ("conv3", 96, 96, 3, 1),
    ("conv4_1", 96, 128, 3, 2),
    ("conv4_2", 128, 128, 3, 1),
    ("conv4", 128, 128, 3, 1),
    ("conv5_1", 128, 192, 3, 2),
    ("conv5", 192, 192, 3, 1),
)
# decoder: (deconv name, in, out, skip name, skip channels, fuse conv name)
_DECODER = (
    ("deconv4", 192, 128, "conv4", 128, "deconv4_1"),
    ("deconv3", 128, 96, "conv3", 96, "deconv3_1"),
    ("deconv2", 96, 64, "conv2", 64, "deconv2_1"),
    ("deconv1", 64, 48, "conv1", 48, "deconv1_1"),
)


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=k, stride=stride, padding=k // 2, bias=True)


def _deconv(cin: int, cout: int) -> nn.ConvTranspose2d:
    return nn.ConvTranspose2d(cin, cout, kernel_size=4, stride=2, padding=1, bias=True)


class CnnSegNet(nn.Module):
    """Apollo's cnnseg U-Net. ``forward(data)`` takes ``(B, 8, H, W)`` features (H, W multiples of 32) and
    returns the dict of the six output blobs (see the module docstring)."""

    #: whether every layer but ``deconv0`` applies its ReLU itself (:func:`fuse_relu`, exact-v2 on the CPU)
    relu_fused = False

    def __init__(self, in_channels: int = 8) -> None:
        super().__init__()
        #: feature channels: 8 (Apollo 2.x/3.0), 6 (3.5+ velodyne16/64), 4 (3.5+ velodyne128); the last is the mask
        self.in_channels = int(in_channels)
        for name, cin, cout, k, s in _ENCODER:
            self.add_module(name, _conv(self.in_channels if name == "conv0_1" else cin, cout, k, s))
        self.deconv5_1 = _conv(192, 192, 3)
        for dname, cin, cout, _skip, cskip, fname in _DECODER:
            self.add_module(dname, _deconv(cin, cout))
            self.add_module(fname, _conv(cskip + cout, cout, 3))
        self.deconv0 = _deconv(48, 12)

    def forward_raw(self, data: torch.Tensor) -> torch.Tensor:
        """The 12-channel ``deconv0`` blob (no activation)."""
        # in-place ReLU: the conv outputs are not needed by autograd (conv backward uses its input); none where
        # the layers apply it themselves (fuse_relu)
        relu = _identity if self.relu_fused else torch.relu_
        h = data
        skips: dict[str, torch.Tensor] = {}
        for name, *_ in _ENCODER:
            h = relu(getattr(self, name)(h))
            skips[name] = h
        h = relu(self.deconv5_1(h))
        for dname, _cin, _cout, skip, _cskip, fname in _DECODER:
            h = relu(getattr(self, dname)(h))
            h = relu(getattr(self, fname)(torch.cat([skips[skip], h], dim=1)))
        return self.deconv0(h)

    def forward(self, data: torch.Tensor) -> dict[str, torch.Tensor]:
        out = to_nchw(self.forward_raw(data))  # channels-last: one transposing copy, then heads read whole planes
        c = self.in_channels
        mask = data[:, c - 1 : c].to(out.dtype)
        return {
            "category_score": torch.sigmoid(out[:, 0:1]) * mask,
            "instance_pt": out[:, 1:3],
            "confidence_score": torch.sigmoid(out[:, 3:4]),
            "class_score": torch.sigmoid(out[:, 4:9]),
            "heading_pt": out[:, 9:11],
            "height_pt": out[:, 11:12],
        }


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def to_nchw(t: torch.Tensor) -> torch.Tensor:
    """``t`` (B, C, H, W) contiguous in NCHW: a channels-last tensor is transposed as B matrices (H*W, C) -> (C,
    H*W), which torch copies in cache-sized blocks (about 5x faster than ``.contiguous()``'s element-wise strided
    copy for Apollo's 12 output channels); the values are copied, not computed."""
    if t.is_contiguous():
        return t
    b, c, h, w = t.shape
    if not t.is_contiguous(memory_format=torch.channels_last):
        return t.contiguous()
    flat = t.permute(0, 2, 3, 1).reshape(b, h * w, c)
    out = torch.empty((b, c, h * w), dtype=t.dtype, device=t.device)
    for i in range(b):
        out[i].copy_(flat[i].t())
    return out.view(b, c, h, w)


def to_channels_last(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``t`` (B, C, H, W) in ``dtype`` and channels-last memory: an NCHW tensor is transposed as B matrices (C, H*W)
    -> (H*W, C) (see :func:`to_nchw`); the values are copied (and cast), not computed."""
    dtype = dtype or t.dtype
    if t.is_contiguous(memory_format=torch.channels_last) or not t.is_contiguous():
        return t.to(dtype=dtype, memory_format=torch.channels_last)
    b, c, h, w = t.shape
    out = torch.empty((b, h * w, c), dtype=dtype, device=t.device)
    flat = t.reshape(b, c, h * w)
    for i in range(b):
        out[i].copy_(flat[i].t())
    return out.view(b, h, w, c).permute(0, 3, 1, 2)


def _mkldnn_pointwise() -> bool:
    """Whether torch has oneDNN's convolutions with a fused element-wise post-op (``torch.ops.mkldnn.
    _convolution_pointwise``, what torch.compile's CPU backend calls; x86 builds since torch 2.0)."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_convolution_pointwise") \
            and hasattr(torch.ops.mkldnn, "_convolution_transpose_pointwise")
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without the mkldnn namespace
        return False


def fuse_relu(net: CnnSegNet) -> bool:
    """Make every convolution and deconvolution of ``net`` but ``deconv0`` apply its ReLU inside oneDNN's kernel
    (a post-op: one pass over memory less per layer), for fp32 CPU tensors. The modules stay what they are
    (forward hooks, coverage's probe and the state_dict see nothing else; their outputs are post-ReLU, which a
    probe's own ReLU leaves as they are). Returns False, changing nothing, where torch lacks the fused operator."""
    if not _mkldnn_pointwise():
        return False
    import types

    for name, m in net.named_children():
        if name != "deconv0":
            # an instance attribute that nn.Module.__call__ (and its hooks) call; a bound method, so that a deepcopy
            # of the network binds it to the copy
            fn = _conv_transpose_relu if isinstance(m, nn.ConvTranspose2d) else _conv_relu
            m.forward = types.MethodType(fn, m)
    net.relu_fused = True
    return True


def _conv_relu(m: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._convolution_pointwise(x, m.weight, m.bias, list(m.padding), list(m.stride),
                                                   list(m.dilation), m.groups, "relu", [], "")


def _conv_transpose_relu(m: nn.ConvTranspose2d, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._convolution_transpose_pointwise(x, m.weight, m.bias, list(m.padding),
                                                             list(m.output_padding), list(m.stride),
                                                             list(m.dilation), m.groups, "relu", [], "")


def build_network(grid: int = 640, *, seed: int | None = None, in_channels: int = 8) -> CnnSegNet:
    """A fresh (randomly initialised) cnnseg network for a ``grid`` x ``grid`` input (512 or 640; any multiple
    of 32 works). The topology does not depend on the grid; ``grid`` is checked so a caller notices a bad size.
    ``in_channels``: 8 (Apollo 2.x/3.0); Apollo 3.5+'s networks take 6 or 4."""
    if grid <= 0 or grid % 32:
        raise ValueError(f"grid must be a positive multiple of 32, got {grid}")
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return CnnSegNet(in_channels)
    return CnnSegNet(in_channels)


def parameter_count(in_channels: int = 8) -> int:
    """Weights and biases of the cnnseg network (2,974,044 for 8 input channels), from the layer table."""
    total = 0
    for name, cin, cout, k, _s in _ENCODER:
        total += (in_channels if name == "conv0_1" else cin) * cout * k * k + cout
    total += 192 * 192 * 9 + 192
    for _d, cin, cout, _skip, cskip, _f in _DECODER:
        total += cin * cout * 16 + cout + (cskip + cout) * cout * 9 + cout
    return total + 48 * 12 * 16 + 12


def conv_flops(grid: int) -> int:
    """Multiply-adds x 2 of one forward pass at ``grid`` x ``grid`` (convolutions and deconvolutions only)."""
    net_layers: list[tuple[int, int, int, int]] = []  # (cin, cout, k, out_size)
    size = grid
    for _name, cin, cout, k, s in _ENCODER:
        size //= s
        net_layers.append((cin, cout, k, size))
    net_layers.append((192, 192, 3, size))
    for _d, cin, cout, _skip, cskip, _f in _DECODER:
        size *= 2
        # a k4 s2 transposed conv: each input pixel scatters cin x cout x 16 MACs
        net_layers.append((cin, cout, 4, size // 2))
        net_layers.append((cskip + cout, cout, 3, size))
    net_layers.append((48, 12, 4, size))
    return sum(2 * cin * cout * k * k * s * s for cin, cout, k, s in net_layers)


# ------------------------------------------------------------------------------------------ weights


def _torch_load_failure(err: BaseException) -> str:
    """What a failed ``torch.load(weights_only=True)`` says about the file, in a few words (torch's own message
    is several lines of advice meant for the file's author)."""
    import pickle

    text = str(err)
    if "Unsupported global" in text or "GLOBAL" in text:
        return ("it holds pickled Python objects, not only tensors, and lidarmt does not run code from a file "
                "(torch.load with weights_only=True)")
    if "central directory" in text or "PytorchStreamReader" in text or "inline_container" in text:
        return "it is a damaged, truncated or foreign zip archive, not one written by torch.save"
    if isinstance(err, EOFError):
        return "it is empty or truncated"
    if isinstance(err, pickle.UnpicklingError | KeyError | ValueError | IndexError | UnicodeDecodeError):
        return "its bytes are not a torch.save file"
    return f"torch cannot read it ({type(err).__name__})"


def read_torch_file(path: str | os.PathLike[str], *, what: str = "CNN weights", hint: str = "") -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with every failure as one :class:`WeightsError` line.

    Nothing in the file is executed: ``weights_only=True`` unpickles tensors and plain containers only. A file
    that is not a ``torch.save`` file (random bytes, a text file, a bag, a truncated download) is reported as
    "not a <what> file", with ``hint`` (what to pass instead) appended.
    """
    from lidarmt._torchfile import torch_load_data

    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{what} file {p} does not exist" + (f"; {hint}" if hint else ""))
    try:
        return torch_load_data(p)  # torch's warnings (e.g. "Detected pickle protocol 4") are not shown
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - torch raises anything from UnpicklingError to KeyError
        raise WeightsError(f"{p} is not a {what} file: {_torch_load_failure(err)}"
                           + (f"; {hint}" if hint else "")) from err


def load_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a state_dict saved with ``torch.save`` (``weights_only=True``: no pickled code is run).

    Accepts a bare state_dict or a dict holding it under ``"state_dict"`` or ``"model"`` (with metadata beside).
    Every failure is one :class:`WeightsError` line (see :func:`read_torch_file`).
    """
    p = Path(path)
    hint = "pass a .pt written by `lidarmt train` (or torch.save(net.state_dict(), path))"
    if not p.is_file():
        raise WeightsError(
            f"CNN weights file {p} does not exist; train weights with `lidarmt train` or pass --weights"
        )
    obj = read_torch_file(p, what="CNN weights", hint=hint)
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError(
            f"{p} holds no state_dict of tensors; save weights with torch.save(net.state_dict(), path)"
        )
    from lidarmt._torchfile import check_tensors

    check_tensors(obj, path=p, short="CNN weights file", error=WeightsError)  # no expanded 2**40-element tensor
    return obj


def load_network(path: str | os.PathLike[str], *, grid: int = 640, in_channels: int | None = None) -> CnnSegNet:
    """A network with the weights of ``path``, a ``torch.save`` state_dict (see :func:`load_state_dict`; Apollo's
    ``.caffemodel`` files: :func:`lidarmt.lidar.perception.apollo.caffe.load_any_network`). ``in_channels`` None:
    as the file's ``conv0_1`` says (8, or Apollo 3.5+'s 6 or 4); the caller compares it with what it computes."""
    state = load_state_dict(path)
    # accept checkpoints from torch.compile'd / DataParallel models
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state.items()}
    if in_channels is None:
        w = state.get("conv0_1.weight")
        in_channels = int(w.shape[1]) if w is not None and w.ndim == 4 and int(w.shape[1]) in (8, 6, 4) else 8
    net = build_network(grid, in_channels=in_channels)
    from lidarmt._torchfile import check_tensors

    check_tensors(state, path=path, short="CNN weights file", error=WeightsError,
                  expect={k: tuple(v.shape) for k, v in net.state_dict().items()},
                  misfit="does not fit Apollo's cnnseg network")
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "mismatch"
        raise WeightsError(
            f"{path} does not fit Apollo's cnnseg network ({first}); was it saved from lidarmt's network?"
        ) from err
    return net


# ------------------------------------------------------------------------------------------ execution


def cpu_bf16_support() -> str:
    """``"amx"``, ``"avx512_bf16"`` or ``""``: the CPU's native bf16 matrix support (Linux /proc/cpuinfo, else
    torch's capability string), as :func:`lidarmt._machine.native_bf16` detects it (cached there:
    :func:`lidarmt._machine.clear_cache` forgets it)."""
    from lidarmt._machine import native_bf16

    return native_bf16()


def resolve_device(spec: str | None, *, flag: str = "device", error: type[Exception] = ConfigError) -> str:
    """The concrete torch device string for ``spec``: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    ``auto`` (or ``None``/``""``) is ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``. Asking for a CUDA
    device that this machine does not have (no CUDA build, no driver, or N out of range) raises ``error`` (a
    :class:`~lidarmt.errors.UserError` by default) with one line naming ``flag`` and what to pass instead.
    Resolve once, in the parent, and pass the result on, so workers and bug bundles record the device used.
    """
    raw = (spec or "auto").strip().lower()
    if raw == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if raw == "cpu":
        return "cpu"
    head, sep, index = raw.partition(":")
    if head != "cuda" or (sep and not index.isdigit()):
        raise error(f"{flag}={spec!r}: expected one of auto, cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise error(f"{flag}={spec!r}: this machine has no usable CUDA GPU (torch {torch.__version__}, "
                    f"CUDA build {torch.version.cuda or 'none'}); use {flag}=cpu or {flag}=auto")
    if sep and int(index) >= torch.cuda.device_count():
        raise error(f"{flag}={spec!r}: only {torch.cuda.device_count()} CUDA device(s) here "
                    f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
    # cuBLAS needs a fixed workspace for deterministic results (exact mode); set before CUDA starts
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return raw


#: GPU memory one campaign worker holds with Apollo's CNN on a GPU: its own CUDA context (~0.5 GiB), the weights
#: and the activations of one 640x640 pass (~0.3 GiB in fp32), rounded up. An estimate, not a measurement.
GPU_WORKER_BYTES = 1 << 30


def clamp_gpu_workers(requested: int, device: str, *, per_worker: int = GPU_WORKER_BYTES) -> tuple[int, str]:
    """How many worker processes may share the GPU ``device``: each holds its own CUDA context and copy of the
    network, and the GPU runs their kernels in turn (time-slicing; several workers help by overlapping one
    worker's CPU stages with another's CNN), so the limit is the free GPU memory over ``per_worker``.
    Returns (count, a one-line note when it is lower than asked, else ""). Nothing changes for a CPU device or
    one worker; otherwise this starts CUDA in the calling process (to read the free memory)."""
    if requested <= 1 or not str(device).startswith("cuda") or not torch.cuda.is_available():
        return requested, ""
    dev = torch.device(device)
    free, _total = torch.cuda.mem_get_info(dev)
    n = max(1, min(requested, int(free // per_worker)))
    if n >= requested:
        return requested, ""
    return n, (f"--workers {requested}: using {n} ({dev} has {free / 2**30:.1f} GiB free at about "
               f"{per_worker / 2**30:.1f} GiB per GPU worker)")


def gpu_half_dtype(device: torch.device) -> torch.dtype:
    """bf16 where the GPU computes it natively (Ampere and later), else fp16."""
    with torch.cuda.device(device):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@contextlib.contextmanager
def _deterministic(threads: int, *, cuda: bool = False) -> Iterator[None]:
    import torch.utils.deterministic as det

    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_fill = det.fill_uninitialized_memory
    prev_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    # deterministic mode also fills every new tensor with NaN before a kernel overwrites it (a whole pass over
    # memory per convolution: a fifth of the CNN's time); every output here is written in full by its kernel
    det.fill_uninitialized_memory = False
    if cuda:
        cudnn = torch.backends.cudnn
        prev_cuda = (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = True, False, False
        torch.backends.cuda.matmul.allow_tf32 = False
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev_det)
        det.fill_uninitialized_memory = prev_fill
        if cuda:
            cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = prev_cuda[:3]
            torch.backends.cuda.matmul.allow_tf32 = prev_cuda[3]
        if threads:
            torch.set_num_threads(prev_threads)


class CnnRunner:
    """Runs a :class:`CnnSegNet` on one feature grid (or a batch of them) in ``exact`` or ``fast`` mode.

    * ``exact``: fp32, ``torch.use_deterministic_algorithms(True)`` and a fixed thread count (``threads``, 0 =
      torch's current) during the call: the same input gives the same bits. On the CPU the layout is
      ``exact_version``'s (:data:`EXACT_IMPLEMENTATIONS`; default :data:`EXACT_VERSION`: channels-last); on CUDA
      contiguous NCHW with cuDNN deterministic, no autotuning, no TF32.
    * ``fast``: channels_last; on the CPU, where it has native bf16 (AMX or AVX512-BF16) the network runs in bf16
      (a bf16 copy of the weights, the input cast once: what autocast does for convolutions, without re-casting
      the weights and activations on every call), otherwise fp32 channels_last; on CUDA bf16 (fp16 on GPUs
      without bf16); ``compile=True`` wraps it in ``torch.compile`` (the first call compiles: tens of seconds).
    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (see :func:`resolve_device`).
    The network given is not modified (channels-last, fast mode and GPUs work on a copy). Outputs are always
    float32 NumPy arrays on the CPU, ``(C, H, W)`` (category, confidence, height: ``(H, W)``).
    """

    def __init__(
        self, net: CnnSegNet, *, mode: str = "exact", compile: bool = False, threads: int = 0,
        device: str = "cpu", exact_version: int | None = None,
    ) -> None:
        import copy

        if mode not in ("exact", "fast"):
            raise ValueError(f"mode must be 'exact' or 'fast', got {mode!r}")
        version = _config.EXACT_VERSION if exact_version is None else exact_version
        if version not in EXACT_IMPLEMENTATIONS:
            raise ValueError(f"exact_version must be one of {sorted(EXACT_IMPLEMENTATIONS)}, got {exact_version!r}")
        self.mode = mode
        self.threads = threads
        self.device = torch.device(resolve_device(device))
        self.cuda = self.device.type == "cuda"
        #: the exact implementation that runs (CUDA: always NCHW, version 1's layout); 0 in fast mode
        self.exact_version = 0 if mode == "fast" else (1 if self.cuda else version)
        if self.cuda:
            self.dtype = gpu_half_dtype(self.device) if mode == "fast" else torch.float32
        else:
            self.dtype = torch.bfloat16 if mode == "fast" and cpu_bf16_support() else torch.float32
        self.bf16 = self.dtype == torch.bfloat16
        #: activations and weights channels-last (fast mode; exact from version 2 on, on the CPU)
        self.channels_last = mode == "fast" or self.exact_version >= 2
        net = net.eval()
        if self.channels_last or self.cuda:
            net = copy.deepcopy(net)
            if self.channels_last:
                net = net.to(dtype=self.dtype, memory_format=torch.channels_last)
            net = net.to(self.device)
        for p in net.parameters():
            p.requires_grad_(False)
        #: exact-v2 on the CPU: each layer's ReLU runs inside its oneDNN kernel (:func:`fuse_relu`) where torch
        #: has the fused operator (the same values as a separate ReLU; on other builds the separate one runs)
        self.relu_fused = self.exact_version >= 2 and not self.cuda and fuse_relu(net)
        self.net = net
        self._fn: Any = net
        self._pinned: torch.Tensor | None = None
        self.compiled = compile and mode == "fast"
        if self.compiled:
            self._fn = torch.compile(net, dynamic=False)

    @property
    def precision(self) -> str:
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.dtype, "fp32")

    @property
    def implementation(self) -> str:
        """What computes the outputs, as bundles and journals record it: ``exact-v2`` (:data:`EXACT_IMPLEMENTATIONS`),
        or ``fast-bf16`` / ``fast-fp32`` (``+compile`` when compiled)."""
        if self.mode == "exact":
            return f"exact-v{self.exact_version}"
        return f"fast-{self.precision}" + ("+compile" if self.compiled else "")

    def _upload(self, data: torch.Tensor) -> torch.Tensor:
        """``data`` on the runner's device: through a reused pinned buffer and a non-blocking copy on CUDA."""
        if not self.cuda:
            return data
        if self._pinned is None or self._pinned.shape != data.shape:
            self._pinned = torch.empty(data.shape, dtype=torch.float32).pin_memory()
        self._pinned.copy_(data)
        # the copy is ordered on the current stream before the forward pass, and every call ends by copying
        # the outputs back (a synchronisation), so the buffer is free again when the next call refills it
        return self._pinned.to(self.device, non_blocking=True)

    def prepare(self, data: torch.Tensor) -> torch.Tensor:
        """``data`` (``(B, 8, H, W)`` float32, on the CPU or already on the device) as the network takes it: on
        the runner's device, in its dtype and memory layout."""
        x = self._upload(data) if data.device.type == "cpu" else data.to(self.device)
        if not self.channels_last:
            return x.contiguous()
        return to_channels_last(x, self.dtype)

    def forward_prepared(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The network on a :meth:`prepare`'d input, with the mode's settings (determinism, threads); the heads
        stay on the device in the network's dtype (benchmarks time this part alone)."""
        with torch.inference_mode():
            if self.mode == "exact":
                with _deterministic(self.threads, cuda=self.cuda):
                    return self._fn(x)
            prev = torch.get_num_threads()
            if self.threads:
                torch.set_num_threads(self.threads)
            try:
                return self._fn(x)
            finally:
                if self.threads:
                    torch.set_num_threads(prev)

    def run_tensor(self, data: torch.Tensor) -> dict[str, torch.Tensor]:
        """Forward a ``(B, 8, H, W)`` float32 CPU tensor; returns float32 tensors on the CPU."""
        with torch.inference_mode():
            out = self.forward_prepared(self.prepare(data))
            return {k: v.float().cpu() for k, v in out.items()}

    @staticmethod
    def _unpack(out: dict[str, torch.Tensor], b: int) -> dict[str, np.ndarray]:
        res: dict[str, np.ndarray] = {}
        for k, v in out.items():
            a = v[b].contiguous().numpy()
            res[k] = a[0] if a.shape[0] == 1 else a
        return res

    def __call__(self, features: np.ndarray) -> dict[str, np.ndarray]:
        """Forward one ``(8, H, W)`` float32 feature grid; returns the six heads as float32 NumPy arrays."""
        data = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))[None]
        return self._unpack(self.run_tensor(data), 0)

    def run_many(self, features: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Forward several ``(8, H, W)`` grids in one pass (one batch): a GPU stays busy with the follow-ups of
        a frame. In ``exact`` mode the heads equal those of one call per grid only where the convolution
        kernels do not depend on the batch size; :meth:`batch_is_exact` checks that on this machine."""
        if not features:
            return []
        data = torch.from_numpy(np.stack([np.asarray(f, dtype=np.float32) for f in features]))
        out = self.run_tensor(data)
        return [self._unpack(out, b) for b in range(len(features))]

    def batch_is_exact(self, features: np.ndarray) -> bool:
        """Whether a batch of two copies of ``features`` gives bit for bit the heads of one call (on this
        device, mode and thread count): the condition under which batching follow-ups keeps replays exact."""
        single = self(features)
        pair = self.run_many([features, features])
        return all(np.array_equal(single[k], p[k]) for p in pair for k in single)
