"""The messages ``AgentSession`` takes: updates, signals and queries, with their validators.

Handlers only read and record; the session loop in ``workflows.session`` acts on what they
record. Every handler is synchronous, so none is ever left running at continue-as-new.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.approvals import check_decision, check_response
    from workflows.boundary import InputRejected, validate_prompt
    from workflows.contracts import (
        CancelAck,
        CancelInput,
        CloseInput,
        Decision,
        DecisionAck,
        Interrupt,
        InterruptStatus,
        KeelModel,
        ModelResponse,
        PendingView,
        PromptAck,
        PromptInput,
        Response,
        SessionConfig,
        SessionState,
        StateQuery,
        SteerAck,
        SteerInput,
        ToolResponse,
        TurnRecord,
    )
    from workflows.ledger import Ledger
    from workflows.messages import ContentBlock

# How many ``prompt`` update ids, and apart how many answers of the other updates, a session
# remembers across runs; the oldest leave first.
UPDATE_IDS_KEPT = 200

_Ack = TypeVar("_Ack", bound=KeelModel)


def _expect(value: object, kind: type) -> None:
    """Refuse a payload that decoded to something other than the declared input type.

    The data converter follows a payload's own encoding, so a raw client can make a handler
    receive, say, a protobuf message instead of the pydantic model its signature names.
    """
    if not isinstance(value, kind):
        raise InputRejected(f"expected a {kind.__name__} payload, got {type(value).__name__}")


def _update_key() -> str | None:
    """``<update name>/<update id>`` of the update being handled, if one is."""
    info = workflow.current_update_info()
    return None if info is None else f"{info.name}/{info.id}"


def _keep_newest(kept: dict[str, Any]) -> None:
    """Drop the oldest entries past ``UPDATE_IDS_KEPT``."""
    while len(kept) > UPDATE_IDS_KEPT:
        del kept[next(iter(kept))]


@dataclass
class Queued:
    """A prompt waiting for its turn."""

    turn_id: int
    content: list[ContentBlock]


class SessionHandlers:
    """The session's handlers.

    Updates ``prompt``, ``decide``, ``respond``, ``steer``, ``cancel``; signals ``decide``,
    ``respond``, ``close``; queries ``state``, ``pending``, ``turn``.
    """

    _config: SessionConfig
    _ledger: Ledger
    _queue: deque[Queued]
    _current: TurnRecord | None
    _pending: PendingView
    _model_call: workflow.ActivityHandle[ModelResponse] | None
    _tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]]
    _cancel_reason: str | None
    _steering: list[str]
    _closing: bool
    _closed: bool
    _run_number: int
    _init_error: str | None
    # decide/respond signals naming an interrupt not open yet, with the history length of
    # the workflow task they came in (see ``_hold``)
    _held: deque[tuple[int, Decision | Response]]
    # carried through continue-as-new: ids of accepted ``prompt`` updates with their turns,
    # and the answers of ``steer``, ``decide``, ``respond`` and ``cancel`` updates (JSON) by
    # ``<update name>/<update id>``
    _prompt_updates: dict[str, int]
    _update_acks: dict[str, str]

    def _enqueue(self, content: list[ContentBlock]) -> PromptAck:
        record = self._ledger.new_turn()
        self._queue.append(Queued(turn_id=record.turn_id, content=content))
        return PromptAck(turn_id=record.turn_id, queued_behind=len(self._queue) - 1)

    def _prompt_seen(self) -> int | None:
        """The turn of this ``prompt`` update if an update of its id was accepted before.

        An update completed in the same workflow task as continue-as-new can reach the new
        run again, with its id (temporalio/temporal#6375): it must not act twice.
        """
        info = workflow.current_update_info()
        return None if info is None else self._prompt_updates.get(info.id)

    def _answered(self, kind: type[_Ack]) -> _Ack | None:
        """The answer this update gave if an update of its name and id was accepted before.

        As for ``prompt`` (see ``_prompt_seen``): a redelivered ``steer``, ``decide``,
        ``respond`` or ``cancel`` gets its first answer again and acts no second time.
        """
        key = _update_key()
        raw = None if key is None else self._update_acks.get(key)
        return None if raw is None else kind.model_validate_json(raw)

    def _answer(self, ack: _Ack) -> _Ack:
        """Remember this update's answer under its name and id; returns the answer."""
        key = _update_key()
        if key is not None:
            self._update_acks[key] = ack.model_dump_json()
            _keep_newest(self._update_acks)
        return ack

    @workflow.update
    def prompt(self, input: PromptInput) -> PromptAck:
        """Queue a prompt as a new turn; answers with its turn id.

        The same update id again (a redelivery) answers with the turn it already made.
        """
        seen = self._prompt_seen()
        if seen is not None:
            behind = next((i for i, q in enumerate(self._queue) if q.turn_id == seen), 0)
            return PromptAck(turn_id=seen, queued_behind=behind)
        ack = self._enqueue(input.content)
        info = workflow.current_update_info()
        if info is not None:
            self._prompt_updates[info.id] = ack.turn_id
            _keep_newest(self._prompt_updates)
        return ack

    @prompt.validator
    def _validate_prompt(self, input: PromptInput) -> None:
        _expect(input, PromptInput)
        if self._prompt_seen() is not None:
            return  # accepted before: answered again, whatever the session's state now
        if self._init_error is not None:
            raise InputRejected(self._init_error)
        if self._closing:
            raise InputRejected("session is closing; it takes no more prompts")
        budget, used = self._config.max_session_tokens, self._ledger.usage.totalTokens
        if budget is not None and used >= budget:
            raise InputRejected(f"session used {used} tokens of its budget of {budget}")
        validate_prompt(input.role, input.content)

    @workflow.update
    def decide(self, input: Decision) -> DecisionAck:
        """Approve or deny a pending interrupt; the tool input stays the model's.

        The same update id again (a redelivery) gets the same answer and decides nothing.
        """
        again = self._answered(DecisionAck)
        if again is not None:
            return again
        interrupt = check_decision(self._ledger.interrupts, input, self._config)
        self._apply_decision(interrupt, input)
        return self._answer(
            DecisionAck(interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status)
        )

    @decide.validator
    def _validate_decide(self, input: Decision) -> None:
        _expect(input, Decision)
        if self._answered(DecisionAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        check_decision(self._ledger.interrupts, input, self._config)

    @workflow.signal(name="decide")
    def decide_signal(self, input: Decision) -> None:
        """Fire-and-forget ``decide``: the same checks; an invalid one is logged and ignored."""
        try:
            _expect(input, Decision)
            interrupt = check_decision(self._ledger.interrupts, input, self._config)
        except InputRejected as err:
            held = self._hold(input)
            workflow.logger.warning("ignored decide signal: %s%s", err, held)
            return
        self._apply_decision(interrupt, input)

    def _hold(self, signal: object) -> str:
        """Keep a decide/respond signal whose interrupt is not open, for this workflow task.

        A query can show an interrupt before the workflow task that opens it has run, and a
        signal sent then is handled in that task, before the interrupt opens. Such a signal
        is kept, and applied if an interrupt of that id opens in the same task; never later,
        so a signal cannot decide an interrupt ahead of time.

        Returns:
            What to add to the log line: why the signal may still count, or nothing.
        """
        if not isinstance(signal, Decision | Response):
            return ""
        if signal.interrupt_id in self._ledger.interrupts:
            return ""  # known: refused for another reason
        self._held.append((workflow.info().get_current_history_length(), signal))
        return " (unless that interrupt opens in this workflow task)"

    def _take_held(self, interrupt_id: str) -> Decision | Response | None:
        """The signal held in this workflow task for ``interrupt_id``, taken out of the hold.

        Signals held in an earlier task are void and dropped; this task's others stay.
        """
        task = workflow.info().get_current_history_length()
        current = [(at, s) for at, s in self._held if at == task]
        signal = next((s for _, s in current if s.interrupt_id == interrupt_id), None)
        self._held = deque(
            ((at, s) for at, s in current if s is not signal), maxlen=self._held.maxlen
        )
        return signal

    def _apply_held(self, signal: Decision | Response) -> None:
        """Handle a held signal again, now that its interrupt is open: the same checks."""
        workflow.logger.info("applying a signal sent as interrupt %s opened", signal.interrupt_id)
        if isinstance(signal, Decision):
            self.decide_signal(signal)
        else:
            self.respond_signal(signal)

    def _apply_decision(self, interrupt: Interrupt, decision: Decision) -> None:
        status: InterruptStatus = "approved" if decision.decision == "approve" else "denied"
        self._ledger.close_interrupt(interrupt, status, decision.approver, decision.reason)

    @workflow.update
    def respond(self, input: Response) -> DecisionAck:
        """Answer a tool's question; the tool runs again and ``ctx.interrupt`` returns it.

        The same update id again (a redelivery) gets the same answer and answers nothing.
        """
        again = self._answered(DecisionAck)
        if again is not None:
            return again
        interrupt = check_response(self._ledger.interrupts, input, self._config)
        self._apply_response(interrupt, input)
        return self._answer(
            DecisionAck(interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status)
        )

    @respond.validator
    def _validate_respond(self, input: Response) -> None:
        _expect(input, Response)
        if self._answered(DecisionAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        check_response(self._ledger.interrupts, input, self._config)

    @workflow.signal(name="respond")
    def respond_signal(self, input: Response) -> None:
        """Fire-and-forget ``respond``: the same checks; an invalid one is logged and ignored."""
        try:
            _expect(input, Response)
            interrupt = check_response(self._ledger.interrupts, input, self._config)
        except InputRejected as err:
            held = self._hold(input)
            workflow.logger.warning("ignored respond signal: %s%s", err, held)
            return
        self._apply_response(interrupt, input)

    def _apply_response(self, interrupt: Interrupt, response: Response) -> None:
        interrupt.response = response.value
        self._ledger.close_interrupt(interrupt, "answered", response.responder)

    @workflow.update
    def steer(self, input: SteerInput) -> SteerAck:
        """Add guidance that the model sees at the next safe point of the running turn.

        The same update id again (a redelivery) answers with the turn it steered and adds
        nothing.
        """
        again = self._answered(SteerAck)
        if again is not None:
            return again
        assert self._current is not None  # checked by the validator
        self._steering.append(input.text.strip())
        self._ledger.emit("steering_queued", turn=self._current.turn_id)
        return self._answer(SteerAck(turn_id=self._current.turn_id))

    @steer.validator
    def _validate_steer(self, input: SteerInput) -> None:
        _expect(input, SteerInput)
        if self._answered(SteerAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        if self._current is None:
            raise InputRejected("no turn is running to steer; send a prompt instead")
        if self._cancel_reason is not None:
            raise InputRejected(f"turn {self._current.turn_id} is being cancelled")
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
        assert self._current is not None  # checked by the validator
        self._cancel_reason = input.reason or "cancelled by user"
        if self._model_call is not None:
            self._model_call.cancel()
        for handle in self._tool_calls.values():
            handle.cancel()
        return self._answer(CancelAck(turn_id=self._current.turn_id))

    @cancel.validator
    def _validate_cancel(self, input: CancelInput) -> None:
        _expect(input, CancelInput)
        if self._answered(CancelAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        if self._current is None:
            raise InputRejected("no turn is running in this session")
        if self._cancel_reason is not None:
            raise InputRejected(f"turn {self._current.turn_id} is already being cancelled")

    @workflow.signal
    def close(self, input: CloseInput) -> None:
        """Close the session once the running and queued turns have finished."""
        reason = input.reason if isinstance(input, CloseInput) else "closed by user"
        workflow.logger.info("session closing: %s", reason)
        self._closing = True

    @workflow.query
    def state(self, input: StateQuery | None = None) -> SessionState:
        """The session as clients see it.

        The conversation is ``base`` (stored, by reference) then the messages not yet
        stored; with turns, usage and the events since ``events_since``.
        """
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
            base=ledger.stored,
            messages=ledger.messages if q.include_messages else [],
            message_count=ledger.message_count,
            pending=self._pending,
            queued=[item.turn_id for item in self._queue],
            turns=list(ledger.turns.values()),
            usage=ledger.usage,
            events=ledger.events_since(q.events_since),
            event_count=ledger.event_seq,
            run=self._run_number,
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
            raise InputRejected(f"no turn {turn_id} in this session (or no longer kept)")
        return record
