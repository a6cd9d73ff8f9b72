"""Following the text a session's model calls stream: every character, in order.

A running model call advertises, in its heartbeat details, the worker's stream endpoint (a URL
and a per-attempt token). The reader ``describe``s the session to find the call, then reads the
text from the endpoint directly, from the offset it has reached: nothing goes through workflow
history, and once connected no Temporal RPC is made until the call ends. When the endpoint
cannot be reached (another network, turned off), the reader falls back to the heartbeat
details' snapshots: the tail of the text about once a second, with gaps when more came in
between than the tail holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError

from keel.workflows.activity_options import MODEL_ACTIVITY

logger = logging.getLogger(__name__)

__all__ = [
    "ENDPOINT",
    "HEARTBEAT",
    "ModelStream",
    "TextChunk",
    "follow_model_text",
    "heartbeat_snapshot",
]

ENDPOINT = "endpoint"
HEARTBEAT = "heartbeat"
# How long connecting to a worker's stream endpoint may take before falling back.
CONNECT_TIMEOUT_S = 2.0
# The endpoint sends a keepalive every 15 s: this long without a byte means it is gone.
READ_TIMEOUT_S = 40.0
# An endpoint that did not answer in time is not tried again for this long (by this reader).
UNREACHABLE_FOR_S = 60.0
# Between heartbeat snapshots (fallback): the activity heartbeats about once a second.
SNAPSHOT_EVERY_S = 0.5
_LINE_LIMIT = 1 << 20


@dataclass(frozen=True)
class TextChunk:
    """A piece of the text a model call streams.

    Attributes:
        activity_id: the model activity's id; a new id is a new model call.
        attempt: the activity attempt; a retry streams again from offset 0.
        turn: the turn the call belongs to (None when the worker did not say).
        cycle: the call's cycle in its turn (None when the worker did not say).
        offset: characters of this attempt's text before ``text``.
        text: the new characters (empty in an ``end`` chunk).
        gap: characters skipped just before ``text``; only the heartbeat fallback skips any.
        end: the attempt's text is over: its stream ended (``source`` endpoint), or the call
            is no longer running (heartbeat fallback; its last characters may be missing).
        source: ``endpoint`` (the worker's stream endpoint: complete) or ``heartbeat``
            (snapshots from heartbeat details: the fallback).
    """

    activity_id: str
    attempt: int
    turn: int | None
    cycle: int | None
    offset: int
    text: str
    gap: int = 0
    end: bool = False
    source: str = ENDPOINT


@dataclass(frozen=True)
class ModelStream:
    """What a running model call has streamed so far, from its last heartbeat.

    A snapshot (the tail of the text, about once a second): ``SessionReader.model_text``
    gives every character instead.

    Attributes:
        activity_id: the model activity's id; a new id is a new model call.
        attempt: the activity attempt; a retry streams again from the start.
        text_chars: characters of text streamed so far by this attempt.
        text: the tail of that text (the model activity keeps the last 4000 characters).
    """

    activity_id: str
    attempt: int
    text_chars: int
    text: str


async def heartbeat_snapshot(
    client: Client, description: WorkflowExecutionDescription
) -> ModelStream | None:
    """The running model call's last heartbeat snapshot; None when no model call runs."""
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == MODEL_ACTIVITY:
            details = await _details(client, pending.heartbeat_details.payloads)
            if details.get("attempt", pending.attempt) != pending.attempt:
                details = {}  # the last attempt's, until this one heartbeats
            return ModelStream(
                activity_id=pending.activity_id,
                attempt=pending.attempt,
                text_chars=int(details.get("text_chars") or 0),
                text=str(details.get("text") or ""),
            )
    return None


class _Refused(Exception):
    """The endpoint answered, but not with the stream (wrong token, expired stream)."""


@dataclass
class _Call:
    """One model-call attempt as the follower knows it."""

    activity_id: str
    attempt: int
    turn: int | None = None
    cycle: int | None = None
    shown: int = 0
    unreachable: bool = False
    ended: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return self.activity_id, self.attempt

    def chunk(self, offset: int, text: str, **extra: Any) -> TextChunk:
        where = (self.activity_id, self.attempt, self.turn, self.cycle)
        return TextChunk(*where, offset, text, **extra)


async def _endpoint_events(url: str, token: str, offset: int) -> AsyncIterator[tuple[str, Any]]:
    """Server-sent events of a stream from ``offset``: ``(event, data)``; ends at EOF.

    Raises:
        OSError, TimeoutError: the endpoint cannot be reached, or went silent.
        _Refused: it answered with another status than 200.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    async with asyncio.timeout(CONNECT_TIMEOUT_S):
        reader, writer = await asyncio.open_connection(host, port, limit=_LINE_LIMIT)
    try:
        writer.write(
            f"GET {parts.path}?offset={offset} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            status = await reader.readline()
            while (await reader.readline()).strip():
                pass  # headers
        fields = status.split()
        if len(fields) < 2 or fields[1] != b"200":
            raise _Refused(status.decode(errors="replace").strip())
        event, data = "message", list[str]()
        while True:
            async with asyncio.timeout(READ_TIMEOUT_S):  # wait_for can drop a cancel (3.11)
                line = await reader.readline()
            if not line:
                return
            text = line.decode().rstrip("\r\n")
            if not text:
                if data:
                    yield event, json.loads("\n".join(data))
                event, data = "message", []
            elif text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                data.append(text[5:].strip())
    finally:
        writer.close()


async def follow_model_text(
    client: Client,
    describe: Callable[[], Awaitable[WorkflowExecutionDescription]],
    *,
    poll_s: float = 0.2,
) -> AsyncIterator[TextChunk]:
    """Follow a session's model calls: yields their streamed text as it arrives.

    Args:
        client: the Temporal client, whose data converter decodes heartbeat details.
        describe: describes the session's workflow (an RPC).
        poll_s: seconds between ``describe`` calls while no call streams.

    Ends when the session's workflow no longer runs.

    Raises:
        SessionNotFound: no such session (from ``describe``).
    """
    calls: dict[tuple[str, int], _Call] = {}
    current: _Call | None = None
    unreachable: dict[str, float] = {}  # endpoint (host:port) -> until when not to try it
    while True:
        try:
            description = await describe()
        except RPCError as err:  # the server busy or restarting: ask again
            logger.info("cannot describe the session (retrying): %s", err)
            await asyncio.sleep(max(poll_s, SNAPSHOT_EVERY_S))
            continue
        running = description.status == WorkflowExecutionStatus.RUNNING
        pending = _model_call(description) if running else None
        key = None if pending is None else (pending.activity_id, pending.attempt)
        if current is not None and current.key != key and current.shown and not current.ended:
            # a call followed by snapshots is over once it no longer runs
            current.ended = True
            yield current.chunk(current.shown, "", end=True, source=HEARTBEAT)
        if not running:
            return
        if pending is None or key is None:
            current = None
            await asyncio.sleep(poll_s)
            continue
        details = await _details(client, pending.heartbeat_details.payloads)
        if details.get("attempt", pending.attempt) != pending.attempt:
            details = {}  # a retry not heartbeated yet shows the last attempt's details
        call = current = calls.setdefault(key, _Call(pending.activity_id, pending.attempt))
        if call.turn is None:  # known from the first heartbeat on
            call.turn = _int_or_none(details.get("turn"))
            call.cycle = _int_or_none(details.get("cycle"))
        advert = details.get("stream")
        if call.ended:  # its stream has ended: wait for the next call
            await asyncio.sleep(poll_s)
        elif isinstance(advert, dict) and not call.unreachable:
            async for chunk in _from_advertised_endpoint(call, advert, unreachable):
                yield chunk
            if not call.ended:  # cut off, or unreachable: look again shortly
                await asyncio.sleep(poll_s)
            # else the next call may already run: no sleep
        elif not details:
            await asyncio.sleep(poll_s)  # no heartbeat yet
        else:
            snapshot = _from_snapshot(call, details)
            if snapshot is not None:
                yield snapshot
            await asyncio.sleep(max(poll_s, SNAPSHOT_EVERY_S))


def _model_call(description: WorkflowExecutionDescription) -> PendingActivityInfo | None:
    """The session's model call that runs now, if one does."""
    return next(
        (
            p
            for p in description.raw_description.pending_activities
            if p.activity_type.name == MODEL_ACTIVITY
        ),
        None,
    )


async def _from_advertised_endpoint(
    call: _Call, advert: dict[str, Any], unreachable: dict[str, float]
) -> AsyncIterator[TextChunk]:
    """The call's text from the stream endpoint its heartbeat advertises, while it answers.

    An endpoint that cannot be reached, or refuses this stream, marks the call ``unreachable``
    (its text then comes from heartbeat snapshots); one that timed out is not tried again, for
    any call, for ``UNREACHABLE_FOR_S`` (``unreachable``: host:port -> until when).
    """
    loop = asyncio.get_running_loop()
    where = urlsplit(str(advert.get("url"))).netloc
    call.unreachable = unreachable.get(where, 0.0) > loop.time()
    try:
        if not call.unreachable:
            async for chunk in _from_endpoint(call, advert):
                yield chunk
    except (OSError, TimeoutError, ValueError) as err:
        logger.info(
            "cannot reach the model stream endpoint %s (%s); falling back to heartbeat snapshots",
            where,
            err or type(err).__name__,
        )
        call.unreachable = True
        if isinstance(err, TimeoutError):  # a refusal costs nothing to meet again
            unreachable[where] = loop.time() + UNREACHABLE_FOR_S
    except _Refused as err:  # reachable, but not this stream (expired, say)
        logger.info("model stream at %s refused (%s); falling back", where, err)
        call.unreachable = True


async def _from_endpoint(call: _Call, advert: dict[str, Any]) -> AsyncIterator[TextChunk]:
    """The call's text from the endpoint, from what was shown on; marks an ended call."""
    async for event, data in _endpoint_events(
        str(advert.get("url")), str(advert.get("token")), call.shown
    ):
        if event == "end":
            call.ended = True
            yield call.chunk(call.shown, "", end=True)
            return
        offset, text = int(data["offset"]), str(data["text"])
        if offset > call.shown:  # cannot happen with a sound endpoint: say so, do not hide it
            raise ValueError(f"stream skipped from {call.shown} to {offset}")
        text = text[call.shown - offset :]
        if text:
            yield call.chunk(call.shown, text)
            call.shown += len(text)


def _from_snapshot(call: _Call, details: dict[str, Any]) -> TextChunk | None:
    """The new part of a heartbeat snapshot (count and tail), with the gap before it."""
    total = int(details.get("text_chars") or 0)
    tail = str(details.get("text") or "")
    new = total - call.shown
    if new <= 0 or not tail:
        return None
    part = tail[-new:] if new <= len(tail) else tail
    start = total - len(part)
    gap, call.shown = start - call.shown, total
    return call.chunk(start, part, gap=gap, source=HEARTBEAT)


async def _details(client: Client, payloads: Any) -> dict[str, Any]:
    """Decoded heartbeat details; empty when there are none or this client cannot decode them.

    Details encrypted with a key this client does not hold tell it neither the text nor where
    the stream is.
    """
    if not payloads:
        return {}
    try:
        decoded = await client.data_converter.decode(payloads)
    except Exception as err:  # any codec or converter failure: no details
        logger.info("cannot decode the model call's heartbeat details: %s", err)
        return {}
    return decoded[0] if decoded and isinstance(decoded[0], dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None
