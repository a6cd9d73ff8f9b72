"""What a session is doing or waiting for, in words, for Temporal's UI.

``AgentSession`` sets it as the workflow's current details (``workflow.set_current_details``)
at each step, so whoever opens the session in the Temporal UI (or runs ``temporal workflow
metadata``) reads it on the first screen. Current details are answered by the built-in
``__temporal_workflow_metadata`` query; they are not a command and write nothing to history.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Iterable

from keel.workflows.interrupt_kinds import fields, kind_of
from keel.workflows.ledger import Ledger


def current_details(
    ledger: Ledger,
    *,
    model_call: int | None,
    tools: Iterable[str],
    children: Iterable[str],
) -> str:
    """The session's current details: one line per thing it waits on.

    Args:
        ledger: the session's state.
        model_call: the cycle whose model call is in flight, if one is.
        tools: the names of the tools running now.
        children: the names of the sub-agents running now.

    Example:
        ``waiting for approval: delete_file, interrupt 6f1c…`` or ``model call 3 of turn 2``.
    """
    if ledger.closed:
        return "closed"
    turn = ledger.current_turn
    lines = []
    for interrupt in ledger.pending_interrupts():
        lines.append(kind_of(interrupt).waiting.format(**fields(interrupt)))
    for call in ledger.waiting_client_calls():
        lines.append(
            f"waiting for a client to run {call.tool_use.name} (keel attach), call {call.id}"
        )
    if model_call is not None and turn is not None:
        lines.append(f"model call {model_call} of turn {turn}")
    running = sorted(set(tools))
    if running and turn is not None:
        lines.append(f"running tools of turn {turn}: {', '.join(running)}")
    agents = sorted(set(children))
    if agents:
        lines.append(f"waiting for sub-agents: {', '.join(agents)}")
    if lines:
        return "\n".join(lines)
    if turn is not None:
        return f"turn {turn} running"
    queued = len(ledger.queue)
    if ledger.closing:
        return "closing"
    return f"{queued} turn(s) queued" if queued else "idle: waiting for a prompt"
