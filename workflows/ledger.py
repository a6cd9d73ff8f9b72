"""What a session records: conversation, turns, usage, interrupts and the event log.

Bookkeeping only; the workflow decides what happens. Every change that a client can see goes
through here, so each one is paired with its event.

The conversation is ``stored`` (a prefix in the conversation store, by reference) followed by
``messages`` (not yet stored, in memory). Each model call carries the unstored messages,
stores them, and answers with the longer prefix; the workflow then forgets them. So neither
workflow history nor worker memory grows with the conversation.

Pure module: imported by workflow code. Time comes from the clock it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workflows.contracts import (
    Carried,
    Event,
    EventType,
    Interrupt,
    InterruptStatus,
    PrefixRef,
    TurnRecord,
    TurnStatus,
)
from workflows.messages import ContentBlock, Message, TokenUsage, tool_uses

# How much of the past a run hands to the next beyond what it must.
CARRIED_EVENTS = 50
CARRIED_TURNS = 20
CARRIED_CLOSED_INTERRUPTS = 50


class Ledger:
    """A session's state as clients see it.

    Attributes:
        stored: the stored prefix of the conversation.
        messages: the messages after it, not yet stored; with ``stored`` they never hold a
            toolUse without its toolResult (S5).
        turns: turns by id, in order.
        events: the event log (this run's, and the tail carried from earlier runs).
        event_seq: events emitted in the whole session.
        usage: tokens used by the whole session.
        interrupts: interrupts by id (pending, and recently closed ones).
        tool_use_ids: every toolUseId the model used in this session.
    """

    def __init__(
        self,
        messages: list[Message],
        clock: Callable[[], str],
        carried: Carried | None = None,
    ) -> None:
        """Start from a (normalised) conversation, or from a previous run's state."""
        self._clock = clock
        self.messages = messages
        self.stored: PrefixRef | None = None
        self.turns: dict[int, TurnRecord] = {}
        self.events: list[Event] = []
        self.event_seq = 0
        self.usage = TokenUsage()
        self.interrupts: dict[str, Interrupt] = {}
        self.tool_use_ids: set[str] = {u.toolUseId for m in messages for u in tool_uses(m)}
        self.result_refs: dict[str, str] = {}
        if carried is not None:
            self.result_refs = dict(carried.result_refs)
            self.stored = carried.base
            self.messages = list(carried.messages)
            self.turns = {t.turn_id: t for t in carried.turns}
            self.events = list(carried.events)
            self.event_seq = carried.event_seq
            self.usage = carried.usage
            self.interrupts = {i.id: i for i in carried.interrupts}
            self.tool_use_ids = set(carried.tool_use_ids)

    # ------------------------------------------------------------------ conversation

    @property
    def message_count(self) -> int:
        """Messages in the whole conversation."""
        return (self.stored.count if self.stored else 0) + len(self.messages)

    def model_tail(self) -> tuple[list[Message], dict[str, str]]:
        """The unstored messages as a model call carries them, and the result references.

        A toolResult that the tool activity already stored travels with empty content; the
        model activity fills it in from the store by its digest.
        """
        tail = self.messages
        refs = {
            b.toolResult.toolUseId: self.result_refs[b.toolResult.toolUseId]
            for m in tail
            for b in m.content
            if b.toolResult is not None and b.toolResult.toolUseId in self.result_refs
        }
        if not refs:
            return tail, {}
        slim = [
            Message(
                role=m.role,
                content=[
                    ContentBlock(toolResult=b.toolResult.model_copy(update={"content": []}))
                    if b.toolResult is not None and b.toolResult.toolUseId in refs
                    else b
                    for b in m.content
                ],
            )
            for m in tail
        ]
        return slim, refs

    def mark_stored(self, ref: PrefixRef, count: int) -> None:
        """Record that the first ``count`` unstored messages are now stored under ``ref``."""
        self.stored = ref
        self.messages = self.messages[count:]
        still = {b.toolResult.toolUseId for m in self.messages for b in m.content if b.toolResult}
        self.result_refs = {k: v for k, v in self.result_refs.items() if k in still}

    def add_user_content(self, record: TurnRecord, content: Sequence[ContentBlock]) -> None:
        """Add user content, merged into a trailing unstored user message so roles alternate.

        A trailing user message that is already stored cannot change; the new content then
        follows as its own message, and the model activity merges the two in the model's view.
        """
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == "user":
            self.messages[-1] = Message(role="user", content=[*last.content, *content])
        else:
            self.messages.append(Message(role="user", content=list(content)))
        self._message_added(record)

    def append(self, record: TurnRecord, message: Message) -> None:
        """Append a message to the conversation."""
        self.messages.append(message)
        if message.role == "assistant":
            record.message = message
            self.tool_use_ids.update(u.toolUseId for u in tool_uses(message))
        self._message_added(record)

    def add_usage(self, record: TurnRecord, usage: TokenUsage) -> None:
        """Count a model call's tokens for the turn and the session."""
        record.usage = record.usage + usage
        self.usage = self.usage + usage

    # ------------------------------------------------------------------ turns and events

    def emit(
        self,
        type_: EventType,
        *,
        turn: int | None = None,
        cycle: int | None = None,
        **detail: object,
    ) -> None:
        """Add an event to the log."""
        self.event_seq += 1
        self.events.append(
            Event(
                seq=self.event_seq,
                type=type_,
                at=self._clock(),
                turn=turn,
                cycle=cycle,
                detail=detail,
            )
        )

    def events_since(self, seq: int) -> list[Event]:
        """Events after ``seq`` that this run still holds, in order."""
        if not self.events or seq >= self.event_seq:
            return []
        first = self.events[0].seq
        return self.events[max(seq - first + 1, 0) :]

    def new_turn(self) -> TurnRecord:
        """Create the record of a newly queued turn."""
        record = TurnRecord(turn_id=max(self.turns, default=0) + 1)
        self.turns[record.turn_id] = record
        self.emit("prompt_queued", turn=record.turn_id)
        return record

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

    # ------------------------------------------------------------------ interrupts

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

    def interrupt_for(self, tool_use_id: str) -> Interrupt | None:
        """The pending interrupt parking a tool use, if any."""
        return next(
            (i for i in self.pending_interrupts() if i.tool_use.toolUseId == tool_use_id), None
        )

    def refresh_status(self, record: TurnRecord) -> None:
        """A running turn is ``interrupted`` while any of its interrupts waits."""
        if record.status not in ("running", "interrupted"):
            return
        record.interrupts = self.pending_interrupts(record.turn_id)
        record.status = "interrupted" if record.interrupts else "running"

    # ------------------------------------------------------------------ continue-as-new

    def carry(self, run: int) -> Carried:
        """This ledger's part of what the next run needs: references, not the conversation."""
        closed = [i for i in self.interrupts.values() if i.status != "pending"]
        live = {
            t for t, r in self.turns.items() if r.status in ("queued", "running", "interrupted")
        }
        recent = sorted(self.turns)[-CARRIED_TURNS:]
        return Carried(
            run=run,
            base=self.stored,
            messages=self.messages,
            result_refs=self.result_refs,
            turns=[self.turns[t] for t in sorted(live.union(recent))],
            interrupts=[
                *self.pending_interrupts(),
                *closed[-CARRIED_CLOSED_INTERRUPTS:],
            ],
            usage=self.usage,
            event_seq=self.event_seq,
            events=self.events[-CARRIED_EVENTS:],
            tool_use_ids=sorted(self.tool_use_ids),
        )

    def _message_added(self, record: TurnRecord) -> None:
        self.emit(
            "message_added",
            turn=record.turn_id,
            index=self.message_count - 1,
            role=self.messages[-1].role,
        )
