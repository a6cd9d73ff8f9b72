"""``AgentSession``: one durable conversation, run as a Temporal workflow.

Each turn is a series of cycles. A cycle always starts with a model call (S2); tool uses are
taken from that activity's result only (S1), run as activities in parallel (those that need
approval once a human approved them, S4), and the assistant message is appended together with
the tool results only once every tool has finished, so the conversation never holds a toolUse
without its toolResult (S5).

History stays linear: model calls get the stored prefix by reference plus the messages not
yet stored, and the session continues-as-new at safe points (between turns, between cycles,
and while only approvals are pending), carrying references rather than the conversation.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.approvals import denial_text, needs_approval
    from workflows.boundary import InputRejected, normalise_history, validate_prompt
    from workflows.contracts import (
        DescribeToolsInput,
        DescribeToolsResult,
        Interrupt,
        InterruptKind,
        ModelRequest,
        ModelResponse,
        PendingCycle,
        PendingView,
        QueuedPrompt,
        SessionInput,
        SessionResult,
        ToolRequest,
        ToolResponse,
        ToolSpec,
        TurnRecord,
    )
    from workflows.cycle import (
        COMPLETING_STOP_REASONS,
        MAX_TOKENS_ERROR,
        close_unexecuted,
        id_conflicts,
        results_message,
    )
    from workflows.handlers import Queued, SessionHandlers
    from workflows.hooks import judge
    from workflows.ledger import Ledger
    from workflows.messages import (
        ContentBlock,
        Message,
        ToolResult,
        ToolResultContent,
        ToolUse,
        text_block,
        tool_uses,
    )
    from workflows.policies import (
        DESCRIBE_RETRY,
        DESCRIBE_START_TO_CLOSE,
        DESCRIBE_TOOLS_ACTIVITY,
        MODEL_ACTIVITY,
        MODEL_HEARTBEAT,
        MODEL_RETRY,
        MODEL_START_TO_CLOSE,
        TOOL_ACTIVITY,
        TOOL_HEARTBEAT,
        TOOL_RETRY,
        tool_start_to_close,
    )

INPUT_REJECTED = "KeelInputRejected"
STEERING_PREFIX = "[guidance from the user while you worked] "
# Patch: the first model call describes the session's tools (``describe_modules``) instead
# of a ``keel.tools.describe`` activity before it. Histories without the marker keep the
# activity, so sessions started before the change replay and carry on as they were.
TOOLS_IN_MODEL_CALL = "keel-tools-in-model-call"
# Patch: opening an interrupt also upserts the memo ``keel_interrupts_opened`` (see
# ``_open_interrupt``); histories without the marker open interrupts without it.
INTERRUPT_MEMO = "keel-interrupt-memo"
# Patch: a decide/respond signal handled in the workflow task that then opens its interrupt
# is applied when it opens (``SessionHandlers._hold``); histories without the marker ignored
# such a signal.
HELD_SIGNALS = "keel-held-signals"
# How many such signals a workflow task keeps, newest first.
HELD_SIGNALS_KEPT = 16


class _TurnCancelled(Exception):
    """Raised inside a turn when a cancel request stops it."""


def _failure_text(err: BaseException) -> str:
    """The innermost message of an activity failure chain."""
    while isinstance(err, ActivityError) and err.cause is not None:
        err = err.cause
    return str(err) or type(err).__name__


def _error(use: ToolUse, text: str) -> ToolResult:
    return ToolResult(
        toolUseId=use.toolUseId, status="error", content=[ToolResultContent(text=text)]
    )


def _now() -> str:
    return workflow.now().isoformat()


@workflow.defn(name="AgentSession")
class AgentSession(SessionHandlers):
    """A durable agent conversation; the workflow id is the session id."""

    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        """Set up state from the start input, or from the previous run's carried state."""
        self._config = input.config
        self._init_error: str | None = None
        self._queue: deque[Queued] = deque()
        self._tools: list[ToolSpec] | None = None
        self._current: TurnRecord | None = None
        self._cycle: PendingCycle | None = None
        self._pending = PendingView()
        self._model_call: workflow.ActivityHandle[ModelResponse] | None = None
        self._tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]] = {}
        self._cancel_reason: str | None = None
        self._steering: list[str] = []
        self._closing = False
        self._held = deque(maxlen=HELD_SIGNALS_KEPT)
        self._closed = False
        self._continuing = False
        self._tools_digest: str | None = None
        self._prompt_updates = {}
        self._update_acks = {}
        carried = input.carried
        if carried is not None and workflow.info().continued_run_id is None:
            # S1: carried state (a parked cycle, queued prompts) is trusted only when this
            # session's previous run handed it over; a client cannot forge it at start.
            self._init_error = "carried state is accepted only from continue-as-new"
            self._run_number = 1
            self._ledger = Ledger([], _now)
            return
        if carried is not None:
            self._run_number = carried.run
            self._ledger = Ledger([], _now, carried)
            self._queue.extend(Queued(q.turn_id, q.content) for q in carried.queue)
            self._tools = carried.tools
            self._tools_digest = carried.tools_digest
            self._steering = list(carried.steering)
            self._cancel_reason = carried.cancel_reason
            self._closing = carried.closing
            self._cycle = carried.cycle
            self._prompt_updates = dict(carried.prompt_updates)
            self._update_acks = dict(carried.update_acks)
            if carried.current_turn is not None:
                self._current = self._ledger.turns[carried.current_turn]
            return
        self._run_number = 1
        messages: list[Message] = []
        try:
            messages = normalise_history(input.messages)
        except InputRejected as err:
            self._init_error = f"imported history rejected: {err}"
        self._ledger = Ledger(messages, _now)
        if input.prompt is not None and self._init_error is None:
            try:
                validate_prompt("user", input.prompt)
            except InputRejected as err:
                self._init_error = f"start prompt rejected: {err}"
            else:
                self._enqueue(input.prompt)

    # ----------------------------------------------------------------------------- main loop

    @workflow.run
    async def run(self, input: SessionInput) -> SessionResult:
        """Run queued turns one after another until the session is closed."""
        if self._init_error is not None:
            raise ApplicationError(self._init_error, type=INPUT_REJECTED, non_retryable=True)
        if self._current is not None:  # a turn carried over from the previous run
            await self._continue_turn(self._current)
        while True:
            await workflow.wait_condition(
                lambda: bool(self._queue) or self._closing or self._history_full()
            )
            if self._history_full():
                await self._continue_as_new()
            if not self._queue:
                break
            queued = self._queue.popleft()
            record = self._ledger.turns[queued.turn_id]
            record.status = "running"
            self._cancel_reason = None
            self._ledger.emit("turn_started", turn=record.turn_id)
            self._ledger.add_user_content(record, queued.content)
            await self._continue_turn(record)
        self._closed = True
        self._ledger.emit("session_closed")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return SessionResult(
            session_id=workflow.info().workflow_id,
            turns=len(self._ledger.turns),
            usage=self._ledger.usage,
        )

    async def _continue_turn(self, record: TurnRecord) -> None:
        """Run a turn's cycles, from its start or from where the previous run left it."""
        ledger = self._ledger
        self._current = record
        try:
            if self._tools is None and not workflow.patched(TOOLS_IN_MODEL_CALL):
                # a session started before the patch describes its tools in an activity
                self._tools = await self._describe_tools()
            if self._cycle is not None:
                await self._finish_cycle(record)
            while True:
                self._check_cancel()
                if self._over_budget(record):
                    break
                if self._history_full():
                    await self._continue_as_new()
                if await self._run_cycle(record):
                    break
        except _TurnCancelled:
            ledger.end_turn(record, "cancelled", "cancelled", error=self._cancel_reason)
        except ActivityError as err:
            ledger.end_turn(record, "failed", record.stop_reason, error=_failure_text(err))
        finally:
            if not self._continuing:
                self._current = None
                self._cycle = None
                self._pending = PendingView()
                if self._steering:
                    ledger.emit("steering_dropped", turn=record.turn_id, texts=self._steering)
                    self._steering = []
        if record.error:
            workflow.logger.info(
                "turn %s ended %s: %s", record.turn_id, record.status, record.error
            )

    def _over_budget(self, record: TurnRecord) -> bool:
        """End the turn instead of calling the model past a budget; True when it ended."""
        config, used = self._config, self._ledger.usage.totalTokens
        if config.max_cycles_per_turn is not None and record.cycles >= config.max_cycles_per_turn:
            error = f"turn reached its budget of {config.max_cycles_per_turn} model calls"
            self._ledger.end_turn(record, "failed", "max_cycles", error=error)
            return True
        if config.max_session_tokens is not None and used >= config.max_session_tokens:
            error = f"session used {used} tokens of its budget of {config.max_session_tokens}"
            self._ledger.end_turn(record, "failed", "token_budget", error=error)
            return True
        return False

    async def _run_cycle(self, record: TurnRecord) -> bool:
        """Run one cycle; returns True when the turn has ended."""
        ledger = self._ledger
        record.cycles += 1
        cycle = record.cycles
        response = await self._call_model(record, cycle)
        ledger.add_usage(record, response.usage)
        record.stop_reason = response.stopReason
        ledger.emit(
            "model_called",
            turn=record.turn_id,
            cycle=cycle,
            stop_reason=response.stopReason,
            usage=response.usage.model_dump(),
        )
        message, stop = response.message, response.stopReason
        uses = tool_uses(message)
        if stop == "tool_use" and uses:
            conflicts = id_conflicts(uses, ledger.tool_use_ids)
            if not conflicts:
                self._cycle = PendingCycle(turn_id=record.turn_id, cycle=cycle, message=message)
                await self._finish_cycle(record)
                return False
            ledger.append(record, close_unexecuted(message, "duplicate toolUseId"))
            error = f"model returned duplicate toolUseIds {conflicts}; no tool was run"
            ledger.end_turn(record, "failed", stop, error=error)
            return True
        if stop == "max_tokens":
            ledger.append(record, close_unexecuted(message, "max_tokens reached"))
            ledger.end_turn(record, "failed", "max_tokens", error=MAX_TOKENS_ERROR)
            return True
        ledger.append(record, close_unexecuted(message, f"stop reason {stop}"))
        if stop in COMPLETING_STOP_REASONS or stop == "tool_use":
            if self._steering and stop in ("end_turn", "stop_sequence"):
                # guidance arrived during the last model call: the model must still see it
                self._append_user(record, [])
                return False
            ledger.end_turn(record, "completed", stop)
        else:
            ledger.end_turn(record, "failed", stop, error=f"model stopped with reason {stop!r}")
        return True

    # ----------------------------------------------------------------------------- continue-as-new

    def _history_full(self) -> bool:
        """Whether this run's history is long enough to continue-as-new at a safe point."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._config.continue_as_new_events
            or info.get_current_history_size() >= self._config.continue_as_new_bytes
        )

    async def _continue_as_new(self) -> NoReturn:
        """Hand references and pending state to a new run; nothing a client sent is lost."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._continuing = True
        self._ledger.emit("run_continued", run=self._run_number + 1)
        carried = self._ledger.carry(self._run_number + 1)
        carried.queue = [QueuedPrompt(turn_id=q.turn_id, content=q.content) for q in self._queue]
        carried.current_turn = self._current.turn_id if self._current else None
        carried.cycle = self._cycle
        carried.tools = self._tools
        carried.tools_digest = self._tools_digest
        carried.steering = self._steering
        carried.cancel_reason = self._cancel_reason
        carried.closing = self._closing
        carried.prompt_updates = self._prompt_updates
        carried.update_acks = self._update_acks
        workflow.logger.info(
            "continuing as new: run %s, %s messages", carried.run, self._ledger.message_count
        )
        workflow.continue_as_new(SessionInput(config=self._config, carried=carried))

    # ----------------------------------------------------------------------------- activities

    async def _describe_tools(self) -> list[ToolSpec]:
        result: DescribeToolsResult = await workflow.execute_activity(
            DESCRIBE_TOOLS_ACTIVITY,
            DescribeToolsInput(modules=self._config.tool_modules),
            result_type=DescribeToolsResult,
            start_to_close_timeout=DESCRIBE_START_TO_CLOSE,
            retry_policy=DESCRIBE_RETRY,
        )
        return result.tools

    async def _call_model(self, record: TurnRecord, cycle: int) -> ModelResponse:
        ledger = self._ledger
        sending = len(ledger.messages)
        tail, refs = ledger.model_tail()
        self._model_call = workflow.start_activity(
            MODEL_ACTIVITY,
            ModelRequest(
                session_id=workflow.info().workflow_id,
                turn=record.turn_id,
                cycle=cycle,
                model=self._config.model,
                system=self._config.system,
                prefix=ledger.stored,
                messages=tail,
                result_refs=refs,
                tools_digest=self._tools_digest,
                # Without a digest of the session's specs (a new session, or one whose
                # previous run did not carry it), the activity describes them again: the
                # workflow keeps only their terms, never what the model must see.
                describe_modules=self._config.tool_modules if self._tools_digest is None else None,
                inference=self._config.inference,
                context_messages=self._config.context_messages,
            ),
            result_type=ModelResponse,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            heartbeat_timeout=MODEL_HEARTBEAT,
            retry_policy=MODEL_RETRY,
        )
        try:
            response = await self._model_call
        except ActivityError:
            self._check_cancel()
            raise
        finally:
            self._model_call = None
        if response.stored is not None:
            ledger.mark_stored(response.stored, sending)
        self._tools_digest = response.tools_digest
        if self._tools is None:  # this call described the session's tools
            self._tools = response.tools or []
        return response

    async def _finish_cycle(self, record: TurnRecord) -> None:
        """Run the pending cycle's tools, then append the message with its results (S5).

        While only approvals are pending and the history is full, the session continues-as-
        new here, carrying the parked message, the finished results and the interrupts.
        """
        pending = self._cycle
        assert pending is not None
        uses = tool_uses(pending.message)
        todo = [u for u in uses if u.toolUseId not in pending.results]
        self._pending = PendingView(turn_id=record.turn_id, message=pending.message, running=todo)
        tasks = [asyncio.create_task(self._resolve_tool(record, pending, u)) for u in todo]
        await workflow.wait_condition(
            lambda: all(t.done() for t in tasks) or self._can_park_for_approval()
        )
        if not all(t.done() for t in tasks):
            await self._continue_as_new()
        for task in tasks:
            task.result()
        self._ledger.append(record, pending.message)
        self._ledger.result_refs.update(pending.digests)
        self._append_user(record, results_message(uses, pending.results).content)
        self._cycle = None
        self._pending = PendingView(turn_id=record.turn_id)
        self._check_cancel()

    def _can_park_for_approval(self) -> bool:
        """Safe to continue-as-new mid-cycle: no tool in flight, only humans awaited."""
        return (
            not self._tool_calls
            and bool(self._ledger.pending_interrupts())
            and self._cancel_reason is None
            and self._history_full()
        )

    def _append_user(self, record: TurnRecord, content: list[ContentBlock]) -> None:
        """Append the user message of a safe point: tool results, then queued guidance."""
        if self._steering:
            content = [*content, *(text_block(STEERING_PREFIX + t) for t in self._steering)]
            self._ledger.emit("steering_added", turn=record.turn_id, count=len(self._steering))
            self._steering = []
        self._ledger.append(record, Message(role="user", content=content))

    async def _resolve_tool(self, record: TurnRecord, pending: PendingCycle, use: ToolUse) -> None:
        """Produce one tool use's result: run it, or say why it did not run.

        The order of gates: the tool must exist, the turn must not be cancelled, the
        session's policy must not deny it, and a human must approve it when the tool, the
        session or the policy asks for that. A tool that asks a question is run again with
        the answer, as often as it asks.
        """
        spec = next((t for t in self._tools or [] if t.name == use.name), None)
        verdict = judge(self._config.policy, use)
        if spec is None:
            known = ", ".join(t.name for t in self._tools or []) or "none"
            result = _error(use, f"unknown tool {use.name!r}; this session has: {known}")
        elif self._cancel_reason is not None:
            result = _error(use, f"tool was not run: {self._cancel_reason}")
        elif verdict.action == "deny":
            result = _error(use, f"tool use denied by the session's policy: {verdict.reason}")
        elif (needs_approval(spec, self._config) or verdict.action == "approve") and (
            refused := await self._approval(record, use, verdict.reason)
        ).status != "approved":
            result = _error(use, denial_text(refused))
        else:
            result = await self._run_until_answered(record, pending, use, spec)
        pending.results[use.toolUseId] = result
        self._pending.running = [u for u in self._pending.running if u.toolUseId != use.toolUseId]
        self._ledger.emit(
            "tool_finished",
            turn=record.turn_id,
            cycle=pending.cycle,
            tool=use.name,
            id=use.toolUseId,
            status=result.status,
        )

    async def _run_until_answered(
        self, record: TurnRecord, pending: PendingCycle, use: ToolUse, spec: ToolSpec
    ) -> ToolResult:
        """Run a tool; while it asks questions, wait for each answer and run it again."""
        answers = pending.answers.setdefault(use.toolUseId, {})
        while True:
            question = self._open_interrupt_of(use, "question")
            if question is None:  # nothing carried over from the previous run: run the tool
                self._ledger.emit(
                    "tool_started",
                    turn=record.turn_id,
                    cycle=pending.cycle,
                    tool=use.name,
                    id=use.toolUseId,
                )
                response = await self._execute_tool(use, spec, answers)
                if response.result is not None:
                    if response.digest is not None:
                        pending.digests[use.toolUseId] = response.digest
                    return response.result
                assert response.question is not None
                question = self._open_interrupt(
                    record,
                    use,
                    kind="question",
                    name=response.question.name,
                    reason=response.question.reason or f"tool {use.name!r} asks a question",
                )
            await self._wait_for_human(question)
            if question.status != "answered":
                return _error(use, denial_text(question))
            answers[question.name] = question.response

    def _open_interrupt_of(self, use: ToolUse, kind: str) -> Interrupt | None:
        """The latest interrupt of a kind for a tool use, unless already acted on."""
        for interrupt in reversed(self._ledger.interrupts.values()):
            if interrupt.tool_use.toolUseId == use.toolUseId and interrupt.kind == kind:
                if kind == "question" and interrupt.status == "answered":
                    return None  # its answer is in the pending cycle's answers
                return interrupt
        return None

    def _open_interrupt(
        self, record: TurnRecord, use: ToolUse, *, kind: InterruptKind, name: str, reason: str
    ) -> Interrupt:
        timeout_s = self._config.approval_timeout_s
        expires = workflow.now() + timedelta(seconds=timeout_s) if timeout_s else None
        interrupt = Interrupt(
            id=str(workflow.uuid4()),
            kind=kind,
            tool_use=use,
            name=name,
            reason=reason,
            turn=record.turn_id,
            expires_at=expires.isoformat() if expires else None,
        )
        self._ledger.open_interrupt(record, interrupt)
        if workflow.patched(INTERRUPT_MEMO):
            # A workflow task that only opens interrupts would complete with no command, and
            # on replay after a cache miss Temporal hands its events to the next task, with
            # any decide/respond update of that task validated first: the interrupt would
            # look unknown. A memo upsert is a command, so the task stands on its own.
            workflow.upsert_memo({"keel_interrupts_opened": len(self._ledger.interrupts)})
        held = self._take_held(interrupt.id)
        if held is not None and workflow.patched(HELD_SIGNALS):
            self._apply_held(held)
        return interrupt

    async def _approval(self, record: TurnRecord, use: ToolUse, why: str | None) -> Interrupt:
        """Park the tool use behind an approval interrupt until a human decides (S4).

        An interrupt carried over from the previous run is waited on (or acted on, if it was
        decided during the switch) rather than created again.
        """
        interrupt = self._open_interrupt_of(use, "approval") or self._open_interrupt(
            record,
            use,
            kind="approval",
            name=use.name,
            reason=why or f"tool {use.name!r} requires approval",
        )
        await self._wait_for_human(interrupt)
        return interrupt

    async def _wait_for_human(self, interrupt: Interrupt) -> None:
        """Wait until a pending interrupt is decided, answered, timed out or cancelled."""
        self._pending.interrupts = self._ledger.pending_interrupts(interrupt.turn)
        if interrupt.status == "pending":
            remaining = None
            if interrupt.expires_at is not None:
                left = datetime.fromisoformat(interrupt.expires_at) - workflow.now()
                remaining = max(left, timedelta(milliseconds=1))
            try:
                await workflow.wait_condition(
                    lambda: interrupt.status != "pending" or self._cancel_reason is not None,
                    timeout=remaining,
                    timeout_summary=f"{interrupt.kind} timeout for {interrupt.tool_use.name}",
                )
            except TimeoutError:
                timeout_s = self._config.approval_timeout_s or 0
                self._ledger.close_interrupt(
                    interrupt, "timed_out", reason=f"no decision within {timeout_s:g} s"
                )
            if interrupt.status == "pending":  # the turn was cancelled while it waited
                self._ledger.close_interrupt(interrupt, "cancelled", reason=self._cancel_reason)
        self._pending.interrupts = self._ledger.pending_interrupts(interrupt.turn)

    async def _execute_tool(
        self, use: ToolUse, spec: ToolSpec, answers: dict[str, Any]
    ) -> ToolResponse:
        session_id = workflow.info().workflow_id
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            ToolRequest(
                session_id=session_id,
                tool_use=use,
                idempotency_key=f"{session_id}/{use.toolUseId}",
                timeout_s=spec.timeout_s,
                answers=answers,
            ),
            result_type=ToolResponse,
            start_to_close_timeout=tool_start_to_close(spec.timeout_s),
            heartbeat_timeout=TOOL_HEARTBEAT,
            retry_policy=TOOL_RETRY,
        )
        self._tool_calls[use.toolUseId] = handle
        try:
            response: ToolResponse = await handle
            return response
        except ActivityError as err:
            if self._cancel_reason is not None:
                text = f"tool was cancelled: {self._cancel_reason}"
            else:
                text = f"tool {use.name!r} failed: {_failure_text(err)}"
            return ToolResponse(result=_error(use, text))
        finally:
            del self._tool_calls[use.toolUseId]

    def _check_cancel(self) -> None:
        if self._cancel_reason is not None:
            raise _TurnCancelled()
