"""UNIT and MUNIT in torch: the generators and the multi-scale LSGAN discriminator, configurable in size.

* **UNIT** (Liu, Breuel & Kautz, NeurIPS 2017; the translator of DeepRoad, ASE'18): two VAE-GANs with a shared
  latent space. Each domain's encoder is ``conv7x7`` → ``n_downsample`` stride-2 ``conv4x4`` → residual blocks
  (instance norm); the **last** residual block of the encoders is shared between the domains, and so is the
  **first** residual block of the decoders (the weight-sharing that ties the latent space). The latent is
  ``z = μ + ε``, ``ε ~ N(0, I)`` during training (a unit-variance Gaussian, as the authors' code has it), so the
  KL term reduces to ``mean(μ²)``. Translation is unimodal: ``x_ab = G_b(E_a(x_a))``.
* **MUNIT** (Huang, Liu, Belongie & Kautz, ECCV 2018; the translator of TACTIC, ICML'21): each domain has a
  content encoder (as UNIT's, not shared), a style encoder (``conv7x7`` → 4 stride-2 ``conv4x4`` → global
  average pool → ``1x1`` conv to ``style_dim``, no normalisation) and a decoder whose residual blocks use
  adaptive instance normalisation (AdaIN) with scales and biases produced by an MLP from the style code, then
  nearest-neighbour up-sampling with ``conv5x5`` + layer norm, and ``conv7x7`` → ``tanh``. Translation is
  multimodal: ``x_ab = G_b(E^c_a(x_a), s_b)`` with ``s_b ~ N(0, I)``.
* **Discriminator**: ``n_scales`` PatchGAN discriminators on the image and its 2x, 4x average-pooled versions,
  each ``n_layer`` stride-2 ``conv4x4`` with leaky ReLU (0.2), then ``1x1`` conv; least-squares GAN loss.

The default sizes are the papers' (``dim`` 64, ``style_dim`` 8, 2 down-samplings, 4 residual blocks, MLP 256,
discriminator 64 wide, 4 layers, 3 scales); lidarmt's shipped translators are smaller (see their model cards).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

ARCHS = ("unit", "munit")


@dataclass(frozen=True)
class NetConfig:
    """The sizes of a translator's networks (published defaults; see the module docstring)."""

    arch: str = "munit"
    dim: int = 64  # channels after the first conv; doubled by each down-sampling
    n_downsample: int = 2
    n_res: int = 4  # residual blocks in each encoder and decoder
    style_dim: int = 8  # MUNIT only
    mlp_dim: int = 256  # MUNIT only: the AdaIN parameter MLP's width
    dis_dim: int = 64
    dis_layers: int = 4
    dis_scales: int = 3

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch {self.arch!r}: expected one of {', '.join(ARCHS)}")
        for f in ("dim", "n_downsample", "n_res", "style_dim", "mlp_dim", "dis_dim", "dis_layers", "dis_scales"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{f}={v!r}: expected a positive integer")
        if self.arch == "unit" and self.n_res < 2:
            raise ValueError("UNIT needs n_res >= 2 (one residual block of each encoder/decoder is shared)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NetConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown network settings {', '.join(sorted(unknown))}; known: {', '.join(sorted(names))}")
        return cls(**d)

    @property
    def multiple(self) -> int:
        """Image sides must be multiples of this (the encoders' total stride)."""
        return 2 ** self.n_downsample


# ----------------------------------------------------------------------------------------------- layers


class LayerNorm(nn.Module):
    """Layer norm over (C, H, W) of each sample with a per-channel affine (MUNIT's up-sampling norm)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        flat = x.reshape(n, -1)
        mean = flat.mean(1).view(n, 1, 1, 1)
        std = flat.std(1).view(n, 1, 1, 1)
        x = (x - mean) / (std + self.eps)
        return x * self.gamma.view(1, -1, 1, 1) + self.beta.view(1, -1, 1, 1)


class AdaIN(nn.Module):
    """Instance norm whose scale and bias are set from outside (by the style MLP) before each forward."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None or self.bias is None:
            raise RuntimeError("AdaIN parameters not set: call the decoder with a style code")
        out = F.instance_norm(x, eps=self.eps)
        return out * self.weight[:, :, None, None] + self.bias[:, :, None, None]


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "in":
        return nn.InstanceNorm2d(channels, affine=False)
    if kind == "ln":
        return LayerNorm(channels)
    if kind == "adain":
        return AdaIN(channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(kind)


class ConvBlock(nn.Sequential):
    """Reflection-padded conv → norm → activation."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, pad: int, *, norm: str = "none",
                 act: str = "relu") -> None:
        layers: list[nn.Module] = [nn.ReflectionPad2d(pad), nn.Conv2d(cin, cout, k, stride, bias=True),
                                   _norm(norm, cout)]
        if act == "relu":
            layers.append(nn.ReLU(inplace=True))
        elif act == "lrelu":
            layers.append(nn.LeakyReLU(0.2, inplace=True))
        elif act == "tanh":
            layers.append(nn.Tanh())
        super().__init__(*layers)


class ResBlock(nn.Module):
    def __init__(self, dim: int, norm: str) -> None:
        super().__init__()
        self.body = nn.Sequential(ConvBlock(dim, dim, 3, 1, 1, norm=norm), ConvBlock(dim, dim, 3, 1, 1, norm=norm,
                                                                                       act="none"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def _downsampler(cfg: NetConfig) -> tuple[list[nn.Module], int]:
    layers: list[nn.Module] = [ConvBlock(3, cfg.dim, 7, 1, 3, norm="in")]
    dim = cfg.dim
    for _ in range(cfg.n_downsample):
        layers.append(ConvBlock(dim, dim * 2, 4, 2, 1, norm="in"))
        dim *= 2
    return layers, dim


def _upsampler(dim: int, cfg: NetConfig) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for _ in range(cfg.n_downsample):
        layers += [nn.Upsample(scale_factor=2, mode="nearest"), ConvBlock(dim, dim // 2, 5, 1, 2, norm="ln")]
        dim //= 2
    layers.append(ConvBlock(dim, 3, 7, 1, 3, act="tanh"))
    return layers


# ---------------------------------------------------------------------------------------------- MUNIT


class ContentEncoder(nn.Module):
    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        layers, dim = _downsampler(cfg)
        layers += [ResBlock(dim, "in") for _ in range(cfg.n_res)]
        self.model = nn.Sequential(*layers)
        self.out_dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class StyleEncoder(nn.Module):
    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        dim = cfg.dim
        layers: list[nn.Module] = [ConvBlock(3, dim, 7, 1, 3)]
        for _ in range(2):
            layers.append(ConvBlock(dim, dim * 2, 4, 2, 1))
            dim *= 2
        for _ in range(2):
            layers.append(ConvBlock(dim, dim, 4, 2, 1))
        layers += [nn.AdaptiveAvgPool2d(1), nn.Conv2d(dim, cfg.style_dim, 1)]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class AdaINDecoder(nn.Module):
    def __init__(self, cfg: NetConfig, dim: int) -> None:
        super().__init__()
        self.res = nn.Sequential(*[ResBlock(dim, "adain") for _ in range(cfg.n_res)])
        self.up = nn.Sequential(*_upsampler(dim, cfg))
        self.adain = [m for m in self.res.modules() if isinstance(m, AdaIN)]
        n_params = sum(2 * m.channels for m in self.adain)
        self.mlp = nn.Sequential(nn.Linear(cfg.style_dim, cfg.mlp_dim), nn.ReLU(inplace=True),
                                 nn.Linear(cfg.mlp_dim, cfg.mlp_dim), nn.ReLU(inplace=True),
                                 nn.Linear(cfg.mlp_dim, n_params))

    def forward(self, content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        params = self.mlp(style.reshape(style.shape[0], -1))
        i = 0
        for m in self.adain:
            c = m.channels
            m.bias = params[:, i:i + c]
            m.weight = 1.0 + params[:, i + c:i + 2 * c]
            i += 2 * c
        return self.up(self.res(content))


class MUNITGen(nn.Module):
    """One domain's MUNIT generator: content encoder, style encoder, AdaIN decoder."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        self.enc_content = ContentEncoder(cfg)
        self.enc_style = StyleEncoder(cfg)
        self.dec = AdaINDecoder(cfg, self.enc_content.out_dim)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.enc_content(x), self.enc_style(x)

    def decode(self, content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return self.dec(content, style)


# ----------------------------------------------------------------------------------------------- UNIT


class UNITPair(nn.Module):
    """Both domains' UNIT VAEs with the shared encoder tail and decoder head."""

    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        private = cfg.n_res - 1
        layers, dim = _downsampler(cfg)
        self.enc_a = nn.Sequential(*layers, *[ResBlock(dim, "in") for _ in range(private)])
        layers, _ = _downsampler(cfg)
        self.enc_b = nn.Sequential(*layers, *[ResBlock(dim, "in") for _ in range(private)])
        self.enc_shared = ResBlock(dim, "in")
        self.dec_shared = ResBlock(dim, "in")
        self.dec_a = nn.Sequential(*[ResBlock(dim, "in") for _ in range(private)], *_upsampler(dim, cfg))
        self.dec_b = nn.Sequential(*[ResBlock(dim, "in") for _ in range(private)], *_upsampler(dim, cfg))

    def encode(self, x: torch.Tensor, domain: str) -> torch.Tensor:
        return self.enc_shared((self.enc_a if domain == "a" else self.enc_b)(x))

    def decode(self, z: torch.Tensor, domain: str) -> torch.Tensor:
        return (self.dec_a if domain == "a" else self.dec_b)(self.dec_shared(z))


# -------------------------------------------------------------------------------------- discriminator


class MultiScaleDis(nn.Module):
    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        nets = []
        for _ in range(cfg.dis_scales):
            dim = cfg.dis_dim
            layers: list[nn.Module] = [ConvBlock(3, dim, 4, 2, 1, act="lrelu")]
            for _ in range(cfg.dis_layers - 1):
                layers.append(ConvBlock(dim, dim * 2, 4, 2, 1, act="lrelu"))
                dim *= 2
            layers.append(nn.Conv2d(dim, 1, 1))
            nets.append(nn.Sequential(*layers))
        self.nets = nn.ModuleList(nets)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for net in self.nets:
            outs.append(net(x))
            x = self.pool(x)
        return outs

    def loss_d(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """LSGAN discriminator loss: fakes to 0, reals to 1, summed over the scales."""
        return sum(torch.mean(f ** 2) + torch.mean((r - 1) ** 2)
                   for f, r in zip(self(fake), self(real), strict=True))  # type: ignore[return-value]

    def loss_g(self, fake: torch.Tensor) -> torch.Tensor:
        return sum(torch.mean((f - 1) ** 2) for f in self(fake))  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ init


def init_weights(module: nn.Module, kind: str) -> None:
    """``kaiming`` (generators) or ``gaussian`` N(0, 0.02) (discriminators) on every conv and linear layer."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            if kind == "kaiming":
                nn.init.kaiming_normal_(m.weight, a=0, mode="fan_in")
            else:
                nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def build_generators(cfg: NetConfig) -> nn.ModuleDict:
    """The generator side of a translator: ``{"a": MUNITGen, "b": MUNITGen}`` or ``{"pair": UNITPair}``."""
    gens = nn.ModuleDict({"a": MUNITGen(cfg), "b": MUNITGen(cfg)}) if cfg.arch == "munit" \
        else nn.ModuleDict({"pair": UNITPair(cfg)})
    init_weights(gens, "kaiming")
    return gens


def parameter_count(cfg: NetConfig) -> int:
    """The parameters of ``cfg``'s generators and discriminators, counted on torch's meta device: nothing is
    allocated, so sizes a file or an option claims can be checked against the machine before building."""
    with torch.device("meta"):
        return sum(p.numel() for part in (build_generators(cfg), build_discriminators(cfg)) for p in part.parameters())


def build_discriminators(cfg: NetConfig) -> nn.ModuleDict:
    dis = nn.ModuleDict({"a": MultiScaleDis(cfg), "b": MultiScaleDis(cfg)})
    init_weights(dis, "gaussian")
    return dis
