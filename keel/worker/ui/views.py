"""What the pages show, as plain data: sessions, the conversation, interrupts, usage.

Templates (``worker/ui/templates``) only lay this out; everything a person reads is decided
here, so it is tested without a browser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keel.worker.client.effects_listing import retried_text
from keel.worker.client.reading import SessionSummary
from keel.workflows.contracts import Interrupt, SessionState
from keel.workflows.cost import cost_text
from keel.workflows.effect_contracts import EffectAttempt, EffectRecord
from keel.workflows.interrupt_kinds import fields, kind_of
from keel.workflows.messages import ContentBlock, Message, ToolResult
from keel.workflows.standing import describe
from keel.workflows.standing_bounds import bounded, describe_left

# Text longer than this (characters or lines) is shown collapsed, behind a summary.
LONG_CHARS = 500
LONG_LINES = 10
PREVIEW_CHARS = 120


@dataclass(frozen=True)
class Shown:
    """A piece of text as shown: whole, or collapsed with a one-line preview."""

    text: str
    collapsed: bool
    preview: str

    @classmethod
    def of(cls, text: str) -> Shown:
        """Show ``text``, collapsed when long."""
        long = len(text) > LONG_CHARS or text.count("\n") >= LONG_LINES
        first = " ".join(text.split())
        preview = first if len(first) <= PREVIEW_CHARS else first[:PREVIEW_CHARS] + "…"
        return cls(text=text, collapsed=long, preview=preview)


def pretty(value: Any) -> str:
    """A JSON value as indented JSON (a string as itself)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class BlockView:
    """One block of a message.

    Attributes:
        kind: ``text``, ``tool_use``, ``tool_result`` or ``other``.
        title: what the block is, in words (the tool's name for tool blocks).
        body: its content.
        error: a tool result with status ``error``.
    """

    kind: str
    title: str
    body: Shown
    error: bool = False


@dataclass(frozen=True)
class MessageView:
    """One message of the conversation."""

    index: int
    role: str
    blocks: list[BlockView]


def _result_text(result: ToolResult) -> str:
    parts = []
    for item in result.content:
        if item.text is not None:
            parts.append(item.text)
        elif item.json_ is not None:
            parts.append(pretty(item.json_))
        elif item.image is not None:
            parts.append(f"[image, {item.image.format}]")
        elif item.document is not None:
            parts.append(f"[document {item.document.name}]")
    return "\n".join(parts)


def _block(block: ContentBlock, names: dict[str, str]) -> BlockView:
    if block.text is not None:
        return BlockView("text", "", Shown.of(block.text))
    if block.toolUse is not None:
        use = block.toolUse
        return BlockView("tool_use", use.name, Shown.of(pretty(use.input)))
    if block.toolResult is not None:
        result = block.toolResult
        name = names.get(result.toolUseId, result.toolUseId)
        return BlockView(
            "tool_result", name, Shown.of(_result_text(result)), error=result.status == "error"
        )
    if block.image is not None:
        return BlockView("other", "image", Shown.of(f"[image, {block.image.format}]"))
    if block.document is not None:
        return BlockView("other", "document", Shown.of(f"[document {block.document.name}]"))
    return BlockView("other", block.kind, Shown.of(f"[{block.kind}]"))


def conversation(messages: list[Message]) -> list[MessageView]:
    """The conversation as shown: each tool result named after the tool that made it."""
    names = {
        b.toolUse.toolUseId: b.toolUse.name
        for m in messages
        for b in m.content
        if b.toolUse is not None
    }
    return [
        MessageView(index=i, role=m.role, blocks=[_block(b, names) for b in m.content])
        for i, m in enumerate(messages)
    ]


@dataclass(frozen=True)
class InterruptView:
    """A pending interrupt, with what the person needs to decide it.

    Attributes:
        heading: the heading's text before and after the tool's name (shown as code).
        update: the form that decides it: ``decide`` (buttons) or ``respond`` (an answer).
        verbs: the decisions offered (``approve``, ``deny``, ``respond``, ``resolve``), from
            its kind.
        standing: whether "Approve always" is offered.
        approve_label: the Approve button's text: for a kind that may be resolved
            (``outcome_unknown``), approving runs the tool again, and the button says so.
    """

    id: str
    kind: str
    tool: str
    name: str
    reason: str
    input: Shown
    expires_at: str | None
    heading: tuple[str, str] = ("", "")
    update: str = "decide"
    verbs: tuple[str, ...] = ()
    standing: bool = False
    approve_label: str = "Approve"


def interrupts(pending: list[Interrupt]) -> list[InterruptView]:
    """The pending interrupts, oldest first; each shown as its kind declares."""
    return [_interrupt(i) for i in pending]


def _interrupt(interrupt: Interrupt) -> InterruptView:
    spec = kind_of(interrupt)
    said = fields(interrupt)
    before, _, after = spec.page_heading.partition("{tool}")
    return InterruptView(
        id=interrupt.id,
        kind=interrupt.kind,
        tool=interrupt.tool_use.name,
        name=interrupt.name,
        reason=interrupt.reason,
        input=Shown.of(pretty(interrupt.tool_use.input)),
        expires_at=interrupt.expires_at,
        heading=(before.format(**said), after.format(**said)),
        update=spec.update,
        verbs=spec.verbs,
        standing=spec.standing,
        approve_label="Approve (run again)" if "resolve" in spec.verbs else "Approve",
    )


@dataclass(frozen=True)
class TurnView:
    """One line of the usage table."""

    turn: int
    status: str
    cycles: int
    input_tokens: int
    output_tokens: int
    error: str | None
    cost: str = "-"


