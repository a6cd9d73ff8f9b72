"""Reading a chat-completions answer: a server-sent-event stream, or one JSON body.

A stream is read event by event into an ``Assembler``, each text delta handed on as it comes.
An error event ends it with the server's error; a stream that ends before a finish reason
(and without ``[DONE]``) was cut short (retried). A streamed request with tools that gets no
event, or an error saying the server cannot stream with tools, raises
``NoStreamingWithTools``; one without tools that gets no event raises ``EmptyStream``: the
provider asks once more, unstreamed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator

from keel.activities.models.base import DeltaCallback, ModelError
from keel.activities.models.openai_errors import (
    JSON,
    EmptyStream,
    NoStreamingWithTools,
    Server,
    clip,
    says_no_streaming_with_tools,
)
from keel.activities.models.openai_response import Assembler

logger = logging.getLogger(__name__)


def sse_events(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
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


def read_stream(
    lines: Iterable[bytes],
    assembler: Assembler,
    on_delta: DeltaCallback,
    server: Server,
    *,
    aborted: Callable[[], bool] = lambda: False,
    tools: bool = False,
) -> None:
    """Read an event stream into ``assembler``.

    Args:
        lines: the answer's lines.
        assembler: collects the message.
        on_delta: called with each chunk's text delta (``""`` for none).
        server: names and classifies failures.
        aborted: whether the call was aborted (its stream then "ends").
        tools: whether the request offered tools (see the module docstring).

    Raises:
        NoStreamingWithTools, EmptyStream: ask once more, unstreamed.
        ModelError, OpenAITransientError: the server's error, or a stream cut short.
    """
    done = False
    chunks = 0
    for kind, payload in sse_events(lines):
        if kind == "data" and payload.strip() == "[DONE]":
            done = True
            break
        chunk = parse_chunk(payload, server)
        if kind == "error" or chunk.get("error"):
            failure = server.stream_failure(chunk)
            if tools and not assembler.text and says_no_streaming_with_tools(str(failure)):
                raise NoStreamingWithTools(str(failure))
            raise failure
        chunks += 1
        on_delta(assembler.add(chunk))
    if aborted():  # the stream "ended" because abort() shut it
        raise server.transient("request aborted: the model call was cancelled")
    if chunks == 0 and tools:
        raise NoStreamingWithTools("a streamed request with tools got an empty stream")
    if chunks == 0 and not done:
        raise EmptyStream("a streamed request got an empty stream")
    if assembler.finish_reason is None:
        if not done:
            raise server.transient("the stream was cut short before a finish reason")
        logger.warning("model %s: stream ended with [DONE] but no finish reason", server.model)
    elif not done:
        logger.debug("model %s: stream closed after its finish reason without [DONE]", server.model)


def read_body(raw: bytes, assembler: Assembler, on_delta: DeltaCallback, server: Server) -> None:
    """Read a whole JSON answer (or an event stream labelled otherwise) into ``assembler``.

    Raises:
        ModelError: an answer without choices, or the server's error.
        OpenAITransientError: malformed JSON, or an error worth retrying.
    """
    if raw.lstrip().startswith(b"data:"):
        # an event stream the server labelled with another content type
        read_stream(raw.splitlines(keepends=True), assembler, on_delta, server)
        return
    body = parse_chunk(raw.decode("utf-8", errors="replace"), server)
    if body.get("error"):
        raise server.stream_failure(body)
    if not isinstance(body.get("choices"), list) or not body["choices"]:
        raise ModelError(
            f"{server.where()} answered without choices (no message to read): "
            f"{clip(json.dumps(body))}"
        )
    on_delta(assembler.add(body))
    if assembler.finish_reason is None:
        assembler.finish_reason = "stop"


def parse_chunk(payload: str, server: Server) -> JSON:
    """One chunk's JSON object.

    Raises:
        OpenAITransientError: it is not a JSON object.
    """
    try:
        chunk = json.loads(payload)
    except ValueError as err:
        raise server.transient(f"sent malformed JSON: {clip(payload)!r}") from err
    if not isinstance(chunk, dict):
        raise server.transient(f"sent unexpected JSON: {clip(payload)!r}")
    return chunk
