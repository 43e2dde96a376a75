"""Model cards and metrics files of the shipped translators (``weights/<name>.md`` and ``<name>.json``).

:func:`training_facts` reads what a training run left (``config.json``, ``log.jsonl``, ``translator.pt``):
iterations, wall time, seconds per iteration, the settings and the command that reproduces them.
:func:`compute_cost` counts the FLOPs of one training iteration (``torch.utils.flop_counter`` on the meta device:
nothing is computed) and the parameters, for any configuration, so a card can set its translator beside the
papers' (:data:`PAPERS`). :func:`translator_metrics` joins those facts and the numbers of
:mod:`lidarmt.camera.translate.evaluate` into the ``<name>.json`` dict, and :func:`model_card` renders the card
from that dict alone, so a card can be rebuilt from its JSON.

    facts = training_facts("/work/data/tr/munit-night")
    metrics = translator_metrics("munit-night", facts, score, evaluation)
    Path("munit-night.md").write_text(model_card(metrics))
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.translate.nets import NetConfig

#: How the weather domains of the shipped translators were made (``scripts/make_weather_domains.py``).
DATA_RECIPE = ("python scripts/make_weather_domains.py --udacity ../shared/data/udacity --out domains "
               "--train 1200 --min-intensity 0.6 --seed 20261124")


@dataclass(frozen=True)
class Paper:
    """A published translator configuration to compare with."""

    who: str
    net: NetConfig
    size: int  # training crop side
    iterations: int
    note: str
    cyc_w: float = -1.0  # the architecture's default


#: The published configurations (../shared/design/camera-facts.md): TACTIC's MUNIT, and for UNIT TACTIC's UNIT
#: baseline (DeepRoad published neither its network sizes nor its iteration count).
PAPERS = {
    "munit": Paper("TACTIC's MUNIT (Li et al., ICML 2021)", NetConfig(arch="munit"), 256, 1_000_000,
                   "256², dim 64, style length 8, 2 down-samplings, 4 residual blocks, 3-scale LSGAN "
                   "discriminator, batch 1, VGG perceptual loss"),
    "unit": Paper("UNIT as TACTIC's baseline (500,000 iterations); DeepRoad trained UNIT on 240x320 frames",
                  NetConfig(arch="unit"), 256, 500_000,
                  "256², dim 64, 2 down-samplings, 4 residual blocks (one shared), 3-scale LSGAN discriminator"),
}

TITLES = {"munit": "a learned stand-in for TACTIC's MUNIT", "unit": "a learned stand-in for DeepRoad's UNIT"}


# --------------------------------------------------------------------------------------------- cost


def compute_cost(net: NetConfig, size: int, *, cyc_w: float = -1.0) -> dict[str, float]:
    """FLOPs of one training iteration (discriminator step + generator step, forward and backward, batch 1,
    ``size``² crops) and parameter counts of a configuration, counted by ``torch.utils.flop_counter`` with the
    networks on the meta device (shapes only: instant, whatever the size). Convolutions and matrix products
    are counted (2 FLOPs per multiply-add); element-wise work and the optimiser are not."""
    from unittest import mock

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from lidarmt.camera.translate.train import TrainConfig, Trainer

    cfg = TrainConfig(domain_a="a", domain_b="b", out="-", net=net, size=size, device="meta", recon_x_cyc_w=cyc_w)
    with torch.device("meta"):  # the weights are never materialised
        trainer = Trainer(cfg)
    x = torch.zeros(1, 3, size, size, device="meta")
    counter = FlopCounterMode(display=False)
    # the step reads losses with float()/item() and Adam its step count; meta tensors hold no value: say 1
    with counter, mock.patch.object(torch.Tensor, "__float__", lambda _t: 1.0), \
            mock.patch.object(torch.Tensor, "item", lambda _t: 1.0):
        trainer.step(x, x)
    gen = sum(p.numel() for p in trainer.gen.parameters())
    dis = sum(p.numel() for p in trainer.dis.parameters())
    return {"gflop_per_iteration": counter.get_total_flops() / 1e9, "generator_parameters": int(gen),
            "discriminator_parameters": int(dis)}


# ----------------------------------------------------------------------------------------- training


def _rel(path: str, root: str) -> str:
    """``.../domains/night`` → ``domains/night``: the card shows paths relative to the recipe's folders."""
    p = Path(path)
    return f"{root}/{p.name}" if p.name else str(path)


