"""``workflows/`` stays deterministic: the check that stands in for the sandbox's import checks.

The worker passes the whole ``keel.workflows`` package through the workflow sandbox (it is imported
once, not for every workflow run), so the sandbox no longer stops workflow code from importing
``os`` or calling ``datetime.now()``. This test reads every module's source instead: imports
only from the allowed roots, no calls that read clocks, randomness, the environment, files or
the console. Replaying recorded histories (``test_replay.py``) proves the rest.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ALLOWED_ROOTS = {
    "__future__",
    "asyncio",
    "base64",
    "binascii",
    "builtins",
    "collections",
    "cryptography",  # workflows.signing: Ed25519 verification, a pure function
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "hashlib",
    "itertools",
    "json",
    "pydantic",
    "re",
    "temporalio",
    "typing",
    "keel.workflows",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "breakpoint", "__import__"}
# attribute -> the names it is forbidden on ("*": on anything)
FORBIDDEN_ATTRIBUTES = {
    "now": {"datetime", "date"},
    "utcnow": {"datetime"},
    "today": {"datetime", "date"},
    "fromtimestamp": {"datetime"},
    "uuid4": {"uuid"},
    "get_event_loop": {"asyncio"},
    "get_running_loop": {"asyncio"},
    "to_thread": {"asyncio"},
    "environ": {"*"},
    "getenv": {"*"},
}


def parse(source: str, name: str) -> ast.Module:
    """``ast.parse`` with no garbage collection while it runs.

    In Python 3.11, a finalizer run by the collector mid-parse that formats a traceback (as
    asyncio's "exception was never retrieved" log does) parses too, and the outer parse then
    fails with ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905).
    """
    gc.collect()
    gc.disable()
    try:
        return ast.parse(source, name)
    finally:
        gc.enable()


def _root(module: str) -> str:
    """What an import counts as: its top package; Keel's own is ``keel.<package>``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "keel" else parts[0]


def violations(source: str, name: str) -> list[str]:
    """What in a module's source would make workflow code nondeterministic."""
    found = []
    for node in ast.walk(parse(source, name)):
        if isinstance(node, ast.Import):
            roots = [_root(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [_root(node.module or "")] if node.level == 0 else []
        else:
            roots = []
        found += [f"{name}:{node.lineno}: imports {r}" for r in roots if r not in ALLOWED_ROOTS]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(f"{name}:{node.lineno}: calls {node.func.id}()")
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            owners = FORBIDDEN_ATTRIBUTES[node.attr]
            owner = node.value.id if isinstance(node.value, ast.Name) else "?"
            if "*" in owners or owner in owners:
                found.append(f"{name}:{node.lineno}: uses {owner}.{node.attr}")
    return found


def test_workflow_modules_are_pure() -> None:
    modules = sorted(WORKFLOWS.glob("*.py"))
    assert len(modules) >= 10, modules
    found = [v for path in modules for v in violations(path.read_text(), path.name)]
    assert found == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\n", "imports os"),
        ("from time import monotonic\n", "imports time"),
        ("import random\n", "imports random"),
        ("from datetime import datetime\nx = datetime.now()\n", "uses datetime.now"),
        ("import uuid\nx = uuid.uuid4()\n", "imports uuid"),
        ("x = open('f').read()\n", "calls open()"),
        ("print('hello')\n", "calls print()"),
        ("import asyncio\nasyncio.get_running_loop().time()\n", "uses asyncio.get_running_loop"),
        ("from keel.workflows import x\ny = x.environ['HOME']\n", "uses x.environ"),
        ("from keel.activities import tools\n", "imports keel.activities"),
        ("import keel\n", "imports keel"),
    ],
)
def test_the_check_catches_nondeterminism(source: str, expected: str) -> None:
    found = violations(source, "attack.py")
    assert any(expected in v for v in found), found
