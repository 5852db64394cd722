"""The import graph keeps the architecture: the core imports nothing of the daemon,
adapters only ports, core and the protocol, no package reaches into a sibling's private
module, and no package has an import cycle (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package``."""
    base = ROOT / package
    out: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for each import of a module in ``known``, at any depth
    (a function's deferred import counts: it is a dependency all the same), resolved to the
    module itself when ``from package import name`` names a submodule."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, node.lineno, known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            if subs:
                for sub in subs:
                    yield sub, node.lineno
            else:
                yield from _known(target, node.lineno, known)


def _known(target: str, line: int, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    while target and target not in known:
        target = target.rpartition(".")[0]
    if target:
        yield target, line


def graph(package: str, type_checking: bool = True) -> dict[str, set[str]]:
    known = modules(package)
    return {
        name: {t for t, _ in imports_of(name, path, known) if t != name}
        for name, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def is_package_init(name: str, edges: dict[str, set[str]]) -> bool:
    return any(other.startswith(name + ".") for other in edges)


def strip_inits(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exporting its modules is not a cycle of theirs."""
    inits = {n for n in edges if is_package_init(n, edges)}
    return {n: {t for t in ts if t not in inits} for n, ts in edges.items() if n not in inits}


@pytest.mark.parametrize(
    "package",
    [
        "ramakv_daemon",
        "ramakv_console",
        "ascend_ext",
    ],
)
def test_no_import_cycles(package: str) -> None:
    assert cycles(strip_inits(graph(package))) == []


def daemon_edges() -> list[tuple[str, str, int]]:
    known = modules("ramakv_daemon")
    return [(n, t, line) for n, p in known.items() for t, line in imports_of(n, p, known)]


def test_the_core_imports_nothing_of_the_daemon() -> None:
    bad = [
        f"{n}:{line} imports {t}"
        for n, t, line in daemon_edges()
        if n.startswith("ramakv_daemon.core") and not t.startswith("ramakv_daemon.core")
    ]
    assert bad == []


ADAPTER_MAY_IMPORT = (
    "ramakv_daemon.ports",
    "ramakv_daemon.admin_port",
    "ramakv_daemon.core",
    "ramakv_daemon.adapters",
)


def test_adapters_import_only_ports_core_and_the_protocol() -> None:
    # The backend factory reads the config (it is the adapters' own composition).
    bad = [
        f"{n}:{line} imports {t}"
        for n, t, line in daemon_edges()
        if n.startswith("ramakv_daemon.adapters")
        and not t.startswith(ADAPTER_MAY_IMPORT)
        and not (n == "ramakv_daemon.adapters.backends.factory" and t == "ramakv_daemon.config")
    ]
    assert bad == []


def test_no_package_imports_a_siblings_private_module() -> None:
    bad = []
    for n, t, line in daemon_edges():
        leaf = t.rpartition(".")[2]
        if leaf.startswith("_") and not leaf.startswith("__"):
            if t.rpartition(".")[0] != n.rpartition(".")[0]:
                bad.append(f"{n}:{line} imports {t}")
    assert bad == []
