"""The MCP servers of one worker: connected at start, their tools offered beside ``@tool`` ones.

``McpServers`` is what ``keel.worker.process.assembly.build_worker(..., mcp_servers=...)``
makes. Its
``running()`` context (entered by the worker through a temporalio plugin, around the worker's
run) opens one connection per server, lists each server's tools and checks their names, and
closes the connections when the worker stops. Inside it, the model activity describes the
servers' tools (``specs``) and the tool activity calls them (``call``).

Each tool's effect class (``ToolSpec.effect``) comes from its annotations
(:func:`annotated_effect`), unless the server's configuration names the tool in ``effects``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker

from keel.activities.mcp.config import (
    McpConfigError,
    McpServerConfig,
    McpServerError,
    McpToolConflict,
)
from keel.activities.mcp.connection import McpConnection
from keel.activities.tools import registered_tools
from keel.workflows.contracts import Effect, ToolSpec

__all__ = ["McpServers", "McpTool", "annotated_effect"]

logger = logging.getLogger("keel.mcp")

# What Converse (and Keel's @tool) accept as a tool name.
_TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
IDEMPOTENCY_META_KEY = "keel/idempotency_key"
SESSION_META_KEY = "keel/session_id"


@dataclass(frozen=True)
class McpTool:
    """A tool of an MCP server, as this worker offers it.

    Attributes:
        server: the server's name.
        spec: what the model and the workflow are told (``module`` is ``mcp:<server>``).
    """

    server: str
    spec: ToolSpec


def annotated_effect(tool: types.Tool) -> Effect:
    """What running an MCP tool again does, by its annotations (hints the server gives).

    ``readOnlyHint`` -> ``read``; else ``idempotentHint`` -> ``idempotent``; else ``write``:
    MCP's own defaults take a tool without hints to be destructive and not idempotent.

    Args:
        tool: the tool as the server listed it.
    """
    hints = tool.annotations
    if hints is not None and hints.read_only_hint is True:
        return "read"
    if hints is not None and hints.idempotent_hint is True:
        return "idempotent"
    return "write"


class McpServers:
    """A worker's MCP servers: one connection each, shared by every session of the worker."""

    def __init__(self, configs: Sequence[McpServerConfig]) -> None:
        """Take the servers' configurations; nothing is connected until ``start``.

        Raises:
            McpConfigError: two servers have the same name.
        """
        self._connections: dict[str, McpConnection] = {}
        for config in configs:
            if config.name in self._connections:
                raise McpConfigError(f"MCP server name {config.name!r} is given twice")
            self._connections[config.name] = McpConnection(config)
        self._tools: dict[str, McpTool] = {}

    @property
    def names(self) -> list[str]:
        """The servers' names, in the order given."""
        return list(self._connections)

    def connection(self, server: str) -> McpConnection:
        """The connection to a server, by name."""
        return self._connections[server]

    def plugin(self) -> SimplePlugin:
        """A temporalio worker plugin: ``start`` before the worker polls, ``aclose`` after."""
        return _McpPlugin(self)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Connect and list at entry (``start``); close every connection at exit."""
        await self.start()
        try:
            yield
        finally:
            await self.aclose()

    async def start(self) -> None:
        """Connect to every server, list its tools, check that every tool name is unique.

        Raises:
            McpServerError: a server did not start or did not answer (its name is in the
                message and in ``.server``); ``McpToolConflict`` when a tool name is defined
                twice. Connections already opened are closed first.
        """
        names = list(self._connections)
        listed = await asyncio.gather(
            *(self._connections[n].list_tools() for n in names), return_exceptions=True
        )
        try:
            for outcome in listed:
                if isinstance(outcome, BaseException):
                    raise outcome
            tools: dict[str, McpTool] = {}
            for name, outcome in zip(names, listed, strict=True):
                assert not isinstance(outcome, BaseException)
                config = self._connections[name].config
                wanted = config.tools
                if wanted is not None:
                    missing = sorted(set(wanted) - {t.name for t in outcome})
                    if missing:
                        raise McpServerError(
                            name, f"{config.describe()} does not offer the tools {missing}"
                        )
                for tool in outcome:
                    if wanted is None or tool.name in wanted:
                        self._add(tools, config, tool)
                unknown = sorted(
                    set(config.effects) - {t.spec.name for t in tools.values() if t.server == name}
                )
                if unknown:
                    raise McpServerError(
                        name,
                        f"{config.describe()}: effects names tools it does not offer: {unknown}",
                    )
        except BaseException:
            await self.aclose()
            raise
        self._tools = tools
        for name in names:
            offered = [
                f"{t.spec.name} ({t.spec.effect})" for t in tools.values() if t.server == name
            ]
            logger.info("MCP server %r offers %d tools: %s", name, len(offered), offered)

    async def aclose(self) -> None:
        """Close every open connection."""
        await asyncio.gather(*(c.aclose() for c in self._connections.values()))

    def specs(self) -> list[ToolSpec]:
        """Every MCP tool's spec, server by server, in the order each server listed them."""
        return [t.spec for t in self._tools.values()]

    def get(self, name: str) -> McpTool | None:
        """The MCP tool offered under ``name``, if any."""
        return self._tools.get(name)

    async def call(
        self, tool: McpTool, arguments: dict[str, Any], session_id: str, idempotency_key: str
    ) -> types.CallToolResult:
        """Call the tool on its server, with the idempotency key in the request's ``_meta``.

        Raises:
            McpTransportError: the server could not be reached or the connection broke.
            MCPError: the server answered with a JSON-RPC error.
        """
        meta = {IDEMPOTENCY_META_KEY: idempotency_key, SESSION_META_KEY: session_id}
        return await self._connections[tool.server].call(tool.spec.name, arguments, meta)

    def _add(self, tools: dict[str, McpTool], config: McpServerConfig, tool: types.Tool) -> None:
        if not _TOOL_NAME_RE.match(tool.name):
            logger.warning(
                "%s: tool %r is not offered: a tool name must match %s",
                config.describe(),
                tool.name,
                _TOOL_NAME_RE.pattern,
            )
            return
        other = tools.get(tool.name)
        if other is not None:
            raise McpToolConflict(config.name, tool.name, (f"mcp:{other.server}", config.module))
        local = registered_tools().get(tool.name)
        if local is not None:
            raise McpToolConflict(config.name, tool.name, (config.module, local.spec.module))
        schema = dict(tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        tools[tool.name] = McpTool(
            server=config.name,
            spec=ToolSpec(
                name=tool.name,
                description=tool.description or tool.title or tool.name,
                inputSchema=schema,
                timeout_s=config.timeout_s,
                module=config.module,
                effect=config.effects.get(tool.name, annotated_effect(tool)),
            ),
        )


class _McpPlugin(SimplePlugin):
    """Runs a worker between its MCP servers' ``start`` and ``aclose``."""

    def __init__(self, servers: McpServers) -> None:
        super().__init__("keel.mcp")
        self._servers = servers

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Start the servers, run the worker, close the servers.

        Raises:
            McpServerError: a server did not start; the worker never polled.
        """
        try:
            await self._servers.start()
        except BaseException:
            # temporalio marks a worker stopped only once its own run has begun; a worker
            # stopped before that would make shutdown() (and so `async with`) wait forever.
            stopped = getattr(worker, "_shutdown_complete_event", None)
            if isinstance(stopped, asyncio.Event):
                stopped.set()
            raise
        try:
            await next(worker)
        finally:
            await self._servers.aclose()
