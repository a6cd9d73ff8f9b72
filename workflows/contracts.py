"""Typed inputs and outputs of the session workflow, its handlers and its activities.

One pydantic model per workflow, activity, update and query, as Temporal's samples do.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.messages import ContentBlock, ConverseModel, Message, TokenUsage, ToolResult, ToolUse

TurnStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
SessionStatus = Literal["idle", "running", "closing", "closed"]
EventType = Literal[
    "prompt_queued",
    "turn_started",
    "model_called",
    "tool_started",
    "tool_finished",
    "message_added",
    "turn_ended",
    "interrupt_created",
    "interrupt_decided",
    "steering_queued",
    "steering_added",
    "steering_dropped",
    "run_continued",
    "session_closed",
]
InterruptKind = Literal["approval", "question"]
InterruptStatus = Literal["pending", "approved", "denied", "answered", "timed_out", "cancelled"]


class KeelModel(BaseModel):
    """Base for Keel's own (non-Converse) types: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid")


class PrefixRef(KeelModel):
    """A stored conversation prefix: the digest of its last segment and its length."""

    digest: str
    count: int = Field(ge=0)


class ToolSpec(KeelModel):
    """One tool: its Converse spec and how to run it."""

    name: str
    description: str
    inputSchema: dict[str, Any]
    requires_approval: bool = False
    timeout_s: float = 300.0
    module: str = ""

    def terms(self) -> ToolSpec:
        """What the workflow keeps of the spec: how to run the tool, not how to describe it.

        The description and the input schema are for the model; they stay in the store
        (under the session's ``tools_digest``) and out of workflow history and memory.
        """
        return self.model_copy(update={"description": "", "inputSchema": {}})


class InferenceConfig(ConverseModel):
    """Converse ``inferenceConfig``."""

    maxTokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    topP: float | None = Field(default=None, ge=0, le=1)
    stopSequences: list[str] | None = None


class SessionConfig(KeelModel):
    """How a session runs; fixed when the session starts.

    Attributes:
        model: model spec, e.g. ``bedrock:<model-id>`` or ``scripted:<path.json>``.
        system: system prompt.
        tool_modules: modules whose tools this session may use; empty means every tool the
            worker loaded.
        inference: inference parameters for every model call.
        approval_tools: tool names that need a human's approval in this session, on top of
            the tools declared ``@tool(requires_approval=True)``.
        policy: the name of a tool policy registered on the workers (``@tool_policy``),
            consulted for every tool use: run, deny with a reason, or require approval.
        approvers: identities allowed to decide; empty means anyone who can reach the
            session. The identity is what the decision claims: Temporal's own authorization
            decides who may send updates at all.
        approval_timeout_s: deny an interrupt nobody decided within this many seconds.
        max_cycles_per_turn: end a turn (stop reason ``max_cycles``) before a model call
            past this many.
        max_session_tokens: end a turn (stop reason ``token_budget``) before a model call
            once the session has used this many tokens; later prompts are refused.
        context_messages: show the model only about the last this many messages (whole
            tool-use / tool-result pairs, starting at a user message); history is kept whole.
        continue_as_new_events: continue-as-new at the next safe point once the run's history
            has this many events (Temporal's own suggestion also triggers it).
        continue_as_new_bytes: likewise for the run's history size in bytes.
    """

    model: str = Field(min_length=1)
    system: str | None = None
    tool_modules: list[str] = Field(default_factory=list)
    inference: InferenceConfig | None = None
    approval_tools: list[str] = Field(default_factory=list)
    policy: str | None = None
    approvers: list[str] = Field(default_factory=list)
    approval_timeout_s: float | None = Field(default=None, gt=0)
    max_cycles_per_turn: int | None = Field(default=None, gt=0)
    max_session_tokens: int | None = Field(default=None, gt=0)
    context_messages: int | None = Field(default=None, ge=2)
    continue_as_new_events: int = Field(default=10_000, ge=20)
    continue_as_new_bytes: int = Field(default=20_000_000, ge=100_000)


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


class Carried(KeelModel):
    """What one run of a session hands to the next through continue-as-new.

    Only references and the not-yet-stored tail of the conversation travel, so the size stays
    bounded however long the conversation is.
    """

    run: int
    base: PrefixRef | None = None
    messages: list[Message] = Field(default_factory=list)
    result_refs: dict[str, str] = Field(default_factory=dict)
    queue: list[QueuedPrompt] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    current_turn: int | None = None
    cycle: PendingCycle | None = None
    interrupts: list[Interrupt] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    event_seq: int = 0
    events: list[Event] = Field(default_factory=list)
    tools: list[ToolSpec] | None = None
    tools_digest: str | None = None
    steering: list[str] = Field(default_factory=list)
    tool_use_ids: list[str] = Field(default_factory=list)
    cancel_reason: str | None = None
    closing: bool = False
    # ids of the ``prompt`` updates accepted lately, with their turns; the answers (JSON) of
    # the ``steer``, ``decide``, ``respond`` and ``cancel`` updates accepted lately, by
    # ``<update name>/<update id>`` (see SessionHandlers)
    prompt_updates: dict[str, int] = Field(default_factory=dict)
    update_acks: dict[str, str] = Field(default_factory=dict)


