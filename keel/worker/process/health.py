"""A worker's health endpoint, for container probes: a tiny HTTP server in a thread.

``GET /healthz`` (liveness) answers 200 while the worker runs, including while it drains
after SIGTERM, so a slow graceful shutdown is not mistaken for a hang. ``GET /readyz``
(readiness) answers 200 once the worker polls its task queue, 503 from the moment it
starts shutting down. Anything else is 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from keel.worker.settings import ConfigError

__all__ = ["HealthServer"]


class HealthServer:
    """Serve ``/healthz`` and ``/readyz`` from the answers of two callables."""

    def __init__(
        self, port: int, live: Callable[[], bool], ready: Callable[[], bool], host: str = "0.0.0.0"
    ) -> None:
        """Listen on ``host:port`` (started by ``start``).

        Raises:
            ConfigError: the port cannot be listened on.
        """
        checks = {"/healthz": live, "/livez": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    status, body = 404, {"status": "not found"}
                elif check():
                    status, body = 200, {"status": "ok"}
                else:
                    status, body = 503, {"status": "unavailable"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                """Probes every few seconds are not worth a log line."""

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as err:
            raise ConfigError(
                f"cannot serve health checks on port {port}: {err.strerror or err}"
            ) from err
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="keel-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Answer probes from a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop answering and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
