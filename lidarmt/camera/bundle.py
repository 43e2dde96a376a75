"""Camera bug bundles: everything needed to look at, report and replay one violated camera relation.

A bundle is a folder ``runs/NAME/violations/<id>/`` (id = ``<model>-<transformation>-p<param>-f<frame>-t<trial>``):

* ``seed.png`` and ``transformed.png``: the current frame before and after the transformation (lossless);
* ``window.npz``: the seed window and the transformed window as uint8 arrays (one frame for models without
  history), which is what ``lidarmt replay`` feeds the model;
* ``pair.png``: both images side by side, with the label (green), θ(i) (blue) and θ(τ(i)) (red) drawn as steering
  arrows, as DeepTest's Figure 7;
* ``report.md`` (ready to paste into an issue tracker) and ``bundle.json`` (model and transformation specs,
  parameters, the seed tuple, the label, both predictions, the relation with its thresholds and MSE_orig);
* ``bundle.mcap`` and ``foxglove-layout.json``: both images with the angles as annotations, for Foxglove
  (:mod:`lidarmt.engine.mcap`);
* ``MANIFEST.json``: the SHA-256 of every file (:mod:`lidarmt.engine.manifest`), checked first by replay.

The folder is built beside its final place and renamed into it, so a bundle is either complete or absent.
Replay (:mod:`lidarmt.camera.replay`) rebuilds the model from the bundle's spec (a ``module:callable`` only with ``--trust-code``), re-derives
the transformed window from the seed tuple with the implementation bundle.json names (``transform_impl``; none: the
reference, :mod:`lidarmt.camera.transforms.batched`) and compares it byte for byte, predicts both windows again and
compares the angles bit for bit, and checks that the relation is still violated.

A learned translator (``munit-night``, a ``translator.pt``, a plug-in) is recorded in bundle.json under
``translators``: its spec, kind, device and the SHA-256 of its weights file; replay rebuilds it on that device
(a ``module:callable`` translator only with ``--trust-code``) and checks first that the weights are the same.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lidarmt._machine import record as machine_record
from lidarmt._paths import load_npz, read_text
from lidarmt._show import md_code, md_code_line
from lidarmt.camera.errors import CameraOutputError
from lidarmt.camera.relations import deeproad_violation, deeptest_violation
from lidarmt.errors import UserError

BUNDLE_VERSION = 2  # the same family as the LiDAR bundles (format 2: MANIFEST.json); "kind" tells them apart
FILES = ("seed.png", "transformed.png", "window.npz", "pair.png", "report.md", "bundle.json")


def _png(path: Path, rgb: np.ndarray) -> None:
    import cv2

    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[..., ::-1]))
    if not ok:  # pragma: no cover
        raise CameraOutputError(f"cannot encode {path.name}")
    path.write_bytes(buf.tobytes())


def _torch_threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def display_name(spec: str) -> str:
    """A model's name for tables: a Keras file by its stem, a weights file by its file name (``dave2.pt``,
    apart from the shipped ``dave2``), anything else as given."""
    if spec.lower().endswith((".pt", ".pth")):
        return Path(spec).name
    return Path(spec).stem if spec.lower().endswith((".h5", ".hdf5", ".keras")) else spec


def steering_arrow(img: np.ndarray, angle: float | None, colour: tuple[int, int, int], *, length: float = 0.35,
                   thickness: int = 2) -> None:
    """Draw a steering angle (radians, positive = left) as an arrow from the bottom centre, in place (RGB)."""
    import cv2

    if angle is None or not math.isfinite(angle):
        return
    h, w = img.shape[:2]
    x0, y0 = w / 2.0, h - 4.0
    r = length * h
    x1, y1 = x0 - r * math.sin(angle), y0 - r * math.cos(angle)
    cv2.arrowedLine(img, (round(x0), round(y0)), (round(x1), round(y1)), colour, thickness, cv2.LINE_AA,
                    tipLength=0.2)


def pair_picture(seed: np.ndarray, transformed: np.ndarray, *, label: float | None, pred: float, pred_t: float,
                 title: str, expect: str = "keep") -> np.ndarray:
    """Seed and transformed image side by side with the steering arrows and a caption (RGB uint8). On the
    transformed image the label and the seed's prediction are drawn as the relation expects them (negated for
    the mirror)."""
    import cv2

    sign = -1.0 if expect == "negate" else 1.0
    a, b = seed.copy(), transformed.copy()
    if b.shape[0] != a.shape[0]:  # a follow-up made elsewhere may have another size: scaled for the picture only
        b = cv2.resize(b, (max(1, round(b.shape[1] * a.shape[0] / b.shape[0])), a.shape[0]),
                       interpolation=cv2.INTER_AREA)
    steering_arrow(a, label, (40, 200, 40), length=0.42)
    steering_arrow(b, None if label is None else sign * label, (40, 200, 40), length=0.42)
    steering_arrow(a, pred, (40, 90, 255))
    steering_arrow(b, sign * pred, (40, 90, 255), thickness=1)
    steering_arrow(b, pred_t, (230, 40, 40))
    gap = np.full((a.shape[0], 6, 3), 255, np.uint8)
    body = np.concatenate([a, gap, b], axis=1)
    cap = np.full((44, body.shape[1], 3), 255, np.uint8)
    lab = "–" if label is None else f"{math.degrees(label):+.1f}°"
    cv2.putText(cap, title[:90], (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(cap, f"label {lab} (green)  seed {math.degrees(pred):+.1f}° (blue)  transformed "
                f"{math.degrees(pred_t):+.1f}° (red)", (4, 36), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1,
                cv2.LINE_AA)
    return np.concatenate([body, cap], axis=0)


def violated(info: dict[str, Any], pred: float, pred_t: float) -> bool:
    """Whether the bundle's relation is violated by these predictions (with its stored thresholds)."""
    rel = info["relation"]
    if rel["name"] == "deeptest":
        return deeptest_violation(pred_t, float(info["label"]), info["expect"], float(rel["mse_orig"]),
                                  float(rel["lambda"]))
    return deeproad_violation(pred, pred_t, info["expect"], float(rel["tolerance_deg"]))


