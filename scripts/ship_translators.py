"""Ship lidarmt's trained weather translators: weights, measured numbers, model cards and the README's sheet.

For each run folder ``RUNS/<name>`` (written by ``lidarmt camera train-translator``; only read here):

1. copies ``translator.pt`` to ``lidarmt/camera/translate/weights/<name>.pt``;
2. measures every translator at once with :mod:`lidarmt.camera.translate.evaluate` against the procedural
   weather it learned, on Udacity frames that neither the translators nor the steering models trained on (by
   default: the frames after both training ranges, read from the translators' data recipe and the steering
   models' metrics files; 1760..2199 for the shipped ones, the steering models' validation split);
3. writes ``<name>.json`` (training facts, cost beside the paper's, the numbers, which frames were measured and
   who saw them, the SHA-256 of every steering model's weights) and ``<name>.md`` (the model card,
   :mod:`lidarmt.camera.translate.cards`) beside the weights;
4. writes the picture sheet ``docs/images/translators.png`` (original, procedural, UNIT, MUNIT with two styles)
   and the whole evaluation as ``benchmarks/results/translators_eval.json``.

``--from-shipped`` re-measures the shipped weights instead (their run folders gone; e.g. after the steering
models were retrained): the weights and each ``<name>.json``'s training facts, cost and notes are kept as they
are, steps 2 to 4 are redone.

Rerunnable: everything is measured before anything is written, every output is replaced atomically, and the run
folders are never written to. The steering models' weights are hashed before and after the measurement: if one
changed meanwhile nothing is written.

    OMP_NUM_THREADS=1 python scripts/ship_translators.py --runs /work/data/tr
    OMP_NUM_THREADS=1 python scripts/ship_translators.py --from-shipped
    python scripts/ship_translators.py --from-shipped --frames 1760:1790 --out /tmp/ship   # a quick look
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAMES = ("unit-night", "unit-rain", "unit-snow", "munit-night", "munit-rain", "munit-snow")
#: What the picture sheet shows of each shipped translator that the numbers do not say (looked at by a person;
#: replaced by --notes FILE, a JSON object name -> list of sentences).
#: Seen on the snapshots of about 3,000 iterations; check them against the sheet of the weights you ship.
_NIGHT = ("the frame darkens as the procedural night does, but none of its glowing lamps appear, and cars, poles "
          "and the yellow centre line are smeared")
_RAIN = ("rain comes out as a regular hatch pattern over the whole frame (an up-sampling artefact), not as "
         "streaks; the road and the scene stay recognisable")
_SNOW = ("the frame whitens, but no flakes are drawn: the road and its edges carry a coarse chevron texture instead")
NOTES: dict[str, list[str]] = {
    "unit-night": [_NIGHT + "."],
    "munit-night": [_NIGHT + "; its two styles differ mostly in overall brightness."],
    "unit-rain": [_RAIN + "."],
    "munit-rain": [_RAIN + "; its two styles look alike."],
    "unit-snow": [_SNOW + ", and above the horizon the scene is washed out."],
    "munit-snow": [_SNOW + "; trees, cars and signs above the road are largely lost."],
}


def _frames(text: str) -> list[int]:
    if ":" in text:
        a, b = text.split(":", 1)
        return list(range(int(a), int(b)))
    return [int(x) for x in text.split(",") if x.strip()]


def _same(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two data paths (relative ones from the project root) name the same folder."""
    def resolve(p: str | os.PathLike[str]) -> Path:
        q = Path(p).expanduser()
        return (q if q.is_absolute() else ROOT / q).resolve()

    return resolve(a) == resolve(b)


