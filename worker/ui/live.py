"""Live updates as server-sent events: the sessions list, and one session's page.

A session's stream follows it the way ``keel watch`` does (``SessionReader.snapshots``, the
``state`` query, nothing written to history): when its event log grows or its status
changes, the page's parts are rendered again and the changed ones sent (event ``parts``);
while a model call runs, the text it has streamed so far is sent too (event ``text``, from
``SessionReader.model_stream``). When the session stops, a last ``parts`` and an ``end``.
A failure is sent as a ``problem`` for the page's banner; the browser then reconnects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from worker.ui.access import Visit
from worker.ui.context import UiContext
from worker.ui.pages import render_rows, render_session, session_rows_of
from worker.ui.problems import problem

# How often the sessions list is read again, and a session's state.
LIST_EVERY_S = 2.0
SESSION_POLL_S = 0.3
# How often streamed text is asked for at most (a model heartbeats about once a second).
STREAM_EVERY_S = 0.5
# A comment line keeps proxies from closing a quiet stream.
KEEPALIVE_S = 15.0
# How long the browser waits before reconnecting after the stream ends or fails.
RETRY_MS = 3000


def sse(event: str, data: Any) -> str:
    """One server-sent event, its data as JSON."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _stream(events: AsyncIterator[str]) -> Response:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _problem_event(err: Exception) -> str:
    known = problem(err)
    if known is None:
        raise err
    return sse("problem", {"message": known[1]})


def sessions_live(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /live``: the sessions table whenever it changes."""

    async def events() -> AsyncIterator[str]:
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
    """``GET /sessions/{id}/live``: the session page's changed parts, and streamed text."""
    session = request.path_params["session"]

    async def events() -> AsyncIterator[str]:
        yield f"retry: {RETRY_MS}\n\n"
        try:
            async for event in _follow(ui, session, visit):
                yield event
        except Exception as err:
            yield await _problem_event(err)

    return _stream(events())


async def _follow(ui: UiContext, session: str, visit: Visit) -> AsyncIterator[str]:
    keel = await ui.source.get()
    parts = await render_session(ui, keel, session, visit)
    sent = dict(parts.html)
    yield sse("parts", {"parts": sent, "problem": None})
    loop = asyncio.get_running_loop()
    seen = (parts.view.event_count, parts.view.status)
    streamed: tuple[str, int, int] | None = None
    asked_at, spoke_at = 0.0, loop.time()
    async for state in keel.snapshots(session, parts.view.event_count, poll_s=SESSION_POLL_S):
        now = (state.event_count, state.status)
        if now != seen:
            seen = now
            fresh = await render_session(ui, keel, session, visit)
            changed = {k: v for k, v in fresh.html.items() if sent.get(k) != v}
            if changed:
                sent.update(changed)
                spoke_at = loop.time()
                yield sse("parts", {"parts": changed, "problem": None})
        running = any(t.status == "running" for t in state.turns)
        if loop.time() - asked_at >= STREAM_EVERY_S:
            asked_at = loop.time()
            stream = await keel.model_stream(session) if running else None
            key = None
            if stream is not None:
                key = (stream.activity_id, stream.attempt, stream.text_chars)
            if key != streamed:
                streamed = key
                spoke_at = loop.time()
                yield sse(
                    "text",
                    None if stream is None else {"chars": stream.text_chars, "text": stream.text},
                )
        if loop.time() - spoke_at >= KEEPALIVE_S:
            spoke_at = loop.time()
            yield ": keepalive\n\n"
    final = await render_session(ui, keel, session, visit)
    changed = {k: v for k, v in final.html.items() if sent.get(k) != v}
    yield sse("parts", {"parts": changed, "problem": None})
    yield sse("end", {"status": final.view.status})
