"""The ``openai:<model>`` provider: any OpenAI-compatible chat-completions server.

Talks to Ollama, vLLM, llama.cpp (or OpenAI itself) with the standard library only. The server
is ``OPENAI_BASE_URL`` (default ``http://127.0.0.1:11434/v1``, Ollama's), read when the
provider is created; ``OPENAI_API_KEY``, when set, is sent as a bearer token.

Spec: ``openai:<model>[?option=value&...]``. The model name may itself contain ``:``
(``openai:llama3.2:3b``). Options (``OPTIONS``, checked before anything starts):

* ``stream=true|false`` (default true): with ``false`` the request asks for one JSON body
  instead of a server-sent-event stream. A streaming request that is answered with a plain
  JSON body (a server that ignores ``stream``) is read as a non-streamed answer too.
* ``timeout=<seconds>`` (default 300): socket timeout for connecting and for each read; a
  non-streamed answer must arrive whole within it.
* ``tool_choice=auto|omit`` (default auto): a request that offers tools says
  ``"tool_choice": "auto"``, OpenAI's own default, which some servers need spelled out
  (llama-cpp-python's ``chatml-function-calling`` format leaves the tools out of the prompt
  without it); ``omit`` leaves the field out, for a server that rejects it.
* ``context_tokens=<n>``: the model's context window in tokens. Keel then trims what the
  model sees to fit before asking (``keel.activities.context_window.fit_tokens``). Without
  it, a server that answers "context too long" makes Keel trim and ask once more.

Streaming and tools: some servers cannot stream an answer to a request with tools
(llama-cpp-python answers 200 with an empty event stream, and logs "Automatic streaming tool
choice is not supported"). When a streamed request with tools gets no event at all, or an
error saying so, the same request is sent again without streaming, and this worker process
remembers it for that server and model: their later requests with tools are not streamed
(logged once, as a warning). Requests without tools still stream.

The parts: ``openai_request`` (Converse -> chat), ``openai_response`` (chat -> Converse),
``openai_stream`` (reading an answer), ``openai_errors`` (what failures mean; a 429 or 503's
``Retry-After`` becomes the next attempt's delay), ``openai_transport`` (HTTP; ``abort()``
shuts the sockets of the call in flight from another thread, so a long request ends at once).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import urllib.error
import urllib.parse
from collections.abc import Mapping
from typing import Any, ClassVar

from keel.activities.models.base import DeltaCallback, ModelError
from keel.activities.models.declared import DeclaredProvider, Option, at_least, flag, one_of
from keel.activities.models.declared import seconds as positive_seconds
from keel.activities.models.openai_errors import (
    API_KEY_ENV,
    JSON,
    EmptyStream,
    NoStreamingWithTools,
    OpenAITransientError,
    Server,
    read_error_body,
    says_no_streaming_with_tools,
)
from keel.activities.models.openai_request import chat_body
from keel.activities.models.openai_response import Assembler
from keel.activities.models.openai_stream import read_body, read_stream
from keel.activities.models.openai_transport import Transport, reason
from keel.activities.models.retry_after import retry_after_s
from keel.workflows.activity_contracts import ModelRequest, ModelResponse

logger = logging.getLogger(__name__)

BASE_URL_ENV = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:11434/v1"
DEFAULT_TIMEOUT_S = 300.0
TOOL_CHOICES = ("auto", "omit")
# The smallest context window a spec may name (context_tokens=N): the task and one exchange.
MIN_CONTEXT = 256

STREAM = Option("stream", "true or false", flag, True, "a server-sent-event stream, or one body")
TIMEOUT = Option(
    "timeout",
    "a number of seconds > 0",
    positive_seconds,
    DEFAULT_TIMEOUT_S,
    "socket timeout for connecting and each read",
)
TOOL_CHOICE = Option(
    "tool_choice",
    "auto or omit",
    one_of(*TOOL_CHOICES),
    "auto",
    'send "tool_choice": "auto" with tools, or leave it out',
)
CONTEXT_TOKENS = Option[int | None](
    "context_tokens",
    f"a whole number of tokens >= {MIN_CONTEXT}",
    at_least(MIN_CONTEXT),
    None,
    "the model's context window: trim what it sees to fit",
)
OPTIONS: tuple[Option[Any], ...] = (STREAM, TIMEOUT, TOOL_CHOICE, CONTEXT_TOKENS)

# (base URL, model) of the servers found, in this process, not to stream answers to requests
# with tools: their later requests with tools ask for one JSON body at once.
_UNSTREAMED_TOOLS: set[tuple[str, str]] = set()
_UNSTREAMED_LOCK = threading.Lock()

__all__ = ["OPTIONS", "OpenAIProvider", "OpenAITransientError"]


class OpenAIProvider(DeclaredProvider):
    """A model served by an OpenAI-compatible ``/chat/completions`` endpoint.

    One provider serves one model call (the model activity resolves the spec for each call);
    ``abort`` ends its requests in flight and any it starts later.

    Attributes:
        model: the model name sent to the server.
        stream: whether the request asks for a server-sent-event stream.
        timeout_s: socket timeout for connecting and for each read.
        tool_choice: ``auto`` (sent with tools) or ``omit`` (never sent).
        context_tokens: the model's context window, when the spec names it.
        base_url: the server's API root, without a trailing slash.
        api_key: the bearer token, if ``OPENAI_API_KEY`` is set.
    """

    prefix: ClassVar[str] = "openai"
    telemetry_name: ClassVar[str] = "openai"
    options: ClassVar[tuple[Option[Any], ...]] = OPTIONS

    def __init__(self, model: str, environ: Mapping[str, str] | None = None) -> None:
        """Create a provider for the part of a spec after ``openai:``.

        Args:
            model: ``<model>[?stream=true|false&timeout=<seconds>&tool_choice=auto|omit
                &context_tokens=<n>]``.
            environ: where ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` are read (the worker's
                settings' environment); none: the defaults, no key.

        Raises:
            ModelSpecError: the model name is empty, or an option is unknown or invalid.
            ModelError: ``OPENAI_BASE_URL`` is not an http(s) URL.
        """
        parsed = self.parse_spec(model)
        self.model = parsed.name
        self.stream = parsed.get(STREAM)
        self.timeout_s = parsed.get(TIMEOUT)
        self.tool_choice = parsed.get(TOOL_CHOICE)
        self.context_tokens = parsed.get(CONTEXT_TOKENS)
        environ = environ or {}
        base = environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ModelError(f"{BASE_URL_ENV}={base!r} is not an http(s) URL")
        self.base_url = base.rstrip("/")
        self.api_key = environ.get(API_KEY_ENV) or None
        self.server = Server(self.base_url, self.model)
        self._transport = Transport()

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return f"{self.base_url}/chat/completions"

    def streams(self, request: ModelRequest) -> bool:
        """Whether this request is sent streamed (see the module docstring)."""
        if not self.stream:
            return False
        if not request.tools:
            return True
        with _UNSTREAMED_LOCK:
            return (self.base_url, self.model) not in _UNSTREAMED_TOOLS

    def request_body(self, request: ModelRequest, *, stream: bool | None = None) -> JSON:
        """The chat-completions request body for a Converse-shaped request.

        Args:
            request: the conversation, system prompt, tools and inference config.
            stream: whether to ask for a stream; None: as ``streams`` says.
        """
        streamed = self.streams(request) if stream is None else stream
        return chat_body(self.model, request, stream=streamed, tool_choice=self.tool_choice)

    def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Send the conversation to the server and assemble its answer.

        Args:
            request: the conversation, system prompt, tools and inference config.
            on_delta: called with each text delta, and with ``""`` for other chunks.

        Raises:
            ModelError: the server rejected the request in a way retrying cannot fix.
            OpenAITransientError: a failure worth retrying (with the server's
                ``Retry-After`` delay, when it gave one).
        """
        stream = self.streams(request)
        try:
            return self._call(request, on_delta, stream)
        except NoStreamingWithTools as err:
            self._remember_unstreamed(str(err))
        except EmptyStream:
            # llama-cpp-python, for one, fails inside its stream (a conversation past the
            # context window) after answering 200: unstreamed, the same request says why
            logger.info(
                "model %s: an empty stream from %s; asking once more unstreamed",
                self.model,
                self.base_url,
            )
        return self._call(request, on_delta, False)

    def abort(self) -> None:
        """End this provider's requests in flight, and any it starts later (any thread)."""
        self._transport.abort()

    def _call(self, request: ModelRequest, on_delta: DeltaCallback, stream: bool) -> ModelResponse:
        data = json.dumps(self.request_body(request, stream=stream)).encode("utf-8")
        logger.debug(
            "POST %s model %s: %s messages, stream %s",
            self.url,
            self.model,
            len(request.messages),
            stream,
        )
        assembler = Assembler()
        tools = bool(request.tools) and stream
        server, transport = self.server, self._transport
        try:
            with transport.post(self.url, data, self._headers(stream), self.timeout_s) as answer:
                if answer.headers.get_content_type() == "text/event-stream":
                    aborted = lambda: transport.aborted  # noqa: E731
                    read_stream(answer, assembler, on_delta, server, aborted=aborted, tools=tools)
                else:
                    read_body(answer.read(), assembler, on_delta, server)
        except urllib.error.HTTPError as err:
            delay = retry_after_s(err.headers.get("Retry-After") if err.headers else None)
            failure = server.http_failure(err.code, read_error_body(err), err.reason, delay)
            if tools and says_no_streaming_with_tools(str(failure)):
                raise NoStreamingWithTools(str(failure)) from err
            raise failure from err
        except (OSError, http.client.HTTPException) as err:
            # unreachable (URLError), timeouts, resets, chunked bodies cut short (IncompleteRead)
            if transport.aborted:
                raise server.transient("request aborted: the model call was cancelled") from err
            if isinstance(err, urllib.error.URLError):
                raise server.transient(f"unreachable ({reason(err.reason)})") from err
            if isinstance(err, TimeoutError):
                silent = f"sent nothing for {self.timeout_s:g} s (timed out)"
                raise server.transient(silent) from err
            raise server.transient(f"connection broke off ({reason(err)})") from err
        finally:
            transport.done()
        return assembler.response(request)

    def _remember_unstreamed(self, why: str) -> None:
        key = (self.base_url, self.model)
        with _UNSTREAMED_LOCK:
            first = key not in _UNSTREAMED_TOOLS
            _UNSTREAMED_TOOLS.add(key)
        if first:
            logger.warning(
                "model server %s (model %r) cannot stream an answer to a request with tools "
                "(%s); this worker sends its requests with tools unstreamed from now on",
                self.base_url,
                self.model,
                why,
            )

    def _headers(self, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": "keel",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers
