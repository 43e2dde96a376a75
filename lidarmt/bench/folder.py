"""The bench run folder: one ordinary campaign per module, all on the same inputs, and the file that says so.

::

    runs/bench-X/
      bench.json            what was compared: the kind of campaign and each module's full configuration
      <baseline>/           an ordinary engine run folder (journal.jsonl, its lock; resumable on its own)
      <candidate>/ ...      one per further module
      summary.json, run.json, table.txt, junit.xml, report.md, charts   (the comparison's reports)

Every module's campaign has the same frames, seed, n, trials and region (LiDAR), or images, transformations
and trials (camera), so the same follow-ups: their configurations differ only in the module-specific fields
(:data:`MODULE_FIELDS`). The first module is the baseline. A baseline can also be *reused* from an earlier
bench folder (its first module) or from a plain ``lidarmt fuzz`` / ``lidarmt camera fuzz`` run folder: its
journal is copied into this bench folder (so the comparison stays reproducible when the old folder goes),
after checking that it was run on the same inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lidarmt._atomic import atomic_path, atomic_write_text
from lidarmt._limits import loads_json
from lidarmt._paths import check_readable, inside, read_bytes
from lidarmt.bench.errors import BenchArgumentError, BenchInputError, BenchOutputError

BENCH_FILE = "bench.json"
#: a bench.json lists a few modules' configurations: kilobytes
MAX_BENCH_BYTES = 16 << 20
FORMAT = "lidarmt-bench/1"
#: the comparison's report files (charts are matched by :data:`CHART_GLOBS`)
REPORT_FILES = ("summary.json", "run.json", "table.txt", "junit.xml", "report.md")
CHART_GLOBS = ("class-*.png", "relations.png", "transforms.png", "speed.png")
#: per campaign kind, the configuration fields that may differ between the modules of a bench
MODULE_FIELDS: dict[str, tuple[str, ...]] = {
    "lidar-mr1": ("sut", "timeout"),
    "camera": ("models", "timeout", "batch_size"),
    "lidar-transform": ("sut", "timeout"),
}
#: files of a module folder that a reused baseline brings along
REUSED_FILES = ("journal.jsonl", "detection.json")


def shared_fields(config: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The part of a campaign configuration (``to_dict`` form) that every module of a bench must share."""
    return {k: v for k, v in config.items() if k not in MODULE_FIELDS[kind]}


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the keys whose values differ between two mappings."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def module_label(name: str, options: Mapping[str, Any]) -> str:
    """A readable label of a module: its name, then its options (a path option by its file name), e.g.
    ``apollo-mode=fast`` or ``apollo-512-weights=new.pt``."""
    parts = [name.replace(":", "-")]
    for k, v in options.items():
        text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        if isinstance(v, str) and ("/" in v or os.sep in v):
            text = Path(v).name
        parts.append(f"{k}={text}")
    return "-".join(parts)


def folder_names(labels: Iterable[str]) -> list[str]:
    """Folder names for module labels: unsafe characters replaced by '-', repeats numbered (-2, -3, ...)."""
    out: list[str] = []
    for label in labels:
        base = _UNSAFE.sub("-", label).strip("-.")[:80] or "module"
        name, k = base, 2
        while name in out or name in ("violations",):
            name, k = f"{base}-{k}", k + 1
        out.append(name)
    return out


@dataclass(slots=True)
class Module:
    """One module of a bench: folder name, campaign configuration, and where a reused journal came from."""

    name: str
    config: Any
    origin: str | None = None  # the run folder a reused baseline's journal was copied from

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config.to_dict(), "origin": self.origin}


@dataclass(slots=True)
class BenchPlan:
    """A bench: the kind of campaign, its folder and its modules (the first is the baseline)."""

    out: Path
    kind: str
    modules: list[Module] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in MODULE_FIELDS:
            raise BenchArgumentError(f"unknown bench kind {self.kind!r}")
        if not self.modules:
            raise BenchArgumentError("a bench needs at least two modules (or one with --baseline)")
        if len(self.modules) < 2:
            raise BenchArgumentError("a bench compares modules: give at least two (the first is the "
                                     "baseline), or one with --baseline FOLDER")
        names = [m.name for m in self.modules]
        if len(set(names)) != len(names):
            raise BenchArgumentError(f"module names repeat: {', '.join(names)}")
        ref = shared_fields(self.modules[0].config.to_dict(), self.kind)
        for m in self.modules[1:]:
            diff = differing(ref, shared_fields(m.config.to_dict(), self.kind))
            if diff:
                raise BenchArgumentError(f"module {m.name} was configured with other {', '.join(diff)} than "
                                         f"the baseline {self.modules[0].name}; a bench compares modules on "
                                         "the same inputs")

    @property
    def baseline(self) -> Module:
        return self.modules[0]

    def folder(self, m: Module | str) -> Path:
        """A module's folder: inside the bench folder, never through a link that leaves it."""
        return inside(m if isinstance(m, str) else m.name, self.out, what=f"--out {self.out}: module folder",
                      error=BenchOutputError)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "modules": [m.to_dict() for m in self.modules]}


