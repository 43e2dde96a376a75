"""Replay of a camera bug bundle (:mod:`lidarmt.camera.bundle`): rebuild the model from the bundle's spec (a
``module:callable`` only with ``--trust-code``), re-derive the transformed window from the seed tuple with the
implementation the bundle names (``transform_impl``; an older bundle names none: the reference) and compare it
byte for byte (within a pixel tolerance where another CPU or a stand-in implementation explains a difference),
predict both windows again and compare the angles with the stored ones (bit for bit: *identical*;
within the angle tolerance of :data:`lidarmt.engine.replay.TOLERANCES`, as on another CPU: *reproduced*), and check
that the relation is still violated; a learned translator is rebuilt on the device it ran on after its weights'
SHA-256 is checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._paths import load_npz
from lidarmt.camera.bundle import (
    violated,
)
from lidarmt.camera.errors import ImageSourceError
from lidarmt.engine.replay import ReplayResult, machine_of

#: the result of a camera replay (the engine's, as for every bundle; the old name is kept importable)
CameraReplay = ReplayResult


def replay_camera_bundle(folder: Path, info: dict[str, Any], *, trust_code: bool = False,
                         model: str | None = None) -> CameraReplay:
    """Re-run a camera bundle (``info`` is its bundle.json, already read); see the module docstring."""
    from lidarmt.camera.campaign import CameraEvaluator, ModelRef, build_model
    from lidarmt.camera.transforms.base import apply_window, transform_seed
    from lidarmt.camera.transforms.batched import IMPLEMENTATIONS, REFERENCE
    from lidarmt.camera.transforms.batched import apply_window as batched_window
    from lidarmt.camera.transforms.registry import build
    from lidarmt.engine.manifest import verify_manifest

    res = ReplayResult(folder, True, machine=machine_of(info))
    check = res.check

    problems = verify_manifest(folder)
    check("files match MANIFEST.json", not problems, "; ".join(str(p) for p in problems))
    if problems:
        return res
    if (folder / "bundle.mcap").exists():  # what Foxglove opens: it must hold what the bundle shows
        from lidarmt.engine.mcap import CAMERA_BUNDLE_TOPICS, mcap_problems

        bad = mcap_problems(folder / "bundle.mcap", CAMERA_BUNDLE_TOPICS)
        check("bundle.mcap opens with its topics", not bad, "; ".join(bad))
    try:
        z = load_npz(folder / "window.npz", error=ImageSourceError)  # a FIFO or a device: one line, no wait
        seed_w, stored_t = z["seed"], z["transformed"]
    except (OSError, ValueError, KeyError) as err:
        raise ImageSourceError(f"{folder / 'window.npz'}: not a camera bundle's window ({err})") from err
    mref = ModelRef(model, {}) if model else ModelRef.from_dict(info["model"])
    if model:
        res.imports.append(model)
    if info.get("torch_threads"):  # the same thread count as when the bundle was made
        import torch

        torch.set_num_threads(max(1, min(int(info["torch_threads"]), os.cpu_count() or 1)))
    translators = {str(p.get("spec")): p for p in info.get("translators") or [] if isinstance(p, dict)}

    def transform(name: str) -> Any:  # a translator on the device it ran on; code only with --trust-code
        prov = translators.get(name) or {}
        return build(name, {"device": str(prov["device"])} if prov.get("device") else {}, trust_code=trust_code)

    net = build_model(mref, trust_code=trust_code)  # a model file must be the one recorded (SHA-256)
    external = info.get("family") == "external"  # a pairs campaign: the follow-up was made elsewhere
    if "steps" in info:  # a search's mutant: its transformations in turn, each with its own seed
        steps = [(transform(st["transform"]), st["params"], int(st["seed"])) for st in info["steps"]]
        used = [t for t, _, _ in steps]
    elif not external:
        used = [transform(info["transform"])]
    for prov in translators.values():  # the same weights, before anything is run with them
        if prov.get("sha256"):
            from lidarmt.camera.translate.transform import sha256_of, weights_path

            w = weights_path(str(prov["spec"]))
            now = sha256_of(w) if w is not None and w.is_file() else None
            check(f"translator {prov['spec']} weights (SHA-256)", now == prov["sha256"],
                  f"{now or 'no weights file'} now, {prov['sha256']} stored")
    if external:  # nothing to regenerate: both images are the bundle's (MANIFEST.json checked them)
        again, what = stored_t, ""
    elif "steps" in info:
        again = seed_w
        for tr, params, seed in steps:
            again = apply_window(tr, again, params, seed)
        what = "transformed image regenerated from the steps"
    else:
        tr = used[0]
        seed = transform_seed(*info["seed_tuple"])
        check("transformation seed", seed == int(info["transform_seed"]), "the seed tuple gives another seed")
        made_with = str(info.get("transform_impl") or REFERENCE)  # none recorded: the reference made it
        impl = made_with if made_with in IMPLEMENTATIONS else REFERENCE
        again = batched_window(tr, seed_w, info["params"], seed, impl)
        what = "transformed image regenerated from the seed tuple"
    if what and again.shape == stored_t.shape and not np.array_equal(again, stored_t) and "steps" not in info \
            and not external and (made_with != impl or res.other_kernels):
        _within_tolerance(res, what, tr, again, stored_t, made_with, impl)
    elif what:
        check(what, again.shape == stored_t.shape and np.array_equal(again, stored_t),
              "the transformation produced other pixels than window.npz")
    h = int(net.input_spec.history)
    pred = float(net.predict(CameraEvaluator.model_input(seed_w, h)[None])[0])
    pred_t = float(net.predict(CameraEvaluator.model_input(stored_t, h)[None])[0])
    res.compare("prediction on the seed image", pred, info["pred"], "angle")
    res.compare("prediction on the transformed image", pred_t, info["pred_t"], "angle")
    check("relation still violated", violated(info, pred, pred_t) == bool(info["reproduced"]),
          "the relation's verdict differs from bundle.json")
    res.verdict = {"pred": pred, "pred_t": pred_t, "violated": violated(info, pred, pred_t)}
    from lidarmt.camera.bundle import verify_shown_files  # what a person looks at, from the stored data

    verify_shown_files(folder, info, check)
    return res


def _within_tolerance(res: ReplayResult, what: str, transform: Any, now: np.ndarray, stored: np.ndarray,
                      made_with: str, impl: str) -> None:
    """A regenerated transformed image that is not byte for byte the stored one, where something explains it
    (the bundle was made with other kernels than run here, or names an implementation this version lacks): passes
    (as drift, so the replay is *reproduced*) when every pixel is within the tolerance — the ``pixel`` one of
    :data:`lidarmt.engine.replay.TOLERANCES` when the bundle's implementation ran again on another CPU (its float
    kernels round differently there), the transformation's batched-vs-reference tolerance
    (:data:`lidarmt.camera.transforms.batched.TOLERANCE`) when the reference stood in. On the same kind of CPU
    with the same implementation the bytes must be the same (the caller checks that)."""
    from lidarmt.camera.transforms.batched import TOLERANCE
    from lidarmt.engine.replay import TOLERANCES, Drift

    diff = int(np.abs(now.astype(np.int16) - stored.astype(np.int16)).max())
    if made_with == impl:
        tol: float | None = TOLERANCES["pixel"].abs
        how = f"{impl}, as bundle.json says"
    else:
        tol = TOLERANCE.get(getattr(transform, "name", ""))
        how = f"the reference: bundle.json names {made_with!r}, which this version of lidarmt lacks"
    if tol is not None and diff <= tol:
        res.check(what, True)
        res.drift.append(Drift(f"{what} (largest pixel difference from window.npz)", "pixel", float(diff), 0.0))
        return
    limit = "no pixel tolerance applies" if tol is None else f"tolerance {tol:g}"
    res.check(what, False, f"regenerated with {how}: pixels differ from window.npz by up to {diff} grey levels "
                           f"({limit})")
