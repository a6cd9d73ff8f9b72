"""What the session's handlers do with prompts, steering, cancels, closes and reads.

``AgentSession`` keeps the handlers themselves (Temporal finds them on the workflow class)
and hands each message to a part: ``SessionRequests`` here for ``prompt``, ``steer``,
``cancel``, ``close`` and the queries; ``keel.workflows.decisions.Decisions`` for ``decide``
and ``respond``; ``keel.workflows.sub_agents.SubAgents`` for what sub-agents report.
Handlers only read and record, in the session's ``Ledger``; the session loop acts on what
they record.
"""

from __future__ import annotations

from typing import TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keel.workflows.boundary import InputRejected, prompt_bytes, validate_prompt
    from keel.workflows.budgets import session_limit
    from keel.workflows.contracts import (
        CancelAck,
        CancelInput,
        CloseInput,
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
    from keel.workflows.limits import REASON_BYTES, check_queue, check_reason, check_steer

Ack = TypeVar("Ack", bound=KeelModel)


def expect(value: object, kind: type) -> None:
    """Refuse a payload that decoded to something other than the declared input type.

    The data converter follows a payload's own encoding, so a raw client can make a handler
    receive, say, a protobuf message instead of the pydantic model its signature names.
    """
    if not isinstance(value, kind):
        raise InputRejected(f"expected a {kind.__name__} payload, got {type(value).__name__}")


class UpdateAnswers:
    """The answers given to updates, so a redelivered update acts no second time.

    An update completed in the same workflow task as continue-as-new can reach the new run
    again, with its id (temporalio/temporal#6375): it gets its first answer again.
    """

    def __init__(self, ledger: Ledger) -> None:
        """Remember answers in ``ledger`` (carried across continue-as-new)."""
        self._ledger = ledger

    def given(self, kind: type[Ack]) -> Ack | None:
        """The answer this update gave if an update of its name and id was accepted before."""
        key = _update_key()
        raw = None if key is None else self._ledger.update_acks.get(key)
        return None if raw is None else kind.model_validate_json(raw)

    def give(self, ack: Ack) -> Ack:
        """Remember this update's answer under its name and id; returns the answer."""
        key = _update_key()
        if key is not None:
            self._ledger.remember_ack(key, ack)
        return ack


class SessionRequests:
    """``prompt``, ``steer``, ``cancel``, ``close`` and the queries, on the session's ledger."""

    def __init__(
        self,
        config: SessionConfig,
        ledger: Ledger,
        answers: UpdateAnswers,
        init_error: str | None,
    ) -> None:
        """Act on ``ledger``; ``init_error``: why the start input was refused, if it was."""
        self._config = config
        self._ledger = ledger
        self._answers = answers
        self._init_error = init_error

    # ------------------------------------------------------------------ prompt

    def _prompt_seen(self) -> int | None:
        """The turn of this ``prompt`` update if an update of its id was accepted before."""
        info = workflow.current_update_info()
        return None if info is None else self._ledger.prompt_updates.get(info.id)

    def prompt(self, input: PromptInput) -> PromptAck:
        """Queue a prompt as a new turn; a redelivery answers with the turn it made."""
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

    def check_prompt(self, input: PromptInput) -> None:
        """The ``prompt`` validator."""
        expect(input, PromptInput)
        if self._prompt_seen() is not None:
            return  # accepted before: answered again, whatever the session's state now
        if self._init_error is not None:
            raise InputRejected(self._init_error)
        if self._ledger.closing:
            raise InputRejected("session is closing; it takes no more prompts")
        if self._config.on_budget == "fail":  # else its turn asks a person for more
            budget = session_limit(self._config, self._ledger, "session_tokens")
            used = self._ledger.usage.totalTokens
            if budget is not None and used >= budget:
                raise InputRejected(f"session used {used} tokens of its budget of {budget:g}")
        validate_prompt(input.role, input.content)
        queue = self._ledger.queue
        waiting = sum(prompt_bytes(q.content) for q in queue)
        check_queue(len(queue), waiting, prompt_bytes(input.content))

    # ------------------------------------------------------------------ steer, cancel, close

    def steer(self, input: SteerInput) -> SteerAck:
        """Queue guidance for the next safe point of the running turn."""
        again = self._answers.given(SteerAck)
        if again is not None:
            return again
        turn_id = self._ledger.current_turn
        assert turn_id is not None  # checked by the validator
        self._ledger.steering.append(input.text.strip())
        self._ledger.emit("steering_queued", turn=turn_id)
        return self._answers.give(SteerAck(turn_id=turn_id))

    def check_steer(self, input: SteerInput) -> None:
        """The ``steer`` validator."""
        expect(input, SteerInput)
        if self._answers.given(SteerAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        turn_id = self._ledger.current_turn
        if turn_id is None:
            raise InputRejected("no turn is running to steer; send a prompt instead")
        if self._ledger.cancel_reason is not None:
            raise InputRejected(f"turn {turn_id} is being cancelled")
        if not input.text.strip():
            raise InputRejected("steering text is empty")
        check_steer(input, len(self._ledger.steering))

    def cancel(self, input: CancelInput) -> tuple[CancelAck, bool]:
        """Mark the running turn cancelled; the answer, and whether this is a first delivery."""
        again = self._answers.given(CancelAck)
        if again is not None:
            return again, False
        turn_id = self._ledger.current_turn
        assert turn_id is not None  # checked by the validator
        self._ledger.cancel_reason = input.reason or "cancelled by user"
        return self._answers.give(CancelAck(turn_id=turn_id)), True

    def check_cancel(self, input: CancelInput) -> None:
        """The ``cancel`` validator."""
        expect(input, CancelInput)
        if self._answers.given(CancelAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        turn_id = self._ledger.current_turn
        if turn_id is None:
            raise InputRejected("no turn is running in this session")
        if self._ledger.cancel_reason is not None:
            raise InputRejected(f"turn {turn_id} is already being cancelled")
        check_reason(input)

    def close(self, input: CloseInput) -> bool:
        """Close the session once its turns have finished; with ``now``, end them first.

        Returns:
            Whether the running turn is to be cancelled now (its calls stopped by the caller).
        """
        reason = input.reason if isinstance(input, CloseInput) else "closed by user"
        # only logged, never stored: a signal from before the limits must close as it did
        workflow.logger.info("session closing: %s", reason[:REASON_BYTES])
        ledger = self._ledger
        ledger.closing = True
        if not (isinstance(input, CloseInput) and input.now):
            return False
        why = f"session closed: {reason[:REASON_BYTES]}"
        for queued in ledger.queue:
            ledger.end_turn(ledger.turns[queued.turn_id], "cancelled", "cancelled", error=why)
        ledger.queue = []
        if ledger.current_turn is None or ledger.cancel_reason is not None:
            return False
        ledger.cancel_reason = why
        return True

    # ------------------------------------------------------------------ queries

    def state(self, input: StateQuery | None) -> SessionState:
        """The session as clients see it (the ``state`` query)."""
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
            prompt_at=ledger.prompt_at,
            replay=ledger.replay,
            cost_usd=ledger.cost_usd,
            cost_unknown=ledger.cost_unknown,
            sub_agents=ledger.sub_agents,
        )

    def pending(self) -> PendingView:
        """The assistant message held outside the conversation, and its open interrupts."""
        return self._ledger.pending_view()

    def turn(self, turn_id: int) -> TurnRecord:
        """One turn's status and result."""
        record = self._ledger.turns.get(turn_id)
        if record is None:
            raise InputRejected(f"no turn {turn_id} in this session (or no longer kept)")
        return record


def _update_key() -> str | None:
    """``<update name>/<update id>`` of the update being handled, if one is."""
    info = workflow.current_update_info()
    return None if info is None else f"{info.name}/{info.id}"