def command_line(config: Mapping[str, Any], *, name: str = "", iterations: int | None = None) -> str:
    """The ``lidarmt camera train-translator`` command that reproduces a run's ``config.json`` (settings that
    differ from the defaults; domain folders as the data recipe names them). ``iterations``: where the shipped
    weights were taken (the run may have been set for more; on one thread the same seed gives the same weights
    at that iteration whatever the total, as the learning-rate schedule does not depend on it)."""
    from lidarmt.camera.translate.train import TrainConfig

    cfg = TrainConfig.from_dict(dict(config))
    default = TrainConfig(domain_a="", domain_b="", out="")
    dnet = NetConfig(arch=cfg.net.arch)
    parts = ["lidarmt camera train-translator", f"--arch {cfg.net.arch}", f"--domain-a {_rel(cfg.domain_a, 'domains')}",
             f"--domain-b {_rel(cfg.domain_b, 'domains')}", f"--size {cfg.size}"]
    if cfg.load_size and cfg.load_size != cfg.size:
        parts.append(f"--load-size {cfg.load_size}")
    for k in ("dim", "n_res", "n_downsample", "style_dim", "mlp_dim", "dis_dim", "dis_layers", "dis_scales"):
        if k in ("style_dim", "mlp_dim") and cfg.net.arch != "munit":
            continue
        if getattr(cfg.net, k) != getattr(dnet, k):
            parts.append(f"--{k.replace('_', '-')} {getattr(cfg.net, k)}")
    parts.append(f"--iterations {iterations or cfg.iterations}")
    for k in ("seed", "precision", "sample_every", "checkpoint_every", "threads"):
        if getattr(cfg, k) != getattr(default, k):
            parts.append(f"--{k.replace('_', '-')} {getattr(cfg, k)}")
    parts.append(f"--device {cfg.device}")
    for k in ("lr", "beta1", "beta2", "weight_decay", "step_size", "gan_w", "recon_x_w", "recon_s_w", "recon_c_w",
              "recon_x_cyc_w", "recon_kl_w", "recon_kl_cyc_w", "log_every", "max_images", "holdout"):
        if getattr(cfg, k) != getattr(default, k):
            parts.append(f"--set {k}={getattr(cfg, k):g}")
    parts.append(f"--out runs/{name or Path(cfg.out).name}")
    return " ".join(parts)


def _wall_seconds(log: list[dict[str, Any]], upto: int) -> tuple[float, float | None]:
    """(wall seconds spent up to iteration ``upto``, seconds per iteration) from ``log.jsonl`` records.

    ``seconds`` restarts at 0 when a run is resumed, so the log is cut into sessions where it goes down; the
    wall time adds each session's last value (iterations redone after a resume included: that time was
    spent); the rate divides the time between each session's first and last record by the iterations between
    them (start-up, reading the images, excluded)."""
    sessions: list[list[tuple[int, float]]] = []
    for rec in log:
        it, sec = int(rec.get("iteration", 0)), float(rec.get("seconds", 0.0))
        if it > upto:
            break
        if not sessions or sec < sessions[-1][-1][1]:
            sessions.append([])
        sessions[-1].append((it, sec))
    total = sum(s[-1][1] for s in sessions)
    span_s = sum(s[-1][1] - s[0][1] for s in sessions)
    span_it = sum(s[-1][0] - s[0][0] for s in sessions)
    return total, (span_s / span_it if span_it > 0 else None)


