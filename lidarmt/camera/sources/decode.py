"""Turning bytes into RGB images: image files, compressed messages (JPEG/PNG) and raw ``sensor_msgs/Image`` data.

Every function returns a new, writable ``(H, W, 3)`` ``uint8`` C-contiguous array in **RGB** order (never a view
of the input bytes), or raises :class:`lidarmt.camera.errors.ImageSourceError` with a one-line message that
starts with ``where`` (the file, or the recording, topic and message) — so a broken frame is named, never
silently replaced.

Decoding is opencv's (``cv2.imdecode`` and ``cv2.cvtColor``; both release the GIL). Grey and 16-bit files become
8-bit RGB; an alpha channel is dropped. Truncation is checked before decoding, because libjpeg decodes a cut
JPEG into a half-grey picture with only a warning in some opencv versions: a JPEG must end with its EOI marker
(``FF D9``, trailing zero padding allowed), a PNG with its ``IEND`` chunk.

Raw encodings (the ``encoding`` string of ``sensor_msgs/Image`` and ``apollo.drivers.Image``, case-insensitive):
``rgb8``, ``bgr8``, ``rgba8``, ``bgra8``, ``mono8``, their 16-bit forms ``rgb16``, ``bgr16``, ``rgba16``,
``bgra16``, ``mono16`` (scaled to 8 bit by dropping the low byte; ``is_bigendian`` honoured), opencv's
``8UC1``/``8UC3``/``8UC4``/``16UC1`` (read as mono, BGR, BGRA and mono as ``cv_bridge`` does), ``yuv422`` and
``uyvy`` (UYVY byte order, ROS' and Apollo's ``yuv422``), ``yuyv``/``yuv422_yuy2``/``yuy2`` (YUYV), and the
8-bit Bayer mosaics ``bayer_rggb8``, ``bayer_bggr8``, ``bayer_gbrg8``, ``bayer_grbg8``. Rows are ``step`` bytes
apart (``step`` 0 means packed rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lidarmt.camera.errors import ImageSourceError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
"""File name endings (case-insensitive) of the images a folder source reads."""

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class _Raw:
    channels: int
    itemsize: int  # bytes per channel
    conversion: str | None  # name of the cv2.COLOR_* code to RGB (None: already RGB)


def _bayer(pattern: str) -> str:
    # opencv names its Bayer codes after the second row's first two pixels: the RGGB mosaic is "BayerBG"
    # (cv_bridge's mapping); newer opencv also has the explicit alias COLOR_BayerRGGB2RGB.
    return {"rggb": "COLOR_BayerBG2RGB", "bggr": "COLOR_BayerRG2RGB", "gbrg": "COLOR_BayerGR2RGB",
            "grbg": "COLOR_BayerGB2RGB"}[pattern]


RAW_ENCODINGS: dict[str, _Raw] = {
    "rgb8": _Raw(3, 1, None),
    "bgr8": _Raw(3, 1, "COLOR_BGR2RGB"),
    "rgba8": _Raw(4, 1, "COLOR_RGBA2RGB"),
    "bgra8": _Raw(4, 1, "COLOR_BGRA2RGB"),
    "mono8": _Raw(1, 1, "COLOR_GRAY2RGB"),
    "rgb16": _Raw(3, 2, None),
    "bgr16": _Raw(3, 2, "COLOR_BGR2RGB"),
    "rgba16": _Raw(4, 2, "COLOR_RGBA2RGB"),
    "bgra16": _Raw(4, 2, "COLOR_BGRA2RGB"),
    "mono16": _Raw(1, 2, "COLOR_GRAY2RGB"),
    "8uc1": _Raw(1, 1, "COLOR_GRAY2RGB"),
    "8uc3": _Raw(3, 1, "COLOR_BGR2RGB"),
    "8uc4": _Raw(4, 1, "COLOR_BGRA2RGB"),
    "16uc1": _Raw(1, 2, "COLOR_GRAY2RGB"),
    "yuv422": _Raw(2, 1, "COLOR_YUV2RGB_UYVY"),
    "uyvy": _Raw(2, 1, "COLOR_YUV2RGB_UYVY"),
    "yuyv": _Raw(2, 1, "COLOR_YUV2RGB_YUYV"),
    "yuy2": _Raw(2, 1, "COLOR_YUV2RGB_YUYV"),
    "yuv422_yuy2": _Raw(2, 1, "COLOR_YUV2RGB_YUYV"),
    **{f"bayer_{p}8": _Raw(1, 1, _bayer(p)) for p in ("rggb", "bggr", "gbrg", "grbg")},
}
"""The raw encodings :func:`decode_raw` reads: channels, bytes per channel and the opencv conversion to RGB."""


def _cv2():
    from lidarmt.errors import require

    return require("cv2", purpose="decoding camera images")


def check_complete(data: bytes | memoryview, where: str) -> None:
    """Raise when JPEG or PNG bytes are visibly cut short (no EOI marker / IEND chunk at the end)."""
    head = bytes(data[:8])
    if head.startswith(_JPEG_SOI):
        tail = bytes(data[-64:]).rstrip(b"\0")
        if _JPEG_EOI not in tail[-16:]:
            raise ImageSourceError(f"{where}: truncated JPEG ({len(data)} bytes, no end-of-image marker); "
                                   f"re-copy or re-export the image")
    elif head == _PNG_MAGIC and b"IEND" not in bytes(data[-16:]):
        raise ImageSourceError(f"{where}: truncated PNG ({len(data)} bytes, no IEND chunk); re-copy or re-export "
                               f"the image")


def decode_bytes(data: bytes | memoryview | np.ndarray, where: str) -> np.ndarray:
    """An encoded image (JPEG, PNG, BMP, ... anything opencv reads) as RGB uint8; ``where`` names it in errors."""
    cv2 = _cv2()
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1)
    if buf.size == 0:
        raise ImageSourceError(f"{where}: empty image (0 bytes)")
    check_complete(memoryview(buf), where)
    from lidarmt._limits import check_image

    # a decompression bomb, in any format opencv would decode: refused by its header (the whole file: a TIFF's
    # directory may lie at its end); bytes of no format lidarmt knows a header of are refused too
    check_image(buf.tobytes(), what=where, error=ImageSourceError)
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as err:  # opencv raises for some malformed headers instead of returning None
        raise ImageSourceError(f"{where}: not a readable image ({str(err).strip().splitlines()[-1]})") from err
    if img is None or img.size == 0:
        raise ImageSourceError(f"{where}: not a readable image ({buf.size} bytes that opencv cannot decode as "
                               f"JPEG, PNG or BMP)")
    return np.ascontiguousarray(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))


def decode_file(path: str | Path) -> np.ndarray:
    """The image file ``path`` as RGB uint8 (the file is read whole, then decoded in memory)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError as err:
        raise ImageSourceError(f"{p}: no such image file (was it moved or deleted after the source was "
                               f"opened?)") from err
    except OSError as err:
        raise ImageSourceError(f"{p}: unreadable image file ({err.strerror or err})") from err
    return decode_bytes(data, str(p))