def _step_transform(ev: Any, name: str) -> Any:
    """A search step's transformation as the evaluator built it (a translator on its device), else by name."""
    from lidarmt.camera.transforms.registry import get_transform

    built = getattr(ev, "transforms", None)
    if isinstance(built, dict) and name in built:
        return built[name]
    return get_transform(name)


def translator_provenance(transforms: list[Any]) -> list[dict[str, Any]]:
    """What a bundle records of the translators among ``transforms`` (spec, kind, device, weights' SHA-256)."""
    out, seen = [], set()
    for t in transforms:
        prov = getattr(t, "provenance", None)
        if getattr(t, "family", "") == "translator" and callable(prov) and t.name not in seen:
            seen.add(t.name)
            out.append(prov())
    return out


def make_camera_bundle(ev, key: tuple[int, ...], out_dir: Path, *, relation: dict[str, Any],
                       command: str = "", steps: list[dict[str, Any]] | None = None,
                       frame: int | None = None) -> dict[str, Any]:
    """Recompute pair ``key`` with evaluator ``ev`` and write its bundle to ``out_dir``.

    ``relation``: ``{"name": "deeptest", "lambda", "epsilon", "mse_orig"}`` or ``{"name": "deeproad",
    "tolerance_deg"}`` — the relation the campaign found violated for this pair.

    ``steps`` (searches): the mutant is seed ``frame`` with these transformations applied in turn, each
    ``{"transform", "params", "seed"}`` (DeepTest's composite of two, or one ES condition); the evaluator's
    ``judge_steps(frame, steps)`` recomputes it and ``ev.config.model`` is the model. bundle.json then holds
    ``steps`` (replay applies them in order) instead of the campaign's seed tuple; the format is otherwise the
    same."""
    from lidarmt.engine.campaign import environment
    from lidarmt.engine.manifest import write_manifest

    cfg = ev.config
    if steps is not None:
        got = ev.judge_steps(int(frame or 0), steps)
        mref = cfg.model
        ts = [_step_transform(ev, s["transform"]) for s in steps]
        expect = "negate" if sum(t.relation == "negate" for t in ts) % 2 else "keep"
        info = {"frame_index": int(frame or 0), "transform": "+".join(t.name for t in ts),
                "family": ts[0].family if len(ts) == 1 else "composite", "expect": expect,
                "params": {},
                "params_label": " + ".join(t.label(s["params"]) for t, s in zip(ts, steps, strict=True)),
                "steps": [{"transform": s["transform"], "params": dict(s["params"]), "seed": int(s["seed"])}
                          for s in steps],
                "resolved_params": [t.resolve(dict(s["params"]), int(s["seed"])) for t, s in zip(ts, steps,
                                                                                                  strict=True)]}
    else:
        from lidarmt.camera.transforms.base import transform_seed

        f, m, t, p, r = key
        got = ev.judge_key(key)
        tr, mref = cfg.transforms[t], cfg.models[m]
        transform = ev.transforms[t]
        info = {"frame_index": f, "transform": tr.name, "family": transform.family, "expect": transform.relation,
                "params": dict(tr.grid[p]), "params_label": transform.label(tr.grid[p]),
                "seed_tuple": [cfg.seed, f, tr.name, p, r],
                "transform_seed": transform_seed(cfg.seed, f, tr.name, p, r)}
        impl = getattr(cfg, "transform_impl", "reference")
        if impl != "reference":  # the implementation that made the image (none recorded: the reference)
            info["transform_impl"] = impl
        resolve = getattr(transform, "resolve", None)  # the full setting applied (weather styles from the seed)
        if callable(resolve):
            info["resolved_params"] = resolve(dict(tr.grid[p]), info["transform_seed"])
        follow_up = getattr(transform, "bundle_info", None)  # a pairs campaign: which image was the follow-up
        if callable(follow_up):
            info["follow_up"] = follow_up(f)
        ts = [transform]
    translators = translator_provenance(ts)
    if translators:
        info["translators"] = translators
    cur = got["frame"]
    info = {
        "version": BUNDLE_VERSION, "kind": "camera", "id": out_dir.name, "key": list(key),
        "config": cfg.to_dict(), "cwd": os.getcwd(), "command": command, "environment": environment(),
        "frame_id": cur.frame_id, "stamp": cur.stamp, "model": mref.to_dict(), **info,
        "label": cur.label, "pred": got["pred"], "pred_t": got["pred_t"], "relation": dict(relation),
        "torch_threads": _torch_threads(),  # replay uses as many: a network's sums may depend on the split
        "machine": machine_record(),  # the CPU (and its ISA) the numbers were made on: replay names it
    }
    info["reproduced"] = violated(info, got["pred"], got["pred_t"])
    info["replay_command"] = f"lidarmt replay {shlex.quote(str(out_dir))}"
    from lidarmt.engine.verify import SHOWN_VERSION

    info["shown"] = SHOWN_VERSION  # replay regenerates the files a person looks at (lidarmt.engine.verify)
    from lidarmt._atomic import staging_folder

    tmp = staging_folder(out_dir)  # the user's usual folder mode, not mkdtemp's 0700
    try:
        np.savez_compressed(tmp / "window.npz", seed=got["window"], transformed=got["transformed"])
        (tmp / "bundle.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n",
                                         encoding="utf-8")  # before the shown files: the page lists every file
        write_shown(tmp, info, got["window"][-1], got["transformed"][-1], out_dir)
        from lidarmt.engine.html import BUNDLE_PAGE
        from lidarmt.engine.mcap import BUNDLE_MCAP, LAYOUT_NAME

        write_manifest(tmp, [*FILES, BUNDLE_MCAP, LAYOUT_NAME, BUNDLE_PAGE])
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    dev = got["pred_t"] - (-(got["pred"]) if info["expect"] == "negate" else got["pred"])
    return {"id": out_dir.name, "key": list(key), "model": display_name(mref.name), "transform": info["transform"],
            "params": info["params_label"], "frame_id": cur.frame_id, "label": cur.label, "pred": got["pred"],
            "pred_t": got["pred_t"], "change_deg": math.degrees(dev), "reproduced": info["reproduced"],
            "relation": relation["name"]}