class SessionInput(KeelModel):
    """Start input of ``AgentSession``.

    Attributes:
        config: the session's configuration.
        messages: imported history; normalised (S3), its tool uses never executed.
        prompt: optional first prompt, queued as turn 1.
        carried: set only by continue-as-new: the previous run's state.
    """

    config: SessionConfig
    messages: list[Message] = Field(default_factory=list)
    prompt: list[ContentBlock] | None = None
    carried: Carried | None = None


class PromptInput(KeelModel):
    """Input of the ``prompt`` update."""

    content: list[ContentBlock]
    role: str = "user"


class PromptAck(KeelModel):
    """Answer of the ``prompt`` update: the prompt is queued as this turn."""

    turn_id: int
    queued_behind: int


class CancelInput(KeelModel):
    """Input of the ``cancel`` update."""

    reason: str = "cancelled by user"


class CancelAck(KeelModel):
    """Answer of the ``cancel`` update."""

    turn_id: int


class CloseInput(KeelModel):
    """Input of the ``close`` signal."""

    reason: str = "closed by user"


class Interrupt(KeelModel):
    """A point where a turn waits for a human, with a workflow-generated id.

    Attributes:
        id: generated by the workflow; decisions and responses must name it.
        kind: ``approval`` (approve or deny a tool use, with ``decide``) or ``question``
            (a tool asked with ``ctx.interrupt``; answer with ``respond``).
        tool_use: the tool use exactly as the model produced it; what runs if approved.
        name: the tool's name for an approval; the question's name for a question.
        reason: why a human is asked.
        turn: the turn that waits.
        status: pending, approved, denied, timed_out or cancelled.
        decided_by: the approver identity the decision carried.
        decision_reason: the reason given with the decision (or the timeout).
        expires_at: when the approval timeout denies it (ISO time), if the session has one.
        response: the answer to a question.
    """

    id: str
    kind: InterruptKind = "approval"
    tool_use: ToolUse
    name: str
    reason: str
    turn: int
    status: InterruptStatus = "pending"
    decided_by: str | None = None
    decision_reason: str | None = None
    expires_at: str | None = None
    response: Any = None


class Decision(KeelModel):
    """Input of the ``decide`` update and signal.

    A decision approves or denies; it cannot carry a tool input (unknown fields are
    rejected), so what runs is what the model produced.
    """

    interrupt_id: str = Field(min_length=1)
    decision: Literal["approve", "deny"]
    reason: str | None = None
    approver: str | None = None


class Response(KeelModel):
    """Input of the ``respond`` update and signal: the answer to a tool's question.

    Attributes:
        interrupt_id: the question's interrupt id.
        value: the answer, any JSON value (``ctx.interrupt`` returns it to the tool).
        responder: who answers; checked against the session's approvers when it names any.
    """

    interrupt_id: str = Field(min_length=1)
    value: Any
    responder: str | None = None


class DecisionAck(KeelModel):
    """Answer of the ``decide`` update."""

    interrupt_id: str
    turn_id: int
    status: InterruptStatus


class SteerInput(KeelModel):
    """Input of the ``steer`` update: guidance for the turn in progress."""

    text: str


class SteerAck(KeelModel):
    """Answer of the ``steer`` update."""

    turn_id: int


class TurnRecord(KeelModel):
    """A turn as clients see it.

    Attributes:
        turn_id: 1-based turn number in this session.
        status: queued, running, completed, failed, cancelled or interrupted.
        stop_reason: the model's last stop reason, or ``cancelled``.
        message: the last assistant message of the turn.
        usage: tokens used by this turn.
        error: why the turn failed or was cancelled.
        cycles: model calls made in this turn.
        interrupts: the turn's interrupts that wait for a decision.
    """

    turn_id: int
    status: TurnStatus = "queued"
    stop_reason: str | None = None
    message: Message | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    error: str | None = None
    cycles: int = 0
    interrupts: list[Interrupt] = Field(default_factory=list)


class Event(KeelModel):
    """One entry of a session's event log."""

    seq: int
    type: EventType
    at: str
    turn: int | None = None
    cycle: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class StateQuery(KeelModel):
    """Input of the ``state`` query."""

    events_since: int = 0
    include_messages: bool = True


