"""No import cycles in pyflannel_runtime, pyflannel_controller and the lab (pyflannel_lab),
counting every import: module level, inside functions (lazy) and under TYPE_CHECKING alike."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "pyflannel_runtime"
PACKAGES = (PACKAGE, "pyflannel_controller", "pyflannel_lab")
ROOT = Path(__file__).resolve().parents[2]


def modules() -> dict[str, Path]:
    found = {}
    for path in (path for package in PACKAGES for path in (ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name an import statement of the module may load."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {
        module: {name for name in imported_names(module, path) if name in known} - {module}
        for module, path in known.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, todo = stack[-1]
            nxt = next(todo, None)
            if nxt is None:
                stack.pop()
                on_path.discard(path.pop())
                done.add(node)
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
                on_path.add(nxt)
    return None


def test_the_runtime_has_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_finds_lazy_and_indirect_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_functions_count() -> None:
    graph = import_graph()
    # registry builds backends through imports inside functions: those edges must be seen.
    assert f"{PACKAGE}.backend.vxlan.vxlan" in graph[f"{PACKAGE}.backend.registry"]