def decode_compressed(data: bytes | memoryview | np.ndarray, fmt: str, where: str) -> np.ndarray:
    """A ``CompressedImage`` (``format`` like "jpeg", "png" or "bgr8; jpeg compressed bgr8") as RGB uint8.

    opencv recognises JPEG and PNG by their bytes, so ``fmt`` only rules out what is not a picture: ROS'
    ``compressedDepth`` (a depth map) is refused.
    """
    if "compresseddepth" in fmt.lower().replace(" ", ""):
        raise ImageSourceError(f"{where}: unknown image format {fmt!r} (a compressed depth map, not a camera "
                               f"picture); choose a colour image topic")
    return decode_bytes(data, where)


def decode_raw(data: bytes | memoryview | np.ndarray, *, height: int, width: int, encoding: str, step: int = 0,
               bigendian: bool = False, where: str) -> np.ndarray:
    """Raw pixel rows (``sensor_msgs/Image`` / ``apollo.drivers.Image``) as RGB uint8 (encodings: module doc)."""
    cv2 = _cv2()
    enc = encoding.strip().lower()
    spec = RAW_ENCODINGS.get(enc)
    if spec is None:
        known = ", ".join(sorted(RAW_ENCODINGS))
        raise ImageSourceError(f"{where}: unknown image encoding {encoding!r}; lidarmt reads {known}")
    height, width, step = int(height), int(width), int(step)
    if height <= 0 or width <= 0:
        raise ImageSourceError(f"{where}: empty image ({width}x{height} pixels)")
    if enc.startswith(("yuv", "uyvy", "yuy")) and width % 2:
        raise ImageSourceError(f"{where}: a {encoding} image needs an even width, not {width}")
    row = width * spec.channels * spec.itemsize
    step = step or row
    if step < row:
        raise ImageSourceError(f"{where}: step {step} is shorter than a row of {width} {encoding} pixels "
                               f"({row} bytes); the message is corrupt")
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1)
    need = step * (height - 1) + row
    if buf.size < need:
        raise ImageSourceError(f"{where}: truncated image data ({buf.size} bytes for {width}x{height} {encoding} "
                               f"with step {step}; needs {need})")
    rows = np.lib.stride_tricks.as_strided(buf, shape=(height, row), strides=(step, 1))
    if spec.itemsize == 2:
        # keep the high byte of each 16-bit sample
        hi = 0 if bigendian else 1
        px = rows.reshape(height, width * spec.channels, 2)[:, :, hi]
    else:
        px = rows
    px = np.ascontiguousarray(px).reshape(height, width, spec.channels)
    if spec.channels == 1:
        px = px[:, :, 0]
    if spec.conversion is None:
        return np.array(px, order="C", copy=True)  # px may view the message buffer (read-only, shared)
    return np.ascontiguousarray(cv2.cvtColor(px, getattr(cv2, spec.conversion)))