def training_facts(run: str | os.PathLike[str], *, machine: str = "") -> dict[str, Any]:
    """What a training run folder says about itself: the settings, the translator's iteration count and
    parameters, the wall time and seconds per iteration (from ``log.jsonl``), the last logged losses and the
    command that reproduces it; ``machine`` says where it ran (for the card)."""
    from lidarmt.camera.translate.model import read_translator

    p = Path(run)
    cfg_path, tr_path, log_path = p / "config.json", p / "translator.pt", p / "log.jsonl"
    if not tr_path.is_file() or not cfg_path.is_file():
        raise ImageSourceError(f"{p}: not a finished translator run (needs config.json and translator.pt); "
                               "train it with 'lidarmt camera train-translator'")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ImageSourceError(f"{cfg_path}: unreadable run settings ({err})") from err
    state, meta = read_translator(tr_path)
    iterations = int(meta.get("iterations") or 0)
    log: list[dict[str, Any]] = []
    if log_path.is_file():
        for line in log_path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            if isinstance(rec, dict):
                log.append(rec)
    seconds, rate = _wall_seconds(log, iterations)
    last = next((r for r in reversed(log) if int(r.get("iteration", 0)) <= iterations), {})
    name = p.name
    return {"run": str(p), "name": name, "iterations": iterations, "config": config,
            "translator_parameters": int(sum(v.numel() for v in state.values() if v.is_floating_point())),
            "seconds": round(seconds, 1), "seconds_per_iteration": round(rate, 3) if rate else None,
            "last_losses": {k: v for k, v in last.items() if k not in ("iteration", "seconds")},
            "command": command_line(config, name=name, iterations=iterations), "data_recipe": DATA_RECIPE,
            "machine": machine}


def facts_from_metrics(m: Mapping[str, Any]) -> dict[str, Any]:
    """The training facts (:func:`training_facts`) a shipped ``<name>.json`` (:func:`translator_metrics`)
    recorded, as they are: for re-measuring shipped weights whose run folder is gone
    (``scripts/ship_translators.py --from-shipped``). Nothing is recomputed."""
    try:
        tr = m["training"]
        return {"run": tr.get("run", ""), "name": m["name"], "iterations": int(m["iterations"]),
                "config": tr["config"], "translator_parameters": int(m["parameters"]),
                "seconds": m["seconds"], "seconds_per_iteration": m.get("seconds_per_iteration"),
                "last_losses": tr.get("last_losses", {}), "command": tr.get("command", ""),
                "data_recipe": tr.get("data_recipe", ""), "machine": tr.get("machine", "")}
    except (KeyError, TypeError, ValueError) as err:
        raise ImageSourceError(f"translator metrics {m.get('name', '?') if isinstance(m, Mapping) else '?'}: "
                               f"no training facts to keep ({err!r} missing or malformed)") from err


def recipe_training_frames(recipe: str) -> int | None:
    """How many frames (the first ones, in time order) a ``make_weather_domains.py`` command line trained on:
    its ``--train N`` (the script's default, 1200, when the line names the script without it); None when the
    line is not that script's."""
    import re

    if "make_weather_domains.py" not in recipe:
        return None
    got = re.search(r"--train[= ](\d+)", recipe)
    return int(got.group(1)) if got else 1200


# --------------------------------------------------------------------------------------------- metrics