def transform_text(info: dict[str, Any]) -> str:
    """What made a camera bundle's follow-up: its transformation, a search's steps in turn, or an external pair
    (a bundle of a search or of a pairs campaign may have no ``transform``)."""
    if "steps" in info:
        return " → ".join(str(s["transform"]) for s in info["steps"]) or "no step"
    if info.get("family") == "external" or "transform" not in info:
        return "an external follow-up"
    return str(info["transform"])


def _title(info: dict[str, Any]) -> str:
    return (f"{display_name(info['model']['name'])}: {info['params_label']}, frame {info['frame_id']} "
            f"({'violates' if info['reproduced'] else 'no longer violates'} {info['relation']['name']})")


def write_shown(tmp: Path, info: dict[str, Any], seed: np.ndarray, transformed: np.ndarray, out_dir: Path) -> None:
    """Write the files of a bundle a person looks at into ``tmp`` (``seed.png``, ``transformed.png``, ``pair.png``,
    ``bundle.mcap`` with its Foxglove layout, ``report.md``, the bundle's page ``report.html``) from bundle.json's
    ``info`` and the two current
    frames (``out_dir``: where the bundle goes, for report.md's replay command)."""
    from lidarmt.engine.mcap import BUNDLE_MCAP, LAYOUT_NAME, stamp_ns, write_camera_bundle_mcap, write_layout

    title = _title(info)
    _png(tmp / "seed.png", seed)
    _png(tmp / "transformed.png", transformed)
    _png(tmp / "pair.png", pair_picture(seed, transformed, label=info["label"], pred=info["pred"],
                                        pred_t=info["pred_t"], title=title, expect=info["expect"]))
    write_camera_bundle_mcap(tmp / BUNDLE_MCAP, seed=seed, transformed=transformed, label=info["label"],
                             pred=info["pred"], pred_t=info["pred_t"], expect=info["expect"], title=title,
                             t_ns=stamp_ns(info.get("stamp") or 0.0),  # the seed frame's own time
                             info={k: info.get(k) for k in ("id", "transform", "params_label", "frame_id", "relation")})
    write_layout(tmp / LAYOUT_NAME, "camera-bundle")
    md = _report(info, out_dir)
    (tmp / "report.md").write_text(md, encoding="utf-8")
    from lidarmt.engine.html import table, write_bundle_page

    def deg(v: float | None) -> str:
        return "–" if v is None else f"{math.degrees(v):+.2f}°"

    expected = info["pred"] if info["expect"] == "keep" else -info["pred"]
    angles = table(["label θᵗ", "θ(i) on the seed", "θ(τ(i)) on the transformed image",
                    "expected θ(τ(i))", "change from the expected"],
                   [[deg(info["label"]), deg(info["pred"]), deg(info["pred_t"]), deg(expected),
                     deg(info["pred_t"] - expected)]], ident="angles-table", sortable=False)
    command = info.get("command")
    write_bundle_page(tmp, md, name=info["id"], pictures=[("pair.png", title), ("seed.png", "seed image"),
                                                          ("transformed.png", "transformed image")],
                      tables=[(f"relation: {info['relation']['name']}", angles)], tables_title="Steering angles",
                      commands=[info.get("replay_command") or f"lidarmt replay {shlex.quote(str(out_dir))}"]
                      + (["# the campaign that found it:", command] if command else []))


