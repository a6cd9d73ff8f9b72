"""The ``openai:<model>`` provider: any OpenAI-compatible chat-completions server.

Talks to Ollama, vLLM, llama.cpp (or OpenAI itself) with the standard library only. The server
is ``OPENAI_BASE_URL`` (default ``http://127.0.0.1:11434/v1``, Ollama's), read when the
provider is created; ``OPENAI_API_KEY``, when set, is sent as a bearer token.

Spec: ``openai:<model>[?option=value&...]``. The model name may itself contain ``:``
(``openai:llama3.2:3b``). Options:

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

Conversation mapping (Converse -> chat completions):

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

Response mapping: text deltas form one text block, followed by one toolUse block per tool
call in index order. A call's id becomes the ``toolUseId``; a call without an id (or with one
that is longer than 64 characters or already used in the conversation) gets the stable id
``call_<turn>_<cycle>_<index>``, unique within the session so that id-less servers do not
trip the workflow's duplicate-id check on the next cycle. Arguments that are not a complete
JSON object become the input ``{}``. Finish reasons: ``stop`` -> ``end_turn`` (``tool_use``
when the message carries tool calls, as some Ollama versions report ``stop`` for them;
``stop_sequence`` when vLLM names a matched stop sequence), ``tool_calls`` -> ``tool_use``,
``length`` -> ``max_tokens``, ``content_filter`` -> ``content_filtered``; others pass through.
Usage the server does not report (no ``usage`` object: llama-cpp-python never sends one in a
stream) is ``TokenUsage(unknown=True)``, never a silent 0.

Errors: HTTP 408, 409, 425, 429 and 5xx, unreachable servers, timeouts, broken connections,
malformed chunks and streams that end before a finish reason raise ``OpenAITransientError``
(a ``ModelTransientError``: the model activity logs one line and Temporal retries). Other 4xx
answers raise ``ModelError`` with the status and the server's message; so does any error that
says the conversation exceeds the context window, and an answer without choices.

Cancelling: ``abort()`` (called by the model activity when it is cancelled) shuts down the
sockets of the call in flight from another thread, so a long non-streamed request ends at
once and the server sees its client go away.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from keel.activities.models.base import (
    ContextTooLong,
    DeltaCallback,
    ModelError,
    ModelTransientError,
)
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.contracts import ToolSpec
from keel.workflows.messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    TokenUsage,
    ToolResult,
    ToolUse,
)

logger = logging.getLogger(__name__)

BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "http://127.0.0.1:11434/v1"
DEFAULT_TIMEOUT_S = 300.0
TOOL_CHOICES = ("auto", "omit")
# The smallest context window a spec may name (context_tokens=N): the task and one exchange.
MIN_CONTEXT = 256

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}
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
TEXT_DOCUMENT_FORMATS = frozenset({"txt", "md", "csv", "html"})
MAX_TOOL_USE_ID = 64
MAX_ERROR_TEXT = 500

JSON = dict[str, Any]

# (base URL, model) of the servers found, in this process, not to stream answers to requests
# with tools: their later requests with tools ask for one JSON body at once.
_UNSTREAMED_TOOLS: set[tuple[str, str]] = set()
_UNSTREAMED_LOCK = threading.Lock()


class OpenAITransientError(ModelTransientError):
    """A failure that may pass: rate limits, server errors, broken connections or streams.

    The model activity logs it as one line and Temporal retries the call with backoff.
    """


class _EmptyStream(Exception):
    """A streamed request answered 200 with no event at all: ask once more, unstreamed."""


class _NoStreamingWithTools(Exception):
    """The server cannot stream an answer to a request with tools: send it unstreamed."""


class _Connections:
    """The sockets of a provider's requests in flight, so that another thread can shut them.

    Sockets, not connections: urllib drops the connection's socket once the response headers
    are in (the response reads on through its own reference), and a stream is read after that.
    Shutting a socket whose descriptor is closed already is a harmless ``OSError``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.aborted = False

    def opened(self, sock: socket.socket) -> None:
        """Track a socket that just connected; shut it at once if aborted already."""
        with self._lock:
            self._open.append(sock)
            aborted = self.aborted
        if aborted:
            _shut(sock)

    def forget(self) -> None:
        """Forget the sockets of requests that ended."""
        with self._lock:
            self._open.clear()

    def abort(self) -> None:
        """Shut every open socket down (from any thread), and any that opens later."""
        with self._lock:
            self.aborted = True
            sockets = list(self._open)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes the thread blocked reading this socket (it reads EOF) and
    # tells the server its client went away, without closing a descriptor another thread uses
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _TrackedHTTPConnection(http.client.HTTPConnection):
    tracker: _Connections | None = None

    def connect(self) -> None:
        super().connect()
        if self.tracker is not None and self.sock is not None:
            self.tracker.opened(self.sock)


