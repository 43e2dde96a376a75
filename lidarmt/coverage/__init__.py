"""Neuron coverage criteria on any ``torch.nn.Module``: NC, KMNC, NBC, SNAC, TKNC (DeepTest, DeepGauge, TACTIC).

Model-agnostic: forward hooks on the layers that count (:mod:`lidarmt.coverage.neurons`), so the same code serves
the camera steering models and Apollo's cnnseg network. The pieces:

``NeuronProbe(module, layers=None, relu_after=())``
    Hooks on the counted layers (convolutions, transposed convolutions, dense layers, counted after the activation
    module that follows them; a conv neuron is its channel mean). ``probe.capture(run, n) -> (result, acts)`` runs
    ``run()`` with the hooks on and returns the ``(n, neurons)`` float32 values. ``probe.layers``/``names``/
    ``sizes``/``offsets`` describe the columns.

``Profile`` (``Profile.load(path)``, ``profile.save(path)``, ``ProfileAccumulator``)
    Per-neuron training min/max/mean/std, stored as an ``.npz`` of plain arrays (never pickle), checked against the
    probe's layers. ``lidarmt camera profile`` makes one; the shipped models have theirs beside their weights
    (``lidarmt/camera/models/weights/<name>.profile.npz``, Udacity training split).

``CoverageConfig(criteria=None, nc_threshold=0.2, kmnc_k=1000, tknc_k=2, widen=0.0)``
    Which criteria (None: all five with a profile, NC and TKNC without) and their parameters.

``CoverageTracker(probe, run=..., profile=..., config=...)``
    Cumulative coverage (one bitset per criterion). The API the searches use::

        from lidarmt.coverage import CoverageConfig, Profile
        from lidarmt.coverage.camera import tracker_for, load_profile_for

        tracker = tracker_for(model, profile=load_profile_for("dave-orig"))   # model: a SteeringModel
        step = tracker.update(images)              # one forward pass; commits the coverage
        step.outputs                               # (N,) steering angles (radians)
        step.new["nc"]                             # (N,) units each image newly covered, in order
        step.gain["kmnc"]                          # share of the previously uncovered units now covered (Fc)
        trial = tracker.update(images, commit=False)   # measure only (a search's candidate)
        tracker.update_activations(trial.acts[[2]])    # keep candidate 2 without a second forward pass
        tracker.coverage()                         # {"nc": 0.43, "kmnc": 0.08, "nbc": 0.01, ...}
        snap = tracker.state; tracker.restore(snap)  # snapshots of the bitsets
        other = tracker.copy(); blank = tracker.fresh()
        tracker.update_activations(acts)           # values captured elsewhere (probe.capture)

    ``tracker.units(c)`` is each criterion's denominator, ``covered(c)`` its bitset, ``layer_coverage(c)`` the
    share per layer.

``activated_set(tracker, inputs, criterion="nc")`` and ``jaccard_distance(a, b)``
    The units a set of inputs activates (from a fresh copy of the tracker) and DeepTest's Figure 4 distance.

Camera helpers are in :mod:`lidarmt.coverage.camera` (``tracker_for``, ``profile_path_for``,
``load_profile_for``, ``build_profile``, ``training_indices``, ``model_inputs``); the DeepTest studies
(Tables 5, 6, Figure 4, RQ1) in :mod:`lidarmt.coverage.study`; Apollo's CNN over MR1 follow-ups in
:mod:`lidarmt.coverage.lidar`. Criteria definitions and TACTIC's KMNC bug: :mod:`lidarmt.coverage.criteria`.
"""

from lidarmt.coverage.criteria import (
    CRITERIA,
    CoverageConfig,
    CoverageState,
    CoverageTracker,
    Step,
    activated_set,
    jaccard_distance,
)
from lidarmt.coverage.errors import CoverageArgumentError, ProfileError
from lidarmt.coverage.neurons import LayerInfo, NeuronProbe, default_layers, select_layers
from lidarmt.coverage.profile import Profile, ProfileAccumulator

__all__ = [
    "CRITERIA", "CoverageArgumentError", "CoverageConfig", "CoverageState", "CoverageTracker", "LayerInfo",
    "NeuronProbe", "Profile", "ProfileAccumulator", "ProfileError", "Step", "activated_set", "default_layers",
    "jaccard_distance", "select_layers",
]
