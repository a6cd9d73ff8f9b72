"""A recording pass-through proxy: what Keel sent the real server, request by request.

A stdlib ``ThreadingHTTPServer`` on a free loopback port. Each request is recorded (path and
JSON body), forwarded to the upstream server as it is, and the answer is copied back as it
arrives (status, content type, then the body, piece by piece, ended by closing the
connection), so streams stay streams. The lane points ``OPENAI_BASE_URL`` at it when a test
must see the model requests themselves: that a tool's result reached the next one.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """One request the proxy passed on."""

    path: str
    body: dict[str, Any]


class RecordingProxy:
    """The proxy in front of ``upstream`` (an API root such as ``http://127.0.0.1:P/v1``)."""

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.api_path = parts.path.rstrip("/")
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The API root to put in ``OPENAI_BASE_URL``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}{self.api_path}"

    def chat_bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat-completion requests so far."""
        with self._lock:
            return [s.body for s in self.seen if s.path.endswith("/chat/completions")]

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler_for(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = proxy

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: RecordingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", errors="replace")}
        self.owner._record(Seen(self.path, body if isinstance(body, dict) else {"_json": body}))
        self._forward(raw)

    def _forward(self, raw: bytes) -> None:
        self.close_connection = True
        upstream = http.client.HTTPConnection(
            self.owner.upstream_host, self.owner.upstream_port, timeout=300
        )
        try:
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            if raw:
                headers["Content-Length"] = str(len(raw))
            upstream.request(self.command, self.path, body=raw or None, headers=headers)
            answer = upstream.getresponse()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.getheader("Content-Type", "text/plain"))
            self.send_header("Connection", "close")
            self.end_headers()
            while piece := answer.read1(65536):
                self.wfile.write(piece)
                self.wfile.flush()
        except OSError:
            return  # either side went away: so does this connection
        finally:
            upstream.close()
