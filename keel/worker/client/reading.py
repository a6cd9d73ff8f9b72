"""The reading part of the Python API: session state, events, streamed text, listings.

``SessionReader`` is a ``SessionCaller`` that reads and writes nothing to any session's
history; ``KeelClient`` (``keel.worker.client.keel_client``) is one, by inheritance.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from keel.activities.store import StoreError
from keel.worker.client.calls import SessionCaller
from keel.worker.client.effects_listing import effect_records
from keel.worker.client.errors import SessionNeverRan, SessionNotFound
from keel.worker.client.history_watch import HistoryWatch
from keel.worker.client.never_ran import unstarted_effects, unstarted_state, unstarted_turn
from keel.worker.client.run_status import (
    SessionEnd,
    ended_pending,
    ended_state,
    ended_turn,
    session_end,
)
from keel.worker.client.schedules import SCHEDULED_BY
from keel.worker.client.streams import ModelStream, TextChunk, follow_model_text, heartbeat_snapshot
from keel.workflows.contracts import (
    Event,
    PendingView,
    SessionConfig,
    SessionState,
    StateQuery,
    TurnRecord,
)
from keel.workflows.effect_contracts import EffectRecord
from keel.workflows.ledger import NO_CONFIG, SessionInput
from keel.workflows.messages import Message
from keel.workflows.session import AgentSession

logger = logging.getLogger(__name__)

# How often a follower checks, while nothing happens, whether the workflow still runs.
LIVENESS_EVERY_S = 5.0
# A query of a follower that takes longer is given up and retried on the next poll.
FOLLOW_QUERY_TIMEOUT = timedelta(seconds=10)
# How late a follower (``keel run``, ``keel watch``, the web page) may show a state while the
# session's model call, tool or judge runs: fewer queries, each one billed (``HistoryWatch``).
FOLLOW_LAG_S = 1.0


@dataclass(frozen=True)
class SessionSummary:
    """One line of ``keel sessions``.

    Attributes:
        session: the session (workflow) id.
        workflow_status: Temporal's status, lower case: running, completed, failed,
            terminated, canceled, timed_out or continued_as_new.
        started_at: when the workflow started.
        closed_at: when the workflow closed, if it has.
        status: Keel's status (idle, running, closing, closed) of a running session; None
            when the session is not running or did not answer in time.
        pending_approvals: interrupts waiting for a decision; None when unknown.
        last_activity: the ``at`` of the session's last event, else its close or start time.
        schedule: the schedule that started the session (``keel schedule``), if one did.
        cost_usd: what a running session cost so far (its sub-agents' included), the known
            part; None when nothing is known (or it did not answer, or is not running).
        cost_unknown: some of its calls' cost is unknown (``keel.workflows.cost``).
    """

    session: str
    workflow_status: str
    started_at: datetime | None
    closed_at: datetime | None
    status: str | None
    pending_approvals: int | None
    last_activity: datetime | None
    schedule: str | None = None
    cost_usd: float | None = None
    cost_unknown: bool = False


T = TypeVar("T")


async def _history_of(session_id: str, events: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        async for event in events:
            yield event
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SessionNotFound(f"no session {session_id!r}") from err
        raise


class SessionReader(SessionCaller):
    """Reads ``AgentSession`` workflows: queries, history, visibility; never writes.

    Every query goes through ``_ask`` (which waits for, or reports, a missing worker);
    listings are of this client's task queue.
    """

    async def config(self, session_id: str) -> SessionConfig:
        """The configuration a session was started with, read from its history.

        Needs no worker, unlike a query.

        Raises:
            SessionNotFound: no such session.
        """
        events = self.client.get_workflow_handle(session_id).fetch_history_events()
        async for event in _history_of(session_id, events):
            if event.HasField("workflow_execution_started_event_attributes"):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                try:
                    [start] = await self.client.data_converter.decode(payloads, [SessionInput])
                except ValueError:  # none, several, or one that does not validate
                    start = None
                # a raw start with a malformed input: the session failed at once, on this
                return start.config if isinstance(start, SessionInput) else NO_CONFIG
        raise SessionNotFound(f"session {session_id!r} has no start event")

    async def ended(self, session_id: str) -> SessionEnd | None:
        """How Temporal ended the session's latest run, if it did; None while it runs.

        Terminated, cancelled, timed out or failed; None too when it closed as a session
        closes (completed, continued as new).

        Raises:
            SessionNotFound: no such session.
        """
        return await session_end(self.client, session_id)

    async def _answer_and_end(
        self,
        session_id: str,
        send: Callable[[], Awaitable[T]],
        unstarted: Callable[[SessionState, SessionEnd], T],
    ) -> tuple[T, SessionEnd | None]:
        """A query's answer and how Temporal ended the session (``ended``), asked at once.

        A session Temporal ended before any worker ran it answers no query: ``unstarted``
        gives the answer from what it reads as (``keel.worker.client.never_ran``).
        """
        try:
            return await asyncio.gather(self._ask(session_id, send), self.ended(session_id))
        except SessionNeverRan as err:
            state, end = await self._never_ran(session_id, err)
            return unstarted(state, end), end

    async def _never_ran(
        self, session_id: str, err: SessionNeverRan
    ) -> tuple[SessionState, SessionEnd]:
        """What a session Temporal ended before any worker ran it reads as, and how it ended.

        Raises:
            SessionNeverRan: ``err``, when Temporal says the run did not end so (not a state
                to make up).
        """
        end = await self.ended(session_id)
        if end is None:
            raise err
        return unstarted_state(session_id, err.start, end), end

    async def turn(self, session_id: str, turn_id: int) -> TurnRecord:
        """One turn's current record (``cancelled`` if the session's end left it unfinished)."""
        record, end = await self._answer_and_end(
            session_id,
            lambda: self.handle(session_id).query(
                AgentSession.turn, turn_id, rpc_timeout=self.query_timeout
            ),
            lambda state, end: unstarted_turn(state, turn_id, end),
        )
        return record if end is None else ended_turn(record, end)

    async def state(
        self, session_id: str, *, events_since: int = 0, include_messages: bool = True
    ) -> SessionState:
        """The session's conversation (one list across runs), turns, usage and events.

        Raises:
            StoreError: a message of an earlier run cannot be read from the store.
        """
        query = StateQuery(events_since=events_since, include_messages=include_messages)
        state, end = await self._answer_and_end(
            session_id,
            lambda: self.handle(session_id).query(
                AgentSession.state, query, rpc_timeout=self.query_timeout
            ),
            lambda state, _: (
                state if include_messages else state.model_copy(update={"messages": []})
            ),
        )
        if end is not None:  # Temporal ended the run: its status, not the session's last word
            state = ended_state(state, end)
        return await self._with_stored(session_id, state) if include_messages else state

    async def _with_stored(self, session_id: str, state: SessionState) -> SessionState:
        """``state`` with the messages and tool results it names in the store read back.

        Raises:
            StoreError: the state names stored messages, and there is no store or a message
                cannot be read from it.
        """
        if state.base is not None or state.result_refs:
            store = self.store
            if store is None:
                raise StoreError(
                    f"session {session_id!r} keeps messages or tool results in the "
                    "conversation store; give KeelClient the store (KEEL_STORE) to read them"
                )

            def read() -> list[Message]:
                tail = [store.with_results(m, state.result_refs) for m in state.messages]
                return [*store.load(state.base), *tail]

            messages = await asyncio.to_thread(read)
            state = state.model_copy(update={"messages": messages, "base": None, "result_refs": {}})
        return state

    async def effects(
        self, session_id: str, state: SessionState | None = None
    ) -> list[EffectRecord]:
        """Each call of a ``write`` or ``idempotent`` tool, in order, with its attempts.

        The attempts come from the effects journal in the store (``KEEL_STORE``); without
        the store, only those of the calls that were not plain (retried, settled by a person).

        Args:
            session_id: the session.
            state: the session's state with its messages, when the caller has just read it
                (the web page): not read again.

        Raises:
            StoreError: a message of an earlier run cannot be read from the store.
        """
        try:
            view = await self._ask(
                session_id,
                lambda: self.handle(session_id).query(
                    AgentSession.effects, rpc_timeout=self.query_timeout
                ),
            )
        except SessionNeverRan as err:
            view = unstarted_effects(err.start)
        if state is None:
            state = await self.state(session_id)
        return await asyncio.to_thread(effect_records, session_id, state.messages, view, self.store)

    async def pending(self, session_id: str) -> PendingView:
        """What the running turn holds outside the conversation.

        Nothing, once Temporal ended the session (see ``ended``).
        """
        view, end = await self._answer_and_end(
            session_id,
            lambda: self.handle(session_id).query(
                AgentSession.pending, rpc_timeout=self.query_timeout
            ),
            lambda state, _: state.pending,
        )
        return view if end is None else ended_pending(view)

    async def event_count(self, session_id: str) -> int:
        """How many events the session's log holds; the ``since`` to follow only new ones."""
        state = await self.state(session_id, events_since=sys.maxsize, include_messages=False)
        return state.event_count

    async def snapshots(
        self,
        session_id: str,
        since: int = 0,
        *,
        poll_s: float = 0.2,
        lag_s: float = FOLLOW_LAG_S,
        stop: Callable[[SessionState], bool] | None = None,
        nudge: asyncio.Event | None = None,
        include_messages: bool = False,
    ) -> AsyncIterator[SessionState]:
        """Follow a session: its state (without messages) each time it may have changed.

        Each state yielded carries in ``events`` only the events not yielded before, in
        order (possibly none). The session's history is long-polled (``HistoryWatch``, not
        billed by Temporal Cloud) and the ``state`` query, billed, is asked only when the
        history says the state may have changed: at once when the session stopped working
        (idle, waiting for a person, ended), at most ``lag_s`` late while a model call, tool
        or judge runs. Neither writes to history. Ends after yielding a state for which
        ``stop`` returns True, once the session is closed, or once its workflow no longer
        runs. When Temporal ended the run (terminate, cancel, timeout, failure), the last
        state yielded says so (``status``, its unfinished turns ``cancelled``: see
        ``ended``). A query that fails on the way (a worker restarting, the server busy) is
        asked again ``poll_s`` later.

        Args:
            session_id: the session.
            since: the number of events already seen; 0 follows the log from its start.
            poll_s: the least time between two queries.
            lag_s: how late a state may be seen while the session's work runs.
            stop: called with every state yielded; True ends the iteration.
            nudge: set it to have the state asked now; it is cleared as that query is sent.
            include_messages: each state with its conversation, as ``state`` reads it (the
                web page renders from it), in the same query.

        Raises:
            SessionNotFound: no such session.
            StoreError: with ``include_messages``, a stored message cannot be read.
        """
        handle = self.handle(session_id)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        checked = False  # whether the workflow runs: asked after the first poll, then when quiet
        failing = False
        timeout = self.query_timeout or FOLLOW_QUERY_TIMEOUT
        async with HistoryWatch(self.client, session_id, lag_s=lag_s) as watch:
            ask = True
            while True:
                asked_at = loop.time()
                if ask:
                    if nudge is not None:
                        nudge.clear()  # this query answers it
                    query = StateQuery(events_since=since, include_messages=include_messages)
                    try:
                        state = await self._ask(
                            session_id,
                            partial(handle.query, AgentSession.state, query, rpc_timeout=timeout),
                        )
                    except SessionNeverRan as err:
                        yield (await self._never_ran(session_id, err))[0]  # its only state
                        return
                    except (RPCError, WorkflowQueryFailedError) as err:
                        if not failing:
                            logger.warning(
                                "session %s does not answer (retrying): %s", session_id, err
                            )
                        failing = True
                    else:
                        failing = False
                        if include_messages:
                            state = await self._with_stored(session_id, state)
                        # A log shorter than what was seen means the caller's ``since`` was
                        # too far.
                        since = max(since, state.event_count)
                        if state.events:
                            quiet_since = loop.time()
                        settled = state.status == "closed" or (stop is not None and stop(state))
                        end = await self.ended(session_id) if settled else None
                        if end is not None:  # ended by Temporal: said once, as the last state
                            yield ended_state(state, end)
                            return
                        yield state
                        if settled:
                            return
                if not checked or loop.time() - quiet_since >= LIVENESS_EVERY_S:
                    checked, quiet_since = True, loop.time()
                    if not await self._running(session_id):
                        last = await self._last_state(session_id, since, include_messages)
                        if last is not None:
                            yield last
                        return
                ask = failing or await watch.wait(LIVENESS_EVERY_S, nudge)
                if ask:  # at most one query every poll_s
                    await asyncio.sleep(max(0.0, asked_at + poll_s - loop.time()))

    async def _last_state(
        self, session_id: str, since: int, include_messages: bool = False
    ) -> SessionState | None:
        """The state (events after ``since``) of a session Temporal ended, as it ended.

        None when Temporal did not end it (it closed, or continued as new), or it does not
        answer.
        """
        end = await self.ended(session_id)
        if end is None:
            return None
        query = StateQuery(events_since=since, include_messages=include_messages)
        try:
            state = await self.handle(session_id).query(
                AgentSession.state, query, rpc_timeout=self.query_timeout or FOLLOW_QUERY_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError) as err:
            logger.info("session %s ended (%s) and does not answer: %s", session_id, end.text, err)
            return None
        if include_messages:
            state = await self._with_stored(session_id, state)
        return ended_state(state, end)

    async def events(
        self,
        session_id: str,
        since: int = 0,
        *,
        poll_s: float = 0.2,
        lag_s: float = FOLLOW_LAG_S,
        stop: Callable[[SessionState], bool] | None = None,
    ) -> AsyncIterator[Event]:
        """Follow a session's event log: yields new events in order as they happen.

        Example:
            >>> async for event in keel.events("s1", stop=lambda s: s.status == "idle"):
            ...     print(event.seq, event.type, event.detail)

        Args:
            session_id: the session.
            since: the number of events already seen (yields events ``since + 1`` on).
            poll_s: the least time between two ``state`` queries (see ``snapshots``).
            lag_s: how late events may be seen while the session's work runs.
            stop: called with the session's state after each poll's events are yielded;
                True ends the iteration. Without it, iteration ends when the session closes
                or its workflow stops running.

        Raises:
            SessionNotFound: no such session.
        """
        states = self.snapshots(session_id, since, poll_s=poll_s, lag_s=lag_s, stop=stop)
        async for state in states:
            for event in state.events:
                yield event

    async def model_stream(self, session_id: str) -> ModelStream | None:
        """The text the session's running model call has streamed so far.

        Read from the model activity's last heartbeat (``describe``; nothing is written to
        history). None when no model call runs. A call that has not heartbeated yet
        reports no text.

        Raises:
            SessionNotFound: no such session.
        """
        handle = self.client.get_workflow_handle(session_id)
        return await heartbeat_snapshot(
            self.client, await self._call(session_id, handle.describe())
        )

    def model_text(self, session_id: str, *, poll_s: float = 0.2) -> AsyncIterator[TextChunk]:
        """Follow the text the session's model calls stream: every character, in order.

        Each running model call's text is read from the stream endpoint of the worker that
        runs it (found in the call's heartbeat details; ``describe``, nothing written to
        history), from offset 0, so a reader that starts mid-call still gets the whole text.
        When that endpoint cannot be reached, the chunks come from heartbeat snapshots
        instead (``source == "heartbeat"``; ``gap`` counts characters missed). See
        docs/streaming.md.

        Example:
            >>> async for chunk in keel.model_text("s1"):
            ...     print(chunk.text, end="", flush=True)

        Args:
            session_id: the session.
            poll_s: seconds between ``describe`` calls while no model call streams.

        Returns:
            An async iterator of ``TextChunk``, in order; a new ``(activity_id, attempt)`` is a
            new call (or a retry, which starts over at offset 0); a chunk with ``end`` closes
            one. It ends when the session's workflow stops running; break out of it to stop.
        """
        client = self.client
        handle = client.get_workflow_handle(session_id)
        return follow_model_text(
            client, lambda: self._call(session_id, handle.describe()), poll_s=poll_s
        )

    async def streamed_text(self, session_id: str) -> tuple[int, str] | None:
        """``(text_chars, text tail)`` of the running model call; None when none runs.

        See ``model_stream``.
        """
        stream = await self.model_stream(session_id)
        return None if stream is None else (stream.text_chars, stream.text)

    async def list_sessions(
        self, *, limit: int = 50, query_timeout_s: float = 2.0, open_only: bool = False
    ) -> list[SessionSummary]:
        """Sessions on this client's task queue, newest first, from Temporal visibility.

        Running sessions are asked for their state (without messages), all at once, each
        with ``query_timeout_s``; one that does not answer in time (no worker, say) is
        listed with an unknown status. Visibility is eventually consistent: a session
        started a moment ago may be missing.

        A session is listed once, as its latest run: the runs a reset (``temporal workflow
        reset``) or continue-as-new left behind are not.

        Args:
            limit: at most this many sessions.
            query_timeout_s: how long to wait for each running session's answer.
            open_only: only the sessions whose workflow runs (not closed, not ended).
        """
        query = f'WorkflowType = "AgentSession" AND TaskQueue = "{self.task_queue}"'
        if open_only:
            query += ' AND ExecutionStatus = "Running"'
        executions: list[WorkflowExecution] = []
        seen: set[str] = set()
        async for execution in self.client.list_workflows(query):  # newest run first
            if execution.id not in seen:
                seen.add(execution.id)
                executions.append(execution)
            if len(executions) >= limit:
                break
        executions.sort(key=lambda e: e.start_time, reverse=True)
        timeout = timedelta(seconds=query_timeout_s)
        return list(await asyncio.gather(*(self._summary(e, timeout) for e in executions)))

    async def _summary(self, execution: WorkflowExecution, timeout: timedelta) -> SessionSummary:
        status = execution.status
        summary = SessionSummary(
            session=execution.id,
            workflow_status=status.name.lower() if status is not None else "unknown",
            started_at=execution.start_time,
            closed_at=execution.close_time,
            status=None,
            pending_approvals=0 if status != WorkflowExecutionStatus.RUNNING else None,
            last_activity=execution.close_time or execution.start_time,
            schedule=execution.typed_search_attributes.get(SCHEDULED_BY),
        )
        if status != WorkflowExecutionStatus.RUNNING:
            return summary
        handle = self.handle(execution.id)
        try:
            state = await handle.query(
                AgentSession.state,
                StateQuery(events_since=sys.maxsize, include_messages=False),
                rpc_timeout=timeout,
            )
            last = state.event_count - 1
            if last >= 0:
                tail = StateQuery(events_since=last, include_messages=False)
                state = await handle.query(AgentSession.state, tail, rpc_timeout=timeout)
        except Exception as err:  # no worker, a slow one, a failing workflow task: unknown
            logger.info("session %s did not answer: %s", execution.id, err)
            return summary
        last_at = _parse_time(state.events[-1].at) if state.events else None
        return SessionSummary(
            session=summary.session,
            workflow_status=summary.workflow_status,
            started_at=summary.started_at,
            closed_at=summary.closed_at,
            status=state.status,
            pending_approvals=len(state.pending.interrupts),
            last_activity=last_at or summary.last_activity,
            schedule=summary.schedule,
            cost_usd=state.cost_usd,
            cost_unknown=state.cost_unknown,
        )

    async def _running(self, session_id: str) -> bool:
        try:
            description = await self.client.get_workflow_handle(session_id).describe()
        except RPCError as err:
            logger.info("cannot describe session %s: %s", session_id, err)
            return True
        return description.status == WorkflowExecutionStatus.RUNNING


def _parse_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
