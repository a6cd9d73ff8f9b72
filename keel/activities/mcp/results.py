"""An MCP ``CallToolResult`` as the content of a Converse toolResult.

Text stays text; ``structuredContent`` becomes one ``json`` block (a text block that only
repeats it as JSON is dropped); a PNG, JPEG, GIF or WebP image becomes an ``image`` block.
Everything else (audio, other image types, resources, resource links) is described in text,
so the model learns what came back without Keel guessing what to do with it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types as types

from keel.workflows.messages import ImageBlock, MediaSource, ToolResultContent

__all__ = ["result_content"]

_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_TEXT_RESOURCE_CHARS = 100_000


def result_content(result: types.CallToolResult) -> list[ToolResultContent]:
    """The toolResult content for an MCP tool's result (its ``isError`` is the caller's)."""
    blocks: list[ToolResultContent] = []
    structured = result.structured_content
    if structured is not None and _wraps_text(structured, result.content):
        structured = None  # {"result": "..."} around the text block that says it already
    if structured is not None:
        blocks.append(ToolResultContent.model_validate({"json": structured}))
    for item in result.content:
        if structured is not None and _repeats(item, structured):
            continue
        blocks.append(_block(item))
    return blocks or [ToolResultContent(text="(the tool returned no content)")]


def _wraps_text(structured: Any, content: list[Any]) -> bool:
    """Whether structured content only wraps a tool's text answer (MCPServer's ``result``)."""
    if not (isinstance(structured, dict) and list(structured) == ["result"]):
        return False
    value = structured["result"]
    return (
        len(content) == 1
        and isinstance(content[0], types.TextContent)
        and (content[0].text == value or _repeats(content[0], value))
    )


def _repeats(item: Any, structured: Any) -> bool:
    """Whether a text block is only the structured content serialised (as the spec advises)."""
    if not isinstance(item, types.TextContent):
        return False
    try:
        return bool(json.loads(item.text) == structured)
    except ValueError:
        return False


def _block(item: Any) -> ToolResultContent:
    if isinstance(item, types.TextContent):
        return ToolResultContent(text=item.text)
    if isinstance(item, types.ImageContent):
        image = _image(item.data, item.mime_type)
        if image is not None:
            return image
        return ToolResultContent(text=f"[image of type {item.mime_type}, not shown]")
    if isinstance(item, types.AudioContent):
        return ToolResultContent(text=f"[audio of type {item.mime_type}, not shown]")
    if isinstance(item, types.ResourceLink):
        about = f": {item.description}" if item.description else ""
        return ToolResultContent(text=f"[resource link {item.name} <{item.uri}>{about}]")
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            body = resource.text
            if len(body) > _TEXT_RESOURCE_CHARS:
                body = body[:_TEXT_RESOURCE_CHARS] + "\n[... cut]"
            return ToolResultContent(text=f"[resource <{resource.uri}>]\n{body}")
        mime = resource.mime_type or "application/octet-stream"
        if isinstance(resource, types.BlobResourceContents):
            image = _image(resource.blob, mime)
            if image is not None:
                return image
        return ToolResultContent(text=f"[resource <{resource.uri}> of type {mime}, not shown]")
    kind = getattr(item, "type", type(item).__name__)
    return ToolResultContent(text=f"[content of type {kind}, not shown]")


def _image(data: str, mime: str | None) -> ToolResultContent | None:
    fmt = _IMAGE_FORMATS.get((mime or "").lower())
    if fmt is None:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return ToolResultContent(text=f"[image of type {mime} with invalid base64 data]")
    return ToolResultContent(image=ImageBlock(format=fmt, source=MediaSource(bytes=raw)))
