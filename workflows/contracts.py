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
    "session_closed",
]


class KeelModel(BaseModel):
    """Base for Keel's own (non-Converse) types: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid")


class ToolSpec(KeelModel):
    """What the workflow knows of one tool: its Converse spec and how to run it."""

    name: str
    description: str
    inputSchema: dict[str, Any]
    requires_approval: bool = False
    timeout_s: float = 300.0
    module: str = ""


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
    """

    model: str = Field(min_length=1)
    system: str | None = None
    tool_modules: list[str] = Field(default_factory=list)
    inference: InferenceConfig | None = None


class SessionInput(KeelModel):
    """Start input of ``AgentSession``.

    Attributes:
        config: the session's configuration.
        messages: imported history; normalised (S3), its tool uses never executed.
        prompt: optional first prompt, queued as turn 1.
    """

    config: SessionConfig
    messages: list[Message] = Field(default_factory=list)
    prompt: list[ContentBlock] | None = None


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
    """

    turn_id: int
    status: TurnStatus = "queued"
    stop_reason: str | None = None
    message: Message | None = None
    usage: TokenUsage = Field(default_factory=TokenUsage)
    error: str | None = None
    cycles: int = 0


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
        running: tool uses of that message still running.
    """

    turn_id: int | None = None
    message: Message | None = None
    running: list[ToolUse] = Field(default_factory=list)


class SessionState(KeelModel):
    """Answer of the ``state`` query."""

    session_id: str
    status: SessionStatus
    config: SessionConfig
    messages: list[Message] = Field(default_factory=list)
    message_count: int
    pending: PendingView
    queued: list[int] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    events: list[Event] = Field(default_factory=list)
    event_count: int = 0


class SessionResult(KeelModel):
    """Result of a closed session."""

    session_id: str
    turns: int
    usage: TokenUsage


class ModelRequest(KeelModel):
    """Input of the ``keel.model.converse`` activity."""

    session_id: str
    turn: int
    cycle: int
    model: str
    system: str | None = None
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    inference: InferenceConfig | None = None


class ModelResponse(KeelModel):
    """Result of the ``keel.model.converse`` activity."""

    message: Message
    stopReason: str
    usage: TokenUsage = Field(default_factory=TokenUsage)


class ToolRequest(KeelModel):
    """Input of the ``keel.tool.run`` activity."""

    session_id: str
    tool_use: ToolUse
    idempotency_key: str
    timeout_s: float


class ToolResponse(KeelModel):
    """Result of the ``keel.tool.run`` activity."""

    result: ToolResult


class DescribeToolsInput(KeelModel):
    """Input of the ``keel.tools.describe`` activity."""

    modules: list[str] = Field(default_factory=list)


class DescribeToolsResult(KeelModel):
    """Result of the ``keel.tools.describe`` activity."""

    tools: list[ToolSpec]
