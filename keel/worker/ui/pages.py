"""The pages: ``/`` (sessions) and ``/sessions/{id}`` (one session), and their parts.

Each page is rendered whole on the server; live updates (``keel.worker.ui.live``) and the answers
to actions (``keel.worker.ui.actions``) send the same parts again, rendered by the same functions.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from temporalio.client import WorkflowQueryFailedError

from keel.worker.client.keel_client import KeelClient
from keel.worker.ui.access import Visit
from keel.worker.ui.context import SESSION_PARTS, UiContext
from keel.worker.ui.problems import problem
from keel.worker.ui.views import (
    SessionRow,
    SessionView,
    effects_table,
    session_rows,
    session_view,
)
from keel.workflows.contracts import Event, SessionState
from keel.workflows.effect_contracts import EffectRecord

T = TypeVar("T")
logger = logging.getLogger(__name__)

# Sessions the list shows at most.
LIST_LIMIT = 50


@dataclass(frozen=True)
class SessionParts:
    """The session page's parts, rendered, with the data they came from."""

    view: SessionView
    html: dict[str, str]
    effects: list[EffectRecord] | None = None
    retried: tuple[Event, ...] = ()
    """The ``tool_retried`` events the view shows: a live page renders later states, which
    carry only the events since, with these before them."""


async def render_session(
    ui: UiContext,
    keel: KeelClient,
    session: str,
    visit: Visit,
    state: SessionState | None = None,
    effects_of: SessionParts | None = None,
) -> SessionParts:
    """Read a session and render each part of its page.

    Args:
        ui: the page's settings and templates.
        keel: the client.
        session: the session.
        visit: who looks.
        state: the session's state with its messages, when the caller has just read it
            (the live page follows it): not read again.
        effects_of: earlier parts whose effects table still holds (no tool ran or was decided
            since): the ``effects`` query is not asked again.

    Raises:
        SessionNotFound, NoWorker, RPCError...: the session cannot be read (see ``problem``).
    """
    if state is None:
        state = await keel.state(session)
    view = session_view(state)
    records = effects_of.effects if effects_of is not None else await _effects(keel, state)
    values = {
        "view": view,
        "effects": effects_table(records),
        "csrf": visit.csrf,
        "name": visit.name,
        "identity": ui.identity(state.config, visit),
        "signs_as": ui.signer.approver_in(state.config) if ui.signer else None,
    }
    html = {part: ui.render(f"_{part}.html", **values) for part in SESSION_PARTS}
    retried = tuple(e for e in state.events if e.type == "tool_retried")
    return SessionParts(view=view, html=html, effects=records, retried=retried)


async def _effects(keel: KeelClient, state: SessionState) -> list[EffectRecord] | None:
    """The session's journaled calls; None when its worker has no ``effects`` query (older)."""
    session = state.session_id
    try:
        return await keel.effects(session, state)
    except WorkflowQueryFailedError as err:
        logger.info("session %s lists no effects: %s", session, err.message)
        return None


async def session_rows_of(keel: KeelClient) -> list[SessionRow]:
    """The sessions list's rows, waiting ones first."""
    return session_rows(await keel.list_sessions(limit=LIST_LIMIT))


def render_rows(ui: UiContext, rows: list[SessionRow]) -> str:
    """The sessions table."""
    return ui.render("_sessions.html", rows=rows)


async def _read_or_banner(read: Awaitable[T]) -> tuple[T | None, str | None, int]:
    """What a page shows, or (when reading it failed in a way ``problem`` knows) its banner.

    Returns:
        The value read (None on a known failure), the banner (None on success), and the
        page's HTTP status.

    Raises:
        Exception: a failure ``problem`` does not know, as it was.
    """
    try:
        return await read, None, 200
    except Exception as err:
        known = problem(err)
        if known is None:
            raise
        status, banner = known
        return None, banner, status


async def _sessions_table(ui: UiContext) -> str:
    return render_rows(ui, await session_rows_of(await ui.source.get()))


async def _session_parts(ui: UiContext, session: str, visit: Visit) -> SessionParts:
    return await render_session(ui, await ui.source.get(), session, visit)


async def sessions_page(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /``: the sessions, waiting ones first, updated live."""
    table, banner, status = await _read_or_banner(_sessions_table(ui))
    html = ui.render(
        "sessions.html",
        table=table or "",
        banner=banner,
        csrf=visit.csrf,
        name=visit.name,
        identity=ui.identity(None, visit),
        notice=visit.take_notice(),
    )
    return HTMLResponse(html, status_code=status)


async def session_page(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /sessions/{id}``: the conversation, pending interrupts, usage, controls."""
    session = request.path_params["session"]
    parts, banner, status = await _read_or_banner(_session_parts(ui, session, visit))
    html = ui.render(
        "session.html",
        session=session,
        parts=parts.html if parts else None,
        view=parts.view if parts else None,
        banner=banner,
        csrf=visit.csrf,
        name=visit.name,
        notice=visit.take_notice(),
    )
    return HTMLResponse(html, status_code=status)
