"""Tool files the embedded worker was given, remembered for the next command in the folder.

``keel run --tools ./lib/mytools.py`` records the session's tool module as ``mytools`` (the
name the file is imported as, ``keel.activities.tools.tool_module_name``). The worker
``keel run`` embeds imports the file from its folder; a later command that embeds a worker
for the session (``keel approve``, ``keel wait``, the next ``keel run --session``) knows only
the name. So the embedded worker keeps ``module -> file`` in ``KEEL_HOME``'s
``tool_files.json``, and loads a session's module from that file when the working
directory has no module of that name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from keel.activities.tools import MCP_MODULE_PREFIX, tool_module_name

logger = logging.getLogger(__name__)

RECORD_FILE = "tool_files.json"


def tool_entries(home: str | Path, entries: Sequence[str]) -> list[str]:
    """What the embedded worker loads for ``entries``: remembered files for bare names.

    Files among ``entries`` are remembered (when ``home`` exists: the embedded server made
    it); a module name the working directory does not have, but a file was remembered for,
    becomes that file.

    Args:
        home: ``KEEL_HOME``.
        entries: module names, files' paths and ``mcp:NAME`` entries (``--tools``, or a
            session's ``tool_modules``).

    Raises:
        ToolModuleError: a file that is not there.
    """
    record_file = Path(home) / RECORD_FILE
    known = _read(record_file)
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
        elif name in remembered and not _here(name) and Path(remembered[name]).exists():
            chosen.append(remembered[name])
        else:
            chosen.append(entry)
    if remembered != known and record_file.parent.is_dir():
        try:
            record_file.write_text(json.dumps(remembered, indent=1, sort_keys=True) + "\n")
        except OSError as err:
            logger.warning("cannot remember the tool files in %s: %s", record_file, err)
    return chosen


def _here(module: str) -> bool:
    """Whether the working directory has the module (``name.py`` or ``name/``)."""
    top = Path.cwd() / module.split(".")[0]
    return top.with_suffix(".py").is_file() or (top / "__init__.py").is_file()


def _read(record_file: Path) -> dict[str, str]:
    try:
        loaded = json.loads(record_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    return {str(k): str(v) for k, v in loaded.items()}
