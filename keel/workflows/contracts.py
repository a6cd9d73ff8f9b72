"""The session workflow's surface: configuration, update and query types, turn records.

One pydantic model per update, signal and query, as Temporal's samples do. The activities'
inputs and outputs are in ``keel.workflows.activity_contracts``; the workflow's start input and
its state are in ``keel.workflows.ledger``.

Pure module: imported by workflow code.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from keel.workflows.budget_contracts import ModelPrice, OnBudget
from keel.workflows.cost import Spend
from keel.workflows.escalation_contracts import EscalationStep, escalation_problem
from keel.workflows.keel_model import KeelModel as KeelModel  # re-exported: its old home
from keel.workflows.messages import (
    ContentBlock,
    ConverseModel,
    Message,
    TokenUsage,
    ToolUse,
    prompt_blocks,
)
from keel.workflows.replay_contracts import ReplayPlan, ReplayProgress

TurnStatus = Literal["queued", "running", "completed", "failed", "cancelled", "awaiting_human"]
# the last four only as a reader tells them: how Temporal ended the run (keel.workflows.run_ends)
SessionStatus = Literal[
    "idle", "running", "closing", "closed", "terminated", "cancelled", "timed_out", "failed"
]
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
    "notification_sent",
    "notification_failed",
    "client_call_published",
    "client_result_received",
    "standing_approval_granted",
    "standing_approval_used",
    "standing_approval_revoked",
    "standing_approval_exhausted",
    "judge_verdict",
    "tool_retried",
    "replay_answered",
    "replay_live_read",
    "replay_diverged",
    "budget_granted",
    "budget_raised",
    "interrupt_escalated",
]
# A notification URL: http or https, a host, nothing that is not a URL character.
_NOTIFY_URL = re.compile(r"^https?://[^\s/?#@]+(?:[/?#]\S*)?$")
InterruptKind = Literal["approval", "question", "outcome_unknown", "budget"]
# What running a tool again does to the world (``@tool(effect=...)``, ``keel.workflows.effects``):
# ``read`` nothing, ``idempotent`` nothing more, ``write`` maybe its effect a second time.
Effect = Literal["read", "idempotent", "write"]
# Where a tool's body runs: on a worker (the tool activity), or on a client attached to the
# session (``@tool(runs_on="client")``, ``keel.workflows.client_tools``).
RunsOn = Literal["worker", "client"]
# A turn's default bounds (SessionConfig): a model that keeps calling tools stops here.
DEFAULT_MAX_CYCLES = 100
DEFAULT_TURN_TOKENS = 2_000_000
# How long a model call may take, its retries included, by default (SessionConfig.model_retry_s;
# keel.workflows.activity_options.MODEL_RETRY).
DEFAULT_MODEL_RETRY_S = 600.0
# How often a turn with an output schema that ended without a valid final_result is asked
# again before it fails (stop reason ``no_output``).
OUTPUT_REMINDERS = 2
InterruptStatus = Literal[
    "pending", "approved", "denied", "answered", "resolved", "timed_out", "cancelled"
]


def notify_urls(urls: list[str]) -> list[str]:
    """Check notification URLs: http or https, with a host and no user part.

    Raises:
        ValueError: naming the first URL that is not one.
    """
    for url in urls:
        if not _NOTIFY_URL.match(url):
            raise ValueError(f"not an http(s) URL: {url!r}")
    return urls


class PrefixRef(KeelModel):
    """A stored conversation prefix: the digest of its last segment and its length."""

    digest: str
    count: int = Field(ge=0)


class ToolSpec(KeelModel):
    """One tool: its Converse spec and how to run it."""

    name: str
    description: str
    inputSchema: dict[str, Any]
    requires_approval: Literal["always"] | bool = False
    timeout_s: float = 300.0
    module: str = ""
    runs_on: RunsOn = "worker"
    effect: Effect = "write"

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


# A worker that has not cached a session (restarted, or evicted it) replays the session's
# current run before it acts on an approval: about 0.08 s + 0.22 s per 1,000 events on 2
# cores (tests/benchmarks/cold_resume.py). At 3,000 events the longest run resumes in about
# 0.75 s; at 10,000 it would take 2.3 s on a server whose own suggestion (4,096 events by
# default) is raised.
DEFAULT_CONTINUE_AS_NEW_EVENTS = 3_000


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
        tool_effects: tool name -> effect class (``read``, ``idempotent``, ``write``) for
            this session, over what the worker declares (``@tool(effect=...)``, an MCP
            tool's annotations); an agent file's ``effects`` table.
        policy: the name of a tool policy registered on the workers (``@tool_policy``),
            consulted for every tool use: run, deny with a reason, or require approval.
        policies: further policies every tool use must pass; a sub-agent's session gets
            its parents' here (``keel.workflows.inheritance``). The strictest verdict counts.
        approvers: identities allowed to decide; empty means anyone who can reach the
            session. The identity is what the decision claims: Temporal's own authorization
            decides who may send updates at all.
        approver_keys: approver name -> Ed25519 public key (``ed25519:<base64>``). When any
            is given, a decision or answer counts only when signed by the key of the approver
            it names (``keel.workflows.signing``); approvers without a key cannot decide.
        approval_timeout_s: deny an interrupt nobody decided within this many seconds.
        max_cycles_per_turn: end a turn (stop reason ``max_cycles``) before a model call
            past this many; default ``DEFAULT_MAX_CYCLES``, None for no limit.
        max_turn_tokens: end a turn (stop reason ``token_budget``) before a model call once
            the turn has used this many tokens (input and output, as the model reports them);
            default ``DEFAULT_TURN_TOKENS``, None for no limit.
        max_session_tokens: end a turn (stop reason ``token_budget``) before a model call
            once the session has used this many tokens; later prompts are refused.
        context_messages: show the model only about the last this many messages (whole
            tool-use / tool-result pairs, starting at a user message); history is kept whole.
        continue_as_new_events: continue-as-new at the next safe point once the run's history
            has this many events (Temporal's own suggestion also triggers it); default
            ``DEFAULT_CONTINUE_AS_NEW_EVENTS``, 3,000.
        continue_as_new_bytes: likewise for the run's history size in bytes.
        output_schema: a JSON Schema for the turn's structured output: the model is offered
            a tool ``final_result`` taking it, and a valid call ends the turn with its input
            as ``TurnRecord.output``.
        agents: sub-agents by name, each offered to the model as a tool of that name taking
            ``{"prompt": string}``; a call runs one turn of a child session.
        notify: http(s) URLs that get a JSON POST when an interrupt opens and when a turn
            ends (``keel.workflows.notifications``); a failed POST never stops the session.
        heartbeat_timeout_s: how long a running model call or tool run may go without a
            heartbeat before Temporal deems its worker lost and retries it on another;
            None: Keel's default, 30 s (``keel.workflows.activity_options.HEARTBEAT_TIMEOUT``).
            Each running activity heartbeats three times per timeout, at most 10 s apart. A
            worker restarted where a dead one ran, or running beside it, takes its attempts
            back at once whatever this is (``keel.worker.process.inflight``).
        model_retry_s: how long one model call may take in all, its retries included (the
            model activity's schedule-to-close timeout): a model server that does not answer
            is retried with backoff (0.25 s, doubling, at most 60 s apart) until then, and
            the turn fails with the last error. Default ``DEFAULT_MODEL_RETRY_S``, 600 s;
            None: no bound. An answer retrying cannot fix (401, 404, an unknown model) fails
            the turn at once.
        judge: a judge in the gate: ``module:function``, a ``@judge`` function in a module
            the workers were given, asked about each gated call with its criteria
            (``keel.workflows.judging``); a person decides what it does not.
        judge_model: a model spec that judges instead of a function.
        judge_criteria: criteria by tool name; a tool without criteria always goes to a person.
        judge_may_approve: False: the judge only denies or escalates. A sub-agent of a session
            with ``approver_keys`` gets False (``keel.workflows.inheritance``) unless that
            session sets ``sub_agent_judge_may_approve``.
        sub_agent_judge_may_approve: with ``approver_keys``, let this session's sub-agents'
            judge (its own, inherited) approve, not only deny or escalate.
        auto_upgrade: on versioned workers (``keel worker --deployment``), move to the
            deployment's current version at the next workflow task instead of staying pinned
            to the version the session started on; for changes that replay (``keel deploy
            check``). Applied by the client that starts the session, for the run it starts.
        on_budget: what a turn does when it reaches a cap (``max_cycles_per_turn``, the token
            and cost budgets): ``ask`` parks it on an interrupt of kind ``budget`` for a
            person to grant more (``keel approve``) or end it (``keel deny``); ``fail`` ends it
            at once (``keel.workflows.budgets``).
        max_turn_cost_usd: a turn's cost cap in US dollars (with ``price``, or the workers'
            prices); checked before each model call.
        max_session_cost_usd: the session's cost cap in US dollars.
        price: the model's price (dollars per million input and output tokens), over the
            workers' price table.
        replay: set only for a replay (``keel replay``, ``keel eval``): the recording the
            session answers its tool calls from; none of its tools runs, but a ``read`` one
            with ``ReplayPlan.live_read`` (``keel.workflows.replaying``).
        escalate: escalation steps, in increasing ``after_s``: an interrupt still pending
            that long after it opened may also be decided by the step's approvers, who are
            notified then (``keel.workflows.escalation``). Until their step, they may not
            decide it. The approval timeout, if any, stays the last word (every step comes
            before it); on a signed session each escalation approver needs a key.
    """

    model: str = Field(min_length=1)
    system: str | None = None
    tool_modules: list[str] = Field(default_factory=list)
    inference: InferenceConfig | None = None
    approval_tools: list[str] = Field(default_factory=list)
    tool_effects: dict[str, Effect] = Field(default_factory=dict)
    policy: str | None = None
    policies: list[str] = Field(default_factory=list)
    approvers: list[str] = Field(default_factory=list)
    approver_keys: dict[str, str] = Field(default_factory=dict)
    approval_timeout_s: float | None = Field(default=None, gt=0)
    max_cycles_per_turn: int | None = Field(default=DEFAULT_MAX_CYCLES, gt=0)
    max_turn_tokens: int | None = Field(default=DEFAULT_TURN_TOKENS, gt=0)
    max_session_tokens: int | None = Field(default=None, gt=0)
    context_messages: int | None = Field(default=None, ge=2)
    continue_as_new_events: int = Field(default=DEFAULT_CONTINUE_AS_NEW_EVENTS, ge=20)
    continue_as_new_bytes: int = Field(default=20_000_000, ge=100_000)
    output_schema: dict[str, Any] | None = None
    agents: dict[str, SubAgent] = Field(default_factory=dict)
    notify: list[str] = Field(default_factory=list)
    heartbeat_timeout_s: float | None = Field(default=None, ge=0.5, le=600)
    model_retry_s: float | None = Field(default=DEFAULT_MODEL_RETRY_S, gt=0)
    auto_upgrade: bool = False
    judge: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    judge_model: str | None = Field(default=None, min_length=1)
    judge_criteria: dict[str, JudgeCriteria] = Field(default_factory=dict)
    judge_may_approve: bool = True
    sub_agent_judge_may_approve: bool = False
    on_budget: OnBudget = "ask"
    max_turn_cost_usd: float | None = Field(default=None, gt=0)
    max_session_cost_usd: float | None = Field(default=None, gt=0)
    price: ModelPrice | None = None
    replay: ReplayPlan | None = None
    escalate: list[EscalationStep] = Field(default_factory=list)

    @field_validator("notify")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        return notify_urls(urls)

    @model_validator(mode="after")
    def _escalation(self) -> SessionConfig:
        problem = escalation_problem(
            self.escalate, self.approvers, self.approver_keys, self.approval_timeout_s
        )
        if problem is not None:
            raise ValueError(problem)
        return self


