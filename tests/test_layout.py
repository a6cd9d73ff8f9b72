"""The code's shape: one installed name, one path per file, one public face, no import cycles,
no upward arrows."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEEL = ROOT / "keel"
PACKAGES = ("workflows", "activities", "worker")


def module_name(path: Path) -> str:
    parts = ["keel", *path.relative_to(KEEL).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def keel_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((KEEL / pkg).rglob("*.py"))}


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


# The layers, lowest first: a module may import its own layer and the ones below it.
LAYERS = ("keel.workflows", "keel.activities", "keel.worker")


def test_no_upward_arrows() -> None:
    modules = keel_modules()
    known = set(modules)
    upward = []
    for name, path in modules.items():
        mine = next(i for i, layer in enumerate(LAYERS) if name.startswith(layer))
        for target in imports_of(path, known):
            theirs = next(i for i, layer in enumerate(LAYERS) if target.startswith(layer))
            if theirs > mine:
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_keel_is_the_one_installed_name() -> None:
    distribution = importlib.metadata.distribution("keel")
    top_level = (distribution.read_text("top_level.txt") or "").split()
    assert top_level == ["keel"], top_level
    # the source list of an editable install also names the tests; a wheel has no tests
    files = [str(f) for f in distribution.files or [] if str(f).endswith(".py")]
    outside = [f for f in files if not f.startswith(("keel/", "tests/", "__editable__"))]
    assert outside == []


def test_the_public_face_names_what_it_has() -> None:
    keel = importlib.import_module("keel")
    where = vars(keel)["_WHERE"]
    assert sorted(where) == keel.__all__ and len(keel.__all__) > 40
    for name in keel.__all__:
        assert getattr(keel, name) is getattr(importlib.import_module(where[name]), name)
    # written once: in the stub, one line each; the module itself names none of them
    stub = (KEEL / "__init__.pyi").read_text()
    assert all(stub.count(f" import {name} as {name}\n") == 1 for name in keel.__all__)
    face = (KEEL / "__init__.py").read_text()
    assert [n for n in keel.__all__ if re.search(rf"\b{n}\b", face.split('"""')[2])] == []


@pytest.mark.parametrize("package", PACKAGES)
def test_inner_packages_export_nothing(package: str) -> None:
    module = importlib.import_module(f"keel.{package}")
    assert not hasattr(module, "__all__"), f"keel.{package} re-exports; the face is keel"
    assert "keel/__init__.py" in (module.__doc__ or ""), "say where the public names are"


def test_nothing_imports_keel_by_its_old_top_level_names() -> None:
    old = re.compile(r"^\s*(from|import) (workflows|activities|worker)\b", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if ".git" not in p.parts
        and "keel" not in p.relative_to(ROOT).parts[:1]
        and "samples-app" not in p.parts  # a user's app: its own workflows and activities
        and old.search(p.read_text())
    ]
    assert offenders == []


# Code that may read the environment itself, and why.
READS_ENVIRONMENT = {
    # the one place Keel reads its settings
    "keel/worker/settings.py",
    # an example tool: tools are the user's code, and may read their own environment
    "keel/activities/examples/workspace.py",
}


def test_only_the_settings_read_the_environment() -> None:
    """Settings are read once, at the edge (the CLI, a KeelPlugin), and passed down."""
    reads = re.compile(r"\bos\.environ\b|\bos\.getenv\b|\bgetenv\(")
    found = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((KEEL / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in READS_ENVIRONMENT and reads.search(path.read_text())
    ]
    assert found == []


def test_each_file_has_one_path_and_one_module_name() -> None:
    """The code lives in keel/; the top-level folders are links into it, for the layout.

    So the wheel, mypy (``packages = ["keel"]``), coverage (``source_pkgs``) and ruff each
    read a file once, under its one module name.
    """
    assert [str(p.relative_to(ROOT)) for p in KEEL.rglob("*") if p.is_symlink()] == []
    for package in PACKAGES:
        link = ROOT / package
        assert link.is_symlink() and link.resolve() == (KEEL / package).resolve(), link
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["mypy"]["packages"] == ["keel"] and "files" not in config["tool"]["mypy"]
    assert config["tool"]["coverage"]["run"]["source_pkgs"] == ["keel"]
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["keel", "keel.*"]
    shown = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    checked = [Path(f).resolve() for f in shown if f.endswith(".py")]
    assert checked and len(checked) == len(set(checked)), "ruff reads a file twice"
    # and every file once: a pattern that drops the links must not drop keel/worker with them
    every = {f.resolve() for top in (KEEL, ROOT / "tests") for f in top.rglob("*.py")}
    unchecked = sorted(str(f.relative_to(ROOT)) for f in every - set(checked))
    assert unchecked == [], f"ruff does not read {len(unchecked)} files: {unchecked[:5]}"
    through_links = [
        f
        for f in shown
        if Path(f).is_absolute()
        and any(Path(f).is_relative_to(ROOT / package) for package in PACKAGES)
    ]
    assert through_links == []


@pytest.mark.parametrize(
    ("package", "module"),
    [("workflows", "contracts"), ("activities", "tools"), ("worker", "shell")],
)
def test_a_package_under_a_second_name_fails_at_once(package: str, module: str) -> None:
    """``workflows.contracts`` beside ``keel.workflows.contracts`` would be two classes."""
    for name in (package, f"{package}.{module}"):
        run = subprocess.run(
            [sys.executable, "-c", f"import {name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 1, run.stderr
        assert f"import keel.{package} instead" in run.stderr.splitlines()[-1], run.stderr
