"""Tool files the embedded worker was given, remembered for the next command in the folder.

``keel run --tools ./lib/mytools.py`` records the session's tool module as ``mytools`` (the
name the file is imported as, ``keel.activities.tools.tool_module_name``). The worker
``keel run`` embeds imports the file from its folder; a later command that embeds a worker
for the session (``keel approve``, ``keel wait``, the next ``keel run --session``) knows only
the name. So the embedded worker keeps ``module -> file`` in ``tool_files.json`` among
``KEEL_HOME``'s records in the user's state directory (``keel.worker.server.records``), and
loads a session's module from that file only when the name is not importable: a remembered
file never hides a module. ``tool_files.json`` in ``KEEL_HOME`` itself, the old place, is
never read: a cloned folder could name its own code there.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from keel.activities.tools import MCP_MODULE_PREFIX, tool_module_name
from keel.worker.server.records import ignore_old, read_private, records_dir, write_private

logger = logging.getLogger(__name__)

RECORD_FILE = "tool_files.json"


def tool_files_path(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> Path:
    """Where the tool files remembered for ``home`` (``KEEL_HOME``) are recorded."""
    return records_dir(home, state_home) / RECORD_FILE


def tool_entries(
    home: str | Path,
    entries: Sequence[str],
    state_home: str | os.PathLike[str] | None = None,
) -> list[str]:
    """What the embedded worker loads for ``entries``: remembered files for unknown names.

    Files among ``entries`` are remembered (when ``home`` exists: the embedded server made
    it); a module name that cannot be imported, but a file was remembered for, becomes that
    file. A name that imports is loaded as itself, whatever was remembered.

    Args:
        home: ``KEEL_HOME``.
        entries: module names, files' paths and ``mcp:NAME`` entries (``--tools``, or a
            session's ``tool_modules``).
        state_home: the user's state directory (``Settings.state_home``).

    Raises:
        ToolModuleError: a file that is not there.
    """
    record_file = tool_files_path(home, state_home)
    ignore_old(home, RECORD_FILE, record_file.parent)
    known = _read(record_file, home)
    remembered = dict(known)
    chosen: list[str] = []
    for raw in entries:
        entry = raw.strip()
        name = tool_module_name(entry) if entry else entry
        if entry.startswith(MCP_MODULE_PREFIX) or not entry:
            chosen.append(entry)
        elif name != entry:  # a file
            remembered[name] = str(Path(entry).expanduser().resolve())
            chosen.append(entry)
        elif name in remembered and not importable(name) and Path(remembered[name]).exists():
            chosen.append(remembered[name])
        else:
            chosen.append(entry)
    if remembered != known and Path(home).is_dir():
        try:
            write_private(record_file, home, {"modules": remembered})
        except OSError as err:
            logger.warning("cannot remember the tool files in %s: %s", record_file, err)
    return chosen


def importable(module: str) -> bool:
    """Whether ``module`` imports as a name: from the working directory, or the path.

    A parent package that fails to import counts as importable: the import, not a
    remembered file, then says what is wrong.
    """
    top = Path.cwd() / module.split(".")[0]
    if top.with_suffix(".py").is_file() or (top / "__init__.py").is_file():
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):
        return False
    except Exception:  # noqa: BLE001 - a package that is there but broken
        return True


def _read(record_file: Path, home: str | os.PathLike[str]) -> dict[str, str]:
    loaded = read_private(record_file, home)
    modules = loaded.get("modules") if loaded is not None else None
    if not isinstance(modules, dict):
        return {}
    return {str(k): str(v) for k, v in modules.items()}
