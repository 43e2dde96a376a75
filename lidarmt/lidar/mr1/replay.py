"""Replay a bug bundle: check its files, rebuild the SUT and ROI, perceive again, compare bit for bit.

A bundle is data that strangers send (it is meant to be attached to an issue), so replay trusts nothing in it:

1. **Code.** ``bundle.json`` names the SUT and the ROI. Replay builds registered built-ins, installed
   entry-point plug-ins and map files only; a ``module:callable`` SUT or ROI, or an option value naming code,
   is refused (:class:`lidarmt.lidar.specs.UntrustedCodeError`) before anything else happens, unless the
   caller passes ``trust_code=True`` (``lidarmt replay --trust-code``); ``on_code`` is then told what is
   imported, first.
2. **Files.** ``MANIFEST.json`` must list every file replay reads, and each listed file must have its recorded
   size and SHA-256 (:func:`lidarmt.engine.manifest.verify_manifest`); each problem is one line.
3. **bundle.json** must agree with itself: the seed tuple is (campaign seed, frame, n, trial) of its key.
4. **Added points.** The follow-up is regenerated from the seed tuple with the bundle's source frame and ROI:
   its added points must equal ``added.npy`` and the whole frame ``followup.npz``, bit for bit; ``minimal.npy``
   must equal the regenerated added points at ``minimal_indices``.
5. **Perception.** Source and follow-up obstacles are compared with the stored JSON lists (same rounding), the
   oracle's verdict with ``bundle.json``, and the relation the bundle is about must still be violated (when
   the bundle says it was reproduced). A score or box that moved within its tolerance
   (:data:`lidarmt.engine.replay.TOLERANCES`) makes the replay *reproduced*; an obstacle list or verdict that
   changed in more than its floats (on another CPU a confidence on a threshold can move a cell into another
   cluster) is listed, and accepted only while the relation still holds and something explains it
   (:attr:`lidarmt.engine.replay.ReplayResult.explained`).
6. **Minimal subset.** When the bundle claims a minimal violating subset, the SUT is run on source +
   ``minimal.npy``: the obstacles are compared with ``obstacles_minimal.json``, the verdict with the stored one,
   and the relation must still be violated. When ddmin claims the subset is 1-minimal, the claim is re-checked:
   without any one of its points the relation must no longer be violated.

Every check runs even when an earlier one failed (a missing file fails the checks that need it), so the report
lists all that differs. With ``from_recording=True`` the source frame is read from the original recording
too and must equal the stored one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._limits import available_memory, loads_json
from lidarmt._paths import open_readable, read_json, read_text
from lidarmt.engine.errors import FuzzInputError
from lidarmt.engine.replay import (  # noqa: F401  (kept importable from here)
    CHECK_FILES,
    CHECK_MCAP,
    ReplayResult,
    begin_replay,
    check_mcap,
    resolve_path,
    shown_unlisted,
)
from lidarmt.lidar.mr1.inject import make_follow_up
from lidarmt.lidar.mr1.oracle import judge
from lidarmt.lidar.perception.guard import guarded_detect
from lidarmt.lidar.specs import (
    RoiSpec,
    SutSpec,
    build_roi_provider,
    build_sut,
    code_in_options,
    code_in_roi,
    code_in_sut,
    open_source,
    sut_on_recorded_weights,
)

#: The bundle format replay reads (:data:`lidarmt.lidar.mr1.bundle.BUNDLE_VERSION`).
SUPPORTED_VERSION = 2
#: Files replay reads; the manifest must list each one.
REPLAY_INPUTS = ("bundle.json", "source.npz", "followup.npz", "added.npy", "minimal.npy",
                 "obstacles_source.json", "obstacles_followup.json")
MAX_BUNDLE_JSON_BYTES = 64 << 20


def load_bundle(path: str | Path) -> dict[str, Any]:
    """The parsed ``bundle.json`` of a bundle folder (or of the file itself); refuses other formats."""
    p = Path(path)
    j = p / "bundle.json" if p.is_dir() else p
    if not j.is_file():
        raise FuzzInputError(f"{path}: not a bug bundle (no bundle.json); give a runs/NAME/violations/<id> folder")
    text = read_text(j, max_bytes=MAX_BUNDLE_JSON_BYTES, what="bundle.json", error=FuzzInputError)
    info = loads_json(text, what=f"{j}: corrupt bundle.json", error=FuzzInputError)  # any depth: one line
    if not isinstance(info, dict):
        raise FuzzInputError(f"{j}: corrupt bundle.json (not a JSON object)")
    version = info.get("version")
    if version == 1:
        raise FuzzInputError(
            f"{j}: bundle format 1 has no file checksums and cannot be verified; rebuild it with this lidarmt: "
            "delete the bundle folder and run its campaign's command again with --resume"
        )
    if version != SUPPORTED_VERSION:
        raise FuzzInputError(f"{j}: bundle format {version!r} is not supported (this lidarmt reads "
                             f"{SUPPORTED_VERSION}); replay it with the lidarmt version that wrote it")
    return info


def bundle_code(path: str | Path, *, map_path: str | None = None, sut: str | None = None) -> list[str]:
    """What replaying the bundle would import besides lidarmt's built-ins and installed plug-ins (one line
    each); ``map_path``/``sut`` are the user's overrides, which are trusted."""
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    info = load_bundle(folder)
    _, sut_spec, roi_spec, _ = _specs(folder, info, map_path=map_path, sut=sut)
    return _bundle_imports(sut_spec, roi_spec, sut_given=bool(sut), map_given=bool(map_path))


