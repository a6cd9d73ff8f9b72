"""The model provider interface: one file per provider, chosen by the spec's prefix."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from typing_extensions import TypeIs

from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.contracts import ToolSpec

# Called by a provider as output arrives: a text delta, or "" for progress without text
# (a tool-input chunk, a metadata event). The model activity uses it to detect stalled
# streams and to show text to watchers.
DeltaCallback = Callable[[str], None]


class ModelError(Exception):
    """A model failure that retrying cannot fix (bad request, unknown model, script exhausted).

    The model activity turns it into a non-retryable Temporal failure; the turn ends with
    this message as its error and the session stays usable. Any other exception a provider
    raises is retried by Temporal with backoff (``keel.workflows.activity_options.MODEL_RETRY``).
    """


class ContextTooLong(ModelError):
    """The server says the conversation does not fit the model's context window.

    The model activity answers it once, by trimming what the model sees
    (``keel.activities.context_window.fit_tokens``) and asking again.
    """


class ModelTransientError(Exception):
    """A model failure that may pass: the server unreachable, a 5xx answer, a stream cut short.

    The model activity logs it as one line (no traceback) and Temporal retries the call
    with backoff (``keel.workflows.activity_options.MODEL_RETRY``). Its message says what
    happened, never whether it will be retried: the activity adds that, and the last
    attempt's message is the turn's error.

    Attributes:
        retry_after_s: how long the server asked to be left alone (``Retry-After`` on a 429
            or 503), if it said: the next attempt comes no sooner, within ``model_retry_s``.
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        """The failure's message, and the delay the server asked for."""
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelProvider(Protocol):
    """A model that answers one Converse-shaped request, with a blocking client.

    ``converse`` is synchronous: the model activity runs it in a thread (with the store reads
    it needs), so providers may use blocking clients such as boto3.
    """

    def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Answer one request with one assistant message.

        Args:
            request: conversation, system prompt, tool specs, inference config.
            on_delta: call as output arrives (see ``DeltaCallback``).

        Raises:
            ModelError: for failures that retrying cannot fix.
        """
        ...


class AsyncModelProvider(Protocol):
    """A model whose client is asynchronous: ``converse`` runs on the worker's event loop.

    No thread is taken for the call; it must not block (use an async HTTP client, or
    ``asyncio.to_thread`` around a blocking part). Cancelling the activity cancels it.
    """

    async def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Answer one request with one assistant message (see ``ModelProvider.converse``).

        Raises:
            ModelError: for failures that retrying cannot fix.
        """
        ...


AnyModelProvider = ModelProvider | AsyncModelProvider


def is_async_provider(provider: AnyModelProvider) -> TypeIs[AsyncModelProvider]:
    """Whether the provider's ``converse`` is a coroutine function (runs on the loop)."""
    return inspect.iscoroutinefunction(provider.converse)


def abort_call(provider: AnyModelProvider) -> None:
    """Close what a blocking provider's call in flight holds open, if the provider can.

    The model activity calls it when it is cancelled or its stream stalls: a thread cannot be
    stopped, but closing its connection ends its request (and tells the server to stop
    generating). A provider that can do this has an ``abort()`` method; one without does
    nothing here, and its thread runs until its own timeout.
    """
    abort = getattr(provider, "abort", None)
    if callable(abort):
        abort()


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
