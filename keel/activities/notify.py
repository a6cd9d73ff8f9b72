"""``keel.notify.post``: POST a session's notification (``keel.workflows.notifications``) as JSON.

Standard library only (``urllib.request``, ``hmac``, ``hashlib``): the request runs in a daemon
thread, so a receiver that never answers holds neither the worker's event loop nor its
shutdown (a cancelled activity stops waiting at once; the thread ends at the HTTP timeout).

Headers: ``Content-Type: application/json``, ``User-Agent: keel``, ``X-Keel-Event`` (the
event's kind), ``X-Keel-Delivery`` (its id, the same on every attempt), ``X-Keel-Attempt``,
and, when the worker's environment sets ``KEEL_NOTIFY_SECRET``, ``X-Keel-Timestamp`` (Unix
seconds) and ``X-Keel-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed by
the secret>``. The secret is read when a notification is sent, not when the module loads.

A 2xx answer is a delivery. 4xx (but 408 and 429) is a refusal that no retry can fix
(``NOTIFY_REFUSED``, not retried); anything else (3xx, 5xx, timeouts, refused connections)
fails the attempt and Temporal retries it with backoff (``NOTIFY_RETRY``). A redirect is never
followed: it would carry the event and its signature headers wherever the receiver pointed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.workflows.activity_contracts import NotifyRequest, NotifyResponse
from keel.workflows.activity_options import NOTIFY_ACTIVITY, NOTIFY_HTTP_TIMEOUT_S, NOTIFY_REFUSED
from keel.workflows.contracts import notify_urls
from keel.workflows.notifications import where

logger = logging.getLogger(__name__)

SECRET_ENV = "KEEL_NOTIFY_SECRET"
SIGNATURE_HEADER = "X-Keel-Signature"
TIMESTAMP_HEADER = "X-Keel-Timestamp"
# Answers that say "try again later" although they are 4xx.
_RETRYABLE_4XX = frozenset({408, 429})


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Keel-Signature`` value of a body sent at ``timestamp``.

    A receiver recomputes it from the raw body and ``X-Keel-Timestamp``, compares with
    ``hmac.compare_digest``, and refuses old timestamps (replays).
    """
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _request(request: NotifyRequest, attempt: int, secret: str | None) -> urllib.request.Request:
    body = json.dumps(request.event, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "keel",
        "X-Keel-Event": str(request.event.get("event", "")),
        "X-Keel-Delivery": str(request.event.get("id", "")),
        "X-Keel-Attempt": str(attempt),
    }
    if secret:
        timestamp = str(int(time.time()))
        headers[TIMESTAMP_HEADER] = timestamp
        headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return urllib.request.Request(request.url, data=body, headers=headers, method="POST")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the 3xx answer comes back as it is (an ``HTTPError``)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        """Follow nothing."""
        return None


# urlopen's handlers, but for redirects: a 3xx is the receiver's answer, not a place to go.
_OPENER = urllib.request.build_opener(_NoRedirects)


def _send(request: urllib.request.Request) -> tuple[int, str | None]:
    """POST; the answer's HTTP status (an error status too) and ``Location``; or ``OSError``."""
    try:
        with _OPENER.open(request, timeout=NOTIFY_HTTP_TIMEOUT_S) as answer:
            status: int = answer.status
            return status, answer.headers.get("Location")
    except urllib.error.HTTPError as err:
        location = err.headers.get("Location") if err.headers is not None else None
        return err.code, location


async def _in_thread(request: urllib.request.Request) -> tuple[int, str | None]:
    """``_send`` in a daemon thread; a cancelled caller stops waiting for it at once."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[int, str | None]] = loop.create_future()

    def settle(status: tuple[int, str | None] | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            assert status is not None
            done.set_result(status)

    def run() -> None:
        try:
            status, error = _send(request), None
        except BaseException as err:  # handed to the awaiting coroutine
            status, error = None, err
        try:
            loop.call_soon_threadsafe(settle, status, error)
        except RuntimeError:  # the loop is gone: nobody waits any more
            pass

    threading.Thread(target=run, name="keel-notify", daemon=True).start()
    return await done


class Notifications:
    """The activity ``keel.notify.post``, signing with the worker's ``KEEL_NOTIFY_SECRET``."""

    def __init__(self, secret: str | None = None) -> None:
        """Sign every POST with ``secret`` (HMAC-SHA256) when one is given."""
        self.secret = secret or None

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def post(self, request: NotifyRequest) -> NotifyResponse:
        """POST one notification; fail the attempt when the receiver did not take it.

        Raises:
            ApplicationError: ``NOTIFY_REFUSED`` (not retried) for a 4xx answer but 408 and
                429; a retryable one for any other failure.
        """
        return await _post(request, self.secret)


async def _post(request: NotifyRequest, secret: str | None) -> NotifyResponse:
    attempt = activity.info().attempt
    to = where(request.url)
    try:  # SessionConfig checked them; a raw client's payload is checked again here
        notify_urls([request.url])
    except ValueError as err:
        raise ApplicationError(str(err), type=NOTIFY_REFUSED, non_retryable=True) from err
    try:
        status, location = await _in_thread(_request(request, attempt, secret))
    except (OSError, ValueError) as err:
        logger.warning("notification to %s, attempt %s: %s", to, attempt, err)
        raise ApplicationError(f"POST to {to} failed: {err}") from err
    if 200 <= status < 300:
        return NotifyResponse(status=status, attempt=attempt)
    if 300 <= status < 400:
        # Never followed: the signed request would go, as a GET, wherever the receiver
        # says. The log names the place, for whoever fixes the URL; the history, only its host.
        logger.warning(
            "notification to %s, attempt %s: HTTP %s redirect to %r, not followed",
            to,
            attempt,
            status,
            location,
        )
        to_where = where(location) if location else "nowhere"
        raise ApplicationError(
            f"POST to {to} failed: HTTP {status} redirect (to {to_where}), not followed"
        )
    logger.warning("notification to %s, attempt %s: HTTP %s", to, attempt, status)
    if 400 <= status < 500 and status not in _RETRYABLE_4XX:
        raise ApplicationError(
            f"POST to {to} refused: HTTP {status}", type=NOTIFY_REFUSED, non_retryable=True
        )
    raise ApplicationError(f"POST to {to} failed: HTTP {status}")
