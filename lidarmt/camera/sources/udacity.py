"""Udacity-style folders: front-camera images in ``center/`` and a CSV of steering angles.

Layout (``../shared/data/udacity`` is one)::

    folder/center/1479425441182877835.jpg ...
    folder/steering.csv            frame_id,steering_angle

What the CSV may hold (a header row is required; names are matched case-insensitively, extra columns are
ignored, so Udacity's ``interpolated.csv`` is read as it is):

* the steering angle, in **radians**, positive = left: ``steering_angle`` (challenge 2's ``steering.csv``) or
  ``angle`` (``interpolated.csv``). Every row needs a finite number there.
* which image a row is: ``filename`` (a path relative to the folder, like ``center/1479425441182877835.jpg``) if
  the column exists, else ``frame_id``, the image ``center/<frame_id>.jpg`` (``.jpeg``, ``.png`` or ``.bmp``
  also accepted; an id written with its extension, ``123.png``, names that file). When the filenames name
  several cameras (``left/``, ``center/``, ``right/``), only the ``center/`` rows are read. Frame ids are the
  ``frame_id`` values (without an extension), or the file stems in ``filename`` mode.
* the time: a ``timestamp`` column (nanoseconds), else a numeric ``frame_id`` of 16 digits or more (Udacity's ids
  are the nanosecond capture times). Without either, frames have no stamp.

The CSV is found as ``steering.csv``, else ``interpolated.csv``, else the only ``*.csv`` of the folder; a CSV
path can also be given directly. Without ``center/``, the images sit beside the CSV. Frames keep the CSV's order
when it is the time order; a CSV whose times go backwards is sorted by time (stable), and ``describe()`` notes it.
Images without a CSV row are ignored (noted); a row without an image, a duplicated frame, a missing, non-numeric
or non-finite angle are errors naming the CSV line.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any

from lidarmt._paths import inside, read_bytes
from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.sources._source import BaseImageSource
from lidarmt.camera.sources.decode import IMAGE_SUFFIXES, decode_file
from lidarmt.camera.sources.folder import is_image_name
from lidarmt.camera.types import MAX_ANGLE_RAD, CameraFrame

ANGLE_COLUMNS = ("steering_angle", "angle")
CSV_NAMES = ("steering.csv", "interpolated.csv")
#: the largest steering CSV read (a long Udacity drive's interpolated.csv has a few MB)
MAX_CSV_BYTES = 256 << 20
IMAGE_DIR = "center"


def find_csv(folder: Path) -> Path:
    """The steering CSV of a Udacity folder (see the module doc), or an ImageSourceError saying what to do."""
    for name in CSV_NAMES:
        if (folder / name).is_file():
            return folder / name
    csvs = sorted(p.name for p in folder.glob("*.csv") if p.is_file())
    if len(csvs) == 1:
        return folder / csvs[0]
    if csvs:
        raise ImageSourceError(f"{folder}: several CSV files ({', '.join(csvs)}) and none is steering.csv; pass "
                               f"the CSV's path instead of the folder")
    raise ImageSourceError(f"{folder}: no steering CSV (steering.csv with frame_id,steering_angle, or "
                           f"interpolated.csv) beside {IMAGE_DIR}/; add it, or pass {folder / IMAGE_DIR} to read "
                           f"the images without labels")


def _names(folder: Path) -> list[str]:
    """Image file names directly in ``folder`` (none when it does not exist)."""
    try:
        with os.scandir(folder) as it:
            return [e.name for e in it if is_image_name(e.name)]
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ImageSourceError(f"{folder}: unreadable folder ({err.strerror or err})") from err


def _by_stem(names: list[str]) -> dict[str, str]:
    """Image names by stem (the first of .jpg, .jpeg, .png, .bmp wins for a shared stem)."""
    rank = {s: k for k, s in enumerate(IMAGE_SUFFIXES)}
    out: dict[str, str] = {}
    for n in sorted(names, key=lambda n: (rank.get(Path(n).suffix.lower(), 9), n)):
        out.setdefault(Path(n).stem, n)
    return out


class UdacitySource(BaseImageSource):
    """A Udacity-style folder: ``center/*.jpg`` and a steering CSV (see the module doc for what is accepted)."""

    format = "udacity"

    def __init__(self, path: str | os.PathLike[str], *, csv_path: str | os.PathLike[str] | None = None) -> None:
        p = Path(path)
        if not p.exists():
            raise ImageSourceError(f"{p}: no such file or folder")
        if p.is_file():
            csv_path, p = p, p.parent
        super().__init__(str(p))
        self.root = p
        self.csv = Path(csv_path) if csv_path is not None else find_csv(p)
        self.image_dir = p / IMAGE_DIR if (p / IMAGE_DIR).is_dir() else p
        self.files: list[str] = []  # relative to root
        self.frame_ids: list[str] = []
        self._stamps: list[float | None] = []
        self._labels: list[float | None] = []
        self.has_labels = True
        self._load()

    # ------------------------------------------------------------------ CSV

    def _rows(self) -> tuple[list[str], list[tuple[int, list[str]]]]:
        data = read_bytes(self.csv, max_bytes=MAX_CSV_BYTES, what="steering CSV",
                          error=ImageSourceError)  # a regular file of bounded size: never a FIFO or /dev/zero
        try:
            reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
            rows = [(reader.line_num, r) for r in reader]
        except UnicodeDecodeError as err:
            raise ImageSourceError(f"{self.csv}: not a text CSV file ({err.reason} at byte {err.start})") from err
        except csv.Error as err:
            raise ImageSourceError(f"{self.csv}: unreadable CSV ({err})") from err
        rows = [(n, r) for n, r in rows if any(c.strip() for c in r)]
        if not rows:
            raise ImageSourceError(f"{self.csv}: empty CSV; expected a header such as frame_id,steering_angle and "
                                   f"one row per image")
        header = [c.strip().lower() for c in rows[0][1]]
        return header, rows[1:]

    def _load(self) -> None:
        header, rows = self._rows()
        where = str(self.csv)
        have = ", ".join(header) or "nothing"
        angle_col = next((header.index(c) for c in ANGLE_COLUMNS if c in header), None)
        if angle_col is None:
            raise ImageSourceError(f"{where}: no steering-angle column (needs steering_angle or angle, in radians; "
                                   f"the header has: {have})")
        file_col = header.index("filename") if "filename" in header else None
        id_col = header.index("frame_id") if "frame_id" in header else None
        if file_col is None and id_col is None:
            raise ImageSourceError(f"{where}: no frame_id (or filename) column naming the images (the header has: "
                                   f"{have})")
        time_col = header.index("timestamp") if "timestamp" in header else None
        if not rows:
            raise ImageSourceError(f"{where}: no data rows under the header; one row per image is needed")

        def cell(line: int, row: list[str], col: int, what: str) -> str:
            v = row[col].strip() if col < len(row) else ""
            if not v:
                raise ImageSourceError(f"{where}: line {line}: missing {what}")
            return v

        if file_col is not None:
            prefix = f"{IMAGE_DIR}/"
            names = [r[file_col].strip().replace("\\", "/") if file_col < len(r) else "" for _n, r in rows]
            if any(n.startswith(prefix) for n in names):
                keep = [k for k, n in enumerate(names) if n.startswith(prefix)]
                if len(keep) < len(rows):
                    self.notes.append(f"{len(rows) - len(keep)} CSV row(s) of other cameras skipped (only "
                                      f"{prefix} is read)")
                rows = [rows[k] for k in keep]

        entries: list[tuple[int, str, str, float, int | None]] = []  # line, frame id, file, angle, time ns
        missing: list[tuple[int, str, str]] = []
        listings: dict[Path, list[str]] = {}

        def names_in(folder: Path) -> list[str]:
            if folder not in listings:
                listings[folder] = _names(folder)
            return listings[folder]

        by_stem: dict[str, str] | None = None
        for line, row in rows:
            raw = cell(line, row, angle_col, f"steering angle ({header[angle_col]})")
            try:
                angle = float(raw)
            except ValueError as err:
                raise ImageSourceError(f"{where}: line {line}: steering angle {raw!r} is not a number") from err
            if not math.isfinite(angle):
                raise ImageSourceError(f"{where}: line {line}: steering angle {raw} is not finite; fix or drop "
                                       f"the row")
            if abs(angle) > MAX_ANGLE_RAD:
                raise ImageSourceError(f"{where}: line {line}: steering angle {raw} is out of range (radians, at "
                                       f"most {MAX_ANGLE_RAD:g}); fix or drop the row")
            if file_col is not None:
                rel = cell(line, row, file_col, "filename").replace("\\", "/")
                inside(rel, self.root, what=f"{where}: line {line}: filename", error=ImageSourceError)
                fid = Path(rel).stem
                if Path(rel).name not in names_in((self.root / rel).parent):
                    missing.append((line, fid, rel))
            else:
                fid = cell(line, row, id_col, "frame_id")  # type: ignore[arg-type]
                if by_stem is None:
                    by_stem = _by_stem(names_in(self.image_dir))
                if fid.lower().endswith(IMAGE_SUFFIXES):  # an id written with its extension: that very file
                    name = fid if fid in names_in(self.image_dir) else None
                    expected, fid = fid, Path(fid).stem
                else:
                    name, expected = by_stem.get(fid), f"{fid}.jpg"
                if name is None:
                    missing.append((line, fid, os.path.relpath(self.image_dir / expected, self.root)))
                    rel = ""
                else:
                    rel = os.path.relpath(self.image_dir / name, self.root)
            t_ns: int | None = None
            if time_col is not None and time_col < len(row) and row[time_col].strip():
                try:
                    t_ns = int(row[time_col].strip())
                except ValueError as err:
                    raise ImageSourceError(f"{where}: line {line}: timestamp {row[time_col].strip()!r} is not an "
                                           f"integer number of nanoseconds") from err
            elif fid.isdigit() and len(fid) >= 16:
                t_ns = int(fid)
            entries.append((line, fid, rel, angle, t_ns))
        if missing:
            line, fid, rel = missing[0]
            raise ImageSourceError(f"{where}: {len(missing)} of {len(entries)} frame(s) have no image (first: "
                                   f"frame {fid} on line {line}, expected {self.root / rel}); copy the images or "
                                   f"drop those rows")
        seen: dict[str, int] = {}
        dups = []
        for line, fid, *_ in entries:
            if fid in seen:
                dups.append((line, fid, seen[fid]))
            seen.setdefault(fid, line)
        if dups:
            line, fid, first = dups[0]
            raise ImageSourceError(f"{where}: {len(dups)} duplicated frame(s) (first: frame {fid} on lines {first} "
                                   f"and {line}); keep one row per image")
        times = [e[4] for e in entries]
        if all(t is not None for t in times) and any(b < a for a, b in zip(times, times[1:], strict=False)):
            entries.sort(key=lambda e: e[4])  # stable: equal times keep the CSV order
            self.notes.append("the CSV rows were not in time order; frames are sorted by time (frame id)")
        self.frame_ids = [e[1] for e in entries]
        self.files = [e[2] for e in entries]
        self._labels = [e[3] for e in entries]
        self._stamps = [None if e[4] is None else e[4] * 1e-9 for e in entries]
        unused = sum(len(v) for v in listings.values()) - len(entries)
        if unused > 0:
            self.notes.append(f"{unused} image(s) have no CSV row and are ignored")

    # ------------------------------------------------------------------ frames

    def _count(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> CameraFrame:
        img = decode_file(self.root / self.files[i])
        return CameraFrame(img, i, self.frame_ids[i], self._stamps[i], self._labels[i], self.path,
                           {"file": self.files[i]})

    def stamps(self) -> list[float | None]:
        return list(self._stamps)

    def labels(self) -> list[float | None]:
        return list(self._labels)

    def _describe_extra(self, d: dict[str, Any]) -> None:
        d["csv"] = str(self.csv)
        d["image_folder"] = str(self.image_dir)
