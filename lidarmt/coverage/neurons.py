"""Which neurons count, and how their values are read: forward hooks on any ``torch.nn.Module``.

A *neuron* is one output feature of a counted layer, reduced to one number per input:

* a dense neuron (``nn.Linear``, or an activation applied to one) is its output feature;
* a conv neuron (``nn.Conv*``, ``nn.ConvTranspose*``, or an activation applied to one) is its channel's mean over
  all spatial positions, as DeepTest and TACTIC count them.

Default layers (:func:`default_layers`): every convolution, transposed convolution and ``nn.Linear``, where a layer
followed directly by an activation module in the same ``nn.Sequential`` is counted *after* its activation (the
activation module is hooked instead: what a Keras ``Conv2D(activation="relu")`` layer outputs, as in DeepTest),
and an activation module that follows no counted layer is counted on its own. Pooling, flatten, dropout,
normalisation, recurrent layers and custom modules are not counted (DeepTest's code excludes pool and flatten).
Networks that apply their activation functionally (Apollo's cnnseg calls ``torch.relu_``) can name the layers
whose outputs get a ReLU before reduction (``relu_after``), so their neurons are the post-activation values too.

Pass ``layers=`` to change the selection: a list of module names (exactly those, any module with a tensor
output), or a predicate over :class:`LayerInfo` that filters the default selection (e.g. ``lambda l: l.kind ==
"conv"`` for conv neurons only).

Models that run one encoder over windows of frames (Chauffeur) show a layer ``k·N`` rows for ``N`` inputs; the
neurons of such a layer are read from the last (current) frame of each window.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lidarmt.coverage.errors import CoverageArgumentError

LayerFilter = Callable[["LayerInfo"], bool]


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """One counted layer: its module name (``named_modules``), the kind of neurons ("conv": channel means,
    "dense": features), the module's class name, whether a ReLU is applied before reduction, and its neuron
    count (known after the first forward pass; 0 before)."""

    name: str
    kind: str
    module_type: str
    relu: bool = False
    size: int = 0


def _classes() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    from torch import nn

    conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    dense = (nn.Linear, nn.Bilinear)
    act = (nn.ReLU, nn.ReLU6, nn.ELU, nn.SELU, nn.CELU, nn.LeakyReLU, nn.PReLU, nn.GELU, nn.SiLU, nn.Mish,
           nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softsign)
    return conv, dense, act


def default_layers(module: Any, *, relu_after: Collection[str] = ()) -> list[LayerInfo]:
    """The layers counted by default (see the module docstring), in ``named_modules`` order."""
    from torch import nn

    conv, dense, act = _classes()
    replaced: dict[str, str] = {}  # activation name -> kind of the layer it follows
    skipped: set[str] = set()
    for pname, parent in module.named_modules():
        if not isinstance(parent, nn.Sequential):
            continue
        kids = list(parent.named_children())
        for (a, ma), (b, mb) in zip(kids, kids[1:], strict=False):
            if isinstance(ma, conv + dense) and isinstance(mb, act):
                full_a = f"{pname}.{a}" if pname else a
                full_b = f"{pname}.{b}" if pname else b
                skipped.add(full_a)
                replaced[full_b] = "conv" if isinstance(ma, conv) else "dense"
    out: list[LayerInfo] = []
    for name, m in module.named_modules():
        if not name or name in skipped:
            continue
        if isinstance(m, conv):
            kind = "conv"
        elif isinstance(m, dense):
            kind = "dense"
        elif isinstance(m, act):
            kind = replaced.get(name, "conv")  # a free activation: channel-first for rank >= 3 outputs
        else:
            continue
        out.append(LayerInfo(name, kind, type(m).__name__, name in relu_after))
    return out


def select_layers(module: Any, layers: Sequence[str] | LayerFilter | None = None, *,
                  relu_after: Collection[str] = ()) -> list[LayerInfo]:
    """The counted layers of ``module``: the default selection, filtered by a predicate, or exactly the names
    given (a :class:`CoverageArgumentError` names an unknown one)."""
    if layers is None or callable(layers):
        chosen = default_layers(module, relu_after=relu_after)
        if callable(layers):
            chosen = [info for info in chosen if layers(info)]
    else:
        conv, dense, _ = _classes()
        mods = dict(module.named_modules())
        chosen = []
        for name in layers:
            if name not in mods or not name:
                known = ", ".join(n for n in list(mods)[1:12] if n)
                raise CoverageArgumentError(f"layer {name!r} is not a module of the network; names look like: "
                                            f"{known}, ...")
            kind = "dense" if isinstance(mods[name], dense) else "conv"
            chosen.append(LayerInfo(name, kind, type(mods[name]).__name__, name in relu_after))
    if not chosen:
        raise CoverageArgumentError("no layer of the network is counted; check the layer selection")
    return chosen


def _reduce(out: Any, kind: str, relu: bool) -> Any:
    """(rows, neurons) float32 of one layer output: features as they are, channels averaged over space."""
    import torch

    x = out.detach()
    if relu:
        x = torch.relu(x)
    x = x.float()
    if x.ndim == 1:
        return x[:, None]
    if x.ndim == 2:
        return x
    if kind == "dense":  # (N, ..., F): features last
        return x.flatten(1, -2).mean(1)
    return x.flatten(2).mean(2)  # (N, C, ...): channel means


class NeuronProbe:
    """Forward hooks on a module's counted layers.

    ``acts = probe.capture(run, n)`` calls ``run()`` (which must forward ``n`` inputs through the module, in
    any number of batches) with the hooks on, and returns ``(result of run, (n, neurons) float32 array)``:
    the neuron values of every input, layers concatenated in :attr:`layers` order (:attr:`offsets` gives each
    layer's slice). Hooks are attached only during ``capture``, so the module is untouched otherwise. The
    reductions run in torch inside the hooks (one ``mean`` per layer and batch; no loop over neurons).
    """

    def __init__(self, module: Any, *, layers: Sequence[str] | LayerFilter | None = None,
                 relu_after: Collection[str] = ()) -> None:
        self.module = module
        self._layers = select_layers(module, layers, relu_after=relu_after)
        self._sizes: list[int] | None = None

    @property
    def layers(self) -> list[LayerInfo]:
        """The counted layers, with their sizes once the probe has seen a forward pass."""
        if self._sizes is None:
            return list(self._layers)
        return [LayerInfo(li.name, li.kind, li.module_type, li.relu, s)
                for li, s in zip(self._layers, self._sizes, strict=True)]

    @property
    def names(self) -> list[str]:
        return [li.name for li in self._layers]

    @property
    def sizes(self) -> list[int] | None:
        """Neurons per layer (None before the first capture)."""
        return None if self._sizes is None else list(self._sizes)

    @property
    def offsets(self) -> np.ndarray:
        """``(layers + 1,)`` start of each layer's neurons in a capture's columns (after the first capture)."""
        if self._sizes is None:
            raise CoverageArgumentError("the probe has not seen a forward pass yet; capture once first")
        return np.concatenate([[0], np.cumsum(self._sizes)]).astype(np.int64)

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def capture(self, run: Callable[[], Any], n: int) -> tuple[Any, np.ndarray]:
        import torch

        mods = dict(self.module.named_modules())
        got: list[list[Any]] = [[] for _ in self._layers]
        handles = []

        def hook_for(i: int, info: LayerInfo) -> Callable[..., None]:
            def hook(_mod: Any, _inp: Any, out: Any) -> None:
                if isinstance(out, torch.Tensor):
                    got[i].append(_reduce(out, info.kind, info.relu))
            return hook

        try:
            for i, info in enumerate(self._layers):
                handles.append(mods[info.name].register_forward_hook(hook_for(i, info)))
            result = run()
        finally:
            for h in handles:
                h.remove()
        cols = []
        for info, parts in zip(self._layers, got, strict=True):
            if not parts:
                raise CoverageArgumentError(f"layer {info.name!r} produced no output in the forward pass; "
                                            f"leave it out of the layer selection")
            x = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
            rows = x.shape[0]
            if rows != n:
                if n == 0 or rows % n:
                    raise CoverageArgumentError(f"layer {info.name!r} saw {rows} rows for {n} inputs; it is "
                                                f"not one row per input (leave it out of the layer selection)")
                x = x.reshape(n, rows // n, -1)[:, -1]  # windows of frames: the current (last) frame
            cols.append(x)
        sizes = [int(c.shape[1]) for c in cols]
        if self._sizes is None:
            self._sizes = sizes
        elif sizes != self._sizes:
            raise CoverageArgumentError(f"the network's layer sizes changed between calls ({self._sizes} -> "
                                        f"{sizes}); coverage needs inputs of one size")
        acts = torch.cat(cols, 1) if cols else torch.zeros((n, 0))
        return result, np.ascontiguousarray(acts.cpu().numpy(), dtype=np.float32)
