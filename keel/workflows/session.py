"""``AgentSession``: one durable conversation, run as a Temporal workflow.

Read it top-down as one turn flows: a prompt is queued (``handlers.prompt``) and becomes the
running turn; each cycle of the turn calls the model activity (S2); tool uses are taken from
that activity's result only (S1) and run as tool activities, in parallel, those that need
approval once a person approved them (S4); the assistant message is appended together with
the tool results only once every tool has finished, so the conversation never holds a toolUse
without its toolResult (S5).

All state is the ``Ledger``; continue-as-new hands it whole to the next run, at safe points
(between turns, between cycles, and while only people, or clients running client-side
tools, are awaited).
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import (
        ModelRequest,
        ModelResponse,
    )
    from keel.workflows.activity_options import (
        MODEL_ACTIVITY,
        MODEL_RETRY,
        MODEL_START_TO_CLOSE,
        heartbeat_timeout,
        model_schedule_to_close,
    )
    from keel.workflows.budget_contracts import BudgetAck, BudgetInput
    from keel.workflows.budgets import SessionBudgets, asks, grant, reached_cap
    from keel.workflows.contracts import (
        OUTPUT_REMINDERS,
        Answer,
        CancelAck,
        CancelInput,
        ChildInterrupts,
        ClientCallsView,
        ClientResult,
        ClientResultAck,
        CloseInput,
        Decision,
        InterruptAck,
        PendingView,
        PromptAck,
        PromptInput,
        RevokeAck,
        RevokeInput,
        SessionResult,
        SessionState,
        StateQuery,
        SteerAck,
        SteerInput,
        ToolSpec,
        TurnRecord,
    )
    from keel.workflows.current_details import current_details
    from keel.workflows.cycle import (
        COMPLETING_STOP_REASONS,
        close_unexecuted,
        id_conflicts,
        max_tokens_error,
        results_message,
        turn_error,
    )
    from keel.workflows.decisions import Decisions
    from keel.workflows.effect_contracts import EffectsView
    from keel.workflows.handlers import SessionRequests, UpdateAnswers
    from keel.workflows.ledger import PendingCycle, SessionInput
    from keel.workflows.messages import (
        ContentBlock,
        Message,
        text_block,
        tool_uses,
    )
    from keel.workflows.notifications import Notifier
    from keel.workflows.raw_inputs import RawInput, decode, decode_signal
    from keel.workflows.run_ends import CANCELLED_IN_TEMPORAL, SESSION_CANCELLED
    from keel.workflows.session_start import session_start
    from keel.workflows.status_attribute import StatusAttribute, model_summary
    from keel.workflows.structured import (
        OUTPUT_TOOL,
        accepted_output,
        closing_results,
        output_tool_spec,
        rejection,
    )
    from keel.workflows.sub_agents import CHILD_INTERRUPTS_SIGNAL, SubAgents, sub_agent_specs
    from keel.workflows.tool_gate import ToolGate
    from keel.workflows.turn_waits import WAIT_TURN_UPDATE, TurnWaitInput, TurnWaits

INPUT_REJECTED = "KeelInputRejected"
STEERING_PREFIX = "[guidance from the user while you worked] "
# Sessions whose structured-output turn ended without output before this completed anyway.
OUTPUT_PATCH = "keel-output-required"
OUTPUT_REMINDER = (
    f"[Keel] This task is finished only by calling the tool {OUTPUT_TOOL} with input that "
    "matches its schema. Call it now with your result."
)


class _TurnCancelled(Exception):
    """Raised inside a turn when a cancel request stops it."""


@workflow.defn(name="AgentSession")
class AgentSession:
    """A durable agent conversation; the workflow id is the session id."""

    @workflow.init
    def __init__(self, input: RawInput[SessionInput | None] = None) -> None:
        """Take the previous run's ledger, or start one from the start input; build the parts.

        The start input comes undecoded (``keel.workflows.raw_inputs``): one that is missing
        or does not validate fails the session at once, naming the wrong fields.
        """
        start = session_start(input)
        self._init_error: str | None = start.error
        self._config = start.input.config
        # in flight in this run only: never carried
        self._model_call: workflow.ActivityHandle[ModelResponse] | None = None
        self._tool_tasks: list[asyncio.Task[None]] = []  # the running cycle's tool uses
        self._continuing = False
        self._status = StatusAttribute()  # KeelStatus, when the start carried it
        self._ledger = start.ledger
        # the parts, each with its inputs; what they hold beyond the ledger is run-local
        self._answers = UpdateAnswers(self._ledger)
        self._requests = SessionRequests(
            self._config, self._ledger, self._answers, self._init_error
        )
        self._notifier = Notifier(self._config, self._ledger)
        self._sub_agents = SubAgents(self._config, self._ledger, self._notifier)
        self._decisions = Decisions(self._config, self._ledger, self._answers, self._sub_agents)
        self._budgets = SessionBudgets(self._config, self._ledger)
        self._turn_waits = TurnWaits(self._ledger)
        self._gate = ToolGate(
            self._config,
            self._ledger,
            self._notifier,
            self._sub_agents,
            self._decisions,
            self._show_details,
        )

    # ----------------------------------------------------------------------------- messages
    # Temporal finds the handlers on the workflow class; each hands its message to a part.
    # Each takes its input undecoded (``RawInput``) and decodes it itself: an update whose
    # input does not validate is rejected naming the wrong fields, such a signal is dropped
    # with a warning (``keel.workflows.raw_inputs``).

    @workflow.update
    def prompt(self, input: RawInput[PromptInput | None] = None) -> PromptAck:
        """Queue a prompt as a new turn; answers with its turn id."""
        return self._requests.prompt(decode(input, PromptInput, "update prompt"))

    @prompt.validator
    def _validate_prompt(self, input: RawInput[PromptInput | None] = None) -> None:
        self._requests.check_prompt(decode(input, PromptInput, "update prompt"))

    @workflow.update(
        name=WAIT_TURN_UPDATE, unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON
    )
    async def wait_turn(self, input: RawInput[TurnWaitInput | None] = None) -> TurnRecord:
        """Answer once the turn has settled (or ended); earlier when the run hands over."""
        return await self._turn_waits.wait(decode(input, TurnWaitInput, "update wait_turn"))

    @wait_turn.validator
    def _validate_wait_turn(self, input: RawInput[TurnWaitInput | None] = None) -> None:
        self._turn_waits.check(decode(input, TurnWaitInput, "update wait_turn"))

    @workflow.update
    async def decide(self, input: RawInput[Decision | None] = None) -> InterruptAck:
        """Approve or deny a pending interrupt; the tool input stays the model's."""
        return await self._decisions.take(decode(input, Decision, "update decide"))

    @decide.validator
    def _validate_decide(self, input: RawInput[Decision | None] = None) -> None:
        self._decisions.check(decode(input, Decision, "update decide"), Decision)

    @workflow.signal(name="decide")
    def decide_signal(self, input: RawInput[Decision | None] = None) -> None:
        """Fire-and-forget ``decide``: the same checks; an invalid one is logged and ignored."""
        decision = decode_signal(input, Decision, "decide")
        if decision is not None:
            self._decisions.take_signal(decision, Decision)

    @workflow.update
    async def respond(self, input: RawInput[Answer | None] = None) -> InterruptAck:
        """Answer a tool's question; the tool runs again and ``ctx.interrupt`` returns it."""
        return await self._decisions.take(decode(input, Answer, "update respond"))

    @respond.validator
    def _validate_respond(self, input: RawInput[Answer | None] = None) -> None:
        self._decisions.check(decode(input, Answer, "update respond"), Answer)

    @workflow.signal(name="respond")
    def respond_signal(self, input: RawInput[Answer | None] = None) -> None:
        """Fire-and-forget ``respond``: the same checks; an invalid one is logged and ignored."""
        answer = decode_signal(input, Answer, "respond")
        if answer is not None:
            self._decisions.take_signal(answer, Answer)

    @workflow.update
    def steer(self, input: RawInput[SteerInput | None] = None) -> SteerAck:
        """Add guidance that the model sees at the next safe point of the running turn."""
        return self._requests.steer(decode(input, SteerInput, "update steer"))

    @steer.validator
    def _validate_steer(self, input: RawInput[SteerInput | None] = None) -> None:
        self._requests.check_steer(decode(input, SteerInput, "update steer"))

    @workflow.update
    def cancel(self, input: RawInput[CancelInput | None] = None) -> CancelAck:
        """Stop the running turn at the next step and cancel its model call and tools."""
        ack, first = self._requests.cancel(
            decode(input, CancelInput, "update cancel", missing=CancelInput())
        )
        if first:
            self._stop_calls()
        return ack

    def _stop_calls(self) -> None:
        """Cancel the running turn's model call and tools (its ``cancel_reason`` is set)."""
        if self._model_call is not None:
            self._model_call.cancel()
        for handle in self._gate.tool_calls.values():
            handle.cancel()

    @cancel.validator
    def _validate_cancel(self, input: RawInput[CancelInput | None] = None) -> None:
        self._requests.check_cancel(
            decode(input, CancelInput, "update cancel", missing=CancelInput())
        )

    @workflow.update
    def revoke(self, input: RawInput[RevokeInput | None] = None) -> RevokeAck:
        """End a tool's standing approval: its next call asks a person again."""
        return self._decisions.revoke(decode(input, RevokeInput, "update revoke"))

    @revoke.validator
    def _validate_revoke(self, input: RawInput[RevokeInput | None] = None) -> None:
        self._decisions.check_revoke(decode(input, RevokeInput, "update revoke"))

    @workflow.update
    def budget(self, input: RawInput[BudgetInput | None] = None) -> BudgetAck:
        """Raise the session's token or cost budget (``keel budget``)."""
        return self._budgets.raise_caps(decode(input, BudgetInput, "update budget"))

    @budget.validator
    def _validate_budget(self, input: RawInput[BudgetInput | None] = None) -> None:
        self._budgets.check(decode(input, BudgetInput, "update budget"))

    @workflow.signal
    def close(self, input: RawInput[CloseInput | None] = None) -> None:
        """Close the session once the running and queued turns have finished.

        With ``now`` (``keel close``): the running turn is cancelled and the queued ones
        dropped, their interrupts cancelled, first.
        """
        closing = decode_signal(input, CloseInput, "close", missing=CloseInput())
        if closing is not None and self._requests.close(closing):
            self._stop_calls()

    @workflow.signal(name=CHILD_INTERRUPTS_SIGNAL)
    def child_interrupts(self, input: RawInput[ChildInterrupts | None] = None) -> None:
        """A sub-agent's session says its interrupts changed: a hint, never believed."""
        hint = decode_signal(input, ChildInterrupts, CHILD_INTERRUPTS_SIGNAL)
        if hint is not None:
            self._sub_agents.hint(hint)

    @workflow.update
    def tool_result(self, input: RawInput[ClientResult | None] = None) -> ClientResultAck:
        """A client's result for a published call of a client-side tool; a worker checks it."""
        return self._gate.client_tools.take(decode(input, ClientResult, "update tool_result"))

    @tool_result.validator
    def _validate_tool_result(self, input: RawInput[ClientResult | None] = None) -> None:
        self._gate.client_tools.check(decode(input, ClientResult, "update tool_result"))

    @workflow.query
    def client_calls(self) -> ClientCallsView:
        """The calls of client-side tools that wait for a client to run them."""
        return self._gate.client_tools.view()

    @workflow.query
    def state(self, input: StateQuery | None = None) -> SessionState:
        """The session as clients see it (conversation by reference, turns, usage, events)."""
        return self._requests.state(input)

    @workflow.query
    def pending(self) -> PendingView:
        """The assistant message held outside the conversation, and its open interrupts."""
        return self._requests.pending()

    @workflow.query
    def turn(self, turn_id: int) -> TurnRecord:
        """One turn's status and result."""
        return self._requests.turn(turn_id)

    @workflow.query
    def effects(self) -> EffectsView:
        """The calls of ``write`` and ``idempotent`` tools: their attempts and how settled."""
        return self._gate.effects.view()

    @workflow.query(name="interrupts")
    def interrupts_query(self) -> ChildInterrupts:
        """Every interrupt of this session: what a sub-agent's parent asks for and shows."""
        return self._sub_agents.report()

    # ----------------------------------------------------------------------------- turns

    @workflow.run
    async def run(self, input: RawInput[SessionInput | None] = None) -> SessionResult:
        """Run queued turns one after another until the session is closed."""
        if self._init_error is not None:
            raise ApplicationError(self._init_error, type=INPUT_REJECTED, non_retryable=True)
        try:
            await self._run_turns()
        except asyncio.CancelledError:  # cancelled in Temporal: Keel's record says so too
            for task in self._tool_tasks:  # they run beside this one: stopped, not left on
                task.cancel()
            await asyncio.gather(*self._tool_tasks, return_exceptions=True)
            self._ledger.end_session(CANCELLED_IN_TEMPORAL, SESSION_CANCELLED)
            self._show_details()  # KeelStatus: nothing waits or runs any more
            workflow.set_current_details("")
            raise
        ledger = self._ledger
        ledger.closed = True
        ledger.emit("session_closed")
        self._show_details()
        await self._notifier.delivered()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return SessionResult(
            session_id=workflow.info().workflow_id,
            turns=len(ledger.turns),
            usage=ledger.usage,
            last_turn=ledger.turns[max(ledger.turns)] if ledger.turns else None,
            cost_usd=ledger.cost_usd,
            cost_unknown=ledger.cost_unknown,
        )

    async def _run_turns(self) -> None:
        """Run the carried turn, then queued turns one after another, until closing."""
        ledger = self._ledger
        self._notifier.post_carried()  # notifications the previous run had not delivered
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
                return
            await self._run_turn(ledger.start_next_turn())
            ledger.closing = ledger.closing or ledger.single_turn

    async def _run_turn(self, record: TurnRecord) -> None:
        """Run a turn's cycles, from its start or from where the previous run left it."""
        ledger = self._ledger
        try:
            if ledger.cycle is not None:
                await self._run_tools(record, ledger.cycle)
            while True:
                self._check_cancel()
                if await self._over_budget(record):
                    break
                if self._history_full():
                    await self._continue_as_new()
                if await self._run_cycle(record) or self._gate.replay.diverged(record):
                    break
        except _TurnCancelled:
            ledger.end_turn(record, "cancelled", "cancelled", error=ledger.cancel_reason)
        except ActivityError as err:
            error = turn_error(err, self._config.model_retry_s)
            ledger.end_turn(record, "failed", record.stop_reason, error=error)
        finally:
            if not self._continuing:
                ledger.leave_turn()
        if record.error:
            workflow.logger.info(
                "turn %s ended %s: %s", record.turn_id, record.status, record.error
            )
        self._notifier.turn_ended(record)

    async def _over_budget(self, record: TurnRecord) -> bool:
        """Before a model call: at a cap, ask a person for more, or end the turn (True).

        ``keel.workflows.budgets``: approved, the turn goes on with more of the cap; else
        it ends ``failed`` with the cap's stop reason.
        """
        ledger, config = self._ledger, self._config
        while (cap := reached_cap(config, ledger, record)) is not None:
            if not asks(config):
                ledger.end_turn(record, "failed", cap.stop_reason, error=cap.error)
                return True
            interrupt = await self._gate.ask(
                record, cap.tool_use(record.turn_id), kind="budget", reason=cap.error
            )
            self._check_cancel()
            if interrupt.status != "approved":
                who = f" by {interrupt.decided_by}" if interrupt.decided_by else ""
                why = interrupt.decision_reason or "no reason given"
                error = f"{cap.error}; no more was granted ({interrupt.status}{who}: {why})"
                ledger.end_turn(record, "failed", cap.stop_reason, error=error)
                return True
            grant(config, ledger, record, cap, interrupt)
        return False

    # ----------------------------------------------------------------------------- one cycle

    async def _run_cycle(self, record: TurnRecord) -> bool:
        """Call the model and act on its answer; returns True when the turn has ended."""
        ledger = self._ledger
        record.cycles += 1
        cycle = record.cycles
        response = await self._call_model(record, cycle)
        ledger.add_usage(record, response.usage)
        ledger.add_cost(record, response.cost_usd)
        record.stop_reason = response.stopReason
        priced = {} if response.cost_usd is None else {"cost_usd": response.cost_usd}
        ledger.emit(
            "model_called",
            turn=record.turn_id,
            cycle=cycle,
            stop_reason=response.stopReason,
            usage=response.usage.model_dump(),
            **priced,
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
            error = max_tokens_error(len(uses))
            ledger.append(record, close_unexecuted(message, "max_tokens reached"))
            ledger.end_turn(record, "failed", "max_tokens", error=error)
            return True
        ledger.append(record, close_unexecuted(message, f"stop reason {stop}"))
        if stop in COMPLETING_STOP_REASONS or stop == "tool_use":
            if ledger.steering and stop in ("end_turn", "stop_sequence"):
                # guidance arrived during the last model call: the model must still see it
                self._append_user(record, [])
                return False
            if self._config.output_schema is not None and workflow.patched(OUTPUT_PATCH):
                return self._remind_of_output(record)
            ledger.end_turn(record, "completed", stop)
        else:
            ledger.end_turn(record, "failed", stop, error=f"model stopped with reason {stop!r}")
        return True

    def _remind_of_output(self, record: TurnRecord) -> bool:
        """A turn that owes structured output ended without it: ask again, or fail.

        The model is told to call ``final_result`` (a user message) at most
        ``OUTPUT_REMINDERS`` times; then the turn fails with stop reason ``no_output``. A turn
        with an output schema never completes with no output. True when the turn ended.
        """
        if record.reminders < OUTPUT_REMINDERS:
            record.reminders += 1
            self._append_user(record, [text_block(OUTPUT_REMINDER)])
            return False
        error = (
            f"the model ended the turn {record.reminders + 1} times without a valid "
            f"{OUTPUT_TOOL} call; this session's output schema asks for one"
        )
        self._ledger.end_turn(record, "failed", "no_output", error=error)
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
                price=self._config.price,
            ),
            result_type=ModelResponse,
            start_to_close_timeout=MODEL_START_TO_CLOSE,
            schedule_to_close_timeout=model_schedule_to_close(self._config.model_retry_s),
            heartbeat_timeout=heartbeat_timeout(self._config.heartbeat_timeout_s),
            retry_policy=MODEL_RETRY,
            summary=model_summary(self._config.model),
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
        tasks = [asyncio.create_task(self._gate.resolve(record, pending, u)) for u in todo]
        self._tool_tasks = tasks
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

    def _show_details(self) -> None:
        """Tell Temporal's UI what the session does or waits for now.

        Current details are no command: nothing is written to history, replay is unchanged.
        ``KeelStatus`` is upserted (a command) only when it changed, if the session has it.
        """
        ledger = self._ledger
        self._status.show(ledger)
        names = {}
        if ledger.cycle is not None:
            names = {u.toolUseId: u.name for u in tool_uses(ledger.cycle.message)}
        current = ledger.current
        workflow.set_current_details(
            current_details(
                ledger,
                model_call=current.cycles if current and self._model_call is not None else None,
                tools=[names.get(use_id, use_id) for use_id in self._gate.tool_calls],
                children=self._sub_agents.children.values(),
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
        """Safe to continue-as-new mid-cycle: no tool in flight, only people or clients awaited."""
        return (
            not self._gate.tool_calls
            and not self._sub_agents.children
            and (bool(self._ledger.pending_interrupts()) or self._gate.client_tools.awaiting())
            and self._ledger.cancel_reason is None
            and self._history_full()
        )

    async def _continue_as_new(self) -> NoReturn:
        """Hand the ledger to a new run; nothing a client sent is lost."""
        self._turn_waits.handing_over = True  # waiting clients are answered, then wait anew
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._continuing = True
        ledger = self._ledger
        ledger.emit("run_continued", run=ledger.run + 1)
        workflow.logger.info(
            "continuing as new: run %s, %s messages", ledger.run + 1, ledger.message_count
        )
        workflow.continue_as_new(SessionInput(config=self._config, carried=ledger.for_next_run()))
