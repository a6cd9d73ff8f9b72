"""``AgentSession``: one durable conversation, run as a Temporal workflow.

Read it top-down as one turn flows: a prompt is queued (``handlers.prompt``) and becomes the
running turn; each cycle of the turn calls the model activity (S2); tool uses are taken from
that activity's result only (S1) and run as tool activities, in parallel, those that need
approval once a person approved them (S4); the assistant message is appended together with
the tool results only once every tool has finished, so the conversation never holds a toolUse
without its toolResult (S5).

All state is the ``Ledger``; continue-as-new hands it whole to the next run, at safe points
(between turns, between cycles, and while only people are awaited).
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import (
        ModelRequest,
        ModelResponse,
        ToolRequest,
        ToolResponse,
    )
    from keel.workflows.activity_options import (
        MODEL_ACTIVITY,
        MODEL_RETRY,
        MODEL_START_TO_CLOSE,
        TOOL_ACTIVITY,
        TOOL_RETRY,
        heartbeat_timeout,
        tool_start_to_close,
    )
    from keel.workflows.approvals import denial_text, needs_approval
    from keel.workflows.boundary import InputRejected, normalise_history, validate_prompt
    from keel.workflows.contracts import (
        Answer,
        Decision,
        Interrupt,
        InterruptKind,
        SessionResult,
        ToolSpec,
        TurnRecord,
    )
    from keel.workflows.current_details import current_details
    from keel.workflows.cycle import (
        COMPLETING_STOP_REASONS,
        MAX_TOKENS_ERROR,
        close_unexecuted,
        id_conflicts,
        results_message,
        stripped,
    )
    from keel.workflows.ledger import Ledger, PendingCycle, SessionInput
    from keel.workflows.messages import (
        ContentBlock,
        Message,
        ToolResult,
        ToolUse,
        error_result,
        text_block,
        tool_uses,
    )
    from keel.workflows.structured import (
        OUTPUT_TOOL,
        accepted_output,
        closing_results,
        output_tool_spec,
        rejection,
    )
    from keel.workflows.sub_agents import SubAgentSessions, sub_agent_specs
    from keel.workflows.tool_policies import judge_all

INPUT_REJECTED = "KeelInputRejected"
STEERING_PREFIX = "[guidance from the user while you worked] "
# decide/respond signals a workflow task keeps for interrupts it may yet open, newest first
HELD_SIGNALS_KEPT = 16


class _TurnCancelled(Exception):
    """Raised inside a turn when a cancel request stops it."""


def _failure_text(err: BaseException) -> str:
    """The innermost message of an activity failure chain."""
    while isinstance(err, ActivityError) and err.cause is not None:
        err = err.cause
    return str(err) or type(err).__name__


@workflow.defn(name="AgentSession")
class AgentSession(SubAgentSessions):
    """A durable agent conversation; the workflow id is the session id."""

    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        """Take the previous run's ledger, or start one from the start input."""
        self._config = input.config
        self._init_error: str | None = None
        # in flight in this run only: never carried
        self._model_call: workflow.ActivityHandle[ModelResponse] | None = None
        self._tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]] = {}
        self._children: dict[str, str] = {}
        self._report_due: set[str] = set()
        self._handing_on: set[str] = set()
        self._forward: list[tuple[str, Decision | Answer]] = []
        self._held = deque(maxlen=HELD_SIGNALS_KEPT)
        self._deliveries = set()
        self._continuing = False
        self._ledger = Ledger()
        if input.carried is not None:
            if workflow.info().continued_run_id is None:
                # S1: carried state (a parked cycle, queued prompts) is trusted only when this
                # session's previous run handed it over; a client cannot forge it at start.
                self._init_error = "carried state is accepted only from continue-as-new"
            else:
                self._ledger = input.carried
            return
        try:
            self._ledger = Ledger.starting_with(normalise_history(input.messages))
        except InputRejected as err:
            self._init_error = f"imported history rejected: {err}"
            return
        if input.prompt is not None:
            try:
                validate_prompt("user", input.prompt)
            except InputRejected as err:
                self._init_error = f"start prompt rejected: {err}"
            else:
                self._ledger.enqueue(input.prompt)
        self._ledger.single_turn = input.single_turn
        self._ledger.parent_session = input.parent_session
        parent = workflow.info().parent
        if input.ancestors and parent is not None and parent.workflow_id == input.ancestors[0]:
            # a signature for an ancestor counts here only in a session an ancestor started
            self._ledger.ancestors = input.ancestors

    # ----------------------------------------------------------------------------- turns

    @workflow.run
    async def run(self, input: SessionInput) -> SessionResult:
        """Run queued turns one after another until the session is closed."""
        if self._init_error is not None:
            raise ApplicationError(self._init_error, type=INPUT_REJECTED, non_retryable=True)
        ledger = self._ledger
        self._post_carried()  # notifications the previous run had not delivered
        if ledger.current is not None:  # a turn carried over from the previous run
            await self._run_turn(ledger.current)
            ledger.closing = ledger.closing or ledger.single_turn
        while True:
            self._show_details()
            await workflow.wait_condition(
                lambda: bool(ledger.queue) or ledger.closing or self._history_full()
            )
            if self._history_full():
                await self._continue_as_new()
            if not ledger.queue:
                break
            await self._run_turn(ledger.start_next_turn())
            ledger.closing = ledger.closing or ledger.single_turn
        ledger.closed = True
        ledger.emit("session_closed")
        self._show_details()
        await self._notifications_delivered()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return SessionResult(
            session_id=workflow.info().workflow_id,
            turns=len(ledger.turns),
            usage=ledger.usage,
            last_turn=ledger.turns[max(ledger.turns)] if ledger.turns else None,
        )

    async def _run_turn(self, record: TurnRecord) -> None:
        """Run a turn's cycles, from its start or from where the previous run left it."""
        ledger = self._ledger
        try:
            if ledger.cycle is not None:
                await self._run_tools(record, ledger.cycle)
            while True:
                self._check_cancel()
                if self._over_budget(record):
                    break
                if self._history_full():
                    await self._continue_as_new()
                if await self._run_cycle(record):
                    break
        except _TurnCancelled:
            ledger.end_turn(record, "cancelled", "cancelled", error=ledger.cancel_reason)
        except ActivityError as err:
            ledger.end_turn(record, "failed", record.stop_reason, error=_failure_text(err))
        finally:
            if not self._continuing:
                ledger.leave_turn()
        if record.error:
            workflow.logger.info(
                "turn %s ended %s: %s", record.turn_id, record.status, record.error
            )
        self._notify_turn_end(record)

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

    # ----------------------------------------------------------------------------- one cycle

    async def _run_cycle(self, record: TurnRecord) -> bool:
        """Call the model and act on its answer; returns True when the turn has ended."""
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
                accepted = accepted_output(uses, response.output_errors)
                if accepted is not None:  # structured output: the turn ends, nothing else runs
                    ledger.append(record, message)
                    results = closing_results(uses, accepted)
                    ledger.append(record, results_message(uses, results))
                    record.output = accepted.input
                    ledger.end_turn(record, "completed", stop)
                    return True
                ledger.cycle = PendingCycle(turn_id=record.turn_id, cycle=cycle, message=message)
                if self._config.output_schema is not None:
                    for use in uses:  # invalid structured output: the model is told why
                        if use.name == OUTPUT_TOOL:
                            ledger.cycle.results[use.toolUseId] = rejection(
                                use, response.output_errors
                            )
                await self._run_tools(record, ledger.cycle)
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
            if ledger.steering and stop in ("end_turn", "stop_sequence"):
                # guidance arrived during the last model call: the model must still see it
                self._append_user(record, [])
                return False
            ledger.end_turn(record, "completed", stop)
        else:
            ledger.end_turn(record, "failed", stop, error=f"model stopped with reason {stop!r}")
        return True

    async def _call_model(self, record: TurnRecord, cycle: int) -> ModelResponse:
        """The model activity: the stored prefix by reference, plus the unstored messages."""
        ledger = self._ledger
        sending = len(ledger.messages)
        tail, refs = ledger.model_tail()
        describing = ledger.tools_digest is None
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
                tools_digest=ledger.tools_digest,
                # Without a digest of the session's specs (its first call), the activity
                # describes them: the workflow keeps only their terms, never what the model
                # must see.
                describe_modules=self._config.tool_modules if describing else None,
                inference=self._config.inference,
                context_messages=self._config.context_messages,
                extra_tools=self._extra_tools() if describing else None,
                output_tool=OUTPUT_TOOL if self._config.output_schema is not None else None,
            ),
            result_type=ModelResponse,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            heartbeat_timeout=heartbeat_timeout(self._config.heartbeat_timeout_s),
            retry_policy=MODEL_RETRY,
        )
        self._show_details()
        try:
            response = await self._model_call
        except ActivityError:
            self._check_cancel()
            raise
        finally:
            self._model_call = None
        if response.stored is not None:
            ledger.mark_stored(response.stored, sending)
        ledger.tools_digest = response.tools_digest
        if ledger.tools is None:  # this call described the session's tools
            ledger.tools = response.tools or []
        return response

    def _extra_tools(self) -> list[ToolSpec] | None:
        """The tools the session itself offers: sub-agents, the structured-output tool."""
        config = self._config
        extra = sub_agent_specs(config.agents)
        if config.output_schema is not None:
            extra.append(output_tool_spec(config.output_schema))
        return extra or None

    async def _run_tools(self, record: TurnRecord, pending: PendingCycle) -> None:
        """Run the cycle's tools, then append the message with its results (S5).

        While only approvals are pending and the history is full, the session continues-as-
        new here, carrying the parked message, the finished results and the interrupts.
        """
        uses = tool_uses(pending.message)
        todo = [u for u in uses if u.toolUseId not in pending.results]
        tasks = [asyncio.create_task(self._resolve_tool(record, pending, u)) for u in todo]
        await workflow.wait_condition(
            lambda: all(t.done() for t in tasks) or self._can_park_for_approval()
        )
        if not all(t.done() for t in tasks):
            await self._continue_as_new()
        for task in tasks:
            task.result()
        # deferred append: the assistant message and its results enter the conversation together
        self._ledger.append(record, pending.message)
        self._ledger.result_refs.update(pending.digests)
        self._append_user(record, results_message(uses, pending.results).content)
        self._ledger.cycle = None
        self._check_cancel()

    def _append_user(self, record: TurnRecord, content: list[ContentBlock]) -> None:
        """Append the user message of a safe point: tool results, then queued guidance."""
        ledger = self._ledger
        if ledger.steering:
            content = [*content, *(text_block(STEERING_PREFIX + t) for t in ledger.steering)]
            ledger.emit("steering_added", turn=record.turn_id, count=len(ledger.steering))
            ledger.steering = []
        ledger.append(record, Message(role="user", content=content))

    # ----------------------------------------------------------------------------- one tool use

    async def _resolve_tool(self, record: TurnRecord, pending: PendingCycle, use: ToolUse) -> None:
        """Produce one tool use's result: run it, or say why it did not run.

        The order of gates: the tool must exist, the turn must not be cancelled, the
        session's policy must not deny it, and a human must approve it when the tool, the
        session or the policy asks for that. A tool that asks a question is run again with
        the answer, as often as it asks.
        """
        tools, cancelled = self._ledger.tools or [], self._ledger.cancel_reason
        spec = next((t for t in tools if t.name == use.name), None)
        verdict = judge_all([self._config.policy, *self._config.policies], use)
        refusal: str | None = None
        if spec is None:
            known = ", ".join(t.name for t in tools) or "none"
            refusal = f"unknown tool {use.name!r}; this session has: {known}"
        elif cancelled is not None:
            refusal = f"tool was not run: {cancelled}"
        elif verdict.action == "deny":
            refusal = f"tool use denied by the session's policy: {verdict.reason}"
        elif (needs_approval(spec, self._config) or verdict.action == "require_approval") and (
            refused := await self._approval(record, use, verdict.reason)
        ).status != "approved":
            refusal = denial_text(refused)
        if refusal is None and use.name in self._config.agents:
            result = await self._run_sub_agent(record.turn_id, use)
        elif refusal is None:
            assert spec is not None  # an unknown tool is refused above
            result = await self._run_until_answered(record, pending, use, spec)
        else:
            result = error_result(use.toolUseId, refusal)
        pending.results[use.toolUseId] = result
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
                    if response.digest is None:
                        return response.result
                    # stored: the workflow keeps the reference, not the content (which
                    # histories recorded before the activity left it out still carry)
                    pending.digests[use.toolUseId] = response.digest
                    return stripped(response.result)
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
                return error_result(use.toolUseId, denial_text(question))
            answers[question.name] = question.answer

    async def _execute_tool(
        self, use: ToolUse, spec: ToolSpec, answers: dict[str, Any]
    ) -> ToolResponse:
        """The tool activity; its failure is an error result for the model, not the turn's."""
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
            heartbeat_timeout=heartbeat_timeout(self._config.heartbeat_timeout_s),
            retry_policy=TOOL_RETRY,
        )
        self._tool_calls[use.toolUseId] = handle
        self._show_details()
        try:
            response: ToolResponse = await handle
            return response
        except ActivityError as err:
            if self._ledger.cancel_reason is not None:
                text = f"tool was cancelled: {self._ledger.cancel_reason}"
            else:
                text = f"tool {use.name!r} failed: {_failure_text(err)}"
            return ToolResponse(result=error_result(use.toolUseId, text))
        finally:
            del self._tool_calls[use.toolUseId]
            self._show_details()

    # ----------------------------------------------------------------------------- people

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
        self._notify_interrupt(interrupt)
        # A workflow task that only opens interrupts would complete with no command, and on
        # replay after a cache miss Temporal hands its events to the next task, with any
        # decide/respond update of that task validated first: the interrupt would look
        # unknown. A memo upsert is a command, so the task stands on its own.
        workflow.upsert_memo({"keel_interrupts_opened": len(self._ledger.interrupts)})
        self._apply_held(interrupt.id)
        return interrupt

    async def _wait_for_human(self, interrupt: Interrupt) -> None:
        """Wait until a pending interrupt is decided, answered, timed out or cancelled."""
        if interrupt.status != "pending":
            return
        self._show_details()
        await self._report_to_parent()
        ledger = self._ledger
        remaining = None
        if interrupt.expires_at is not None:
            left = datetime.fromisoformat(interrupt.expires_at) - workflow.now()
            remaining = max(left, timedelta(milliseconds=1))
        try:
            await workflow.wait_condition(
                lambda: interrupt.status != "pending" or ledger.cancel_reason is not None,
                timeout=remaining,
                timeout_summary=f"{interrupt.kind} timeout for {interrupt.tool_use.name}",
            )
        except TimeoutError:
            timeout_s = self._config.approval_timeout_s or 0
            ledger.close_interrupt(
                interrupt, "timed_out", reason=f"no decision within {timeout_s:g} s"
            )
        if interrupt.status == "pending":  # the turn was cancelled while it waited
            ledger.close_interrupt(interrupt, "cancelled", reason=ledger.cancel_reason)
        self._show_details()
        await self._report_to_parent()

    def _show_details(self) -> None:
        """Tell Temporal's UI what the session does or waits for now.

        Current details are no command: nothing is written to history, replay is unchanged.
        """
        ledger = self._ledger
        names = {}
        if ledger.cycle is not None:
            names = {u.toolUseId: u.name for u in tool_uses(ledger.cycle.message)}
        current = ledger.current
        workflow.set_current_details(
            current_details(
                ledger,
                model_call=current.cycles if current and self._model_call is not None else None,
                tools=[names.get(use_id, use_id) for use_id in self._tool_calls],
                children=self._children.values(),
            )
        )

    def _check_cancel(self) -> None:
        if self._ledger.cancel_reason is not None:
            raise _TurnCancelled()

    # ----------------------------------------------------------------------------- continue-as-new

    def _history_full(self) -> bool:
        """Whether this run's history is long enough to continue-as-new at a safe point."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._config.continue_as_new_events
            or info.get_current_history_size() >= self._config.continue_as_new_bytes
        )

    def _can_park_for_approval(self) -> bool:
        """Safe to continue-as-new mid-cycle: no tool in flight, only humans awaited."""
        return (
            not self._tool_calls
            and not self._children
            and bool(self._ledger.pending_interrupts())
            and self._ledger.cancel_reason is None
            and self._history_full()
        )

    async def _continue_as_new(self) -> NoReturn:
        """Hand the ledger to a new run; nothing a client sent is lost."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._continuing = True
        ledger = self._ledger
        ledger.emit("run_continued", run=ledger.run + 1)
        workflow.logger.info(
            "continuing as new: run %s, %s messages", ledger.run + 1, ledger.message_count
        )
        workflow.continue_as_new(SessionInput(config=self._config, carried=ledger.for_next_run()))
