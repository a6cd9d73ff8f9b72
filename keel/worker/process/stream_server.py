"""The worker's stream endpoint: model text as it streams, to readers holding the call's token.

``GET /streams/<id>?offset=N`` with ``Authorization: Bearer <token>`` answers
``text/event-stream``: ``data: {"offset": o, "text": "..."}`` events carrying the text from
``N`` on as it arrives, then ``event: end`` with ``data: {"chars": n, "status": s}`` once the
attempt has ended (``completed`` or ``failed``), and the connection closes. A comment line
every ``KEEPALIVE_S`` keeps an idle connection alive. An unknown id and a wrong token both
answer 404, so the endpoint does not tell which streams exist.

The id and token of a stream travel only in the model activity's heartbeat details (through
the data converter, so ``KEEL_ENCRYPTION_KEY`` encrypts them); a reader needs Temporal access
to ``describe`` the session to learn them. The text itself goes over plain HTTP: keep the
endpoint on a network you trust (see docs/streaming.md).

One endpoint per process and configuration, shared by every worker the process runs: the
first worker that starts holds it (``hold_endpoint``), which binds the socket; it closes when
the last one stops (``release_endpoint``). ``stream_endpoint`` is the one running, if any.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from keel.activities.text_streams import TextStreams
from keel.worker.settings import ConfigError

__all__ = [
    "DEFAULT_LISTEN",
    "StreamConfig",
    "StreamServer",
    "hold_endpoint",
    "release_endpoint",
    "stream_endpoint",
]

logger = logging.getLogger("keel.worker")

DEFAULT_LISTEN = "127.0.0.1:0"
# A comment line this often on an idle connection: a reader that went away is noticed.
KEEPALIVE_S = 15.0
# At most this many characters per event (a reader catching up gets several), so that an
# event's line stays short for line-reading clients.
EVENT_CHARS = 8192
_WILDCARDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class StreamConfig:
    """Where the endpoint listens and what address it advertises.

    Attributes:
        listen: ``host:port`` to listen on (port 0: any free port); None: no endpoint.
        advertise: ``host[:port]`` readers connect to; None: the listen host (the machine's
            host name when it listens on every interface) and the bound port.
    """

    listen: str | None = DEFAULT_LISTEN
    advertise: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StreamConfig:
        """Read ``KEEL_STREAM_LISTEN`` (``off``: no endpoint) and ``KEEL_STREAM_ADVERTISE``.

        Raises:
            ConfigError: a value is not ``host:port`` (or ``host`` for the advertise address).
        """
        return cls.of(env.get("KEEL_STREAM_LISTEN"), env.get("KEEL_STREAM_ADVERTISE"))

    @classmethod
    def of(cls, listen: str | None, advertise: str | None) -> StreamConfig:
        """The endpoint of these settings (``Settings.stream_listen``, ``stream_advertise``).

        Raises:
            ConfigError: a value is not ``host:port`` (or ``host`` for the advertise address).
        """
        listen = (listen or "").strip() or DEFAULT_LISTEN
        advertise = (advertise or "").strip() or None
        if listen.lower() == "off":
            return cls(listen=None, advertise=None)
        _split(listen, "KEEL_STREAM_LISTEN", port_required=True)
        if advertise is not None:
            _split(advertise, "KEEL_STREAM_ADVERTISE", port_required=False)
        return cls(listen=listen, advertise=advertise)


def _split(address: str, name: str, *, port_required: bool) -> tuple[str, int | None]:
    host, sep, port = address.rpartition(":")
    if not sep and not port_required:
        return address, None
    if not sep or not port.isdigit() or int(port) > 65535 or (not host and not port_required):
        form = "host:port (port 0: any free port)" if port_required else "host or host:port"
        raise ConfigError(f"{name}={address!r} is not {form}, or off")
    return host.strip("[]"), int(port)


class StreamServer:
    """Serves the streams of a ``TextStreams`` over HTTP from background threads."""

    def __init__(self, config: StreamConfig) -> None:
        """Listen now (threads start with ``start``).

        Raises:
            ConfigError: the address cannot be listened on.
        """
        assert config.listen is not None
        host, port = _split(config.listen, "KEEL_STREAM_LISTEN", port_required=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        streams_ref: list[TextStreams] = []

        class Handler(_StreamHandler):
            def streams(self) -> TextStreams:
                return streams_ref[0]

        server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
        try:
            self._server = server_class((host, port or 0), Handler)
        except OSError as err:
            raise ConfigError(
                f"cannot serve model streams on KEEL_STREAM_LISTEN={config.listen}: "
                f"{err.strerror or err}"
            ) from err
        self._server.daemon_threads = True
        bound = int(self._server.server_address[1])
        ad_host, ad_port = host, None
        if config.advertise is not None:
            ad_host, ad_port = _split(
                config.advertise, "KEEL_STREAM_ADVERTISE", port_required=False
            )
        elif host in _WILDCARDS:
            ad_host = socket.gethostname()
        shown = f"[{ad_host}]" if ":" in ad_host else ad_host
        self.streams = TextStreams(f"http://{shown}:{ad_port or bound}")
        streams_ref.append(self.streams)
        self.port = bound
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="keel-streams", daemon=True
        )

    def start(self) -> StreamServer:
        """Answer readers from a background thread."""
        self._thread.start()
        logger.info("serving model streams on port %s as %s", self.port, self.streams.base_url)
        return self

    def stop(self) -> None:
        """Stop answering and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _StreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def streams(self) -> TextStreams:
        raise NotImplementedError

    def log_message(self, format: str, *args: object) -> None:
        """Readers come and go all the time: not worth a log line each."""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        url = urlsplit(self.path)
        prefix, _, stream_id = url.path.rpartition("/")
        stream = self.streams().get(stream_id) if prefix == "/streams" else None
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        if stream is None or not hmac.compare_digest(token.encode(), stream.token.encode()):
            self._plain(404, "no such stream\n")
            return
        try:
            offset = int((parse_qs(url.query).get("offset") or ["0"])[0])
        except ValueError:
            offset = -1
        if offset < 0:
            self._plain(400, "offset must be a whole number of characters, 0 or more\n")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            while True:
                text, status = stream.read(offset, KEEPALIVE_S)
                for start in range(0, len(text), EVENT_CHARS):
                    piece = text[start : start + EVENT_CHARS]
                    event = json.dumps({"offset": offset, "text": piece}, ensure_ascii=False)
                    self.wfile.write(f"data: {event}\n\n".encode())
                    offset += len(piece)
                if not text and status is not None:
                    end = json.dumps({"chars": offset, "status": status})
                    self.wfile.write(f"event: end\ndata: {end}\n\n".encode())
                    self.wfile.flush()
                    return
                elif not text:
                    self.wfile.write(b": keepalive\n\n")
                self.wfile.flush()
        except OSError:  # the reader went away
            return

    def _plain(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# The running endpoints, each with how many running workers hold it.
_servers: dict[StreamConfig, tuple[StreamServer, int]] = {}
_servers_lock = threading.Lock()


def hold_endpoint(config: StreamConfig) -> TextStreams | None:
    """Hold the process's endpoint of a configuration, started (bound) by its first holder.

    Each hold is given back with ``release_endpoint``. None when the configuration turns the
    endpoint off.

    Raises:
        ConfigError: the listen address cannot be listened on.
    """
    if config.listen is None:
        return None
    with _servers_lock:
        server, held = _servers.get(config) or (None, 0)
        if server is None:
            server = StreamServer(config).start()
        _servers[config] = (server, held + 1)
        return server.streams


def release_endpoint(config: StreamConfig) -> None:
    """Give back a hold; the last one stops the endpoint and closes its socket."""
    with _servers_lock:
        server, held = _servers.get(config) or (None, 0)
        if server is None:
            return
        if held > 1:
            _servers[config] = (server, held - 1)
            return
        del _servers[config]
    server.stop()


def stream_endpoint(config: StreamConfig) -> TextStreams | None:
    """The streams of the endpoint running for a configuration; None while no worker holds it."""
    with _servers_lock:
        server, _ = _servers.get(config) or (None, 0)
        return server.streams if server is not None else None
