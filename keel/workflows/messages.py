"""The conversation model, in Bedrock Converse shapes.

Field names mirror the Converse API (``role``, ``content``, ``text``, ``toolUse``,
``toolResult`` ...), so a message can be handed to Bedrock as it is. Every model drops
fields that are ``None`` when serialised, so a text block is ``{"text": "hi"}`` in
workflow history, not a dict of nulls.

Pure module: imported by workflow code, so no I/O, clocks or randomness.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Role = Literal["user", "assistant"]
ToolResultStatus = Literal["success", "error"]


class ConverseModel(BaseModel):
    """Base for every Converse-shaped model: strict keys, no nulls on the wire."""

    model_config = ConfigDict(
        extra="forbid",
        ser_json_bytes="base64",
        val_json_bytes="base64",
        frozen=False,
    )

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class MediaSource(ConverseModel):
    """Where image or document bytes come from."""

    bytes: builtins.bytes | None = None
    s3Location: dict[str, Any] | None = None


class ImageBlock(ConverseModel):
    """An image: ``{"format": "png", "source": {"bytes": ...}}``."""

    format: Literal["png", "jpeg", "gif", "webp"]
    source: MediaSource


class DocumentBlock(ConverseModel):
    """A document: ``{"format": "pdf", "name": "...", "source": {"bytes": ...}}``."""

    format: Literal["pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"]
    name: str = Field(min_length=1)
    source: MediaSource


class ToolUse(ConverseModel):
    """A tool call the model asked for."""

    toolUseId: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=64)
    input: Any = Field(default_factory=dict)


class ToolResultContent(ConverseModel):
    """One block of a tool result: text, JSON, image or document."""

    text: str | None = None
    json_: Any = Field(default=None, alias="json")
    image: ImageBlock | None = None
    document: DocumentBlock | None = None

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    @model_validator(mode="after")
    def _one_kind(self) -> ToolResultContent:
        kinds = [k for k in ("text", "json_", "image", "document") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "a toolResult content block holds exactly one of text, json, image, document"
            )
        return self


class ToolResult(ConverseModel):
    """The outcome of one tool use, sent back to the model."""

    toolUseId: str = Field(min_length=1, max_length=64)
    status: ToolResultStatus = "success"
    content: list[ToolResultContent]


class ContentBlock(ConverseModel):
    """One block of a message; exactly one field is set."""

    text: str | None = None
    image: ImageBlock | None = None
    document: DocumentBlock | None = None
    toolUse: ToolUse | None = None
    toolResult: ToolResult | None = None
    reasoningContent: dict[str, Any] | None = None
    guardContent: dict[str, Any] | None = None
    cachePoint: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ContentBlock:
        kinds = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "a content block holds exactly one of "
                + ", ".join(type(self).model_fields)
                + f"; got {kinds or 'none'}"
            )
        return self

    @property
    def kind(self) -> str:
        """The name of the field this block carries (``text``, ``toolUse`` ...)."""
        for name in type(self).model_fields:
            if getattr(self, name) is not None:
                return name
        raise AssertionError("validated block has no kind")  # pragma: no cover


class Message(ConverseModel):
    """A conversation message."""

    role: Role
    content: list[ContentBlock]


class TokenUsage(ConverseModel):
    """Token counts, as Converse reports them.

    ``unknown`` is True when the model server did not report the counts of a call (some
    OpenAI-compatible servers never do for a streamed answer), or of one of the calls a sum
    covers: the counts then leave those calls out. None, and left off the wire, otherwise.
    """

    inputTokens: int = 0
    outputTokens: int = 0
    totalTokens: int = 0
    unknown: bool | None = None

    def __add__(self, other: TokenUsage) -> TokenUsage:
        """Sum two usages."""
        return TokenUsage(
            inputTokens=self.inputTokens + other.inputTokens,
            outputTokens=self.outputTokens + other.outputTokens,
            totalTokens=self.totalTokens + other.totalTokens,
            unknown=True if self.unknown or other.unknown else None,
        )


def text_block(text: str) -> ContentBlock:
    """A text content block."""
    return ContentBlock(text=text)


def prompt_blocks(value: Any) -> Any:
    """A prompt as given (a ``mode="before"`` validator): a string is one text block.

    Raises:
        ValueError: it is neither a string nor a list (of content blocks, checked next).
    """
    if isinstance(value, str):
        return [{"text": value}]
    if value is not None and not isinstance(value, list | tuple):
        raise ValueError("a prompt is a string or a list of content blocks")
    return value


def error_result(tool_use_id: str, text: str) -> ToolResult:
    """An error toolResult with one text block: a tool use that failed or did not run."""
    return ToolResult(toolUseId=tool_use_id, status="error", content=[ToolResultContent(text=text)])


def tool_uses(message: Message) -> list[ToolUse]:
    """The toolUse blocks of a message, in order."""
    return [b.toolUse for b in message.content if b.toolUse is not None]
