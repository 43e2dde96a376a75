"""How a string that comes from a file or a file name is shown: one function for the terminal, one rule for
Markdown (``report.md``) and the HTML pages built from it (:mod:`lidarmt.engine.html`).

A bundle, a recording, an image folder or a journal is data from strangers, and so are the names of its files. On a
terminal such a string could move the cursor, rewrite earlier lines or colour a forged "every check passed"
(escape sequences, carriage returns, newlines), or reorder what follows it (Unicode bidirectional overrides). In
Markdown it could close a code span or open a link or a picture leaving the run folder. So:

* :func:`term` shows every control character (C0, DEL, C1: ESC, CR, LF, TAB...), every Unicode format character
  (bidi overrides and isolates, zero-width characters), line and paragraph separators and lone surrogates as a
  Python-like escape (``\\x1b``, ``\\n``, ``\\u202e``); everything else is shown as it is.
* :func:`md_code` puts a string in an inline code span (``term`` first; a backtick inside is shown ``\\x60``, a
  pipe is escaped in table cells); :func:`md_text` escapes what Markdown would read as markup; :func:`md_link`
  is a relative link only to a path that stays inside the folder (:func:`stays_inside`, a rule on the text),
  else the path as code.

The CLI prints strings from files through :func:`lidarmt.cli._common.show` (``term`` and Rich's markup escape).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any
from urllib.parse import quote

#: Control characters the terminal would act on, shown by name when Python's repr has one.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def term(value: Any, *, lines: bool = False) -> str:
    """``value`` as text a terminal shows as it is: every control, format (bidi) or separator character, and
    anything unassigned or private, written as an escape (``\\x1b``, ``\\n``, ``\\u202e``); ``lines``
    keeps newlines (for text made of several lines of the program's own)."""
    s = "" if value is None else str(value)
    if s.isprintable():  # the common case, fast (isprintable is False for every Cc, Cf, Z*, Cs, Co, Cn but space)
        return s
    if lines:
        return "\n".join(term(part) for part in s.split("\n"))
    return "".join(_escape_char(c) if _unsafe(c) else c for c in s)


def md_code(value: Any, *, table: bool = False) -> str:
    """``value`` as an inline code span that nothing in it can close (a backtick is shown ``\\x60``; in a table
    cell a pipe is ``\\|``)."""
    s = term(value).replace("`", "\\x60")
    if table:
        s = s.replace("|", "\\|")
    return f"`{s}`" if s else "` `"


def md_code_line(value: Any) -> str:
    """``value`` as one line inside a fenced or indented code block: :func:`term` (so no newline ends the block
    early), and never a line that would close the fence."""
    s = term(value)
    return s.replace("`", "\\x60", 1) if s.lstrip().startswith("```") else s


_MD_SPECIAL = re.compile(r"([\\`*_\[\]()!<>|#~])")


def md_text(value: Any) -> str:
    """``value`` as plain Markdown text: every character Markdown reads as markup (links, pictures, code,
    emphasis, HTML, table pipes) backslash-escaped, control characters as :func:`term`."""
    return _MD_SPECIAL.sub(r"\\\1", term(value))


def stays_inside(path: str) -> bool:
    """Whether a link target written in a page (a relative path, ``/``-separated) stays inside the page's folder,
    read as text only: not absolute, no scheme (``http:``, ``javascript:``), and no ``..`` that climbs above where
    it starts. The Markdown/HTML rule for what a page may link to; it never looks at the filesystem. Whether a
    name read from a file may be *opened* inside a folder (links resolved, one-line errors) is
    :func:`lidarmt._paths.inside`: a different question with a different answer for ``http:x`` or a link."""
    if not path or path.startswith(("/", "\\")) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path):
        return False
    depth = 0
    for seg in re.split(r"[/\\]", path):
        if seg == "..":
            depth -= 1
            if depth < 0:
                return False
        elif seg not in ("", "."):
            depth += 1
    return True


def md_link(target: str, text: Any | None = None) -> str:
    """A Markdown link to ``target`` (a path relative to the report's folder, percent-encoded) when it stays
    inside the folder; otherwise the path shown as code, never a link."""
    if not stays_inside(str(target)) or term(target) != str(target):
        return md_code(target)
    url = "/".join(quote(s, safe="") for s in str(target).split("/"))
    return f"[{md_text(target if text is None else text)}]({url})"
