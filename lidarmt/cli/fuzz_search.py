"""``lidarmt fuzz --search es|random``: critical noise conditions for MR1 (:mod:`lidarmt.search.lidar`).

A search is an option of ``lidarmt fuzz`` rather than a command of its own because it judges the same relation
on the same recording, map and perception module with the same options (--bag, --map, --sut, --mode, --n,
--frames, --seed, --out, --resume, --force, --bundles, --ddmin-budget); only what varies the noise differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_search(strategy: str, *, bag: str, topic: str | None, roi: Any, sut: Any, n_max: int, frames: int | None,
               seed: int, budget: int, top: int, timeout: float | None, out: Path | None, resume: bool,
               force: bool, bundles: int | None, ddmin_budget: int, quiet: bool) -> None:
    """Run (or resume) a noise-condition search, then bundle the validation's violations and write reports."""
    from lidarmt.cli._common import CampaignProgress, console, run_with_bar
    from lidarmt.engine.campaign import RunLock, environment, make_bundles
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.mr1.campaign import select_frames
    from lidarmt.lidar.specs import SourceSpec, build_roi_provider, open_source
    from lidarmt.search.errors import SearchArgumentError
    from lidarmt.search.lidar import LidarSearchConfig
    from lidarmt.search.report import lidar_summary, lidar_table, write_lidar_reports

    source = SourceSpec(bag, topic)
    rec = open_source(source)
    available = len(rec)
    count = 6 if frames is None else frames
    if count >= available:
        raise SearchArgumentError(f"--frames {count}: the recording holds {available} frames; leave some out of "
                                  "the search batch to validate the conditions on (e.g. --frames "
                                  f"{max(1, available // 5)})")
    chosen = select_frames(available, count, seed)
    build_roi_provider(roi).roi_for(rec[chosen[0]])  # fails early: unreadable map, no pose, ...
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    fresh = tuple(i for i in range(available) if i not in chosen)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(f"search-{Path(bag.rstrip('/')).name.split('.')[0]}", bag, roi.map)
    config = LidarSearchConfig(source, roi, sut, chosen, fresh, strategy=strategy, budget=budget, n_max=n_max,
                               seed=seed, top=top, timeout=timeout, run_dir=str(out))
    from lidarmt.cli._common import command_line

    command = command_line()
    bar = CampaignProgress(quiet=quiet, is_violation=lambda r: bool(r.get("subset_violation")), description="search",
                           unit="candidates", journal=out / JOURNAL_NAME)
    with RunLock(out) as lock:
        result = run_with_bar(config, out, bar, lock=lock, what="candidate", resume=resume, force=force)
        summary = lidar_summary(config, result.tally)
        infos = _bundles(config, result.tally, out, per_condition=bundles, ddmin_budget=ddmin_budget,
                         command=command, make_bundles=make_bundles)
        run_info = {"ran": result.ran, "resumed_from": result.resumed, "elapsed_s": round(result.elapsed, 3),
                    "environment": environment(), "command": command, "bundles": infos}
        paths = write_lidar_reports(out, summary, run=run_info, bundles=infos)
    console.print(lidar_table(summary), highlight=False, markup=False, soft_wrap=True)
    for b in infos:
        if not b.get("error"):
            console.print(f"  bundle {out / 'violations' / b['id']}: {b.get('n_source')} → {b.get('n_follow')} "
                          f"obstacles, {b.get('lost')}", highlight=False, soft_wrap=True)
    from lidarmt.engine.report import reports_line

    console.print(reports_line(paths), soft_wrap=True)


def _bundles(config, tally, out: Path, *, per_condition: int | None, ddmin_budget: int, command: str,
             make_bundles) -> list[dict]:
    """A bundle per held-back frame on which a validated condition broke O ⊆ O′ (up to ``per_condition``)."""
    from lidarmt.lidar.mr1.inject import NoiseCondition
    from lidarmt.search.lidar import ARMS, ConditionConfig

    frames_of: dict[tuple[int, int], list[int]] = {}
    cond_of: dict[tuple[int, int], dict] = {}
    for r in sorted(tally.validation, key=lambda r: tuple(r["key"])):
        if r["status"] == "ok" and r["variant"] == "condition" and r.get("subset_violation"):
            cand = (int(r["candidate"][0]), int(r["candidate"][1]))
            cond_of[cand] = r["condition"]
            if int(r["frame"]) not in frames_of.setdefault(cand, []):
                frames_of[cand].append(int(r["frame"]))
    infos: list[dict] = []
    for (step, arm), frames in frames_of.items():
        cond = NoiseCondition.from_dict(cond_of[(step, arm)])
        cc = ConditionConfig(config.source, config.roi, config.sut, cond, config.seed, step, arm, config.timeout)
        chosen = frames if per_condition is None else frames[:per_condition]
        for b in make_bundles(cc, out, [(f, cond.n, 0) for f in chosen], budget=ddmin_budget, command=command):
            infos.append(b | {"arm": ARMS[arm], "step": step})
    return infos
