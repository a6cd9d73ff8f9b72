"""A session whose run Temporal ended before any worker ran it, and what it reads as.

A query is answered by a worker replaying the run's history. A run that Temporal closed
before its first workflow task started (its run timeout passed while no worker took the
task, or ``temporal workflow terminate`` came first) has nothing to replay: Temporal refuses
every query of it with ``FAILED_PRECONDITION`` ("Workflow execution closed before
WorkflowTaskStarted event"), whether a worker polls or not. Such a session reads as its start
input says: the conversation it was started or continued with, its turns (a prompt it was
given is turn 1, never run), all ended as Temporal ended the run.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from keel.worker.client.history_watch import CLOSED_EVENTS
from keel.worker.client.run_status import SessionEnd, ended_pending, ended_turn
from keel.workflows.contracts import PendingView, SessionState, TurnRecord
from keel.workflows.effect_contracts import EffectsView
from keel.workflows.effects import EffectBook
from keel.workflows.ledger import NO_CONFIG, Ledger, SessionInput


async def unstarted_input(client: Client, session_id: str, err: RPCError) -> SessionInput | None:
    """The start input of a session whose latest run closed before any worker ran it.

    Args:
        client: the session's Temporal.
        session_id: the session.
        err: how a query of the session failed; only ``FAILED_PRECONDITION`` is looked into.

    Returns:
        None when the query failed for another reason: the run is open, or a workflow
        task of it started. A start input that does not decode reads as ``NO_CONFIG``.
    """
    if err.status != RPCStatusCode.FAILED_PRECONDITION:
        return None
    start: SessionInput | None = None
    closed = False
    async for event in client.get_workflow_handle(session_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            return None  # a worker ran it: the failure is another's
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            try:
                [start] = await client.data_converter.decode(payloads, [SessionInput])
            except ValueError:  # none, several, or one that does not validate
                start = SessionInput(config=NO_CONFIG)
        closed = closed or event.event_type in CLOSED_EVENTS
    return start if closed else None


def unstarted_state(session_id: str, start: SessionInput, end: SessionEnd) -> SessionState:
    """What a session that never ran reads as: its start input, ended as ``end`` says."""
    ledger = _ledger(start)
    turns = list(ledger.turns.values())
    if start.carried is None and start.prompt:
        turns.append(TurnRecord(turn_id=1))  # queued as the run began: it never did
    return SessionState(
        session_id=session_id,
        status=end.status,
        config=start.config,
        base=ledger.stored,
        messages=ledger.messages,
        result_refs=ledger.result_refs,
        message_count=ledger.message_count,
        pending=ended_pending(PendingView()),
        turns=[ended_turn(t, end) for t in turns],
        usage=ledger.usage,
        run=ledger.run,
        prompt_at=ledger.prompt_at,
        cost_usd=ledger.cost_usd,
        cost_unknown=ledger.cost_unknown,
        sub_agents=ledger.sub_agents,
    )


def unstarted_turn(state: SessionState, turn_id: int, end: SessionEnd) -> TurnRecord:
    """A turn of a session that never ran: as its start input has it, else never run."""
    for turn in state.turns:
        if turn.turn_id == turn_id:
            return turn
    return ended_turn(TurnRecord(turn_id=turn_id), end)


def unstarted_effects(start: SessionInput) -> EffectsView:
    """The ``effects`` query's answer for a session that never ran: its start input's."""
    return EffectBook(start.config, _ledger(start)).view()


def _ledger(start: SessionInput) -> Ledger:
    """What the run would have begun with: the ledger carried to it, or a new session's."""
    return start.carried or Ledger.starting_with(start.messages)
