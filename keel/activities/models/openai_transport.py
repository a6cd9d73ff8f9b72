"""The OpenAI-compatible provider's HTTP transport: urllib, with sockets another thread can shut.

A blocking call runs in a thread of its own, which cannot be stopped; ``Transport.abort``
shuts the sockets of its requests in flight from any thread instead, so a long request ends at
once (and the server sees its client go away). ``reason`` names a connection failure.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.request
from collections.abc import Callable
from typing import Any


class _Connections:
    """The sockets of a provider's requests in flight, so that another thread can shut them.

    Sockets, not connections: urllib drops the connection's socket once the response headers
    are in (the response reads on through its own reference), and a stream is read after that.
    Shutting a socket whose descriptor is closed already is a harmless ``OSError``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.aborted = False

    def opened(self, sock: socket.socket) -> None:
        """Track a socket that just connected; shut it at once if aborted already."""
        with self._lock:
            self._open.append(sock)
            aborted = self.aborted
        if aborted:
            _shut(sock)

    def forget(self) -> None:
        """Forget the sockets of requests that ended."""
        with self._lock:
            self._open.clear()

    def abort(self) -> None:
        """Shut every open socket down (from any thread), and any that opens later."""
        with self._lock:
            self.aborted = True
            sockets = list(self._open)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes the thread blocked reading this socket (it reads EOF) and
    # tells the server its client went away, without closing a descriptor another thread uses
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _tracked(
    kind: type[http.client.HTTPConnection], tracker: _Connections
) -> Callable[..., http.client.HTTPConnection]:
    """A factory of ``kind`` connections whose sockets ``tracker`` learns of as they connect."""

    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = kind(host, **kwargs)
        connect = conn.connect

        def connect_and_track() -> None:
            connect()
            if conn.sock is not None:
                tracker.opened(conn.sock)

        conn.connect = connect_and_track  # type: ignore[method-assign]
        return conn

    return make


class _TrackedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, tracker: _Connections) -> None:
        super().__init__()
        self._connection = _tracked(http.client.HTTPConnection, tracker)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _TrackedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, tracker: _Connections) -> None:
        super().__init__()
        self._connection = _tracked(http.client.HTTPSConnection, tracker)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class Transport:
    """POSTs to a server, each request's socket tracked so that ``abort`` can shut it."""

    def __init__(self) -> None:
        """No request in flight, not aborted."""
        self.connections = _Connections()
        self._opener = urllib.request.build_opener(
            _TrackedHTTPHandler(self.connections), _TrackedHTTPSHandler(self.connections)
        )

    @property
    def aborted(self) -> bool:
        """Whether ``abort`` was called."""
        return self.connections.aborted

    def post(
        self, url: str, data: bytes, headers: dict[str, str], timeout_s: float
    ) -> http.client.HTTPResponse:
        """Send a POST; its answer, to be closed by the caller (``with``).

        Raises:
            urllib.error.HTTPError: an error status (its body and headers readable).
            OSError, http.client.HTTPException: the server unreachable, a timeout, a reset.
        """
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        response: http.client.HTTPResponse = self._opener.open(request, timeout=timeout_s)
        return response

    def done(self) -> None:
        """Forget the sockets of the requests that ended."""
        self.connections.forget()

    def abort(self) -> None:
        """Shut the requests in flight, and any started later (from any thread)."""
        self.connections.abort()


def reason(err: object) -> str:
    """A short reason for a connection failure: ``connection refused``, ``timed out``."""
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the host: {err.strerror or err}"
    if isinstance(err, http.client.IncompleteRead):
        return "the answer was cut short"
    if isinstance(err, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(err, BaseException):
        text = str(err)
        return f"{type(err).__name__}: {text}" if text else type(err).__name__
    return str(err)
