"""Keel: durable LLM agents on Temporal.

Everything a user needs is here, under one installed name::

    from keel import KeelClient, connect, RequestRejected         # talk to sessions
    from keel import KeelPlugin, run_agent, SessionConfig         # Keel in your Temporal app
    from keel import tool, ToolContext, tool_policy, Verdict      # tools and policies
    from keel import judge, JudgeRequest, JudgeVerdict            # a judge in the gate
    from keel import Interrupt, Decision, Answer, TurnRecord       # what sessions hold

The packages behind it (``keel.workflows``, ``keel.activities``, ``keel.worker``) are
internal. The names are listed once, in ``keel/__init__.pyi`` (what type checkers read); this
module reads that list when imported and imports each name from its module when first used,
so ``import keel`` is cheap, and workflow code (inside Temporal's sandbox) may import
``run_agent`` and the session types from here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from pathlib import Path
from typing import Any


def _public_names() -> dict[str, str]:
    """Each public name and the module that defines it, from ``__init__.pyi``."""
    stub = ast.parse(Path(__file__).with_suffix(".pyi").read_text(encoding="utf-8"))
    return {
        alias.name: node.module
        for node in stub.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_WHERE = _public_names()
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Import a public name from the module that defines it, on first use."""
    if name == "__version__":
        value: Any = importlib.metadata.version("keel")
    elif name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    else:
        raise AttributeError(f"module 'keel' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
