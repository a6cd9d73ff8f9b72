"""What a session records: conversation, turns, usage, interrupts and the event log.

Bookkeeping only; the workflow decides what happens. Every change that a client can see goes
through here, so each one is paired with its event.

Pure module: imported by workflow code. Time comes from the clock it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workflows.boundary import merge_user_content
from workflows.contracts import Event, EventType, Interrupt, InterruptStatus, TurnRecord, TurnStatus
from workflows.messages import ContentBlock, Message, TokenUsage


class Ledger:
    """A session's state as clients see it.

    Attributes:
        messages: the conversation; never holds a toolUse without its toolResult (S5).
        turns: every turn by id, in order.
        events: the event log, numbered from 1.
        usage: tokens used by the whole session.
        interrupts: every interrupt the session created, by id.
    """

    def __init__(self, messages: list[Message], clock: Callable[[], str]) -> None:
        """Start from a (normalised) conversation and a clock giving ISO timestamps."""
        self.messages = messages
        self.turns: dict[int, TurnRecord] = {}
        self.events: list[Event] = []
        self.usage = TokenUsage()
        self.interrupts: dict[str, Interrupt] = {}
        self._clock = clock

    def emit(
        self,
        type_: EventType,
        *,
        turn: int | None = None,
        cycle: int | None = None,
        **detail: object,
    ) -> None:
        """Add an event to the log."""
        self.events.append(
            Event(
                seq=len(self.events) + 1,
                type=type_,
                at=self._clock(),
                turn=turn,
                cycle=cycle,
                detail=detail,
            )
        )

    def new_turn(self) -> TurnRecord:
        """Create the record of a newly queued turn."""
        record = TurnRecord(turn_id=len(self.turns) + 1)
        self.turns[record.turn_id] = record
        self.emit("prompt_queued", turn=record.turn_id)
        return record

    def add_user_content(self, record: TurnRecord, content: Sequence[ContentBlock]) -> None:
        """Add user content, merged into a trailing user message so roles alternate."""
        merge_user_content(self.messages, content)
        self._message_added(record)

    def append(self, record: TurnRecord, message: Message) -> None:
        """Append a message to the conversation."""
        self.messages.append(message)
        if message.role == "assistant":
            record.message = message
        self._message_added(record)

    def add_usage(self, record: TurnRecord, usage: TokenUsage) -> None:
        """Count a model call's tokens for the turn and the session."""
        record.usage = record.usage + usage
        self.usage = self.usage + usage

    def end_turn(
        self,
        record: TurnRecord,
        status: TurnStatus,
        stop_reason: str | None,
        error: str | None = None,
    ) -> None:
        """Mark a turn ended."""
        record.status = status
        record.stop_reason = stop_reason
        record.error = error
        record.interrupts = []
        self.emit("turn_ended", turn=record.turn_id, status=status, stop_reason=stop_reason)

    def open_interrupt(self, record: TurnRecord, interrupt: Interrupt) -> None:
        """Register a new pending interrupt; the turn now waits for a human."""
        self.interrupts[interrupt.id] = interrupt
        self.emit(
            "interrupt_created",
            turn=record.turn_id,
            id=interrupt.id,
            kind=interrupt.kind,
            tool=interrupt.name,
            tool_use_id=interrupt.tool_use.toolUseId,
        )
        self.refresh_status(record)

    def close_interrupt(
        self,
        interrupt: Interrupt,
        status: InterruptStatus,
        by: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Record the outcome of a pending interrupt."""
        interrupt.status = status
        interrupt.decided_by = by
        interrupt.decision_reason = reason
        self.emit("interrupt_decided", turn=interrupt.turn, id=interrupt.id, status=status, by=by)
        record = self.turns.get(interrupt.turn)
        if record is not None:
            self.refresh_status(record)

    def pending_interrupts(self, turn_id: int | None = None) -> list[Interrupt]:
        """Interrupts waiting for a decision, oldest first."""
        return [
            i
            for i in self.interrupts.values()
            if i.status == "pending" and (turn_id is None or i.turn == turn_id)
        ]

    def refresh_status(self, record: TurnRecord) -> None:
        """A running turn is ``interrupted`` while any of its interrupts waits."""
        if record.status not in ("running", "interrupted"):
            return
        record.interrupts = self.pending_interrupts(record.turn_id)
        record.status = "interrupted" if record.interrupts else "running"

    def _message_added(self, record: TurnRecord) -> None:
        index = len(self.messages) - 1
        self.emit("message_added", turn=record.turn_id, index=index, role=self.messages[index].role)
