"""The project's own steering-model architectures, each with the preprocessing it applies to raw RGB frames.

Every architecture follows its published topology (``../shared/design/camera-facts.md``); where this project
deviates, the deviation is listed in :attr:`Arch.deviations` and repeated in the model card.

Preprocessing is split in two so that training can cache the expensive part:

* ``prepare(images)``: ``(N, H, W, 3) uint8 RGB`` of any size -> ``(N, h, w, 3) uint8`` at the network's size and
  in its colour space (crop, resize with ``cv2.INTER_AREA``, colour conversion). Every ``prepare`` is left-right
  symmetric, so flipping its output equals preparing the flipped frame (training's flip augmentation relies on it).
* ``normalise(tensor)``: that ``uint8`` array as a torch tensor -> the network's ``float32`` ``(N, 3, h, w)`` input.

Each module's ``forward`` returns the steering angle in **radians** (the DeepXplore family's ``2·atan(x)`` and
Chauffeur's ``1/16`` output scale are part of the module), so :class:`TorchSteeringModel`'s default
post-processing applies. Crops are given as fractions of the frame height, so any frame size works; the
Udacity frames of the shared data set are 240x320 (the models' original pipelines saw 480x640 or 160x320).

Architectures (``name``: topology, input):

``dave-orig``, ``dave-norminit``, ``dave-dropout``
    DeepXplore's Dave family: the whole frame resized to 100x100, RGB->BGR minus the ImageNet means (Keras'
    "caffe" ``preprocess_input``), output ``2·atan(x)``.
``epoch``
    Team cg23's Epoch: the top 5/12 of the rows cropped (200 of 480), resized to 128x128, scaled to [0, 1].
``chauffeur``
    Team Chauffeur: bottom half (120 of 240 rows) at 120x320, YUV with the Y channel histogram-equalised; a CNN
    encoder per frame and an LSTM over the encoder features of ``history + 1`` frames, output ``/ 16``.
``dave2``
    NVIDIA's DAVE-2 as in the shared Keras file: rows 60:-25 of a 160-row frame (3/8 of the height from the top,
    5/32 from the bottom) resized to 66x200, YUV, ``x / 127.5 - 1``, ELU.
``rambo``
    Team Rambo: frames resized to 192x256 grey; the network sees the differences of consecutive frames (two
    channels from a window of three frames); a comma.ai branch and two NVIDIA-style branches, their outputs
    combined by a learned weighted sum.

Models with history take windows of frames: Chauffeur's ``prepare`` is per frame and its module encodes each frame
of the window; Rambo's ``prepare`` is per frame (grey, one channel) and its ``normalise`` turns a window of prepared
frames ``(N, T, h, w, 1)`` into the frame differences (``window_normalise``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lidarmt.camera.errors import ModelError
from lidarmt.camera.models.base import InputSpec

#: Keras' "caffe" preprocess_input: BGR means subtracted after the RGB->BGR swap.
CAFFE_BGR_MEAN = (103.939, 116.779, 123.68)
#: History of the Chauffeur model here (DeepTest's Chauffeur used 100 frames; see Arch.deviations).
CHAUFFEUR_HISTORY = 10


# --------------------------------------------------------------------------------------------- preprocessing


def _check_frames(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ModelError(f"expected uint8 RGB frames shaped (N, H, W, 3), got {images.dtype} {images.shape}")
    return images


def _crop_rows(image: np.ndarray, top: float, bottom: float) -> np.ndarray:
    """Drop the top ``top`` and bottom ``bottom`` fractions of the rows (rounded to whole rows)."""
    h = image.shape[0]
    r0, r1 = int(round(top * h)), h - int(round(bottom * h))
    if r1 - r0 < 1:
        raise ModelError(f"frame of {h} rows is too small to crop")
    return image[r0:r1]


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    import cv2

    if image.shape[0] == height and image.shape[1] == width:
        return np.ascontiguousarray(image)
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)


def _prepare_with(fn: Callable[[np.ndarray], np.ndarray], images: np.ndarray, height: int, width: int) -> np.ndarray:
    images = _check_frames(images)
    out = np.empty((len(images), height, width, 3), dtype=np.uint8)
    for i, img in enumerate(images):
        out[i] = fn(img)
    return out


def prepare_dave(images: np.ndarray) -> np.ndarray:
    """DeepXplore: the whole frame resized to 100x100 (RGB kept; the BGR swap is in :func:`normalise_caffe`)."""
    return _prepare_with(lambda im: _resize(im, 100, 100), images, 100, 100)


def normalise_caffe(x: Any) -> Any:
    """uint8 NHWC RGB -> float NCHW BGR minus the ImageNet means (Keras 'caffe' mode, no scaling)."""
    import torch

    x = x.to(torch.float32).flip(-1)  # RGB -> BGR
    x = x - torch.tensor(CAFFE_BGR_MEAN, dtype=torch.float32)
    return x.permute(0, 3, 1, 2).contiguous()


def prepare_epoch(images: np.ndarray) -> np.ndarray:
    """cg23: top 200/480 of the rows cropped, resized to 128x128, RGB."""
    return _prepare_with(lambda im: _resize(_crop_rows(im, 200 / 480, 0.0), 128, 128), images, 128, 128)


def normalise_unit(x: Any) -> Any:
    """uint8 NHWC -> float NCHW in [0, 1]."""
    import torch

    return (x.to(torch.float32) / 255.0).permute(0, 3, 1, 2).contiguous()


def _chauffeur_one(image: np.ndarray) -> np.ndarray:
    import cv2

    yuv = cv2.cvtColor(_resize(_crop_rows(image, 0.5, 0.0), 120, 320), cv2.COLOR_RGB2YUV)
    yuv[..., 0] = cv2.equalizeHist(np.ascontiguousarray(yuv[..., 0]))
    return yuv


def prepare_chauffeur(images: np.ndarray) -> np.ndarray:
    """Chauffeur: bottom half of the frame at 120x320, YUV, Y histogram-equalised."""
    return _prepare_with(_chauffeur_one, images, 120, 320)


def normalise_centred(x: Any) -> Any:
    """uint8 NHWC -> float NCHW in [-0.5, 0.5]."""
    import torch

    return (x.to(torch.float32) / 255.0 - 0.5).permute(0, 3, 1, 2).contiguous()


def _dave2_one(image: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.cvtColor(_resize(_crop_rows(image, 60 / 160, 25 / 160), 66, 200), cv2.COLOR_RGB2YUV)


def prepare_dave2(images: np.ndarray) -> np.ndarray:
    """DAVE-2 (the shared Keras file's drive.py): rows 60:-25 of 160 (as fractions), 66x200, YUV."""
    return _prepare_with(_dave2_one, images, 66, 200)


#: Rambo's input size (camera-facts: 192x256 grey frames).
RAMBO_SIZE = (192, 256)


def _rambo_one(image: np.ndarray) -> np.ndarray:
    import cv2

    grey = cv2.cvtColor(_resize(image, *RAMBO_SIZE), cv2.COLOR_RGB2GRAY)
    return grey[..., None]


def prepare_rambo(images: np.ndarray) -> np.ndarray:
    """Rambo: the whole frame resized to 192x256, grey (one channel)."""
    images = _check_frames(images)
    out = np.empty((len(images), *RAMBO_SIZE, 1), dtype=np.uint8)
    for i, img in enumerate(images):
        out[i] = _rambo_one(img)
    return out


#: Rambo's input scale: grey differences / 255 have a standard deviation of about 0.1 on the shared Udacity frames;
#: times 10 brings them to about one, as Rambo's own standardisation of its inputs did.
RAMBO_DIFF_SCALE = 10.0


def normalise_frame_diffs(x: Any) -> Any:
    """A window of prepared grey frames ``(N, T, h, w, 1)`` (oldest first) -> ``(N, T - 1, h, w)`` float32 frame
    differences, newest first: channel ``j`` is ``frame[T-1-j] - frame[T-2-j]`` (Rambo's
    ``make_grayscale_diff_data``), in units of 255 / :data:`RAMBO_DIFF_SCALE` (about unit standard deviation)."""
    import torch

    g = x.to(torch.float32)[..., 0] * (RAMBO_DIFF_SCALE / 255.0)  # (N, T, h, w)
    diffs = g[:, 1:] - g[:, :-1]  # oldest difference first
    return diffs.flip(1).contiguous()


def normalise_pm1(x: Any) -> Any:
    """uint8 NHWC -> float NCHW in [-1, 1] (x / 127.5 - 1, DAVE-2's Lambda layer)."""
    import torch

    return (x.to(torch.float32) / 127.5 - 1.0).permute(0, 3, 1, 2).contiguous()


# --------------------------------------------------------------------------------------------- modules


def _keras_init(module: Any) -> None:
    """Keras 1's defaults: Glorot-uniform kernels, zero biases."""
    import torch.nn as nn

    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)


