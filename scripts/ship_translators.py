"""Ship lidarmt's trained weather translators: weights, measured numbers, model cards and the README's sheet.

For each run folder ``RUNS/<name>`` (written by ``lidarmt camera train-translator``; only read here):

1. copies ``translator.pt`` to ``lidarmt/camera/translate/weights/<name>.pt``;
2. measures every translator at once with :mod:`lidarmt.camera.translate.evaluate` on the held-back Udacity
   frames (1200..1499: never seen in training) against the procedural weather it learned;
3. writes ``<name>.json`` (training facts, cost beside the paper's, the numbers) and ``<name>.md`` (the model
   card, :mod:`lidarmt.camera.translate.cards`) beside the weights;
4. writes the picture sheet ``docs/images/translators.png`` (original, procedural, UNIT, MUNIT with two styles)
   and the whole evaluation as ``benchmarks/results/translators_eval.json``.

Rerunnable: every output is replaced atomically; the run folders are never written to.

    OMP_NUM_THREADS=1 python scripts/ship_translators.py --runs /work/data/tr
    python scripts/ship_translators.py --runs /work/data/tr --frames 1200:1230 --out /tmp/ship   # a quick look
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
SHEET_FRAMES = (1210, 1290, 1380, 1460)
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


def main(argv: list[str] | None = None) -> int:
    import json

    import numpy as np

    from lidarmt._atomic import atomic_path, atomic_write_text
    from lidarmt.camera.sources.factory import open_images
    from lidarmt.camera.translate import cards
    from lidarmt.camera.translate.evaluate import HELD_BACK, evaluate_translators
    from lidarmt.camera.translate.model import LearnedTranslator
    from lidarmt.camera.translate.nets import NetConfig
    from lidarmt.camera.translate.registry import WEIGHTS_DIR
    from lidarmt.camera.translate.sheet import translator_sheet

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, type=Path, help="folder holding one training run per translator")
    ap.add_argument("--names", default=",".join(NAMES), help="run folders to ship (comma-separated)")
    ap.add_argument("--udacity", type=Path, default=ROOT.parent / "shared" / "data" / "udacity")
    ap.add_argument("--frames", default=f"{HELD_BACK.start}:{HELD_BACK.stop}",
                    help="held-back frames to measure on: A:B or a comma list")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds of the weather and style draws")
    ap.add_argument("--history-frames", type=int, default=100,
                    help="frames the models with history (Chauffeur) are judged on")
    ap.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="where the weights, cards and metrics go")
    ap.add_argument("--sheet", type=Path, default=ROOT / "docs" / "images" / "translators.png")
    ap.add_argument("--sheet-frames", default=",".join(map(str, SHEET_FRAMES)))
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "translators_eval.json",
                    help="the whole evaluation as JSON")
    ap.add_argument("--models", default="", help="steering models to measure with (default: every shipped one)")
    ap.add_argument("--notes", type=Path, help="JSON object: translator name -> list of failure modes seen in the "
                    "sheet (default: the script's NOTES)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (more only on an idle machine)")
    ap.add_argument("--machine", default="a shared 2-core CPU, six translators training side by side, one torch "
                    "thread each", help="where the runs were trained, for the cards")
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(max(1, a.threads))
    t0 = time.perf_counter()
    notes = json.loads(a.notes.read_text(encoding="utf-8")) if a.notes else NOTES
    names = [n.strip() for n in a.names.split(",") if n.strip()]
    missing = [n for n in names if not (a.runs / n / "translator.pt").is_file()]
    if missing:
        ap.error(f"no translator.pt in {', '.join(str(a.runs / n) for n in missing)}")
    a.out.mkdir(parents=True, exist_ok=True)
    facts = {}
    for n in names:
        facts[n] = cards.training_facts(a.runs / n, machine=a.machine)
        with atomic_path(a.out / f"{n}.pt") as tmp:
            shutil.copyfile(a.runs / n / "translator.pt", tmp)
        print(f"{n}: {facts[n]['iterations']:,} iterations, {facts[n]['seconds'] / 3600:.1f} h -> {a.out / n}.pt",
              flush=True)
    trs = [LearnedTranslator(n, a.out / f"{n}.pt", device=a.device, weather=n.rsplit("-", 1)[-1],
                             title=f"{n.split('-')[0].upper()} {n.rsplit('-', 1)[-1]}") for n in names]

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    res = evaluate_translators(trs, a.udacity, frames=_frames(a.frames), seeds=_frames(a.seeds),
                               history_frames=a.history_frames, device=a.device, progress=say,
                               models=[m.strip() for m in a.models.split(",") if m.strip()] or None)
    res.write_json(a.json)
    print(res.markdown())
    say("counting the training cost (meta device)")
    costs = {}
    for arch in sorted({f["config"]["net"]["arch"] for f in facts.values()}):
        p = cards.PAPERS[arch]
        costs[arch] = cards.compute_cost(p.net, p.size, cyc_w=p.cyc_w)
    for n, score in zip(names, res.scores, strict=True):
        f = facts[n]
        cost = cards.compute_cost(NetConfig.from_dict(f["config"]["net"]), int(f["config"]["size"]),
                                  cyc_w=float(f["config"].get("recon_x_cyc_w", -1.0)))
        m = cards.translator_metrics(n, f, score, res, cost=cost, paper_cost=costs[f["config"]["net"]["arch"]],
                                     notes=list(notes.get(n, [])))
        atomic_write_text(a.out / f"{n}.json", json.dumps(m, indent=2) + "\n")
        atomic_write_text(a.out / f"{n}.md", cards.model_card(m))
        say(f"wrote {a.out / n}.json and .md")
    sheet_idx = _frames(a.sheet_frames)
    with open_images(a.udacity) as src:
        frames = np.stack([src[i].image for i in sheet_idx])
    order = sorted(trs, key=lambda t: (t.arch != "unit", ["night", "rain", "snow"].index(t.weather)
                                       if t.weather in ("night", "rain", "snow") else 9))
    translator_sheet(frames, order, a.sheet, frame_indices=sheet_idx)
    say(f"wrote {a.sheet}; {a.json}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