class _TrackedHTTPSConnection(http.client.HTTPSConnection):
    tracker: _Connections | None = None

    def connect(self) -> None:
        super().connect()
        if self.tracker is not None and self.sock is not None:
            self.tracker.opened(self.sock)


class _TrackedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, tracker: _Connections) -> None:
        super().__init__()
        self.tracker = tracker

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = _TrackedHTTPConnection(host, **kwargs)
        conn.tracker = self.tracker
        return conn

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, tracker: _Connections) -> None:
        super().__init__()
        self.tracker = tracker

    def _connection(self, host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = _TrackedHTTPSConnection(host, **kwargs)
        conn.tracker = self.tracker
        return conn

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class OpenAIProvider:
    """A model served by an OpenAI-compatible ``/chat/completions`` endpoint.

    One provider serves one model call (the model activity resolves the spec for each call);
    ``abort`` ends its requests in flight and any it starts later.

    Attributes:
        model: the model name sent to the server.
        stream: whether the request asks for a server-sent-event stream.
        timeout_s: socket timeout for connecting and for each read.
        tool_choice: ``auto`` (sent with tools) or ``omit`` (never sent).
        base_url: the server's API root, without a trailing slash.
        api_key: the bearer token, if ``OPENAI_API_KEY`` is set.
    """

    def __init__(self, model: str, environ: Mapping[str, str] | None = None) -> None:
        """Create a provider for the part of a spec after ``openai:``.

        Args:
            environ: where ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` are read (the worker's
                settings' environment); none: the defaults, no key.
            model: ``<model>[?stream=true|false&timeout=<seconds>&tool_choice=auto|omit
                &context_tokens=<n>]``.

        Raises:
            ModelError: the model name is empty, an option is unknown or invalid, or
                ``OPENAI_BASE_URL`` is not an http(s) URL.
        """
        name, _, query = model.partition("?")
        if not name:
            raise ModelError("openai model spec needs a model name: openai:<model>")
        self.model = name
        self.stream = True
        self.timeout_s = DEFAULT_TIMEOUT_S
        self.tool_choice = "auto"
        self.context_tokens: int | None = None
        for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if key == "stream" and value.lower() in ("true", "1", "yes"):
                self.stream = True
            elif key == "stream" and value.lower() in ("false", "0", "no"):
                self.stream = False
            elif key == "timeout" and _positive_float(value) is not None:
                self.timeout_s = float(value)
            elif key == "tool_choice" and value.lower() in TOOL_CHOICES:
                self.tool_choice = value.lower()
            elif key == "context_tokens" and value.isdigit() and int(value) >= MIN_CONTEXT:
                self.context_tokens = int(value)
            else:
                raise ModelError(
                    f"openai model spec {model!r}: unknown or invalid option {key}={value!r}; "
                    "options are stream=true|false, timeout=<seconds>, "
                    f"tool_choice=auto|omit and context_tokens=<at least {MIN_CONTEXT}>"
                )
        environ = environ or {}
        base = environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ModelError(f"{BASE_URL_ENV}={base!r} is not an http(s) URL")
        self.base_url = base.rstrip("/")
        self.api_key = environ.get(API_KEY_ENV) or None
        self._connections = _Connections()
        self._opener = urllib.request.build_opener(
            _TrackedHTTPHandler(self._connections), _TrackedHTTPSHandler(self._connections)
        )

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
        body: JSON = {
            "model": self.model,
            "messages": chat_messages(request.system, request.messages),
            "stream": streamed,
        }
        if streamed:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = chat_tools(request.tools)
            if self.tool_choice == "auto":
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

    def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Send the conversation to the server and assemble its answer.

        Args:
            request: the conversation, system prompt, tools and inference config.
            on_delta: called with each text delta, and with ``""`` for other chunks.

        Raises:
            ModelError: the server rejected the request in a way retrying cannot fix.
            OpenAITransientError: a failure worth retrying.
        """
        stream = self.streams(request)
        try:
            return self._call(request, on_delta, stream)
        except _NoStreamingWithTools as err:
            self._remember_unstreamed(str(err))
        except _EmptyStream:
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
        self._connections.abort()

    # ------------------------------------------------------------------------------- internals

    def _call(self, request: ModelRequest, on_delta: DeltaCallback, stream: bool) -> ModelResponse:
        data = json.dumps(self.request_body(request, stream=stream)).encode("utf-8")
        http_request = urllib.request.Request(
            self.url, data=data, headers=self._headers(stream), method="POST"
        )
        logger.debug(
            "POST %s model %s: %s messages, stream %s",
            self.url,
            self.model,
            len(request.messages),
            stream,
        )
        assembler = _Assembler()
        tools = bool(request.tools) and stream
        try:
            with self._opener.open(http_request, timeout=self.timeout_s) as response:
                if response.headers.get_content_type() == "text/event-stream":
                    self._read_stream(response, assembler, on_delta, tools=tools)
                else:
                    self._read_body(response.read(), assembler, on_delta)
        except urllib.error.HTTPError as err:
            failure = self._http_failure(err.code, _read_error_body(err), err.reason)
            if tools and _says_no_streaming_with_tools(str(failure)):
                raise _NoStreamingWithTools(str(failure)) from err
            raise failure from err
        except (OSError, http.client.HTTPException) as err:
            # unreachable (URLError), timeouts, resets, chunked bodies cut short (IncompleteRead)
            if self._connections.aborted:
                raise self._transient("request aborted: the model call was cancelled") from err
            if isinstance(err, urllib.error.URLError):
                raise self._transient(f"unreachable ({_reason(err.reason)})") from err
            if isinstance(err, TimeoutError):
                raise self._transient(f"sent nothing for {self.timeout_s:g} s (timed out)") from err
            raise self._transient(f"connection broke off ({_reason(err)})") from err
        finally:
            self._connections.forget()
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

    def _read_stream(
        self,
        lines: Iterable[bytes],
        assembler: _Assembler,
        on_delta: DeltaCallback,
        *,
        tools: bool = False,
    ) -> None:
        done = False
        chunks = 0
        for kind, payload in _sse_events(lines):
            if kind == "data" and payload.strip() == "[DONE]":
                done = True
                break
            chunk = self._parse_chunk(payload)
            if kind == "error" or chunk.get("error"):
                failure = self._stream_failure(chunk)
                if tools and not assembler.text and _says_no_streaming_with_tools(str(failure)):
                    raise _NoStreamingWithTools(str(failure))
                raise failure
            chunks += 1
            on_delta(assembler.add(chunk))
        if self._connections.aborted:  # the stream "ended" because abort() shut it
            raise self._transient("request aborted: the model call was cancelled")
        if chunks == 0 and tools:
            raise _NoStreamingWithTools("a streamed request with tools got an empty stream")
        if chunks == 0 and not done:
            raise _EmptyStream("a streamed request got an empty stream")
        if assembler.finish_reason is None:
            if not done:
                raise self._transient("the stream was cut short before a finish reason")
            logger.warning("model %s: stream ended with [DONE] but no finish reason", self.model)
        elif not done:
            logger.debug(
                "model %s: stream closed after its finish reason without [DONE]", self.model
            )

    def _read_body(self, raw: bytes, assembler: _Assembler, on_delta: DeltaCallback) -> None:
        if raw.lstrip().startswith(b"data:"):
            # an event stream the server labelled with another content type
            self._read_stream(raw.splitlines(keepends=True), assembler, on_delta)
            return
        body = self._parse_chunk(raw.decode("utf-8", errors="replace"))
        if body.get("error"):
            raise self._stream_failure(body)
        if not isinstance(body.get("choices"), list) or not body["choices"]:
            raise ModelError(
                f"{self._where()} answered without choices (no message to read): "
                f"{_clip(json.dumps(body))}"
            )
        on_delta(assembler.add(body))
        if assembler.finish_reason is None:
            assembler.finish_reason = "stop"

    def _parse_chunk(self, payload: str) -> JSON:
        try:
            chunk = json.loads(payload)
        except ValueError as err:
            raise self._transient(f"sent malformed JSON: {_clip(payload)!r}") from err
        if not isinstance(chunk, dict):
            raise self._transient(f"sent unexpected JSON: {_clip(payload)!r}")
        return chunk

    def _where(self) -> str:
        return f"model server {self.base_url} (model {self.model!r})"

    def _transient(self, what: str) -> OpenAITransientError:
        return OpenAITransientError(f"{self._where()} {what}")

    def _http_failure(self, status: int, body: bytes, reason: object) -> Exception:
        message = _error_message(body) or str(reason or "") or "no error message"
        return self._classify(status, message)

    def _stream_failure(self, chunk: JSON) -> Exception:
        """An error the server sent inside a 200 answer (as a stream event or JSON body)."""
        err = chunk.get("error")
        code = err.get("code") if isinstance(err, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else None
        message = _error_message(json.dumps(chunk).encode("utf-8")) or "no error message"
        return self._classify(status, message)

    def _classify(self, status: int | None, message: str) -> Exception:
        """Turn an error answer into ``ModelError`` or ``OpenAITransientError``.

        Args:
            status: the HTTP status; ``None`` for an error reported inside a stream.
            message: the server's error message.
        """
        label = f"HTTP {status}" if status is not None else "an error in its stream"
        if any(marker in message.lower() for marker in CONTEXT_MARKERS):
            return ContextTooLong(
                f"the conversation does not fit the context window of model {self.model!r} "
                f"({label} from {self.base_url}): {message}"
            )
        if status is None or status >= 500 or status in RETRYABLE_STATUSES or status < 400:
            return self._transient(f"answered {label}: {message}")
        hint = ""
        if status == 404:
            hint = (
                f"; the model {self.model!r} may not exist on the server (for Ollama: "
                f"ollama pull {self.model}), or {self.base_url} is not an OpenAI-compatible "
                "API root (it usually ends in /v1)"
            )
        elif status in (401, 403):
            hint = f"; check {API_KEY_ENV}"
        return ModelError(f"{self._where()} rejected the request ({label}): {message}{hint}")


def _says_no_streaming_with_tools(message: str) -> bool:
    """Whether an error says the server cannot stream an answer to a request with tools."""
    text = message.lower()
    return (
        "stream" in text
        and ("tool" in text or "function" in text)
        and ("not supported" in text or "unsupported" in text or "not implemented" in text)
    )


def _reason(err: object) -> str:
    """A short reason for a connection failure: ``connection refused``, ``timed out``."""
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the host: {err.strerror or err}"
    if isinstance(err, http.client.IncompleteRead):
        return "the answer was cut short"
    if isinstance(err, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(err, BaseException):
        text = str(err)
        return f"{type(err).__name__}: {text}" if text else type(err).__name__
    return str(err)


# ----------------------------------------------------------------------------- request mapping


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


# ---------------------------------------------------------------------------- response parsing


def _sse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """Server-sent events as ``(field, data)``: ``data`` events, and ``error`` lines.

    llama.cpp reports some failures as a bare ``error: {...}`` line; it is passed on as an
    ``error`` event. Comments, ``event:``, ``id:`` and ``retry:`` lines are skipped.
    """
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "data", "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "error":
            yield "error", value
    if data:
        yield "data", "\n".join(data)


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembler:
    """Collects stream chunks (or one non-streamed body) into one assistant message."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _CallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    matched_stop: str | None = None
    usage: JSON | None = None

    def add(self, chunk: JSON) -> str:
        """Take one chunk (or a whole ``chat.completion``); returns its text delta."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        delta_text = ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            content = _content_text(delta.get("content"))
            if content:
                self.text.append(content)
                delta_text += content
            calls = delta.get("tool_calls")
            for position, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict):
                    self._add_call(position, call)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
            matched = choice.get("stop_reason")  # vLLM: the stop string that ended the output
            if isinstance(matched, str):
                self.matched_stop = matched
        return delta_text

    def _add_call(self, position: int, call: JSON) -> None:
        call_id = call.get("id") if isinstance(call.get("id"), str) else ""
        index = call.get("index")
        if not isinstance(index, int):
            # servers that omit the index send whole calls: tell them apart by id
            known = [i for i, parts in self.calls.items() if call_id and parts.id == call_id]
            index = known[0] if known else (len(self.calls) if call_id else position)
        parts = self.calls.setdefault(index, _CallParts())
        if call_id and not parts.id:
            parts.id = call_id
        function = call.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and not parts.name:
            parts.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            parts.arguments.append(arguments)
        elif isinstance(arguments, dict):
            parts.arguments.append(json.dumps(arguments))

    def response(self, request: ModelRequest) -> ModelResponse:
        """The assembled assistant message, stop reason and usage."""
        content: list[ContentBlock] = []
        text = "".join(self.text)
        if text:
            content.append(ContentBlock(text=text))
        used = {u.toolUseId for m in request.messages for b in m.content if (u := b.toolUse)}
        for index in sorted(self.calls):
            parts = self.calls[index]
            if not parts.name:
                logger.warning("dropping tool call %s: the server sent no function name", index)
                continue
            use_id = parts.id
            if not use_id or len(use_id) > MAX_TOOL_USE_ID or use_id in used:
                use_id = _generated_id(request, index, used)
            used.add(use_id)
            content.append(
                ContentBlock(
                    toolUse=ToolUse(
                        toolUseId=use_id,
                        name=parts.name[:MAX_TOOL_USE_ID],
                        input=_parse_arguments("".join(parts.arguments), parts.name),
                    )
                )
            )
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stopReason=self._stop_reason(request, has_calls=any(b.toolUse for b in content)),
            usage=self._token_usage(),
        )

    def _stop_reason(self, request: ModelRequest, *, has_calls: bool) -> str:
        reason = self.finish_reason
        if reason is None:  # [DONE] without a finish reason
            return "tool_use" if has_calls else "end_turn"
        if reason == "stop":
            if has_calls:
                return "tool_use"
            stops = request.inference.stopSequences if request.inference else None
            if self.matched_stop is not None and stops and self.matched_stop in stops:
                return "stop_sequence"
        return FINISH_REASONS.get(reason, reason)

    def _token_usage(self) -> TokenUsage:
        if self.usage is None:  # not reported: unknown, not 0
            return TokenUsage(unknown=True)
        usage = self.usage
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        total = _int(usage.get("total_tokens")) or prompt + completion
        return TokenUsage(inputTokens=prompt, outputTokens=completion, totalTokens=total)


def _generated_id(request: ModelRequest, index: int, used: set[str]) -> str:
    base = f"call_{request.turn}_{request.cycle}_{index}"
    candidate, n = base, 1
    while candidate in used:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


def _parse_arguments(raw: str, name: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
        if isinstance(value, str):  # some models encode the arguments twice
            value = json.loads(value)
    except ValueError:
        logger.warning("tool call %s: arguments are not complete JSON: %s", name, _clip(raw))
        return {}
    if not isinstance(value, dict):
        logger.warning("tool call %s: arguments are not a JSON object: %s", name, _clip(raw))
        return {}
    return value


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _error_message(body: bytes) -> str:
    """The message of an error body: OpenAI's ``{"error": {"message": ...}}`` and kin."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return _clip(text)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, str):
            return _clip(err)
        if isinstance(err, dict):
            for key in ("message", "detail", "error"):
                value = err.get(key)
                if isinstance(value, str) and value:
                    return _clip(value)
                if value:
                    return _clip(json.dumps(value))
    return _clip(text)


def _read_error_body(err: urllib.error.HTTPError) -> bytes:
    try:
        return err.read()
    except (OSError, http.client.HTTPException):
        return b""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "..."


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _positive_float(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 else None
