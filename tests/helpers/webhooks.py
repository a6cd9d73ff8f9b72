"""A local HTTP receiver for notifications: records every request, fails, hangs or redirects
on request."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One POST as the receiver got it."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def event(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


@dataclass
class Receiver:
    """What the receiver got, and how it answers.

    Attributes:
        url: where it listens (``http://127.0.0.1:<port>/hook``).
        fail_first: answer 500 to this many POSTs of each delivery (``X-Keel-Delivery``),
            then 200.
        hang: never answer (until ``release`` is set, at the end of the block).
        status: the answer after the failures (default 200).
        location: the ``Location`` header of every answer (with a 3xx ``status``, a
            redirect).

    It records every request, whatever its method (a redirect followed would be a GET).
    """

    url: str
    fail_first: int = 0
    hang: bool = False
    status: int = 200
    location: str | None = None
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r.event for r in self.received if kind is None or r.event["event"] == kind]

    def wait_for(self, count: int, timeout_s: float = 30) -> list[Received]:
        """Block until ``count`` POSTs arrived; they, in order (for tests without a loop)."""
        deadline = time.monotonic() + timeout_s
        while len(self.received) < count:
            assert time.monotonic() < deadline, f"{len(self.received)} of {count} POSTs came"
            time.sleep(0.05)
        return list(self.received)

    async def arrival(self, count: int, timeout_s: float = 30) -> list[Received]:
        """``wait_for`` without blocking the event loop (an in-process worker runs on it)."""
        deadline = time.monotonic() + timeout_s
        while len(self.received) < count:
            assert time.monotonic() < deadline, f"{len(self.received)} of {count} POSTs came"
            await asyncio.sleep(0.05)
        return list(self.received)


@contextmanager
def receiver(**behaviour: Any) -> Iterator[Receiver]:
    """A receiver on a free local port for the block."""
    state: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.received.append(
                Received(self.path, dict(self.headers.items()), body, time.monotonic())
            )
            if state.hang:
                state.release.wait(60)
                return
            delivery = self.headers.get("X-Keel-Delivery")
            tries = [r for r in state.received if r.headers.get("X-Keel-Delivery") == delivery]
            failing = len(tries) <= state.fail_first
            self.send_response(500 if failing else state.status)
            if state.location is not None:
                self.send_header("Location", state.location)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_GET = do_PUT = do_HEAD = do_POST  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook", **behaviour)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
