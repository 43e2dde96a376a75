"""Replay of a LiDAR transformation bundle (:mod:`lidarmt.lidar.bundle`): the manifest, the follow-up re-derived from
the seed and compared bit for bit, the system under test run again on both frames, and the relation's verdict.
Obstacles, facts and findings are compared as the MR1 replay does (:mod:`lidarmt.lidar.mr1.replay`): floats within
their tolerance, differences beyond floats listed while the relation still loses the same source obstacle; ddmin's
1-minimal claim is re-checked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._paths import load_npz, read_json
from lidarmt.lidar.bundle import REPLAY_INPUTS, _lost_source
from lidarmt.lidar.relations import Thresholds, judge_facts


def _norm(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))


def _finding_ids(findings: list[dict[str, Any]]) -> set[tuple]:
    """What each finding is about, whatever its numbers: the source obstacle lost, the follow-up's spurious
    obstacle, or the kind and class of a missed insertion."""
    out = set()
    for x in findings:
        if "source" in x:
            out.add(("source", int(x["source"])))
        elif "follow" in x:
            out.add(("follow", int(x["follow"])))
        else:
            out.add((str(x.get("what")), str(x.get("class")), str(x.get("kind"))))
    return out


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def replay_transform_bundle(folder: Path, info: dict[str, Any], *, map_path: str | None = None,
                            sut: str | None = None, trust_code: bool = False, on_code=None):
    """Re-run a LiDAR-transformation bundle (``info``: its bundle.json); returns a
    :class:`lidarmt.lidar.mr1.replay.ReplayResult`."""
    from lidarmt.engine.errors import FuzzInputError
    from lidarmt.engine.replay import begin_replay, check_mcap, resolve_path, shown_unlisted
    from lidarmt.io.npz import load_frame_npz
    from lidarmt.lidar.campaign import LidarCampaignConfig, LidarEvaluator
    from lidarmt.lidar.changes import edits_origin, follow_roi
    from lidarmt.lidar.specs import code_in_roi, code_in_sut
    from lidarmt.lidar.transforms.base import apply_edits

    json_path = folder / "bundle.json"
    try:
        d = json.loads(json.dumps(info["config"]))
        d["roi"]["map"] = map_path or resolve_path(str(d["roi"]["map"]), info.get("cwd"))
        d["source"]["path"] = resolve_path(str(d["source"]["path"]), info.get("cwd"))
        if d.get("library"):
            d["library"] = resolve_path(str(d["library"]), info.get("cwd"))
        if sut:
            d["sut"]["name"] = sut
        th = Thresholds.from_dict(info["thresholds"])
        cfg = LidarCampaignConfig.from_dict(d, thresholds=th)
        key = tuple(int(v) for v in info["key"])
        stored_findings = info["findings"]
        stored_facts = info["facts"]
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise FuzzInputError(f"{json_path}: corrupt bundle.json (bad or missing {err}); it is not a bundle "
                             "lidarmt wrote") from err
    imports = ([] if sut else code_in_sut(cfg.sut)) + ([] if map_path else code_in_roi(cfg.roi))
    res = begin_replay(folder, imports, origin=json_path, trust_code=trust_code, on_code=on_code, info=info)
    check = res.check

    from lidarmt.engine.manifest import ManifestProblem, read_manifest, verify_manifest

    problems = verify_manifest(folder)
    listed, _ = read_manifest(folder)
    if listed is not None:
        problems += [ManifestProblem("unlisted", n, "replay reads it but MANIFEST.json does not list it")
                     for n in REPLAY_INPUTS if n not in listed]
        problems += shown_unlisted(folder, listed)
    check("file checksums (MANIFEST.json)", not problems, "; ".join(str(p) for p in problems))
    from lidarmt.engine.mcap import LIDAR_TRANSFORM_BUNDLE_TOPICS

    check_mcap(folder, check, LIDAR_TRANSFORM_BUNDLE_TOPICS)
    if problems:
        return res
    from lidarmt.lidar.transforms.registry import complete_recorded

    check("bundle.json is consistent", cfg.seed_of(key) == int(info["seed"])
          and cfg.transforms[key[1]].name == info["transform"] and dict(cfg.transforms[key[1]].params[key[2]])
          == complete_recorded(str(info["transform"]), info["params"]),
          "the key, seed and parameters do not fit together")
    if info.get("torch_threads"):
        import torch

        torch.set_num_threads(max(1, min(int(info["torch_threads"]), os.cpu_count() or 1)))
    frame = load_frame_npz(folder / "source.npz")
    stored_follow = load_frame_npz(folder / "followup.npz")
    stored_min = load_frame_npz(folder / "minimal.npz")
    if info.get("labelled_region") and frame.labels is not None:  # not kept by the .npz: bundle.json has it
        from lidarmt.types import LabelledRegion

        r = info["labelled_region"]
        frame.labels.region = LabelledRegion(float(r["azimuth_min"]), float(r["azimuth_max"]),
                                             None if r.get("max_range") is None else float(r["max_range"]),
                                             str(r.get("source") or ""))
    z = load_npz(folder / "change.npz", error=FuzzInputError)  # a regular file: a FIFO is one line, no wait
    try:
        origin, modified, minimal = z["origin"], z["modified"], z["minimal_edits"]
    except KeyError as err:
        raise FuzzInputError(f"{folder / 'change.npz'}: lacks the array {err}") from err
    ev = LidarEvaluator(cfg, enforce_timeout=False, trust_code=trust_code, origin=None if sut else json_path)
    if not sut:  # the weights the bundle was made with: an older shipped file, or one line saying which
        from lidarmt.lidar.specs import sut_on_recorded_weights

        ev.sut = sut_on_recorded_weights(ev.sut, cfg.sut, info, check, origin=json_path, trust_code=trust_code)
    from lidarmt.lidar.mr1.bundle import sut_implementation

    res.implementation = info.get("sut_implementation") if isinstance(info.get("sut_implementation"), str) else None
    res.implementation_now = sut_implementation(ev.sut)
    roi = ev.rois.roi_for(frame)
    if info.get("library"):  # the objects insert cuts from: the same library, before it is used
        now = ev.library().fingerprint()
        check("object library (SHA-256)", now == info["library"]["sha256"],
              f"{now} now, {info['library']['sha256']} stored (another recording or --library)")
    change = ev.change(frame, roi, key)
    check("follow-up regenerated from the seed", _bits_equal(change.frame.points, stored_follow.points),
          "the transformation produced other points than followup.npz")
    check("provenance of the follow-up's points", _bits_equal(np.asarray(change.origin, np.int64), origin)
          and _bits_equal(np.asarray(change.modified, bool), modified), "origin/modified differ from change.npz")
    from lidarmt.lidar.transforms.base import n_edits

    edits = int(n_edits(change))
    ok_idx = len(minimal) == 0 or (int(minimal.min()) >= 0 and int(minimal.max()) < edits)
    keep = np.zeros(edits, dtype=bool)
    if ok_idx:
        keep[minimal] = True
    mframe = apply_edits(frame, change, keep)
    check("minimal frame rebuilt from the minimal edits", ok_idx and _bits_equal(mframe.points, stored_min.points),
          "source + change.npz's minimal_edits differ from minimal.npz")
    from lidarmt.lidar.perception.guard import guarded_detect

    source = guarded_detect(ev.sut, frame, roi)
    fro = follow_roi(roi, change)
    follow = guarded_detect(ev.sut, stored_follow, fro)
    res.compare_listed("source obstacles", _norm(source.to_list()),
                       read_json(folder / "obstacles_source.json", error=FuzzInputError))
    res.compare_listed("follow-up obstacles", _norm(follow.to_list()),
                       read_json(folder / "obstacles_followup.json", error=FuzzInputError))
    scores = info.get("scores") if isinstance(info.get("scores"), dict) else {}
    res.compare_scores("source scores (full precision)", [o.score for o in source], scores.get("source"))
    res.compare_scores("follow-up scores (full precision)", [o.score for o in follow], scores.get("follow"))
    facts = ev.facts(frame, source, change, follow)
    res.compare_listed("facts", _norm(facts), _norm(stored_facts))
    lost = judge_facts(facts, info["relation"], th)
    # the relation holds again when one of its findings is one found before (or none, for a bundle that had none)
    again = bool(_finding_ids(lost) & _finding_ids(stored_findings)) if stored_findings else not lost
    check("relation still violated", again and bool(lost) == bool(info["reproduced"]),
          f"{len(lost)} findings now, {len(stored_findings)} stored; none of them is one found before")
    res.compare_listed("findings", _norm(lost), _norm(stored_findings))
    res.verdict = {"findings": lost}
    if info.get("minimal_findings") is not None:
        o_min = guarded_detect(ev.sut, mframe, fro)
        mf = ev.facts(frame, source, change, o_min, follow_frame=mframe, origin=edits_origin(change, keep))
        ml = judge_facts(mf, info["relation"], th)
        target = _lost_source(lost)
        check("minimal edits still lose the obstacle", bool(_lost_source(ml) & target),
              "source + the minimal edits lose none of the obstacles the whole change lost")
        res.compare_listed("minimal findings", _norm(ml), _norm(info["minimal_findings"]))
        if (folder / "obstacles_minimal.json").is_file():
            res.compare_listed("minimal obstacles", _norm(o_min.to_list()), read_json(
                folder / "obstacles_minimal.json", error=FuzzInputError))
        res.compare_scores("minimal scores (full precision)", [o.score for o in o_min], scores.get("minimal"))
        if (info.get("ddmin") or {}).get("one_minimal") and ok_idx and _lost_source(ml) & target:

            def fails(subset: np.ndarray) -> bool:
                k = np.zeros(edits, dtype=bool)
                k[subset] = True
                fr = apply_edits(frame, change, k)
                o = guarded_detect(ev.sut, fr, fro)
                got = judge_facts(ev.facts(frame, source, change, o, follow_frame=fr, origin=edits_origin(change, k)),
                                  info["relation"], th)
                return bool(_lost_source(got) & target)

            res.recheck_one_minimal("minimal edits are 1-minimal", np.asarray(minimal, np.int64), fails)
    from lidarmt.lidar.bundle import verify_shown_files  # what a person looks at, from the stored data

    verify_shown_files(folder, info, check, frame=frame, roi=roi, change=change)
    return res
