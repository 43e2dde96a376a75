"""Fast wire-format codec for ``apollo.drivers.PointCloud``'s repeated ``point`` (field 4) field.

A 130k-point Cyber cloud is 130k length-delimited ``PointXYZIT`` sub-messages; building protobuf objects for them
costs far more than the frame is worth. :func:`decode` walks the top-level fields with a numba kernel, decodes
every point (x=1, y=2, z=3 float; intensity=4, timestamp=5, ring=6 varint; unknown fields skipped by wire type;
missing x/y/z = NaN as in the proto2 defaults) and returns the bytes of all *other* top-level fields, which the
caller parses with the ordinary message class. :func:`encode_points` is the inverse for the writer.
:func:`decode_reference` does the same through protobuf objects; the tests cross-check them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from lidarmt.io.errors import FormatError


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    result = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= end or shift > np.uint64(63):
            return np.uint64(0), -1
        b = buf[pos]
        pos += 1
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += np.uint64(7)


@njit(cache=True, nogil=True)
def _skip(buf, pos, end, wt):
    if wt == 0:
        _v, pos = _varint(buf, pos, end)
        return pos
    if wt == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wt == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wt == 2:
        ln, pos = _varint(buf, pos, end)
        if pos < 0 or pos + np.int64(ln) > end:
            return -1
        return pos + np.int64(ln)
    return -1


@njit(cache=True, nogil=True)
def _count(buf):
    """(points, other-field spans) counts; -1 points on malformed input."""
    n = buf.shape[0]
    pos = 0
    npts = 0
    nother = 0
    while pos < n:
        tag, pos = _varint(buf, pos, n)
        if pos < 0:
            return -1, 0
        fn = tag >> np.uint64(3)
        wt = np.int64(tag & np.uint64(7))
        if fn == 4 and wt == 2:
            npts += 1
        else:
            nother += 1
        pos = _skip(buf, pos, n, wt)
        if pos < 0:
            return -1, 0
    return npts, nother


@njit(cache=True, nogil=True)
def _decode(buf, xs, ys, zs, inten, ts, rings, spans):
    """Fill the point arrays and the spans of other fields; returns (points, spans, ring seen) or (-1, ...)."""
    n = buf.shape[0]
    pos = 0
    k = 0
    s = 0
    ring_seen = False
    nan = np.float32(np.nan)
    word = np.empty(1, np.uint32)
    as_float = word.view(np.float32)
    while pos < n:
        start = pos
        tag, pos = _varint(buf, pos, n)
        fn = tag >> np.uint64(3)
        wt = np.int64(tag & np.uint64(7))
        if fn == 4 and wt == 2:
            ln, pos = _varint(buf, pos, n)
            end = pos + np.int64(ln)
            if pos < 0 or end > n:
                return -1, 0, False
            x = nan
            y = nan
            z = nan
            it = np.uint64(0)
            tt = np.uint64(0)
            rr = np.uint64(0)
            # fast path: x, y, z first as fixed 32-bit fields (how Apollo and lidarmt write them)
            if pos + 15 <= end and buf[pos] == 0x0D and buf[pos + 5] == 0x15 and buf[pos + 10] == 0x1D:
                word[0] = (np.uint32(buf[pos + 1]) | (np.uint32(buf[pos + 2]) << np.uint32(8))
                           | (np.uint32(buf[pos + 3]) << np.uint32(16)) | (np.uint32(buf[pos + 4]) << np.uint32(24)))
                x = as_float[0]
                word[0] = (np.uint32(buf[pos + 6]) | (np.uint32(buf[pos + 7]) << np.uint32(8))
                           | (np.uint32(buf[pos + 8]) << np.uint32(16)) | (np.uint32(buf[pos + 9]) << np.uint32(24)))
                y = as_float[0]
                word[0] = (np.uint32(buf[pos + 11]) | (np.uint32(buf[pos + 12]) << np.uint32(8))
                           | (np.uint32(buf[pos + 13]) << np.uint32(16)) | (np.uint32(buf[pos + 14]) << np.uint32(24)))
                z = as_float[0]
                pos += 15
            while pos < end:
                t2, pos = _varint(buf, pos, end)
                if pos < 0:
                    return -1, 0, False
                f2 = t2 >> np.uint64(3)
                w2 = np.int64(t2 & np.uint64(7))
                if w2 == 5 and f2 <= 3:
                    if pos + 4 > end:
                        return -1, 0, False
                    word[0] = (np.uint32(buf[pos]) | (np.uint32(buf[pos + 1]) << np.uint32(8))
                               | (np.uint32(buf[pos + 2]) << np.uint32(16)) | (np.uint32(buf[pos + 3]) << np.uint32(24)))
                    v = as_float[0]
                    if f2 == 1:
                        x = v
                    elif f2 == 2:
                        y = v
                    else:
                        z = v
                    pos += 4
                elif w2 == 0 and 4 <= f2 <= 6:
                    v2, pos = _varint(buf, pos, end)
                    if pos < 0:
                        return -1, 0, False
                    if f2 == 4:
                        it = v2
                    elif f2 == 5:
                        tt = v2
                    else:
                        rr = v2
                        ring_seen = True
                else:
                    pos = _skip(buf, pos, end, w2)
                    if pos < 0:
                        return -1, 0, False
            xs[k] = x
            ys[k] = y
            zs[k] = z
            inten[k] = it
            ts[k] = tt
            rings[k] = rr
            k += 1
        else:
            pos = _skip(buf, pos, n, wt)
            if pos < 0:
                return -1, 0, False
            spans[s, 0] = start
            spans[s, 1] = pos
            s += 1
    return k, s, ring_seen


POINT_DTYPE_PB = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<u4"), ("timestamp", "<u8"),
                           ("ring", "<u4")], align=False)


def decode(content: bytes | memoryview) -> tuple[np.ndarray, bool, bytes]:
    """(points as :data:`POINT_DTYPE_PB`, whether any point had a ring, bytes of the non-point fields)."""
    buf = np.frombuffer(content, dtype=np.uint8)
    npts, nother = _count(buf)
    if npts < 0:
        raise FormatError("apollo.drivers.PointCloud message is truncated or corrupt")
    out = np.empty(npts, dtype=POINT_DTYPE_PB)
    spans = np.empty((nother, 2), np.int64)
    k, s, ring_seen = _decode(buf, out["x"], out["y"], out["z"], out["intensity"], out["timestamp"], out["ring"],
                              spans)  # the kernel writes straight into the record fields
    if k < 0:
        raise FormatError("apollo.drivers.PointCloud message is truncated or corrupt")
    rest = b"".join(bytes(buf[a:b]) for a, b in spans[:s])
    return out, bool(ring_seen), rest


# ----------------------------------------------------------------------------------------------- encoding


@njit(cache=True, nogil=True)
def _put_varint(out, pos, v):
    v = np.uint64(v)
    while v >= np.uint64(0x80):
        out[pos] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(v)
    return pos + 1


@njit(cache=True, nogil=True)
def _encode(xs, ys, zs, inten, ts, rings, with_ring, out):
    pos = 0
    body = np.empty(64, np.uint8)
    for i in range(xs.shape[0]):
        b = 0
        body[b] = 0x0D
        body[b + 1 : b + 5] = np.array([xs[i]], np.float32).view(np.uint8)
        body[b + 5] = 0x15
        body[b + 6 : b + 10] = np.array([ys[i]], np.float32).view(np.uint8)
        body[b + 10] = 0x1D
        body[b + 11 : b + 15] = np.array([zs[i]], np.float32).view(np.uint8)
        b = 15
        body[b] = 0x20
        b = _put_varint(body, b + 1, inten[i])
        body[b] = 0x28
        b = _put_varint(body, b + 1, ts[i])
        if with_ring:
            body[b] = 0x30
            b = _put_varint(body, b + 1, rings[i])
        out[pos] = 0x22
        pos = _put_varint(out, pos + 1, b)
        out[pos : pos + b] = body[:b]
        pos += b
    return pos


def encode_points(x, y, z, intensity, timestamp, ring=None) -> bytes:
    """Wire bytes of repeated ``point`` fields (field 4) for the given columns (intensity uint32, timestamp ns)."""
    n = len(x)
    out = np.empty(n * 48 + 16, np.uint8)
    with_ring = ring is not None
    rings = np.asarray(ring if with_ring else np.zeros(n), dtype=np.uint64)
    k = _encode(np.asarray(x, np.float32), np.asarray(y, np.float32), np.asarray(z, np.float32),
                np.asarray(intensity, np.uint64), np.asarray(timestamp, np.uint64), rings, with_ring, out)
    return out[:k].tobytes()


def decode_reference(content: bytes) -> tuple[np.ndarray, bool, object]:
    """Same as :func:`decode` through the protobuf classes (slow; for tests)."""
    from lidarmt.proto.drivers import PointCloud

    msg = PointCloud.FromString(content)
    out = np.empty(len(msg.point), dtype=POINT_DTYPE_PB)
    ring_seen = False
    for i, p in enumerate(msg.point):
        out[i] = (p.x, p.y, p.z, p.intensity, p.timestamp, p.ring)
        ring_seen |= p.HasField("ring")
    return out, ring_seen, msg
