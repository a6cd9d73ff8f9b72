"""The messages ``AgentSession`` takes: updates, signals and queries, with their validators.

Handlers only read and record, in the session's ``Ledger``; the session loop in
``keel.workflows.session`` acts on what they record. Every handler is synchronous, so none is ever
left running at continue-as-new.
"""

from __future__ import annotations

from collections import deque
from typing import TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import ModelResponse, ToolResponse
    from keel.workflows.approvals import check_answer, check_decision, signer_fingerprint
    from keel.workflows.boundary import InputRejected, validate_prompt
    from keel.workflows.contracts import (
        Answer,
        CancelAck,
        CancelInput,
        ChildInterrupts,
        CloseInput,
        Decision,
        Interrupt,
        InterruptAck,
        InterruptStatus,
        KeelModel,
        PendingView,
        PromptAck,
        PromptInput,
        SessionConfig,
        SessionState,
        StateQuery,
        SteerAck,
        SteerInput,
        TurnRecord,
    )
    from keel.workflows.ledger import Ledger

_Ack = TypeVar("_Ack", bound=KeelModel)


def _expect(value: object, kind: type) -> None:
    """Refuse a payload that decoded to something other than the declared input type.

    The data converter follows a payload's own encoding, so a raw client can make a handler
    receive, say, a protobuf message instead of the pydantic model its signature names.
    """
    if not isinstance(value, kind):
        raise InputRejected(f"expected a {kind.__name__} payload, got {type(value).__name__}")


def _session_id() -> str:
    """The session's id (its workflow id, the same across continue-as-new)."""
    return workflow.info().workflow_id


def _update_key() -> str | None:
    """``<update name>/<update id>`` of the update being handled, if one is."""
    info = workflow.current_update_info()
    return None if info is None else f"{info.name}/{info.id}"


