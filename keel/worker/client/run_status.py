"""Temporal's word on how a session's run ended, laid over what the session itself says.

A session answers queries from its history, replayed: after ``temporal workflow
terminate``, a run timeout or a failed workflow it still says what it said last (a turn
``awaiting_human``, an interrupt pending), because it was never told. Every reading of a
session therefore asks Temporal (``describe``, which writes nothing and is not billed as an
Action) and, when the run ended so, says that instead (``keel.workflows.run_ends``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistoryEventFilterType
from temporalio.service import RPCError, RPCStatusCode

from keel.worker.client.errors import SessionNotFound
from keel.workflows.contracts import PendingView, SessionState, TurnRecord
from keel.workflows.run_ends import UNFINISHED_TURN, EndedStatus, stop_reason

logger = logging.getLogger(__name__)

_ENDED: dict[WorkflowExecutionStatus, EndedStatus] = {
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.FAILED: "failed",
}
_IN_WORDS: dict[EndedStatus, str] = {
    "terminated": "the session was terminated in Temporal",
    "cancelled": "the session was cancelled in Temporal",
    "timed_out": "the session timed out in Temporal (its run timeout)",
    "failed": "the session failed",
}


@dataclass(frozen=True)
class SessionEnd:
    """How a session's latest run ended, when Keel did not end it.

    Attributes:
        status: ``terminated``, ``cancelled``, ``timed_out`` or ``failed``.
        reason: Temporal's words (the terminate reason, the failure), if it has any.
    """

    status: EndedStatus
    reason: str | None = None

    @property
    def text(self) -> str:
        """One line: ``the session was terminated in Temporal: <reason>``."""
        said = _IN_WORDS[self.status]
        return f"{said}: {self.reason}" if self.reason else said

    @property
    def stop_reason(self) -> str:
        """The ``stop_reason`` of a turn it left unfinished."""
        return stop_reason(self.status)


async def session_end(client: Client, session_id: str) -> SessionEnd | None:
    """How the session's latest run ended, if Temporal ended it; None while it runs or ended well.

    Raises:
        SessionNotFound: no such session.
    """
    handle = client.get_workflow_handle(session_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SessionNotFound(f"no session {session_id!r}") from err
        raise
    status = description.status
    ended = _ENDED.get(status) if status is not None else None
    if ended is None:
        return None
    return SessionEnd(ended, await _close_reason(client, session_id, description.run_id))


async def _close_reason(client: Client, session_id: str, run_id: str) -> str | None:
    """The terminate reason or failure message of the run's close event, if any."""
    try:
        handle = client.get_workflow_handle(session_id, run_id=run_id)
        close_only = WorkflowHistoryEventFilterType.CLOSE_EVENT
        async for event in handle.fetch_history_events(event_filter_type=close_only):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                return event.workflow_execution_terminated_event_attributes.reason or None
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                return event.workflow_execution_failed_event_attributes.failure.message or None
            return None
    except RPCError as err:  # the status alone still tells the truth
        logger.info("cannot read how session %s ended: %s", session_id, err)
    return None


def ended_state(state: SessionState, end: SessionEnd) -> SessionState:
    """``state`` as it stands once the run ended so: nothing runs or waits any more."""
    return state.model_copy(
        update={
            "status": end.status,
            "turns": [ended_turn(t, end) for t in state.turns],
            "pending": ended_pending(state.pending),
            "queued": [],
        }
    )


def ended_turn(record: TurnRecord, end: SessionEnd) -> TurnRecord:
    """A turn the end left unfinished reads ``cancelled``, stopped by ``session_<how>``."""
    if record.status not in UNFINISHED_TURN:
        return record
    return record.model_copy(
        update={
            "status": "cancelled",
            "stop_reason": end.stop_reason,
            "error": end.text,
            "interrupts": [],
        }
    )


def ended_pending(view: PendingView) -> PendingView:
    """Nothing waits for a person or a client, and nothing runs, in a session that ended."""
    return view.model_copy(
        update={
            "turn_id": None,
            "message": None,
            "running": [],
            "interrupts": [],
            "client_calls": [],
        }
    )
