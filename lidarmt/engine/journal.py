"""The campaign journal: append-only JSON lines, one per verdict, each written to the file as it exists.

Every record is handed to the operating system at once (one ``write`` per whole line), so a killed campaign
(SIGKILL, Ctrl-C, a crash) loses nothing it had judged; ``fsync`` (which protects against losing the machine
itself) runs after every record by default, or at most every ``sync_interval`` seconds and at close for
campaigns of cheap pairs (camera models judge ~100 images a second and would otherwise spend most of their time
waiting for the disk; a relation's configuration says which it wants as ``journal_sync_interval``).

The first line is a header with the campaign's configuration and the machine it started on; each further line is
one record (a pair's verdict, or a crash/timeout finding), or a *segment* line where a resumed campaign went on,
naming the machine it went on on (a journal may be resumed on another CPU: :func:`machines` says which verdicts
came from which ISA). An interrupted campaign resumes from it: the records present are kept,
a torn last line (the process was killed mid-write) is cut off, and only the missing pairs are run. Totals are
always computed from the journal, so a resumed campaign ends with exactly the totals of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lidarmt._limits import loads_json
from lidarmt.engine.errors import FuzzInputError, FuzzOutputError

JOURNAL_NAME = "journal.jsonl"
FORMAT_VERSION = 1

Key = tuple[int, int, int]  # (frame, n, trial)


def record_key(rec: dict[str, Any]) -> Key:
    return int(rec["frame"]), int(rec["n"]), int(rec["trial"])


def _disk_error(path: Path, err: OSError) -> FuzzOutputError:
    if err.errno == errno.ENOSPC:
        return FuzzOutputError(
            f"{path}: the disk is full ({err.strerror or err}); every verdict written before is kept: free some "
            "space and run the same command with --resume"
        )
    return FuzzOutputError(f"cannot write {path}: {err.strerror or err}")


class Journal:
    """Appends records to ``path``; each write is one whole line, flushed at once and fsync'd at most every
    ``sync_interval`` seconds (0: after every record) and at close."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True, sync_interval: float = 0.0) -> None:
        import time

        self.path = Path(path)
        self._fsync = fsync
        self._interval = sync_interval
        self._clock = time.monotonic
        self._last_sync = self._clock()
        try:
            # unbuffered: each record is written by this process at once, and nothing is left in a buffer to be
            # written (torn) later by close() after a failed write (a full disk)
            self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        except OSError as err:
            raise _disk_error(self.path, err) from err

    def write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n").encode()
        pos = self._fh.tell()
        try:
            view = memoryview(line)
            while view:  # a raw write may be short (a disk filling up): finish the line or fail
                n = self._fh.write(view)
                if not n:
                    raise OSError(errno.EIO, "short write")
                view = view[n:]
            if self._fsync and self._clock() - self._last_sync >= self._interval:
                os.fsync(self._fh.fileno())
                self._last_sync = self._clock()
        except OSError as err:
            # never leave a torn line behind: cut the file back to where this record began
            with contextlib.suppress(OSError):
                self._fh.truncate(pos)
            raise _disk_error(self.path, err) from err

    def close(self) -> None:
        if not self._fh.closed:
            try:
                if self._fsync:
                    os.fsync(self._fh.fileno())
            except OSError as err:
                raise _disk_error(self.path, err) from err
            finally:
                with contextlib.suppress(OSError):  # unbuffered: closing writes nothing more
                    self._fh.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_journal(path: str | os.PathLike[str], header: dict[str, Any], *, sync_interval: float = 0.0) -> Journal:
    """Start a new journal whose first line is ``header``."""
    path = Path(path)
    if path.exists():
        path.unlink()
    j = Journal(path, sync_interval=sync_interval)
    j.write({"type": "header", "version": FORMAT_VERSION, **header})
    return j


def read_journal(path: str | os.PathLike[str], *, repair: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """The header and the records of a journal (see :func:`iter_records` to stream big ones).

    A torn last line is ignored; with ``repair`` it is also cut off the file so appending can go on.
    """
    header = read_header(path)
    records = list(iter_records(path, repair=repair))
    return header, records


def segment_record(implementations: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The line a resumed campaign appends before its verdicts: the machine they are made on and, where the
    campaign records them (as its header does), the implementations that compute them (e.g. the Apollo CNN's
    ``exact-v2``): a journal resumed by another release says what its later verdicts were computed with."""
    from lidarmt._machine import record

    out: dict[str, Any] = {"type": "segment", "machine": record()}
    if implementations:
        out["implementations"] = dict(implementations)
    return out


def machines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Which machines a journal's verdicts came from, in order: ``{"isa": label, "pairs": n}`` per ISA (the
    header's machine for the pairs before the first segment line, ``unknown`` where a journal written before
    machines were recorded has none), merged by label; a label without pairs is left out."""
    from lidarmt._machine import isa_label

    path = Path(path)
    header = read_header(path)
    counts: dict[str, int] = {}
    label = isa_label(header.get("machine"))
    with open(path, "rb") as fh:
        fh.readline()
        for line in fh:
            if not line.endswith(b"\n"):
                break
            if line.startswith((b'{"implementations":', b'{"machine":')) and b'"type":"segment"' in line:
                rec = loads_json(line, what=f"{path}: corrupt segment line", error=FuzzInputError)
                label = isa_label(rec.get("machine") if isinstance(rec, dict) else None)
            elif b'"type":"pair"' in line:
                counts[label] = counts.get(label, 0) + 1
    return [{"isa": k, "pairs": n} for k, n in counts.items() if n]


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
    except OSError as err:
        raise FuzzInputError(f"{path}: cannot read the journal ({err.strerror or err})") from err
    header = loads_json(first, what=f"{path}: not a lidarmt campaign journal (bad first line; use --force to start "
                                    "over)", error=FuzzInputError)
    if not isinstance(header, dict) or header.get("type") != "header":
        raise FuzzInputError(f"{path}: not a lidarmt campaign journal (no header); use --force to start over")
    if header.get("version") != FORMAT_VERSION:
        raise FuzzInputError(f"{path}: journal format {header.get('version')} is not supported (expected {FORMAT_VERSION})")
    return header


def iter_records(path: str | os.PathLike[str], *, repair: bool = False) -> Iterator[dict[str, Any]]:
    """Stream the records after the header, in file order; a torn (unterminated) last line is skipped."""
    path = Path(path)
    good_end = 0
    torn = False
    with open(path, "rb") as fh:
        fh.readline()
        good_end = fh.tell()
        for line in fh:
            if not line.endswith(b"\n"):
                torn = True
                break
            rec = loads_json(line, what=f"{path}: corrupt journal line at byte {good_end} (use --force to start "
                                        "over)", error=FuzzInputError)
            if not isinstance(rec, dict):
                raise FuzzInputError(f"{path}: the journal line at byte {good_end} is not a record (a JSON object); "
                                     "use --force to start over")
            good_end += len(line)
            if rec.get("type") == "pair":
                yield rec
    if torn and repair:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
