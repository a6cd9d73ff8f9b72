"""Paths typed on the command line mean what the person typed: resolved where they typed them.

A worker reads the files a session names (a scripted model's responses) from its own working
directory, which is not the client's when ``keel dev`` or ``keel worker`` runs elsewhere. So
the client resolves a relative path against its own working directory before it sends it,
when the file is there. When it is not, the path goes as typed: the worker may be on another
machine, with the file at that path relative to its own directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from keel.activities.models import path_prefixes


def local_path(path: str, *, cwd: str | os.PathLike[str] | None = None) -> Path:
    """``path`` (``~`` expanded) made absolute against ``cwd``, default the working directory."""
    expanded = Path(path).expanduser()
    if expanded.is_absolute():
        return expanded
    return Path(cwd if cwd is not None else Path.cwd()) / expanded


def sendable_path(path: str, *, cwd: str | os.PathLike[str] | None = None) -> str:
    """What to send for a path a worker will read: absolute when the file is here, else as typed.

    Args:
        path: the path as typed.
        cwd: the directory it was typed in; default the working directory.
    """
    resolved = local_path(path, cwd=cwd)
    return str(resolved) if resolved.exists() else path


def sendable_model_spec(spec: str, *, cwd: str | os.PathLike[str] | None = None) -> str:
    """A model spec with its file path (``scripted:<path>``) made ``sendable_path``."""
    provider, sep, rest = spec.partition(":")
    if not sep or provider not in path_prefixes() or not rest:
        return spec
    return f"{provider}:{sendable_path(rest, cwd=cwd)}"