def replay_bundle(path: str | Path, *, map_path: str | None = None, sut: str | None = None,
                  from_recording: bool = False, trust_code: bool = False,
                  on_code: Callable[[str], None] | None = None) -> ReplayResult:
    """Re-run a bundle and check everything it claims (see the module's docstring).

    ``map_path``/``sut`` override the stored map and SUT name (e.g. on another machine; they are the user's,
    so they may name code). ``trust_code`` allows code the bundle itself names; ``on_code(line)`` is called
    with each such import before it happens. Raises :class:`lidarmt.lidar.specs.UntrustedCodeError` (a user
    error) for code without ``trust_code``, :class:`FuzzInputError` for what is not a readable bundle.
    """
    from lidarmt.io.npz import load_frame_npz
    from lidarmt.lidar.mr1.bundle import relation_of, sut_implementation, violates

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    info = load_bundle(folder)
    if info.get("kind") == "lidar-transform":  # a relation beyond MR1 (lidarmt.lidar): its own checks
        from lidarmt.lidar.replay import replay_transform_bundle

        if from_recording:
            raise FuzzInputError(f"{folder}: --from-recording is for MR1 bundles; this bundle's source.npz is checked "
                                 "against the re-applied transformation instead")
        return replay_transform_bundle(folder, info, map_path=map_path, sut=sut, trust_code=trust_code,
                                       on_code=on_code)
    json_path = folder / "bundle.json"
    config, sut_spec, roi_spec, cfg = _specs(folder, info, map_path=map_path, sut=sut)
    imports = _bundle_imports(sut_spec, roi_spec, sut_given=bool(sut), map_given=bool(map_path))
    res = begin_replay(folder, imports, origin=json_path, trust_code=trust_code, on_code=on_code, info=info)
    check = res.check

    # 2. the files
    _check_files(folder, info, check)

    # 3. bundle.json agrees with itself
    try:
        frame_index, n, trial = int(info["frame_index"]), int(info["n"]), int(info["trial"])
        seed_tuple = [int(v) for v in info["seed_tuple"]]
        relation = str(info["relation"])
        minimal_idx = np.asarray(info["minimal_indices"], dtype=np.int64).reshape(-1)
        stored_verdict = info["verdict"]
    except (KeyError, TypeError, ValueError) as err:
        raise FuzzInputError(f"{json_path}: corrupt bundle.json (bad or missing {err}); it is not a bundle "
                             "lidarmt wrote") from err
    conditioned = hasattr(config, "follow_up_of")  # a search's noise condition names its own seed tuple
    tuple_ok = (seed_tuple[:2] == [config.seed, frame_index] if conditioned
                else seed_tuple == [config.seed, frame_index, n, trial])
    check("bundle.json is consistent",
          tuple_ok and list(info.get("key", [])) == [frame_index, n, trial]
          and relation in ("count", "subset") and n >= 0 and bool(np.all(minimal_idx >= 0))
          and bool(np.all(minimal_idx < n)) and bool(np.all(np.diff(minimal_idx) > 0)),
          "the seed tuple, key, relation or minimal_indices do not fit together")
    if info.get("torch_threads"):  # the same thread count as when the bundle was made
        import torch

        torch.set_num_threads(max(1, min(int(info["torch_threads"]), os.cpu_count() or 1)))

    # 4. frames and added points
    frame = _load(folder, "source.npz", load_frame_npz, check)
    if frame is None:
        return res
    stored_follow = _load(folder, "followup.npz", load_frame_npz, check)
    added = _load(folder, "added.npy", _load_npy, check)
    minimal = _load(folder, "minimal.npy", _load_npy, check)
    if from_recording:
        rec_frame = open_source(config.source)[frame_index]
        check("source frame equals the recording's", _same_points(rec_frame.points, frame.points),
              "the recording's frame differs from the bundle's source.npz")
        frame = replace(rec_frame, labels=None)
    # the gate ran above on all the bundle names; the user's own --sut / --map are theirs to run
    roi = build_roi_provider(roi_spec, origin=None if map_path else json_path, trust_code=trust_code).roi_for(frame)
    sut_obj = build_sut(sut_spec, origin=None if sut else json_path, trust_code=trust_code)
    if not sut:  # the weights the bundle was made with: an older shipped file, or one line saying which
        sut_obj = sut_on_recorded_weights(sut_obj, sut_spec, info, check, origin=json_path, trust_code=trust_code)
    res.implementation = info.get("sut_implementation") if isinstance(info.get("sut_implementation"), str) else None
    res.implementation_now = sut_implementation(sut_obj)
    if conditioned:
        fu = config.follow_up_of(frame, roi, seed_tuple)
    else:
        s, f, nn, t = seed_tuple
        fu = make_follow_up(frame, roi, nn, seed=s, frame_index=f, trial=t, region=config.region)
    if stored_follow is not None:
        check("follow-up regenerated from the seed tuple", _same_points(fu.frame.points, stored_follow.points),
              "the injector produced other points than the stored followup.npz")
    if added is not None:
        check("added points regenerated from the seed tuple", _bits_equal(fu.extra, added),
              f"added.npy ({len(added)} points) differs from the {len(fu.extra)} points the seed tuple gives")
    if minimal is not None:
        ok = len(minimal_idx) == len(minimal) and bool(np.all(minimal_idx < len(fu.extra)))
        check("minimal subset is part of the added points", ok and _bits_equal(fu.extra[minimal_idx], minimal),
              "minimal.npy is not the regenerated added points at bundle.json's minimal_indices")

    # 5. perception and the verdict
    source = guarded_detect(sut_obj, frame, roi)
    follow = guarded_detect(sut_obj, stored_follow if stored_follow is not None else fu.frame, roi)
    stored_s = _load(folder, "obstacles_source.json", _load_json, check)
    stored_f = _load(folder, "obstacles_followup.json", _load_json, check)
    if stored_s is not None:
        res.compare_listed("source obstacles", _norm(source.to_list()), stored_s)
    if stored_f is not None:
        res.compare_listed("follow-up obstacles", _norm(follow.to_list()), stored_f)
    scores = info.get("scores") if isinstance(info.get("scores"), dict) else {}
    res.compare_scores("source scores (full precision)", [o.score for o in source], scores.get("source"))
    res.compare_scores("follow-up scores (full precision)", [o.score for o in follow], scores.get("follow"))
    from lidarmt.lidar.mr1.oracle import without_labels

    v = judge(source, follow)
    res.verdict = verdict = v.to_dict()
    # what the labels say of the lost obstacles (labelled object or junk) annotates the verdict; it is not re-derived
    res.compare_listed("verdict", _norm(verdict), _norm(without_labels(stored_verdict)))
    check("relation", relation_of(v) == relation and violates(v, relation) == bool(info.get("reproduced")),
          f"bundle.json says the {relation} relation is{'' if info.get('reproduced') else ' not'} violated; "
          f"now it is{'' if violates(v, relation) else ' not'}")

    # 6. the minimal subset
    claimed = info.get("minimal_verdict")
    name = f"minimal subset still violates the {relation} relation"
    if claimed is not None:
        stored_m = _load(folder, "obstacles_minimal.json", _load_json, check)
        if minimal is not None:
            o_min = guarded_detect(sut_obj, frame.with_extra_points(minimal), roi)
            v_min = judge(source, o_min)
            check(name, violates(v_min, relation),
                  f"source + the {len(minimal)} point(s) of minimal.npy give {len(o_min)} obstacles, "
                  f"{len(source)} without: no {relation} violation")
            res.compare_listed("minimal verdict", _norm(v_min.to_dict()), _norm(claimed))
            if stored_m is not None:
                res.compare_listed("minimal obstacles", _norm(o_min.to_list()), stored_m)
            res.compare_scores("minimal scores (full precision)", [o.score for o in o_min], scores.get("minimal"))
            if (info.get("ddmin") or {}).get("one_minimal") and violates(v_min, relation):

                def fails(subset: np.ndarray) -> bool:
                    return violates(judge(source, guarded_detect(sut_obj, frame.with_extra_points(subset), roi)),
                                    relation)

                res.recheck_one_minimal("minimal subset is 1-minimal", minimal, fails)
        else:
            check(name, False, "minimal.npy cannot be read")
    elif minimal is not None:  # no subset claimed: all the added points (or none, for a flaky pair) were kept
        dd = info.get("ddmin") or {}
        want = 0 if dd.get("stopped") == "empty-fails" else len(fu.extra)
        check("minimal subset", len(minimal) == want and len(minimal_idx) == want,
              f"bundle.json claims no minimal violation, so minimal.npy should hold {want} points, not "
              f"{len(minimal)}")
    from lidarmt.lidar.mr1.bundle import verify_shown_files  # 7. what a person looks at, from the data

    verify_shown_files(folder, info, check, roi=roi)
    return res


