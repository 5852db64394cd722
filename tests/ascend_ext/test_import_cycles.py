"""ascend_ext's modules import each other in one direction (function-level imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ascend_ext"


def _graph() -> dict[str, set[str]]:
    """Module -> the ascend_ext modules it imports anywhere in its body."""
    names = {p.stem for p in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[0] == "ascend_ext":
                    if len(parts) > 1:
                        deps.add(parts[1])
                    else:  # from ascend_ext import forwarding
                        deps.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "ascend_ext" and len(parts) > 1:
                        deps.add(parts[1])
        graph[path.stem] = deps - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_ascend_ext_has_no_import_cycle() -> None:
    graph = _graph()
    assert "request_error" in graph["deferred_evict"] and "request_error" in graph["memory_ops"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
