"""A scripted OpenAI-compatible chat-completions server for tests.

A stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) in a background thread. Each
``POST .../chat/completions`` takes the next outcome from a queue the test fills:

* ``Reply``: a completion given as text, tool calls, finish reason and usage. A streaming
  request (``"stream": true``) gets it as server-sent events over chunked transfer encoding:
  a role chunk, the text in three chunks, each tool call as a header chunk (id, name) then
  its arguments in two or more chunks, a finish chunk, a usage chunk when
  ``stream_options.include_usage`` is set, then ``data: [DONE]``. ``cut_after=n`` sends the
  first n chunks and half of the next one, then drops the connection; ``finish_reason=None``
  leaves out the finish chunk, ``usage=None`` the usage chunk and ``done=False`` the
  ``[DONE]`` line (the body still ends cleanly); ``as_json=True`` answers a streaming request
  with a plain JSON body anyway. A non-streaming request gets one ``chat.completion`` body.
* ``Failure``: an HTTP error with an OpenAI-style body
  ``{"error": {"message": ..., "type": ..., "code": ...}}`` (and a ``Retry-After`` header
  when ``retry_after`` is set).
* ``StreamError``: a 200 stream that sends some text, then ``data: {"error": {...}}``.
* ``RawBody``: a 200 JSON body given whole (``{"choices": []}``, say).
* ``EmptyStream``: a 200 event stream that ends without a single event, as llama-cpp-python
  answers a streamed request with tools it cannot stream.

``Reply(delay_s=...)`` waits that long before answering (before the body; for a stream, after
its headers and before its first event), watching the connection: a client that goes away
meanwhile is recorded in ``disconnects`` (the request's index and when) and gets no more.

Every request is recorded (path, lower-cased headers, JSON body, when it arrived) before it
is answered. When
the queue is empty the server answers HTTP 400, so a test that under-scripts fails fast
instead of being retried.

Usage::

    with FakeOpenAIServer() as server:
        server.enqueue(Reply(text="hi"))
        os.environ["OPENAI_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass
class ToolCall:
    """One tool call of a scripted reply; ``arguments`` may be a dict or raw JSON text."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass
class Reply:
    """A scripted completion."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = "stop"
    usage: dict[str, int] | None = field(
        default_factory=lambda: {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    )
    cut_after: int | None = None
    done: bool = True
    as_json: bool = False
    extra_choice_fields: dict[str, Any] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Failure:
    """A scripted HTTP error; ``retry_after`` is sent as its ``Retry-After`` header."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | int | None = None
    retry_after: str | None = None


@dataclass
class StreamError:
    """A stream that starts well and then reports an error event."""

    text: str = "partial"
    message: str = "internal error"
    code: int | None = None


@dataclass
class EmptyStream:
    """A 200 event stream with no events at all."""


@dataclass
class RawBody:
    """A 200 JSON body, as given."""

    payload: dict[str, Any]


Outcome = Reply | Failure | StreamError | EmptyStream | RawBody


@dataclass
class Disconnect:
    """A client that closed its connection while the server delayed its answer."""

    request: int
    at: float


