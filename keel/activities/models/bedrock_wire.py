"""Converse requests and answers as Bedrock's wire shapes: boto3's arguments, its stream events.

No boto3 here: ``build_request`` makes the keyword arguments of ``converse`` /
``converse_stream``; ``StreamAssembler`` builds one assistant message from the events botocore
parses out of a ConverseStream; ``output_block`` and ``token_usage`` read a Converse answer.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from keel.activities.models.base import DeltaCallback, ModelTransientError, converse_tool_config
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.messages import ContentBlock, Message, TokenUsage

logger = logging.getLogger(__name__)


class RetryableModelError(ModelTransientError):
    """A transient Bedrock failure (throttling, 5xx, broken stream); Temporal retries it."""


def build_request(model_id: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``converse`` / ``converse_stream`` for a request.

    Messages are dumped in Python mode, so image and document bytes stay raw bytes (boto3
    base64-encodes them itself).
    """
    kwargs: dict[str, Any] = {
        "modelId": model_id,
        "messages": [_wire_message(m) for m in request.messages],
    }
    if request.system:
        kwargs["system"] = [{"text": request.system}]
    if request.tools:
        kwargs["toolConfig"] = {"tools": converse_tool_config(request.tools)}
    if request.inference is not None:
        inference = request.inference.model_dump(mode="python", exclude_none=True)
        if inference:
            kwargs["inferenceConfig"] = inference
    return kwargs


def _wire_message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = message.model_dump(mode="python")
    for block in data["content"]:
        reasoning = block.get("reasoningContent")
        if isinstance(reasoning, dict) and isinstance(reasoning.get("redactedContent"), str):
            # bytes in a free-form dict come back from workflow history as base64 text
            reasoning = dict(reasoning)
            reasoning["redactedContent"] = base64.b64decode(reasoning["redactedContent"])
            block["reasoningContent"] = reasoning
    return data


def output_block(block: dict[str, Any]) -> ContentBlock | None:
    """A Converse output block as a ContentBlock; None for kinds Keel does not keep."""
    if "text" in block:
        return ContentBlock(text=block["text"]) if block["text"] else None
    kept = {k: v for k, v in block.items() if k in ("toolUse", "reasoningContent")}
    if len(kept) != 1:
        logger.warning("dropping bedrock output block of kind %s", sorted(block))
        return None
    try:
        return ContentBlock.model_validate(kept)
    except ValidationError as err:
        logger.warning("dropping invalid bedrock output block %s: %s", sorted(block), err)
        return None


def token_usage(raw: dict[str, Any] | None) -> TokenUsage:
    """Converse's ``usage`` as a TokenUsage (the total summed when it is missing)."""
    raw = raw or {}
    inputs = int(raw.get("inputTokens") or 0)
    outputs = int(raw.get("outputTokens") or 0)
    return TokenUsage(
        inputTokens=inputs,
        outputTokens=outputs,
        totalTokens=int(raw.get("totalTokens") or inputs + outputs),
    )


@dataclass
class _Block:
    kind: str
    parts: list[str] = field(default_factory=list)
    tool_use_id: str = ""
    name: str = ""
    signature: str | None = None
    redacted: bytes | None = None


class StreamAssembler:
    """Builds one assistant message from ConverseStream events, as botocore parses them."""

    def __init__(self) -> None:
        """Start with no blocks and no stop reason."""
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any], on_delta: DeltaCallback) -> None:
        """Take one stream event.

        Args:
            event: ``{"<eventName>": {...}}`` as botocore yields it.
            on_delta: called with the text of a text delta, "" for any other event.
        """
        if "contentBlockStart" in event:
            body = event["contentBlockStart"]
            start = body.get("start", {})
            index = int(body.get("contentBlockIndex", 0))
            if "toolUse" in start:
                use = start["toolUse"]
                self.blocks[index] = _Block(
                    "toolUse", tool_use_id=use.get("toolUseId", ""), name=use.get("name", "")
                )
            else:
                logger.warning("ignoring bedrock content block start %s", sorted(start))
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            text = self._delta(int(body.get("contentBlockIndex", 0)), body.get("delta", {}))
            on_delta(text)
            return
        elif "messageStop" in event:
            self.stop_reason = event["messageStop"].get("stopReason") or "end_turn"
        elif "metadata" in event:
            self.usage = event["metadata"].get("usage")
        on_delta("")

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        """Apply one delta; returns its text for ``on_delta`` ("" unless a text delta)."""
        block = self.blocks.get(index)
        if "text" in delta:
            if block is None:
                block = self.blocks[index] = _Block("text")
            block.parts.append(delta["text"])
            return str(delta["text"])
        if "toolUse" in delta:
            if block is None or block.kind != "toolUse":
                logger.warning("bedrock toolUse delta for block %s without a toolUse start", index)
                return ""
            block.parts.append(delta["toolUse"].get("input", ""))
        elif "reasoningContent" in delta:
            if block is None:
                block = self.blocks[index] = _Block("reasoningContent")
            reasoning = delta["reasoningContent"]
            if "text" in reasoning:
                block.parts.append(reasoning["text"])
            if "signature" in reasoning:
                block.signature = reasoning["signature"]
            if "redactedContent" in reasoning:
                block.redacted = (block.redacted or b"") + reasoning["redactedContent"]
        return ""

    def result(self, model_id: str) -> ModelResponse:
        """The assembled response.

        Raises:
            RetryableModelError: the stream ended without a ``messageStop`` event.
        """
        if self.stop_reason is None:
            raise RetryableModelError(
                f"bedrock model {model_id!r}: the response stream ended before messageStop "
                f"({len(self.blocks)} content blocks received)"
            )
        if self.usage is None:
            logger.warning("bedrock model %s: stream had no metadata event (usage)", model_id)
        content: list[ContentBlock] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            joined = "".join(block.parts)
            if block.kind == "text":
                if joined:
                    content.append(ContentBlock(text=joined))
            elif block.kind == "toolUse":
                content.append(
                    ContentBlock.model_validate(
                        {
                            "toolUse": {
                                "toolUseId": block.tool_use_id,
                                "name": block.name,
                                "input": self._tool_input(model_id, block, joined),
                            }
                        }
                    )
                )
            elif block.redacted is not None:
                content.append(ContentBlock(reasoningContent={"redactedContent": block.redacted}))
            else:
                reasoning: dict[str, Any] = {"text": joined}
                if block.signature is not None:
                    reasoning["signature"] = block.signature
                content.append(ContentBlock(reasoningContent={"reasoningText": reasoning}))
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stopReason=self.stop_reason,
            usage=token_usage(self.usage),
        )

    def _tool_input(self, model_id: str, block: _Block, joined: str) -> Any:
        if not joined.strip():
            return {}
        try:
            return json.loads(joined)
        except ValueError:
            # e.g. max_tokens cut the input short; the workflow never runs such a tool use
            logger.warning(
                "bedrock model %s: toolUse %s input is not complete JSON (stop reason %s)",
                model_id,
                block.tool_use_id,
                self.stop_reason,
            )
            return {}