class PendingView(KeelModel):
    """Answer of the ``pending`` query: what the current turn holds outside the conversation.

    Attributes:
        turn_id: the running turn, if any.
        message: the assistant message whose tools run now (deferred append, S5).
        running: tool uses of that message still running or waiting for approval.
        interrupts: interrupts waiting for a decision.
    """

    turn_id: int | None = None
    message: Message | None = None
    running: list[ToolUse] = Field(default_factory=list)
    interrupts: list[Interrupt] = Field(default_factory=list)


class SessionState(KeelModel):
    """Answer of the ``state`` query.

    The conversation is ``base`` (messages in the conversation store, by reference) followed
    by ``messages`` (not stored yet); ``KeelClient.state`` joins them into one list.
    """

    session_id: str
    status: SessionStatus
    config: SessionConfig
    base: PrefixRef | None = None
    messages: list[Message] = Field(default_factory=list)
    message_count: int
    pending: PendingView
    queued: list[int] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    events: list[Event] = Field(default_factory=list)
    event_count: int = 0
    run: int = 1


class SessionResult(KeelModel):
    """Result of a closed session."""

    session_id: str
    turns: int
    usage: TokenUsage


class ModelRequest(KeelModel):
    """Input of the ``keel.model.converse`` activity.

    The conversation is ``prefix`` (stored, by reference) followed by ``messages`` (not yet
    stored); the activity stores ``messages`` and answers with the longer prefix, so each
    message's content enters workflow history a constant number of times. A toolResult the
    tool activity already stored is sent with empty content, its digest in ``result_refs``
    (by toolUseId). Tool specs never enter history in full: a call without ``tools_digest``
    (a session's first) names the session's tool modules (``describe_modules``); the activity
    describes them from the worker's registry, stores the specs, uses them, and answers with
    their digest and their terms (``ToolSpec.terms``); later calls send the digest. Inline
    ``tools`` are still accepted from sessions started before that.
    """

    session_id: str
    turn: int
    cycle: int
    model: str
    system: str | None = None
    prefix: PrefixRef | None = None
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    tools_digest: str | None = None
    result_refs: dict[str, str] = Field(default_factory=dict)
    inference: InferenceConfig | None = None
    context_messages: int | None = None
    describe_modules: list[str] | None = None


class ModelResponse(KeelModel):
    """Result of the ``keel.model.converse`` activity.

    Attributes:
        message: the assistant message.
        stopReason: why the model stopped.
        usage: tokens of this call.
        stored: the stored prefix now covering the request's prefix and messages.
        tools_digest: where the request's tool specs are stored.
        tools: the tools the activity described, when the request named ``describe_modules``:
            their terms only (``ToolSpec.terms``); the whole specs are under ``tools_digest``.
    """

    message: Message
    stopReason: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    stored: PrefixRef | None = None
    tools_digest: str | None = None
    tools: list[ToolSpec] | None = None


class ToolRequest(KeelModel):
    """Input of the ``keel.tool.run`` activity.

    Attributes:
        session_id: the session.
        tool_use: the tool use as the model produced it.
        idempotency_key: ``<session id>/<toolUseId>``, the same on every run of this use.
        timeout_s: the tool's timeout, enforced by the activity.
        answers: answers to the questions this tool use asked so far, by question name.
    """

    session_id: str
    tool_use: ToolUse
    idempotency_key: str
    timeout_s: float
    answers: dict[str, Any] = Field(default_factory=dict)


class ToolQuestion(KeelModel):
    """A question a tool asked with ``ctx.interrupt(name, reason)``."""

    name: str
    reason: str | None = None


class ToolResponse(KeelModel):
    """Result of the ``keel.tool.run`` activity: a result, or a question.

    Attributes:
        result: the toolResult; None when the tool asked a question instead.
        question: what the tool asked; the tool runs again once a human answers.
        digest: where the activity stored ``{"toolResult": result}``, if it did.
    """

    result: ToolResult | None
    question: ToolQuestion | None = None
    digest: str | None = None


class DescribeToolsInput(KeelModel):
    """Input of the ``keel.tools.describe`` activity."""

    modules: list[str] = Field(default_factory=list)


class DescribeToolsResult(KeelModel):
    """Result of the ``keel.tools.describe`` activity."""

    tools: list[ToolSpec]


# Carried (and SessionInput through it) names models defined after it. Complete their schemas
# now, once, instead of leaving pydantic to rebuild them on every validation: the data
# converter validates a SessionInput for every new workflow run.
Carried.model_rebuild()
SessionInput.model_rebuild()