class JudgeCriteria(KeelModel):
    """What a judge in the gate holds one tool's calls against (``keel.workflows.judging``).

    Attributes:
        approve_when: when the call may be approved (all must hold).
        escalate_when: when a person must decide, whatever else holds.
        deny_when: when the call is denied (any one suffices).
        min_confidence: a verdict less sure than this goes to a person.
        on_deny_match: what a call matching a ``deny_when`` written as a test gets without
            the judge being asked: ``deny`` (default) or ``escalate`` (a person decides).

    A criterion written as a test (``path startswith "/etc"``, as ``--always-when`` reads) is
    enforced by the workflow itself; any other text is for the judge to weigh.
    """

    approve_when: list[str] = Field(default_factory=list)
    escalate_when: list[str] = Field(default_factory=list)
    deny_when: list[str] = Field(default_factory=list)
    min_confidence: float = Field(default=0.8, ge=0, le=1)
    on_deny_match: Literal["deny", "escalate"] = "deny"


class SubAgent(KeelModel):
    """A sub-agent: how its parent's model sees it, and its own session's configuration."""

    description: str = Field(min_length=1)
    config: SessionConfig


SessionConfig.model_rebuild()


class PromptInput(KeelModel):
    """Input of the ``prompt`` update.

    Attributes:
        content: content blocks, or a string (one text block), as a raw client may give it.
        role: only ``user`` is accepted.
    """

    content: list[ContentBlock]
    role: str = "user"

    _text_content = field_validator("content", mode="before")(prompt_blocks)


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
    """Input of the ``close`` signal.

    Attributes:
        reason: why, for the log (and, with ``now``, the cancelled turns' error).
        now: end the session now (``keel close``): cancel the running turn, drop the queued
            ones; without it, the session ends once they have finished.
    """

    reason: str = "closed by user"
    now: bool = False