@dataclass(frozen=True)
class SessionView:
    """Everything the session page shows.

    Attributes:
        said: the text of the assistant message whose tools wait or run: held out of the
            conversation until its results are in (S5), but what the approver should read.
    """

    session: str
    status: str
    running_turn: int | None
    messages: list[MessageView]
    interrupts: list[InterruptView]
    turns: list[TurnView]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    model: str
    event_count: int
    approvers: list[str] = field(default_factory=list)
    signed: bool = False
    said: list[Shown] = field(default_factory=list)
    standing: list[StandingView] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    cost: str = "cost unknown"
    sub_agents: list[SubAgentSpend] = field(default_factory=list)


@dataclass(frozen=True)
class SubAgentSpend:
    """What a sub-agent spent in the whole session, as the usage area lists it."""

    name: str
    input_tokens: int
    output_tokens: int
    cost: str


def _cost(cost_usd: float | None, unknown: bool) -> str:
    """A cost as the page shows it: ``$0.0042``, ``at least $0.0042``, ``unknown``, ``-``."""
    if cost_usd is None:
        return "unknown" if unknown else "-"
    return cost_text(cost_usd, unknown)


@dataclass(frozen=True)
class StandingView:
    """A standing approval as the page lists it: the tool, for which calls, and by whom."""

    tool: str
    when: str
    granted_by: str | None
    left: str = ""


def session_view(state: SessionState) -> SessionView:
    """The session page's data from a session's state (with its messages)."""
    running = next(
        (t.turn_id for t in state.turns if t.status in ("running", "awaiting_human")), None
    )
    return SessionView(
        session=state.session_id,
        status=state.status,
        running_turn=running,
        messages=conversation(state.messages),
        interrupts=interrupts(state.pending.interrupts),
        turns=[
            TurnView(
                turn=t.turn_id,
                status=t.status,
                cycles=t.cycles,
                input_tokens=t.usage.inputTokens,
                output_tokens=t.usage.outputTokens,
                error=t.error,
                cost=_cost(t.cost_usd, t.cost_unknown),
            )
            for t in state.turns
        ],
        cost=_cost(state.cost_usd, state.cost_unknown),
        sub_agents=[
            SubAgentSpend(
                name=name,
                input_tokens=spent.usage.inputTokens,
                output_tokens=spent.usage.outputTokens,
                cost=_cost(spent.cost_usd, spent.cost_unknown),
            )
            for name, spent in state.sub_agents.items()
        ],
        input_tokens=state.usage.inputTokens,
        output_tokens=state.usage.outputTokens,
        total_tokens=state.usage.totalTokens,
        model=state.config.model,
        event_count=state.event_count,
        approvers=list(state.config.approvers),
        signed=bool(state.config.approver_keys),
        said=[
            Shown.of(b.text)
            for b in (state.pending.message.content if state.pending.message else [])
            if b.text
        ],
        retries=[
            f"{e.detail.get('tool')} ({e.detail.get('id')}): {retried_text(e.detail)}"
            for e in state.events
            if e.type == "tool_retried"
        ],
        standing=[
            StandingView(
                tool=a.tool,
                when=describe(a.when),
                granted_by=a.granted_by,
                left=describe_left(a, datetime.now(UTC)) if bounded(a) else "",
            )
            for a in state.pending.standing
        ],
    )


@dataclass(frozen=True)
class SessionRow:
    """One row of the sessions list."""

    session: str
    status: str
    waiting: int | None
    last_activity: str


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "?"
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def session_rows(summaries: list[SessionSummary]) -> list[SessionRow]:
    """Sessions with pending approvals and questions first, then by last activity."""

    def order(s: SessionSummary) -> tuple[int, float]:
        moment = s.last_activity.timestamp() if s.last_activity is not None else 0.0
        return (0 if s.pending_approvals else 1, -moment)

    return [
        SessionRow(
            session=s.session,
            status=(s.status or "not answering")
            if s.workflow_status == "running"
            else s.workflow_status,
            waiting=s.pending_approvals,
            last_activity=_when(s.last_activity),
        )
        for s in sorted(summaries, key=order)
    ]


@dataclass(frozen=True)
class EffectView:
    """One journaled tool call as the session page lists it (``keel effects``).

    Attributes:
        tool: the tool's name.
        tool_use_id: the model's ``toolUseId``.
        effect: its class (``write``, ``idempotent``).
        attempts: one phrase per attempt of its body: when it started, how it ended.
        outcome: how it was settled (``done``, ``unknown``, ``resolved``, ...).
        decided_by: who settled it, when a person did.
    """

    tool: str
    tool_use_id: str
    effect: str
    attempts: list[str]
    outcome: str
    decided_by: str | None


@dataclass(frozen=True)
class EffectsTable:
    """The session's journaled calls; ``available`` is False when its worker cannot list them."""

    rows: list[EffectView] = field(default_factory=list)
    available: bool = True


def effects_table(records: list[EffectRecord] | None) -> EffectsTable:
    """The effects table of the session page; None: the session's worker does not answer."""
    if records is None:
        return EffectsTable(available=False)
    return EffectsTable(
        rows=[
            EffectView(
                tool=r.tool,
                tool_use_id=r.tool_use_id,
                effect=r.effect,
                attempts=[_attempt(a) for a in r.attempts],
                outcome=r.outcome,
                decided_by=r.decided_by,
            )
            for r in records
        ],
    )


def _attempt(attempt: EffectAttempt) -> str:
    started = _iso_when(attempt.started_at)
    if attempt.ended is None:
        return f"{attempt.attempt}: started {started}, no end recorded"
    return f"{attempt.attempt}: started {started}, {attempt.ended.replace('_', ' ')}"


def _iso_when(text: str) -> str:
    """An ISO time as the page shows times (UTC); as given when it does not parse."""
    try:
        return _when(datetime.fromisoformat(text))
    except ValueError:
        return text
