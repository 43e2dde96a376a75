"""What a file or an option may claim, checked against the machine *before* anything is allocated or started.

A count or a size read from a file a stranger sent (a bundle's SUT options, an HDF5 dataset's shape, a PNG's
header) or typed by a careless user (``--threads 100000``, ``--dim 100000``, ``--trials 1e12``) must end in one
line naming it, never in a segfault, an out-of-memory kill or a machine swapping for an hour. Every check of
that kind lives here, so that all commands apply the same rules:

* :func:`check_threads`: a thread count is at most the CPU cores this process may use (torch segfaults on
  ``set_num_threads(100000)``);
* :func:`check_memory`: an allocation a file or option asks for is at most the memory available now;
* :func:`check_count`: a count (pairs, items) is at most a limit the caller states;
* :func:`image_header` / :func:`check_image`: an image's size read from its header, before decoding, in every
  format opencv decodes (a 30000×30000 PNG or BMP of a few kB decodes to 2.5 GB: a decompression bomb);
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

#: the image formats :func:`image_header` reads a size from: every format opencv's ``imdecode`` decodes in the
#: build lidarmt uses (opencv picks the decoder by the bytes, whatever the file's name ends with), so no image
#: reaches a decoder before its size is known; bytes of any other kind are refused
IMAGE_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WebP", "PNM (PBM/PGM/PPM/PAM)", "PFM", "Sun raster",
                 "Radiance HDR", "JPEG 2000", "AVIF")


def _pnm_tokens(data: bytes, start: int, count: int) -> list[int] | None:
    """The first ``count`` whole numbers of a PNM/PFM header after the magic (``#`` comments skipped)."""
    out: list[int] = []
    i, n = start, min(len(data), 4096)
    while len(out) < count and i < n:
        ch = data[i]
        if ch == 0x23:  # '#': a comment to the end of the line
            while i < n and data[i] not in (0x0A, 0x0D):
                i += 1
        elif chr(ch).isspace():
            i += 1
        elif 0x30 <= ch <= 0x39:
            j = i
            while j < n and 0x30 <= data[j] <= 0x39 and j - i < 12:
                j += 1
            out.append(int(data[i:j]))
            i = j
        else:
            return None
    return out if len(out) == count else None


def _tiff_header(data: bytes) -> tuple[int, int, int] | None:
    """Width, height, samples per pixel from a (Big)TIFF's first image directory."""
    end = "<" if data[:2] == b"II" else ">"
    big = struct.unpack_from(end + "H", data, 2)[0] == 43
    if big:
        (ifd,) = struct.unpack_from(end + "Q", data, 8)
        (n,) = struct.unpack_from(end + "Q", data, ifd)
        first, size, entry = ifd + 8, 20, end + "HHQ"
    else:
        (ifd,) = struct.unpack_from(end + "I", data, 4)
        (n,) = struct.unpack_from(end + "H", data, ifd)
        first, size, entry = ifd + 2, 12, end + "HHI"
    tags: dict[int, int] = {}
    for k in range(min(n, 4096)):
        at = first + k * size
        tag, kind, _count = struct.unpack_from(entry, data, at)
        value_at = at + struct.calcsize(entry)
        if kind == 3:  # SHORT
            tags[tag] = struct.unpack_from(end + "H", data, value_at)[0]
        elif kind == 4:  # LONG
            tags[tag] = struct.unpack_from(end + "I", data, value_at)[0]
        elif kind == 16:  # LONG8 (BigTIFF)
            tags[tag] = struct.unpack_from(end + "Q", data, value_at)[0]
    if 256 not in tags or 257 not in tags:
        return None
    return tags[256], tags[257], max(1, tags.get(277, 1))


def _webp_header(data: bytes) -> tuple[int, int, int] | None:
    kind = data[12:16]
    if kind == b"VP8X":
        w = 1 + int.from_bytes(data[24:27], "little")
        h = 1 + int.from_bytes(data[27:30], "little")
        return (w, h, 4) if len(data) >= 30 else None
    if kind == b"VP8L":
        if data[20] != 0x2F:
            return None
        (bits,) = struct.unpack_from("<I", data, 21)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 4
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        w, h = struct.unpack_from("<HH", data, 26)
        return w & 0x3FFF, h & 0x3FFF, 3
    return None


def _hdr_header(data: bytes) -> tuple[int, int, int] | None:
    """A Radiance HDR's size: the resolution line (``-Y h +X w``) after the blank line that ends the header."""
    end = data.find(b"\n\n", 0, 65536)
    if end < 0:
        return None
    line = data[end + 2:end + 2 + 64].split(b"\n", 1)[0].split()
    if len(line) != 4 or not (line[1].isdigit() and line[3].isdigit()):
        return None
    a, b = int(line[1]), int(line[3])
    return (b, a, 3) if line[0][-1:] in (b"Y", b"y") else (a, b, 3)


def _jp2_header(data: bytes) -> tuple[int, int, int] | None:
    if data[:4] == b"\xff\x4f\xff\x51":  # a bare codestream: its SIZ marker
        xs, ys, xo, yo = struct.unpack_from(">IIII", data, 8)
        (nc,) = struct.unpack_from(">H", data, 40)
        return max(0, xs - xo), max(0, ys - yo), max(1, nc)
    at = data.find(b"ihdr", 0, 65536)  # a JP2 file: the image header box
    if at < 0:
        return None
    h, w, nc = struct.unpack_from(">IIH", data, at + 4)
    return w, h, max(1, nc)


def _avif_header(data: bytes) -> tuple[int, int, int] | None:
    """The largest image spatial extent (``ispe``) an AVIF declares: every item, grid or tile, has one."""
    best: tuple[int, int, int] | None = None
    at = data.find(b"ispe")
    while at >= 0:
        w, h = struct.unpack_from(">II", data, at + 8)
        if best is None or w * h > best[0] * best[1]:
            best = (w, h, 4)
        at = data.find(b"ispe", at + 4)
    return best


def _jpeg_header(data: bytes) -> tuple[int, int, int] | None:
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


def image_header(data: bytes) -> tuple[int, int, int] | None:
    """``(width, height, channels)`` of an image in any of :data:`IMAGE_FORMATS`, read from its header (a PNG's
    IHDR, a JPEG's first SOF marker, a BMP's info header, a TIFF's first directory, ...), or None when ``data``
    is none of them or its header is cut off or damaged. Nothing is decoded. Give the whole file: a JPEG's SOF
    may follow a large EXIF block, a TIFF's directory may lie at its end."""
    data = bytes(data)
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            if len(data) < 26 or data[12:16] != b"IHDR":
                return None
            w, h = struct.unpack(">II", data[16:24])
            return w, h, {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(data[25], 4)
        if data[:2] == b"\xff\xd8":
            return _jpeg_header(data)
        if data[:2] == b"BM":
            (dib,) = struct.unpack_from("<I", data, 14)
            if dib == 12:  # OS/2 core header
                w, h, _planes, bpp = struct.unpack_from("<HHHH", data, 18)
            else:
                w, h, _planes, bpp = struct.unpack_from("<iiHH", data, 18)
            return abs(w), abs(h), max(3, bpp // 8)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack_from("<HH", data, 6)
            return w, h, 4
        if data[:4] in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
            return _tiff_header(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_header(data)
        if data[:1] == b"P" and data[1:2] in (b"1", b"2", b"3", b"4", b"5", b"6"):
            wh = _pnm_tokens(data, 2, 2)
            return None if wh is None else (wh[0], wh[1], 3)
        if data[:2] in (b"PF", b"Pf"):
            wh = _pnm_tokens(data, 2, 2)
            return None if wh is None else (wh[0], wh[1], 3 * 4)  # 32-bit floats per channel
        if data[:3] == b"P7\n":
            head = data[:4096].split(b"ENDHDR", 1)[0].split()
            fields = {k: v for k, v in zip(head[1::2], head[2::2], strict=False)}
            w, h = int(fields[b"WIDTH"]), int(fields[b"HEIGHT"])
            return w, h, max(1, int(fields.get(b"DEPTH", b"3")))
        if data[:4] == b"\x59\xa6\x6a\x95":
            w, h = struct.unpack_from(">II", data, 4)
            return w, h, 3
        if data[:2] == b"#?":
            return _hdr_header(data)
        if data[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or data[:4] == b"\xff\x4f\xff\x51":
            return _jp2_header(data)
        if data[4:8] == b"ftyp":
            return _avif_header(data)
    except (struct.error, ValueError, KeyError, IndexError):
        return None
    return None


def check_image(data: bytes, *, what: str, error: type[UserError] = InputError,
                max_pixels: int | None = None) -> None:
    """Refuse (one line) an image whose header claims more than ``max_pixels`` pixels or more memory than is
    available, before it is decoded; refuse too bytes in no format of :data:`IMAGE_FORMATS` or with a damaged
    header, since the decoder would then be the first to learn the size. Give the whole file."""
    max_pixels = MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    head = image_header(data)
    if head is None:
        raise error(f"{what}: not a readable image (not in a format lidarmt reads, or a damaged header; it reads "
                    f"{', '.join(IMAGE_FORMATS)})")
    w, h, c = head
    if w * h > max_pixels:
        raise error(f"{what}: the image claims {w}×{h} pixels, more than the {max_pixels:,} lidarmt decodes "
                    "(a decompression bomb, or not a camera frame), so it is refused")
    check_memory(w * h * max(3, c) * 2, what=f"{what}: its {w}×{h} image", error=error)


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
