"""Live updates as server-sent events: the sessions list, and one session's page.

A session's stream follows it the way ``keel watch`` does (``SessionReader.snapshots``, the
``state`` query, nothing written to history): when its event log grows or its status
changes, the page's parts are rendered again and the changed ones sent (event ``parts``).
Beside that loop, a task follows the text model calls stream (``SessionReader.model_text``:
every character, in order, from the worker's stream endpoint or, failing that, heartbeat
snapshots) and sends each chunk as it comes (event ``text``); both go out through one queue.
When the session stops, a last ``parts`` and an ``end``. A failure is sent as a ``problem``
for the page's banner; the browser then reconnects. When the browser goes away, or the
session stops, the tasks are cancelled and awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Send

from keel.worker.background import stop_task
from keel.worker.client.keel_client import KeelClient
from keel.worker.client.streams import TextChunk
from keel.worker.ui.access import Visit
from keel.worker.ui.context import UiContext
from keel.worker.ui.pages import SessionParts, render_rows, render_session, session_rows_of
from keel.worker.ui.problems import problem

logger = logging.getLogger(__name__)

# Events after which a session's effects table may read otherwise (a tool ran, an interrupt
# opened or was decided, the turn ended or the run continued): the ``effects`` query is asked
# again only after one of them.
EFFECT_EVENTS = frozenset(
    {
        "tool_started",
        "tool_finished",
        "tool_retried",
        "interrupt_created",
        "interrupt_decided",
        "interrupt_escalated",
        "client_result_received",
        "turn_ended",
        "run_continued",
    }
)
# How often the sessions list is read again, and a session's state.
LIST_EVERY_S = 2.0
SESSION_POLL_S = 0.3
# Between looks for a model call that streams, while none does.
TEXT_POLL_S = 0.3
# A comment line keeps proxies from closing a quiet stream.
KEEPALIVE_S = 15.0
# How long the browser waits before reconnecting after the stream ends or fails.
RETRY_MS = 3000


def sse(event: str, data: Any) -> str:
    """One server-sent event, its data as JSON."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class _EventStream(StreamingResponse):
    """A stream of server-sent events whose generator is closed however the response ends.

    When the browser goes away, the generator may be waiting at a ``yield``; closing it here
    runs its ``finally`` (which stops its tasks) now rather than whenever it is collected.
    """

    def __init__(self, events: AsyncGenerator[str, None]) -> None:
        super().__init__(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self.events = events

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            await self.events.aclose()


def _stream(events: AsyncGenerator[str, None]) -> Response:
    return _EventStream(events)


async def _problem_event(err: Exception) -> str:
    known = problem(err)
    if known is None:
        raise err
    return sse("problem", {"message": known[1]})


def sessions_live(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /live``: the sessions table whenever it changes."""

    async def events() -> AsyncGenerator[str, None]:
        yield f"retry: {RETRY_MS}\n\n"
        last = None
        quiet = 0.0
        while True:
            try:
                keel = await ui.source.get()
                table = render_rows(ui, await session_rows_of(keel))
            except Exception as err:
                yield await _problem_event(err)
                last = None
            else:
                if table != last:
                    yield sse("sessions", {"html": table})
                    last, quiet = table, 0.0
            quiet += LIST_EVERY_S
            if quiet >= KEEPALIVE_S:
                yield ": keepalive\n\n"
                quiet = 0.0
            await asyncio.sleep(LIST_EVERY_S)

    return _stream(events())


def session_live(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /live/sessions/{id}``: the session page's changed parts, and streamed text."""
    session = request.path_params["session"]

    async def events() -> AsyncGenerator[str, None]:
        yield f"retry: {RETRY_MS}\n\n"
        try:
            async with contextlib.aclosing(_follow(ui, session, visit)) as follow:
                async for event in follow:
                    yield event
        except Exception as err:
            yield await _problem_event(err)

    return _stream(events())


async def _follow(ui: UiContext, session: str, visit: Visit) -> AsyncGenerator[str, None]:
    keel = await ui.source.get()
    parts = await render_session(ui, keel, session, visit)
    yield sse("parts", {"parts": dict(parts.html), "seq": parts.view.event_count, "problem": None})
    out: asyncio.Queue[str | Exception | None] = asyncio.Queue()
    tasks = [
        asyncio.create_task(
            _parts(ui, keel, session, visit, parts, out),
            name=f"keel-ui-parts:{session}",
        ),
        asyncio.create_task(_text(keel, session, out), name=f"keel-ui-text:{session}"),
    ]
    try:
        while True:
            try:  # asyncio.timeout: wait_for can drop a cancel on Python 3.11 (stop_task)
                async with asyncio.timeout(KEEPALIVE_S):
                    item = await out.get()
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if item is None:  # the session stopped
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        for task in tasks:  # all cancelled first: an await here may be cancelled itself
            task.cancel()
        for task in tasks:
            await stop_task(task)


async def _parts(
    ui: UiContext,
    keel: KeelClient,
    session: str,
    visit: Visit,
    first: SessionParts,
    out: asyncio.Queue[str | Exception | None],
) -> None:
    """Put the parts that changed since ``first`` on ``out`` until the session stops.

    Then a last ``parts``, ``end`` and None; a failure is put on ``out`` instead, for the
    stream to report.
    """
    sent = dict(first.html)
    seen = (first.view.event_count, first.view.status)
    last = first
    try:
        async for state in keel.snapshots(
            session, seen[0], poll_s=SESSION_POLL_S, include_messages=True
        ):
            now = (state.event_count, state.status)
            if now == seen:
                continue
            seen = now
            # rendered from the state just read (its messages came with it); the effects
            # table is asked again only after events that can change it
            same_effects = not any(e.type in EFFECT_EVENTS for e in state.events)
            shown = state.model_copy(update={"events": [*last.retried, *state.events]})
            fresh = last = await render_session(
                ui, keel, session, visit, state=shown, effects_of=last if same_effects else None
            )
            changed = {k: v for k, v in fresh.html.items() if sent.get(k) != v}
            if changed:
                sent.update(changed)
                seq = fresh.view.event_count
                await out.put(sse("parts", {"parts": changed, "seq": seq, "problem": None}))
        final = await render_session(ui, keel, session, visit)
        changed = {k: v for k, v in final.html.items() if sent.get(k) != v}
        seq = final.view.event_count
        await out.put(sse("parts", {"parts": changed, "seq": seq, "problem": None}))
        await out.put(sse("end", {"status": final.view.status}))
        await out.put(None)
    except Exception as err:
        await out.put(err)


async def _text(keel: KeelClient, session: str, out: asyncio.Queue[str | Exception | None]) -> None:
    """Put each chunk of text the session's model calls stream on ``out``, as it comes.

    The streamed text is a nicety beside the parts: a failure to read it is logged and ends
    this task only.
    """
    try:
        async for chunk in keel.model_text(session, poll_s=TEXT_POLL_S):
            await out.put(sse("text", text_event(chunk)))
    except Exception as err:
        logger.info("stopped following the text of session %s: %s", session, err)


def text_event(chunk: TextChunk) -> dict[str, Any]:
    """A ``text`` event's data: the call (activity id and attempt) and where the text goes.

    The page appends ``text`` when ``offset`` is where its shown text of ``call`` ends; ``gap``
    characters before it were missed (heartbeat fallback only); ``end`` closes the call.
    """
    return {
        "call": f"{chunk.activity_id}#{chunk.attempt}",
        "offset": chunk.offset,
        "text": chunk.text,
        "gap": chunk.gap,
        "end": chunk.end,
    }
