"""Bug bundles: everything needed to look at, report and replay one MR1 violation.

A bundle is a folder ``runs/NAME/violations/<id>/`` (id = ``n<N>-f<frame>-t<trial>``) holding:

* ``source.pcd``, ``followup.pcd`` (the follow-up holds the added points after the source points) and the
  lossless ``source.npz``, ``followup.npz`` (what ``lidarmt replay`` reads, so the recording is not needed);
* ``added.npy`` (the injected points) and ``minimal.npy`` (a 1-minimal subset of them that still causes the
  violation, found by ddmin with a capped number of perception calls; ``bundle.json`` says whether
  1-minimality was reached), with ``minimal.pcd`` (source + minimal subset);
* ``obstacles_source.json``, ``obstacles_followup.json`` (and ``obstacles_minimal.json``);
* ``bev.png``: source and follow-up side by side from above, the lost obstacles marked;
* ``replay.bag``: a ROS1 bag with both frames on the original topic and /tf, to replay in a real stack;
* ``bundle.mcap`` and ``foxglove-layout.json``: the same violation for Foxglove (:mod:`lidarmt.engine.mcap`):
  both clouds, the added and the minimal points, the obstacles coloured by class with the lost ones red, the
  ROI's polygons and the sensor pose;
* ``report.md`` (ready to paste into an issue tracker) and ``bundle.json`` (SUT spec, map, recording,
  frame index, seed tuple, the indices of the minimal subset among the added points, verdicts: what
  ``lidarmt replay`` checks bit for bit);
* ``MANIFEST.json`` (:mod:`lidarmt.engine.manifest`), written last: the SHA-256 and size of every other file,
  so that replay can tell a file that went missing or changed on the way.

The folder is built beside its final place and renamed into it, so a bundle is either complete or absent.
A bundle is data: ``lidarmt replay`` builds only registered SUTs and map files from it unless the user passes
``--trust-code`` (see :func:`lidarmt.lidar.specs.check_trust`).

Format versions: 1 had no manifest and no ``minimal_indices``; 2 (this one) adds both. Replay refuses 1.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._atomic import atomic_path, atomic_write_text
from lidarmt._limits import available_memory
from lidarmt._machine import record as machine_record
from lidarmt._paths import open_readable, read_json
from lidarmt._show import md_code, md_code_line
from lidarmt.engine.ddmin import ddmin
from lidarmt.engine.manifest import write_manifest
from lidarmt.errors import OutputError
from lidarmt.lidar.mr1.oracle import Verdict, follow_names, judge
from lidarmt.lidar.specs import weights_sha256
from lidarmt.types import Frame, Obstacles

BUNDLE_VERSION = 2


def _star_size(k: int) -> float:
    """Marker area of the highlighted (minimal) points: large for a few, smaller when there are many."""
    return 140.0 if k <= 20 else 60.0 if k <= 100 else 25.0


def _torch_threads() -> int | None:
    """Threads torch used (replay uses as many: a CNN's sums may depend on how work is split)."""
    import sys

    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def _mode(sut, cfg: dict) -> str:
    """The SUT's numeric mode (ApolloLOP: config.mode), for the environment section."""
    mode = getattr(getattr(sut, "config", None), "mode", None) or cfg["sut"]["options"].get("mode")
    return str(mode) if mode else "default"


def sut_implementation(sut) -> str | None:
    """The implementation the SUT's numbers come from (ApolloLOP: ``exact-v2``, ``fast-bf16``, ``onnxruntime``; see
    :data:`lidarmt.lidar.perception.apollo.config.EXACT_IMPLEMENTATIONS`), None for a SUT that names none. Bundles
    record it; replay says when the bundle was made with another one (its numbers may then move within the
    tolerances, like on another CPU)."""
    got = getattr(sut, "implementation", None)
    return str(got) if got is not None else None


def _shown_version() -> int:
    from lidarmt.engine.verify import SHOWN_VERSION

    return SHOWN_VERSION


def relation_of(verdict: Verdict) -> str:
    """The relation a bundle is about: the study's count relation when it fails, else the subset relation."""
    return "count" if verdict.count_violation else "subset"


def violates(verdict: Verdict, relation: str) -> bool:
    return verdict.count_violation if relation == "count" else verdict.subset_violation


def lost_text(verdict: Verdict) -> str:
    """``"1 merged, 2 vanished"``: how many source obstacles were lost, and how."""
    kinds: dict[str, int] = {}
    for m in verdict.missing:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in kinds.items()) or "none unmatched"


