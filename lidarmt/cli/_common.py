"""Helpers shared by the CLI commands: console, progress bars, parsing of common options."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


def progress() -> Progress:
    """A progress bar with count, rate-friendly columns and ETA, written to stderr."""
    return Progress(
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

    ``is_violation(record) -> bool`` says which ok-records violate; ``unit`` names what is counted.
    Use ``on_start`` and ``on_pair`` as the engine's callbacks, ``stop()`` when done (idempotent).
    """

    def __init__(self, *, quiet: bool, is_violation, description: str = "fuzz", unit: str = "verdicts") -> None:
        import time

        self.bar = None if quiet else progress()
        self.task = None
        self._viol = is_violation
        self._desc, self._unit = description, unit
        self.ok = self.violating = self.findings = 0
        self._t0 = time.perf_counter()

    def on_start(self, total: int, done: int) -> None:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task(self._desc, total=total, completed=done, rate="")

    def on_pair(self, rec: dict) -> None:
        import time

        if rec["status"] != "ok":
            self.findings += 1
        else:
            self.ok += 1
            self.violating += bool(self._viol(rec))
        if self.bar is not None and self.task is not None:
            dt = time.perf_counter() - self._t0
            done = self.ok + self.findings
            rate = (f"{done / dt:.2f} {self._unit}/s, {self.violating} violating, {self.findings} crash/timeout"
                    if dt > 0 else "")
            self.bar.update(self.task, advance=1, rate=rate)

    def stop(self) -> None:
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
