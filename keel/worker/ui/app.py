"""The web app: routes, the access check in front of every one, and the security headers.

``create_app`` builds a Starlette app from a ``UiContext``; ``keel.worker.ui.serving`` runs it
under uvicorn (``keel ui``, ``keel dev``), tests run it in their own event loop.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from keel.worker.ui.access import Access, AccessDenied, Visit
from keel.worker.ui.actions import session_action, set_name
from keel.worker.ui.context import UiContext, templates
from keel.worker.ui.live import session_live, sessions_live
from keel.worker.ui.pages import session_page, sessions_page
from keel.worker.ui.source import KeelSource, Signer

logger = logging.getLogger(__name__)

# The page's own files; nothing else is served from the package.
STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Reader = Callable[[UiContext, Request, Visit], Awaitable[Response] | Response]
Writer = Callable[[UiContext, Request, Visit, dict[str, str]], Awaitable[Response]]


def _denied(ui: UiContext, request: Request, err: AccessDenied) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else {}
    if "application/json" in request.headers.get("accept", ""):
        body = {"ok": False, "message": str(err), "parts": None}
        response: Response = JSONResponse(body, status_code=err.status, headers=headers)
    else:
        html = ui.render("denied.html", status=err.status, message=str(err))
        response = HTMLResponse(html, status_code=err.status, headers=headers)
    response.headers.update(SECURITY_HEADERS)
    return response


def _reader(ui: UiContext, handler: Reader) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint: the token rules, then the handler; the session cookie on its answer."""

    async def endpoint(request: Request) -> Response:
        try:
            redirect = ui.access.token_redirect(request)
            if redirect is not None:
                return redirect
            visit = ui.access.admit(request)
        except AccessDenied as err:
            return _denied(ui, request, err)
        answer = handler(ui, request, visit)
        response = await answer if inspect.isawaitable(answer) else answer
        ui.access.write_cookie(request, response, visit)
        response.headers.update(SECURITY_HEADERS)
        return response

    return endpoint


def _writer(ui: UiContext, handler: Writer) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint: credentials (401) and the CSRF token (403) first, then the handler."""

    async def endpoint(request: Request) -> Response:
        try:
            visit, form = await ui.access.admit_post(request)
            response = await handler(ui, request, visit, form)
        except AccessDenied as err:
            return _denied(ui, request, err)
        ui.access.write_cookie(request, response, visit)
        response.headers.update(SECURITY_HEADERS)
        return response

    return endpoint


def _static(ui: UiContext, request: Request, visit: Visit) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return HTMLResponse("not found", status_code=404)
    body = resources.files("keel.worker.ui").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name])


async def _failure(request: Request, exc: Exception) -> Response:
    logger.error("web page request %s failed", request.url.path, exc_info=exc)
    return HTMLResponse(
        "<!doctype html><title>Error</title><p>Something went wrong on the server; "
        "its log says what.</p>",
        status_code=500,
    )


def create_app(
    source: KeelSource,
    *,
    token: str | None = None,
    signer: Signer | None = None,
    approver: str | None = None,
) -> Starlette:
    """The web app.

    Args:
        source: where the ``KeelClient`` comes from.
        token: ``KEEL_UI_TOKEN``; None serves loopback names only (see ``keel.worker.ui.access``).
        signer: the key to sign decisions with, for sessions with approver keys.
        approver: ``KEEL_UI_APPROVER``: who decides when the person gave no name.
    """
    ui = UiContext(
        source=source, access=Access(token), signer=signer, approver=approver, env=templates()
    )
    routes = [
        Route("/", _reader(ui, sessions_page)),
        Route("/live", _reader(ui, sessions_live)),
        Route("/static/{name}", _reader(ui, _static)),
        # A session id may hold "/" (a sub-agent's ``PARENT/NAME-ID``): ``path`` takes it
        # whole. The page takes every GET under /sessions/; its live stream has its own
        # prefix, so no id can be read as another's stream; an action is the last segment.
        Route("/live/sessions/{session:path}", _reader(ui, session_live)),
        Route("/sessions/{session:path}/{action}", _writer(ui, session_action), methods=["POST"]),
        Route("/sessions/{session:path}", _reader(ui, session_page)),
        Route("/name", _writer(ui, set_name), methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={Exception: _failure})
