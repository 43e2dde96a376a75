"""``report.html``: a campaign's results as one static page to browse (no server, no network, no CDN).

The page sits beside ``report.md`` in the run folder; its CSS and JavaScript (``lidarmt/engine/assets/``) are
inlined, every picture and file it shows is a *relative* link into the run folder (charts, each bug bundle's
pictures, ``report.md``, ``bundle.mcap`` and Foxglove layout), so the folder can be zipped and opened anywhere.
A Content-Security-Policy forbids any request that is not a file of the folder.

Pages are built from what the other reports are built from (the summary folded from the journal, the run's
bundle list, the journal itself), by :func:`lidarmt.engine.report.write_report_set`, so ``--resume`` and
re-folding rewrite them with ``report.md``. This module holds what every page is made of (:class:`Page`,
:func:`table`, :func:`image`, links, the facts of a run) and the page of any ``report.md``; each kind of run builds
its own page from these pieces beside its reports: :func:`lidarmt.lidar.mr1.report.campaign_page` (an MR1
campaign), :func:`lidarmt.camera.report.camera_page` (a camera campaign), :func:`lidarmt.bench.report.bench_page`
(``lidarmt bench``).

Everything taken from a file (journal, summary, bundle ids, paths, error messages) is data from strangers: it
is escaped with :func:`html.escape`, and link targets are percent-encoded path segments (never a scheme).
"""

from __future__ import annotations

import html as _html
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: At most this many violating pairs are listed (the journal has them all).
MAX_PAIR_ROWS = 3000
#: Page-wide policy: nothing but the page's own inline style/script and files beside it.
CSP = ("default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")


class Html(str):
    """Markup built here from escaped parts (never from raw file content)."""


def esc(value: Any) -> str:
    """Text escaped for HTML content and attribute values."""
    return _html.escape("" if value is None else str(value), quote=True)


def href(*parts: str) -> str:
    """A relative link from path segments, each percent-encoded (so no segment can be a scheme, ``..`` stays a
    literal name only when given as one), escaped for an attribute."""
    segs: list[str] = []
    for p in parts:
        segs += [quote(s, safe="") for s in str(p).split("/") if s]
    return esc("/".join(segs))


def link(target: str, text: Any, *, title: str | None = None) -> Html:
    """``<a>`` to an already-built :func:`href` target."""
    t = f' title="{esc(title)}"' if title else ""
    return Html(f'<a href="{target}"{t}>{esc(text)}</a>')


@dataclass(frozen=True, slots=True)
class Cell:
    """A table cell: text (escaped) or :class:`Html`, with an optional sort key and CSS class."""

    content: Any
    sort: Any = None
    cls: str = ""


def _cell(value: Any) -> str:
    if isinstance(value, Cell):
        body = value.content if isinstance(value.content, Html) else esc(value.content)
        attrs = f' data-sort="{esc(value.sort)}"' if value.sort is not None else ""
        cls = value.cls
        if not cls and isinstance(value.sort, int | float) and not isinstance(value.sort, bool):
            cls = "num"
        return f"<td{attrs}{f' class={chr(34)}{esc(cls)}{chr(34)}' if cls else ''}>{body}</td>"
    if isinstance(value, Html):
        return f"<td>{value}</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int | float):
        return f'<td class="num" data-sort="{esc(value)}">{esc(_num(value))}</td>'
    text = "" if value is None else str(value)
    cls = ' class="num"' if _looks_numeric(text) else ""
    return f"<td{cls}>{esc(text)}</td>"


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    return "–" if not math.isfinite(v) else f"{v:g}"


