"""LZF (liblzf's format), the compression of PCD ``binary_compressed`` files: numba kernels + plain references.

Format: a sequence of items, each starting with a control byte ``c``. ``c < 32``: a literal run of ``c + 1`` bytes
follows. Otherwise a back reference: length ``(c >> 5)`` (7 means "7 plus the next byte") plus 2, offset
``((c & 31) << 8) + next byte + 1`` bytes back in the output; source and destination may overlap.

:func:`decompress` / :func:`compress` are the fast kernels; :func:`decompress_reference` /
:func:`compress_reference` are straightforward Python versions of the same algorithm that the tests cross-check
(byte-identical output).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from lidarmt.io.errors import FormatError

_MAX_OFF = 1 << 13
_MAX_REF = (1 << 8) + (1 << 3)  # 264
_HLOG = 14


@njit(cache=True, nogil=True)
def _decompress(src: np.ndarray, out: np.ndarray) -> int:
    """Decompress into ``out``; returns the bytes written, or -1 (truncated input) / -2 (output too small) /
    -3 (reference before the start)."""
    ip = 0
    op = 0
    n = src.shape[0]
    cap = out.shape[0]
    while ip < n:
        ctrl = np.int64(src[ip])
        ip += 1
        if ctrl < 32:
            run = ctrl + 1
            if ip + run > n:
                return -1
            if op + run > cap:
                return -2
            out[op : op + run] = src[ip : ip + run]
            ip += run
            op += run
        else:
            length = ctrl >> 5
            if length == 7:
                if ip >= n:
                    return -1
                length += np.int64(src[ip])
                ip += 1
            if ip >= n:
                return -1
            ref = op - ((ctrl & 0x1F) << 8) - 1 - np.int64(src[ip])
            ip += 1
            length += 2
            if ref < 0:
                return -3
            if op + length > cap:
                return -2
            if ref + length <= op:  # no overlap: a block copy
                out[op : op + length] = out[ref : ref + length]
            else:  # overlapping (a run): byte by byte, as the format defines
                for k in range(length):
                    out[op + k] = out[ref + k]
            op += length
    return op


@njit(cache=True, nogil=True)
def _compress(src: np.ndarray, out: np.ndarray) -> int:
    n = src.shape[0]
    htab = np.full(1 << _HLOG, -1, dtype=np.int64)
    ip = 0
    op = 1  # room for the first literal run's control byte
    lit = 0
    while ip < n:
        match = False
        if ip + 2 < n:  # a back reference needs 3 bytes; the last two are always literals
            v = (np.uint32(src[ip]) << 16) | (np.uint32(src[ip + 1]) << 8) | np.uint32(src[ip + 2])
            h = np.int64(((v * np.uint32(2654435761)) & np.uint32(0xFFFFFFFF)) >> np.uint32(32 - _HLOG))
            ref = htab[h]
            htab[h] = ip
            match = (ref >= 0 and ip - ref - 1 < _MAX_OFF and src[ref] == src[ip] and src[ref + 1] == src[ip + 1]
                     and src[ref + 2] == src[ip + 2])
        if match:
            off = ip - ref - 1
            maxlen = n - ip
            if maxlen > _MAX_REF:
                maxlen = _MAX_REF
            m = 3
            while m < maxlen and src[ref + m] == src[ip + m]:
                m += 1
            if lit > 0:
                out[op - lit - 1] = lit - 1
            else:
                op -= 1
            code = m - 2
            if code < 7:
                out[op] = (off >> 8) + (code << 5)
                op += 1
            else:
                out[op] = (off >> 8) + (7 << 5)
                out[op + 1] = code - 7
                op += 2
            out[op] = off & 0xFF
            op += 1
            ip += m
            lit = 0
            op += 1
        else:
            out[op] = src[ip]
            op += 1
            ip += 1
            lit += 1
            if lit == 32:
                out[op - 33] = 31
                lit = 0
                op += 1
    if lit > 0:
        out[op - lit - 1] = lit - 1
    else:
        op -= 1
    return op


_ERRORS = {-1: "the compressed data is truncated", -2: "it decompresses to more bytes than announced",
           -3: "a back reference points before the start (corrupt data)"}


MAX_RATIO = 88
"""The most an LZF stream can expand: a 3-byte back reference yields at most 264 bytes."""


def decompress(src: bytes | memoryview | np.ndarray, size: int) -> np.ndarray:
    """LZF-decompress ``src`` into exactly ``size`` bytes (uint8 array); FormatError if it does not fit.

    A ``size`` that ``src`` cannot possibly expand to (more than :data:`MAX_RATIO` times its length, as a corrupt
    header may claim) is refused before the output is allocated.
    """
    a = np.frombuffer(src, dtype=np.uint8)
    if size < 0 or size > MAX_RATIO * len(a):
        raise FormatError(f"LZF: {len(a)} compressed bytes cannot hold the {size} bytes announced (corrupt size)")
    out = np.empty(size, dtype=np.uint8)
    got = _decompress(a, out)
    if got < 0:
        raise FormatError(f"LZF: {_ERRORS[int(got)]}")
    if got != size:
        raise FormatError(f"LZF: decompressed {got} bytes, {size} announced")
    return out


def compress(src: bytes | memoryview | np.ndarray) -> bytes:
    """LZF-compress ``src`` (never fails; incompressible data grows by 1 byte in 32)."""
    a = np.frombuffer(src, dtype=np.uint8)
    out = np.empty(len(a) + len(a) // 32 + 2, dtype=np.uint8)
    k = _compress(a, out)
    return out[:k].tobytes()


# ----------------------------------------------------------------------------------------------- references


def decompress_reference(src: bytes, size: int) -> bytes:
    out = bytearray()
    ip = 0
    while ip < len(src):
        ctrl = src[ip]
        ip += 1
        if ctrl < 32:
            if ip + ctrl + 1 > len(src):
                raise FormatError("LZF: the compressed data is truncated")
            out += src[ip : ip + ctrl + 1]
            ip += ctrl + 1
        else:
            length = ctrl >> 5
            if ip + (length == 7) >= len(src):
                raise FormatError("LZF: the compressed data is truncated")
            if length == 7:
                length += src[ip]
                ip += 1
            ref = len(out) - ((ctrl & 0x1F) << 8) - 1 - src[ip]
            ip += 1
            if ref < 0:
                raise FormatError("LZF: a back reference points before the start (corrupt data)")
            for k in range(length + 2):
                out.append(out[ref + k])
    if len(out) != size:
        raise FormatError(f"LZF: decompressed {len(out)} bytes, {size} announced")
    return bytes(out)


def compress_reference(src: bytes) -> bytes:
    n = len(src)
    htab = [-1] * (1 << _HLOG)
    out = bytearray(b"\0")
    lit = 0
    ip = 0

    def literal(b: int) -> None:
        nonlocal lit
        out.append(b)
        lit += 1
        if lit == 32:
            out[len(out) - 33] = 31
            lit = 0
            out.append(0)

    while ip + 2 < n:
        v = (src[ip] << 16) | (src[ip + 1] << 8) | src[ip + 2]
        h = ((v * 2654435761) & 0xFFFFFFFF) >> (32 - _HLOG)
        ref = htab[h]
        htab[h] = ip
        if ref >= 0 and ip - ref - 1 < _MAX_OFF and src[ref : ref + 3] == src[ip : ip + 3]:
            off = ip - ref - 1
            maxlen = min(n - ip, _MAX_REF)
            m = 3
            while m < maxlen and src[ref + m] == src[ip + m]:
                m += 1
            if lit:
                out[len(out) - lit - 1] = lit - 1
            else:
                out.pop()
            code = m - 2
            if code < 7:
                out.append((off >> 8) + (code << 5))
            else:
                out += bytes([(off >> 8) + (7 << 5), code - 7])
            out.append(off & 0xFF)
            ip += m
            lit = 0
            out.append(0)
        else:
            literal(src[ip])
            ip += 1
    while ip < n:
        literal(src[ip])
        ip += 1
    if lit:
        out[len(out) - lit - 1] = lit - 1
    else:
        out.pop()
    return bytes(out)