def lost_details(verdict: Verdict, *, limit: int = 3) -> str:
    """What was lost, per obstacle, most severe first (:mod:`lidarmt.engine.findings`):
    ``"#4 car merged [high, labelled object] (LABELLED car (IoU 0.71), 812 pts, 4.2×1.8×1.5 m, 13.0 m away)"``,
    ``limit`` at most."""
    from lidarmt.engine.findings import evidence, severity, severity_rank

    ms = sorted(verdict.missing, key=lambda m: (severity_rank(severity(m.to_dict())), m.source))
    items = [f"#{m.source} {m.cls.value} {m.kind} [{severity(m.to_dict())}, {evidence(m.to_dict())}"
             + (f", {m.lane} the ego lane" if m.lane in ("in", "next") else "") + "]"
             + (f" ({m.what()})" if m.what() else "") for m in ms]
    more = f"; … {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def full_scores(source: Obstacles, follow: Obstacles, minimal: Obstacles | None) -> dict[str, Any]:
    """The obstacles' scores at full precision (the JSON lists round them to 6 decimals), so that replay can
    tell bit for bit from within tolerance (:meth:`lidarmt.engine.replay.ReplayResult.compare_scores`)."""
    return {"source": [float(o.score) for o in source], "follow": [float(o.score) for o in follow],
            "minimal": None if minimal is None else [float(o.score) for o in minimal]}


def make_bundle(ev, key: tuple[int, int, int], out_dir: Path, *, budget: int = 200, command: str = "") -> dict:
    """Recompute pair ``key`` with evaluator ``ev``, minimise it and write its bundle to ``out_dir``."""
    from lidarmt.engine.campaign import environment

    frame, roi, fu, source, follow, verdict = ev.judge_key(key)
    relation = relation_of(verdict)
    reproduced = violates(verdict, relation)
    extra = fu.extra

    def fails(subset: np.ndarray) -> bool:
        try:
            o2 = ev.detect(frame.with_extra_points(extra[subset]), roi)
        except Exception:  # a crash is another failure, not this violation
            return False
        return violates(judge(source, o2), relation)

    dd = None
    minimal = np.arange(len(extra), dtype=np.int64)
    minimal_obs: Obstacles | None = None
    if reproduced and budget > 0:
        dd = ddmin(np.arange(len(extra)), fails, budget=budget, check_full=False)
        minimal = dd.items
        if dd.stopped != "empty-fails":
            minimal_obs = ev.detect(frame.with_extra_points(extra[minimal]), roi)
    cfg = ev.config.to_dict()
    topic = (frame.provenance.topic if frame.provenance and frame.provenance.topic else None) or cfg["source"].get("topic")
    info: dict[str, Any] = {
        "version": BUNDLE_VERSION,
        "id": out_dir.name,
        "key": list(key),
        "relation": relation,
        "reproduced": reproduced,
        "seed_tuple": list(fu.seed),
        "frame_index": key[0],
        "n": key[1],
        "trial": key[2],
        "base": fu.base,
        "config": cfg,
        "sut_name": str(getattr(ev.sut, "name", cfg["sut"]["name"])),
        "sut_weights": getattr(ev.sut, "weights_label", None),
        "sut_weights_sha256": weights_sha256(ev.sut),  # replay finds these weights by it (issue 32)
        "topic": topic,
        "verdict": verdict.to_dict(),
        "n_source": len(source),
        "n_follow": len(follow),
        "lost": lost_text(verdict),
        "lost_details": lost_details(verdict),
        # per lost obstacle: its evidence and severity (lidarmt.engine.findings); the worst of them
        "findings": [{"source": m.source, "evidence": _ev(m), "severity": _sev(m)} for m in verdict.missing],
        "severity": _worst(verdict),
        "follow_names": follow_names(verdict, len(follow)),
        # added points inside the network's grid and height band (the others cannot change any obstacle)
        "added_reached": int(ev.reach.count(extra)) if getattr(ev, "reach", None) is not None else None,
        "ddmin": dd.to_dict() if dd else None,
        "minimal_indices": [int(i) for i in minimal],  # minimal.npy == added.npy[minimal_indices]
        "minimal_verdict": judge(source, minimal_obs).to_dict() if minimal_obs is not None else None,
        "environment": environment() | {"mode": _mode(ev.sut, cfg)},
        "sut_implementation": sut_implementation(ev.sut),  # e.g. exact-v2: replay names it when it differs
        "command": command,
        "cwd": os.getcwd(),
        "torch_threads": _torch_threads(),
        "shown": _shown_version(),  # replay regenerates the files a person looks at (lidarmt.engine.verify)
        "machine": machine_record(),  # the CPU (and its ISA) the numbers were made on: replay names it
        "scores": full_scores(source, follow, minimal_obs),
    }
    info["replay_command"] = f"lidarmt replay {shlex.quote(str(out_dir))}"
    _write_bundle(out_dir, info, frame, fu.frame, extra, minimal, source, follow, minimal_obs, roi=roi)
    return {k: info[k] for k in ("id", "key", "relation", "reproduced", "n_source", "n_follow", "lost",
                                 "lost_details", "ddmin", "severity", "findings")} | {"has_bev": True}


