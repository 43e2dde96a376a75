"""What a person looks at in a bug bundle is checked against the bundle's data, whatever the relation.

Replay re-derives ``bundle.json`` and the data files (frames, points, windows, obstacle lists). A bundle also
holds files a person *looks at* — ``bundle.mcap`` and ``foxglove-layout.json`` in Foxglove, the pictures
(``bev*.png``, ``pair.png``, ``seed.png``, ``transformed.png``), ``report.md`` pasted into a ticket, the PCDs and the
ROS bag opened in other tools. The manifest only proves that those files were not changed *after* the manifest
was written: a stranger can rewrite both. So each relation's bundle writer also writes these files into a
scratch folder from the bundle's **stored** data (never from what replay recomputed, so a picture does not depend
on this CPU's floats), and :func:`verify_shown` compares them, file by file:

* ``report.md``, PCDs, the ROS bag, ``foxglove-layout.json``: byte for byte (lidarmt's own deterministic writers);
* the layout besides: JSON holding only the panel kinds lidarmt's layouts have and no User Script
  (:func:`layout_problems`; Foxglove runs a layout's scripts in the receiver's browser);
* ``bundle.mcap``: every message decoded and compared with the regenerated one, topic by topic, in order; numbers
  within :data:`MCAP_TOLERANCE` (the stored obstacle lists are rounded to 0.1 mm), bytes (point clouds, images)
  and text exactly; the metadata records too;
* pictures: decoded and compared pixel by pixel (the PNG encoding may differ between library versions, the
  pixels not: they are drawn from the stored data, never from this CPU's floats). Pictures copied from stored
  arrays (a camera bundle's) must be identical; pictures drawn with anti-aliasing from the rounded obstacle lists
  (a LiDAR bundle's, ``pixel_step`` :data:`PIXEL_STEP_DRAWN`) may differ by up to that many levels per channel.
  Measured on the tests' bundles: an exec SUT's bundle redrawn differs in 96 pixels by at most 4 levels, the others
  not at all; another bundle's picture differs in thousands of pixels by up to 255 levels (a digit of the title,
  the points), a camera picture of another brightness by 10 levels everywhere. A bundle drawn by another
  matplotlib version may therefore be named as differing: replay it where it was made, or rebuild the bundle.

A bundle made before lidarmt regenerated these files (without ``"shown": SHOWN_VERSION`` in bundle.json) may
have been drawn differently (a topic renamed since, another layout): each of its shown files that differs is then
not a failure but named, one line each, as NOT verified (:data:`UNVERIFIED`), and the CLI says so in its last
line instead of "every check passed". Such a bundle may also lack a file lidarmt has written since (its page,
``report.html``): that too is named, not a failure.

A file the writer makes but the bundle lacks fails (a deleted ``bundle.mcap``, even with the manifest rewritten);
a file in the bundle that lidarmt's writer does not make fails too, naming it: replay vouches only for what it
checked. The files replay reads as data (``data``) are checked by the relation's replay itself.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CHECK_SHOWN = "files a person looks at, regenerated from the bundle's data"
#: The start of the (passing) check that names a file replay could not verify (an older bundle's).
UNVERIFIED = "NOT verified"
#: bundle.json's ``shown``: the bundle's shown files are exactly what this lidarmt's writers make from its data.
SHOWN_VERSION = 1
#: Absolute and relative tolerance for numbers in bundle.mcap's messages.
MCAP_TOLERANCE = 1e-3
#: Levels a pixel of a picture drawn with anti-aliasing from rounded numbers may differ by (module docstring).
PIXEL_STEP_DRAWN = 16
#: Never compared: the manifest (checked first by every replay).
_SKIP = ("MANIFEST.json",)
_LAYOUT = "foxglove-layout.json"
#: Shown files that bundles older than :data:`SHOWN_VERSION` may lack (written since): each bundle's page.
_NEWER = ("report.html",)
_MAX_PICTURE_BYTES = 64 << 20
_MAX_PICTURE_PIXELS = 40_000_000


def verify_shown(folder: Path, check: Callable[..., bool], regenerate: Callable[[Path], None], *,
                 data: Iterable[str], layout_kind: str | None = None, strict: bool = True,
                 pixel_step: int = 0) -> None:
    """Regenerate the bundle's shown files (``regenerate(scratch)`` writes the bundle's files into ``scratch``
    with lidarmt's own writers, from the bundle's stored data) and compare each with the bundle's
    (module docstring). ``data``: the files replay reads and checks itself. One check, :data:`CHECK_SHOWN`; each
    file that differs is one line naming it. ``strict`` False (a bundle older than :data:`SHOWN_VERSION`): a file
    that differs is named as :data:`UNVERIFIED` instead, a passing check of its own. ``pixel_step``: how many
    levels a picture's pixel may differ by (0: none)."""
    folder = Path(folder)
    data = set(data) | set(_SKIP)
    problems: list[str] = []
    unverified_missing: list[str] = []
    if layout_kind is not None and (folder / _LAYOUT).is_file():
        problems += layout_problems(folder / _LAYOUT, layout_kind)
    with tempfile.TemporaryDirectory(prefix="lidarmt-verify-") as tmp:
        scratch = Path(tmp) / "bundle"
        scratch.mkdir()
        for name in sorted(data - set(_SKIP)):  # the data beside them, as when the bundle was written (its page
            src = folder / name                  # lists the bundle's files)
            if src.is_file() and not src.is_symlink():
                shutil.copyfile(src, scratch / name)
        try:
            regenerate(scratch)
        except Exception as err:  # the bundle's data cannot make its files: a finding about the bundle
            check(CHECK_SHOWN, False, f"cannot regenerate them from the bundle's data ({type(err).__name__}: "
                                      f"{err})"[:400])
            return
        made = {p.name for p in scratch.iterdir() if p.is_file()} - data
        held = {p.name for p in folder.iterdir()} - data
        for name in sorted(made - held):
            if not strict and name in _NEWER:
                unverified_missing.append(f"{UNVERIFIED}: {name} (not in this bundle: lidarmt writes it in bundles "
                                          f"newer than this one)")
                continue
            problems.append(f"{name}: missing (lidarmt writes it in every such bundle)")
        for name in sorted(held - made):
            problems.append(f"{name}: not a file lidarmt writes in this bundle; not verified")
        shown = sorted(made & held)
        unverified = []
        for name in list(shown):
            bad = compare_file(folder / name, scratch / name, pixel_step=pixel_step)
            if bad and not strict:
                unverified.append(f"{UNVERIFIED}: {name} (the bundle predates replay's regeneration of what it "
                                  f"shows, and this lidarmt draws it otherwise: {bad})"[:400])
                shown.remove(name)
            elif bad:
                problems.append(f"{name}: {bad}")
    for line in unverified_missing + unverified:
        check(line, True)
    if not problems:
        check(f"{CHECK_SHOWN} ({', '.join(shown)})", True)
    for p in problems:
        check(CHECK_SHOWN, False, p)