def translator_metrics(name: str, facts: Mapping[str, Any], score: Any, evaluation: Any, *,
                       weather: str = "", cost: Mapping[str, Any] | None = None,
                       paper_cost: Mapping[str, Any] | None = None, notes: list[str] | None = None,
                       provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``<name>.json`` of a shipped translator: training facts, cost beside the paper's, and the numbers of
    :func:`~lidarmt.camera.translate.evaluate.evaluate_translators` (``score`` its :class:`TranslatorScore` or
    dict, ``evaluation`` the :class:`Evaluation` or dict it came from). The key numbers that ``lidarmt camera
    translators`` lists are at the top level: ``ssim_to_source`` (SSIM(t, x)), ``procedural_ssim_to_source``
    (SSIM(p, x)), ``fid_like`` (d(t, p)), ``procedural_gap`` (d(x, p)) and ``steering_gap_deg`` (the mean over
    the steering models of mean |θ(t) − θ(x)| minus mean |θ(p) − θ(x)|). ``notes``: failure modes a person saw
    in the picture sheet, for the card. ``provenance``: which frames were measured and who saw them in
    training, and the SHA-256 of each steering model's weights (``scripts/ship_translators.py`` makes it); the
    card says it."""
    s = score.to_dict() if hasattr(score, "to_dict") else dict(score)
    ev = evaluation.to_dict() if hasattr(evaluation, "to_dict") else dict(evaluation)
    ev = {k: v for k, v in ev.items() if k != "translators"}
    arch = str(facts["config"]["net"]["arch"])
    net = NetConfig.from_dict(facts["config"]["net"])
    size = int(facts["config"]["size"])
    if cost is None:
        cost = compute_cost(net, size, cyc_w=float(facts["config"].get("recon_x_cyc_w", -1.0)))
    paper = PAPERS[arch]
    if paper_cost is None:
        paper_cost = compute_cost(paper.net, paper.size, cyc_w=paper.cyc_w)
    gaps = [m["mean_abs_deg_translated"] - m["mean_abs_deg_procedural"] for m in s["models"]]
    weather = weather or s.get("weather", "")
    return {
        "name": name, "arch": arch, "weather": weather,
        "title": f"{arch.upper()} {weather} translator ({TITLES[arch]})",
        "style_dim": net.style_dim if arch == "munit" else 0,
        "parameters": facts["translator_parameters"],
        "iterations": facts["iterations"], "seconds": facts["seconds"],
        "seconds_per_iteration": facts["seconds_per_iteration"],
        "ssim_to_source": s["ssim_translated"], "procedural_ssim_to_source": s["ssim_procedural"],
        "fid_like": s["fid_translated"], "procedural_gap": s["fid_clear"], "moved": s["moved"],
        "steering_gap_deg": sum(gaps) / len(gaps) if gaps else None,
        "training": {k: facts.get(k, "") for k in ("config", "command", "data_recipe", "last_losses", "run",
                                                   "machine")},
        "cost": {"this": {**cost, "size": size, "iterations": facts["iterations"],
                          "pflop_total": cost["gflop_per_iteration"] * facts["iterations"] / 1e6},
                 "paper": {**paper_cost, "who": paper.who, "size": paper.size, "iterations": paper.iterations,
                           "note": paper.note,
                           "pflop_total": paper_cost["gflop_per_iteration"] * paper.iterations / 1e6}},
        "evaluation": {**ev, "score": s, **({"provenance": dict(provenance)} if provenance else {})},
        "notes": list(notes or []),
    }


# ------------------------------------------------------------------------------------------------ card


def _n(v: Any, nd: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def _g(v: Any) -> str:
    """A distance with three significant digits (its scale is the feature trunk's, which a retraining changes)."""
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"


def _observations(m: Mapping[str, Any]) -> list[str]:
    """Failure modes read off the numbers (each line says which number shows it)."""
    s = m["evaluation"]["score"]
    out = []
    st, sp, sr = s["ssim_translated"], s["ssim_procedural"], s.get("ssim_procedural_resampled")
    if st < sp - 0.05:
        why = ""
        if sr is not None:
            why = (f"; the procedural weather itself, shrunk to the translator's working size and back, scores "
                   f"{sr:.3f}, so " + ("most of the loss is the resolution" if st >= sr - 0.05 else
                                       "the translator loses more than its resolution explains"))
        out.append(f"**Content is not kept as well as the procedural effect keeps it** (SSIM to the source {st:.3f} "
                   f"against {sp:.3f}{why}): lane markings, poles, cars and foliage come out blurred or "
                   "repainted (see the sheet). Part of a steering change on these frames is due to lost or "
                   "invented content, not to the weather.")
    mv = s["moved"]
    if math.isfinite(mv):
        if mv > 1:
            out.append(f"**The translations are farther from the procedural {s['weather']} than the clear frames "
                       f"are** (d(t,p)/d(x,p) = {mv:.2f}): in the steering trunk's feature space it made "
                       "something else, not that weather.")
        elif mv > 0.5:
            out.append(f"Only part of the way to the procedural {s['weather']} in the steering trunk's feature "
                       f"space (d(t,p)/d(x,p) = {mv:.2f}; 0 would be as close as the weather is to itself).")
    b, c = s["brightness"], s["contrast"]
    if abs(b["translated"] - b["procedural"]) > 15:
        side = "brighter" if b["translated"] > b["procedural"] else "darker"
        out.append(f"Its frames are {side} than the procedural {s['weather']} (mean grey level "
                   f"{b['translated']:.0f} against {b['procedural']:.0f}; clear frames {b['clear']:.0f}).")
    if abs(c["translated"] - c["procedural"]) > 10:
        side = "more" if c["translated"] > c["procedural"] else "less"
        out.append(f"Its frames have {side} contrast than the procedural {s['weather']} (RMS contrast "
                   f"{c['translated']:.0f} against {c['procedural']:.0f}; clear frames {c['clear']:.0f}).")
    if m.get("style_dim"):
        spt, spp = s.get("style_spread_translated"), s.get("style_spread_procedural")
        if spt is not None and spp is not None and spp > 0 and spt < 0.25 * spp:
            out.append(f"**The style vector barely changes the output** (two styles of one frame differ by "
                       f"{spt:.1f} grey levels on average; two procedural draws by {spp:.1f}): a search over "
                       "this MUNIT's style space (TACTIC) has little to choose from.")
    ratios = [(x["mean_abs_deg_translated"], x["mean_abs_deg_procedural"]) for x in s["models"]]
    more = sum(1 for t, p in ratios if t > 2 * p and t - p > 0.5)
    if ratios and more > len(ratios) / 2:
        out.append(f"It moves {more} of the {len(ratios)} steering models more than twice as much as the procedural "
                   "weather does: its inconsistencies are not all weather's.")
    return out


def _span(r: Any) -> str:
    return f"{r[0]}..{r[1] - 1}"


def _history_models(ev: Mapping[str, Any]) -> str:
    """The steering models with history a card lists (the old cards' metrics do not say: Chauffeur)."""
    steer = (ev.get("provenance") or {}).get("steering_models") or {}
    names = [n for n, d in steer.items() if d.get("history")]
    return ", ".join(names) if steer else "Chauffeur"


def _frames_lines(ev: Mapping[str, Any]) -> list[str]:
    """The card's lines on which frames were measured and who saw them in training (``provenance``); the
    old cards' sentence when the metrics do not say."""
    pv = ev.get("provenance")
    if not pv:
        return ["- Frames 1200..1499 were never seen in training: the numbers below are measured on them."]
    fr = ev.get("frame_range")
    where = f"frames {_span(fr)}" if fr else f"{ev['frames']} frames"
    out = [f"- Measured on {where} of `{pv.get('source', ev.get('source', '?'))}` ({ev['frames']} frames)."]
    tf = pv.get("translator_training_frames")
    if pv.get("translators_saw") is not None:
        out.append("- This translator trained on frames " + (_span(tf) if tf else "?") + " of that drive: "
                   + (f"{pv['translators_saw']} of the measured frames are among them."
                      if pv["translators_saw"] else "it never saw the measured frames."))
    steer = pv.get("steering_models") or {}
    groups: dict[str, list[str]] = {}
    for name, d in steer.items():
        saw = d.get("saw")
        if saw is None:
            key = "trained on another source, or its card does not say which frames trained it"
        elif saw:
            key = (f"trained on frames {_span(d['training_frames'])}: {saw} of the measured frames are among "
                   "them")
        else:
            key = (f"trained on frames {_span(d['training_frames'])} and never on the measured frames, which are "
                   + (f"{{its}} validation frames {_span(d['validation_frames'])} (the frames {{its}} epochs and "
                      "learning rate were chosen on)" if d.get("validation_frames") else
                      "outside {its} training split"))
        groups.setdefault(key, []).append(name)
    for key, names in groups.items():
        many = len(names) > 1
        out.append(f"- Steering model{'s' if many else ''} {', '.join(names)}: "
                   f"{key.format(its='their' if many else 'its')}.")
    if pv.get("earliest_history_frame") is not None and fr and pv["earliest_history_frame"] < fr[0]:
        out.append(f"- Models with history also read the frames before each judged frame as its history: "
                   f"from frame {pv['earliest_history_frame']} on.")
    hashed = [(n, d["sha256"]) for n, d in steer.items() if d.get("sha256")]
    if hashed:
        out.append("- Steering weights (SHA-256, first 12 digits; the whole digest in the metrics file): "
                   + ", ".join(f"{n} `{h[:12]}`" for n, h in hashed) + ".")
    return out


def model_card(m: Mapping[str, Any]) -> str:
    """The Markdown model card of a shipped translator from its metrics dict (:func:`translator_metrics`)."""
    arch, w = m["arch"], m["weather"]
    s = m["evaluation"]["score"]
    ev = m["evaluation"]
    cfg = m["training"]["config"]
    net = cfg["net"]
    this, paper = m["cost"]["this"], m["cost"]["paper"]
    who = "DeepRoad's UNIT (Zhang et al., ASE 2018)" if arch == "unit" else "TACTIC's MUNIT (Li et al., ICML 2021)"
    origin = ("DeepRoad trained UNIT on Udacity frames and 1,000 heavy-snow and 1,000 hard-rain frames from "
              "YouTube videos" if arch == "unit" else
              "TACTIC trained MUNIT on driving frames of real environmental conditions")
    losses = (f"least-squares GAN (weight {cfg['gan_w']:g}), image reconstruction ({cfg['recon_x_w']:g}), "
              + (f"style and content reconstruction ({cfg['recon_s_w']:g}, {cfg['recon_c_w']:g})"
                 if arch == "munit" else
                 f"KL = mean(μ²) ({cfg['recon_kl_w']:g}) and its cycle term ({cfg['recon_kl_cyc_w']:g})")
              + (f", cycle reconstruction ({cfg['recon_x_cyc_w']:g})" if cfg.get("recon_x_cyc_w", -1) != 0 else ""))
    fr = ev.get("frame_range")
    frames = f"frames {fr[0]}..{fr[1] - 1}" if fr else f"{ev['frames']} frames"
    seeds = ", ".join(map(str, ev["seeds"]))
    eps = [f"{e:g}" for e in ev["epsilons_deg"]]
    sec_it = m.get("seconds_per_iteration")
    lines = [
        f"# `{m['name']}`: {m['title']}",
        "",
        f"A {arch.upper()} image-to-image translator from clear daytime Udacity frames to **lidarmt's own "
        f"procedural {w}** (`lidarmt.camera.transforms` `{w}`), shipped so that DeepRoad's and TACTIC's "
        f"experiments can run on a fresh clone. It is a learned stand-in for {who}, **not a reproduction**:",
        "",
        f"- it learned to imitate a procedural effect, not real weather: {origin}; no such photographs can be "
        "downloaded here. The best it can do is what the procedural effect already does, in a learned and "
        + ("smoother form, with a style space to search;" if arch == "munit" else "smoother form;"),
        "- it was trained without the VGG perceptual loss (ImageNet VGG-16 weights cannot be downloaded here);",
        f"- it is small and briefly trained: {this['size']}² crops, dim {net['dim']}, {net['n_res']} residual "
        f"blocks, {m['iterations']:,} iterations (see *Size*).",
        "",
        "## Size, beside the paper's",
        "",
        "| | crop | dim | residual blocks | generator parameters (both domains) | discriminator parameters | "
        "GFLOP / iteration | iterations | total PFLOP |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| this translator | {this['size']}² | {net['dim']} | {net['n_res']} | {this['generator_parameters']:,} | "
        f"{this['discriminator_parameters']:,} | {this['gflop_per_iteration']:.1f} | {this['iterations']:,} | "
        f"{this['pflop_total']:.3f} |",
        f"| {paper['who']} | {paper['size']}² | 64 | 4 | {paper['generator_parameters']:,} | "
        f"{paper['discriminator_parameters']:,} | {paper['gflop_per_iteration']:.0f} | {paper['iterations']:,} | "
        f"{paper['pflop_total']:.0f} |",
        "",
        f"One iteration here costs 1/{paper['gflop_per_iteration'] / this['gflop_per_iteration']:.0f} of the "
        f"paper's, and the whole training 1/{paper['pflop_total'] / max(this['pflop_total'], 1e-12):,.0f}. FLOPs "
        "of one training iteration (discriminator and generator steps, forward and backward, batch 1) counted by "
        "`torch.utils.flop_counter` (2 per multiply-add; convolutions and matrix products) on lidarmt's own "
        "networks at both sizes" + ("; the paper's VGG loss would add more." if arch == "munit" else ".")
        + f" The file holds the A→B half only: {m['parameters']:,} parameters (fp16).",
        "",
        "## Training",
        "",
        f"- Domain A: Udacity frames 0..1199 of `../shared/data/udacity` (real frames, 320x240). Domain B: the "
        f"same 1,200 frames in procedural {w}, each with its own intensity (uniform in [0.6, 1]) and style "
        "parameters, so the translator sees a distribution of weathers; training draws A and B images "
        f"independently (unpaired). Made by `{m['training']['data_recipe']}`.",
        *_frames_lines(ev),
        f"- Losses: {losses}; Adam (lr {cfg['lr']:g}, β = ({cfg['beta1']:g}, {cfg['beta2']:g}), weight decay "
        f"{cfg['weight_decay']:g}), batch 1, random {cfg['size']}² crops of frames resized to a "
        f"{cfg.get('load_size') or cfg['size']}-pixel short side, horizontal flips; {cfg['precision']} autocast; "
        f"seed {cfg['seed']}.",
        f"- {m['iterations']:,} iterations in {m['seconds'] / 3600:.1f} h of wall time"
        + (f" ({sec_it:.2f} s per iteration)" if sec_it else "")
        + (f" on {m['training']['machine']}" if m["training"].get("machine") else "")
        + (f"; the run was set for {cfg['iterations']:,} and these weights are those of iteration "
           f"{m['iterations']:,}" if cfg["iterations"] > m["iterations"] else "") + ".",
        f"- Command: `{m['training']['command']}`",
        "",
        f"## Measured (held-back {frames}, seed{'s' if len(ev['seeds']) > 1 else ''} {seeds})",
        "",
        "t = this translator's frame ("
        + ("a style drawn from N(0, I) per frame and seed" if arch == "munit" else "UNIT is deterministic")
        + f"), p = the procedural "
        f"{w} of the same frame (intensity U[0.6, 1], style per frame and seed), x = the frame "
        "(`lidarmt.camera.translate.evaluate`).",
        "",
        "| | translated t | procedural p | clear x |",
        "|---|---:|---:|---:|",
        f"| SSIM to x (greyscale; content kept) | {_n(s['ssim_translated'])} | {_n(s['ssim_procedural'])}"
        + (f" ({_n(s['ssim_procedural_resampled'])} at the translator's resolution)"
           if s.get("ssim_procedural_resampled") is not None else "") + " | 1 |",
        f"| Fréchet distance to p ({ev['feature_model']} trunk features) | {_g(s['fid_translated'])} | "
        f"{_g(s['fid_floor'])} (another draw) | {_g(s['fid_clear'])} |",
        f"| mean grey level | {s['brightness']['translated']:.1f} | {s['brightness']['procedural']:.1f} | "
        f"{s['brightness']['clear']:.1f} |",
        f"| RMS contrast | {s['contrast']['translated']:.1f} | {s['contrast']['procedural']:.1f} | "
        f"{s['contrast']['clear']:.1f} |",
    ]
    if m.get("style_dim") and s.get("style_spread_translated") is not None:
        lines.append(f"| two draws of one frame differ by (grey levels) | {_n(s['style_spread_translated'], 1)} | "
                     f"{_n(s.get('style_spread_procedural'), 1)} | 0 |")
    lines += [
        "",
        f"moved = d(t, p) / d(x, p) = **{_n(s['moved'], 2)}** (0: the translations are as close to the procedural "
        f"{w} as it is to itself; 1: as far as the clear frames). The distance uses the pooled convolutional "
        f"features of the shipped `{ev['feature_model']}` steering model, not ImageNet Inception's: it is not "
        "comparable with published FIDs. That trunk sees frames at 100x100 and weighs global tone and coarse "
        "structure: for scale, the procedural frames blurred with a Gaussian of σ = 4 pixels are at "
        + _g(s.get("fid_blur_reference"))
        + " from themselves. A small distance says the tone and layout are right, not that the detail is "
        "(SSIM says that).",
        "",
        "Steering models: mean |θ(t) − θ(x)| against mean |θ(p) − θ(x)|, and DeepRoad's inconsistencies "
        f"(|Δθ| > ε) at ε = {', '.join(eps)}° as translated / procedural:",
        "",
        "| model | mean \\|Δθ\\| t (°) | mean \\|Δθ\\| p (°) | " + " | ".join(f">{e}°" for e in eps) + " | pairs |",
        "|---|---:|---:|" + "---:|" * len(eps) + "---:|",
    ]
    for x in s["models"]:
        lines.append(f"| {x['model']} | {x['mean_abs_deg_translated']:.2f} | {x['mean_abs_deg_procedural']:.2f} | "
                     + " | ".join(f"{x['deeproad_translated'][e]} / {x['deeproad_procedural'][e]}" for e in eps)
                     + f" | {x['pairs']} |")
    lines += [
        "",
        f"Models with history ({_history_models(ev)}) see windows of consecutive frames with one weather on "
        "every frame, "
        f"on {ev.get('history_frames', 'some')} of the frames. "
        + ("These are differences between a model's own outputs, as DeepRoad's relation is, not errors against "
           "the labels; each steering model's own accuracy is on its card."
           if ev.get("provenance") else
           "The steering models' labels are poor (see their cards), so these are differences between a model's "
           "own outputs, as DeepRoad's relation is."),
        "",
        "## Known failure modes",
        "",
        f"- Output resolution: frames are translated at a {cfg.get('load_size') or cfg['size']}-pixel short side "
        "and resized back (bicubic), so detail finer than that is lost whatever the weather.",
        *[f"- {o}" for o in _observations(m)],
        *[f"- Seen in the sheet (`docs/images/translators.png`): {o}" for o in m.get("notes") or []],
        "- Trained on 1,200 frames of one drive in one camera: other roads, cameras or times of day are "
        "outside what it saw.",
        "",
        "## Use",
        "",
        f"`lidarmt camera translate --translator {m['name']} --images DIR --out OUT`; as a transformation "
        f"`lidarmt camera fuzz --transforms {m['name']}`"
        + (f"; as a search space `lidarmt camera search --space {m['name']}`" if arch == "munit" else "") + ".",
        "Rebuild this card and the metrics with `python scripts/ship_translators.py` (`--runs DIR` from the "
        "training runs; `--from-shipped` re-measures the shipped weights, keeping this card's training facts).",
        "",
    ]
    return "\n".join(lines)
