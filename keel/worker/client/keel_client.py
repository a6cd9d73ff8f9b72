"""The Python API for clients: ``KeelClient``, the one class to use.

``KeelClient`` holds its parts and delegates to them: a ``SessionCaller``
(``keel.worker.client.calls``: how a call to a session is made, and how Temporal's errors
become Keel's) and a ``SessionReader`` (``keel.worker.client.reading``: state, events, the
model's text, listings). What changes a session (prompts, decisions, guidance, cancel, close)
is written here. The errors it raises are defined in ``keel.worker.client.errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any, Literal, TypeVar

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import (
    AutoUpgradeVersioningOverride,
    VersioningOverride,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import UpdateMethodMultiParam

from keel.activities.models import ModelSpecError, check_model_spec
from keel.activities.store import ConversationStore
from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.calls import SessionCaller
from keel.worker.client.client_tools import ServedCall, ToolServer
from keel.worker.client.errors import RequestRejected, WorkerWait
from keel.worker.client.reading import SessionReader, SessionSummary
from keel.worker.client.streams import ModelStream, TextChunk
from keel.worker.signing import ApproverKey
from keel.workflows.approvals import UnknownInterrupt
from keel.workflows.boundary import InputRejected, validate_prompt
from keel.workflows.contracts import (
    Answer,
    CancelAck,
    CancelInput,
    ClientCall,
    ClientResultAck,
    CloseInput,
    Condition,
    Decision,
    Event,
    InterruptAck,
    PendingView,
    PromptAck,
    PromptInput,
    RevokeAck,
    RevokeInput,
    SessionConfig,
    SessionState,
    StandingApproval,
    SteerAck,
    SteerInput,
    TurnRecord,
)
from keel.workflows.ledger import SessionInput
from keel.workflows.limits import check_input
from keel.workflows.messages import ContentBlock, Message, text_block
from keel.workflows.session import AgentSession
from keel.workflows.standing import signed_value

T = TypeVar("T")
P = TypeVar("P")

# A turn in one of these states is over.
ENDED = frozenset({"completed", "failed", "cancelled"})
# A turn in one of these states waits for nobody but a human, or is over.
SETTLED = ENDED | {"awaiting_human"}
# ``wait_turn`` polls the turn query this often at first, backing off to POLL_MAX_S.
POLL_START_S = 0.05
POLL_MAX_S = 0.5


def versioning_override(config: SessionConfig) -> VersioningOverride | None:
    """How a new session overrides its workers' versioning: auto-upgrade when it asks to.

    Versioned workers pin a session to the version it started on; ``config.auto_upgrade``
    moves it to the deployment's current version at each workflow task instead. Unversioned
    workers ignore it.
    """
    return AutoUpgradeVersioningOverride() if config.auto_upgrade else None


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


class KeelClient:
    """Talks to ``AgentSession`` workflows on one task queue.

    It holds two parts, made from its inputs: ``caller`` (a ``SessionCaller``: every call to a
    session goes through it) and ``reader`` (a ``SessionReader``: what reads without
    writing). Reading methods delegate to them; the methods that change a session are here.

    Example:
        >>> keel = KeelClient(await connect("127.0.0.1:7233", "default"), "keel")
        >>> ack = await keel.prompt("s1", "hello", config=SessionConfig(model="scripted:x.json"))
        >>> record = await keel.wait_turn("s1", ack.turn_id)
    """

    def __init__(
        self,
        client: Client,
        task_queue: str,
        store: ConversationStore | None = None,
        *,
        query_timeout_s: float | None = None,
        wait_for_worker: bool = False,
        on_waiting: Callable[[WorkerWait], None] | None = None,
    ) -> None:
        """Wrap a client made by ``keel.worker.process.assembly.connect``.

        Args:
            client: the Temporal client.
            task_queue: the workers' task queue (of new sessions, and of listings).
            store: the workers' conversation store, to read messages of earlier runs (after
                continue-as-new) for ``state``; without it, ``state`` of such a session fails.
            query_timeout_s: how long a query may wait for a worker to answer (default:
                as long as Temporal lets it).
            wait_for_worker: when a query finds no worker to answer it, ask again until one
                does, instead of raising ``NoWorker``.
            on_waiting: called with a ``WorkerWait`` when a query or an update has had no
                worker's answer for 3 s, then every 30 s while it waits.
        """
        self.caller = SessionCaller(
            client,
            task_queue,
            query_timeout_s=query_timeout_s,
            wait_for_worker=wait_for_worker,
            on_waiting=on_waiting,
        )
        self.reader = SessionReader(self.caller, store)

    @property
    def client(self) -> Client:
        """The Temporal client."""
        return self.caller.client

    @property
    def task_queue(self) -> str:
        """The workers' task queue: of new sessions, and of listings."""
        return self.caller.task_queue

    @property
    def store(self) -> ConversationStore | None:
        """The workers' conversation store, if this client was given it."""
        return self.reader.store

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
            _check_config(config)
        if config is None:
            return await self._update(session_id, AgentSession.prompt, update)
        start = WithStartWorkflowOperation(
            AgentSession.run,
            SessionInput(config=config, messages=list(messages)),
            id=session_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            versioning_override=versioning_override(config),
        )
        try:
            return await self.caller.ask(
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
        _check_config(config)
        try:
            await self.client.start_workflow(
                AgentSession.run,
                SessionInput(config=config, messages=list(messages), prompt=content),
                id=session_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                versioning_override=versioning_override(config),
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
        return await self._update(session_id, AgentSession.cancel, CancelInput(reason=reason))

    async def decide(
        self,
        session_id: str,
        interrupt_id: str,
        decision: Literal["approve", "deny"],
        *,
        reason: str | None = None,
        approver: str | None = None,
        key: ApproverKey | None = None,
        always: bool = False,
        always_when: Sequence[Condition] = (),
    ) -> InterruptAck:
        """Approve or deny a pending interrupt (the validated ``decide`` update).

        Args:
            session_id: the session.
            interrupt_id: the pending interrupt (see ``pending``).
            decision: ``approve`` or ``deny``.
            reason: why; the model sees it when denied.
            approver: who decides; checked against the session's approvers.
            key: the approver's private key, to sign with (sessions with approver keys).
            always: approve this call and stand for the tool's later calls in the session
                (a standing approval; see ``policy`` and ``revoke``).
            always_when: tests a later call's input must pass to be covered
                (``keel.workflows.standing.parse_conditions`` reads them from text).

        Raises:
            RequestRejected: the id is unknown or no longer pending, the approver is not
                allowed, or the signature is missing or wrong; nothing was written to the
                session's history.
        """
        update = Decision(
            interrupt_id=interrupt_id,
            decision=decision,
            reason=reason,
            approver=approver,
            always=always,
            always_when=list(always_when),
        )
        what = signed_value(update)

        async def sign() -> None:
            update.signature = await self._signature(
                key, session_id, interrupt_id, "decide", what, reason, approver
            )

        return await self._answer_interrupt(session_id, AgentSession.decide, update, sign)

    async def policy(self, session_id: str) -> list[StandingApproval]:
        """The session's standing approvals: tools whose later calls run without asking."""
        return (await self.pending(session_id)).standing

    async def revoke(self, session_id: str, tool: str, *, by: str | None = None) -> RevokeAck:
        """End a tool's standing approval; its next call asks a person again.

        Raises:
            RequestRejected: the tool has no standing approval, or ``by`` is not an approver.
        """
        return await self._update(session_id, AgentSession.revoke, RevokeInput(tool=tool, by=by))

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
        update = Answer(interrupt_id=interrupt_id, value=value, responder=responder)

        async def sign() -> None:
            update.signature = await self._signature(
                key, session_id, interrupt_id, "respond", value, None, responder
            )

        return await self._answer_interrupt(session_id, AgentSession.respond, update, sign)

    async def steer(self, session_id: str, text: str) -> SteerAck:
        """Add guidance that the running turn's next model call sees.

        Raises:
            RequestRejected: no turn is running, or the text is empty.
        """
        return await self._update(session_id, AgentSession.steer, SteerInput(text=text))

    async def close(self, session_id: str, reason: str = "closed by user") -> None:
        """Ask the session to finish its queued turns and end."""
        _within_limits(CloseInput(reason=reason))
        await self.caller.call(
            session_id,
            self.handle(session_id).signal(AgentSession.close, CloseInput(reason=reason)),
        )

    # Client-side tools (``@tool(runs_on="client")``): see ``keel.worker.client.client_tools``.

    async def serve_tools(
        self,
        session_id: str,
        modules: Sequence[str | ModuleType],
        *,
        poll_s: float = 0.5,
        client: str | None = None,
        stop_after: int | None = None,
        on_call: Callable[[ServedCall], None] | None = None,
    ) -> int:
        """Run the session's calls of client-side tools in this process, until it ends.

        What ``keel attach SESSION --tools MODULE`` does: ask the session for waiting calls,
        run those of the tools ``modules`` define as ``@tool(runs_on="client")``, and deliver
        each result (``tool_result``). Cancel the task to stop; the calls left wait for the
        next client. See ``ToolServer.serve``.

        Returns:
            How many calls were served (once the session ended, or ``stop_after`` were).
        """
        return await ToolServer(self.caller).serve(
            session_id,
            modules,
            poll_s=poll_s,
            client=client,
            stop_after=stop_after,
            on_call=on_call,
        )

    async def client_calls(self, session_id: str) -> list[ClientCall]:
        """The calls of client-side tools that wait for a client, oldest first."""
        return await ToolServer(self.caller).waiting(session_id)

    async def tool_result(
        self,
        session_id: str,
        call_id: str,
        idempotency_key: str,
        *,
        output: Any = None,
        error: str | None = None,
        client: str | None = None,
        update_id: str | None = None,
    ) -> ClientResultAck:
        """Deliver a client-side tool's result (the validated ``tool_result`` update).

        Raises:
            RequestRejected: the call is unknown, ended or timed out, the key is not the
                call's, or the result is not JSON or too large; nothing was written to the
                session's history. See ``ToolServer.deliver``.
        """
        return await ToolServer(self.caller).deliver(
            session_id,
            call_id,
            idempotency_key,
            output=output,
            error=error,
            client=client,
            update_id=update_id,
        )

    async def _update(
        self, session_id: str, update: UpdateMethodMultiParam[[AgentSession, P], T], arg: P
    ) -> T:
        """Send an update to the session and wait for a worker's answer.

        An input over a limit (``keel.workflows.limits``) is refused here, as the session
        would refuse it, before it is sent.
        """
        _within_limits(arg)
        return await self.caller.ask(
            session_id,
            lambda: self.handle(session_id).execute_update(update, arg),
            query=False,
        )

    async def _answer_interrupt(
        self,
        session_id: str,
        update: UpdateMethodMultiParam[[AgentSession, P], InterruptAck],
        arg: P,
        sign: Callable[[], Awaitable[None]],
    ) -> InterruptAck:
        """``decide`` and ``respond``: the update, sent again while its interrupt is not there yet.

        ``sign`` signs ``arg`` before each try, for the interrupt as the session shows it
        then. See ``_SETTLE_DELAYS_S``.
        """

        async def send() -> InterruptAck:
            await sign()
            return await self._update(session_id, update, arg)

        return await _settling(send)

    async def _signature(
        self,
        key: ApproverKey | None,
        session_id: str,
        interrupt_id: str,
        kind: Literal["decide", "respond"],
        what: Any,
        reason: str | None,
        who: str | None,
    ) -> str | None:
        """The approver's signature for the interrupt as the session shows it; None without a key.

        Signed over what the session shows now (its tool, input and signing version) and this
        client's namespace. An interrupt the session does not show as pending gets no
        signature: the session refuses the request for that reason (unknown, or decided).
        """
        if key is None:
            return None
        shown = await self.pending(session_id)
        interrupt = next((i for i in shown.interrupts if i.id == interrupt_id), None)
        if interrupt is None:
            return None
        return key.sign_for(
            interrupt,
            namespace=self.client.namespace,
            session_id=session_id,
            kind=kind,
            what=what,
            reason=reason,
            approver=who,
        )

    # What reads a session, without writing: the caller's and the reader's.

    async def exists(self, session_id: str) -> bool:
        """Whether a session with this id exists (running or not); see ``SessionCaller``."""
        return await self.caller.exists(session_id)

    async def status(self, session_id: str) -> WorkflowExecutionStatus | None:
        """The Temporal status of the session's workflow; None when there is no such session."""
        return await self.caller.status(session_id)

    async def session_task_queue(self, session_id: str) -> str:
        """The task queue a session's workflow runs on (this client's for a new session)."""
        return await self.caller.session_task_queue(session_id)

    async def check_open(self, session_id: str) -> None:
        """Raise ``SessionNotFound`` or ``SessionClosed`` unless the session runs."""
        await self.caller.check_open(session_id)

    async def check_worker(self, session_id: str) -> None:
        """Raise ``NoWorker`` when Temporal knows of no worker on the session's task queue."""
        await self.caller.check_worker(session_id)

    async def task_failure(self, session_id: str) -> str | None:
        """Why the session's workflow task keeps failing, if it has failed more than once."""
        return await self.caller.task_failure(session_id)

    def handle(self, session_id: str) -> WorkflowHandle[AgentSession, object]:
        """The workflow handle of a session."""
        return self.reader.handle(session_id)

    async def config(self, session_id: str) -> SessionConfig:
        """The configuration a session was started with; see ``SessionReader.config``."""
        return await self.reader.config(session_id)

    async def turn(self, session_id: str, turn_id: int) -> TurnRecord:
        """One turn's current record."""
        return await self.reader.turn(session_id, turn_id)

    async def state(
        self, session_id: str, *, events_since: int = 0, include_messages: bool = True
    ) -> SessionState:
        """The session's conversation, turns, usage and events; see ``SessionReader.state``."""
        return await self.reader.state(
            session_id, events_since=events_since, include_messages=include_messages
        )

    async def pending(self, session_id: str) -> PendingView:
        """What the running turn holds outside the conversation."""
        return await self.reader.pending(session_id)

    async def event_count(self, session_id: str) -> int:
        """How many events the session's log holds; the ``since`` to follow only new ones."""
        return await self.reader.event_count(session_id)

    def snapshots(
        self,
        session_id: str,
        since: int = 0,
        *,
        poll_s: float = 0.2,
        stop: Callable[[SessionState], bool] | None = None,
    ) -> AsyncIterator[SessionState]:
        """Follow a session's state (without messages); see ``SessionReader.snapshots``."""
        return self.reader.snapshots(session_id, since, poll_s=poll_s, stop=stop)

    def events(
        self,
        session_id: str,
        since: int = 0,
        *,
        poll_s: float = 0.2,
        stop: Callable[[SessionState], bool] | None = None,
    ) -> AsyncIterator[Event]:
        """Follow a session's event log, new events in order; see ``SessionReader.events``."""
        return self.reader.events(session_id, since, poll_s=poll_s, stop=stop)

    async def model_stream(self, session_id: str) -> ModelStream | None:
        """The text the running model call has streamed so far, from its last heartbeat."""
        return await self.reader.model_stream(session_id)

    def model_text(self, session_id: str, *, poll_s: float = 0.2) -> AsyncIterator[TextChunk]:
        """Follow the text the session's model calls stream; see ``SessionReader.model_text``."""
        return self.reader.model_text(session_id, poll_s=poll_s)

    async def streamed_text(self, session_id: str) -> tuple[int, str] | None:
        """``(text_chars, text tail)`` of the running model call; None when none runs."""
        return await self.reader.streamed_text(session_id)

    async def list_sessions(
        self, *, limit: int = 50, query_timeout_s: float = 2.0
    ) -> list[SessionSummary]:
        """Sessions on this client's task queue, newest first; see ``SessionReader``."""
        return await self.reader.list_sessions(limit=limit, query_timeout_s=query_timeout_s)


# A query can show an interrupt before the workflow task that opens it has run: it replays the
# events the server has, the model call's result among them, while the task that will process
# that result is still waiting. A decision sent at once joins that task, and Temporal validates
# it before the result, so the interrupt is not there yet. Rejected updates write nothing, so
# the same request is sent again, a few times, over about 1.5 s.
_SETTLE_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8)


def _check_config(config: SessionConfig, where: str = "") -> None:
    """Refuse before the session starts what its worker would refuse.

    A model spec its provider does not take (``ModelSpecError``: an unknown provider or
    option, a value out of range), a schema the model activity would refuse.

    Raises:
        RequestRejected: naming the setting (``model``, ``judge_model``, the sub-agent).
    """
    for key, spec in (("model", config.model), ("judge_model", config.judge_model)):
        try:
            if spec is not None:
                check_model_spec(spec)
        except ModelSpecError as err:
            raise RequestRejected(f"{where}{key}: {err}", kind=type(err).__name__) from err
    try:
        if config.output_schema is not None:
            check_output_schema(config.output_schema)
    except OutputSchemaError as err:
        raise RequestRejected(f"{where}{err}") from err
    for name, agent in config.agents.items():
        _check_config(agent.config, f"{where}sub-agent {name}: ")


def _within_limits(value: object) -> None:
    """Refuse an input over a limit before it is sent (``RequestRejected``, as the session)."""
    try:
        check_input(value)
    except InputRejected as err:
        raise RequestRejected(str(err), kind=InputRejected.__name__) from err


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
