"""The model provider interface: one file per provider, chosen by the spec's prefix."""

from __future__ import annotations

from typing import Any, Protocol

from workflows.contracts import ModelRequest, ModelResponse, ToolSpec


class ModelError(Exception):
    """A model failure that retrying cannot fix (bad request, unknown model, script exhausted).

    The model activity turns it into a non-retryable Temporal failure; the turn ends with
    this message as its error and the session stays usable.
    """


class ModelProvider(Protocol):
    """A model that answers one Converse-shaped request.

    ``converse`` is synchronous: the model activity runs it in a thread, so providers may use
    blocking clients such as boto3. Raise ``ModelError`` for failures retrying cannot fix; any
    other exception is retried by Temporal.
    """

    def converse(self, request: ModelRequest) -> ModelResponse:
        """Answer one request with one assistant message."""
        ...


def converse_tool_config(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in the Converse ``toolConfig.tools`` shape."""
    return [
        {
            "toolSpec": {
                "name": t.name,
                "description": t.description,
                "inputSchema": {"json": t.inputSchema},
            }
        }
        for t in tools
    ]
