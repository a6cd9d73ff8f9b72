"""Client and worker wiring: a client with Keel's data converter, and a Keel worker.

``build_worker`` is a worker with ``KeelPlugin``, which holds the worker's whole assembly.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig
from temporalio.worker import Worker

from keel.activities.mcp.config import McpServerConfig
from keel.activities.store import ConversationStore
from keel.activities.store.encrypted import Keyring
from keel.worker.payloads import data_converter
from keel.worker.process.plugin import KeelPlugin
from keel.worker.process.stream_server import StreamConfig
from keel.worker.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from keel.activities.mcp.servers import McpServers

logger = logging.getLogger("keel.worker")


async def connect(
    address: str,
    namespace: str,
    *,
    tls: bool | TLSConfig = False,
    api_key: str | None = None,
    rpc_metadata: Mapping[str, str] | None = None,
    runtime: Runtime | None = None,
    keyring: Keyring | None = None,
) -> Client:
    """A Temporal client that speaks Keel's pydantic payloads, encrypted with ``keyring``.

    Args:
        address: ``host:port`` of the Temporal frontend.
        namespace: the namespace.
        tls: False, True (system roots), or a ``TLSConfig`` with a CA and client certificate.
        api_key: a Temporal Cloud API key (sent as a bearer token).
        rpc_metadata: extra gRPC headers.
        runtime: the temporalio runtime (for SDK metrics); default the process-wide one.
        keyring: encryption keys (``Settings.keyring``): every payload is encrypted with
            them, and workers built on this client use them too; None: no encryption.
    """
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=data_converter(keyring),
        tls=tls,
        api_key=api_key,
        rpc_metadata=dict(rpc_metadata or {}),
        runtime=runtime,
    )


def build_worker(
    client: Client,
    task_queue: str,
    tool_modules: Sequence[str] = (),
    *,
    store: ConversationStore | None = None,
    tracer_provider: TracerProvider | None = None,
    mcp_servers: Sequence[McpServerConfig] | McpServers = (),
    stream_config: StreamConfig | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> Worker:
    """``Worker(client, task_queue=..., plugins=[KeelPlugin(...)], **options)``.

    The worker's assembly is ``KeelPlugin``'s (``keel.worker.process.plugin``); this is a
    shorthand for a worker that runs Keel only.

    Args:
        client: a client from ``connect``.
        task_queue: the queue to poll.
        tool_modules: modules to import so their ``@tool`` functions register.
        store: the conversation store; default the settings'.
        tracer_provider: an OpenTelemetry SDK tracer provider, to trace (see ``KeelPlugin``).
        mcp_servers: MCP servers' configurations, or ``McpServers`` already running.
        stream_config: where the stream endpoint listens; default the settings'.
        settings: Keel's settings; default read from the environment.
        **options: passed to ``temporalio.worker.Worker`` (e.g. ``max_cached_workflows``;
            ``workflow_runner`` replaces Keel's sandbox).

    Raises:
        ToolModuleError: a tool module cannot be imported.
        ConfigError: an encryption key or the stream endpoint is malformed or unusable.
        McpConfigError: two MCP servers have the same name.
    """
    plugin = KeelPlugin(
        tool_modules,
        settings=settings,
        store=store,
        mcp_servers=mcp_servers,
        tracer_provider=tracer_provider,
        stream_config=stream_config,
    )
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[*options.pop("plugins", ()), plugin],
        **options,
    )


@asynccontextmanager
async def mcp_servers_running(
    configs: Sequence[McpServerConfig],
) -> AsyncIterator[McpServers | None]:
    """MCP servers connected and listed for the block, closed after it; None without any.

    Raises:
        McpConfigError: two servers have the same name.
        McpServerError: a server did not start or answer, or two sources define one tool.
    """
    if not configs:
        yield None
        return
    from keel.activities.mcp.servers import McpServers  # the MCP SDK only when servers are given

    servers = McpServers(configs)
    async with servers.running():
        yield servers


def freeze_startup_heap() -> int:
    """Collect, then exempt every object alive now from the cyclic GC, for good.

    A worker process calls this once, after ``build_worker``: what exists then (modules, the
    tool registry, pydantic's schemas and validators) lives as long as the process, yet each
    full collection would walk it again. Keel's heap at that point is larger than a bare
    temporalio worker's, and under load those walks are a measurable share of its CPU
    (docs/performance.md). Objects made later are collected as usual.

    Returns:
        How many objects are frozen now (``gc.get_freeze_count``).
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug("froze %s startup objects out of the cyclic GC", frozen)
    return frozen
