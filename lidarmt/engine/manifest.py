"""File manifests: the SHA-256 and size of every file of an output folder, to check it later.

A folder that is handed to someone else (a bug bundle attached to an issue, a run folder copied to another
machine) carries a ``MANIFEST.json`` that lists its files. Whoever receives it can tell whether a file went
missing or changed on the way before trusting what the folder claims. The manifest proves integrity, not
authorship: whoever can change a file can also write a new manifest.

Usage::

    write_manifest(folder, ["bundle.json", "source.npz", "added.npy"])   # last, once the files are final
    problems = verify_manifest(folder)                                  # [] when every listed file is intact
    for p in problems:
        print(p)                                                        # one line each

``MANIFEST.json`` looks like::

    {"format": "lidarmt-manifest", "version": 1, "algorithm": "sha256",
     "files": {"added.npy": {"sha256": "9f86d0…", "size": 12128}, ...}}

Names are relative POSIX paths inside the folder (``a.npy``, ``pictures/bev.png``); absolute names, ``..``
and backslashes are refused, so a manifest a stranger sent cannot make :func:`verify_manifest` read outside
the folder. Only regular files are listed and checked (a symbolic link, a folder or a device where a file was
listed is a problem, and is never read). The manifest does not list itself.

Nothing here is specific to one kind of folder: the LiDAR bug bundles (:mod:`lidarmt.lidar.mr1.bundle`) and the
camera bundles use the same functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from lidarmt._atomic import atomic_write_text

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_FORMAT = "lidarmt-manifest"
MANIFEST_VERSION = 1
#: A manifest bigger than this is not read (a real one lists a few dozen files: a few kB).
MAX_MANIFEST_BYTES = 4 << 20
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ManifestProblem:
    """One thing wrong with a folder compared with its manifest.

    ``kind`` is one of ``"no-manifest"`` (``MANIFEST.json`` is missing), ``"bad-manifest"`` (it is not a
    manifest: bad JSON, wrong format, bad entry), ``"unsafe-name"`` (a listed name points outside the folder),
    ``"missing"`` (a listed file is absent), ``"not-a-file"`` (a listed name is a link, folder, device...),
    ``"changed"`` (size or SHA-256 differ) or ``"unlisted"`` (a file the manifest does not list; reported only
    by ``verify_manifest(..., strict=True)``).
    """

    kind: str
    name: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.name}" + (f" ({self.detail})" if self.detail else "")


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a manifest entry (absolute, ``..``, backslash, empty...), or None when it can."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if "\\" in name or "\x00" in name:
        return "backslash or NUL in the name"
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("~"):
        return "absolute name"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "'.' or '..' or an empty part in the name"
    if name == MANIFEST_NAME:
        return "the manifest does not list itself"
    return None


def file_digest(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def write_manifest(folder: str | os.PathLike[str], names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Write ``folder/MANIFEST.json`` listing ``names`` (files inside ``folder``) with SHA-256 and size.

    Call it last, once every listed file is final; the manifest is written atomically, so a reader sees the
    old manifest or the new one, never half of one. Returns the manifest as written.

    Raises ``ValueError`` for a name that :func:`check_name` refuses or that is not a regular file, and
    ``OSError`` (``FileNotFoundError``...) when a file cannot be read.
    """
    folder = Path(folder)
    files: dict[str, dict[str, Any]] = {}
    for name in names:
        why = check_name(name)
        if why:
            raise ValueError(f"{folder}: cannot list {name!r} in {MANIFEST_NAME}: {why}")
        path = folder / name
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise ValueError(f"{path}: not a regular file; a manifest lists regular files only")
        digest, size = file_digest(path)
        files[name] = {"sha256": digest, "size": size}
    doc = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "algorithm": "sha256",
           "files": dict(sorted(files.items()))}
    atomic_write_text(folder / MANIFEST_NAME, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def read_manifest(folder: str | os.PathLike[str]) -> tuple[dict[str, dict[str, Any]] | None, list[ManifestProblem]]:
    """The manifest's ``files`` table (name -> {"sha256", "size"}), or None with the problems that prevent
    reading it. Entries with an unsafe name or a malformed record are left out and reported."""
    path = Path(folder) / MANIFEST_NAME
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, [ManifestProblem("no-manifest", MANIFEST_NAME, "the folder lists no checksums")]
    except OSError as err:
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME, f"cannot read it: {err.strerror or err}")]
    if not stat.S_ISREG(st.st_mode):
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME, "not a regular file")]
    if st.st_size > MAX_MANIFEST_BYTES:
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME, f"{st.st_size} bytes, too big to be one")]
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: nested deeper than any manifest
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME, f"not JSON: {err}")]
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(doc.get("files"), dict):
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME, f"not a {MANIFEST_FORMAT} document")]
    if doc.get("version") != MANIFEST_VERSION or doc.get("algorithm", "sha256") != "sha256":
        return None, [ManifestProblem("bad-manifest", MANIFEST_NAME,
                                      f"version {doc.get('version')!r} / algorithm {doc.get('algorithm')!r} is "
                                      f"not supported (expected {MANIFEST_VERSION} / sha256)")]
    files: dict[str, dict[str, Any]] = {}
    problems: list[ManifestProblem] = []
    for name, entry in doc["files"].items():
        why = check_name(name)
        if why:
            problems.append(ManifestProblem("unsafe-name", repr(name) if isinstance(name, str) else str(name), why))
            continue
        ok = (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64
              and isinstance(entry.get("size"), int) and not isinstance(entry.get("size"), bool)
              and entry["size"] >= 0)
        if not ok:
            problems.append(ManifestProblem("bad-manifest", name, "its entry needs a 64-digit sha256 and a size"))
            continue
        files[name] = {"sha256": entry["sha256"].lower(), "size": int(entry["size"])}
    return files, problems


