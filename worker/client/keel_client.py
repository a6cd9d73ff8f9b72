"""The Python API for clients: start sessions, send prompts, decide, wait for turns.

``KeelClient`` is the one class to use; its reading half (state, events, listings) lives in
``keel.worker.client.reading``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.reading import (
    ENDED,
    POLL_MAX_S,
    POLL_START_S,
    SETTLED,
    ModelStream,
    NoWorker,
    RequestRejected,
    SessionClosed,
    SessionNotFound,
    SessionReader,
    SessionSummary,
    WorkerWait,
)
from keel.worker.signing import ApproverKey
from keel.workflows.approvals import UnknownInterrupt
from keel.workflows.boundary import InputRejected, validate_prompt
from keel.workflows.contracts import (
    Answer,
    CancelAck,
    CancelInput,
    CloseInput,
    Decision,
    InterruptAck,
    PromptAck,
    PromptInput,
    SessionConfig,
    SteerAck,
    SteerInput,
    TurnRecord,
)
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import ContentBlock, Message, text_block
from keel.workflows.session import AgentSession

T = TypeVar("T")

__all__ = [
    "ENDED",
    "SETTLED",
    "KeelClient",
    "ModelStream",
    "NoWorker",
    "RequestRejected",
    "SessionClosed",
    "SessionNotFound",
    "SessionSummary",
    "WorkerWait",
]


def _content(prompt: str | Sequence[ContentBlock]) -> list[ContentBlock]:
    return [text_block(prompt)] if isinstance(prompt, str) else list(prompt)


async def _collect_start_error(start: WithStartWorkflowOperation[Any, Any]) -> None:
    """Retrieve the error temporalio also set on a failed start's handle.

    When update-with-start fails before the workflow starts, temporalio sets the error on the
    start operation's handle future as well. Nobody awaits that future here, so asyncio would
    log "Future exception was never retrieved" with a traceback when the garbage collector
    frees it, long after the caller got its clean error. Python 3.11 formats that traceback
    with ``ast.parse``; run inside another ``ast.parse``, it fails that one with
    ``SystemError`` (CPython gh-106905).
    """
    waiter = asyncio.ensure_future(start.workflow_handle())
    await asyncio.sleep(0)  # one loop turn: the waiter has seen a future that is settled
    if waiter.done():
        if not waiter.cancelled():
            waiter.exception()
    else:  # the call failed before any answer from the server: the handle was never settled
        waiter.cancel()


class KeelClient(SessionReader):
    """Talks to ``AgentSession`` workflows on one task queue.

    Example:
        >>> keel = KeelClient(await connect("127.0.0.1:7233", "default"), "keel")
        >>> ack = await keel.prompt("s1", "hello", config=SessionConfig(model="scripted:x.json"))
        >>> record = await keel.wait_turn("s1", ack.turn_id)
    """

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
        try:  # refuse before sending, as the session would: a huge payload hurts the session
            validate_prompt(update.role, update.content)
        except InputRejected as err:
            raise RequestRejected(str(err)) from err
        if config is not None:
            _check_schemas(config)
        if config is None:
            return await self._ask(
                session_id,
                lambda: self.handle(session_id).execute_update(AgentSession.prompt, update),
                query=False,
            )
        start = WithStartWorkflowOperation(
            AgentSession.run,
            SessionInput(config=config, messages=list(messages)),
            id=session_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        try:
            return await self._ask(
                session_id,
                lambda: self.client.execute_update_with_start_workflow(
                    AgentSession.prompt, update, start_workflow_operation=start
                ),
                query=False,
            )
        except BaseException:  # a cancelled caller too: the handle may hold an error still
            await _collect_start_error(start)
            raise

    async def start(
        self,
        session_id: str,
        prompt: str | Sequence[ContentBlock],
        *,
        config: SessionConfig,
        messages: Sequence[Message] = (),
    ) -> PromptAck:
        """Start a new session with its first prompt, without waiting for any worker.

        The prompt travels in the start input (``SessionInput.prompt``) and becomes turn 1;
        unlike ``prompt``, nothing waits for a worker to accept it, so a caller can start a
        job and walk away (``keel run --detach``).

        Raises:
            RequestRejected: the prompt or a schema was refused, or a session with this id
                exists (running or closed); nothing was started.
        """
        content = _content(prompt)
        try:
            validate_prompt("user", content)
        except InputRejected as err:
            raise RequestRejected(str(err)) from err
        _check_schemas(config)
        try:
            await self.client.start_workflow(
                AgentSession.run,
                SessionInput(config=config, messages=list(messages), prompt=content),
                id=session_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError as err:
            raise RequestRejected(f"session {session_id!r} exists already") from err
        return PromptAck(turn_id=1, queued_behind=0)

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

    async def cancel(self, session_id: str, reason: str = "cancelled by user") -> CancelAck:
        """Cancel the running turn.

        Raises:
            RequestRejected: no turn is running.
        """
        update = CancelInput(reason=reason)
        return await self._ask(
            session_id,
            lambda: self.handle(session_id).execute_update(AgentSession.cancel, update),
            query=False,
        )

    async def decide(
        self,
        session_id: str,
        interrupt_id: str,
        decision: Literal["approve", "deny"],
        *,
        reason: str | None = None,
        approver: str | None = None,
        key: ApproverKey | None = None,
    ) -> InterruptAck:
        """Approve or deny a pending interrupt (the validated ``decide`` update).

        Args:
            session_id: the session.
            interrupt_id: the pending interrupt (see ``pending``).
            decision: ``approve`` or ``deny``.
            reason: why; the model sees it when denied.
            approver: who decides; checked against the session's approvers.
            key: the approver's private key, to sign with (sessions with approver keys).

        Raises:
            RequestRejected: the id is unknown or no longer pending, the approver is not
                allowed, or the signature is missing or wrong; nothing was written to the
                session's history.
        """
        signature = (
            None
            if key is None
            else key.sign(session_id, interrupt_id, "decide", decision, reason, approver)
        )
        update = Decision(
            interrupt_id=interrupt_id,
            decision=decision,
            reason=reason,
            approver=approver,
            signature=signature,
        )
        return await _settling(
            lambda: self._ask(
                session_id,
                lambda: self.handle(session_id).execute_update(AgentSession.decide, update),
                query=False,
            )
        )

    async def respond(
        self,
        session_id: str,
        interrupt_id: str,
        value: Any,
        *,
        responder: str | None = None,
        key: ApproverKey | None = None,
    ) -> InterruptAck:
        """Answer a tool's question (the validated ``respond`` update).

        Args:
            session_id: the session.
            interrupt_id: the question's interrupt id.
            value: the answer, any JSON value.
            responder: who answers; checked against the session's approvers.
            key: the responder's private key, to sign with (sessions with approver keys).

        Raises:
            RequestRejected: the id is unknown, no longer pending or not a question, the
                responder is not allowed, or the signature is missing or wrong; nothing was
                written to the session's history.
        """
        signature = (
            None
            if key is None
            else key.sign(session_id, interrupt_id, "respond", value, None, responder)
        )
        update = Answer(
            interrupt_id=interrupt_id, value=value, responder=responder, signature=signature
        )
        return await _settling(
            lambda: self._ask(
                session_id,
                lambda: self.handle(session_id).execute_update(AgentSession.respond, update),
                query=False,
            )
        )

    async def steer(self, session_id: str, text: str) -> SteerAck:
        """Add guidance that the running turn's next model call sees.

        Raises:
            RequestRejected: no turn is running, or the text is empty.
        """
        update = SteerInput(text=text)
        return await self._ask(
            session_id,
            lambda: self.handle(session_id).execute_update(AgentSession.steer, update),
            query=False,
        )

    async def close(self, session_id: str, reason: str = "closed by user") -> None:
        """Ask the session to finish its queued turns and end."""
        await self._call(
            session_id,
            self.handle(session_id).signal(AgentSession.close, CloseInput(reason=reason)),
        )


# A query can show an interrupt before the workflow task that opens it has run: it replays the
# events the server has, the model call's result among them, while the task that will process
# that result is still waiting. A decision sent at once joins that task, and Temporal validates
# it before the result, so the interrupt is not there yet. Rejected updates write nothing, so
# the same request is sent again, a few times, over about 1.5 s.
_SETTLE_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8)


def _check_schemas(config: SessionConfig, where: str = "") -> None:
    """Refuse before the session starts a schema the model activity would refuse."""
    try:
        if config.output_schema is not None:
            check_output_schema(config.output_schema)
    except OutputSchemaError as err:
        raise RequestRejected(f"{where}{err}") from err
    for name, agent in config.agents.items():
        _check_schemas(agent.config, f"{where}sub-agent {name}: ")


async def _settling(send: Callable[[], Awaitable[T]]) -> T:
    """``send()``; again while it is rejected for naming an interrupt not there yet."""
    for delay in _SETTLE_DELAYS_S:
        try:
            return await send()
        except RequestRejected as err:
            if err.kind != UnknownInterrupt.__name__:
                raise
        await asyncio.sleep(delay)
    return await send()
