"""What every bug-bundle replay shares, whatever the relation: the result it returns, the manifest and MCAP
checks (a bundle shows files Foxglove opens: they must be listed and hold their topics) and the paths a bundle
stored relative to the folder its campaign ran in. Each relation's replay (:mod:`lidarmt.lidar.mr1.replay`,
:mod:`lidarmt.lidar.replay`, :mod:`lidarmt.camera.replay`) builds on these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lidarmt.engine.trust import check_trust, is_callable_spec

CHECK_FILES = "file checksums (MANIFEST.json)"
CHECK_MCAP = "bundle.mcap opens with its topics"


#: Files a bundle shows but replay does not read (Foxglove's): when present, the manifest must list them too.
_SHOWN = ("bundle.mcap", "foxglove-layout.json")


@dataclass(slots=True)
class ReplayResult:
    """What a replay found: ``same`` is True only when every check in ``checks`` passed."""

    bundle: Path
    same: bool
    checks: dict[str, bool] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # one line per thing that differs
    verdict: dict[str, Any] | None = None
    imports: list[str] = field(default_factory=list)  # code named by the bundle and imported (--trust-code)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        """Record one check (a name checked twice passes only if it passed both times); ``ok`` is returned."""
        self.checks[name] = bool(ok) and self.checks.get(name, True)
        if not ok:
            self.same = False
            self.details.append(f"{name}: {detail}" if detail else name)
        return bool(ok)


def begin_replay(folder: Path, imports: list[str], *, origin: Path, trust_code: bool,
                 on_code: Callable[[str], None] | None) -> ReplayResult:
    """The trust gate for the code a bundle's ``origin`` file names (before anything is read or built), then an
    empty result that records those imports; ``on_code`` is told each one first."""
    check_trust(imports, origin=origin, trust_code=trust_code)
    if on_code is not None:
        for line in imports:
            on_code(line)
    return ReplayResult(folder, True, imports=list(imports))


def shown_unlisted(folder: Path, listed: Any) -> list[Any]:
    """The files a bundle shows (:data:`_SHOWN`) that it holds but its manifest does not list."""
    from lidarmt.engine.manifest import ManifestProblem

    return [ManifestProblem("unlisted", n, "the bundle holds it but MANIFEST.json does not list it")
            for n in _SHOWN if n not in listed and (folder / n).exists()]


def check_mcap(folder: Path, check: Callable[..., bool], expected: Any = None) -> None:
    """Check ``bundle.mcap``, when the bundle has one, for its topics (``expected``: topic -> schema; default the
    MR1 bundles' :data:`lidarmt.engine.mcap.LIDAR_BUNDLE_TOPICS`)."""
    if (folder / "bundle.mcap").exists():  # what Foxglove opens: it must hold what the bundle shows
        from lidarmt.engine.mcap import LIDAR_BUNDLE_TOPICS, mcap_problems

        bad = mcap_problems(folder / "bundle.mcap", LIDAR_BUNDLE_TOPICS if expected is None else expected)
        check(CHECK_MCAP, not bad, "; ".join(bad))


def resolve_path(path: str, cwd: str | None) -> str:
    """A path stored in a bundle, relative to the folder the campaign ran in (``cwd``), made usable from here (a
    ``module:callable`` spec, an absolute or an existing path is left as it is)."""

    if is_callable_spec(path) or Path(path).is_absolute() or Path(path).exists() or not cwd:
        return path
    cand = Path(cwd) / path
    return str(cand) if cand.exists() else path