# ----------------------------------------------------------------------------------------------- helpers


def _specs(folder: Path, info: dict, *, map_path: str | None, sut: str | None):
    from lidarmt.engine.campaign import config_from_dict

    try:
        cfg = json.loads(json.dumps(info["config"]))  # a copy
        if map_path:
            cfg["roi"]["map"] = map_path
        else:  # paths were stored as given: resolve a relative one against the campaign's folder
            cfg["roi"]["map"] = resolve_path(str(cfg["roi"]["map"]), info.get("cwd"))
        cfg["source"]["path"] = resolve_path(str(cfg["source"]["path"]), info.get("cwd"))
        if sut:
            cfg["sut"]["name"] = sut
        if cfg.get("kind", "lidar-mr1") not in ("lidar-mr1", "lidar-condition"):
            raise ValueError(f"kind {cfg.get('kind')!r} is not a LiDAR bundle")
        config = config_from_dict(cfg)  # MR1 campaigns, or a noise condition found by a search
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise FuzzInputError(f"{folder / 'bundle.json'}: corrupt bundle.json (bad or missing config {err}); it "
                             "is not a bundle lidarmt wrote") from err
    return config, config.sut, config.roi, cfg


def _bundle_imports(sut_spec: SutSpec, roi_spec: RoiSpec, *, sut_given: bool, map_given: bool) -> list[str]:
    imports = [f"SUT {x}" for x in code_in_options(dict(sut_spec.options))] if sut_given else code_in_sut(sut_spec)
    return imports + ([] if map_given else code_in_roi(roi_spec))