# ----------------------------------------------------------------------------------------------- baseline


def read_bench(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``bench.json`` of a bench folder (one-line errors for a missing or foreign file)."""
    path = Path(folder) / BENCH_FILE
    if not os.path.lexists(path):
        raise BenchInputError(f"{folder}: not a bench folder (no {BENCH_FILE}); give the folder of a "
                              "`lidarmt bench` run or of a single campaign")
    text = read_bytes(BENCH_FILE, inside=folder, max_bytes=MAX_BENCH_BYTES, what="bench file", error=BenchInputError)
    d = loads_json(text, what=f"{path}: unreadable (run the bench again with --force)", error=BenchInputError)
    if not isinstance(d, dict) or d.get("format") != FORMAT or not isinstance(d.get("modules"), list) \
            or not d["modules"]:
        raise BenchInputError(f"{path}: not a {FORMAT} file; run the bench again with --force")
    for m in d["modules"]:
        check_module_name(m.get("name") if isinstance(m, dict) else None, path)
    return d


def check_module_name(name: Any, where: str | os.PathLike[str]) -> str:
    """A module name read from a file is a folder inside the bench folder: one plain path component (what
    :func:`folder_names` makes), never ``..``, a separator or an absolute path. One-line refusal otherwise."""
    if not isinstance(name, str) or not name or name in (".", "..") or _UNSAFE.search(name) \
            or name != name.strip("-."):
        raise BenchInputError(f"{where}: module name {name!r} is not a plain folder name; a bench folder's "
                              "paths never leave it, so it is refused: give a bench folder made by lidarmt")
    return name


def code_in_config(config: Any) -> list[str]:
    """What running or rebuilding a campaign configuration read from a file would import or run (a
    ``module:callable`` or ``exec:`` SUT, a code ROI, a code steering model or translator, option values
    naming code), one line each; empty when it names only built-ins and installed plug-ins."""
    from lidarmt.lidar.specs import code_in_options, code_in_roi, code_in_sut

    found: list[str] = []
    if getattr(config, "sut", None) is not None:
        found += code_in_sut(config.sut)
    if getattr(config, "roi", None) is not None:
        found += code_in_roi(config.roi)
    for m in getattr(config, "models", ()) or ():
        name = str(m.name).strip()
        if ":" in name and not name.lower().endswith((".h5", ".hdf5", ".keras")):
            from lidarmt.camera.models.registry import kind_of

            if kind_of(name) == "code":
                found.append(f"steering model {name!r} (imports module {name.partition(':')[0]!r})")
        found += [f"steering model {x}" for x in code_in_options(dict(m.options))]
    for t in getattr(config, "transforms", ()) or ():
        name = str(t.name).strip()
        if ":" in name:
            from lidarmt.camera.translate.registry import kind_of as translator_kind

            if translator_kind(name) == "code":
                found.append(f"translator {name!r} (imports module {name.partition(':')[0]!r})")
        found += [f"transformation {x}" for x in code_in_options(dict(getattr(t, "options", {}) or {}))]
    return found


def reuse_baseline(path: str | os.PathLike[str], kind: str, *, trust_code: bool = False) -> tuple[Module, Path]:
    """The baseline module of an earlier bench folder (its first module), or the campaign of a plain run
    folder, and the folder holding its journal. The module's configuration is read from the journal's
    header.

    A baseline folder is a file from someone else, like a bundle: a configuration naming code (a
    ``module:callable`` or ``exec:`` SUT, a code model) is refused (:class:`~lidarmt.lidar.specs.
    UntrustedCodeError`) unless ``trust_code``, before anything is built; its module name must be a plain
    folder name (:func:`check_module_name`)."""
    from lidarmt.engine.campaign import config_from_dict
    from lidarmt.engine.journal import JOURNAL_NAME, read_header
    from lidarmt.lidar.specs import check_trust

    folder = Path(path)
    if not folder.is_dir():
        raise BenchInputError(f"--baseline {path}: no such folder; give an earlier bench folder "
                              "(runs/bench-v1) or a campaign's run folder")
    if (folder / BENCH_FILE).is_file():
        first = read_bench(folder)["modules"][0]
        name = check_module_name(first.get("name", "baseline") if isinstance(first, dict) else None,
                                 folder / BENCH_FILE)
        src = inside(name, folder, what=f"--baseline {path}: module folder", error=BenchInputError)
        origin = str(first.get("origin") or src)
    else:
        name, src, origin = "", folder, str(folder)
    if not (src / JOURNAL_NAME).is_file():
        raise BenchInputError(f"--baseline {path}: {src} holds no campaign journal ({JOURNAL_NAME}); run "
                              "that bench or campaign first")
    check_readable(JOURNAL_NAME, inside=src, max_bytes=None, what=f"--baseline {path}:", error=BenchInputError)
    header = read_header(src / JOURNAL_NAME)
    try:
        config = config_from_dict(header["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise BenchInputError(f"--baseline {path}: the journal header of {src} is not a campaign "
                              f"configuration ({err})") from err
    check_trust(code_in_config(config), origin=src / JOURNAL_NAME, trust_code=trust_code)
    got = getattr(config, "kind", "lidar-mr1")
    if got != kind:
        raise BenchArgumentError(f"--baseline {path}: a {got} campaign cannot be the baseline of a {kind} "
                                 "bench")
    if not name:
        name = baseline_label(config, kind)
    return Module(name, config, origin), src


def baseline_label(config: Any, kind: str) -> str:
    if kind in ("lidar-mr1", "lidar-transform"):
        return module_label(config.sut.name, config.sut.options)
    m = config.models[0]
    name = Path(m.name).stem if m.name.endswith((".h5", ".hdf5", ".keras")) else m.name
    return module_label(name, m.options)


def check_baseline(plan_modules: list[Module], kind: str, path: str | os.PathLike[str]) -> None:
    """Refuse (one line) a reused baseline whose campaign ran on other inputs than the new modules."""
    base = shared_fields(plan_modules[0].config.to_dict(), kind)
    for m in plan_modules[1:]:
        diff = differing(base, shared_fields(m.config.to_dict(), kind))
        if diff:
            vals = "; ".join(f"{k}: {_short(base.get(k))}" for k in diff[:4])
            raise BenchArgumentError(
                f"--baseline {path}: its baseline ran with other {', '.join(diff)} ({vals}); a paired "
                "comparison needs the same frames, seed and injection: repeat those options, or run both "
                "modules afresh")


def check_isas(plan: BenchPlan, reused_from: str | os.PathLike[str] | None, *, allow: bool,
               existing: bool = True) -> list[str]:
    """Refuse (one line, :class:`BenchArgumentError`) to compare modules whose verdicts come from CPUs of
    different ISAs, unless ``allow`` (``--mixed-isa``): a reused baseline or a resumed module's journal made
    elsewhere, and this machine, which runs the rest. Floats differ in the last digits between CPU kinds, and a
    verdict on a threshold can flip with them, so the comparison could show the machine rather than the module.
    Journals that record no machine (older ones) are not counted, nor the modules' own (``existing=False``: a
    --force run discards them). Returns the ISAs seen (more than one only with ``allow``)."""
    from lidarmt._machine import isa_label, record
    from lidarmt.engine.journal import JOURNAL_NAME, machines

    folders: list[tuple[str, Path]] = []
    if reused_from is not None:
        folders.append(("the --baseline", Path(reused_from)))
    for m in plan.modules if existing else ():
        if (plan.folder(m) / JOURNAL_NAME).is_file():
            folders.append((f"module {m.name}", plan.folder(m)))
    seen: dict[str, str] = {}
    for what, folder in folders:
        for got in machines(folder / JOURNAL_NAME):
            if got["isa"] != "unknown":
                seen.setdefault(got["isa"], what)
    seen.setdefault(isa_label(record()), "this machine")
    if len(seen) > 1 and not allow:
        ran = "; ".join(f"{what} ran on {isa}" for isa, what in seen.items())
        raise BenchArgumentError(
            f"{ran}: floats differ between CPU kinds and a verdict on a threshold can flip with them, so the "
            "comparison could show the machine rather than the modules; run every module on one kind of CPU, "
            "or pass --mixed-isa to compare anyway")
    return sorted(seen)


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------------------------- the folder


def _copy_atomic(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def prepare(plan: BenchPlan, *, resume: bool, force: bool, reused_from: Path | None = None) -> bool:
    """Check and set up the bench folder; returns True when resuming. Writes ``bench.json`` and copies a
    reused baseline's journal into its module folder. Call it holding the folder's :class:`RunLock`."""
    out = plan.out
    if out.exists() and not out.is_dir():
        raise BenchOutputError(f"--out {out}: exists and is not a folder")
    if resume and force:
        raise BenchArgumentError("--resume and --force contradict each other: resume keeps the journals, "
                                 "force discards them")
    from lidarmt.engine.campaign import LOCK_NAME

    have = (out / BENCH_FILE).is_file()
    if resume:
        if not have:
            raise BenchInputError(f"--resume: {out} holds no bench ({BENCH_FILE}); run without --resume")
        old = read_bench(out)
        want = plan.to_dict()
        if old.get("kind") != want["kind"] or [m.get("name") for m in old["modules"]] != \
                [m["name"] for m in want["modules"]]:
            raise BenchArgumentError(
                f"--resume: the bench in {out} compared "
                f"{', '.join(str(m.get('name')) for m in old['modules'])}; repeat its modules in the same "
                "order, or use --force to start over")
        for o, w in zip(old["modules"], want["modules"], strict=True):
            if o.get("config") != w["config"]:
                diff = differing(o.get("config") or {}, w["config"])
                raise BenchArgumentError(
                    f"--resume: module {w['name']} of the bench in {out} was started with other settings "
                    f"({', '.join(diff)} differ); repeat its original options, or use --force to start over")
    elif out.exists() and any(p.name != LOCK_NAME for p in out.iterdir()):
        if not force:
            raise BenchOutputError(f"--out {out}: the folder exists; pass --resume to continue its bench or "
                                   "--force to start over")
        _clear(plan, out)
    out.mkdir(parents=True, exist_ok=True)
    for m in plan.modules:  # before anything is written: no module folder may lead outside --out
        plan.folder(m)
    base = plan.baseline
    if base.origin is not None and reused_from is not None:
        dst = plan.folder(base)
        dst.mkdir(parents=True, exist_ok=True)
        for name in REUSED_FILES:
            src = reused_from / name
            if src.is_file() and check_readable(name, inside=reused_from, max_bytes=None, error=BenchInputError,
                                                what=f"--baseline {reused_from}:") and not (resume and (dst / name).is_file()):
                _copy_atomic(src, dst / name)
    atomic_write_text(out / BENCH_FILE, json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n")
    return resume


def _clear(plan: BenchPlan, out: Path) -> None:
    """--force: remove what a bench owns in ``out`` (its module folders, old and new, and its reports)."""
    names = {m.name for m in plan.modules}
    if (out / BENCH_FILE).is_file():
        with contextlib.suppress(BenchInputError):
            names |= {str(m.get("name")) for m in read_bench(out)["modules"]}
    for name in names:
        p = out / name
        if name and p.parent == out and p.is_symlink():
            p.unlink()  # the link, never what it points at
        elif name and p.parent == out and p.is_dir():
            shutil.rmtree(p)
    for name in (*REPORT_FILES, BENCH_FILE):
        (out / name).unlink(missing_ok=True)
    for pattern in CHART_GLOBS:
        for p in out.glob(pattern):
            p.unlink(missing_ok=True)


def run_modules(plan: BenchPlan, *, workers: int = 1, header_extra: Mapping[str, Any] | None = None,
                on_module: Callable[[Module, bool], Any] | None = None,
                engine_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run (or resume) every module's campaign in its folder, one after the other; returns the engine's
    :class:`~lidarmt.engine.campaign.CampaignResult` by module name (None for a reused baseline).

    ``on_module(module, resuming)`` is called before each campaign and may return ``(on_start, on_pair)``
    callbacks for the engine (progress bars), or None. ``engine_options`` go to every
    :func:`~lidarmt.engine.campaign.run_campaign` call as they are (e.g. where the workers run)."""
    from lidarmt.engine.campaign import LOCK_NAME, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME

    results: dict[str, Any] = {}
    for i, m in enumerate(plan.modules):
        if m.origin is not None:
            results[m.name] = None
            continue
        folder = plan.folder(m)
        resuming = (folder / JOURNAL_NAME).is_file()
        stale = folder.is_dir() and any(p.name != LOCK_NAME for p in folder.iterdir())
        cbs = on_module(m, resuming) if on_module else None
        on_start, on_pair = cbs if cbs else (None, None)
        role = "baseline" if i == 0 else "candidate"
        extra = {**dict(header_extra or {}), "bench": {"module": m.name, "role": role}}
        results[m.name] = run_campaign(m.config, folder, workers=workers, resume=resuming,
                                       force=stale and not resuming, on_start=on_start, on_pair=on_pair,
                                       header_extra=extra, **dict(engine_options or {}))
    return results


def module_records(folder: str | os.PathLike[str], config: Any) -> dict[tuple[int, ...], dict[str, Any]]:
    """A module's journal records by key (the first record of a key wins, as the tallies count them)."""
    from lidarmt.engine.journal import JOURNAL_NAME, iter_records

    path = Path(folder) / JOURNAL_NAME
    if not path.is_file():
        raise BenchInputError(f"{folder}: no campaign journal ({JOURNAL_NAME}); run the bench with --resume")
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for rec in iter_records(path):
        out.setdefault(tuple(config.record_key(rec)), rec)
    return out
