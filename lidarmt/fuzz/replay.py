"""Replay a bug bundle: rebuild the SUT and ROI, perceive the stored frames again, compare bit for bit.

The bundle's frames (``source.npz``, ``followup.npz``) are used, so the recording is not needed; the follow-up
is also regenerated from the seed tuple and must equal the stored one exactly (this checks the injector).
With ``from_recording=True`` the source frame is read from the recording instead and must equal the stored one.
Obstacles are compared as their JSON lists (the same rounding as the bundle), and so is the verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt.fuzz.campaign import CampaignConfig, Evaluator
from lidarmt.fuzz.errors import FuzzInputError
from lidarmt.fuzz.inject import make_follow_up
from lidarmt.fuzz.oracle import judge
from lidarmt.fuzz.plugins import RoiSpec, SutSpec, build_roi_provider, build_sut
from lidarmt.types import Obstacles


@dataclass(slots=True)
class ReplayResult:
    bundle: Path
    same: bool
    checks: dict[str, bool] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None


def load_bundle(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    j = p / "bundle.json" if p.is_dir() else p
    if not j.is_file():
        raise FuzzInputError(f"{path}: not a bug bundle (no bundle.json); give a runs/NAME/violations/<id> folder")
    try:
        info = json.loads(j.read_text(encoding="utf-8"))
    except ValueError as err:
        raise FuzzInputError(f"{j}: corrupt bundle.json ({err})") from err
    if info.get("version") != 1:
        raise FuzzInputError(f"{j}: bundle format {info.get('version')} is not supported")
    return info


def replay_bundle(path: str | Path, *, map_path: str | None = None, sut: str | None = None,
                  from_recording: bool = False) -> ReplayResult:
    """Re-run a bundle; ``map_path``/``sut`` override the stored map and SUT name (e.g. on another machine)."""
    from lidarmt.io.npz import load_frame_npz

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    info = load_bundle(folder)
    cfg = info["config"]
    if map_path:
        cfg["roi"]["map"] = map_path
    else:  # paths were stored as given: resolve a relative one against the campaign's folder
        cfg["roi"]["map"] = _resolve(cfg["roi"]["map"], info.get("cwd"))
    cfg["source"]["path"] = _resolve(cfg["source"]["path"], info.get("cwd"))
    if sut:
        cfg["sut"]["name"] = sut
    config = CampaignConfig.from_dict(cfg)
    res = ReplayResult(folder, True)
    if info.get("torch_threads"):  # the same thread count as when the bundle was made
        import torch

        torch.set_num_threads(int(info["torch_threads"]))

    def check(name: str, ok: bool, detail: str = "") -> None:
        res.checks[name] = bool(ok)
        if not ok:
            res.same = False
            res.details.append(f"{name}: {detail}" if detail else name)

    frame = load_frame_npz(folder / "source.npz")
    stored_follow = load_frame_npz(folder / "followup.npz")
    if from_recording:
        ev = Evaluator(config)
        rec_frame, roi = ev.load(int(info["frame_index"]))
        check("source frame equals the recording's", _same_points(rec_frame.points, frame.points),
              "the recording's frame differs from the bundle's source.npz")
        frame = replace(rec_frame, labels=None)
        sut_obj = ev.sut
    else:
        sut_obj = build_sut(SutSpec.from_dict(cfg["sut"]))
        roi = build_roi_provider(RoiSpec.from_dict(cfg["roi"])).roi_for(frame)
    s, f, n, t = (int(v) for v in info["seed_tuple"])
    fu = make_follow_up(frame, roi, n, seed=s, frame_index=f, trial=t, region=config.region)
    check("follow-up regenerated from the seed tuple", _same_points(fu.frame.points, stored_follow.points),
          "the injector produced other points than the stored followup.npz")
    source = Obstacles(sut_obj.detect(frame, roi))
    follow = Obstacles(sut_obj.detect(stored_follow, roi))
    stored_s = json.loads((folder / "obstacles_source.json").read_text(encoding="utf-8"))
    stored_f = json.loads((folder / "obstacles_followup.json").read_text(encoding="utf-8"))
    check("source obstacles", _norm(source.to_list()) == _norm(stored_s),
          f"{len(source)} obstacles now, {len(stored_s)} stored")
    check("follow-up obstacles", _norm(follow.to_list()) == _norm(stored_f),
          f"{len(follow)} obstacles now, {len(stored_f)} stored")
    verdict = judge(source, follow).to_dict()
    res.verdict = verdict
    check("verdict", _norm(verdict) == _norm(info["verdict"]), "the oracle's verdict differs from bundle.json")
    return res


def _resolve(path: str, cwd: str | None) -> str:
    from lidarmt.fuzz.plugins import is_callable_spec

    if is_callable_spec(path) or Path(path).is_absolute() or Path(path).exists() or not cwd:
        return path
    cand = Path(cwd) / path
    return str(cand) if cand.exists() else path


def _same_points(a: np.ndarray, b: np.ndarray) -> bool:
    if len(a) != len(b):
        return False
    names = [n for n in ("x", "y", "z", "intensity") if n in (a.dtype.names or ()) and n in (b.dtype.names or ())]
    return all(np.array_equal(a[n], b[n]) for n in names)


def _norm(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))