class SessionHandlers:
    """The session's handlers.

    Updates ``prompt``, ``decide``, ``respond``, ``steer``, ``cancel``; signals ``decide``,
    ``respond``, ``close``; queries ``state``, ``pending``, ``turn``.
    """

    # set by AgentSession: the configuration, the state, and what is in flight in this run
    _config: SessionConfig
    _ledger: Ledger
    _init_error: str | None
    _model_call: workflow.ActivityHandle[ModelResponse] | None
    _tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]]
    # decide/respond signals naming an interrupt not open yet, with the history length of
    # the workflow task they came in (see ``_hold``); never carried to another run
    _held: deque[tuple[int, Decision | Answer]]
    # sub-agents' interrupts whose decision or answer is being handed to the child now
    _handing_on: set[str]

    # defined by ``keel.workflows.sub_agents.SubAgentSessions``
    def _child_deciding(self, interrupt: Interrupt) -> str | None:
        raise NotImplementedError

    async def _hand_on(
        self, child_id: str, interrupt: Interrupt, message: Decision | Answer
    ) -> InterruptAck:
        raise NotImplementedError

    def _hand_on_later(
        self, child_id: str, interrupt: Interrupt, message: Decision | Answer
    ) -> None:
        raise NotImplementedError

    def _prompt_seen(self) -> int | None:
        """The turn of this ``prompt`` update if an update of its id was accepted before.

        An update completed in the same workflow task as continue-as-new can reach the new
        run again, with its id (temporalio/temporal#6375): it must not act twice.
        """
        info = workflow.current_update_info()
        return None if info is None else self._ledger.prompt_updates.get(info.id)

    def _answered(self, kind: type[_Ack]) -> _Ack | None:
        """The answer this update gave if an update of its name and id was accepted before.

        As for ``prompt`` (see ``_prompt_seen``): a redelivered ``steer``, ``decide``,
        ``respond`` or ``cancel`` gets its first answer again and acts no second time.
        """
        key = _update_key()
        raw = None if key is None else self._ledger.update_acks.get(key)
        return None if raw is None else kind.model_validate_json(raw)

    def _answer(self, ack: _Ack) -> _Ack:
        """Remember this update's answer under its name and id; returns the answer."""
        key = _update_key()
        if key is not None:
            self._ledger.remember_ack(key, ack)
        return ack

    @workflow.update
    def prompt(self, input: PromptInput) -> PromptAck:
        """Queue a prompt as a new turn; answers with its turn id.

        The same update id again (a redelivery) answers with the turn it already made.
        """
        queue = self._ledger.queue
        seen = self._prompt_seen()
        if seen is not None:
            behind = next((i for i, q in enumerate(queue) if q.turn_id == seen), 0)
            return PromptAck(turn_id=seen, queued_behind=behind)
        queued = self._ledger.enqueue(input.content)
        info = workflow.current_update_info()
        if info is not None:
            self._ledger.remember_prompt(info.id, queued.turn_id)
        return PromptAck(turn_id=queued.turn_id, queued_behind=len(queue) - 1)

    @prompt.validator
    def _validate_prompt(self, input: PromptInput) -> None:
        _expect(input, PromptInput)
        if self._prompt_seen() is not None:
            return  # accepted before: answered again, whatever the session's state now
        if self._init_error is not None:
            raise InputRejected(self._init_error)
        if self._ledger.closing:
            raise InputRejected("session is closing; it takes no more prompts")
        budget, used = self._config.max_session_tokens, self._ledger.usage.totalTokens
        if budget is not None and used >= budget:
            raise InputRejected(f"session used {used} tokens of its budget of {budget}")
        validate_prompt(input.role, input.content)

    @workflow.update
    async def decide(self, input: Decision) -> InterruptAck:
        """Approve or deny a pending interrupt; the tool input stays the model's.

        A sub-agent's interrupt shown here is decided in the sub-agent's session: the
        decision is handed on, and counts here once that session accepted it (its refusal
        is this update's failure, and the interrupt stays pending, saying why).
        The same update id again (a redelivery) gets the same answer and decides nothing.
        """
        again = self._answered(InterruptAck)
        if again is not None:
            return again
        interrupt = check_decision(self._ledger.interrupts, input, self._config, self._signed_for())
        child = self._child_deciding(interrupt)
        if child is not None:
            return self._answer(await self._hand_on(child, interrupt, input))
        self._apply_decision(interrupt, input)
        return self._answer(_ack(interrupt))

    @decide.validator
    def _validate_decide(self, input: Decision) -> None:
        _expect(input, Decision)
        if self._answered(InterruptAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        check_decision(self._ledger.interrupts, input, self._config, self._signed_for())
        self._check_not_handed_on(input.interrupt_id)

    @workflow.signal(name="decide")
    def decide_signal(self, input: Decision) -> None:
        """Fire-and-forget ``decide``: the same checks; an invalid one is logged and ignored."""
        try:
            _expect(input, Decision)
            interrupt = check_decision(
                self._ledger.interrupts, input, self._config, self._signed_for()
            )
            self._check_not_handed_on(input.interrupt_id)
        except InputRejected as err:
            held = self._hold(input)
            workflow.logger.warning("ignored decide signal: %s%s", err, held)
            return
        child = self._child_deciding(interrupt)
        if child is not None:
            self._hand_on_later(child, interrupt, input)
            return
        self._apply_decision(interrupt, input)

    @workflow.update
    async def respond(self, input: Answer) -> InterruptAck:
        """Answer a tool's question; the tool runs again and ``ctx.interrupt`` returns it.

        A sub-agent's question is answered in its session, as ``decide`` does.
        The same update id again (a redelivery) gets the same answer and answers nothing.
        """
        again = self._answered(InterruptAck)
        if again is not None:
            return again
        interrupt = check_answer(self._ledger.interrupts, input, self._config, self._signed_for())
        child = self._child_deciding(interrupt)
        if child is not None:
            return self._answer(await self._hand_on(child, interrupt, input))
        self._apply_answer(interrupt, input)
        return self._answer(_ack(interrupt))

    @respond.validator
    def _validate_respond(self, input: Answer) -> None:
        _expect(input, Answer)
        if self._answered(InterruptAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        check_answer(self._ledger.interrupts, input, self._config, self._signed_for())
        self._check_not_handed_on(input.interrupt_id)

    @workflow.signal(name="respond")
    def respond_signal(self, input: Answer) -> None:
        """Fire-and-forget ``respond``: the same checks; an invalid one is logged and ignored."""
        try:
            _expect(input, Answer)
            interrupt = check_answer(
                self._ledger.interrupts, input, self._config, self._signed_for()
            )
            self._check_not_handed_on(input.interrupt_id)
        except InputRejected as err:
            held = self._hold(input)
            workflow.logger.warning("ignored respond signal: %s%s", err, held)
            return
        child = self._child_deciding(interrupt)
        if child is not None:
            self._hand_on_later(child, interrupt, input)
            return
        self._apply_answer(interrupt, input)

    def _signed_for(self) -> tuple[str, ...]:
        """The session ids a signature may be bound to: this one, then its ancestors."""
        return (_session_id(), *self._ledger.ancestors)

    def _check_not_handed_on(self, interrupt_id: str) -> None:
        if interrupt_id in self._handing_on:
            raise InputRejected(
                f"interrupt {interrupt_id!r} is being decided in its sub-agent's session"
            )

    def _apply_decision(self, interrupt: Interrupt, decision: Decision) -> None:
        status: InterruptStatus = "approved" if decision.decision == "approve" else "denied"
        key = signer_fingerprint(self._config, decision.approver)
        self._ledger.close_interrupt(interrupt, status, decision.approver, decision.reason, key)

    def _apply_answer(self, interrupt: Interrupt, answer: Answer) -> None:
        interrupt.answer = answer.value
        key = signer_fingerprint(self._config, answer.responder)
        self._ledger.close_interrupt(interrupt, "answered", answer.responder, key=key)

    def _hold(self, signal: object) -> str:
        """Keep a decide/respond signal whose interrupt is not open, for this workflow task.

        A query can show an interrupt before the workflow task that opens it has run, and a
        signal sent then is handled in that task, before the interrupt opens. Such a signal
        is kept, and applied if an interrupt of that id opens in the same task; never later,
        so a signal cannot decide an interrupt ahead of time.

        Returns:
            What to add to the log line: why the signal may still count, or nothing.
        """
        if not isinstance(signal, Decision | Answer):
            return ""
        if signal.interrupt_id in self._ledger.interrupts:
            return ""  # known: refused for another reason
        self._held.append((workflow.info().get_current_history_length(), signal))
        return " (unless that interrupt opens in this workflow task)"

    def _apply_held(self, interrupt_id: str) -> None:
        """Handle the signal held in this workflow task for ``interrupt_id``, if one is.

        It is taken out of the hold and handled again by its own handler: the same checks.
        Signals held in an earlier task are void and dropped; this task's others stay.
        """
        task = workflow.info().get_current_history_length()
        current = [(at, s) for at, s in self._held if at == task]
        signal = next((s for _, s in current if s.interrupt_id == interrupt_id), None)
        self._held = deque(
            ((at, s) for at, s in current if s is not signal), maxlen=self._held.maxlen
        )
        if signal is None:
            return
        workflow.logger.info("applying a signal sent as interrupt %s opened", interrupt_id)
        if isinstance(signal, Decision):
            self.decide_signal(signal)
        else:
            self.respond_signal(signal)

    @workflow.update
    def steer(self, input: SteerInput) -> SteerAck:
        """Add guidance that the model sees at the next safe point of the running turn.

        The same update id again (a redelivery) answers with the turn it steered and adds
        nothing.
        """
        again = self._answered(SteerAck)
        if again is not None:
            return again
        turn_id = self._ledger.current_turn
        assert turn_id is not None  # checked by the validator
        self._ledger.steering.append(input.text.strip())
        self._ledger.emit("steering_queued", turn=turn_id)
        return self._answer(SteerAck(turn_id=turn_id))

    @steer.validator
    def _validate_steer(self, input: SteerInput) -> None:
        _expect(input, SteerInput)
        if self._answered(SteerAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        turn_id = self._ledger.current_turn
        if turn_id is None:
            raise InputRejected("no turn is running to steer; send a prompt instead")
        if self._ledger.cancel_reason is not None:
            raise InputRejected(f"turn {turn_id} is being cancelled")
        if not input.text.strip():
            raise InputRejected("steering text is empty")

    @workflow.update
    def cancel(self, input: CancelInput) -> CancelAck:
        """Stop the running turn at the next step and cancel its model call and tools.

        The same update id again (a redelivery) gets the same answer and cancels nothing: the
        turn running by then may be another one.
        """
        again = self._answered(CancelAck)
        if again is not None:
            return again
        turn_id = self._ledger.current_turn
        assert turn_id is not None  # checked by the validator
        self._ledger.cancel_reason = input.reason or "cancelled by user"
        if self._model_call is not None:
            self._model_call.cancel()
        for handle in self._tool_calls.values():
            handle.cancel()
        return self._answer(CancelAck(turn_id=turn_id))

    @cancel.validator
    def _validate_cancel(self, input: CancelInput) -> None:
        _expect(input, CancelInput)
        if self._answered(CancelAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        turn_id = self._ledger.current_turn
        if turn_id is None:
            raise InputRejected("no turn is running in this session")
        if self._ledger.cancel_reason is not None:
            raise InputRejected(f"turn {turn_id} is already being cancelled")

    @workflow.signal
    def close(self, input: CloseInput) -> None:
        """Close the session once the running and queued turns have finished."""
        reason = input.reason if isinstance(input, CloseInput) else "closed by user"
        workflow.logger.info("session closing: %s", reason)
        self._ledger.closing = True

    @workflow.query
    def state(self, input: StateQuery | None = None) -> SessionState:
        """The session as clients see it.

        The conversation is ``base`` (stored, by reference) then the messages not yet
        stored; with turns, usage and the events since ``events_since``.
        """
        q = input or StateQuery()
        ledger = self._ledger
        if ledger.closed:
            status = "closed"
        elif ledger.closing:
            status = "closing"
        else:
            status = "running" if ledger.current_turn is not None else "idle"
        return SessionState(
            session_id=workflow.info().workflow_id,
            status=status,
            config=self._config,
            base=ledger.stored,
            messages=ledger.messages if q.include_messages else [],
            result_refs=ledger.result_refs if q.include_messages else {},
            message_count=ledger.message_count,
            pending=ledger.pending_view(),
            queued=[item.turn_id for item in ledger.queue],
            turns=list(ledger.turns.values()),
            usage=ledger.usage,
            events=ledger.events_since(q.events_since),
            event_count=ledger.event_seq,
            run=ledger.run,
        )

    @workflow.query(name="interrupts")
    def interrupts_query(self) -> ChildInterrupts:
        """Every interrupt of this session: what a sub-agent's parent asks for and shows."""
        return ChildInterrupts(
            child_id=workflow.info().workflow_id, interrupts=list(self._ledger.interrupts.values())
        )

    @workflow.query
    def pending(self) -> PendingView:
        """The assistant message held outside the conversation, and its open interrupts."""
        return self._ledger.pending_view()

    @workflow.query
    def turn(self, turn_id: int) -> TurnRecord:
        """One turn's status and result."""
        record = self._ledger.turns.get(turn_id)
        if record is None:
            raise InputRejected(f"no turn {turn_id} in this session (or no longer kept)")
        return record


def _ack(interrupt: Interrupt) -> InterruptAck:
    return InterruptAck(interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status)
