"""The README's tables of "A campaign on the real Udacity frames", as Markdown, from one campaign folder per model
(each written by ``lidarmt camera fuzz ... --out runs/camera/campaign/MODEL``, all with the same seeds):

    OMP_NUM_THREADS=1 python scripts/camera_campaign_tables.py runs/camera/campaign/{keras-dave2,dave2,dave-orig} \\
        --label keras-dave2="Keras DAVE-2"

Prints DeepTest's Table 7 summed over the models, the Table 8 line at the campaigns' λ, ε (the three largest
transformations per model), DeepRoad's table and the MSE_orig / per-transformation MSE table (the mean of the MSE
over a transformation's settings), with the seed labels and the always-zero MSE on the seeds. Everything comes
from each folder's ``summary.json`` except the seed labels, which are folded from its journal by the engine
(``lidarmt.engine.campaign.load_tally``). Folders that disagree on the images, seeds, transformations or
criteria are refused: their counts would not add up. Exit status 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# what every campaign of one table must share (config keys of summary.json), so that counts add up
SHARED = ("images", "frames", "seed", "trials", "transforms", "topic")
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


class TablesError(Exception):
    """Bad input: reported as one line."""


def _md(head: Sequence[str], rows: Sequence[Sequence[str]], *, first_right: bool = False) -> str:
    """A Markdown table, numbers right-aligned (the first column too with ``first_right``)."""
    sep = ["---:" if (i or first_right) else "---" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


class Campaign:
    """One model's campaign folder: its summary and the seeds' labels (folded from the journal)."""

    def __init__(self, folder: Path) -> None:
        path = folder / "summary.json"
        try:
            self.summary: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError as err:
            raise TablesError(f"{folder}: no summary.json (run lidarmt camera fuzz --out {folder} first)") from err
        except (OSError, ValueError) as err:
            raise TablesError(f"{path}: not readable as JSON ({err})") from err
        if not self.summary.get("labelled") or "table7" not in self.summary:
            raise TablesError(f"{path}: the source has no steering labels, so DeepTest's tables are not defined")
        models = self.summary.get("models") or []
        if len(models) != 1:
            raise TablesError(f"{path}: {len(models)} models in one campaign; give one folder per model")
        self.folder = folder
        self.model = models[0]["model"]
        self.label = self.model  # the name shown
        self.mse_orig = models[0]["mse_orig"]
        self.groups = self.summary["groups"]
        if self.summary.get("findings"):
            raise TablesError(f"{path}: {self.summary['findings']} model crashes/timeouts; the tables assume none")
        self.seed_labels = self._seed_labels()

    def _seed_labels(self) -> list[tuple[int, float]]:
        from lidarmt.engine.campaign import load_tally
        from lidarmt.engine.errors import FuzzInputError

        try:
            _config, tally = load_tally(self.folder)
        except (OSError, FuzzInputError) as err:
            raise TablesError(f"{self.folder}: the journal could not be folded ({err})") from err
        return sorted((frame, lab) for (_m, frame), (lab, _pred) in tally.source.items())

    def shared(self) -> dict[str, Any]:
        cfg = self.summary["config"]
        return {**{k: cfg.get(k) for k in SHARED}, "criteria": self.summary["criteria"]}

    def transforms(self) -> list[tuple[str, str]]:
        """(name, family) in campaign order."""
        seen: dict[str, str] = {}
        for g in self.groups:
            seen.setdefault(g["transform"], g["family"])
        return list(seen.items())


def check_same(camps: Sequence[Campaign]) -> None:
    ref = camps[0].shared()
    for c in camps[1:]:
        other = c.shared()
        for k, v in ref.items():
            if other[k] != v:
                raise TablesError(f"{c.folder} and {camps[0].folder} differ in {k}: their counts do not add up")
    labels = [c.label for c in camps]
    if len(set(labels)) != len(labels):
        raise TablesError(f"two folders show the same model name ({', '.join(labels)}); use --label")


# ---------------------------------------------------------------------------------------------- tables


def table7(camps: Sequence[Campaign]) -> str:
    """DeepTest's Table 7 summed over the campaigns."""
    from lidarmt.camera.relations import DEEPTEST_EPSILONS

    cols = camps[0].summary["table7"]["columns"]
    comp = [c for c in cols if c != "simple"]
    head = ["λ", *(f"simple ε={e:g}" for e in DEEPTEST_EPSILONS if "simple" in cols), *comp]
    rows = []
    for i, r0 in enumerate(camps[0].summary["table7"]["rows"]):
        rs = [c.summary["table7"]["rows"][i] for c in camps]
        cells = [f"{r0['lambda']:g}"]
        if "simple" in cols:
            cells += [str(sum(r["simple"][f"{e:g}"] for r in rs)) for e in DEEPTEST_EPSILONS]
        cells += [str(sum(r[c] for r in rs)) for c in comp]
        rows.append(cells)
    return _md(head, rows, first_right=True)


