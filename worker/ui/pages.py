"""The pages: ``/`` (sessions) and ``/sessions/{id}`` (one session), and their parts.

Each page is rendered whole on the server; live updates (``worker.ui.live``) and the answers
to actions (``worker.ui.actions``) send the same parts again, rendered by the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from worker.client import KeelClient
from worker.ui.access import Visit
from worker.ui.context import SESSION_PARTS, UiContext
from worker.ui.problems import problem
from worker.ui.views import SessionRow, SessionView, session_rows, session_view

# Sessions the list shows at most.
LIST_LIMIT = 50


@dataclass(frozen=True)
class SessionParts:
    """The session page's parts, rendered, with the data they came from."""

    view: SessionView
    html: dict[str, str]


async def render_session(
    ui: UiContext, keel: KeelClient, session: str, visit: Visit
) -> SessionParts:
    """Read a session and render each part of its page.

    Raises:
        SessionNotFound, NoWorker, RPCError...: the session cannot be read (see ``problem``).
    """
    state = await keel.state(session)
    view = session_view(state)
    values = {
        "view": view,
        "csrf": visit.csrf,
        "name": visit.name,
        "identity": ui.identity(state.config, visit),
        "signs_as": ui.signer.approver_in(state.config) if ui.signer else None,
    }
    html = {part: ui.render(f"_{part}.html", **values) for part in SESSION_PARTS}
    return SessionParts(view=view, html=html)


async def session_rows_of(keel: KeelClient) -> list[SessionRow]:
    """The sessions list's rows, waiting ones first."""
    return session_rows(await keel.list_sessions(limit=LIST_LIMIT))


def render_rows(ui: UiContext, rows: list[SessionRow]) -> str:
    """The sessions table."""
    return ui.render("_sessions.html", rows=rows)


async def sessions_page(ui: UiContext, request: Request, visit: Visit) -> Response:
    """``GET /``: the sessions, waiting ones first, updated live."""
    table, banner, status = "", None, 200
    try:
        keel = await ui.source.get()
        table = render_rows(ui, await session_rows_of(keel))
    except Exception as err:
        known = problem(err)
        if known is None:
            raise
        status, banner = known
    html = ui.render(
        "sessions.html",
        table=table,
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
    parts: SessionParts | None = None
    banner, status = None, 200
    try:
        keel = await ui.source.get()
        parts = await render_session(ui, keel, session, visit)
    except Exception as err:
        known = problem(err)
        if known is None:
            raise
        status, banner = known
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