def compare_file(got: Path, want: Path, *, pixel_step: int = 0) -> str:
    """'' when the bundle's file ``got`` shows what the regenerated ``want`` shows, else what differs
    (``pixel_step``: see :func:`verify_shown`)."""
    if got.is_symlink() or not got.is_file():
        return "not a regular file"
    if got.stat().st_size > max(4 * want.stat().st_size, 1 << 20):
        return f"{got.stat().st_size} bytes where lidarmt writes {want.stat().st_size}"
    suffix = got.suffix.lower()
    try:
        if suffix == ".png":
            return _compare_picture(got, want, pixel_step)
        if suffix == ".mcap":
            return _compare_mcap(got, want)
    except Exception as err:  # noqa: BLE001 - a file from a stranger that cannot be decoded is a finding
        return f"cannot be decoded ({type(err).__name__}: {err})"[:300]
    if got.read_bytes() != want.read_bytes():
        return "differs from what the bundle's data gives (byte for byte)"
    return ""


# ----------------------------------------------------------------------------------------------- pictures


def _read_picture(path: Path):
    import cv2
    import numpy as np

    from lidarmt._limits import check_image

    if path.stat().st_size > _MAX_PICTURE_BYTES:
        raise ValueError(f"{path.stat().st_size} bytes")
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    check_image(data, what=path.name, max_pixels=_MAX_PICTURE_PIXELS)  # before anything is decoded
    img = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError("not a picture")
    return img


def picture_difference(got: Path, want: Path, pixel_step: int = 0) -> float:
    """The share of pixels that differ by more than ``pixel_step`` levels in some channel (1.0 when the sizes or
    channel counts differ)."""
    import numpy as np

    a, b = _read_picture(got), _read_picture(want)
    if a.shape != b.shape:
        return 1.0
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    if d.ndim == 3:
        d = d.max(axis=2)
    return float(np.count_nonzero(d > pixel_step)) / max(d.size, 1)


def _compare_picture(got: Path, want: Path, pixel_step: int) -> str:
    frac = picture_difference(got, want, pixel_step)
    if frac > 0:
        return ("another picture than the bundle's data gives" if frac >= 1.0 else
                f"{frac:.2%} of its pixels differ from the picture the bundle's data gives")
    return ""


# ----------------------------------------------------------------------------------------------- MCAP


def _mcap_content(path: Path) -> tuple[list[tuple[str, str, int, Any]], list[tuple[str, dict[str, str]]]]:
    from google.protobuf.json_format import MessageToDict
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        msgs = [(ch.topic, schema.name if schema else "", int(m.log_time),
                 MessageToDict(msg, preserving_proto_field_name=True))
                for schema, ch, m, msg in reader.iter_decoded_messages(log_time_order=True)]
        fh.seek(0)
        meta = [(r.name, dict(r.metadata)) for r in make_reader(fh).iter_metadata()]
    return msgs, meta


