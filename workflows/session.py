"""``AgentSession``: one durable conversation, run as a Temporal workflow.

Each turn is a series of cycles. A cycle always starts with a model call (S2); tool uses are
taken from that activity's result only (S1), run as activities in parallel (those that need
approval once a human approved them, S4), and the assistant message is appended together with
the tool results only once every tool has finished, so the conversation never holds a toolUse
without its toolResult (S5).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.approvals import check_decision, denial_text, needs_approval
    from workflows.boundary import (
        InputRejected,
        normalise_history,
        validate_prompt,
    )
    from workflows.contracts import (
        CancelAck,
        CancelInput,
        CloseInput,
        Decision,
        DecisionAck,
        DescribeToolsInput,
        DescribeToolsResult,
        Interrupt,
        InterruptStatus,
        ModelRequest,
        ModelResponse,
        PendingView,
        PromptAck,
        PromptInput,
        SessionInput,
        SessionResult,
        SessionState,
        StateQuery,
        SteerAck,
        SteerInput,
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


class _TurnCancelled(Exception):
    """Raised inside a turn when a cancel request stops it."""


@dataclass
class _Queued:
    turn_id: int
    content: list[ContentBlock]


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
class AgentSession:
    """A durable agent conversation; the workflow id is the session id."""

    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        """Set up state from the start input; rejected input fails the run in ``run``."""
        self._config = input.config
        self._init_error: str | None = None
        messages: list[Message] = []
        try:
            messages = normalise_history(input.messages)
        except InputRejected as err:
            self._init_error = f"imported history rejected: {err}"
        self._ledger = Ledger(messages, _now)
        self._queue: deque[_Queued] = deque()
        self._tools: list[ToolSpec] | None = None
        self._current: TurnRecord | None = None
        self._pending = PendingView()
        self._model_call: workflow.ActivityHandle[ModelResponse] | None = None
        self._tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]] = {}
        self._cancel_reason: str | None = None
        self._steering: list[str] = []
        self._closing = False
        self._closed = False
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
        while True:
            await workflow.wait_condition(lambda: bool(self._queue) or self._closing)
            if not self._queue:
                break
            await self._run_turn(self._queue.popleft())
        self._closed = True
        self._ledger.emit("session_closed")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return SessionResult(
            session_id=workflow.info().workflow_id,
            turns=len(self._ledger.turns),
            usage=self._ledger.usage,
        )

    async def _run_turn(self, queued: _Queued) -> None:
        ledger = self._ledger
        record = ledger.turns[queued.turn_id]
        record.status = "running"
        self._current = record
        self._cancel_reason = None
        ledger.emit("turn_started", turn=record.turn_id)
        ledger.add_user_content(record, queued.content)
        try:
            if self._tools is None:
                self._tools = await self._describe_tools()
            while True:
                self._check_cancel()
                if self._over_budget(record) or await self._cycle(record):
                    break
        except _TurnCancelled:
            ledger.end_turn(record, "cancelled", "cancelled", error=self._cancel_reason)
        except ActivityError as err:
            ledger.end_turn(record, "failed", record.stop_reason, error=_failure_text(err))
        finally:
            self._current = None
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

    async def _cycle(self, record: TurnRecord) -> bool:
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
            conflicts = id_conflicts(uses, ledger.messages)
            if not conflicts:
                await self._run_tools(record, cycle, message, uses)
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
        self._model_call = workflow.start_activity(
            MODEL_ACTIVITY,
            ModelRequest(
                session_id=workflow.info().workflow_id,
                turn=record.turn_id,
                cycle=cycle,
                model=self._config.model,
                system=self._config.system,
                messages=self._ledger.messages,
                tools=self._tools or [],
                inference=self._config.inference,
            ),
            result_type=ModelResponse,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            heartbeat_timeout=MODEL_HEARTBEAT,
            retry_policy=MODEL_RETRY,
            summary=f"model call {cycle}",
        )
        try:
            return await self._model_call
        except ActivityError:
            self._check_cancel()
            raise
        finally:
            self._model_call = None

    async def _run_tools(
        self, record: TurnRecord, cycle: int, message: Message, uses: list[ToolUse]
    ) -> None:
        """Run the tools of one assistant message, then append it with its results (S5)."""
        self._pending = PendingView(turn_id=record.turn_id, message=message, running=list(uses))
        results = await asyncio.gather(*(self._run_tool(record, cycle, u) for u in uses))
        self._ledger.append(record, message)
        by_id = {r.toolUseId: r for r in results}
        self._append_user(record, results_message(uses, by_id).content)
        self._pending = PendingView(turn_id=record.turn_id)
        self._check_cancel()

    def _append_user(self, record: TurnRecord, content: list[ContentBlock]) -> None:
        """Append the user message of a safe point: tool results, then queued guidance."""
        if self._steering:
            content = [*content, *(text_block(STEERING_PREFIX + t) for t in self._steering)]
            self._ledger.emit("steering_added", turn=record.turn_id, count=len(self._steering))
            self._steering = []
        self._ledger.append(record, Message(role="user", content=content))

    async def _run_tool(self, record: TurnRecord, cycle: int, use: ToolUse) -> ToolResult:
        spec = next((t for t in self._tools or [] if t.name == use.name), None)
        if spec is None:
            known = ", ".join(t.name for t in self._tools or []) or "none"
            result = _error(use, f"unknown tool {use.name!r}; this session has: {known}")
        elif self._cancel_reason is not None:
            result = _error(use, f"tool was not run: {self._cancel_reason}")
        elif (
            needs_approval(spec, self._config)
            and (refused := await self._approval(record, use)).status != "approved"
        ):
            result = _error(use, denial_text(refused))
        else:
            self._ledger.emit(
                "tool_started", turn=record.turn_id, cycle=cycle, tool=use.name, id=use.toolUseId
            )
            result = await self._execute_tool(use, spec)
        self._pending.running = [u for u in self._pending.running if u.toolUseId != use.toolUseId]
        self._ledger.emit(
            "tool_finished",
            turn=record.turn_id,
            cycle=cycle,
            tool=use.name,
            id=use.toolUseId,
            status=result.status,
        )
        return result

    async def _approval(self, record: TurnRecord, use: ToolUse) -> Interrupt:
        """Park the tool use behind an interrupt until a human decides (S4)."""
        interrupt = Interrupt(
            id=str(workflow.uuid4()),
            tool_use=use,
            name=use.name,
            reason=f"tool {use.name!r} requires approval",
            turn=record.turn_id,
        )
        self._ledger.open_interrupt(record, interrupt)
        self._pending.interrupts = self._ledger.pending_interrupts(record.turn_id)
        timeout_s = self._config.approval_timeout_s
        try:
            await workflow.wait_condition(
                lambda: interrupt.status != "pending" or self._cancel_reason is not None,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"approval timeout for {use.name}",
            )
        except TimeoutError:
            self._ledger.close_interrupt(
                interrupt, "timed_out", reason=f"no decision within {timeout_s:g} s"
            )
        if interrupt.status == "pending":  # the turn was cancelled while it waited
            self._ledger.close_interrupt(interrupt, "cancelled", reason=self._cancel_reason)
        self._pending.interrupts = self._ledger.pending_interrupts(record.turn_id)
        return interrupt

    async def _execute_tool(self, use: ToolUse, spec: ToolSpec) -> ToolResult:
        session_id = workflow.info().workflow_id
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            ToolRequest(
                session_id=session_id,
                tool_use=use,
                idempotency_key=f"{session_id}/{use.toolUseId}",
                timeout_s=spec.timeout_s,
            ),
            result_type=ToolResponse,
            start_to_close_timeout=tool_start_to_close(spec.timeout_s),
            heartbeat_timeout=TOOL_HEARTBEAT,
            retry_policy=TOOL_RETRY,
            summary=f"tool: {use.name}",
        )
        self._tool_calls[use.toolUseId] = handle
        try:
            response: ToolResponse = await handle
            return response.result
        except ActivityError as err:
            if self._cancel_reason is not None:
                return _error(use, f"tool was cancelled: {self._cancel_reason}")
            return _error(use, f"tool {use.name!r} failed: {_failure_text(err)}")
        finally:
            del self._tool_calls[use.toolUseId]

    # ----------------------------------------------------------------------------- bookkeeping

    def _enqueue(self, content: list[ContentBlock]) -> PromptAck:
        record = self._ledger.new_turn()
        self._queue.append(_Queued(turn_id=record.turn_id, content=content))
        return PromptAck(turn_id=record.turn_id, queued_behind=len(self._queue) - 1)

    def _check_cancel(self) -> None:
        if self._cancel_reason is not None:
            raise _TurnCancelled()

    # ----------------------------------------------------------------------------- messages

    @workflow.update
    def prompt(self, input: PromptInput) -> PromptAck:
        """Queue a prompt as a new turn; answers with its turn id."""
        return self._enqueue(input.content)

    @prompt.validator
    def _validate_prompt(self, input: PromptInput) -> None:
        if self._closing:
            raise InputRejected("session is closing; it takes no more prompts")
        budget, used = self._config.max_session_tokens, self._ledger.usage.totalTokens
        if budget is not None and used >= budget:
            raise InputRejected(f"session used {used} tokens of its budget of {budget}")
        validate_prompt(input.role, input.content)

    @workflow.update
    def decide(self, input: Decision) -> DecisionAck:
        """Approve or deny a pending interrupt; the tool input stays the model's."""
        interrupt = check_decision(self._ledger.interrupts, input, self._config)
        self._apply_decision(interrupt, input)
        return DecisionAck(
            interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status
        )

    @decide.validator
    def _validate_decide(self, input: Decision) -> None:
        check_decision(self._ledger.interrupts, input, self._config)

    @workflow.signal(name="decide")
    def decide_signal(self, input: Decision) -> None:
        """Fire-and-forget ``decide``: the same checks; an invalid one is logged and ignored."""
        try:
            interrupt = check_decision(self._ledger.interrupts, input, self._config)
        except InputRejected as err:
            workflow.logger.warning("ignored decide signal: %s", err)
            return
        self._apply_decision(interrupt, input)

    def _apply_decision(self, interrupt: Interrupt, decision: Decision) -> None:
        status: InterruptStatus = "approved" if decision.decision == "approve" else "denied"
        self._ledger.close_interrupt(interrupt, status, decision.approver, decision.reason)

    @workflow.update
    def steer(self, input: SteerInput) -> SteerAck:
        """Add guidance that the model sees at the next safe point of the running turn."""
        assert self._current is not None  # checked by the validator
        self._steering.append(input.text.strip())
        self._ledger.emit("steering_queued", turn=self._current.turn_id)
        return SteerAck(turn_id=self._current.turn_id)

    @steer.validator
    def _validate_steer(self, input: SteerInput) -> None:
        if self._current is None:
            raise InputRejected("no turn is running to steer; send a prompt instead")
        if self._cancel_reason is not None:
            raise InputRejected(f"turn {self._current.turn_id} is being cancelled")
        if not input.text.strip():
            raise InputRejected("steering text is empty")

    @workflow.update
    def cancel(self, input: CancelInput) -> CancelAck:
        """Stop the running turn at the next step and cancel its model call and tools."""
        assert self._current is not None  # checked by the validator
        self._cancel_reason = input.reason or "cancelled by user"
        if self._model_call is not None:
            self._model_call.cancel()
        for handle in self._tool_calls.values():
            handle.cancel()
        return CancelAck(turn_id=self._current.turn_id)

    @cancel.validator
    def _validate_cancel(self, input: CancelInput) -> None:
        if self._current is None:
            raise InputRejected("no turn is running in this session")
        if self._cancel_reason is not None:
            raise InputRejected(f"turn {self._current.turn_id} is already being cancelled")

    @workflow.signal
    def close(self, input: CloseInput) -> None:
        """Close the session once the running and queued turns have finished."""
        workflow.logger.info("session closing: %s", input.reason)
        self._closing = True

    @workflow.query
    def state(self, input: StateQuery | None = None) -> SessionState:
        """The conversation, turns, usage and events since ``events_since``."""
        q = input or StateQuery()
        ledger = self._ledger
        if self._closed:
            status = "closed"
        elif self._closing:
            status = "closing"
        else:
            status = "running" if self._current is not None else "idle"
        return SessionState(
            session_id=workflow.info().workflow_id,
            status=status,
            config=self._config,
            messages=ledger.messages if q.include_messages else [],
            message_count=len(ledger.messages),
            pending=self._pending,
            queued=[item.turn_id for item in self._queue],
            turns=list(ledger.turns.values()),
            usage=ledger.usage,
            events=ledger.events[q.events_since :],
            event_count=len(ledger.events),
        )

    @workflow.query
    def pending(self) -> PendingView:
        """The assistant message held outside the conversation, and its open interrupts."""
        return self._pending

    @workflow.query
    def turn(self, turn_id: int) -> TurnRecord:
        """One turn's status and result."""
        record = self._ledger.turns.get(turn_id)
        if record is None:
            raise InputRejected(f"no turn {turn_id} in this session")
        return record
