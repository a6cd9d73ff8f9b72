"""Typed inputs and outputs of the activities the session workflow calls.

``keel.model.converse`` and ``keel.tool.run``: one pydantic model each way, as Temporal's
samples do. The workflow's own surface (updates, queries) is in ``keel.workflows.contracts``.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from keel.workflows.budget_contracts import ModelPrice
from keel.workflows.contracts import (
    Answer,
    Decision,
    Effect,
    InferenceConfig,
    InterruptAck,
    JudgeCriteria,
    KeelModel,
    PrefixRef,
    ToolSpec,
)
from keel.workflows.effect_contracts import EffectReport
from keel.workflows.messages import Message, TokenUsage, ToolResult, ToolUse

# Field defaults that a compact payload leaves out: JSON-equal values only.
_EMPTY: tuple[Any, ...] = (None, [], {})


class CompactModel(KeelModel):
    """An activity's input or result: fields at an empty default are left out of its JSON.

    These payloads enter workflow history with every activity, so a field left at ``None``,
    ``[]`` or ``{}`` (its default) is not written; reading the payload back gives the same
    default. Payloads written before (with every field) read the same way.
    """

    _compact_defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Once the fields are known: the ones whose default is ``None``, ``[]`` or ``{}``."""
        super().__pydantic_init_subclass__(**kwargs)
        defaults = {}
        for name, field in cls.model_fields.items():
            if field.is_required():
                continue
            default = field.get_default(call_default_factory=True)
            if any(default == empty and type(default) is type(empty) for empty in _EMPTY):
                defaults[name] = default
        cls._compact_defaults = defaults

    @model_serializer(mode="wrap")
    def _drop_empty_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        defaults = self._compact_defaults
        if not isinstance(data, dict) or not defaults:
            return data
        return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}


