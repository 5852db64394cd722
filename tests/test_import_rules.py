"""The import graph keeps the architecture: the daemon's packages stand in the layers of
``DAEMON_LAYERS`` and import only downwards (docs/architecture.md draws the same list), the
repository's packages in ``HOUSE_LAYERS``; the core imports nothing of the daemon, adapters
only ports, core and the protocol; only bench imports ascend_ext's development tools; a
deprecated shim imports only what it forwards to; no module reaches into another package's
private module, and no package has an import cycle among its files."""

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


def graph(package: str) -> dict[str, set[str]]:
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


PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def test_every_package_is_checked() -> None:
    # A new top-level package is checked the day it appears (it needs a place in
    # HOUSE_LAYERS, below): the list is read from the tree, not written here.
    assert {
        "ramakv_daemon",
        "ramakv_sdk",
        "ramakv_protocol",
        "ramakv_console",
        "ramakv_proxy",
    } <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
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


def house_modules() -> dict[str, Path]:
    """Every module of every package of the repository (tests are not one)."""
    known: dict[str, Path] = {}
    for package in PACKAGES:
        known.update(modules(package))
    return known


def house_edges() -> list[tuple[str, str, int]]:
    """(importer, imported, line) over every package of the repository (tests are not one)."""
    known = house_modules()
    return [(n, t, line) for n, p in known.items() for t, line in imports_of(n, p, known)]


def private(module: str) -> bool:
    leaf = module.rpartition(".")[2]
    return leaf.startswith("_") and not leaf.startswith("__")


def test_no_module_imports_another_packages_private_module() -> None:
    # ``pkg/_name.py`` is for pkg and the packages under it (ramakv_sdk/_closing.py: the
    # client's and the trace subscriber's); anyone else goes through a public module.
    edges = house_edges()
    checked = [(n, t, line) for n, t, line in edges if private(t)]
    assert checked, "no import of a private module: this rule checks nothing"
    bad = [
        f"{n}:{line} imports {t}"
        for n, t, line in checked
        if not n.startswith(t.rpartition(".")[0] + ".")
    ]
    assert bad == []


# ---- layers ------------------------------------------------------------------------------
# Bottom first. A name is a package or a top-level module of ramakv_daemon; each may import
# only the names on lines below its own, and those on one line import none of each other.
# docs/architecture.md ("Layers") draws this list; a test below holds the two equal.
DAEMON_LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("ports", "deployments"),
    ("admin_port", "config"),
    ("commit", "delivery", "trace"),
    ("adapters", "handlers"),
    ("routing",),
    ("ownership",),
    ("telemetry",),
    ("pipeline",),
    ("bus",),
    ("sweeps", "restore"),
    ("bootstrap",),
    ("http", "cli"),
    ("__main__",),
]

# The repository's packages, by the same rule (bench: benchmarks over all of them). The
# proxy is a server built on the client library (ramakv_sdk: its sender, client and the
# session lifecycle it shares with the framework hooks), so it stands above it.
HOUSE_LAYERS: list[tuple[str, ...]] = [
    ("ramakv_protocol", "ascend_ext"),
    ("ramakv_daemon", "ramakv_sdk", "ascend_ext_dev"),
    ("ramakv_console", "ramakv_proxy"),
    ("bench",),
]

# ascend_ext's development tools (the tiny engine, the demo, the devserver): for the
# benchmarks and the tests, never for a production path, whatever its layer.
DEV_ONLY = {"ascend_ext_dev": ("ascend_ext_dev", "bench")}

# Deprecated names kept for one release, each forwarding (lazily, with a warning) to the
# module that replaced it: the one import the house's layers allow upwards.
SHIMS: dict[str, str] = {"ramakv_sdk.proxy": "ramakv_proxy"}


def floor_of(layers: list[tuple[str, ...]]) -> dict[str, int]:
    return {name: i for i, line in enumerate(layers) for name in line}


def upward(
    layers: list[tuple[str, ...]], edges: list[tuple[str, str, int]], depth: int
) -> list[str]:
    """Each import between two names of ``layers`` that does not point to a lower line (a
    module's name is its ``depth``-th dotted part: 1 for a package, 2 for a daemon package).
    Every import counts: one under ``if TYPE_CHECKING:`` or deferred into a function is a
    dependency all the same (a type's home is as much a design fact as a call's)."""
    floor = floor_of(layers)
    bad = []
    for n, t, line in edges:
        a, b = (m.split(".")[depth - 1] for m in (n, t))
        if a == b or n.count(".") < depth - 1 or t.count(".") < depth - 1:
            continue
        if floor[b] >= floor[a]:
            bad.append(f"{n}:{line} imports {t} ({a} on line {floor[a]}, {b} on {floor[b]})")
    return bad


def daemon_names() -> set[str]:
    return {n.split(".")[1] for n in modules("ramakv_daemon") if "." in n}


def test_every_daemon_package_has_a_layer() -> None:
    placed = [name for line in DAEMON_LAYERS for name in line]
    assert len(placed) == len(set(placed))
    assert set(placed) == daemon_names()


def test_the_daemon_imports_only_downwards() -> None:
    assert upward(DAEMON_LAYERS, daemon_edges(), depth=2) == []


def test_every_package_has_a_house_layer() -> None:
    assert sorted(name for line in HOUSE_LAYERS for name in line) == PACKAGES


def test_the_house_imports_only_downwards() -> None:
    edges = [(n, t, line) for n, t, line in house_edges() if SHIMS.get(n) != t]
    assert upward(HOUSE_LAYERS, edges, depth=1) == []


def test_only_bench_imports_the_development_tools() -> None:
    edges = house_edges()
    assert any(t.startswith("ascend_ext_dev") for _, t, _ in edges), "a rule that checks nothing"
    bad = [
        f"{n}:{line} imports {t}"
        for n, t, line in edges
        for dev, users in DEV_ONLY.items()
        if t.split(".")[0] == dev and n.split(".")[0] not in users
    ]
    assert bad == []


def test_each_shim_only_forwards() -> None:
    # A shim is one module that imports the one it forwards to, and nothing else of the house.
    known = house_modules()
    for shim, target in SHIMS.items():
        assert shim in known, f"{shim} is gone: drop it from SHIMS"
        assert {t for t, _ in imports_of(shim, known[shim], known)} == {target}


def test_the_layer_rule_sees_an_upward_import() -> None:
    # The rule is no tautology: the core importing the pipeline is caught.
    edges = [("ramakv_daemon.core.manager", "ramakv_daemon.pipeline.pipeline", 1)]
    assert len(upward(DAEMON_LAYERS, edges, depth=2)) == 1


def drawn_layers() -> list[tuple[str, ...]]:
    """docs/architecture.md's layer block, bottom first: the fenced block after the line
    ``<!-- layers: tests/test_import_rules.py DAEMON_LAYERS -->``, one line per layer, top
    first, ``name, name: what they hold``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- layers: tests/test_import_rules.py DAEMON_LAYERS -->", 1)[1]
    body = block.split("```", 2)[1]
    lines = [ln.split(":", 1)[0] for ln in body.splitlines()[1:] if ln.strip()]
    return [tuple(n.strip() for n in ln.split(",")) for ln in reversed(lines)]


def test_the_architecture_doc_draws_these_layers() -> None:
    assert drawn_layers() == DAEMON_LAYERS
