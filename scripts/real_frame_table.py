"""The README's table of the real-frame campaigns: ``python scripts/real_frame_table.py OUT`` after
``scripts/real_frame_campaigns.sh OUT`` (cells: n = 10 / 100 / 1000, from each run's summary.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

NAMES = {"kitti": "7 KITTI object frames × 2 trials, road labels", "drive": "drive 0001, 12 frames, labelled view",
         "corridor": "drive 0001, 12 frames, GeoJSON corridor"}


def cells(rows: list[dict], f) -> str:
    return " / ".join(f(r) for r in rows)


def main(out: Path) -> None:
    print("| frames, ROI | region | reached | \\|O\\| > \\|O′\\| | O ⊄ O′ | lost labelled objects (of those in O) | "
          "lost unlabelled (junk) | lost outside the labels |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for src, name in NAMES.items():
        for reg in ("disk", "grid"):
            p = out / f"{src}_{reg}" / "summary.json"
            if not p.is_file():
                continue
            rows = json.loads(p.read_text())["by_n"]
            lost = cells(rows, lambda r: str(sum(r["labelled_as"].values())))
            of = cells(rows, lambda r: str(sum((r.get("labelled_source") or {}).values())))
            reach = cells(rows, lambda r: "{:.0f} %".format(100 * r["reached_mean"] / r["n"]))
            print(f"| {name} | {reg} | {reach} | "
                  f"{cells(rows, lambda r: str(r['count_relation']['k']))} of {rows[0]['pairs']} | "
                  f"{cells(rows, lambda r: str(r['subset_relation']['k']))} | {lost} (of {of}) | "
                  f"{cells(rows, lambda r: str(sum(r['lost_by_label']['unlabelled'].values())))} | "
                  f"{cells(rows, lambda r: str(sum(r['lost_by_label']['outside'].values())))} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