def verify_manifest(folder: str | os.PathLike[str], *, strict: bool = False) -> list[ManifestProblem]:
    """Every way ``folder`` differs from its ``MANIFEST.json``; an empty list means every listed file is intact.

    Checks each listed file: present, a regular file (links are not followed), the same size and SHA-256.
    With ``strict``, files present in the folder (recursively, hidden ones included) but not listed are
    problems too. Never raises for anything found in the folder: a missing or corrupt manifest is a problem.
    """
    folder = Path(folder)
    files, problems = read_manifest(folder)
    if files is None:
        return problems
    for name, entry in files.items():
        path = folder / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            problems.append(ManifestProblem("missing", name, f"listed in {MANIFEST_NAME}"))
            continue
        except OSError as err:
            problems.append(ManifestProblem("missing", name, f"cannot read it: {err.strerror or err}"))
            continue
        if not stat.S_ISREG(st.st_mode) or _outside(folder, path):
            problems.append(ManifestProblem("not-a-file", name, "a link, folder or device, not a regular file"))
            continue
        if st.st_size != entry["size"]:
            problems.append(ManifestProblem("changed", name, f"{st.st_size} bytes, {entry['size']} listed"))
            continue
        try:
            digest, _ = file_digest(path)
        except OSError as err:
            problems.append(ManifestProblem("missing", name, f"cannot read it: {err.strerror or err}"))
            continue
        if digest != entry["sha256"]:
            problems.append(ManifestProblem("changed", name, "SHA-256 differs from the listed one"))
    if strict:
        present = []
        for root, dirs, names in os.walk(folder, followlinks=False):
            base = Path(root).relative_to(folder)
            present += [(base / n).as_posix() for n in names]
            present += [(base / d).as_posix() for d in dirs if (Path(root) / d).is_symlink()]
        for rel in sorted(present):
            if rel != MANIFEST_NAME and rel not in files:
                problems.append(ManifestProblem("unlisted", rel, f"not in {MANIFEST_NAME}"))
    return problems


def _outside(folder: Path, path: Path) -> bool:
    """True when ``path`` resolves outside ``folder`` (a parent folder of it is a symbolic link)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return True
    return False
