"""What an OpenAI-compatible server's failures mean: retry, trim the conversation, or give up.

HTTP 408, 409, 425, 429 and 5xx, and errors inside a 200 stream without a status, raise
``OpenAITransientError`` (retried by Temporal; a 429 or 503 with ``Retry-After`` carries the
delay the server asked for). Any error that says the conversation exceeds the context window
raises ``ContextTooLong``; other 4xx raise ``ModelError`` with the status, the server's message
and a hint.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
from dataclasses import dataclass
from typing import Any

from keel.activities.models.base import ContextTooLong, ModelError, ModelTransientError

API_KEY_ENV = "OPENAI_API_KEY"
# Statuses worth retrying besides every 5xx; any other 4xx is the request's fault.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
# Lower-case fragments of the errors servers give for a conversation that does not fit.
CONTEXT_MARKERS = (
    "context length",
    "maximum context",
    "context window",
    "context size",
    "context_length_exceeded",
)
MAX_ERROR_TEXT = 500

JSON = dict[str, Any]


class OpenAITransientError(ModelTransientError):
    """A failure that may pass: rate limits, server errors, broken connections or streams.

    The model activity logs it as one line and Temporal retries the call with backoff.
    """


class EmptyStream(Exception):
    """A streamed request answered 200 with no event at all: ask once more, unstreamed."""


class NoStreamingWithTools(Exception):
    """The server cannot stream an answer to a request with tools: send it unstreamed."""


@dataclass(frozen=True)
class Server:
    """The server and model of a call: how its failures are named and classified."""

    base_url: str
    model: str

    def where(self) -> str:
        """``model server URL (model 'NAME')``."""
        return f"model server {self.base_url} (model {self.model!r})"

    def transient(self, what: str, *, retry_after_s: float | None = None) -> OpenAITransientError:
        """A failure worth retrying, saying what happened."""
        return OpenAITransientError(f"{self.where()} {what}", retry_after_s=retry_after_s)

    def http_failure(
        self, status: int, body: bytes, reason: object, retry_after_s: float | None = None
    ) -> Exception:
        """The failure an HTTP error answer stands for."""
        message = error_message(body) or str(reason or "") or "no error message"
        return self.classify(status, message, retry_after_s)

    def stream_failure(self, chunk: JSON) -> Exception:
        """An error the server sent inside a 200 answer (as a stream event or JSON body)."""
        err = chunk.get("error")
        code = err.get("code") if isinstance(err, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else None
        message = error_message(json.dumps(chunk).encode("utf-8")) or "no error message"
        return self.classify(status, message)

    def classify(
        self, status: int | None, message: str, retry_after_s: float | None = None
    ) -> Exception:
        """Turn an error answer into ``ModelError``, ``ContextTooLong`` or a transient one.

        Args:
            status: the HTTP status; ``None`` for an error reported inside a stream.
            message: the server's error message.
            retry_after_s: the delay its ``Retry-After`` asked for (kept on a 429 or 503).
        """
        label = f"HTTP {status}" if status is not None else "an error in its stream"
        if any(marker in message.lower() for marker in CONTEXT_MARKERS):
            return ContextTooLong(
                f"the conversation does not fit the context window of model {self.model!r} "
                f"({label} from {self.base_url}): {message}"
            )
        if status is None or status >= 500 or status in RETRYABLE_STATUSES or status < 400:
            asked = retry_after_s if status in (429, 503) else None
            return self.transient(f"answered {label}: {message}", retry_after_s=asked)
        hint = ""
        if status == 404:
            hint = (
                f"; the model {self.model!r} may not exist on the server (for Ollama: "
                f"ollama pull {self.model}), or {self.base_url} is not an OpenAI-compatible "
                "API root (it usually ends in /v1)"
            )
        elif status in (401, 403):
            hint = f"; check {API_KEY_ENV}"
        return ModelError(f"{self.where()} rejected the request ({label}): {message}{hint}")


def says_no_streaming_with_tools(message: str) -> bool:
    """Whether an error says the server cannot stream an answer to a request with tools."""
    text = message.lower()
    return (
        "stream" in text
        and ("tool" in text or "function" in text)
        and ("not supported" in text or "unsupported" in text or "not implemented" in text)
    )


def error_message(body: bytes) -> str:
    """The message of an error body: OpenAI's ``{"error": {"message": ...}}`` and kin."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return clip(text)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, str):
            return clip(err)
        if isinstance(err, dict):
            for key in ("message", "detail", "error"):
                value = err.get(key)
                if isinstance(value, str) and value:
                    return clip(value)
                if value:
                    return clip(json.dumps(value))
    return clip(text)


def read_error_body(err: urllib.error.HTTPError) -> bytes:
    """The body of an error answer; empty when it cannot be read."""
    try:
        return err.read()
    except (OSError, http.client.HTTPException):
        return b""


def clip(text: str) -> str:
    """``text``, cut at ``MAX_ERROR_TEXT`` characters."""
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "..."