def _ev(m: Any) -> str:
    from lidarmt.engine.findings import evidence

    return evidence(m.to_dict())


def _sev(m: Any) -> str:
    from lidarmt.engine.findings import severity

    return severity(m.to_dict())


def _worst(verdict: Verdict) -> str | None:
    from lidarmt.engine.findings import worst

    return worst([m.to_dict() for m in verdict.missing])


def _write_bundle(out_dir: Path, info: dict, frame: Frame, follow_frame: Frame, extra: np.ndarray,
                  minimal: np.ndarray, source: Obstacles, follow: Obstacles, minimal_obs: Obstacles | None, *,
                  roi: Any) -> None:
    from lidarmt._atomic import staging_folder
    from lidarmt.io import save_frame_npz

    tmp = staging_folder(out_dir)  # the user's usual folder mode, not mkdtemp's 0700
    try:
        save_frame_npz(tmp / "source.npz", frame)
        save_frame_npz(tmp / "followup.npz", follow_frame)
        _save_npy(tmp / "added.npy", extra)
        _save_npy(tmp / "minimal.npy", extra[minimal])
        _json(tmp / "obstacles_source.json", source.to_list())
        _json(tmp / "obstacles_followup.json", follow.to_list())
        if minimal_obs is not None:
            _json(tmp / "obstacles_minimal.json", minimal_obs.to_list())
        _json(tmp / "bundle.json", info)  # before the shown files: the bundle's page lists every file
        # the shown files from the data as stored (the frames as saved, the obstacle lists' JSON, which rounds
        # boxes to 0.1 mm), exactly as replay regenerates them: a picture never differs from what its own
        # bundle's data draws
        regenerate_shown(tmp, info, tmp, roi=roi)
        write_manifest(tmp, sorted(p.name for p in tmp.iterdir() if p.is_file()))  # last: checksums of all
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write bundle {out_dir}: {err.strerror or err}") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _page(tmp: Path, md: str, info: dict, source: Obstacles, follow: Obstacles, lost: dict[int, str]) -> None:
    """The bundle's page (report.html): the pictures at full size, both obstacle tables, the commands."""
    from lidarmt.engine.html import obstacle_table, write_bundle_page

    commands = [info["replay_command"]]
    if info.get("command"):
        commands += ["# the campaign that found it:", info["command"]]
    write_bundle_page(tmp, md, name=info["id"], pictures=[("bev.png", "bird's-eye view: the source, the follow-up and what was lost"),
                                         ("bev_source.png", "source t"), ("bev_followup.png", "follow-up t′")],
                      tables=[(f"source t: {len(source)} obstacles",
                               obstacle_table(source.to_list(with_points=False), ident="source-table", lost=lost)),
                              (f"follow-up t′: {len(follow)} obstacles",
                               obstacle_table(follow.to_list(with_points=False), ident="followup-table"))],
                      commands=commands)


