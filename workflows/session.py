"""``AgentSession``: one durable conversation, run as a Temporal workflow.

Each turn is a series of cycles. A cycle always starts with a model call (S2); tool uses are
taken from that activity's result only (S1), run as activities in parallel, and the assistant
message is appended together with the tool results only once every tool has finished, so the
conversation never holds a toolUse without its toolResult (S5).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.boundary import (
        InputRejected,
        merge_user_content,
        normalise_history,
        validate_prompt,
    )
    from workflows.contracts import (
        CancelAck,
        CancelInput,
        CloseInput,
        DescribeToolsInput,
        DescribeToolsResult,
        Event,
        EventType,
        ModelRequest,
        ModelResponse,
        PendingView,
        PromptAck,
        PromptInput,
        SessionInput,
        SessionResult,
        SessionState,
        StateQuery,
        ToolRequest,
        ToolResponse,
        ToolSpec,
        TurnRecord,
        TurnStatus,
    )
    from workflows.cycle import (
        COMPLETING_STOP_REASONS,
        MAX_TOKENS_ERROR,
        close_unexecuted,
        id_conflicts,
        results_message,
    )
    from workflows.messages import (
        ContentBlock,
        Message,
        TokenUsage,
        ToolResult,
        ToolResultContent,
        ToolUse,
        tool_uses,
    )
    from workflows.policies import (
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


@workflow.defn(name="AgentSession")
class AgentSession:
    """A durable agent conversation; the workflow id is the session id."""

    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        """Set up state from the start input; rejected input fails the run in ``run``."""
        self._config = input.config
        self._init_error: str | None = None
        self._messages: list[Message] = []
        try:
            self._messages = normalise_history(input.messages)
        except InputRejected as err:
            self._init_error = f"imported history rejected: {err}"
        self._queue: deque[_Queued] = deque()
        self._turns: dict[int, TurnRecord] = {}
        self._events: list[Event] = []
        self._usage = TokenUsage()
        self._tools: list[ToolSpec] | None = None
        self._current: TurnRecord | None = None
        self._pending = PendingView()
        self._model_call: workflow.ActivityHandle[ModelResponse] | None = None
        self._tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]] = {}
        self._cancel_reason: str | None = None
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
        self._emit("session_closed")
        await workflow.wait_condition(workflow.all_handlers_finished)
        return SessionResult(
            session_id=workflow.info().workflow_id, turns=len(self._turns), usage=self._usage
        )

    async def _run_turn(self, queued: _Queued) -> None:
        record = self._turns[queued.turn_id]
        record.status = "running"
        self._current = record
        self._cancel_reason = None
        self._emit("turn_started", turn=record.turn_id)
        merge_user_content(self._messages, queued.content)
        self._emit_message_added(record)
        try:
            if self._tools is None:
                self._tools = await self._describe_tools()
            while True:
                self._check_cancel()
                if await self._cycle(record):
                    break
        except _TurnCancelled:
            self._end_turn(record, "cancelled", "cancelled", error=self._cancel_reason)
        except ActivityError as err:
            self._end_turn(record, "failed", record.stop_reason, error=_failure_text(err))
        finally:
            self._current = None
            self._pending = PendingView()

    async def _cycle(self, record: TurnRecord) -> bool:
        """Run one cycle; returns True when the turn has ended."""
        record.cycles += 1
        cycle = record.cycles
        response = await self._call_model(record, cycle)
        record.usage = record.usage + response.usage
        self._usage = self._usage + response.usage
        record.stop_reason = response.stopReason
        self._emit(
            "model_called",
            turn=record.turn_id,
            cycle=cycle,
            stop_reason=response.stopReason,
            usage=response.usage.model_dump(),
        )
        message = response.message
        uses = tool_uses(message)
        if response.stopReason == "tool_use" and uses:
            conflicts = id_conflicts(uses, self._messages)
            if conflicts:
                self._append(record, close_unexecuted(message, "duplicate toolUseId"))
                self._end_turn(
                    record,
                    "failed",
                    response.stopReason,
                    error=f"model returned duplicate toolUseIds {conflicts}; no tool was run",
                )
                return True
            await self._run_tools(record, cycle, message, uses)
            return False
        if response.stopReason == "max_tokens":
            self._append(record, close_unexecuted(message, "max_tokens reached"))
            self._end_turn(record, "failed", "max_tokens", error=MAX_TOKENS_ERROR)
            return True
        self._append(record, close_unexecuted(message, f"stop reason {response.stopReason}"))
        if response.stopReason in COMPLETING_STOP_REASONS or response.stopReason == "tool_use":
            self._end_turn(record, "completed", response.stopReason)
        else:
            self._end_turn(
                record,
                "failed",
                response.stopReason,
                error=f"model stopped with reason {response.stopReason!r}",
            )
        return True

    # ----------------------------------------------------------------------------- activities

    async def _describe_tools(self) -> list[ToolSpec]:
        result: DescribeToolsResult = await workflow.execute_activity(
            DESCRIBE_TOOLS_ACTIVITY,
            DescribeToolsInput(modules=self._config.tool_modules),
            result_type=DescribeToolsResult,
            start_to_close_timeout=DESCRIBE_START_TO_CLOSE,
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
                messages=self._messages,
                tools=self._tools or [],
                inference=self._config.inference,
            ),
            result_type=ModelResponse,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            heartbeat_timeout=MODEL_HEARTBEAT,
            retry_policy=MODEL_RETRY,
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
        self._append(record, message)
        self._append(record, results_message(uses, {r.toolUseId: r for r in results}))
        self._pending = PendingView(turn_id=record.turn_id)
        self._check_cancel()

    async def _run_tool(self, record: TurnRecord, cycle: int, use: ToolUse) -> ToolResult:
        spec = next((t for t in self._tools or [] if t.name == use.name), None)
        self._emit(
            "tool_started", turn=record.turn_id, cycle=cycle, tool=use.name, id=use.toolUseId
        )
        if spec is None:
            known = ", ".join(t.name for t in self._tools or []) or "none"
            result = _error(use, f"unknown tool {use.name!r}; this session has: {known}")
        elif self._cancel_reason is not None:
            result = _error(use, f"tool was not run: {self._cancel_reason}")
        else:
            result = await self._execute_tool(use, spec)
        self._pending.running = [u for u in self._pending.running if u.toolUseId != use.toolUseId]
        self._emit(
            "tool_finished",
            turn=record.turn_id,
            cycle=cycle,
            tool=use.name,
            id=use.toolUseId,
            status=result.status,
        )
        return result

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
        turn_id = len(self._turns) + 1
        self._turns[turn_id] = TurnRecord(turn_id=turn_id)
        self._queue.append(_Queued(turn_id=turn_id, content=content))
        self._emit("prompt_queued", turn=turn_id)
        return PromptAck(turn_id=turn_id, queued_behind=len(self._queue) - 1)

    def _check_cancel(self) -> None:
        if self._cancel_reason is not None:
            raise _TurnCancelled()

    def _append(self, record: TurnRecord, message: Message) -> None:
        self._messages.append(message)
        if message.role == "assistant":
            record.message = message
        self._emit_message_added(record)

    def _emit_message_added(self, record: TurnRecord) -> None:
        index = len(self._messages) - 1
        self._emit(
            "message_added", turn=record.turn_id, index=index, role=self._messages[index].role
        )

    def _end_turn(
        self,
        record: TurnRecord,
        status: TurnStatus,
        stop_reason: str | None,
        error: str | None = None,
    ) -> None:
        record.status = status
        record.stop_reason = stop_reason
        record.error = error
        self._emit("turn_ended", turn=record.turn_id, status=status, stop_reason=stop_reason)
        if error:
            workflow.logger.info("turn %s ended %s: %s", record.turn_id, status, error)

    def _emit(
        self,
        type_: EventType,
        *,
        turn: int | None = None,
        cycle: int | None = None,
        **detail: object,
    ) -> None:
        self._events.append(
            Event(
                seq=len(self._events) + 1,
                type=type_,
                at=workflow.now().isoformat(),
                turn=turn,
                cycle=cycle,
                detail=detail,
            )
        )

    # ----------------------------------------------------------------------------- messages

    @workflow.update
    def prompt(self, input: PromptInput) -> PromptAck:
        """Queue a prompt as a new turn; answers with its turn id."""
        return self._enqueue(input.content)

    @prompt.validator
    def _validate_prompt(self, input: PromptInput) -> None:
        if self._closing:
            raise InputRejected("session is closing; it takes no more prompts")
        validate_prompt(input.role, input.content)

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
            messages=self._messages if q.include_messages else [],
            message_count=len(self._messages),
            pending=self._pending,
            queued=[item.turn_id for item in self._queue],
            turns=list(self._turns.values()),
            usage=self._usage,
            events=self._events[q.events_since :],
            event_count=len(self._events),
        )

    @workflow.query
    def pending(self) -> PendingView:
        """The assistant message held outside the conversation while its tools run."""
        return self._pending

    @workflow.query
    def turn(self, turn_id: int) -> TurnRecord:
        """One turn's status and result."""
        record = self._turns.get(turn_id)
        if record is None:
            raise InputRejected(f"no turn {turn_id} in this session")
        return record


def _error(use: ToolUse, text: str) -> ToolResult:
    return ToolResult(
        toolUseId=use.toolUseId, status="error", content=[ToolResultContent(text=text)]
    )