def table8_line(camps: Sequence[Campaign], *, top: int = 3) -> str:
    """Table 8 as one line: per model its total and its ``top`` largest transformations (ties in campaign order)."""
    crit = camps[0].summary["criteria"]
    parts = []
    for c in camps:
        counts = [(r["transform"], int(r[c.model])) for r in c.summary["table8"]["rows"]]
        total = sum(n for _, n in counts)
        largest = sorted((tn for tn in counts if tn[1] > 0), key=lambda tn: -tn[1])[:top]  # stable: campaign order
        parts.append(f"{c.label} {total}" + (f" ({', '.join(f'{t} {n}' for t, n in largest)})" if largest else ""))
    return (f"Table 8 at λ = {crit['lambda']:g}, ε = {crit['epsilon']:g} (erroneous behaviours per model, all "
            f"transformations; the {WORDS.get(top, top)} largest): " + "; ".join(parts) + ".")


def deeproad(camps: Sequence[Campaign]) -> str:
    """DeepRoad's table: per model, pairs above 10/20/30/40°, and the weather and mirror pairs above 10°."""
    from lidarmt.camera.relations import DEEPROAD_EPS_DEG

    eps = [f"{e:g}" for e in DEEPROAD_EPS_DEG]
    per_model = {c.summary["pairs_done"] for c in camps}

    def pairs(c: Campaign, family: str) -> int:
        return sum(r["pairs"] for r in c.summary["deeproad"] if r["family"] == family)

    def above(c: Campaign, e: str, family: str | None = None) -> int:
        return sum(r["inconsistent"][e] for r in c.summary["deeproad"] if family in (None, r["family"]))

    weather, mirror = {pairs(c, "weather") for c in camps}, {pairs(c, "mirror") for c in camps}
    if len(per_model) != 1 or len(weather) != 1 or len(mirror) != 1:
        raise TablesError("the campaigns judged different numbers of pairs (a crash or a resumed run?)")
    head = ["model", *(f"> {e}°" for e in eps), f"of which weather ({weather.pop()} pairs) > {eps[0]}°",
            f"mirror ({mirror.pop()}) > {eps[0]}°"]
    rows = [[c.label, *(str(above(c, e)) for e in eps), str(above(c, eps[0], "weather")),
             str(above(c, eps[0], "mirror"))] for c in camps]
    line = (f"DeepRoad's relation (label-free), pairs with |θ(i) − θ(τ(i))| above {' / '.join(e + '°' for e in eps)}, "
            f"of {per_model.pop()} per model:")
    return line + "\n\n" + _md(head, rows)


def mse(camps: Sequence[Campaign]) -> str:
    """MSE_orig and, per transformation, the mean over its settings of the MSE against the (expected) labels."""
    names = [t for t, _ in camps[0].transforms()]
    seeds = camps[0].seed_labels
    if any(c.seed_labels != seeds for c in camps[1:]):
        raise TablesError("the campaigns' seed labels differ")
    zero = _mean([lab ** 2 for _, lab in seeds])
    labels = ", ".join(f"{math.degrees(lab):+.1f}°" for _, lab in seeds)
    rows = []
    for c in camps:
        per: dict[str, list[float]] = {}
        for g in c.groups:
            if g["mse"] is not None:
                per.setdefault(g["transform"], []).append(g["mse"])
        rows.append([c.label, f"{c.mse_orig:.4f}",
                     *(f"{_mean(per[t]):.4f}" if per.get(t) else "–" for t in names)])
    line = f"On these {len(seeds)} seeds (labels {labels}), always answering zero scores {zero:.4f}:"
    return line + "\n\n" + _md(["model", "MSE_orig", *names], rows)


def render(camps: Sequence[Campaign]) -> str:
    check_same(camps)
    return "\n\n".join([
        f"Measured for {', '.join(c.label for c in camps)}.",
        table7(camps), table8_line(camps), deeproad(camps), mse(camps),
    ])


def _labels(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key or not text:
            raise TablesError(f"--label {item!r}: expected FOLDER_OR_MODEL=TEXT")
        out[key] = text
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path,
                    help="campaign folders, one model each, in table order (default: every folder under --root, "
                         "sorted by name)")
    ap.add_argument("--root", type=Path, default=Path("runs/camera/campaign"))
    ap.add_argument("--label", action="append", default=[], metavar="FOLDER_OR_MODEL=TEXT",
                    help="the name a model is shown with (keyed by its folder's name or the model's name)")
    args = ap.parse_args(argv)
    try:
        labels = _labels(args.label)
        folders = args.folders
        if not folders and args.root.is_dir():
            folders = sorted(p for p in args.root.iterdir() if (p / "summary.json").is_file())
        if not folders:
            raise TablesError(f"no campaign folders given and none under {args.root}")
        camps = [Campaign(f) for f in folders]
        for c in camps:
            c.label = labels.get(c.folder.name, labels.get(c.model, c.model))
        print(render(camps))
    except TablesError as err:
        print(f"camera_campaign_tables: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
