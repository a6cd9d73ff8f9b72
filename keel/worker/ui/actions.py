"""What a person does on the page: approve, deny, resolve, answer, steer, cancel, give a name.

Each action is a POST of a url-encoded form carrying the session's CSRF token (checked by
``Access.admit_post`` before anything is sent). The page's script posts with ``Accept:
application/json`` and gets ``{"ok", "message", "parts", "seq"}`` (the session page's parts as they
are now), so a decision that lost a race says why and the page shows what happened instead;
without the script, the form's answer is a redirect back to the page with the message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from keel.worker.client.keel_client import KeelClient
from keel.worker.ui.access import AccessDenied, Visit
from keel.worker.ui.context import UiContext
from keel.worker.ui.pages import SessionParts, render_session
from keel.worker.ui.problems import problem

# Longest approver name the page accepts.
MAX_NAME = 100


@dataclass(frozen=True)
class Outcome:
    """What an action did, in words."""

    message: str


def _field(form: dict[str, str], name: str, *, required: bool = True) -> str:
    value = form.get(name, "").strip()
    if required and not value:
        raise AccessDenied(400, f"the form lacks {name!r}")
    return value


def parse_answer(raw: str) -> Any:
    """An answer as typed: JSON when it parses as JSON, else the text (as ``keel respond``)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _remember_name(visit: Visit, form: dict[str, str]) -> None:
    """Keep the approver name the person typed into a decision form."""
    name = form.get("approver", "").strip()
    if name:
        if len(name) > MAX_NAME:
            raise AccessDenied(400, f"the name is longer than {MAX_NAME} characters")
        visit.name, visit.changed = name, True


# The decisions a ``decide`` form may carry: its button's ``decision`` value.
DECISIONS = ("approve", "approve-always", "deny", "resolve")


async def _decide(
    ui: UiContext, keel: KeelClient, session: str, form: dict[str, str], visit: Visit
) -> Outcome:
    """Approve, deny or resolve: signed, and sent as the person, as ``keel approve`` would.

    ``resolve`` (an ``outcome_unknown`` interrupt) records the form's ``result`` as the
    tool's result; no other decision carries one.
    """
    interrupt = _field(form, "interrupt")
    raw = _field(form, "decision")
    if raw not in DECISIONS:
        raise AccessDenied(400, "decision must be approve, approve-always, deny or resolve")
    result = form.get("result")
    if raw == "resolve" and not (result or "").strip():
        raise AccessDenied(400, "resolve needs the tool's result: the form's 'result' is empty")
    if raw != "resolve" and result is not None:
        raise AccessDenied(400, f"a result is recorded with resolve, not {raw}")
    reason = form.get("reason", "").strip() or None
    _remember_name(visit, form)
    config = await keel.config(session)
    approver = ui.identity(config, visit)
    key = ui.signer.key if ui.signer is not None and config.approver_keys else None
    who = f" as {approver}" if approver else ""
    if raw == "resolve":
        assert result is not None
        ack = await keel.resolve(
            session, interrupt, result, reason=reason, approver=approver, key=key
        )
        return Outcome(f"Interrupt {ack.interrupt_id} {ack.status}{who}: its result is recorded.")
    decision: Literal["approve", "deny"] = "deny" if raw == "deny" else "approve"
    always = raw == "approve-always"
    bounds = _bounds(form, always)
    ack = await keel.decide(
        session,
        interrupt,
        decision,
        reason=reason,
        approver=approver,
        key=key,
        always=always,
        **bounds,
    )
    stands = "; later calls of its tool run without asking" if always else ""
    if bounds:
        stands += " (bounded: see the list of approved-always tools)"
    return Outcome(f"Interrupt {ack.interrupt_id} {ack.status}{who}{stands}.")


def _bounds(form: dict[str, str], always: bool) -> dict[str, Any]:
    """The form's bounds of an **Approve always** (``max_uses``, ``for_minutes``, ``total``).

    Each only when filled in; as ``keel approve --max-uses``, ``--for`` and ``--total``.
    """
    from keel.workflows.standing import parse_conditions
    from keel.workflows.standing_bounds import TOTAL_OPS

    filled = {k: form.get(k, "").strip() for k in ("max_uses", "for_minutes", "total")}
    filled = {k: v for k, v in filled.items() if v}
    if filled and not always:
        raise AccessDenied(400, f"{', '.join(filled)}: bounds are for Approve always")
    bounds: dict[str, Any] = {}
    try:
        if "max_uses" in filled:
            bounds["max_uses"] = int(filled["max_uses"])
        if "for_minutes" in filled:
            bounds["for_s"] = float(filled["for_minutes"]) * 60
    except ValueError:
        raise AccessDenied(400, "max_uses and for_minutes are numbers") from None
    if bounds.get("max_uses", 1) < 1 or not 0 < bounds.get("for_s", 1) < float("inf"):
        raise AccessDenied(400, "max_uses is at least 1, for_minutes over 0")
    if "total" in filled:
        try:
            tests = parse_conditions(filled["total"])
        except ValueError as err:
            raise AccessDenied(400, f"total: {err}") from None
        if len(tests) > 1 or tests[0].op not in TOTAL_OPS:
            raise AccessDenied(400, "total: write one FIELD <= LIMIT, as amount <= 100")
        bounds["total"] = tests[0]
    return bounds


