"""The Python API for clients: start sessions, send prompts, wait for turns, inspect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Literal, TypeVar

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from workflows.contracts import (
    CancelAck,
    CancelInput,
    CloseInput,
    Decision,
    DecisionAck,
    PendingView,
    PromptAck,
    PromptInput,
    SessionConfig,
    SessionInput,
    SessionState,
    StateQuery,
    SteerAck,
    SteerInput,
    TurnRecord,
)
from workflows.messages import ContentBlock, Message, text_block
from workflows.session import AgentSession

# A turn in one of these states is over.
ENDED = frozenset({"completed", "failed", "cancelled"})
# A turn in one of these states waits for nobody but a human, or is over.
SETTLED = ENDED | {"interrupted"}
POLL_START_S = 0.05
POLL_MAX_S = 0.5


class RequestRejected(Exception):
    """The session refused a request (invalid prompt, nothing to cancel ...), with why."""


class SessionNotFound(Exception):
    """No session with that id exists."""


def _content(prompt: str | Sequence[ContentBlock]) -> list[ContentBlock]:
    return [text_block(prompt)] if isinstance(prompt, str) else list(prompt)


T = TypeVar("T")


async def _answer(session_id: str, call: Awaitable[T]) -> T:
    """Await a call to a session, turning Temporal's errors into Keel's."""
    try:
        return await call
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        raise RequestRejected(getattr(cause, "message", None) or str(cause or err)) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SessionNotFound(f"no session {session_id!r}") from err
        raise


async def _answer_iter(session_id: str, events: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        async for event in events:
            yield event
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SessionNotFound(f"no session {session_id!r}") from err
        raise


class KeelClient:
    """Talks to ``AgentSession`` workflows on one task queue.

    Example:
        >>> keel = KeelClient(await connect("127.0.0.1:7233", "default"), "keel")
        >>> ack = await keel.prompt("s1", "hello", config=SessionConfig(model="scripted:x.json"))
        >>> record = await keel.wait_turn("s1", ack.turn_id)
    """

    def __init__(self, client: Client, task_queue: str) -> None:
        """Wrap a client made by ``worker.assembly.connect``."""
        self.client = client
        self.task_queue = task_queue

    def handle(self, session_id: str) -> WorkflowHandle[AgentSession, object]:
        """The workflow handle of a session."""
        return self.client.get_workflow_handle_for(AgentSession.run, session_id)

    async def exists(self, session_id: str) -> bool:
        """Whether a session with this id exists (running or not)."""
        try:
            await self.client.get_workflow_handle(session_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def config(self, session_id: str) -> SessionConfig:
        """The configuration a session was started with, read from its history.

        Needs no worker, unlike a query.

        Raises:
            SessionNotFound: no such session.
        """
        events = self.client.get_workflow_handle(session_id).fetch_history_events()
        async for event in _answer_iter(session_id, events):
            if event.HasField("workflow_execution_started_event_attributes"):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                [start] = await self.client.data_converter.decode(payloads, [SessionInput])
                assert isinstance(start, SessionInput)
                return start.config
        raise SessionNotFound(f"session {session_id!r} has no start event")

    async def prompt(
        self,
        session_id: str,
        prompt: str | Sequence[ContentBlock],
        *,
        config: SessionConfig | None = None,
        messages: Sequence[Message] = (),
    ) -> PromptAck:
        """Send a prompt, starting the session if it does not run yet.

        Args:
            session_id: the session (workflow) id.
            prompt: text, or user content blocks.
            config: the session's configuration; needed when the session is new, ignored
                when it already runs.
            messages: history to import into a new session.

        Raises:
            RequestRejected: the prompt was refused; nothing was queued.
        """
        update = PromptInput(content=_content(prompt))
        if config is None:
            return await _answer(
                session_id, self.handle(session_id).execute_update(AgentSession.prompt, update)
            )
        start = WithStartWorkflowOperation(
            AgentSession.run,
            SessionInput(config=config, messages=list(messages)),
            id=session_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return await _answer(
            session_id,
            self.client.execute_update_with_start_workflow(
                AgentSession.prompt, update, start_workflow_operation=start
            ),
        )

    async def turn(self, session_id: str, turn_id: int) -> TurnRecord:
        """One turn's current record."""
        return await _answer(session_id, self.handle(session_id).query(AgentSession.turn, turn_id))

    async def wait_turn(
        self,
        session_id: str,
        turn_id: int,
        *,
        timeout_s: float | None = None,
        through_interrupts: bool = False,
    ) -> TurnRecord:
        """Wait until a turn has ended or waits for a human.

        Polls the ``turn`` query (queries write nothing to history), backing off from 50 ms
        to 500 ms.

        Args:
            session_id: the session.
            turn_id: the turn, as ``prompt`` answered.
            timeout_s: give up after this long.
            through_interrupts: keep waiting while the turn waits for a human (an approval
                timeout, or a decision sent by someone else, will move it on).

        Raises:
            TimeoutError: ``timeout_s`` passed first.
        """
        delay = POLL_START_S
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            record = await self.turn(session_id, turn_id)
            if record.status in (ENDED if through_interrupts else SETTLED):
                return record
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"turn {turn_id} of {session_id!r} is still {record.status}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)

    async def run(
        self,
        session_id: str,
        prompt: str | Sequence[ContentBlock],
        *,
        config: SessionConfig | None = None,
        messages: Sequence[Message] = (),
        timeout_s: float | None = None,
    ) -> TurnRecord:
        """Send a prompt and wait for its turn to settle."""
        ack = await self.prompt(session_id, prompt, config=config, messages=messages)
        return await self.wait_turn(session_id, ack.turn_id, timeout_s=timeout_s)

    async def state(
        self, session_id: str, *, events_since: int = 0, include_messages: bool = True
    ) -> SessionState:
        """The session's conversation, turns, usage and events."""
        query = StateQuery(events_since=events_since, include_messages=include_messages)
        return await _answer(session_id, self.handle(session_id).query(AgentSession.state, query))

    async def pending(self, session_id: str) -> PendingView:
        """What the running turn holds outside the conversation."""
        return await _answer(session_id, self.handle(session_id).query(AgentSession.pending))

    async def cancel(self, session_id: str, reason: str = "cancelled by user") -> CancelAck:
        """Cancel the running turn.

        Raises:
            RequestRejected: no turn is running.
        """
        update = CancelInput(reason=reason)
        return await _answer(
            session_id, self.handle(session_id).execute_update(AgentSession.cancel, update)
        )

    async def decide(
        self,
        session_id: str,
        interrupt_id: str,
        decision: Literal["approve", "deny"],
        *,
        reason: str | None = None,
        approver: str | None = None,
    ) -> DecisionAck:
        """Approve or deny a pending interrupt (the validated ``decide`` update).

        Raises:
            RequestRejected: the id is unknown or no longer pending, or the approver is not
                allowed; nothing was written to the session's history.
        """
        update = Decision(
            interrupt_id=interrupt_id, decision=decision, reason=reason, approver=approver
        )
        return await _answer(
            session_id, self.handle(session_id).execute_update(AgentSession.decide, update)
        )

    async def steer(self, session_id: str, text: str) -> SteerAck:
        """Add guidance that the running turn's next model call sees.

        Raises:
            RequestRejected: no turn is running, or the text is empty.
        """
        update = SteerInput(text=text)
        return await _answer(
            session_id, self.handle(session_id).execute_update(AgentSession.steer, update)
        )

    async def close(self, session_id: str, reason: str = "closed by user") -> None:
        """Ask the session to finish its queued turns and end."""
        await _answer(
            session_id,
            self.handle(session_id).signal(AgentSession.close, CloseInput(reason=reason)),
        )
