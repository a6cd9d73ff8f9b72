"""Waiting on a session without polling it: a long poll of its history says when to look.

A client that waits for a turn (``KeelClient.wait_turn``) or follows a session (``keel run``,
``keel watch``, the web page) reads the session through queries, and Temporal Cloud bills each
query as an Action: a query every 0.2 s was about 24 Actions for a 5 s model call, against the
2 the call's activities cost. Reading a workflow's history is not billed, and Temporal holds
a history read open until there is something new (``wait_new_event``). So a ``HistoryWatch``
long-polls the session's history and says when a query is worth its price:

- at once, when a workflow task completed and did not start more of the turn's work (it ended
  the turn, parked it on a person, changed ``KeelStatus``, took a prompt or a decision), and
  when the run ended or continued as new;
- ``lag_s`` later, when the task started a model call, a tool run or a judge: the state will
  change again when that ends, and a query for each step of a quick turn would cost more than
  the step. A follower shows a running step at most ``lag_s`` late; a caller that waits for a
  turn's end only (``wait_turn``, no other turn queued) sets no lag and asks nothing while the
  turn's work runs.

Nothing here writes to the session's history, and no payload is decoded: only event types
and activity type names are read. When the history cannot be read (the server busy, an older
server), the watch says "look now" at most once a second, so a caller never waits blind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from types import TracebackType

import temporalio.api.common.v1 as common
import temporalio.api.history.v1 as history
import temporalio.api.workflowservice.v1 as wsv1
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from keel.workflows.activity_options import JUDGE_ACTIVITY, MODEL_ACTIVITY, TOOL_ACTIVITY
from keel.workflows.turn_waits import WAIT_TURN_UPDATE

logger = logging.getLogger(__name__)

TURN_WORK = frozenset({MODEL_ACTIVITY, TOOL_ACTIVITY, JUDGE_ACTIVITY})
"""Activities whose end changes the turn again: a query while they run can wait."""

# Temporal answers a long poll with nothing after about 20 s; a read that takes much longer
# than that is lost.
_LONG_POLL_TIMEOUT = timedelta(seconds=70)
# After a failed history read: look now, and read again this much later.
_RETRY_S = 1.0

# A workflow task with one of these is worth a query at once: KeelStatus changed (the session
# went idle or waits for a person), or an update was taken (a prompt, a decision: the queue
# or the turn changed).
_SAID_AT_ONCE = frozenset(
    {
        EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    }
)


def _said_at_once(event: history.HistoryEvent) -> bool:
    """Whether ``event`` is worth a query at once; a client's ``wait_turn`` changes nothing."""
    if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        return event.event_type in _SAID_AT_ONCE
    accepted = event.workflow_execution_update_accepted_event_attributes.accepted_request
    return accepted.input.name != WAIT_TURN_UPDATE


# The events that end a run: what follows is another run, or nothing.
CLOSED_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)


def query_delay(events: Sequence[history.HistoryEvent], lag_s: float | None) -> float | None:
    """How long after ``events`` (one read of new history) a query is worth it; None: not yet.

    Args:
        events: the events one history read returned, in order.
        lag_s: how late a state may be seen while the turn's work runs; None: the caller
            need not see it until that work ends (``wait_turn`` with no turn queued).
    """
    types = {event.event_type for event in events}
    if types & CLOSED_EVENTS:
        return 0.0
    if EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in types:
        return None  # an activity ended or a task started: the state changes with its task
    if any(_said_at_once(event) for event in events):
        return 0.0  # KeelStatus changed (idle, waiting for a person), or a request came
    working = any(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name in TURN_WORK
        for event in events
    )
    return lag_s if working else 0.0


class HistoryWatch:
    """Long-polls one session's history; ``wait`` returns when a query is worth asking.

    Use as an async context manager. Follows the session across continue-as-new.
    """

    def __init__(self, client: Client, session_id: str, *, lag_s: float | None) -> None:
        """Set up a watch; nothing is read until it is entered.

        Args:
            client: the Temporal client.
            session_id: the session (workflow id).
            lag_s: how late a state may be seen while a model call, tool or judge runs;
                None: not until it ends. The caller may change it (``lag_s``) as it goes.
        """
        self._client = client
        self._session_id = session_id
        self.lag_s = lag_s
        self._due_at: float | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False

    async def __aenter__(self) -> HistoryWatch:
        """Learn where the history ends now, then read what comes after, in a task."""
        run_id, seen = await self._position()
        self._tasks.append(asyncio.create_task(self._read(run_id, seen)))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop reading."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait(
        self, timeout_s: float | None = None, nudge: asyncio.Event | None = None
    ) -> bool:
        """Wait until a query is worth it (True) or ``timeout_s`` passed (False).

        Args:
            timeout_s: how long to wait at most; None: no limit.
            nudge: when set (by another task of the caller), a query is worth it now,
                whatever the history says; left set, for the caller to clear.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            now = loop.time()
            if (self._due_at is not None and now >= self._due_at) or (
                nudge is not None and nudge.is_set()
            ):
                self._due_at = None
                return True
            ends = [t for t in (self._due_at, deadline) if t is not None]
            if ends and min(ends) <= now:
                return False
            self._wake.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (self._wake, nudge) if e is not None]
            try:
                await asyncio.wait(
                    waits,
                    timeout=min(ends) - now if ends else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiting in waits:
                    waiting.cancel()

    def _due(self, delay_s: float) -> None:
        """Say a query is worth it ``delay_s`` from now (an earlier one stands)."""
        at = asyncio.get_running_loop().time() + delay_s
        if self._due_at is None or at < self._due_at:
            self._due_at = at
            self._wake.set()

    async def _position(self) -> tuple[str, int]:
        """The latest run and its last event; ``("", 0)`` when it cannot be described."""
        try:
            described = await self._client.get_workflow_handle(self._session_id).describe()
        except RPCError as err:
            logger.info("cannot describe session %s to watch it: %s", self._session_id, err)
            return "", 0
        return described.run_id or "", described.history_length

    async def _read(self, run_id: str, seen: int) -> None:
        """Read the history as it grows; say when to query; follow continue-as-new."""
        token = b""
        while True:
            request = wsv1.GetWorkflowExecutionHistoryRequest(
                namespace=self._client.namespace,
                execution=common.WorkflowExecution(workflow_id=self._session_id, run_id=run_id),
                next_page_token=token,
                wait_new_event=True,
                skip_archival=True,
            )
            try:
                response = await self._client.workflow_service.get_workflow_execution_history(
                    request, retry=True, timeout=_LONG_POLL_TIMEOUT
                )
            except RPCError as err:
                if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
                    continue  # a long poll that outlived its deadline: nothing new, ask again
                if not self._failing:
                    logger.info("cannot read the history of session %s: %s", self._session_id, err)
                self._failing = True
                self._due(0.0)  # the caller looks for itself
                if err.status == RPCStatusCode.NOT_FOUND:
                    return
                await asyncio.sleep(_RETRY_S)
                run_id, seen, token = (*await self._position(), b"")
                continue
            self._failing = False
            events = [event for event in response.history.events if event.event_id > seen]
            if events:
                seen = events[-1].event_id
                delay = query_delay(events, self.lag_s)
                if delay is not None:
                    self._due(delay)
            closed = any(event.event_type in CLOSED_EVENTS for event in events)
            token = response.next_page_token
            if closed or not token:
                self._due(0.0)
                if not any(
                    e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
                    for e in events
                ):
                    return  # the session's workflow ended: nothing more comes
                run_id, seen, token = "", 0, b""  # the next run, from its start
