"""No import circle in ramakv_console: the app builds the screens and hands them a context;
nothing the app imports may import the app back (issue 25: app.py and 14 screens/widgets
were one circle through app_access.py).

The graph is read from the source (ast), every import counted: module level, inside
functions and under ``if TYPE_CHECKING`` alike, since a circle hidden from the
interpreter is still a circle for whoever reads the code.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; a package's ``__init__.py`` -> ``pkg.sub``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from a import b`` counts ``a.b`` when
    that is a module, else ``a``)."""
    root = package.parent
    modules = {module_name(p, root): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package ``level - 1`` up from here
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, each module importing the next (the first repeated at the end),
    or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()  # imports are a module's predecessors
    except graphlib.CycleError as err:
        return list(reversed(err.args[1]))  # graphlib lists each module's predecessor next
    return None


def test_the_console_has_no_import_circle() -> None:
    graph = import_graph(ROOT / "ramakv_console")
    assert len(graph) > 25 and "ramakv_console.app" in graph  # it read the package
    found = cycle(graph)
    assert found is None, "import circle: " + " -> ".join(found or [])


def test_no_screen_or_widget_imports_the_app() -> None:
    """Screens and widgets get a ConsoleContext (typed state, the daemon's door, signals),
    never the app: only the entry point imports it."""
    graph = import_graph(ROOT / "ramakv_console")
    importers = sorted(m for m, deps in graph.items() if "ramakv_console.app" in deps)
    assert importers == ["ramakv_console.__main__"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # a -> b -> a, the b side only under TYPE_CHECKING and inside a function
            {
                "a.py": "from pkg import b\n",
                "b.py": (
                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from pkg.a import A\ndef f():\n    from . import a\n"
                ),
            },
            {"pkg.a", "pkg.b"},
        ),
        ({"a.py": "from pkg.sub import c\n", "sub/__init__.py": "", "sub/c.py": ""}, None),
        (  # through a package's __init__ and a relative import two levels up
            {
                "a.py": "import pkg.sub\n",
                "sub/__init__.py": "from .c import C\n",
                "sub/c.py": "from .. import a\n",
            },
            {"pkg.a", "pkg.sub", "pkg.sub.c"},
        ),
    ],
)
def test_the_checker_finds_circles(
    tmp_path: Path, files: dict[str, str], expected: set[str] | None
) -> None:
    pkg = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = cycle(import_graph(pkg))
    assert (set(found) if found else None) == expected
