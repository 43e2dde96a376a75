"""Helpers shared by the CLI commands: console, progress bars, parsing of common options."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")



class SafeConsole(Console):
    """Rich's console, with every string it renders shown as :func:`lidarmt._show.term` shows it (newlines
    kept): no escape sequence, carriage return or bidi override from a file reaches the terminal, whichever
    print forgot :func:`show`. Rich's own colours are added after this, so they are kept."""

    def render_str(self, text: str, **kwargs):  # type: ignore[override]
        from lidarmt._show import term

        return super().render_str(term(text, lines=True), **kwargs)


def show(value: object) -> str:
    """A string from a file or a file name, for ``console.print``: one line (newlines and every control
    character escaped, :func:`lidarmt._show.term`), Rich markup in it shown as text."""
    from rich.markup import escape

    from lidarmt._show import term

    return escape(term(value))


console = SafeConsole()
err_console = SafeConsole(stderr=True)


#: Seconds between the one-line progress reports printed when stderr is not a terminal (a CI log, a file);
#: LIDARMT_PROGRESS_SECONDS overrides it (0: a line at every step).
PROGRESS_SECONDS = 30.0


def _progress_seconds() -> float:
    import os

    try:
        v = float(os.environ.get("LIDARMT_PROGRESS_SECONDS", PROGRESS_SECONDS))
    except ValueError:
        return PROGRESS_SECONDS
    return v if v >= 0 and v == v else PROGRESS_SECONDS


