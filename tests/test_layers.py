"""The house map holds: no module imports a higher layer, the two halves never import each other, and no import
circle exists, counting imports inside functions too (issue 21).

The layer order is written once, here (``LAYERS``; ARCHITECTURE.md describes each room). A module may import its
own layer (except a sibling named in ``SIBLINGS``) and any lower one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lidarmt"

#: lowest first; a layer lists the modules and packages it holds (a package holds everything below it)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("lidarmt", "lidarmt.types", "lidarmt.errors", "lidarmt._atomic", "lidarmt._limits", "lidarmt._paths",
              "lidarmt._machine", "lidarmt._heap", "lidarmt._show",
              "lidarmt._plugins", "lidarmt._torchfile", "lidarmt._compat", "lidarmt.utm")),
    ("schemas", ("lidarmt.proto",)),
    ("recordings", ("lidarmt.io",)),
    ("engine", ("lidarmt.engine",)),
    ("halves", ("lidarmt.lidar", "lidarmt.camera")),
    ("coverage", ("lidarmt.coverage",)),
    ("studies", ("lidarmt.search", "lidarmt.bench")),
    ("cli", ("lidarmt.cli", "lidarmt.__main__")),
]
#: packages of one layer that must not import each other
SIBLINGS = [("lidarmt.lidar", "lidarmt.camera"), ("lidarmt.search", "lidarmt.bench")]


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The lidarmt modules ``name`` imports, anywhere in the file. ``from pkg import sub`` counts as importing
    ``pkg.sub`` (a module), and ``pkg`` too when ``pkg`` holds ``name`` (its ``__init__`` is part of the import);
    ``from pkg import attr`` as importing ``pkg``."""
    found: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "lidarmt"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "lidarmt":
                continue
            subs = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known}
            found |= subs
            # a name from a package runs the package's __init__; so does ``from own_package import submodule``
            # inside that package, which is how a module ends up importing its own package's __init__
            if len(subs) < len(node.names) or name.startswith(target + "."):
                found.add(target)
    return {m for m in found if m != name}


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    mods = module_files(root)
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the package or module of LAYERS that holds ``module``), the longest match."""
    best: tuple[int, str] | None = None
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if (module == m or module.startswith(m + ".")) and (best is None or len(m) > len(best[1])):
                best = (i, m)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def problems(g: dict[str, set[str]]) -> list[str]:
    found = []
    for mod, targets in sorted(g.items()):
        li, home = layer_of(mod)
        for t in sorted(targets):
            lt, there = layer_of(t)
            if lt > li:
                found.append(f"{mod} ({LAYERS[li][0]}) imports {t} ({LAYERS[lt][0]}): an upward import")
            elif {home, there} in [set(s) for s in SIBLINGS]:
                found.append(f"{mod} imports {t}: {home} and {there} must not import each other")
    return found


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in g:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_every_module_has_a_layer():
    for mod in module_files():
        layer_of(mod)


def test_no_upward_imports_and_the_halves_stay_apart():
    found = problems(graph())
    assert not found, "\n".join(found)


def test_no_import_circles():
    found = cycles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


# ----------------------------------------------------------------------------------------------- the test can fail


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    root = tmp_path / "lidarmt"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return graph(root)


def test_a_planted_upward_import_is_caught(tmp_path):
    g = _plant(tmp_path, {"__init__.py": "", "engine/__init__.py": "", "lidar/__init__.py": "",
                          "engine/journal.py": "def f():\n    from lidarmt.lidar.mr1 import oracle\n",
                          "lidar/mr1/__init__.py": "", "lidar/mr1/oracle.py": "X = 1\n"})
    (msg,) = problems(g)
    assert "lidarmt.engine.journal (engine) imports lidarmt.lidar.mr1.oracle (halves)" in msg


def test_the_halves_importing_each_other_is_caught(tmp_path):
    g = _plant(tmp_path, {"__init__.py": "", "camera/__init__.py": "", "lidar/__init__.py": "",
                          "camera/x.py": "from lidarmt.lidar import bev\n", "lidar/bev.py": ""})
    (msg,) = problems(g)
    assert "must not import each other" in msg


def test_a_planted_circle_is_caught(tmp_path):
    g = _plant(tmp_path, {"__init__.py": "", "engine/__init__.py": "",
                          "engine/a.py": "from lidarmt.engine.b import y\nx = 1\n",
                          "engine/b.py": "def y():\n    from lidarmt.engine import a\n",
                          "engine/c.py": "from . import a\n"})
    assert cycles(g) == [["lidarmt.engine.a", "lidarmt.engine.b"]]
    assert g["lidarmt.engine.c"] == {"lidarmt.engine.a", "lidarmt.engine"}  # the package's __init__ runs too


def test_a_module_importing_its_own_package_init_is_a_circle(tmp_path):
    g = _plant(tmp_path, {"__init__.py": "", "lidar/__init__.py": "from lidarmt.lidar.roi import mask\n",
                          "lidar/roi.py": "from lidarmt.lidar import THING\nmask = 1\n"})
    assert cycles(g) == [["lidarmt.lidar", "lidarmt.lidar.roi"]]
    # the same through a sibling submodule taken from the package: its __init__ runs, and imports the module back
    g = _plant(tmp_path / "2", {"__init__.py": "", "roi/__init__.py": "from lidarmt.roi.bitmap import RoiMask\n",
                                "roi/bitmap.py": "def f():\n    from lidarmt.roi import _kernels\n",
                                "roi/_kernels.py": ""})
    assert cycles(g) == [["lidarmt.roi", "lidarmt.roi.bitmap"]]


if __name__ == "__main__":  # print the problems: python tests/test_layers.py
    g = graph()
    print("\n".join(problems(g)) or "no upward imports")
    print("\n".join(" <-> ".join(c) for c in cycles(g)) or "no circles")
    sys.exit(bool(problems(g) or cycles(g)))
