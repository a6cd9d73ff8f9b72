"""A local Bedrock Runtime: Converse and ConverseStream over HTTP, driven by a script.

Real boto3 talks to it through ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``. A test queues outcomes;
each request (Converse or ConverseStream, any model) takes the next one:

- ``Reply(content, stop_reason, usage, text_deltas=3, pace_s=0)``: a normal answer. Converse
  gets the JSON output shape; ConverseStream gets ``messageStart``, then per block
  ``contentBlockStart`` (toolUse only, as Bedrock does) / ``contentBlockDelta`` (text split
  into up to ``text_deltas`` deltas, toolUse input JSON into 2+ chunks) /
  ``contentBlockStop``, then ``messageStop`` and ``metadata``. A toolUse ``input`` given as a
  string is streamed as that raw JSON text (it may be incomplete). ``pace_s`` sends the
  n-th delta ``n * pace_s`` after the first event: a stream at a fixed rate.
- ``HttpError(status, error_type, message)``: an error response with ``x-amzn-ErrorType``.
- ``StreamCut(reply, after_events, clean=False)``: stream the first ``after_events`` events
  of the reply, then drop the connection mid-body (``clean=True``: end the HTTP body
  properly, so the event stream just stops before ``messageStop``).
- ``StreamError(reply, after_events, exception_type, message)``: stream some events, then an
  exception event (``:message-type`` ``exception``), as Bedrock does for mid-stream errors.

With the queue empty the server answers a ValidationException naming the problem. Every
request is recorded in ``requests`` (``RecordedRequest``: path, model id, operation, headers,
parsed JSON body), and every text delta streamed in ``sent`` with the time it was sent.

``fake_bedrock_env(monkeypatch, tmp_path)`` starts a server, points boto3 at it with fake
credentials, isolates the test from the host's AWS configuration, and clears the provider's
client cache before and after.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from keel.activities.models.bedrock_calls import reset_client_cache

DEFAULT_USAGE = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)$")


@dataclass
class Reply:
    """A normal answer: Converse content blocks, stop reason, usage.

    ``text_deltas`` splits each text block into that many deltas; ``pace_s`` waits that long
    before each delta, so that a stream runs at a fixed rate (``text_deltas / pace_s`` per
    second).
    """

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    usage: dict[str, int] | None = None
    text_deltas: int = 3
    pace_s: float = 0.0

    def usage_or_default(self) -> dict[str, int]:
        return dict(self.usage) if self.usage is not None else dict(DEFAULT_USAGE)


@dataclass
class HttpError:
    """An HTTP error response, as Bedrock's rest-json protocol sends it.

    ``retry_after`` is sent as its ``Retry-After`` header.
    """

    status: int
    error_type: str
    message: str
    retry_after: str | None = None


@dataclass
class StreamCut:
    """Stream the first ``after_events`` events of a reply, then stop."""

    reply: Reply
    after_events: int
    clean: bool = False


@dataclass
class StreamError:
    """Stream the first ``after_events`` events of a reply, then an exception event."""

    reply: Reply
    after_events: int
    exception_type: str = "modelStreamErrorException"
    message: str = "The model stream failed. Retry your request."


Outcome = Reply | HttpError | StreamCut | StreamError


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    model_id: str
    operation: str  # "converse" or "converse-stream"
    headers: dict[str, str]
    body: Any = field(default=None)
    at: float = field(default_factory=time.monotonic)  # when it arrived


# ------------------------------------------------------------------------ event-stream framing


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack(">B", len(raw_name))
        + raw_name
        + struct.pack(">BH", 7, len(raw_value))
        + raw_value
    )


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + raw_headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def encode_event(event_type: str, payload: dict[str, Any]) -> bytes:
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, json.dumps(payload).encode())


def encode_exception(exception_type: str, message: str) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def _split(text: str, parts: int) -> list[str]:
    if len(text) < parts:
        return [text] if text else []
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_events(reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """The ConverseStream events Bedrock would send for a reply."""
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for index, block in enumerate(reply.content):
        if "text" in block:
            for piece in _split(block["text"], reply.text_deltas):
                events.append(
                    ("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}})
                )
        elif "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            events.append(("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            raw = use["input"] if isinstance(use["input"], str) else json.dumps(use["input"])
            for piece in _split(raw, 3):
                delta = {"toolUse": {"input": piece}}
                events.append(("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        elif "reasoningContent" in block:
            reasoning = block["reasoningContent"]["reasoningText"]
            for piece in _split(reasoning["text"], 2):
                delta = {"reasoningContent": {"text": piece}}
                events.append(("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
            if "signature" in reasoning:
                delta = {"reasoningContent": {"signature": reasoning["signature"]}}
                events.append(("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        else:
            raise ValueError(f"fake bedrock cannot stream block {sorted(block)}")
        events.append(("contentBlockStop", {"contentBlockIndex": index}))
    events.append(("messageStop", {"stopReason": reply.stop_reason}))
    events.append(("metadata", {"usage": reply.usage_or_default(), "metrics": {"latencyMs": 1}}))
    return events


# ------------------------------------------------------------------------------------- server


class FakeBedrock:
    """A Bedrock Runtime on 127.0.0.1, answering from a queue of scripted outcomes."""

    def __init__(self) -> None:
        self._outcomes: deque[Outcome] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        # Each text delta streamed: (time.time() just before it is written, its text).
        self.sent: list[tuple[float, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *outcomes: Outcome) -> None:
        """Queue outcomes; each request takes the next one."""
        with self._lock:
            self._outcomes.extend(outcomes)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._outcomes)

    def _next(self, request: RecordedRequest) -> Outcome | None:
        with self._lock:
            self.requests.append(request)
            return self._outcomes.popleft() if self._outcomes else None

    def start(self) -> FakeBedrock:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-bedrock",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeBedrock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeBedrock

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        match = _PATH.match(self.path)
        if match is None:
            self._error(404, "UnknownOperationException", f"fake bedrock: no route {self.path}")
            return
        operation = match["op"]
        request = RecordedRequest(
            method="POST",
            path=self.path,
            model_id=unquote(match["model"]),
            operation=operation,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
        )
        outcome = self.server_fake._next(request)
        if outcome is None:
            self._error(400, "ValidationException", "fake bedrock: no scripted outcome left")
        elif isinstance(outcome, HttpError):
            extra = {"Retry-After": outcome.retry_after} if outcome.retry_after else {}
            self._error(outcome.status, outcome.error_type, outcome.message, extra)
        elif operation == "converse":
            if not isinstance(outcome, Reply):
                self._error(500, "InternalServerException", f"fake bedrock: {outcome} streams only")
            else:
                self._converse(outcome)
        elif isinstance(outcome, Reply):
            self._stream(stream_events(outcome), pace_s=outcome.pace_s)
        elif isinstance(outcome, StreamError):
            events = stream_events(outcome.reply)[: outcome.after_events]
            tail = encode_exception(outcome.exception_type, outcome.message)
            self._stream(events, tail=tail, pace_s=outcome.reply.pace_s)
        else:
            events = stream_events(outcome.reply)[: outcome.after_events]
            self._stream(events, cut=not outcome.clean, pace_s=outcome.reply.pace_s)

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "fake-request-id")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(
        self, status: int, error_type: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        extra = {"x-amzn-ErrorType": error_type, **(headers or {})}
        self._send_json(status, {"message": message}, extra)

    def _converse(self, reply: Reply) -> None:
        body = {
            "output": {"message": {"role": "assistant", "content": reply.content}},
            "stopReason": reply.stop_reason,
            "usage": reply.usage_or_default(),
            "metrics": {"latencyMs": 1},
        }
        self._send_json(200, body, {})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(
        self,
        events: list[tuple[str, dict[str, Any]]],
        tail: bytes = b"",
        cut: bool = False,
        pace_s: float = 0.0,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", "fake-request-id")
        self.end_headers()
        started, deltas = time.monotonic(), 0
        for event_type, payload in events:
            delta = payload.get("delta") if event_type == "contentBlockDelta" else None
            if delta is not None and pace_s:  # on a schedule: the rate holds on average
                deltas += 1
                time.sleep(max(0.0, started + deltas * pace_s - time.monotonic()))
            if delta is not None and "text" in delta:
                self.server_fake.sent.append((time.time(), delta["text"]))
            self._chunk(encode_event(event_type, payload))
        if tail:
            self._chunk(tail)
        if cut:
            # half a chunk, then the connection goes away: the body is broken mid-message
            self.wfile.write(b"40\r\n" + b"\x00" * 10)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ------------------------------------------------------------------------------------ fixture


@contextmanager
def fake_bedrock_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    """Run a fake Bedrock and point boto3 at it with fake credentials and region us-east-1.

    The host's AWS configuration cannot leak in: config and credentials files are empty
    temporary files, profile, session token, bearer token and instance metadata are off.
    """
    config = tmp_path / "aws-config"
    credentials = tmp_path / "aws-credentials"
    config.write_text("")
    credentials.write_text("")
    with FakeBedrock() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        for name in (
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_REGION",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_ENDPOINT_URL",
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
            "AWS_MAX_ATTEMPTS",
            "AWS_RETRY_MODE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN",
        ):
            monkeypatch.delenv(name, raising=False)
        reset_client_cache()
        try:
            yield server
        finally:
            reset_client_cache()
