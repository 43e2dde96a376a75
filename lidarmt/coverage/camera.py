"""Coverage of steering models (:class:`~lidarmt.camera.models.base.SteeringModel`): trackers, profiles, windows.

* :func:`tracker_for` - a :class:`~lidarmt.coverage.criteria.CoverageTracker` whose ``update(images)`` calls
  ``model.predict(images)`` once with the hooks on: ``step.outputs`` are the steering angles (radians);
* :func:`profile_path_for` - where a model's profile lives: ``<weights dir>/<name>.profile.npz`` for zoo models
  (shipped for the shipped weights), ``<file>.profile.npz`` beside a Keras file;
* :func:`build_profile` - a model's profile over frames of an image source (batched, one forward pass each);
* :func:`training_indices` - the frames the zoo models were trained on (the first 80 % of a drive);
* :func:`model_inputs` - the frames (or windows of frames, for models with history) of a source by index.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.coverage.criteria import CoverageConfig, CoverageTracker
from lidarmt.coverage.errors import ProfileError
from lidarmt.coverage.neurons import LayerFilter, NeuronProbe
from lidarmt.coverage.profile import Profile, ProfileAccumulator

#: the share of a drive the zoo models were trained on (lidarmt camera train's default --val-fraction 0.2)
TRAIN_SHARE = 0.8


def profile_path_for(spec: str) -> Path | None:
    """The default profile path of a model spec: beside the zoo weights or a Keras file; None for plug-ins."""
    from lidarmt.camera.models.registry import is_keras_path, is_onnx_path, is_weights_path

    if is_keras_path(spec) or is_weights_path(spec) or is_onnx_path(spec):  # beside a Keras file or a weights file from camera train
        return Path(spec).with_suffix(".profile.npz")
    try:
        from lidarmt.camera.models import zoo

        if spec in zoo.architectures():
            return zoo.WEIGHTS_DIR / f"{spec}.profile.npz"
    except ImportError:  # pragma: no cover - the zoo ships with lidarmt
        return None
    return None


def load_profile_for(spec: str, profile: str | os.PathLike[str] | Profile | None = "auto") -> Profile | None:
    """``profile="auto"``: the model's default profile when it exists (else None); a path: that file
    (one-line :class:`ProfileError` when missing or bad); a Profile: as is; None: no profile."""
    if profile is None or isinstance(profile, Profile):
        return profile
    if str(profile) == "auto":
        path = profile_path_for(spec)
        return Profile.load(path) if path is not None and path.is_file() else None
    return Profile.load(profile)


def tracker_for(model: Any, *, profile: Profile | None = None, config: CoverageConfig | None = None,
                layers: Sequence[str] | LayerFilter | None = None) -> CoverageTracker:
    """A tracker over ``model.module`` whose ``update(images)`` returns the steering angles as outputs."""
    module = getattr(model, "module", None)
    if module is None:
        raise ProfileError(f"model {getattr(model, 'name', model)!r} exposes no torch module; coverage needs one")
    probe = NeuronProbe(module, layers=_inference_layers(module) if layers is None else layers)
    return CoverageTracker(probe, run=_hooked_predict(model), profile=profile, config=config)


def _inference_layers(module: Any) -> LayerFilter | None:
    """The default layers minus those a module does not run when it predicts (its ``coverage_skip`` prefixes,
    e.g. Chauffeur's stand-alone CNN head, a training target only)."""
    skip = tuple(getattr(module, "coverage_skip", ()) or ())
    if not skip:
        return None
    return lambda info: not any(info.name == s or info.name.startswith(s + ".") for s in skip)


def _hooked_predict(model: Any) -> Any:
    """The model's predict that forwards every input through its module (a model that caches per-frame features,
    Chauffeur, skips the encoder for frames it has seen, which the probe's hooks must not miss)."""
    return getattr(model, "predict_uncached", model.predict)


def training_indices(n_frames: int, *, share: float = TRAIN_SHARE) -> np.ndarray:
    """Frame indices ``0 .. round(share·n)-1``: the training split of ``lidarmt camera train``."""
    stop = n_frames - int(round((1.0 - share) * n_frames))
    return np.arange(max(stop, 1 if n_frames else 0))


def model_inputs(source: Any, indices: Sequence[int], history: int,
                 transform: Callable[[np.ndarray, int], np.ndarray] | None = None) -> np.ndarray:
    """``(N, H, W, 3)`` frames, or ``(N, history+1, H, W, 3)`` windows (oldest first, padded with frame 0, as the
    campaign pads), optionally transformed: ``transform(image, frame_index) -> image``, applied to every frame
    of a window with the frame index of the window's seed (the campaign's rule: same parameters and seed)."""
    out = []
    for i in indices:
        i = int(i)
        if history == 0:
            img = source[i].image
            out.append(transform(img, i) if transform else img)
        else:
            win = [source[max(0, j)].image for j in range(i - history, i + 1)]
            out.append(np.stack([transform(w, i) if transform else w for w in win]))
    return np.stack(out)


def build_profile(model: Any, source: Any, indices: Sequence[int], *, batch: int = 64,
                  layers: Sequence[str] | LayerFilter | None = None,
                  meta: dict[str, Any] | None = None,
                  progress: Callable[[int], None] | None = None) -> Profile:
    """The profile of ``model`` over the frames ``indices`` of ``source``: one forward pass per batch."""
    probe = NeuronProbe(model.module, layers=_inference_layers(model.module) if layers is None else layers)
    acc = ProfileAccumulator()
    history = int(model.input_spec.history)
    for start in range(0, len(indices), batch):
        chunk = indices[start:start + batch]
        images = model_inputs(source, chunk, history)
        _, acts = probe.capture(lambda images=images: _hooked_predict(model)(images), len(images))
        acc.add(acts)
        if progress is not None:
            progress(len(chunk))
    info = {"model": getattr(model, "name", ""), "frames": len(indices), "layers_kind":
            [li.kind for li in probe.layers], **(meta or {})}
    return acc.result(probe.names, probe.sizes or [], info)
