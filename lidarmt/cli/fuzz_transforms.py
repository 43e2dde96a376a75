"""``lidarmt fuzz --transforms fog,insert,... [--relation R]``: LiDAR relations beyond MR1
(:mod:`lidarmt.lidar.relations`, :mod:`lidarmt.lidar.campaign`) on the one campaign engine.

An option of ``lidarmt fuzz`` rather than a command of its own: the recording, ROI, perception module, frames,
seed, workers, backend, run folder, resume, bundles and delta-debugging budget mean what they mean for MR1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def parse_levels(text: str | None) -> tuple[str, ...]:
    """``--levels light,heavy`` (or settings ``name=value;...`` separated by ``/``)."""
    from lidarmt.engine.errors import FuzzArgumentError

    if text is None:
        return ("light", "moderate", "heavy")
    sep = "/" if "=" in text else ","
    out = tuple(s.strip().replace(";", ",") for s in text.split(sep) if s.strip())
    if not out:
        raise FuzzArgumentError("--levels: give light, moderate, heavy (comma-separated) or settings like "
                                "'visibility_m=50/visibility_m=200'")
    return out


def run_transforms(names: str, *, relation: str | None, levels: str | None, bag: str, topic: str | None,
                   roi: Any, sut: Any, frames: int | None, seed: int, trials: int, timeout: float | None,
                   library: str | None, thresholds: Any, workers: int, backend: str, address: str | None,
                   out: Path | None, resume: bool, force: bool, bundles: int | None, ddmin_budget: int,
                   quiet: bool, fail_on_violation: bool, min_severity: str | None = None, sensor: str = "hdl64"
                   ) -> None:
    """Run (or resume) a LiDAR-transformation campaign, bundle its most severe violations, write its reports."""
    import typer

    from lidarmt.cli._common import CampaignProgress, err_console, progress, run_with_bar, wide_console
    from lidarmt.engine.campaign import (
        RunLock,
        clamp_workers,
        describe_timeout,
        environment,
        make_bundles,
    )
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.campaign import LidarCampaignConfig, select_bundles, transform_refs, violating_keys
    from lidarmt.lidar.mr1.campaign import select_frames
    from lidarmt.lidar.relations import judge_facts
    from lidarmt.lidar.report import rich_tables, summary_dict, write_reports
    from lidarmt.lidar.specs import SourceSpec, build_roi_provider, open_source
    from lidarmt.lidar.transforms.registry import select, select_for_frame

    transform_refs([t.name for t in select(names)], levels=parse_levels(levels), relation=relation)  # one line, now
    source = SourceSpec(bag, topic)
    rec = open_source(source)
    chosen = select_frames(len(rec), frames, seed)
    first = rec[chosen[0]]
    picked, left_out = select_for_frame(names, first)  # a misalignment needs the recording's camera
    for line in left_out:
        err_console.print(line)
    chosen_t = [t.name for t in picked]
    refs = transform_refs(chosen_t, levels=parse_levels(levels), relation=relation)
    build_roi_provider(roi).roi_for(first)  # fails early: unreadable map, no pose, no labels
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    config = LidarCampaignConfig(source, roi, sut, refs, chosen, seed=seed, trials=trials, library=library,
                                 timeout=timeout, thresholds=thresholds, sensor=sensor)
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(f"transforms-{Path(bag.rstrip('/')).name.split('.')[0]}", bag, roi.map, library)
    from lidarmt.cli._common import command_line

    command = command_line()
    th = config.thresholds

    def violates(r: dict) -> bool:
        return bool(judge_facts(r["facts"], refs[int(r["key"][1])].relation, th))

    bar = CampaignProgress(quiet=quiet, is_violation=violates, journal=out / JOURNAL_NAME)
    used, note = clamp_workers(workers, items=len(chosen), per_worker=config.worker_memory(), backend=backend,
                               address=address)
    if note:
        err_console.print(note)
    with RunLock(out) as lock:
        result = run_with_bar(config, out, bar, lock=lock, workers=used, backend=backend, address=address,
                              resume=resume, force=force)
        viol = violating_keys(out, config)
        chosen_b = select_bundles(viol, bundles, min_severity=min_severity)
        infos: list[dict] = []
        if chosen_b:
            bbar = None if quiet else progress()
            task = None
            if bbar is not None:
                bbar.start()
                task = bbar.add_task("bundles", total=len(chosen_b), rate="ddmin")
            try:
                infos = make_bundles(config, out, [k for k, _ in chosen_b], workers=used, backend=backend,
                                     address=address, budget=ddmin_budget, command=command,
                                     thresholds=th.to_dict(),
                                     on_bundle=lambda i: bbar.update(task, advance=1) if bbar is not None else None)
            finally:
                if bbar is not None:
                    bbar.stop()
            infos = _complete(out, infos)
            order = {config.bundle_id(k): i for i, (k, _) in enumerate(chosen_b)}
            infos.sort(key=lambda b: order.get(b["id"], 1 << 30))
        summary = summary_dict(config.to_dict(), result.tally)
        run_info = {"workers": used, "backend": backend, "timeout": describe_timeout(config.timeout),
                    "ran": result.ran, "resumed_from": result.resumed, "elapsed_s": round(result.elapsed, 3),
                    "throughput": (result.ran / result.elapsed) if result.elapsed > 0 and result.ran else None,
                    "environment": environment(), "command": command, "violations": len(viol), "bundles": infos}
        paths = write_reports(out, summary, run=run_info, bundles=infos)
    console = wide_console()
    for table in rich_tables(summary):
        console.print(table)

    def say(text: str) -> None:
        console.print(text, soft_wrap=True, highlight=False, markup=False)

    if run_info["throughput"]:
        say(f"{result.ran} pairs in {result.elapsed:.1f} s ({run_info['throughput']:.2f} pairs/s, {used} "
            f"worker(s)); {len(viol)} violating pairs, {len(infos)} bundles")
    for b in infos[:12]:
        if b.get("error"):
            say(f"  bundle {b['id']}: failed ({b['error']})")
            continue
        dd = b.get("ddmin") or {}
        mini = (f"; {dd.get('size')} of {b.get('edits')} point edits suffice"
                f"{' (1-minimal)' if dd.get('one_minimal') else ''}") if dd else ""
        say(f"  bundle {out / 'violations' / b['id']}: {b.get('findings')}{mini}")
    sev, ev = summary.get("by_severity") or {}, summary.get("by_evidence") or {}
    tot = summary["total"]
    say("findings: " + ", ".join(f"{v} {k}" for k, v in sev.items()) + "; evidence: "
        + ", ".join(f"{v} {k}" for k, v in ev.items() if v) + f"; violating pairs {tot['violations']} in all, "
        f"{tot.get('real_violations', 0)} excluding junk/low-evidence; labelled objects still fitted by a follow-up "
        f"obstacle (not lost) {tot.get('label_kept', 0)}, improved {tot.get('improved', 0)}"
        + (f"; bundles only for findings ≥ {min_severity}" if min_severity else ""))
    from lidarmt.engine.report import reports_line

    say(reports_line(paths))
    if fail_on_violation and tot["violations"] + tot["crashes"] + tot["timeouts"]:
        raise typer.Exit(1)


def _complete(out: Path, infos: list[dict]) -> list[dict]:
    """Bundles that already existed (resume): their entries from bundle.json."""
    import json

    from lidarmt.lidar.bundle import findings_text

    full = []
    for b in infos:
        if b.get("existing"):
            try:
                j = json.loads((out / "violations" / b["id"] / "bundle.json").read_text(encoding="utf-8"))
                b = {"id": j["id"], "key": j["key"], "transform": j["transform"], "level": j["level"],
                     "relation": j["relation"], "reproduced": j["reproduced"], "edits": j["edits"],
                     "findings": findings_text(j["findings"]), "ddmin": j.get("ddmin"),
                     "ddmin_skipped": j.get("ddmin_skipped")}
            except (OSError, ValueError, KeyError):
                pass
        full.append(b)
    return full


def run_transform_search(strategy: str, name: str, *, relation: str | None, bag: str, topic: str | None, roi: Any,
                         sut: Any, frames: int | None, seed: int, budget: int, timeout: float | None,
                         library: str | None, thresholds: Any, out: Path | None, resume: bool, force: bool,
                         quiet: bool, sensor: str = "hdl64") -> None:
    """``lidarmt fuzz --transforms NAME --search es|random``: the transformation's critical settings
    (:mod:`lidarmt.search.lidar_transforms`), on the engine, in this process (the ES is sequential)."""
    from lidarmt.cli._common import CampaignProgress, run_with_bar, wide_console
    from lidarmt.engine.campaign import RunLock, environment
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.campaign import transform_refs
    from lidarmt.lidar.mr1.campaign import select_frames
    from lidarmt.lidar.specs import SourceSpec, build_roi_provider, open_source
    from lidarmt.lidar.transforms.registry import select
    from lidarmt.search.errors import SearchArgumentError
    from lidarmt.search.lidar_transforms import TransformSearchConfig, summary_dict, write_reports

    chosen_t = select(name)
    if len(chosen_t) != 1:
        raise SearchArgumentError(f"--search with --transforms {name}: search one transformation at a time "
                                  f"(it names {len(chosen_t)})")
    ref = transform_refs([chosen_t[0].name], levels=("moderate",), relation=relation)[0]
    source = SourceSpec(bag, topic)
    rec = open_source(source)
    chosen = select_frames(len(rec), 3 if frames is None else frames, seed)
    build_roi_provider(roi).roi_for(rec[chosen[0]])
    close = getattr(rec, "close", None)
    if callable(close):
        close()
    from lidarmt.cli._common import default_run_folder

    out = out or default_run_folder(
        f"search-{ref.name}-{Path(bag.rstrip('/')).name.split('.')[0]}", bag, roi.map, library)
    config = TransformSearchConfig(source, roi, sut, ref.name, ref.relation, chosen, strategy=strategy,
                                   budget=budget, seed=seed, library=library, timeout=timeout,
                                   thresholds=thresholds, run_dir=str(out), sensor=sensor)
    from lidarmt.cli._common import command_line

    command = command_line()
    bar = CampaignProgress(quiet=quiet, is_violation=lambda r: bool(r.get("violations")), description="search",
                           unit="candidates", journal=out / JOURNAL_NAME)
    with RunLock(out) as lock:
        result = run_with_bar(config, out, bar, lock=lock, what="candidate", resume=resume, force=force)
        summary = summary_dict(config, result.tally)
        run = {"command": command, "environment": environment(), "ran": result.ran, "resumed_from": result.resumed,
               "elapsed_s": round(result.elapsed, 3)}
        paths = write_reports(out, summary, run=run)
    wide_console().print(paths["table.txt"].read_text(encoding="utf-8"), soft_wrap=True, highlight=False)
    from lidarmt.engine.report import reports_line

    wide_console().print(reports_line(paths), soft_wrap=True)