def _looks_numeric(text: str) -> bool:
    """A number, a rate with its interval, ``8 → 6``, ``0 / 3 / 0 (0.0 %)``: right-aligned (not prose)."""
    t = text.strip().replace("−", "-")
    starts = bool(t) and (t[0].isdigit() or (t[0] in "+-." and len(t) > 1 and t[1].isdigit()))
    return starts and sum(ch.isalpha() for ch in t) <= 2


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]], *, ident: str | None = None, sortable: bool = True,
          caption: str | None = None, foot: Sequence[Sequence[Any]] = (), filter_box: bool = False) -> Html:
    """A table (sortable by a click on a column head unless ``sortable`` is False); ``foot`` rows (totals)
    stay at the bottom; ``filter_box`` adds a text box that hides rows not containing its text."""
    rows = list(rows)
    idattr = f' id="{esc(ident)}"' if ident else ""
    cls = ' class="sortable"' if sortable else ""
    out = []
    if filter_box and ident:
        out.append(f'<input class="filter" type="search" placeholder="filter rows…" data-filter-for="{esc(ident)}" '
                   f'data-count="{esc(ident)}-count" aria-label="filter rows"><span class="count" '
                   f'id="{esc(ident)}-count">{len(rows)} rows</span>')
    out.append(f'<div class="scroll"><table{idattr}{cls}>')
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th scope=\"col\">{h if isinstance(h, Html) else esc(h)}</th>"
                                        for h in head) + "</tr></thead>")
    out.append("<tbody>")
    out.extend("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    out.append("</tbody>")
    if foot:
        out.append("<tfoot>" + "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in foot) + "</tfoot>")
    out.append("</table></div>")
    return Html("\n".join(out))


def image(target: str, alt: str, *, cls: str = "chart", lazy: bool = False, link_to_self: bool = True) -> Html:
    """An ``<img>`` of an :func:`href` target, linked to the full picture."""
    img = f'<img class="{esc(cls)}" src="{target}" alt="{esc(alt)}"{" loading=" + chr(34) + "lazy" + chr(34) if lazy else ""}>'
    return Html(f'<a href="{target}">{img}</a>' if link_to_self else img)


def _asset(name: str) -> str:
    return resources.files("lidarmt.engine").joinpath("assets", name).read_text(encoding="utf-8")


class Page:
    """A report page: a title, facts, then sections of HTML, rendered with the inline assets."""

    def __init__(self, title: str, *, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.facts: list[Html] = []
        self.sections: list[tuple[str, str, list[str]]] = []

    def fact(self, label: str, value: Any, *, code: bool = False) -> None:
        v = f"<code>{esc(value)}</code>" if code else (value if isinstance(value, Html) else esc(value))
        self.facts.append(Html(f"<li><strong>{esc(label)}</strong>: {v}</li>"))

    def section(self, ident: str, title: str) -> list[str]:
        body: list[str] = []
        self.sections.append((ident, title, body))
        return body

    def move_after(self, ident: str, after: str) -> None:
        """Put section ``ident`` right after section ``after`` (when both exist)."""
        ids = [i for i, _, _ in self.sections]
        if ident in ids and after in ids:
            sec = self.sections.pop(ids.index(ident))
            self.sections.insert([i for i, _, _ in self.sections].index(after) + 1, sec)

    def render(self) -> str:
        from lidarmt import __version__

        toc = " ".join(f'<a href="#{esc(i)}">{esc(t)}</a>' for i, t, b in self.sections if b)
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="referrer" content="no-referrer">',
            f"<title>{esc(self.title)}</title>",
            f"<style>\n{_asset('report.css')}</style>",
            "</head><body>",
            f'<header class="top"><h1>{esc(self.title)}</h1>'
            + (f'<p class="sub">{esc(self.subtitle)}</p>' if self.subtitle else "") + "</header>",
            f'<nav class="toc">{toc}</nav>' if toc else "",
            "<main>",
        ]
        if self.facts:
            parts.append('<ul class="facts">' + "".join(self.facts) + "</ul>")
        for ident, title, body in self.sections:
            if body:
                parts.append(f'<section id="{esc(ident)}"><h2>{esc(title)}</h2>')
                parts.extend(body)
                parts.append("</section>")
        parts += ["</main>",
                  f"<footer>written by lidarmt {esc(__version__)} from the run's journal; report.md holds the same "
                  "numbers. Click a column head to sort.</footer>",
                  f"<script>\n{_asset('report.js')}</script>", "</body></html>"]
        return "\n".join(p for p in parts if p) + "\n"


def p(text: Any, *, cls: str = "") -> str:
    return f'<p{f" class={chr(34)}{esc(cls)}{chr(34)}" if cls else ""}>{text if isinstance(text, Html) else esc(text)}</p>'


def chart_images(out: Path, names: Iterable[str]) -> str:
    imgs = [image(href(n), n) for n in names if (out / n).is_file()]
    return '<div class="charts">' + "".join(imgs) + "</div>" if imgs else ""


def file_links(out: Path, folder: str, names: Sequence[tuple[str, str]]) -> Html:
    """Links to the files of a bundle folder that exist: (file name, link text)."""
    parts = [link(href(folder, name), text) for name, text in names if (out / folder / name).is_file()]
    if (out / folder).is_dir():
        parts.append(link(href(folder) + "/", "folder"))
    return Html('<span class="files">' + " ".join(parts) + "</span>")


def rate_cell(r: Mapping[str, Any]) -> Cell:
    from lidarmt.engine.stats import fmt_rate

    k, n = int(r.get("k", 0)), int(r.get("n", 0))
    return Cell(fmt_rate(k, n), sort=(k / n) if n else -1, cls="num")


def environment_line(run: Mapping[str, Any]) -> str:
    env = run.get("environment") or {}
    return (f"lidarmt {env.get('lidarmt', '?')}, numpy {env.get('numpy', '?')}, torch {env.get('torch', '–')}, "
            f"{env.get('cpu', '?')} ({env.get('cpus', '?')} CPUs)")


def command_facts(page: Page, run: Mapping[str, Any]) -> None:
    if run.get("command"):
        page.fact("command", run["command"], code=True)
    if run.get("throughput"):
        page.fact("throughput", f"{run['throughput']:.2f} per second over {run.get('ran', 0)} pairs with "
                                f"{run.get('workers', 1)} worker(s)")
    page.fact("environment", environment_line(run))


def page_writer(build: Callable[..., str], **kwargs: Any) -> Callable[[Path], str]:
    """``write_report_set``'s ``html`` argument: ``build(**kwargs, out=folder)``."""
    return lambda out: build(**kwargs, out=Path(out))


def check_links(page: str | os.PathLike[str]) -> list[str]:
    """The relative ``src``/``href`` targets of a written page that do not resolve to a file or folder beside
    it (for tests and ``make demo``); anchors (``#...``) are checked against the page's ids."""
    from html.parser import HTMLParser
    from urllib.parse import unquote, urlsplit

    path = Path(page)
    targets: list[str] = []
    ids: set[str] = set()

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            for k, v in attrs:
                if k in ("src", "href") and v is not None:
                    targets.append(v)
                if k == "id" and v:
                    ids.add(v)

    P().feed(path.read_text(encoding="utf-8"))
    bad = []
    for t in targets:
        u = urlsplit(t)
        if u.scheme or u.netloc:
            bad.append(f"{t} (not a file of the folder)")
        elif t.startswith("#"):
            if t[1:] not in ids:
                bad.append(f"{t} (no such anchor)")
        elif not (path.parent / unquote(u.path)).exists():
            bad.append(f"{t} (missing)")
    return bad


# ----------------------------------------------------------------------------------------------- bug bundles

#: The page of a bug bundle, beside its report.md.
BUNDLE_PAGE = "report.html"
#: What a bundle's files are, in the order its page lists them (any other file follows under its own name).
BUNDLE_FILES = (("bundle.mcap", "MCAP (Foxglove)"), ("foxglove-layout.json", "Foxglove layout"),
                ("replay.bag", "ROS1 bag"), ("source.pcd", "source PCD"), ("followup.pcd", "follow-up PCD"),
                ("minimal.pcd", "minimal PCD"), ("source.npz", "source frame"), ("followup.npz", "follow-up frame"),
                ("seed.png", "seed image"), ("transformed.png", "transformed image"), ("window.npz", "windows"),
                ("bundle.json", "bundle.json"), ("MANIFEST.json", "MANIFEST.json"), ("report.md", "report.md"))


def bundle_link(out: Path, folder: str, text: Any) -> Html:
    """A link to a bug bundle (``folder``, relative to the run folder ``out``): its page, else its report.md
    (bundles written before the pages), else the id as text."""
    for name in (BUNDLE_PAGE, "report.md"):
        if (Path(out) / folder / name).is_file():
            return link(href(folder, name), text)
    return Html(esc(text))


def bundle_thumb(out: Path, folder: str, picture: str, alt: str) -> Html:
    """A bundle's picture as a thumbnail that opens its page (where the picture is at full size), else the
    picture itself; empty when the bundle has no such picture."""
    if not (Path(out) / folder / picture).is_file():
        return Html("")
    img = image(href(folder, picture), alt, cls="thumb", lazy=True, link_to_self=False)
    page = BUNDLE_PAGE if (Path(out) / folder / BUNDLE_PAGE).is_file() else picture
    return Html(f'<a href="{href(folder, page)}">{img}</a>')


def obstacle_table(obstacles: Sequence[Mapping[str, Any]], *, ident: str,
                   lost: Mapping[int, str] | None = None, names: Sequence[str] | None = None) -> Html:
    """Obstacles as :meth:`lidarmt.types.Obstacle.to_dict` writes them (a bundle's obstacles_*.json): number,
    class, score, points, centre, distance, size, heading; ``lost`` (index -> what happened) marks rows red,
    ``names`` overrides the numbers shown (e.g. a shared identity)."""
    lost = lost or {}
    rows = []
    for i, o in enumerate(obstacles):
        c = [float(v) for v in (o.get("center") or [0.0, 0.0, 0.0])[:3]]
        dist = math.hypot(c[0], c[1])
        what = lost.get(i)
        rows.append([Cell(names[i] if names else f"#{i}", sort=i), o.get("class", ""),
                     Cell(f"{float(o.get('score', 0.0)):.2f}", sort=float(o.get("score", 0.0))),
                     int(o.get("num_points", len(o.get("point_indices") or []))),
                     f"{c[0]:.1f}, {c[1]:.1f}, {c[2]:.1f}", Cell(f"{dist:.1f}", sort=dist),
                     f"{float(o.get('length', 0)):.1f} × {float(o.get('width', 0)):.1f} × "
                     f"{float(o.get('height', 0)):.1f}",
                     Cell(f"{math.degrees(float(o.get('heading', 0.0))):.0f}°", sort=float(o.get("heading", 0.0))),
                     Cell(what, cls="bad") if what else ""])
    return table(["obstacle", "class", "score", "points", "centre x, y, z (m)", "distance m", "size l × w × h m",
                  "heading", "lost"], rows, ident=ident)


def bundle_page(folder: str | os.PathLike[str], markdown: str, *, pictures: Sequence[tuple[str, str]] = (),
                tables: Sequence[tuple[str, Html]] = (), commands: Sequence[str] = (),
                name: str | None = None, tables_title: str = "Obstacles") -> str:
    """The page of one bug bundle (``report.html`` in its folder): its pictures at full size, its obstacle
    ``tables`` ((title, table)), the commands that reproduce it, links to every file (MCAP and its layout, the
    bag, clouds, frames, bundle.json), then its report.md. Everything is relative to the bundle's folder, so it
    opens from the run's report.html, from a zip, anywhere. ``name``: the bundle's id (default: the folder's
    name; a bundle is written in a staging folder, so its writer passes the id)."""
    folder = Path(folder)
    name = name or folder.name
    page = Page(markdown_title(markdown, f"bug bundle {name}"),
                subtitle=f"bug bundle {name}: lidarmt replay re-runs it; the run's report.html lists the others")
    shown = [(n, alt) for n, alt in pictures if (folder / n).is_file()]
    if shown:
        body = page.section("pictures", "Pictures")
        body.extend(f'<figure>{image(href(n), alt, cls="full")}<figcaption>{esc(alt)}</figcaption></figure>'
                    for n, alt in shown)
    if tables:
        body = page.section("tables", tables_title)
        for title, t in tables:
            body += [f"<h3>{esc(title)}</h3>", t]
    if commands:
        body = page.section("reproduce", "Reproduce")
        body.append("<pre><code>" + esc("\n".join(commands)) + "</code></pre>")
    names = {n for n, _ in BUNDLE_FILES}
    # the manifest is written last, after this page (it lists the page): linked all the same
    present = [(n, label) for n, label in BUNDLE_FILES if (folder / n).is_file() or n == "MANIFEST.json"]
    present += [(f.name, f.name) for f in sorted(folder.iterdir()) if f.is_file() and f.name not in names
                and f.name != BUNDLE_PAGE and not f.name.startswith(".")]
    body = page.section("files", "Files")
    body.append('<ul class="facts">' + "".join(f"<li>{link(href(n), label)}"
                                                + (f" <code>{esc(n)}</code>" if label != n else "") + "</li>"
                                                for n, label in present) + "</ul>")
    add_markdown(page, markdown, folder=folder, first_section=("details", "Details"),
                 skip_images=[n for n, _ in shown])
    return page.render()


def write_bundle_page(folder: str | os.PathLike[str], markdown: str, **kwargs: Any) -> Path:
    """Write :func:`bundle_page` as ``report.html`` in a bundle's (staging) folder; call it before the
    manifest, which lists it."""
    from lidarmt._atomic import atomic_write_text

    path = Path(folder) / BUNDLE_PAGE
    atomic_write_text(path, bundle_page(folder, markdown, **kwargs))
    return path


# ----------------------------------------------------------------------------------------------- any report.md

_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MD_CODE = re.compile(r"(?<!\\)`([^`]+)`")
_MD_ESCAPED = re.compile(r"\\([\\`*_\[\]()!<>|#~])")
_MD_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def _md_target(url: str, folder: Path | None = None) -> str | None:
    """A Markdown link target as a relative :func:`href` (with its ``#anchor`` and trailing ``/``), or None
    for anything with a scheme or host, or a path that leaves the page's folder (never followed: the page makes
    no request outside its folder; :func:`lidarmt._show.stays_inside` is the rule). With the page's ``folder``, a link
    to a bundle's ``report.md`` goes to its page (``report.html``) when it has one."""
    from urllib.parse import unquote, urlsplit

    from lidarmt._show import stays_inside

    u = urlsplit(url)
    if u.scheme or u.netloc or url.startswith("/"):
        return None
    path = unquote(u.path)
    if path and not stays_inside(path):
        return None
    if folder is not None and Path(path).name == "report.md" and (folder / path).with_name("report.html").is_file():
        path = str(Path(path).with_name("report.html"))
    target = href(path) + ("/" if path.endswith("/") and path.strip("/") else "")
    return target + (f"#{esc(quote(u.fragment, safe=''))}" if u.fragment else "")


def _md_inline(text: str, folder: Path | None = None, skip_images: frozenset[str] = frozenset()) -> str:
    """One line of the project's Markdown as HTML: escaped, then code spans, backslash escapes (``\\[`` is a
    literal ``[``), bold, pictures and relative links inside the folder (pictures named in ``skip_images`` are
    left out: the page shows them already)."""
    kept: list[str] = []

    def keep(markup: str) -> str:
        kept.append(markup)
        return f"\x00{len(kept) - 1}\x00"

    text = text.replace("\x00", "\\x00")  # the placeholders' marker never comes from the text
    text = _MD_CODE.sub(lambda m: keep(f"<code>{esc(m.group(1).replace(chr(92) + '|', '|'))}</code>"), text)
    text = _MD_ESCAPED.sub(lambda m: keep(esc(m.group(1))), text)
    out = esc(text)

    def img(m: re.Match) -> str:
        raw = _html.unescape(m.group(2))
        if raw in skip_images:
            return ""
        t = _md_target(raw, folder)
        return image(t, _html.unescape(m.group(1)), cls="thumb" if "/" in m.group(2) else "chart") if t else m.group(0)

    def lnk(m: re.Match) -> str:
        t = _md_target(_html.unescape(m.group(2)), folder)
        return f'<a href="{t}">{m.group(1)}</a>' if t else m.group(1)

    out = _MD_LINK.sub(lnk, _MD_IMAGE.sub(img, out))
    out = _MD_BOLD.sub(r"<strong>\1</strong>", out)
    for _ in range(2):  # a kept piece may sit inside a link's text
        out = re.sub("\x00(\\d+)\x00", lambda m: kept[int(m.group(1))], out)
    return out


def _md_cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a pipe inside a cell)."""
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") and not s.endswith("\\|") else s
    return [c.strip() for c in re.split(r"(?<!\\)\|", s)]


def markdown_page(markdown: str, *, title: str = "lidarmt report", folder: str | os.PathLike[str] | None = None
                  ) -> str:
    """``report.md`` as a page (for the reports without a page of their own: coverage, searches): headings,
    paragraphs, lists, code blocks, pictures, relative links and sortable tables, everything escaped. With the
    run ``folder``, links to a bundle's ``report.md`` go to its page when it has one."""
    page = Page(markdown_title(markdown, title))
    add_markdown(page, markdown, folder=folder)
    return page.render()


def markdown_title(markdown: str, default: str = "lidarmt report") -> str:
    """The first ``# `` heading of a Markdown text (else ``default``)."""
    return next((ln[2:].strip() for ln in markdown.splitlines() if ln.startswith("# ")), default)


def add_markdown(page: Page, markdown: str, *, folder: str | os.PathLike[str] | None = None,
                 first_section: tuple[str, str] = ("report", "Report"),
                 skip_images: Iterable[str] = ()) -> None:
    """Render the project's Markdown into ``page``'s sections (see :func:`markdown_page`); ``skip_images``:
    picture targets the page shows elsewhere."""
    folder = None if folder is None else Path(folder)
    skip = frozenset(skip_images)

    def inline(text: str) -> str:  # this page's folder and pictures
        return _md_inline(text, folder, skip)

    lines = markdown.splitlines()
    body = page.section(*first_section)
    n_tables = sum(1 for _, _, b in page.sections for x in b if "<table" in x)
    i = 0
    para: list[str] = []

    def flush() -> None:
        if para:
            body.append("<p>" + " ".join(inline(x) for x in para) + "</p>")
            para.clear()

    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if s.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            body.append("<pre><code>" + esc("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
            continue
        if ln.startswith("# "):
            flush()
        elif ln.startswith(("## ", "### ")):
            flush()
            text = ln.split(" ", 1)[1].strip()
            if ln.startswith("## "):
                body = page.section(f"s{len(page.sections)}", text)
            else:
                body.append(f"<h3>{inline(text)}</h3>")
        elif s.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            flush()
            head = _md_cells(s)
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append([Html(inline(c)) if any(k in c for k in "`*[\\") else c.replace("\\|", "|")
                             for c in _md_cells(lines[j])])
                j += 1
            n_tables += 1
            body.append(table([Html(inline(h)) for h in head], rows, ident=f"table-{n_tables}",
                              filter_box=len(rows) > 20))
            i = j
            continue
        elif s.startswith(("- ", "* ")):
            flush()
            items = []
            while i < len(lines) and lines[i].strip().startswith(("- ", "* ")):
                items.append(f"<li>{inline(lines[i].strip()[2:])}</li>")
                i += 1
            body.append('<ul class="facts">' + "".join(items) + "</ul>")
            continue
        elif not s:
            flush()
        else:
            para.append(s)
        i += 1
    flush()