class Interrupt(KeelModel):
    """A point where a turn waits for a human, with a workflow-generated id.

    Attributes:
        id: generated by the workflow; decisions and answers must name it.
        kind: ``approval`` (approve or deny a tool use, with ``decide``), ``question``
            (a tool asked with ``ctx.interrupt``; answer with ``respond``) or
            ``outcome_unknown`` (a ``write`` tool's attempt ended without a result: run it
            again, deny, or resolve with its result, with ``decide``).
        tool_use: the tool use exactly as the model produced it; what runs if approved.
        name: the tool's name for an approval; the question's name for a question.
        reason: why a human is asked.
        turn: the turn that waits.
        status: pending, approved, denied, answered, resolved, timed_out or cancelled.
        decided_by: the approver identity the decision carried.
        decision_reason: the reason given with the decision (or the timeout).
        expires_at: when the approval timeout denies it (ISO time), if the session has one.
        answer: the answer to a question.
        key_fingerprint: the fingerprint of the approver key whose signature was verified,
            when the session requires signed approvals (``decided_by`` is that approver).
        note: for a sub-agent's interrupt shown in its parent, why the last decision or
            answer given here was refused by the sub-agent's session (it stays pending).
        signing: the version of the message a signature of its decision or answer covers
            (``keel.workflows.signing.approval_message``): 2 since the session's workflow
            took the ``keel-signing-v2`` patch, 1 for an interrupt opened before.
        opened_at: when it opened (ISO time); set on a session with escalation steps.
        escalated: how many of the session's escalation steps have come.
        escalated_to: the approvers those steps added: they may decide it now.
        escalated_at: when the last step came (ISO time).
        may_decide: who may decide it now, on a session with escalation steps that names
            its approvers (or their keys); empty: anyone but the approvers of steps to come.
        next_escalation_at: when the next escalation step comes (ISO time), if one does.
        next_approvers: who that step adds.
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
    answer: Any = None
    key_fingerprint: str | None = None
    note: str | None = None
    signing: Literal[1, 2] = 1
    opened_at: str | None = None
    escalated: int = Field(default=0, ge=0)
    escalated_to: list[str] = Field(default_factory=list)
    escalated_at: str | None = None
    may_decide: list[str] = Field(default_factory=list)
    next_escalation_at: str | None = None
    next_approvers: list[str] = Field(default_factory=list)


ConditionOp = Literal["==", "!=", "startswith", "endswith", "in", "<", "<=", ">", ">=", "under"]


class Condition(KeelModel):
    """One test on a tool input: ``<field> <op> <value>`` (``path startswith "docs/"``).

    ``field`` names a top-level key of the input (a dotted path reaches into objects); a
    missing field fails every test.
    """

    field: str = Field(min_length=1)
    op: ConditionOp
    value: Any


class StandingApproval(KeelModel):
    """A person's "approve, and stop asking" for one tool in one session.

    Its bounds (``keel.workflows.standing_bounds``), each unset unless the granting decision
    set it: past any of them it covers no more calls and ends (``standing_approval_exhausted``).

    Attributes:
        tool: the tool's name; its later calls in the session run without asking.
        when: tests every later call's input must pass (all of them); none: every call.
        granted_by: the approver the granting decision named (verified when signed).
        key_fingerprint: the fingerprint of the key that signed it, when signatures count.
        interrupt_id: the interrupt whose decision granted it.
        turn: the turn it was granted in.
        max_uses: how many later calls it covers at most (``Decision.max_uses``).
        uses: how many it covered (counted when ``max_uses`` is set).
        expires_at: when it ends (ISO 8601, the workflow's time at the grant plus ``for_s``).
        total: the running total it allows: ``amount <= 100`` (``Decision.total``).
        spent: the sum of that field over the calls it covered (when ``total`` is set).
    """

    tool: str
    when: list[Condition] = Field(default_factory=list)
    granted_by: str | None = None
    key_fingerprint: str | None = None
    interrupt_id: str
    turn: int
    max_uses: int | None = None
    uses: int = 0
    expires_at: str | None = None
    total: Condition | None = None
    spent: float = 0

    @model_serializer(mode="wrap")
    def _without_unset_bounds(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave out the bounds not set: an approval without them reads as before them."""
        data = handler(self)
        if isinstance(data, dict):
            for bound, kept in (("max_uses", "uses"), ("total", "spent")):
                if data.get(bound) is None:
                    data.pop(bound, None)
                    data.pop(kept, None)
            if data.get("expires_at") is None:
                data.pop("expires_at", None)
        return data


class Decision(KeelModel):
    """Input of the ``decide`` update and signal.

    A decision approves or denies; it cannot carry a tool input (unknown fields are
    rejected), so what runs is what the model produced. ``resolve`` (only for an
    ``outcome_unknown`` interrupt) records ``result`` as the tool's result, without running
    it. ``extend`` (only approving a ``budget`` interrupt) grants that much more of the
    cap reached (model calls, tokens or dollars) instead of its allowance once more; signed,
    it is covered. ``signature``: base64 Ed25519 signature of
    ``keel.workflows.signing.approval_message`` by the approver's key, required when the
    session has ``approver_keys``. ``always``: an approval that also stands for the
    tool's later calls in this session (those whose input passes ``always_when``); signed,
    it is part of what the signature covers. Its bounds, with ``always`` only (each signed
    too, when set): ``max_uses`` later calls at most, for ``for_s`` seconds at most, and a
    running ``total`` over a numeric field of the input (``amount <= 100``).
    """

    interrupt_id: str = Field(min_length=1)
    decision: Literal["approve", "deny", "resolve"]
    reason: str | None = None
    approver: str | None = None
    signature: str | None = None
    always: bool = False
    always_when: list[Condition] = Field(default_factory=list)
    result: str | None = None
    extend: float | None = Field(default=None, gt=0)
    max_uses: int | None = Field(default=None, ge=1)
    for_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    total: Condition | None = None

    @model_serializer(mode="wrap")
    def _without_empty_result(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave out ``result`` and the bounds unless set: a worker from before them reads it."""
        data = handler(self)
        if isinstance(data, dict):
            for name in ("result", "max_uses", "for_s", "total"):
                if data.get(name) is None:
                    data.pop(name, None)
        return data


class RevokeInput(KeelModel):
    """Input of the ``revoke`` update: withdraw a tool's standing approval.

    Attributes:
        tool: the tool whose standing approval ends; its next call asks a person again.
        by: who revokes; checked against the session's approvers when it names any.
    """

    tool: str = Field(min_length=1)
    by: str | None = None


class RevokeAck(KeelModel):
    """Answer of the ``revoke`` update: the standing approval that ended."""

    revoked: StandingApproval


class Answer(KeelModel):
    """Input of the ``respond`` update and signal: the answer to a tool's question.

    Attributes:
        interrupt_id: the question's interrupt id.
        value: the answer, any JSON value (``ctx.interrupt`` returns it to the tool).
        responder: who answers; checked against the session's approvers when it names any.
        signature: as ``Decision.signature``, over the answer's canonical JSON.
    """

    interrupt_id: str = Field(min_length=1)
    value: Any
    responder: str | None = None
    signature: str | None = None


class InterruptAck(KeelModel):
    """Answer of the ``decide`` and ``respond`` updates: the interrupt's status after it."""

    interrupt_id: str
    turn_id: int
    status: InterruptStatus


class SteerInput(KeelModel):
    """Input of the ``steer`` update: guidance for the turn in progress."""

    text: str


class SteerAck(KeelModel):
    """Answer of the ``steer`` update."""

    turn_id: int


ClientCallStatus = Literal[
    "waiting", "delivered", "done", "invalid", "failed", "timed_out", "cancelled"
]


class ClientCall(KeelModel):
    """A call of a client-side tool (``@tool(runs_on="client")``), published for a client.

    The session publishes it once the model asked for the tool and any approval was given;
    a client attached to the session (``keel attach``, ``KeelClient.serve_tools``) runs the
    tool on its own machine and delivers the result with the update ``tool_result``.

    Attributes:
        id: generated by the workflow; a result must name it.
        tool_use: the tool use exactly as the model produced it (S1): what the client runs.
        idempotency_key: ``<session id>/<toolUseId>``; a result must carry it.
        turn: the turn that waits.
        cycle: the cycle within the turn.
        timeout_s: how long the session waits for a result (the tool's ``timeout_s``).
        expires_at: when the call times out if no result came (ISO time).
        status: ``waiting`` for a result; ``delivered`` (a worker checks it against the
            tool's declared output type); then ``done``, ``invalid`` (it did not match: the
            model is told so), ``failed`` (the client said the tool failed), ``timed_out``
            or ``cancelled``.
        client: the name the delivering client gave.
        result_digest: SHA-256 of the delivered result: the same result delivered again is
            answered again, not applied again.
        output: the delivered output, until a worker has checked it.
        error: the delivered error (the tool failed on the client), until checked.
        note: why the call ended without a usable result.
    """

    id: str
    tool_use: ToolUse
    idempotency_key: str
    turn: int
    cycle: int
    timeout_s: float
    expires_at: str
    status: ClientCallStatus = "waiting"
    client: str | None = None
    result_digest: str | None = None
    output: Any = None
    error: str | None = None
    note: str | None = None


class ClientResult(KeelModel):
    """Input of the ``tool_result`` update: a client's result for a published client call.

    Attributes:
        call_id: the call's id (``ClientCall.id``).
        idempotency_key: the call's ``idempotency_key``, ``<session id>/<toolUseId>``.
        output: the tool's return value, as JSON; checked against its declared output type.
        error: set when the tool failed on the client: what the model is told.
        client: a name for the client, for the event log.
    """

    call_id: str = Field(min_length=1)
    idempotency_key: str = Field(min_length=1)
    output: Any = None
    error: str | None = None
    client: str | None = None


class ClientResultAck(KeelModel):
    """Answer of the ``tool_result`` update.

    Attributes:
        call_id: the call.
        tool_use_id: the model's tool use the result answers.
        status: the call's status after the update (``delivered`` for a first delivery).
        repeated: the same result was delivered before: answered again, applied once.
    """

    call_id: str
    tool_use_id: str
    status: ClientCallStatus
    repeated: bool = False


class ClientCallsView(KeelModel):
    """Answer of the ``client_calls`` query: the calls waiting for a client, oldest first."""

    calls: list[ClientCall] = Field(default_factory=list)


class TurnRecord(KeelModel):
    """A turn as clients see it.

    Attributes:
        turn_id: 1-based turn number in this session.
        status: queued, running, awaiting_human (an interrupt waits for a person),
            completed, failed or cancelled.
        stop_reason: the model's last stop reason, or ``cancelled``.
        message: the last assistant message of the turn.
        usage: tokens used by this turn.
        error: why the turn failed or was cancelled.
        cycles: model calls made in this turn.
        interrupts: the turn's interrupts that wait for a decision.
        output: the structured output (the input of the accepted ``final_result`` call) of
            a session with an ``output_schema``; None otherwise.
        reminders: how often the model was told to call ``final_result`` in this turn.
        cost_usd: what the turn's model calls (and its sub-agents) cost in US dollars: the
            known part, None while no call's cost is known (never 0 for unknown;
            ``keel.workflows.cost``).
        cost_unknown: some call's cost is unknown (no price, or usage not reported):
            ``cost_usd`` leaves it out, the turn cost at least that much.
        sub_agents: what the turn's sub-agents spent, by sub-agent name (also counted in
            ``usage`` and ``cost_usd``).
        allowance: what people granted the turn past its caps, by cap name
            (``keel.workflows.budget_contracts.CapName``): extra model calls, tokens, dollars.
    """

    turn_id: int
    status: TurnStatus = "queued"
    stop_reason: str | None = None
    message: Message | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    error: str | None = None
    cycles: int = 0
    interrupts: list[Interrupt] = Field(default_factory=list)
    output: Any = None
    reminders: int = 0
    cost_usd: float | None = None
    cost_unknown: bool = False
    sub_agents: dict[str, Spend] = Field(default_factory=dict)
    allowance: dict[str, float] = Field(default_factory=dict)


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
        client_calls: calls of client-side tools waiting for a client's result.
        standing: the session's standing approvals (tools that run without asking).
    """

    turn_id: int | None = None
    message: Message | None = None
    running: list[ToolUse] = Field(default_factory=list)
    interrupts: list[Interrupt] = Field(default_factory=list)
    client_calls: list[ClientCall] = Field(default_factory=list)
    standing: list[StandingApproval] = Field(default_factory=list)


class SessionState(KeelModel):
    """Answer of the ``state`` query.

    The conversation is ``base`` (messages in the conversation store, by reference) followed
    by ``messages`` (not stored yet); ``KeelClient.state`` joins them into one list. A
    toolResult in ``messages`` that the tool activity stored has no content here: its digest
    is in ``result_refs`` (by toolUseId), and ``KeelClient.state`` reads it back.
    ``prompt_at`` says where each turn's prompt is (``Ledger.prompt_at``); ``replay`` how a
    replay session follows its recording. ``usage`` and ``cost_usd`` / ``cost_unknown`` are
    the session's totals, its sub-agents' included; ``sub_agents`` lists those apart, by
    sub-agent name (``keel.workflows.cost``).
    """

    session_id: str
    status: SessionStatus
    config: SessionConfig
    base: PrefixRef | None = None
    messages: list[Message] = Field(default_factory=list)
    result_refs: dict[str, str] = Field(default_factory=dict)
    message_count: int
    pending: PendingView
    queued: list[int] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    events: list[Event] = Field(default_factory=list)
    event_count: int = 0
    run: int = 1
    prompt_at: dict[int, tuple[int, int]] = Field(default_factory=dict)
    replay: ReplayProgress | None = None
    cost_usd: float | None = None
    cost_unknown: bool = False
    sub_agents: dict[str, Spend] = Field(default_factory=dict)


class Notification(KeelModel):
    """A notification not delivered yet: one event for one URL (``keel.workflows.notifications``).

    Attributes:
        key: ``<event id>#<index of the URL in SessionConfig.notify>``; unique in a session.
        url: where to POST.
        event: the JSON body.
    """

    key: str
    url: str
    event: dict[str, Any]


class ChildInterrupts(KeelModel):
    """A sub-agent's interrupts, for its parent: the ``interrupts`` query's answer.

    Also the input of the ``child_interrupts`` signal, which a parent takes only as a hint
    to ask its child (``keel.workflows.sub_agents``): it never believes the list a signal carries.
    """

    child_id: str
    interrupts: list[Interrupt] = Field(default_factory=list)


class SessionResult(KeelModel):
    """Result of a closed session.

    Attributes:
        last_turn: the session's last turn: for a single-turn session (``run_agent``, a
            sub-agent), its one turn.
        cost_usd: what the session cost in US dollars, as ``Ledger.cost_usd`` says.
        cost_unknown: some of its calls' cost is unknown (``Ledger.cost_unknown``).
    """

    session_id: str
    turns: int
    usage: TokenUsage
    last_turn: TurnRecord | None = None
    cost_usd: float | None = None
    cost_unknown: bool = False
