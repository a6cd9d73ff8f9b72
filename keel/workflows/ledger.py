"""A session's state, in one model: live in the workflow, and what continue-as-new carries.

``Ledger`` holds everything a session knows (conversation references, turns, interrupts,
usage, the event log, the queue, the cycle in progress, steering, the answers of recent
updates). The workflow keeps one and hands it whole to its next run, so a field added here
survives continue-as-new with no other edit. Only run-local things stay outside it: handles of
activities in flight and signals held within one workflow task.

Every change that a client can see goes through a method here, paired with its event.

The conversation is ``stored`` (a prefix in the conversation store, by reference) followed by
``messages`` (not yet stored). Each model call carries the unstored messages, stores them, and
answers with the longer prefix; the workflow then forgets them. So neither workflow history
nor worker memory grows with the conversation.

Pure module: imported by workflow code. Time comes from ``workflow.now()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_serializer, field_validator
from temporalio import workflow

from keel.workflows.contracts import (
    ClientCall,
    ClientCallStatus,
    Event,
    EventType,
    Interrupt,
    InterruptStatus,
    KeelModel,
    Notification,
    PendingView,
    PrefixRef,
    SessionConfig,
    StandingApproval,
    ToolSpec,
    TurnRecord,
    TurnStatus,
)
from keel.workflows.cost import Spend, add_cost
from keel.workflows.effect_contracts import EffectRecord
from keel.workflows.limits import UPDATE_MEMORY_BYTES
from keel.workflows.messages import (
    ContentBlock,
    Message,
    TokenUsage,
    ToolResult,
    prompt_blocks,
    tool_uses,
)
from keel.workflows.replay_contracts import ReplayProgress
from keel.workflows.run_ends import UNFINISHED_TURN

# How much of the past a run hands to the next beyond what it must.
CARRIED_EVENTS = 50
CARRIED_TURNS = 20
CARRIED_CLOSED_INTERRUPTS = 50
# How many ``prompt`` update ids, and apart how many answers of the other updates, a session
# remembers; the oldest leave first.
UPDATE_IDS_KEPT = 200
LIVE_TURN_STATUSES = frozenset({"queued", "running", "awaiting_human"})
# A client call in one of these states has not ended.
LIVE_CALL_STATUSES = frozenset({"waiting", "delivered"})


class QueuedPrompt(KeelModel):
    """A prompt waiting for its turn."""

    turn_id: int
    content: list[ContentBlock]


class PendingCycle(KeelModel):
    """A cycle whose tools have not all finished: the parked assistant message and results.

    Attributes:
        turn_id: the turn.
        cycle: the cycle number within the turn.
        message: the assistant message as the model activity returned it (S1).
        results: finished tool results, by toolUseId.
        digests: where the tool activity stored each result, by toolUseId.
        answers: answers to tools' questions, by toolUseId then question name.
    """

    turn_id: int
    cycle: int
    message: Message
    results: dict[str, ToolResult] = Field(default_factory=dict)
    digests: dict[str, str] = Field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Ledger(KeelModel):
    """Everything a session knows; carried whole from one run to the next.

    Attributes:
        run: this run's number in the session, from 1.
        stored: the stored prefix of the conversation.
        messages: the messages after it, not yet stored; with ``stored`` they never hold a
            toolUse without its toolResult (S5).
        result_refs: where the tool activity stored each unstored toolResult, by toolUseId.
        tool_use_ids: every toolUseId the model used in this session.
        turns: turns by id, in order (the recent ones and every live one).
        interrupts: interrupts by id (pending, and recently closed ones).
        usage: tokens used by the whole session.
        event_seq: events emitted in the whole session.
        events: the event log (this run's, and the tail carried from earlier runs).
        queue: prompts waiting for their turn, in order.
        current_turn: the turn running now, if any.
        cycle: the cycle whose tools run or wait for a person (deferred append, S5).
        tools: the terms of the session's tools (``ToolSpec.terms``), once described.
        tools_digest: where the session's whole tool specs are stored.
        steering: guidance for the running turn, not yet shown to the model.
        cancel_reason: why the running turn is being cancelled, if it is.
        closing: no more prompts; the session ends once its turns are done.
        closed: the session has ended.
        prompt_updates: ids of accepted ``prompt`` updates, with their turns.
        update_acks: answers (JSON) of accepted ``steer``, ``decide``, ``respond`` and
            ``cancel`` updates, by ``<update name>/<update id>``.
        single_turn: the session closes once its first turn ends (a child session started
            by ``run_agent`` or by a sub-agent tool).
        parent_session: for a sub-agent's session, its parent's id: it reports its
            interrupts there (signal ``child_interrupts``).
        ancestors: for a sub-agent's session, its parent's id, then the parent's parent's,
            up to the root session: a decision signed for any of them is signed for this
            interrupt too (the parent forwards what its approvers signed for it).
        mirrored: interrupts of sub-agents shown in this session, with the child's id:
            decided here, the decision is forwarded to the child.
        outbox: notifications not delivered yet (``SessionConfig.notify``): a run that
            continues-as-new hands them on and the next run posts them again.
        client_calls: calls of client-side tools by id: those waiting for a client's
            result or being checked, and recently ended ones (to answer a repeated delivery).
        standing: standing approvals by tool name: later calls of the tool (whose input
            passes the approval's tests) run without asking a person.
        effects: the calls of ``write`` and ``idempotent`` tools, by toolUseId, in order:
            their attempts and how each was settled (``keel.workflows.effects``).
        effects_dropped: how many older ``effects`` were let go (``MAX_EFFECTS_KEPT``).
        prompt_at: where each turn's prompt entered the conversation, by turn: the message's
            index in the whole conversation and the index of the prompt's first block in
            it (a prompt may join a trailing user message). Kept for every turn: a replay
            or an export splits the conversation into turns with it.
        replay: a replay session's progress through its recording (``SessionConfig.replay``).
        cost_usd: what the session's model calls (and its sub-agents) cost in US dollars:
            the known part, None while no call's cost is known (``keel.workflows.cost``).
        cost_unknown: some call's cost is unknown: ``cost_usd`` leaves it out.
        sub_agents: what the session's sub-agents spent, by sub-agent name; also counted in
            ``usage`` and ``cost_usd``.
        budgets: the session's caps as raised by the ``budget`` update, by cap name
            (``session_tokens``, ``session_cost``), over ``SessionConfig``'s.
    """

    run: int = 1
    stored: PrefixRef | None = None
    messages: list[Message] = Field(default_factory=list)
    result_refs: dict[str, str] = Field(default_factory=dict)
    tool_use_ids: set[str] = Field(default_factory=set)
    turns: dict[int, TurnRecord] = Field(default_factory=dict)
    interrupts: dict[str, Interrupt] = Field(default_factory=dict)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    event_seq: int = 0
    events: list[Event] = Field(default_factory=list)
    queue: list[QueuedPrompt] = Field(default_factory=list)
    current_turn: int | None = None
    cycle: PendingCycle | None = None
    tools: list[ToolSpec] | None = None
    tools_digest: str | None = None
    steering: list[str] = Field(default_factory=list)
    cancel_reason: str | None = None
    closing: bool = False
    closed: bool = False
    prompt_updates: dict[str, int] = Field(default_factory=dict)
    update_acks: dict[str, str] = Field(default_factory=dict)
    single_turn: bool = False
    parent_session: str | None = None
    ancestors: list[str] = Field(default_factory=list)
    mirrored: dict[str, str] = Field(default_factory=dict)
    outbox: list[Notification] = Field(default_factory=list)
    client_calls: dict[str, ClientCall] = Field(default_factory=dict)
    standing: dict[str, StandingApproval] = Field(default_factory=dict)
    effects: dict[str, EffectRecord] = Field(default_factory=dict)
    effects_dropped: int = 0
    prompt_at: dict[int, tuple[int, int]] = Field(default_factory=dict)
    replay: ReplayProgress | None = None
    cost_usd: float | None = None
    cost_unknown: bool = False
    sub_agents: dict[str, Spend] = Field(default_factory=dict)
    budgets: dict[str, float] = Field(default_factory=dict)

    @field_serializer("tool_use_ids")
    def _sorted_ids(self, ids: set[str]) -> list[str]:
        # a set's order differs between processes; history must not
        return sorted(ids)

    @classmethod
    def starting_with(cls, messages: list[Message]) -> Ledger:
        """A new session's ledger, its conversation a (normalised) imported history."""
        used = {u.toolUseId for m in messages for u in tool_uses(m)}
        return cls(messages=messages, tool_use_ids=used)

    # ------------------------------------------------------------------ conversation

    @property
    def message_count(self) -> int:
        """Messages in the whole conversation."""
        return (self.stored.count if self.stored else 0) + len(self.messages)

    def model_tail(self) -> tuple[list[Message], dict[str, str]]:
        """The unstored messages as a model call carries them, and the result references.

        A toolResult that the tool activity already stored travels with empty content; the
        model activity fills it in from the store by its digest. The workflow keeps such
        results without their content already; a ledger carried from a run of earlier code
        may still hold it.
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

        def carried(block: ContentBlock) -> ContentBlock:
            result = block.toolResult
            if result is None or not result.content or result.toolUseId not in refs:
                return block
            return ContentBlock(toolResult=result.model_copy(update={"content": []}))

        slim = []
        for m in tail:
            content = [carried(b) for b in m.content]
            same = all(new is old for new, old in zip(content, m.content, strict=True))
            slim.append(m if same else Message(role=m.role, content=content))
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

    def add_cost(self, record: TurnRecord, cost_usd: float | None) -> None:
        """Count a model call's cost (None: unknown) for the turn and the session."""
        record.cost_usd, record.cost_unknown = add_cost(
            record.cost_usd, record.cost_unknown, cost_usd
        )
        self.cost_usd, self.cost_unknown = add_cost(self.cost_usd, self.cost_unknown, cost_usd)

    def add_sub_agent(self, record: TurnRecord, name: str, spend: Spend) -> None:
        """Count what a sub-agent's session spent: in the totals, and listed apart."""
        self.add_usage(record, spend.usage)
        for holder in (record, self):
            if spend.cost_usd is not None:
                holder.cost_usd = (holder.cost_usd or 0.0) + spend.cost_usd
            holder.cost_unknown = holder.cost_unknown or spend.cost_unknown
            listed = holder.sub_agents.get(name)
            holder.sub_agents[name] = spend if listed is None else listed + spend

    # ------------------------------------------------------------------ turns and events

    @property
    def current(self) -> TurnRecord | None:
        """The record of the turn running now, if any."""
        return None if self.current_turn is None else self.turns[self.current_turn]

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
                at=workflow.now().isoformat(),
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

    def enqueue(self, content: list[ContentBlock]) -> QueuedPrompt:
        """Queue a prompt as a new turn."""
        record = TurnRecord(turn_id=max(self.turns, default=0) + 1)
        self.turns[record.turn_id] = record
        self.emit("prompt_queued", turn=record.turn_id)
        queued = QueuedPrompt(turn_id=record.turn_id, content=content)
        self.queue.append(queued)
        return queued

    def start_next_turn(self) -> TurnRecord:
        """Take the oldest queued prompt and make it the running turn."""
        queued = self.queue.pop(0)
        record = self.turns[queued.turn_id]
        record.status = "running"
        self.current_turn = record.turn_id
        self.cancel_reason = None
        self.emit("turn_started", turn=record.turn_id)
        last = self.messages[-1] if self.messages else None
        joins = last is not None and last.role == "user"  # add_user_content merges it there
        self.prompt_at[record.turn_id] = (
            self.message_count - 1 if joins else self.message_count,
            len(last.content) if joins and last is not None else 0,
        )
        self.add_user_content(record, queued.content)
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

    def end_session(self, reason: str, stop_reason: str) -> None:
        """The session ends now, whatever it was doing (cancelled in Temporal, say).

        Its pending interrupts are cancelled; its running, waiting and queued turns end
        ``cancelled`` with ``stop_reason`` and ``reason`` as their error.
        """
        for interrupt in self.pending_interrupts():
            self.close_interrupt(interrupt, "cancelled", reason=reason)
        for record in self.turns.values():
            if record.status in UNFINISHED_TURN:
                self.end_turn(record, "cancelled", stop_reason, error=reason)
        self.queue = []
        self.leave_turn()
        self.closed = True
        self.emit("session_closed", reason=reason)

    def leave_turn(self) -> None:
        """The running turn is over: drop its cycle, and the guidance nobody saw."""
        if self.steering:
            # how many, not the texts: 50 events carried to the next run must stay small
            self.emit("steering_dropped", turn=self.current_turn, count=len(self.steering))
            self.steering = []
        self.current_turn = None
        self.cycle = None

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
        self._refresh_status(record)

    def close_interrupt(
        self,
        interrupt: Interrupt,
        status: InterruptStatus,
        by: str | None = None,
        reason: str | None = None,
        key: str | None = None,
    ) -> None:
        """Record the outcome of a pending interrupt (``key``: the verified signer's key)."""
        interrupt.status = status
        interrupt.decided_by = by
        interrupt.decision_reason = reason
        interrupt.key_fingerprint = key
        turn = interrupt.turn
        if key is None:
            self.emit("interrupt_decided", turn=turn, id=interrupt.id, status=status, by=by)
        else:
            self.emit(
                "interrupt_decided",
                turn=interrupt.turn,
                id=interrupt.id,
                status=status,
                by=by,
                key=key,
            )
        record = self.turns.get(interrupt.turn)
        if record is not None:
            self._refresh_status(record)

    def pending_interrupts(self, turn_id: int | None = None) -> list[Interrupt]:
        """Interrupts waiting for a decision, oldest first."""
        return [
            i
            for i in self.interrupts.values()
            if i.status == "pending" and (turn_id is None or i.turn == turn_id)
        ]

    def pending_view(self) -> PendingView:
        """What the running turn holds outside the conversation (the ``pending`` query)."""
        standing = list(self.standing.values())
        if self.current_turn is None:
            return PendingView(standing=standing)
        cycle = self.cycle
        running = [] if cycle is None else tool_uses(cycle.message)
        return PendingView(
            turn_id=self.current_turn,
            message=None if cycle is None else cycle.message,
            running=[u for u in running if cycle and u.toolUseId not in cycle.results],
            interrupts=self.pending_interrupts(self.current_turn),
            client_calls=self.waiting_client_calls(),
            standing=standing,
        )

    # ------------------------------------------------------------------ standing approvals

    def grant(self, approval: StandingApproval) -> None:
        """Record a standing approval (replacing the tool's earlier one)."""
        self.standing[approval.tool] = approval
        total = approval.total
        bounds: dict[str, Any] = {  # each only when set: one without bounds records as before
            name: value
            for name, value in (
                ("max_uses", approval.max_uses),
                ("expires_at", approval.expires_at),
                ("total", None if total is None else f"{total.field} {total.op} {total.value}"),
            )
            if value is not None
        }
        self.emit(
            "standing_approval_granted",
            turn=approval.turn,
            tool=approval.tool,
            by=approval.granted_by,
            tests=len(approval.when),  # the tests themselves are in ``standing``, once
            **bounds,
        )

    def revoke(self, tool: str, by: str | None) -> StandingApproval:
        """End a tool's standing approval; its next call asks a person again."""
        approval = self.standing.pop(tool)
        self.emit("standing_approval_revoked", turn=self.current_turn, tool=tool, by=by)
        return approval

    def run_out(self, approval: StandingApproval, why: str, turn: int | None = None) -> None:
        """End a standing approval past one of its bounds; the tool's next call asks."""
        if self.standing.get(approval.tool) is approval:
            del self.standing[approval.tool]
        self.emit(
            "standing_approval_exhausted",
            turn=self.current_turn if turn is None else turn,
            tool=approval.tool,
            why=why,
        )

    def _refresh_status(self, record: TurnRecord) -> None:
        """A running turn is ``awaiting_human`` while any of its interrupts waits."""
        if record.status not in ("running", "awaiting_human"):
            return
        record.interrupts = self.pending_interrupts(record.turn_id)
        record.status = "awaiting_human" if record.interrupts else "running"

    # ------------------------------------------------------------------ client calls

    def publish_client_call(self, call: ClientCall) -> None:
        """Publish a call of a client-side tool: a client may now deliver its result."""
        self.client_calls[call.id] = call
        self.emit(
            "client_call_published",
            turn=call.turn,
            cycle=call.cycle,
            id=call.id,
            tool=call.tool_use.name,
            tool_use_id=call.tool_use.toolUseId,
            expires_at=call.expires_at,
        )

    def deliver_client_result(
        self,
        call: ClientCall,
        output: Any,
        error: str | None,
        client: str | None,
        digest: str,
    ) -> None:
        """Take a client's result for a waiting call; a worker checks it next."""
        call.status = "delivered"
        call.output = output
        call.error = error
        call.client = client
        call.result_digest = digest
        self.emit(
            "client_result_received",
            turn=call.turn,
            cycle=call.cycle,
            id=call.id,
            tool=call.tool_use.name,
            tool_use_id=call.tool_use.toolUseId,
            client=client,
            failed=error is not None,
        )

    def end_client_call(
        self, call: ClientCall, status: ClientCallStatus, note: str | None = None
    ) -> None:
        """A client call ended: its result is in the cycle now, or it has none.

        What a repeated delivery is answered with stays (the digest, the status); the
        delivered output leaves the ledger. Only the newest ended calls are kept.
        """
        call.status = status
        call.note = note
        call.output = None
        call.error = None
        ended = [k for k, c in self.client_calls.items() if c.status not in LIVE_CALL_STATUSES]
        for key in ended[:-CARRIED_CLOSED_INTERRUPTS]:
            del self.client_calls[key]

    def waiting_client_calls(self) -> list[ClientCall]:
        """Calls of client-side tools waiting for a client's result, oldest first."""
        return [c for c in self.client_calls.values() if c.status == "waiting"]

    # ------------------------------------------------------------------ updates seen

    def remember_prompt(self, update_id: str, turn_id: int) -> None:
        """Remember an accepted ``prompt`` update, so a redelivery makes no second turn."""
        self.prompt_updates[update_id] = turn_id
        _keep_newest(self.prompt_updates)

    def remember_ack(self, key: str, ack: KeelModel) -> None:
        """Remember an update's answer under ``<update name>/<update id>``."""
        self.update_acks[key] = ack.model_dump_json()
        _keep_newest(self.update_acks)

    # ------------------------------------------------------------------ continue-as-new

    def for_next_run(self) -> Ledger:
        """This ledger as the next run gets it: the recent past only, the live state whole."""
        closed = [i for i in self.interrupts.values() if i.status != "pending"]
        live = {t for t, r in self.turns.items() if r.status in LIVE_TURN_STATUSES}
        recent = sorted(self.turns)[-CARRIED_TURNS:]
        kept_turns = sorted(live.union(recent))
        kept_interrupts = [*self.pending_interrupts(), *closed[-CARRIED_CLOSED_INTERRUPTS:]]
        return self.model_copy(
            update={
                "run": self.run + 1,
                "turns": {t: self.turns[t] for t in kept_turns},
                "interrupts": {i.id: i for i in kept_interrupts},
                "events": self.events[-CARRIED_EVENTS:],
            }
        )

    def _message_added(self, record: TurnRecord) -> None:
        self.emit(
            "message_added",
            turn=record.turn_id,
            index=self.message_count - 1,
            role=self.messages[-1].role,
        )


def _keep_newest(kept: dict[str, Any]) -> None:
    """Drop the oldest entries past ``UPDATE_IDS_KEPT``, or past ``UPDATE_MEMORY_BYTES``.

    A client picks its update ids (up to Temporal's 1,000 characters), and a ``revoke``'s
    answer holds the approval it ended: the bytes are bounded too, the newest entry kept.
    """
    while len(kept) > UPDATE_IDS_KEPT:
        del kept[next(iter(kept))]
    size = sum(_entry_bytes(key, value) for key, value in kept.items())
    while size > UPDATE_MEMORY_BYTES and len(kept) > 1:
        oldest = next(iter(kept))
        size -= _entry_bytes(oldest, kept.pop(oldest))


def _entry_bytes(key: str, value: Any) -> int:
    return len(key.encode()) + len(str(value).encode())


NO_CONFIG = SessionConfig(model="none: the start input was malformed")
"""The configuration of a session whose start input was malformed (it failed at once)."""


class SessionInput(KeelModel):
    """Start input of ``AgentSession``.

    Attributes:
        config: the session's configuration.
        messages: imported history; normalised (S3), its tool uses never executed.
        prompt: optional first prompt, queued as turn 1: content blocks, or a string (one
            text block), as a raw start (``temporal workflow start --input``) may give it.
        carried: set only by continue-as-new: the previous run's ledger.
        single_turn: close the session once its first turn ends, returning that turn in
            ``SessionResult.last_turn`` (``run_agent``, sub-agents).
        parent_session: the parent session of a sub-agent's session.
        ancestors: a sub-agent's parent, its parent's parent, ... up to the root.
        standing: a sub-agent's parent's standing approvals when it was started.
    """

    config: SessionConfig
    messages: list[Message] = Field(default_factory=list)
    prompt: list[ContentBlock] | None = None
    carried: Ledger | None = None
    single_turn: bool = False
    parent_session: str | None = None
    ancestors: list[str] = Field(default_factory=list)
    standing: list[StandingApproval] = Field(default_factory=list)

    _text_prompt = field_validator("prompt", mode="before")(prompt_blocks)