def _clock(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class LoggedProgress(Progress):
    """rich's progress bar, which also works where stderr is no terminal: there rich draws nothing until the
    end, so this prints one plain line per task every :func:`_progress_seconds` (done/total, percentage, the
    task's ``rate`` field (rate, violations so far) or its own rate, elapsed, ETA). On a terminal it is rich's
    bar, unchanged."""

    def __init__(self, *columns, **kw) -> None:
        import time

        super().__init__(*columns, **kw)
        self._lines = not self.console.is_terminal
        self._every = _progress_seconds()
        self._last: dict = {}
        self._t0: dict = {}
        self._n0: dict = {}
        self._now = time.monotonic

    def add_task(self, description, *args, **kw):
        task = super().add_task(description, *args, **kw)
        self._last[task] = self._t0[task] = self._now()
        self._n0[task] = float(kw.get("completed", 0) or 0)
        return task

    def update(self, task_id, **kw) -> None:
        super().update(task_id, **kw)
        if self._lines:
            self._report(task_id)

    def advance(self, task_id, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if self._lines:
            self._report(task_id)

    def line(self, task_id) -> str:
        """The one-line report of a task: ``description: done/total (pct%), rate, elapsed H:MM:SS, ETA H:MM:SS``."""
        task = self._tasks[task_id]
        now = self._now()
        elapsed = now - self._t0.get(task_id, now)
        done, total = task.completed, task.total
        new = done - self._n0.get(task_id, 0.0)
        rate = new / elapsed if elapsed > 0 and new > 0 else None
        parts = [f"{task.description}: {done:g}/{total:g}" + (f" ({100.0 * done / total:.0f}%)" if total else "")
                 if total is not None else f"{task.description}: {done:g}"]
        field = str(task.fields.get("rate", "") or "")
        parts.append(field if field else (f"{rate:.2f}/s" if rate else ""))
        parts.append(f"elapsed {_clock(elapsed)}")
        if total is not None and rate:
            parts.append(f"ETA {_clock(max(total - done, 0) / rate)}")
        return ", ".join(p for p in parts if p)

    def _report(self, task_id) -> None:
        now = self._now()
        if now - self._last.get(task_id, now) < self._every:
            return
        self._last[task_id] = now
        self.console.print(self.line(task_id), markup=False, highlight=False, soft_wrap=True)


def progress() -> Progress:
    """A progress bar with count, rate-friendly columns and ETA, written to stderr; where stderr is no terminal,
    a periodic one-line report instead (:class:`LoggedProgress`)."""
    return LoggedProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


def track(items: Iterable[T], *, total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress bar (count, rate, ETA) on stderr."""
    import time

    with progress() as bar:
        task = bar.add_task(description, total=total, rate="")
        t0 = time.perf_counter()
        for i, item in enumerate(items, 1):
            yield item
            dt = time.perf_counter() - t0
            bar.update(task, advance=1, rate=f"{i / dt:.1f}/s" if dt > 0 else "")


class CampaignProgress:
    """The progress bar of a campaign (any relation): pairs judged, rate, violations and findings so far.

    The violations so far are counted by the same rule as the final report: either ``count(tally)`` on a live
    ``tally`` (the campaign's own tally class, ``config.new_tally()``, folded from ``journal`` first when the
    campaign resumes; recounted at most twice a second and at :meth:`stop`), for relations whose thresholds
    are applied when folding (the camera's DeepTest Eq. 2 needs every seed's MSE), or ``is_violation(record)``
    per ok-record (the journal's records counted first on resume). ``unit`` names what is counted. Use
    ``on_start`` and ``on_pair`` as the engine's callbacks, ``stop()`` when done (idempotent). Quiet, it counts
    nothing.
    """

    def __init__(self, *, quiet: bool, is_violation=None, description: str = "fuzz", unit: str = "verdicts",
                 tally=None, count=None, journal=None) -> None:
        import time

        if (count is None) == (is_violation is None) or (count is not None and tally is None):
            raise TypeError("give is_violation, or count with a tally")
        self.bar = None if quiet else progress()
        self.task = None
        self._viol = is_violation
        self._tally, self._count, self._journal = tally, count, journal
        self._desc, self._unit = description, unit
        self.ok = self.violating = self.findings = 0
        self._t0 = time.perf_counter()
        self._counted = self._took = 0.0
        self._stopped = False
        if quiet:  # nothing shows the count: no live tally to keep
            self._tally = None
            self._viol = self._viol or (lambda rec: False)

    def on_start(self, total: int, done: int) -> None:
        if done and self._journal is not None and self.bar is not None:  # resumed: earlier verdicts count too
            if self._tally is not None:
                from lidarmt.engine.campaign import fold_records

                fold_records(self._tally, self._journal, repair=True)
                self.violating = int(self._count(self._tally))
            else:
                from lidarmt.engine.journal import iter_records

                try:
                    self.violating = sum(bool(r.get("status") == "ok" and self._viol(r))
                                         for r in iter_records(self._journal))
                except Exception:  # noqa: BLE001 - a damaged journal is the engine's to report; the bar counts on
                    self.violating = 0
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task(self._desc, total=total, completed=done, rate="")

    def _recount(self, *, force: bool = False) -> None:
        """Count on the live tally: at most twice a second, and never more than 5 % of the time (a count over a
        large tally takes a while)."""
        import time

        now = time.perf_counter()
        if force or now - self._counted >= max(0.5, 20.0 * self._took):
            self.violating = int(self._count(self._tally))
            self._counted = time.perf_counter()
            self._took = self._counted - now

    def on_pair(self, rec: dict) -> None:
        import time

        if rec["status"] != "ok":
            self.findings += 1
        else:
            self.ok += 1
            if self._viol is not None:
                self.violating += bool(self._viol(rec))
        if self._tally is not None:
            self._tally.add(rec)
            self._recount()
        self._show(time.perf_counter(), advance=1)

    def _show(self, now: float, *, advance: int) -> None:
        if self.bar is not None and self.task is not None:
            dt = now - self._t0
            done = self.ok + self.findings
            rate = (f"{done / dt:.2f} {self._unit}/s, {self.violating} violating, {self.findings} crash/timeout"
                    if dt > 0 else "")
            self.bar.update(self.task, advance=advance, rate=rate)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._tally is not None:
            import time

            self._recount(force=True)  # the final count: the same tally and rule as the report's
            self._show(time.perf_counter(), advance=0)
        if self.bar is not None:
            self.bar.stop()


def wide_console():
    """The console for result tables: at least 132 columns when the output is a file or a pipe (never squeezed
    to 80), the terminal's width otherwise."""
    if not console.is_terminal and console.width < 132:
        return Console(width=200)
    return console


def json_value(text: str):
    """A command-line VALUE: JSON when it parses as JSON (numbers, booleans, lists...), else the text itself.
    Nesting too deep to parse is text too, never a RecursionError."""
    import json

    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def parse_key_values(items, *, flag: str, error: type[Exception], json_values: bool = True) -> dict:
    """``["k=v", ...]`` from a repeatable ``flag`` into a dict (values through :func:`json_value` unless
    ``json_values`` is False); a malformed item raises ``error`` with one line naming it."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise error(f"{flag} {item!r}: use KEY=VALUE" + (" (VALUE is JSON when it parses as JSON)"
                                                               if json_values else ""))
        out[key] = json_value(value) if json_values else value.strip()
    return out


def default_run_folder(name: str, *inputs: object) -> Path:
    """``runs/NAME``: the run folder a campaign writes when ``--out`` is left out, checked as a given ``--out`` is
    (:func:`lidarmt._paths.check_writable`): never one of the command's ``inputs`` (a recording kept under
    ``runs/``), never inside one, never a file; an existing run folder is left to ``--resume`` / ``--force``.
    ``inputs`` that are not paths (None, a registry name, ``module:callable``) are skipped."""
    from lidarmt._paths import check_writable

    out = Path("runs") / name
    check_writable(out, inputs=[i if isinstance(i, (str, Path)) else None for i in inputs], folder=True,
                   may_exist=True, what="--out (the default)")
    return out


def command_line() -> str:
    """The command as the user typed it (``lidarmt ...``, each argument quoted for a shell), for journals and
    bundles; empty when there is none (called as a library)."""
    import shlex
    import sys

    return "lidarmt " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""


def run_with_bar(config, out: Path, bar, *, lock, what: str = "verdict", **engine: object):
    """:func:`lidarmt.engine.campaign.run_campaign` on ``out`` with the progress ``bar`` fed and stopped, the
    command line and environment in the journal's header; an interrupt says where the results are and how to go
    on (``what``: "verdict", "candidate", "result"). ``engine``: run_campaign's other options (workers, backend,
    address, resume, force)."""
    from lidarmt.engine.campaign import environment, run_campaign
    from lidarmt.engine.journal import JOURNAL_NAME
    from lidarmt.lidar.perception.apollo.config import implementations

    try:
        return run_campaign(config, out, on_pair=bar.on_pair, on_start=bar.on_start, lock=lock,
                            header_extra={"command": command_line(), "environment": environment(),
                                          "implementations": implementations()}, **engine)
    except KeyboardInterrupt:
        bar.stop()
        err_console.print(f"interrupted: every {what} so far is in {out / JOURNAL_NAME}; continue with the same "
                          "command plus --resume")
        raise
    finally:
        bar.stop()