@dataclass
class RecordedRequest:
    """What the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # when it arrived
    wall: float = field(default_factory=time.time)  # the same, by the clock a date is read by


def split(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` non-empty pieces (fewer when it is shorter)."""
    if len(text) <= 1 or parts <= 1:
        return [text]
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAIServer:
    """The scripted server; a context manager that starts and stops it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: deque[Outcome] = deque()
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[Disconnect] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        """The API root to put in ``OPENAI_BASE_URL``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def enqueue(self, *outcomes: Outcome) -> None:
        """Add outcomes for the next requests, in order."""
        with self._lock:
            self._outcomes.extend(outcomes)

    @property
    def remaining(self) -> int:
        """Outcomes not used yet."""
        with self._lock:
            return len(self._outcomes)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far."""
        with self._lock:
            return [r.body for r in self.requests]

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _take(self, request: RecordedRequest) -> tuple[int, Outcome | None]:
        with self._lock:
            self.requests.append(request)
            index = len(self.requests) - 1
            return index, (self._outcomes.popleft() if self._outcomes else None)

    def _disconnected(self, index: int) -> None:
        with self._lock:
            self.disconnects.append(Disconnect(index, time.monotonic()))


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", errors="replace")}
        headers = {k.lower(): v for k, v in self.headers.items()}
        index, outcome = self.fake._take(RecordedRequest(self.path, headers, body))
        self.close_connection = True
        streamed = isinstance(outcome, Reply) and body.get("stream") and not outcome.as_json
        if isinstance(outcome, Reply) and outcome.delay_s > 0:
            if streamed:
                self._start_stream()  # the headers now, the events after the delay
            if not self._wait(outcome.delay_s):
                self.fake._disconnected(index)
                return
        if self.path != CHAT_PATH:
            self._error(404, f"404 page not found: {self.path}", "not_found")
        elif outcome is None:
            self._error(400, "fake server: no scripted outcome left", "fake_exhausted")
        elif isinstance(outcome, Failure):
            extra = {"Retry-After": outcome.retry_after} if outcome.retry_after else {}
            self._error(outcome.status, outcome.message, outcome.type, outcome.code, extra)
        elif isinstance(outcome, StreamError):
            self._stream_error(body, outcome)
        elif isinstance(outcome, RawBody):
            self._json(200, outcome.payload)
        elif isinstance(outcome, EmptyStream):
            self._start_stream()
            self._end_stream()
        elif streamed:
            self._stream(body, outcome, started=outcome.delay_s > 0)
        else:
            self._json(200, _completion(body, outcome))

    def _wait(self, seconds: float) -> bool:
        """Wait, watching the connection; False as soon as the client has gone away."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return False
                except OSError:
                    return False
                time.sleep(min(left, 0.05))  # data we do not read: keep waiting
        return True

    # ------------------------------------------------------------------------------ answers

    def _json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self,
        status: int,
        message: str,
        kind: str,
        code: str | int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        body = {"error": {"message": message, "type": kind, "code": code}}
        self._json(status, body, headers)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()

    def _send_event(self, data: str) -> None:
        event = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, body: dict[str, Any], reply: Reply, *, started: bool = False) -> None:
        chunks = _stream_chunks(body, reply)
        if not started:
            self._start_stream()
        if reply.cut_after is not None:
            for chunk in chunks[: reply.cut_after]:
                self._send_event(json.dumps(chunk))
            # half of the next event, then the connection drops: no terminating chunk
            if reply.cut_after < len(chunks):
                event = f"data: {json.dumps(chunks[reply.cut_after])}\n\n".encode()
                self.wfile.write(f"{len(event):x}\r\n".encode() + event[: len(event) // 2])
                self.wfile.flush()
            return
        for chunk in chunks:
            self._send_event(json.dumps(chunk))
        if reply.done:
            self._send_event("[DONE]")
        self._end_stream()

    def _stream_error(self, body: dict[str, Any], outcome: StreamError) -> None:
        self._start_stream()
        self._send_event(json.dumps(_chunk(body, {"role": "assistant", "content": outcome.text})))
        error = {"message": outcome.message, "type": "server_error", "code": outcome.code}
        self._send_event(json.dumps({"error": error}))
        self._end_stream()


def _chunk(
    body: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, **extra}],
    }


def _stream_chunks(body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    chunks = [_chunk(body, {"role": "assistant", "content": ""})]
    for piece in split(reply.text, 3) if reply.text else []:
        chunks.append(_chunk(body, {"content": piece}))
    for index, call in enumerate(reply.tool_calls):
        head: dict[str, Any] = {
            "index": index,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        if call.id is not None:
            head["id"] = call.id
        chunks.append(_chunk(body, {"tool_calls": [head]}))
        for piece in split(call.arguments_text(), 2):
            part = {"index": index, "function": {"arguments": piece}}
            chunks.append(_chunk(body, {"tool_calls": [part]}))
    if reply.finish_reason is not None:
        chunks.append(_chunk(body, {}, reply.finish_reason, **reply.extra_choice_fields))
    include_usage = (body.get("stream_options") or {}).get("include_usage")
    if include_usage and reply.usage is not None:
        usage_chunk = _chunk(body, {})
        usage_chunk["choices"] = []
        usage_chunk["usage"] = reply.usage
        chunks.append(usage_chunk)
    return chunks


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text()},
            }
            for call in reply.tool_calls
        ]
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason,
                **reply.extra_choice_fields,
            }
        ],
    }
    if reply.usage is not None:
        payload["usage"] = reply.usage
    return payload


@contextmanager
def openai_server() -> Iterator[FakeOpenAIServer]:
    """Run a fake server for the duration of a ``with`` block."""
    with FakeOpenAIServer() as server:
        yield server