class ModelRequest(CompactModel):
    """Input of the ``keel.model.converse`` activity.

    The conversation is ``prefix`` (stored, by reference) followed by ``messages`` (not yet
    stored); the activity stores ``messages`` and answers with the longer prefix, so each
    message's content enters workflow history a constant number of times. A toolResult the
    tool activity already stored is sent with empty content, its digest in ``result_refs``
    (by toolUseId). Tool specs never enter history in full: a session's first call names its
    tool modules (``describe_modules``); the activity describes them from the worker's
    registry, stores the specs, uses them, and answers with their digest and their terms
    (``ToolSpec.terms``); later calls send the digest. ``tools`` is the activity's own:
    the specs it resolved, in the request it hands to the model provider. ``extra_tools``
    (sent with ``describe_modules`` only) are specs the workflow itself offers, such as the
    structured-output tool; ``output_tool`` names that tool, whose uses the activity
    validates against its input schema (``ModelResponse.output_errors``). ``price``: the
    session's own (``SessionConfig.price``), which the activity prices the call with over the
    worker's price table; left out when the session has none.
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
    extra_tools: list[ToolSpec] | None = None
    output_tool: str | None = None
    price: ModelPrice | None = None


class ModelResponse(CompactModel):
    """Result of the ``keel.model.converse`` activity.

    Attributes:
        message: the assistant message.
        stopReason: why the model stopped.
        usage: tokens of this call.
        stored: the stored prefix now covering the request's prefix and messages.
        tools_digest: where the request's tool specs are stored.
        tools: the tools the activity described, when the request named ``describe_modules``:
            their terms only (``ToolSpec.terms``); the whole specs are under ``tools_digest``.
        output_errors: for each use of the request's ``output_tool`` (by toolUseId), what is
            wrong with its input against the output schema; an empty list means valid.
        cost_usd: what this call cost in US dollars, at the request's price or the worker's
            (``keel.activities.prices``); None when unknown (no price, usage not reported),
            and in histories from before prices.
    """

    message: Message
    stopReason: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    stored: PrefixRef | None = None
    tools_digest: str | None = None
    tools: list[ToolSpec] | None = None
    output_errors: dict[str, list[str]] | None = None
    cost_usd: float | None = None


def idempotency_key(session_id: str, tool_use_id: str) -> str:
    """A tool call's idempotency key, ``<session id>/<toolUseId>``: the same on every run.

    What ``ctx.idempotency_key`` holds, a client-side call carries, and the effects journal
    is keyed by.
    """
    return f"{session_id}/{tool_use_id}"


class ToolRequest(CompactModel):
    """Input of the ``keel.tool.run`` activity.

    Attributes:
        session_id: the session.
        tool_use: the tool use as the model produced it.
        idempotency_key: ``<session id>/<toolUseId>``, the same on every run of this use.
        timeout_s: the tool's timeout, enforced by the activity.
        answers: answers to the questions this tool use asked so far, by question name.
        client_output: for a client-side tool (``@tool(runs_on="client")``), what a client
            delivered: the activity checks it against the tool's declared output type and
            makes it the result, instead of running the tool.
        effect: the tool's class as the session sets it (an agent file's ``effects``); None:
            as the worker declares it (``@tool(effect=...)``, an MCP tool's annotations).
        settled_attempts: how many of the call's attempts a person has settled by approving
            a run again (``outcome_unknown``): an attempt among them that ended without a
            result no longer stops the tool from running; a later one does.
    """

    session_id: str
    tool_use: ToolUse
    idempotency_key: str
    timeout_s: float
    answers: dict[str, Any] = Field(default_factory=dict)
    client_output: ClientOutput | None = None
    effect: Effect | None = None
    settled_attempts: int | None = None


class ClientOutput(KeelModel):
    """What a client delivered for a call of a client-side tool (``ClientResult``).

    Attributes:
        value: the tool's return value, as JSON.
        error: set when the tool failed on the client.
    """

    value: Any = None
    error: str | None = None


class ToolQuestion(KeelModel):
    """A question a tool asked with ``ctx.interrupt(name, reason)``."""

    name: str
    reason: str | None = None


class ToolResponse(CompactModel):
    """Result of the ``keel.tool.run`` activity: a result, a question, or an unknown outcome.

    Attributes:
        result: the toolResult; None when the tool asked a question instead, or when its
            outcome is unknown.
        question: what the tool asked; the tool runs again once a human answers.
        digest: where the activity stored ``{"toolResult": result}``, if it did.
        effect: for a journaled (``write`` or ``idempotent``) tool, its attempts and how this
            run settled it; ``outcome == "unknown"``: the tool was not called, a person decides.
        attempt: Temporal's attempt number of this activity, when above 1.
    """

    result: ToolResult | None
    question: ToolQuestion | None = None
    digest: str | None = None
    effect: EffectReport | None = None
    attempt: int | None = None


class NotifyRequest(KeelModel):
    """Input of the ``keel.notify.post`` activity: one event for one URL.

    Attributes:
        url: where to POST (one of ``SessionConfig.notify``).
        event: the JSON body (``keel.workflows.notifications``); the same on every attempt.
    """

    url: str
    event: dict[str, Any]


class NotifyResponse(KeelModel):
    """Answer of the ``keel.notify.post`` activity.

    Attributes:
        status: the receiver's HTTP status (2xx).
        attempt: the activity attempt that got it, from 1.
    """

    status: int
    attempt: int


class ChildReportRequest(KeelModel):
    """Input of ``keel.session.child_report``: ask a sub-agent's session for its interrupts.

    Attributes:
        parent_id: the asking session's workflow id.
        parent_run_id: its run id: the child must have been started by this very run.
        child_id: the child session's workflow id.
    """

    parent_id: str
    parent_run_id: str
    child_id: str


class ForwardRequest(KeelModel):
    """Input of ``keel.session.forward``: a decision or answer given to a parent, for its child.

    Attributes:
        child_id: the child session's workflow id.
        decision: a decision to send as the child's ``decide`` update.
        answer: an answer to send as the child's ``respond`` update.
    """

    child_id: str
    decision: Decision | None = None
    answer: Answer | None = None


class ForwardResponse(KeelModel):
    """Answer of ``keel.session.forward``: the child's acknowledgement, or why it refused.

    Attributes:
        ack: the child accepted; its interrupt's status after it.
        refused: the child refused; its reason.
    """

    ack: InterruptAck | None = None
    refused: str | None = None


class JudgeRequest(KeelModel):
    """Input of ``keel.judge.decide``: one gated tool call, for a judge to weigh.

    Attributes:
        session_id: the session.
        tool_use: the call exactly as the model produced it: untrusted data (the model may
            have read hostile text), never instructions to the judge.
        reason: why the call needs approval.
        criteria: what the call is held against.
        judge: ``module:function`` to ask, or None.
        judge_model: a model spec to ask, or None.
    """

    session_id: str
    tool_use: ToolUse
    reason: str
    criteria: JudgeCriteria
    judge: str | None = None
    judge_model: str | None = None


class JudgeVerdict(KeelModel):
    """Answer of ``keel.judge.decide``: approve, deny or escalate, why, and how sure."""

    action: Literal["approve", "deny", "escalate"]
    reason: str = ""
    confidence: float = Field(default=0.0, ge=0, le=1)
