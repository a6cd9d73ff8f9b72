"""Where a command's Temporal comes from: a configured server, or an embedded dev server."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

import temporalio.api.workflowservice.v1 as wsv1
from temporalio.client import Client
from temporalio.runtime import Runtime as TemporalRuntime
from temporalio.service import RPCError, RPCStatusCode

from keel.activities.mcp import McpServerConfig
from keel.activities.store import open_store
from keel.worker.process.assembly import build_worker, connect, mcp_servers_running
from keel.worker.server.devserver import DEFAULT_ADDRESS, DevServer, address_reachable
from keel.worker.settings import ClientOptions, ConfigError, Settings

logger = logging.getLogger(__name__)


_DESCRIBE_TIMEOUT = timedelta(seconds=10)


class TemporalUnreachable(RuntimeError):
    """No Temporal server answers at the configured address."""


@dataclass
class TemporalConnection:
    """A connected client, and the embedded dev server when this process runs one."""

    client: Client
    address: str
    settings: Settings
    server: DevServer | None = None

    @property
    def embedded(self) -> bool:
        """Whether this process embeds the server (and so must run a worker too)."""
        return self.server is not None

    @asynccontextmanager
    async def worker(
        self,
        tool_modules: Sequence[str] = (),
        *,
        task_queue: str | None = None,
        mcp_servers: Sequence[McpServerConfig] = (),
    ) -> AsyncIterator[None]:
        """Run an in-process worker while the block runs, when the server is embedded.

        Args:
            tool_modules: tool modules to load.
            task_queue: the queue to poll (a session's own); default ``KEEL_TASK_QUEUE``.
            mcp_servers: MCP servers for the worker, connected before the block starts.

        Raises:
            McpServerError: an MCP server did not start (before the block runs).
        """
        if self.server is None:
            yield
            return
        queue = task_queue or self.settings.task_queue
        store = open_store(self.settings.store, self.settings.keyring())
        async with mcp_servers_running(mcp_servers) as mcp:
            async with build_worker(
                self.client,
                queue,
                tool_modules,
                store=store,
                mcp_servers=mcp or (),
                settings=self.settings,
            ):
                yield


def client_options(settings: Settings) -> ClientOptions:
    """The checked connection settings (TLS, API key, gRPC metadata).

    Raises:
        ConfigError: an invalid setting (the CLI exits 2), naming the variable and the problem.
    """
    return settings.client_options()


async def connect_configured(
    settings: Settings, *, runtime: TemporalRuntime | None = None
) -> tuple[Client, str]:
    """Connect to ``TEMPORAL_ADDRESS`` (or the default address when unset).

    TLS, the API key and gRPC metadata come from the settings (``Settings.client_options``).

    Args:
        settings: process settings.
        runtime: the temporalio runtime for the client (SDK metrics); default the global one.

    Raises:
        ConfigError: an invalid connection setting, or a namespace the server does not have.
        TemporalUnreachable: naming the address and what went wrong.
    """
    address = settings.address or DEFAULT_ADDRESS
    options = client_options(settings)
    try:
        client = await connect(
            address,
            settings.namespace,
            tls=options.tls,
            api_key=options.api_key,
            rpc_metadata=options.rpc_metadata,
            runtime=runtime,
            keyring=settings.keyring(),
        )
    except RuntimeError as err:
        hint = (
            "is the server there? (TEMPORAL_ADDRESS)"
            if settings.address
            else "set TEMPORAL_ADDRESS, or run `keel dev`"
        )
        raise TemporalUnreachable(
            f"cannot reach Temporal at {address}: {_reason(err)}; {hint}"
        ) from err
    await check_namespace(client, address)
    return client, address


async def check_namespace(client: Client, address: str) -> None:
    """Make sure the server has the client's namespace.

    Without this, a mistyped ``TEMPORAL_NAMESPACE`` shows much later, as a session that is
    not found. A server that does not let the client describe its namespace is trusted.

    Raises:
        ConfigError: the server has no such namespace.
    """
    request = wsv1.DescribeNamespaceRequest(namespace=client.namespace)
    try:
        await client.workflow_service.describe_namespace(request, timeout=_DESCRIBE_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ConfigError(
                f"TEMPORAL_NAMESPACE: Temporal at {address} has no namespace {client.namespace!r}"
            ) from err
        logger.info("cannot describe namespace %s: %s", client.namespace, err)


def _reason(err: RuntimeError) -> str:
    """The OS's words in temporalio's connection error (which quotes Rust's), else all of it."""
    said = re.findall(r'message: "([^"]+)"', str(err))
    return said[-1] if said else str(err)


@asynccontextmanager
async def open_connection(
    settings: Settings, *, embed: bool = True
) -> AsyncIterator[TemporalConnection]:
    """Connect to Temporal, embedding a dev server when none is configured.

    With ``TEMPORAL_ADDRESS`` set, or something listening on the default address (a
    ``keel dev`` in another terminal), this only connects. Otherwise, when ``embed`` is true,
    it starts the dev server with its SQLite database under ``KEEL_HOME`` (``.keel/``, so
    sessions survive for the next run) and stops it on exit; ``TemporalConnection.worker``
    then runs a worker in this process.

    Args:
        settings: process settings.
        embed: whether an embedded server may be started.
    """
    if settings.address or not embed or await address_reachable(DEFAULT_ADDRESS):
        client, address = await connect_configured(settings)
        yield TemporalConnection(client=client, address=address, settings=settings)
        return
    async with DevServer(settings.home, ui=False, namespace=settings.namespace) as server:
        logger.info("started embedded Temporal dev server at %s", server.address)
        client = await connect(server.address, settings.namespace, keyring=settings.keyring())
        yield TemporalConnection(
            client=client, address=server.address, settings=settings, server=server
        )