def _recipe_source(recipe: str) -> str | None:
    """The ``--udacity`` folder a ``make_weather_domains.py`` command line read."""
    import re

    got = re.search(r"--udacity[= ](\S+)", recipe)
    return got.group(1) if got else None


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _steering_facts(models: list[str], source: Path) -> dict[str, dict]:
    """Per steering model: the SHA-256 of its weights file, the frames that trained it and validated it (from
    its metrics file, when it was trained on ``source``), and its history length."""
    import json

    from lidarmt.camera.models import registry, zoo
    from lidarmt.camera.models.archs import get_arch

    out: dict[str, dict] = {}
    for m in models:
        d: dict = {"sha256": None, "training_frames": None, "validation_frames": None, "history": None}
        if registry.kind_of(m) == "builtin" and m in zoo.available():
            w = zoo.shipped_weights(m)
            d["sha256"] = _sha256(w)
            d["history"] = int(get_arch(m).input_spec.history)
            try:
                doc = json.loads(w.with_suffix(".json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                doc = {}
            n_tr, n_all = doc.get("train_frames"), doc.get("data_frames")
            if isinstance(n_tr, int) and doc.get("data") and _same(doc["data"], source):
                d["training_frames"] = [0, n_tr]
                if isinstance(n_all, int) and n_all > n_tr:
                    d["validation_frames"] = [n_tr, n_all]
        else:
            d["sha256"] = registry.file_sha256(m)
            d["history"] = int(registry.get_model(m).input_spec.history)
        out[m] = d
    return out


def _provenance(source: Path, idx: list[int], facts: dict, steer: dict[str, dict], earliest: int | None
                ) -> dict[str, dict]:
    """Per translator: which frames were measured and which of them it and each steering model trained on."""
    from lidarmt.camera.translate import cards

    def inside(r: list[int] | None) -> int | None:
        return None if r is None else sum(1 for i in idx if r[0] <= i < r[1])

    steering = {m: {"sha256": d["sha256"], "training_frames": d["training_frames"],
                    "validation_frames": d["validation_frames"], "saw": inside(d["training_frames"]),
                    "history": d["history"]}
                for m, d in steer.items()}
    out = {}
    for n, f in facts.items():
        recipe = str(f.get("data_recipe", ""))
        n_train = cards.recipe_training_frames(recipe)
        rsrc = _recipe_source(recipe)
        tf = [0, n_train] if n_train is not None and rsrc and _same(rsrc, source) else None
        out[n] = {"source": _shown(source), "translator_training_frames": tf, "translators_saw": inside(tf),
                  "steering_models": steering, "earliest_history_frame": earliest}
    return out


def _shown(path: Path) -> str:
    """A data path as the cards show it: relative to the project root's parent folder when under it."""
    p = Path(path).resolve()
    try:
        return str(Path("..") / p.relative_to(ROOT.parent.resolve()))
    except ValueError:
        return str(path)


def _unseen(source: Path, n_src: int, facts: dict, steer: dict[str, dict]) -> list[int]:
    """The frames of ``source`` after every translator's and steering model's training frames."""
    from lidarmt.camera.translate import cards

    start = 0
    for f in facts.values():
        recipe = str(f.get("data_recipe", ""))
        n_train, rsrc = cards.recipe_training_frames(recipe), _recipe_source(recipe)
        if n_train is not None and rsrc and _same(rsrc, source):
            start = max(start, n_train)
    for d in steer.values():
        if d["training_frames"]:
            start = max(start, d["training_frames"][1])
    return list(range(start, n_src))


def main(argv: list[str] | None = None) -> int:
    import json

    import numpy as np

    from lidarmt._atomic import atomic_path, atomic_write_text
    from lidarmt.camera.errors import CameraError
    from lidarmt.camera.models.registry import available as available_models
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.translate import cards
    from lidarmt.camera.translate.evaluate import _spread, evaluate_translators
    from lidarmt.camera.translate.model import LearnedTranslator, read_translator
    from lidarmt.camera.translate.nets import NetConfig
    from lidarmt.camera.translate.registry import WEIGHTS_DIR
    from lidarmt.camera.translate.sheet import translator_sheet

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--runs", type=Path, help="folder holding one training run per translator")
    how.add_argument("--from-shipped", action="store_true",
                     help="re-measure the weights already in --out, keeping each <name>.json's training facts")
    ap.add_argument("--names", default=",".join(NAMES), help="translators to ship (comma-separated)")
    ap.add_argument("--udacity", type=Path, default=ROOT.parent / "shared" / "data" / "udacity")
    ap.add_argument("--frames", default=None,
                    help="frames to measure on: A:B or a comma list (default: those after every translator's and "
                    "steering model's training frames)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds of the weather and style draws")
    ap.add_argument("--history-frames", type=int, default=100,
                    help="frames the models with history (Chauffeur, Rambo) are judged on")
    ap.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="where the weights, cards and metrics go")
    ap.add_argument("--sheet", type=Path, default=ROOT / "docs" / "images" / "translators.png")
    ap.add_argument("--sheet-frames", default=None,
                    help="frames of the picture sheet (default: four spread over the measured frames)")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "translators_eval.json",
                    help="the whole evaluation as JSON")
    ap.add_argument("--models", default="", help="steering models to measure with (default: every shipped one)")
    ap.add_argument("--notes", type=Path, help="JSON object: translator name -> list of failure modes seen in the "
                    "sheet (default: the script's NOTES; with --from-shipped, each card's own)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (more only on an idle machine)")
    ap.add_argument("--machine", default="a shared 2-core CPU, six translators training side by side, one torch "
                    "thread each", help="where the runs were trained, for the cards (not with --from-shipped)")
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(max(1, a.threads))
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    names = [n.strip() for n in a.names.split(",") if n.strip()]
    notes = json.loads(a.notes.read_text(encoding="utf-8")) if a.notes else None
    facts: dict[str, dict] = {}
    kept: dict[str, dict] = {}  # --from-shipped: the shipped metrics
    if a.from_shipped:
        missing = [str(a.out / f"{n}{ext}") for n in names for ext in (".pt", ".json")
                   if not (a.out / f"{n}{ext}").is_file()]
        if missing:
            ap.error(f"nothing shipped to re-measure: no {', '.join(missing)}")
        for n in names:
            try:
                kept[n] = json.loads((a.out / f"{n}.json").read_text(encoding="utf-8"))
                facts[n] = cards.facts_from_metrics(kept[n])
                state, meta = read_translator(a.out / f"{n}.pt")
            except (OSError, ValueError, CameraError) as err:
                ap.error(f"{n}: {err}")
            params = int(sum(v.numel() for v in state.values() if v.is_floating_point()))
            if params != facts[n]["translator_parameters"] or int(meta.get("iterations") or 0) != facts[n]["iterations"]:
                ap.error(f"{n}: {a.out / n}.pt ({params:,} parameters, iteration {meta.get('iterations')}) is not "
                         f"the translator {n}.json describes ({facts[n]['translator_parameters']:,}, iteration "
                         f"{facts[n]['iterations']})")
            say(f"{n}: shipped, {facts[n]['iterations']:,} iterations (training facts kept from {n}.json)")
    else:
        missing = [n for n in names if not (a.runs / n / "translator.pt").is_file()]
        if missing:
            ap.error(f"no translator.pt in {', '.join(str(a.runs / n) for n in missing)}")
        a.out.mkdir(parents=True, exist_ok=True)
        for n in names:
            facts[n] = cards.training_facts(a.runs / n, machine=a.machine)
            with atomic_path(a.out / f"{n}.pt") as tmp:
                shutil.copyfile(a.runs / n / "translator.pt", tmp)
            say(f"{n}: {facts[n]['iterations']:,} iterations, {facts[n]['seconds'] / 3600:.1f} h -> {a.out / n}.pt")
    trs = [LearnedTranslator(n, a.out / f"{n}.pt", device=a.device, weather=n.rsplit("-", 1)[-1],
                             title=f"{n.split('-')[0].upper()} {n.rsplit('-', 1)[-1]}") for n in names]

    models = [m.strip() for m in a.models.split(",") if m.strip()] or available_models()
    steer = _steering_facts(models, a.udacity)
    with open_images(a.udacity) as src:
        n_src = len(src)
    idx = _frames(a.frames) if a.frames else _unseen(a.udacity, n_src, facts, steer)
    if len(idx) < 2:
        ap.error(f"{a.udacity}: no frames after the translators' and steering models' training frames "
                 f"({n_src} frames); pass --frames A:B")
    history = max([d["history"] or 0 for d in steer.values()] + [0])
    hidx = _spread(idx, a.history_frames) if history else []
    earliest = max(0, min(hidx) - history) if hidx else None
    prov = _provenance(a.udacity, idx, facts, steer, earliest)
    say(f"measuring on {len(idx)} frames ({idx[0]}..{idx[-1]}) with {', '.join(models)}; steering weights "
        + ", ".join(f"{m} {d['sha256'][:12] if d['sha256'] else '?'}" for m, d in steer.items()))

    res = evaluate_translators(trs, a.udacity, frames=idx, seeds=_frames(a.seeds),
                               history_frames=a.history_frames, device=a.device, progress=say, models=models)
    after = _steering_facts(models, a.udacity)
    changed = [m for m in models if after[m]["sha256"] != steer[m]["sha256"]]
    if changed:
        print(f"error: the weights of {', '.join(changed)} changed during the measurement; nothing written, "
              "run again", file=sys.stderr)
        return 1
    print(res.markdown())
    say("counting the training cost (meta device)" if not a.from_shipped else "the cards' cost kept as shipped")
    out_files: dict[Path, str] = {}
    costs: dict[str, dict] = {}
    for n, score in zip(names, res.scores, strict=True):
        f = facts[n]
        if a.from_shipped:
            keys = ("gflop_per_iteration", "generator_parameters", "discriminator_parameters")
            cost = {k: kept[n]["cost"]["this"][k] for k in keys}
            paper_cost = {k: kept[n]["cost"]["paper"][k] for k in keys}
            note = list(notes.get(n, [])) if notes is not None else list(kept[n].get("notes") or [])
        else:
            arch = f["config"]["net"]["arch"]
            if arch not in costs:
                p = cards.PAPERS[arch]
                costs[arch] = cards.compute_cost(p.net, p.size, cyc_w=p.cyc_w)
            paper_cost = costs[arch]
            cost = cards.compute_cost(NetConfig.from_dict(f["config"]["net"]), int(f["config"]["size"]),
                                      cyc_w=float(f["config"].get("recon_x_cyc_w", -1.0)))
            note = list((notes if notes is not None else NOTES).get(n, []))
        m = cards.translator_metrics(n, f, score, res, cost=cost, paper_cost=paper_cost, notes=note,
                                     provenance=prov[n])
        out_files[a.out / f"{n}.json"] = json.dumps(m, indent=2) + "\n"
        out_files[a.out / f"{n}.md"] = cards.model_card(m)
    whole = res.to_dict()
    whole["provenance"] = {k: v for k, v in prov[names[0]].items() if k not in ("translators_saw",)}
    whole["provenance"]["translator_training_frames"] = {n: prov[n]["translator_training_frames"] for n in names}
    out_files[a.json] = json.dumps(whole, indent=2) + "\n"

    if a.sheet_frames:
        sheet_idx = _frames(a.sheet_frames)
    else:
        sheet_idx = [idx[(2 * k + 1) * len(idx) // 8] for k in range(4)]
    with open_images(a.udacity) as src:
        frames = np.stack([src[i].image for i in sheet_idx])
    order = sorted(trs, key=lambda t: (t.arch != "unit", ["night", "rain", "snow"].index(t.weather)
                                       if t.weather in ("night", "rain", "snow") else 9))
    for path, text in out_files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        say(f"wrote {path}")
    translator_sheet(frames, order, a.sheet, frame_indices=sheet_idx)
    say(f"wrote {a.sheet} (frames {', '.join(map(str, sheet_idx))})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