def _close(a: Any, b: Any, where: str) -> str:
    """'' when ``a`` (the bundle's) equals ``b`` (regenerated), numbers within :data:`MCAP_TOLERANCE`."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: fields {sorted(set(a) ^ set(b))[:4]} differ"
        for k in a:
            bad = _close(a[k], b[k], f"{where}.{k}")
            if bad:
                return bad
        return ""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items, {len(b)} from the bundle's data"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            bad = _close(x, y, f"{where}[{i}]")
            if bad:
                return bad
        return ""
    if (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
            and not isinstance(b, bool)):
        fa, fb = float(a), float(b)
        if math.isfinite(fa) and math.isfinite(fb) and abs(fa - fb) <= MCAP_TOLERANCE * max(1.0, abs(fb)):
            return ""
        return "" if fa == fb else f"{where}: {fa!r}, {fb!r} from the bundle's data"
    if isinstance(a, str) and isinstance(b, str) and a != b and _same_text(a, b):
        return ""
    return "" if a == b else f"{where} differs from the bundle's data"


_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)")


def _same_text(a: str, b: str) -> bool:
    """Whether two labels differ only in numbers printed from the rounded obstacle lists: the same words, each
    number within one unit of its last printed digit ("4.25 x 1.80" and "4.24 x 1.80"); integers (ids, point counts) exactly."""
    pa, pb = _NUMBER.split(a), _NUMBER.split(b)
    if len(pa) != len(pb):
        return False
    for i, (x, y) in enumerate(zip(pa, pb, strict=True)):
        if i % 2 == 0:
            if x != y:
                return False
        elif x != y:
            places = max(len(x.partition(".")[2]), len(y.partition(".")[2]))
            if places == 0 or abs(float(x) - float(y)) > 1.01 * 10.0 ** -places:  # integers (ids, counts): exact
                return False
    return True


def _compare_mcap(got: Path, want: Path) -> str:
    msgs, meta = _mcap_content(got)
    wmsgs, wmeta = _mcap_content(want)
    if [m[:2] for m in msgs] != [m[:2] for m in wmsgs]:
        return (f"holds {len(msgs)} messages on {sorted({m[0] for m in msgs})}, the bundle's data gives "
                f"{len(wmsgs)} on {sorted({m[0] for m in wmsgs})}")[:400]
    for (topic, _, t, msg), (_, _, wt, wmsg) in zip(msgs, wmsgs, strict=True):
        if t != wt:
            return f"{topic}: logged at {t} ns, the bundle's data gives {wt}"
        bad = _close(msg, wmsg, topic)
        if bad:
            return bad[:400]
    if meta != wmeta:
        return "its metadata differs from bundle.json"
    return ""


# ----------------------------------------------------------------------------------------------- layouts


def _panel_kinds(doc: dict[str, Any]) -> set[str]:
    return {str(k).split("!", 1)[0] for k in doc.get("configById", {})}


def _leaves(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return _leaves(node.get("first")) + _leaves(node.get("second"))
    return []


def layout_problems(path: Path, kind: str) -> list[str]:
    """What is wrong with a bundle's Foxglove layout (one line each, naming the file): not JSON, not an object
    with the keys lidarmt's layouts have, a User Script (``userNodes``), or a panel kind that lidarmt's shipped
    layout ``kind`` (:data:`lidarmt.engine.mcap.LAYOUTS`) does not have."""
    from lidarmt._limits import loads_json
    from lidarmt.engine.mcap import LAYOUTS, layout_text

    name = path.name
    shipped = json.loads(layout_text(kind))
    if path.is_symlink() or not path.is_file():
        return [f"{name}: not a regular file"]
    if path.stat().st_size > 1 << 20:
        return [f"{name}: {path.stat().st_size} bytes, not a layout lidarmt writes"]
    try:
        doc = loads_json(path.read_text(encoding="utf-8"), what=name, error=ValueError)
    except (ValueError, UnicodeDecodeError) as err:
        return [f"{name}: not JSON ({err})"[:300]]
    if not isinstance(doc, dict):
        return [f"{name}: not a Foxglove layout (not a JSON object)"]
    out = []
    extra = sorted(set(doc) - set(shipped))
    if extra:
        out.append(f"{name}: keys lidarmt's layouts do not have: {', '.join(map(str, extra))[:200]}")
    if doc.get("userNodes"):
        out.append(f"{name}: holds User Scripts (userNodes), which Foxglove would run; lidarmt writes none")
    allowed = set().union(*(_panel_kinds(json.loads(layout_text(k))) for k in LAYOUTS))
    if not isinstance(doc.get("configById", {}), dict):
        out.append(f"{name}: configById is not an object")
    else:
        bad = sorted((_panel_kinds(doc) | {str(p).split("!", 1)[0] for p in _leaves(doc.get("layout"))}) - allowed)
        if bad:
            out.append(f"{name}: panels lidarmt does not write: {', '.join(bad)[:200]}")
    return out