def write_shown(tmp: Path, info: dict, frame: Frame, follow_frame: Frame, extra: np.ndarray, minimal: np.ndarray,
                source: Obstacles, follow: Obstacles, verdict: Verdict, roi_indices: np.ndarray | None = None, *,
                roi: Any = None) -> None:
    """Write the files of a bundle a person looks at into ``tmp``: the PCDs, the pictures, ``replay.bag``,
    ``bundle.mcap`` with its Foxglove layout, ``report.md`` and the bundle's page ``report.html``, all from the
    bundle's data."""
    from lidarmt.io import Ros1BagWriter, write_pcd

    write_pcd(tmp / "source.pcd", frame)
    write_pcd(tmp / "followup.pcd", follow_frame)
    write_pcd(tmp / "minimal.pcd", frame.with_extra_points(extra[minimal]))
    bev_picture(tmp / "bev.png", frame, follow_frame, source, follow, verdict, base=len(frame),
                title=f"{info['id']}: {lost_text(verdict)}", roi_indices=roi_indices, roi=roi,
                minimal=minimal if info.get("ddmin") else None)
    try:
        from lidarmt.lidar.bev import draw_bev
    except ImportError:  # pragma: no cover
        draw_bev = None
    if draw_bev is not None:
        xy = np.c_[frame.points["x"], frame.points["y"]].astype(np.float64)
        ext = view_extent(xy, [*source, *follow], roi_indices)
        draw_bev(frame, source, roi_indices=roi_indices, out=tmp / "bev_source.png", extent=ext,
                 title=f"source t: {len(source)} obstacles", roi=roi)
        fu_roi = None if roi_indices is None else roi_indices  # added points lie outside the ROI
        hi = (len(frame) + np.asarray(minimal, dtype=np.int64)) if info.get("ddmin") else None
        draw_bev(follow_frame, follow, roi_indices=fu_roi, out=tmp / "bev_followup.png", extent=ext,
                 title=f"follow-up t′ (+{len(extra)} points outside the ROI): {len(follow)} obstacles", roi=roi,
                 added_from=len(frame), highlight=hi)
    topic = info.get("topic")
    kw = {"topic": topic} if topic else {}
    fu2 = follow_frame.with_points(follow_frame.points)
    fu2.stamp = frame.stamp + 0.1  # the follow-up 0.1 s after the source (one HDL-64E sweep at 10 Hz)
    with Ros1BagWriter(tmp / "replay.bag", **kw) as w:
        w.write(frame)
        w.write(fu2)
    from lidarmt.engine.mcap import BUNDLE_MCAP, LAYOUT_NAME, write_layout, write_lidar_bundle_mcap

    write_lidar_bundle_mcap(tmp / BUNDLE_MCAP, frame=frame, follow_frame=follow_frame, source=source,
                            follow=follow, verdict=verdict, minimal=minimal if info.get("ddmin") else None,
                            roi=roi, roi_indices=roi_indices, follow_names=follow_names(verdict, len(follow)),
                            info={k: info[k] for k in ("id", "relation", "n", "frame_index", "lost")})
    write_layout(tmp / LAYOUT_NAME, "lidar-bundle", frame_id=frame.frame_id)
    md = bundle_markdown(info, source, follow, verdict)
    atomic_write_text(tmp / "report.md", md)
    _page(tmp, md, info, source, follow, {int(m.source): m.describe() for m in verdict.missing})


