"""What a replay session is given and what it finds: a recording's tool calls, the divergence.

A replay (``keel replay``, ``keel eval``) runs a recorded session's prompts again, turn by
turn, in a new session with another model or agent configuration. Its tool calls are answered
from the recording (``keel.workflows.replaying``): nothing runs, so nothing happens twice. The
first call that matches no recorded call of its turn is the divergence, and the turn ends
there.

Pure module: imported by workflow code.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from keel.workflows.keel_model import KeelModel
from keel.workflows.messages import ToolResult, ToolUse

# A replay turn that diverged ends with this stop reason (status ``failed``).
REPLAY_DIVERGED = "replay_diverged"


def canonical_input(value: Any) -> str:
    """A tool input as one canonical JSON text: keys sorted, no spaces; equal inputs, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class RecordedCall(KeelModel):
    """A tool call of the recording and the result it got.

    Attributes:
        name: the tool.
        input: the input the recorded model gave it.
        result: the result the recorded session gave the model (its ``toolUseId`` the
            recording's; a replayed call gets it under its own).
    """

    name: str = Field(min_length=1)
    input: Any = Field(default_factory=dict)
    result: ToolResult

    def tool_use(self) -> ToolUse:
        """The recorded call as a tool use."""
        return ToolUse(toolUseId=self.result.toolUseId, name=self.name, input=self.input)


class ReplayPlan(KeelModel):
    """``SessionConfig.replay``: the session answers its tool calls from a recording.

    Attributes:
        source: what is replayed: the recorded session's id, or the case's name.
        turns: the recorded calls of each turn, in order: turn N of the replay session is
            answered from ``turns[N - 1]`` (a turn past the end has no recorded call).
        live_read: a call that matches no recorded call runs live when its tool is ``read``
            (and needs no approval), instead of diverging. ``write`` and ``idempotent``
            tools, sub-agents, client-side tools and calls needing approval never run.
    """

    source: str = ""
    turns: list[list[RecordedCall]] = Field(default_factory=list)
    live_read: bool = False


class Divergence(KeelModel):
    """Where a replay left the recording: the first call that matched no recorded call.

    Attributes:
        turn: the replay session's turn (the recording's turn of the same number).
        index: the call's position among the turn's calls, from 0.
        recorded: the recorded call expected there (the first of the turn not matched yet),
            or None when the recording's turn had no call left.
        replayed: the call the new model made.
    """

    turn: int
    index: int
    recorded: ToolUse | None = None
    replayed: ToolUse


class ReplayProgress(KeelModel):
    """A replay session's progress through its recording (carried in the ledger).

    Attributes:
        matched: per turn, the indexes of the recorded calls already answered.
        calls: per turn, how many calls the new model made.
        live: toolUseIds of calls that ran live (``ReplayPlan.live_read``).
        divergence: the divergence, once there is one.
    """

    matched: dict[int, list[int]] = Field(default_factory=dict)
    calls: dict[int, int] = Field(default_factory=dict)
    live: list[str] = Field(default_factory=list)
    divergence: Divergence | None = None
