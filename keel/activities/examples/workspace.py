"""Example tools: files in a sandboxed workspace folder.

The workspace is ``KEEL_WORKSPACE`` (read on each call), by default ``workspace`` under
``KEEL_HOME`` (``.keel``) in the worker's working directory. Paths are relative to it; a
path that leaves it is refused.

Each tool declares what running it again does (``effect``), for when a worker dies during a
call: ``read`` tools only look, and run again freely; ``write`` tools change the workspace,
so once an attempt may have had its effect they are not run again without a person deciding.
"""

from __future__ import annotations

import os
from pathlib import Path

from keel.activities.tools import tool

__all__ = ["delete_file", "list_files", "read_file", "write_file"]

WORKSPACE_ENV = "KEEL_WORKSPACE"
MAX_READ_BYTES = 64_000


def workspace_root() -> Path:
    """The workspace folder, created if missing."""
    default = Path(os.environ.get("KEEL_HOME") or ".keel") / "workspace"
    root = Path(os.environ.get(WORKSPACE_ENV) or default).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _inside(path: str) -> Path:
    root = workspace_root()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise ValueError(f"path {path!r} is outside the workspace")
    return target


@tool(effect="read")
def list_files() -> list[str]:
    """List the files in the workspace, relative to it."""
    root = workspace_root()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@tool(effect="read")
def read_file(path: str) -> str:
    """Read a text file from the workspace.

    Args:
        path: file to read, relative to the workspace.
    """
    data = _inside(path).read_bytes()[:MAX_READ_BYTES]
    return data.decode("utf-8", errors="replace")


@tool(effect="write")
def write_file(path: str, content: str) -> str:
    """Write a text file in the workspace, replacing it if it exists.

    Args:
        path: file to write, relative to the workspace.
        content: the text to write.
    """
    target = _inside(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"


@tool(effect="write", requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file from the workspace; a human must approve each call.

    Args:
        path: file to delete, relative to the workspace.
    """
    target = _inside(path)
    target.unlink()
    return f"deleted {path}"