async def _respond(
    ui: UiContext, keel: KeelClient, session: str, form: dict[str, str], visit: Visit
) -> Outcome:
    interrupt = _field(form, "interrupt")
    value = parse_answer(_field(form, "answer"))
    _remember_name(visit, form)
    config = await keel.config(session)
    responder = ui.identity(config, visit)
    key = ui.signer.key if ui.signer is not None and config.approver_keys else None
    ack = await keel.respond(session, interrupt, value, responder=responder, key=key)
    return Outcome(f"Answer sent: interrupt {ack.interrupt_id} {ack.status}.")


async def _steer(
    ui: UiContext, keel: KeelClient, session: str, form: dict[str, str], visit: Visit
) -> Outcome:
    ack = await keel.steer(session, _field(form, "text"))
    return Outcome(f"Guidance queued for turn {ack.turn_id}: the model sees it in its next call.")


async def _cancel(
    ui: UiContext, keel: KeelClient, session: str, form: dict[str, str], visit: Visit
) -> Outcome:
    reason = form.get("reason", "").strip() or "cancelled from the web page"
    ack = await keel.cancel(session, reason)
    return Outcome(f"Turn {ack.turn_id} is being cancelled.")


async def _budget(
    ui: UiContext, keel: KeelClient, session: str, form: dict[str, str], visit: Visit
) -> Outcome:
    """Raise the session's token or cost budget (``keel budget``)."""
    tokens_text, cost_text = form.get("tokens", "").strip(), form.get("cost", "").strip()
    if not tokens_text and not cost_text:
        raise AccessDenied(400, "give a token budget, a cost budget or both")
    try:
        tokens = int(tokens_text) if tokens_text else None
        cost = float(cost_text) if cost_text else None
    except ValueError:
        raise AccessDenied(400, "a budget is a number: tokens a whole one, dollars any") from None
    if (tokens is not None and tokens <= 0) or (cost is not None and not 0 < cost < 1e12):
        raise AccessDenied(400, "a budget must be more than 0")
    _remember_name(visit, form)
    by = ui.identity(await keel.config(session), visit)
    ack = await keel.budget(session, tokens=tokens, cost_usd=cost, by=by)
    said = [f"{ack.tokens:,} tokens" if ack.tokens is not None else "", ""]
    said[1] = f"${ack.cost_usd:g}" if ack.cost_usd is not None else ""
    return Outcome(f"Session budget now {' and '.join(x for x in said if x)}.")


Action = Callable[[UiContext, KeelClient, str, dict[str, str], Visit], Awaitable[Outcome]]
ACTIONS: dict[str, Action] = {
    "decide": _decide,
    "respond": _respond,
    "steer": _steer,
    "cancel": _cancel,
    "budget": _budget,
}


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


async def session_action(
    ui: UiContext, request: Request, visit: Visit, form: dict[str, str]
) -> Response:
    """``POST /sessions/{id}/{action}``: run the action, answer with the page as it is now."""
    session = request.path_params["session"]
    action = ACTIONS.get(request.path_params["action"])
    if action is None:
        return JSONResponse({"ok": False, "message": "no such action"}, status_code=404)
    status, ok = 200, True
    parts: dict[str, str] | None = None
    seq: int | None = None
    try:
        keel = await ui.source.get()
        await keel.check_open(session)
        message = (await action(ui, keel, session, form, visit)).message
    except AccessDenied:
        raise
    except Exception as err:
        known = problem(err)
        if known is None:
            raise
        status, message = known
        ok = False
    try:
        keel = await ui.source.get()
        rendered = await render_session(ui, keel, session, visit)
        parts, seq = rendered.html, rendered.view.event_count
    except Exception as err:
        if problem(err) is None:
            raise
    if _wants_json(request):
        answer = {"ok": ok, "message": message, "parts": parts, "seq": seq}
        return JSONResponse(answer, status_code=status)
    visit.notice, visit.changed = ("ok" if ok else "error", message), True
    return RedirectResponse(f"/sessions/{quote(session, safe='/')}", status_code=303)


async def set_name(ui: UiContext, request: Request, visit: Visit, form: dict[str, str]) -> Response:
    """``POST /name``: remember the approver name of this browser's session."""
    name = _field(form, "approver", required=False)
    if len(name) > MAX_NAME:
        raise AccessDenied(400, f"the name is longer than {MAX_NAME} characters")
    visit.name, visit.changed = name or None, True
    message = f"You decide as {name}." if name else "Name cleared."
    if _wants_json(request):
        rendered = await _page_parts(ui, form.get("back", ""), visit)
        parts, seq = (rendered.html, rendered.view.event_count) if rendered else (None, None)
        return JSONResponse({"ok": True, "message": message, "parts": parts, "seq": seq})
    visit.notice = ("ok", message)
    back = form.get("back", "/")
    safe = back.startswith("/") and back[1:2] not in ("/", "\\")  # no other site
    return RedirectResponse(back if safe else "/", status_code=303)


async def _page_parts(ui: UiContext, back: str, visit: Visit) -> SessionParts | None:
    """The parts of the session page a form was sent from, as this visit now sees them.

    A name saved from the page's header changes its decision forms (they no longer ask for
    a name, which the browser would otherwise insist on before any decision).
    """
    prefix = "/sessions/"
    if not back.startswith(prefix):
        return None
    try:
        keel = await ui.source.get()
        return await render_session(ui, keel, unquote(back[len(prefix) :]), visit)
    except Exception as err:
        if problem(err) is None:
            raise
        return None
