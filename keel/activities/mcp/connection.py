"""One MCP server's client connection, owned by a task of its own, reopened when it breaks.

The SDK's transports (the stdio subprocess, the HTTP stream) live in anyio task groups, which
must be entered and left by one task. So each connection is opened by a dedicated task that
enters ``mcp.Client``, hands the client out, and waits until it is told to close; calls are
made on the client from the activities' own tasks (the SDK multiplexes them by request id), so
cancelling an activity cancels its request, and the SDK tells the server
(``notifications/cancelled``).

A call that finds the connection broken (``Connection closed``, a dead pipe, an HTTP transport
error) drops the connection and raises ``McpTransportError``; the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from keel.activities.mcp.config import McpServerConfig, McpServerError, McpTransportError

__all__ = ["McpConnection"]

logger = logging.getLogger("keel.mcp")

_CLOSE_TIMEOUT_S = 10.0
_LIST_PAGES = 100


@dataclass
class _Live:
    """An open connection: its client, and how to tell its owner task to close it."""

    client: Client
    stop: asyncio.Event
    task: asyncio.Task[None]


class McpConnection:
    """The connection of a worker to one MCP server, shared by every session of the worker."""

    def __init__(self, config: McpServerConfig) -> None:
        """Remember the server; nothing is opened until ``client`` is first awaited."""
        self.config = config
        self.opened = 0  # how many times a connection was opened (for logs and tests)
        self._live: _Live | None = None
        self._lock: asyncio.Lock | None = None

    async def client(self) -> Client:
        """The open client, opening a connection first when there is none (or it died).

        Raises:
            McpServerError: the server did not start or did not answer ``initialize``.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._live
            if live is None or live.task.done():
                live = self._live = await self._open()
            return live.client

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists (all pages).

        Raises:
            McpServerError: the server did not start or did not answer.
        """
        client = await self.client()
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.config.start_timeout_s):
                for _ in range(_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except Exception as exc:  # noqa: BLE001 - any failure to list stops the worker
            raise McpServerError(
                self.config.name, f"{self.config.describe()} did not list its tools: {_why(exc)}"
            ) from exc
        return tools

    async def call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> types.CallToolResult:
        """Call a tool on the server.

        Raises:
            McpTransportError: the server could not be reached, or the connection broke during
                the call; the connection is dropped, and the next call opens a new one.
            MCPError: the server answered the request with a JSON-RPC error.
            asyncio.CancelledError: the caller was cancelled; the SDK cancels the request.
        """
        try:
            client = await self.client()
        except McpServerError as err:
            raise McpTransportError(str(err)) from err
        try:
            return await client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
        except Exception as exc:
            if not _is_transport(exc, http=self.config.url is not None):
                raise
            logger.warning(
                "%s: connection lost during %r: %s", self.config.describe(), name, _why(exc)
            )
            await self._drop(client)
            raise McpTransportError(
                f"{self.config.describe()}: connection lost during tool {name!r}: {_why(exc)}"
            ) from exc

    async def aclose(self) -> None:
        """Close the connection, if one is open (a stdio server's process ends)."""
        live, self._live = self._live, None
        if live is not None:
            await _close(live.stop, live.task)

    async def _drop(self, client: Client) -> None:
        """Close the connection ``client`` belongs to, unless a newer one replaced it."""
        live = self._live
        if live is not None and live.client is client:
            self._live = None
            await _close(live.stop, live.task)

    async def _open(self) -> _Live:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        ready.add_done_callback(_retrieve)
        stop = asyncio.Event()
        task = asyncio.create_task(self._own(ready, stop), name=f"keel-mcp-{self.config.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.config.start_timeout_s)
        except TimeoutError:
            await _close(stop, task)
            raise McpServerError(
                self.config.name,
                f"{self.config.describe()} did not answer initialize within "
                f"{self.config.start_timeout_s:g} s",
            ) from None
        except BaseException:
            await _close(stop, task)
            raise
        self.opened += 1
        logger.info("%s: connected", self.config.describe())
        return _Live(client=client, stop=stop, task=task)

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Open the client, hand it out, keep it open until ``stop``, close it (one task)."""
        try:
            async with self._new_client() as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    McpServerError(
                        self.config.name, f"{self.config.describe()} did not start: {_why(exc)}"
                    )
                )
            elif not isinstance(exc, asyncio.CancelledError):
                logger.info("%s: closed with %s", self.config.describe(), _why(exc))
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise

    def _new_client(self) -> Client:
        config = self.config
        if config.url is not None:
            http = create_mcp_http_client(headers=dict(config.headers) or None)
            transport = streamable_http_client(config.url, http_client=http)
            return _HttpClient(transport, http, cache=None)
        params = StdioServerParameters(
            command=config.command[0],
            args=list(config.command[1:]),
            env=dict(config.env) or None,
            cwd=config.cwd,
        )
        return Client(params, cache=None)


class _HttpClient(Client):
    """A ``Client`` that also closes the HTTP client it was given."""

    def __init__(self, transport: Any, http: httpx2.AsyncClient, **options: Any) -> None:
        super().__init__(transport, **options)
        self._http = http

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await super().__aexit__(*exc)
        finally:
            await self._http.aclose()


async def _close(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    """Tell an owner task to close its client; cancel it if it does not within the limit."""
    stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(task), _CLOSE_TIMEOUT_S)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    except Exception:  # noqa: BLE001 - closing a broken connection may fail; it is gone anyway
        logger.debug("closing an MCP connection failed", exc_info=True)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


# What the SDK's HTTP transport says for an HTTP error status without a JSON-RPC body: the
# server forgot the session (it restarted) or failed; a new connection is the cure.
_HTTP_STAND_INS = ("Session terminated", "Server returned an error response")


def _is_transport(exc: BaseException, http: bool) -> bool:
    """Whether a call failed because the connection did, not because the server said no."""
    for leaf in _leaves(exc):
        if isinstance(leaf, MCPError):
            if leaf.code == types.CONNECTION_CLOSED:
                return True
            if http and (str(leaf) in _HTTP_STAND_INS or "session" in str(leaf).lower()):
                return True
        if isinstance(
            leaf,
            anyio.ClosedResourceError
            | anyio.BrokenResourceError
            | anyio.EndOfStream
            | OSError
            | httpx2.TransportError,
        ):
            return True
    return False


def _why(exc: BaseException) -> str:
    leaves = _leaves(exc)
    return "; ".join(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__ for e in leaves)
