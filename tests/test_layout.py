"""The code's shape: no import cycles between Keel's modules, one public surface per package."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workflows", "activities", "worker")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def keel_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The Keel modules a module imports anywhere in it (inside functions too).

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else
    ``pkg``. A package's ``__init__`` importing its own modules is not an edge back.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.add(target if target in known else node.module)
    return {m for m in found if m in known}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles_between_keel_modules() -> None:
    modules = keel_modules()
    known = set(modules)
    graph = {
        name: {
            m
            for m in imports_of(path, known)
            # a package's __init__ gathers its modules; a module importing its own package's
            # public surface would be the cycle, and is counted
            if m != name and not (path.name == "__init__.py" and m.startswith(name + "."))
        }
        for name, path in modules.items()
    }
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_what_it_exports(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported, f"{package}/__init__.py has no __all__"
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ names {name!r}, which it lacks"
