"""Tables of effect classes by tool name, as people write them, checked in one place.

A session, an agent file (``effects = { refund = "write", lookup = "read" }``), ``keel run
--effect TOOL=CLASS`` and an MCP server's configuration (``McpServerConfig.effects``) may say
what running a tool again does, over what the tool itself declares (``@tool(effect=...)``, an
MCP tool's annotations). Each names a tool and one of ``read``, ``idempotent``, ``write``;
:func:`effect_table` checks a table, and its error names the tool, the value and the classes
allowed, for the caller to prefix with where the table came from.

Pure module: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import get_args

from keel.workflows.contracts import Effect

__all__ = ["EFFECTS", "EffectTableError", "effect_table", "narrowed"]

# The classes, least to most careful: a ``write`` tool is never run again blindly.
EFFECTS: tuple[Effect, ...] = get_args(Effect)
# A tool's name, as ``@tool`` and the model providers take one.
_TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class EffectTableError(ValueError):
    """A table of effect classes names something that is not a tool, or not a class.

    Attributes:
        tool: the tool's name as written.
        value: the class as written.
    """

    def __init__(self, tool: str, value: object, message: str) -> None:
        """Keep the tool and the value; ``message`` says what is wrong with them."""
        super().__init__(message)
        self.tool = tool
        self.value = value


def effect_table(table: Mapping[str, object]) -> dict[str, Effect]:
    """Check a table of tool name -> effect class.

    Args:
        table: the table as read (a TOML table, a JSON object, flags).

    Returns:
        The same table, typed.

    Raises:
        EffectTableError: the first name that is not a tool name, or value that is not one
            of ``read``, ``idempotent``, ``write`` (the message names the tool, the value and
            the classes allowed).
    """
    checked: dict[str, Effect] = {}
    for tool, value in table.items():
        if not isinstance(tool, str) or not _TOOL_NAME_RE.match(tool):
            raise EffectTableError(
                str(tool),
                value,
                f"{tool!r} is not a tool name (1-64 letters, digits, '_' or '-')",
            )
        effect = next((e for e in EFFECTS if e == value), None)
        if effect is None:
            raise EffectTableError(
                tool,
                value,
                f"tool {tool!r}: effect {value!r} is not one of {', '.join(EFFECTS)}",
            )
        checked[tool] = effect
    return checked


def narrowed(
    parent: Mapping[str, Effect], child: Mapping[str, Effect], name: str
) -> dict[str, Effect]:
    """A sub-agent's classes: its parent's, with its own where they are as careful or more.

    A sub-agent may treat a tool more carefully than its parent (``read`` < ``idempotent`` <
    ``write``), never less: a tool its parent treats as ``write`` is not run again unasked
    after a crash in the sub-agent either.

    Raises:
        EffectTableError: the child's class for a tool is looser than its parent's.
    """
    effects = dict(parent)
    for tool, effect in child.items():
        above = parent.get(tool)
        if above is not None and EFFECTS.index(effect) < EFFECTS.index(above):
            raise EffectTableError(
                tool,
                effect,
                f"sub-agent {name!r} may not treat tool {tool!r} as {effect!r}: its parent "
                f"treats it as {above!r}",
            )
        effects[tool] = effect
    return effects
