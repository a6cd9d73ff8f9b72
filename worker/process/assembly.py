"""Client and worker wiring: the data converter, the sandbox, the activities."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig
from temporalio.worker import Interceptor, Worker

from activities.mcp.config import McpServerConfig
from activities.model_call import ModelActivities
from activities.notify import post_notification
from activities.store import ConversationStore, open_store
from activities.store.encrypted import Keyring
from activities.sub_agents import child_report, forward
from activities.tool_run import ToolActivities
from activities.tools import load_tool_modules
from worker.payloads import data_converter
from worker.process.interceptors import KeelInterceptor
from worker.process.sandbox import sandbox_runner
from worker.process.stream_server import StreamConfig, stream_endpoint
from worker.settings import DEFAULT_STICKY_TIMEOUT_S, Settings
from workflows.session import AgentSession

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from activities.mcp.servers import McpServers

logger = logging.getLogger("keel.worker")
BUILD_ID = "keel"
# The SDK sends an activity's heartbeat at once unless one went out less than this ago.
HEARTBEAT_THROTTLE = timedelta(seconds=0.1)


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
    **options: Any,
) -> Worker:
    """A worker running ``AgentSession`` and Keel's activities.

    Args:
        client: a client from ``connect``.
        task_queue: the queue to poll.
        tool_modules: modules to import so their ``@tool`` functions register.
        store: the conversation store; default from ``KEEL_STORE`` / ``KEEL_HOME``, encrypted
            with ``KEEL_ENCRYPTION_KEY`` (and ``KEEL_DECRYPTION_KEYS``) when set.
        tracer_provider: an OpenTelemetry SDK tracer provider (see
            ``worker.process.telemetry.tracer_provider``): trace workflows and activities with
            temporalio's ``TracingInterceptor`` plus Keel's turn, model-call and tool-run
            spans. None: no tracing; log records still carry session, turn and cycle.
        mcp_servers: MCP servers whose tools this worker offers (``activities.mcp``). Their
            configurations: the worker connects to them when it starts running and closes
            them when it stops; ``run()`` (or ``async with``) raises ``McpServerError`` when
            one does not start. Or ``McpServers`` already running (``async with
            McpServers(configs).running()``), whose lifetime stays the caller's: a start
            error then comes before the worker exists, which is what the CLI does.
        stream_config: where the process's stream endpoint listens and what it advertises
            (model text for watchers, docs/streaming.md); default from
            ``KEEL_STREAM_LISTEN`` / ``KEEL_STREAM_ADVERTISE``.
        **options: passed to ``temporalio.worker.Worker`` (e.g. ``max_cached_workflows``;
            ``workflow_runner`` replaces Keel's sandbox).

    Raises:
        ToolModuleError: a tool module cannot be imported.
        ConfigError: an encryption key in the environment is malformed, or the stream
            endpoint's address is malformed or cannot be listened on.
        McpConfigError: two MCP servers have the same name.
    """
    load_tool_modules(list(tool_modules))
    streams = stream_endpoint(stream_config or StreamConfig.from_env(os.environ))
    if store is None:
        settings = Settings.from_env()
        store = open_store(settings.store, settings.keyring())
    options.setdefault("activity_executor", ThreadPoolExecutor(max_workers=16))
    # The activities pace their own heartbeats, three per heartbeat timeout (2 s by default;
    # workflows.activity_options): the SDK's throttle (at most 0.8 x the timeout) must not
    # hold them back, or a late beat would leave too little margin before the timeout.
    options.setdefault("max_heartbeat_throttle_interval", HEARTBEAT_THROTTLE)
    # A session whose worker died has its next workflow task on that worker's sticky queue;
    # after this long it moves to the shared queue, where any worker takes it.
    options.setdefault(
        "sticky_queue_schedule_to_start_timeout", timedelta(seconds=DEFAULT_STICKY_TIMEOUT_S)
    )
    options.setdefault("workflow_runner", sandbox_runner())
    # Without a build id, temporalio hashes the bytecode of every loaded module to make one:
    # 0.2-1 s of a worker's start, and a fresh worker's start is part of the recovery time
    # after a crash (docs/guarantees.md). Keel uses no worker versioning; the id only labels
    # the workflow tasks this worker completes.
    options.setdefault("build_id", BUILD_ID)
    options["interceptors"] = [
        *_tracing_interceptors(tracer_provider),
        *options.get("interceptors", ()),
    ]
    mcp: McpServers | None = None
    if isinstance(mcp_servers, Sequence) and mcp_servers:
        from activities.mcp.servers import McpServers  # the MCP SDK only when servers are given

        mcp = McpServers(mcp_servers)
        options["plugins"] = [*options.get("plugins", ()), mcp.plugin()]
    elif not isinstance(mcp_servers, Sequence):
        mcp = mcp_servers
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentSession],
        activities=[
            ModelActivities(store, mcp, streams).converse,
            ToolActivities(store, mcp).run,
            post_notification,
            child_report,
            forward,
        ],
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
    from activities.mcp.servers import McpServers  # the MCP SDK only when servers are given

    servers = McpServers(configs)
    async with servers.running():
        yield servers


def _tracing_interceptors(provider: TracerProvider | None) -> list[Interceptor]:
    """The tracing interceptor of temporalio (outermost), then Keel's."""
    if provider is None:
        return [KeelInterceptor()]
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from worker.process.tracing import KeelSpans  # the otel extra: imported only when tracing

    spans = KeelSpans(provider)
    return [TracingInterceptor(spans.tracer), KeelInterceptor(spans)]


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