#: The Dave models' first convolution is initialised at this fraction of Keras' Glorot-uniform scale: their
#: "caffe" input is not scaled (standard deviation about 67 on the Udacity frames), so with Keras' default the
#: untrained outputs start at |2·atan(x)| of 2-3 rad (the labels' spread is 0.23 rad), the ReLUs saturate or
#: die, and on 1,760 frames training stalls at the always-zero error. 1/64 brings the first layer's output to
#: the scale a unit-variance input would give.
DAVE_FIRST_CONV_INIT = 1 / 64


def _scale_first_conv(net: Any, factor: float) -> None:
    import torch
    import torch.nn as nn

    first = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
    with torch.no_grad():
        first.weight.mul_(factor)


def _he_init(module: Any) -> None:
    import torch.nn as nn

    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)


def _torch_classes() -> dict[str, type]:
    """Module classes, defined on first use so that importing this file does not import torch."""
    global _CLASSES
    if _CLASSES:
        return _CLASSES
    import torch
    import torch.nn as nn

    class Atan2(nn.Module):
        """DeepXplore's output layer: ``2·atan(x)`` radians."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2.0 * torch.atan(x)

    class Scale(nn.Module):
        def __init__(self, factor: float) -> None:
            super().__init__()
            self.factor = float(factor)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.factor

        def extra_repr(self) -> str:
            return f"factor={self.factor}"

    class SteeringNet(nn.Module):
        """A feed-forward steering CNN: ``features`` (conv stack) -> ``head`` (flatten, dense, output)."""

        def __init__(self, features: nn.Module, head: nn.Module) -> None:
            super().__init__()
            self.features = features
            self.head = head

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x))

    class ChauffeurNet(nn.Module):
        """Chauffeur: a CNN encoder applied to every frame of a window, an LSTM over the encoder features.

        ``forward(x)`` takes ``(N, T, 3, 120, 320)`` (oldest first) and returns ``(N, 1)`` radians from the LSTM
        head; ``forward_cnn(x)`` takes ``(N, 3, 120, 320)`` and returns the stand-alone CNN's angle (its
        training target, as Chauffeur trained the CNN first and the LSTM on the frozen encoder's features).
        """

        def __init__(self, history: int) -> None:
            super().__init__()
            self.history = int(history)
            layers: list[nn.Module] = []
            chans = [3, 16, 20, 40, 60, 80, 128]
            kernels = [5, 5, 3, 3, 2, 2]
            for i, k in enumerate(kernels):
                # Keras 'same' padding: (k - 1) // 2 before, the rest after (asymmetric for the 2x2 kernels)
                before, after = (k - 1) // 2, k // 2
                layers += [nn.ZeroPad2d((before, after, before, after)), nn.Conv2d(chans[i], chans[i + 1], k),
                           nn.ReLU(), nn.Dropout2d(0.1)]
                if i < len(kernels) - 1:
                    layers.append(nn.MaxPool2d(2))
            layers.append(nn.Flatten())
            self.encoder = nn.Sequential(*layers)
            self.feature_dim = 128 * 3 * 10
            self.cnn_head = nn.Sequential(nn.Dropout(0.5), nn.Linear(self.feature_dim, 1), Scale(1 / 16))
            self.lstm = nn.LSTM(self.feature_dim, 128, batch_first=True)
            self.lstm_head = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, 1), Scale(1 / 16))
            #: not run when predicting (the CNN stage's training head): coverage leaves it out
            self.coverage_skip = ("cnn_head",)
            _he_init(self)

        def forward_cnn(self, x: torch.Tensor) -> torch.Tensor:
            return self.cnn_head(self.encoder(x))

        def forward_features(self, feats: torch.Tensor) -> torch.Tensor:
            """(N, T, feature_dim) encoder features -> (N, 1) radians."""
            seq, _ = self.lstm(feats)
            return self.lstm_head(seq[:, -1])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, t = x.shape[:2]
            feats = self.encoder(x.reshape(n * t, *x.shape[2:])).reshape(n, t, -1)
            return self.forward_features(feats)

    class RamboNet(nn.Module):
        """Rambo: three branches over the same frame differences, outputs combined by a learned weighted sum.

        ``forward(x)`` takes ``(N, 2, 192, 256)`` differences and returns ``(N, 1)`` radians; ``branches(x)``
        returns the three branch outputs ``(N, 3)`` (comma.ai, NVIDIA 1, NVIDIA 2: DeepTest's S1, S2, S3).
        """

        def __init__(self, channels: int = 2) -> None:
            super().__init__()
            # comma.ai's steering model: conv 16 8x8/4, 32 5x5/2, 64 5x5/2 ('same'), ELU, FC 512, 1
            self.comma = nn.Sequential(
                nn.Conv2d(channels, 16, 8, stride=4, padding=2), nn.ELU(),
                nn.Conv2d(16, 32, 5, stride=2, padding=2), nn.ELU(),
                nn.Conv2d(32, 64, 5, stride=2, padding=2), nn.Flatten(), nn.Dropout(0.2), nn.ELU(),
                nn.Linear(64 * 12 * 16, 512), nn.Dropout(0.5), nn.ELU(), nn.Linear(512, 1),
            )
            self.nvidia1 = self._nvidia(channels)
            self.nvidia2 = self._nvidia(channels)
            self.combine = nn.Linear(3, 1)
            _keras_init(self)
            with torch.no_grad():
                self.combine.weight.fill_(1.0 / 3.0)
                self.combine.bias.zero_()

        @staticmethod
        def _nvidia(channels: int) -> nn.Module:
            return nn.Sequential(
                nn.Conv2d(channels, 24, 5, stride=2), nn.ELU(), nn.Conv2d(24, 36, 5, stride=2), nn.ELU(),
                nn.Conv2d(36, 48, 5, stride=2), nn.ELU(), nn.Conv2d(48, 64, 3, stride=2), nn.ELU(),
                nn.Conv2d(64, 64, 3, stride=2), nn.ELU(), nn.Flatten(),
                nn.Linear(64 * 4 * 6, 100), nn.ELU(), nn.Linear(100, 50), nn.ELU(), nn.Linear(50, 10), nn.ELU(),
                nn.Linear(10, 1),
            )

        def branches(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([self.comma(x), self.nvidia1(x), self.nvidia2(x)], dim=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.combine(self.branches(x))

    _CLASSES = {"Atan2": Atan2, "Scale": Scale, "SteeringNet": SteeringNet, "ChauffeurNet": ChauffeurNet,
                "RamboNet": RamboNet}
    return _CLASSES


_CLASSES: dict[str, type] = {}


def build_dave_orig(*, norminit: bool = False) -> Any:
    """Dave-orig (DeepXplore): conv 24/36/48 5x5 stride 2, conv 64/64 3x3, FC 1164/100/50/10/1, ReLU, 2·atan."""
    import torch.nn as nn

    c = _torch_classes()
    features = nn.Sequential(
        nn.Conv2d(3, 24, 5, stride=2), nn.ReLU(), nn.Conv2d(24, 36, 5, stride=2), nn.ReLU(),
        nn.Conv2d(36, 48, 5, stride=2), nn.ReLU(), nn.Conv2d(48, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
    )
    head = nn.Sequential(
        nn.Flatten(), nn.Linear(64 * 5 * 5, 1164), nn.ReLU(), nn.Linear(1164, 100), nn.ReLU(),
        nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 10), nn.ReLU(), nn.Linear(10, 1), c["Atan2"](),
    )
    net = c["SteeringNet"](features, head)
    _keras_init(net)
    if norminit:  # Dave-norminit: truncated-normal (sigma 0.1) initialisation of the dense layers
        for m in head.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.1, a=-0.2, b=0.2)
    _scale_first_conv(net, DAVE_FIRST_CONV_INIT)
    return net


def build_dave_dropout() -> Any:
    """Dave-dropout (DeepXplore): conv 16/32/64 3x3 each + 2x2 max-pool, FC 500 (drop .5)/100 (drop .25)/20/1."""
    import torch.nn as nn

    c = _torch_classes()
    features = nn.Sequential(
        nn.Conv2d(3, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
    )
    head = nn.Sequential(
        nn.Flatten(), nn.Linear(64 * 10 * 10, 500), nn.ReLU(), nn.Dropout(0.5), nn.Linear(500, 100), nn.ReLU(),
        nn.Dropout(0.25), nn.Linear(100, 20), nn.ReLU(), nn.Linear(20, 1), c["Atan2"](),
    )
    net = c["SteeringNet"](features, head)
    _keras_init(net)
    _scale_first_conv(net, DAVE_FIRST_CONV_INIT)
    return net


def build_epoch() -> Any:
    """Epoch (cg23): conv 32/64/128 3x3 'same' each + max-pool + dropout .25/.25/.5, an extra 2x2 max-pool
    (deviation, see :data:`ARCHS`), dense 1024 (dropout .5), dense 1."""
    import torch.nn as nn

    c = _torch_classes()
    features = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.5),
        nn.MaxPool2d(2),  # DEVIATION: 16x16x128 -> 8x8x128 before the dense layer (33.6 M -> 8.4 M parameters)
    )
    head = nn.Sequential(nn.Flatten(), nn.Linear(128 * 8 * 8, 1024), nn.ReLU(), nn.Dropout(0.5), nn.Linear(1024, 1))
    net = c["SteeringNet"](features, head)
    _keras_init(net)
    return net


def build_chauffeur(*, history: int = CHAUFFEUR_HISTORY) -> Any:
    """Chauffeur: see :class:`ChauffeurNet` in :func:`_torch_classes`."""
    return _torch_classes()["ChauffeurNet"](history)


def build_dave2() -> Any:
    """NVIDIA DAVE-2 as in the shared Keras file: conv 24/36/48 5x5/2, 64/64 3x3, ELU, dropout .5, FC 100/50/10/1."""
    import torch.nn as nn

    c = _torch_classes()
    features = nn.Sequential(
        nn.Conv2d(3, 24, 5, stride=2), nn.ELU(), nn.Conv2d(24, 36, 5, stride=2), nn.ELU(),
        nn.Conv2d(36, 48, 5, stride=2), nn.ELU(), nn.Conv2d(48, 64, 3), nn.ELU(), nn.Conv2d(64, 64, 3), nn.ELU(),
        nn.Dropout(0.5),
    )
    head = nn.Sequential(
        nn.Flatten(), nn.Linear(64 * 1 * 18, 100), nn.ELU(), nn.Linear(100, 50), nn.ELU(), nn.Linear(50, 10),
        nn.ELU(), nn.Linear(10, 1),
    )
    net = c["SteeringNet"](features, head)
    _keras_init(net)
    return net


def build_rambo() -> Any:
    """Rambo: see :class:`RamboNet` in :func:`_torch_classes`."""
    return _torch_classes()["RamboNet"](RAMBO_HISTORY)


#: Rambo looks at three consecutive frames (two differences).
RAMBO_HISTORY = 2


# --------------------------------------------------------------------------------------------- catalogue


@dataclass(frozen=True, slots=True)
class Arch:
    """One architecture: how to build it and how it sees a frame."""

    name: str
    title: str
    build: Callable[[], Any]
    prepare: Callable[[np.ndarray], np.ndarray]
    normalise: Callable[[Any], Any]
    input_spec: InputSpec
    summary: str
    origin: str
    deviations: tuple[str, ...] = field(default_factory=tuple)
    #: True when ``normalise`` takes a whole window of prepared frames ``(N, T, h, w, C)`` (Rambo's differences)
    window_normalise: bool = False

    def preprocess(self, images: np.ndarray) -> Any:
        """Raw uint8 RGB frames -> the module's float32 input: ``(N, 3, h, w)``, or ``(N, T, 3, h, w)`` when
        ``images`` is ``(N, T, H, W, 3)`` (models with history), or what ``normalise`` makes of the window
        (``window_normalise``)."""
        import torch

        images = np.asarray(images)
        if images.ndim == 5:
            n, t = images.shape[:2]
            flat = self.prepare(images.reshape(n * t, *images.shape[2:]))
            if self.window_normalise:
                return self.normalise(torch.from_numpy(flat.reshape(n, t, *flat.shape[1:])))
            x = self.normalise(torch.from_numpy(flat))
            return x.reshape(n, t, *x.shape[1:])
        if self.window_normalise:
            raise ModelError(f"{self.name} needs windows of {self.input_spec.history + 1} frames, got single frames")
        return self.normalise(torch.from_numpy(self.prepare(images)))


_DAVE_ORIGIN = "DeepXplore (Pei et al., SOSP 2017), Driving/driving_models.py"
_DAVE_NOTE = "whole frame resized to 100x100 (cv2 INTER_AREA), RGB->BGR minus ImageNet means; output 2*atan(x)"

ARCHS: dict[str, Arch] = {
    "dave-orig": Arch(
        "dave-orig", "Dave-orig", build_dave_orig, prepare_dave, normalise_caffe,
        InputSpec(100, 100, "bgr", 0, _DAVE_NOTE),
        "conv 24/36/48 5x5 stride 2, conv 64/64 3x3, FC 1164/100/50/10/1, ReLU, Glorot-uniform init",
        _DAVE_ORIGIN,
        ("frames resized with cv2 INTER_AREA instead of Keras/PIL's resampling",
         "first convolution initialised at 1/64 of Keras' Glorot-uniform scale (the unscaled caffe input otherwise "
         "starts the 2·atan output saturated, and training stalls at the always-zero error)"),
    ),
    "dave-norminit": Arch(
        "dave-norminit", "Dave-norminit", lambda: build_dave_orig(norminit=True), prepare_dave, normalise_caffe,
        InputSpec(100, 100, "bgr", 0, _DAVE_NOTE),
        "Dave-orig with truncated-normal (sigma 0.1) initialisation of the FC layers",
        _DAVE_ORIGIN,
        ("frames resized with cv2 INTER_AREA instead of Keras/PIL's resampling",
         "first convolution initialised at 1/64 of Keras' Glorot-uniform scale (the unscaled caffe input otherwise "
         "starts the 2·atan output saturated, and training stalls at the always-zero error)"),
    ),
    "dave-dropout": Arch(
        "dave-dropout", "Dave-dropout", build_dave_dropout, prepare_dave, normalise_caffe,
        InputSpec(100, 100, "bgr", 0, _DAVE_NOTE),
        "conv 16/32/64 3x3 each with 2x2 max-pool, FC 500 (dropout 0.5)/100 (dropout 0.25)/20/1, ReLU",
        _DAVE_ORIGIN,
        ("frames resized with cv2 INTER_AREA instead of Keras/PIL's resampling",
         "first convolution initialised at 1/64 of Keras' Glorot-uniform scale (the unscaled caffe input otherwise "
         "starts the 2·atan output saturated, and training stalls at the always-zero error)"),
    ),
    "epoch": Arch(
        "epoch", "Epoch (cg23)", build_epoch, prepare_epoch, normalise_unit,
        InputSpec(128, 128, "rgb", 0, "top 5/12 of the rows cropped (100 of 240), resized to 128x128, x/255"),
        "conv 32/64/128 3x3 'same', each with 2x2 max-pool and dropout 0.25/0.25/0.5; dense 1024 (dropout 0.5); 1",
        "Udacity challenge 2, community-models/cg23 (as trained by DeepTest)",
        ("an extra 2x2 max-pool before the dense layer: 8x8x128 -> 1024 instead of 16x16x128 -> 1024, "
         "8.5 M instead of 33.6 M parameters, so the fp16 weights file stays under 20 MB (67 MB otherwise)",
         "crop of the top 200 of 480 rows applied proportionally (100 of 240 rows)",
         "input scaled to [0, 1]"),
    ),
    "chauffeur": Arch(
        "chauffeur", "Chauffeur (CNN + LSTM)", build_chauffeur, prepare_chauffeur, normalise_centred,
        InputSpec(120, 320, "yuv", CHAUFFEUR_HISTORY,
                  "bottom half of the frame at 120x320, YUV, Y histogram-equalised, x/255-0.5; "
                  f"LSTM over {CHAUFFEUR_HISTORY + 1} frames"),
        "CNN conv 16/20/40/60/80/128 (kernels 5,5,3,3,2,2, 'same', ReLU, spatial dropout 0.1, 2x2 max-pool "
        "after the first five) -> 3840 features per frame; LSTM 128 over the window -> dense 1; output /16",
        "Udacity challenge 2, community-models/chauffeur (as used by DeepTest)",
        (f"LSTM over {CHAUFFEUR_HISTORY} previous frames + the current one instead of 100, so it trains here "
         "in minutes",
         "one LSTM layer of 128 units and a dense output (the original LSTM's exact layout is not in the facts)",
         "input scaled to [-0.5, 0.5]"),
    ),
    "dave2": Arch(
        "dave2", "NVIDIA DAVE-2", build_dave2, prepare_dave2, normalise_pm1,
        InputSpec(66, 200, "yuv", 0, "rows 3/8..27/32 of the height (90:202 of 240), resized to 66x200, YUV, "
                  "x/127.5-1"),
        "conv 24/36/48 5x5 stride 2, conv 64/64 3x3, ELU, dropout 0.5, FC 100/50/10/1 (ELU)",
        "NVIDIA (Bojarski et al. 2016), as in the shared Keras file (naokishibuya/car-behavioral-cloning)",
        ("the Keras file crops rows 60:-25 of a 160x320 frame; the 240x320 frames here are cropped in the same "
         "proportion (rows 90:202)",),
    ),
    "rambo": Arch(
        "rambo", "Rambo", build_rambo, prepare_rambo, normalise_frame_diffs,
        InputSpec(RAMBO_SIZE[0], RAMBO_SIZE[1], "grey", RAMBO_HISTORY,
                  "whole frame resized to 192x256 (cv2 INTER_AREA), grey; the differences of the 3 consecutive "
                  "frames (2 channels, newest first), x 10/255"),
        "frame differences (2 channels) into three branches: comma.ai (conv 16 8x8/4, 32 5x5/2, 64 5x5/2, "
        "FC 512, 1) and two NVIDIA-style (conv 24/36/48 5x5 and 64/64 3x3, all stride 2, FC 100/50/10/1), ELU; "
        "outputs combined by a learned weighted sum (initially their mean)",
        "Udacity challenge 2, team Rambo (as used by DeepTest)",
        ("the three branches are trained jointly with their combination, in one model; Rambo trained them "
         "separately and combined them afterwards",
         "differences of frames 0.1 s apart (the shared frames are every second frame of the 20 Hz drive)",
         "input differences scaled by 10/255 (about unit standard deviation on the shared frames) instead of "
         "a per-data-set mean/std standardisation"),
        window_normalise=True,
    ),
}


def get_arch(name: str) -> Arch:
    """The architecture called ``name`` (see :data:`ARCHS`), or a :class:`ModelError` listing the names."""
    try:
        return ARCHS[name]
    except KeyError as err:
        raise ModelError(f"unknown architecture {name!r}; choose one of: {', '.join(ARCHS)}") from err


def count_parameters(module: Any) -> int:
    return int(sum(p.numel() for p in module.parameters()))
