"""Bug bundles of LiDAR-transformation relations, and their replay.

A bundle is a folder ``runs/NAME/violations/<id>/`` (id = ``<transformation>-<level>-f<frame>-t<trial>``):

* ``source.npz`` and ``followup.npz`` (lossless frames; replay reads the source only from here), ``source.pcd``
  and ``followup.pcd`` for viewers;
* ``change.npz``: the change's provenance (``origin``, ``modified``, ``geometry``, ``inserted``, ``removed``) and
  ``minimal_edits``, the indices of a 1-minimal subset of its point edits (dropped, modified, added; see
  :func:`lidarmt.lidar.transforms.base.apply_edits`) that still loses an obstacle the whole change lost, found by
  delta debugging; ``minimal.npz`` is the source with only those edits;
* ``obstacles_source.json``, ``obstacles_followup.json`` (and ``obstacles_minimal.json``);
* ``bev_source.png``, ``bev_followup.png``: both sweeps from above with their obstacles;
* ``bundle.mcap`` and ``foxglove-layout.json``: the same violation for Foxglove
  (:func:`lidarmt.engine.mcap.write_lidar_bundle_mcap`): both clouds, the added points, the points the minimal
  edits touch, the obstacles of both sweeps (the lost ones red), the inserted/removed boxes and the ROI;
* ``report.md`` and ``bundle.json`` (configuration, key, seed, parameters, thresholds, facts and findings);
* ``MANIFEST.json`` (:mod:`lidarmt.engine.manifest`): the SHA-256 of every other file, checked first by replay.

Delta debugging minimises only losses of source obstacles in a sweep whose points stay where they were (a
rotation or mirror is one rigid move, not a set of independent edits; a missed insertion cannot be made more
missed by fewer points), and says so in ``bundle.json`` otherwise.

Replay rebuilds the transformation (a registered name or installed plug-in), re-applies it to ``source.npz`` with
the stored seed and parameters (the follow-up and its provenance must equal the stored ones bit for bit),
rebuilds the minimal frame from ``minimal_edits``, perceives all three again and compares the obstacles, the
facts and the findings with the stored ones.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._machine import record as machine_record
from lidarmt._paths import load_npz, read_json
from lidarmt._show import md_code, md_code_line
from lidarmt.errors import OutputError
from lidarmt.lidar.mr1.bundle import full_scores, sut_implementation
from lidarmt.lidar.relations import Thresholds, judge_facts
from lidarmt.lidar.specs import weights_sha256

BUNDLE_VERSION = 2  # the LiDAR bundles' format (MANIFEST.json); "kind" tells the relations apart
KIND = "lidar-transform"
REPLAY_INPUTS = ("bundle.json", "source.npz", "followup.npz", "change.npz", "minimal.npz",
                 "obstacles_source.json", "obstacles_followup.json")


def _lost_source(lost: list[dict[str, Any]]) -> set[int]:
    return {int(x["source"]) for x in lost if "source" in x}


def findings_text(lost: list[dict[str, Any]], limit: int = 3) -> str:
    """``"[high, labelled object] car 12.3 m away (4.1×1.8×1.5 m, vanished)"`` per lost requirement, most severe
    first, then nearest (:mod:`lidarmt.engine.findings`)."""
    from lidarmt.engine.findings import evidence, severity, severity_rank

    items = sorted(lost, key=lambda x: (severity_rank(severity(x)), float(x["distance"])))
    parts = [f"[{severity(x)}, {evidence(x)}] {x['what']} {float(x['distance']):.1f} m away "
             f"({'×'.join(f'{v:.1f}' for v in x['size'])} m, {x['kind']})" for x in items]
    return "; ".join(parts[:limit]) + (f"; … {len(parts) - limit} more" if len(parts) > limit else "")


def make_transform_bundle(ev, key: tuple[int, ...], out_dir: Path, *, budget: int = 200, command: str = "",
                          thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    """Recompute pair ``key`` with evaluator ``ev``, minimise its change and write its bundle to ``out_dir``."""
    from lidarmt.engine.campaign import environment
    from lidarmt.engine.ddmin import ddmin
    from lidarmt.engine.verify import SHOWN_VERSION
    from lidarmt.lidar.changes import edits_origin, follow_roi
    from lidarmt.lidar.transforms.base import apply_edits, n_edits

    th = Thresholds.from_dict(thresholds) if thresholds is not None else ev.config.thresholds
    cfg = ev.config
    f, t, lv, r = key
    ref = cfg.transforms[t]
    j = ev.judge_key(key)
    lost = judge_facts(j.facts, ref.relation, th)
    change = j.change
    edits = int(n_edits(change))
    target = _lost_source(lost)
    dd = None
    why_not = None
    minimal = np.arange(edits, dtype=np.int64)
    minimal_obs = None
    minimal_lost = None
    if not lost:
        why_not = "the pair does not violate its relation when recomputed"
    elif change.geometry is not None:
        why_not = "a rotation or mirror moves the whole sweep at once: not a set of independent point edits"
    elif not target:
        why_not = "only a missed insertion: fewer inserted points cannot make it more missed"
    elif budget <= 0:
        why_not = "--ddmin-budget 0"
    roi_f = follow_roi(j.roi, change)

    def partial(subset: np.ndarray) -> tuple[Any, np.ndarray]:
        keep = np.zeros(edits, dtype=bool)
        keep[subset] = True
        return apply_edits(j.frame, change, keep), edits_origin(change, keep)

    def judge_subset(subset: np.ndarray):
        fr, origin = partial(subset)
        obs = ev.detect(fr, roi_f)
        facts = ev.facts(j.frame, j.source, change, obs, follow_frame=fr, origin=origin)
        return obs, facts, judge_facts(facts, ref.relation, th)

    if why_not is None:
        def fails(subset: np.ndarray) -> bool:
            try:
                _, _, got = judge_subset(subset)
            except Exception:  # a crash is another failure, not this violation
                return False
            return bool(_lost_source(got) & target)

        dd = ddmin(np.arange(edits), fails, budget=budget, check_full=False)
        minimal = dd.items
        if dd.stopped != "empty-fails":
            minimal_obs, minimal_facts, minimal_lost = judge_subset(minimal)
    keep = np.zeros(edits, dtype=bool)
    keep[minimal] = True
    minimal_frame = apply_edits(j.frame, change, keep)
    info: dict[str, Any] = {
        "version": BUNDLE_VERSION, "kind": KIND, "id": out_dir.name, "key": list(key), "config": cfg.to_dict(),
        "frame_index": f, "transform": ref.name, "family": ev.transforms[t].family, "level": ref.levels[lv],
        "params": dict(ref.params[lv]), "trial": r, "seed": cfg.seed_of(key), "relation": ref.relation,
        "thresholds": th.to_dict(), "facts": j.facts, "findings": lost, "reproduced": bool(lost),
        "edits": edits, "change_info": _json_safe(change.info),
        "n_source": len(j.source), "n_follow": len(j.follow),
        "ddmin": dd.to_dict() if dd else None, "ddmin_skipped": why_not,
        "minimal_findings": minimal_lost, "sut_name": str(getattr(ev.sut, "name", cfg.sut.name)),
        "sut_weights": getattr(ev.sut, "weights_label", None),
        "sut_implementation": sut_implementation(ev.sut),  # e.g. exact-v2: replay names it when it differs
        "sut_weights_sha256": weights_sha256(ev.sut),  # replay finds these weights by it (issue 32)
        "environment": environment(), "command": command, "cwd": os.getcwd(),
        "torch_threads": _torch_threads(),
        "shown": SHOWN_VERSION,  # replay regenerates the files a person looks at (lidarmt.engine.verify)
        "machine": machine_record(),  # the CPU (and its ISA) the numbers were made on: replay names it
        "scores": full_scores(j.source, j.follow, minimal_obs),
    }
    region = getattr(j.frame.labels, "region", None)
    if region is not None:  # the labelled view (KITTI's camera): the label ROI and the labels' verdicts need it
        info["labelled_region"] = {"azimuth_min": region.azimuth_min, "azimuth_max": region.azimuth_max,
                                   "max_range": region.max_range, "source": region.source}
    if getattr(ev, "_library", None) is not None:  # insert cut its object from this library
        info["library"] = {"path": cfg.library or cfg.source.path, "objects": len(ev._library),
                           "sha256": ev._library.fingerprint()}
    info["replay_command"] = f"lidarmt replay {shlex.quote(str(out_dir))}"
    _write(out_dir, info, j, change, minimal, minimal_frame, minimal_obs)
    return {"id": out_dir.name, "key": list(key), "transform": ref.name, "level": ref.levels[lv],
            "relation": ref.relation, "reproduced": info["reproduced"], "findings": findings_text(lost),
            "nearest_m": min((float(x["distance"]) for x in lost), default=None), "edits": edits,
            "ddmin": info["ddmin"], "ddmin_skipped": why_not}


def _page(tmp: Path, md: str, info: dict[str, Any], j) -> None:
    """The bundle's page (report.html): both bird's-eye views at full size, both obstacle tables (the lost
    ones marked), the commands."""
    from lidarmt.engine.html import obstacle_table, write_bundle_page

    lost = {int(x["source"]): f"{x.get('kind', 'lost')}" for x in info.get("findings") or []
            if x.get("source") is not None}
    commands = [info["replay_command"]]
    if info.get("command"):
        commands += ["# the campaign that found it:", info["command"]]
    write_bundle_page(tmp, md, name=info["id"], pictures=[("bev_source.png", "source"),
                                         ("bev_followup.png", f"follow-up: {info['transform']} ({info['level']})")],
                      tables=[(f"source: {len(j.source)} obstacles",
                               obstacle_table(j.source.to_list(with_points=False), ident="source-table", lost=lost)),
                              (f"follow-up: {len(j.follow)} obstacles",
                               obstacle_table(j.follow.to_list(with_points=False), ident="followup-table"))],
                      commands=commands)


def _torch_threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def _json_safe(obj: Any) -> Any:
    from lidarmt.lidar.changes import jsonable as _jsonable

    return _jsonable(obj) if isinstance(obj, dict) else obj


def _write(out_dir: Path, info: dict[str, Any], j, change, minimal: np.ndarray, minimal_frame, minimal_obs) -> None:
    from lidarmt._atomic import staging_folder
    from lidarmt.engine.manifest import write_manifest
    from lidarmt.io import save_frame_npz

    tmp = staging_folder(out_dir)  # the user's usual folder mode, not mkdtemp's 0700
    try:
        save_frame_npz(tmp / "source.npz", j.frame)
        save_frame_npz(tmp / "followup.npz", change.frame)
        save_frame_npz(tmp / "minimal.npz", minimal_frame)
        geo = np.zeros((0, 3)) if change.geometry is None else np.asarray(change.geometry, dtype=np.float64)
        _save_npz(tmp / "change.npz", origin=np.asarray(change.origin, dtype=np.int64),
                  modified=np.asarray(change.modified, dtype=bool), geometry=geo, inserted=change.inserted,
                  removed=change.removed, minimal_edits=np.asarray(minimal, dtype=np.int64))
        _json(tmp / "obstacles_source.json", j.source.to_list())
        _json(tmp / "obstacles_followup.json", j.follow.to_list())
        if minimal_obs is not None:
            _json(tmp / "obstacles_minimal.json", minimal_obs.to_list())
        _json(tmp / "bundle.json", info)  # before the shown files: the bundle's page lists every file
        write_shown(tmp, info, _as_stored(tmp, j), change, minimal)  # what replay regenerates from the data
        write_manifest(tmp, sorted(p.name for p in tmp.iterdir() if p.is_file()))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write bundle {out_dir}: {err.strerror or err}") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _as_stored(folder: Path, j):
    """``j`` with its obstacle lists as the bundle in ``folder`` stores them (its JSON rounds boxes to 0.1 mm): the
    shown files are drawn from these at creation and at replay alike (:func:`verify_shown_files`)."""
    from types import SimpleNamespace

    from lidarmt.types import Obstacles

    obs = {k: Obstacles.from_list(read_json(folder / f"obstacles_{k}.json")) for k in ("source", "followup")}
    return SimpleNamespace(frame=j.frame, source=obs["source"], follow=obs["followup"], roi=j.roi)


def write_shown(tmp: Path, info: dict[str, Any], j, change, minimal: np.ndarray) -> None:
    """Write the files of a bundle a person looks at into ``tmp`` (the PCDs, the pictures, ``bundle.mcap`` with
    its Foxglove layout, ``report.md``, the bundle's page ``report.html``) from ``j`` (``frame``, ``source``, ``follow``, ``roi``) and the change."""
    from lidarmt.io import write_pcd
    from lidarmt.lidar.bev import draw_bev
    from lidarmt.lidar.changes import follow_roi

    write_pcd(tmp / "source.pcd", j.frame)
    write_pcd(tmp / "followup.pcd", change.frame)
    roi_idx = np.asarray(j.roi.indices(j.frame), dtype=np.int64)
    ext = 50.0
    draw_bev(j.frame, j.source, roi_indices=roi_idx, out=tmp / "bev_source.png", extent=ext,
             title=f"source: {len(j.source)} obstacles")
    fro = follow_roi(j.roi, change)
    added = np.flatnonzero(change.origin < 0)
    draw_bev(change.frame, j.follow, roi_indices=np.asarray(fro.indices(change.frame), dtype=np.int64),
             out=tmp / "bev_followup.png", extent=ext,
             title=f"{info['transform']} ({info['level']}): {len(j.follow)} obstacles",
             added_from=int(added[0]) if len(added) else None)
    _write_mcap(tmp, info, j, change, minimal, roi_idx)
    md = _markdown(info)
    (tmp / "report.md").write_text(md, encoding="utf-8")
    _page(tmp, md, info, j)


#: The files of a LiDAR-transformation bundle that are its data: replay reads and checks them itself.
DATA_FILES = ("bundle.json", "source.npz", "followup.npz", "minimal.npz", "change.npz", "obstacles_source.json",
              "obstacles_followup.json", "obstacles_minimal.json")


def verify_shown_files(folder: Path, info: dict[str, Any], check: Any, *, frame, roi, change) -> None:
    """Replay's check of every file of the bundle a person looks at (:func:`lidarmt.engine.verify.verify_shown`):
    written again by :func:`write_shown` from the bundle's stored frame and obstacle lists, the ROI replay
    rebuilt and the change it re-derived from the seed (which replay compares with followup.npz and change.npz)."""
    from types import SimpleNamespace

    from lidarmt.engine.verify import PIXEL_STEP_DRAWN, SHOWN_VERSION, verify_shown

    def regenerate(out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        j = _as_stored(folder, SimpleNamespace(frame=frame, roi=roi))
        write_shown(out, info, j, change, np.asarray(_minimal_edits(folder), dtype=np.int64))

    verify_shown(folder, check, regenerate, data=DATA_FILES, layout_kind="lidar-bundle",
                 strict=info.get("shown") == SHOWN_VERSION, pixel_step=PIXEL_STEP_DRAWN)


def _minimal_edits(folder: Path) -> np.ndarray:
    """The minimal edits change.npz stores."""
    return np.asarray(load_npz(folder / "change.npz")["minimal_edits"], dtype=np.int64)


def minimal_points(source, change, minimal: np.ndarray) -> np.ndarray:
    """(N, 4) x, y, z, intensity of the points the edits ``minimal`` touch (edit order as
    :func:`lidarmt.lidar.transforms.base.apply_edits`: dropped ones where they were in the source, modified and
    added ones where they are in the follow-up)."""
    dropped = np.asarray(change.dropped, dtype=np.int64)
    follow_idx = np.r_[np.flatnonzero(change.modified & (change.origin >= 0)), np.flatnonzero(change.origin < 0)]
    m = np.asarray(minimal, dtype=np.int64)
    rows = []
    for pts in (source.points[dropped[m[m < len(dropped)]]],
                change.frame.points[follow_idx[m[m >= len(dropped)] - len(dropped)]]):
        inten = pts["intensity"] if "intensity" in (pts.dtype.names or ()) else np.zeros(len(pts))
        rows.append(np.c_[pts["x"], pts["y"], pts["z"], inten].astype(np.float64))
    return np.concatenate(rows).reshape(-1, 4)


def _write_mcap(tmp: Path, info: dict[str, Any], j, change, minimal: np.ndarray, roi_idx: np.ndarray) -> None:
    from lidarmt.engine.mcap import (
        BUNDLE_MCAP,
        LAYOUT_NAME,
        TOPIC_CHANGE_BOXES,
        write_layout,
        write_lidar_bundle_mcap,
    )

    lost = {}
    for x in info["findings"]:
        if "source" in x:
            lost[int(x["source"])] = str(x["kind"])
    write_lidar_bundle_mcap(tmp / BUNDLE_MCAP, frame=j.frame, follow_frame=change.frame, source=j.source,
                            follow=j.follow, verdict=None, minimal=None, roi=j.roi, roi_indices=roi_idx, lost=lost,
                            added=np.flatnonzero(change.origin < 0),
                            minimal_xyzi=minimal_points(j.frame, change, minimal) if info.get("ddmin") else None,
                            inserted=change.inserted, removed=change.removed,
                            info={k: info[k] for k in ("id", "relation", "transform", "level", "frame_index")})
    write_layout(tmp / LAYOUT_NAME, "lidar-bundle", frame_id=j.frame.frame_id,
                 topics={"3D!followup": {TOPIC_CHANGE_BOXES: {"visible": True}}})


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            zi = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(zi, "w") as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")


RELATION_TEXT = {
    "robustness": "obstacles within D of the sensor that keep at least k points must persist",
    "insertion": "the inserted object must be detected, and every obstacle it does not occlude must persist",
    "removal": "every obstacle the removal leaves whole must persist",
    "equivariance": "the follow-up's obstacles must map onto the moved source obstacles, one to one",
}


def _markdown(info: dict[str, Any]) -> str:
    cfg = info["config"]
    th = Thresholds.from_dict(info["thresholds"])
    dd = info.get("ddmin")
    lines = [
        f"# {info['relation']} violated under {info['transform']} ({info['level']}) on frame {info['frame_index']}",
        "",
        f"**Relation.** {info['relation']}: {RELATION_TEXT.get(info['relation'], '')}. Thresholds: {th.describe()}.",
        "",
        f"- source frame {info['frame_index']} of {md_code(cfg['source']['path'])}: {info['n_source']} obstacles; "
        f"follow-up: {info['n_follow']} obstacles",
        f"- transformation {md_code(info['transform'])} ({info['family']}) at "
        f"{md_code(json.dumps(info['params'], sort_keys=True))}, seed "
        f"{info['seed']}: {info['edits']} point edits",
    ]
    from lidarmt.engine.findings import SEVERITY_RULE, evidence, severity, severity_rank

    for x in sorted(info["findings"], key=lambda x: (severity_rank(severity(x)), float(x["distance"]))):
        lines.append(f"- **{severity(x)}** ({evidence(x)}"
                     + (f", {x['lane']} the ego lane" if x.get("lane") in ("in", "next") else "") + "): "
                     f"lost: {x['what']} ({x['class']}) {float(x['distance']):.1f} m away, "
                     f"{'×'.join(f'{v:.1f}' for v in x['size'])} m, {x.get('points', '?')} points, {x['kind']}")
    lines.append(f"- {SEVERITY_RULE}")
    if dd:
        lines.append(f"- delta debugging: **{dd['size']}** of the {info['edits']} edits still lose it "
                     f"({'1-minimal' if dd['one_minimal'] else 'not proven 1-minimal: ' + dd['stopped']}, "
                     f"{dd['calls']} perception runs): `minimal.npz`")
    elif info.get("ddmin_skipped"):
        lines.append(f"- not minimised: {info['ddmin_skipped']}")
    if not info["reproduced"]:
        lines.append("- **note**: recomputing the pair did not reproduce the violation")
    lines += ["", "![source](bev_source.png) ![follow-up](bev_followup.png)", "", "**Reproduce.**", "", "```sh",
              md_code_line(info["replay_command"])]
    if info.get("command"):
        lines.append(f"# the campaign that found it:\n{md_code_line(info['command'])}")
    env = info["environment"]
    lines += ["```", "", f"lidarmt {env.get('lidarmt')}, torch {env.get('torch', '–')}, numpy {env.get('numpy')}, "
              f"{env.get('cpu')}.", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- replay


