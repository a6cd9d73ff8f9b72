"""What the ``keel`` command prints: turn results, interrupts, conversations, events.

Exit codes: 0 completed, 3 waiting for a human, 1 failed, 2 invalid input or rejected request
(the reason on stderr).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from workflows.contracts import Interrupt, SessionState, TurnRecord
from workflows.cycle import text_of

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_WAITING = 3
STATUS_EXIT = {"completed": EXIT_OK, "interrupted": EXIT_WAITING}


def interrupt_json(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt as the CLI contract shows it to approvers."""
    return {
        "id": interrupt.id,
        "kind": interrupt.kind,
        "tool_use": interrupt.tool_use.model_dump(mode="json"),
        "name": interrupt.name,
        "reason": interrupt.reason,
    }


def turn_json(session: str, record: TurnRecord) -> dict[str, Any]:
    """The contract's JSON object for a turn result."""
    return {
        "session": session,
        "workflow_id": session,
        "turn": record.turn_id,
        "status": record.status,
        "stop_reason": record.stop_reason,
        "interrupts": [interrupt_json(i) for i in record.interrupts],
        "message": record.message.model_dump(mode="json") if record.message else None,
        "usage": record.usage.model_dump(mode="json"),
        "error": record.error,
    }


def print_interrupts(session: str, interrupts: Sequence[Interrupt]) -> None:
    """Show pending interrupts to a person, with the commands that decide them."""
    for interrupt in interrupts:
        use = interrupt.tool_use
        print(f"waiting for approval: {interrupt.reason}")
        print(f"  id:    {interrupt.id}")
        print(f"  tool:  {use.name} (toolUseId {use.toolUseId})")
        print(f"  input: {json.dumps(use.input, sort_keys=True)}")
        print(f"  keel approve {session} {interrupt.id}")
        print(f"  keel deny {session} {interrupt.id} --reason '...'")


def print_turn(session: str, record: TurnRecord, as_json: bool) -> int:
    """Print a turn result; returns the exit code."""
    if as_json:
        print(json.dumps(turn_json(session, record)))
    else:
        answer = text_of(record.message)
        if answer and record.status != "interrupted":
            print(answer)
        print_interrupts(session, record.interrupts)
        if record.status not in ("completed", "interrupted"):
            print(
                f"turn {record.turn_id} of session {session} {record.status}"
                + (f": {record.error}" if record.error else ""),
                file=sys.stderr,
            )
    return STATUS_EXIT.get(record.status, EXIT_FAILED)


def show_json(state: SessionState) -> dict[str, Any]:
    """The contract's JSON object for ``keel show --json``."""
    return {
        "session": state.session_id,
        "workflow_id": state.session_id,
        "status": state.status,
        "messages": [m.model_dump(mode="json") for m in state.messages],
        "pending": state.pending.model_dump(mode="json"),
        "usage": state.usage.model_dump(mode="json"),
    }


def render_block(block: dict[str, Any]) -> str:
    """One content block as a line of text: text as it is, other kinds as tagged JSON."""
    kind, value = next(iter(block.items()))
    if kind == "text":
        return str(value)
    return f"[{kind}] {json.dumps(value)}"