def _written_to(folder: Path, info: dict[str, Any]) -> Path:
    """Where a bundle without ``replay_command`` (made before it was recorded) was written: the path of its
    report.md's replay line when that path ends in the bundle's id, else the folder itself."""
    try:
        for line in read_text(folder / "report.md").splitlines():
            if line.startswith("    lidarmt replay "):
                words = shlex.split(line[len("    lidarmt replay "):])
                if len(words) == 1 and Path(words[0]).name == info.get("id"):
                    return Path(words[0])
    except (OSError, ValueError, UserError):  # no report to go by: the folder itself
        pass
    return folder


def verify_shown_files(folder: Path, info: dict[str, Any], check: Any) -> None:
    """Replay's check of every file of the bundle a person looks at (:func:`lidarmt.engine.verify.verify_shown`):
    written again by :func:`write_shown` from bundle.json and window.npz (the stored frames and predictions,
    never the ones replay recomputes, so the pictures do not depend on this CPU's floats)."""
    from lidarmt.engine.verify import SHOWN_VERSION, verify_shown

    def regenerate(out: Path) -> None:
        z = load_npz(folder / "window.npz")
        seed, transformed = z["seed"][-1], z["transformed"][-1]
        out.mkdir(parents=True, exist_ok=True)
        where = _written_to(folder, info) if not info.get("replay_command") else folder
        write_shown(out, info, seed, transformed, where)

    verify_shown(folder, check, regenerate, data=("bundle.json", "window.npz"), layout_kind="camera-bundle",
                 strict=info.get("shown") == SHOWN_VERSION)


