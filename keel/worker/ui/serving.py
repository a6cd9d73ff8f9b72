"""Serving the web app with uvicorn: where it may listen, and running it beside other work.

Without ``KEEL_UI_TOKEN`` the app may listen on loopback only (``check_bind``). The socket is
bound here, before uvicorn starts, so a port in use is a clear error rather than uvicorn
ending the process; signals are left to the caller (``keel ui``, ``keel dev``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn
from starlette.applications import Starlette

from keel.worker.ui.access import is_loopback

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8234
# Open live-update streams are closed this long after a stop is asked for.
GRACE_S = 1.0


class UiBindError(ValueError):
    """The app may not, or cannot, listen where it was asked to."""


def check_bind(host: str, token: str | None) -> None:
    """Refuse an address other than loopback when no token guards the page.

    Raises:
        UiBindError: ``host`` is not loopback and ``token`` is empty.
    """
    if not token and not is_loopback(host):
        raise UiBindError(
            f"--host {host} would serve the page to other machines without a token: set "
            "KEEL_UI_TOKEN (a long random string) or keep the default --host 127.0.0.1"
        )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port).

    Raises:
        UiBindError: the address cannot be used (a port in use, an unknown host).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise UiBindError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise UiBindError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, leaving signal handling to the command that runs it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install no signal handlers (``keel ui`` and ``keel dev`` have their own)."""
        yield


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@contextlib.asynccontextmanager
async def ui_running(app: Starlette, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``app`` while the block runs; yields its URL.

    Raises:
        UiBindError: the address cannot be used.
    """
    sock = bind(host, port)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=int(GRACE_S),
        access_log=False,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise UiBindError(f"the page's server did not start on {url_of(sock)}")
            await asyncio.sleep(0.02)
        yield url_of(sock)
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout=GRACE_S + 5)
        except TimeoutError:
            task.cancel()
        sock.close()
