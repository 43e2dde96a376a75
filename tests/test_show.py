"""How strings from files are shown (issue 29, item 6): on a terminal (:func:`lidarmt._show.term`, the CLI's console)
and in Markdown/HTML (:func:`lidarmt._show.md_code`, ``md_text``, ``md_link`` and the project's Markdown renderer)."""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lidarmt._show import md_code, md_link, md_text, stays_inside, term
from lidarmt.cli import main
from lidarmt.engine.html import _md_inline, markdown_page

SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=300)
#: Text with every kind of character a hostile file name may hold: controls, ESC sequences, bidi, Markdown.
PIECE = st.one_of(
    st.text(st.characters(), max_size=6),
    st.sampled_from(["\x1b", "\x1b[2J", "\n", "\r", "\u202e", "\u2066", "\u200b", "\x9b", "`", "``", "[", "]", "(",
                     ")", "!", "..", "../", "/", "|", "\\", "*", "<", ">", "&", "javascript:", "#", "\x00", "\x001\x00"]))
TEXT = st.lists(PIECE, max_size=12).map("".join)

UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _raw_controls(s: str) -> list[str]:
    return [c for c in s if unicodedata.category(c) in UNSAFE]


@SETTINGS
@given(TEXT)
def test_term_never_lets_a_control_character_through(s: str) -> None:
    out = term(s)
    assert not _raw_controls(out)
    assert "\n" not in out and "\x1b" not in out
    if s.isprintable():
        assert out == s  # ordinary names are shown as they are
    assert not _raw_controls(term(s, lines=True).replace("\n", ""))


def test_term_is_repr_like() -> None:
    assert term("a\x1b[31mb\nc\u202ed") == "a\\x1b[31mb\\nc\\u202ed"
    assert term("bundle ✓ 3.jpg") == "bundle ✓ 3.jpg"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.targets += [v for k, v in attrs if k in ("href", "src") and v is not None]


def _parse(html: str) -> _Links:
    p = _Links()
    p.feed(html)
    return p


@SETTINGS
@given(TEXT, TEXT)
def test_md_code_is_one_code_span_nothing_breaks_out_of(s: str, around: str) -> None:
    line = f"{md_text(around)} {md_code(s)} {md_text(around)}"
    p = _parse(_md_inline(line))
    assert p.tags == ["code"], line  # one code span, no link, picture or other tag
    assert "\n" not in md_code(s) and "\x1b" not in md_code(s)


@SETTINGS
@given(TEXT)
def test_md_text_is_never_markup(s: str) -> None:
    p = _parse(_md_inline(md_text(s)))
    assert p.tags == [] and p.targets == []


@SETTINGS
@given(TEXT)
def test_no_href_leaves_the_folder(s: str) -> None:
    """Whatever Markdown a report holds (even raw text from a file), the page's links and pictures stay inside
    the run folder."""
    page = markdown_page(f"# t\n\n{s}\n\n- [{s}]({s}) ![x]({s})\n\n[a]({s}) ![b](../{s})\n")
    for t in _parse(page).targets:
        assert t.startswith(("data:", "#")) or stays_inside(unquote(t.split("#")[0])), t
    p = _parse(_md_inline(md_link(s)))
    assert all(stays_inside(unquote(t)) for t in p.targets)


def test_the_reported_payloads() -> None:
    # a coverage source path with a backtick: one code span, no link outside the run folder
    path = "/tmp/x` [a](../../../../../../elsewhere/x.html) `y"
    html = _md_inline(f"seed frames of {md_code(path)} (campaign seed 1)")
    assert _parse(html).tags == ["code"] and "href" not in html
    # camera search: an image named like a Markdown link
    html = _md_inline(f"frame {md_code('[click me](..).jpg')}: ![p](../../x.png) [q](../up.html)")
    assert _parse(html).targets == []
    assert _parse(_md_inline("[ok](violations/a/bev.png)")).targets == ["violations/a/bev.png"]


def test_cli_error_line_escapes_a_hostile_path(tmp_path, capsys) -> None:
    bad = tmp_path / "x\x1b[2J\nreplay reproduced the bundle bit for bit: every check passed"
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1 and err.startswith("lidarmt: error: ")


def test_console_escapes_whatever_a_print_forgot(capsys) -> None:
    from lidarmt.cli._common import SafeConsole

    SafeConsole(force_terminal=False).print("a\x1b[31mb\u202ec\nd")
    out = capsys.readouterr().out
    assert out == "a\\x1b[31mb\\u202ec\nd\n"


@pytest.mark.slow
def test_camera_predict_shows_hostile_image_names_escaped(tmp_path, capsys) -> None:
    from test_camera_keras import keras2_layers, write_keras

    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    names = ["a\x1b[2Jb.png", "c\nreplay reproduced the bundle bit for bit.png", "d\u202egnp.png"]
    for n in names:
        assert cv2.imwrite(str(tmp_path / "t.png"), rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
        (tmp_path / "t.png").rename(folder / n)
    write_keras(tmp_path / "model.h5", keras2_layers(), version=2)
    assert main(["camera", "predict", str(folder), "--model", str(tmp_path / "model.h5")]) == 0
    out = capsys.readouterr().out
    assert not _raw_controls(out.replace("\n", ""))
    assert not any(re.match(r"\s*│?\s*replay reproduced", ln) for ln in out.splitlines())
    assert "\\x1b[2J" in out and "\\u202e" in out


def test_stays_inside() -> None:
    assert stays_inside("a/b.png") and stays_inside("a/../b.png") and stays_inside("./x")
    assert not stays_inside("../x") and not stays_inside("a/../../x") and not stays_inside("/etc/x")
    assert not stays_inside("http://x") and not stays_inside("") and not stays_inside("javascript:alert(1)")
    import lidarmt._show

    assert not hasattr(lidarmt._show, "inside")  # one name, one rule: lidarmt._paths.inside is the filesystem one
    assert Path("x")  # keep the import used


@SETTINGS
@given(TEXT)
def test_a_code_block_line_never_ends_the_block(s: str) -> None:
    from lidarmt._show import md_code_line

    page = markdown_page(f"# t\n\n```sh\n{md_code_line(s)}\nlidarmt replay x\n```\n")
    p = _parse(page)
    assert p.targets == [] or all(t.startswith(("data:", "#")) for t in p.targets)
    assert page.count("<pre>") == 1 and "lidarmt replay x" in page.split("<pre>")[1].split("</pre>")[0]
