"""Who may use the web page, and how a browser proves it: the token, the session cookie, CSRF.

Rules:

- With a token (``KEEL_UI_TOKEN``), every request needs it: ``Authorization: Bearer <token>``,
  or ``?token=<token>`` once, which sets an HttpOnly, SameSite=Strict session cookie and
  redirects to the same URL without the token. Without it: 401.
- Without a token, the app is served on loopback only (``keel.worker.ui.serving`` refuses other
  addresses) and answers only requests whose ``Host`` is a loopback name, so that a web page
  elsewhere cannot reach it by DNS rebinding. The first page sets the session cookie.
- Every state-changing request is a POST carrying the session's CSRF token (form field
  ``csrf`` or header ``X-CSRF-Token``). A POST without credentials (no valid session cookie,
  and in token mode no valid bearer token either) gets 401, with a bad CSRF token 403.

The session cookie is signed (HMAC-SHA256) and holds only the CSRF token, whether the token
was shown, the approver name the person gave, and a one-shot notice for the next page. Its
key derives from the token, so changing the token logs every browser out; without a token it
is random per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

COOKIE = "keel_ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# A form larger than this is refused: decisions, answers and guidance are short.
MAX_FORM_BYTES = 64 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class AccessDenied(Exception):
    """A request that may not go on.

    Attributes:
        status: 401 (no credentials), 403 (bad CSRF token), 400 (a malformed form) or 421
            (a Host header that is not loopback, without a token).
    """

    def __init__(self, status: int, message: str) -> None:
        """The HTTP status and what to tell the person."""
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) stays on this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Visit:
    """One browser's session, as its cookie carries it.

    Attributes:
        csrf: the token every POST of this session must carry.
        authed: the browser showed the UI token (token mode).
        name: the approver name the person gave, if any.
        notice: a one-shot message for the next page: ``(kind, text)``.
        changed: the cookie must be (re)written with the response.
    """

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    authed: bool = False
    name: str | None = None
    notice: tuple[str, str] | None = None
    changed: bool = True

    def take_notice(self) -> tuple[str, str] | None:
        """The notice for this page, removed from the session."""
        notice, self.notice = self.notice, None
        if notice is not None:
            self.changed = True
        return notice


class Access:
    """The access rules of one app: its token and its cookie key."""

    def __init__(self, token: str | None) -> None:
        """``token``: ``KEEL_UI_TOKEN``, or None for loopback-only use without one."""
        self.token = token or None
        seed = b"keel-ui-cookie:" + self.token.encode() if self.token else secrets.token_bytes(32)
        self._key = hashlib.sha256(seed).digest()

    # ------------------------------------------------------------------ cookie

    def _sign(self, body: bytes) -> str:
        mac = hmac.new(self._key, body, hashlib.sha256).digest()
        return _b64(body) + "." + _b64(mac)

    def read_cookie(self, request: Request) -> Visit | None:
        """The session of a request's cookie; None when missing, forged or malformed."""
        raw = request.cookies.get(COOKIE)
        if not raw or "." not in raw:
            return None
        body_text, _, mac_text = raw.partition(".")
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (binascii.Error, ValueError):
            return None
        expected = hmac.new(self._key, body, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, expected):
            return None
        try:
            data = json.loads(body)
            notice = data.get("notice")
            return Visit(
                csrf=str(data["csrf"]),
                authed=bool(data.get("authed")),
                name=data.get("name") or None,
                notice=(str(notice[0]), str(notice[1])) if notice else None,
                changed=False,
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return None

    def write_cookie(self, request: Request, response: Response, visit: Visit) -> None:
        """Set the session cookie on a response when the session changed."""
        if not visit.changed:
            return
        body = json.dumps(
            {"csrf": visit.csrf, "authed": visit.authed, "name": visit.name, "notice": visit.notice}
        ).encode()
        response.set_cookie(
            COOKIE,
            self._sign(body),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )

    # ------------------------------------------------------------------ checks

    def _bearer_ok(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        return (
            self.token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(given.strip().encode(), self.token.encode())
        )

    def _check_host(self, request: Request) -> None:
        if self.token is not None:
            return
        host = _host_name(request.headers.get("host") or "localhost")
        if not is_loopback(host):
            raise AccessDenied(
                421,
                f"this page answers only on loopback names, not {host!r}: without "
                "KEEL_UI_TOKEN it serves this machine only",
            )

    def token_redirect(self, request: Request) -> Response | None:
        """For ``GET ...?token=``: the redirect that trades the token for a cookie.

        Raises:
            AccessDenied: 401, the token is wrong.
        """
        given = request.query_params.get("token")
        if self.token is None or given is None:
            return None
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise AccessDenied(401, "wrong token: open the link with the current KEEL_UI_TOKEN")
        rest = [(k, v) for k, v in parse_qsl(request.url.query) if k != "token"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        visit = self.read_cookie(request) or Visit()
        visit.authed, visit.changed = True, True
        self.write_cookie(request, response, visit)
        return response

    def admit(self, request: Request) -> Visit:
        """The session of a request that may read; a new one for a first visit.

        Raises:
            AccessDenied: 401 without the token (token mode), 421 for a Host that is not
                loopback (without a token).
        """
        self._check_host(request)
        visit = self.read_cookie(request)
        if self.token is None:
            return visit or Visit()
        if visit is not None and visit.authed:
            return visit
        if self._bearer_ok(request):
            visit = visit or Visit()
            visit.authed, visit.changed = True, True
            return visit
        raise AccessDenied(
            401,
            "this page needs the token: open it once with ?token=<KEEL_UI_TOKEN>, or send "
            "Authorization: Bearer <KEEL_UI_TOKEN>",
        )

    async def admit_post(self, request: Request) -> tuple[Visit, dict[str, str]]:
        """The session and the form of a state-changing request, checked.

        Raises:
            AccessDenied: 401 without credentials, 403 with a missing or wrong CSRF token,
                400 for a form too large or not url-encoded.
        """
        self._check_host(request)
        visit = self.read_cookie(request)
        if self.token is not None and not (visit is not None and visit.authed):
            if not self._bearer_ok(request):
                raise AccessDenied(401, "not signed in: open the page with ?token=... first")
        if visit is None:
            if self.token is None or not self._bearer_ok(request):
                raise AccessDenied(401, "no session: open the page first, then try again")
            raise AccessDenied(403, "missing CSRF token: open the page first, then try again")
        form = await read_form(request)
        given = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
        if not hmac.compare_digest(given.encode(), visit.csrf.encode()):
            raise AccessDenied(
                403, "this form is out of date (bad CSRF token): reload the page and try again"
            )
        return visit, form


async def read_form(request: Request) -> dict[str, str]:
    """A url-encoded form body, at most ``MAX_FORM_BYTES``; the last value of each field.

    Raises:
        AccessDenied: 400, too large or another content type.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise AccessDenied(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
    if not body:
        return {}
    if kind != "application/x-www-form-urlencoded":
        raise AccessDenied(400, "send the form as application/x-www-form-urlencoded")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise AccessDenied(400, "the form is not UTF-8") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port: ``[::1]:80`` -> ``::1``."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