def regenerate_shown(folder: Path, info: dict, out: Path, *, roi: Any) -> None:
    """Write into ``out`` the shown files of the bundle in ``folder`` from its **stored** data (source.npz,
    followup.npz, added.npy, the obstacle lists, bundle.json's verdict and minimal indices) and ``roi`` (the
    ROI replay rebuilt from the map), as :func:`write_shown` wrote them (:func:`lidarmt.engine.verify.verify_shown`
    compares the two)."""
    from lidarmt.io.npz import load_frame_npz
    from lidarmt.lidar.mr1.oracle import Verdict

    frame = load_frame_npz(folder / "source.npz")
    follow_frame = load_frame_npz(folder / "followup.npz")
    with open_readable(folder / "added.npy", max_bytes=available_memory()) as fh:  # never a FIFO: lidarmt._paths
        extra = np.load(fh, allow_pickle=False)
    minimal = np.asarray(info["minimal_indices"], dtype=np.int64).reshape(-1)
    source = Obstacles.from_list(read_json(folder / "obstacles_source.json"))
    follow = Obstacles.from_list(read_json(folder / "obstacles_followup.json"))
    verdict = Verdict.from_dict(info["verdict"])
    out.mkdir(parents=True, exist_ok=True)
    write_shown(out, info, frame, follow_frame, extra, minimal, source, follow, verdict,
                np.asarray(roi.indices(frame), dtype=np.int64), roi=roi)


#: The files of an MR1 bundle that are its data: replay reads and checks them itself.
DATA_FILES = ("bundle.json", "source.npz", "followup.npz", "added.npy", "minimal.npy", "obstacles_source.json",
              "obstacles_followup.json", "obstacles_minimal.json")


def verify_shown_files(folder: Path, info: dict, check: Any, *, roi: Any) -> None:
    """Replay's check of every file of the bundle a person looks at (:func:`lidarmt.engine.verify.verify_shown`),
    regenerated with :func:`regenerate_shown`."""
    from lidarmt.engine.verify import PIXEL_STEP_DRAWN, SHOWN_VERSION, verify_shown

    verify_shown(folder, check, lambda out: regenerate_shown(folder, info, out, roi=roi), data=DATA_FILES,
                 layout_kind="lidar-bundle",
                 strict=info.get("shown") == SHOWN_VERSION, pixel_step=PIXEL_STEP_DRAWN)


def _json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, arr, allow_pickle=False)


# ----------------------------------------------------------------------------------------------- pictures