def _check_files(folder: Path, info: dict, check: Callable[..., bool]) -> None:
    from lidarmt.engine.manifest import ManifestProblem, read_manifest, verify_manifest

    problems = verify_manifest(folder)
    listed, _ = read_manifest(folder)
    if listed is not None:
        needed = list(REPLAY_INPUTS) + (["obstacles_minimal.json"] if info.get("minimal_verdict") else [])
        problems += [ManifestProblem("unlisted", n, "replay reads it but MANIFEST.json does not list it")
                     for n in needed if n not in listed]
        problems += shown_unlisted(folder, listed)
    if not problems:
        check(CHECK_FILES, True)
    for p in problems:
        check(CHECK_FILES, False, str(p))
    check_mcap(folder, check)


def _load(folder: Path, name: str, loader: Callable[[Path], Any], check: Callable[..., bool]) -> Any:
    """``loader(folder / name)``, or None after failing the check "read NAME" when it cannot be read."""
    path = folder / name
    try:
        if not path.is_file() or path.is_symlink():
            raise FileNotFoundError(f"{name} is missing")
        return loader(path)
    except Exception as err:  # a missing, corrupt or hostile file is a failed check, not a crash
        check(f"read {name}", False, f"{type(err).__name__}: {err}")
        return None


def _load_npy(path: Path) -> np.ndarray:
    with open_readable(path, max_bytes=available_memory(), error=FuzzInputError) as fh:  # never a FIFO
        arr = np.load(fh, allow_pickle=False)
    if arr.ndim != 1 or arr.dtype.names is None or not {"x", "y", "z"} <= set(arr.dtype.names):
        raise ValueError(f"{path.name} does not hold a list of points (structured array with x, y, z)")
    return arr


def _load_json(path: Path) -> Any:
    return read_json(path, error=FuzzInputError)


def _same_points(a: np.ndarray, b: np.ndarray) -> bool:
    if len(a) != len(b):
        return False
    names = [n for n in ("x", "y", "z", "intensity") if n in (a.dtype.names or ()) and n in (b.dtype.names or ())]
    return all(np.array_equal(a[n], b[n]) for n in names)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same fields, same shapes, same bytes in every field (NaN payloads and -0.0 included)."""
    if a.shape != b.shape or a.dtype.names != b.dtype.names:
        return False
    if a.dtype.names is None:
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return all(a.dtype[n] == b.dtype[n] and a[n].tobytes() == b[n].tobytes() for n in a.dtype.names)


def _norm(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))
