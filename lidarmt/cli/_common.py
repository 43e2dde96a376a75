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

console = Console()
err_console = Console(stderr=True)


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
