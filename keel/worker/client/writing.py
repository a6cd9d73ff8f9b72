"""The writing part of the Python API: prompts, turns, guidance, cancel, close.

``SessionWriter`` is a ``SessionReader`` that also changes sessions: it starts them, queues
prompts, waits for turns, steers, cancels and closes. What a person decides (approvals,
answers, standing approvals) is ``SessionDecider``'s (``keel.worker.client.deciding``).
``KeelClient`` is both, by inheritance.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    AutoUpgradeVersioningOverride,
    VersioningOverride,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from keel.activities.models import ModelSpecError, check_model_spec
from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.calls import cancelling, within_limits
from keel.worker.client.errors import RequestRejected
from keel.worker.client.history_watch import HistoryWatch
from keel.worker.client.reading import SessionReader
from keel.worker.client.status_attribute import start_attributes
from keel.workflows.boundary import InputRejected, validate_prompt
from keel.workflows.contracts import (
    CancelAck,
    CancelInput,
    CloseInput,
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
from keel.workflows.turn_waits import (
    TURN_ENDED,
    TURN_SETTLED,
    WAIT_TURN_UPDATE,
    TurnWaitInput,
)

logger = logging.getLogger(__name__)

# Whether ``wait_turn`` first waits by the session's ``wait_turn`` update (tests of the
# history watch turn it off).
WAIT_BY_UPDATE = True
# How late ``wait_turn`` may see a turn that settled in the workflow task that started more
# model calls, tools or judges (the next queued prompt's), when a turn is queued behind it.
WAIT_LAG_S = 5.0


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


class SessionWriter(SessionReader):
    """Changes ``AgentSession`` workflows: starts them, prompts, steers, cancels, closes."""

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
        if config is None:
            return await self._update(session_id, AgentSession.prompt, update)
        check_config(config)
        start = WithStartWorkflowOperation(
            AgentSession.run,
            SessionInput(config=config, messages=list(messages)),
            id=session_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            versioning_override=versioning_override(config),
            search_attributes=await start_attributes(self.client),
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
        check_config(config)
        await self._start_new(
            session_id, SessionInput(config=config, messages=list(messages), prompt=content)
        )
        return PromptAck(turn_id=1, queued_behind=0)

    async def _start_new(
        self, session_id: str, start: SessionInput, task_queue: str | None = None
    ) -> None:
        """Start a session that must not exist yet (nor have existed), without waiting.

        Raises:
            RequestRejected: a session with this id exists (running or closed).
        """
        try:
            await self.client.start_workflow(
                AgentSession.run,
                start,
                id=session_id,
                task_queue=task_queue or self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                versioning_override=versioning_override(start.config),
                search_attributes=await start_attributes(self.client),
            )
        except WorkflowAlreadyStartedError as err:
            raise RequestRejected(f"session {session_id!r} exists already") from err

    async def wait_turn(
        self,
        session_id: str,
        turn_id: int,
        *,
        timeout_s: float | None = None,
        through_interrupts: bool = False,
    ) -> TurnRecord:
        """Wait until a turn has ended or waits for a human.

        Looks at the turn once (the ``turn`` query, which also says whether a worker
        answers); if it has not settled, sends the session's ``wait_turn`` update, which the
        session answers once the turn settled: Temporal holds the request until then, so the
        turn's end is seen as soon as the workflow task that ended it completes, for one
        update (``keel.workflows.turn_waits``). When the session answers early or not at all
        (its run continued as new, an older worker, too many waits, the run ended), the
        history is long-polled instead (``HistoryWatch``: not billed by Temporal Cloud,
        nothing written), with the ``turn`` query (billed) asked only when the history says
        the turn may have settled: when a workflow task ended without starting more of the
        turn's work, or took an update (a prompt may have been queued). While the turn runs,
        it asks whether a turn comes after it; only then is the turn looked at
        ``WAIT_LAG_S`` after each task that started more work (the task that ends it may
        start the next one).

        Args:
            session_id: the session.
            turn_id: the turn, as ``prompt`` answered.
            timeout_s: give up after this long.
            through_interrupts: keep waiting while the turn waits for a human (an approval
                timeout, or a decision sent by someone else, will move it on).

        Raises:
            TimeoutError: ``timeout_s`` passed first.
        """
        return await self._wait_turn(
            session_id, turn_id, timeout_s, through_interrupts=through_interrupts, look=True
        )

    async def _wait_turn(
        self,
        session_id: str,
        turn_id: int,
        timeout_s: float | None,
        *,
        through_interrupts: bool = False,
        look: bool,
    ) -> TurnRecord:
        """``wait_turn``; without ``look``, the update is sent at once (a worker answered)."""
        wanted = TURN_ENDED if through_interrupts else TURN_SETTLED
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        if look:
            record = await self.turn(session_id, turn_id)
            if record.status in wanted:
                return record
        left = None if deadline is None else deadline - loop.time()
        answer = await self._wait_by_update(session_id, turn_id, through_interrupts, left)
        if answer is not None and answer.status in wanted:
            return answer
        async with HistoryWatch(self.client, session_id, lag_s=None) as watch:
            while True:
                record, later = await self._look(session_id, turn_id, queue=watch.lag_s is None)
                if record.status in wanted:
                    return record
                if later:
                    watch.lag_s = WAIT_LAG_S  # the task that ends this turn may start that one
                left = None if deadline is None else deadline - loop.time()
                if not await watch.wait(left):  # False once ``left`` has passed (or was gone)
                    raise TimeoutError(f"turn {turn_id} of {session_id!r} is still {record.status}")

    async def _wait_by_update(
        self, session_id: str, turn_id: int, through_interrupts: bool, left: float | None
    ) -> TurnRecord | None:
        """The turn as the ``wait_turn`` update answers it; None when it did not answer.

        None also when ``left`` passed first: the caller looks once more and says how the
        turn stands.
        """
        if not WAIT_BY_UPDATE or (left is not None and left <= 0):
            return None
        wait = TurnWaitInput(turn_id=turn_id, through_interrupts=through_interrupts)
        call = self.handle(session_id).execute_update(
            WAIT_TURN_UPDATE, wait, result_type=TurnRecord
        )
        try:
            return await (call if left is None else asyncio.wait_for(call, left))
        except (
            TimeoutError,
            RPCError,
            WorkflowUpdateFailedError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
        ) as err:
            if cancelling():  # the caller was cancelled (Ctrl-C): not a wait to go on with
                raise asyncio.CancelledError from None
            logger.debug("session %s did not answer wait_turn: %s", session_id, err)
            return None

    async def _look(self, session_id: str, turn_id: int, *, queue: bool) -> tuple[TurnRecord, bool]:
        """The turn's record and, when ``queue``, whether a turn comes after it: one query.

        With ``queue``, the ``state`` query (no messages, no events) answers both; a ``turn``
        query of a turn that does not exist would fail, encrypted in an encrypted session.
        """
        if not queue:
            return await self.turn(session_id, turn_id), False
        state = await self.state(session_id, events_since=sys.maxsize, include_messages=False)
        record = next((t for t in state.turns if t.turn_id == turn_id), None)
        if record is None:  # not kept (or no such turn): the turn query says which
            record = await self.turn(session_id, turn_id)
        return record, bool(state.queued) or any(t.turn_id > turn_id for t in state.turns)

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
        # a worker answered the prompt: no look first, the wait is sent at once
        return await self._wait_turn(session_id, ack.turn_id, timeout_s, look=False)

    async def cancel(self, session_id: str, reason: str = "cancelled by user") -> CancelAck:
        """Cancel the running turn.

        Raises:
            RequestRejected: no turn is running.
        """
        return await self._update(session_id, AgentSession.cancel, CancelInput(reason=reason))

    async def steer(self, session_id: str, text: str) -> SteerAck:
        """Add guidance that the running turn's next model call sees.

        Raises:
            RequestRejected: no turn is running, or the text is empty.
        """
        return await self._update(session_id, AgentSession.steer, SteerInput(text=text))

    async def close(
        self, session_id: str, reason: str = "closed by user", *, now: bool = False
    ) -> None:
        """Ask the session to end once its running and queued turns have finished.

        Args:
            session_id: the session.
            reason: why, for its log (and, with ``now``, the ended turns' error).
            now: end it now (``keel close``): the running turn is cancelled, with its
                interrupts, and the queued turns are dropped.
        """
        close = CloseInput(reason=reason, now=now)
        within_limits(close)
        await self._call(session_id, self.handle(session_id).signal(AgentSession.close, close))


def check_config(config: SessionConfig, where: str = "") -> None:
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
        check_config(agent.config, f"{where}sub-agent {name}: ")