def _deg(v: float | None) -> str:
    return "–" if v is None else f"{math.degrees(v):+.2f}° ({v:+.5f} rad)"


def _report(info: dict[str, Any], out_dir: Path) -> str:
    rel = info["relation"]
    if rel["name"] == "deeptest":
        rule = (f"DeepTest Eq. 2: (θ(τ(i)) − θᵗ)² ≤ λ·MSE_orig with λ = {rel['lambda']:g}, MSE_orig = "
                f"{rel['mse_orig']:.5f} rad² (the model's error on the campaign's seed images)"
                + (f"; the setting passed Eq. 3's filter at ε = {rel['epsilon']:g}" if info["family"] == "simple"
                   else ""))
    else:
        rule = f"DeepRoad: |θ(τ(i)) − θ(i)| ≤ {rel['tolerance_deg']:g}°"
    if info["expect"] == "negate":
        rule += " (mirror: the expected answer is the negated angle)"
    cmd = info.get("command") or "lidarmt camera fuzz ..."
    return "\n".join([
        f"# {info['model']['name']} misbehaves under {info.get('transform') or transform_text(info)} ({info['params_label']})",
        "",
        f"- image: frame {info['frame_index']} ({md_code(info['frame_id'])}) of {md_code(info['config']['images'])}",
        f"- model: {md_code(info['model']['name'])} {json.dumps(info['model']['options']) if info['model']['options'] else ''}",
        (f"- follow-up made outside lidarmt: {md_code(info['follow_up'].get('frame_id'))} of "
         f"{md_code(info['follow_up'].get('source'))}") if "follow_up" in info else
        (f"- transformation: {md_code(info.get('transform') or transform_text(info))} ({info.get('family')}), parameters {md_code(json.dumps(info['params']))}, "
         f"seed tuple {info['seed_tuple']}") if "steps" not in info else
        ("- transformations, applied in turn: " + "; ".join(
            f"{md_code(s['transform'])} {md_code(json.dumps(s['params']))} (seed {s['seed']})" for s in info["steps"])),
        f"- label θᵗ: {_deg(info['label'])}",
        f"- prediction on the seed image θ(i): {_deg(info['pred'])}",
        f"- prediction on the transformed image θ(τ(i)): {_deg(info['pred_t'])}",
        f"- relation: {rule}; {'violated' if info['reproduced'] else 'NOT violated when rebuilt'}",
        "",
        "![seed and transformed image](pair.png)",
        "",
        "Reproduce:",
        "",
        f"    {md_code_line(cmd)}",
        f"    {md_code_line(info.get('replay_command') or f'lidarmt replay {shlex.quote(str(out_dir))}')}",
        "",
        f"Environment: lidarmt {info['environment'].get('lidarmt')}, torch {info['environment'].get('torch', '–')}, "
        f"{info['environment'].get('cpu', '?')}.",
        "",
    ])


# ----------------------------------------------------------------------------------------------- replay


def write_sheet(path: Path, pictures: list[np.ndarray], *, columns: int = 2) -> None:
    """A contact sheet of pair pictures (the worst cases of a campaign), written atomically as PNG."""
    import cv2

    from lidarmt._atomic import atomic_path

    if not pictures:
        return
    w = max(p.shape[1] for p in pictures)
    h = max(p.shape[0] for p in pictures)
    rows = (len(pictures) + columns - 1) // columns
    sheet = np.full((rows * (h + 6), columns * (w + 6), 3), 255, np.uint8)
    for i, pic in enumerate(pictures):
        r, c = divmod(i, columns)
        sheet[r * (h + 6):r * (h + 6) + pic.shape[0], c * (w + 6):c * (w + 6) + pic.shape[1]] = pic
    ok, buf = cv2.imencode(".png", sheet[..., ::-1])
    if not ok:  # pragma: no cover
        raise CameraOutputError(f"cannot encode {path}")
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf.tobytes())