def _view(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sensor x/y -> plot axes (-y, x): forward up, left to the left (as lidarmt.lidar.bev draws)."""
    xy = np.asarray(xy)
    return -xy[..., 1], xy[..., 0]


def _class_colors() -> dict:
    try:
        from lidarmt.lidar.bev import CLASS_COLORS

        return dict(CLASS_COLORS)
    except ImportError:  # pragma: no cover - the perception helper's module is part of the package
        from lidarmt.types import ObstacleClass

        return {ObstacleClass.CAR: "#00b000", ObstacleClass.PEDESTRIAN: "#ff5fa2",
                ObstacleClass.CYCLIST: "#1f4fff", ObstacleClass.UNKNOWN: "#9932cc"}


def view_extent(xy: np.ndarray, obstacles: list, roi_indices: np.ndarray | None) -> float:
    """Half-size of the view: enough for the obstacles and the ROI points, 20 to 80 m."""
    far = [20.0]
    if roi_indices is not None and len(roi_indices):
        r = xy[roi_indices]
        r = r[np.isfinite(r).all(axis=1)]
        if len(r):
            far.append(float(np.percentile(np.abs(r), 99.5)) + 5)
    for o in obstacles:
        far.append(float(np.abs(o.center[:2]).max()) + o.length + 5)
    return float(min(max(far), 80.0))


def _place_labels(ax, items: list[tuple[float, float, str, dict]], *, extent: float) -> None:
    """Write obstacle labels without piling them up: items in priority order (lost obstacles first); a label
    that would land within a few percent of the view of one already written is left out (its obstacle is still
    drawn), and none is written on the sensor."""
    placed: list[tuple[float, float]] = [(0.0, 0.0)]
    gap = extent / 14.0
    for h, v, text, style in items:
        if not style.get("always") and any(abs(h - ph) < gap * 1.6 and abs(v - pv) < gap * 0.6 for ph, pv in placed):
            continue
        kw = {k: val for k, val in style.items() if k != "always"}
        ax.text(h, v, text, zorder=8, clip_on=True, **kw)
        placed.append((h, v))


def bev_picture(path: Path, source_frame: Frame, follow_frame: Frame, source: Obstacles, follow: Obstacles,
                verdict: Verdict, *, base: int, title: str = "", roi_indices: np.ndarray | None = None,
                roi: Any = None, minimal: np.ndarray | None = None) -> None:
    """Source and follow-up from above, side by side (forward up, left to the left; Apollo's class colours):
    the ROI's outline (``roi``, when it is a bitmap), ROI points dark, other points light, added points orange
    and the minimal subset of them (``minimal``: indices among the added points) as large red stars; source
    obstacles lost in t′ outlined in thick red with what happened to them and what they were (points, size,
    distance). Labels of other obstacles are written only where they do not pile up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon as MplPolygon

    colors = _class_colors()
    missing = {m.source: m for m in verdict.missing}
    names = {False: [f"#{k}" for k in range(len(source))], True: follow_names(verdict, len(follow))}
    xy = np.c_[follow_frame.points["x"], follow_frame.points["y"]].astype(np.float64)
    extent = view_extent(xy[:base], [*source, *follow], roi_indices)
    roi_mask = np.zeros(base, dtype=bool)
    if roi_indices is not None and len(roi_indices):
        roi_mask[roi_indices[roi_indices < base]] = True
    fig, axes = plt.subplots(1, 2, figsize=(14, 7.6), sharex=True, sharey=True)
    try:
        for ax, obs, label, added in ((axes[0], source, "source t", False), (axes[1], follow, "follow-up t′", True)):
            src = xy[:base]
            ok = np.isfinite(src).all(axis=1) & (np.abs(src) <= extent).all(axis=1)
            h, v = _view(src[ok & ~roi_mask])
            ax.scatter(h, v, s=0.15, c="#c8c8c8", linewidths=0, rasterized=True)
            h, v = _view(src[ok & roi_mask])
            ax.scatter(h, v, s=0.3, c="#505050", linewidths=0, rasterized=True, label="ROI points")
            if roi is not None:
                from lidarmt.lidar.bev import roi_outline

                roi_outline(ax, roi, extent=extent)
            if added and len(xy) > base:
                h, v = _view(xy[base:])
                ax.scatter(h, v, s=5, c="#ff7f0e", linewidths=0, rasterized=True,
                           label=f"added points ({len(xy) - base})")
                if minimal is not None and len(minimal) and len(minimal) < len(xy) - base:
                    h, v = _view(xy[base + np.asarray(minimal, dtype=np.int64)])
                    ax.scatter(h, v, s=_star_size(len(h)), marker="*", c="#d62728", edgecolors="black",
                           linewidths=0.6, zorder=7,
                               label=f"minimal subset ({len(minimal)} point{'s' if len(minimal) != 1 else ''})")
            labels: list[tuple[float, float, str, dict]] = []
            for k, o in enumerate(obs):
                lost = not added and k in missing
                col = colors.get(o.cls, "#9932cc")
                if len(o.point_indices):
                    h, v = _view(xy[np.asarray(o.point_indices, dtype=np.int64)])
                    ax.scatter(h, v, s=1.2, c=col, linewidths=0, alpha=0.7, rasterized=True)
                poly = np.asarray(o.polygon)[:, :2] if len(o.polygon) >= 3 else None
                if poly is not None:
                    ph, pv = _view(poly)
                    ax.add_patch(MplPolygon(np.c_[ph, pv], closed=True, fill=False, ec="#d62728" if lost else col,
                                            lw=3.0 if lost else 1.2, ls="--" if lost else "-"))
                ch, cv = _view(np.asarray(o.center[:2]))
                if lost:
                    m = missing[k]
                    text = (f"#{k} {o.cls.value} LOST ({m.kind}, {_sev(m)})"
                            + (f"\n{m.what()}" if m.what() else ""))
                    labels.insert(sum(1 for it in labels if it[3].get("always")),
                                  (float(ch), float(cv) + 1.0, text,
                                   {"fontsize": 8, "color": "#d62728", "fontweight": "bold", "always": True,
                                    "bbox": {"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1}}))
                elif abs(float(ch)) <= extent and abs(float(cv)) <= extent:
                    labels.append((float(ch), float(cv) + 1.0, f"{names[added][k]} {o.cls.value}",
                                   {"fontsize": 6.5, "color": col}))
            _place_labels(ax, labels, extent=extent)
            ax.plot([0], [0], marker="^", ms=8, color="#d62728", mec="black", mew=0.6, zorder=8)
            ax.set_title(f"{label}: {len(obs)} obstacles", fontsize=10)
            ax.set_aspect("equal")
            ax.set_xlabel("← y (left)   [m]    right →")
            ax.legend(loc="upper right", fontsize=7, markerscale=1.5)
            ax.grid(True, lw=0.3, color="#e0e0e0")
        from matplotlib.ticker import FuncFormatter

        axes[0].xaxis.set_major_formatter(FuncFormatter(lambda t, _: f"{-t + 0.0:g}"))  # show sensor y
        axes[0].set_ylabel("x (forward) [m]")
        axes[0].set_xlim(-extent, extent)
        axes[0].set_ylim(-extent, extent)
        fig.suptitle(title + "  (red dashed: source obstacles lost in t′; a follow-up obstacle is named after the "
                     "source obstacle it matches, #i′ after the lost one whose points it holds)", fontsize=9)
        fig.tight_layout()
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            # bbox "tight": the axis labels and the title are never cut off
            fig.savefig(fh, format="png", dpi=100, bbox_inches="tight", pad_inches=0.15)
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------------------------- markdown


def bundle_markdown(info: dict, source: Obstacles, follow: Obstacles, verdict: Verdict) -> str:
    from lidarmt.lidar.mr1.oracle import Missing

    cfg = info["config"]
    env = info["environment"]
    rel = ("|O| ≤ |O′| (the number of obstacles must not drop)" if info["relation"] == "count"
           else "O ⊆ O′ (every obstacle of t must be matched in t′)")
    dd = info.get("ddmin")
    lines = [
        f"# MR1 violation {info['id']}: {info['n_source']} → {info['n_follow']} obstacles after adding "
        f"{info['n']} points outside the ROI",
        "",
        "**Relation.** Adding points at random *outside* the HD-map ROI must not change the obstacles perceived "
        f"*inside* it (Zhou & Sun, CACM 62(3) 2019; Apollo issue #3341). Checked: {rel}.",
        "",
        "**What was seen.**",
        "",
        f"- source frame {info['frame_index']} of {md_code(cfg['source']['path'])}: {info['n_source']} obstacles "
        f"({_counts(verdict.counts_source)})",
        f"- follow-up (+{info['n']} points, z and intensity uniform in the frame's ranges, region "
        f"{cfg['region']['shape']} {cfg['region']['size']:g} m"
        + (f"; {info['added_reached']} of them inside the network's grid and height band"
           if info.get("added_reached") is not None else "")
        + f"): {info['n_follow']} obstacles ({_counts(verdict.counts_follow)})",
    ]
    from lidarmt.engine.findings import LOW_EVIDENCE_RULE, SEVERITY_RULE, severity_rank

    for m in sorted(verdict.missing, key=lambda m: (severity_rank(_sev(m)), m.source)):
        lane = {"in": "in the ego lane", "next": "next to the ego lane", "off": "off the ego lane"}.get(str(m.lane))
        lines.append(f"- **{_sev(m)}** ({_ev(m)}{', ' + lane if lane else ''}): {Missing.describe(m)}")
    if dd:
        lines.append(f"- a subset of **{dd['size']}** of the {info['n']} added points still causes the violation "
                     f"({'1-minimal' if dd['one_minimal'] else 'not proven 1-minimal: ' + dd['stopped']}, "
                     f"{dd['calls']} perception runs): `minimal.npy`, `minimal.pcd`")
    if not info["reproduced"]:
        lines.append("- **note**: recomputing the pair did not reproduce the violation (non-deterministic SUT?)")
    lines += [
        "",
        "Obstacles keep one name across source and follow-up: a follow-up obstacle matched to source obstacle #i "
        "is #i, the one holding most points of a lost #i is #i′, others are new. " + SEVERITY_RULE + "; "
        + LOW_EVIDENCE_RULE + ".",
        "",
        "![bird's-eye view](bev.png)",
        "",
        "**Environment.**",
        "",
        f"- system under test: {md_code(cfg['sut']['name'])} ({info['sut_name']}) options {json.dumps(cfg['sut']['options'])}"
        + (f"; weights: {info['sut_weights']}" if info.get("sut_weights") else ""),
        (f"- ROI: the area the source frame's ground labels cover (`--roi labels`, range {cfg['roi']['range']:g} m)"
         if cfg["roi"]["map"] == "labels" else f"- map: {md_code(cfg['roi']['map'])} (ROI range {cfg['roi']['range']:g} m)"),
        f"- lidarmt {env.get('lidarmt')}, torch {env.get('torch', '–')}, numpy {env.get('numpy')}, "
        f"numba {env.get('numba', '–')}, Python {env.get('python')}; SUT mode: {env.get('mode', 'default')}",
        f"- CPU: {env.get('cpu')} ({env.get('cpus')} CPUs), {env.get('platform')}",
        f"- seed tuple (campaign seed, frame, n, trial): {tuple(info['seed_tuple'])}",
        "",
        "**Reproduce.**",
        "",
        "```sh",
        md_code_line(info["replay_command"]),
    ]
    if info.get("command"):
        lines.append(f"# the campaign that found it:\n{md_code_line(info['command'])}")
    lines += [
        "```",
        "",
        "Files: `source.pcd` / `followup.pcd` (the added points follow the source points), `added.npy`, "
        "`obstacles_source.json`, `obstacles_followup.json`, `replay.bag` (ROS1: both frames on "
        f"{md_code(_bag_topic(info))} with /tf; the follow-up 0.1 s after the source), `bundle.mcap` (Foxglove: both "
        "clouds, the added and minimal points, the obstacles with the lost ones in red, the ROI, the pose; open "
        "it with the layout `foxglove-layout.json`).",
        "",
    ]
    return "\n".join(lines)


def _bag_topic(info: dict) -> str:
    """The topic ``replay.bag`` holds its clouds on: the recording's, else the bag writer's default (Apollo's)."""
    if info.get("topic"):
        return str(info["topic"])
    from lidarmt.io.ros1 import APOLLO_POINTCLOUD_TOPIC

    return APOLLO_POINTCLOUD_TOPIC


def _counts(counts) -> str:
    """``"4 car, 1 pedestrian, 3 cyclist"``: the non-zero classes in the verdict's order (class order: judge's
    counts and :meth:`Verdict.from_dict`'s alike)."""
    return ", ".join(f"{v} {k.value}" for k, v in counts.items() if v) or "none"
