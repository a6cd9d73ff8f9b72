"""Converse requests as chat-completions requests (OpenAI-compatible servers).

* the system prompt becomes a leading ``system`` message;
* each toolResult block of a user message becomes one ``tool`` message (``tool_call_id``,
  its text and JSON blocks as text, prefixed ``error: `` when the result is an error), in
  order and before the user message that carries the rest of the blocks;
* user text becomes a string content, or text and ``image_url`` parts (images as ``data:``
  URLs) when the message has images;
* document blocks of text formats (txt, md, csv, html) are sent inline as text under a
  ``[document <name> (<format>)]`` header; other formats, and images or documents that only
  name an S3 location, are replaced by a bracketed note saying they were not sent, so a
  session holding one stays usable;
* an assistant message becomes ``content`` (its text blocks joined, ``""`` when it has none,
  as Ollama rejects a null content) plus ``tool_calls``; reasoning and cache-point blocks are
  not sent.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from keel.workflows.activity_contracts import ModelRequest
from keel.workflows.contracts import ToolSpec
from keel.workflows.messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    ToolResult,
)

TEXT_DOCUMENT_FORMATS = frozenset({"txt", "md", "csv", "html"})

JSON = dict[str, Any]


def chat_body(model: str, request: ModelRequest, *, stream: bool, tool_choice: str) -> JSON:
    """The chat-completions request body for a Converse-shaped request.

    Args:
        model: the model name sent to the server.
        request: the conversation, system prompt, tools and inference config.
        stream: whether to ask for a stream.
        tool_choice: ``auto`` (sent with tools) or ``omit`` (never sent).
    """
    body: JSON = {
        "model": model,
        "messages": chat_messages(request.system, request.messages),
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = chat_tools(request.tools)
        if tool_choice == "auto":
            body["tool_choice"] = "auto"
    config = request.inference
    if config is not None:
        if config.maxTokens is not None:
            body["max_tokens"] = config.maxTokens
        if config.temperature is not None:
            body["temperature"] = config.temperature
        if config.topP is not None:
            body["top_p"] = config.topP
        if config.stopSequences:
            body["stop"] = list(config.stopSequences)
    return body


def chat_messages(system: str | None, messages: list[Message]) -> list[JSON]:
    """Converse messages as chat-completions messages (see the module docstring).

    Args:
        system: the system prompt, if any.
        messages: the conversation.
    """
    out: list[JSON] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            out.append(_assistant_message(message))
        else:
            out.extend(_user_messages(message))
    return out


def chat_tools(tools: list[ToolSpec]) -> list[JSON]:
    """Tool specs in the chat-completions ``tools`` shape.

    Args:
        tools: the session's tools.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.inputSchema,
            },
        }
        for t in tools
    ]


def _assistant_message(message: Message) -> JSON:
    texts: list[str] = []
    calls: list[JSON] = []
    for block in message.content:
        if block.toolUse is not None:
            use = block.toolUse
            calls.append(
                {
                    "id": use.toolUseId,
                    "type": "function",
                    "function": {"name": use.name, "arguments": json.dumps(use.input)},
                }
            )
        else:
            text = _block_text(block)
            if text is not None:
                texts.append(text)
    out: JSON = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        out["tool_calls"] = calls
    return out


def _user_messages(message: Message) -> list[JSON]:
    out: list[JSON] = []
    parts: list[JSON] = []
    for block in message.content:
        if block.toolResult is not None:
            out.append(_tool_message(block.toolResult))
        elif block.image is not None and block.image.source.bytes is not None:
            parts.append({"type": "image_url", "image_url": {"url": _data_url(block.image)}})
        else:
            text = _block_text(block)
            if text is not None:
                parts.append({"type": "text", "text": text})
    if parts and all(p["type"] == "text" for p in parts):
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _tool_message(result: ToolResult) -> JSON:
    texts: list[str] = []
    for item in result.content:
        if item.text is not None:
            texts.append(item.text)
        elif item.image is not None:
            texts.append(f"[image ({item.image.format}) not sent: tool results carry text only]")
        elif item.document is not None:
            texts.append(_document_text(item.document))
        else:
            texts.append(json.dumps(item.json_, ensure_ascii=False))
    content = "\n".join(texts)
    if result.status == "error":
        content = f"error: {content}"
    return {"role": "tool", "tool_call_id": result.toolUseId, "content": content}


def _block_text(block: ContentBlock) -> str | None:
    """The text a non-tool block is sent as; ``None`` for blocks that are not sent."""
    if block.text is not None:
        return block.text
    if block.document is not None:
        return _document_text(block.document)
    if block.image is not None:
        return f"[image ({block.image.format}) not sent: only inline image bytes are supported]"
    if block.guardContent is not None:
        inner = block.guardContent.get("text")
        if isinstance(inner, dict) and isinstance(inner.get("text"), str):
            return str(inner["text"])
    return None


def _document_text(document: DocumentBlock) -> str:
    header = f"[document {document.name!r} ({document.format})"
    data = document.source.bytes
    if document.format in TEXT_DOCUMENT_FORMATS and data is not None:
        return f"{header}]\n{data.decode('utf-8', errors='replace')}"
    return (
        f"{header} not sent: this model server is sent only inline text documents "
        f"({', '.join(sorted(TEXT_DOCUMENT_FORMATS))})]"
    )


def _data_url(image: ImageBlock) -> str:
    data = image.source.bytes or b""
    return f"data:image/{image.format};base64,{base64.b64encode(data).decode('ascii')}"
