"""What a file or an option may claim, checked against the machine *before* anything is allocated or started.

A count or a size read from a file a stranger sent (a bundle's SUT options, an HDF5 dataset's shape, a PNG's
header) or typed by a careless user (``--threads 100000``, ``--dim 100000``, ``--trials 1e12``) must end in one
line naming it, never in a segfault, an out-of-memory kill or a machine swapping for an hour. Every check of
that kind lives here, so that all commands apply the same rules:

* :func:`check_threads`: a thread count is at most the CPU cores this process may use (torch segfaults on
  ``set_num_threads(100000)``);
* :func:`check_memory`: an allocation a file or option asks for is at most the memory available now;
* :func:`check_count`: a count (pairs, items) is at most a limit the caller states;
* :func:`image_header` / :func:`check_image`: a PNG's or JPEG's size read from its header, before decoding
  (a 30000×30000 PNG of a few kB decodes to 2.5 GB: a decompression bomb);
* :func:`loads_json`: JSON of any nesting depth is parsed or refused in one line (``json.loads`` raises
  ``RecursionError`` on deep nesting).

The errors are the caller's :class:`lidarmt.errors.UserError` subclass, so each package keeps its own.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from lidarmt.errors import ArgumentError, InputError, UserError

#: the most pixels an input image may have (about 25× a 4K frame, 400 MB as RGB)
MAX_IMAGE_PIXELS = 1 << 27
#: the deepest JSON nesting any lidarmt file has is below 10; this is far above it and far below the stack
MAX_JSON_DEPTH = 200


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def available_memory() -> int:
    """Bytes of memory available now without swapping (Linux ``MemAvailable``; else free pages; else total)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):  # pragma: no cover - not Linux
        try:
            return int(os.sysconf(name)) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            continue
    return 1 << 62  # pragma: no cover - nothing to go by


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``; up to TiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def check_threads(n: Any, *, what: str = "threads", error: type[UserError] = ArgumentError,
                  zero_ok: bool = False) -> int:
    """``n`` as an int when it is a thread count this machine can run: 1 (0 with ``zero_ok``: "the default")
    up to the process's CPU cores; else ``error`` in one line."""
    cores = cpu_cores()
    low = 0 if zero_ok else 1
    try:
        value = int(n)
        ok = value == n and low <= value <= cores and not isinstance(n, bool)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        default = " (0: the default)" if zero_ok else ""
        raise error(f"{what} {n!r}: this machine gives the process {cores} CPU core(s); give a whole number from "
                    f"{low} to {cores}{default}")
    return value


def check_memory(nbytes: float, *, what: str, error: type[UserError] = InputError, hint: str = "") -> None:
    """Refuse (``error``, one line) an allocation of ``nbytes`` that ``what`` asks for when it is more than the
    memory available now; call it on the line before allocating."""
    avail = available_memory()
    if not nbytes <= avail:  # also NaN
        tail = f"; {hint}" if hint else ""
        raise error(f"{what} would need {human_bytes(nbytes)} of memory, more than the {human_bytes(avail)} "
                    f"available on this machine, so it is refused{tail}")


def check_count(n: Any, *, what: str, limit: int, error: type[UserError] = ArgumentError, hint: str = "") -> int:
    """``n`` as an int when it is a whole number from 0 to ``limit``; else ``error`` in one line."""
    try:
        value = int(n)
        ok = value == n and 0 <= value <= limit and not isinstance(n, bool)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        tail = f"; {hint}" if hint else ""
        raise error(f"{what} {n!r}: give a whole number from 0 to {limit:,}{tail}")
    return value


# ----------------------------------------------------------------------------------------------- images


def image_header(data: bytes) -> tuple[int, int, int] | None:
    """``(width, height, channels)`` of a PNG or JPEG from the first bytes of the file (a PNG's IHDR; a JPEG's
    first SOF marker, which may come after a few kB of EXIF: give 64 kB or the whole file), or None when ``data``
    is neither format or its header is cut off. Nothing is decoded."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if len(data) < 26 or data[12:16] != b"IHDR":
            return None
        w, h = struct.unpack(">II", data[16:24])
        color = data[25]
        channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(color, 4)
        return w, h, channels
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 4 <= len(data):
            if data[i] != 0xFF:
                i += 1  # padding or garbage between segments
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            (length,) = struct.unpack(">H", data[i + 2:i + 4])
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOFn
                if i + 10 > len(data):
                    return None
                h, w = struct.unpack(">HH", data[i + 5:i + 9])
                return w, h, data[i + 9]
            if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header before it
                return None
            i += 2 + length
    return None


def check_image(data: bytes, *, what: str, error: type[UserError] = InputError,
                max_pixels: int = MAX_IMAGE_PIXELS) -> None:
    """Refuse (one line) a PNG or JPEG whose header claims more than ``max_pixels`` pixels or more memory than
    is available, before it is decoded; other formats and unreadable headers are left to the decoder."""
    head = image_header(data)
    if head is None:
        return
    w, h, c = head
    if w * h > max_pixels:
        raise error(f"{what}: the image claims {w}×{h} pixels, more than the {max_pixels:,} lidarmt decodes "
                    "(a decompression bomb, or not a camera frame), so it is refused")
    check_memory(w * h * max(3, c), what=f"{what}: its {w}×{h} image", error=error)


# ----------------------------------------------------------------------------------------------- JSON


def _depth_ok(text: str | bytes, limit: int) -> bool:
    """Whether the brackets of ``text`` nest at most ``limit`` deep (strings skipped). Linear, no recursion."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return True
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads_json(text: str | bytes, *, what: str, error: type[UserError] = InputError,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, or ``error`` in one line naming ``what`` when it is not JSON or nests deeper than
    ``max_depth`` (refused before parsing; ``RecursionError`` caught too, whatever the stack left)."""
    if not _depth_ok(text, max_depth):
        raise error(f"{what}: JSON nested more than {max_depth} levels deep; not a lidarmt file")
    try:
        return json.loads(text)
    except RecursionError as err:
        raise error(f"{what}: JSON nested too deeply to read; not a lidarmt file") from err
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise error(f"{what}: not valid JSON ({err})") from err
